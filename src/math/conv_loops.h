/* The host loops of conv.c for one element type: conv.c includes this file once per type,
 * with T the type and NAME(f) naming f's instance. Each loop runs over OpenMP threads in
 * pieces that write disjoint memory. Shapes are validated; sizes are those of
 * blob/math.h (oh x ow the output plane, planes = num * channels). */

/* col = im2col(im): one row of col per (c, i, j), written in column order. */
static void NAME(im2col)(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num,
                         const T *im, T *col)
{
    const int64_t taps = g->kernel_h * g->kernel_w, rows = g->channels * taps;
    const int64_t cols = num * oh * ow, plane = g->height * g->width;
    PARALLEL_FOR
    for (int64_t r = 0; r < rows; r++) {
        const int64_t c = r / taps, i = r % taps / g->kernel_w, j = r % g->kernel_w;
        const int64_t off = j * g->dilation_w - g->pad_w;
        int64_t x0, x1;
        valid_columns(g, off, ow, &x0, &x1);
        T *dst = col + r * cols;
        for (int64_t n = 0; n < num; n++) {
            const T *src = im + (n * g->channels + c) * plane;
            for (int64_t y = 0; y < oh; y++, dst += ow) {
                const int64_t h = y * g->stride_h - g->pad_h + i * g->dilation_h;
                const int64_t lo = h >= 0 && h < g->height ? x0 : ow, hi = lo < x1 ? x1 : lo;
                for (int64_t x = 0; x < lo; x++)
                    dst[x] = 0;
                for (int64_t x = lo; x < hi; x++)
                    dst[x] = src[h * g->width + x * g->stride_w + off];
                for (int64_t x = hi; x < ow; x++)
                    dst[x] = 0;
            }
        }
    }
}

/* im = col2im(col): each plane zeroed, then every column entry of it added in, taps in
 * descending order (the order in which the GPU's gather meets them). */
static void NAME(col2im)(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num,
                         const T *col, T *im)
{
    const int64_t cols = num * oh * ow, plane = g->height * g->width;
    PARALLEL_FOR
    for (int64_t p = 0; p < num * g->channels; p++) {
        const int64_t n = p / g->channels, c = p % g->channels;
        T *dst = im + p * plane;
        for (int64_t k = 0; k < plane; k++)
            dst[k] = 0;
        for (int64_t i = g->kernel_h - 1; i >= 0; i--)
            for (int64_t j = g->kernel_w - 1; j >= 0; j--) {
                const int64_t off = j * g->dilation_w - g->pad_w;
                int64_t x0, x1;
                valid_columns(g, off, ow, &x0, &x1);
                const T *src = col + ((c * g->kernel_h + i) * g->kernel_w + j) * cols +
                               n * oh * ow;
                for (int64_t y = 0; y < oh; y++, src += ow) {
                    const int64_t h = y * g->stride_h - g->pad_h + i * g->dilation_h;
                    if (h < 0 || h >= g->height)
                        continue;
                    for (int64_t x = x0; x < x1; x++)
                        dst[h * g->width + x * g->stride_w + off] += src[x];
                }
            }
    }
}

static void NAME(max_pool_forward)(const blob_conv_geometry *g, int64_t oh, int64_t ow,
                                   int64_t num, const T *x, T *y, int32_t *argmax)
{
    const int64_t plane = g->height * g->width;
    PARALLEL_FOR
    for (int64_t p = 0; p < num * g->channels; p++) {
        const T *src = x + p * plane;
        for (int64_t py = 0; py < oh; py++)
            for (int64_t px = 0; px < ow; px++) {
                window w = pool_window(g, py, px);
                int64_t best = w.h0 * g->width + w.w0;
                for (int64_t h = w.h0; h < w.h1; h++)
                    for (int64_t v = w.w0; v < w.w1; v++)
                        if (MAX_BEATS(src[h * g->width + v], src[best]))
                            best = h * g->width + v;
                const int64_t o = (p * oh + py) * ow + px;
                y[o] = src[best];
                argmax[o] = (int32_t)best;
            }
    }
}

/* Gathered per input cell over the windows that hold it, in the order of the GPU. */
static void NAME(max_pool_backward)(const blob_conv_geometry *g, int64_t oh, int64_t ow,
                                    int64_t num, const T *dy, const int32_t *argmax, T *dx)
{
    const int64_t plane = g->height * g->width;
    PARALLEL_FOR
    for (int64_t p = 0; p < num * g->channels; p++) {
        const T *d = dy + p * oh * ow;
        const int32_t *a = argmax + p * oh * ow;
        for (int64_t h = 0; h < g->height; h++)
            for (int64_t v = 0; v < g->width; v++) {
                range ry = covering(h, g->pad_h, g->kernel_h, g->stride_h, oh);
                range rx = covering(v, g->pad_w, g->kernel_w, g->stride_w, ow);
                T sum = 0;
                for (int64_t py = ry.lo; py < ry.hi; py++)
                    for (int64_t px = rx.lo; px < rx.hi; px++)
                        if (a[py * ow + px] == h * g->width + v)
                            sum += d[py * ow + px];
                dx[p * plane + h * g->width + v] = sum;
            }
    }
}

static void NAME(avg_pool_forward)(const blob_conv_geometry *g, int64_t oh, int64_t ow,
                                   int64_t num, const T *x, T *y)
{
    const int64_t plane = g->height * g->width;
    PARALLEL_FOR
    for (int64_t p = 0; p < num * g->channels; p++) {
        const T *src = x + p * plane;
        for (int64_t py = 0; py < oh; py++)
            for (int64_t px = 0; px < ow; px++) {
                window w = pool_window(g, py, px);
                T sum = 0;
                for (int64_t h = w.h0; h < w.h1; h++)
                    for (int64_t v = w.w0; v < w.w1; v++)
                        sum += src[h * g->width + v];
                y[(p * oh + py) * ow + px] = sum / (T)w.divisor;
            }
    }
}

static void NAME(avg_pool_backward)(const blob_conv_geometry *g, int64_t oh, int64_t ow,
                                    int64_t num, const T *dy, T *dx)
{
    const int64_t plane = g->height * g->width;
    PARALLEL_FOR
    for (int64_t p = 0; p < num * g->channels; p++) {
        const T *d = dy + p * oh * ow;
        for (int64_t h = 0; h < g->height; h++)
            for (int64_t v = 0; v < g->width; v++) {
                range ry = covering(h, g->pad_h, g->kernel_h, g->stride_h, oh);
                range rx = covering(v, g->pad_w, g->kernel_w, g->stride_w, ow);
                T sum = 0;
                for (int64_t py = ry.lo; py < ry.hi; py++)
                    for (int64_t px = rx.lo; px < rx.hi; px++)
                        sum += d[py * ow + px] / (T)pool_window(g, py, px).divisor;
                dx[p * plane + h * g->width + v] = sum;
            }
    }
}
