/* Multi-tensor optimizer steps on raw arrays (blob/math.h): the checks shared by both
 * sides, the host loop, and the GPU side handing validated arguments to the launcher.
 * The update of one element is written once, in optim_formula.h, for both sides. */
#include <math.h>
#include <stdio.h>

#include "blob/device.h"
#include "blob/math.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "../kernels/optim_formula.h"
#include "math_impl.h"

blob_optim blob_optim_default(blob_optim_kind kind, double lr)
{
    blob_optim o = {.kind = kind, .lr = lr};
    if (kind == BLOB_OPTIM_ADAM || kind == BLOB_OPTIM_ADAMW) {
        o.beta1 = 0.9;
        o.beta2 = 0.999;
        o.eps = 1e-8;
        o.weight_decay = kind == BLOB_OPTIM_ADAMW ? 0.01 : 0;
    }
    return o;
}

int blob_optim_history_count(const blob_optim *opt)
{
    if (!opt)
        return -1;
    switch (opt->kind) {
    case BLOB_OPTIM_SGD:
        return opt->momentum != 0;
    case BLOB_OPTIM_SGD_CAFFE:
        return 1;
    case BLOB_OPTIM_ADAM:
    case BLOB_OPTIM_ADAMW:
        return 2;
    }
    return -1;
}

/* The fields of opt that its kind uses, as PyTorch checks them. */
static blob_status check_optim(const char *fn, const blob_optim *opt)
{
    if (!opt)
        return blob__fail(BLOB_EINVAL, fn, "opt is NULL");
    if (blob_optim_history_count(opt) < 0)
        return blob__fail(BLOB_EINVAL, fn, "bad optimizer kind %d", (int)opt->kind);
#define NEED(cond, ...)                                    \
    do {                                                   \
        if (!(cond))                                       \
            return blob__fail(BLOB_EINVAL, fn, __VA_ARGS__); \
    } while (0)
    NEED(opt->lr >= 0 && isfinite(opt->lr), "bad learning rate %g", opt->lr);
    NEED(opt->weight_decay >= 0 && isfinite(opt->weight_decay), "bad weight decay %g",
         opt->weight_decay);
    if (opt->kind == BLOB_OPTIM_SGD || opt->kind == BLOB_OPTIM_SGD_CAFFE) {
        NEED(opt->momentum >= 0 && isfinite(opt->momentum), "bad momentum %g", opt->momentum);
        NEED(isfinite(opt->dampening), "bad dampening %g", opt->dampening);
        NEED(!opt->nesterov || (opt->kind == BLOB_OPTIM_SGD && opt->momentum > 0 &&
                                opt->dampening == 0),
             "Nesterov momentum needs SGD with momentum > 0 and dampening 0");
    } else {
        NEED(opt->beta1 >= 0 && opt->beta1 < 1, "bad beta1 %g (not in [0, 1))", opt->beta1);
        NEED(opt->beta2 >= 0 && opt->beta2 < 1, "bad beta2 %g (not in [0, 1))", opt->beta2);
        NEED(opt->eps >= 0 && isfinite(opt->eps), "bad eps %g", opt->eps);
        NEED(!opt->nesterov, "Nesterov momentum needs SGD");
    }
#undef NEED
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

/* Every element of one tensor with kind K (a constant), on the host's threads. */
#define HOST_LOOP(T, K)                                                                    \
    do {                                                                                   \
        _Pragma("omp parallel for num_threads(nt) if(nt > 1) schedule(static)")            \
        for (int64_t j = 0; j < count; j++) {                                              \
            T h_ = h ? h[j] : 0, v_ = v ? v[j] : 0;                                        \
            BLOB__OPTIM_ELEMENT(T, K, s, HOST_SQRT, w[j], g[j], h_, v_);                   \
            if (h)                                                                         \
                h[j] = h_;                                                                 \
            if (v)                                                                         \
                v[j] = v_;                                                                 \
        }                                                                                  \
    } while (0)

#define HOST_STEP(T)                                                                       \
    do {                                                                                   \
        struct { BLOB__OPTIM_SCALAR_FIELDS(T) } s;                                         \
        BLOB__OPTIM_FILL(T, s, opt, step[0] + 1);                                          \
        for (int i = 0; i < n; i++) {                                                      \
            const int64_t count = counts[i];                                               \
            const int nt = blob__host_threads(count);                                      \
            T *w = data[i];                                                                \
            const T *g = diff[i];                                                          \
            T *h = hist >= 1 ? (T *)hist1[i] : NULL, *v = hist >= 2 ? (T *)hist2[i] : NULL; \
            switch (opt->kind) {                                                           \
            case BLOB_OPTIM_SGD:                                                           \
                HOST_LOOP(T, BLOB_OPTIM_SGD);                                              \
                break;                                                                     \
            case BLOB_OPTIM_SGD_CAFFE:                                                     \
                HOST_LOOP(T, BLOB_OPTIM_SGD_CAFFE);                                        \
                break;                                                                     \
            case BLOB_OPTIM_ADAM:                                                          \
                HOST_LOOP(T, BLOB_OPTIM_ADAM);                                             \
                break;                                                                     \
            case BLOB_OPTIM_ADAMW:                                                         \
                HOST_LOOP(T, BLOB_OPTIM_ADAMW);                                            \
                break;                                                                     \
            }                                                                              \
        }                                                                                  \
    } while (0)

blob_status blob_cpu_optim_step(const blob_optim *opt, blob_dtype dtype, int n,
                                const int64_t *counts, void *const *data,
                                const void *const *diff, void *const *hist1,
                                void *const *hist2, int64_t *step)
{
    BLOB_TRY(check_step(__func__, opt, dtype, n, counts, data, diff, hist1, hist2, step));
    const int hist = blob_optim_history_count(opt);
    if (dtype == BLOB_FLOAT32)
        HOST_STEP(float);
    else
        HOST_STEP(double);
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
    return blob__k_optim_step(blob_get_stream(), opt, dtype, n, counts, data, diff, hist1, hist2,
                              step);
}
