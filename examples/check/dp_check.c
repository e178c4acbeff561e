/*
 * dp_check - data-parallel nets (nets/net.h with a communicator) train as one device
 * does: N ranks of batch B end with the weights of one GPU trained with batch N x B.
 *
 *   dp_check one          a 1-rank communicator changes nothing: the same weights and
 *                         losses, bit for bit, as no communicator, on the CPU and, where
 *                         there is a GPU, on it eagerly and with CUDA graphs
 *   dp_check threads      2 ranks as threads of this process on GPUs 0 and 1, against
 *                         GPU 0 alone with twice the batch; and ranks whose nets differ
 *   dp_check rank         one rank of a run started by blob-launch (RANK, WORLD_SIZE,
 *                         LOCAL_RANK, BLOB_COMM_ID_FILE): the same comparison, each rank
 *                         computing the one-GPU reference on its own GPU
 *   dp_check gpus         print the number of GPUs
 *   dp_check compare NET A B TOL
 *                         the weights (.npy) that train wrote for NET into directories A
 *                         and B agree to the relative TOL
 *
 * The comparison: STEPS SGD steps on the same synthetic rows in the same order (global
 * batch s is rows [s N B, (s + 1) N B), and rank r takes rows [r B, (r + 1) B) of it),
 * then every parameter blob must agree with the reference to a relative tolerance:
 * max |a - b| over the blob <= tol x max |b| over the blob. In float64 the tolerance is
 * 1e-5: the runs differ only in the order of the sums (the gradient over 2B rows
 * against the mean of two gradients over B rows), which leaves about 1e-13 after 50
 * steps, so a difference anywhere near 1e-5 is a bug, never rounding. float32 is run
 * as well, to 1e-3: there the same reordering (and the GEMM algorithms cuBLAS picks per
 * batch size) changes each step by about 1e-7, and 50 steps of momentum SGD amplify
 * that by a factor that depends on the data, so 1e-5 is no reliable bound for it; a
 * missing or wrong reduction shows as 1e-2 or more either way. The ranks' weights must
 * also be identical bit for bit, and the mean of their last losses agree with the
 * reference's last loss.
 *
 * Prints one line per check ("ok" or "FAIL", naming the blob and element that differ
 * most) and a count; exits 1 if any check failed, 2 on a bad command line.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

#define STEPS     50
#define BATCH     32 /* per rank */
#define INPUTS    784
#define CLASSES   10
#define NET       "mlp"
#define MAX_RANKS 8

static int passed, failed;
static int rank_label = -1; /* this process's rank, in "rank" mode */

static void say(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(bool ok, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rank_label >= 0)
        printf("rank %d: ", rank_label);
    printf("  %-4s  %s\n", ok ? "ok" : "FAIL", msg);
    fflush(stdout);
    if (ok)
        passed++;
    else
        failed++;
}

/* A failed call that ends the check: said, and returned. */
#define CHECK(expr)                                                                          \
    do {                                                                                     \
        blob_status check_st_ = (expr);                                                      \
        if (check_st_ != BLOB_OK) {                                                          \
            say(false, "%s: %s: %s", #expr, blob_status_name(check_st_), blob_last_error()); \
            return check_st_;                                                                \
        }                                                                                    \
    } while (0)

static const char *dtype_name(blob_dtype dt) { return dt == BLOB_FLOAT64 ? "float64" : "float32"; }

/* ---- data and training ---- */

/* Synthetic rows: pixels uniform in [0, 1), labels from a fixed linear score of them. */
typedef struct {
    int64_t rows;
    double *x;
    int *y;
} dataset;

static int dataset_make(dataset *d, int64_t rows)
{
    d->rows = rows;
    d->x = malloc((size_t)rows * INPUTS * sizeof *d->x);
    d->y = malloc((size_t)rows * sizeof *d->y);
    if (!d->x || !d->y)
        return -1;
    uint64_t rng = 7;
    double w[CLASSES][INPUTS];
    for (int c = 0; c < CLASSES; c++)
        for (int i = 0; i < INPUTS; i++)
            w[c][i] = nn_uniform(&rng) - 0.5;
    for (int64_t r = 0; r < rows; r++) {
        double *row = d->x + r * INPUTS, best = -INFINITY;
        for (int i = 0; i < INPUTS; i++)
            row[i] = nn_uniform(&rng);
        for (int c = 0; c < CLASSES; c++) {
            double score = 0;
            for (int i = 0; i < INPUTS; i++)
                score += w[c][i] * row[i];
            if (score > best) {
                best = score;
                d->y[r] = c;
            }
        }
    }
    return 0;
}

static void dataset_free(dataset *d)
{
    free(d->x);
    free(d->y);
}

/* What a run leaves: the weights of every parameter back to back, and the last loss. */
typedef struct {
    int64_t count;
    double *w;
    double loss;
} result;

typedef struct {
    const char *net;
    blob_dtype dtype;
    nn_mode mode;
    bool graph;
    int steps;
} run_spec;

/* Room in r for the weights of n. */
static blob_status result_alloc(const net *n, result *r)
{
    r->count = 0;
    for (int i = 0; i < net_num_params(n); i++)
        r->count += blob_count(net_param(n, i));
    r->w = malloc((size_t)r->count * sizeof *r->w);
    return r->w ? BLOB_OK : BLOB_ENOMEM;
}

/* The weights of every parameter of n, back to back, as doubles, and the last loss. */
static blob_status snapshot(net *n, result *r)
{
    NN_TRY(result_alloc(n, r));
    int64_t at = 0;
    for (int i = 0; i < net_num_params(n); i++) {
        blob *p = net_param(n, i);
        const void *v;
        CHECK(blob_cpu_data(p, &v));
        for (int64_t k = 0; k < blob_count(p); k++)
            r->w[at++] = nn_load(v, blob_get_dtype(p), k);
    }
    return net_loss(n, &r->loss);
}

/* Train spec->steps steps as rank `rank` of `ranks` with `batch` rows each (one device:
 * rank 0 of 1 with the whole global batch), on the calling thread's device and stream,
 * and take the result. */
static blob_status train(const run_spec *spec, blob_comm *comm, const dataset *d, int rank,
                         int ranks, int64_t batch, result *out)
{
    net_config cfg = {.def = net_def_find(spec->net),
                      .mode = spec->mode,
                      .dtype = spec->dtype,
                      .batch = batch,
                      .seed = 3,
                      .lr = 0.05,
                      .momentum = 0.9,
                      .weight_decay = 5e-4,
                      .graph = spec->graph,
                      .comm = comm};
    int64_t xshape[2] = {batch, INPUTS};
    net *n = NULL;
    blob *x = NULL, *y = NULL;
    blob_status st = net_create(&n, &cfg);
    if (st == BLOB_OK)
        st = nn_blob_create(&x, spec->mode, spec->dtype, 2, xshape);
    if (st == BLOB_OK)
        st = nn_blob_create(&y, spec->mode, spec->dtype, 1, &batch);
    for (int s = 0; st == BLOB_OK && s < spec->steps; s++) {
        int64_t first = (int64_t)s * ranks * batch + rank * batch;
        void *px, *py;
        if ((st = blob_mutable_cpu_data(x, &px)) != BLOB_OK ||
            (st = blob_mutable_cpu_data(y, &py)) != BLOB_OK)
            break;
        for (int64_t r = 0; r < batch; r++) {
            for (int i = 0; i < INPUTS; i++)
                nn_store(px, spec->dtype, r * INPUTS + i, d->x[(first + r) * INPUTS + i]);
            nn_store(py, spec->dtype, r, d->y[first + r]);
        }
        st = net_train_step(n, x, y);
    }
    if (st == BLOB_OK)
        st = snapshot(n, out);
    if (st != BLOB_OK)
        say(false, "%s %s training, rank %d of %d: %s: %s", spec->net, dtype_name(spec->dtype),
            rank, ranks, blob_status_name(st), blob_last_error());
    blob_free(x);
    blob_free(y);
    net_free(n);
    return st;
}

/* ---- comparisons ---- */

/* got against want, blob by blob (named after n's parameters): max |got - want| over a
 * blob within tol x max |want| over it. Says the worst blob and its worst element. */
static bool compare(const char *what, const net *n, const result *got, const result *want,
                    double tol)
{
    if (got->count != want->count) {
        say(false, "%s: %lld weights, expected %lld", what, (long long)got->count,
            (long long)want->count);
        return false;
    }
    double worst = -1;
    int worst_blob = 0;
    int64_t worst_k = 0, worst_base = 0;
    for (int i = 0, at = 0; i < net_num_params(n); at += (int)blob_count(net_param(n, i++))) {
        double scale = 0, diff = -1;
        int64_t diff_k = at;
        for (int64_t k = at; k < at + blob_count(net_param(n, i)); k++) {
            double e = fabs(got->w[k] - want->w[k]);
            if (isnan(e))
                e = INFINITY;
            if (e > diff) {
                diff = e;
                diff_k = k;
            }
            scale = fmax(scale, fabs(want->w[k]));
        }
        double rel = scale > 0 ? diff / scale : diff;
        if (rel > worst) {
            worst = rel;
            worst_blob = i;
            worst_k = diff_k;
            worst_base = at;
        }
    }
    bool ok = worst <= tol;
    say(ok,
        "%s: largest difference %.2g x the blob's largest weight (tolerance %.0e), at "
        "%s[%lld]: %.17g against %.17g",
        what, worst, tol, net_param_name(n, worst_blob), (long long)(worst_k - worst_base),
        got->w[worst_k], want->w[worst_k]);
    return ok;
}

static bool identical(const char *what, const net *n, const result *a, const result *b)
{
    int64_t k = 0;
    while (k < a->count && k < b->count && !memcmp(&a->w[k], &b->w[k], sizeof a->w[k]))
        k++;
    bool ok = a->count == b->count && k == a->count;
    if (ok) {
        say(true, "%s: all %lld weights identical", what, (long long)a->count);
        return true;
    }
    int i = 0;
    int64_t at = 0;
    while (i + 1 < net_num_params(n) && at + blob_count(net_param(n, i)) <= k)
        at += blob_count(net_param(n, i++));
    if (k < a->count && k < b->count)
        say(false, "%s: first difference at %s[%lld]: %.17g against %.17g", what,
            net_param_name(n, i), (long long)(k - at), a->w[k], b->w[k]);
    else
        say(false, "%s: %lld weights against %lld", what, (long long)a->count, (long long)b->count);
    return false;
}

static bool close_loss(const char *what, double got, double want, double tol)
{
    bool ok = fabs(got - want) <= tol * fabs(want);
    say(ok, "%s: mean of the ranks' last losses %.17g, one device %.17g", what, got, want);
    return ok;
}

/* A CPU net of NET, for the names and sizes of its parameters. */
static net *layout(const char *name)
{
    net_config cfg = {
        .def = net_def_find(name), .mode = NN_CPU, .dtype = BLOB_FLOAT32, .batch = 1, .seed = 1};
    net *n = NULL;
    if (!cfg.def || net_create(&n, &cfg) != BLOB_OK)
        return NULL;
    return n;
}

/* ---- dp_check one ---- */

static blob_status one_rank(nn_mode mode, bool graph, const dataset *d, const net *names)
{
    char what[96];
    snprintf(what, sizeof what, "a 1-rank communicator, %s%s", mode == NN_GPU ? "GPU" : "CPU",
             graph ? ", CUDA graphs" : "");
    blob_comm_options o;
    memset(&o, 0, sizeof o);
    blob_comm *c;
    CHECK(blob_comm_create(&c, &o));
    run_spec spec = {NET, BLOB_FLOAT32, mode, graph, 20};
    result with = {0}, without = {0};
    blob_status st = train(&spec, c, d, 0, 1, BATCH, &with);
    if (st == BLOB_OK)
        st = train(&spec, NULL, d, 0, 1, BATCH, &without);
    if (st == BLOB_OK) {
        identical(what, names, &with, &without);
        say(!memcmp(&with.loss, &without.loss, sizeof with.loss),
            "%s: last loss %.9g, without %.9g", what, with.loss, without.loss);
    }
    free(with.w);
    free(without.w);
    blob_comm_free(c);
    return st;
}

static void check_one(const dataset *d, const net *names)
{
    void *stream = NULL;
    one_rank(NN_CPU, false, d, names);
    if (blob_device_count() == 0) {
        printf("  skip  a 1-rank communicator on the GPU, eagerly and with CUDA graphs (no "
               "GPU)\n");
        return;
    }
    if (blob_stream_create(&stream) != BLOB_OK) {
        say(false, "blob_stream_create: %s", blob_last_error());
        return;
    }
    blob_stream_set(stream);
    one_rank(NN_GPU, false, d, names);
    one_rank(NN_GPU, true, d, names);
    blob_stream_synchronize(stream);
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
}

/* ---- dp_check threads ---- */

typedef struct {
    blob_comm *comm;
    const run_spec *spec;
    const dataset *d;
    const char *net; /* "mismatch" case: this rank's net */
    result res;
    double mean_loss;
    blob_status st;
    char err[300];
    double seconds;
} rank_job;

/* A rank's thread: its GPU and stream, then the job. */
static void *rank_main(void *arg)
{
    rank_job *j = arg;
    void *stream = NULL;
    int rank = blob_comm_rank(j->comm), ranks = blob_comm_size(j->comm);
    j->st = blob_device_set(blob_comm_device(j->comm));
    if (j->st == BLOB_OK)
        j->st = blob_stream_create(&stream);
    blob_stream_set(stream);
    if (j->st == BLOB_OK && j->net) { /* ranks whose nets differ */
        net_config cfg = {.def = net_def_find(j->net),
                          .mode = NN_GPU,
                          .dtype = BLOB_FLOAT32,
                          .batch = BATCH,
                          .seed = 3,
                          .lr = 0.05,
                          .comm = j->comm};
        net *n = NULL;
        double t0 = nn_now();
        j->st = net_create(&n, &cfg);
        j->seconds = nn_now() - t0;
        snprintf(j->err, sizeof j->err, "%s", blob_last_error());
        net_free(n);
        double one = 1; /* the communicator still works */
        if (j->st != BLOB_OK) {
            blob_status st = blob_comm_all_reduce_host(j->comm, &one, 1, BLOB_COMM_SUM);
            if (st != BLOB_OK || one != ranks)
                snprintf(j->err, sizeof j->err,
                         "the communicator does not work after it: %s, "
                         "a sum of ones %g",
                         blob_status_name(st), one);
        }
    } else if (j->st == BLOB_OK) {
        /* graphs are refused with several ranks, before any collective */
        net_config cfg = {.def = net_def_find(NET),
                          .mode = NN_GPU,
                          .dtype = j->spec->dtype,
                          .batch = BATCH,
                          .seed = 3,
                          .lr = 0.05,
                          .graph = true,
                          .comm = j->comm};
        net *n = NULL;
        blob_status graph_st = net_create(&n, &cfg);
        net_free(n);
        if (graph_st != BLOB_ENOTSUP) {
            j->st = graph_st == BLOB_OK ? BLOB_EINVAL : graph_st;
            snprintf(j->err, sizeof j->err,
                     "net_create with graphs and %d ranks gave %s, "
                     "expected ENOTSUP",
                     ranks, blob_status_name(graph_st));
        } else {
            j->st = train(j->spec, j->comm, j->d, rank, ranks, BATCH, &j->res);
            j->mean_loss = j->res.loss;
            if (j->st == BLOB_OK)
                j->st = blob_comm_all_reduce_host(j->comm, &j->mean_loss, 1, BLOB_COMM_MEAN);
            if (j->st != BLOB_OK)
                snprintf(j->err, sizeof j->err, "%s", blob_last_error());
        }
    }
    if (stream)
        blob_stream_synchronize(stream);
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
    return NULL;
}

/* Run the ranks' jobs on threads over a fresh communicator on GPUs 0..n-1. */
static blob_status run_threads(rank_job *jobs, int n, size_t bucket_bytes)
{
    int devices[MAX_RANKS] = {0};
    blob_comm *comms[MAX_RANKS];
    pthread_t threads[MAX_RANKS];
    for (int i = 0; i < n; i++)
        devices[i] = i;
    blob_comm_options o;
    memset(&o, 0, sizeof o);
    o.bucket_bytes = bucket_bytes;
    o.timeout_s = 60;
    CHECK(blob_comm_create_local(comms, n, devices, &o));
    int started = 0;
    for (int i = 0; i < n; i++) {
        jobs[i].comm = comms[i];
        if (pthread_create(&threads[i], NULL, rank_main, &jobs[i]) == 0)
            started++;
        else
            break;
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < n; i++)
        blob_comm_free(comms[i]);
    if (started < n) {
        say(false, "cannot start %d threads", n);
        return BLOB_ENOMEM;
    }
    return BLOB_OK;
}

/* Two ranks of batch B against GPU 0 with batch 2B. */
static void threads_case(const dataset *d, const net *names, blob_dtype dt, size_t bucket_bytes,
                         double tol)
{
    enum { N = 2 };
    char what[128];
    snprintf(what, sizeof what, "2 threads x %d rows against 1 GPU x %d rows, %d steps, %s, %s",
             BATCH, N * BATCH, STEPS, dtype_name(dt),
             bucket_bytes ? "64 KiB buckets" : "default buckets");
    run_spec spec = {NET, dt, NN_GPU, false, STEPS};
    result ref = {0};
    void *stream = NULL;
    blob_status st = blob_device_set(0);
    if (st == BLOB_OK)
        st = blob_stream_create(&stream);
    blob_stream_set(stream);
    if (st == BLOB_OK)
        st = train(&spec, NULL, d, 0, 1, N * BATCH, &ref);
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
    rank_job jobs[N];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N; i++) {
        jobs[i].spec = &spec;
        jobs[i].d = d;
    }
    if (st == BLOB_OK && run_threads(jobs, N, bucket_bytes) == BLOB_OK) {
        bool all = true;
        for (int i = 0; i < N; i++)
            if (jobs[i].st != BLOB_OK) {
                say(false, "%s: rank %d: %s: %s", what, i, blob_status_name(jobs[i].st),
                    jobs[i].err);
                all = false;
            }
        if (all) {
            compare(what, names, &jobs[0].res, &ref, tol);
            identical("... rank 1's weights are rank 0's", names, &jobs[1].res, &jobs[0].res);
            close_loss("...", jobs[0].mean_loss, ref.loss, dt == BLOB_FLOAT64 ? 1e-10 : tol);
        }
    }
    for (int i = 0; i < N; i++)
        free(jobs[i].res.w);
    free(ref.w);
}

/* Rank 1 builds another net: BLOB_ESHAPE on both ranks at once, communicator usable. */
static void threads_mismatch(void)
{
    rank_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    jobs[0].net = NET;
    jobs[1].net = "mlp1024";
    if (run_threads(jobs, 2, 0) != BLOB_OK)
        return;
    for (int i = 0; i < 2; i++)
        say(jobs[i].st == BLOB_ESHAPE && jobs[i].seconds < 1 && strstr(jobs[i].err, "differs"),
            "ranks whose nets differ: rank %d: %s after %.3f s: %s", i,
            blob_status_name(jobs[i].st), jobs[i].seconds, jobs[i].err);
}

static void check_threads(const dataset *d, const net *names)
{
    int gpus = blob_device_count();
    if (gpus < 2) {
        say(false, "dp_check threads needs two GPUs; %d found", gpus);
        return;
    }
    threads_case(d, names, BLOB_FLOAT64, 64 << 10, 1e-5);
    threads_case(d, names, BLOB_FLOAT32, 0, 1e-3);
    threads_mismatch();
}

/* ---- dp_check rank ---- */

/* A 48-bit hash of the weights, exact as a double. */
static double weights_hash(const result *r)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)r->w;
    for (size_t i = 0; i < (size_t)r->count * sizeof *r->w; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return (double)(h >> 16);
}

static blob_status rank_case(blob_comm *c, const dataset *d, const net *names, blob_dtype dt,
                             double tol)
{
    int rank = blob_comm_rank(c), ranks = blob_comm_size(c);
    char what[128];
    snprintf(what, sizeof what, "%d processes x %d rows against 1 GPU x %d rows, %d steps, %s",
             ranks, BATCH, ranks * BATCH, STEPS, dtype_name(dt));
    run_spec spec = {NET, dt, NN_GPU, false, STEPS};
    result ref = {0}, mine = {0};
    /* every rank computes the reference on its own GPU first */
    blob_status st = train(&spec, NULL, d, 0, 1, (int64_t)ranks * BATCH, &ref);
    if (st == BLOB_OK)
        st = train(&spec, c, d, rank, ranks, BATCH, &mine);
    double hashes[MAX_RANKS] = {0}, loss = mine.loss;
    if (st == BLOB_OK) {
        hashes[rank] = weights_hash(&mine);
        if ((st = blob_comm_all_reduce_host(c, hashes, ranks, BLOB_COMM_SUM)) != BLOB_OK ||
            (st = blob_comm_all_reduce_host(c, &loss, 1, BLOB_COMM_MEAN)) != BLOB_OK)
            say(false, "%s: all_reduce_host: %s: %s", what, blob_status_name(st),
                blob_last_error());
    }
    if (st == BLOB_OK) {
        compare(what, names, &mine, &ref, tol);
        int same = 1;
        for (int r = 1; r < ranks; r++)
            same &= hashes[r] == hashes[0];
        say(same, "... every rank's weights are rank 0's (hashes %.0f, %.0f%s)", hashes[0],
            hashes[1], ranks > 2 ? ", ..." : "");
        close_loss("...", loss, ref.loss, dt == BLOB_FLOAT64 ? 1e-10 : tol);
    }
    free(ref.w);
    free(mine.w);
    return st;
}

static void check_rank(const dataset *d, const net *names)
{
    blob_comm_options o;
    blob_status st = blob_comm_options_from_env(&o);
    if (st != BLOB_OK || o.world_size < 2 || o.world_size > MAX_RANKS) {
        say(false, "dp_check rank runs under blob-launch with 2 to %d ranks: %s", MAX_RANKS,
            st != BLOB_OK ? blob_last_error() : "WORLD_SIZE out of range");
        return;
    }
    rank_label = o.rank;
    void *stream = NULL;
    blob_comm *c = NULL;
    /* the stream is made on this rank's GPU before blob_comm_create makes it current */
    if ((st = blob_device_set(o.device)) != BLOB_OK ||
        (st = blob_stream_create(&stream)) != BLOB_OK) {
        say(false, "GPU %d: %s: %s", o.device, blob_status_name(st), blob_last_error());
        return;
    }
    blob_stream_set(stream);
    st = blob_comm_create(&c, &o);
    if (st != BLOB_OK)
        say(false, "blob_comm_create: %s: %s", blob_status_name(st), blob_last_error());
    if (st == BLOB_OK)
        st = rank_case(c, d, names, BLOB_FLOAT64, 1e-5);
    if (st == BLOB_OK)
        rank_case(c, d, names, BLOB_FLOAT32, 1e-3);
    blob_stream_synchronize(stream);
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
    blob_comm_free(c);
}

/* ---- dp_check compare ---- */

static int compare_dirs(const char *name, const char *a, const char *b, double tol)
{
    net *names = layout(name);
    if (!names) {
        fprintf(stderr, "dp_check: no net %s\n", name);
        return 2;
    }
    result ra = {0}, rb = {0};
    const char *dirs[2] = {a, b};
    result *rs[2] = {&ra, &rb};
    blob *tmp = NULL;
    int64_t zero = 0;
    blob_status st = blob_create(&tmp, BLOB_FLOAT64, BLOB_HOST_ONLY, 1, &zero);
    for (int k = 0; k < 2 && st == BLOB_OK; k++) {
        st = result_alloc(names, rs[k]);
        int64_t at = 0;
        for (int i = 0; i < net_num_params(names) && st == BLOB_OK; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.npy", dirs[k], net_param_name(names, i));
            const void *v;
            if ((st = blob_load_npy(tmp, BLOB_PART_DATA, path)) != BLOB_OK ||
                (st = blob_cpu_data(tmp, &v)) != BLOB_OK) {
                say(false, "%s: %s", path, blob_last_error());
                break;
            }
            if (blob_count(tmp) != blob_count(net_param(names, i))) {
                say(false, "%s: %lld values, %s has %lld", path, (long long)blob_count(tmp),
                    net_param_name(names, i), (long long)blob_count(net_param(names, i)));
                st = BLOB_ESHAPE;
                break;
            }
            memcpy(rs[k]->w + at, v, (size_t)blob_count(tmp) * sizeof(double));
            at += blob_count(tmp);
        }
    }
    if (st == BLOB_OK) {
        char what[512];
        snprintf(what, sizeof what, "%s against %s", a, b);
        compare(what, names, &ra, &rb, tol);
    }
    blob_free(tmp);
    free(ra.w);
    free(rb.w);
    net_free(names);
    return failed ? 1 : 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: dp_check one | threads | rank | gpus | compare NET DIR_A DIR_B TOL\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "gpus") && argc == 2) {
        printf("%d\n", blob_device_count());
        return 0;
    }
    if (!strcmp(mode, "compare") && argc == 6) {
        char *end;
        double tol = strtod(argv[5], &end);
        if (*end || !(tol >= 0))
            return usage();
        int rc = compare_dirs(argv[2], argv[3], argv[4], tol);
        blob_thread_release();
        return rc;
    }
    if (argc != 2 || (strcmp(mode, "one") && strcmp(mode, "threads") && strcmp(mode, "rank")))
        return usage();
    /* rows for STEPS global batches of up to WORLD_SIZE (rank) or 2 ranks */
    long ranks = 2;
    if (!strcmp(mode, "rank") && getenv("WORLD_SIZE"))
        ranks = strtol(getenv("WORLD_SIZE"), NULL, 10);
    if (ranks < 2 || ranks > MAX_RANKS)
        ranks = 2; /* check_rank says what is wrong */
    dataset d;
    net *names = layout(NET);
    if (!names || dataset_make(&d, STEPS * ranks * BATCH)) {
        fprintf(stderr, "dp_check: out of memory\n");
        return 1;
    }
    if (!strcmp(mode, "one"))
        check_one(&d, names);
    else if (!strcmp(mode, "threads"))
        check_threads(&d, names);
    else
        check_rank(&d, names);
    if (rank_label >= 0)
        printf("rank %d: ", rank_label);
    printf("dp_check %s: %d passed, %d failed\n", mode, passed, failed);
    net_free(names);
    dataset_free(&d);
    blob_thread_release();
    return failed ? 1 : 0;
}
