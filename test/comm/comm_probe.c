/* comm_probe: one rank of the multi-process tests (test/comm/run.sh), doing what its
 * first argument says. Rank, world size, device and rendezvous come from the
 * environment, as blob-launch sets them.
 *
 *   comm_probe gpus             print the number of GPUs
 *   comm_probe allreduce STEPS [replay]
 *                               sums and means of diffs (separate blobs, and views of one
 *                               flat blob; two steps of each op in turn) checked exactly
 *                               against the host's; replay: buckets replayed from graphs
 *                               whatever the transport (the communicator's choice forced)
 *   comm_probe train STEPS KILL_RANK KILL_STEP [eager|replay]
 *                               SGD steps on broadcast weights (update only after
 *                               blob_comm_synchronize); KILL_RANK SIGKILLs itself at the
 *                               start of KILL_STEP; the others must fail, weights intact;
 *                               eager or replay: the communicator's choice forced
 *   comm_probe mismatch         rank 1 registers a blob one element longer
 *   comm_probe init             join the communicator and report
 *
 * Every line of output starts with "rank R:". Exit status: 0 as expected; 3 the
 * expected failure came (train), with the weights of the last completed step; 4 timed
 * out (init); 5 malformed rendezvous (init); 1 anything else. Values are multiples of
 * 1/256 of moderate size, so sums and means are exact and compared with ==. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <blob/blob.h>

#include "../../src/comm/comm_impl.h"

static int rank = -1;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define SAY(...)                   \
    do {                           \
        printf("rank %d: ", rank); \
        printf(__VA_ARGS__);       \
        putchar('\n');             \
        fflush(stdout);            \
    } while (0)

/* Give up on an unexpected failure. */
#define CHECK(expr)                                                                          \
    do {                                                                                     \
        blob_status check_st_ = (expr);                                                      \
        if (check_st_ != BLOB_OK) {                                                          \
            SAY("%s failed: %s: %s", #expr, blob_status_name(check_st_), blob_last_error()); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* Rank r's value at step s, element i: a multiple of 1/256 in [-4, 4). */
static float value(int r, int s, int64_t i)
{
    uint64_t h = (uint64_t)r * 0x9e3779b97f4a7c15ull ^ (uint64_t)s * 0xc2b2ae3d27d4eb4full ^
                 (uint64_t)i * 0x165667b19e3779f9ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (float)((int)(h % 2048) - 1024) / 256.0f;
}

static blob_comm *join(void)
{
    blob_comm_options o;
    CHECK(blob_comm_options_from_env(&o));
    rank = o.rank;
    blob_comm *c;
    CHECK(blob_comm_create(&c, &o));
    return c;
}

static blob *make(int64_t count)
{
    blob *b;
    CHECK(blob_create(&b, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 1, &count));
    return b;
}

static void fill_diff(blob *b, int r, int s, int64_t at)
{
    float *p;
    CHECK(blob_mutable_cpu_diff(b, (void **)&p));
    for (int64_t i = 0; i < blob_count(b); i++)
        p[i] = value(r, s, at + i);
}

/* The diffs must hold the sum (mean) over all ranks of value(q, s, at + i). */
static int check_diff(blob *b, int world, int s, int64_t at, blob_comm_op op, const char *what)
{
    const float *p;
    CHECK(blob_cpu_diff(b, (const void **)&p));
    for (int64_t i = 0; i < blob_count(b); i++) {
        float sum = 0;
        for (int q = 0; q < world; q++)
            sum += value(q, s, at + i);
        float want = op == BLOB_COMM_MEAN ? sum / (float)world : sum;
        if (p[i] != want) {
            SAY("%s step %d element %lld: %.9g, expected %.9g", what, s, (long long)(at + i), p[i],
                want);
            return 1;
        }
    }
    return 0;
}

/* Force the replay choice (before the first list decides): "replay", "eager", or NULL
 * for the communicator's own. */
static void force_replay(blob_comm *c, const char *how)
{
    if (how) {
        c->replay_decided = true;
        c->replay = !strcmp(how, "replay");
    }
}

static int all_reduce(int steps, bool replay)
{
    blob_comm *c = join();
    force_replay(c, replay ? "replay" : NULL);
    int world = blob_comm_size(c);
    enum { N = 3 };
    const int64_t counts[N] = {(1 << 20) + 3, 1000, 5};
    blob *sep[N], *view[N], *flat = make(counts[0] + counts[1] + counts[2]);
    char *dd;
    CHECK(blob_mutable_gpu_diff(flat, (void **)&dd));
    for (int i = 0, at = 0; i < N; at += (int)counts[i++]) {
        sep[i] = make(counts[i]);
        view[i] = make(counts[i]);
        CHECK(blob_syncedmem_set_gpu_data(blob_diff_mem(view[i]), dd + 4 * at,
                                          (size_t)counts[i] * 4));
    }
    blob_comm_list *ls, *lv;
    CHECK(blob_comm_list_create(&ls, c, sep, N));
    CHECK(blob_comm_list_create(&lv, c, view, N));
    int bad = 0;
    double t0 = now();
    for (int s = 0; s < steps; s++) {
        blob_comm_op op = s / 2 % 2 ? BLOB_COMM_MEAN : BLOB_COMM_SUM;
        for (int i = 0, at = 0; i < N; at += (int)counts[i++]) {
            fill_diff(sep[i], rank, s, at);
            fill_diff(view[i], rank, s + 1000, at);
        }
        CHECK(blob_comm_reduce_begin(lv, op));
        for (int i = N - 1; i >= 0; i--)
            CHECK(blob_comm_reduce_ready(lv, i, 1));
        CHECK(blob_comm_all_reduce(ls, op));
        CHECK(blob_comm_reduce_end(lv));
        CHECK(blob_comm_synchronize(c));
        for (int i = 0, at = 0; i < N; at += (int)counts[i++]) {
            bad |= check_diff(sep[i], world, s, at, op, "separate blobs");
            bad |= check_diff(view[i], world, s + 1000, at, op, "flat views");
        }
    }
    if (!bad)
        SAY("allreduce ok: %d steps of %d ranks, sum and mean, exact%s, %.2f s", steps, world,
            replay ? ", replayed" : "", now() - t0);
    blob_comm_list_free(ls);
    blob_comm_list_free(lv);
    for (int i = 0; i < N; i++) {
        blob_free(sep[i]);
        blob_free(view[i]);
    }
    blob_free(flat);
    blob_comm_free(c);
    return bad;
}

static int data_is(blob *b, const float *ref)
{
    const float *p;
    if (blob_cpu_data(b, (const void **)&p) != BLOB_OK)
        return 0;
    for (int64_t i = 0; i < blob_count(b); i++)
        if (p[i] != ref[i])
            return 0;
    return 1;
}

static int train(int steps, int kill_rank, int kill_step, const char *replay)
{
    /* the launcher stops the others when a rank dies: we must report first */
    signal(SIGTERM, SIG_IGN);
    blob_comm *c = join();
    force_replay(c, replay);
    int world = blob_comm_size(c);
    enum { N = 2 };
    const int64_t counts[N] = {1000, 37};
    blob *w[N];
    float *ref[N];
    for (int i = 0, at = 0; i < N; at += (int)counts[i++]) {
        w[i] = make(counts[i]);
        ref[i] = malloc((size_t)counts[i] * sizeof(float));
        float *p;
        CHECK(blob_mutable_cpu_data(w[i], (void **)&p));
        for (int64_t k = 0; k < counts[i]; k++) {
            ref[i][k] = value(0, 999, at + k);
            p[k] = rank == 0 ? ref[i][k] : 0; /* the broadcast brings rank 0's */
        }
    }
    blob_comm_list *l;
    CHECK(blob_comm_list_create(&l, c, w, N));
    SAY("collectives %s", c->replay ? "replayed from graphs" : "launched eagerly");
    CHECK(blob_comm_broadcast(l, 0));
    int result = -1; /* the exit status, once known */
    for (int s = 0; s < steps; s++) {
        if (rank == kill_rank && s == kill_step) {
            SAY("killing myself at step %d", s);
            raise(SIGKILL);
        }
        for (int i = 0, at = 0; i < N; at += (int)counts[i++])
            fill_diff(w[i], rank, s, at);
        double t0 = now();
        blob_status st = blob_comm_reduce_begin(l, BLOB_COMM_MEAN);
        for (int i = N - 1; i >= 0 && st == BLOB_OK; i--)
            st = blob_comm_reduce_ready(l, i, 1);
        if (st == BLOB_OK)
            st = blob_comm_reduce_end(l);
        if (st == BLOB_OK)
            st = blob_comm_synchronize(c); /* the update runs only on complete sums */
        if (st != BLOB_OK) {
            SAY("step %d failed after %.2f s: %s: %s", s, now() - t0, blob_status_name(st),
                blob_last_error());
            int intact = 1;
            for (int i = 0; i < N; i++)
                intact &= data_is(w[i], ref[i]);
            SAY(intact ? "weights intact: those of step %d" : "weights CHANGED after step %d",
                s - 1);
            result = intact ? 3 : 1;
            break;
        }
        for (int i = 0, at = 0; i < N; at += (int)counts[i++]) {
            CHECK(blob_update(w[i]));
            for (int64_t k = 0; k < counts[i]; k++) {
                float sum = 0;
                for (int q = 0; q < world; q++)
                    sum += value(q, s, at + k);
                ref[i][k] -= sum / (float)world;
            }
        }
    }
    if (result < 0) {
        int equal = 1;
        for (int i = 0; i < N; i++)
            equal &= data_is(w[i], ref[i]);
        SAY(equal ? "train ok: %d steps, weights equal on every rank"
                  : "train: weights differ after %d steps",
            steps);
        result = equal ? 0 : 1;
    }
    /* everything freed on every path, so that memcheck's leak check can run on a survivor */
    blob_comm_list_free(l);
    for (int i = 0; i < N; i++) {
        blob_free(w[i]);
        free(ref[i]);
    }
    blob_comm_free(c);
    return result;
}

static int mismatch(void)
{
    blob_comm *c = join();
    blob *b[2] = {make(100), make(rank == 1 ? 51 : 50)};
    blob_comm_list *l;
    double t0 = now();
    blob_status st = blob_comm_list_create(&l, c, b, 2);
    double took = now() - t0;
    SAY("%s after %.3f s: %s", blob_status_name(st), took, blob_last_error());
    int ok = st == BLOB_ESHAPE && took < 1.0 && strstr(blob_last_error(), "blob 1 differs");
    /* the communicator still works */
    double v = 1;
    st = blob_comm_all_reduce_host(c, &v, 1, BLOB_COMM_SUM);
    ok &= st == BLOB_OK && v == blob_comm_size(c);
    blob_free(b[0]);
    blob_free(b[1]);
    blob_comm_free(c);
    return ok ? 0 : 1;
}

static int init(void)
{
    blob_comm_options o;
    CHECK(blob_comm_options_from_env(&o));
    rank = o.rank;
    blob_comm *c;
    double t0 = now();
    blob_status st = blob_comm_create(&c, &o);
    SAY("%s after %.2f s%s%s", blob_status_name(st), now() - t0, st ? ": " : "",
        st ? blob_last_error() : "");
    blob_comm_free(c);
    return st == BLOB_OK ? 0 : st == BLOB_ETIMEDOUT ? 4 : st == BLOB_EFORMAT ? 5 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int r;
    if (!strcmp(mode, "gpus")) {
        printf("%d\n", blob_device_count());
        r = 0;
    } else if (!strcmp(mode, "allreduce") &&
               (argc == 3 || (argc == 4 && !strcmp(argv[3], "replay")))) {
        r = all_reduce(atoi(argv[2]), argc == 4);
    } else if (!strcmp(mode, "train") &&
               (argc == 5 ||
                (argc == 6 && (!strcmp(argv[5], "eager") || !strcmp(argv[5], "replay"))))) {
        r = train(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc == 6 ? argv[5] : NULL);
    } else if (!strcmp(mode, "mismatch")) {
        r = mismatch();
    } else if (!strcmp(mode, "init")) {
        r = init();
    } else {
        fprintf(stderr, "usage: comm_probe gpus | allreduce STEPS [replay] | train STEPS KILL_RANK "
                        "KILL_STEP [eager|replay] | mismatch | init\n");
        return 2;
    }
    blob_thread_release();
    return r;
}
