/* Conversions between the float dtypes (blob_cpu_convert, blob_gpu_convert) and the
 * element access the host's 16-bit loops use.
 *
 * The host rounds bfloat16 and float16 here, in portable C: OpenBLAS declares
 * cblas_sbstobf16 and cblas_sbf16tos, but Debian's build (0.3.21) leaves them out, and
 * BLIS and MKL have no such call; GCC has _Float16 on x86-64 but not __bf16 (before
 * GCC 13), and Clang 14 has neither. Every value goes through double, which holds each
 * of the four dtypes exactly, so a conversion rounds once. The GPU side converts with
 * the cuda_fp16.h / cuda_bf16.h intrinsics (src/kernels/half.cu), under the same rules:
 * round to nearest even, overflow to Inf, NaN to the quiet NaN of its sign. */
#include <math.h>
#include <string.h>

#include "blob/blas.h"
#include "blob/device.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "math_impl.h"

/* A 16-bit float format: fraction bits and exponent bias (the exponent field of all ones
 * is Inf and NaN, 2 * bias + 1). */
typedef struct {
    int frac;
    int bias;
} half_fmt;

static half_fmt fmt_of(blob_dtype dtype)
{
    return dtype == BLOB_BFLOAT16 ? (half_fmt){7, 127} : (half_fmt){10, 15};
}

/* The value of 16-bit word h of format f (exact). */
static double widen(uint16_t h, half_fmt f)
{
    const unsigned ones = 2u * (unsigned)f.bias + 1, e = (h >> f.frac) & ones;
    const unsigned m = h & ((1u << f.frac) - 1);
    double v = e == ones ? (m ? NAN : INFINITY)
               : e == 0  ? ldexp(m, 1 - f.bias - f.frac)
                         : ldexp(m + (1u << f.frac), (int)e - f.bias - f.frac);
    return copysign(v, h >> 15 ? -1.0 : 1.0);
}

/* x rounded to nearest even in format f: x / 2^(its exponent - frac) (the quantum, fixed
 * at the smallest normal exponent for subnormals) is rounded to an integer r; the field
 * (exponent - 1) << frac plus r then encodes the result, a carry of r into the exponent
 * included, and a result at or past the exponent of all ones is Inf. */
static uint16_t narrow(double x, half_fmt f)
{
    const uint32_t sign = signbit(x) ? 0x8000u : 0, ones = 2u * (uint32_t)f.bias + 1;
    if (isnan(x))
        return (uint16_t)(sign | ones << f.frac | 1u << (f.frac - 1));
    const double a = fabs(x);
    if (a == 0)
        return (uint16_t)sign;
    if (isinf(a))
        return (uint16_t)(sign | ones << f.frac);
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): its exponent is e - 1 */
    const int exp = e - 1 > 1 - f.bias ? e - 1 : 1 - f.bias;
    const double q = ldexp(a, f.frac - exp), r = floor(q), rest = q - r;
    const double n = rest > 0.5 || (rest == 0.5 && fmod(r, 2) != 0) ? r + 1 : r;
    uint32_t bits = ((uint32_t)(exp + f.bias - 1) << f.frac) + (uint32_t)n;
    if (bits >= ones << f.frac)
        bits = ones << f.frac;
    return (uint16_t)(sign | bits);
}

double blob__elem_get(blob_dtype dtype, const void *p, int64_t i)
{
    switch (dtype) {
    case BLOB_FLOAT32: return ((const float *)p)[i];
    case BLOB_FLOAT64: return ((const double *)p)[i];
    default: return widen(((const uint16_t *)p)[i], fmt_of(dtype));
    }
}

void blob__elem_set(blob_dtype dtype, void *p, int64_t i, double v)
{
    if (isnan(v))
        v = copysign(NAN, v); /* the quiet NaN of v's sign, in every dtype */
    switch (dtype) {
    case BLOB_FLOAT32: ((float *)p)[i] = (float)v; break;
    case BLOB_FLOAT64: ((double *)p)[i] = v; break;
    default: ((uint16_t *)p)[i] = narrow(v, fmt_of(dtype)); break;
    }
}

/* ---- blob_*_convert ---- */

typedef struct {
    blob_dtype from, to;
    const void *x;
    void *y;
} convert_job;

static void convert_range(void *ctx, int64_t lo, int64_t hi)
{
    const convert_job *c = ctx;
    for (int64_t i = lo; i < hi; i++)
        blob__elem_set(c->to, c->y, i, blob__elem_get(c->from, c->x, i));
}

/* Both dtypes are float dtypes, n >= 0, and x and y are given for n > 0. */
static blob_status check_convert(const char *fn, blob_dtype from, blob_dtype to, int64_t n,
                                 const void *x, const void *y)
{
    const blob_dtype dts[2] = {from, to};
    for (int i = 0; i < 2; i++) {
        if (!blob_dtype_size(dts[i]))
            return blob__fail(BLOB_EINVAL, fn, "bad dtype %d", (int)dts[i]);
        if (!blob_dtype_is_float(dts[i]))
            return blob__fail(BLOB_ENOTSUP, fn,
                              "%s is not a float dtype: only float64, "
                              "float32, bfloat16 and float16 convert",
                              blob_dtype_name(dts[i]));
    }
    BLOB_TRY(blob__check_array(fn, from, n, "x", x));
    return blob__check_array(fn, to, n, "y", y);
}

blob_status blob_cpu_convert(blob_dtype from, blob_dtype to, int64_t n, const void *x, void *y)
{
    BLOB_TRY(check_convert(__func__, from, to, n, x, y));
    if (from == to) {
        if (n && x != y)
            memcpy(y, x, (size_t)n * blob_dtype_size(to));
        return BLOB_OK;
    }
    convert_job c = {from, to, x, y};
    blob__host_for(blob__host_threads(n), n, convert_range, &c);
    return BLOB_OK;
}

blob_status blob_gpu_convert(blob_dtype from, blob_dtype to, int64_t n, const void *x, void *y)
{
    BLOB_TRY(check_convert(__func__, from, to, n, x, y));
    BLOB_TRY(blob__require_gpu(__func__));
    if (from == to)
        return blob__k_copy(blob_stream_get(), to, n, x, y);
    return blob__k_convert(blob_stream_get(), from, to, n, x, y);
}
