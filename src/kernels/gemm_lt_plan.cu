/* The cuBLASLt GEMM's plans (gemm_lt.cuh): the key of a problem, the matmul and layout
 * descriptors made for it, the algorithm chosen among the heuristic's (and, when tuning,
 * the candidates to time), and the thread's cache of plans with its LRU eviction. Owns a
 * plan's making and destruction. */
#include <stdlib.h>
#include <string.h>

#include "gemm_lt.cuh"

static constexpr int64_t MIN_K_PER_SPLIT = 64; /* see choose_candidate() */

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
    case BLOB_EPILOGUE_NONE: return CUBLASLT_EPILOGUE_DEFAULT;
    case BLOB_EPILOGUE_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case BLOB_EPILOGUE_RELU: return with_mask ? CUBLASLT_EPILOGUE_RELU_AUX : CUBLASLT_EPILOGUE_RELU;
    case BLOB_EPILOGUE_BIAS_RELU:
        return with_mask ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS;
    case BLOB_EPILOGUE_DRELU: return CUBLASLT_EPILOGUE_DRELU;
    case BLOB_EPILOGUE_DRELU_BGRAD: return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case BLOB_EPILOGUE_BGRADA: return CUBLASLT_EPILOGUE_BGRADB; /* see gemm_lt.cuh */
    case BLOB_EPILOGUE_BGRADB: return CUBLASLT_EPILOGUE_BGRADA;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

/* The 16-bit floats come with mode FP32 (the key's): CUBLAS_COMPUTE_32F, the tensor
 * cores with float32 accumulation. */
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

blob_status blob__lt_plan_set_pointers(const char *func, Plan *p, void *bias, void *mask)
{
    if (bias)
        LT_TRY(func, set_desc(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
    if (mask)
        LT_TRY(func, set_desc(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, mask));
    return BLOB_OK;
}

/* The candidate to run among the heuristic's (best first): the first usable one whose
 * split of K leaves every part at least MIN_K_PER_SPLIT long, else the usable one that
 * splits K the least (the first of those); -1 if none is usable. For small outputs the
 * heuristic ranks first splits into parts a few elements long, or shorter than one,
 * whose reductions cost more than they save (timed in CUDA graphs on the H200 for the
 * GEMMs of an MLP step: the 10 x 128 weight gradient of a batch of 256 split 264 ways
 * took 53 us against 6.4 us split 8 ways; a 64 x 10 product over K = 128 split 132 ways,
 * 6.4 us against 4.2 us unsplit; splits of 4 for K = 256 stay the fastest). */
static int choose_candidate(const cublasLtMatmulHeuristicResult_t *results, int found, size_t ws,
                            int64_t K)
{
    const int64_t most = K / MIN_K_PER_SPLIT > 1 ? K / MIN_K_PER_SPLIT : 1;
    int least = -1;
    int32_t least_split = 0;
    for (int i = 0; i < found; i++) {
        if (!usable(results[i], ws))
            continue;
        int32_t split = 1;
        size_t written;
        if (cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                 &split, sizeof split,
                                                 &written) != CUBLAS_STATUS_SUCCESS)
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

static cudaDataType_t data_type(blob_dtype dtype)
{
    switch (dtype) {
    case BLOB_FLOAT64: return CUDA_R_64F;
    case BLOB_BFLOAT16: return CUDA_R_16BF;
    case BLOB_FLOAT16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

/* The matmul descriptor of key k, pointed at bias and mask, and the three layouts. The
 * scalars are float64 for float64 and float32 otherwise; the bias is of C's dtype. */
static cublasStatus_t plan_describe(const Key &k, void *bias, void *mask, Plan *p)
{
    const blob_dtype dtype = (blob_dtype)k.dtype;
    const cudaDataType_t t = data_type(dtype);
    const cudaDataType_t scale = dtype == BLOB_FLOAT64 ? CUDA_R_64F : CUDA_R_32F;
    const bool ta = k.trans_a == BLOB_TRANS, tb = k.trans_b == BLOB_TRANS;
    const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* its A: our B */
    const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* its B: our A */
    cublasStatus_t s =
        cublasLtMatmulDescCreate(&p->op, compute_type(dtype, (blob_math_mode)k.mode), scale);
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
        s = cublasLtMatrixLayoutCreate(&p->a, t, tb ? k.K : k.N, tb ? k.N : k.K, tb ? k.K : k.N);
    /* its B: op(A)^T is K x M */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->b, t, ta ? k.M : k.K, ta ? k.K : k.M, ta ? k.M : k.K);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->c, t, k.N, k.M, k.N);
    return s;
}

/* Up to max of the heuristic's algorithms for the plan's descriptors (best first), for a
 * workspace of ws bytes and the key's alignments; none where cuBLASLt has no algorithm
 * for this configuration. */
static cublasStatus_t plan_heuristic(cublasLtHandle_t h, const Plan *p, size_t ws, int max,
                                     cublasLtMatmulHeuristicResult_t *results, int *found)
{
    const Key &k = p->key;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
    const uint32_t align[4] = {1u << k.align[1], 1u << k.align[0], 1u << k.align[2],
                               1u << k.align[2]};
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws);
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]);
    if (s == CUBLAS_STATUS_SUCCESS) {
        s = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->c, p->c, pref, max, results,
                                           found);
        if (refused(s)) { /* no algorithm for this configuration */
            s = CUBLAS_STATUS_SUCCESS;
            *found = 0;
        }
    }
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    return s;
}

/* Make the descriptors of key and choose among the heuristic's algorithms; p->fused
 * says whether there is one. bias and mask are this call's pointers (the heuristic reads
 * their alignment). On failure nothing is left allocated. */
static blob_status plan_make(const char *func, cublasLtHandle_t h, const Key &k, void *bias,
                             void *mask, Plan *p)
{
    const size_t ws = workspace_bytes(k.device);
    *p = Plan{};
    p->key = k;
    cublasLtMatmulHeuristicResult_t results[TUNE_CANDIDATES] = {};
    int found = 0;
    cublasStatus_t s = plan_describe(k, bias, mask, p);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = plan_heuristic(h, p, ws, k.tuned ? TUNE_CANDIDATES : CANDIDATES, results, &found);
    if (s != CUBLAS_STATUS_SUCCESS) {
        blob__lt_plan_destroy(p);
        return lt_fail(s, "cuBLASLt plan", func);
    }
    const int pick = choose_candidate(results, found, ws, k.K);
    p->fused = pick >= 0;
    if (p->fused)
        p->algo = results[pick].algo;
    if (p->fused && k.tuned)
        blob__lt_tune_candidates(h, p, results, found, ws);
    return BLOB_OK;
}

void blob__lt_plan_destroy(Plan *p)
{
    blob__lt_replay_forget(p);
    free(p->untimed);
    (void)cublasLtMatmulDescDestroy(p->op);
    (void)cublasLtMatrixLayoutDestroy(p->a);
    (void)cublasLtMatrixLayoutDestroy(p->b);
    (void)cublasLtMatrixLayoutDestroy(p->c);
}

blob_status blob__lt_plan_for(const char *func, LtState *st, cublasLtHandle_t h, const Key &k,
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
            blob__lt_plan_destroy(p);
        }
        *p = fresh;
    }
    p->used = ++st->clock;
    *out = p;
    return BLOB_OK;
}

Key blob__lt_key(int device, blob_dtype dtype, blob_math_mode mode, blob_trans trans_a,
                 blob_trans trans_b, int64_t M, int64_t N, int64_t K, const void *A, const void *B,
                 const void *C, blob_epilogue e, const void *bias, const void *mask, bool tune)
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
