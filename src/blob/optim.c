/* Optimizer steps over parameter blobs (blob/optim.h): the state keeps the history blobs
 * and the step count, and a step gathers the pointers of every block on one side and
 * hands them to one multi-tensor step (blob_cpu_optim_step, blob_gpu_optim_step). */
#include <string.h>

#include "../core/core.h"
#include "../syncedmem/syncedmem_internal.h"
#include "blob/optim.h"
#include "blob_impl.h"

struct blob_optim_state {
    int n;              /* parameters bound; 0 until the first step */
    blob_dtype dtype;
    int device;
    blob **hist[2];     /* [n] each; an entry is NULL until needed */
    blob_syncedmem *step; /* BLOB_OPTIM_STEP_WORDS int64_t */
    /* the argument lists of the multi-tensor step, [n] each, made once */
    int64_t *counts;
    void **data, **diff, **h1, **h2;
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
    int64_t *counts = blob__obj_alloc((size_t)n * (sizeof(int64_t) + 4 * sizeof(void *)));
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
    *s = (blob_optim_state){n,     p->dtype, p->device,      {h0, h1},      step,
                            counts, lists,   lists + n,      lists + 2 * n, lists + 3 * n};
    for (int i = 0; i < n; i++)
        counts[i] = params[i]->count;
    return BLOB_OK;
}

static blob_status check_params(const char *func, const blob_optim_state *s,
                                blob *const *params, int n)
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
static blob_status side_ptr(const char *func, blob_syncedmem *mem, bool gpu, bool write,
                            void **out)
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

blob_status blob_optim_step(const blob_optim *opt, blob *const *params, int n,
                            blob_optim_state *state)
{
    if (!opt || !params || !state)
        return BLOB_FAIL(BLOB_EINVAL, "%s is NULL", !opt ? "opt" : !params ? "params" : "state");
    if (n < 1)
        return BLOB_FAIL(BLOB_EINVAL, "%d parameters", n);
    if (state->n && n != state->n)
        return BLOB_FAIL(BLOB_ESHAPE, "%d parameters, the state is bound to %d", n, state->n);
    const int hist = blob_optim_history_count(opt);
    if (hist < 0)
        return BLOB_FAIL(BLOB_EINVAL, "bad optimizer kind %d", (int)opt->kind);
    BLOB_TRY(check_params(__func__, state, params, n));
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
        st = side_ptr(__func__, p->data, gpu, true, &s->data[i]);
        if (st == BLOB_OK)
            st = side_ptr(__func__, p->diff, gpu, false, &s->diff[i]);
        for (int w = 0; w < hist && st == BLOB_OK; w++)
            st = side_ptr(__func__, s->hist[w][i]->data, gpu, true, w ? &s->h2[i] : &s->h1[i]);
    }
    if (st == BLOB_OK)
        st = side_ptr(__func__, s->step, gpu, true, &step);
    if (st == BLOB_OK)
        st = (gpu ? blob_gpu_optim_step : blob_cpu_optim_step)(
            opt, s->dtype, n, s->counts, s->data, (const void *const *)s->diff,
            hist >= 1 ? s->h1 : NULL, hist >= 2 ? s->h2 : NULL, step);
    if (st != BLOB_OK) {
        if (!bound)
            unbind(s);
        return st;
    }
    for (int i = 0; i < n; i++) {
        blob__syncedmem_claim(params[i]->data, gpu);
        for (int w = 0; w < hist; w++)
            blob__syncedmem_claim(s->hist[w][i]->data, gpu);
    }
    blob__syncedmem_claim(s->step, gpu);
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
