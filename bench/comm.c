/* blob_bench_comm: all-reduce bus bandwidth through blob_comm, beside a raw
 * ncclAllReduce on one buffer in the same run and torch.distributed (one process per
 * GPU, started by blob-launch), from 4 KiB to 256 MiB. See docs/distributed.md.
 *   blob_bench_comm [--ranks N] [--launcher PATH] [--no-torch]
 * Ranks are threads of this process, one per GPU (GPUs 0..N-1; N defaults to all). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "bench_cuda.h"

#define MAX_RANKS  8
#define GOAL_RATIO 0.95
#define GOAL_FROM  (16 * MIB)

static const size_t sizes[] = {4 * KIB, 64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB};
#define NUM_SIZES (sizeof sizes / sizeof sizes[0])

#define NTRY(expr)                                                         \
    do {                                                                   \
        ncclResult_t ntry_ = (expr);                                       \
        if (ntry_ != ncclSuccess)                                          \
            return bench_fail("%s: %s", #expr, ncclGetErrorString(ntry_)); \
    } while (0)

typedef enum { JOB_BLOB, JOB_BLOB_BUCKETS, JOB_QUIT } job_kind;

/* The ranks: thread r drives rank r (the main thread is rank 0). */
static struct {
    int n;
    pthread_barrier_t start, done;
    job_kind job;
    int iters;
    int failed[MAX_RANKS];
    char why[MAX_RANKS][256];
    /* blob_comm: one communicator with buckets larger than any buffer (one NCCL call
     * in place on the blob's diff), one with the default buckets
     * (BLOB_COMM_DEFAULT_BUCKET_BYTES) */
    blob_comm *whole[MAX_RANKS], *buckets[MAX_RANKS];
    blob *buf[MAX_RANKS];
    blob_comm_list *list_whole[MAX_RANKS], *list_buckets[MAX_RANKS];
    void *stream[MAX_RANKS];
    /* raw NCCL: blocking communicators, one thread, a group per call */
    ncclComm_t raw[MAX_RANKS];
    cudaStream_t raw_stream[MAX_RANKS];
    float *raw_buf[MAX_RANKS];
} team;

static size_t cur_count; /* floats in the buffers now */

/* One rank's share of a timed batch: iters all-reduces, then wait for them. */
static int rank_batch(int r)
{
    blob_comm_list *l = team.job == JOB_BLOB ? team.list_whole[r] : team.list_buckets[r];
    blob_comm *c = team.job == JOB_BLOB ? team.whole[r] : team.buckets[r];
    for (int i = 0; i < team.iters; i++)
        BTRY(blob_comm_all_reduce(l, BLOB_COMM_SUM));
    BTRY(blob_comm_synchronize(c));
    BTRY(blob_stream_synchronize(team.stream[r]));
    return 0;
}

static void *rank_main(void *arg)
{
    int r = (int)(intptr_t)arg;
    blob_device_set(r);
    blob_stream_set(team.stream[r]);
    for (;;) {
        pthread_barrier_wait(&team.start);
        if (team.job == JOB_QUIT)
            break;
        team.failed[r] = rank_batch(r);
        if (team.failed[r])
            snprintf(team.why[r], sizeof team.why[r], "%s", bench_error());
        pthread_barrier_wait(&team.done);
    }
    blob_thread_release();
    return NULL;
}

/* A bench_op run: every rank does n all-reduces through blob_comm at once. */
static int blob_run(void *ctx, int n)
{
    team.job = (job_kind)(intptr_t)ctx;
    team.iters = n;
    pthread_barrier_wait(&team.start);
    team.failed[0] = rank_batch(0);
    pthread_barrier_wait(&team.done);
    for (int r = 0; r < team.n; r++)
        if (team.failed[r])
            return r ? bench_fail("rank %d: %s", r, team.why[r]) : -1;
    return 0;
}

/* A bench_op run: n raw all-reduces, all ranks' in one group per call. */
static int raw_run(void *ctx, int n)
{
    (void)ctx;
    for (int i = 0; i < n; i++) {
        NTRY(ncclGroupStart());
        for (int r = 0; r < team.n; r++)
            NTRY(ncclAllReduce(team.raw_buf[r], team.raw_buf[r], cur_count, ncclFloat32, ncclSum,
                               team.raw[r], team.raw_stream[r]));
        NTRY(ncclGroupEnd());
    }
    for (int r = 0; r < team.n; r++)
        CTRY(cudaStreamSynchronize(team.raw_stream[r]));
    return 0;
}

/* Rank r's blob of count floats (ones: sums stay finite) and its lists. */
static int make_buffers(size_t count)
{
    cur_count = count;
    for (int r = 0; r < team.n; r++) {
        BTRY(blob_device_set(r));
        blob_stream_set(team.stream[r]);
        blob_comm_list_free(team.list_whole[r]);
        blob_comm_list_free(team.list_buckets[r]);
        team.list_whole[r] = team.list_buckets[r] = NULL;
        blob_free(team.buf[r]);
        team.buf[r] = NULL;
        int64_t n = (int64_t)count;
        BTRY(blob_create(&team.buf[r], BLOB_FLOAT32, r, 1, &n));
        float *p;
        BTRY(blob_mutable_cpu_diff(team.buf[r], (void **)&p));
        for (size_t i = 0; i < count; i++)
            p[i] = 1.0f;
        void *d;
        BTRY(blob_mutable_gpu_diff(team.buf[r], &d));
        CTRY(cudaSetDevice(r));
        CTRY(cudaFree(team.raw_buf[r]));
        team.raw_buf[r] = NULL;
        CTRY(cudaMalloc((void **)&team.raw_buf[r], count * sizeof(float)));
        CTRY(cudaMemset(team.raw_buf[r], 0x3c, count * sizeof(float))); /* 0.0115 */
    }
    return 0;
}

/* List creation is a collective: every rank's thread makes its own, at once. */
typedef struct {
    int r;
    int failed;
} list_arg;

static void *make_lists(void *p)
{
    list_arg *a = p;
    int r = a->r;
    if (blob_device_set(r) != BLOB_OK ||
        blob_comm_list_create(&team.list_whole[r], team.whole[r], &team.buf[r], 1) != BLOB_OK ||
        blob_comm_list_create(&team.list_buckets[r], team.buckets[r], &team.buf[r], 1) != BLOB_OK)
        a->failed = bench_fail("rank %d: list: %s", r, blob_last_error());
    return NULL;
}

static int make_all_lists(void)
{
    pthread_t th[MAX_RANKS];
    list_arg args[MAX_RANKS];
    for (int r = 0; r < team.n; r++) {
        args[r] = (list_arg){r, 0};
        if (pthread_create(&th[r], NULL, make_lists, &args[r]) != 0)
            return bench_fail("pthread_create failed");
    }
    int failed = 0;
    for (int r = 0; r < team.n; r++) {
        pthread_join(th[r], NULL);
        failed |= args[r].failed;
    }
    return failed;
}

static int open_team(void)
{
    int devices[MAX_RANKS];
    for (int r = 0; r < team.n; r++)
        devices[r] = r;
    blob_comm_options whole = {.bucket_bytes = GIB},
                      buckets = {.bucket_bytes = BLOB_COMM_DEFAULT_BUCKET_BYTES};
    BTRY(blob_comm_create_local(team.whole, team.n, devices, &whole));
    BTRY(blob_comm_create_local(team.buckets, team.n, devices, &buckets));
    for (int r = 0; r < team.n; r++) {
        BTRY(blob_device_set(r));
        BTRY(blob_stream_create(&team.stream[r]));
        CTRY(cudaSetDevice(r));
        CTRY(cudaStreamCreateWithFlags(&team.raw_stream[r], cudaStreamNonBlocking));
    }
    NTRY(ncclCommInitAll(team.raw, team.n, devices));
    return 0;
}

static double busbw(size_t bytes, double ns)
{
    return (double)bytes / ns * 2.0 * (team.n - 1) / team.n; /* GB/s */
}

/* A figure in a column of width w ("-" when there is none). */
static void cell(int w, double v)
{
    if (isnan(v))
        printf(" %*s", w, "-");
    else
        printf(" %*.1f", w, v);
}

/* blob_bench_comm's command line (the ranks go to team.n; 0: one per GPU). */
typedef struct {
    const char *launcher; /* blob-launch, which starts the torch peers; NULL: none */
    bool with_torch;
} comm_options;

/* argv into *o: 0, or 2 after the usage. */
static int parse_options(int argc, char **argv, comm_options *o)
{
    *o = (comm_options){NULL, true};
    team.n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--launcher") && i + 1 < argc) {
            o->launcher = argv[++i];
        } else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
            team.n = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--no-torch")) {
            o->with_torch = false;
        } else {
            fprintf(stderr, "usage: %s [--ranks N] [--launcher PATH] [--no-torch]\n", argv[0]);
            return 2;
        }
    }
    return 0;
}

/* The GPUs, NCCL's version and NCCL's variables, in the report's head. */
static void report_setup(void)
{
    int version = 0;
    ncclGetVersion(&version);
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    report_meta("device", "%d x %s", team.n, prop.name);
    report_meta("nccl", "%d.%d.%d", version / 10000, version / 100 % 100, version % 100);
    const char *vars[] = {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE",
                          "NCCL_NVLS_ENABLE", "NCCL_SOCKET_IFNAME"};
    report_env(vars, (int)(sizeof vars / sizeof vars[0]), "(no NCCL variables set)");
}

/* PyTorch's times for every size, or why there are none. */
static void torch_peers(const comm_options *o)
{
    if (o->with_torch && o->launcher) {
        char arg[256] = "";
        for (size_t i = 0; i < NUM_SIZES; i++)
            snprintf(arg + strlen(arg), sizeof arg - strlen(arg), "%s%zu", i ? "," : "", sizes[i]);
        torch_load_launched(o->launcher, team.n, "bench/comm_torch.py", arg);
    } else {
        report_meta("torch", "not run (%s)", o->with_torch ? "no --launcher" : "--no-torch");
    }
}

/* The threads of ranks 1..n-1, in th. */
static void start_ranks(pthread_t *th)
{
    pthread_barrier_init(&team.start, NULL, (unsigned)team.n);
    pthread_barrier_init(&team.done, NULL, (unsigned)team.n);
    for (int r = 1; r < team.n; r++)
        pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
}

static void stop_ranks(pthread_t *th)
{
    team.job = JOB_QUIT;
    pthread_barrier_wait(&team.start);
    for (int r = 1; r < team.n; r++)
        pthread_join(th[r], NULL);
}

static void print_header(void)
{
    printf("\nAll-reduce (sum, float32, in place) on %d GPUs, one buffer; us per call and bus "
           "bandwidth busbw = bytes / time * 2(n-1)/n in GB/s\n",
           team.n);
    char bucket_us[32];
    snprintf(bucket_us, sizeof bucket_us, "%zuMiB-bkt us", BLOB_COMM_DEFAULT_BUCKET_BYTES >> 20);
    printf("%10s %10s %9s %11s %9s %10s %9s %10s %9s %9s  %s\n", "bytes", "blob us", "busbw",
           bucket_us, "busbw", "nccl us", "busbw", "torch us", "busbw", "blob/nccl", "goal");
}

/* ns per all-reduce of the buffers now: raw NCCL, blob_comm whole and in default buckets
 * (t_raw NaN on an error). Raw and ours interleaved, twice, the better of each: drift
 * hits both alike. */
static void time_all_reduces(size_t bytes, double *t_raw, double *t_ours, double *t_bkt)
{
    int batch = (int)(2 * GIB / bytes);
    batch = batch < 5 ? 5 : batch > 200 ? 200 : batch;
    int reps = 5;
    bench_op ours = {blob_run, NULL, (void *)(intptr_t)JOB_BLOB};
    bench_op bucketed = {blob_run, NULL, (void *)(intptr_t)JOB_BLOB_BUCKETS};
    bench_op raw = {raw_run, NULL, NULL};
    *t_raw = *t_ours = *t_bkt = NAN;
    for (int round = 0; round < 2; round++) {
        double a = bench_time(&raw, batch, reps, &bench_wall);
        double b = bench_time(&ours, batch, reps, &bench_wall);
        double c = bench_time(&bucketed, batch, reps, &bench_wall);
        if (isnan(a) || isnan(b) || isnan(c)) {
            *t_raw = NAN;
            return;
        }
        *t_raw = round ? fmin(*t_raw, a) : a;
        *t_ours = round ? fmin(*t_ours, b) : b;
        *t_bkt = round ? fmin(*t_bkt, c) : c;
    }
}

/* The row of one buffer size, counting a missed goal or an error: 0, or what
 * bench_fail gives when rank 0's device cannot be set back (the run ends). */
static int size_row(size_t bytes, int *missed, int *errors)
{
    char label[32];
    fmt_bytes(bytes, label);
    blob_stream_set(team.stream[0]);
    if (make_buffers(bytes / sizeof(float)) != 0 || make_all_lists() != 0) {
        printf("%10s  ERROR: %s\n", label, bench_error());
        (*errors)++;
        return 0;
    }
    BTRY(blob_device_set(0));
    blob_stream_set(team.stream[0]);
    double t_raw, t_ours, t_bkt;
    time_all_reduces(bytes, &t_raw, &t_ours, &t_bkt);
    if (isnan(t_raw)) {
        printf("%10s  ERROR: %s\n", label, bench_error());
        (*errors)++;
        return 0;
    }
    double t_torch = torch_ref("allreduce", (double)bytes) * 1e3; /* us -> ns */
    double ratio = t_raw / t_ours;
    bool goal = bytes >= GOAL_FROM;
    bool pass = ratio >= GOAL_RATIO;
    *missed += goal && !pass;
    printf("%10s", label);
    double v[] = {t_ours / 1e3, busbw(bytes, t_ours), t_bkt / 1e3,   busbw(bytes, t_bkt),
                  t_raw / 1e3,  busbw(bytes, t_raw),  t_torch / 1e3, busbw(bytes, t_torch)};
    const int w[] = {10, 9, 11, 9, 10, 9, 10, 9};
    for (int i = 0; i < 8; i++)
        cell(w[i], v[i]);
    printf(" %9.3f  %s\n", ratio, goal ? (pass ? "PASS" : "MISS") : "");
    return 0;
}

static void close_team(void)
{
    for (int r = 0; r < team.n; r++) {
        blob_comm_list_free(team.list_whole[r]);
        blob_comm_list_free(team.list_buckets[r]);
        blob_free(team.buf[r]);
        blob_comm_free(team.whole[r]);
        blob_comm_free(team.buckets[r]);
        ncclCommDestroy(team.raw[r]);
        cudaSetDevice(r);
        cudaFree(team.raw_buf[r]);
    }
}

int main(int argc, char **argv)
{
    comm_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int gpus = blob_device_count();
    if (!team.n)
        team.n = gpus < MAX_RANKS ? gpus : MAX_RANKS;
    if (team.n < 2 || team.n > gpus || team.n > MAX_RANKS) {
        printf("bench-comm: skipped: it needs 2 to %d GPUs, %d found\n", MAX_RANKS, gpus);
        return 0;
    }
    report_setup();
    torch_peers(&o); /* PyTorch first, before this process takes the GPUs' memory */
    if (open_team() != 0) {
        printf("ERROR: %s\n", bench_error());
        return 1;
    }
    pthread_t th[MAX_RANKS];
    start_ranks(th);
    print_header();
    int missed = 0, errors = 0;
    for (size_t k = 0; k < NUM_SIZES; k++)
        if ((rc = size_row(sizes[k], &missed, &errors)) != 0)
            return rc;
    stop_ranks(th);
    printf("\nGoal: blob_comm busbw >= %.0f%% of raw ncclAllReduce from 16 MiB up: %s\n",
           GOAL_RATIO * 100,
           errors   ? "NOT MEASURED (errors above)"
           : missed ? "MISS"
                    : "PASS");
    close_team();
    blob_thread_release();
    return errors || missed ? 1 : 0;
}
