/* Tuning of the cuBLASLt GEMM's plans (gemm_lt.cuh; blob_gemm_tuning_set). With tuning a
 * plan keeps the candidates instead of the heuristic's choice alone: the heuristic's
 * usable ones and each one's algorithm with every split of K in SPLITS, and the first
 * call outside a capture times them all on the device and keeps the fastest (the launcher
 * then times that against the unfused path, the same way). Owns the candidates, from
 * their making to the choice, and the way of timing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_lt.cuh"

static constexpr int32_t SPLITS[] = {1, 2, 4, 8, 16};
static constexpr int MAX_TUNED = TUNE_CANDIDATES * (1 + sizeof SPLITS / sizeof SPLITS[0]);
static constexpr int TUNE_RUNS = 8;              /* back-to-back products timed per candidate */
static constexpr int TUNE_ROUNDS = 2;            /* the best of these many timings counts */
static constexpr uint64_t TUNE_HOLD_NS = 200000; /* the device waits while the host queues */

/* Add algo to the n candidates in c unless it is there. */
static void add_candidate(cublasLtMatmulAlgo_t *c, int *n, const cublasLtMatmulAlgo_t &algo)
{
    for (int i = 0; i < *n; i++)
        if (!memcmp(&c[i], &algo, sizeof algo))
            return;
    c[(*n)++] = algo;
}

void blob__lt_tune_candidates(cublasLtHandle_t h, Plan *p,
                              const cublasLtMatmulHeuristicResult_t *results, int found, size_t ws)
{
    cublasLtMatmulAlgo_t *c = (cublasLtMatmulAlgo_t *)malloc(MAX_TUNED * sizeof *c);
    int n = 0;
    for (int i = 0; c && i < found; i++) {
        if (!usable(results[i], ws))
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
                                                     &scheme,
                                                     sizeof scheme) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulAlgoCheck(h, p->op, p->a, p->b, p->c, p->c, &a, &check) ==
                    CUBLAS_STATUS_SUCCESS &&
                check.workspaceSize <= ws)
                add_candidate(c, &n, a);
        }
    }
    /* one alone is timed only where the unfused path competes (an epilogue) */
    if (n < (p->key.epilogue == BLOB_EPILOGUE_NONE ? 2 : 1)) {
        free(c);
        return;
    }
    p->untimed = c;
    p->num_untimed = n;
}

/* Holds the stream for ns nanoseconds of the device's clock. */
static __global__ void hold(uint64_t ns)
{
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

bool blob__lt_time_ways(void *stream, int n, bool (*run)(const void *ctx, int way), const void *ctx,
                        float *ms)
{
    cudaEvent_t *ev = (cudaEvent_t *)calloc(2 * (size_t)n, sizeof *ev);
    int made = 0;
    while (ev && made < 2 * n && cudaEventCreate(&ev[made]) == cudaSuccess)
        made++;
    const cudaStream_t s = (cudaStream_t)stream;
    for (int i = 0; i < n; i++)
        ms[i] = INFINITY;
    for (int round = 0; made == 2 * n && round < TUNE_ROUNDS; round++) {
        for (int i = 0; i < n; i++) {
            if (ms[i] < 0) /* failed before */
                continue;
            hold<<<1, 1, 0, s>>>(TUNE_HOLD_NS);
            bool ran = cudaEventRecord(ev[2 * i], s) == cudaSuccess;
            for (int r = 0; r < TUNE_RUNS && ran; r++)
                ran = run(ctx, i);
            ran &= cudaEventRecord(ev[2 * i + 1], s) == cudaSuccess;
            if (!ran)
                ms[i] = -1;
        }
        if (cudaStreamSynchronize(s) != cudaSuccess)
            break;
        for (int i = 0; i < n; i++) {
            float t;
            if (ms[i] >= 0 && cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]) == cudaSuccess)
                ms[i] = t < ms[i] ? t : ms[i];
            else
                ms[i] = -1;
        }
    }
    (void)cudaGetLastError(); /* refusals of candidates */
    for (int i = 0; i < made; i++)
        (void)cudaEventDestroy(ev[i]);
    free(ev);
    return made == 2 * n;
}

/* A candidate's product, as blob__lt_time_ways runs it. */
struct CandidateRun {
    cublasLtHandle_t h;
    const Plan *p;
    const void *alpha, *beta, *A, *B;
    void *C;
    const Workspace *w;
    cudaStream_t s;
};

float blob__lt_tune_plan(cublasLtHandle_t h, Plan *p, void *stream, const void *alpha,
                         const void *beta, const void *A, const void *B, void *C,
                         const Workspace *w)
{
    const int n = p->num_untimed;
    const CandidateRun c = {h, p, alpha, beta, A, B, C, w, (cudaStream_t)stream};
    const auto run = [](const void *ctx, int i) {
        const CandidateRun &r = *(const CandidateRun *)ctx;
        return lt_matmul(r.h, r.p, &r.p->untimed[i], r.alpha, r.beta, r.A, r.B, r.C, r.w, r.s) ==
               CUBLAS_STATUS_SUCCESS;
    };
    float *ms = (float *)malloc((size_t)n * sizeof *ms);
    int pick = -1;
    if (ms && blob__lt_time_ways(stream, n, run, &c, ms))
        for (int i = 0; i < n; i++)
            if (ms[i] >= 0 && ms[i] < INFINITY && (pick < 0 || ms[i] < ms[pick]))
                pick = i;
    const float best = pick >= 0 ? ms[pick] : INFINITY;
    if (pick >= 0)
        p->algo = p->untimed[pick];
    free(ms);
    free(p->untimed);
    p->untimed = nullptr;
    p->num_untimed = 0;
    return best;
}
