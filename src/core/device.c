#include <pthread.h>
#include <stdlib.h>

#include "blob/device.h"
#include "core.h"

/* Read on every device call: the initial-exec model makes each read a plain load
 * instead of a __tls_get_addr call (a few bytes of static TLS). */
#define HOT_TLS _Thread_local __attribute__((tls_model("initial-exec")))

static HOT_TLS void *current_stream;

/* The thread's current device, valid while generation matches the backend's. */
static HOT_TLS struct {
    bool known;
    unsigned generation;
    int device;
} current;

static void remember_device(int device)
{
    current.known = true;
    current.generation = blob__backend_generation;
    current.device = device;
}

blob_status blob__current_device(int *device)
{
    if (!current.known || current.generation != blob__backend_generation) {
        int d;
        BLOB_TRY(blob__be->get_device(&d));
        remember_device(d);
    }
    *device = current.device;
    return BLOB_OK;
}

int blob_device_count(void) { return blob__be->device_count(); }

blob_status blob__require_gpu(const char *func)
{
    if (blob__be->device_count() <= 0)
        return blob__fail(BLOB_ENODEV, func, "no GPU found (backend %s)", blob__be->name);
    return BLOB_OK;
}

blob_status blob_device_get(int *device)
{
    if (!device)
        return BLOB_FAIL(BLOB_EINVAL, "device is NULL");
    BLOB_TRY(blob__require_gpu(__func__));
    int d;
    BLOB_TRY(blob__be->get_device(&d));
    remember_device(d);
    *device = d;
    return BLOB_OK;
}

blob_status blob_device_set(int device)
{
    BLOB_TRY(blob__require_gpu(__func__));
    if (device < 0 || device >= blob__be->device_count())
        return BLOB_FAIL(BLOB_ERANGE, "device %d not in [0, %d)", device, blob__be->device_count());
    BLOB_TRY(blob__be->set_device(device));
    remember_device(device);
    return BLOB_OK;
}

blob_status blob_device_synchronize(void)
{
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__be->device_synchronize();
}

/* Streams of blob_stream_create are pooled, never destroyed: blocks keep naming the
 * streams they were used on (for ordering, and in the allocator's records of their
 * users) after the caller is done with them, so those streams must stay valid. */
typedef struct {
    void *stream;
    const blob__backend *be; /* the table that made it */
    int device;
    int priority;
    bool in_use;
} pooled_stream;

/* items (len used of *cap, of size bytes each) with room for one more: as it is, or
 * reallocated to twice the capacity (8 at first); NULL when out of memory, items kept. */
static void *with_room(void *items, size_t *cap, size_t len, size_t size)
{
    if (len < *cap)
        return items;
    size_t more = *cap ? 2 * *cap : 8;
    void *p = realloc(items, more * size);
    if (p)
        *cap = more;
    return p;
}

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pooled_stream *pool;
static size_t pool_len, pool_cap;

/* A pooled stream of that priority for fn (the public function called). */
static blob_status create_stream(const char *fn, void **stream, int priority)
{
    if (!stream)
        return blob__fail(BLOB_EINVAL, fn, "stream is NULL");
    *stream = NULL;
    if (priority < 0)
        return blob__fail(BLOB_EINVAL, fn, "negative priority %d", priority);
    BLOB_TRY(blob__require_gpu(fn));
    int device;
    BLOB_TRY(blob__current_device(&device));
    pthread_mutex_lock(&pool_mu);
    for (size_t i = 0; i < pool_len; i++) {
        if (!pool[i].in_use && pool[i].device == device && pool[i].be == blob__be &&
            pool[i].priority == priority) {
            pool[i].in_use = true;
            *stream = pool[i].stream;
            pthread_mutex_unlock(&pool_mu);
            return BLOB_OK;
        }
    }
    blob_status st = BLOB_OK;
    pooled_stream *grown = with_room(pool, &pool_cap, pool_len, sizeof *pool);
    if (grown)
        pool = grown;
    else
        st = blob__fail(BLOB_ENOMEM, fn, "no memory for the stream pool");
    void *s = NULL;
    if (st == BLOB_OK)
        st = blob__be->stream_create(&s, priority);
    if (st == BLOB_OK) {
        pool[pool_len++] = (pooled_stream){s, blob__be, device, priority, true};
        *stream = s;
    }
    pthread_mutex_unlock(&pool_mu);
    return st;
}

blob_status blob_stream_create(void **stream) { return create_stream(__func__, stream, 0); }

blob_status blob_stream_create_with_priority(void **stream, int priority)
{
    return create_stream(__func__, stream, priority);
}

blob_status blob_stream_destroy(void *stream)
{
    if (!stream)
        return BLOB_OK;
    BLOB_TRY(blob__require_gpu(__func__));
    pthread_mutex_lock(&pool_mu);
    size_t i = 0;
    while (i < pool_len && !(pool[i].stream == stream && pool[i].in_use))
        i++;
    if (i < pool_len)
        pool[i].in_use = false;
    pthread_mutex_unlock(&pool_mu);
    if (i == pool_len)
        return BLOB_FAIL(BLOB_EINVAL, "%p is not a live stream of blob_stream_create", stream);
    return BLOB_OK;
}

/* Idle events of blob_stream_wait_stream (under pool_mu). A wait takes the event as it
 * was recorded at the call, so an event is idle again as soon as its wait is queued: the
 * pool holds about one event per device and thread waiting at once. */
typedef struct {
    void *event;
    const blob__backend *be; /* the table that made it */
    int device;
} pooled_event;

static pooled_event *idle_events;
static size_t idle_len, idle_cap;

/* An idle event of the current table and device, or a new one. */
static blob_status take_event(int device, void **event)
{
    pthread_mutex_lock(&pool_mu);
    for (size_t i = 0; i < idle_len; i++)
        if (idle_events[i].device == device && idle_events[i].be == blob__be) {
            *event = idle_events[i].event;
            idle_events[i] = idle_events[--idle_len];
            pthread_mutex_unlock(&pool_mu);
            return BLOB_OK;
        }
    pthread_mutex_unlock(&pool_mu);
    return blob__be->event_create(event);
}

/* Keep the event for the next wait (destroy it if the pool cannot grow). */
static void give_event(int device, void *event)
{
    pthread_mutex_lock(&pool_mu);
    pooled_event *grown = with_room(idle_events, &idle_cap, idle_len, sizeof *idle_events);
    if (grown)
        idle_events = grown;
    bool kept = grown != NULL;
    if (kept)
        idle_events[idle_len++] = (pooled_event){event, blob__be, device};
    pthread_mutex_unlock(&pool_mu);
    if (!kept)
        blob__be->event_destroy(event);
}

blob_status blob_stream_wait_stream(void *stream, void *waited_stream)
{
    BLOB_TRY(blob__require_gpu(__func__));
    if (stream == waited_stream)
        return BLOB_OK;
    int device;
    void *event;
    BLOB_TRY(blob__current_device(&device));
    BLOB_TRY(take_event(device, &event));
    blob_status st = blob__be->event_record(event, waited_stream);
    if (st == BLOB_OK)
        st = blob__be->stream_wait_event(stream, event);
    give_event(device, event);
    return st;
}

struct blob_event {
    void *event;
    int device;
};

blob_status blob_event_create(blob_event **out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    BLOB_TRY(blob__require_gpu(__func__));
    int device;
    BLOB_TRY(blob__current_device(&device));
    blob_event *e = blob__obj_alloc(sizeof *e);
    if (!e)
        return BLOB_ENOMEM;
    blob_status st = blob__be->event_create(&e->event);
    if (st != BLOB_OK) {
        blob__obj_free(e);
        return st;
    }
    e->device = device;
    *out = e;
    return BLOB_OK;
}

void blob_event_free(blob_event *e)
{
    if (!e)
        return;
    blob__be->event_destroy(e->event);
    blob__obj_free(e);
}

/* The checks before an event is used: not NULL, a GPU, and its device current. */
static blob_status usable(const blob_event *e, const char *func)
{
    if (!e)
        return blob__fail(BLOB_EINVAL, func, "event is NULL");
    BLOB_TRY(blob__require_gpu(func));
    return blob__check_device(func, e->device);
}

blob_status blob_event_record(blob_event *e, void *stream)
{
    BLOB_TRY(usable(e, __func__));
    return blob__be->event_record_external(e->event, stream);
}

blob_status blob_stream_wait_event(void *stream, blob_event *e)
{
    BLOB_TRY(usable(e, __func__));
    return blob__be->stream_wait_event(stream, e->event);
}

blob_status blob_event_synchronize(blob_event *e)
{
    BLOB_TRY(usable(e, __func__));
    return blob__be->event_synchronize(e->event);
}

void blob__stream_pool_drain(void)
{
    pthread_mutex_lock(&pool_mu);
    size_t kept = 0;
    for (size_t i = 0; i < pool_len; i++) {
        if (pool[i].in_use || pool[i].be != blob__be)
            pool[kept++] = pool[i];
        else
            blob__be->stream_destroy(pool[i].stream);
    }
    pool_len = kept;
    kept = 0;
    for (size_t i = 0; i < idle_len; i++) {
        if (idle_events[i].be != blob__be)
            idle_events[kept++] = idle_events[i];
        else
            blob__be->event_destroy(idle_events[i].event);
    }
    idle_len = kept;
    pthread_mutex_unlock(&pool_mu);
}

blob_status blob_stream_synchronize(void *stream)
{
    BLOB_TRY(blob__require_gpu(__func__));
    return blob__be->stream_synchronize(stream);
}

void blob_stream_set(void *stream) { current_stream = stream; }

void *blob_stream_get(void) { return current_stream; }

void *blob__stream_enter(void *stream)
{
    void *prev = current_stream;
    current_stream = stream;
    return prev;
}

void blob__stream_leave(void *prev) { current_stream = prev; }

blob_status blob__check_device(const char *func, int device)
{
    int cur;
    BLOB_TRY(blob__current_device(&cur));
    if (cur != device)
        return blob__fail(BLOB_EDEVICE, func, "object is on GPU %d but GPU %d is current", device,
                          cur);
    return BLOB_OK;
}
