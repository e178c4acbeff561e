#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "blob/alloc.h"
#include "blob/device.h"
#include "fake_backend.h"

typedef enum { BLK_HOST, BLK_PINNED, BLK_DEVICE, BLK_STREAM, BLK_EVENT } block_kind;

typedef struct {
    unsigned char *p;
    size_t size;
    block_kind kind;
    int device;
} block;

typedef struct {
    blob__copy_kind kind;
    bool is_memset;
    void *dst;
    const void *src;
    size_t bytes;
    int value;
} op;

typedef struct {
    op *ops;
    size_t n_ops, cap_ops;
    size_t executed; /* ops[0..executed) have run */
    uint64_t id;     /* 0 for the default stream */
    int priority;    /* as created */
} stream;

/* Events name their stream by id: a stream destroyed after the record has run all its
 * work, so its events read as complete (as CUDA's do). */
typedef struct {
    uint64_t stream_id;
    size_t marker; /* the stream's op count when recorded */
    bool recorded;
} event;

static block *blocks;
static size_t n_blocks, cap_blocks;
static stream default_stream;
static stream *streams[64];
static size_t n_streams;
static fake_stats stats;
static uint64_t attempts, fail_at;
static bool fail_persistent, fail_copies;
static _Thread_local int current_device;
/* Guards everything above except current_device; recursive because fake_drain runs
 * both on its own and inside the synchronising entry points. */
static pthread_mutex_t fake_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static int64_t *live_bytes(block_kind kind)
{
    return kind == BLK_PINNED   ? &stats.live_pinned_bytes
           : kind == BLK_DEVICE ? &stats.live_device_bytes
                                : NULL;
}

static void grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *p = realloc(*arr, c * elem);
    if (!p)
        abort(); /* the test harness itself ran out of memory */
    *arr = p;
    *cap = c;
}

static bool inject_failure(void)
{
    attempts++;
    bool fail = fail_at && (attempts == fail_at || (fail_persistent && attempts > fail_at));
    if (fail)
        stats.failed_allocs++;
    return fail;
}

static void add_block(void *p, size_t size, block_kind kind)
{
    grow((void **)&blocks, &cap_blocks, n_blocks + 1, sizeof *blocks);
    blocks[n_blocks++] = (block){p, size, kind, current_device};
    if (live_bytes(kind))
        *live_bytes(kind) += (int64_t)size;
    if (kind == BLK_HOST)
        stats.live_host_blocks++;
    else
        stats.live_blocks++;
}

static bool remove_block(void *p, block_kind kind)
{
    for (size_t i = 0; i < n_blocks; i++) {
        if (blocks[i].p == p && blocks[i].kind == kind) {
            if (live_bytes(kind))
                *live_bytes(kind) -= (int64_t)blocks[i].size;
            blocks[i] = blocks[--n_blocks];
            if (kind == BLK_HOST)
                stats.live_host_blocks--;
            else
                stats.live_blocks--;
            return true;
        }
    }
    stats.violations++; /* freeing something that was never allocated, or twice */
    return false;
}

/* [p, p+bytes) lies inside one live block of `kind` (and of `device` for device blocks). */
static bool inside(const void *p, size_t bytes, block_kind kind)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n_blocks; i++) {
        const block *b = &blocks[i];
        if (b->kind == kind && c >= b->p && c + bytes <= b->p + b->size)
            return kind != BLK_DEVICE || b->device == current_device;
    }
    return false;
}

static bool op_valid(const op *o)
{
    if (o->is_memset)
        return inside(o->dst, o->bytes, BLK_DEVICE);
    switch (o->kind) {
    case BLOB__H2D: return inside(o->dst, o->bytes, BLK_DEVICE);
    case BLOB__D2H:
    case BLOB__D2H_PINNED: return inside(o->src, o->bytes, BLK_DEVICE);
    case BLOB__D2D:
        return inside(o->src, o->bytes, BLK_DEVICE) && inside(o->dst, o->bytes, BLK_DEVICE);
    }
    return false;
}

static void run_op(const op *o)
{
    if (!op_valid(o)) {
        stats.violations++; /* a block was freed before its queued work ran */
        return;
    }
    if (o->is_memset) {
        memset(o->dst, o->value, o->bytes);
        stats.memsets++;
        return;
    }
    memmove(o->dst, o->src, o->bytes);
    switch (o->kind) {
    case BLOB__H2D:
        stats.h2d++;
        stats.h2d_bytes += o->bytes;
        break;
    case BLOB__D2H:
    case BLOB__D2H_PINNED:
        stats.d2h++;
        stats.d2h_bytes += o->bytes;
        break;
    case BLOB__D2D: stats.d2d++; break;
    }
}

static void run_until(stream *s, size_t marker)
{
    while (s->executed < marker)
        run_op(&s->ops[s->executed++]);
}

static stream *as_stream(void *s) { return s ? s : &default_stream; }

static blob_status enqueue(void *s, op o)
{
    if (fail_copies)
        return BLOB_FAIL(BLOB_ECUDA, "fake: injected copy failure");
    if (!op_valid(&o)) {
        stats.violations++;
        return BLOB_FAIL(BLOB_ECUDA, "fake: copy outside live device blocks");
    }
    stream *st = as_stream(s);
    grow((void **)&st->ops, &st->cap_ops, st->n_ops + 1, sizeof *st->ops);
    st->ops[st->n_ops++] = o;
    return BLOB_OK;
}

static int fake_device_count(void) { return FAKE_DEVICES; }

static blob_status fake_get_device(int *device)
{
    *device = current_device;
    return BLOB_OK;
}

static blob_status fake_set_device(int device)
{
    if (device < 0 || device >= FAKE_DEVICES)
        return BLOB_FAIL(BLOB_ERANGE, "fake: no device %d", device);
    current_device = device;
    return BLOB_OK;
}

static blob_status alloc_block(size_t bytes, void **out, block_kind kind, uint64_t *count,
                               blob_status oom)
{
    *out = NULL;
    if (inject_failure())
        return BLOB_FAIL(oom, "fake: injected allocation failure #%llu",
                         (unsigned long long)attempts);
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        return BLOB_FAIL(oom, "fake: malloc failed");
    add_block(p, bytes, kind);
    (*count)++;
    *out = p;
    return BLOB_OK;
}

static void free_block(void *p, block_kind kind, uint64_t *count)
{
    if (!p)
        return;
    if (remove_block(p, kind)) {
        (*count)++;
        free(p);
    }
}

static blob_status host_alloc(size_t bytes, void **out)
{
    return alloc_block(bytes, out, BLK_HOST, &stats.host_allocs, BLOB_ENOMEM);
}
static void host_free(void *p) { free_block(p, BLK_HOST, &stats.host_frees); }
static blob_status pinned_alloc(size_t bytes, void **out)
{
    return alloc_block(bytes, out, BLK_PINNED, &stats.pinned_allocs, BLOB_ENOMEM);
}
static void pinned_free(void *p) { free_block(p, BLK_PINNED, &stats.pinned_frees); }
static blob_status device_alloc(size_t bytes, void **out)
{
    return alloc_block(bytes, out, BLK_DEVICE, &stats.device_allocs, BLOB_EDEVMEM);
}
static void device_free(void *p) { free_block(p, BLK_DEVICE, &stats.device_frees); }

static blob_status pointer_device(const void *p, int *device)
{
    const unsigned char *c = p;
    stats.pointer_queries++;
    *device = BLOB__HOST_MEMORY;
    for (size_t i = 0; i < n_blocks; i++)
        if (blocks[i].kind == BLK_DEVICE && c >= blocks[i].p && c < blocks[i].p + blocks[i].size)
            *device = blocks[i].device;
    return BLOB_OK;
}

static blob_status copy_async(void *dst, const void *src, size_t bytes, blob__copy_kind kind,
                              void *s)
{
    return enqueue(s, (op){.kind = kind, .dst = dst, .src = src, .bytes = bytes});
}

static blob_status memset_async(void *dst, int value, size_t bytes, void *s)
{
    return enqueue(s, (op){.is_memset = true, .dst = dst, .bytes = bytes, .value = value});
}

void fake_drain(void)
{
    pthread_mutex_lock(&fake_mu);
    run_until(&default_stream, default_stream.n_ops);
    for (size_t i = 0; i < n_streams; i++)
        run_until(streams[i], streams[i]->n_ops);
    pthread_mutex_unlock(&fake_mu);
}

int fake_stream_priority(void *s)
{
    pthread_mutex_lock(&fake_mu);
    int p = s ? ((stream *)s)->priority : 0;
    pthread_mutex_unlock(&fake_mu);
    return p;
}

int fake_queued(void)
{
    pthread_mutex_lock(&fake_mu);
    size_t n = default_stream.n_ops - default_stream.executed;
    for (size_t i = 0; i < n_streams; i++)
        n += streams[i]->n_ops - streams[i]->executed;
    pthread_mutex_unlock(&fake_mu);
    return (int)n;
}

static blob_status device_synchronize(void)
{
    stats.device_syncs++;
    fake_drain();
    return BLOB_OK;
}

static blob_status stream_create(void **out, int priority)
{
    if (n_streams == sizeof streams / sizeof streams[0])
        return BLOB_FAIL(BLOB_ECUDA, "fake: too many streams");
    void *p;
    BLOB_TRY(alloc_block(sizeof(stream), &p, BLK_STREAM, &stats.streams_created, BLOB_ECUDA));
    static uint64_t next_id;
    memset(p, 0, sizeof(stream));
    ((stream *)p)->id = ++next_id;
    ((stream *)p)->priority = priority;
    streams[n_streams++] = p;
    *out = p;
    return BLOB_OK;
}

static void stream_destroy(void *s)
{
    if (!s)
        return;
    stream *st = s;
    run_until(st, st->n_ops); /* CUDA lets queued work finish */
    for (size_t i = 0; i < n_streams; i++)
        if (streams[i] == st)
            streams[i] = streams[--n_streams];
    free(st->ops);
    uint64_t ignored = 0;
    free_block(st, BLK_STREAM, &ignored);
}

static blob_status stream_synchronize(void *s)
{
    stats.stream_syncs++;
    stream *st = as_stream(s);
    run_until(st, st->n_ops);
    return BLOB_OK;
}

static blob_status event_create(void **out)
{
    void *p;
    BLOB_TRY(alloc_block(sizeof(event), &p, BLK_EVENT, &stats.events_created, BLOB_ECUDA));
    memset(p, 0, sizeof(event));
    *out = p;
    return BLOB_OK;
}

static void event_destroy(void *e)
{
    uint64_t ignored = 0;
    free_block(e, BLK_EVENT, &ignored);
}

/* The live stream an event was recorded on, or NULL when there is nothing to wait for. */
static stream *event_stream(const event *ev)
{
    if (!ev->recorded)
        return NULL;
    if (ev->stream_id == 0)
        return &default_stream;
    for (size_t i = 0; i < n_streams; i++)
        if (streams[i]->id == ev->stream_id)
            return streams[i];
    return NULL;
}

static blob_status event_record(void *e, void *s)
{
    event *ev = e;
    stream *st = as_stream(s);
    ev->stream_id = st->id;
    ev->marker = st->n_ops;
    ev->recorded = true;
    return BLOB_OK;
}

static blob_status event_query(void *e, bool *done)
{
    event *ev = e;
    stream *st = event_stream(ev);
    *done = !st || st->executed >= ev->marker;
    return BLOB_OK;
}

static blob_status event_synchronize(void *e)
{
    event *ev = e;
    stats.event_syncs++;
    stream *st = event_stream(ev);
    if (st)
        run_until(st, ev->marker);
    return BLOB_OK;
}

/* The fake keeps no clock: every interval is 0 ms, once both events have completed. */
static blob_status event_elapsed(void *from, void *to, double *ms)
{
    bool a, b;
    BLOB_TRY(event_query(from, &a));
    BLOB_TRY(event_query(to, &b));
    if (!a || !b)
        return BLOB_FAIL(BLOB_ECUDA, "fake: an event has not completed");
    *ms = 0;
    return BLOB_OK;
}

/* Work on `s` after this point waits for the event: run everything up to it now. */
static blob_status stream_wait_event(void *s, void *e)
{
    (void)s;
    event *ev = e;
    stream *st = event_stream(ev);
    if (st)
        run_until(st, ev->marker);
    return BLOB_OK;
}

/* The table's entries: fake_<name> runs <name> under fake_mu (the device queries and the
 * graph calls touch no shared state). */
#define LOCKED(ret, name, params, args) \
    static ret fake_##name params       \
    {                                   \
        pthread_mutex_lock(&fake_mu);   \
        ret r_ = name args;             \
        pthread_mutex_unlock(&fake_mu); \
        return r_;                      \
    }
#define LOCKED_VOID(name, params, args) \
    static void fake_##name params      \
    {                                   \
        pthread_mutex_lock(&fake_mu);   \
        name args;                      \
        pthread_mutex_unlock(&fake_mu); \
    }
LOCKED(blob_status, host_alloc, (size_t bytes, void **out), (bytes, out))
LOCKED_VOID(host_free, (void *p), (p))
LOCKED(blob_status, pinned_alloc, (size_t bytes, void **out), (bytes, out))
LOCKED_VOID(pinned_free, (void *p), (p))
LOCKED(blob_status, device_alloc, (size_t bytes, void **out), (bytes, out))
LOCKED_VOID(device_free, (void *p), (p))
LOCKED(blob_status, pointer_device, (const void *p, int *device), (p, device))
LOCKED(blob_status, copy_async,
       (void *dst, const void *src, size_t bytes, blob__copy_kind kind, void *s),
       (dst, src, bytes, kind, s))
LOCKED(blob_status, memset_async, (void *dst, int value, size_t bytes, void *s),
       (dst, value, bytes, s))
LOCKED(blob_status, device_synchronize, (void), ())
LOCKED(blob_status, stream_create, (void **out, int priority), (out, priority))
LOCKED_VOID(stream_destroy, (void *s), (s))
LOCKED(blob_status, stream_synchronize, (void *s), (s))
LOCKED(blob_status, stream_wait_event, (void *s, void *e), (s, e))
LOCKED(blob_status, event_create, (void **out), (out))
LOCKED_VOID(event_destroy, (void *e), (e))
LOCKED(blob_status, event_record, (void *e, void *s), (e, s))
LOCKED(blob_status, event_query, (void *e, bool *done), (e, done))
LOCKED(blob_status, event_synchronize, (void *e), (e))
LOCKED(blob_status, event_elapsed, (void *from, void *to, double *ms), (from, to, ms))

static blob_status fake_graph_begin(void *s)
{
    (void)s;
    return BLOB_FAIL(BLOB_ECUDA, "fake: no graph capture");
}

static blob_status fake_graph_end(void *s, void **graph, void **exec)
{
    (void)s, (void)graph, (void)exec;
    return BLOB_FAIL(BLOB_ECUDA, "fake: no graph capture");
}

static blob_status fake_graph_launch(void *exec, void *s)
{
    (void)exec, (void)s;
    return BLOB_FAIL(BLOB_ECUDA, "fake: no graph capture");
}

static void fake_graph_destroy(void *graph, void *exec) { (void)graph, (void)exec; }

static blob_status fake_graph_count_nodes(void *graph, int64_t *kernels, int64_t *host,
                                          int64_t *total)
{
    (void)graph, (void)kernels, (void)host, (void)total;
    return BLOB_FAIL(BLOB_ECUDA, "fake: no graph capture");
}

/* The fake captures nothing, and every event keeps its time. */
#define fake_event_record_external fake_event_record
#define fake_event_create_timed    fake_event_create

static const blob__backend fake_backend = {.name = "fake", BLOB__BACKEND_ENTRIES(fake)};

static void empty_all_caches(void)
{
    blob_alloc_empty_cache(blob_place_host());
    blob_alloc_empty_cache(blob_place_pinned());
    for (int d = 0; d < FAKE_DEVICES; d++)
        blob_alloc_empty_cache(blob_place_device(d));
}

void fake_install(void)
{
    pthread_mutex_lock(&fake_mu);
    memset(&stats, 0, sizeof stats);
    attempts = fail_at = 0;
    fail_persistent = fail_copies = false;
    pthread_mutex_unlock(&fake_mu);
    current_device = 0;
    blob_stream_set(NULL);
    blob__backend_install(&fake_backend);
}

int64_t fake_uninstall(void)
{
    pthread_mutex_lock(&fake_mu);
    fail_at = 0;
    fail_copies = false;
    pthread_mutex_unlock(&fake_mu);
    fake_drain();
    blob_stream_set(NULL);
    empty_all_caches(); /* not under fake_mu: the allocator takes its own locks first */
    blob__stream_pool_drain();
    pthread_mutex_lock(&fake_mu);
    int64_t live = stats.live_blocks + stats.live_host_blocks;
    pthread_mutex_unlock(&fake_mu);
    blob__backend_install(NULL);
    return live;
}

fake_stats fake_get_stats(void)
{
    pthread_mutex_lock(&fake_mu);
    fake_stats s = stats;
    pthread_mutex_unlock(&fake_mu);
    return s;
}

void fake_reset_counts(void)
{
    pthread_mutex_lock(&fake_mu);
    fake_stats keep = stats;
    memset(&stats, 0, sizeof stats);
    stats.live_blocks = keep.live_blocks;
    stats.live_host_blocks = keep.live_host_blocks;
    stats.live_pinned_bytes = keep.live_pinned_bytes;
    stats.live_device_bytes = keep.live_device_bytes;
    stats.violations = keep.violations;
    pthread_mutex_unlock(&fake_mu);
}

void fake_fail_alloc_at(uint64_t n, bool persistent)
{
    pthread_mutex_lock(&fake_mu);
    fail_at = n ? attempts + n : 0;
    fail_persistent = persistent;
    pthread_mutex_unlock(&fake_mu);
}

uint64_t fake_alloc_attempts(void)
{
    pthread_mutex_lock(&fake_mu);
    uint64_t n = attempts;
    pthread_mutex_unlock(&fake_mu);
    return n;
}

void fake_fail_copies(bool fail)
{
    pthread_mutex_lock(&fake_mu);
    fail_copies = fail;
    pthread_mutex_unlock(&fake_mu);
}
