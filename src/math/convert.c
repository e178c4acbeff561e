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
#include <string.h>

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

/* 2^k, for k in double's normal range [-1022, 1023]: its bits (a multiplication by it is
 * exact where the product is a normal double, and much cheaper than ldexp). */
static double pow2(int k)
{
    const uint64_t bits = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* The value of 16-bit word h of format f (exact). */
static double widen(uint16_t h, half_fmt f)
{
    const unsigned ones = 2u * (unsigned)f.bias + 1, e = (h >> f.frac) & ones;
    const unsigned m = h & ((1u << f.frac) - 1);
    double v = e == ones ? (m ? NAN : INFINITY)
               : e == 0  ? m * pow2(1 - f.bias - f.frac)
                         : (m + (1u << f.frac)) * pow2((int)e - f.bias - f.frac);
    return copysign(v, h >> 15 ? -1.0 : 1.0);
}

/* x rounded to nearest even in format f: x / 2^(its exponent - frac) (the quantum, fixed
 * at the smallest normal exponent for subnormals), below 2^(frac + 1), is rounded to an
 * integer r; the field (exponent - 1) << frac plus r then encodes the result, a carry of
 * r into the exponent included, and a result at or past the exponent of all ones is Inf.
 * The exponent comes from x's bits (a subnormal double's, below every format's quantum,
 * is clamped like any tiny one). */
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
    uint64_t abits;
    memcpy(&abits, &a, sizeof abits);
    const int e = (int)(abits >> 52) - 1023; /* a's exponent: a = m 2^e, m in [1, 2) */
    const int exp = e > 1 - f.bias ? e : 1 - f.bias;
    const double q = a * pow2(f.frac - exp);
    const uint32_t r = (uint32_t)q; /* floor: 0 <= q < 2^(frac + 1) */
    const double rest = q - r;
    const uint32_t n = rest > 0.5 || (rest == 0.5 && (r & 1)) ? r + 1 : r;
    uint32_t bits = ((uint32_t)(exp + f.bias - 1) << f.frac) + n;
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
