/*
 * gradcheck - check the layers and the training steps of the nets.
 *
 *  1. Every layer's backward against central differences of its forward, in double
 *     precision, on the CPU and on the GPU: one row of `rows` per layer and setting,
 *     the InnerProduct in its fused and plain kinds, with and without its ReLU, and a
 *     pair whose ReLU backward the upper layer's GEMM takes (DRELU). Each layer alone
 *     also gives the same diffs through nn_layer_forward_backward.
 * 1b. The same layers in bfloat16 and float16 storage (but Caffe's plain InnerProduct,
 *     float32 and float64 only), on the CPU and on the GPU, against the float64 ones on
 *     the same values: every derivative within HALF_TOL units of the 16-bit dtype,
 *     relative to the largest.
 *  2. Bad layer arguments and bottom shapes are refused with BLOB_EINVAL / BLOB_ESHAPE.
 *  3. Six SGD steps of the MLP and of LeNet in single precision, fused and plain, on the
 *     CPU, on the GPU eagerly and on the GPU with CUDA graphs: the losses and the final
 *     weights agree, also the fused with the plain on the CPU; the results read one step
 *     late (net_output_ago) are those read at once. On the GPU the eager steps with the
 *     net's side stream (the default) agree to SAME_TOL with those on one stream. The
 *     bf16-mixed steps of both (bfloat16 activations and weights, float32 master weights
 *     split into the working copy and a remainder) agree between the CPU and the GPU,
 *     eager and with graphs, to MIXED_TOL.
 *
 * GPU parts are skipped, saying so, when no GPU is present. Exits 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "net.h"

#define EPS       1e-6  /* finite-difference step */
#define GRAD_TOL  1e-6  /* |analytic - numeric| <= GRAD_TOL * max(1, |analytic| + |numeric|) */
#define AGREE_TOL 1e-3  /* relative, float32 CPU vs GPU after a few steps */
#define SAME_TOL  1e-6  /* relative, float32 GPU with and without the side stream */
#define MIXED_TOL 3e-2  /* relative, bf16-mixed CPU vs GPU: a few bfloat16 roundings apart */
#define FB_TOL    1e-12 /* relative, a layer's forward_backward against forward, backward */
#define SCRATCH   4096  /* doubles: more than any blob of the rows holds */
#define HALF_TOL  4 /* units of the 16-bit dtype (2^-8, 2^-11): its derivatives against float64 */

static int passed, failed, skipped;

static void report(blob_status st, const char *what)
{
    fprintf(stderr, "gradcheck: %s: %s: %s\n", what, blob_strerror(st), blob_last_error());
    failed++;
}

/* ---- 1. layers against finite differences ---- */

typedef struct {
    const char *name;
    nn_layer *layer;
    nn_layer *lower; /* NULL, or a layer under layer: bottom -> lower -> mid -> layer */
    blob *bottom[2]; /* [1]: labels of SoftmaxWithLoss, else NULL */
    blob *mid;
    blob *top;
    double *weights; /* the objective is sum(weights * top) */
} layer_case;

/* Reshape, forward and backward (the top's diff to the bottom's and the parameters')
 * through the case's layers. */
static blob_status case_reshape(layer_case *c)
{
    if (!c->lower)
        return nn_layer_reshape(c->layer, c->bottom, c->top);
    NN_TRY(nn_layer_reshape(c->lower, c->bottom, c->mid));
    return nn_layer_reshape(c->layer, &c->mid, c->top);
}

static blob_status case_backward(layer_case *c)
{
    if (!c->lower)
        return nn_layer_backward(c->layer, c->top, true, c->bottom);
    NN_TRY(nn_layer_backward(c->layer, c->top, true, &c->mid));
    return nn_layer_backward(c->lower, c->mid, true, c->bottom);
}

static blob_status case_forward(layer_case *c)
{
    if (!c->lower)
        return nn_layer_forward(c->layer, c->bottom, c->top);
    NN_TRY(nn_layer_forward(c->lower, c->bottom, c->mid));
    return nn_layer_forward(c->layer, &c->mid, c->top);
}

/* The objective at the current data: forward, then read the top on the host. */
static blob_status objective(layer_case *c, double *out)
{
    const void *top;
    NN_TRY(case_forward(c));
    NN_TRY(blob_cpu_data(c->top, &top));
    *out = 0;
    for (int64_t i = 0; i < blob_count(c->top); i++)
        *out += c->weights[i] * nn_load(top, BLOB_FLOAT64, i);
    return BLOB_OK;
}

/* Compare v's diff, as left by backward, with central differences of the objective in
 * each element of v's data; count the elements and those that differ. */
static blob_status check_blob(layer_case *c, blob *v, const char *label, double *max_err,
                              int64_t *checked, int64_t *bad)
{
    int64_t n = blob_count(v);
    double *analytic = malloc((size_t)n * sizeof *analytic);
    if (!analytic)
        return BLOB_ENOMEM;
    const void *diff;
    blob_status st = blob_cpu_diff(v, &diff);
    for (int64_t i = 0; st == BLOB_OK && i < n; i++)
        analytic[i] = nn_load(diff, BLOB_FLOAT64, i);
    for (int64_t i = 0; st == BLOB_OK && i < n; i++) {
        double *x, saved, plus = 0, minus = 0;
        if ((st = blob_mutable_cpu_data(v, (void **)&x)) != BLOB_OK)
            break;
        saved = x[i];
        x[i] = saved + EPS;
        if ((st = objective(c, &plus)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(v, (void **)&x)) != BLOB_OK)
            break;
        x[i] = saved - EPS;
        if ((st = objective(c, &minus)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(v, (void **)&x)) != BLOB_OK)
            break;
        x[i] = saved;
        double numeric = (plus - minus) / (2 * EPS), a = analytic[i];
        double err = fabs(a - numeric) / fmax(1.0, fabs(a) + fabs(numeric));
        *max_err = fmax(*max_err, err);
        if (err > GRAD_TOL) {
            printf("  %s %s[%lld]: analytic %.10g, numeric %.10g\n", c->name, label, (long long)i,
                   a, numeric);
            ++*bad;
        }
    }
    *checked += n;
    free(analytic);
    return st;
}

/* nn_layer_forward_backward (one pass where the layer's type fuses the two) against the
 * forward and backward that ran before: each of the bottom's and the parameters' diffs,
 * kept and then overwritten, comes back the same to FB_TOL; count those that do not. */
static blob_status check_forward_backward(layer_case *c, int64_t *bad)
{
    blob *v[3] = {c->bottom[0]};
    int nv = 1;
    for (int i = 0; i < nn_layer_num_params(c->layer) && nv < 3; i++)
        v[nv++] = nn_layer_param(c->layer, i);
    double *kept[3] = {NULL, NULL, NULL};
    blob_status st = BLOB_OK;
    for (int k = 0; st == BLOB_OK && k < nv; k++) {
        const int64_t n = blob_count(v[k]);
        double *d;
        if (!(kept[k] = malloc((size_t)n * sizeof(double))))
            st = BLOB_ENOMEM;
        else if ((st = blob_mutable_cpu_diff(v[k], (void **)&d)) == BLOB_OK)
            for (int64_t i = 0; i < n; i++) {
                kept[k][i] = d[i];
                d[i] = 7.0;
            }
    }
    if (st == BLOB_OK)
        st = nn_layer_forward_backward(c->layer, c->bottom, c->top, true);
    for (int k = 0; st == BLOB_OK && k < nv; k++) {
        const double *d;
        if ((st = blob_cpu_diff(v[k], (const void **)&d)) != BLOB_OK)
            break;
        for (int64_t i = 0; i < blob_count(v[k]); i++)
            if (fabs(d[i] - kept[k][i]) > FB_TOL * fmax(1.0, fabs(kept[k][i]))) {
                printf("  %s forward_backward diff %d[%lld]: %.17g, apart %.17g\n", c->name, k,
                       (long long)i, d[i], kept[k][i]);
                ++*bad;
                break;
            }
    }
    for (int k = 0; k < 3; k++)
        free(kept[k]);
    return st;
}

/* Random data in bottom[0] (|x| in [0.1, 1], away from ReLU's kink), labels, and
 * objective weights; then forward, backward and the comparisons, and for a layer alone
 * forward_backward against them. */
static blob_status check_layer(layer_case *c, nn_mode mode, uint64_t *rng)
{
    double *x;
    NN_TRY(case_reshape(c));
    NN_TRY(blob_mutable_cpu_data(c->bottom[0], (void **)&x));
    for (int64_t i = 0; i < blob_count(c->bottom[0]); i++)
        x[i] = (nn_uniform(rng) < 0.5 ? -1 : 1) * (0.1 + 0.9 * nn_uniform(rng));
    if (c->bottom[1]) {
        double *y;
        int64_t classes = blob_shape(c->bottom[0])[1];
        NN_TRY(blob_mutable_cpu_data(c->bottom[1], (void **)&y));
        for (int64_t i = 0; i < blob_count(c->bottom[1]); i++)
            y[i] = (double)(int64_t)(nn_uniform(rng) * (double)classes);
    }
    int64_t n = blob_count(c->top);
    double *dy;
    if (!(c->weights = malloc((size_t)n * sizeof *c->weights)))
        return BLOB_ENOMEM;
    NN_TRY(case_forward(c));
    NN_TRY(blob_mutable_cpu_diff(c->top, (void **)&dy));
    for (int64_t i = 0; i < n; i++) /* a loss layer's objective is its top: weight 1 */
        dy[i] = c->weights[i] = c->bottom[1] ? 1.0 : 2 * nn_uniform(rng) - 1;
    NN_TRY(case_backward(c));

    double max_err = 0;
    int64_t checked = 0, bad = 0;
    NN_TRY(check_blob(c, c->bottom[0], "bottom", &max_err, &checked, &bad));
    static const char *const names[2][2] = {{"weights", "bias"}, {"lower weights", "lower bias"}};
    for (int k = 0; k < 2; k++) {
        nn_layer *l = k ? c->lower : c->layer;
        for (int i = 0; l && i < nn_layer_num_params(l); i++)
            NN_TRY(check_blob(c, nn_layer_param(l, i), names[k][i], &max_err, &checked, &bad));
    }
    if (!c->lower)
        NN_TRY(check_forward_backward(c, &bad));
    printf("gradcheck %s %-16s %4lld derivatives, max error %.1e  %s\n",
           mode == NN_GPU ? "GPU" : "CPU", c->name, (long long)checked, max_err,
           bad ? "FAILED" : "ok");
    if (bad)
        failed++;
    else
        passed++;
    return BLOB_OK;
}

/* The layers of check 1: one row each, all in double precision. */

typedef struct {
    const char *name;
    blob_status (*create)(nn_layer **out, nn_mode mode);
    int axes;
    int64_t shape[4]; /* of bottom[0] */
    bool labels;      /* a loss layer: bottom[1] holds class labels */
    /* NULL, or the layer under create's, whose ReLU backward create's layer takes */
    blob_status (*create_lower)(nn_layer **out, nn_mode mode);
    bool wide_only; /* Caffe's plain kind: float32 and float64 only (a gemv for the bias) */
} layer_row;

static blob_dtype dt = BLOB_FLOAT64; /* of the layers that the rows make */

static blob_status make_ip_kind(nn_layer **l, nn_mode mode, int64_t in, int64_t out, bool relu,
                                bool plain)
{
    nn_ip_param p = {.num_input = in, .num_output = out, .relu = relu, .plain = plain};
    return nn_ip_create(l, mode, dt, &p, 7);
}
static blob_status make_ip(nn_layer **l, nn_mode mode)
{
    return make_ip_kind(l, mode, 6, 5, false, false);
}
static blob_status make_ip_plain(nn_layer **l, nn_mode mode)
{
    return make_ip_kind(l, mode, 6, 5, false, true);
}
static blob_status make_ip_relu(nn_layer **l, nn_mode mode)
{
    return make_ip_kind(l, mode, 6, 5, true, false);
}
static blob_status make_ip_relu_plain(nn_layer **l, nn_mode mode)
{
    return make_ip_kind(l, mode, 6, 5, true, true);
}
/* the upper layer of a fused pair: 5 -> 3 over make_ip_relu's 6 -> 5 */
static blob_status make_ip_upper(nn_layer **l, nn_mode mode)
{
    return make_ip_kind(l, mode, 5, 3, false, false);
}
static blob_status make_relu(nn_layer **l, nn_mode mode) { return nn_relu_create(l, mode, dt); }
static blob_status make_softmax_loss(nn_layer **l, nn_mode mode)
{
    return nn_softmax_loss_create(l, mode, dt);
}

/* 3x3, pad 1: one chunk of the whole batch */
static blob_status make_conv(nn_layer **l, nn_mode mode)
{
    nn_conv_param p = {
        .channels = 3, .num_output = 4, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1};
    return nn_conv_create(l, mode, dt, &p, 11);
}

/* two groups, a 3x2 kernel, stride 2x1, dilation 1x2, Xavier weights */
static blob_status make_conv_groups(nn_layer **l, nn_mode mode)
{
    nn_conv_param p = {.channels = 4,
                       .num_output = 6,
                       .kernel_h = 3,
                       .kernel_w = 2,
                       .pad_h = 1,
                       .stride_h = 2,
                       .dilation_w = 2,
                       .groups = 2,
                       .filler = NN_FILL_XAVIER};
    return nn_conv_create(l, mode, dt, &p, 12);
}

/* a column buffer of two images (27 rows x 15 columns of doubles each): 3 images go in
 * chunks of 2 and 1, so both the reorder of a chunk and the direct path of one image run */
static blob_status make_conv_chunked(nn_layer **l, nn_mode mode)
{
    nn_conv_param p = {.channels = 3,
                       .num_output = 4,
                       .kernel_h = 3,
                       .kernel_w = 3,
                       .pad_h = 1,
                       .pad_w = 1,
                       .stride_h = 2,
                       .max_col_bytes = 2 * 27 * 15 * 8};
    return nn_conv_create(l, mode, dt, &p, 13);
}

/* one image per chunk: its product goes to top directly */
static blob_status make_conv_per_image(nn_layer **l, nn_mode mode)
{
    nn_conv_param p = {.channels = 2,
                       .num_output = 3,
                       .kernel_h = 2,
                       .kernel_w = 3,
                       .pad_w = 1,
                       .max_col_bytes = 1};
    return nn_conv_create(l, mode, dt, &p, 14);
}

/* Windows of 2x2, stride 2; or (overlap) 3x3, stride 2, padding 1, rounded up, so that some
 * windows are partial. */
static blob_status make_pool_kind(nn_layer **l, nn_mode mode, nn_pool_method method, bool overlap)
{
    nn_pool_param p = {
        .method = method, .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
    if (overlap) {
        p.kernel_h = p.kernel_w = 3;
        p.pad_h = p.pad_w = 1;
        p.rounding = BLOB_ROUND_CEIL;
    }
    return nn_pool_create(l, mode, dt, &p);
}
static blob_status make_max_pool(nn_layer **l, nn_mode mode)
{
    return make_pool_kind(l, mode, NN_POOL_MAX, false);
}
static blob_status make_max_pool_overlap(nn_layer **l, nn_mode mode)
{
    return make_pool_kind(l, mode, NN_POOL_MAX, true);
}
static blob_status make_ave_pool(nn_layer **l, nn_mode mode)
{
    return make_pool_kind(l, mode, NN_POOL_AVE, false);
}
static blob_status make_ave_pool_overlap(nn_layer **l, nn_mode mode)
{
    return make_pool_kind(l, mode, NN_POOL_AVE, true);
}

static const layer_row rows[] = {
    {"InnerProduct", make_ip, 2, {4, 6}, false, NULL, false},
    {"IP plain", make_ip_plain, 2, {4, 6}, false, NULL, true},
    {"IP+ReLU", make_ip_relu, 2, {4, 6}, false, NULL, false},
    {"IP+ReLU plain", make_ip_relu_plain, 2, {4, 6}, false, NULL, true},
    {"IP+ReLU > IP", make_ip_upper, 2, {4, 6}, false, make_ip_relu, false},
    {"ReLU", make_relu, 2, {4, 6}, false, NULL, false},
    {"SoftmaxWithLoss", make_softmax_loss, 2, {4, 6}, true, NULL, false},
    {"Convolution", make_conv, 4, {2, 3, 6, 5}, false, NULL, false},
    {"Conv groups", make_conv_groups, 4, {2, 4, 7, 6}, false, NULL, false},
    {"Conv chunked", make_conv_chunked, 4, {3, 3, 6, 5}, false, NULL, false},
    {"Conv per image", make_conv_per_image, 4, {3, 2, 5, 4}, false, NULL, false},
    {"MaxPool 2/2", make_max_pool, 4, {2, 3, 6, 6}, false, NULL, false},
    {"MaxPool 3/2 pad", make_max_pool_overlap, 4, {2, 2, 7, 7}, false, NULL, false},
    {"AvePool 2/2", make_ave_pool, 4, {2, 3, 6, 6}, false, NULL, false},
    {"AvePool 3/2 pad", make_ave_pool_overlap, 4, {2, 2, 7, 7}, false, NULL, false},
};
#define NUM_ROWS ((int)(sizeof rows / sizeof rows[0]))

/* The layers and blobs of row r's case (a refused fusion gives BLOB_ESTATE). */
static blob_status make_case(const layer_row *r, nn_mode mode, layer_case *c)
{
    NN_TRY(r->create(&c->layer, mode));
    if (r->create_lower) {
        NN_TRY(r->create_lower(&c->lower, mode));
        NN_TRY(nn_blob_create(&c->mid, mode, nn_layer_top_dtype(c->lower), 0, NULL));
        if (!nn_layer_fuse_relu_backward(c->layer, c->lower))
            return BLOB_ESTATE;
    }
    NN_TRY(nn_blob_create(&c->bottom[0], mode, dt, r->axes, r->shape));
    if (r->labels) /* float64 layers take labels in their dtype, 16-bit ones int32 */
        NN_TRY(
            nn_blob_create(&c->bottom[1], mode, dt == BLOB_FLOAT64 ? dt : BLOB_INT32, 1, r->shape));
    return nn_blob_create(&c->top, mode, nn_layer_top_dtype(c->layer), 0, NULL);
}

static void free_case(layer_case *c)
{
    nn_layer_free(c->layer);
    nn_layer_free(c->lower);
    blob_free(c->mid);
    blob_free(c->bottom[0]);
    blob_free(c->bottom[1]);
    blob_free(c->top);
    free(c->weights);
}

static void check_layers(nn_mode mode)
{
    uint64_t rng = 42;
    for (int i = 0; i < NUM_ROWS; i++) {
        const layer_row *r = &rows[i];
        layer_case c = {.name = r->name};
        blob_status st;
        if ((st = make_case(r, mode, &c)) != BLOB_OK ||
            (st = check_layer(&c, mode, &rng)) != BLOB_OK)
            report(st, r->name);
        free_case(&c);
    }
}

/* ---- 1b. the layers in 16-bit storage against the float64 ones ---- */

/* Data (or, with diff, the diff) of b as float64 in out, whatever b's dtype. */
static blob_status wide_copy(blob *b, bool diff, double *out)
{
    const void *p;
    NN_TRY(diff ? blob_cpu_diff(b, &p) : blob_cpu_data(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++)
        out[i] = nn_load(p, blob_get_dtype(b), i);
    return BLOB_OK;
}

/* Set the data (or diff) of b from float64 values, in b's dtype. */
static blob_status set_from_wide(blob *b, bool diff, const double *in)
{
    void *p;
    NN_TRY(diff ? blob_mutable_cpu_diff(b, &p) : blob_mutable_cpu_data(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++)
        nn_store(p, blob_get_dtype(b), i, in[i]);
    return BLOB_OK;
}

/* max |diff of h - diff of w| / max |diff of w|, into *err. */
static blob_status diff_error(blob *h, blob *w, double *scratch, double *err)
{
    const int64_t n = blob_count(w);
    const double *ref;
    NN_TRY(wide_copy(h, true, scratch));
    NN_TRY(blob_cpu_diff(w, (const void **)&ref));
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(scratch[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    *err = fmax(*err, worst / fmax(scale, 1e-30));
    return BLOB_OK;
}

/* The blobs whose diffs a backward pass gives: bottom, then the parameters. */
static int case_blobs(layer_case *c, blob **out)
{
    int n = 0;
    out[n++] = c->bottom[0];
    for (int k = 0; k < 2; k++) {
        nn_layer *l = k ? c->lower : c->layer;
        for (int i = 0; l && i < nn_layer_num_params(l); i++)
            out[n++] = nn_layer_param(l, i);
    }
    return n;
}

/* Row r's layers in dtype h against float64 ones w on the same values: the half
 * parameters, bottom, labels and top diff, widened exactly into w; then forward and
 * backward in both, and every diff of h within *err of w's, relative to the largest
 * (w's gradients are the ones checked against central differences above). */
static blob_status compare_half(layer_case *h, layer_case *w, uint64_t *rng, double *scratch,
                                double *err)
{
    NN_TRY(case_reshape(w));
    NN_TRY(case_reshape(h));
    blob *hb[5], *wb[5];
    const int nb = case_blobs(h, hb);
    case_blobs(w, wb);
    for (int i = 0; i < nb; i++)
        if (blob_count(hb[i]) > SCRATCH || blob_count(h->top) > SCRATCH)
            return BLOB_ESHAPE;
    for (int i = 1; i < nb; i++)
        NN_TRY(blob_convert_from(wb[i], hb[i], false, false)); /* widened exactly */
    for (int64_t i = 0; i < blob_count(w->bottom[0]); i++)
        scratch[i] = (nn_uniform(rng) < 0.5 ? -1 : 1) * (0.1 + 0.9 * nn_uniform(rng));
    NN_TRY(set_from_wide(h->bottom[0], false, scratch));
    NN_TRY(blob_convert_from(w->bottom[0], h->bottom[0], false, false));
    if (w->bottom[1]) {
        const int64_t classes = blob_shape(w->bottom[0])[1];
        for (int64_t i = 0; i < blob_count(w->bottom[1]); i++)
            scratch[i] = (double)(int64_t)(nn_uniform(rng) * (double)classes);
        NN_TRY(set_from_wide(h->bottom[1], false, scratch));
        NN_TRY(set_from_wide(w->bottom[1], false, scratch));
    }
    NN_TRY(case_forward(w));
    NN_TRY(case_forward(h));
    for (int64_t i = 0; i < blob_count(w->top); i++)
        scratch[i] = w->bottom[1] ? 1.0 : 2 * nn_uniform(rng) - 1;
    NN_TRY(set_from_wide(h->top, true, scratch));
    NN_TRY(blob_convert_from(w->top, h->top, true, false));
    NN_TRY(case_backward(w));
    NN_TRY(case_backward(h));
    for (int i = 0; i < nb; i++)
        NN_TRY(diff_error(hb[i], wb[i], scratch, err));
    return BLOB_OK;
}

static const blob_dtype halves[2] = {BLOB_BFLOAT16, BLOB_FLOAT16};

/* The rows of check 1b: those not wide_only, in each 16-bit dtype. */
static int num_half_rows(void)
{
    int n = 0;
    for (int i = 0; i < NUM_ROWS; i++)
        n += !rows[i].wide_only;
    return 2 * n;
}

/* Every row but the wide_only ones in bfloat16 and float16 against float64, within
 * HALF_TOL units of the dtype (relative to the largest derivative). */
static void check_layers_half(nn_mode mode)
{
    uint64_t rng = 43;
    double *scratch = malloc(SCRATCH * sizeof *scratch);
    for (int k = 0; scratch && k < 2; k++) {
        const double unit = halves[k] == BLOB_BFLOAT16 ? 0x1p-8 : 0x1p-11;
        for (int i = 0; i < NUM_ROWS; i++) {
            const layer_row *r = &rows[i];
            if (r->wide_only)
                continue;
            layer_case h = {.name = r->name}, w = {.name = r->name};
            double err = 0;
            dt = halves[k];
            blob_status st = make_case(r, mode, &h);
            dt = BLOB_FLOAT64;
            if (st == BLOB_OK && (st = make_case(r, mode, &w)) == BLOB_OK)
                st = compare_half(&h, &w, &rng, scratch, &err);
            if (st != BLOB_OK) {
                char what[64];
                snprintf(what, sizeof what, "%s in %s", r->name, blob_dtype_name(halves[k]));
                report(st, what);
            } else {
                const bool ok = err <= HALF_TOL * unit;
                printf("gradcheck %s %-8s %-16s against float64, max error %.1e (%.1f units) %s\n",
                       mode == NN_GPU ? "GPU" : "CPU", blob_dtype_name(halves[k]), r->name, err,
                       err / unit, ok ? "ok" : "FAILED");
                ok ? passed++ : failed++;
            }
            free_case(&h);
            free_case(&w);
        }
    }
    if (!scratch)
        report(BLOB_ENOMEM, "16-bit layers");
    free(scratch);
}

/* ---- 2. bad layer arguments and shapes are refused ---- */

static void expect(blob_status got, blob_status want, const char *what, int *bad)
{
    if (got == want)
        return;
    printf("  %s: %s, expected %s\n", what, blob_strerror(got), blob_strerror(want));
    ++*bad;
}

/* Reshape a fresh layer made by create (BLOB_OK expected) to a bottom of shape. */
static blob_status reshape_to(nn_layer *l, int axes, const int64_t *shape)
{
    blob *x = NULL, *top = NULL;
    blob_status st = nn_blob_create(&x, NN_CPU, dt, axes, shape);
    if (st == BLOB_OK)
        st = nn_blob_create(&top, NN_CPU, dt, 0, NULL);
    if (st == BLOB_OK)
        st = nn_layer_reshape(l, &x, top);
    blob_free(x);
    blob_free(top);
    return st;
}

/* Results that are not kept: none before the first step, none further back than
 * NET_RESULTS - 1, and with loss_only only the loss. */
static void check_result_refusals(int *bad)
{
    net_config cfg = {.def = net_def_find("mlp"),
                      .mode = NN_CPU,
                      .dtype = BLOB_FLOAT32,
                      .batch = 2,
                      .seed = 1,
                      .lr = 0.01,
                      .loss_only = true};
    const int64_t shape[4] = {2, 1, 28, 28}, two = 2;
    net *n = NULL;
    blob *x = NULL, *y = NULL;
    double loss;
    int64_t correct;
    expect(net_create(&n, &cfg), BLOB_OK, "a net with loss_only", bad);
    expect(nn_blob_create(&x, NN_CPU, BLOB_FLOAT32, 4, shape), BLOB_OK, "x", bad);
    expect(nn_blob_create(&y, NN_CPU, BLOB_FLOAT32, 1, &two), BLOB_OK, "labels", bad);
    if (n && x && y) {
        expect(net_loss(n, &loss), BLOB_EINVAL, "the loss before any step", bad);
        expect(net_train_step(n, x, y), BLOB_OK, "a step", bad);
        expect(net_loss(n, &loss), BLOB_OK, "the loss of a step with loss_only", bad);
        expect(net_output(n, &loss, &correct), BLOB_ENOTSUP, "the output with loss_only", bad);
        expect(net_output_ago(n, NET_RESULTS, &loss, &correct), BLOB_EINVAL,
               "an output NET_RESULTS calls back", bad);
        expect(net_output_ago(n, 1, &loss, &correct), BLOB_EINVAL, "the output of a call not made",
               bad);
    }
    net_free(n);
    blob_free(x);
    blob_free(y);
}

static void check_refusals(void)
{
    int bad = 0;
    nn_layer *l = NULL;
    nn_conv_param conv = {.channels = 4, .num_output = 6, .kernel_h = 3, .kernel_w = 3};
    nn_conv_param p = conv;
    p.groups = 4; /* 6 outputs in 4 groups */
    expect(nn_conv_create(&l, NN_CPU, dt, &p, 1), BLOB_EINVAL, "conv, groups not dividing", &bad);
    p = conv;
    p.stride_h = -1;
    expect(nn_conv_create(&l, NN_CPU, dt, &p, 1), BLOB_EINVAL, "conv, negative stride", &bad);
    p = conv;
    p.kernel_w = 0;
    expect(nn_conv_create(&l, NN_CPU, dt, &p, 1), BLOB_EINVAL, "conv, kernel 0", &bad);
    if (l) {
        printf("  a refused layer was made\n");
        bad++;
    }
    expect(nn_conv_create(&l, NN_CPU, dt, &conv, 1), BLOB_OK, "conv", &bad);
    if (l) {
        const int64_t wrong_channels[4] = {2, 3, 8, 8}, too_small[4] = {2, 4, 2, 8},
                      flat[2] = {2, 256};
        expect(reshape_to(l, 4, wrong_channels), BLOB_ESHAPE, "conv, 3 channels for 4", &bad);
        expect(reshape_to(l, 4, too_small), BLOB_ESHAPE, "conv, 3x3 kernel on 2x8", &bad);
        expect(reshape_to(l, 2, flat), BLOB_ESHAPE, "conv, a 2-D bottom", &bad);
        nn_layer_free(l);
        l = NULL;
    }
    nn_pool_param pool = {.method = NN_POOL_MAX, .kernel_h = 2, .kernel_w = 2, .pad_h = 2};
    expect(nn_pool_create(&l, NN_CPU, dt, &pool), BLOB_EINVAL, "pool, pad 2 for kernel 2", &bad);
    pool.pad_h = 0;
    pool.method = (nn_pool_method)7;
    expect(nn_pool_create(&l, NN_CPU, dt, &pool), BLOB_EINVAL, "pool, bad method", &bad);
    pool.method = NN_POOL_AVE;
    pool.kernel_h = 5;
    expect(nn_pool_create(&l, NN_CPU, dt, &pool), BLOB_OK, "pool", &bad);
    if (l) {
        const int64_t short_plane[4] = {1, 1, 4, 8};
        expect(reshape_to(l, 4, short_plane), BLOB_ESHAPE, "pool, 5x2 window on 4x8", &bad);
        nn_layer_free(l);
    }
    check_result_refusals(&bad);
    printf("refusals: bad layer arguments and shapes, results not kept  %s\n",
           bad ? "FAILED" : "ok");
    if (bad)
        failed++;
    else
        passed++;
}

/* ---- 3. training steps: CPU, GPU eager and GPU graph agree ---- */

enum { BATCH = 64, STEPS = 6, CLASSES = 10 };

typedef struct {
    double loss[STEPS];
    int64_t correct[STEPS];
    float *params; /* all parameters after the last step, concatenated */
    int64_t count;
    int late_mismatches; /* steps whose results read one step late differ */
} run_result;

/* Copy all parameters to r->params, allocating it on first use. */
static blob_status read_params(net *n, run_result *r)
{
    if (!r->params) {
        for (int i = 0; i < net_num_params(n); i++)
            r->count += blob_count(net_param(n, i));
        if (!(r->params = malloc((size_t)r->count * sizeof *r->params)))
            return BLOB_ENOMEM;
    }
    float *out = r->params;
    for (int i = 0; i < net_num_params(n); i++) {
        const blob *b = net_param(n, i);
        const void *p;
        NN_TRY(blob_cpu_data(net_param(n, i), &p));
        NN_TRY(blob_cpu_convert(blob_get_dtype(b), BLOB_FLOAT32, blob_count(b), p, out));
        out += blob_count(b);
    }
    return BLOB_OK;
}

/* Train STEPS steps alternating between two fixed random batches (so a graph run
 * captures one graph per batch), reading the parameters on the host halfway as a
 * checkpoint would, and collect the losses and final parameters. Each step's results
 * are read again after the next step is queued, as the trainer reads them. */
static blob_status run_steps(const net_def *def, nn_mode mode, blob_dtype dtype, bool graph,
                             bool plain, bool one_stream, run_result *r)
{
    void *stream = NULL;
    net *n = NULL;
    blob *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    uint64_t rng = 9;
    net_config cfg = {.def = def,
                      .mode = mode,
                      .dtype = dtype,
                      .batch = BATCH,
                      .seed = 3,
                      .lr = 0.05,
                      .momentum = 0.9,
                      .weight_decay = 1e-3,
                      .graph = graph,
                      .plain = plain,
                      .one_stream = one_stream};
    blob_status st = mode == NN_GPU ? blob_stream_create(&stream) : BLOB_OK;
    blob_stream_set(stream);
    if (st == BLOB_OK)
        st = net_create(&n, &cfg);
    for (int k = 0; st == BLOB_OK && k < 2; k++)
        st = net_fake_batch(def, mode, dtype, BATCH, CLASSES, 0, 0, &rng, &x[k], &y[k]);
    for (int s = 0; st == BLOB_OK && s < STEPS; s++) {
        double late_loss = 0;
        int64_t late_correct = 0;
        if ((st = net_train_step(n, x[s % 2], y[s % 2])) == BLOB_OK && s > 0 &&
            (st = net_output_ago(n, 1, &late_loss, &late_correct)) == BLOB_OK &&
            (late_loss != r->loss[s - 1] || late_correct != r->correct[s - 1])) {
            printf("  step %d read late: loss %.9g, %lld correct; at once: %.9g, %lld\n", s - 1,
                   late_loss, (long long)late_correct, r->loss[s - 1],
                   (long long)r->correct[s - 1]);
            r->late_mismatches++;
        }
        if (st == BLOB_OK)
            st = net_output(n, &r->loss[s], &r->correct[s]);
        if (st == BLOB_OK && s == STEPS / 2)
            st = read_params(n, r);
    }
    if (st == BLOB_OK)
        st = read_params(n, r);
    if (stream)
        blob_stream_synchronize(stream);
    net_free(n);
    for (int k = 0; k < 2; k++) {
        blob_free(x[k]);
        blob_free(y[k]);
    }
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
    return st;
}

static void compare(const char *net_name, const char *what, const run_result *ref,
                    const run_result *r, double tol)
{
    double loss_err = 0, param_err = 0, scale = 0;
    for (int s = 0; s < STEPS; s++)
        loss_err = fmax(loss_err, fabs(r->loss[s] - ref->loss[s]) / fmax(1.0, fabs(ref->loss[s])));
    for (int64_t i = 0; i < ref->count; i++) {
        param_err = fmax(param_err, fabs((double)r->params[i] - ref->params[i]));
        scale = fmax(scale, fabs(ref->params[i]));
    }
    param_err /= scale;
    bool ok = loss_err <= tol && param_err <= tol && !r->late_mismatches && !ref->late_mismatches;
    printf("agreement %-6s %-24s %d steps: loss %.6f vs %.6f, max loss error %.1e, max "
           "weight error %.1e%s  %s\n",
           net_name, what, STEPS, r->loss[STEPS - 1], ref->loss[STEPS - 1], loss_err, param_err,
           r->late_mismatches || ref->late_mismatches ? ", results read late differ" : "",
           ok ? "ok" : "FAILED");
    if (ok)
        passed++;
    else
        failed++;
}

/* The CPU run of a net (fused or plain) against its GPU runs, eager and with graphs,
 * and the eager one against an eager one on one stream; returns whether the CPU run
 * succeeded. */
static bool check_kind(const net_def *def, bool plain, bool gpu, run_result *cpu)
{
    const char *kind = plain ? "plain" : "fused";
    run_result eager = {0}, graph = {0}, one = {0};
    char what[64];
    blob_status st;
    if ((st = run_steps(def, NN_CPU, BLOB_FLOAT32, false, plain, false, cpu)) != BLOB_OK) {
        snprintf(what, sizeof what, "training %s %s on the CPU", kind, def->name);
        report(st, what);
        return false;
    } else if (!gpu) {
        printf("agreement %-6s %s CPU vs GPU eager and graph, GPU 1 vs 2 streams: skipped "
               "(no GPU)\n",
               def->name, kind);
        skipped += 3;
    } else if ((st = run_steps(def, NN_GPU, BLOB_FLOAT32, false, plain, false, &eager)) !=
               BLOB_OK) {
        snprintf(what, sizeof what, "training %s %s on the GPU", kind, def->name);
        report(st, what);
    } else if ((st = run_steps(def, NN_GPU, BLOB_FLOAT32, true, plain, false, &graph)) != BLOB_OK) {
        snprintf(what, sizeof what, "training %s %s on the GPU with graphs", kind, def->name);
        report(st, what);
    } else if ((st = run_steps(def, NN_GPU, BLOB_FLOAT32, false, plain, true, &one)) != BLOB_OK) {
        snprintf(what, sizeof what, "training %s %s on the GPU on one stream", kind, def->name);
        report(st, what);
    } else {
        snprintf(what, sizeof what, "%s CPU vs GPU eager", kind);
        compare(def->name, what, cpu, &eager, AGREE_TOL);
        snprintf(what, sizeof what, "%s CPU vs GPU graph", kind);
        compare(def->name, what, cpu, &graph, AGREE_TOL);
        snprintf(what, sizeof what, "%s GPU 1 vs 2 streams", kind);
        compare(def->name, what, &one, &eager, SAME_TOL);
    }
    free(eager.params);
    free(graph.params);
    free(one.params);
    return true;
}

/* bf16-mixed steps of a net: the CPU run against the GPU's, eager and with graphs. */
static void check_mixed(const char *net_name, bool gpu)
{
    const net_def *def = net_def_find(net_name);
    run_result cpu = {0}, eager = {0}, graph = {0};
    blob_status st = run_steps(def, NN_CPU, BLOB_BFLOAT16, false, false, false, &cpu);
    if (st == BLOB_OK && !gpu) {
        printf("agreement %-6s bf16-mixed CPU vs GPU eager and graph: skipped (no GPU)\n",
               net_name);
        skipped += 2;
    } else if (st == BLOB_OK &&
               (st = run_steps(def, NN_GPU, BLOB_BFLOAT16, false, false, false, &eager)) ==
                   BLOB_OK &&
               (st = run_steps(def, NN_GPU, BLOB_BFLOAT16, true, false, false, &graph)) ==
                   BLOB_OK) {
        compare(net_name, "bf16-mixed CPU vs GPU eager", &cpu, &eager, MIXED_TOL);
        compare(net_name, "bf16-mixed CPU vs GPU graph", &cpu, &graph, MIXED_TOL);
    }
    if (st != BLOB_OK)
        report(st, "training bf16-mixed steps");
    free(cpu.params);
    free(eager.params);
    free(graph.params);
}

static void check_training(const char *net_name, bool gpu)
{
    const net_def *def = net_def_find(net_name);
    if (!def) {
        char what[64];
        snprintf(what, sizeof what, "no net called %s", net_name);
        report(BLOB_EINVAL, what);
        return;
    }
    run_result fused = {0}, plain = {0};
    bool have_fused = check_kind(def, false, gpu, &fused);
    if (check_kind(def, true, gpu, &plain) && have_fused)
        compare(net_name, "fused vs plain CPU", &plain, &fused, AGREE_TOL);
    free(fused.params);
    free(plain.params);
}

int main(void)
{
    bool gpu = blob_device_count() > 0;
    check_layers(NN_CPU);
    check_layers_half(NN_CPU);
    if (gpu) {
        check_layers(NN_GPU);
        check_layers_half(NN_GPU);
    } else {
        printf("gradcheck GPU: %d layers and %d in 16-bit skipped (no GPU; libblob %s CUDA)\n",
               NUM_ROWS, num_half_rows(), blob_built_with_cuda() ? "built with" : "built without");
        skipped += NUM_ROWS + num_half_rows();
    }
    check_refusals();
    check_training("mlp", gpu);
    check_training("lenet", gpu);
    check_mixed("mlp", gpu);
    check_mixed("lenet", gpu);
    blob_thread_release();
    printf("gradcheck: %d passed, %d failed, %d skipped", passed, failed, skipped);
    printf(skipped ? " (they need a GPU; 0 found)\n" : "\n");
    return failed ? 1 : 0;
}
