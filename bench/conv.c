/* Section C (CUDA builds): im2col, col2im and 2x2 pooling forward and backward on the GPU,
 * each beside a device-to-device cudaMemcpy moving the same bytes and beside PyTorch
 * (unfold, fold, max_pool2d, avg_pool2d and their backward) on the same shapes. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef enum { IM2COL, COL2IM, MAX_FWD, MAX_BWD, AVG_FWD, AVG_BWD } conv_op;

static const char *const op_keys[] = {"im2col",  "col2im",  "max_fwd",
                                      "max_bwd", "avg_fwd", "avg_bwd"};

/* A pooling case of op (its label's words: "max fwd" and so on) over n x c x s x s images,
 * 2x2 windows of stride 2, labelled by the same numbers. */
#define POOL_CASE(words, op, n, c, s)                                    \
    {                                                                    \
        words " " #n "x" #c "x" #s "x" #s " 2x2/2", op, n, c, s, 2, 0, 2 \
    }
/* The four pooling cases of a shape: max and average, forward and backward. */
#define POOL_2X2(n, c, s)                                                           \
    POOL_CASE("max fwd", MAX_FWD, n, c, s), POOL_CASE("max bwd", MAX_BWD, n, c, s), \
        POOL_CASE("avg fwd", AVG_FWD, n, c, s), POOL_CASE("avg bwd", AVG_BWD, n, c, s)

/* Square kernels, pads and strides, no dilation, floor rounding. */
static const struct conv_case {
    const char *label;
    conv_op op;
    int64_t num, channels, size, kernel, pad, stride;
} cases[] = {
    {"im2col 256x64x56x56 k3 p1", IM2COL, 256, 64, 56, 3, 1, 1},
    {"col2im 256x64x56x56 k3 p1", COL2IM, 256, 64, 56, 3, 1, 1},
    {"im2col 64x1x28x28 k5", IM2COL, 64, 1, 28, 5, 0, 1},
    {"im2col 64x20x12x12 k5", IM2COL, 64, 20, 12, 5, 0, 1},
    {"col2im 64x20x12x12 k5", COL2IM, 64, 20, 12, 5, 0, 1},
    POOL_2X2(64, 20, 24),
    POOL_2X2(256, 64, 56),
};
#define NUM_CASES ((int)(sizeof cases / sizeof cases[0]))

/* One " --conv OP:N,C,SIZE,KERNEL,PAD,STRIDE" per case; the script keys its figures by
 * OP and the case's index. */
void bench_conv_torch_args(char *buf, size_t size)
{
    size_t len = strlen(buf);
    for (int i = 0; i < NUM_CASES && len < size; i++) {
        const struct conv_case *c = &cases[i];
        len += (size_t)snprintf(buf + len, size - len, " --conv %s:%lld,%lld,%lld,%lld,%lld,%lld",
                                op_keys[c->op], (long long)c->num, (long long)c->channels,
                                (long long)c->size, (long long)c->kernel, (long long)c->pad,
                                (long long)c->stride);
    }
}

/* The buffers of one case: the image side (x or im, and dx), the other side (y or col,
 * and dy), argmax, and the two halves of the copy. */
typedef struct {
    const struct conv_case *c;
    blob_conv_geometry g;
    int64_t n_image, n_other;
    float *image, *image2, *other, *other2;
    int32_t *argmax;
    void *copy_src, *copy_dst;
    size_t copy_bytes;
} conv_ctx;

static int conv_run(void *ctx, int n)
{
    conv_ctx *k = ctx;
    const blob_conv_geometry *g = &k->g;
    for (int i = 0; i < n; i++)
        switch (k->c->op) {
        case IM2COL: BTRY(blob_gpu_im2col(BLOB_FLOAT32, g, k->c->num, k->image, k->other)); break;
        case COL2IM: BTRY(blob_gpu_col2im(BLOB_FLOAT32, g, k->c->num, k->other, k->image2)); break;
        case MAX_FWD:
            BTRY(blob_gpu_max_pool_forward(BLOB_FLOAT32, g, k->c->num, k->image, k->other,
                                           k->argmax));
            break;
        case MAX_BWD:
            BTRY(blob_gpu_max_pool_backward(BLOB_FLOAT32, g, k->c->num, k->other2, k->argmax,
                                            k->image2));
            break;
        case AVG_FWD:
            BTRY(blob_gpu_avg_pool_forward(BLOB_FLOAT32, g, k->c->num, k->image, k->other));
            break;
        case AVG_BWD:
            BTRY(blob_gpu_avg_pool_backward(BLOB_FLOAT32, g, k->c->num, k->other2, k->image2));
            break;
        }
    return 0;
}

static int copy_run(void *ctx, int n)
{
    conv_ctx *k = ctx;
    for (int i = 0; i < n; i++) {
        cudaError_t e =
            cudaMemcpyAsync(k->copy_dst, k->copy_src, k->copy_bytes, cudaMemcpyDeviceToDevice, 0);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return bench_fail("cudaMemcpyAsync: %s", cudaGetErrorName(e));
        }
    }
    return 0;
}

/* n floats of device memory holding values in [-1, 1) (never all zero). */
static int device_random(float **out, int64_t n, uint64_t seed)
{
    *out = NULL;
    float *h = malloc((size_t)n * sizeof(float));
    if (!h)
        return bench_fail("malloc of %lld floats failed", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((double)(seed >> 11) * (2.0 / 9007199254740992.0) - 1);
    }
    cudaError_t e = cudaMalloc((void **)out, (size_t)n * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpy(*out, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return bench_fail("device buffer of %lld floats: %s", (long long)n, cudaGetErrorName(e));
    }
    return 0;
}

static int device_alloc(void **out, size_t bytes)
{
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return bench_fail("cudaMalloc(%zu): %s", bytes, cudaGetErrorName(e));
    }
    return 0;
}

/* Bytes an operation moves at least: every input read once, every output written once. */
static double bytes_moved(const conv_ctx *k)
{
    const double img = (double)k->n_image * 4, oth = (double)k->n_other * 4;
    switch (k->c->op) {
    case MAX_FWD: return img + 2 * oth; /* x; y and argmax */
    case MAX_BWD: return 2 * oth + img; /* dy and argmax; dx */
    default: return img + oth;
    }
}

static int conv_setup(conv_ctx *k)
{
    const struct conv_case *c = k->c;
    k->g = (blob_conv_geometry){c->channels, c->size, c->size, c->kernel,
                                c->kernel,   c->pad,  c->pad,  c->stride,
                                c->stride,   1,       1,       BLOB_ROUND_FLOOR};
    int64_t oh, ow;
    BTRY(c->op == IM2COL || c->op == COL2IM ? blob_conv_output_size(&k->g, &oh, &ow)
                                            : blob_pool_output_size(&k->g, &oh, &ow));
    const bool conv = c->op == IM2COL || c->op == COL2IM;
    k->n_image = c->num * c->channels * c->size * c->size;
    k->n_other = (conv ? c->channels * c->kernel * c->kernel : c->channels) * c->num * oh * ow;
    if (device_random(&k->image, k->n_image, 1) || device_random(&k->other2, k->n_other, 2) ||
        device_alloc((void **)&k->image2, (size_t)k->n_image * 4) ||
        device_alloc((void **)&k->other, (size_t)k->n_other * 4) ||
        device_alloc((void **)&k->argmax, (size_t)k->n_other * 4))
        return -1;
    /* col2im reads a real column matrix, max backward real argmax */
    if (c->op == COL2IM)
        BTRY(blob_gpu_im2col(BLOB_FLOAT32, &k->g, c->num, k->image, k->other));
    if (c->op == MAX_BWD)
        BTRY(blob_gpu_max_pool_forward(BLOB_FLOAT32, &k->g, c->num, k->image, k->other, k->argmax));
    k->copy_bytes = (size_t)(bytes_moved(k) / 2);
    return device_alloc(&k->copy_src, k->copy_bytes) || device_alloc(&k->copy_dst, k->copy_bytes)
               ? -1
               : 0;
}

static void conv_teardown(conv_ctx *k)
{
    void *p[] = {k->image, k->image2, k->other, k->other2, k->argmax, k->copy_src, k->copy_dst};
    for (size_t i = 0; i < COUNT(p); i++)
        cudaFree(p[i]);
    (void)cudaGetLastError();
}

/* us for the operation and the copy, in the order op, copy, copy, op (each the mean of
 * its two medians), GB/s, the ratio and torch's us. */
static int conv_row(int index, double *v)
{
    conv_ctx k = {.c = &cases[index]};
    int rc = conv_setup(&k);
    const double bytes = rc == 0 ? bytes_moved(&k) : 0;
    const int batch = bytes > 1e9 ? 3 : bytes > 1e8 ? 10 : 200, reps = bytes > 1e9 ? 7 : 11;
    bench_op op = {conv_run, NULL, &k}, copy = {copy_run, NULL, &k};
    double op_ns, copy_ns;
    if (rc == 0)
        rc = bench_time_pair(&op, &copy, batch, reps, &bench_gpu_events, &op_ns, &copy_ns);
    conv_teardown(&k);
    if (rc)
        return rc;
    v[0] = op_ns / 1e3;
    v[1] = bytes / (v[0] * 1e3);
    v[2] = copy_ns / 1e3;
    v[3] = v[2] / v[0];
    v[4] = torch_ref(op_keys[cases[index].op], index) / 1e3;
    return 0;
}

void bench_gpu_conv(void)
{
    static const char *const cols[] = {"blob us", "blob GB/s", "copy us", "blob/copy", "torch us"};
    report_section("C", "Convolution math on the GPU, float32, CUDA events", 5, cols);
    for (int i = 0; i < NUM_CASES; i++) {
        double v[5];
        if (conv_row(i, v) != 0)
            report_error(cases[i].label, bench_error());
        else
            report_row(cases[i].label, v, i == 0 ? GOAL_IM2COL : GOAL_NONE, v[3] >= 0.70);
    }
    report_note("GB/s: bytes read once + written once over time (im2col: image + columns, "
                "9x the image for k3); copy: cudaMemcpyAsync D2D moving the same bytes");
    report_note("blob/copy: copy time over blob time (1 = copy speed); blob and copy timed "
                "blob, copy, copy, blob, each the mean of two medians");
    report_note("torch: F.unfold, F.fold, max_pool2d (+ indices), avg_pool2d "
                "(count_include_pad) and their aten backward ops, float32");
}
