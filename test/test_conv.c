/* Convolution and pooling math: output sizes; im2col against a direct gather, convolution
 * through im2col + GEMM against a direct 7-loop convolution (batched and per image, with
 * groups), col2im as the adjoint of im2col; max and average pooling forward and backward
 * against direct loops (padding, strides, ceil mode, ties, NaN); every op on bfloat16 and
 * float16 against float32 on the host; the GPU against the host on random data in every
 * float dtype, past 2^31 elements too; exact error codes for bad and integer dtypes, bad
 * geometry, NULL arrays and overflowing sizes on both sides. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "testutil.h"

/* n elements of dtype (at least one byte, so that empty arrays are not NULL). */
static void *alloc_dt(blob_dtype dt, int64_t n)
{
    return calloc((size_t)(n > 0 ? n : 1), blob_dtype_size(dt));
}

/* n random values in [lo, hi) as dtype, with their values as doubles in *v. */
static void *random_dt(blob_dtype dt, int64_t n, double lo, double hi, double **v)
{
    void *p = alloc_dt(dt, n);
    test_fill(dt, p, n, lo, hi);
    *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        (*v)[i] = test_get(dt, p, i);
    return p;
}

/* n random small integers of {0, 1, 2}: many ties in every window. */
static void *ties_dt(blob_dtype dt, int64_t n, double **v)
{
    void *p = random_dt(dt, n, 0, 1, v);
    for (int64_t i = 0; i < n; i++) {
        test_put(dt, p, i, floor(3 * (*v)[i]));
        (*v)[i] = test_get(dt, p, i);
    }
    return p;
}

static void fill_nan(blob_dtype dt, void *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        test_put(dt, p, i, NAN);
}

/* "CxHxW k.. p.. s.. d.. floor|ceil" for messages. */
static const char *describe(const blob_conv_geometry *g, char buf[160])
{
    snprintf(buf, 160, "%lldx%lldx%lld k%lldx%lld p%lldx%lld s%lldx%lld d%lldx%lld %s",
             (long long)g->channels, (long long)g->height, (long long)g->width,
             (long long)g->kernel_h, (long long)g->kernel_w, (long long)g->pad_h,
             (long long)g->pad_w, (long long)g->stride_h, (long long)g->stride_w,
             (long long)g->dilation_h, (long long)g->dilation_w,
             g->rounding == BLOB_ROUND_CEIL ? "ceil" : "floor");
    return buf;
}

#define GEO(c, h, w, kh, kw, ph, pw, sh, sw, dh, dw, r)         \
    {                                                           \
        c, h, w, kh, kw, ph, pw, sh, sw, dh, dw, BLOB_ROUND_##r \
    }

/* A geometry with a batch size. */
typedef struct {
    blob_conv_geometry g;
    int64_t num;
} geo_case;

/* Geometries for im2col and convolution. */
static const geo_case conv_cases[] = {
    {GEO(3, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, FLOOR), 2},
    {GEO(2, 9, 8, 3, 2, 0, 1, 2, 3, 1, 1, FLOOR), 3},
    {GEO(2, 10, 9, 3, 3, 2, 1, 1, 2, 2, 3, FLOOR), 2},
    {GEO(1, 5, 5, 5, 5, 0, 0, 1, 1, 1, 1, FLOOR), 3},
    {GEO(4, 6, 7, 2, 2, 0, 0, 2, 2, 1, 1, CEIL), 2},
    {GEO(2, 4, 4, 2, 2, 3, 3, 2, 2, 1, 1, FLOOR), 2}, /* windows wholly in the padding */
    {GEO(2, 3, 4, 2, 3, 1, 2, 3, 1, 1, 1, CEIL), 1},
    {GEO(1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, FLOOR), 4},
    {GEO(2, 0, 3, 1, 1, 1, 0, 1, 1, 1, 1, FLOOR), 2},   /* an empty plane: all padding */
    {GEO(4, 12, 12, 5, 5, 0, 0, 1, 1, 1, 1, FLOOR), 5}, /* LeNet's second convolution */
};
#define N_CONV_CASES ((int)(sizeof conv_cases / sizeof conv_cases[0]))

/* Pooling windows (pad below the kernel, no dilation). */
static const geo_case pool_cases[] = {
    {GEO(3, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, FLOOR), 2},
    {GEO(2, 9, 8, 3, 2, 0, 1, 2, 3, 1, 1, FLOOR), 3},
    {GEO(4, 6, 7, 2, 2, 0, 0, 2, 2, 1, 1, CEIL), 2},
    {GEO(3, 5, 5, 3, 3, 1, 1, 2, 2, 1, 1, CEIL), 2},
    {GEO(3, 8, 7, 3, 3, 1, 1, 2, 2, 1, 1, FLOOR), 2},
    {GEO(2, 3, 4, 2, 3, 1, 2, 3, 1, 1, 1, CEIL), 2},
    {GEO(2, 5, 5, 1, 1, 0, 0, 3, 3, 1, 1, CEIL), 1}, /* stride beyond the kernel */
    {GEO(1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, FLOOR), 3},
    {GEO(5, 24, 24, 2, 2, 0, 0, 2, 2, 1, 1, FLOOR), 4}, /* LeNet */
};
#define N_POOL_CASES ((int)(sizeof pool_cases / sizeof pool_cases[0]))

/* The sizes of a call on num images of g, of im2col or (pool) of pooling: the output
 * plane, the image side's elements, and the other side's, rows (channels x taps, or
 * channels) of cols (num x plane). */
typedef struct {
    int64_t oh, ow, n_image, rows, cols, n_other;
} call_sizes;

static call_sizes sizes_of(const blob_conv_geometry *g, int64_t num, bool pool)
{
    call_sizes z;
    ck_ok(pool ? blob_pool_output_size(g, &z.oh, &z.ow) : blob_conv_output_size(g, &z.oh, &z.ow));
    z.n_image = num * g->channels * g->height * g->width;
    z.rows = pool ? g->channels : g->channels * g->kernel_h * g->kernel_w;
    z.cols = num * z.oh * z.ow;
    z.n_other = z.rows * z.cols;
    return z;
}

/* ---- Output sizes ---- */

START_TEST(test_output_sizes)
{
    static const struct {
        blob_conv_geometry g;
        int64_t oh, ow;
    } cases[] = {
        {GEO(64, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1, FLOOR), 56, 56},
        {GEO(1, 28, 28, 5, 5, 0, 0, 1, 1, 1, 1, FLOOR), 24, 24},
        {GEO(1, 24, 24, 2, 2, 0, 0, 2, 2, 1, 1, FLOOR), 12, 12},
        {GEO(1, 7, 7, 2, 2, 0, 0, 2, 2, 1, 1, FLOOR), 3, 3},
        {GEO(1, 7, 7, 2, 2, 0, 0, 2, 2, 1, 1, CEIL), 4, 4},
        {GEO(1, 112, 112, 3, 3, 1, 1, 2, 2, 1, 1, FLOOR), 56, 56},
        {GEO(1, 112, 112, 3, 3, 1, 1, 2, 2, 1, 1, CEIL), 57, 57}, /* Caffe's ResNet pool */
        {GEO(1, 5, 5, 2, 2, 1, 1, 2, 2, 1, 1, CEIL), 3, 3},       /* a 4th would start at 5 */
        {GEO(1, 5, 5, 1, 1, 0, 0, 3, 3, 1, 1, CEIL), 2, 2},       /* and here at 6 */
        {GEO(1, 10, 9, 3, 3, 2, 1, 1, 2, 2, 3, FLOOR), 10, 3},
        {GEO(1, 4, 4, 2, 2, 3, 3, 2, 2, 1, 1, FLOOR), 5, 5},
        {GEO(1, 4, 4, 2, 2, 3, 3, 2, 2, 1, 1, CEIL), 4, 4}, /* PyTorch drops the 5th */
        {GEO(1, 0, 3, 1, 1, 1, 0, 1, 1, 1, 1, FLOOR), 2, 3},
        /* past INT_MAX: sizes are int64 throughout */
        {GEO(1, 3000000000LL, 1, 3, 1, 1, 0, 1, 1, 1, 1, FLOOR), 3000000000LL, 1},
        {GEO(1, 5, 5, 2, 2, 0, 0, INT64_MAX, INT64_MAX, 1, 1, CEIL), 1, 1},
        {GEO(1, INT64_MAX, 7, 1, 1, 0, 0, 1, 1, 1, 1, FLOOR), INT64_MAX, 7},
    };
    char buf[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t oh = -1, ow = -1;
        ck_ok(blob_conv_output_size(&cases[i].g, &oh, &ow));
        ck_assert_msg(oh == cases[i].oh && ow == cases[i].ow,
                      "%s: %lld x %lld, expected %lld x %lld", describe(&cases[i].g, buf),
                      (long long)oh, (long long)ow, (long long)cases[i].oh, (long long)cases[i].ow);
    }
    /* pooling adds its own rules, and otherwise agrees */
    for (int i = 0; i < N_POOL_CASES; i++) {
        int64_t ch, cw, ph, pw;
        ck_ok(blob_conv_output_size(&pool_cases[i].g, &ch, &cw));
        ck_ok(blob_pool_output_size(&pool_cases[i].g, &ph, &pw));
        ck_assert(ch == ph && cw == pw);
    }
}
END_TEST

/* Every bad geometry, with its exact code and a word of its message; outputs untouched. */
START_TEST(test_bad_geometry)
{
    static const struct {
        blob_conv_geometry g;
        bool pool;
        blob_status st;
        const char *says;
    } cases[] = {
        {GEO(-1, 5, 5, 3, 3, 0, 0, 1, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "negative input"},
        {GEO(1, -5, 5, 3, 3, 0, 0, 1, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "negative input"},
        {GEO(1, 5, -1, 3, 3, 0, 0, 1, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "negative input"},
        {GEO(1, 5, 5, 0, 3, 0, 0, 1, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "at least 1"},
        {GEO(1, 5, 5, 3, -3, 0, 0, 1, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "at least 1"},
        {GEO(1, 5, 5, 3, 3, 0, 0, 0, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "stride"},
        {GEO(1, 5, 5, 3, 3, 0, 0, 1, -2, 1, 1, FLOOR), false, BLOB_EINVAL, "stride"},
        {GEO(1, 5, 5, 3, 3, 0, 0, 1, 1, 0, 1, FLOOR), false, BLOB_EINVAL, "dilation"},
        {GEO(1, 5, 5, 3, 3, 0, 0, 1, 1, 1, -1, FLOOR), false, BLOB_EINVAL, "dilation"},
        {GEO(1, 5, 5, 3, 3, -1, 0, 1, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "negative pad"},
        {GEO(1, 5, 5, 3, 3, 0, -1, 1, 1, 1, 1, FLOOR), false, BLOB_EINVAL, "negative pad"},
        {{1, 5, 5, 3, 3, 0, 0, 1, 1, 1, 1, (blob_rounding)2}, false, BLOB_EINVAL, "rounding"},
        {{1, 5, 5, 3, 3, 0, 0, 1, 1, 1, 1, (blob_rounding)-1}, false, BLOB_EINVAL, "rounding"},
        {GEO(1, 5, 5, 6, 3, 0, 0, 1, 1, 1, 1, FLOOR), false, BLOB_ESHAPE,
         "height: kernel extent 6"},
        {GEO(1, 5, 5, 3, 8, 1, 1, 1, 1, 1, 1, FLOOR), false, BLOB_ESHAPE, "width: kernel extent 8"},
        {GEO(1, 5, 5, 3, 3, 0, 0, 1, 1, 3, 1, FLOOR), false, BLOB_ESHAPE, "extent 7"},
        {GEO(1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, FLOOR), false, BLOB_ESHAPE, "padded input 0"},
        {GEO(1, 5, 5, 3, 3, INT64_MAX / 2, 0, 1, 1, 1, 1, FLOOR), false, BLOB_EOVERFLOW,
         "overflow"},
        {GEO(1, 5, 5, 3, INT64_MAX, 0, 0, 1, 1, 1, 2, FLOOR), false, BLOB_EOVERFLOW, "overflow"},
        {GEO(1, 5, 5, 3, 3, 0, 0, 1, 1, 2, 1, FLOOR), true, BLOB_EINVAL, "dilation 1"},
        {GEO(1, 5, 5, 2, 2, 2, 0, 1, 1, 1, 1, FLOOR), true, BLOB_EINVAL, "below the kernel"},
        {GEO(1, 5, 5, 2, 2, 0, 2, 1, 1, 1, 1, FLOOR), true, BLOB_EINVAL, "below the kernel"},
        {GEO(1, 0, 5, 2, 2, 1, 1, 1, 1, 1, 1, FLOOR), true, BLOB_ESHAPE, "empty"},
        {GEO(1, 5, 5, 6, 6, 0, 0, 1, 1, 1, 1, FLOOR), true, BLOB_ESHAPE, "extent 6"},
    };
    char buf[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t oh = -7, ow = -7;
        blob_status st = cases[i].pool ? blob_pool_output_size(&cases[i].g, &oh, &ow)
                                       : blob_conv_output_size(&cases[i].g, &oh, &ow);
        ck_assert_msg(st == cases[i].st, "%s: %s (%s), expected %s", describe(&cases[i].g, buf),
                      blob_status_name(st), blob_last_error(), blob_status_name(cases[i].st));
        ck_assert_msg(strstr(blob_last_error(), cases[i].says), "%s: \"%s\" lacks \"%s\"",
                      describe(&cases[i].g, buf), blob_last_error(), cases[i].says);
        ck_assert(oh == -7 && ow == -7);
        if (cases[i].st == BLOB_EINVAL && !cases[i].pool) { /* checked before pooling's */
            ck_status(blob_pool_output_size(&cases[i].g, &oh, &ow), cases[i].st);
            ck_assert(oh == -7 && ow == -7);
        }
    }
    blob_conv_geometry g = GEO(1, 5, 5, 3, 3, 0, 0, 1, 1, 1, 1, FLOOR);
    int64_t o;
    ck_status(blob_conv_output_size(NULL, &o, &o), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "geometry is NULL"));
    ck_status(blob_conv_output_size(&g, NULL, &o), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "out_h is NULL"));
    ck_status(blob_pool_output_size(&g, &o, NULL), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "out_w is NULL"));
    ck_status(blob_pool_output_size(NULL, NULL, NULL), BLOB_EINVAL);
}
END_TEST

/* ---- References, in double ---- */

/* The image cell that column entry (row r, column q) copies, or -1 for padding. */
static int64_t source_cell(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t r,
                           int64_t q)
{
    const int64_t j = r % g->kernel_w, i = r / g->kernel_w % g->kernel_h;
    const int64_t c = r / (g->kernel_w * g->kernel_h), n = q / (oh * ow);
    const int64_t y = q / ow % oh, x = q % ow;
    const int64_t h = y * g->stride_h - g->pad_h + i * g->dilation_h;
    const int64_t w = x * g->stride_w - g->pad_w + j * g->dilation_w;
    if (h < 0 || h >= g->height || w < 0 || w >= g->width)
        return -1;
    return ((n * g->channels + c) * g->height + h) * g->width + w;
}

/* A 7-loop direct convolution of x (num x C x H x W) with weights wt (M x C/G x kh x kw)
 * in G groups: out is num x M x oh x ow. */
static void direct_conv(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num, int64_t M,
                        int64_t G, const double *x, const double *wt, double *out)
{
    const int64_t cg = g->channels / G, mg = M / G;
    for (int64_t n = 0; n < num; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t y = 0; y < oh; y++)
                for (int64_t xo = 0; xo < ow; xo++) {
                    double sum = 0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < g->kernel_h; i++)
                            for (int64_t j = 0; j < g->kernel_w; j++) {
                                const int64_t h = y * g->stride_h - g->pad_h + i * g->dilation_h;
                                const int64_t w = xo * g->stride_w - g->pad_w + j * g->dilation_w;
                                if (h < 0 || h >= g->height || w < 0 || w >= g->width)
                                    continue;
                                const int64_t ci = m / mg * cg + c;
                                sum += wt[((m * cg + c) * g->kernel_h + i) * g->kernel_w + j] *
                                       x[((n * g->channels + ci) * g->height + h) * g->width + w];
                            }
                    out[((n * M + m) * oh + y) * ow + xo] = sum;
                }
}

/* The pooling window (py, px) of an axis pair, clipped, and its divisor: the cells of
 * the unclipped window that lie within the padded plane, counted one by one. */
static void ref_window(const blob_conv_geometry *g, int64_t py, int64_t px, int64_t *h0,
                       int64_t *h1, int64_t *w0, int64_t *w1, int64_t *divisor)
{
    int64_t rows = 0, cols = 0;
    *h0 = INT64_MAX, *h1 = 0, *w0 = INT64_MAX, *w1 = 0;
    for (int64_t i = 0; i < g->kernel_h; i++) {
        const int64_t h = py * g->stride_h - g->pad_h + i;
        rows += h < g->height + g->pad_h;
        if (h >= 0 && h < g->height) {
            *h0 = h < *h0 ? h : *h0;
            *h1 = h + 1;
        }
    }
    for (int64_t j = 0; j < g->kernel_w; j++) {
        const int64_t w = px * g->stride_w - g->pad_w + j;
        cols += w < g->width + g->pad_w;
        if (w >= 0 && w < g->width) {
            *w0 = w < *w0 ? w : *w0;
            *w1 = w + 1;
        }
    }
    *divisor = rows * cols;
}

/* Max and average pooling forward and backward by direct loops: y, argmax (as int64;
 * the first maximum, NaN winning), avg; dx_max and dx_avg scatter dy back. */
static void ref_pool(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num,
                     const double *x, const double *dy, double *ymax, int64_t *argmax, double *yavg,
                     double *dx_max, double *dx_avg)
{
    const int64_t plane = g->height * g->width;
    memset(dx_max, 0, (size_t)(num * g->channels * plane) * sizeof(double));
    memset(dx_avg, 0, (size_t)(num * g->channels * plane) * sizeof(double));
    for (int64_t p = 0; p < num * g->channels; p++)
        for (int64_t py = 0; py < oh; py++)
            for (int64_t px = 0; px < ow; px++) {
                int64_t h0, h1, w0, w1, divisor, o = (p * oh + py) * ow + px, best = -1;
                ref_window(g, py, px, &h0, &h1, &w0, &w1, &divisor);
                ck_assert(h0 < h1 && w0 < w1);
                double sum = 0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        const double v = x[p * plane + h * g->width + w];
                        sum += v;
                        if (best < 0 || (isnan(v) && !isnan(x[p * plane + best])) ||
                            v > x[p * plane + best])
                            best = h * g->width + w;
                    }
                ymax[o] = x[p * plane + best];
                argmax[o] = best;
                yavg[o] = sum / (double)divisor;
                dx_max[p * plane + best] += dy[o];
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        dx_avg[p * plane + h * g->width + w] += dy[o] / (double)divisor;
            }
}

/* ---- Host ---- */

/* im2col against the direct gather, with every entry written over NaN. */
static void check_im2col(blob_dtype dt, const blob_conv_geometry *g, int64_t num)
{
    char buf[160];
    const call_sizes z = sizes_of(g, num, false);
    const int64_t oh = z.oh, ow = z.ow, n_im = z.n_image, rows = z.rows, cols = z.cols;
    double *xv;
    void *x = random_dt(dt, n_im, -1, 1, &xv), *col = alloc_dt(dt, rows * cols);
    fill_nan(dt, col, rows * cols);
    ck_ok(blob_cpu_im2col(dt, g, num, x, col));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            const int64_t s = source_cell(g, oh, ow, r, q);
            const double want = s < 0 ? 0 : xv[s];
            ck_assert_msg(test_get(dt, col, r * cols + q) == want,
                          "%s %s num %lld: col[%lld][%lld] = %g, expected %g", test_dtype_name(dt),
                          describe(g, buf), (long long)num, (long long)r, (long long)q,
                          test_get(dt, col, r * cols + q), want);
        }
    free(x);
    free(xv);
    free(col);
}

/* check on every conv_cases geometry, in the dtype i (a test's loop index), on data seeded
 * with seed + i. */
static void each_conv_case(uint64_t seed, int i,
                           void (*check)(blob_dtype, const blob_conv_geometry *, int64_t))
{
    test_seed(seed + (uint64_t)i);
    for (int c = 0; c < N_CONV_CASES; c++)
        check((blob_dtype)i, &conv_cases[c].g, conv_cases[c].num);
}

START_TEST(test_cpu_im2col) { each_conv_case(101, _i, check_im2col); }
END_TEST

/* Convolution through im2col + GEMM against the direct convolution, in `groups` groups:
 * once over the whole batch (one GEMM per group, output channel-major) and once per
 * image (Caffe's layout, num = 1 on each image). */
static void check_conv_gemm(blob_dtype dt, const blob_conv_geometry *g, int64_t num, int64_t groups)
{
    char buf[160];
    const call_sizes z = sizes_of(g, num, false);
    const int64_t oh = z.oh, ow = z.ow, n_im = z.n_image, cols = z.cols;
    const int64_t M = 2 * groups, P = oh * ow, taps = g->kernel_h * g->kernel_w;
    const int64_t kg = g->channels / groups * taps, mg = M / groups;
    double *xv, *wv, *ref = malloc((size_t)(num * M * P) * sizeof(double));
    void *x = random_dt(dt, n_im, -1, 1, &xv), *wt = random_dt(dt, M * kg, -1, 1, &wv);
    void *col = alloc_dt(dt, g->channels * taps * cols), *out = alloc_dt(dt, M * cols);
    direct_conv(g, oh, ow, num, M, groups, xv, wv, ref);

    ck_ok(blob_cpu_im2col(dt, g, num, x, col));
    const size_t es = blob_dtype_size(dt);
    for (int64_t gi = 0; gi < groups; gi++)
        ck_ok(blob_cpu_gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, mg, cols, kg, 1.0,
                            (char *)wt + (size_t)(gi * mg * kg) * es,
                            (char *)col + (size_t)(gi * kg * cols) * es, 0.0,
                            (char *)out + (size_t)(gi * mg * cols) * es));
    for (int64_t n = 0; n < num; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t p = 0; p < P; p++) {
                const double got = test_get(dt, out, m * cols + n * P + p);
                const double want = ref[(n * M + m) * P + p];
                ck_assert_msg(fabs(got - want) <= test_tol(dt, kg) * fmax(fabs(want), 1),
                              "%s %s num %lld groups %lld (batched): out[%lld][%lld][%lld] = "
                              "%.17g, expected %.17g",
                              test_dtype_name(dt), describe(g, buf), (long long)num,
                              (long long)groups, (long long)n, (long long)m, (long long)p, got,
                              want);
            }

    const int64_t img = g->channels * g->height * g->width;
    for (int64_t n = 0; n < num; n++) {
        ck_ok(blob_cpu_im2col(dt, g, 1, (char *)x + (size_t)(n * img) * es, col));
        for (int64_t gi = 0; gi < groups; gi++)
            ck_ok(blob_cpu_gemm(dt, BLOB_NO_TRANS, BLOB_NO_TRANS, mg, P, kg, 1.0,
                                (char *)wt + (size_t)(gi * mg * kg) * es,
                                (char *)col + (size_t)(gi * kg * P) * es, 0.0,
                                (char *)out + (size_t)((n * M + gi * mg) * P) * es));
    }
    for (int64_t i = 0; i < num * M * P; i++)
        ck_assert_msg(fabs(test_get(dt, out, i) - ref[i]) <=
                          test_tol(dt, kg) * fmax(fabs(ref[i]), 1),
                      "%s %s num %lld groups %lld (per image): out[%lld] = %.17g, expected "
                      "%.17g",
                      test_dtype_name(dt), describe(g, buf), (long long)num, (long long)groups,
                      (long long)i, test_get(dt, out, i), ref[i]);
    free(x);
    free(xv);
    free(wt);
    free(wv);
    free(col);
    free(out);
    free(ref);
}

START_TEST(test_cpu_conv_gemm)
{
    test_seed(202 + (uint64_t)_i);
    for (int c = 0; c < N_CONV_CASES; c++) {
        check_conv_gemm((blob_dtype)_i, &conv_cases[c].g, conv_cases[c].num, 1);
        if (conv_cases[c].g.channels % 2 == 0)
            check_conv_gemm((blob_dtype)_i, &conv_cases[c].g, conv_cases[c].num, 2);
    }
}
END_TEST

/* col2im is the adjoint of im2col: <im2col(x), y> == <x, col2im(y)>; and it matches the
 * direct scatter of every column entry onto its source cell, writing every cell. */
static void check_col2im(blob_dtype dt, const blob_conv_geometry *g, int64_t num)
{
    char buf[160];
    const call_sizes z = sizes_of(g, num, false);
    const int64_t oh = z.oh, ow = z.ow, n_im = z.n_image, rows = z.rows, cols = z.cols;
    double *xv, *yv, *ref = calloc((size_t)(n_im + 1), sizeof(double));
    void *x = random_dt(dt, n_im, -1, 1, &xv), *y = random_dt(dt, rows * cols, -1, 1, &yv);
    void *col = alloc_dt(dt, rows * cols), *im = alloc_dt(dt, n_im);
    ck_ok(blob_cpu_im2col(dt, g, num, x, col));
    fill_nan(dt, im, n_im);
    ck_ok(blob_cpu_col2im(dt, g, num, y, im));
    double lhs = 0, rhs = 0, scale = 0;
    for (int64_t i = 0; i < rows * cols; i++) {
        lhs += test_get(dt, col, i) * yv[i];
        scale += fabs(test_get(dt, col, i) * yv[i]);
    }
    for (int64_t i = 0; i < n_im; i++)
        rhs += xv[i] * test_get(dt, im, i);
    ck_assert_msg(fabs(lhs - rhs) <= test_tol(dt, rows * cols) * fmax(scale, 1),
                  "%s %s num %lld: <im2col(x), y> = %.17g, <x, col2im(y)> = %.17g",
                  test_dtype_name(dt), describe(g, buf), (long long)num, lhs, rhs);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            const int64_t s = source_cell(g, oh, ow, r, q);
            if (s >= 0)
                ref[s] += yv[r * cols + q];
        }
    const int64_t taps = g->kernel_h * g->kernel_w;
    for (int64_t i = 0; i < n_im; i++)
        ck_assert_msg(fabs(test_get(dt, im, i) - ref[i]) <=
                          test_tol(dt, taps) * fmax(fabs(ref[i]), 1),
                      "%s %s num %lld: col2im[%lld] = %.17g, expected %.17g", test_dtype_name(dt),
                      describe(g, buf), (long long)num, (long long)i, test_get(dt, im, i), ref[i]);
    free(x);
    free(xv);
    free(y);
    free(yv);
    free(col);
    free(im);
    free(ref);
}

START_TEST(test_cpu_col2im) { each_conv_case(303, _i, check_col2im); }
END_TEST

/* Pooling forward and backward against ref_pool. Data: random, or ties (values of
 * {0, 1, 2}), or random with NaN sprinkled in. */
typedef enum { DATA_RANDOM, DATA_TIES, DATA_NAN } data_kind;

static void check_pool(blob_dtype dt, const blob_conv_geometry *g, int64_t num, data_kind kind)
{
    char buf[160];
    const call_sizes z = sizes_of(g, num, true);
    const int64_t oh = z.oh, ow = z.ow, n_x = z.n_image, n_y = z.n_other;
    double *xv, *dyv;
    void *x = kind == DATA_TIES ? ties_dt(dt, n_x, &xv) : random_dt(dt, n_x, -1, 1, &xv);
    if (kind == DATA_NAN)
        for (int64_t i = 0; i < n_x; i += 7) {
            test_put(dt, x, i, NAN);
            xv[i] = NAN;
        }
    void *dy = random_dt(dt, n_y, -1, 1, &dyv);
    double *ymax = malloc((size_t)n_y * sizeof(double));
    double *yavg = malloc((size_t)n_y * sizeof(double));
    double *dxm = malloc((size_t)n_x * sizeof(double)), *dxa = malloc((size_t)n_x * sizeof(double));
    int64_t *am = malloc((size_t)n_y * sizeof(int64_t));
    ref_pool(g, oh, ow, num, xv, dyv, ymax, am, yavg, dxm, dxa);

    void *y = alloc_dt(dt, n_y), *dx = alloc_dt(dt, n_x);
    int32_t *argmax = calloc((size_t)n_y, sizeof(int32_t));
    fill_nan(dt, y, n_y);
    ck_ok(blob_cpu_max_pool_forward(dt, g, num, x, y, argmax));
    const char *what = kind == DATA_TIES ? "ties" : kind == DATA_NAN ? "NaN" : "random";
    for (int64_t i = 0; i < n_y; i++) {
        const double v = test_get(dt, y, i);
        ck_assert_msg(argmax[i] == am[i] && (v == ymax[i] || (isnan(v) && isnan(ymax[i]))),
                      "%s %s num %lld %s: max[%lld] = %g at %d, expected %g at %lld",
                      test_dtype_name(dt), describe(g, buf), (long long)num, what, (long long)i, v,
                      argmax[i], ymax[i], (long long)am[i]);
    }
    fill_nan(dt, dx, n_x);
    ck_ok(blob_cpu_max_pool_backward(dt, g, num, dy, argmax, dx));
    const int64_t overlap = (g->kernel_h / g->stride_h + 1) * (g->kernel_w / g->stride_w + 1);
    for (int64_t i = 0; i < n_x; i++)
        ck_assert_msg(
            fabs(test_get(dt, dx, i) - dxm[i]) <= test_tol(dt, overlap) * fmax(fabs(dxm[i]), 1),
            "%s %s num %lld %s: max backward dx[%lld] = %.17g, expected %.17g", test_dtype_name(dt),
            describe(g, buf), (long long)num, what, (long long)i, test_get(dt, dx, i), dxm[i]);
    if (kind != DATA_NAN) {
        fill_nan(dt, y, n_y);
        ck_ok(blob_cpu_avg_pool_forward(dt, g, num, x, y));
        const int64_t taps = g->kernel_h * g->kernel_w;
        for (int64_t i = 0; i < n_y; i++)
            ck_assert_msg(
                fabs(test_get(dt, y, i) - yavg[i]) <= test_tol(dt, taps) * fmax(fabs(yavg[i]), 1),
                "%s %s num %lld %s: avg[%lld] = %.17g, expected %.17g", test_dtype_name(dt),
                describe(g, buf), (long long)num, what, (long long)i, test_get(dt, y, i), yavg[i]);
        fill_nan(dt, dx, n_x);
        ck_ok(blob_cpu_avg_pool_backward(dt, g, num, dy, dx));
        for (int64_t i = 0; i < n_x; i++)
            ck_assert_msg(fabs(test_get(dt, dx, i) - dxa[i]) <=
                              test_tol(dt, overlap) * fmax(fabs(dxa[i]), 1),
                          "%s %s num %lld %s: avg backward dx[%lld] = %.17g, expected %.17g",
                          test_dtype_name(dt), describe(g, buf), (long long)num, what, (long long)i,
                          test_get(dt, dx, i), dxa[i]);
    }
    free(x);
    free(xv);
    free(dy);
    free(dyv);
    free(ymax);
    free(yavg);
    free(dxm);
    free(dxa);
    free(am);
    free(y);
    free(dx);
    free(argmax);
}

START_TEST(test_cpu_pool)
{
    test_seed(404 + (uint64_t)_i);
    for (int c = 0; c < N_POOL_CASES; c++)
        for (int k = DATA_RANDOM; k <= DATA_NAN; k++)
            check_pool((blob_dtype)_i, &pool_cases[c].g, pool_cases[c].num, (data_kind)k);
}
END_TEST

/* A handcrafted plane: 4x4, 2x2 windows of stride 2, with a tie in the first window. */
START_TEST(test_cpu_pool_by_hand)
{
    const float x[16] = {1, 3, 0, 2, 3, 2, 5, -1, -4, -2, 7, 7, -3, -1, 7, 6};
    blob_conv_geometry g = GEO(1, 4, 4, 2, 2, 0, 0, 2, 2, 1, 1, FLOOR);
    float y[4], dx[16];
    int32_t am[4];
    ck_ok(blob_cpu_max_pool_forward(BLOB_FLOAT32, &g, 1, x, y, am));
    const float ymax[4] = {3, 5, -1, 7};
    const int32_t amax[4] = {1, 6, 13, 10};
    for (int i = 0; i < 4; i++)
        ck_assert(y[i] == ymax[i] && am[i] == amax[i]);
    const float dy[4] = {1, 2, 3, 4};
    ck_ok(blob_cpu_max_pool_backward(BLOB_FLOAT32, &g, 1, dy, am, dx));
    const float dxw[16] = {0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 3, 0, 0};
    for (int i = 0; i < 16; i++)
        ck_assert_msg(dx[i] == dxw[i], "dx[%d] = %g", i, dx[i]);
    /* averages with one row and column of padding, 3x3 windows of stride 2, ceil mode:
     * Caffe's divisor counts padding up to the padded border */
    blob_conv_geometry a = GEO(1, 4, 4, 3, 3, 1, 1, 2, 2, 1, 1, CEIL);
    int64_t oh, ow;
    ck_ok(blob_pool_output_size(&a, &oh, &ow));
    ck_assert(oh == 3 && ow == 3);
    float ya[9];
    ck_ok(blob_cpu_avg_pool_forward(BLOB_FLOAT32, &a, 1, x, ya));
    ck_assert_float_eq_tol(ya[0], (1 + 3 + 3 + 2) / 9.0f, 1e-6f);
    /* window (0, 2) covers columns 3..5 of which 3 and 4 lie inside the padded width */
    ck_assert_float_eq_tol(ya[2], (2 - 1) / 6.0f, 1e-6f);
    ck_assert_float_eq_tol(ya[8], 6 / 4.0f, 1e-6f);
    /* an argmax outside its window contributes nothing */
    int32_t bad[4] = {5, 6, -1, 1 << 30};
    ck_ok(blob_cpu_max_pool_backward(BLOB_FLOAT32, &g, 1, dy, bad, dx));
    for (int i = 0; i < 16; i++)
        ck_assert_msg(dx[i] == (i == 5 ? 1 : i == 6 ? 2 : 0), "dx[%d] = %g", i, dx[i]);
}
END_TEST

/* ---- The 16-bit floats on the host, against float32 on the same values ---- */

/* n random non-zero values of dt (magnitudes in [1/8, 1), either sign), and their
 * float32 values (exact) in *wide. */
static void *half_values(blob_dtype dt, int64_t n, float **wide)
{
    double *v;
    void *h = random_dt(dt, n, 0.125, 1, &v);
    for (int64_t i = 0; i < n; i++)
        if (test_uniform(0, 1) < 0.5)
            test_put(dt, h, i, -v[i]);
    free(v);
    *wide = alloc_dt(BLOB_FLOAT32, n);
    ck_ok(blob_cpu_convert(dt, BLOB_FLOAT32, n, h, *wide));
    return h;
}

/* a, of 16-bit dtype dt, is the float32 ref rounded once: within half a unit of dt in
 * the last place, relative (absolute below 1e-3, float16's subnormals). */
static void expect_rounded(blob_dtype dt, const void *a, const float *ref, int64_t n,
                           const char *what, const blob_conv_geometry *g, int64_t num)
{
    const double half_unit = test_eps(dt) / 2;
    char buf[160];
    for (int64_t i = 0; i < n; i++) {
        const double x = test_get(dt, a, i), r = ref[i];
        ck_assert_msg(fabs(x - r) <= half_unit * fmax(fabs(r), 1e-3),
                      "%s %s %s num %lld: [%lld] = %.9g, float32 %.9g", test_dtype_name(dt), what,
                      describe(g, buf), (long long)num, (long long)i, x, r);
    }
}

/* im2col and col2im of dt against float32. */
static void check_half_conv(blob_dtype dt, const blob_conv_geometry *g, int64_t num)
{
    const call_sizes z = sizes_of(g, num, false);
    float *xf, *yf, *colf = alloc_dt(BLOB_FLOAT32, z.n_other),
                    *imf = alloc_dt(BLOB_FLOAT32, z.n_image);
    void *x = half_values(dt, z.n_image, &xf), *y = half_values(dt, z.n_other, &yf);
    void *col = alloc_dt(dt, z.n_other), *im = alloc_dt(dt, z.n_image);
    ck_ok(blob_cpu_im2col(dt, g, num, x, col));
    ck_ok(blob_cpu_im2col(BLOB_FLOAT32, g, num, xf, colf));
    expect_rounded(dt, col, colf, z.n_other, "im2col", g, num);
    ck_ok(blob_cpu_col2im(dt, g, num, y, im));
    ck_ok(blob_cpu_col2im(BLOB_FLOAT32, g, num, yf, imf));
    expect_rounded(dt, im, imf, z.n_image, "col2im", g, num);
    free(xf), free(yf), free(colf), free(imf), free(x), free(y), free(col), free(im);
}

/* Max and average pooling of dt, forward and backward, against float32: the same argmax,
 * and each output its float32 value rounded once. */
static void check_half_pool(blob_dtype dt, const blob_conv_geometry *g, int64_t num)
{
    const call_sizes z = sizes_of(g, num, true);
    const int64_t n_x = z.n_image, n_y = z.n_other;
    float *xf, *dyf, *yf = alloc_dt(BLOB_FLOAT32, n_y), *dxf = alloc_dt(BLOB_FLOAT32, n_x);
    void *x = half_values(dt, n_x, &xf), *dy = half_values(dt, n_y, &dyf);
    void *y = alloc_dt(dt, n_y), *dx = alloc_dt(dt, n_x);
    int32_t *am = alloc_dt(BLOB_INT32, n_y), *amf = alloc_dt(BLOB_INT32, n_y);
    ck_ok(blob_cpu_max_pool_forward(dt, g, num, x, y, am));
    ck_ok(blob_cpu_max_pool_forward(BLOB_FLOAT32, g, num, xf, yf, amf));
    expect_rounded(dt, y, yf, n_y, "max_pool_forward", g, num);
    ck_assert(memcmp(am, amf, sizeof(int32_t) * (size_t)n_y) == 0);
    ck_ok(blob_cpu_max_pool_backward(dt, g, num, dy, am, dx));
    ck_ok(blob_cpu_max_pool_backward(BLOB_FLOAT32, g, num, dyf, amf, dxf));
    expect_rounded(dt, dx, dxf, n_x, "max_pool_backward", g, num);
    ck_ok(blob_cpu_avg_pool_forward(dt, g, num, x, y));
    ck_ok(blob_cpu_avg_pool_forward(BLOB_FLOAT32, g, num, xf, yf));
    expect_rounded(dt, y, yf, n_y, "avg_pool_forward", g, num);
    ck_ok(blob_cpu_avg_pool_backward(dt, g, num, dy, dx));
    ck_ok(blob_cpu_avg_pool_backward(BLOB_FLOAT32, g, num, dyf, dxf));
    expect_rounded(dt, dx, dxf, n_x, "avg_pool_backward", g, num);
    free(xf), free(dyf), free(yf), free(dxf), free(x), free(dy), free(y), free(dx), free(am),
        free(amf);
}

/* Every op on bfloat16 (i = 0) or float16 over every conv and pool case. */
START_TEST(test_cpu_half)
{
    const blob_dtype dt = test_halves[_i];
    test_seed(606 + (uint64_t)_i);
    for (int c = 0; c < N_CONV_CASES; c++)
        check_half_conv(dt, &conv_cases[c].g, conv_cases[c].num);
    for (int c = 0; c < N_POOL_CASES; c++)
        check_half_pool(dt, &pool_cases[c].g, pool_cases[c].num);
}
END_TEST

/* ---- Errors of the array functions, both sides ---- */

typedef struct {
    const char *name;
    bool gpu;
    __typeof__(blob_cpu_im2col) *im2col;
    __typeof__(blob_cpu_col2im) *col2im;
    __typeof__(blob_cpu_max_pool_forward) *max_fwd;
    __typeof__(blob_cpu_max_pool_backward) *max_bwd;
    __typeof__(blob_cpu_avg_pool_forward) *avg_fwd;
    __typeof__(blob_cpu_avg_pool_backward) *avg_bwd;
} side;

#define SIDE(s, on_gpu)                                                                \
    {                                                                                  \
#s, on_gpu, blob_##s##_im2col, blob_##s##_col2im, blob_##s##_max_pool_forward, \
            blob_##s##_max_pool_backward, blob_##s##_avg_pool_forward,                 \
            blob_##s##_avg_pool_backward                                               \
    }
static const side cpu_side = SIDE(cpu, false);
static const side gpu_side = SIDE(gpu, true);

enum { N_OPS = 6 };
static const char *const op_names[N_OPS] = {"im2col",           "col2im",
                                            "max_pool_forward", "max_pool_backward",
                                            "avg_pool_forward", "avg_pool_backward"};
static const int op_arrays[N_OPS] = {2, 2, 3, 3, 2, 2};

/* Op `op` of side s over g with array null_arg (-1: none) NULL and the others at buf. */
static blob_status call_op(const side *s, int op, blob_dtype dt, const blob_conv_geometry *g,
                           int64_t num, int null_arg, void *buf)
{
    void *p[3] = {buf, buf, buf};
    if (null_arg >= 0)
        p[null_arg] = NULL;
    switch (op) {
    case 0: return s->im2col(dt, g, num, p[0], p[1]);
    case 1: return s->col2im(dt, g, num, p[0], p[1]);
    case 2: return s->max_fwd(dt, g, num, p[0], p[1], p[2]);
    case 3: return s->max_bwd(dt, g, num, p[0], p[1], p[2]);
    case 4: return s->avg_fwd(dt, g, num, p[0], p[1]);
    case 5: return s->avg_bwd(dt, g, num, p[0], p[1]);
    }
    return BLOB_EINVAL;
}

static double err_buf[256]; /* zeros: valid data and argmax for small geometries */

/* Bad dtype, num, geometry, NULL arrays and overflowing sizes, refused before any GPU
 * is looked for (the same codes on both sides) and before anything is written. */
START_TEST(test_bad_arguments)
{
    const side *s = _i ? &gpu_side : &cpu_side;
    const blob_conv_geometry ok = GEO(2, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, FLOOR);
    char name[64];
    for (int op = 0; op < N_OPS; op++) {
        snprintf(name, sizeof name, "blob_%s_%s", s->name, op_names[op]);
        for (size_t i = 0; i < sizeof err_buf / sizeof err_buf[0]; i++)
            err_buf[i] = 0;
        ck_status(call_op(s, op, (blob_dtype)7, &ok, 2, -1, err_buf), BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), name), "\"%s\" lacks %s", blob_last_error(), name);
        ck_assert(strstr(blob_last_error(), "bad dtype"));
        ck_status(call_op(s, op, BLOB_INT32, &ok, 2, -1, err_buf), BLOB_ENOTSUP);
        ck_assert_msg(strstr(blob_last_error(), name) && strstr(blob_last_error(), "int32"), "%s",
                      blob_last_error());
        ck_status(call_op(s, op, BLOB_FLOAT32, &ok, -1, -1, err_buf), BLOB_EINVAL);
        ck_assert(strstr(blob_last_error(), "negative num"));
        ck_status(call_op(s, op, BLOB_FLOAT32, NULL, 2, -1, err_buf), BLOB_EINVAL);
        ck_assert(strstr(blob_last_error(), "geometry is NULL"));
        blob_conv_geometry g = ok;
        g.stride_w = 0;
        ck_status(call_op(s, op, BLOB_FLOAT64, &g, 2, -1, err_buf), BLOB_EINVAL);
        g = ok;
        g.kernel_h = 5;
        ck_status(call_op(s, op, BLOB_FLOAT64, &g, 2, -1, err_buf), BLOB_ESHAPE);
        ck_assert(strstr(blob_last_error(), "exceeds the padded input"));
        g = ok;
        g.pad_w = -1;
        ck_status(call_op(s, op, BLOB_FLOAT64, &g, 2, -1, err_buf), BLOB_EINVAL);
        for (int a = 0; a < op_arrays[op]; a++) {
            ck_status(call_op(s, op, BLOB_FLOAT64, &ok, 2, a, err_buf), BLOB_EINVAL);
            ck_assert_msg(strstr(blob_last_error(), "is NULL"), "%s", blob_last_error());
        }
        /* num * channels * height * width past the address space */
        ck_status(call_op(s, op, BLOB_FLOAT32, &ok, INT64_MAX / 8, -1, err_buf), BLOB_EOVERFLOW);
        ck_status(call_op(s, op, BLOB_FLOAT32, &ok, (int64_t)1 << 60, -1, err_buf), BLOB_EOVERFLOW);
        for (size_t i = 0; i < sizeof err_buf / sizeof err_buf[0]; i++)
            ck_assert(err_buf[i] == 0);
    }
    /* pooling's own rules */
    blob_conv_geometry g = ok;
    g.dilation_h = 2;
    for (int op = 2; op < N_OPS; op++) {
        ck_status(call_op(s, op, BLOB_FLOAT32, &g, 1, -1, err_buf), BLOB_EINVAL);
        ck_assert(strstr(blob_last_error(), "dilation 1"));
    }
    g = ok;
    g.pad_h = 2;
    for (int op = 2; op < N_OPS; op++)
        ck_status(call_op(s, op, BLOB_FLOAT32, &g, 1, -1, err_buf), BLOB_EINVAL);
}
END_TEST

/* Sizes past INT_MAX, checked on the host without memory behind them: a column matrix
 * beyond the address space, a plane that argmax cannot index, windows of a 3e9-row
 * plane (whose arrays are only named, not touched: num = 0). */
START_TEST(test_big_sizes)
{
    const side *s = _i ? &gpu_side : &cpu_side;
    /* 2^21 channels of 2^20 x 2^20 overflow the column count only */
    blob_conv_geometry g =
        GEO((int64_t)1 << 21, (int64_t)1 << 20, (int64_t)1 << 20, 3, 3, 1, 1, 1, 1, 1, 1, FLOOR);
    ck_status(s->im2col(BLOB_FLOAT32, &g, 1, err_buf, err_buf), BLOB_EOVERFLOW);
    ck_assert(strstr(blob_last_error(), "overflow"));
    ck_status(s->col2im(BLOB_FLOAT32, &g, 1, err_buf, err_buf), BLOB_EOVERFLOW);
    /* a 65536 x 65536 plane: fine for averages, too big for argmax */
    blob_conv_geometry p = GEO(1, 65536, 65536, 2, 2, 0, 0, 2, 2, 1, 1, FLOOR);
    ck_status(s->max_fwd(BLOB_FLOAT32, &p, 1, err_buf, err_buf, (int32_t *)err_buf),
              BLOB_EOVERFLOW);
    ck_assert(strstr(blob_last_error(), "argmax"));
    ck_status(s->max_bwd(BLOB_FLOAT32, &p, 1, err_buf, (int32_t *)err_buf, err_buf),
              BLOB_EOVERFLOW);
    ck_status(s->max_fwd(BLOB_FLOAT64, &p, 0, NULL, NULL, NULL), BLOB_EOVERFLOW);
    /* num = 0: nothing to do, NULL arrays allowed, whatever the plane */
    blob_status empty = s->gpu && blob_device_count() <= 0 ? BLOB_ENODEV : BLOB_OK;
    ck_status(s->avg_fwd(BLOB_FLOAT32, &p, 0, NULL, NULL), empty);
    ck_status(s->avg_bwd(BLOB_FLOAT32, &p, 0, NULL, NULL), empty);
    blob_conv_geometry tall = GEO(3, 3000000000LL, 2, 3, 1, 1, 0, 2, 1, 1, 1, FLOOR);
    for (int op = 0; op < N_OPS; op++)
        ck_status(call_op(s, op, BLOB_FLOAT32, &tall, 0, 0, NULL),
                  op == 2 || op == 3 ? BLOB_EOVERFLOW : empty);
    /* the same plane with one image needs its arrays */
    ck_status(s->im2col(BLOB_FLOAT32, &tall, 1, NULL, err_buf), BLOB_EINVAL);
    ck_assert(strstr(blob_last_error(), "im is NULL with 18000000000 elements"));
}
END_TEST

/* Empty batches and planes are fine with NULL arrays; channels = 0 too. */
START_TEST(test_empty)
{
    const side *s = _i ? &gpu_side : &cpu_side;
    blob_status expected = s->gpu && blob_device_count() <= 0 ? BLOB_ENODEV : BLOB_OK;
    blob_conv_geometry g = GEO(3, 5, 5, 2, 2, 0, 0, 1, 1, 1, 1, FLOOR);
    for (int op = 0; op < N_OPS; op++)
        for (int dt = BLOB_FLOAT32; dt <= BLOB_FLOAT16; dt++) {
            ck_status(call_op(s, op, (blob_dtype)dt, &g, 0, -1, NULL), expected);
            g.channels = 0;
            ck_status(call_op(s, op, (blob_dtype)dt, &g, 4, -1, NULL), expected);
            g.channels = 3;
        }
}
END_TEST

/* ---- The GPU side without a GPU, and without CUDA ---- */

START_TEST(test_gpu_without_gpu)
{
    test_hide_gpus();
    const blob_conv_geometry g = GEO(2, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, FLOOR);
    for (int op = 0; op < N_OPS; op++) {
        ck_status(call_op(&gpu_side, op, BLOB_FLOAT32, &g, 1, -1, err_buf), BLOB_ENODEV);
        ck_assert(strstr(blob_last_error(), "no GPU"));
    }
    test_show_gpus();
}
END_TEST

START_TEST(test_launchers_without_cuda)
{
    const blob_conv_geometry g = GEO(2, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, FLOOR);
    for (int op = 0; op < N_OPS; op++) {
        ck_status(call_op(&gpu_side, op, BLOB_FLOAT32, &g, 1, -1, err_buf), BLOB_ENODEV);
        ck_assert_msg(strstr(blob_last_error(), "built without CUDA"), "%s", blob_last_error());
    }
}
END_TEST

/* ---- Real GPU: the same operations against the host on random data ---- */

static void *dev_upload(const void *host, size_t bytes)
{
    void *d = NULL;
    ck_ok(blob__be->device_alloc(bytes ? bytes : 1, &d));
    if (bytes) {
        ck_ok(blob__be->copy_async(d, host, bytes, BLOB__H2D, blob_stream_get()));
        ck_ok(blob__be->stream_synchronize(blob_stream_get()));
    }
    return d;
}

static void dev_download(void *host, const void *d, size_t bytes)
{
    if (!bytes)
        return;
    ck_ok(blob__be->copy_async(host, d, bytes, BLOB__D2H, blob_stream_get()));
    ck_ok(blob__be->stream_synchronize(blob_stream_get()));
}

/* A device array of n elements of dtype holding NaN (0xff bytes), so that every element
 * a kernel leaves unwritten shows. */
static void *dev_poisoned(blob_dtype dt, int64_t n)
{
    void *d = NULL;
    size_t bytes = (size_t)n * blob_dtype_size(dt);
    ck_ok(blob__be->device_alloc(bytes ? bytes : 1, &d));
    if (bytes)
        ck_ok(blob__be->memset_async(d, 0xff, bytes, blob_stream_get()));
    return d;
}

/* a (host, from the GPU) against b (host reference) within tolerance t. */
static void expect_close(blob_dtype dt, const void *a, const void *b, int64_t n, double t,
                         const char *what, const blob_conv_geometry *g, int64_t num)
{
    char buf[160];
    for (int64_t i = 0; i < n; i++) {
        const double x = test_get(dt, a, i), y = test_get(dt, b, i);
        ck_assert_msg((isnan(x) && isnan(y)) || fabs(x - y) <= t * fmax(fabs(y), 1),
                      "gpu %s %s %s num %lld: [%lld] = %.17g, host %.17g", test_dtype_name(dt),
                      what, describe(g, buf), (long long)num, (long long)i, x, y);
    }
}

static void check_gpu_conv(blob_dtype dt, const blob_conv_geometry *g, int64_t num)
{
    const call_sizes z = sizes_of(g, num, false);
    const size_t es = blob_dtype_size(dt);
    const int64_t n_im = z.n_image, n_col = z.n_other;
    double *xv, *yv;
    void *x = random_dt(dt, n_im, -1, 1, &xv), *y = random_dt(dt, n_col, -1, 1, &yv);
    void *col = alloc_dt(dt, n_col), *im = alloc_dt(dt, n_im), *got = alloc_dt(dt, n_col);
    ck_ok(blob_cpu_im2col(dt, g, num, x, col));
    ck_ok(blob_cpu_col2im(dt, g, num, y, im));

    void *dx = dev_upload(x, (size_t)n_im * es), *dy = dev_upload(y, (size_t)n_col * es);
    void *dcol = dev_poisoned(dt, n_col), *dim = dev_poisoned(dt, n_im);
    ck_ok(blob_gpu_im2col(dt, g, num, dx, dcol));
    ck_ok(blob_gpu_col2im(dt, g, num, dy, dim));
    dev_download(got, dcol, (size_t)n_col * es);
    expect_close(dt, got, col, n_col, 0, "im2col", g, num);
    dev_download(got, dim, (size_t)n_im * es);
    expect_close(dt, got, im, n_im, test_tol(dt, g->kernel_h * g->kernel_w), "col2im", g, num);
    blob__be->device_free(dx);
    blob__be->device_free(dy);
    blob__be->device_free(dcol);
    blob__be->device_free(dim);
    free(x);
    free(xv);
    free(y);
    free(yv);
    free(col);
    free(im);
    free(got);
}

static void check_gpu_pool(blob_dtype dt, const blob_conv_geometry *g, int64_t num, data_kind kind)
{
    char buf[160];
    const call_sizes z = sizes_of(g, num, true);
    const size_t es = blob_dtype_size(dt);
    const int64_t n_x = z.n_image, n_y = z.n_other;
    double *xv, *dyv;
    void *x = kind == DATA_TIES ? ties_dt(dt, n_x, &xv) : random_dt(dt, n_x, -1, 1, &xv);
    for (int64_t i = 0; kind == DATA_NAN && i < n_x; i += 5)
        test_put(dt, x, i, NAN);
    void *dy = random_dt(dt, n_y, -1, 1, &dyv);
    void *y = alloc_dt(dt, n_y), *dx = alloc_dt(dt, n_x), *got = alloc_dt(dt, n_x);
    int32_t *am = calloc((size_t)n_y + 1, sizeof(int32_t)), *gam = calloc((size_t)n_y + 1, 4);
    ck_ok(blob_cpu_max_pool_forward(dt, g, num, x, y, am));

    void *d_x = dev_upload(x, (size_t)n_x * es), *d_dy = dev_upload(dy, (size_t)n_y * es);
    void *d_y = dev_poisoned(dt, n_y), *d_dx = dev_poisoned(dt, n_x);
    void *d_am = dev_poisoned(BLOB_FLOAT32, n_y);
    ck_ok(blob_gpu_max_pool_forward(dt, g, num, d_x, d_y, d_am));
    dev_download(got, d_y, (size_t)n_y * es);
    dev_download(gam, d_am, (size_t)n_y * 4);
    expect_close(dt, got, y, n_y, 0, "max_pool_forward", g, num);
    for (int64_t i = 0; i < n_y; i++)
        ck_assert_msg(gam[i] == am[i], "gpu %s %s num %lld: argmax[%lld] = %d, host %d",
                      test_dtype_name(dt), describe(g, buf), (long long)num, (long long)i, gam[i],
                      am[i]);
    const int64_t overlap = (g->kernel_h / g->stride_h + 1) * (g->kernel_w / g->stride_w + 1);
    ck_ok(blob_cpu_max_pool_backward(dt, g, num, dy, am, dx));
    ck_ok(blob_gpu_max_pool_backward(dt, g, num, d_dy, d_am, d_dx));
    dev_download(got, d_dx, (size_t)n_x * es);
    expect_close(dt, got, dx, n_x, test_tol(dt, overlap), "max_pool_backward", g, num);

    ck_ok(blob_cpu_avg_pool_forward(dt, g, num, x, y));
    ck_ok(blob__be->memset_async(d_y, 0xff, (size_t)n_y * es, blob_stream_get()));
    ck_ok(blob_gpu_avg_pool_forward(dt, g, num, d_x, d_y));
    dev_download(got, d_y, (size_t)n_y * es);
    expect_close(dt, got, y, n_y, test_tol(dt, g->kernel_h * g->kernel_w), "avg_pool_forward", g,
                 num);
    ck_ok(blob_cpu_avg_pool_backward(dt, g, num, dy, dx));
    ck_ok(blob__be->memset_async(d_dx, 0xff, (size_t)n_x * es, blob_stream_get()));
    ck_ok(blob_gpu_avg_pool_backward(dt, g, num, d_dy, d_dx));
    dev_download(got, d_dx, (size_t)n_x * es);
    expect_close(dt, got, dx, n_x, test_tol(dt, overlap), "avg_pool_backward", g, num);
    blob__be->device_free(d_x);
    blob__be->device_free(d_dy);
    blob__be->device_free(d_y);
    blob__be->device_free(d_dx);
    blob__be->device_free(d_am);
    free(x);
    free(xv);
    free(dy);
    free(dyv);
    free(y);
    free(dx);
    free(got);
    free(am);
    free(gam);
}

static void check_gpu_all(blob_dtype dt)
{
    test_seed(505 + (uint64_t)dt);
    for (int c = 0; c < N_CONV_CASES; c++)
        check_gpu_conv(dt, &conv_cases[c].g, conv_cases[c].num);
    for (int c = 0; c < N_POOL_CASES; c++)
        for (int k = DATA_RANDOM; k <= DATA_NAN; k++)
            check_gpu_pool(dt, &pool_cases[c].g, pool_cases[c].num, (data_kind)k);
    /* the bench's shapes, smaller batches */
    const blob_conv_geometry resnet = GEO(64, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1, FLOOR);
    const blob_conv_geometry lenet1 = GEO(1, 28, 28, 5, 5, 0, 0, 1, 1, 1, 1, FLOOR);
    const blob_conv_geometry pool = GEO(64, 56, 56, 2, 2, 0, 0, 2, 2, 1, 1, FLOOR);
    check_gpu_conv(dt, &resnet, 2);
    check_gpu_conv(dt, &lenet1, 9);
    check_gpu_pool(dt, &pool, 2, DATA_RANDOM);
}

START_TEST(test_gpu_ops) { check_gpu_all((blob_dtype)_i); }
END_TEST

/* Everything again on a stream of its own: the operations go to the current stream. */
START_TEST(test_gpu_ops_on_stream)
{
    void *stream;
    ck_ok(blob_stream_create(&stream));
    blob_stream_set(stream);
    check_gpu_all((blob_dtype)_i);
    blob_stream_set(NULL);
    ck_ok(blob_stream_destroy(stream));
}
END_TEST

/* The 64-bit index kernels: a column matrix of 9 x 240M floats (8.6 GB), sampled where
 * its index crosses 2^31, col2im of it back, and pooling over it seen as a 2 x 32768 x
 * 32770 batch. Skipped, with a note, when the GPU lacks the memory. */
static bool big_alloc(size_t bytes, void **out)
{
    *out = NULL;
    blob_status st = blob__be->device_alloc(bytes, out);
    if (st == BLOB_EDEVMEM) {
        printf("note: test_gpu_beyond_int_max skipped, not enough GPU memory (%s)\n",
               blob_last_error());
        return false;
    }
    ck_ok(st);
    return true;
}

/* n floats of device array d from element off. */
static void sample(float *h, const float *d, int64_t off, int64_t n)
{
    dev_download(h, d + off, (size_t)n * sizeof(float));
}

START_TEST(test_gpu_beyond_int_max)
{
    const blob_conv_geometry g = GEO(1, 15000, 16000, 3, 3, 1, 1, 1, 1, 1, 1, FLOOR);
    const int64_t n_im = g.height * g.width, cols = n_im, n_col = 9 * cols;
    ck_assert(n_col > INT32_MAX);
    float *x = NULL, *col = NULL, *im = NULL;
    float *hx = malloc((size_t)n_im * sizeof(float));
    test_seed(606);
    test_fill(BLOB_FLOAT32, hx, n_im, -1, 1);
    if (!big_alloc((size_t)n_col * sizeof(float), (void **)&col) ||
        !big_alloc((size_t)n_im * sizeof(float), (void **)&im)) {
        blob__be->device_free(col);
        free(hx);
        return;
    }
    x = dev_upload(hx, (size_t)n_im * sizeof(float));
    ck_ok(blob_gpu_im2col(BLOB_FLOAT32, &g, 1, x, col));
    float got[64];
    const int64_t starts[] = {0, cols / 2, cols - 64};
    for (int64_t r = 0; r < 9; r++)
        for (int k = 0; k < 3; k++) {
            sample(got, col, r * cols + starts[k], 64);
            for (int64_t q = starts[k]; q < starts[k] + 64; q++) {
                const int64_t s = source_cell(&g, g.height, g.width, r, q);
                ck_assert_msg(got[q - starts[k]] == (s < 0 ? 0 : hx[s]),
                              "im2col col[%lld][%lld] = %g", (long long)r, (long long)q,
                              got[q - starts[k]]);
            }
        }
    /* col2im(im2col(x)) = x times the taps that reach each cell */
    ck_ok(blob_gpu_col2im(BLOB_FLOAT32, &g, 1, col, im));
    for (int k = 0; k < 3; k++) {
        sample(got, im, starts[k], 64);
        for (int64_t i = starts[k]; i < starts[k] + 64; i++) {
            const int64_t h = i / g.width, w = i % g.width;
            const int64_t th = 3 - (h == 0) - (h == g.height - 1);
            const int64_t tw = 3 - (w == 0) - (w == g.width - 1);
            ck_assert_msg(fabs(got[i - starts[k]] - (double)(th * tw) * hx[i]) <= 1e-5,
                          "col2im im[%lld] = %g, expected %lld x %g", (long long)i,
                          got[i - starts[k]], (long long)(th * tw), hx[i]);
        }
    }
    blob__be->device_free(x);
    blob__be->device_free(im);
    free(hx);

    /* pooling over the column matrix's values */
    const blob_conv_geometry p = GEO(2, 32768, 32770, 2, 2, 0, 0, 2, 2, 1, 1, FLOOR);
    const int64_t n_x = 2 * p.height * p.width, n_y = n_x / 4;
    ck_assert(n_x > INT32_MAX && n_x <= n_col);
    float *y = NULL, *dx = NULL;
    int32_t *am = NULL;
    if (!big_alloc((size_t)n_y * sizeof(float), (void **)&y) ||
        !big_alloc((size_t)n_y * sizeof(int32_t), (void **)&am) ||
        !big_alloc((size_t)n_x * sizeof(float), (void **)&dx)) {
        blob__be->device_free(y);
        blob__be->device_free(am);
        blob__be->device_free(col);
        return;
    }
    ck_ok(blob_gpu_max_pool_forward(BLOB_FLOAT32, &p, 1, col, y, am));
    ck_ok(blob_gpu_max_pool_backward(BLOB_FLOAT32, &p, 1, y, am, dx));
    const int64_t outs[] = {0, n_y / 2 + 12345, n_y - 1};
    for (int k = 0; k < 3; k++) {
        const int64_t o = outs[k], plane = o / (n_y / 2), py = o % (n_y / 2) / (p.width / 2);
        const int64_t px = o % (p.width / 2);
        const int64_t cell = (plane * p.height + 2 * py) * p.width + 2 * px;
        float win[4], d[4], yo;
        int32_t a;
        sample(win, col, cell, 2);
        sample(win + 2, col, cell + p.width, 2);
        sample(&yo, y, o, 1);
        dev_download(&a, am + o, sizeof a);
        int best = 0;
        for (int c = 1; c < 4; c++)
            best = win[c] > win[best] ? c : best;
        const int32_t want = (int32_t)((2 * py + best / 2) * p.width + 2 * px + best % 2);
        ck_assert_msg(yo == win[best] && a == want, "max pool [%lld] = %g at %d, expected %g at %d",
                      (long long)o, yo, a, win[best], want);
        sample(d, dx, cell, 2);
        sample(d + 2, dx, cell + p.width, 2);
        for (int c = 0; c < 4; c++)
            ck_assert(d[c] == (c == best ? yo : 0));
    }
    ck_ok(blob_gpu_avg_pool_forward(BLOB_FLOAT32, &p, 1, col, y));
    ck_ok(blob_gpu_avg_pool_backward(BLOB_FLOAT32, &p, 1, y, dx));
    for (int k = 0; k < 3; k++) {
        const int64_t o = outs[k], plane = o / (n_y / 2), py = o % (n_y / 2) / (p.width / 2);
        const int64_t cell = (plane * p.height + 2 * py) * p.width + 2 * (o % (p.width / 2));
        float win[4], d[4], yo;
        sample(win, col, cell, 2);
        sample(win + 2, col, cell + p.width, 2);
        sample(&yo, y, o, 1);
        ck_assert_float_eq_tol(yo, (win[0] + win[1] + win[2] + win[3]) / 4, 1e-5f);
        sample(d, dx, cell, 2);
        sample(d + 2, dx, cell + p.width, 2);
        for (int c = 0; c < 4; c++)
            ck_assert_float_eq_tol(d[c], yo / 4, 1e-6f);
    }
    blob__be->device_free(y);
    blob__be->device_free(am);
    blob__be->device_free(dx);
    blob__be->device_free(col);
}
END_TEST

void conv_suite(Suite *s)
{
    TCase *tc = suite_case(s, "host", NULL, 60, NULL, NULL);
    add_tests(tc, test_output_sizes, test_bad_geometry);
    add_loop_tests(tc, 0, 2, test_cpu_im2col, test_cpu_conv_gemm, test_cpu_col2im, test_cpu_pool);
    add_tests(tc, test_cpu_pool_by_hand);
    add_loop_tests(tc, 0, 2, test_cpu_half);
    add_loop_tests(tc, 0, 2, test_bad_arguments, test_big_sizes, test_empty);
    add_tests(tc, test_gpu_without_gpu);

    if (!blob_built_with_cuda())
        add_tests(suite_case(s, "no-cuda", NULL, 0, fake_setup, fake_teardown),
                  test_launchers_without_cuda);

    tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_loop_tests(tc, BLOB_FLOAT32, BLOB_FLOAT16 + 1, test_gpu_ops);
    add_tests(tc, test_gpu_beyond_int_max);
}

/* The GPU operations again on a stream of their own: a suite apart, so that it runs
 * beside the other half rather than after it (the 16-bit checks of each half take
 * about 50 s on an H100, most of it their host references). */
void conv_streams_suite(Suite *s)
{
    TCase *tc = suite_case(s, "gpu", "gpu", 0, NULL, NULL);
    add_loop_tests(tc, BLOB_FLOAT32, BLOB_FLOAT16 + 1, test_gpu_ops_on_stream);
}
