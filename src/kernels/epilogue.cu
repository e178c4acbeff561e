/* The GEMM epilogues as kernels, run after a plain cuBLAS product when cuBLASLt offers no
 * fused algorithm: bias and ReLU with the bit mask in one elementwise pass, the masked
 * ReLU gradient (with its column sums when the bias gradient is asked for), and the row
 * or column sums of an input for BGRADA / BGRADB. The 16-bit floats compute in float32
 * (wide_t) and store rounded to nearest even. */
#include "half.cuh"

/* The mask bit of C[i,j], with row_bits bits per row of C (blob/types.h). */
static __device__ bool mask_bit(const unsigned char *mask, int64_t row_bits, int64_t i, int64_t j)
{
    const int64_t b = i * row_bits + j;
    return (mask[b / 8] >> (b % 8)) & 1;
}

/* C[i,j] = (relu)(C[i,j] + bias[j]) over the padded index space i * row_bits + j, one warp
 * per 32 bits of the mask: each warp's bits come from one ballot and lane 0 stores them.
 * row_bits is a multiple of 128, so every warp of the grid-stride loop is whole. */
template <typename T>
static __global__ void bias_relu_mask(int64_t M, int64_t N, int64_t row_bits, T *C, const T *bias,
                                      uint32_t *mask)
{
    GRID_LOOP(idx, M * row_bits)
    {
        const int64_t i = idx / row_bits, j = idx - i * row_bits;
        bool pos = false;
        if (j < N) {
            const wide_t<T> v = wide(C[i * N + j]) + (bias ? wide(bias[j]) : 0);
            pos = v > 0;
            C[i * N + j] = narrow<T>(pos ? v : 0);
        }
        const unsigned bits = __ballot_sync(0xffffffffu, pos);
        if (idx % 32 == 0)
            mask[idx / 32] = bits;
    }
}

template <typename T>
struct BiasRelu {
    int64_t N;
    const void *bias;
    bool relu;
    void *C;
    __device__ void operator()(int64_t i) const
    {
        const wide_t<T> v = wide(((T *)C)[i]) + (bias ? wide(((const T *)bias)[i % N]) : 0);
        ((T *)C)[i] = narrow<T>(relu && !(v > 0) ? 0 : v);
    }
};

/* The unsigned integer of a float's size: its bits, 0 for +0. */
template <size_t Bytes>
struct BitsOf;
template <>
struct BitsOf<2> {
    typedef unsigned short type;
};
template <>
struct BitsOf<4> {
    typedef unsigned int type;
};
template <>
struct BitsOf<8> {
    typedef unsigned long long type;
};

/* Zeroes C[i,j] where the mask bit is clear, over eight columns of a row (one mask byte:
 * a row's bits start at a byte, row_bits being a multiple of 128) per index g. Eight
 * elements at a 16-byte boundary go as whole 16-byte vectors, loaded only when some are
 * kept: stores of single 16-bit elements cost a read of their sector in memory (an H100,
 * 512 x 4096 bfloat16: 7.4 us, against 8 MB at the copy bandwidth, under 3 us). */
template <typename T>
struct Drelu {
    int64_t N, groups, row_bits; /* groups = ceil(N / 8) per row */
    const void *mask;
    void *C;
    __device__ void operator()(int64_t g) const
    {
        const int64_t i = g / groups, j0 = (g - i * groups) * 8;
        const unsigned bits = ((const unsigned char *)mask)[(i * row_bits + j0) / 8];
        if (bits == 0xFF)
            return;
        T *c = (T *)C + i * N + j0;
        const int n = N - j0 < 8 ? (int)(N - j0) : 8;
        if (n == 8 && (reinterpret_cast<uintptr_t>(c) & 15) == 0) {
            constexpr int VECS = (int)sizeof(T) / 2; /* 16-byte vectors in 8 elements */
            uint4 *p = reinterpret_cast<uint4 *>(c), v[VECS];
            for (int q = 0; q < VECS; q++)
                v[q] = bits ? p[q] : make_uint4(0, 0, 0, 0);
            typename BitsOf<sizeof(T)>::type *e = reinterpret_cast<decltype(e)>(v);
            for (int k = 0; k < 8; k++)
                if (!((bits >> k) & 1))
                    e[k] = 0;
            for (int q = 0; q < VECS; q++)
                p[q] = v[q];
            return;
        }
        for (int k = 0; k < n; k++)
            if (!((bits >> k) & 1))
                c[k] = narrow<T>(wide_t<T>(0));
    }
};

/* out[j] = sum_i X[i*cols + j] over rows; with mask, X is C of DRELU_BGRAD and gets its
 * masked entries zeroed on the way. One thread per column: reads are coalesced across
 * the threads of a warp. */
template <typename T>
static __global__ void col_sums(int64_t rows, int64_t cols, T *X, const unsigned char *mask,
                                int64_t row_bits, T *out)
{
    GRID_LOOP(j, cols)
    {
        wide_t<T> s = 0;
        for (int64_t i = 0; i < rows; i++) {
            if (mask && !mask_bit(mask, row_bits, i, j))
                X[i * cols + j] = narrow<T>(wide_t<T>(0));
            else
                s += wide(X[i * cols + j]);
        }
        out[j] = narrow<T>(s);
    }
}

/* out[i] = sum_j X[i*cols + j]: one warp per row. */
template <typename T>
static __global__ void row_sums(int64_t rows, int64_t cols, const T *X, T *out)
{
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
    const unsigned lane = threadIdx.x % 32;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; i < rows; i += warps) {
        wide_t<T> s = 0;
        for (int64_t j = lane; j < cols; j += 32)
            s += wide(X[i * cols + j]);
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0)
            out[i] = narrow<T>(s);
    }
}

template <typename T>
static blob_status apply(const char *func, cudaStream_t s, blob_trans trans_a, blob_trans trans_b,
                         int64_t M, int64_t N, int64_t K, const T *A, const T *B, T *C,
                         blob_epilogue e, T *bias, void *mask)
{
    const int64_t row_bits = BLOB_RELU_MASK_ROW_BITS(N);
    switch (e) {
    case BLOB_EPILOGUE_NONE: return BLOB_OK;
    case BLOB_EPILOGUE_BIAS:
    case BLOB_EPILOGUE_RELU:
    case BLOB_EPILOGUE_BIAS_RELU: {
        const bool relu = e != BLOB_EPILOGUE_BIAS;
        if (relu && mask) {
            if (M * row_bits == 0)
                return BLOB_OK;
            bias_relu_mask<T><<<grid_for(M * row_bits, THREADS), THREADS, 0, s>>>(
                M, N, row_bits, C, bias, (uint32_t *)mask);
            return launch_check("bias_relu_mask", func);
        }
        return each(func, s, M * N, BiasRelu<T>{N, bias, relu, C});
    }
    case BLOB_EPILOGUE_DRELU: {
        const int64_t groups = (N + 7) / 8;
        return each(func, s, M * groups, Drelu<T>{N, groups, row_bits, mask, C});
    }
    case BLOB_EPILOGUE_DRELU_BGRAD:
        if (N == 0)
            return BLOB_OK;
        col_sums<T><<<grid_for(N, THREADS), THREADS, 0, s>>>(M, N, C, (const unsigned char *)mask,
                                                             row_bits, bias);
        return launch_check("col_sums", func);
    case BLOB_EPILOGUE_BGRADA:
    case BLOB_EPILOGUE_BGRADB: {
        /* the stored input, and whether its sums run along its rows */
        const bool a = e == BLOB_EPILOGUE_BGRADA;
        const T *X = a ? A : B;
        const int64_t out = a ? M : N;
        if (out == 0)
            return BLOB_OK;
        if (a ? trans_a == BLOB_NO_TRANS : trans_b == BLOB_TRANS) {
            row_sums<T><<<grid_for(out * 32, THREADS), THREADS, 0, s>>>(out, K, X, bias);
            return launch_check("row_sums", func);
        }
        col_sums<T><<<grid_for(out, THREADS), THREADS, 0, s>>>(K, out, (T *)X, nullptr, 0, bias);
        return launch_check("col_sums", func);
    }
    }
    return BLOB_OK;
}

extern "C" blob_status blob__k_epilogue_apply(const char *func, void *stream, blob_dtype dtype,
                                              blob_trans trans_a, blob_trans trans_b, int64_t M,
                                              int64_t N, int64_t K, const void *A, const void *B,
                                              void *C, blob_epilogue epilogue, void *bias,
                                              void *mask)
{
    const cudaStream_t s = (cudaStream_t)stream;
    const auto run = [&](auto t) {
        using T = decltype(t);
        return apply(func, s, trans_a, trans_b, M, N, K, (const T *)A, (const T *)B, (T *)C,
                     epilogue, (T *)bias, mask);
    };
    switch (dtype) {
    case BLOB_FLOAT32: return run(float());
    case BLOB_BFLOAT16: return run(__nv_bfloat16());
    case BLOB_FLOAT16: return run(__half());
    default: return run(double());
    }
}
