/* The GPU rows of the training step's building blocks (CUDA builds): 8, the multi-tensor
 * optimizer step beside a device-to-device copy of the same bytes and PyTorch's fused
 * optimizers; 9, the GEMM with its bias and ReLU fused beside cuBLAS with the bias and
 * the ReLU as separate kernels, and PyTorch's relu(linear); H, the GEMM with bfloat16
 * storage beside the tf32 mode and a direct cuBLASLt call. */
/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_cuda.h"

/* Parameters of the optimizer rows, float32 elements (64 MiB and 256 MiB). */
static const int64_t optim_sizes[] = {(int64_t)16 << 20, (int64_t)64 << 20};
/* The layers of section 9: batch, inputs, outputs. */
static const int64_t linear_shapes[][3] = {{64, 784, 256},   {64, 256, 128},  {64, 128, 10},
                                           {256, 784, 256},  {256, 256, 128}, {256, 128, 10},
                                           {512, 4096, 4096}};
static const blob_math_mode modes[] = {BLOB_MATH_FP32, BLOB_MATH_TF32, BLOB_MATH_BF16};

enum { TENSORS = 8 };

/* The tensors of n parameters: four weights of 40, 30, 20 and 10% of them less 1024, each
 * followed by a bias of 1024 (torch_ref.py splits them the same way). */
static void split(int64_t n, int64_t sizes[TENSORS])
{
    static const int64_t percent[4] = {40, 30, 20, 10};
    for (int i = 0; i < 4; i++) {
        sizes[2 * i] = n * percent[i] / 100 - 1024;
        sizes[2 * i + 1] = 1024;
    }
}

void bench_fused_torch_args(char *buf, size_t size)
{
    size_t len = strlen(buf);
    len += (size_t)snprintf(buf + len, size - len, " --optim ");
    for (size_t i = 0; i < COUNT(optim_sizes) && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, i ? ",%lld" : "%lld",
                                (long long)optim_sizes[i]);
    len += (size_t)snprintf(buf + len, size - len, " --linear ");
    for (size_t i = 0; i < COUNT(linear_shapes) && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, i ? ",%lldx%lldx%lld" : "%lldx%lldx%lld",
                                (long long)linear_shapes[i][0], (long long)linear_shapes[i][1],
                                (long long)linear_shapes[i][2]);
}

/* ---- 8: the optimizer step ---- */

typedef struct {
    blob_optim opt;
    int64_t counts[TENSORS];
    void *arr[4][TENSORS]; /* parameters, gradients, first and second history */
    int64_t *step;
    void *c0, *c1;     /* the copy's buffers */
    size_t copy_bytes; /* half the bytes the step moves */
} optim_ctx;

static int optim_run(void *ctx, int n)
{
    optim_ctx *o = ctx;
    for (int i = 0; i < n; i++)
        BTRY(blob_gpu_optim_step(&o->opt, BLOB_FLOAT32, TENSORS, o->counts, o->arr[0],
                                 (const void *const *)o->arr[1], o->arr[2], o->arr[3], o->step));
    return 0;
}

static int optim_copy_run(void *ctx, int n)
{
    optim_ctx *o = ctx;
    for (int i = 0; i < n; i++)
        CTRY(cudaMemcpyAsync(o->c1, o->c0, o->copy_bytes, cudaMemcpyDeviceToDevice, 0));
    return 0;
}

/* Arrays of opt's kind: 0.747 in the parameters, 1.6e-10 in the gradients, zero history. */
static int optim_setup(optim_ctx *o, int64_t n)
{
    split(n, o->counts);
    const int arrays = 2 + blob_optim_history_count(&o->opt);
    int64_t total = 0;
    for (int t = 0; t < TENSORS; t++) {
        total += o->counts[t];
        const size_t bytes = (size_t)o->counts[t] * sizeof(float);
        for (int a = 0; a < arrays; a++) {
            CTRY(cudaMalloc(&o->arr[a][t], bytes));
            CTRY(cudaMemset(o->arr[a][t], a == 0 ? 0x3f : a == 1 ? 0x2f : 0, bytes));
        }
    }
    CTRY(cudaMalloc((void **)&o->step, BLOB_OPTIM_STEP_WORDS * sizeof(int64_t)));
    CTRY(cudaMemset(o->step, 0, BLOB_OPTIM_STEP_WORDS * sizeof(int64_t)));
    /* reads of every array, writes of all but the gradient: 4 bytes each */
    o->copy_bytes = (size_t)total * sizeof(float) * (size_t)(2 * arrays - 1) / 2;
    CTRY(cudaMalloc(&o->c0, o->copy_bytes));
    CTRY(cudaMalloc(&o->c1, o->copy_bytes));
    CTRY(cudaMemset(o->c0, 0x3f, o->copy_bytes));
    return 0;
}

static void optim_free(optim_ctx *o)
{
    for (int a = 0; a < 4; a++)
        for (int t = 0; t < TENSORS; t++)
            cudaFree(o->arr[a][t]);
    cudaFree(o->step);
    cudaFree(o->c0);
    cudaFree(o->c1);
    (void)cudaGetLastError();
}

static int optim_row(const blob_optim *opt, const char *torch_key, int64_t n, double *v)
{
    optim_ctx o = {.opt = *opt};
    const bool big = n > ((int64_t)16 << 20);
    const int batch = big ? 3 : 10, reps = big ? 7 : 9;
    const bench_op blob_op = {optim_run, NULL, &o}, copy_op = {optim_copy_run, NULL, &o};
    double blob_ns, copy_ns;
    int rc = optim_setup(&o, n);
    if (rc == 0)
        rc =
            bench_time_pair(&blob_op, &copy_op, batch, reps, &bench_gpu_events, &blob_ns, &copy_ns);
    if (rc == 0) {
        const double moved = 2.0 * (double)o.copy_bytes;
        v[0] = blob_ns / 1e3;
        v[1] = copy_ns / 1e3;
        v[2] = moved / (v[0] * 1e3);
        v[3] = moved / (v[1] * 1e3);
        v[4] = v[2] / v[3];
        v[5] = torch_ref(torch_key, (double)n) / 1e3;
        v[6] = v[5] / v[0];
    }
    optim_free(&o);
    return rc;
}

void bench_gpu_optim(void)
{
    static const char *const cols[] = {"blob us",   "copy us",  "blob GB/s", "copy GB/s",
                                       "blob/copy", "torch us", "torch/blob"};
    report_section("8", "Optimizer step over 8 float32 tensors on the GPU, CUDA events", 7, cols);
    blob_optim sgd = blob_optim_default(BLOB_OPTIM_SGD, 0.01);
    sgd.momentum = 0.9;
    sgd.weight_decay = 5e-4;
    const blob_optim adamw = blob_optim_default(BLOB_OPTIM_ADAMW, 1e-3);
    const struct {
        const char *name, *key;
        const blob_optim *opt;
    } kinds[] = {{"SGD momentum+wd", "sgd", &sgd}, {"AdamW", "adamw", &adamw}};
    for (size_t k = 0; k < COUNT(kinds); k++)
        for (size_t i = 0; i < COUNT(optim_sizes); i++) {
            char label[64], size[32];
            double v[7] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};
            snprintf(label, sizeof label, "%s, %s", kinds[k].name,
                     fmt_bytes((size_t)optim_sizes[i] * sizeof(float), size));
            if (optim_row(kinds[k].opt, kinds[k].key, optim_sizes[i], v) != 0)
                report_error(label, bench_error());
            else /* PyTorch, when it ran, must not be faster */
                report_row(label, v, GOAL_OPTIM, v[4] >= 0.9 && !(v[6] < 1));
        }
    report_note("blob: blob_gpu_optim_step (one kernel) over weights of 40/30/20/10%% of the "
                "parameters and four biases of 1024; GB/s count every byte read and written "
                "(20 per parameter for SGD with momentum, 28 for AdamW)");
    report_note("copy: cudaMemcpyAsync D2D moving the same bytes (half read, half written); "
                "torch: torch.optim.SGD / AdamW(fused=True).step() on the same tensors");
    report_note("blob and copy timed in the order blob, copy, copy, blob; each figure the "
                "mean of its two medians");
}

/* ---- 9: GEMM + bias + ReLU ---- */

typedef struct {
    cublasHandle_t h;
    blob_math_mode mode;
    int64_t B, I, O;
    float *x, *w, *b, *y, *ones;
    void *mask;
} linear_ctx;

static int linear_fused_run(void *ctx, int n)
{
    linear_ctx *l = ctx;
    for (int i = 0; i < n; i++)
        BTRY(blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, l->B, l->O, l->I, l->x,
                                    l->w, l->y, BLOB_EPILOGUE_BIAS_RELU, l->b, l->mask, l->mode));
    return 0;
}

/* cuBLAS's product in the mode (column-major y^T = w x^T), the bias added by a rank-1
 * product with a column of ones (as Caffe's InnerProduct does), then the ReLU. */
static int linear_unfused_run(void *ctx, int n)
{
    linear_ctx *l = ctx;
    const float one = 1, zero = 0;
    const cublasComputeType_t compute = l->mode == BLOB_MATH_TF32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : l->mode == BLOB_MATH_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                                    : CUBLAS_COMPUTE_32F;
    const int B = (int)l->B, I = (int)l->I, O = (int)l->O;
    for (int i = 0; i < n; i++) {
        cublasStatus_t s =
            cublasGemmEx(l->h, CUBLAS_OP_T, CUBLAS_OP_N, O, B, I, &one, l->w, CUDA_R_32F, I, l->x,
                         CUDA_R_32F, I, &zero, l->y, CUDA_R_32F, O, compute, CUBLAS_GEMM_DEFAULT);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasSgemm(l->h, CUBLAS_OP_N, CUBLAS_OP_N, O, B, 1, &one, l->b, O, l->ones, 1,
                            &one, l->y, O);
        if (s != CUBLAS_STATUS_SUCCESS)
            return bench_fail("cuBLAS: status %d", (int)s);
        BTRY(blob_gpu_relu_forward(BLOB_FLOAT32, l->B * l->O, l->y, l->y));
    }
    return 0;
}

static int linear_setup(linear_ctx *l)
{
    const size_t f = sizeof(float);
    CTRY(cudaMalloc((void **)&l->x, f * (size_t)(l->B * l->I)));
    CTRY(cudaMalloc((void **)&l->w, f * (size_t)(l->O * l->I)));
    CTRY(cudaMalloc((void **)&l->b, f * (size_t)l->O));
    CTRY(cudaMalloc((void **)&l->y, f * (size_t)(l->B * l->O)));
    CTRY(cudaMalloc((void **)&l->ones, f * (size_t)l->B));
    CTRY(cudaMalloc(&l->mask, blob_relu_mask_bytes(l->B, l->O)));
    CTRY(cudaMemset(l->x, 0x3c, f * (size_t)(l->B * l->I))); /* 0.012 */
    CTRY(cudaMemset(l->w, 0x3c, f * (size_t)(l->O * l->I)));
    CTRY(cudaMemset(l->b, 0xbc, f * (size_t)l->O)); /* -0.023 */
    BTRY(blob_gpu_set(BLOB_FLOAT32, l->B, 1, l->ones));
    return 0;
}

static void linear_free(linear_ctx *l)
{
    void *p[] = {l->x, l->w, l->b, l->y, l->ones, l->mask};
    for (size_t i = 0; i < COUNT(p); i++)
        cudaFree(p[i]);
    (void)cudaGetLastError();
}

static int linear_row(cublasHandle_t h, size_t shape, blob_math_mode mode, double *v)
{
    linear_ctx l = {h,
                    mode,
                    linear_shapes[shape][0],
                    linear_shapes[shape][1],
                    linear_shapes[shape][2],
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    const double flops = 2.0 * (double)(l.B * l.I * l.O);
    const int batch = flops > 1e10 ? 20 : 200, reps = 11;
    const bench_op fused_op = {linear_fused_run, NULL, &l};
    const bench_op unfused_op = {linear_unfused_run, NULL, &l};
    double fused_ns, unfused_ns;
    int rc = linear_setup(&l);
    if (rc == 0)
        rc = bench_time_pair(&fused_op, &unfused_op, batch, reps, &bench_gpu_events, &fused_ns,
                             &unfused_ns);
    bool fused = false;
    if (rc == 0 &&
        blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_TRANS, l.B, l.O, l.I,
                                     BLOB_EPILOGUE_BIAS_RELU, true, mode, &fused) != BLOB_OK)
        rc = bench_fail("blob_gpu_gemm_epilogue_fused: %s", blob_last_error());
    if (rc == 0) {
        char key[24];
        snprintf(key, sizeof key, "linear_%s", blob_math_mode_name(mode));
        v[0] = fused_ns / 1e3;
        v[1] = unfused_ns / 1e3;
        v[2] = v[1] / v[0];
        v[3] = torch_ref(key, (double)shape) / 1e3;
        v[4] = flops / (v[0] * 1e6);
        v[5] = fused;
    }
    linear_free(&l);
    return rc;
}

/* The gradients of layer_kernels' layer, on the GPU. */
typedef struct {
    float *dy, *dx, *dw, *db, *db_in;
    void *mask_in; /* the ReLU mask of the layer below, B x I */
} layer_grads;

/* y = relu(x W^T + b); dx = dy W through the ReLU below, and its bias gradient;
 * dW = dy^T x; db = colsum(dy): with the fused epilogues (3 calls). */
static blob_status layer_fused(const linear_ctx *l, const layer_grads *d)
{
    const blob_trans N = BLOB_NO_TRANS, T = BLOB_TRANS;
    const int64_t B = l->B, I = l->I, O = l->O;
    blob_status st = blob_gpu_gemm_epilogue(BLOB_FLOAT32, N, T, B, O, I, l->x, l->w, l->y,
                                            BLOB_EPILOGUE_BIAS_RELU, l->b, l->mask, 0);
    if (st == BLOB_OK)
        st = blob_gpu_gemm_epilogue(BLOB_FLOAT32, N, N, B, I, O, d->dy, l->w, d->dx,
                                    BLOB_EPILOGUE_DRELU_BGRAD, d->db_in, d->mask_in, 0);
    if (st == BLOB_OK)
        st = blob_gpu_gemm_epilogue(BLOB_FLOAT32, T, N, O, I, B, d->dy, l->x, d->dw,
                                    BLOB_EPILOGUE_BGRADA, d->db, NULL, 0);
    return st;
}

/* The same with plain GEMMs and separate bias, ReLU and bias-gradient kernels as Caffe
 * runs them (8 calls). */
static blob_status layer_plain(const linear_ctx *l, const layer_grads *d)
{
    const blob_trans N = BLOB_NO_TRANS, T = BLOB_TRANS;
    const int64_t B = l->B, I = l->I, O = l->O;
    blob_status st = blob_gpu_gemm(BLOB_FLOAT32, N, T, B, O, I, 1, l->x, l->w, 0, l->y);
    if (st == BLOB_OK)
        st = blob_gpu_gemm(BLOB_FLOAT32, N, N, B, O, 1, 1, l->ones, l->b, 1, l->y);
    if (st == BLOB_OK)
        st = blob_gpu_relu_forward(BLOB_FLOAT32, B * O, l->y, l->y);
    if (st == BLOB_OK)
        st = blob_gpu_gemm(BLOB_FLOAT32, N, N, B, I, O, 1, d->dy, l->w, 0, d->dx);
    if (st == BLOB_OK) /* the input stands in for the layer below's output */
        st = blob_gpu_relu_backward(BLOB_FLOAT32, B * I, l->x, d->dx, d->dx);
    if (st == BLOB_OK)
        st = blob_gpu_gemv(BLOB_FLOAT32, T, B, I, 1, d->dx, l->ones, 0, d->db_in);
    if (st == BLOB_OK)
        st = blob_gpu_gemm(BLOB_FLOAT32, T, N, O, I, B, 1, d->dy, l->x, 0, d->dw);
    if (st == BLOB_OK)
        st = blob_gpu_gemv(BLOB_FLOAT32, T, B, O, 1, d->dy, l->ones, 0, d->db);
    return st;
}

/* d's buffers for a layer of l's shape, dy and the mask filled: 0, or bench_fail's -1. */
static int grads_alloc(const linear_ctx *l, layer_grads *d)
{
    const int64_t B = l->B, I = l->I, O = l->O;
    const size_t f = sizeof(float);
    if (cudaMalloc((void **)&d->dy, f * (size_t)(B * O)) != cudaSuccess ||
        cudaMalloc((void **)&d->dx, f * (size_t)(B * I)) != cudaSuccess ||
        cudaMalloc((void **)&d->dw, f * (size_t)(O * I)) != cudaSuccess ||
        cudaMalloc((void **)&d->db, f * (size_t)O) != cudaSuccess ||
        cudaMalloc((void **)&d->db_in, f * (size_t)I) != cudaSuccess ||
        cudaMalloc(&d->mask_in, blob_relu_mask_bytes(B, I)) != cudaSuccess ||
        cudaMemset(d->mask_in, 0x5a, blob_relu_mask_bytes(B, I)) != cudaSuccess ||
        cudaMemset(d->dy, 0x3c, f * (size_t)(B * O)) != cudaSuccess)
        return bench_fail("cudaMalloc failed");
    return 0;
}

static void grads_free(layer_grads *d)
{
    cudaFree(d->dy), cudaFree(d->dx), cudaFree(d->dw), cudaFree(d->db), cudaFree(d->db_in);
    cudaFree(d->mask_in);
}

/* Kernels of one layer's forward and backward captured in a graph, the backward through
 * the ReLU of the layer below included: with the fused epilogues (3 calls), or with plain
 * GEMMs and separate bias, ReLU and bias-gradient kernels as Caffe runs them (8 calls).
 * Shape: the MLP's first layer at batch 64. */
static int layer_kernels(bool fused, int64_t *kernels, int64_t *total)
{
    linear_ctx l = {NULL, BLOB_MATH_FP32, 64, 784, 256, NULL, NULL, NULL, NULL, NULL, NULL};
    layer_grads d = {NULL, NULL, NULL, NULL, NULL, NULL};
    void *s = NULL;
    blob_graph *g = NULL;
    int rc = linear_setup(&l);
    if (rc == 0)
        rc = grads_alloc(&l, &d);
    blob_status st = rc == 0 ? blob_stream_create(&s) : BLOB_OK;
    blob_stream_set(s);
    for (int pass = 0; rc == 0 && st == BLOB_OK && pass < 2; pass++) { /* warm-up, capture */
        if (pass == 1 && (st = blob_graph_begin(s)) != BLOB_OK)
            break;
        st = fused ? layer_fused(&l, &d) : layer_plain(&l, &d);
        if (pass == 1) {
            blob_status end = blob_graph_end(s, &g);
            st = st != BLOB_OK ? st : end;
        }
    }
    if (rc == 0 && st == BLOB_OK)
        st = blob_graph_count_nodes(g, kernels, total);
    if (rc == 0 && st != BLOB_OK)
        rc = bench_fail("%s (%s)", blob_status_name(st), blob_last_error());
    blob_graph_free(g);
    blob_stream_set(NULL);
    blob_stream_destroy(s);
    linear_free(&l);
    grads_free(&d);
    (void)cudaGetLastError();
    return rc;
}

void bench_gpu_fused_gemm(void)
{
    static const char *const cols[] = {"fused us", "unfused us", "unfused/fused",
                                       "torch us", "TFLOP/s",    "lt fused"};
    report_section("9", "relu(x W^T + b) with the mask, float32 storage, CUDA events", 6, cols);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        report_error("cublasCreate", "failed");
        return;
    }
    for (size_t m = 0; m < COUNT(modes); m++)
        for (size_t s = 0; s < COUNT(linear_shapes); s++) {
            char label[64];
            double v[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
            snprintf(label, sizeof label, "%lldx%lld -> %lld, %s", (long long)linear_shapes[s][0],
                     (long long)linear_shapes[s][1], (long long)linear_shapes[s][2],
                     blob_math_mode_name(modes[m]));
            if (linear_row(h, s, modes[m], v) != 0)
                report_error(label, bench_error());
            else
                report_row(label, v, GOAL_NONE, false);
        }
    cublasDestroy(h);
    int64_t fk = -1, ft = -1, uk = -1, ut = -1;
    if (layer_kernels(true, &fk, &ft) == 0 && layer_kernels(false, &uk, &ut) == 0)
        report_note("a layer's forward and backward (64x784 -> 256) in a graph: %lld kernels "
                    "(%lld nodes) fused, %lld kernels (%lld nodes) with separate bias, ReLU "
                    "and bias-gradient kernels (blob_graph_count_nodes)",
                    (long long)fk, (long long)ft, (long long)uk, (long long)ut);
    else
        report_error("layer kernels", bench_error());
    report_note("fused: blob_gpu_gemm_epilogue(BIAS_RELU, with the ReLU mask) in the mode; "
                "lt fused: 1 when cuBLASLt fuses it, 0 when it runs as cuBLAS + kernels");
    report_note("unfused: cublasGemmEx in the mode's compute type, the bias by cublasSgemm "
                "with a ones column, blob_gpu_relu_forward; torch: relu(F.linear(x, W, b)) "
                "with float32 matmul precision highest / high / medium");
}

/* ---- H: GEMM with bfloat16 storage ---- */

/* us per call of run (batch calls a sample, the median of reps), by CUDA events. */
static double time_us(int (*run)(void *, int), void *ctx, int batch, int reps)
{
    bench_op op = {run, NULL, ctx};
    return bench_time(&op, batch, reps, &bench_gpu_events) / 1e3;
}

/* The linear layer's product 512x4096 x (4096x4096)^T: in bfloat16 by blob_gpu_gemm, in
 * float32 in the tf32 mode, and by one cuBLASLt call with the fastest of the heuristic's
 * candidates (the row's yardstick). */
enum { H_M = 512, H_N = 4096, H_K = 4096, H_CANDIDATES = 16 };
static const size_t H_WORKSPACE = (size_t)32 << 20;

typedef struct {
    blob_dtype dtype;
    void *A, *B, *C; /* A: M x K, B: N x K (NT), C: M x N */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    void *ws;
} gemm16_ctx;

static int gemm16_blob_run(void *ctx, int n)
{
    gemm16_ctx *g = ctx;
    for (int i = 0; i < n; i++)
        BTRY(blob_gpu_gemm(g->dtype, BLOB_NO_TRANS, BLOB_TRANS, H_M, H_N, H_K, 1, g->A, g->B, 0,
                           g->C));
    return 0;
}

static int gemm16_lt_run(void *ctx, int n)
{
    gemm16_ctx *g = ctx;
    const float one = 1, zero = 0;
    for (int i = 0; i < n; i++)
        if (cublasLtMatmul(g->lt, g->op, &one, g->B, g->a, g->A, g->b, &zero, g->C, g->c, g->C,
                           g->c, &g->algo, g->ws, H_WORKSPACE,
                           (cudaStream_t)blob_stream_get()) != CUBLAS_STATUS_SUCCESS)
            return bench_fail("cublasLtMatmul failed");
    return 0;
}

/* The direct cuBLASLt call's descriptors (column-major C^T = B A^T, as the library maps
 * its row-major product) and its fastest candidate: *us its time, NAN if none ran. */
static int gemm16_lt_setup(gemm16_ctx *g, double *us)
{
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[H_CANDIDATES];
    int found = 0;
    size_t ws = H_WORKSPACE;
    *us = NAN;
    if (cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&g->a, CUDA_R_16BF, H_K, H_N, H_K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&g->b, CUDA_R_16BF, H_K, H_M, H_K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&g->c, CUDA_R_16BF, H_N, H_M, H_N) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->a, g->b, g->c, g->c, pref, H_CANDIDATES,
                                       res, &found) != CUBLAS_STATUS_SUCCESS) {
        if (pref)
            cublasLtMatmulPreferenceDestroy(pref);
        return bench_fail("cuBLASLt setup for bfloat16 failed");
    }
    cublasLtMatmulPreferenceDestroy(pref);
    int best = -1;
    for (int i = 0; i < found; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws)
            continue;
        g->algo = res[i].algo;
        const double u = time_us(gemm16_lt_run, g, 20, 5);
        if (!isnan(u) && (best < 0 || u < *us)) {
            best = i;
            *us = u;
        }
    }
    (void)cudaGetLastError();
    if (best < 0)
        return bench_fail("no cuBLASLt bfloat16 candidate ran");
    g->algo = res[best].algo;
    return 0;
}

static void gemm16_free(gemm16_ctx *g)
{
    cudaFree(g->A), cudaFree(g->B), cudaFree(g->C), cudaFree(g->ws);
    if (g->op)
        cublasLtMatmulDescDestroy(g->op);
    if (g->a)
        cublasLtMatrixLayoutDestroy(g->a);
    if (g->b)
        cublasLtMatrixLayoutDestroy(g->b);
    if (g->c)
        cublasLtMatrixLayoutDestroy(g->c);
    if (g->lt)
        cublasLtDestroy(g->lt);
}

/* Arrays of dtype for the row, filled with small values (never all zero). */
static int gemm16_alloc(gemm16_ctx *g, blob_dtype dtype)
{
    const size_t e = blob_dtype_size(dtype);
    g->dtype = dtype;
    CTRY(cudaMalloc(&g->A, e * H_M * H_K));
    CTRY(cudaMalloc(&g->B, e * H_N * H_K));
    CTRY(cudaMalloc(&g->C, e * H_M * H_N));
    CTRY(cudaMemset(g->A, 0x3c, e * H_M * H_K));
    CTRY(cudaMemset(g->B, 0x3b, e * H_N * H_K));
    return 0;
}

void bench_gpu_gemm16(void)
{
    static const char *const cols[] = {"bf16 us",   "TFLOP/s",     "tf32 us",
                                       "bf16/tf32", "cublasLt us", "bf16/cublasLt"};
    report_section("H", "GEMM 512x4096x4096 (x W^T) with bfloat16 storage, CUDA events", 6, cols);
    const double flops = 2.0 * H_M * H_N * H_K;
    gemm16_ctx bf = {0}, f32 = {0};
    double v[6] = {NAN, NAN, NAN, NAN, NAN, NAN}, lt_us = NAN;
    const bool tuning = blob_gemm_tuning_get();
    const blob_math_mode mode = blob_math_mode_get();
    int rc = gemm16_alloc(&bf, BLOB_BFLOAT16);
    if (rc == 0)
        rc = gemm16_alloc(&f32, BLOB_FLOAT32);
    if (rc == 0 && cudaMalloc(&bf.ws, H_WORKSPACE) != cudaSuccess)
        rc = bench_fail("cudaMalloc failed");
    if (rc == 0)
        rc = gemm16_lt_setup(&bf, &lt_us);
    if (rc == 0) { /* tuned, as the yardstick chose among its candidates */
        blob_gemm_tuning_set(true);
        v[0] = time_us(gemm16_blob_run, &bf, 20, 9);
        blob_math_mode_set(BLOB_MATH_TF32);
        v[2] = time_us(gemm16_blob_run, &f32, 20, 9);
        blob_math_mode_set(mode);
        blob_gemm_tuning_set(tuning);
        lt_us = time_us(gemm16_lt_run, &bf, 20, 9); /* again, beside the others */
        rc = isnan(v[0]) || isnan(v[2]) || isnan(lt_us) ? -1 : 0;
    }
    if (rc == 0) {
        v[1] = flops / v[0] / 1e6;
        v[3] = v[2] / v[0];
        v[4] = lt_us;
        v[5] = lt_us / v[0];
        report_row("512x4096x4096 bf16", v, GOAL_NONE, false);
        report_note("goals: bf16/tf32 >= 2 (%s), bf16/cublasLt >= 0.95 (%s); cuBLASLt TFLOP/s "
                    "%.0f",
                    v[3] >= 2 ? "met" : "not met", v[5] >= 0.95 ? "met" : "not met",
                    flops / lt_us / 1e6);
    } else {
        report_error("512x4096x4096 bf16", bench_error());
    }
    report_note("bf16: blob_gpu_gemm(BLOB_BFLOAT16, NT) with GEMM tuning on; tf32: the same "
                "product on float32 arrays in the tf32 mode; cublasLt: one cublasLtMatmul "
                "(bfloat16, CUBLAS_COMPUTE_32F) with the fastest of the heuristic's top %d "
                "candidates; ratios are speeds",
                H_CANDIDATES);
    gemm16_free(&bf);
    gemm16_free(&f32);
}
