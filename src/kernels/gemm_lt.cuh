/* Internal to the cuBLASLt GEMM with fused epilogues (blob_gpu_gemm_epilogue): what its
 * files share. From the bottom up:
 *
 *   gemm_lt_tune.cu    tuning: a plan's candidates, and their timing on the device
 *   gemm_lt_replay.cu  a plan's launches, remembered, captured in graphs and replayed
 *   gemm_lt_plan.cu    plans: the key of a problem, its descriptors and the heuristic's
 *                      algorithm, and the thread's cache of them
 *   gemm_lt_state.cu   the thread's state: its handles, capture streams and workspaces
 *   gemm_lt.cu         the launchers: a problem's plan, then its fused product, or a
 *                      cuBLAS product and the epilogue kernels of epilogue.cu
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
 * bias and mask pointers and launches. A problem cuBLASLt cannot fuse, or whose fused form
 * timed slower at tuning, is remembered as such and runs as a plain product followed by
 * the epilogue kernels. */
#ifndef BLOB_KERNELS_GEMM_LT_CUH
#define BLOB_KERNELS_GEMM_LT_CUH

#include <cublasLt.h>

#include "lt.cuh"

static constexpr int MAX_PLANS = 64;
static constexpr int MAX_WORKSPACES = 8;
static constexpr int CANDIDATES = 8;       /* heuristic results considered per plan */
static constexpr int TUNE_CANDIDATES = 32; /* ... when tuning */
static constexpr int LAUNCHES = 4;         /* launches remembered per plan */

static inline blob_status lt_fail(cublasStatus_t st, const char *call, const char *func)
{
    (void)cudaGetLastError();
    return blob__fail(BLOB_ECUBLAS, func, "%s failed: %s", call, cublasGetStatusName(st));
}

#define LT_TRY(func, call)                         \
    do {                                           \
        cublasStatus_t lt_st_ = (call);            \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS)       \
            return lt_fail(lt_st_, #call, (func)); \
    } while (0)

/* Whether cuBLASLt turned a problem down (it cannot fuse it here) rather than failed. */
static inline bool refused(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE ||
           s == CUBLAS_STATUS_ARCH_MISMATCH;
}

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

/* A launch of a plan: where it ran, its scalars (a graph holds their values), and its
 * graph once built. */
struct Launch {
    void *stream, *workspace;
    const void *A, *B;
    void *C, *bias, *mask;
    double alpha, beta;
    unsigned generation;  /* of the backend table */
    cudaGraphExec_t exec; /* NULL: seen once */
    uint64_t used;
};

struct Plan {
    Key key;
    bool fused; /* false: cuBLASLt has no algorithm, or it timed slower; run the fallback */
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

/* Bytes of the workspace: what cuBLAS itself takes on Hopper, less before it. */
static inline size_t workspace_bytes(int device)
{
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
        (void)cudaGetLastError();
    return (size_t)(major >= 9 ? 32 : 4) << 20;
}

/* The value of a scalar handed to cuBLASLt for the plan: float64 for float64, else float32. */
static inline double scalar_value(const Plan *p, const void *s)
{
    return p->key.dtype == BLOB_FLOAT64 ? *(const double *)s : *(const float *)s;
}

/* Whether a heuristic result can run: valid here, and its workspace within ws bytes. */
static inline bool usable(const cublasLtMatmulHeuristicResult_t &r, size_t ws)
{
    return r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= ws;
}

/* The plan's product C = op(A) op(B) by algo on stream, in workspace w. */
static inline cublasStatus_t lt_matmul(cublasLtHandle_t h, const Plan *p,
                                       const cublasLtMatmulAlgo_t *algo, const void *alpha,
                                       const void *beta, const void *A, const void *B, void *C,
                                       const Workspace *w, cudaStream_t stream)
{
    return cublasLtMatmul(h, p->op, alpha, B, p->a, A, p->b, beta, C, p->c, C, p->c, algo, w->ptr,
                          w->bytes, stream);
}

/* gemm_lt_tune.cu */

/* The candidates of tuning (p->untimed): each usable heuristic result, and its algorithm
 * with every split of K that cuBLASLt accepts here within ws bytes of workspace; one alone
 * is timed too where it has an epilogue, against the unfused path. None if there are
 * none, one without an epilogue, or no memory for them. */
void blob__lt_tune_candidates(cublasLtHandle_t h, Plan *p,
                              const cublasLtMatmulHeuristicResult_t *results, int found, size_t ws);

/* Times n ways of computing one problem on stream: each way, behind a kernel that holds
 * the stream while the host queues it, runs TUNE_RUNS times back to back between two
 * events; ms[i] = its best of TUNE_ROUNDS rounds in ms, -1 if run(ctx, i) failed (false)
 * or could not be timed. The host waits for the stream. False if there were no events. */
bool blob__lt_time_ways(void *stream, int n, bool (*run)(const void *ctx, int way), const void *ctx,
                        float *ms);

/* Time the plan's untimed candidates on stream with this call's arrays (its descriptor
 * points at its bias and mask), keep the fastest as p->algo and return its time as
 * blob__lt_time_ways gives it (INFINITY if nothing could be timed, and the heuristic's
 * choice stays). beta must be 0: C is written many times over. */
float blob__lt_tune_plan(cublasLtHandle_t h, Plan *p, void *stream, const void *alpha,
                         const void *beta, const void *A, const void *B, void *C,
                         const Workspace *w);

/* gemm_lt_replay.cu */

/* Launch the plan's product as a graph when this launch came before (building the graph
 * the second time); false when it was not launched that way. */
bool blob__lt_replay(LtState *st, int dev, cublasLtHandle_t h, Plan *p, void *stream,
                     const void *alpha, const void *beta, const void *A, const void *B, void *C,
                     void *bias, void *mask, const Workspace *w);

/* Destroy the graphs of the plan's launches. */
void blob__lt_replay_forget(Plan *p);

/* gemm_lt_plan.cu */

/* The key of a problem: its sizes and kinds, and its pointers' alignments. */
Key blob__lt_key(int device, blob_dtype dtype, blob_math_mode mode, blob_trans trans_a,
                 blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A, const void *B,
                 const void *C, blob_epilogue e, const void *bias, const void *mask, bool tune);

/* The cached plan of key, made (evicting the least recently used) if missing. */
blob_status blob__lt_plan_for(const char *func, LtState *st, cublasLtHandle_t h, const Key &k,
                              void *bias, void *mask, Plan **out);

/* Point the plan's descriptor at this call's bias and mask. */
blob_status blob__lt_plan_set_pointers(const char *func, Plan *p, void *bias, void *mask);

void blob__lt_plan_destroy(Plan *p);

/* gemm_lt_state.cu */

/* The calling thread's state and its cuBLASLt handle for the current device. */
blob_status blob__lt_thread_state(const char *func, LtState **out, int *device,
                                  cublasLtHandle_t *handle);

/* The workspace of (device, stream), allocated on first use; an old one is handed back
 * to the allocator (ordered on its stream) when the table is full. */
blob_status blob__lt_workspace_for(LtState *st, int device, void *stream, Workspace **out);

#endif
