/* The multi-tensor optimizer step (blob_gpu_optim_step): one launch updates up to 512
 * tensors. The tensors' pointers and sizes travel in the kernel's parameters (a
 * __grid_constant__ struct of up to 32 KB, CUDA 12.1+ on Volta and newer), a smaller
 * struct when few tensors are updated. The tensors are cut into chunks of 8 KB per
 * array (4 KB when they would not fill the SMs' resident blocks otherwise, see
 * step_all). Up to GRID_WAVES waves of resident blocks, as many as share the chunks
 * evenly, loop over them: the SMs take the blocks of later waves as earlier ones end,
 * which evens out their shares, and every block has as many chunks as the others or one
 * fewer (measured on an H200 from 64 MiB of parameters up: 0.93-0.96 of copy bandwidth
 * with SGD and 0.91-0.94 with AdamW, against 0.91-0.92 and 0.89-0.91 with one wave of
 * eight blocks per SM; one chunk per block gets 0.81-0.91). Each chunk is found by
 * binary search over the chunk offsets and moved with 16-byte loads and stores, two (or
 * one) per array per thread, all issued before any arithmetic (this moves more bytes
 * per second than 16 KB chunks of four vectors or streaming hints). A chunk that is
 * short (a tensor's last) or misaligned takes the scalar path. Only Adam's scalars
 * depend on the step number beyond its first; SGD reads the step only to know whether
 * it is the first.
 *
 * A mixed step (blob_gpu_optim_step_mixed) is the same kernel with float32 master weights
 * and histories and 16-bit gradients G: each chunk's gradients are loaded as vectors of
 * as many G as a 16-byte vector holds floats, widened and multiplied by the inverse loss
 * scale, and the updated weights are rounded into the working copy in the same pass.
 *
 * A split step (blob_gpu_optim_step_split) is the bfloat16 mixed step with SPLIT set: there is
 * no float32 master array; each master weight is joined from the working copy and its
 * remainder (optim_formula.h), loaded as vectors beside the gradients, and split back into
 * both in the same pass (18 bytes moved per parameter with momentum, against 20).
 *
 * The step number lives in device memory: every block reads it, and in the last launch
 * of a step the last block to finish increments it (the blocks count themselves in the
 * second word, which that block sets back to 0), so a captured graph replays correctly. */
#include <math.h>
#include <string.h>

#include <atomic>
#include <type_traits>

#include "common.cuh"
#include "half.cuh"
#include "optim_formula.h"

static constexpr int SMALL_CAP = 32;      /* tensors per launch, small parameter struct */
static constexpr int RESIDENT_PER_SM = 8; /* blocks of THREADS an SM holds at once */
static constexpr int GRID_WAVES = 4;      /* the most blocks of a launch, in those */
static constexpr int LARGE_CAP = 512;     /* tensors per launch, large parameter struct */

template <typename T>
struct Vec;
template <>
struct Vec<float> {
    typedef float4 type;
};
template <>
struct Vec<double> {
    typedef double2 type;
};

/* E elements of a 16-bit G, loaded and stored as one vector (8 bytes for E = 4). */
template <typename G, int E>
struct alignas(sizeof(G) * E) Pack {
    G e[E];
};

/* The vector of the gradients (and working copy) beside a Vec<T> of master weights. */
template <typename T, typename G>
using GVec = typename std::conditional<std::is_same<T, G>::value, typename Vec<T>::type,
                                       Pack<G, 16 / sizeof(T)>>::type;

/* A gradient as the update takes it: itself, or (mixed) widened and unscaled in float32. */
template <typename T, typename G>
static __device__ T grad_value(G g, float inv_scale)
{
    if constexpr (std::is_same<T, G>::value)
        return g;
    else
        return __fmul_rn(wide(g), inv_scale);
}

/* A split master weight: the float joined from working copy hi (a bfloat16) and remainder
 * lo, and a float split back into them (optim_formula.h). */
template <typename G>
static __device__ float master_join(G hi, uint16_t lo)
{
    static_assert(sizeof(G) == 2, "a split master weight's working copy is 16-bit");
    uint16_t bits;
    memcpy(&bits, &hi, sizeof bits);
    return __uint_as_float(BLOB__MASTER_JOIN(bits, lo));
}

template <typename G>
static __device__ void master_split(float w, G &hi, uint16_t &lo)
{
    const uint32_t b = __float_as_uint(w);
    const uint16_t bits = BLOB__MASTER_HI(b);
    memcpy(&hi, &bits, sizeof bits);
    lo = BLOB__MASTER_LO(b);
}

template <typename T>
struct Scalars {
    BLOB__OPTIM_SCALAR_FIELDS(T)
};

/* Elements of a chunk of VECS 16-byte vectors per array per thread. */
template <typename T, int VECS>
__host__ __device__ static constexpr int64_t chunk_elems()
{
    return (int64_t)THREADS * VECS * (16 / sizeof(T));
}

/* G is T, or a 16-bit float in a mixed step (T float), which has the working copies; a
 * split step (SPLIT, G bfloat16) has no data but the working copies' remainders lo. */
template <typename T, typename G, bool SPLIT, int CAP>
struct Args {
    static constexpr bool MIXED = !std::is_same<T, G>::value;
    int count;                    /* tensors of this launch (none: only the step count) */
    bool last;                    /* this launch ends the step: increment it */
    int64_t chunk_start[CAP + 1]; /* first chunk of each tensor, and the total */
    int64_t n[CAP];
    T *data[SPLIT ? 1 : CAP]; /* split: none */
    const G *diff[CAP];
    T *h1[CAP], *h2[CAP];
    G *work[MIXED ? CAP : 1];      /* mixed: the working copies written (split: read too) */
    uint16_t *lo[SPLIT ? CAP : 1]; /* split: the remainders */
    Scalars<T> s;                  /* the step-dependent fields are set on the device */
    float inv_scale;               /* mixed: the gradients' factor */
    double lr, beta1, beta2;
    unsigned long long *step; /* [0] steps taken, [1] blocks finished */
};

/* Count this block as finished; the last one increments the step. */
template <typename T, typename G, bool SPLIT, int CAP>
static __device__ void finish_step(const Args<T, G, SPLIT, CAP> &a)
{
    if (!a.last)
        return;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence(); /* the step was read before this block counts itself */
        if (atomicAdd(&a.step[1], 1ull) == gridDim.x - 1) {
            a.step[0] += 1;
            a.step[1] = 0;
        }
    }
}

/* The tensor holding chunk c: the last one starting at or before it. */
template <typename T, typename G, bool SPLIT, int CAP>
static __device__ int tensor_of_chunk(const Args<T, G, SPLIT, CAP> &a, int64_t c)
{
    int lo = 0, hi = a.count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (a.chunk_start[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* A whole chunk at 16-byte aligned w, h and v (and g, wk, lo aligned to their vectors):
 * each thread loads VECS vectors of each, updates their elements, and stores them. A split
 * step reads its weights from wk and lo instead of w, and writes them back there. */
template <typename T, typename G, bool SPLIT, int KIND, int CAP, int VECS>
static __device__ void update_vectors(const Args<T, G, SPLIT, CAP> &a, const Scalars<T> &s,
                                      T *__restrict__ w, const G *__restrict__ g, T *__restrict__ h,
                                      T *__restrict__ v, G *__restrict__ wk,
                                      uint16_t *__restrict__ lo)
{
    constexpr bool MIXED = Args<T, G, SPLIT, CAP>::MIXED;
    constexpr int E = 16 / sizeof(T);
    typedef typename Vec<T>::type V;
    typedef GVec<T, G> GV;
    typedef Pack<uint16_t, E> LV; /* split: E remainders beside E working copies */
    V wv[VECS], hv[VECS], vv[VECS];
    GV gv[VECS], kv[SPLIT ? VECS : 1];
    LV lv[SPLIT ? VECS : 1];
#pragma unroll
    for (int k = 0; k < VECS; k++) {
        const int i = threadIdx.x + k * THREADS;
        if constexpr (SPLIT) {
            kv[k] = ((const GV *)wk)[i];
            lv[k] = ((const LV *)lo)[i];
        } else {
            wv[k] = ((const V *)w)[i];
        }
        gv[k] = ((const GV *)g)[i];
        if (h)
            hv[k] = ((const V *)h)[i];
        if (v)
            vv[k] = ((const V *)v)[i];
    }
#pragma unroll
    for (int k = 0; k < VECS; k++) {
        T *pw = (T *)&wv[k], *ph = (T *)&hv[k], *pv = (T *)&vv[k];
        G *pg = (G *)&gv[k];
#pragma unroll
        for (int e = 0; e < E; e++) {
            if constexpr (SPLIT)
                pw[e] = master_join(((G *)&kv[k])[e], ((uint16_t *)&lv[k])[e]);
            BLOB__OPTIM_ELEMENT(T, KIND, s, sqrt, pw[e], (grad_value<T, G>(pg[e], a.inv_scale)),
                                ph[e], pv[e]);
            if constexpr (SPLIT)
                master_split(pw[e], ((G *)&kv[k])[e], ((uint16_t *)&lv[k])[e]);
            else if (MIXED)
                pg[e] = narrow<G>(pw[e]); /* the gradient's slot takes the working copy */
        }
    }
#pragma unroll
    for (int k = 0; k < VECS; k++) {
        const int i = threadIdx.x + k * THREADS;
        if constexpr (SPLIT) {
            ((GV *)wk)[i] = kv[k];
            ((LV *)lo)[i] = lv[k];
        } else {
            ((V *)w)[i] = wv[k];
            if (MIXED)
                ((GV *)wk)[i] = gv[k];
        }
        if (h)
            ((V *)h)[i] = hv[k];
        if (v)
            ((V *)v)[i] = vv[k];
    }
}

/* The len elements of a chunk one at a time (a tensor's short end, or unaligned). */
template <typename T, typename G, bool SPLIT, int KIND, int CAP>
static __device__ void update_elements(const Args<T, G, SPLIT, CAP> &a, const Scalars<T> &s,
                                       T *__restrict__ w, const G *__restrict__ g,
                                       T *__restrict__ h, T *__restrict__ v, G *__restrict__ wk,
                                       uint16_t *__restrict__ lo, int64_t len)
{
    for (int64_t i = threadIdx.x; i < len; i += THREADS) {
        T wi_, hi_ = h ? h[i] : T(0), vi_ = v ? v[i] : T(0);
        if constexpr (SPLIT)
            wi_ = master_join(wk[i], lo[i]);
        else
            wi_ = w[i];
        BLOB__OPTIM_ELEMENT(T, KIND, s, sqrt, wi_, (grad_value<T, G>(g[i], a.inv_scale)), hi_, vi_);
        if constexpr (SPLIT) {
            master_split(wi_, wk[i], lo[i]);
        } else {
            w[i] = wi_;
            if (Args<T, G, SPLIT, CAP>::MIXED)
                wk[i] = narrow<G>(wi_);
        }
        if (h)
            h[i] = hi_;
        if (v)
            v[i] = vi_;
    }
}

/* Update chunk c (of chunk_elems<T, VECS>() elements, fewer at a tensor's end). */
template <typename T, typename G, bool SPLIT, int KIND, int CAP, int VECS>
static __device__ void update_chunk(const Args<T, G, SPLIT, CAP> &a, const Scalars<T> &s, int64_t c)
{
    constexpr bool MIXED = Args<T, G, SPLIT, CAP>::MIXED;
    const int t = tensor_of_chunk(a, c);
    constexpr int64_t CHUNK = chunk_elems<T, VECS>();
    const int64_t off = (c - a.chunk_start[t]) * CHUNK, rest = a.n[t] - off;
    const int64_t len = rest < CHUNK ? rest : CHUNK;
    T *__restrict__ w = SPLIT ? nullptr : a.data[SPLIT ? 0 : t] + off;
    const G *__restrict__ g = a.diff[t] + off;
    T *__restrict__ h = a.h1[t] ? a.h1[t] + off : nullptr;
    T *__restrict__ v = a.h2[t] ? a.h2[t] + off : nullptr;
    G *__restrict__ wk = MIXED ? a.work[MIXED ? t : 0] + off : nullptr;
    uint16_t *__restrict__ lo = SPLIT ? a.lo[SPLIT ? t : 0] + off : nullptr;
    if (len == CHUNK && (((uintptr_t)w | (uintptr_t)h | (uintptr_t)v) & 15) == 0 &&
        (((uintptr_t)g | (uintptr_t)wk | (uintptr_t)lo) & (sizeof(GVec<T, G>) - 1)) == 0)
        update_vectors<T, G, SPLIT, KIND, CAP, VECS>(a, s, w, g, h, v, wk, lo);
    else
        update_elements<T, G, SPLIT, KIND, CAP>(a, s, w, g, h, v, wk, lo, len);
}

/* Blocks loop over the chunks of all tensors of the launch. */
template <typename T, typename G, bool SPLIT, int KIND, int CAP, int VECS>
static __global__ void __launch_bounds__(THREADS)
    optim_kernel(const __grid_constant__ Args<T, G, SPLIT, CAP> a)
{
    __shared__ Scalars<T> shared;
    if (threadIdx.x == 0) {
        shared = a.s;
        if (KIND != BLOB_OPTIM_SGD_CAFFE) { /* the others depend on the step number */
            const unsigned long long t = *(volatile unsigned long long *)a.step + 1;
            if (KIND == BLOB_OPTIM_SGD)
                shared.first = t == 1;
            else
                BLOB__OPTIM_FILL_STEP(T, shared, a.lr, a.beta1, a.beta2, t);
        }
    }
    __syncthreads();
    const Scalars<T> s = shared;
    const int64_t chunks = a.count > 0 ? a.chunk_start[a.count] : 0;
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x)
        update_chunk<T, G, SPLIT, KIND, CAP, VECS>(a, s, c);
    finish_step(a);
}

/* The blocks that the GPU's SMs hold at once. */
static blob_status resident_blocks(const char *func, int64_t *out)
{
    static std::atomic<int> sm_count[64]; /* per device, 0 until read; racing reads agree */
    int dev;
    BLOB_TRY(blob__current_device(&dev));
    int sms = dev >= 0 && dev < 64 ? sm_count[dev].load(std::memory_order_relaxed) : 0;
    if (!sms) {
        CUDA_TRY_AT(func, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (dev >= 0 && dev < 64)
            sm_count[dev].store(sms, std::memory_order_relaxed);
    }
    *out = (int64_t)sms * RESIDENT_PER_SM;
    return BLOB_OK;
}

/* The arrays of a step (blob__k_optim_step's arguments). */
struct Lists {
    const int64_t *counts;
    void *const *data;
    const void *const *diff;
    void *const *hist1, *const *hist2, *const *work, *const *lo;
    float inv_scale;
    int64_t *step;
};

/* Launch the tensors [first, end) of the non-empty ones (idx) with a CAP-sized struct,
 * on at most `most` blocks. */
template <typename T, typename G, bool SPLIT, int KIND, int CAP, int VECS>
static blob_status launch(const char *func, cudaStream_t stream, const blob_optim *opt,
                          const int *idx, int first, int end, bool last, const Lists &l,
                          int64_t most)
{
    typedef Args<T, G, SPLIT, CAP> A;
    static_assert(sizeof(A) <= 32764, "kernel parameters over 32 KB");
    A a; /* every field read by the kernel is set below */
    a.count = end - first;
    a.last = last;
    constexpr int64_t chunk = chunk_elems<T, VECS>();
    a.chunk_start[0] = 0;
    for (int j = 0; j < a.count; j++) {
        const int i = idx[first + j];
        a.n[j] = l.counts[i];
        if (!SPLIT)
            a.data[SPLIT ? 0 : j] = (T *)l.data[i];
        a.diff[j] = (const G *)l.diff[i];
        a.h1[j] = l.hist1 ? (T *)l.hist1[i] : nullptr;
        a.h2[j] = l.hist2 ? (T *)l.hist2[i] : nullptr;
        if (A::MIXED)
            a.work[A::MIXED ? j : 0] = (G *)l.work[i];
        if (SPLIT)
            a.lo[SPLIT ? j : 0] = (uint16_t *)l.lo[i];
        a.chunk_start[j + 1] = a.chunk_start[j] + (l.counts[i] + chunk - 1) / chunk;
    }
    BLOB__OPTIM_FILL(T, a.s, opt, 1);
    a.inv_scale = l.inv_scale;
    a.lr = opt->lr;
    a.beta1 = opt->beta1;
    a.beta2 = opt->beta2;
    a.step = (unsigned long long *)l.step;
    /* as many rounds of chunks as `most` blocks need, over as few blocks as take the
     * chunks in that many rounds: each block has `rounds` chunks or one fewer */
    const int64_t chunks = a.chunk_start[a.count] > 0 ? a.chunk_start[a.count] : 1;
    const int64_t rounds = (chunks + most - 1) / most;
    const unsigned blocks = (unsigned)((chunks + rounds - 1) / rounds);
    optim_kernel<T, G, SPLIT, KIND, CAP, VECS><<<blocks, THREADS, 0, stream>>>(a);
    return launch_check("optim_kernel", func);
}

/* The non-empty tensors (idx, m of them), in launches of at most LARGE_CAP. */
template <typename T, typename G, bool SPLIT, int KIND, int VECS>
static blob_status launch_all(const char *func, cudaStream_t stream, const blob_optim *opt,
                              const int *idx, int m, const Lists &l, int64_t most)
{
    if (m <= SMALL_CAP)
        return launch<T, G, SPLIT, KIND, SMALL_CAP, VECS>(func, stream, opt, idx, 0, m, true, l,
                                                          most);
    blob_status st = BLOB_OK;
    for (int first = 0; first < m && st == BLOB_OK; first += LARGE_CAP) {
        const int end = m - first > LARGE_CAP ? first + LARGE_CAP : m;
        st = launch<T, G, SPLIT, KIND, LARGE_CAP, VECS>(func, stream, opt, idx, first, end,
                                                        end == m, l, most);
    }
    return st;
}

/* Chunks of two vectors per array per thread; of one when the tensors would not fill
 * the SMs' resident blocks with those (the parameters of a small net): twice the blocks
 * move the same bytes sooner (measured on an H200: 1.4 us less a training step of an
 * MLP of 235K parameters). */
template <typename T, typename G, bool SPLIT, int KIND>
static blob_status step_all(const char *func, cudaStream_t stream, const blob_optim *opt, int n,
                            const Lists &l)
{
    int64_t resident;
    BLOB_TRY(resident_blocks(func, &resident));
    const int64_t most = resident * GRID_WAVES;
    /* the non-empty tensors, in order */
    int small[SMALL_CAP], *idx = small, m = 0;
    if (n > SMALL_CAP && !(idx = (int *)malloc((size_t)n * sizeof *idx)))
        return blob__fail(BLOB_ENOMEM, func, "no host memory for %d tensor indices", n);
    int64_t chunks = 0;
    for (int i = 0; i < n; i++)
        if (l.counts[i] > 0) {
            idx[m++] = i;
            chunks += (l.counts[i] + chunk_elems<T, 2>() - 1) / chunk_elems<T, 2>();
        }
    blob_status st = chunks < resident
                         ? launch_all<T, G, SPLIT, KIND, 1>(func, stream, opt, idx, m, l, most)
                         : launch_all<T, G, SPLIT, KIND, 2>(func, stream, opt, idx, m, l, most);
    if (idx != small)
        free(idx);
    return st;
}

template <typename T, typename G, bool SPLIT>
static blob_status step_typed(const char *func, cudaStream_t s, const blob_optim *opt, int n,
                              Lists l)
{
    const int hist = blob_optim_history_count(opt);
    if (hist < 1)
        l.hist1 = nullptr;
    if (hist < 2)
        l.hist2 = nullptr;
    switch (opt->kind) {
    case BLOB_OPTIM_SGD: return step_all<T, G, SPLIT, BLOB_OPTIM_SGD>(func, s, opt, n, l);
    case BLOB_OPTIM_SGD_CAFFE:
        return step_all<T, G, SPLIT, BLOB_OPTIM_SGD_CAFFE>(func, s, opt, n, l);
    case BLOB_OPTIM_ADAM: return step_all<T, G, SPLIT, BLOB_OPTIM_ADAM>(func, s, opt, n, l);
    case BLOB_OPTIM_ADAMW: return step_all<T, G, SPLIT, BLOB_OPTIM_ADAMW>(func, s, opt, n, l);
    }
    return blob__fail(BLOB_EINVAL, func, "bad optimizer kind %d", (int)opt->kind);
}

extern "C" blob_status blob__k_optim_step(void *stream, const blob_optim *opt, blob__step_form form,
                                          blob_dtype gdtype, int n, const int64_t *counts,
                                          void *const *data, void *const *lo,
                                          const void *const *diff, void *const *hist1,
                                          void *const *hist2, void *const *work, double inv_scale,
                                          int64_t *step)
{
    static const char *const funcs[] = {"blob_gpu_optim_step", "blob_gpu_optim_step_mixed",
                                        "blob_gpu_optim_step_split"};
    const char *func = funcs[form];
    cudaStream_t s = (cudaStream_t)stream;
    const Lists l = {counts, data, diff, hist1, hist2, work, lo, (float)inv_scale, step};
    if (form == BLOB__STEP_SPLIT)
        return step_typed<float, __nv_bfloat16, true>(func, s, opt, n, l);
    switch (gdtype) {
    case BLOB_FLOAT64: return step_typed<double, double, false>(func, s, opt, n, l);
    case BLOB_BFLOAT16: return step_typed<float, __nv_bfloat16, false>(func, s, opt, n, l);
    case BLOB_FLOAT16: return step_typed<float, __half, false>(func, s, opt, n, l);
    default: return step_typed<float, float, false>(func, s, opt, n, l);
    }
}
