/* Conversions between the float dtypes and the vector operations on 16-bit floats, as
 * src/math/convert.c and math.c do them on the host: conversions round to nearest even
 * with the cuda_bf16.h / cuda_fp16.h intrinsics, a NaN becomes the quiet NaN of its sign;
 * axpy and scal compute in float32, each product and sum rounded on its own (no FMA), so
 * both sides give the same bits; dot and asum accumulate in float32. */
#include "blob/alloc.h"
#include "common.cuh"
#include "half.cuh"

template <typename From, typename To>
struct Convert {
    const void *x;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        ((To *)y)[i] = narrow<To>(wide(((const From *)x)[i]));
    }
};

/* Call f with a value of the element type of float dtype dt. */
template <typename F>
static blob_status with_type(blob_dtype dt, F f)
{
    switch (dt) {
    case BLOB_FLOAT32: return f(float());
    case BLOB_FLOAT64: return f(double());
    case BLOB_BFLOAT16: return f(__nv_bfloat16());
    default: return f(__half());
    }
}

extern "C" blob_status blob__k_convert(void *stream, blob_dtype from, blob_dtype to, int64_t n,
                                       const void *x, void *y)
{
    return with_type(from, [&](auto f) {
        return with_type(to, [&](auto t) {
            return each("blob_gpu_convert", stream, n, Convert<decltype(f), decltype(t)>{x, y});
        });
    });
}

template <typename T>
struct HalfAxpy {
    float alpha;
    const void *x;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        T *py = (T *)y;
        const float v = __fadd_rn(wide(py[i]), __fmul_rn(alpha, wide(((const T *)x)[i])));
        py[i] = narrow<T>(v);
    }
};

template <typename T>
struct HalfScal {
    float alpha;
    void *x;
    __device__ void operator()(int64_t i) const
    {
        T *px = (T *)x;
        const float v = __fmul_rn(alpha, wide(px[i]));
        px[i] = narrow<T>(v);
    }
};

extern "C" blob_status blob__k_half_axpy(void *stream, blob_dtype dtype, int64_t n, double alpha,
                                         const void *x, void *y)
{
    return dtype == BLOB_BFLOAT16
               ? each(__func__, stream, n, HalfAxpy<__nv_bfloat16>{(float)alpha, x, y})
               : each(__func__, stream, n, HalfAxpy<__half>{(float)alpha, x, y});
}

extern "C" blob_status blob__k_half_scal(void *stream, blob_dtype dtype, int64_t n, double alpha,
                                         void *x)
{
    return dtype == BLOB_BFLOAT16
               ? each(__func__, stream, n, HalfScal<__nv_bfloat16>{(float)alpha, x})
               : each(__func__, stream, n, HalfScal<__half>{(float)alpha, x});
}

static constexpr int64_t MAX_PARTIALS = 1024;

/* partial[block] = the block's float32 sum of x[i] * y[i] (y NULL: |x[i]|). */
template <typename T>
static __global__ void half_sum_kernel(int64_t n, const T *x, const T *y, float *partial)
{
    __shared__ float s[THREADS];
    float sum = 0;
    GRID_LOOP(i, n)
    sum = __fadd_rn(sum, y ? __fmul_rn(wide(x[i]), wide(y[i])) : fabsf(wide(x[i])));
    s[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned k = THREADS / 2; k > 0; k /= 2) {
        if (threadIdx.x < k)
            s[threadIdx.x] = __fadd_rn(s[threadIdx.x], s[threadIdx.x + k]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s[0];
}

/* The float32 sum of x * y (y NULL: of |x|) for func, waited for: one partial per block
 * in a scratch block of the stream, summed in order on the host. */
template <typename T>
static blob_status half_sum(const char *func, void *stream, int64_t n, const void *x, const void *y,
                            double *out)
{
    *out = 0;
    if (n == 0)
        return BLOB_OK;
    const unsigned blocks =
        (unsigned)(grid_for(n, THREADS) < MAX_PARTIALS ? grid_for(n, THREADS) : MAX_PARTIALS);
    int dev;
    BLOB_TRY(blob__current_device(&dev));
    float *partial, host[MAX_PARTIALS];
    BLOB_TRY(blob_place_alloc(blob_place_device(dev), blocks * sizeof(float), stream,
                              (void **)&partial));
    half_sum_kernel<T>
        <<<blocks, THREADS, 0, (cudaStream_t)stream>>>(n, (const T *)x, (const T *)y, partial);
    blob_status st = launch_check("half_sum_kernel", func);
    cudaError_t err = cudaSuccess;
    if (st == BLOB_OK &&
        (err = cudaMemcpyAsync(host, partial, blocks * sizeof(float), cudaMemcpyDeviceToHost,
                               (cudaStream_t)stream)) == cudaSuccess)
        err = cudaStreamSynchronize((cudaStream_t)stream);
    blob_place_free(blob_place_device(dev), partial);
    if (st == BLOB_OK && err != cudaSuccess)
        st = blob__cuda_fail(err, "cudaMemcpyAsync", func);
    BLOB_TRY(st);
    float sum = 0;
    for (unsigned b = 0; b < blocks; b++)
        sum += host[b];
    *out = sum;
    return BLOB_OK;
}

extern "C" blob_status blob__k_half_dot(void *stream, blob_dtype dtype, int64_t n, const void *x,
                                        const void *y, double *out)
{
    return dtype == BLOB_BFLOAT16 ? half_sum<__nv_bfloat16>(__func__, stream, n, x, y, out)
                                  : half_sum<__half>(__func__, stream, n, x, y, out);
}

extern "C" blob_status blob__k_half_asum(void *stream, blob_dtype dtype, int64_t n, const void *x,
                                         double *out)
{
    return dtype == BLOB_BFLOAT16 ? half_sum<__nv_bfloat16>(__func__, stream, n, x, nullptr, out)
                                  : half_sum<__half>(__func__, stream, n, x, nullptr, out);
}

template <typename T>
struct FindNonfinite {
    const void *x;
    int32_t *found;
    __device__ void operator()(int64_t i) const
    {
        if (!isfinite(wide(((const T *)x)[i])))
            *found = 1; /* every writer stores the same value */
    }
};

extern "C" blob_status blob__k_find_nonfinite(void *stream, blob_dtype dtype, int n,
                                              const int64_t *counts, const void *const *x,
                                              int32_t *found)
{
    blob_status st = BLOB_OK;
    for (int i = 0; i < n && st == BLOB_OK; i++)
        st = with_type(dtype, [&](auto t) {
            return each(__func__, stream, counts[i], FindNonfinite<decltype(t)>{x[i], found});
        });
    return st;
}
