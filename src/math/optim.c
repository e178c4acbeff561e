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
    BLOB_NEED(opt->weight_decay >= 0 && isfinite(opt->weight_decay), fn,
              "bad weight decay %g", opt->weight_decay);
    if (opt->kind == BLOB_OPTIM_SGD || opt->kind == BLOB_OPTIM_SGD_CAFFE) {
        BLOB_NEED(opt->momentum >= 0 && isfinite(opt->momentum), fn, "bad momentum %g",
                  opt->momentum);
        BLOB_NEED(isfinite(opt->dampening), fn, "bad dampening %g", opt->dampening);
        BLOB_NEED(!opt->nesterov || (opt->kind == BLOB_OPTIM_SGD && opt->momentum > 0 &&
                                     opt->dampening == 0),
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

static blob_status check_step(const char *fn, const blob_optim *opt, blob_dtype dtype, int n,
                              const int64_t *counts, void *const *data,
                              const void *const *diff, void *const *hist1, void *const *hist2,
                              const int64_t *step)
{
    BLOB_TRY(check_optim(fn, opt));
    BLOB_TRY(blob__check_dtype(fn, dtype));
    if (!step)
        return blob__fail(BLOB_EINVAL, fn, "step is NULL");
    if (n < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative tensor count %d", n);
    const int hist = blob_optim_history_count(opt);
    const void *lists[] = {counts, data, diff, hist1, hist2};
    static const char *const names[] = {"counts", "data", "diff", "hist1", "hist2"};
    for (int l = 0; n > 0 && l < 3 + hist; l++)
        if (!lists[l])
            return blob__fail(BLOB_EINVAL, fn, "%s is NULL with %d tensors", names[l], n);
    for (int i = 0; i < n; i++) {
        const void *arrays[] = {data[i], diff[i], hist >= 1 ? hist1[i] : NULL,
                                hist >= 2 ? hist2[i] : NULL};
        for (int a = 0; a < 2 + hist; a++) {
            char name[32];
            snprintf(name, sizeof name, "%s[%d]", names[1 + a], i);
            BLOB_TRY(blob__check_array(fn, dtype, counts[i], name, arrays[a]));
        }
    }
    return BLOB_OK;
}

/* ---- Host side ---- */

#define HOST_SQRT(x) _Generic((x), float: sqrtf, default: sqrt)(x)

typedef struct {
    BLOB__OPTIM_SCALAR_FIELDS(float)
} scalars_f32;
typedef struct {
    BLOB__OPTIM_SCALAR_FIELDS(double)
} scalars_f64;

/* The arguments of one tensor's loop: the scalars of the step (of the element type) and
 * the arrays (h and v NULL when unused). */
typedef struct {
    const void *s;
    void *w;
    const void *g;
    void *h, *v;
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
#define STEP_RANGE(NAME, T, V, VSQRT, SCALARS, K)                                         \
    static void NAME(void *args, int64_t lo, int64_t hi)                                  \
    {                                                                                     \
        const step_args *a = args;                                                        \
        const SCALARS s = *(const SCALARS *)a->s;                                         \
        T *w = a->w, *h = a->h, *v = a->v;                                                \
        const T *g = a->g;                                                                \
        const int64_t lanes = (int64_t)(sizeof(V) / sizeof(T));                           \
        int64_t j = lo;                                                                   \
        for (; j + lanes <= hi; j += lanes) {                                             \
            V w_, g_v, h_ = {0}, v_ = {0};                                                \
            memcpy(&w_, w + j, sizeof w_);                                                \
            memcpy(&g_v, g + j, sizeof g_v);                                              \
            if (h)                                                                        \
                memcpy(&h_, h + j, sizeof h_);                                            \
            if (v)                                                                        \
                memcpy(&v_, v + j, sizeof v_);                                            \
            BLOB__OPTIM_ELEMENT(V, K, s, VSQRT, w_, g_v, h_, v_);                         \
            memcpy(w + j, &w_, sizeof w_);                                                \
            if (h)                                                                        \
                memcpy(h + j, &h_, sizeof h_);                                            \
            if (v)                                                                        \
                memcpy(v + j, &v_, sizeof v_);                                            \
        }                                                                                 \
        for (; j < hi; j++) {                                                             \
            T h_ = h ? h[j] : 0, v_ = v ? v[j] : 0;                                       \
            BLOB__OPTIM_ELEMENT(T, K, s, HOST_SQRT, w[j], g[j], h_, v_);                  \
            if (h)                                                                        \
                h[j] = h_;                                                                \
            if (v)                                                                        \
                v[j] = v_;                                                                \
        }                                                                                 \
    }
STEP_RANGE(sgd_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_SGD)
STEP_RANGE(sgd_caffe_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_SGD_CAFFE)
STEP_RANGE(adam_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_ADAM)
STEP_RANGE(adamw_f32, float, vec_f32, vec_sqrt_f32, scalars_f32, BLOB_OPTIM_ADAMW)
STEP_RANGE(sgd_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_SGD)
STEP_RANGE(sgd_caffe_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_SGD_CAFFE)
STEP_RANGE(adam_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_ADAM)
STEP_RANGE(adamw_f64, double, vec_f64, vec_sqrt_f64, scalars_f64, BLOB_OPTIM_ADAMW)

/* [dtype][kind] */
static const blob__range_fn step_ranges[2][4] = {
    {sgd_f32, sgd_caffe_f32, adam_f32, adamw_f32},
    {sgd_f64, sgd_caffe_f64, adam_f64, adamw_f64},
};

blob_status blob_cpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                const int64_t *counts, void *const *data,
                                const void *const *diff, void *const *hist1,
                                void *const *hist2, int64_t *step)
{
    BLOB_TRY(check_step(__func__, opt, dtype, n, counts, data, diff, hist1, hist2, step));
    const int hist = blob_optim_history_count(opt);
    scalars_f32 s32;
    scalars_f64 s64;
    BLOB__OPTIM_FILL(float, s32, opt, step[0] + 1);
    BLOB__OPTIM_FILL(double, s64, opt, step[0] + 1);
    for (int i = 0; i < n; i++) {
        step_args a = {dtype == BLOB_FLOAT32 ? (const void *)&s32 : (const void *)&s64, data[i],
                       diff[i], hist >= 1 ? hist1[i] : NULL, hist >= 2 ? hist2[i] : NULL};
        blob__host_for(blob__host_threads(counts[i]), counts[i], step_ranges[dtype][opt->kind],
                       &a);
    }
    step[0]++;
    return BLOB_OK;
}

blob_status blob_gpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                const int64_t *counts, void *const *data,
                                const void *const *diff, void *const *hist1,
                                void *const *hist2, int64_t *step)
{
    BLOB_TRY(check_step(__func__, opt, dtype, n, counts, data, diff, hist1, hist2, step));
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__k_optim_step(blob_stream_get(), opt, dtype, n, counts, data, diff, hist1, hist2,
                              step);
}
