/* Element access of the float dtypes for the host's loops (blob__elem_get, blob__elem_set):
 * the rounding of the host's conversions (blob_cpu_convert in math.c), its 16-bit math
 * and gemm16.c. It calls nothing else of src/math/.
 *
 * The host rounds bfloat16 and float16 here, in portable C: OpenBLAS declares
 * cblas_sbstobf16 and cblas_sbf16tos, but Debian's build (0.3.21) leaves them out, and
 * BLIS and MKL have no such call; GCC has _Float16 on x86-64 but not __bf16 (before
 * GCC 13), and Clang 14 has neither. Every value goes through double, which holds each
 * of the four dtypes exactly, so a conversion rounds once. The GPU side converts with
 * the cuda_fp16.h / cuda_bf16.h intrinsics (src/kernels/half.cu), under the same rules:
 * round to nearest even, overflow to Inf, NaN to the quiet NaN of its sign. */
#include <math.h>
#include <stdint.h>

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
