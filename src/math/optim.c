/* Multi-tensor optimizer steps on raw arrays (blob/optim.h): the checks shared by both
 * sides, the host loop, and the GPU side handing validated arguments to the launcher.
 * The update of one element is written once, in optim_formula.h, for both sides. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "blob/device.h"
#include "blob/optim.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "../kernels/optim_formula.h"
#include "math_impl.h"

/* The fields of opt that its kind uses, as PyTorch checks them. */
static blob_status check_optim(const char *fn, const blob_optim *opt)
{
    if (!opt)
        return blob__fail(BLOB_EINVAL, fn, "opt is NULL");
    if (blob_optim_history_count(opt) < 0)
        return blob__fail(BLOB_EINVAL, fn, "bad optimizer kind %d", (int)opt->kind);
    BLOB_NEED(opt->lr >= 0 && isfinite(opt->lr), fn, "bad learning rate %g", opt->lr);
    BLOB_NEED(opt->weight_decay >= 0 && isfinite(opt->weight_decay), fn, "bad weight decay %g",
              opt->weight_decay);
    if (opt->kind == BLOB_OPTIM_SGD || opt->kind == BLOB_OPTIM_SGD_CAFFE) {
        BLOB_NEED(opt->momentum >= 0 && isfinite(opt->momentum), fn, "bad momentum %g",
                  opt->momentum);
        BLOB_NEED(isfinite(opt->dampening), fn, "bad dampening %g", opt->dampening);
        BLOB_NEED(!opt->nesterov ||
                      (opt->kind == BLOB_OPTIM_SGD && opt->momentum > 0 && opt->dampening == 0),
                  fn, "Nesterov momentum needs SGD with momentum > 0 and dampening 0");
    } else {
        BLOB_NEED(opt->beta1 >= 0 && opt->beta1 < 1, fn, "bad beta1 %g (not in [0, 1))",
                  opt->beta1);
        BLOB_NEED(opt->beta2 >= 0 && opt->beta2 < 1, fn, "bad beta2 %g (not in [0, 1))",
                  opt->beta2);
        BLOB_NEED(opt->eps >= 0 && isfinite(opt->eps), fn, "bad eps %g", opt->eps);
        BLOB_NEED(!opt->nesterov, fn, "Nesterov momentum needs SGD");
    }
    return BLOB_OK;
}

/* A 16-bit float dtype (BLOB_ENOTSUP naming the dtype for the others). */
static blob_status check_half(const char *fn, blob_dtype half)
{
    if (!blob_dtype_size(half))
        return blob__fail(BLOB_EINVAL, fn, "bad dtype %d", (int)half);
    if (half != BLOB_BFLOAT16 && half != BLOB_FLOAT16)
        return blob__fail(BLOB_ENOTSUP, fn, "%s is not supported (bfloat16 and float16 only)",
                          blob_dtype_name(half));
    return BLOB_OK;
}

/* The arguments of a step of the given form: data and histories of dtype, diff of gdtype,
 * and with a mixed or split step the working copies work of gdtype; a split step has no
 * data, its master weights being work and the remainders lo (16-bit, as work). */
static blob_status check_step(const char *fn, const blob_optim *opt, blob__step_form form,
                              blob_dtype dtype, blob_dtype gdtype, int n, const int64_t *counts,
                              void *const *data, void *const *lo, const void *const *diff,
                              void *const *hist1, void *const *hist2, void *const *work,
                              const int64_t *step)
{
    BLOB_TRY(check_optim(fn, opt));
    BLOB_TRY(blob__check_dtype(fn, dtype));
    if (!step)
        return blob__fail(BLOB_EINVAL, fn, "step is NULL");
    if (n < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative tensor count %d", n);
    const int hist = blob_optim_history_count(opt);
    const bool mixed = form != BLOB__STEP_PLAIN, split = form == BLOB__STEP_SPLIT;
    /* data (but split), diff, the histories used, work when mixed and lo when split */
    const void *lists[] = {counts, data, diff, hist1, hist2, work, lo};
    static const char *const names[] = {"counts", "data", "diff", "hist1", "hist2", "work", "lo"};
    const bool used[] = {true, !split, true, hist >= 1, hist >= 2, mixed, split};
    for (int l = 0; n > 0 && l < 7; l++)
        if (used[l] && !lists[l])
            return blob__fail(BLOB_EINVAL, fn, "%s is NULL with %d tensors", names[l], n);
    for (int i = 0; i < n; i++) {
        const void *arrays[] = {NULL,
                                split ? NULL : data[i],
                                diff[i],
                                used[3] ? hist1[i] : NULL,
                                used[4] ? hist2[i] : NULL,
                                mixed ? work[i] : NULL,
                                split ? lo[i] : NULL};
        for (int l = 1; l < 7; l++) {
            char name[32];
            snprintf(name, sizeof name, "%s[%d]", names[l], i);
            if (used[l])
                BLOB_TRY(blob__check_array(fn, l == 1 || l == 3 || l == 4 ? dtype : gdtype,
                                           counts[i], name, arrays[l]));
        }
    }
    return BLOB_OK;
}

/* ---- Host side ---- */

#define HOST_SQRT(x) _Generic((x), float : sqrtf, default : sqrt)(x)

typedef struct {
    BLOB__OPTIM_SCALAR_FIELDS(float)
} scalars_f32;
typedef struct {
    BLOB__OPTIM_SCALAR_FIELDS(double)
} scalars_f64;

/* The arguments of one tensor's loop: the scalars of the step (of the element type) and
 * the arrays (h and v NULL when unused); a mixed step's gradient dtype, the gradients'
 * factor and the working copy, and a split step's remainders (w NULL). */
typedef struct {
    const void *s;
    void *w;
    const void *g;
    void *h, *v;
    blob_dtype half;
    float inv_scale;
    void *work;
    uint16_t *lo;
} step_args;

/* The update's formula runs on vectors of elements as on scalars (math_impl.h). */
typedef blob__vec_f32 vec_f32;
typedef blob__vec_f64 vec_f64;

static vec_f32 vec_sqrt_f32(vec_f32 x)
{
    for (int i = 0; i < 4; i++)
        x[i] = sqrtf(x[i]);
    return x;
}

static vec_f64 vec_sqrt_f64(vec_f64 x)
{
    for (int i = 0; i < 2; i++)
        x[i] = sqrt(x[i]);
    return x;
}

/* NAME: the elements [lo, hi) of one tensor, for kind K in element type T (a
 * blob__host_for body): vectors V of them, then the rest one by one. */
#define STEP_RANGE(NAME, T, V, VSQRT, SCALARS, K)                        \
    static void NAME(void *args, int64_t lo, int64_t hi)                 \
    {                                                                    \
        const step_args *a = args;                                       \
        const SCALARS s = *(const SCALARS *)a->s;                        \
        T *w = a->w, *h = a->h, *v = a->v;                               \
        const T *g = a->g;                                               \
        const int64_t lanes = (int64_t)(sizeof(V) / sizeof(T));          \
        int64_t j = lo;                                                  \
        for (; j + lanes <= hi; j += lanes) {                            \
            V w_, g_v, h_ = {0}, v_ = {0};                               \
            memcpy(&w_, w + j, sizeof w_);                               \
            memcpy(&g_v, g + j, sizeof g_v);                             \
            if (h)                                                       \
                memcpy(&h_, h + j, sizeof h_);                           \
            if (v)                                                       \
                memcpy(&v_, v + j, sizeof v_);                           \
            BLOB__OPTIM_ELEMENT(V, K, s, VSQRT, w_, g_v, h_, v_);        \
            memcpy(w + j, &w_, sizeof w_);                               \
            if (h)                                                       \
                memcpy(h + j, &h_, sizeof h_);                           \
            if (v)                                                       \
                memcpy(v + j, &v_, sizeof v_);                           \
        }                                                                \
        for (; j < hi; j++) {                                            \
            T h_ = h ? h[j] : 0, v_ = v ? v[j] : 0;                      \
            BLOB__OPTIM_ELEMENT(T, K, s, HOST_SQRT, w[j], g[j], h_, v_); \
            if (h)                                                       \
                h[j] = h_;                                               \
            if (v)                                                       \
                v[j] = v_;                                               \
        }                                                                \
    }
STEP_RANGE(sgd_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_SGD)
STEP_RANGE(sgd_caffe_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_SGD_CAFFE)
STEP_RANGE(adam_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_ADAM)
STEP_RANGE(adamw_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_ADAMW)
STEP_RANGE(sgd_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_SGD)
STEP_RANGE(sgd_caffe_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_SGD_CAFFE)
STEP_RANGE(adam_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_ADAM)
STEP_RANGE(adamw_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_ADAMW)

/* The float32 weight of bfloat16 hi[j] and remainder lo[j] (optim_formula.h). */
static float master_join(const uint16_t *hi, const uint16_t *lo, int64_t j)
{
    const uint32_t b = BLOB__MASTER_JOIN(hi[j], lo[j]);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Store float32 f as hi[j] and lo[j]. */
static void master_split(float f, uint16_t *hi, uint16_t *lo, int64_t j)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    hi[j] = BLOB__MASTER_HI(b);
    lo[j] = BLOB__MASTER_LO(b);
}

/* NAME: the elements [lo, hi) of one tensor of a mixed step, for kind K: each gradient
 * widened and multiplied by the factor in float32 (as the kernel does), the update in
 * float32, and the weight rounded into the working copy; or, split (a->lo), the weight
 * joined from the working copy and its remainder and split back into them. */
#define STEP_RANGE_MIXED(NAME, K)                                                    \
    static void NAME(void *args, int64_t lo, int64_t hi)                             \
    {                                                                                \
        const step_args *a = args;                                                   \
        const scalars_f32 s = *(const scalars_f32 *)a->s;                            \
        float *w = a->w, *h = a->h, *v = a->v;                                       \
        uint16_t *wk = a->work, *rem = a->lo;                                        \
        for (int64_t j = lo; j < hi; j++) {                                          \
            float w_ = rem ? master_join(wk, rem, j) : w[j];                         \
            float h_ = h ? h[j] : 0, v_ = v ? v[j] : 0;                              \
            const float gw = (float)blob__elem_get(a->half, a->g, j) * a->inv_scale; \
            BLOB__OPTIM_ELEMENT(float, K, s, sqrtf, w_, gw, h_, v_);                 \
            if (rem) {                                                               \
                master_split(w_, wk, rem, j);                                        \
            } else {                                                                 \
                w[j] = w_;                                                           \
                blob__elem_set(a->half, wk, j, w_);                                  \
            }                                                                        \
            if (h)                                                                   \
                h[j] = h_;                                                           \
            if (v)                                                                   \
                v[j] = v_;                                                           \
        }                                                                            \
    }
STEP_RANGE_MIXED(sgd_mixed, BLOB_OPTIM_SGD)
STEP_RANGE_MIXED(sgd_caffe_mixed, BLOB_OPTIM_SGD_CAFFE)
STEP_RANGE_MIXED(adam_mixed, BLOB_OPTIM_ADAM)
STEP_RANGE_MIXED(adamw_mixed, BLOB_OPTIM_ADAMW)

/* [dtype][kind]; the mixed steps' third */
static const blob__range_fn step_ranges[3][4] = {
    {sgd_f32, sgd_caffe_f32, adam_f32, adamw_f32},
    {sgd_f64, sgd_caffe_f64, adam_f64, adamw_f64},
    {sgd_mixed, sgd_caffe_mixed, adam_mixed, adamw_mixed},
};

/* The host step of checked arguments, of the given form. */
static void cpu_step(const blob_optim *opt, blob__step_form form, blob_dtype dtype,
                     blob_dtype gdtype, double inv_scale, int n, const int64_t *counts,
                     void *const *data, void *const *lo, const void *const *diff,
                     void *const *hist1, void *const *hist2, void *const *work, int64_t *step)
{
    const int hist = blob_optim_history_count(opt);
    const bool split = form == BLOB__STEP_SPLIT;
    const int table = form != BLOB__STEP_PLAIN ? 2 : dtype == BLOB_FLOAT32 ? 0 : 1;
    scalars_f32 s32;
    scalars_f64 s64;
    BLOB__OPTIM_FILL(float, s32, opt, step[0] + 1);
    BLOB__OPTIM_FILL(double, s64, opt, step[0] + 1);
    for (int i = 0; i < n; i++) {
        step_args a = {dtype == BLOB_FLOAT32 ? (const void *)&s32 : (const void *)&s64,
                       split ? NULL : data[i],
                       diff[i],
                       hist >= 1 ? hist1[i] : NULL,
                       hist >= 2 ? hist2[i] : NULL,
                       gdtype,
                       (float)inv_scale,
                       form != BLOB__STEP_PLAIN ? work[i] : NULL,
                       split ? lo[i] : NULL};
        blob__host_for(blob__host_threads(counts[i]), counts[i], step_ranges[table][opt->kind], &a);
    }
    step[0]++;
}

blob_status blob_cpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                const int64_t *counts, void *const *data, const void *const *diff,
                                void *const *hist1, void *const *hist2, int64_t *step)
{
    BLOB_TRY(check_step(__func__, opt, BLOB__STEP_PLAIN, dtype, dtype, n, counts, data, NULL, diff,
                        hist1, hist2, NULL, step));
    cpu_step(opt, BLOB__STEP_PLAIN, dtype, dtype, 1, n, counts, data, NULL, diff, hist1, hist2,
             NULL, step);
    return BLOB_OK;
}

blob_status blob_gpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                const int64_t *counts, void *const *data, const void *const *diff,
                                void *const *hist1, void *const *hist2, int64_t *step)
{
    BLOB_TRY(check_step(__func__, opt, BLOB__STEP_PLAIN, dtype, dtype, n, counts, data, NULL, diff,
                        hist1, hist2, NULL, step));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_optim_step(blob_stream_get(), opt, BLOB__STEP_PLAIN, dtype, n, counts, data,
                              NULL, diff, hist1, hist2, NULL, 1, step);
}

/* The checks of a mixed or split step: a 16-bit half and a finite positive inv_scale, then
 * the arrays. */
static blob_status check_mixed(const char *fn, const blob_optim *opt, blob__step_form form,
                               blob_dtype half, double inv_scale, int n, const int64_t *counts,
                               void *const *data, void *const *lo, const void *const *diff,
                               void *const *hist1, void *const *hist2, void *const *work,
                               const int64_t *step)
{
    BLOB_TRY(check_half(fn, half));
    BLOB_NEED(inv_scale > 0 && isfinite(inv_scale) && isfinite((float)inv_scale), fn,
              "bad gradient factor %g (not finite and positive in float32)", inv_scale);
    return check_step(fn, opt, form, BLOB_FLOAT32, half, n, counts, data, lo, diff, hist1, hist2,
                      work, step);
}

blob_status blob_cpu_optim_step_mixed(const blob_optim *opt, blob_dtype half, double inv_scale,
                                      int n, const int64_t *counts, void *const *data,
                                      const void *const *diff, void *const *hist1,
                                      void *const *hist2, void *const *work, int64_t *step)
{
    BLOB_TRY(check_mixed(__func__, opt, BLOB__STEP_MIXED, half, inv_scale, n, counts, data, NULL,
                         diff, hist1, hist2, work, step));
    cpu_step(opt, BLOB__STEP_MIXED, BLOB_FLOAT32, half, inv_scale, n, counts, data, NULL, diff,
             hist1, hist2, work, step);
    return BLOB_OK;
}

blob_status blob_gpu_optim_step_mixed(const blob_optim *opt, blob_dtype half, double inv_scale,
                                      int n, const int64_t *counts, void *const *data,
                                      const void *const *diff, void *const *hist1,
                                      void *const *hist2, void *const *work, int64_t *step)
{
    BLOB_TRY(check_mixed(__func__, opt, BLOB__STEP_MIXED, half, inv_scale, n, counts, data, NULL,
                         diff, hist1, hist2, work, step));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_optim_step(blob_stream_get(), opt, BLOB__STEP_MIXED, half, n, counts, data, NULL,
                              diff, hist1, hist2, work, inv_scale, step);
}

/* The split step: the mixed step of bfloat16 over master weights kept as work[i] and lo[i]. */
blob_status blob_cpu_optim_step_split(const blob_optim *opt, double inv_scale, int n,
                                      const int64_t *counts, void *const *work, void *const *lo,
                                      const void *const *diff, void *const *hist1,
                                      void *const *hist2, int64_t *step)
{
    BLOB_TRY(check_mixed(__func__, opt, BLOB__STEP_SPLIT, BLOB_BFLOAT16, inv_scale, n, counts, NULL,
                         lo, diff, hist1, hist2, work, step));
    cpu_step(opt, BLOB__STEP_SPLIT, BLOB_FLOAT32, BLOB_BFLOAT16, inv_scale, n, counts, NULL, lo,
             diff, hist1, hist2, work, step);
    return BLOB_OK;
}

blob_status blob_gpu_optim_step_split(const blob_optim *opt, double inv_scale, int n,
                                      const int64_t *counts, void *const *work, void *const *lo,
                                      const void *const *diff, void *const *hist1,
                                      void *const *hist2, int64_t *step)
{
    BLOB_TRY(check_mixed(__func__, opt, BLOB__STEP_SPLIT, BLOB_BFLOAT16, inv_scale, n, counts, NULL,
                         lo, diff, hist1, hist2, work, step));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_optim_step(blob_stream_get(), opt, BLOB__STEP_SPLIT, BLOB_BFLOAT16, n, counts,
                              NULL, lo, diff, hist1, hist2, work, inv_scale, step);
}

/* ---- Splitting and joining master weights ---- */

static blob_status check_master(const char *fn, int64_t count, const void *master, const void *hi,
                                const void *lo)
{
    BLOB_TRY(blob__check_array(fn, BLOB_FLOAT32, count, "master", master));
    BLOB_TRY(blob__check_array(fn, BLOB_BFLOAT16, count, "hi", hi));
    return blob__check_array(fn, BLOB_BFLOAT16, count, "lo", lo);
}

blob_status blob_cpu_master_split(int64_t count, const float *master, uint16_t *hi, uint16_t *lo)
{
    BLOB_TRY(check_master(__func__, count, master, hi, lo));
    for (int64_t j = 0; j < count; j++)
        master_split(master[j], hi, lo, j);
    return BLOB_OK;
}

blob_status blob_cpu_master_join(int64_t count, const uint16_t *hi, const uint16_t *lo,
                                 float *master)
{
    BLOB_TRY(check_master(__func__, count, master, hi, lo));
    for (int64_t j = 0; j < count; j++)
        master[j] = master_join(hi, lo, j);
    return BLOB_OK;
}

/* ---- Finding Inf and NaN ---- */

static blob_status check_find(const char *fn, blob_dtype dtype, int n, const int64_t *counts,
                              const void *const *x, const int32_t *found)
{
    if (!blob_dtype_size(dtype))
        return blob__fail(BLOB_EINVAL, fn, "bad dtype %d", (int)dtype);
    if (!blob_dtype_is_float(dtype))
        return blob__fail(BLOB_ENOTSUP, fn, "%s is not a float dtype", blob_dtype_name(dtype));
    BLOB_NEED(found, fn, "found is NULL");
    BLOB_NEED(n >= 0, fn, "negative tensor count %d", n);
    BLOB_NEED(n == 0 || (counts && x), fn, "%s is NULL with %d tensors", counts ? "x" : "counts",
              n);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "x[%d]", i);
        BLOB_TRY(blob__check_array(fn, dtype, counts[i], name, x[i]));
    }
    return BLOB_OK;
}

blob_status blob_cpu_find_nonfinite(blob_dtype dtype, int n, const int64_t *counts,
                                    const void *const *x, int32_t *found)
{
    BLOB_TRY(check_find(__func__, dtype, n, counts, x, found));
    for (int i = 0; i < n && !*found; i++)
        for (int64_t j = 0; j < counts[i]; j++)
            if (!isfinite(blob__elem_get(dtype, x[i], j))) {
                *found = 1;
                break;
            }
    return BLOB_OK;
}

blob_status blob_gpu_find_nonfinite(blob_dtype dtype, int n, const int64_t *counts,
                                    const void *const *x, int32_t *found)
{
    BLOB_TRY(check_find(__func__, dtype, n, counts, x, found));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_find_nonfinite(blob_stream_get(), dtype, n, counts, x, found);
}
