/* Elementwise operations: one functor each, run by the grid-stride launcher `each`.
 * Functors hold scalars as double and arrays as void *, so the same launcher arguments
 * build every float dtype's instance; the conversions of the scalars are loop-invariant.
 * The 16-bit floats are widened to float32, computed there and rounded to nearest even
 * (narrow), as the host does it. The ReLUs compare the widened value and copy the
 * element's bits (or write +0), so every dtype gives the host's bits. */
#include "common.cuh"
#include "half.cuh"

template <typename T>
struct Axpby {
    double alpha, beta;
    const void *x;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        using W = wide_t<T>;
        const W a = (W)alpha, b = (W)beta, xi = wide(((const T *)x)[i]);
        T *py = (T *)y;
        py[i] = narrow<T>(b == W(0) ? a * xi : a * xi + b * wide(py[i]));
    }
};

template <typename T>
struct Set {
    double alpha;
    void *y;
    __device__ void operator()(int64_t i) const { ((T *)y)[i] = narrow<T>(alpha); }
};

template <typename T>
struct AddScalar {
    double alpha;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        T *py = (T *)y;
        py[i] = narrow<T>(wide(py[i]) + (wide_t<T>)alpha);
    }
};

template <typename T>
struct Mul {
    const void *a, *b;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        ((T *)y)[i] = narrow<T>(wide(((const T *)a)[i]) * wide(((const T *)b)[i]));
    }
};

template <typename T>
struct ReluForward {
    const void *x;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        const T v = ((const T *)x)[i];
        ((T *)y)[i] = wide(v) > 0 ? v : T(0.0f);
    }
};

template <typename T>
struct ReluBackward {
    const void *x, *dy;
    void *dx;
    __device__ void operator()(int64_t i) const
    {
        ((T *)dx)[i] = wide(((const T *)x)[i]) > 0 ? ((const T *)dy)[i] : T(0.0f);
    }
};

extern "C" blob_status blob__k_axpby(void *stream, blob_dtype dtype, int64_t n, double alpha,
                                     const void *x, double beta, void *y)
{
    return EACH_FLOAT(__func__, stream, dtype, n, Axpby, alpha, beta, x, y);
}

extern "C" blob_status blob__k_set(void *stream, blob_dtype dtype, int64_t n, double alpha, void *y)
{
    return EACH_FLOAT(__func__, stream, dtype, n, Set, alpha, y);
}

extern "C" blob_status blob__k_add_scalar(void *stream, blob_dtype dtype, int64_t n, double alpha,
                                          void *y)
{
    return EACH_FLOAT(__func__, stream, dtype, n, AddScalar, alpha, y);
}

extern "C" blob_status blob__k_mul(void *stream, blob_dtype dtype, int64_t n, const void *a,
                                   const void *b, void *y)
{
    return EACH_FLOAT(__func__, stream, dtype, n, Mul, a, b, y);
}

extern "C" blob_status blob__k_relu_forward(void *stream, blob_dtype dtype, int64_t n,
                                            const void *x, void *y)
{
    return EACH_FLOAT(__func__, stream, dtype, n, ReluForward, x, y);
}

extern "C" blob_status blob__k_relu_backward(void *stream, blob_dtype dtype, int64_t n,
                                             const void *x, const void *dy, void *dx)
{
    return EACH_FLOAT(__func__, stream, dtype, n, ReluBackward, x, dy, dx);
}
