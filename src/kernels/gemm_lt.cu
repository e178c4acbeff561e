/* GEMM with fused epilogues over cuBLASLt (blob_gpu_gemm_epilogue).
 *
 * Row-major matrices are handed to column-major cuBLASLt as their transposes: C^T (N x M)
 * = op(B)^T op(A)^T, so cuBLASLt's A is our B and its B our A. Its bias vector runs along
 * the rows of its D, which are our columns: the bias of BIAS and DRELU_BGRAD is per
 * column of C, as a layer's is. Its BGRADA sums its A (our op(B)) and its BGRADB its B
 * (our op(A)), so our BGRADA is its BGRADB and the other way round. Its ReLU bit mask is
 * column-major with a leading dimension in bits: row i of our C at bit i * ld.
 *
 * Each thread keeps, per device, a cuBLASLt handle, and a small cache of plans (the
 * matmul and layout descriptors and the algorithm chosen among the heuristic's) keyed by
 * the whole problem, pointer alignments included, so a call in steady state only sets the
 * bias and mask pointers and launches. A problem cuBLASLt cannot fuse is remembered as
 * such and runs as a cuBLAS product followed by the epilogue kernels of epilogue.cu. The
 * workspace comes from the device allocator once per thread, device and stream.
 *
 * Outside a capture, cublasLtMatmul costs 8-18 us of host time per call on the hosts
 * measured, and a replay of the same product captured in a graph about 1.5 us. So a plan
 * remembers its recent launches (the stream, the arrays, the workspace): the second time
 * one comes, it is captured on a stream of the thread's own and instantiated, and from
 * then on replayed with cudaGraphLaunch on the caller's stream. A plan whose launches
 * rarely come again stops building them.
 *
 * With tuning (blob_gemm_tuning_set) a plan keeps the candidates instead: the heuristic's
 * usable ones and each one's algorithm with every split of K in SPLITS, and the first call
 * outside a capture times them all on the device (tune_plan) and keeps the fastest. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "blob/alloc.h"
#include "lt.cuh"

static constexpr int MAX_PLANS = 64;
static constexpr int MAX_WORKSPACES = 8;
static constexpr int CANDIDATES = 8;   /* heuristic results considered per plan */
static constexpr int TUNE_CANDIDATES = 32; /* ... when tuning */
static constexpr int32_t SPLITS[] = {1, 2, 4, 8, 16};
static constexpr int MAX_TUNED = TUNE_CANDIDATES * (1 + sizeof SPLITS / sizeof SPLITS[0]);
static constexpr int TUNE_RUNS = 8;        /* back-to-back products timed per candidate */
static constexpr int TUNE_ROUNDS = 2;      /* the best of these many timings counts */
static constexpr uint64_t TUNE_HOLD_NS = 200000; /* the device waits while the host queues */
static constexpr int64_t MIN_K_PER_SPLIT = 64; /* see choose() */
static constexpr int LAUNCHES = 4;          /* launches remembered per plan */
static constexpr uint32_t MIN_BUILDS = 16;  /* then replays must outnumber builds 4 to 1 */

static blob_status lt_fail(cublasStatus_t st, const char *call, const char *func)
{
    (void)cudaGetLastError();
    return blob__fail(BLOB_ECUBLAS, func, "%s failed: %s", call, cublasGetStatusName(st));
}

#define LT_TRY(func, call)                                 \
    do {                                                   \
        cublasStatus_t lt_st_ = (call);                    \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS)               \
            return lt_fail(lt_st_, #call, (func));         \
    } while (0)

/* The whole problem, compared bytewise: no padding, built from a zeroed struct. */
struct Key {
    int32_t device, dtype, mode, epilogue, trans_a, trans_b;
    int64_t M, N, K;
    uint8_t align[5]; /* log2 of the alignment of A, B, C, bias, mask (capped at 256) */
    uint8_t with_mask;
    uint8_t tuned;
    uint8_t unused;
};
static_assert(sizeof(Key) == 6 * 4 + 3 * 8 + 8, "Key has padding");

/* A launch of a plan: where it ran, and its graph once built. */
struct Launch {
    void *stream, *workspace;
    const void *A, *B;
    void *C, *bias, *mask;
    unsigned generation; /* of the backend table */
    cudaGraphExec_t exec; /* NULL: seen once */
    uint64_t used;
};

struct Plan {
    Key key;
    bool fused; /* false: cuBLASLt has no algorithm; run the fallback */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t *untimed; /* tuning: the candidates still to time, or NULL */
    int num_untimed;
    uint64_t used; /* for LRU eviction */
    Launch launches[LAUNCHES];
    int num_launches;
    uint32_t builds, replays;
};

struct Workspace {
    int device;
    void *stream;
    unsigned generation; /* of the backend whose allocator gave it */
    void *ptr;
    size_t bytes;
};

struct LtState {
    int devices;
    cublasLtHandle_t *handle; /* [devices] */
    Plan plans[MAX_PLANS];
    int num_plans;
    uint64_t clock;
    Workspace ws[MAX_WORKSPACES];
    int num_ws;
    cudaStream_t *capture; /* [devices]: where launches are captured, made on first use */
};

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;
static int state_key_err;

static void launch_forget(Launch *l)
{
    if (l->exec)
        (void)cudaGraphExecDestroy(l->exec);
    l->exec = nullptr;
}

static void plan_destroy(Plan *p)
{
    for (int i = 0; i < p->num_launches; i++)
        launch_forget(&p->launches[i]);
    free(p->untimed);
    (void)cublasLtMatmulDescDestroy(p->op);
    (void)cublasLtMatrixLayoutDestroy(p->a);
    (void)cublasLtMatrixLayoutDestroy(p->b);
    (void)cublasLtMatrixLayoutDestroy(p->c);
}

static void workspace_free(Workspace *w)
{
    if (w->generation == blob__backend_generation)
        blob_place_free(blob_place_device(w->device), w->ptr);
}

static void state_destroy(void *p)
{
    LtState *st = (LtState *)p;
    for (int i = 0; i < st->num_plans; i++)
        plan_destroy(&st->plans[i]);
    for (int i = 0; i < st->num_ws; i++)
        workspace_free(&st->ws[i]);
    for (int d = 0; d < st->devices; d++) {
        if (st->handle[d])
            (void)cublasLtDestroy(st->handle[d]);
        if (st->capture[d])
            (void)cudaStreamDestroy(st->capture[d]);
    }
    free(st->handle);
    free(st->capture);
    free(st);
}

static void state_key_create(void)
{
    state_key_err = pthread_key_create(&state_key, state_destroy);
}

void blob__lt_thread_release(void)
{
    pthread_once(&state_once, state_key_create);
    void *st = state_key_err ? NULL : pthread_getspecific(state_key);
    if (!st)
        return;
    (void)pthread_setspecific(state_key, NULL);
    state_destroy(st);
}

/* The calling thread's state and its cuBLASLt handle for the current device. */
static blob_status state_for(const char *func, LtState **out, int *device,
                             cublasLtHandle_t *handle)
{
    pthread_once(&state_once, state_key_create);
    if (state_key_err)
        return blob__fail(BLOB_ENOMEM, func, "pthread_key_create failed (%d)", state_key_err);
    LtState *st = (LtState *)pthread_getspecific(state_key);
    if (!st) {
        int count;
        CUDA_TRY_AT(func, cudaGetDeviceCount(&count));
        st = (LtState *)calloc(1, sizeof *st);
        cublasLtHandle_t *h = (cublasLtHandle_t *)calloc((size_t)count, sizeof *h);
        cudaStream_t *cap = (cudaStream_t *)calloc((size_t)count, sizeof *cap);
        if (!st || !h || !cap || pthread_setspecific(state_key, st) != 0) {
            free(st);
            free(h);
            free(cap);
            return blob__fail(BLOB_ENOMEM, func, "no host memory for the cuBLASLt state");
        }
        st->devices = count;
        st->handle = h;
        st->capture = cap;
    }
    int dev;
    BLOB_TRY(blob__current_device(&dev));
    if (dev < 0 || dev >= st->devices)
        return blob__fail(BLOB_ECUDA, func, "current device %d outside [0, %d)", dev,
                          st->devices);
    if (!st->handle[dev])
        LT_TRY(func, cublasLtCreate(&st->handle[dev]));
    *out = st;
    *device = dev;
    *handle = st->handle[dev];
    return BLOB_OK;
}

/* Bytes of the workspace: what cuBLAS itself takes on Hopper, less before it. */
static size_t workspace_bytes(int device)
{
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
        (void)cudaGetLastError();
    return (size_t)(major >= 9 ? 32 : 4) << 20;
}

/* The workspace of (device, stream), allocated on first use; an old one is handed back
 * to the allocator (ordered on its stream) when the table is full. */
static blob_status workspace_for(LtState *st, int device, void *stream,
                                 Workspace **out)
{
    for (int i = 0; i < st->num_ws; i++) {
        Workspace *w = &st->ws[i];
        if (w->generation != blob__backend_generation) { /* a former table's: forget it */
            *w = st->ws[--st->num_ws];
            i--;
            continue;
        }
        if (w->device == device && w->stream == stream) {
            *out = w;
            return BLOB_OK;
        }
    }
    const size_t bytes = workspace_bytes(device);
    void *p;
    BLOB_TRY(blob_place_alloc(blob_place_device(device), bytes, stream, &p));
    if (st->num_ws == MAX_WORKSPACES) {
        workspace_free(&st->ws[0]);
        st->ws[0] = st->ws[--st->num_ws];
    }
    Workspace *w = &st->ws[st->num_ws++];
    *w = Workspace{device, stream, blob__backend_generation, p, bytes};
    *out = w;
    return BLOB_OK;
}

blob_status blob__lt_workspace(void *stream, void **ptr, size_t *bytes)
{
    LtState *st;
    int dev;
    cublasLtHandle_t h;
    BLOB_TRY(state_for(__func__, &st, &dev, &h));
    Workspace *w;
    BLOB_TRY(workspace_for(st, dev, stream, &w));
    *ptr = w->ptr;
    *bytes = w->bytes;
    return BLOB_OK;
}


static uint8_t align_log2(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    uint8_t n = 0;
    while (n < 8 && !(a & ((uintptr_t)1 << n)))
        n++;
    return n;
}

static cublasLtEpilogue_t lt_epilogue(blob_epilogue e, bool with_mask)
{
    switch (e) {
    case BLOB_EPILOGUE_NONE:
        return CUBLASLT_EPILOGUE_DEFAULT;
    case BLOB_EPILOGUE_BIAS:
        return CUBLASLT_EPILOGUE_BIAS;
    case BLOB_EPILOGUE_RELU:
        return with_mask ? CUBLASLT_EPILOGUE_RELU_AUX : CUBLASLT_EPILOGUE_RELU;
    case BLOB_EPILOGUE_BIAS_RELU:
        return with_mask ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS;
    case BLOB_EPILOGUE_DRELU:
        return CUBLASLT_EPILOGUE_DRELU;
    case BLOB_EPILOGUE_DRELU_BGRAD:
        return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case BLOB_EPILOGUE_BGRADA:
        return CUBLASLT_EPILOGUE_BGRADB; /* see the top of the file */
    case BLOB_EPILOGUE_BGRADB:
        return CUBLASLT_EPILOGUE_BGRADA;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

static cublasComputeType_t compute_type(blob_dtype dtype, blob_math_mode mode)
{
    if (dtype == BLOB_FLOAT64)
        return CUBLAS_COMPUTE_64F;
    return mode == BLOB_MATH_TF32   ? CUBLAS_COMPUTE_32F_FAST_TF32
           : mode == BLOB_MATH_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                    : CUBLAS_COMPUTE_32F;
}

template <typename V>
static cublasStatus_t set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                               const V &v)
{
    return cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v);
}

/* Point the plan's descriptor at this call's bias and mask. */
static blob_status set_pointers(const char *func, Plan *p, void *bias, void *mask)
{
    if (bias)
        LT_TRY(func, set_desc(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
    if (mask)
        LT_TRY(func, set_desc(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, mask));
    return BLOB_OK;
}

/* Whether cuBLASLt turned a problem down (it cannot fuse it here) rather than failed. */
static bool refused(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE ||
           s == CUBLAS_STATUS_ARCH_MISMATCH;
}

/* The candidate to run among the heuristic's (best first): the first usable one whose
 * split of K leaves every part at least MIN_K_PER_SPLIT long, else the usable one that
 * splits K the least (the first of those); -1 if none is usable. For small outputs the
 * heuristic ranks first splits into parts a few elements long, or shorter than one,
 * whose reductions cost more than they save (timed in CUDA graphs on the H200 for the
 * GEMMs of an MLP step: the 10 x 128 weight gradient of a batch of 256 split 264 ways
 * took 53 us against 6.4 us split 8 ways; a 64 x 10 product over K = 128 split 132 ways,
 * 6.4 us against 4.2 us unsplit; splits of 4 for K = 256 stay the fastest). */
static int choose(const cublasLtMatmulHeuristicResult_t *results, int found, size_t ws,
                  int64_t K)
{
    const int64_t most = K / MIN_K_PER_SPLIT > 1 ? K / MIN_K_PER_SPLIT : 1;
    int least = -1;
    int32_t least_split = 0;
    for (int i = 0; i < found; i++) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > ws)
            continue;
        int32_t split = 1;
        size_t written;
        if (cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo,
                                                 CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                                 sizeof split, &written) !=
            CUBLAS_STATUS_SUCCESS)
            split = 1;
        if (split <= most)
            return i;
        if (least < 0 || split < least_split) {
            least = i;
            least_split = split;
        }
    }
    return least;
}

/* Add algo to the n candidates in c unless it is there. */
static void add_candidate(cublasLtMatmulAlgo_t *c, int *n, const cublasLtMatmulAlgo_t &algo)
{
    for (int i = 0; i < *n; i++)
        if (!memcmp(&c[i], &algo, sizeof algo))
            return;
    c[(*n)++] = algo;
}

/* The candidates of tuning (p->untimed): each usable heuristic result, and its algorithm
 * with every split of K in SPLITS that cuBLASLt accepts here within the workspace. None
 * if there is no choice to make or no memory for them. */
static void tune_candidates(cublasLtHandle_t h, Plan *p,
                            const cublasLtMatmulHeuristicResult_t *results, int found,
                            size_t ws)
{
    cublasLtMatmulAlgo_t *c = (cublasLtMatmulAlgo_t *)malloc(MAX_TUNED * sizeof *c);
    int n = 0;
    for (int i = 0; c && i < found; i++) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > ws)
            continue;
        add_candidate(c, &n, results[i].algo);
        uint32_t schemes = 0;
        size_t written;
        if (cublasLtMatmulAlgoCapGetAttribute(&results[i].algo,
                                              CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                              sizeof schemes, &written) != CUBLAS_STATUS_SUCCESS)
            schemes = 0;
        /* for a split: sums in the compute type, else in the output, else in place */
        uint32_t split_scheme = CUBLASLT_REDUCTION_SCHEME_INPLACE;
        if (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
            split_scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        else if (schemes & CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)
            split_scheme = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
        for (int32_t split : SPLITS) {
            cublasLtMatmulAlgo_t a = results[i].algo;
            const uint32_t scheme =
                split > 1 ? split_scheme : (uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE;
            cublasLtMatmulHeuristicResult_t check;
            if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                                     sizeof split) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                     &scheme, sizeof scheme) ==
                    CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulAlgoCheck(h, p->op, p->a, p->b, p->c, p->c, &a, &check) ==
                    CUBLAS_STATUS_SUCCESS &&
                check.workspaceSize <= ws)
                add_candidate(c, &n, a);
        }
    }
    if (n < 2) {
        free(c);
        return;
    }
    p->untimed = c;
    p->num_untimed = n;
}

/* Make the descriptors of key and choose among the heuristic's algorithms; p->fused
 * says whether there is one. bias and mask are this call's pointers (the heuristic reads
 * their alignment). On failure nothing is left allocated. */
static blob_status plan_make(const char *func, cublasLtHandle_t h, const Key &k, void *bias,
                             void *mask, Plan *p)
{
    const size_t ws = workspace_bytes(k.device);
    const blob_dtype dtype = (blob_dtype)k.dtype;
    const cudaDataType_t t = dtype == BLOB_FLOAT32 ? CUDA_R_32F : CUDA_R_64F;
    const bool ta = k.trans_a == BLOB_TRANS, tb = k.trans_b == BLOB_TRANS;
    const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* its A: our B */
    const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* its B: our A */
    *p = Plan{};
    p->key = k;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasStatus_t s =
        cublasLtMatmulDescCreate(&p->op, compute_type(dtype, (blob_math_mode)k.mode), t);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_desc(p->op, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_desc(p->op, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_desc(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                     lt_epilogue((blob_epilogue)k.epilogue, k.with_mask));
    if (s == CUBLAS_STATUS_SUCCESS && bias)
        s = set_desc(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (s == CUBLAS_STATUS_SUCCESS && mask) {
        s = set_desc(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, mask);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = set_desc(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                         (int64_t)BLOB_RELU_MASK_ROW_BITS(k.N));
    }
    /* its A: op(B)^T is N x K; stored as B^T (N x K, ld N) or B (K x N, ld K) */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->a, t, tb ? k.K : k.N, tb ? k.N : k.K,
                                       tb ? k.K : k.N);
    /* its B: op(A)^T is K x M */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->b, t, ta ? k.M : k.K, ta ? k.K : k.M,
                                       ta ? k.M : k.K);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->c, t, k.N, k.M, k.N);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceCreate(&pref);
    const uint32_t align[4] = {1u << k.align[1], 1u << k.align[0], 1u << k.align[2],
                               1u << k.align[2]};
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws);
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i],
                                                 sizeof align[i]);
    cublasLtMatmulHeuristicResult_t results[TUNE_CANDIDATES] = {};
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS) {
        s = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->c, p->c, pref,
                                           k.tuned ? TUNE_CANDIDATES : CANDIDATES, results,
                                           &found);
        if (refused(s)) { /* no algorithm for this configuration */
            s = CUBLAS_STATUS_SUCCESS;
            found = 0;
        }
    }
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) {
        plan_destroy(p);
        return lt_fail(s, "cuBLASLt plan", func);
    }
    const int pick = choose(results, found, ws, k.K);
    p->fused = pick >= 0;
    if (p->fused)
        p->algo = results[pick].algo;
    if (p->fused && k.tuned)
        tune_candidates(h, p, results, found, ws);
    return BLOB_OK;
}

/* Holds the stream for ns nanoseconds of the device's clock. */
__global__ void hold(uint64_t ns)
{
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

/* Whether stream is being captured (or cannot be asked: taken as yes). */
static bool stream_capturing(void *stream)
{
    cudaStreamCaptureStatus status;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &status) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return status != cudaStreamCaptureStatusNone;
}

/* Time the plan's untimed candidates on stream with this call's arrays (its descriptor
 * points at its bias and mask), TUNE_RUNS products back to back each while a hold kernel
 * lets the host queue them, best of TUNE_ROUNDS, and keep the fastest as p->algo; the
 * host waits for the stream. What fails to run is not a candidate; if nothing could be
 * timed the heuristic's choice stays. */
static void tune_plan(cublasLtHandle_t h, Plan *p, void *stream, const void *alpha,
                      const void *beta, const void *A, const void *B, void *C,
                      const Workspace *w)
{
    const int n = p->num_untimed;
    cudaEvent_t *ev = (cudaEvent_t *)calloc(2 * (size_t)n, sizeof *ev);
    float *best = (float *)malloc((size_t)n * sizeof *best);
    int made = 0;
    while (ev && best && made < 2 * n && cudaEventCreate(&ev[made]) == cudaSuccess)
        made++;
    const cudaStream_t s = (cudaStream_t)stream;
    for (int round = 0; made == 2 * n && round < TUNE_ROUNDS; round++) {
        for (int i = 0; i < n; i++) {
            if (round && best[i] < 0) /* failed before */
                continue;
            bool ran = true;
            hold<<<1, 1, 0, s>>>(TUNE_HOLD_NS);
            ran &= cudaEventRecord(ev[2 * i], s) == cudaSuccess;
            for (int r = 0; r < TUNE_RUNS && ran; r++)
                ran = cublasLtMatmul(h, p->op, alpha, B, p->a, A, p->b, beta, C, p->c, C, p->c,
                                     &p->untimed[i], w->ptr, w->bytes, s) ==
                      CUBLAS_STATUS_SUCCESS;
            ran &= cudaEventRecord(ev[2 * i + 1], s) == cudaSuccess;
            if (!round)
                best[i] = INFINITY;
            if (!ran)
                best[i] = -1;
        }
        if (cudaStreamSynchronize(s) != cudaSuccess)
            break;
        for (int i = 0; i < n; i++) {
            float ms;
            if (best[i] >= 0 && cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]) == cudaSuccess)
                best[i] = ms < best[i] ? ms : best[i];
            else
                best[i] = -1;
        }
    }
    (void)cudaGetLastError(); /* refusals of candidates */
    int pick = -1;
    for (int i = 0; made == 2 * n && i < n; i++)
        if (best[i] >= 0 && best[i] < INFINITY && (pick < 0 || best[i] < best[pick]))
            pick = i;
    if (pick >= 0)
        p->algo = p->untimed[pick];
    for (int i = 0; i < made; i++)
        (void)cudaEventDestroy(ev[i]);
    free(ev);
    free(best);
    free(p->untimed);
    p->untimed = nullptr;
    p->num_untimed = 0;
}

/* The least recently used of slots[0, n), n >= 1: the first with the smallest `used`. */
template <typename T>
static T *least_recent(T *slots, int n)
{
    T *lru = &slots[0];
    for (int i = 1; i < n; i++)
        if (slots[i].used < lru->used)
            lru = &slots[i];
    return lru;
}

/* The cached plan of key, made (evicting the least recently used) if missing. */
static blob_status plan_for(const char *func, LtState *st, cublasLtHandle_t h, const Key &k,
                            void *bias, void *mask, Plan **out)
{
    Plan *p = nullptr;
    for (int i = 0; i < st->num_plans && !p; i++)
        if (!memcmp(&st->plans[i].key, &k, sizeof k))
            p = &st->plans[i];
    if (!p) {
        Plan fresh;
        BLOB_TRY(plan_make(func, h, k, bias, mask, &fresh));
        if (st->num_plans < MAX_PLANS) {
            p = &st->plans[st->num_plans++];
        } else {
            p = least_recent(st->plans, MAX_PLANS);
            plan_destroy(p);
        }
        *p = fresh;
    }
    p->used = ++st->clock;
    *out = p;
    return BLOB_OK;
}

static Key make_key(int device, blob_dtype dtype, blob_math_mode mode, blob_trans trans_a,
                    blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A,
                    const void *B, const void *C, blob_epilogue e, const void *bias,
                    const void *mask, bool tune)
{
    Key k;
    memset(&k, 0, sizeof k);
    k.device = device;
    k.dtype = dtype;
    k.mode = dtype == BLOB_FLOAT32 ? mode : BLOB_MATH_FP32;
    k.epilogue = e;
    k.trans_a = trans_a;
    k.trans_b = trans_b;
    k.M = M;
    k.N = N;
    k.K = K;
    const void *ptrs[5] = {A, B, C, bias, mask};
    for (int i = 0; i < 5; i++)
        k.align[i] = align_log2(ptrs[i]);
    k.with_mask = mask != nullptr;
    k.tuned = tune;
    return k;
}

/* The product by cuBLAS (in the mode), then the epilogue kernels. */
static blob_status unfused(const char *func, void *stream, blob_dtype dtype,
                           blob_math_mode mode, blob_trans trans_a, blob_trans trans_b,
                           int64_t M, int64_t N, int64_t K, const void *A, const void *B,
                           void *C, blob_epilogue e, void *bias, void *mask)
{
    if (M > 0 && N > 0) {
        if (K == 0)
            CUDA_TRY_AT(func, cudaMemsetAsync(C, 0, (size_t)(M * N) * blob_dtype_size(dtype),
                                              (cudaStream_t)stream));
        else if (dtype == BLOB_FLOAT32 && mode != BLOB_MATH_FP32)
            BLOB_TRY(blob__k_gemm_mode(stream, mode, trans_a, trans_b, M, N, K, 1.0, A, B,
                                       0.0, C));
        else
            BLOB_TRY(blob__k_gemm(stream, dtype, trans_a, trans_b, M, N, K, 1.0, A, B, 0.0, C));
    }
    return blob__epilogue_apply(func, stream, dtype, trans_a, trans_b, M, N, K, A, B, C, e,
                                bias, mask);
}

/* The plan of a problem (NULL for the empty ones, which never fuse). */
static blob_status find_plan(const char *func, blob_dtype dtype, blob_math_mode mode,
                             blob_trans trans_a, blob_trans trans_b, int64_t M, int64_t N,
                             int64_t K, const void *A, const void *B, const void *C,
                             blob_epilogue e, void *bias, void *mask, bool tune, LtState **st,
                             cublasLtHandle_t *h, int *device, Plan **plan)
{
    *plan = nullptr;
    BLOB_TRY(state_for(func, st, device, h));
    if (M == 0 || N == 0 || K == 0)
        return BLOB_OK;
    const Key k = make_key(*device, dtype, mode, trans_a, trans_b, M, N, K, A, B, C, e, bias,
                           mask, tune);
    return plan_for(func, *st, *h, k, bias, mask, plan);
}

/* The plan's product captured in a graph on the thread's capture stream of the device,
 * instantiated; NULL where that fails (the caller then launches it directly). The thread
 * is switched to relaxed capture meanwhile, so that a capture of its own elsewhere is
 * never disturbed. */
static cudaGraphExec_t capture_launch(LtState *st, int dev, cublasLtHandle_t h, const Plan *p,
                                      const void *alpha, const void *beta, const void *A,
                                      const void *B, void *C, const Workspace *w)
{
    if (!st->capture[dev] &&
        cudaStreamCreateWithFlags(&st->capture[dev], cudaStreamNonBlocking) != cudaSuccess) {
        st->capture[dev] = nullptr;
        (void)cudaGetLastError();
        return nullptr;
    }
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    cudaGraph_t g = nullptr;
    cudaGraphExec_t e = nullptr;
    if (cudaStreamBeginCapture(st->capture[dev], cudaStreamCaptureModeThreadLocal) ==
        cudaSuccess) {
        cublasStatus_t s = cublasLtMatmul(h, p->op, alpha, B, p->a, A, p->b, beta, C, p->c, C,
                                          p->c, &p->algo, w->ptr, w->bytes, st->capture[dev]);
        if (cudaStreamEndCapture(st->capture[dev], &g) == cudaSuccess &&
            s == CUBLAS_STATUS_SUCCESS && cudaGraphInstantiate(&e, g, 0) != cudaSuccess)
            e = nullptr;
        if (g)
            (void)cudaGraphDestroy(g);
    }
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    (void)cudaGetLastError();
    return e;
}

/* Launch the plan's product as a graph when this launch came before (building the graph
 * the second time); false when it was not launched that way. */
static bool replay(LtState *st, int dev, cublasLtHandle_t h, Plan *p, void *stream,
                   const void *alpha, const void *beta, const void *A, const void *B, void *C,
                   void *bias, void *mask, const Workspace *w)
{
    if (p->builds >= MIN_BUILDS && p->replays < 4 * p->builds)
        return false;
    const Launch now = {stream, w->ptr, A, B, C, bias, mask, blob__backend_generation,
                        nullptr, ++st->clock};
    Launch *l = nullptr;
    for (int i = 0; i < p->num_launches && !l; i++) {
        Launch *c = &p->launches[i];
        if (c->stream == now.stream && c->workspace == now.workspace && c->A == A &&
            c->B == B && c->C == C && c->bias == bias && c->mask == mask &&
            c->generation == now.generation)
            l = c;
    }
    if (!l) { /* remembered in place of the least recently used */
        if (p->num_launches < LAUNCHES) {
            l = &p->launches[p->num_launches++];
        } else {
            l = least_recent(p->launches, LAUNCHES);
            launch_forget(l);
        }
        *l = now;
        return false;
    }
    l->used = now.used;
    if (!l->exec) {
        p->builds++;
        if (!(l->exec = capture_launch(st, dev, h, p, alpha, beta, A, B, C, w)))
            return false;
    }
    if (cudaGraphLaunch(l->exec, (cudaStream_t)stream) != cudaSuccess) {
        (void)cudaGetLastError();
        launch_forget(l);
        return false;
    }
    p->replays++;
    return true;
}

extern "C" blob_status blob__k_gemm_epilogue(void *stream, blob_dtype dtype, blob_math_mode mode,
                                             blob_trans trans_a, blob_trans trans_b, int64_t M,
                                             int64_t N, int64_t K, const void *A, const void *B,
                                             void *C, blob_epilogue epilogue, void *bias,
                                             void *mask, bool tune)
{
    LtState *st;
    cublasLtHandle_t h;
    int dev;
    Plan *p;
    BLOB_TRY(find_plan(__func__, dtype, mode, trans_a, trans_b, M, N, K, A, B, C, epilogue, bias,
                       mask, tune, &st, &h, &dev, &p));
    if (p && p->fused) {
        Workspace *w;
        BLOB_TRY(workspace_for(st, dev, stream, &w));
        BLOB_TRY(set_pointers(__func__, p, bias, mask));
        const float one32 = 1, zero32 = 0;
        const double one64 = 1, zero64 = 0;
        const bool f = dtype == BLOB_FLOAT32;
        const void *alpha = f ? (const void *)&one32 : &one64;
        const void *beta = f ? (const void *)&zero32 : &zero64;
        const bool capturing = stream_capturing(stream);
        if (p->untimed && !capturing)
            tune_plan(h, p, stream, alpha, beta, A, B, C, w);
        if (!capturing && !p->untimed &&
            replay(st, dev, h, p, stream, alpha, beta, A, B, C, bias, mask, w))
            return BLOB_OK;
        cublasStatus_t s = cublasLtMatmul(h, p->op, alpha, B, p->a, A, p->b, beta, C, p->c, C,
                                          p->c, &p->algo, w->ptr, w->bytes,
                                          (cudaStream_t)stream);
        if (s == CUBLAS_STATUS_SUCCESS)
            return BLOB_OK;
        if (!refused(s))
            return lt_fail(s, "cublasLtMatmul", __func__);
        (void)cudaGetLastError();
        p->fused = false; /* refused at launch: take the other path from now on */
    }
    return unfused(__func__, stream, dtype, mode, trans_a, trans_b, M, N, K, A, B, C, epilogue,
                   bias, mask);
}

extern "C" blob_status blob__k_gemm_epilogue_fused(blob_dtype dtype, blob_math_mode mode,
                                                   blob_trans trans_a, blob_trans trans_b,
                                                   int64_t M, int64_t N, int64_t K,
                                                   blob_epilogue epilogue, bool with_mask,
                                                   bool *fused)
{
    /* stand-ins, 256-byte aligned like the allocator's blocks; never dereferenced */
    void *const aligned = (void *)(uintptr_t)4096;
    const bool bias = epilogue == BLOB_EPILOGUE_BIAS || epilogue == BLOB_EPILOGUE_BIAS_RELU ||
                      epilogue >= BLOB_EPILOGUE_DRELU_BGRAD;
    const bool mask = with_mask || epilogue == BLOB_EPILOGUE_DRELU ||
                      epilogue == BLOB_EPILOGUE_DRELU_BGRAD;
    LtState *st;
    cublasLtHandle_t h;
    int dev;
    Plan *p;
    BLOB_TRY(find_plan(__func__, dtype, mode, trans_a, trans_b, M, N, K, aligned, aligned, aligned,
                       epilogue, bias ? aligned : nullptr, mask ? aligned : nullptr, false, &st,
                       &h, &dev, &p));
    *fused = p && p->fused;
    return BLOB_OK;
}
