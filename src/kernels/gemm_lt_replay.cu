/* Replayed launches of the cuBLASLt GEMM's plans (gemm_lt.cuh). Outside a capture,
 * cublasLtMatmul costs 8-18 us of host time per call on the hosts measured, and a replay
 * of the same product captured in a graph about 1.5 us. So a plan remembers its recent
 * launches (the stream, the arrays, the workspace, the scalars): the second time one comes, it is
 * captured on a stream of the thread's own and instantiated, and from then on replayed
 * with cudaGraphLaunch on the caller's stream. A plan whose launches rarely come again
 * stops building them. Owns a plan's launches and their graphs. */
#include "gemm_lt.cuh"

static constexpr uint32_t MIN_BUILDS = 16; /* then replays must outnumber builds 4 to 1 */

static void launch_forget(Launch *l)
{
    if (l->exec)
        (void)cudaGraphExecDestroy(l->exec);
    l->exec = nullptr;
}

void blob__lt_replay_forget(Plan *p)
{
    for (int i = 0; i < p->num_launches; i++)
        launch_forget(&p->launches[i]);
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
    if (cudaStreamBeginCapture(st->capture[dev], cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        cublasStatus_t s = lt_matmul(h, p, &p->algo, alpha, beta, A, B, C, w, st->capture[dev]);
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

bool blob__lt_replay(LtState *st, int dev, cublasLtHandle_t h, Plan *p, void *stream,
                     const void *alpha, const void *beta, const void *A, const void *B, void *C,
                     void *bias, void *mask, const Workspace *w)
{
    if (p->builds >= MIN_BUILDS && p->replays < 4 * p->builds)
        return false;
    const Launch now = {stream,
                        w->ptr,
                        A,
                        B,
                        C,
                        bias,
                        mask,
                        scalar_value(p, alpha),
                        scalar_value(p, beta),
                        blob__backend_generation,
                        nullptr,
                        ++st->clock};
    Launch *l = nullptr;
    for (int i = 0; i < p->num_launches && !l; i++) {
        Launch *c = &p->launches[i];
        if (c->stream == now.stream && c->workspace == now.workspace && c->A == A && c->B == B &&
            c->C == C && c->bias == bias && c->mask == mask && c->alpha == now.alpha &&
            c->beta == now.beta && c->generation == now.generation)
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
