/* Elementwise operations: one functor each, run by the grid-stride launcher `each`.
 * Functors hold scalars as double and arrays as void *, so the same launcher arguments
 * build the float and the double instance; the conversions to T are loop-invariant. The
 * ReLUs take the 16-bit floats too: they compare the widened value and copy the element's
 * bits (or write +0), so every dtype gives the host's bits. */
#include "common.cuh"
#include "half.cuh"

template <typename T>
struct Axpby {
    double alpha, beta;
    const void *x;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        const T a = (T)alpha, b = (T)beta, xi = ((const T *)x)[i];
        T *py = (T *)y;
        py[i] = b == T(0) ? a * xi : a * xi + b * py[i];
    }
};

template <typename T>
struct Set {
    double alpha;
    void *y;
    __device__ void operator()(int64_t i) const { ((T *)y)[i] = (T)alpha; }
};

template <typename T>
struct AddScalar {
    double alpha;
    void *y;
    __device__ void operator()(int64_t i) const { ((T *)y)[i] += (T)alpha; }
};

template <typename T>
struct Mul {
    const void *a, *b;
    void *y;
    __device__ void operator()(int64_t i) const
    {
        ((T *)y)[i] = ((const T *)a)[i] * ((const T *)b)[i];
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
    return EACH(__func__, stream, dtype, n, Axpby, alpha, beta, x, y);
}

extern "C" blob_status blob__k_set(void *stream, blob_dtype dtype, int64_t n, double alpha, void *y)
{
    return EACH(__func__, stream, dtype, n, Set, alpha, y);
}

extern "C" blob_status blob__k_add_scalar(void *stream, blob_dtype dtype, int64_t n, double alpha,
                                          void *y)
{
    return EACH(__func__, stream, dtype, n, AddScalar, alpha, y);
}

extern "C" blob_status blob__k_mul(void *stream, blob_dtype dtype, int64_t n, const void *a,
                                   const void *b, void *y)
{
    return EACH(__func__, stream, dtype, n, Mul, a, b, y);
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
