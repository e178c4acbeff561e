/*
 * dp_step - data-parallel training speedup (make bench-dp): samples/s of N GPUs against
 * one GPU at the same batch per GPU, for the nets of examples/nets trained with a thread
 * per GPU and with a process per GPU (blob-launch), beside PyTorch DDP on the same
 * models in the same run (bench/ddp_torch.py, a process per GPU under blob-launch), and
 * both again with the gradients all-reduced in bfloat16 (blob_comm_options.bf16_reduce,
 * DDP's bf16_compress_hook).
 * The nets: MLP 784-4096-4096-4096-10 (mlp4096) at 512 rows per GPU and
 * 784-1024-1024-1024-10 (mlp1024) at 256.
 *
 *   dp_step [--gpus N] [--steps S] [--repeats R] [--launcher PATH] [--no-torch]
 *   dp_step --timeline [--gpus N] [--net NET] the timeline of one step of NET (mlp4096
 *                                             by default) on N GPUs, a thread each (see
 *                                             below)
 *   dp_step --rank NET BATCH STEPS REPEATS    one rank of the process runs (the launcher
 *                                             starts them; rank 0 prints its figure)
 *
 * A step is net_train_step: forward; backward, each layer's gradients handed to the
 * mean all-reduce as soon as its backward is queued, so that the communicator's stream
 * reduces them (in place on the flat gradient, in buckets of BLOB_COMM_BUCKET_MB, or
 * BLOB_COMM_DEFAULT_BUCKET_BYTES) while backward goes on; the update (SGD, momentum 0.9,
 * weight decay 5e-4) after a wait on the device. The host never waits in a step and no
 * loss is read back; steps run eagerly (a CUDA graph cannot hold the watched
 * collectives).
 * Each figure: bench_time (bench/timing.c) over runs of S steps, each ending with a
 * synchronize of the rank's stream and, with several ranks, a barrier of them all (a
 * one-value blob_comm_all_reduce_host); one untimed run, then the median of R, in ms
 * per step. "1 GPU" is GPU 0 alone with the same batch.
 * The speedup is N x (ms per step on 1 GPU) / (ms per step on N GPUs), the ratio of
 * samples per second. Goals (2 GPUs): >= 1.9x on mlp4096, >= 1.6x on mlp1024; on 4
 * GPUs >= 3.7x and >= 3.2x. Exit status 1 if a figure could not be measured.
 * The timeline (blob_comm_list_set_timing) shows rank 0's step after warm steps: when
 * each bucket's gradients were all handed over on the compute stream, when its
 * all-reduce ran on the communicator's stream, and when backward ended (reduce_end), in
 * ms from the start of backward; the tail is what the last all-reduce adds after it.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "net.h"

#define MAX_GPUS 8

typedef struct {
    const char *net;
    int64_t batch;
    double goal2, goal4; /* speedups to reach on 2 and on 4 GPUs */
} dp_case;

static const dp_case cases[] = {
    {"mlp4096", 512, 1.9, 3.7},
    {"mlp1024", 256, 1.6, 3.2},
};
#define NUM_CASES (int)(sizeof cases / sizeof cases[0])

/* A clock per thread: the ranks of one process time themselves at once. */
static _Thread_local double clock_start;
static void rank_clock_begin(void) { clock_start = bench_now_ns(); }
static double rank_clock_end(void) { return bench_now_ns() - clock_start; }
static const bench_clock rank_clock = {rank_clock_begin, rank_clock_end};

/* One rank's run: its stream, net and two resident batches. */
typedef struct {
    blob_comm *comm; /* NULL: one GPU */
    const dp_case *c;
    int steps, repeats;
    void *stream;
    net *n;
    blob *x[2], *y[2];
    double ms;     /* median ms per step */
    bool timeline; /* then print rank 0's timeline of a step */
    char err[512];
} rank_ctx;

/* bench_op: count steps, then wait for them, and for every rank. */
static int run_steps(void *ctx, int count)
{
    rank_ctx *r = ctx;
    for (int s = 0; s < count; s++)
        BTRY(net_train_step(r->n, r->x[s % 2], r->y[s % 2]));
    BTRY(blob_stream_synchronize(r->stream));
    if (r->comm && blob_comm_size(r->comm) > 1) {
        double zero = 0;
        BTRY(blob_comm_all_reduce_host(r->comm, &zero, 1, BLOB_COMM_SUM));
    }
    return 0;
}

static int rank_open(rank_ctx *r)
{
    BTRY(blob_stream_create(&r->stream));
    blob_stream_set(r->stream);
    net_config cfg = {.def = net_def_find(r->c->net),
                      .mode = NN_GPU,
                      .dtype = BLOB_FLOAT32,
                      .batch = r->c->batch,
                      .seed = 1,
                      .lr = 0.01,
                      .momentum = 0.9,
                      .weight_decay = 5e-4,
                      .comm = r->comm};
    if (!cfg.def)
        return bench_fail("no net %s", r->c->net);
    BTRY(net_create(&r->n, &cfg));
    uint64_t rng = 5 + (uint64_t)(r->comm ? blob_comm_rank(r->comm) : 0);
    for (int k = 0; k < 2; k++)
        BTRY(net_fake_batch(cfg.def, NN_GPU, BLOB_FLOAT32, r->c->batch, 10, 7, k, &rng, &r->x[k],
                            &r->y[k]));
    return 0;
}

static void rank_close(rank_ctx *r)
{
    if (r->stream)
        blob_stream_synchronize(r->stream);
    net_free(r->n);
    for (int k = 0; k < 2; k++) {
        blob_free(r->x[k]);
        blob_free(r->y[k]);
    }
    blob_stream_set(NULL);
    blob_stream_destroy(r->stream);
}

/* Time a step of the open rank with events and print rank 0's timeline. */
static int rank_timeline(rank_ctx *r)
{
    blob_comm_list *l = net_comm_list(r->n);
    enum { MAX_BUCKETS = 64 };
    blob_comm_bucket_timing b[MAX_BUCKETS];
    int num = 0;
    double end = 0;
    BTRY(blob_comm_list_set_timing(l, true));
    if (run_steps(r, 3) != 0)
        return -1;
    BTRY(blob_comm_list_timing(l, b, MAX_BUCKETS, &num, &end));
    if (blob_comm_rank(r->comm) != 0)
        return 0;
    printf("\ntimeline of one step of %s at %lld rows per GPU, rank 0 of %d (%.3f ms a step), "
           "ms from the start of backward:\n%6s %7s %9s %9s %9s %9s %9s\n",
           r->c->net, (long long)r->c->batch, blob_comm_size(r->comm), r->ms, "bucket", "blobs",
           "MB", "ready", "start", "end", "GB/s");
    double last = 0;
    for (int i = 0; i < num && i < MAX_BUCKETS; i++) {
        double mb = (double)b[i].elements * 4 / 1e6;
        printf("%6d %3d-%-3d %9.1f %9.3f %9.3f %9.3f %9.1f\n", num - i, b[i].first, b[i].last, mb,
               b[i].ready_ms, b[i].start_ms, b[i].end_ms,
               mb / 1e3 / ((b[i].end_ms - b[i].start_ms) / 1e3));
        last = b[i].end_ms > last ? b[i].end_ms : last;
    }
    printf("backward ends at %.3f ms; the last all-reduce ends at %.3f ms: a tail of %.3f ms\n",
           end, last, last - end);
    return 0;
}

/* Time the rank on the current GPU: 0, or -1 with r->err set. */
static int rank_time(rank_ctx *r)
{
    r->ms = NAN;
    if (rank_open(r) == 0) {
        bench_op op = {.run = run_steps, .ctx = r};
        r->ms = bench_time(&op, r->steps, r->repeats, &rank_clock) / 1e6;
        if (!isnan(r->ms) && r->timeline && rank_timeline(r) != 0)
            r->ms = NAN;
    }
    if (isnan(r->ms))
        snprintf(r->err, sizeof r->err, "%s", bench_error());
    rank_close(r);
    return isnan(r->ms) ? -1 : 0;
}

/* ---- the three libblob runs ---- */

static double time_one(const dp_case *c, int steps, int repeats, char *why, size_t why_size)
{
    rank_ctx r = {.c = c, .steps = steps, .repeats = repeats};
    if (blob_device_set(0) != BLOB_OK) {
        snprintf(why, why_size, "GPU 0: %s", blob_last_error());
        return NAN;
    }
    if (rank_time(&r) != 0)
        snprintf(why, why_size, "%s", r.err);
    return r.ms;
}

static void *thread_main(void *arg)
{
    rank_ctx *r = arg;
    if (blob_device_set(blob_comm_device(r->comm)) != BLOB_OK)
        snprintf(r->err, sizeof r->err, "%s", blob_last_error());
    else
        rank_time(r);
    return NULL;
}

/* A thread per GPU over a communicator of this process: rank 0's figure. */
static double time_threads(const dp_case *c, int n, int steps, int repeats, bool timeline,
                           bool bf16, char *why, size_t why_size)
{
    int devices[MAX_GPUS] = {0};
    blob_comm *comms[MAX_GPUS];
    rank_ctx ranks[MAX_GPUS];
    pthread_t threads[MAX_GPUS];
    for (int i = 0; i < n; i++)
        devices[i] = i;
    blob_comm_options o;
    memset(&o, 0, sizeof o); /* BLOB_COMM_TIMEOUT, BLOB_COMM_BUCKET_MB or the defaults */
    o.bf16_reduce = bf16;
    if (blob_comm_create_local(comms, n, devices, &o) != BLOB_OK) {
        snprintf(why, why_size, "blob_comm_create_local: %s", blob_last_error());
        return NAN;
    }
    memset(ranks, 0, sizeof ranks);
    int started = 0;
    for (int i = 0; i < n; i++) {
        ranks[i] = (rank_ctx){.comm = comms[i],
                              .c = c,
                              .steps = steps,
                              .repeats = repeats,
                              .ms = NAN,
                              .timeline = timeline};
        if (pthread_create(&threads[i], NULL, thread_main, &ranks[i]) != 0) {
            snprintf(why, why_size, "cannot start thread %d", i);
            break; /* the others fail by the communicator's deadline */
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < n; i++)
        blob_comm_free(comms[i]);
    for (int i = started - 1; i >= 0; i--)
        if (ranks[i].err[0])
            snprintf(why, why_size, "rank %d: %s", i, ranks[i].err);
    return started == n ? ranks[0].ms : NAN;
}

/* A process per GPU under the launcher, each `dp_step --rank ...`: rank 0's figure. */
static double time_processes(const char *launcher, const dp_case *c, int n, int steps, int repeats,
                             char *why, size_t why_size)
{
    char self[4096], cmd[8192], line[1024], last[400] = "no output";
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        snprintf(why, why_size, "cannot find this program (/proc/self/exe)");
        return NAN;
    }
    self[len] = '\0';
    snprintf(cmd, sizeof cmd, "timeout 600 '%s' --nproc %d '%s' --rank %s %lld %d %d 2>&1",
             launcher, n, self, c->net, (long long)c->batch, steps, repeats);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, why_size, "popen failed");
        return NAN;
    }
    double ms = NAN;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "ms_per_step %lf", &ms) != 1 && *line)
            snprintf(last, sizeof last, "%.399s", line);
    }
    int status = pclose(p);
    if (status != 0 || isnan(ms)) {
        snprintf(why, why_size, "the ranks failed: %s", last);
        return NAN;
    }
    return ms;
}

/* dp_step --rank: one rank of the process runs. */
static int rank_process(const char *net_name, int64_t batch, int steps, int repeats)
{
    dp_case c = {.net = net_name, .batch = batch};
    blob_comm_options o;
    memset(&o, 0, sizeof o);
    blob_comm *comm;
    if (blob_comm_options_from_env(&o) != BLOB_OK || blob_comm_create(&comm, &o) != BLOB_OK) {
        printf("rank %d: %s\n", o.rank, blob_last_error());
        return 1;
    }
    rank_ctx r = {.comm = comm, .c = &c, .steps = steps, .repeats = repeats};
    int rc = rank_time(&r);
    if (rc != 0)
        printf("rank %d: %s\n", o.rank, r.err);
    else if (o.rank == 0)
        printf("ms_per_step %.6f\n", r.ms);
    blob_comm_free(comm);
    blob_thread_release();
    return rc ? 1 : 0;
}

/* ---- the table ---- */

/* One row: ms per step on 1 and on n GPUs, samples/s, the speedup and the goal (0:
 * none). Returns 0, or 1 if a figure is missing. */
static int row(const dp_case *c, const char *how, int n, double one, double many, double goal,
               const char *why)
{
    printf("%-8s %5lld  %-24s", c->net, (long long)c->batch, how);
    if (isnan(one) || isnan(many)) {
        printf("  -  (%s)\n", why && *why ? why : "not measured");
        return 1;
    }
    double speedup = n * one / many;
    printf(" %9.3f %9.3f %11.0f %11.0f %7.2fx", one, many, 1e3 * (double)c->batch / one,
           1e3 * (double)(n * c->batch) / many, speedup);
    if (goal > 0)
        printf("  >= %.1fx %s", goal, speedup >= goal ? "PASS" : "MISS");
    putchar('\n');
    fflush(stdout);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: dp_step [--gpus N] [--steps S] [--repeats R] [--launcher PATH] "
                    "[--no-torch]\n       dp_step --timeline [--gpus N] [--net NET]\n"
                    "       dp_step --rank NET BATCH STEPS REPEATS\n");
    exit(2);
}

/* The case of the net called name, or NULL. */
static const dp_case *case_find(const char *name)
{
    for (int k = 0; k < NUM_CASES; k++)
        if (!strcmp(cases[k].net, name))
            return &cases[k];
    return NULL;
}

/* What to measure, from the command line. */
typedef struct {
    int gpus, steps, repeats;
    const char *launcher;
    const dp_case *timeline_case; /* --net, mlp4096 by default */
    bool with_torch, timeline;
} options;

static options parse_options(int argc, char **argv)
{
    options o = {.steps = 100, .repeats = 5, .with_torch = true, .timeline_case = &cases[0]};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-torch")) {
            o.with_torch = false;
            continue;
        }
        if (!strcmp(a, "--timeline")) {
            o.timeline = true;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--gpus") && atoi(v) >= 2 && atoi(v) <= MAX_GPUS)
            o.gpus = atoi(v);
        else if (!strcmp(a, "--steps") && atoi(v) > 0)
            o.steps = atoi(v);
        else if (!strcmp(a, "--repeats") && atoi(v) > 0 && atoi(v) <= BENCH_MAX_REPS)
            o.repeats = atoi(v);
        else if (!strcmp(a, "--launcher"))
            o.launcher = v;
        else if (!strcmp(a, "--net") && case_find(v))
            o.timeline_case = case_find(v);
        else
            usage();
    }
    return o;
}

/* The figures of one case, ms per step (NAN: not measured, why_* say why). */
typedef struct {
    double one, threads, procs, bf16;
    char why_one[512], why_threads[512], why_procs[512], why_bf16[512];
} dp_figures;

/* PyTorch first, before this process takes the GPUs' memory; then libblob's runs. */
static void run(const options *o, dp_figures *fig)
{
    if (o->with_torch && o->launcher) {
        char args[256];
        snprintf(args, sizeof args, "--steps %d --repeats %d", o->steps, o->repeats);
        torch_load_launched(o->launcher, o->gpus, "bench/ddp_torch.py", args);
    } else {
        report_meta("torch", "not run (%s)", o->with_torch ? "no --launcher" : "--no-torch");
    }
    for (int k = 0; k < NUM_CASES; k++) {
        const dp_case *c = &cases[k];
        dp_figures *g = &fig[k];
        g->why_procs[0] = g->why_one[0] = g->why_threads[0] = g->why_bf16[0] = '\0';
        g->procs = o->launcher ? time_processes(o->launcher, c, o->gpus, o->steps, o->repeats,
                                                g->why_procs, sizeof g->why_procs)
                               : NAN;
        if (!o->launcher)
            snprintf(g->why_procs, sizeof g->why_procs, "no --launcher");
        g->one = time_one(c, o->steps, o->repeats, g->why_one, sizeof g->why_one);
        g->threads = time_threads(c, o->gpus, o->steps, o->repeats, false, false, g->why_threads,
                                  sizeof g->why_threads);
        g->bf16 = time_threads(c, o->gpus, o->steps, o->repeats, false, true, g->why_bf16,
                               sizeof g->why_bf16);
    }
    blob_thread_release();
}

/* The table; returns the count of libblob's figures missing. */
static int report(const options *o, const dp_figures *fig)
{
    const int gpus = o->gpus;
    const bool torch = o->with_torch && o->launcher; /* a missing torch is said above */
    char many_ms[32], many_sps[32];
    snprintf(many_ms, sizeof many_ms, "%d GPUs ms", gpus);
    snprintf(many_sps, sizeof many_sps, "%d GPUs sam/s", gpus);
    printf("\n%-8s %5s  %-24s %9s %9s %11s %11s %8s  %s\n", "net", "batch", "run (batch per GPU)",
           "1 GPU ms", many_ms, "1 GPU sam/s", many_sps, "speedup", "goal");
    int missing = 0;
    for (int k = 0; k < NUM_CASES; k++) {
        const dp_case *c = &cases[k];
        const dp_figures *g = &fig[k];
        double goal = gpus == 2 ? c->goal2 : gpus == 4 ? c->goal4 : 0;
        const char *why = *g->why_one ? g->why_one : g->why_threads;
        missing += row(c, "libblob, a thread each", gpus, g->one, g->threads, goal, why);
        why = *g->why_one ? g->why_one : g->why_procs;
        missing += row(c, "libblob, a process each", gpus, g->one, g->procs, goal, why);
        char key[32];
        snprintf(key, sizeof key, "one_%s", c->net);
        double t1 = torch_ref(key, (double)c->batch);
        snprintf(key, sizeof key, "ddp_%s", c->net);
        double tn = torch_ref(key, (double)c->batch);
        if (torch)
            row(c, "torch DDP", gpus, t1, tn, 0, "see the torch line above");
        why = *g->why_one ? g->why_one : g->why_bf16;
        missing += row(c, "libblob, bf16 all-reduce", gpus, g->one, g->bf16, 0, why);
        snprintf(key, sizeof key, "ddp_bf16_%s", c->net);
        tn = torch_ref(key, (double)c->batch);
        if (torch)
            row(c, "torch DDP, bf16 hook", gpus, t1, tn, 0, "see the torch line above");
    }
    if (missing)
        printf("%d libblob figure(s) could not be measured\n", missing);
    return missing;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--rank"))
        return rank_process(argv[2], atoll(argv[3]), atoi(argv[4]), atoi(argv[5]));
    options o = parse_options(argc, argv);
    int found = blob_device_count();
    if (!o.gpus)
        o.gpus = found < MAX_GPUS ? found : MAX_GPUS;
    if (o.gpus < 2 || o.gpus > found) {
        printf("dp_step: skipped: data-parallel training needs two GPUs; %d found\n", found);
        return 0;
    }
    if (o.timeline) {
        char why[512] = "";
        double ms = time_threads(o.timeline_case, o.gpus, 20, 1, true, false, why, sizeof why);
        if (isnan(ms))
            printf("dp_step: the timeline could not be taken: %s\n", why);
        return isnan(ms) ? 1 : 0;
    }
    printf("dp_step: data-parallel SGD steps, %d GPUs against 1 at the same batch per GPU\n",
           o.gpus);
    report_meta("gpus", "%d of %d (GPU 0 alone for the 1-GPU figures)", o.gpus, found);
    const char *vars[] = {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE",
                          "NCCL_NVLS_ENABLE", "BLOB_COMM_BUCKET_MB"};
    report_env(vars, (int)(sizeof vars / sizeof vars[0]),
               "(none of the NCCL and bucket variables set)");
    report_meta("timing", "median of %d runs of %d steps after one untimed run", o.repeats,
                o.steps);
    static dp_figures fig[NUM_CASES];
    run(&o, fig);
    return report(&o, fig) ? 1 : 0;
}
