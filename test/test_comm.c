/* Communicators and collectives on blobs (comm.h): the rendezvous (ids, records, files,
 * the environment), the 1-rank path of every build, the bucket plan and the
 * registration check, and several ranks as threads: two on the fake device with a fake
 * NCCL (every build), and one per real GPU, up to MAX_RANKS, through NCCL (tagged
 * gpu2). Under fork every test pays for its CUDA contexts and NCCL set-up, so the real
 * GPUs' tests each run a whole scenario (all 40 reduce variants on one team, say). */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "../src/comm/comm_impl.h"
#include "../src/comm/record.h"
#include "../src/core/clock.h"
#include "../src/core/file.h"
#include "../src/core/core.h"
#include "fake_backend.h"
#include "testutil.h"

#define MAX_RANKS 4

/* ---- a fake NCCL: ranks are threads, buffers are fake-device (host) memory ---- */

enum { OP_REDUCE, OP_BROADCAST, OP_GATHER };

typedef struct {
    int kind;
    void *buf;
    const void *send;
    size_t count; /* elements (reduce, broadcast) or bytes (gather) */
    blob_dtype dtype;
    blob_comm_op op;
    int root;
} fake_post;

#define FAKE_MAX_POSTS 256

typedef struct fake_world fake_world;

typedef struct {
    fake_world *w;
    int rank;
    bool gone;       /* aborted or destroyed */
    uint64_t posted; /* operations this rank has started */
    void *stream;    /* the stream of its operations */
    fake_post posts[FAKE_MAX_POSTS];
} fake_handle;

struct fake_world {
    blob_comm_id id;
    int size, joined;
    uint64_t done; /* operations completed by every rank */
    bool broken;   /* an injected transport error */
    fake_handle *ranks[4];
};

static pthread_mutex_t fake_ccl_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_world fake_worlds[4];
static int fake_num_worlds;
static uint64_t fake_ids;
static int fake_reduces; /* all-reduce calls, every rank */

static fake_world *fake_world_of(const blob_comm_id *id, int size)
{
    for (int i = 0; i < fake_num_worlds; i++)
        if (!memcmp(&fake_worlds[i].id, id, sizeof *id))
            return &fake_worlds[i];
    ck_assert_int_lt(fake_num_worlds, 4);
    fake_world *w = &fake_worlds[fake_num_worlds++];
    memset(w, 0, sizeof *w);
    w->id = *id;
    w->size = size;
    return w;
}

static blob_status fake_new_id(blob_comm_id *out)
{
    pthread_mutex_lock(&fake_ccl_mu);
    memset(out, 0, sizeof *out);
    uint64_t n = ++fake_ids;
    memcpy(out->bytes, &n, sizeof n);
    pthread_mutex_unlock(&fake_ccl_mu);
    return BLOB_OK;
}

static fake_handle *fake_join(fake_world *w, int rank)
{
    fake_handle *h = calloc(1, sizeof *h);
    ck_assert_ptr_nonnull(h);
    h->w = w;
    h->rank = rank;
    w->ranks[rank] = h;
    w->joined++;
    return h;
}

static blob_status fake_init(void **handle, const blob_comm_id *id, int world, int rank)
{
    pthread_mutex_lock(&fake_ccl_mu);
    *handle = fake_join(fake_world_of(id, world), rank);
    pthread_mutex_unlock(&fake_ccl_mu);
    return BLOB_OK;
}

static blob_status fake_init_local(void **handles, int n, const int *devices)
{
    (void)devices;
    blob_comm_id id;
    fake_new_id(&id);
    pthread_mutex_lock(&fake_ccl_mu);
    fake_world *w = fake_world_of(&id, n);
    for (int i = 0; i < n; i++)
        handles[i] = fake_join(w, i);
    pthread_mutex_unlock(&fake_ccl_mu);
    return BLOB_OK;
}

/* Operation k, posted by every rank: run it on all their buffers (lock held). */
static void fake_run(fake_world *w, uint64_t k)
{
    fake_post *p[4] = {0};
    for (int r = 0; r < w->size; r++) {
        p[r] = &w->ranks[r]->posts[k % FAKE_MAX_POSTS];
        if (p[r]->kind != p[0]->kind || p[r]->count != p[0]->count) {
            w->broken = true; /* what NCCL would turn into a hang or garbage */
            return;
        }
    }
    fake_post *a = p[0];
    for (size_t i = 0; i < a->count; i++) {
        if (a->kind == OP_GATHER)
            break;
        double v = 0;
        if (a->kind == OP_REDUCE) {
            for (int r = 0; r < w->size; r++)
                v += test_get(a->dtype, p[r]->buf, (int64_t)i);
            if (a->op == BLOB_COMM_MEAN)
                v /= w->size;
        } else {
            v = test_get(a->dtype, p[a->root]->buf, (int64_t)i);
        }
        for (int r = 0; r < w->size; r++)
            test_put(a->dtype, p[r]->buf, (int64_t)i, v);
    }
    if (a->kind == OP_GATHER)
        for (int r = 0; r < w->size; r++)
            for (int q = 0; q < w->size; q++)
                memcpy((char *)p[r]->buf + (size_t)q * a->count, p[q]->send, a->count);
}

static blob_status fake_post_op(void *handle, fake_post post, void *stream)
{
    fake_handle *h = handle;
    /* the buffer holds what the stream queued before the call */
    BLOB_TRY(blob__be->stream_synchronize(stream));
    pthread_mutex_lock(&fake_ccl_mu);
    ck_assert_uint_lt(h->posted - h->w->done, FAKE_MAX_POSTS);
    h->stream = stream;
    h->posts[h->posted++ % FAKE_MAX_POSTS] = post;
    fake_world *w = h->w;
    for (;;) {
        bool all = !w->broken;
        for (int r = 0; r < w->size && all; r++)
            all = w->ranks[r] && w->ranks[r]->posted > w->done;
        if (!all)
            break;
        fake_run(w, w->done++);
    }
    pthread_mutex_unlock(&fake_ccl_mu);
    return BLOB_OK;
}

static blob_status fake_state(void *handle, bool *ready)
{
    fake_handle *h = handle;
    pthread_mutex_lock(&fake_ccl_mu);
    fake_world *w = h->w;
    bool broken = w->broken;
    *ready = w->joined == w->size && w->done >= h->posted;
    void *stream = h->stream;
    pthread_mutex_unlock(&fake_ccl_mu);
    if (broken)
        return BLOB_FAIL(BLOB_ECOMM, "fake NCCL: a peer failed");
    /* the device moves on by itself: what followed the operations runs now */
    if (*ready && stream)
        BLOB_TRY(blob__be->stream_synchronize(stream));
    return BLOB_OK;
}

static blob_status fake_all_reduce(void *handle, void *buf, size_t count, blob_dtype dtype,
                                   blob_comm_op op, void *stream)
{
    __atomic_add_fetch(&fake_reduces, 1, __ATOMIC_RELAXED);
    return fake_post_op(handle, (fake_post){OP_REDUCE, buf, NULL, count, dtype, op, 0}, stream);
}

static blob_status fake_broadcast(void *handle, void *buf, size_t count, blob_dtype dtype, int root,
                                  void *stream)
{
    return fake_post_op(handle, (fake_post){OP_BROADCAST, buf, NULL, count, dtype, 0, root},
                        stream);
}

static blob_status fake_all_gather(void *handle, const void *send, void *recv, size_t bytes,
                                   void *stream)
{
    return fake_post_op(handle, (fake_post){OP_GATHER, recv, send, bytes, BLOB_FLOAT32, 0, 0},
                        stream);
}

/* Nothing to bracket in the fake: a group's begin and end only succeed. */
static blob_status fake_group_begin(void) { return BLOB_OK; }
#define fake_group_end fake_group_begin

static blob_status fake_finalize(void *handle)
{
    (void)handle;
    return BLOB_OK;
}

static void fake_destroy(void *handle)
{
    pthread_mutex_lock(&fake_ccl_mu);
    ((fake_handle *)handle)->gone = true; /* freed with the worlds, at the test's end */
    pthread_mutex_unlock(&fake_ccl_mu);
}

/* Nothing runs on its own in the fake: an abort only lets go, as destroy does. */
#define fake_abort fake_destroy

static const blob__ccl fake_ccl = {
    .name = "fake",
    .multi_rank = true,
    BLOB__CCL_ENTRIES(fake),
};

/* Caching stays on: with it off, a block given back makes the allocator synchronise the
 * (fake) device, which runs every rank's queued work on the calling thread's device. */
static void fake_ccl_setup(void)
{
    fake_setup();
    blob_alloc_set_caching(true);
    blob__ccl_install(&fake_ccl);
}

/* Forget the worlds (their communicators are freed). */
static void fake_worlds_reset(void)
{
    for (int i = 0; i < fake_num_worlds; i++)
        for (int r = 0; r < 4; r++)
            free(fake_worlds[i].ranks[r]);
    fake_num_worlds = 0;
}

static void fake_ccl_teardown(void)
{
    blob__ccl_install(NULL);
    fake_worlds_reset();
    fake_teardown();
    ck_assert_uint_eq(fake_get_stats().violations, 0);
}

static void fake_break_worlds(void)
{
    pthread_mutex_lock(&fake_ccl_mu);
    for (int i = 0; i < fake_num_worlds; i++)
        fake_worlds[i].broken = true;
    pthread_mutex_unlock(&fake_ccl_mu);
}

/* ---- a team: one thread per rank, each with its GPU and a stream of its own ---- */

typedef struct team team;
typedef void (*rank_fn)(team *t, int r);

struct team {
    int n;
    blob_comm *comms[MAX_RANKS];
    rank_fn fn;
    rank_fn after; /* run once the communicator is freed, if set */
    void *arg;
    pthread_barrier_t barrier;
    blob_status st[MAX_RANKS]; /* the status a scenario reports */
    char msg[MAX_RANKS][512];  /* with its detail */
    double seconds[MAX_RANKS]; /* and how long the call took */
};

typedef struct {
    team *t;
    int r;
} rank_arg;

/* Record rank r's outcome of a call that took since..now. */
static void report(team *t, int r, blob_status st, double since)
{
    t->st[r] = st;
    t->seconds[r] = blob__now() - since;
    snprintf(t->msg[r], sizeof t->msg[r], "%s", st == BLOB_OK ? "" : blob_last_error());
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    team *t = a->t;
    void *stream = NULL;
    if (blob_device_set(blob_comm_device(t->comms[a->r])) == BLOB_OK &&
        blob_stream_create(&stream) == BLOB_OK) {
        blob_stream_set(stream);
        t->fn(t, a->r);
    } else {
        report(t, a->r, BLOB_ECUDA, blob__now());
    }
    pthread_barrier_wait(&t->barrier); /* no rank leaves while another still needs it */
    blob_comm_free(t->comms[a->r]);
    t->comms[a->r] = NULL;
    if (t->after)
        t->after(t, a->r);
    blob_stream_set(NULL);
    blob_stream_destroy(stream);
    blob_thread_release();
    return NULL;
}

/* Ranks of a team: one per real GPU (up to MAX_RANKS) through NCCL, two with the fake. */
static int team_ranks(void)
{
    if (strcmp(blob__ccl_current()->name, "nccl") != 0)
        return 2;
    int n = blob_device_count();
    return n < MAX_RANKS ? n : MAX_RANKS;
}

/* Create a communicator of n ranks on GPUs 0..n-1 (timeout seconds, stretched by
 * test_time_scale) and run fn on every rank in a thread of its own. */
static void run_team(team *t, int n, double timeout, size_t bucket_bytes, rank_fn fn, void *arg)
{
    t->n = n;
    t->fn = fn;
    t->arg = arg;
    int devices[MAX_RANKS] = {0, 1, 2, 3};
    blob_comm_options o = {.timeout_s = timeout * test_time_scale(), .bucket_bytes = bucket_bytes};
    ck_ok(blob_comm_create_local(t->comms, n, devices, &o));
    pthread_barrier_init(&t->barrier, NULL, (unsigned)n);
    pthread_t th[MAX_RANKS];
    rank_arg args[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        args[r] = (rank_arg){t, r};
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&t->barrier);
}

/* ---- helpers ---- */

static blob *make_blob(blob_dtype dt, int device, int64_t count)
{
    blob *b;
    ck_ok(blob_create(&b, dt, device, 1, &count));
    return b;
}

static void put_values(blob_dtype dt, void *p, const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        test_put(dt, p, i, v[i]);
}

static double *random_values(int64_t n)
{
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = test_uniform(-2.0, 2.0);
    return v;
}

static char *temp_dir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/blob-comm-test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    return dir;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

/* A file of n bytes at path, mode 0600 as rank 0 writes its record. */
static void write_bytes(const char *path, const void *p, size_t n)
{
    test_write_file(path, p, n);
    ck_assert_int_eq(chmod(path, 0600), 0);
}

static blob_comm_id some_id(unsigned char seed)
{
    blob_comm_id id;
    for (int i = 0; i < BLOB_COMM_ID_BYTES; i++)
        id.bytes[i] = (unsigned char)(seed + 37 * i);
    return id;
}

/* ---- ids, records and files ---- */

START_TEST(test_hex_round_trip)
{
    blob_comm_id id = some_id(3), back;
    char hex[BLOB_COMM_ID_HEX_SIZE];
    ck_ok(blob_comm_id_to_hex(&id, hex, sizeof hex));
    ck_assert_uint_eq(strlen(hex), 2 * BLOB_COMM_ID_BYTES);
    ck_ok(blob_comm_id_from_hex(&back, hex));
    ck_assert(!memcmp(&id, &back, sizeof id));
    for (char *c = hex; *c; c++) /* upper case reads the same */
        if (*c >= 'a' && *c <= 'f')
            *c = (char)(*c - 'a' + 'A');
    ck_ok(blob_comm_id_from_hex(&back, hex));
    ck_assert(!memcmp(&id, &back, sizeof id));
    ck_status(blob_comm_id_to_hex(&id, hex, sizeof hex - 1), BLOB_ERANGE);

    blob_comm_id untouched = some_id(9), out = untouched;
    const char *bad[] = {"", "00", "zz"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_status(blob_comm_id_from_hex(&out, bad[i]), BLOB_EINVAL);
    hex[100] = 'g';
    ck_status(blob_comm_id_from_hex(&out, hex), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "position 100"));
    char longer[BLOB_COMM_ID_HEX_SIZE + 1];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    ck_status(blob_comm_id_from_hex(&out, longer), BLOB_EINVAL);
    ck_assert(!memcmp(&out, &untouched, sizeof out));
}
END_TEST

START_TEST(test_record_round_trip)
{
    blob_comm_id id = some_id(1), back = some_id(0);
    unsigned char rec[BLOB_COMM_ID_RECORD_SIZE];
    ck_ok(blob_comm_id_encode(&id, 8, rec, sizeof rec));
    int world = 0;
    ck_ok(blob_comm_id_decode(&back, &world, rec, sizeof rec));
    ck_assert(!memcmp(&id, &back, sizeof id));
    ck_assert_int_eq(world, 8);
    ck_status(blob_comm_id_encode(&id, 0, rec, sizeof rec), BLOB_EINVAL);
    ck_status(blob_comm_id_encode(&id, 2, rec, sizeof rec - 1), BLOB_ERANGE);
}
END_TEST

/* Every damaged record is refused with a message saying what is wrong, and the
 * outputs stay as they were. */
START_TEST(test_record_damage)
{
    blob_comm_id id = some_id(5), out = some_id(7), before = out;
    unsigned char rec[BLOB_COMM_ID_RECORD_SIZE + 8];
    ck_ok(blob_comm_id_encode(&id, 2, rec, sizeof rec));
    int world = -5;
    for (size_t len = 0; len < BLOB_COMM_ID_RECORD_SIZE; len++) /* every truncation */
        ck_status(blob_comm_id_decode(&out, &world, rec, len), BLOB_EFORMAT);
    ck_status(blob_comm_id_decode(&out, &world, rec, 60), BLOB_EFORMAT);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "truncated"));
    memset(rec + BLOB_COMM_ID_RECORD_SIZE, 0, 8);
    ck_status(blob_comm_id_decode(&out, &world, rec, sizeof rec), BLOB_EFORMAT);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "trailing"));
    for (size_t i = 0; i < BLOB_COMM_ID_RECORD_SIZE; i++) { /* every flipped bit */
        for (int bit = 0; bit < 8; bit++) {
            rec[i] ^= (unsigned char)(1 << bit);
            ck_status(blob_comm_id_decode(&out, &world, rec, BLOB_COMM_ID_RECORD_SIZE),
                      BLOB_EFORMAT);
            rec[i] ^= (unsigned char)(1 << bit);
        }
    }
    rec[8] = 2; /* version 2 */
    ck_status(blob_comm_id_decode(&out, &world, rec, BLOB_COMM_ID_RECORD_SIZE), BLOB_EFORMAT);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "version 2"));
    rec[8] = 1;
    rec[20] ^= 1;
    ck_status(blob_comm_id_decode(&out, &world, rec, BLOB_COMM_ID_RECORD_SIZE), BLOB_EFORMAT);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "checksum"));
    rec[0] = 'X';
    ck_status(blob_comm_id_decode(&out, &world, rec, BLOB_COMM_ID_RECORD_SIZE), BLOB_EFORMAT);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "not a rendezvous record"));
    ck_assert(!memcmp(&out, &before, sizeof out));
    ck_assert_int_eq(world, -5);
}
END_TEST

START_TEST(test_file_round_trip)
{
    char *dir = temp_dir(), path[128];
    snprintf(path, sizeof path, "%s/id", dir);
    blob_comm_id id = some_id(2), back;
    ck_ok(blob_comm_id_write_file(&id, 4, path));
    ck_assert_int_eq(test_dir_entries(dir), 1); /* no temporary file left */
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600);
    int world;
    ck_ok(blob_comm_id_read_file(&back, &world, path, 0));
    ck_assert(!memcmp(&id, &back, sizeof id));
    ck_assert_int_eq(world, 4);
    id = some_id(3); /* replaced whole */
    ck_ok(blob_comm_id_write_file(&id, 2, path));
    ck_ok(blob_comm_id_read_file(&back, &world, path, 0));
    ck_assert(!memcmp(&id, &back, sizeof id) && world == 2);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no/such/dir/id", dir);
    ck_status(blob_comm_id_write_file(&id, 2, missing), BLOB_EIO);
    ck_status(blob_comm_id_write_file(&id, 2, ""), BLOB_EINVAL);
    ck_assert_int_eq(test_dir_entries(dir), 1);
    remove_dir(dir);
}
END_TEST

/* A file that never appears is an error by its deadline, not much later. */
START_TEST(test_file_missing_deadline)
{
    char *dir = temp_dir(), path[128];
    snprintf(path, sizeof path, "%s/never", dir);
    blob_comm_id out;
    int world;
    double t0 = blob__now();
    ck_status(blob_comm_id_read_file(&out, &world, path, 0.3), BLOB_ETIMEDOUT);
    double took = blob__now() - t0;
    ck_assert_msg(took >= 0.3 && took < 1.3, "took %.3f s", took);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "did not appear within"));
    t0 = blob__now();
    ck_status(blob_comm_id_read_file(&out, &world, path, 0), BLOB_ETIMEDOUT);
    ck_assert(blob__now() - t0 < 0.5);
    ck_status(blob_comm_id_read_file(&out, &world, path, -1), BLOB_EINVAL);
    ck_status(blob_comm_id_read_file(&out, &world, path, INFINITY), BLOB_EINVAL);
    remove_dir(dir);
}
END_TEST

/* A file that is there but wrong is an error at once, whatever the deadline. */
START_TEST(test_file_bad_at_once)
{
    char *dir = temp_dir(), path[128];
    snprintf(path, sizeof path, "%s/id", dir);
    blob_comm_id id = some_id(4), out;
    unsigned char rec[BLOB_COMM_ID_RECORD_SIZE];
    ck_ok(blob_comm_id_encode(&id, 2, rec, sizeof rec));
    int world;
    struct {
        size_t len;
        int flip; /* byte to damage, or -1 */
        const char *says;
    } cases[] = {
        {0, -1, "not a rendezvous record"},
        {100, -1, "truncated"},
        {BLOB_COMM_ID_RECORD_SIZE, 60, "checksum"},
        {BLOB_COMM_ID_RECORD_SIZE, 8, "version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char copy[sizeof rec];
        memcpy(copy, rec, sizeof rec);
        if (cases[i].flip >= 0)
            copy[cases[i].flip] ^= 0x40;
        write_bytes(path, copy, cases[i].len);
        double t0 = blob__now();
        ck_status(blob_comm_id_read_file(&out, &world, path, 30), BLOB_EFORMAT);
        ck_assert(blob__now() - t0 < 1.0);
        ck_assert_msg(strstr(blob_last_error(), cases[i].says) && strstr(blob_last_error(), path),
                      "case %zu: %s", i, blob_last_error());
    }
    /* a long file is not read past the record */
    unsigned char big[4096];
    memset(big, 'b', sizeof big);
    memcpy(big, rec, sizeof rec);
    write_bytes(path, big, sizeof big);
    ck_status(blob_comm_id_read_file(&out, &world, path, 30), BLOB_EFORMAT);
    /* not a regular file: a directory, a FIFO without a writer */
    unlink(path);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_status(blob_comm_id_read_file(&out, &world, path, 30), BLOB_EFORMAT);
    rmdir(path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    double t0 = blob__now();
    ck_status(blob_comm_id_read_file(&out, &world, path, 30), BLOB_EFORMAT);
    ck_assert(blob__now() - t0 < 1.0);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "not a regular file"));
    remove_dir(dir);
}
END_TEST

/* A record another user could have written is refused at once, whatever the deadline, as
 * ssh refuses such keys: writable by the group or others, or (as root, who can make one)
 * owned by another user. */
START_TEST(test_file_not_trusted)
{
    char *dir = temp_dir(), path[128];
    snprintf(path, sizeof path, "%s/id", dir);
    blob_comm_id id = some_id(4), out = some_id(5), before = out;
    int world = -1;
    ck_ok(blob_comm_id_write_file(&id, 2, path));
    static const struct {
        mode_t mode;
        const char *says;
    } modes[] = {{0620, "writable by its group (mode 0620)"},
                 {0602, "writable by others (mode 0602)"},
                 {0666, "writable by its group (mode 0666)"}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        ck_assert_int_eq(chmod(path, modes[i].mode), 0);
        double t0 = blob__now();
        ck_status(blob_comm_id_read_file(&out, &world, path, 30), BLOB_EIO);
        ck_assert(blob__now() - t0 < 1.0);
        ck_assert_msg(strstr(blob_last_error(), modes[i].says) &&
                          !strncmp(blob_last_error(), "blob_comm_id_read_file: ", 24),
                      "%s", blob_last_error());
    }
    ck_assert_int_eq(chmod(path, 0640), 0); /* read by the group: fine */
    ck_ok(blob_comm_id_read_file(&out, &world, path, 0));
    ck_assert(!memcmp(&out, &id, sizeof id) && world == 2);
    if (geteuid() == 0) {
        out = before;
        ck_assert_int_eq(chown(path, 65534, 65534), 0);
        ck_status(blob_comm_id_read_file(&out, &world, path, 30), BLOB_EIO);
        ck_assert_msg(strstr(blob_last_error(), "owned by uid 65534, not by this process's user "
                                                "(uid 0)"),
                      "%s", blob_last_error());
        ck_assert(!memcmp(&out, &before, sizeof out));
    }
    remove_dir(dir);
}
END_TEST

/* Where the writer puts the record: through symbolic links (the link into shared storage
 * stays a link), never over a FIFO, a directory or a device; it leaves no temporary
 * file, and clears those of writers that died. An empty path is refused at once. */
START_TEST(test_file_writer_paths)
{
    char *dir = temp_dir(), path[128], sub[128], link[128], fifo[128];
    snprintf(path, sizeof path, "%s/id", dir);
    snprintf(sub, sizeof sub, "%s/shared", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    blob_comm_id id = some_id(6), out;
    int world;

    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_status(blob_comm_id_write_file(&id, 2, fifo), BLOB_EIO);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "not a regular file (a FIFO)"));
    struct stat sb;
    ck_assert(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    ck_status(blob_comm_id_write_file(&id, 2, dir), BLOB_EIO);
    ck_assert_int_eq(test_dir_entries(dir), 1);

    ck_assert_int_eq(mkdir(sub, 0700), 0);
    ck_assert_int_eq(symlink("shared/comm-id", link), 0);
    ck_ok(blob_comm_id_write_file(&id, 3, link)); /* a dangling link makes its target */
    ck_assert(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    char target[160];
    snprintf(target, sizeof target, "%s/comm-id", sub);
    ck_ok(blob_comm_id_read_file(&out, &world, target, 0));
    ck_assert(!memcmp(&out, &id, sizeof id) && world == 3);
    id = some_id(7);
    ck_ok(blob_comm_id_write_file(&id, 4, link)); /* and replaces it */
    ck_ok(blob_comm_id_read_file(&out, &world, link, 0));
    ck_assert(!memcmp(&out, &id, sizeof id) && world == 4);
    ck_assert(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    ck_assert_int_eq(test_dir_entries(sub), 1);
    blob__comm_id_remove_file(link); /* rank 0's removal: the record, not the link */
    ck_assert_int_eq(test_dir_entries(sub), 0);
    ck_assert(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    blob__comm_id_remove_file(link); /* nothing there: nothing done */
    unlink(link);
    rmdir(sub);

    /* the temporary files of writers that died: only those of the pattern, regular, of
     * this user, untouched for an hour, go */
    static const char *const names[] = {".id.blob-tmp-Ab12Cd", ".other.blob-tmp-zzzzzz",
                                        ".id.blob-tmp-fresh1", "id.blob-tmp-Ab12Cd",
                                        ".id.blob-tmp-Ab12C",  ".id.blob-tmp-Ab1_Cd"};
    static const bool stale[] = {true, true, false, false, false, false};
    char p[6][160];
    for (int i = 0; i < 6; i++) {
        snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
        write_bytes(p[i], "x", 1);
        struct timespec old[2] = {{time(NULL) - 2 * BLOB__STALE_TEMP_S, 0},
                                  {time(NULL) - 2 * BLOB__STALE_TEMP_S, 0}};
        if (i != 2)
            ck_assert_int_eq(utimensat(AT_FDCWD, p[i], old, 0), 0);
    }
    ck_ok(blob_comm_id_write_file(&id, 2, path));
    for (int i = 0; i < 6; i++)
        ck_assert_msg(access(p[i], F_OK) == (stale[i] ? -1 : 0), "%s", names[i]);
    ck_assert_int_eq(test_dir_entries(dir), 6); /* fifo, id and the four kept */

    double t0 = blob__now();
    ck_status(blob_comm_id_read_file(&out, &world, "", 30), BLOB_EINVAL);
    ck_assert(blob__now() - t0 < 1.0);
    ck_assert_str_eq(blob_last_error(), "blob_comm_id_read_file: empty path");
    remove_dir(dir);
}
END_TEST

typedef struct {
    const char *path;
    double delay;
    blob_comm_id id;
} writer_arg;

static void *late_writer(void *p)
{
    writer_arg *a = p;
    blob__sleep(a->delay);
    blob_comm_id_write_file(&a->id, 3, a->path);
    return NULL;
}

/* The readers wait for rank 0's file: written by a thread, then by another process. */
START_TEST(test_file_awaited)
{
    char *dir = temp_dir(), path[128];
    snprintf(path, sizeof path, "%s/id", dir);
    writer_arg a = {path, 0.2, some_id(6)};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, late_writer, &a), 0);
    blob_comm_id out;
    int world;
    double t0 = blob__now();
    ck_ok(blob_comm_id_read_file(&out, &world, path, 10));
    double took = blob__now() - t0;
    pthread_join(th, NULL);
    ck_assert(!memcmp(&out, &a.id, sizeof out) && world == 3);
    ck_assert_msg(took >= 0.15 && took < 2, "took %.3f s", took);

    unlink(path);
    a.id = some_id(8);
    pid_t pid = fork();
    if (pid == 0) {
        late_writer(&a);
        _exit(0);
    }
    ck_ok(blob_comm_id_read_file(&out, &world, path, 10));
    int status;
    waitpid(pid, &status, 0);
    ck_assert(!memcmp(&out, &a.id, sizeof out));
    remove_dir(dir);
}
END_TEST

/* ---- options from the environment ---- */

static void clear_env(void)
{
    const char *vars[] = {"RANK",
                          "WORLD_SIZE",
                          "LOCAL_RANK",
                          "BLOB_COMM_ID",
                          "BLOB_COMM_ID_FILE",
                          "BLOB_COMM_TIMEOUT",
                          "BLOB_COMM_BUCKET_MB",
                          "NCCL_COMM_ID",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_LOCALID",
                          "SLURM_NODEID",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "PMI_RANK",
                          "PMI_SIZE",
                          "MPI_LOCALRANKID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

START_TEST(test_env_defaults)
{
    clear_env();
    blob_comm_options o;
    memset(&o, 0x5a, sizeof o);
    ck_ok(blob_comm_options_from_env(&o));
    ck_assert_int_eq(o.rank, 0);
    ck_assert_int_eq(o.world_size, 1);
    ck_assert_int_eq(o.device, 0);
    ck_assert(!o.has_id && !o.id_file && o.timeout_s == 0 && o.bucket_bytes == 0);
}
END_TEST

START_TEST(test_env_torchrun)
{
    clear_env();
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("BLOB_COMM_ID_FILE", "/shared/job-17/id", 1);
    blob_comm_options o;
    ck_ok(blob_comm_options_from_env(&o));
    ck_assert(o.rank == 5 && o.world_size == 8 && o.device == 1 && !o.has_id);
    ck_assert_str_eq(o.id_file, "/shared/job-17/id");
    unsetenv("LOCAL_RANK"); /* the device defaults to the rank */
    ck_ok(blob_comm_options_from_env(&o));
    ck_assert_int_eq(o.device, 5);
    blob_comm_id id = some_id(11);
    char hex[BLOB_COMM_ID_HEX_SIZE];
    ck_ok(blob_comm_id_to_hex(&id, hex, sizeof hex));
    setenv("BLOB_COMM_ID", hex, 1);
    ck_ok(blob_comm_options_from_env(&o));
    ck_assert(o.has_id && !memcmp(&o.id, &id, sizeof id));
}
END_TEST

START_TEST(test_env_bad_values)
{
    struct {
        const char *name, *value, *says;
    } cases[] = {
        {"RANK", "abc", "RANK=\"abc\""},
        {"RANK", "-1", "RANK"},
        {"RANK", "", "RANK"},
        {"RANK", "1x", "RANK"},
        {"RANK", "99999999999999999999", "RANK"},
        {"RANK", " 0", "blob_comm_options_from_env: RANK=\" 0\" is not an integer in [0, "},
        {"RANK", "+1", "RANK=\"+1\""},
        {"RANK", "0x1", "RANK=\"0x1\""},
        {"RANK", "1.0", "RANK=\"1.0\""},
        {"WORLD_SIZE", "0", "WORLD_SIZE"},
        {"LOCAL_RANK", "-3", "LOCAL_RANK"},
        {"RANK", "4", "blob_comm_options_from_env: RANK=4 is not below WORLD_SIZE=4"},
        {"BLOB_COMM_ID", "1234",
         "blob_comm_options_from_env: BLOB_COMM_ID: an id is 256 hex digits, got 4 characters"},
        {"BLOB_COMM_ID_FILE", "", "blob_comm_options_from_env: BLOB_COMM_ID_FILE is empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear_env();
        setenv("WORLD_SIZE", "4", 1);
        setenv(cases[i].name, cases[i].value, 1);
        blob_comm_options o = {.rank = 42}, before = o;
        ck_status(blob_comm_options_from_env(&o), BLOB_EINVAL);
        ck_assert_msg(strstr(blob_last_error(), cases[i].says), "case %zu: %s", i,
                      blob_last_error());
        ck_assert(!memcmp(&o, &before, sizeof o));
    }
    /* the timeout and bucket variables are read by create */
    clear_env();
    blob_comm *c;
    blob_comm_options o = {0};
    const char *bad_timeouts[] = {"0",  "-2",   "abc",    "inf",   "nan", "",
                                  " 5", "0x10", "1e-300", "1e300", "5s",  "1000001"};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        setenv("BLOB_COMM_TIMEOUT", bad_timeouts[i], 1);
        ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
        ck_assert_ptr_null(c);
        char says[128];
        snprintf(says, sizeof says,
                 "blob_comm_create: BLOB_COMM_TIMEOUT=\"%s\" is not a number of seconds in "
                 "[0.001, 1e+06]",
                 bad_timeouts[i]);
        ck_assert_str_eq(blob_last_error(), says);
    }
    setenv("BLOB_COMM_TIMEOUT", "2.5", 1);
    ck_ok(blob_comm_create(&c, &o));
    ck_assert(blob_comm_timeout(c) == 2.5);
    blob_comm_free(c);
    o.timeout_s = 7; /* the program's value wins */
    ck_ok(blob_comm_create(&c, &o));
    ck_assert(blob_comm_timeout(c) == 7);
    blob_comm_free(c);
    setenv("BLOB_COMM_BUCKET_MB", "0", 1);
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_comm_create: BLOB_COMM_BUCKET_MB=\"0\" is not an "
                                        "integer in [1, 1048576]");
    /* an id of 257 digits */
    clear_env();
    char hex[2 * BLOB_COMM_ID_BYTES + 2];
    memset(hex, 'a', sizeof hex - 1);
    hex[sizeof hex - 1] = '\0';
    setenv("BLOB_COMM_ID", hex, 1);
    ck_status(blob_comm_options_from_env(&o), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(),
                     "blob_comm_options_from_env: BLOB_COMM_ID is longer than 256 characters");
    blob_comm_id id;
    ck_status(blob_comm_id_from_hex(&id, hex), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_comm_id_from_hex: an id is 256 hex digits, got "
                                        "more than 256 characters");
}
END_TEST

/* Ranks started by Slurm (srun) or MPI (mpirun) find their place without torchrun's
 * variables: torchrun's (and blob-launch's) first, then Slurm's, Open MPI's and PMI's,
 * each of the rank, the world size and the local rank from the first that is set. */
START_TEST(test_env_launchers)
{
    static const struct {
        const char *vars; /* NAME=VALUE ... */
        int rank, world, device;
    } cases[] = {
        {"SLURM_PROCID=5 SLURM_NTASKS=8 SLURM_LOCALID=1 SLURM_NODEID=2", 5, 8, 1},
        {"OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1", 3, 4, 1},
        {"PMI_RANK=6 PMI_SIZE=7 MPI_LOCALRANKID=2", 6, 7, 2},
        {"PMI_RANK=6 PMI_SIZE=7", 6, 7, 6},
        /* torchrun's come first, Slurm's before MPI's */
        {"RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 SLURM_PROCID=5 SLURM_NTASKS=8 SLURM_LOCALID=3", 1, 2, 1},
        {"SLURM_PROCID=2 SLURM_NTASKS=3 SLURM_LOCALID=0 OMPI_COMM_WORLD_RANK=1 "
         "OMPI_COMM_WORLD_SIZE=9 PMI_RANK=4 PMI_SIZE=5",
         2, 3, 0},
        /* one variable of torchrun's replaces its own alone: a task given one GPU */
        {"SLURM_PROCID=5 SLURM_NTASKS=8 SLURM_LOCALID=1 LOCAL_RANK=0", 5, 8, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear_env();
        char vars[256];
        snprintf(vars, sizeof vars, "%s", cases[i].vars);
        for (char *save, *v = strtok_r(vars, " ", &save); v; v = strtok_r(NULL, " ", &save)) {
            char *eq = strchr(v, '=');
            *eq = '\0';
            setenv(v, eq + 1, 1);
        }
        blob_comm_options o;
        ck_ok(blob_comm_options_from_env(&o));
        ck_assert_msg(o.rank == cases[i].rank && o.world_size == cases[i].world &&
                          o.device == cases[i].device,
                      "case %zu: rank %d of %d on GPU %d", i, o.rank, o.world_size, o.device);
    }
    /* strictly, naming the variable read */
    clear_env();
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_NTASKS", "2", 1);
    blob_comm_options o = {.rank = 42}, before = o;
    ck_status(blob_comm_options_from_env(&o), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_comm_options_from_env: SLURM_PROCID=3 is not below "
                                        "SLURM_NTASKS=2");
    unsetenv("SLURM_NTASKS");
    ck_status(blob_comm_options_from_env(&o), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_comm_options_from_env: SLURM_PROCID=3, but no world "
                                        "size is set (WORLD_SIZE, SLURM_NTASKS, "
                                        "OMPI_COMM_WORLD_SIZE or PMI_SIZE)");
    setenv("SLURM_NTASKS", " 4", 1);
    ck_status(blob_comm_options_from_env(&o), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "SLURM_NTASKS=\" 4\""));
    clear_env();
    setenv("OMPI_COMM_WORLD_RANK", "x", 1);
    ck_status(blob_comm_options_from_env(&o), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "OMPI_COMM_WORLD_RANK=\"x\""));
    ck_assert(!memcmp(&o, &before, sizeof o));
    clear_env();
}
END_TEST

/* ---- one rank: every build, blobs anywhere, collectives are no-ops ---- */

START_TEST(test_one_rank)
{
    clear_env();
    blob_dtype dt = (blob_dtype)_i;
    blob_comm *c;
    blob_comm_options o = {0};
    ck_ok(blob_comm_create(&c, &o));
    ck_assert_int_eq(blob_comm_rank(c), 0);
    ck_assert_int_eq(blob_comm_size(c), 1);
    ck_assert(blob_comm_timeout(c) == BLOB_COMM_DEFAULT_TIMEOUT_S);
    enum { N = 3 };
    int64_t counts[N] = {5, 0, 7};
    blob *b[N];
    double *ref[N];
    for (int i = 0; i < N; i++) {
        b[i] = make_blob(dt, BLOB_HOST_ONLY, counts[i]);
        ref[i] = random_values(counts[i]);
        void *p;
        ck_ok(blob_mutable_cpu_diff(b[i], &p));
        put_values(dt, p, ref[i], counts[i]);
        ck_ok(blob_mutable_cpu_data(b[i], &p));
        put_values(dt, p, ref[i], counts[i]);
    }
    blob_comm_list *l;
    ck_ok(blob_comm_list_create(&l, c, b, N));
    ck_ok(blob_comm_broadcast(l, 0));
    ck_ok(blob_comm_all_reduce(l, BLOB_COMM_SUM));
    ck_ok(blob_comm_all_reduce(l, BLOB_COMM_MEAN));
    ck_ok(blob_comm_reduce_begin(l, BLOB_COMM_MEAN));
    ck_ok(blob_comm_reduce_ready(l, 2, 1));
    ck_ok(blob_comm_reduce_ready(l, 0, 2));
    ck_ok(blob_comm_reduce_end(l));
    ck_ok(blob_comm_synchronize(c));
    ck_ok(blob_comm_status(c));
    /* no buckets to wait for, no timing to take */
    ck_assert_int_eq(blob_comm_list_num_buckets(l), 0);
    int64_t lo, hi;
    ck_status(blob_comm_list_bucket(l, 0, &lo, &hi), BLOB_ERANGE);
    ck_ok(blob_comm_list_set_timing(l, true));
    ck_ok(blob_comm_reduce_begin(l, BLOB_COMM_SUM));
    ck_status(blob_comm_reduce_wait(l, 0), BLOB_ERANGE);
    ck_status(blob_comm_list_set_timing(l, false), BLOB_ESTATE);
    ck_ok(blob_comm_reduce_end(l));
    blob_comm_bucket_timing bt[1];
    int nb = -1;
    double bend = -1;
    ck_ok(blob_comm_list_timing(l, bt, 1, &nb, &bend));
    ck_assert(nb == 0 && bend == 0);
    ck_ok(blob_comm_list_set_timing(l, false));
    for (int i = 0; i < N; i++) { /* identity: data and diff as they were, on the host */
        const void *p;
        ck_assert_int_eq(blob_syncedmem_head(blob_diff_mem(b[i])), BLOB_HEAD_AT_CPU);
        ck_ok(blob_cpu_diff(b[i], &p));
        ck_assert(test_rel_err(dt, p, ref[i], counts[i], 1e-3) < 1e-6);
        ck_ok(blob_cpu_data(b[i], &p));
        ck_assert(test_rel_err(dt, p, ref[i], counts[i], 1e-3) < 1e-6);
    }
    double v[2] = {1.5, -3};
    ck_ok(blob_comm_all_reduce_host(c, v, 2, BLOB_COMM_MEAN));
    ck_assert(v[0] == 1.5 && v[1] == -3);
    ck_ok(blob_comm_all_reduce_host(c, v, 2, BLOB_COMM_SUM));
    ck_assert(v[0] == 1.5 && v[1] == -3);

    /* misuse gets exact codes */
    ck_status(blob_comm_broadcast(l, 1), BLOB_ERANGE);
    ck_status(blob_comm_reduce_ready(l, 0, 1), BLOB_ESTATE);
    ck_status(blob_comm_reduce_end(l), BLOB_ESTATE);
    ck_status(blob_comm_reduce_begin(l, (blob_comm_op)7), BLOB_EINVAL);
    ck_ok(blob_comm_reduce_begin(l, BLOB_COMM_SUM));
    ck_status(blob_comm_reduce_begin(l, BLOB_COMM_SUM), BLOB_ESTATE);
    ck_status(blob_comm_broadcast(l, 0), BLOB_ESTATE);
    ck_status(blob_comm_reduce_ready(l, 2, 2), BLOB_ERANGE);
    ck_status(blob_comm_reduce_ready(l, -1, 1), BLOB_ERANGE);
    ck_status(blob_comm_reduce_ready(l, 1, -1), BLOB_ERANGE);
    ck_ok(blob_comm_reduce_ready(l, 3, 0));
    ck_ok(blob_comm_reduce_end(l));
    ck_status(blob_comm_all_reduce_host(c, v, 0, BLOB_COMM_SUM), BLOB_EINVAL);
    ck_status(blob_comm_all_reduce_host(c, v, 1, (blob_comm_op)-1), BLOB_EINVAL);
    int64_t more = 6;
    ck_ok(blob_reshape(b[0], 1, &more)); /* counts are fixed at registration */
    ck_status(blob_comm_all_reduce(l, BLOB_COMM_SUM), BLOB_ESHAPE);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "blob 0 of list 1 has 6 elements, 5"));
    ck_status(blob_comm_broadcast(l, 0), BLOB_ESHAPE);
    ck_status(blob_comm_set_timeout(c, 0), BLOB_EINVAL);
    ck_status(blob_comm_set_timeout(c, NAN), BLOB_EINVAL);
    ck_ok(blob_comm_set_timeout(c, 0.5));
    ck_assert(blob_comm_timeout(c) == 0.5);
    blob_comm_list_free(l);

    blob *mixed[2] = {
        b[0], make_blob(dt == BLOB_FLOAT32 ? BLOB_FLOAT64 : BLOB_FLOAT32, BLOB_HOST_ONLY, 2)};
    ck_status(blob_comm_list_create(&l, c, mixed, 2), BLOB_EINVAL);
    ck_assert_ptr_null(l);
    blob *twice[2] = {b[0], b[0]};
    ck_status(blob_comm_list_create(&l, c, twice, 2), BLOB_EINVAL);
    blob *none[2] = {b[0], NULL};
    ck_status(blob_comm_list_create(&l, c, none, 2), BLOB_EINVAL);
    ck_status(blob_comm_list_create(&l, c, b, 0), BLOB_EINVAL);
    blob_free(mixed[1]);
    for (int i = 0; i < N; i++) {
        blob_free(b[i]);
        free(ref[i]);
    }
    blob_comm_free(c);
}
END_TEST

/* More ranks need NCCL and a GPU: a clear error, at once, in every build. */
START_TEST(test_several_ranks_need_nccl_and_gpu)
{
    clear_env();
    blob_comm *c = (blob_comm *)&c;
    blob_comm_options o = {.rank = 1, .world_size = 2, .device = 0, .timeout_s = 30};
    double t0 = blob__now();
    blob_status st = blob_comm_create(&c, &o);
    ck_assert(blob__now() - t0 < 5);
    ck_assert_ptr_null(c);
    if (!blob__ccl_default()->multi_rank) {
        ck_assert_int_eq(st, BLOB_ENOTSUP);
        ck_assert_ptr_nonnull(strstr(blob_last_error(), "NCCL"));
        blob_comm_id id;
        ck_status(blob_comm_id_new(&id), BLOB_ENOTSUP);
        int devices[2] = {0, 1};
        blob_comm *cs[2];
        ck_status(blob_comm_create_local(cs, 2, devices, &o), BLOB_ENOTSUP);
        ck_assert(!cs[0] && !cs[1]);
    } else if (blob_device_count() == 0) {
        ck_assert_int_eq(st, BLOB_ENODEV);
    }
    o.rank = 2;
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
    o.rank = -1;
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
    o.rank = 0;
    o.world_size = -2;
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
    o.world_size = 1;
    o.timeout_s = -1;
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
    o.timeout_s = NAN;
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
}
END_TEST

START_TEST(test_null_arguments)
{
    blob_comm_options o = {0};
    blob_comm *c;
    blob_comm_list *l = (blob_comm_list *)&l;
    blob_comm_id id = some_id(1);
    char buf[BLOB_COMM_ID_RECORD_SIZE + BLOB_COMM_ID_HEX_SIZE];
    int w, dev = 0;
    double v = 0;
    ck_status(blob_comm_options_from_env(NULL), BLOB_EINVAL);
    ck_status(blob_comm_create(NULL, &o), BLOB_EINVAL);
    ck_status(blob_comm_create(&c, NULL), BLOB_EINVAL);
    ck_assert_ptr_null(c);
    ck_status(blob_comm_create_local(NULL, 1, &dev, &o), BLOB_EINVAL);
    ck_status(blob_comm_create_local(&c, 1, NULL, &o), BLOB_EINVAL);
    ck_status(blob_comm_create_local(&c, 1, &dev, NULL), BLOB_EINVAL);
    blob_comm_free(NULL);
    ck_assert_int_eq(blob_comm_rank(NULL), 0);
    ck_assert_int_eq(blob_comm_size(NULL), 0);
    ck_assert_int_eq(blob_comm_device(NULL), -1);
    ck_assert(blob_comm_timeout(NULL) == 0);
    ck_status(blob_comm_set_timeout(NULL, 1), BLOB_EINVAL);
    ck_status(blob_comm_status(NULL), BLOB_EINVAL);
    ck_status(blob_comm_synchronize(NULL), BLOB_EINVAL);
    ck_status(blob_comm_all_reduce_host(NULL, &v, 1, BLOB_COMM_SUM), BLOB_EINVAL);
    ck_ok(blob_comm_create(&c, &o));
    ck_status(blob_comm_all_reduce_host(c, NULL, 1, BLOB_COMM_SUM), BLOB_EINVAL);
    blob *b = make_blob(BLOB_FLOAT32, BLOB_HOST_ONLY, 2);
    ck_status(blob_comm_list_create(NULL, c, &b, 1), BLOB_EINVAL);
    ck_status(blob_comm_list_create(&l, NULL, &b, 1), BLOB_EINVAL);
    ck_assert_ptr_null(l);
    ck_status(blob_comm_list_create(&l, c, NULL, 1), BLOB_EINVAL);
    blob_comm_list_free(NULL);
    ck_status(blob_comm_broadcast(NULL, 0), BLOB_EINVAL);
    ck_status(blob_comm_all_reduce(NULL, BLOB_COMM_SUM), BLOB_EINVAL);
    ck_status(blob_comm_reduce_begin(NULL, BLOB_COMM_SUM), BLOB_EINVAL);
    ck_status(blob_comm_reduce_ready(NULL, 0, 1), BLOB_EINVAL);
    ck_status(blob_comm_reduce_end(NULL), BLOB_EINVAL);
    ck_status(blob_comm_id_new(NULL), BLOB_EINVAL);
    ck_status(blob_comm_id_to_hex(NULL, buf, sizeof buf), BLOB_EINVAL);
    ck_status(blob_comm_id_to_hex(&id, NULL, sizeof buf), BLOB_EINVAL);
    ck_status(blob_comm_id_from_hex(NULL, "00"), BLOB_EINVAL);
    ck_status(blob_comm_id_from_hex(&id, NULL), BLOB_EINVAL);
    ck_status(blob_comm_id_encode(NULL, 1, buf, sizeof buf), BLOB_EINVAL);
    ck_status(blob_comm_id_encode(&id, 1, NULL, sizeof buf), BLOB_EINVAL);
    ck_status(blob_comm_id_decode(NULL, &w, buf, 10), BLOB_EINVAL);
    ck_status(blob_comm_id_decode(&id, NULL, buf, 10), BLOB_EINVAL);
    ck_status(blob_comm_id_decode(&id, &w, NULL, 10), BLOB_EINVAL);
    ck_status(blob_comm_id_decode(&id, &w, NULL, 0), BLOB_EINVAL);
    ck_status(blob_comm_id_write_file(NULL, 1, "/tmp/x"), BLOB_EINVAL);
    ck_status(blob_comm_id_write_file(&id, 1, NULL), BLOB_EINVAL);
    ck_status(blob_comm_id_read_file(NULL, &w, "/tmp/x", 0), BLOB_EINVAL);
    ck_status(blob_comm_id_read_file(&id, NULL, "/tmp/x", 0), BLOB_EINVAL);
    ck_status(blob_comm_id_read_file(&id, &w, NULL, 0), BLOB_EINVAL);
    blob_free(b);
    blob_comm_free(c);
}
END_TEST

/* Every allocation of the 1-rank path can fail: a clean error, nothing leaked. */
START_TEST(test_one_rank_alloc_failures)
{
    int64_t count = 4;
    int failures = 0;
    for (uint64_t k = 1; k < 100; k++) {
        fake_fail_alloc_at(k, false);
        blob_comm *c = NULL;
        blob_comm_list *l = NULL;
        blob *b = NULL;
        blob_comm_options o = {.timeout_s = 1};
        blob_status st = blob_comm_create(&c, &o);
        if (st == BLOB_OK)
            st = blob_create(&b, BLOB_FLOAT32, 0, 1, &count);
        if (st == BLOB_OK)
            st = blob_comm_list_create(&l, c, &b, 1);
        if (st == BLOB_OK)
            st = blob_comm_all_reduce(l, BLOB_COMM_MEAN);
        blob_comm_list_free(l);
        blob_free(b);
        blob_comm_free(c);
        fake_fail_alloc_at(0, false);
        if (st == BLOB_OK)
            break;
        ck_assert_msg(st == BLOB_ENOMEM || st == BLOB_EDEVMEM, "k=%llu: %s", (unsigned long long)k,
                      blob_status_name(st));
        failures++;
    }
    ck_assert_int_gt(failures, 2);
}
END_TEST

/* ---- the pure pieces ---- */

static void check_plan(const int64_t *counts, int n, int64_t bucket, const int64_t *bounds,
                       int expect)
{
    blob__comm_bucket out[32];
    int num = blob__comm_plan(counts, n, bucket, NULL, 0);
    ck_assert_int_eq(num, expect);
    ck_assert_int_eq(blob__comm_plan(counts, n, bucket, out, 32), expect);
    int64_t at = 0;
    for (int k = 0; k < num; k++) {
        ck_assert_msg(out[k].begin == bounds[2 * k] && out[k].end == bounds[2 * k + 1],
                      "bucket %d is [%lld, %lld), expected [%lld, %lld)", k,
                      (long long)out[k].begin, (long long)out[k].end, (long long)bounds[2 * k],
                      (long long)bounds[2 * k + 1]);
        ck_assert(out[k].end - out[k].begin < 2 * bucket);
        ck_assert(k == 0 || out[k].end - out[k].begin >= bucket);
        ck_assert(out[k].begin >= at); /* ascending, disjoint */
        at = out[k].end;
        /* first and last overlap the range, their neighbours outside it do not */
        int64_t off = 0;
        for (int i = 0; i < n; off += counts[i++]) {
            bool overlaps = counts[i] && off < out[k].end && off + counts[i] > out[k].begin;
            if (overlaps)
                ck_assert(i >= out[k].first && i <= out[k].last);
            if (i == out[k].first || i == out[k].last)
                ck_assert_msg(overlaps, "bucket %d: blob %d", k, i);
        }
    }
}

START_TEST(test_plan)
{
    /* whole blobs until a bucket holds the bucket size, built from the end */
    int64_t a[] = {3, 4, 2, 5};
    check_plan(a, 4, 100, (int64_t[]){0, 14}, 1);
    check_plan(a, 4, 7, (int64_t[]){0, 7, 7, 14}, 2);
    check_plan(a, 4, 6, (int64_t[]){0, 7, 7, 14}, 2);
    check_plan(a, 4, 4, (int64_t[]){0, 3, 3, 9, 9, 14}, 3);
    check_plan(a, 4, 2, (int64_t[]){0, 3, 3, 5, 5, 7, 7, 9, 9, 12, 12, 14}, 6);
    /* a layer's bias shares the bucket of its weights (mlp4096's shape, scaled down) */
    int64_t mlp[] = {12, 4, 64, 4, 64, 4, 1, 1};
    check_plan(mlp, 8, 64, (int64_t[]){0, 16, 16, 84, 84, 154}, 3);
    /* a blob that would bring a bucket to twice the size: the bucket takes its end,
     * full buckets follow, its front piece joins the next bucket */
    int64_t b[] = {2, 10, 1};
    check_plan(b, 3, 4, (int64_t[]){0, 2, 2, 9, 9, 13}, 3);
    check_plan(b, 3, 3, (int64_t[]){0, 2, 2, 7, 7, 10, 10, 13}, 4);
    int64_t big[] = {1, 20};
    check_plan(big, 2, 4, (int64_t[]){0, 1, 1, 5, 5, 9, 9, 13, 13, 17, 17, 21}, 6);
    /* elements one by one */
    check_plan(b, 3, 1, (int64_t[]){0, 1, 1, 2, 2, 3, 3,  4,  4,  5,  5,  6,  6,
                                    7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13},
               13);
    /* empty blobs hold nothing; an empty list has no bucket */
    int64_t c[] = {0, 3, 0, 0, 2, 0};
    check_plan(c, 6, 10, (int64_t[]){0, 5}, 1);
    check_plan(c, 6, 3, (int64_t[]){0, 5}, 1);
    check_plan(c, 6, 2, (int64_t[]){0, 3, 3, 5}, 2);
    int64_t z[] = {0, 0};
    check_plan(z, 2, 4, NULL, 0);
    blob__comm_bucket out[4];
    ck_assert_int_eq(blob__comm_plan(c, 6, 2, out, 4), 2);
    ck_assert(out[0].first == 1 && out[0].last == 1 && out[1].first == 4 && out[1].last == 4);
}
END_TEST

START_TEST(test_contiguous)
{
    static char mem[64];
    int64_t counts[] = {2, 0, 3, 1};
    char *ptrs[] = {mem, NULL, mem + 8, mem + 20};
    ck_assert(blob__comm_contiguous(ptrs, counts, 0, 3, 4));
    ck_assert(blob__comm_contiguous(ptrs, counts, 2, 3, 4));
    ck_assert(!blob__comm_contiguous(ptrs, counts, 0, 3, 8));
    char *gap[] = {mem, NULL, mem + 12, mem + 24};
    ck_assert(!blob__comm_contiguous(gap, counts, 0, 3, 4));
    ck_assert(blob__comm_contiguous(gap, counts, 2, 3, 4));
    char *reversed[] = {mem + 12, NULL, mem, mem + 20}; /* back to back, wrong order */
    ck_assert(!blob__comm_contiguous(reversed, counts, 0, 2, 4));
}
END_TEST

START_TEST(test_compare_tables)
{
    blob__comm_header h[3] = {{2, BLOB_OK, -1}, {2, BLOB_OK, -1}, {2, BLOB_OK, -1}};
    blob__comm_entry t[3 * 3] = {
        {10, BLOB_FLOAT32}, {3, BLOB_FLOAT32}, {-1, -1},
        {10, BLOB_FLOAT32}, {3, BLOB_FLOAT32}, {-1, -1},
        {10, BLOB_FLOAT32}, {3, BLOB_FLOAT32}, {-1, -1},
    };
    ck_ok(blob__comm_compare(h, t, 3, 3));
    t[2 * 3 + 1].count = 4;
    ck_status(blob__comm_compare(h, t, 3, 3), BLOB_ESHAPE);
    ck_assert_msg(strstr(blob_last_error(), "blob 1 differs: rank 0 has 3 float32 elements, rank "
                                            "2 has 4 float32 elements"),
                  "%s", blob_last_error());
    t[2 * 3 + 1].count = 3;
    t[1 * 3 + 0].dtype = BLOB_FLOAT64;
    ck_status(blob__comm_compare(h, t, 3, 3), BLOB_ESHAPE);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "blob 0 differs"));
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "rank 1 has 10 float64"));
    t[1 * 3 + 0].dtype = BLOB_FLOAT32;
    h[1].n = 3; /* rank 1 registered one blob more */
    t[1 * 3 + 2] = (blob__comm_entry){7, BLOB_FLOAT32};
    ck_status(blob__comm_compare(h, t, 3, 3), BLOB_ESHAPE);
    ck_assert_msg(strstr(blob_last_error(), "blob 2 differs: rank 0 has no such blob (it "
                                            "registered 2), rank 1 has 7"),
                  "%s", blob_last_error());
    h[2].status = BLOB_EDEVICE; /* a rank that could not register comes first */
    h[2].bad_blob = 1;
    ck_status(blob__comm_compare(h, t, 3, 3), BLOB_EDEVICE);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "rank 2 could not register its list (blob 1"));
}
END_TEST

/* The peers' headers size the table exchange: checked first, and never more entries
 * than one past the shortest list. */
START_TEST(test_table_length)
{
    blob__comm_header h[3] = {{4, BLOB_OK, -1}, {4, BLOB_OK, -1}, {4, BLOB_OK, -1}};
    int64_t len = -1;
    ck_ok(blob__comm_table_length(h, 3, &len));
    ck_assert_int_eq(len, 4);
    h[1].n = (int64_t)INT_MAX; /* a longer list: compared one past the shortest */
    ck_ok(blob__comm_table_length(h, 3, &len));
    ck_assert_int_eq(len, 5);
    h[1].n = 4;
    h[2] = (blob__comm_header){0, BLOB_EDEVICE, 2}; /* a rank that could not register */
    ck_ok(blob__comm_table_length(h, 3, &len));
    ck_assert_int_eq(len, 1);
    const blob__comm_header bad[] = {
        {-1, BLOB_OK, -1},                   /* negative count */
        {(int64_t)INT_MAX + 1, BLOB_OK, -1}, /* more blobs than a list holds */
        {4, BLOB_OK, 2},                     /* registered, yet a blob at fault */
        {4, BLOB_EDEVICE, -1},               /* failed, yet blobs */
        {0, 7, -1},                          /* not a status */
        {0, -99, -1},
        {0, INT64_MIN, -1},
        {0, BLOB_ESHAPE, -2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        h[2] = bad[i];
        len = -1;
        ck_status(blob__comm_table_length(h, 3, &len), BLOB_ECOMM);
        ck_assert_int_eq(len, 0);
        ck_assert_msg(strstr(blob_last_error(), "rank 2 sent a malformed registration"), "%s",
                      blob_last_error());
    }
}
END_TEST

/* ---- several ranks: scenarios run by every rank's thread ---- */

#define MAX_BLOBS 6

typedef struct {
    blob_dtype dtype;
    int nblobs;
    int64_t counts[MAX_BLOBS];
    bool flat;       /* diffs are views of one flat blob: reduced in place */
    bool overlapped; /* begin, ready per layer of two blobs from the last, end */
    blob_comm_op op;
    double *values[MAX_RANKS]; /* rank r's diffs (and data), every blob end to end */
    double *result[MAX_RANKS]; /* rank r's diffs after the reduction */
    double *data[MAX_RANKS];   /* rank r's data after it */
    int skew_rank, skew_blob;  /* that rank registers one more element there (-1: none) */
    bool skip;                 /* rank 1 registers, then makes no collective */
    int rounds;                /* all-reduces before the one checked (results not checked) */
    bool replay;               /* replayed from graphs, whatever the transport */
    bool waits;                /* overlapped: each bucket waited for (blob_comm_reduce_wait) */
    bool timed;                /* overlapped: the step timed (blob_comm_list_set_timing) */
    bool bf16[MAX_RANKS];      /* rank r reduces in bfloat16 */
    bool broken;               /* the transport fails after registration */
    uint64_t fail_at;          /* then the fail_at-th allocation fails (0: none) */
    int reduces_early;         /* all-reduce calls when rank 0 handed over its last layer */
} reduce_case;

static int64_t total_of(const reduce_case *rc)
{
    int64_t n = 0;
    for (int i = 0; i < rc->nblobs; i++)
        n += rc->counts[i];
    return n;
}

static blob_status read_back(blob *b, bool diff, double *out)
{
    const void *p;
    BLOB_TRY(diff ? blob_cpu_diff(b, &p) : blob_cpu_data(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++)
        out[i] = test_get(blob_get_dtype(b), p, i);
    return BLOB_OK;
}

/* The timing of the step just ended: a bucket each, in the order reduced, each ending
 * after it began, and those with their blobs handed over before the end of backward
 * beginning no earlier than that. */
static blob_status check_timing(blob_comm_list *l)
{
    blob_comm_bucket_timing b[16];
    int num = -1;
    double end = -1;
    BLOB_TRY(blob_comm_list_timing(l, b, 16, &num, &end));
    if (num != blob_comm_list_num_buckets(l) || num > 16 || !(end >= 0))
        return BLOB_FAIL(BLOB_EINVAL, "timing: %d buckets, backward ends at %g ms", num, end);
    for (int i = 0; i < num; i++)
        if (!(b[i].ready_ms >= 0 && b[i].start_ms >= b[i].ready_ms - 0.01 &&
              b[i].end_ms >= b[i].start_ms) ||
            b[i].elements < 1 || b[i].first > b[i].last)
            return BLOB_FAIL(BLOB_EINVAL, "timing of bucket %d: ready %g start %g end %g ms", i,
                             b[i].ready_ms, b[i].start_ms, b[i].end_ms);
    return BLOB_OK;
}

static void reduce_on(team *t, int r, reduce_case *rc)
{
    blob_comm *c = t->comms[r];
    int dev = blob_comm_device(c);
    int64_t total = total_of(rc);
    blob *flat = NULL, *b[MAX_BLOBS] = {0};
    blob_status st = BLOB_OK;
    void *p;
    size_t elem = blob_dtype_size(rc->dtype);
    if (rc->flat) { /* as the example lays its parameters out */
        flat = make_blob(rc->dtype, dev, total);
        st = blob_mutable_cpu_diff(flat, &p);
        if (st == BLOB_OK)
            put_values(rc->dtype, p, rc->values[r], total);
        if (st == BLOB_OK)
            st = blob_mutable_cpu_data(flat, &p);
        if (st == BLOB_OK)
            put_values(rc->dtype, p, rc->values[r], total);
        char *dd = NULL, *dx = NULL;
        if (st == BLOB_OK)
            st = blob_mutable_gpu_diff(flat, (void **)&dd);
        if (st == BLOB_OK)
            st = blob_mutable_gpu_data(flat, (void **)&dx);
        for (int i = 0, at = 0; i < rc->nblobs && st == BLOB_OK; at += (int)rc->counts[i++]) {
            b[i] = make_blob(rc->dtype, dev, rc->counts[i]);
            size_t bytes = (size_t)rc->counts[i] * elem;
            st = blob_syncedmem_set_gpu_data(blob_diff_mem(b[i]), dd + at * elem, bytes);
            if (st == BLOB_OK)
                st = blob_syncedmem_set_gpu_data(blob_data_mem(b[i]), dx + at * elem, bytes);
        }
    } else {
        for (int i = 0, at = 0; i < rc->nblobs && st == BLOB_OK; at += (int)rc->counts[i++]) {
            b[i] = make_blob(rc->dtype, dev, rc->counts[i]);
            st = blob_mutable_cpu_diff(b[i], &p);
            if (st == BLOB_OK)
                put_values(rc->dtype, p, rc->values[r] + at, rc->counts[i]);
            if (st == BLOB_OK)
                st = blob_mutable_cpu_data(b[i], &p);
            if (st == BLOB_OK)
                put_values(rc->dtype, p, rc->values[r] + at, rc->counts[i]);
        }
    }
    if (st == BLOB_OK && r == rc->skew_rank) {
        int64_t more = rc->counts[rc->skew_blob] + 1;
        st = blob_reshape(b[rc->skew_blob], 1, &more);
    }
    if (st != BLOB_OK) {
        report(t, r, st, blob__now());
        goto done;
    }
    if (rc->fail_at) {
        pthread_barrier_wait(&t->barrier);
        if (r == 0)
            fake_fail_alloc_at(rc->fail_at, false);
        pthread_barrier_wait(&t->barrier);
    }
    if (rc->replay) { /* before the list decides */
        c->replay_decided = true;
        c->replay = true;
    }
    c->bf16 = rc->bf16[r];
    blob_comm_list *l = NULL;
    double t0 = blob__now();
    st = blob_comm_list_create(&l, c, b, rc->nblobs);
    report(t, r, st, t0);
    if (st != BLOB_OK)
        goto done;
    for (int k = 0; k < rc->rounds && st == BLOB_OK; k++) {
        st = blob_comm_all_reduce(l, rc->op);
        if (st == BLOB_OK)
            st = blob_comm_synchronize(c);
        report(t, r, st, t0);
    }
    if (rc->broken) {
        pthread_barrier_wait(&t->barrier);
        if (r == 0)
            fake_break_worlds();
        pthread_barrier_wait(&t->barrier);
    }
    t0 = blob__now();
    if (rc->skip && r == 1) {
        st = BLOB_OK;
    } else if (rc->overlapped) {
        if (rc->timed)
            st = blob_comm_list_set_timing(l, true);
        if (st == BLOB_OK)
            st = blob_comm_reduce_begin(l, rc->op);
        const int nb = blob_comm_list_num_buckets(l);
        if (st == BLOB_OK && rc->waits && blob_comm_reduce_wait(l, nb - 1) != BLOB_ESTATE)
            st = BLOB_FAIL(BLOB_EINVAL, "a wait for a bucket not queued did not fail");
        for (int i = rc->nblobs - 2; i >= 0 && st == BLOB_OK; i -= 2) {
            st = blob_comm_reduce_ready(l, i, 2);
            if (r == 0 && i == rc->nblobs - 2)
                rc->reduces_early = __atomic_load_n(&fake_reduces, __ATOMIC_RELAXED);
        }
        for (int k = nb - 1; k >= 0 && st == BLOB_OK && rc->waits; k--)
            st = blob_comm_reduce_wait(l, k);
        if (st == BLOB_OK)
            st = blob_comm_reduce_end(l);
        if (st == BLOB_OK && rc->timed)
            st = check_timing(l);
    } else {
        st = blob_comm_all_reduce(l, rc->op);
    }
    if (st == BLOB_OK)
        st = blob_comm_synchronize(c);
    report(t, r, st, t0);
    /* whatever happened, the blobs are readable */
    for (int i = 0, at = 0; i < rc->nblobs; at += (int)rc->counts[i++]) {
        blob_status rs = read_back(b[i], true, rc->result[r] + at);
        if (rs == BLOB_OK)
            rs = read_back(b[i], false, rc->data[r] + at);
        if (rs != BLOB_OK && t->st[r] == BLOB_OK)
            report(t, r, rs, t0);
    }
    blob_comm_list_free(l);
done:
    for (int i = 0; i < rc->nblobs; i++)
        blob_free(b[i]);
    blob_free(flat);
}

static void rank_reduce(team *t, int r) { reduce_on(t, r, t->arg); }

static void reduce_case_init(reduce_case *rc, blob_dtype dt, int n, const int64_t *counts)
{
    memset(rc, 0, sizeof *rc);
    rc->dtype = dt;
    rc->nblobs = n;
    memcpy(rc->counts, counts, (size_t)n * sizeof *counts);
    rc->skew_rank = rc->skew_blob = -1;
    int64_t total = total_of(rc) + 1;
    for (int r = 0; r < MAX_RANKS; r++) {
        rc->values[r] = random_values(total);
        rc->result[r] = calloc((size_t)total, sizeof(double));
        rc->data[r] = calloc((size_t)total, sizeof(double));
    }
}

static void reduce_case_free(reduce_case *rc)
{
    for (int r = 0; r < MAX_RANKS; r++) {
        free(rc->values[r]);
        free(rc->result[r]);
        free(rc->data[r]);
    }
}

/* Every rank holds the sum (mean) of all ranks' diffs, and its data untouched: within
 * the rounding of each partial sum (and in bfloat16 of each term), relative to the sum
 * of the terms' magnitudes, as the ranks may add in any order. */
static void check_reduced(const team *t, const reduce_case *rc)
{
    int64_t total = total_of(rc);
    double *ref = malloc((size_t)(total + 1) * sizeof *ref);
    double *mag = malloc((size_t)(total + 1) * sizeof *mag);
    for (int64_t i = 0; i < total; i++) {
        double s = 0, m = 0;
        for (int r = 0; r < t->n; r++) {
            double v =
                rc->dtype == BLOB_FLOAT32 ? (double)(float)rc->values[r][i] : rc->values[r][i];
            s += v;
            m += fabs(v);
        }
        ref[i] = rc->op == BLOB_COMM_MEAN ? s / t->n : s;
        mag[i] = rc->op == BLOB_COMM_MEAN ? m / t->n : m;
    }
    double eps = rc->bf16[0] ? 0x1p-8 : rc->dtype == BLOB_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    double tol = 2 * t->n * eps;
    for (int r = 0; r < t->n; r++) {
        ck_assert_msg(t->st[r] == BLOB_OK, "rank %d: %s", r, t->msg[r]);
        for (int64_t i = 0; i < total; i++) {
            double got = rc->result[r][i];
            double err = fabs(got - ref[i]) / fmax(mag[i], 1e-3);
            ck_assert_msg(err <= tol, "rank %d element %lld: %.9g, expected %.9g (rel err %.3g)", r,
                          (long long)i, got, ref[i], err);
            double data =
                rc->dtype == BLOB_FLOAT32 ? (double)(float)rc->values[r][i] : rc->values[r][i];
            ck_assert_msg(rc->data[r][i] == data, "rank %d data %lld changed", r, (long long)i);
        }
    }
    free(ref);
    free(mag);
}

/* The sizes (in elements) that cut blobs across buckets, and a list of five blobs. */
static const int64_t some_counts[] = {37, 1, 100, 0, 64, 9};
static const size_t bucket_sizes[] = {BLOB_COMM_DEFAULT_BUCKET_BYTES, 64 * 8, 40 * 8, 7 * 8, 8};

#define NUM_VARIANTS 40

/* Variant i: bucket size index (i % 5) x op x layout x dtype. */
static void variant_init(reduce_case *rc, int i)
{
    test_seed(100 + (uint64_t)i);
    reduce_case_init(rc, (blob_dtype)(i / 20 % 2), 6, some_counts);
    rc->op = (blob_comm_op)(i / 5 % 2);
    rc->flat = i / 10 % 2;
}

START_TEST(test_fake_reduce)
{
    fake_reset_counts();
    reduce_case rc;
    variant_init(&rc, _i);
    team t = {0};
    run_team(&t, team_ranks(), 5, bucket_sizes[_i % 5], rank_reduce, &rc);
    check_reduced(&t, &rc);
    reduce_case_free(&rc);
    /* the flat layout is reduced in place: no packing copies; separate blobs in one
     * bucket are packed */
    fake_stats s = fake_get_stats();
    if ((_i / 10) % 2)
        ck_assert_uint_eq(s.d2d, 0);
    else if (_i % 5 == 0)
        ck_assert_uint_gt(s.d2d, 0);
}
END_TEST

/* The overlapped form hands layers over from the last; buckets go as soon as their blobs
 * are in. 40 floats a bucket: [0,38) [38,98) [98,138) [138,211); the last layer (blobs 4
 * and 5, [138, 211)) fills the last. */
static void overlapped(bool flat, double timeout)
{
    reduce_case rc;
    test_seed(7);
    reduce_case_init(&rc, BLOB_FLOAT32, 6, some_counts);
    rc.op = BLOB_COMM_MEAN;
    rc.overlapped = true;
    rc.waits = rc.timed = true;
    rc.flat = flat;
    team t = {0};
    __atomic_store_n(&fake_reduces, 0, __ATOMIC_RELAXED);
    run_team(&t, team_ranks(), timeout, 40 * 4, rank_reduce, &rc);
    check_reduced(&t, &rc);
    reduce_case_free(&rc);
    if (blob__ccl_current() == &fake_ccl) { /* each rank: the replay decision, 4 buckets */
        ck_assert_int_ge(rc.reduces_early, 2 + 1);
        ck_assert_int_eq(fake_reduces, 2 * (1 + 4));
    }
}

START_TEST(test_fake_overlapped) { overlapped(_i, 5); }
END_TEST

/* A collective library whose calls could be captured, on a device that cannot capture
 * (the fake): every rank's probe fails, the ranks agree not to replay, and the sums are
 * right. */
static const blob__ccl *fake_ccl_capturable(void)
{
    static blob__ccl ccl;
    ccl = fake_ccl;
    ccl.graphs = true;
    return &ccl;
}

static bool replay_decided[MAX_RANKS], replay_chosen[MAX_RANKS];

static void rank_reduce_then_look(team *t, int r)
{
    rank_reduce(t, r);
    replay_decided[r] = t->comms[r]->replay_decided;
    replay_chosen[r] = t->comms[r]->replay;
}

START_TEST(test_fake_replay_refused)
{
    blob__ccl_install(fake_ccl_capturable());
    reduce_case rc;
    test_seed(13);
    reduce_case_init(&rc, BLOB_FLOAT32, 6, some_counts);
    team t = {0};
    run_team(&t, team_ranks(), 5, 40 * 4, rank_reduce_then_look, &rc);
    check_reduced(&t, &rc);
    reduce_case_free(&rc);
    for (int r = 0; r < t.n; r++)
        ck_assert_msg(replay_decided[r] && !replay_chosen[r], "rank %d", r);
}
END_TEST

/* Different lists: BLOB_ESHAPE on every rank, at once, naming the blob; the
 * communicator still works. */
static void mismatch(double timeout)
{
    reduce_case rc;
    test_seed(9);
    reduce_case_init(&rc, BLOB_FLOAT32, 6, some_counts);
    rc.skew_rank = 1;
    rc.skew_blob = 4;
    team t = {0};
    run_team(&t, team_ranks(), timeout, 0, rank_reduce, &rc);
    for (int r = 0; r < t.n; r++) {
        ck_assert_msg(t.st[r] == BLOB_ESHAPE, "rank %d: %s %s", r, blob_status_name(t.st[r]),
                      t.msg[r]);
        ck_assert_msg(strstr(t.msg[r], "blob 4 differs: rank 0 has 64 float32 elements, rank 1 "
                                       "has 65 float32 elements"),
                      "rank %d: %s", r, t.msg[r]);
        ck_assert_msg(t.seconds[r] < test_time_scale(), "rank %d took %.3f s", r, t.seconds[r]);
    }
    reduce_case_free(&rc);
}

START_TEST(test_fake_mismatch) { mismatch(5); }
END_TEST

/* A rank that cannot register (its blob on the other GPU) takes part and all fail. */
static void rank_wrong_device(team *t, int r)
{
    int64_t n = 4;
    blob *b;
    int dev = r == 1 ? 0 : blob_comm_device(t->comms[r]);
    blob_status st = blob_create(&b, BLOB_FLOAT32, dev, 1, &n);
    blob_comm_list *l = NULL;
    double t0 = blob__now();
    if (st == BLOB_OK)
        st = blob_comm_list_create(&l, t->comms[r], &b, 1);
    report(t, r, st, t0);
    blob_comm_list_free(l);
    blob_free(b);
}

START_TEST(test_fake_bad_registration)
{
    team t = {0};
    run_team(&t, team_ranks(), 5, 0, rank_wrong_device, NULL);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(t.st[r] == BLOB_EDEVICE, "rank %d: %s", r, t.msg[r]);
        ck_assert(t.seconds[r] < test_time_scale());
    }
    ck_assert_ptr_nonnull(strstr(t.msg[0], "rank 1 could not register its list (blob 0"));
    ck_assert_ptr_nonnull(strstr(t.msg[1], "blob 0 is on GPU 0, the communicator's GPU is 1"));
}
END_TEST

/* A rank that stops taking part (after `rounds` all-reduces, replayed from graphs from
 * the second on when `replay`): the others get BLOB_ETIMEDOUT by the deadline, naming
 * the operation; their blobs stay readable, data as it was. */
static void missing_peer(double timeout, double slack, int rounds, bool replay)
{
    reduce_case rc;
    test_seed(11);
    reduce_case_init(&rc, BLOB_FLOAT32, 6, some_counts);
    rc.skip = true;
    rc.rounds = rounds;
    rc.replay = replay;
    team t = {0};
    run_team(&t, team_ranks(), timeout, 0, rank_reduce, &rc);
    ck_assert_msg(t.st[0] == BLOB_ETIMEDOUT, "rank 0: %s %s", blob_status_name(t.st[0]), t.msg[0]);
    char what[96]; /* list creation: 2 gathers, and the replay decision unless forced */
    snprintf(what, sizeof what, "all_reduce #%d (list 1, bucket 1 of 1, 211 elements)",
             rounds + (replay ? 3 : 4));
    ck_assert_msg(strstr(t.msg[0], what), "%s", t.msg[0]);
    /* the ranks' board names the one that did not come, and how far it got */
    snprintf(what, sizeof what, "rank 1 (pid %d) has not started it, its last is #%d",
             (int)getpid(), rounds + (replay ? 2 : 3));
    ck_assert_msg(strstr(t.msg[0], what), "%s", t.msg[0]);
    double scale = test_time_scale();
    ck_assert_msg(t.seconds[0] >= timeout * scale && t.seconds[0] < (timeout + slack) * scale,
                  "took %.3f s", t.seconds[0]);
    ck_assert_int_eq(t.st[1], BLOB_OK);
    for (int64_t i = 0; i < total_of(&rc); i++)
        ck_assert(rc.data[0][i] == (double)(float)rc.values[0][i]);
    reduce_case_free(&rc);
}

START_TEST(test_fake_missing_peer) { missing_peer(0.5, 1.0, 0, false); }
END_TEST

/* An eager all-reduce of a packed bucket keeps its buffer: a step asks the allocator for
 * no memory and gives none back. With the cache off a block given back synchronises the
 * device (as cudaFree does): on two GPUs a survivor whose peer had died hung there, in
 * a step that gave its buffer back before its collective was watched. */
static uint64_t requests_at[MAX_RANKS][2];

static void rank_steps(team *t, int r)
{
    blob_comm *c = t->comms[r];
    int dev = blob_comm_device(c);
    blob *b[2] = {make_blob(BLOB_FLOAT32, dev, 37), make_blob(BLOB_FLOAT32, dev, 100)};
    float *p;
    for (int i = 0; i < 2; i++) {
        ck_ok(blob_mutable_cpu_diff(b[i], (void **)&p));
        for (int64_t k = 0; k < blob_count(b[i]); k++)
            p[k] = (float)(r + 1);
    }
    blob_comm_list *l = NULL;
    double t0 = blob__now();
    blob_status st = blob_comm_list_create(&l, c, b, 2);
    blob_alloc_stats as;
    for (int step = 0; step < 3 && st == BLOB_OK; step++) {
        if (step == 1) { /* before the second and third steps, then after */
            ck_ok(blob_alloc_get_stats(blob_place_device(dev), &as));
            requests_at[r][0] = as.requests;
        }
        st = blob_comm_all_reduce(l, BLOB_COMM_SUM);
        if (st == BLOB_OK)
            st = blob_comm_synchronize(c);
    }
    ck_ok(blob_alloc_get_stats(blob_place_device(dev), &as));
    requests_at[r][1] = as.requests;
    report(t, r, st, t0);
    ck_ok(blob_cpu_diff(b[1], (const void **)&p));
    ck_assert_msg(p[99] == 12, "rank %d: %g", r, p[99]); /* 1 + 2, then doubled twice */
    blob_comm_list_free(l);
    blob_free(b[0]);
    blob_free(b[1]);
}

START_TEST(test_fake_steps_keep_their_buffer)
{
    fake_reset_counts();
    team t = {0};
    run_team(&t, team_ranks(), 5, 0, rank_steps, NULL);
    ck_assert_uint_gt(fake_get_stats().d2d, 0); /* the bucket was packed */
    for (int r = 0; r < t.n; r++) {
        ck_assert_msg(t.st[r] == BLOB_OK, "rank %d: %s", r, t.msg[r]);
        ck_assert_msg(requests_at[r][1] == requests_at[r][0],
                      "rank %d: %llu allocations in two steps", r,
                      (unsigned long long)(requests_at[r][1] - requests_at[r][0]));
    }
}
END_TEST

/* A transport error: every rank gets BLOB_ECOMM, and later calls the same. */
START_TEST(test_fake_transport_error)
{
    reduce_case rc;
    test_seed(12);
    reduce_case_init(&rc, BLOB_FLOAT64, 6, some_counts);
    rc.broken = true;
    team t = {0};
    run_team(&t, team_ranks(), 5, 0, rank_reduce, &rc);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(t.st[r] == BLOB_ECOMM, "rank %d: %s", r, t.msg[r]);
        ck_assert_msg(strstr(t.msg[r], "a peer failed") && strstr(t.msg[r], "rank "), "%s",
                      t.msg[r]);
        ck_assert(t.seconds[r] < test_time_scale());
    }
    reduce_case_free(&rc);
}
END_TEST

/* Any allocation of registration and reduction may fail, on either rank: every rank
 * returns by the deadline, with an error or the right sums, and nothing leaks. */
START_TEST(test_fake_alloc_failures)
{
    int failed_runs = 0;
    for (uint64_t k = 1; k < 200; k++) {
        reduce_case rc;
        test_seed(k);
        reduce_case_init(&rc, BLOB_FLOAT32, 6, some_counts);
        rc.op = BLOB_COMM_SUM;
        rc.fail_at = k;
        team t = {0};
        run_team(&t, team_ranks(), 0.3, 40 * 4, rank_reduce, &rc);
        fake_fail_alloc_at(0, false);
        fake_worlds_reset();
        bool ok = t.st[0] == BLOB_OK && t.st[1] == BLOB_OK;
        for (int r = 0; r < 2; r++) {
            blob_status st = t.st[r];
            ck_assert_msg(st == BLOB_OK || st == BLOB_ENOMEM || st == BLOB_EDEVMEM ||
                              st == BLOB_ECUDA || st == BLOB_ETIMEDOUT || st == BLOB_ECOMM,
                          "k=%llu rank %d: %s", (unsigned long long)k, r, t.msg[r]);
            ck_assert_msg(t.seconds[r] < 2.0 * test_time_scale(), "k=%llu rank %d took %.2f s",
                          (unsigned long long)k, r, t.seconds[r]);
        }
        if (ok)
            check_reduced(&t, &rc);
        reduce_case_free(&rc);
        if (ok && fake_get_stats().failed_allocs == 0)
            break; /* k is past the last allocation */
        failed_runs += !ok;
        fake_reset_counts();
    }
    ck_assert_int_gt(failed_runs, 3);
}
END_TEST

/* Blobs reduced by a communicator outlive it: read, updated and freed after it. */
typedef struct {
    blob *b[MAX_RANKS];
    blob_status st[MAX_RANKS];
} outlive_case;

static void rank_outlive(team *t, int r)
{
    outlive_case *oc = t->arg;
    oc->b[r] = make_blob(BLOB_FLOAT32, blob_comm_device(t->comms[r]), 10);
    float *p;
    blob_status st = blob_mutable_cpu_diff(oc->b[r], (void **)&p);
    for (int i = 0; i < 10 && st == BLOB_OK; i++)
        p[i] = (float)(r + i);
    blob_comm_list *l = NULL;
    if (st == BLOB_OK)
        st = blob_comm_list_create(&l, t->comms[r], &oc->b[r], 1);
    if (st == BLOB_OK)
        st = blob_comm_all_reduce(l, BLOB_COMM_SUM);
    report(t, r, st, blob__now());
    blob_comm_list_free(l);
}

static void rank_outlive_after(team *t, int r)
{
    outlive_case *oc = t->arg;
    const float *p = NULL;
    blob_status st = blob_cpu_diff(oc->b[r], (const void **)&p);
    for (int i = 0; i < 10 && st == BLOB_OK; i++) /* the sum over ranks q of q + i */
        if (p[i] != (float)(t->n * (t->n - 1) / 2 + t->n * i))
            st = BLOB_ESHAPE;
    oc->st[r] = st;
    blob_free(oc->b[r]);
}

static void blobs_outlive(void)
{
    outlive_case oc = {0};
    team t = {.after = rank_outlive_after};
    run_team(&t, team_ranks(), 5, 0, rank_outlive, &oc);
    for (int r = 0; r < t.n; r++) {
        ck_assert_msg(t.st[r] == BLOB_OK, "rank %d: %s", r, t.msg[r]);
        ck_assert_msg(oc.st[r] == BLOB_OK, "rank %d after: %s", r, blob_status_name(oc.st[r]));
    }
}

START_TEST(test_fake_blobs_outlive) { blobs_outlive(); }
END_TEST

/* Not all ranks arrive at creation: an error by the deadline, not a hang. */
typedef struct {
    blob_comm_id id;
    double timeout;
    int world; /* one more than the ranks that come */
    blob_status st[MAX_RANKS];
    double seconds[MAX_RANKS];
    char msg[MAX_RANKS][512];
} join_case;

static void *join_rank(void *p)
{
    join_case *jc = ((void **)p)[0];
    int r = (int)(intptr_t)((void **)p)[1];
    blob_comm_options o = {.rank = r,
                           .world_size = jc->world,
                           .device = r,
                           .has_id = true,
                           .id = jc->id,
                           .timeout_s = jc->timeout};
    blob_comm *c = NULL;
    double t0 = blob__now();
    jc->st[r] = blob_comm_create(&c, &o);
    jc->seconds[r] = blob__now() - t0;
    snprintf(jc->msg[r], sizeof jc->msg[r], "%s", blob_last_error());
    blob_comm_free(c);
    blob_thread_release();
    return NULL;
}

static void world_too_large(double timeout, double slack)
{
    const int n = team_ranks();
    timeout *= test_time_scale();
    slack *= test_time_scale();
    join_case jc = {.timeout = timeout, .world = n + 1};
    ck_ok(blob_comm_id_new(&jc.id));
    pthread_t th[MAX_RANKS];
    void *args[MAX_RANKS][2];
    for (int r = 0; r < n; r++) {
        args[r][0] = &jc;
        args[r][1] = (void *)(intptr_t)r;
        ck_assert_int_eq(pthread_create(&th[r], NULL, join_rank, args[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    char what[64];
    snprintf(what, sizeof what, "joining %d ranks did not finish", n + 1);
    for (int r = 0; r < n; r++) {
        ck_assert_msg(jc.st[r] == BLOB_ETIMEDOUT, "rank %d: %s", r, jc.msg[r]);
        ck_assert_msg(strstr(jc.msg[r], what) && strstr(jc.msg[r], "WORLD_SIZE"), "%s", jc.msg[r]);
        ck_assert_msg(jc.seconds[r] >= timeout && jc.seconds[r] < timeout + slack, "%.3f s",
                      jc.seconds[r]);
    }
}

START_TEST(test_fake_world_too_large) { world_too_large(0.5, 1.0); }
END_TEST

/* Rendezvous through a file, rank 0 writing and removing it; the id is the fake's. */
typedef struct {
    const char *path;
    blob_status st[2];
    char msg[2][512];
    int world;
} file_case;

static void *file_rank(void *p)
{
    file_case *fc = ((void **)p)[0];
    int r = (int)(intptr_t)((void **)p)[1];
    blob_comm_options o = {
        .rank = r, .world_size = fc->world, .device = r, .id_file = fc->path, .timeout_s = 2};
    if (r == 1)
        blob__sleep(0.1); /* the reader may come first or second */
    blob_comm *c = NULL;
    fc->st[r] = blob_comm_create(&c, &o);
    snprintf(fc->msg[r], sizeof fc->msg[r], "%s", blob_last_error());
    if (c) {
        double v[2] = {r + 1.0, 10.0 * r};
        fc->st[r] = blob_comm_all_reduce_host(c, v, 2, BLOB_COMM_SUM);
        if (fc->st[r] == BLOB_OK && (v[0] != 3 || v[1] != 10))
            fc->st[r] = BLOB_ESHAPE;
        double m[1] = {r * 4.0};
        if (fc->st[r] == BLOB_OK)
            fc->st[r] = blob_comm_all_reduce_host(c, m, 1, BLOB_COMM_MEAN);
        if (fc->st[r] == BLOB_OK && m[0] != 2)
            fc->st[r] = BLOB_ESHAPE;
    }
    blob_comm_free(c);
    blob_thread_release();
    return NULL;
}

START_TEST(test_fake_file_rendezvous)
{
    clear_env();
    char *dir = temp_dir(), path[128];
    snprintf(path, sizeof path, "%s/id", dir);
    file_case fc = {.path = path, .world = 2};
    pthread_t th[2];
    void *args[2][2];
    for (int r = 0; r < 2; r++) {
        args[r][0] = &fc;
        args[r][1] = (void *)(intptr_t)r;
        ck_assert_int_eq(pthread_create(&th[r], NULL, file_rank, args[r]), 0);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(fc.st[r] == BLOB_OK, "rank %d: %s", r, fc.msg[r]);
    ck_assert_int_eq(test_dir_entries(dir), 0); /* rank 0 removed the file */

    /* a file of another world size */
    blob_comm_id id = some_id(1);
    ck_ok(blob_comm_id_write_file(&id, 5, path));
    blob_comm_options o = {
        .rank = 1, .world_size = 2, .device = 1, .id_file = path, .timeout_s = 2};
    blob_comm *c;
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "written for 5 ranks"));
    unlink(path);
    /* a file that never comes */
    double t0 = blob__now();
    o.timeout_s = 0.4;
    ck_status(blob_comm_create(&c, &o), BLOB_ETIMEDOUT);
    ck_assert(blob__now() - t0 < 1.4);
    /* no way to meet at all */
    o.id_file = NULL;
    ck_status(blob_comm_create(&c, &o), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "BLOB_COMM_ID_FILE"));
    remove_dir(dir);
}
END_TEST

static void rank_broadcast(team *t, int r)
{
    reduce_case *rc = t->arg;
    blob *b[3] = {0};
    blob_status st = BLOB_OK;
    for (int i = 0, at = 0; i < 3 && st == BLOB_OK; at += (int)rc->counts[i++]) {
        void *p;
        b[i] = make_blob(rc->dtype, blob_comm_device(t->comms[r]), rc->counts[i]);
        st = blob_mutable_cpu_data(b[i], &p);
        if (st == BLOB_OK)
            put_values(rc->dtype, p, rc->values[r] + at, rc->counts[i]);
    }
    blob_comm_list *l = NULL;
    double t0 = blob__now();
    if (st == BLOB_OK)
        st = blob_comm_list_create(&l, t->comms[r], b, 3);
    if (st == BLOB_OK)
        st = blob_comm_broadcast(l, 1);
    for (int i = 0, at = 0; i < 3 && st == BLOB_OK; at += (int)rc->counts[i++])
        st = read_back(b[i], false, rc->data[r] + at);
    report(t, r, st, t0);
    blob_comm_list_free(l);
    for (int i = 0; i < 3; i++)
        blob_free(b[i]);
}

static void broadcast_case(void)
{
    reduce_case rc;
    test_seed(13);
    reduce_case_init(&rc, BLOB_FLOAT64, 3, (int64_t[]){5, 0, 1000});
    team t = {0};
    run_team(&t, team_ranks(), 5, 0, rank_broadcast, &rc);
    for (int r = 0; r < t.n; r++) {
        ck_assert_msg(t.st[r] == BLOB_OK, "rank %d: %s", r, t.msg[r]);
        for (int64_t i = 0; i < 1005; i++)
            ck_assert_msg(rc.data[r][i] == rc.values[1][i], "rank %d element %lld", r,
                          (long long)i);
    }
    reduce_case_free(&rc);
}

START_TEST(test_fake_broadcast) { broadcast_case(); }
END_TEST

/* ---- a rank per real GPU through NCCL ---- */

/* Every rank runs the variants in turn on one team, its bucket size set before each
 * list is made, and stops at its first failure. */
static void rank_variants(team *t, int r)
{
    reduce_case *rcs = t->arg;
    for (int v = 0; v < NUM_VARIANTS && t->st[r] == BLOB_OK; v++) {
        t->comms[r]->bucket_bytes = bucket_sizes[v % 5];
        reduce_on(t, r, &rcs[v]);
        if (t->st[r] != BLOB_OK) {
            char msg[sizeof t->msg[r]];
            snprintf(msg, sizeof msg, "variant %d: %s", v, t->msg[r]);
            memcpy(t->msg[r], msg, sizeof msg);
        }
    }
}

START_TEST(test_gpu_reduce)
{
    reduce_case *rcs = calloc(NUM_VARIANTS, sizeof *rcs);
    ck_assert_ptr_nonnull(rcs);
    for (int v = 0; v < NUM_VARIANTS; v++)
        variant_init(&rcs[v], v);
    team t = {0};
    run_team(&t, team_ranks(), 30, bucket_sizes[0], rank_variants, rcs);
    for (int v = 0; v < NUM_VARIANTS; v++) {
        check_reduced(&t, &rcs[v]);
        reduce_case_free(&rcs[v]);
    }
    free(rcs);
}
END_TEST

START_TEST(test_gpu_overlapped)
{
    overlapped(false, 30);
    overlapped(true, 30);
}
END_TEST

/* Reduced in bfloat16 on the wire (packed, in both layouts, overlapped with waits per
 * bucket), sums within its rounding; a rank that reduces in float32 among ranks that
 * do not is refused at registration, on every rank. */
START_TEST(test_gpu_bf16)
{
    for (int flat = 0; flat < 2; flat++) {
        reduce_case rc;
        test_seed(21 + (uint64_t)flat);
        reduce_case_init(&rc, BLOB_FLOAT32, 6, some_counts);
        rc.op = flat ? BLOB_COMM_MEAN : BLOB_COMM_SUM;
        rc.flat = flat;
        rc.overlapped = rc.waits = true;
        for (int r = 0; r < MAX_RANKS; r++)
            rc.bf16[r] = true;
        team t = {0};
        run_team(&t, team_ranks(), 30, 40 * 4, rank_reduce, &rc);
        check_reduced(&t, &rc);
        reduce_case_free(&rc);
    }
    reduce_case rc;
    test_seed(23);
    reduce_case_init(&rc, BLOB_FLOAT32, 6, some_counts);
    for (int r = 0; r < MAX_RANKS; r++)
        rc.bf16[r] = r != 1;
    team t = {0};
    run_team(&t, team_ranks(), 30, 0, rank_reduce, &rc);
    for (int r = 0; r < t.n; r++) {
        ck_assert_msg(t.st[r] == BLOB_ESHAPE, "rank %d: %s", r, t.msg[r]);
        ck_assert_msg(strstr(t.msg[r], "blob 0 differs: rank 0 has 37 float32 elements (reduced "
                                       "in bfloat16), rank 1 has 37 float32 elements"),
                      "rank %d: %s", r, t.msg[r]);
    }
    reduce_case_free(&rc);
}
END_TEST

START_TEST(test_gpu_broadcast) { broadcast_case(); }
END_TEST

START_TEST(test_gpu_mismatch) { mismatch(30); }
END_TEST

START_TEST(test_gpu_missing_peer) { missing_peer(3, 5, 0, false); }
END_TEST

START_TEST(test_gpu_missing_peer_replayed) { missing_peer(3, 5, 2, true); }
END_TEST

START_TEST(test_gpu_blobs_outlive) { blobs_outlive(); }
END_TEST

START_TEST(test_gpu_world_too_large) { world_too_large(3, 5); }
END_TEST

/* ---- the ranks' board ---- */

static blob_comm_id board_id(void)
{
    blob_comm_id id;
    for (size_t i = 0; i < sizeof id.bytes; i++)
        id.bytes[i] = (uint8_t)test_uniform(0, 256);
    return id;
}

static bool board_exists(const blob_comm_id *id)
{
    char name[64];
    blob__board_name(id, name, sizeof name);
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

/* "rank R (pid P) " and the rest, for the checks below. */
static const char *board_says(char *buf, size_t size, int rank, int pid, const char *rest)
{
    snprintf(buf, size, "rank %d (pid %d) %s", rank, pid, rest);
    return buf;
}

/* Two ranks' boards of one id are one page: each sees what the other posts. */
START_TEST(test_board_shared)
{
    test_seed(21);
    const int pid = (int)getpid();
    blob_comm_id id = board_id();
    blob__board *b0 = blob__board_open(&id, 2), *b1 = blob__board_open(&id, 2);
    ck_assert_ptr_nonnull(b0);
    ck_assert_ptr_nonnull(b1);
    ck_assert(board_exists(&id));
    blob__board_unlink(&id);
    ck_assert(!board_exists(&id)); /* the mappings keep it */
    char why[200], want[128];
    blob__board_explain(b0, 0, 5, why, sizeof why);
    ck_assert_str_eq(why, ""); /* rank 1 posted nothing */
    blob__board_join(b0, 0);
    blob__board_join(b1, 1);
    blob__board_explain(b0, 0, 5, why, sizeof why);
    ck_assert_str_eq(why,
                     board_says(want, sizeof want, 1, pid, "has not started it, its last is #0"));
    blob__board_started(b1, 1, 3);
    blob__board_explain(b0, 0, 5, why, sizeof why);
    ck_assert_str_eq(why,
                     board_says(want, sizeof want, 1, pid, "has not started it, its last is #3"));
    blob__board_started(b1, 1, 5);
    blob__board_explain(b0, 0, 5, why, sizeof why);
    ck_assert_str_eq(why, ""); /* it took part */
    blob__board_leave(b1, 1);
    blob__board_explain(b0, 0, 5, why, sizeof why);
    ck_assert_str_eq(why, board_says(want, sizeof want, 1, pid,
                                     "has freed its communicator, after collective #5"));
    blob__board_explain(b1, 1, 5, why, sizeof why); /* rank 0 started nothing */
    ck_assert_str_eq(why,
                     board_says(want, sizeof want, 0, pid, "has not started it, its last is #0"));
    blob__board_drop(b1);
    blob__board_drop(b0);
    blob__board_explain(NULL, 0, 1, why, sizeof why);
    ck_assert_str_eq(why, "");
    /* none for a world of 1, nor for another world on the same id */
    ck_assert_ptr_null(blob__board_open(&id, 1));
    b0 = blob__board_open(&id, 3);
    ck_assert_ptr_nonnull(b0);
    ck_assert_ptr_null(blob__board_open(&id, 4));
    blob__board_unlink(&id);
    blob__board_drop(b0);
}
END_TEST

/* A rank whose process ended is named as such, with its last collective. */
START_TEST(test_board_process_gone)
{
    test_seed(22);
    blob_comm_id id = board_id();
    blob__board *b0 = blob__board_open(&id, 3);
    ck_assert_ptr_nonnull(b0);
    blob__board_join(b0, 0);
    blob__board_started(b0, 0, 7);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        blob__board *b = blob__board_open(&id, 3);
        blob__board_join(b, 2);
        blob__board_started(b, 2, 6);
        _exit(b ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    blob__board_unlink(&id);
    char why[200], want[128];
    blob__board_explain(b0, 0, 7, why, sizeof why);
    ck_assert_str_eq(
        why, board_says(want, sizeof want, 2, (int)child, "has ended, after collective #6"));
    blob__board_drop(b0);
}
END_TEST

/* An object of the board's name that others may write, of another size, or with another
 * header is not used. */
START_TEST(test_board_refusals)
{
    test_seed(23);
    const size_t bytes = blob__board_page_bytes(2);
    for (int k = 0; k < 3; k++) {
        blob_comm_id id = board_id();
        char name[64];
        blob__board_name(&id, name, sizeof name);
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, (off_t)(k == 1 ? bytes + 8 : bytes)), 0);
        if (k == 0)
            ck_assert_int_eq(fchmod(fd, 0622), 0);
        if (k == 2) {
            uint64_t junk = 0x1234;
            ck_assert_int_eq(pwrite(fd, &junk, sizeof junk, 0), (ssize_t)sizeof junk);
        }
        close(fd);
        ck_assert_msg(!blob__board_open(&id, 2), "case %d", k);
        blob__board_unlink(&id);
    }
}
END_TEST

/* Posts no rank writes say nothing; a message names two ranks and counts the others;
 * it is cut to the buffer and terminated. */
START_TEST(test_board_untrusted)
{
    const int pid = (int)getpid();
    blob__board *b = blob__board_new_local(6);
    ck_assert_ptr_nonnull(b);
    for (int r = 0; r < 6; r++)
        blob__board_join(b, r);
    char why[300], want[256];
    blob__board_explain(b, 0, 1, why, sizeof why);
    snprintf(want, sizeof want,
             "rank 1 (pid %d) has not started it, its last is #0; rank 2 (pid %d) has not started "
             "it, its last is #0; and 3 more",
             pid, pid);
    ck_assert_str_eq(why, want);
    blob__board_drop(b);

    b = blob__board_new_local(3);
    ck_assert_ptr_nonnull(b);
    blob__board_page *p = blob__board_page_of(b);
    atomic_store(&p->slot[1].pid, (uint64_t)1 << 40); /* no such process id */
    atomic_store(&p->slot[1].state, BLOB__BOARD_JOINED);
    atomic_store(&p->slot[2].pid, 1);
    atomic_store(&p->slot[2].state, 77); /* no such state */
    blob__board_explain_page(p, 3, 0, 9, why, sizeof why);
    ck_assert_str_eq(why, "");
    atomic_store(&p->slot[2].state, BLOB__BOARD_LEFT);
    blob__board_explain_page(p, 4, 0, 9, why, sizeof why); /* not its world */
    ck_assert_str_eq(why, "");
    char small[8];
    blob__board_explain_page(p, 3, 0, 9, small, sizeof small);
    ck_assert_str_eq(small, "rank 2 ");
    atomic_store(&p->magic, 0);
    blob__board_explain_page(p, 3, 0, 9, why, sizeof why);
    ck_assert_str_eq(why, "");
    blob__board_drop(b);
}
END_TEST

void comm_suite(Suite *s)
{
    TCase *tc = suite_case(s, "rendezvous", NULL, 60, NULL, NULL);
    add_tests(tc, test_hex_round_trip, test_record_round_trip, test_record_damage,
              test_file_round_trip, test_file_missing_deadline, test_file_bad_at_once,
              test_file_not_trusted, test_file_writer_paths, test_file_awaited, test_env_defaults,
              test_env_torchrun, test_env_bad_values, test_env_launchers);

    tc = suite_case(s, "board", NULL, 0, NULL, NULL);
    add_tests(tc, test_board_shared, test_board_process_gone, test_board_refusals,
              test_board_untrusted);

    tc = suite_case(s, "one_rank", NULL, 0, NULL, NULL);
    add_loop_tests(tc, 0, 2, test_one_rank);
    add_tests(tc, test_several_ranks_need_nccl_and_gpu, test_null_arguments, test_plan,
              test_contiguous, test_compare_tables, test_table_length);

    tc = suite_case(s, "one_rank_fake", NULL, 0, fake_setup, fake_teardown);
    add_tests(tc, test_one_rank_alloc_failures);

    tc = suite_case(s, "fake_ranks", NULL, 60, fake_ccl_setup, fake_ccl_teardown);
    add_loop_tests(tc, 0, NUM_VARIANTS, test_fake_reduce);
    add_loop_tests(tc, 0, 2, test_fake_overlapped);
    add_tests(tc, test_fake_replay_refused, test_fake_broadcast, test_fake_mismatch,
              test_fake_bad_registration, test_fake_missing_peer, test_fake_steps_keep_their_buffer,
              test_fake_transport_error, test_fake_alloc_failures, test_fake_blobs_outlive,
              test_fake_world_too_large, test_fake_file_rendezvous);

    tc = suite_case(s, "gpus", "gpu gpu2", 0, NULL, NULL);
    add_tests(tc, test_gpu_reduce, test_gpu_overlapped, test_gpu_bf16, test_gpu_broadcast,
              test_gpu_mismatch);
    /* apart, so that each can run alone or beside the others (compute-sanitizer runs
     * these, which wait out deadlines on purpose, as processes side by side) */
    tc = suite_case(s, "gpu_faults", "gpu gpu2", 0, NULL, NULL);
    add_tests(tc, test_gpu_missing_peer, test_gpu_missing_peer_replayed);
    tc = suite_case(s, "gpu_limits", "gpu gpu2", 0, NULL, NULL);
    add_tests(tc, test_gpu_world_too_large, test_gpu_blobs_outlive);
}
