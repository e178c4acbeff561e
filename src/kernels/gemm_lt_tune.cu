/* Tuning of the cuBLASLt GEMM's plans (gemm_lt.cuh; blob_gemm_tuning_set). With tuning a
 * plan keeps the candidates instead of the heuristic's choice alone: the heuristic's
 * usable ones and each one's algorithm with every split of K in SPLITS, and the first
 * call outside a capture times them all on the device and keeps the fastest. Owns the
 * candidates, from their making to the choice. */
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
    if (n < 2) {
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

/* TUNE_RUNS products back to back for each candidate while a hold kernel lets the host
 * queue them, best of TUNE_ROUNDS. What fails to run is not a candidate. */
void blob__lt_tune_plan(cublasLtHandle_t h, Plan *p, void *stream, const void *alpha,
                        const void *beta, const void *A, const void *B, void *C, const Workspace *w)
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
                ran = lt_matmul(h, p, &p->untimed[i], alpha, beta, A, B, C, w, s) ==
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
