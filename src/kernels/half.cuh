/* Internal to the .cu files of src/kernels: the 16-bit floats' element access, as
 * src/math/convert.c does it on the host: widening is exact, rounding is to nearest even
 * (overflow to Inf), and a NaN becomes the quiet NaN of its sign, so both sides give the
 * same bits. */
#ifndef BLOB_KERNELS_HALF_CUH
#define BLOB_KERNELS_HALF_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.cuh"

/* A float dtype's value widened without rounding: float for 16-bit floats. */
static __device__ float wide(float v) { return v; }
static __device__ double wide(double v) { return v; }
static __device__ float wide(__nv_bfloat16 v) { return __bfloat162float(v); }
static __device__ float wide(__half v)
{
    float f = __half2float(v); /* a NaN comes back positive: its sign is put back */
    return isnan(f) ? copysignf(f, __half_as_ushort(v) & 0x8000 ? -1.0f : 1.0f) : f;
}

/* The quiet NaN of sign neg in To. */
template <typename To>
static __device__ To quiet_nan(bool neg);
template <>
__device__ float quiet_nan<float>(bool neg)
{
    return __uint_as_float(neg ? 0xffc00000u : 0x7fc00000u);
}
template <>
__device__ double quiet_nan<double>(bool neg)
{
    return __longlong_as_double((long long)(neg ? 0xfff8000000000000ull : 0x7ff8000000000000ull));
}
template <>
__device__ __nv_bfloat16 quiet_nan<__nv_bfloat16>(bool neg)
{
    return __ushort_as_bfloat16(neg ? 0xffc0 : 0x7fc0);
}
template <>
__device__ __half quiet_nan<__half>(bool neg)
{
    return __ushort_as_half(neg ? 0xfe00 : 0x7e00);
}

/* v rounded to nearest even in To: from double in one rounding, from the others through
 * their exact float value. */
static __device__ float round_to(float *, double v) { return __double2float_rn(v); }
static __device__ double round_to(double *, double v) { return v; }
static __device__ double round_to(double *, float v) { return v; }
static __device__ __nv_bfloat16 round_to(__nv_bfloat16 *, double v) { return __double2bfloat16(v); }
static __device__ __half round_to(__half *, double v) { return __double2half(v); }
static __device__ float round_to(float *, float v) { return v; }
static __device__ __nv_bfloat16 round_to(__nv_bfloat16 *, float v)
{
    return __float2bfloat16_rn(v);
}
static __device__ __half round_to(__half *, float v) { return __float2half_rn(v); }

/* Call each with Op<T> built from the arguments, T the element type of float dtype dtype. */
#define EACH_FLOAT(func, stream, dtype, n, Op, ...)                                           \
    ((dtype) == BLOB_FLOAT32    ? each((func), (stream), (n), Op<float>{__VA_ARGS__})         \
     : (dtype) == BLOB_FLOAT64  ? each((func), (stream), (n), Op<double>{__VA_ARGS__})        \
     : (dtype) == BLOB_BFLOAT16 ? each((func), (stream), (n), Op<__nv_bfloat16>{__VA_ARGS__}) \
                                : each((func), (stream), (n), Op<__half>{__VA_ARGS__}))

/* v stored in T under the rules above. */
template <typename T, typename V>
static __device__ T narrow(V v)
{
    return isnan(v) ? quiet_nan<T>(signbit(v)) : round_to((T *)nullptr, v);
}

/* What T's arithmetic runs in: float for the 16-bit floats, T otherwise. */
template <typename T>
using wide_t = decltype(wide(T()));

#endif
