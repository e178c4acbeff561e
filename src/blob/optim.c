/* Optimizer steps over parameter blobs (blob/optim.h): the state keeps the history blobs
 * and the step count, and a step gathers the pointers of every block on one side and
 * hands them to one multi-tensor step (blob_cpu_optim_step, blob_gpu_optim_step, or their
 * mixed forms); the gradient scaler keeps the loss scale and an overflow flag. */
#include <math.h>
#include <string.h>

#include "../core/core.h"
#include "../syncedmem/syncedmem_internal.h"
#include "blob/optim.h"
#include "blob_impl.h"

struct blob_optim_state {
    int n; /* parameters bound; 0 until the first step */
    blob_dtype dtype;
    int device;
    blob **hist[2];       /* [n] each; an entry is NULL until needed */
    blob_syncedmem *step; /* BLOB_OPTIM_STEP_WORDS int64_t */
    /* the argument lists of the multi-tensor step, [n] each, made once */
    int64_t *counts;
    void **data, **diff, **h1, **h2, **work;
};

struct blob_grad_scaler {
    double scale, growth, backoff;
    int64_t interval, good_steps; /* steps without overflow since the scale last changed */
    bool checked;                 /* the gradients were checked since the last step */
    blob_syncedmem *found;        /* int32: an Inf or NaN seen; made on the first check */
};

blob_status blob_optim_state_create(blob_optim_state **out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = blob__obj_alloc(sizeof **out);
    return *out ? BLOB_OK : BLOB_ENOMEM;
}

static void unbind(blob_optim_state *s)
{
    for (int w = 0; w < 2; w++) {
        for (int i = 0; s->hist[w] && i < s->n; i++)
            blob_free(s->hist[w][i]);
        blob__obj_free(s->hist[w]);
        s->hist[w] = NULL;
    }
    blob_syncedmem_free(s->step);
    blob__obj_free(s->counts);
    s->step = NULL;
    s->counts = NULL;
    s->n = 0;
}

void blob_optim_state_free(blob_optim_state *state)
{
    if (!state)
        return;
    unbind(state);
    blob__obj_free(state);
}

/* Bind an empty state to n parameters like params[0]. */
static blob_status bind(blob_optim_state *s, blob *const *params, int n)
{
    const blob *p = params[0];
    int64_t *counts = blob__obj_alloc((size_t)n * (sizeof(int64_t) + 5 * sizeof(void *)));
    blob **h0 = blob__obj_alloc((size_t)n * sizeof(blob *));
    blob **h1 = blob__obj_alloc((size_t)n * sizeof(blob *));
    blob_syncedmem *step = NULL;
    blob_status st = counts && h0 && h1 ? BLOB_OK : BLOB_ENOMEM;
    if (st == BLOB_OK)
        st = blob_syncedmem_create(&step, BLOB_OPTIM_STEP_WORDS * sizeof(int64_t), p->device);
    if (st != BLOB_OK) {
        blob__obj_free(counts);
        blob__obj_free(h0);
        blob__obj_free(h1);
        return st;
    }
    void **lists = (void **)(counts + n);
    *s = (blob_optim_state){n,     p->dtype,  p->device,     {h0, h1},      step,         counts,
                            lists, lists + n, lists + 2 * n, lists + 3 * n, lists + 4 * n};
    for (int i = 0; i < n; i++)
        counts[i] = params[i]->count;
    return BLOB_OK;
}

static blob_status check_params(const char *func, const blob_optim_state *s, blob *const *params,
                                int n)
{
    for (int i = 0; i < n; i++) {
        const blob *p = params[i];
        if (!p)
            return blob__fail(BLOB_EINVAL, func, "params[%d] is NULL", i);
        if (p->dtype != params[0]->dtype || p->device != params[0]->device)
            return blob__fail(BLOB_EINVAL, func,
                              "params[%d] differs from params[0] in dtype or device", i);
        if (s->n && p->count != s->counts[i])
            return blob__fail(BLOB_ESHAPE, func, "params[%d] has %lld elements, its history %lld",
                              i, (long long)p->count, (long long)s->counts[i]);
    }
    if (s->n && (params[0]->dtype != s->dtype || params[0]->device != s->device))
        return blob__fail(BLOB_EINVAL, func, "the parameters' dtype or device changed");
    return BLOB_OK;
}

/* A pointer to mem on the side, for reading (write == false) or for writing what is
 * read: the side is made current first (copied if stale, zeroed if new). */
static blob_status side_ptr(const char *func, blob_syncedmem *mem, bool gpu, bool write, void **out)
{
    const void *p;
    BLOB_TRY(gpu ? blob_syncedmem_gpu_data(mem, &p) : blob_syncedmem_cpu_data(mem, &p));
    if (!write) {
        *out = (void *)p;
        return BLOB_OK;
    }
    return blob__syncedmem_write_side(func, mem, gpu, out);
}

static bool head_on_gpu(const blob_syncedmem *mem)
{
    blob_head h = blob_syncedmem_head(mem);
    return h == BLOB_HEAD_AT_GPU || h == BLOB_HEAD_SYNCED;
}

/* The working copies of a mixed step: one 16-bit float dtype, like master in device and
 * counts. */
static blob_status check_work(const char *func, blob *const *master, blob *const *work, int n)
{
    for (int i = 0; i < n; i++) {
        const blob *w = work[i];
        if (!w)
            return blob__fail(BLOB_EINVAL, func, "work[%d] is NULL", i);
        if (w->dtype != BLOB_BFLOAT16 && w->dtype != BLOB_FLOAT16)
            return blob__fail(BLOB_ENOTSUP, func, "work[%d] is %s (bfloat16 and float16 only)", i,
                              blob_dtype_name(w->dtype));
        if (w->dtype != work[0]->dtype || w->device != master[0]->device)
            return blob__fail(BLOB_EINVAL, func,
                              "work[%d] differs from work[0] in dtype or master in device", i);
        if (w->count != master[i]->count)
            return blob__fail(BLOB_ESHAPE, func, "work[%d] has %lld elements, master %lld", i,
                              (long long)w->count, (long long)master[i]->count);
    }
    if (master[0]->dtype != BLOB_FLOAT32)
        return blob__fail(BLOB_ENOTSUP, func, "master weights of %s (float32 only)",
                          blob_dtype_name(master[0]->dtype));
    return BLOB_OK;
}

/* The arguments of a step over params (and work when not NULL). */
static blob_status check_step_args(const char *func, const blob_optim *opt, blob *const *params,
                                   blob *const *work, int n, const blob_optim_state *state)
{
    if (!opt || !params || !state)
        return blob__fail(BLOB_EINVAL, func, "%s is NULL",
                          !opt      ? "opt"
                          : !params ? "params"
                                    : "state");
    if (n < 1)
        return blob__fail(BLOB_EINVAL, func, "%d parameters", n);
    if (state->n && n != state->n)
        return blob__fail(BLOB_ESHAPE, func, "%d parameters, the state is bound to %d", n,
                          state->n);
    const int hist = blob_optim_history_count(opt);
    if (hist < 0)
        return blob__fail(BLOB_EINVAL, func, "bad optimizer kind %d", (int)opt->kind);
    BLOB_TRY(check_params(func, state, params, n));
    return work ? check_work(func, params, work, n) : BLOB_OK;
}

/* One step over params, reading the gradients of work (when not NULL: a mixed step, each
 * gradient multiplied by inv_scale, and the working copies written) or of the params. */
static blob_status step_blobs(const char *func, const blob_optim *opt, blob *const *params,
                              blob *const *work, int n, blob_optim_state *state, double inv_scale)
{
    BLOB_TRY(check_step_args(func, opt, params, work, n, state));
    const int hist = blob_optim_history_count(opt);
    const bool bound = state->n > 0;
    if (!bound)
        BLOB_TRY(bind(state, params, n));
    blob_optim_state *s = state;

    /* Histories missing so far (zero, like the ones a failed step leaves behind). */
    blob_status st = BLOB_OK;
    for (int w = 0; w < hist && st == BLOB_OK; w++)
        for (int i = 0; i < n && st == BLOB_OK; i++)
            if (!s->hist[w][i])
                st = blob_create(&s->hist[w][i], s->dtype, s->device, params[i]->num_axes,
                                 params[i]->shape);

    const bool gpu = head_on_gpu(params[0]->data);
    void *step = NULL;
    for (int i = 0; i < n && st == BLOB_OK; i++) {
        blob *p = params[i];
        st = side_ptr(func, p->data, gpu, true, &s->data[i]);
        if (st == BLOB_OK)
            st = side_ptr(func, (work ? work[i] : p)->diff, gpu, false, &s->diff[i]);
        if (st == BLOB_OK && work)
            st = side_ptr(func, work[i]->data, gpu, true, &s->work[i]);
        for (int w = 0; w < hist && st == BLOB_OK; w++)
            st = side_ptr(func, s->hist[w][i]->data, gpu, true, w ? &s->h2[i] : &s->h1[i]);
    }
    if (st == BLOB_OK)
        st = side_ptr(func, s->step, gpu, true, &step);
    void *const *h1 = hist >= 1 ? s->h1 : NULL, *const *h2 = hist >= 2 ? s->h2 : NULL;
    const void *const *diff = (const void *const *)s->diff;
    if (st == BLOB_OK && work)
        st = (gpu ? blob_gpu_optim_step_mixed : blob_cpu_optim_step_mixed)(
            opt, work[0]->dtype, inv_scale, n, s->counts, s->data, diff, h1, h2, s->work, step);
    else if (st == BLOB_OK)
        st = (gpu ? blob_gpu_optim_step : blob_cpu_optim_step)(opt, s->dtype, n, s->counts, s->data,
                                                               diff, h1, h2, step);
    if (st != BLOB_OK) {
        if (!bound)
            unbind(s);
        return st;
    }
    for (int i = 0; i < n; i++) {
        blob__syncedmem_claim(params[i]->data, gpu);
        if (work)
            blob__syncedmem_claim(work[i]->data, gpu);
        for (int w = 0; w < hist; w++)
            blob__syncedmem_claim(s->hist[w][i]->data, gpu);
    }
    blob__syncedmem_claim(s->step, gpu);
    return BLOB_OK;
}

blob_status blob_optim_step(const blob_optim *opt, blob *const *params, int n,
                            blob_optim_state *state)
{
    return step_blobs(__func__, opt, params, NULL, n, state, 1);
}

/* ---- Loss scaling ---- */

blob_status blob_grad_scaler_create(blob_grad_scaler **out, double init_scale)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    if (!(init_scale > 0 && isfinite(init_scale) && isfinite(1 / init_scale)))
        return BLOB_FAIL(BLOB_EINVAL, "bad initial scale %g", init_scale);
    blob_grad_scaler *sc = blob__obj_alloc(sizeof *sc);
    if (!sc)
        return BLOB_ENOMEM;
    *sc = (blob_grad_scaler){.scale = init_scale, .growth = 2, .backoff = 0.5, .interval = 2000};
    *out = sc;
    return BLOB_OK;
}

void blob_grad_scaler_free(blob_grad_scaler *sc)
{
    if (!sc)
        return;
    blob_syncedmem_free(sc->found);
    blob__obj_free(sc);
}

blob_status blob_grad_scaler_set(blob_grad_scaler *sc, double growth_factor, double backoff_factor,
                                 int64_t growth_interval)
{
    if (!sc)
        return BLOB_FAIL(BLOB_EINVAL, "sc is NULL");
    if (!(growth_factor > 1 && isfinite(growth_factor)))
        return BLOB_FAIL(BLOB_EINVAL, "bad growth factor %g (not above 1)", growth_factor);
    if (!(backoff_factor > 0 && backoff_factor < 1))
        return BLOB_FAIL(BLOB_EINVAL, "bad backoff factor %g (not in (0, 1))", backoff_factor);
    if (growth_interval < 1)
        return BLOB_FAIL(BLOB_EINVAL, "bad growth interval %lld", (long long)growth_interval);
    sc->growth = growth_factor;
    sc->backoff = backoff_factor;
    sc->interval = growth_interval;
    sc->good_steps = 0;
    return BLOB_OK;
}

double blob_grad_scaler_scale(const blob_grad_scaler *sc)
{
    if (!sc) {
        BLOB_FAIL(BLOB_EINVAL, "sc is NULL");
        return 0;
    }
    return sc->scale;
}

/* Check the gradients (diffs) of work for Inf and NaN on the side of work[0]'s diff. */
static blob_status check_grads(const char *func, blob_grad_scaler *sc, blob *const *work, int n)
{
    if (!sc || !work)
        return blob__fail(BLOB_EINVAL, func, "%s is NULL", !sc ? "sc" : "work");
    if (n < 1)
        return blob__fail(BLOB_EINVAL, func, "%d blobs", n);
    for (int i = 0; i < n; i++) {
        if (!work[i])
            return blob__fail(BLOB_EINVAL, func, "work[%d] is NULL", i);
        if (work[i]->dtype != work[0]->dtype || work[i]->device != work[0]->device)
            return blob__fail(BLOB_EINVAL, func, "work[%d] differs from work[0] in dtype or device",
                              i);
    }
    if (!blob_dtype_is_float(work[0]->dtype))
        return blob__fail(BLOB_ENOTSUP, func, "%s is not a float dtype",
                          blob_dtype_name(work[0]->dtype));
    if (!sc->found)
        BLOB_TRY(blob_syncedmem_create(&sc->found, sizeof(int32_t), work[0]->device));
    const bool gpu = head_on_gpu(work[0]->diff);
    int64_t small[16], *counts = small;
    const void *small_p[16], **grads = small_p;
    if (n > 16) {
        counts = blob__obj_alloc((size_t)n * sizeof *counts);
        grads = blob__obj_alloc((size_t)n * sizeof *grads);
    }
    blob_status st = counts && grads ? BLOB_OK : BLOB_ENOMEM;
    for (int i = 0; i < n && st == BLOB_OK; i++) {
        void *p = NULL;
        counts[i] = work[i]->count;
        st = side_ptr(func, work[i]->diff, gpu, false, &p);
        grads[i] = p;
    }
    void *found = NULL;
    if (st == BLOB_OK)
        st = side_ptr(func, sc->found, gpu, true, &found);
    if (st == BLOB_OK)
        st = (gpu ? blob_gpu_find_nonfinite : blob_cpu_find_nonfinite)(work[0]->dtype, n, counts,
                                                                       grads, found);
    if (st == BLOB_OK) {
        blob__syncedmem_claim(sc->found, gpu);
        sc->checked = true;
    }
    if (counts != small) {
        blob__obj_free(counts);
        blob__obj_free(grads);
    }
    return st;
}

blob_status blob_grad_scaler_unscale(blob_grad_scaler *sc, blob *const *work, int n)
{
    return check_grads(__func__, sc, work, n);
}

blob_status blob_optim_step_mixed(const blob_optim *opt, blob *const *master, blob *const *work,
                                  int n, blob_optim_state *state, blob_grad_scaler *sc,
                                  bool *skipped)
{
    if (skipped)
        *skipped = false;
    if (!work)
        return BLOB_FAIL(BLOB_EINVAL, "work is NULL");
    if (!sc)
        return step_blobs(__func__, opt, master, work, n, state, 1);
    BLOB_TRY(check_step_args(__func__, opt, master, work, n, state));
    if (!sc->checked)
        BLOB_TRY(check_grads(__func__, sc, work, n));
    /* the step decides here: the flag is read back (waiting for the check on the GPU) */
    const void *p;
    BLOB_TRY(blob_syncedmem_cpu_data(sc->found, &p));
    if (*(const int32_t *)p) {
        void *w;
        BLOB_TRY(blob__syncedmem_write_side(__func__, sc->found, false, &w));
        *(int32_t *)w = 0;
        blob__syncedmem_claim(sc->found, false);
        sc->checked = false;
        sc->scale *= sc->backoff;
        sc->good_steps = 0;
        if (skipped)
            *skipped = true;
        return BLOB_OK;
    }
    BLOB_TRY(step_blobs(__func__, opt, master, work, n, state, 1 / sc->scale));
    sc->checked = false;
    if (++sc->good_steps == sc->interval) {
        sc->scale *= sc->growth;
        sc->good_steps = 0;
    }
    return BLOB_OK;
}

blob_status blob_optim_state_steps(blob_optim_state *state, int64_t *out)
{
    if (!state || !out)
        return BLOB_FAIL(BLOB_EINVAL, "%s is NULL", !state ? "state" : "out");
    if (!state->n) {
        *out = 0;
        return BLOB_OK;
    }
    const void *p;
    BLOB_TRY(blob_syncedmem_cpu_data(state->step, &p));
    *out = ((const int64_t *)p)[0];
    return BLOB_OK;
}

blob *blob_optim_state_history(const blob_optim_state *state, int param, int which)
{
    if (!state) {
        BLOB_FAIL(BLOB_EINVAL, "state is NULL");
        return NULL;
    }
    if (param < 0 || param >= state->n || which < 0 || which > 1)
        return NULL;
    return state->hist[which][param];
}
