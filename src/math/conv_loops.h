/* The host loops of conv.c for one element type: conv.c includes this file once per type,
 * with T the type, U the unsigned integer of its size and NAME(f) naming f's instance.
 * Shapes are validated; sizes are those of blob/conv.h (oh x ow the output plane,
 * planes = num * channels). */

/* col = im2col(im): one row of col per (c, i, j), written in column order. */
static void NAME(im2col)(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num,
                         const T *im, T *col)
{
    const int64_t taps = g->kernel_h * g->kernel_w, rows = g->channels * taps;
    const int64_t cols = num * oh * ow, plane = g->height * g->width;
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
                const T *src = col + ((c * g->kernel_h + i) * g->kernel_w + j) * cols + n * oh * ow;
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

/* take ? value : old, without a branch (whose outcome on random data is a coin toss). */
static inline T NAME(select)(bool take, T value, T old)
{
    U v, o;
    memcpy(&v, &value, sizeof v);
    memcpy(&o, &old, sizeof o);
    const U mask = (U)0 - (U)take;
    o = (v & mask) | (o & ~mask);
    memcpy(&old, &o, sizeof old);
    return old;
}

/* Row by row of outputs: y and argmax start at each window's first cell, then every
 * window of the row meets its cells in row-major order, one window offset (i, j) at a
 * time, so that the windows of a row are independent work. */
static void NAME(max_pool_forward)(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num,
                                   const T *x, T *y, int32_t *argmax)
{
    const int64_t plane = g->height * g->width;
    for (int64_t p = 0; p < num * g->channels; p++) {
        const T *src = x + p * plane;
        for (int64_t py = 0; py < oh; py++) {
            T *ym = y + (p * oh + py) * ow;
            int32_t *am = argmax + (p * oh + py) * ow;
            for (int64_t px = 0; px < ow; px++) {
                const window w = pool_window(g, py, px);
                am[px] = (int32_t)(w.h0 * g->width + w.w0);
                ym[px] = src[am[px]];
            }
            for (int64_t i = 0; i < g->kernel_h; i++) {
                const int64_t h = py * g->stride_h - g->pad_h + i;
                if (h < 0 || h >= g->height)
                    continue;
                for (int64_t j = 0; j < g->kernel_w; j++) {
                    const int64_t off = j - g->pad_w;
                    int64_t x0, x1;
                    valid_columns(g, off, ow, &x0, &x1);
                    const T *row = src + h * g->width + off;
                    for (int64_t px = x0; px < x1; px++) {
                        const T value = row[px * g->stride_w];
                        const bool beats = MAX_BEATS(value, ym[px]);
                        const int32_t take = -(int32_t)beats;
                        const int32_t cell = (int32_t)(h * g->width + px * g->stride_w + off);
                        am[px] = (cell & take) | (am[px] & ~take);
                        ym[px] = NAME(select)(beats, value, ym[px]);
                    }
                }
            }
        }
    }
}

/* Pooling backward: each plane zeroed, then every window's gradient added in, windows in
 * row-major order, the order in which the GPU's per-cell gather meets them: for max
 * pooling to the cell its argmax names (when that cell is in the window), for average
 * pooling (argmax NULL) its share to each of its cells. */
static void NAME(pool_backward)(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num,
                                const T *dy, const int32_t *argmax, T *dx)
{
    const int64_t plane = g->height * g->width;
    const int32_t width = (int32_t)g->width; /* with argmax, plane <= INT32_MAX: checked */
    for (int64_t p = 0; p < num * g->channels; p++) {
        const T *d = dy + p * oh * ow;
        const int32_t *a = argmax ? argmax + p * oh * ow : NULL;
        T *dst = dx + p * plane;
        for (int64_t k = 0; k < plane; k++)
            dst[k] = 0;
        for (int64_t py = 0; py < oh; py++)
            for (int64_t px = 0; px < ow; px++) {
                const window w = pool_window(g, py, px);
                if (a) {
                    const int32_t cell = a[py * ow + px];
                    if (cell < 0)
                        continue;
                    const int64_t h = cell / width, v = cell % width;
                    if (h >= w.h0 && h < w.h1 && v >= w.w0 && v < w.w1)
                        dst[cell] += d[py * ow + px];
                    continue;
                }
                const T share = d[py * ow + px] / (T)w.divisor;
                for (int64_t h = w.h0; h < w.h1; h++)
                    for (int64_t v = w.w0; v < w.w1; v++)
                        dst[h * g->width + v] += share;
            }
    }
}

static void NAME(avg_pool_forward)(const blob_conv_geometry *g, int64_t oh, int64_t ow, int64_t num,
                                   const T *x, T *y)
{
    const int64_t plane = g->height * g->width;
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
