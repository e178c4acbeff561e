/* The allocators of every place. One caching engine serves the pinned place and each
 * device; pageable host memory goes straight to the backend, with statistics.
 *
 * Sizes. Requests are rounded up to 512 B. Those under 1 MiB are carved from 2 MiB
 * segments (the small pool), the others from the large pool, whose segments are the
 * request rounded up to 2 MiB (the driver's page) on a device and to 1/8 of its power of
 * two for pinned memory, so pinned host memory never exceeds a large request by more
 * than 1/8 (power-of-two rounding doubles it). Segments sized to their first request
 * keep reserved memory close to what is in use; the cache then serves the steady state.
 * A block is split when the rest would waste more than 1/8 of the request.
 *
 * Structures. A segment is a list of blocks in address order; a freed block merges with
 * free neighbours. Free blocks sit in a treap per pool ordered by (stream, size,
 * address), so best fit on a stream is a lower bound. Blocks in use are found by
 * address in a hash table.
 *
 * Streams. A block belongs to the stream it was allocated on and is reused there. At
 * free an event is recorded on each other stream that used it, and the block waits in a
 * pending list; the events are queried only when the free blocks cannot serve a request.
 *
 * Locking. A mutex per place; the driver allocates and frees outside it.
 *
 * Backends. Every block, cached segment and idle event of a place is given back through
 * the backend table that allocated it, whichever table is installed by then. While a
 * place holds anything of one table it refuses requests under another (BLOB_EBUSY). So
 * before blob__backend_install switches tables: free every block, then call
 * blob_alloc_empty_cache for every place. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob/alloc.h"
#include "../core/core.h"
#include "../core/env.h"

#define MIB           ((size_t)1 << 20)
#define ROUND         ((size_t)512)
#define SMALL_MAX     MIB /* requests below go to the small pool */
#define SMALL_SEGMENT (2 * MIB)
#define DEVICE_PAGE   (2 * MIB)
#define MAX_REQUEST   (SIZE_MAX / 4)
#define MAX_DEVICES   64
#define N_PLACES      (2 + MAX_DEVICES)

enum { SMALL, LARGE };
enum { FREE, USED, PENDING };

typedef struct block block;
struct block {
    char *ptr;
    size_t size;
    void *stream;        /* owner: allocated on, reused on */
    block *prev, *next;  /* neighbours in the segment, in address order */
    block *link;         /* hash chain (used), pending list, or a list being released */
    block *left, *right; /* treap children (free) */
    void **uses;         /* other streams (used), then their events (pending) */
    unsigned n_uses, cap_uses;
    uint32_t prio;
    unsigned char state, pool;
    bool cached; /* false: a segment of its own, given back when freed */
};

typedef struct {
    pthread_mutex_t mu;
    blob_place_kind kind;
    int device;
    char name[16];
    const blob__backend *be; /* the table that allocated what the place holds */
    block *free[2];          /* treaps of the small and large pools */
    block **buckets;         /* blocks in use, by address */
    unsigned bits;           /* log2 of the bucket count */
    size_t n_used;
    block *pending;
    void **spare; /* idle events */
    size_t n_spare, cap_spare;
    blob_alloc_stats st; /* st.cached_limit is the cap */
} place_state;

static place_state places[N_PLACES];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool caching;     /* BLOB_ALLOC_CACHE's until set */
static atomic_bool caching_set; /* by the program: the environment's no longer matters */
static blob__env_fault caching_fault;

static void init(void)
{
    for (int i = 0; i < N_PLACES; i++) {
        place_state *pl = &places[i];
        pthread_mutex_init(&pl->mu, NULL);
        pl->kind = i < 2 ? (blob_place_kind)i : BLOB_PLACE_DEVICE;
        pl->device = i < 2 ? 0 : i - 2;
        if (i < 2)
            snprintf(pl->name, sizeof pl->name, "%s", i ? "pinned host" : "host");
        else
            snprintf(pl->name, sizeof pl->name, "device %d", pl->device);
        pl->st.cached_limit = SIZE_MAX;
    }
    bool on = true;
    blob__env_keep(&caching_fault, blob__env_bool(NULL, "BLOB_ALLOC_CACHE", &on));
    atomic_store(&caching, on);
}

static blob_status find_place(const char *func, blob_place place, place_state **out)
{
    *out = NULL;
    pthread_once(&once, init);
    switch (place.kind) {
    case BLOB_PLACE_HOST:
    case BLOB_PLACE_PINNED:
        if (place.device != 0)
            return blob__fail(BLOB_EINVAL, func, "host place with device %d", place.device);
        *out = &places[place.kind];
        return BLOB_OK;
    case BLOB_PLACE_DEVICE: {
        int n = blob__be->device_count();
        if (place.device < 0)
            return blob__fail(BLOB_EINVAL, func, "bad device %d", place.device);
        if (place.device >= n || place.device >= MAX_DEVICES)
            return blob__fail(BLOB_ERANGE, func, "no GPU %d (%d present, %d supported)",
                              place.device, n, MAX_DEVICES);
        *out = &places[2 + place.device];
        return BLOB_OK;
    }
    }
    return blob__fail(BLOB_EINVAL, func, "bad place kind %d", (int)place.kind);
}

static void lock(place_state *pl) { pthread_mutex_lock(&pl->mu); }
static void unlock(place_state *pl) { pthread_mutex_unlock(&pl->mu); }

/* find_place, then the place's lock taken (the caller unlocks). */
static blob_status lock_place(const char *func, blob_place place, place_state **out)
{
    BLOB_TRY(find_place(func, place, out));
    lock(*out);
    return BLOB_OK;
}

static size_t round_up(size_t n, size_t step) /* step is a power of two */
{
    return (n + step - 1) & ~(step - 1);
}

static size_t segment_size(blob_place_kind kind, size_t need)
{
    if (need < SMALL_MAX)
        return SMALL_SEGMENT;
    if (kind == BLOB_PLACE_PINNED)
        return round_up(need, ((size_t)1 << (63 - __builtin_clzll(need))) / 8);
    return round_up(need, DEVICE_PAGE);
}

static blob_status oom_status(const place_state *pl)
{
    return pl->kind == BLOB_PLACE_DEVICE ? BLOB_EDEVMEM : BLOB_ENOMEM;
}

static uint64_t mix(const void *p) { return (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull; }

/* ---- blocks in use, by address ---- */

static block **bucket(const place_state *pl, const void *p)
{
    return &pl->buckets[mix(p) >> (64 - pl->bits)];
}

static bool hash_grow(place_state *pl)
{
    unsigned bits = pl->buckets ? pl->bits + 1 : 8;
    block **nb = calloc((size_t)1 << bits, sizeof *nb);
    if (!nb)
        return false;
    for (size_t i = 0; pl->buckets && i < (size_t)1 << pl->bits; i++) {
        for (block *b = pl->buckets[i], *nx; b; b = nx) {
            nx = b->link;
            block **head = &nb[mix(b->ptr) >> (64 - bits)];
            b->link = *head;
            *head = b;
        }
    }
    free(pl->buckets);
    pl->buckets = nb;
    pl->bits = bits;
    return true;
}

static void hash_put(place_state *pl, block *b)
{
    if (pl->n_used >= (size_t)1 << pl->bits)
        (void)hash_grow(pl); /* without memory, chains grow longer */
    block **head = bucket(pl, b->ptr);
    b->link = *head;
    *head = b;
    pl->n_used++;
}

static block *hash_find(const place_state *pl, const void *p)
{
    block *b = pl->buckets ? *bucket(pl, p) : NULL;
    while (b && b->ptr != p)
        b = b->link;
    return b;
}

static block *hash_take(place_state *pl, const void *p)
{
    if (!pl->buckets)
        return NULL;
    for (block **pp = bucket(pl, p); *pp; pp = &(*pp)->link) {
        block *b = *pp;
        if (b->ptr == p) {
            *pp = b->link;
            pl->n_used--;
            return b;
        }
    }
    return NULL;
}

/* ---- free blocks: a treap per pool ordered by (stream, size, address) ---- */

static bool before(const block *a, const void *stream, size_t size, const char *ptr)
{
    if (a->stream != stream)
        return (uintptr_t)a->stream < (uintptr_t)stream;
    if (a->size != size)
        return a->size < size;
    return (uintptr_t)a->ptr < (uintptr_t)ptr;
}

/* The rotations of the treap: t's left (right) child takes t's place, with t as its right
 * (left) child; returns the new root of the subtree. */
static block *rotate_right(block *t)
{
    block *l = t->left;
    t->left = l->right;
    l->right = t;
    return l;
}

static block *rotate_left(block *t)
{
    block *r = t->right;
    t->right = r->left;
    r->left = t;
    return r;
}

static block *tree_insert(block *t, block *b)
{
    if (!t)
        return b;
    if (before(b, t->stream, t->size, t->ptr)) {
        t->left = tree_insert(t->left, b);
        return t->left->prio > t->prio ? rotate_right(t) : t;
    }
    t->right = tree_insert(t->right, b);
    return t->right->prio > t->prio ? rotate_left(t) : t;
}

static block *tree_join(block *a, block *b) /* every key of a precedes every key of b */
{
    if (!a || !b)
        return a ? a : b;
    if (a->prio > b->prio) {
        a->right = tree_join(a->right, b);
        return a;
    }
    b->left = tree_join(a, b->left);
    return b;
}

static block *tree_remove(block *t, const block *b)
{
    if (t == b)
        return tree_join(t->left, t->right);
    if (before(b, t->stream, t->size, t->ptr))
        t->left = tree_remove(t->left, b);
    else
        t->right = tree_remove(t->right, b);
    return t;
}

static void free_add(place_state *pl, block *b)
{
    b->state = FREE;
    b->left = b->right = NULL;
    b->prio = (uint32_t)(mix(b->ptr) >> 32);
    pl->free[b->pool] = tree_insert(pl->free[b->pool], b);
}

static void free_del(place_state *pl, block *b)
{
    pl->free[b->pool] = tree_remove(pl->free[b->pool], b);
}

/* Take the smallest free block of `stream` with at least `need` bytes out of its pool. */
static block *take(place_state *pl, void *stream, size_t need)
{
    block *fit = NULL;
    for (block *t = pl->free[need < SMALL_MAX ? SMALL : LARGE]; t;) {
        if (before(t, stream, need, NULL)) {
            t = t->right;
        } else {
            fit = t;
            t = t->left;
        }
    }
    if (!fit || fit->stream != stream)
        return NULL;
    free_del(pl, fit);
    return fit;
}

/* Hand b out for a request of `bytes` (`need` rounded), splitting off the rest when it
 * would waste more than 1/8 of the request. */
static void hand_out(place_state *pl, block *b, size_t need, size_t bytes)
{
    if (b->size > need && b->size - bytes > bytes / 8) {
        block *r = malloc(sizeof *r);
        if (r) { /* without a record for the rest, b is handed out whole */
            *r = (block){.ptr = b->ptr + need,
                         .size = b->size - need,
                         .stream = b->stream,
                         .prev = b,
                         .next = b->next,
                         .pool = b->pool,
                         .cached = true};
            if (b->next)
                b->next->prev = r;
            b->next = r;
            b->size = need;
            free_add(pl, r);
        }
    }
    b->state = USED;
    hash_put(pl, b);
    pl->st.requests++;
    pl->st.in_use += b->size;
    if (pl->st.in_use > pl->st.in_use_peak)
        pl->st.in_use_peak = pl->st.in_use;
}

/* Join block a and its successor in the segment into a, freeing the successor's record. */
static void join_next(block *a)
{
    block *n = a->next;
    a->size += n->size;
    a->next = n->next;
    if (n->next)
        n->next->prev = a;
    free(n);
}

/* Return b to its pool, merged with its free neighbours. */
static void make_free(place_state *pl, block *b)
{
    free(b->uses);
    b->uses = NULL;
    b->n_uses = b->cap_uses = 0;
    block *n = b->next, *p = b->prev;
    if (n && n->state == FREE) {
        free_del(pl, n);
        join_next(b);
    }
    if (p && p->state == FREE) {
        free_del(pl, p);
        join_next(p);
        b = p;
    }
    free_add(pl, b);
}

/* ---- streams and events ---- */

/* Make the place's GPU current for a driver call that needs it; returns the device to
 * restore, or -1. */
static int enter_device(const place_state *pl, const blob__backend *be)
{
    int cur;
    if (pl->kind == BLOB_PLACE_DEVICE && be->get_device(&cur) == BLOB_OK && cur != pl->device &&
        be->set_device(pl->device) == BLOB_OK)
        return cur;
    return -1;
}

static void leave_device(const blob__backend *be, int prev)
{
    if (prev >= 0)
        (void)be->set_device(prev);
}

static void recycle_event(place_state *pl, void *ev)
{
    if (pl->n_spare == pl->cap_spare) {
        size_t cap = pl->cap_spare ? 2 * pl->cap_spare : 16;
        void **s = realloc(pl->spare, cap * sizeof *s);
        if (!s) {
            pl->be->event_destroy(ev);
            return;
        }
        pl->spare = s;
        pl->cap_spare = cap;
    }
    pl->spare[pl->n_spare++] = ev;
}

/* A freed block used on other streams: record an event on each and keep the block
 * pending until they complete. A stream whose event cannot be recorded is synchronised. */
static void defer(place_state *pl, block *b)
{
    const blob__backend *be = pl->be;
    int prev = enter_device(pl, be);
    unsigned k = 0;
    for (unsigned i = 0; i < b->n_uses; i++) {
        void *s = b->uses[i], *ev = pl->n_spare ? pl->spare[--pl->n_spare] : NULL;
        if ((ev || be->event_create(&ev) == BLOB_OK) && be->event_record(ev, s) == BLOB_OK) {
            b->uses[k++] = ev;
            continue;
        }
        be->event_destroy(ev);
        if (be->stream_synchronize(s) != BLOB_OK)
            (void)be->device_synchronize();
    }
    leave_device(be, prev);
    b->n_uses = k;
    if (!k) {
        make_free(pl, b);
        return;
    }
    b->state = PENDING;
    b->link = pl->pending;
    pl->pending = b;
}

/* Return pending blocks whose events have all completed to their pools; with `wait`,
 * wait for every event first. */
static void poll(place_state *pl, bool wait)
{
    if (!pl->pending)
        return;
    int prev = enter_device(pl, pl->be);
    for (block **pp = &pl->pending; *pp;) {
        block *b = *pp;
        unsigned k = 0;
        for (unsigned i = 0; i < b->n_uses; i++) {
            void *ev = b->uses[i];
            bool done = true;
            if (wait)
                (void)pl->be->event_synchronize(ev);
            else if (pl->be->event_query(ev, &done) != BLOB_OK)
                done = false;
            if (done)
                recycle_event(pl, ev);
            else
                b->uses[k++] = ev;
        }
        b->n_uses = k;
        if (k) {
            pp = &b->link;
        } else {
            *pp = b->link;
            make_free(pl, b);
        }
    }
    leave_device(pl->be, prev);
}

/* ---- giving memory back ---- */

static size_t cached(const place_state *pl) { return pl->st.reserved - pl->st.in_use; }

/* A segment leaves the place: account for it and add it to the list *out. */
static void unreserve(place_state *pl, block *b, block **out)
{
    pl->st.reserved -= b->size;
    pl->st.driver_frees++;
    b->link = *out;
    *out = b;
}

static void whole_segments(block *t, block **list)
{
    if (!t)
        return;
    whole_segments(t->left, list);
    whole_segments(t->right, list);
    if (!t->prev && !t->next) {
        t->link = *list;
        *list = t;
    }
}

/* Unlink free whole segments into *out until at most `limit` bytes are cached. */
static void trim(place_state *pl, size_t limit, block **out)
{
    if (cached(pl) <= limit)
        return;
    block *cand = NULL;
    whole_segments(pl->free[SMALL], &cand);
    whole_segments(pl->free[LARGE], &cand);
    for (block *b = cand, *nx; b && cached(pl) > limit; b = nx) {
        nx = b->link;
        free_del(pl, b);
        unreserve(pl, b, out);
    }
}

/* Give segments back to the driver of `be` once the device is idle (cudaFree would wait
 * for it anyway; the fake device would not). */
static void release(const place_state *pl, const blob__backend *be, block *list)
{
    if (!list)
        return;
    int prev = enter_device(pl, be);
    if (pl->kind != BLOB_PLACE_HOST)
        (void)be->device_synchronize();
    while (list) {
        block *b = list;
        list = b->link;
        if (pl->kind == BLOB_PLACE_DEVICE)
            be->device_free(b->ptr);
        else if (pl->kind == BLOB_PLACE_PINNED)
            be->pinned_free(b->ptr);
        else
            be->host_free(b->ptr);
        free(b->uses);
        free(b);
    }
    leave_device(be, prev);
}

/* Wait for pending blocks, give every free whole segment back, destroy idle events. */
static void drop_cache(place_state *pl)
{
    block *out = NULL;
    lock(pl);
    const blob__backend *be = pl->be;
    poll(pl, true);
    trim(pl, 0, &out);
    while (pl->n_spare)
        be->event_destroy(pl->spare[--pl->n_spare]);
    unlock(pl);
    release(pl, be, out);
}

/* ---- allocation ---- */

static blob_status driver_alloc(blob_place_kind kind, size_t bytes, void **p)
{
    if (kind == BLOB_PLACE_DEVICE)
        return blob__be->device_alloc(bytes, p);
    if (kind == BLOB_PLACE_PINNED)
        return blob__be->pinned_alloc(bytes, p);
    return blob__be->host_alloc(bytes, p);
}

static blob_status oom(const char *func, place_state *pl, size_t bytes)
{
    lock(pl);
    pl->st.oom_count++;
    size_t in_use = pl->st.in_use, reserved = pl->st.reserved;
    unlock(pl);
    return blob__fail(oom_status(pl), func,
                      "%s: out of memory for %zu bytes (in use %zu, reserved %zu)", pl->name, bytes,
                      in_use, reserved);
}

/* Under the lock: may the place serve a request through the installed table? */
static blob_status admit(const char *func, place_state *pl)
{
    if ((pl->st.reserved || pl->n_spare) && pl->be != blob__be)
        return blob__fail(BLOB_EBUSY, func, "%s still holds memory of backend %s", pl->name,
                          pl->be->name);
    if (!pl->buckets && !hash_grow(pl))
        return blob__fail(BLOB_ENOMEM, func, "%s: no memory for the allocator's table", pl->name);
    return BLOB_OK;
}

/* Serve a request with new driver memory: a segment for the pool, or with caching off
 * exactly `bytes` as a segment of its own. Out of memory: drop the cache, ask again. */
static blob_status grow(const char *func, place_state *pl, size_t need, size_t bytes, void *stream,
                        bool cache, void **out)
{
    size_t size = cache ? segment_size(pl->kind, need) : bytes;
    block *b = malloc(sizeof *b);
    if (!b)
        return blob__fail(BLOB_ENOMEM, func, "%s: no memory for a block record", pl->name);
    void *p = NULL;
    blob_status st = driver_alloc(pl->kind, size, &p);
    if (st == oom_status(pl)) {
        drop_cache(pl);
        st = driver_alloc(pl->kind, size, &p);
    }
    if (st != BLOB_OK) {
        free(b);
        return st == oom_status(pl) ? oom(func, pl, size) : st;
    }
    *b = (block){.ptr = p,
                 .size = size,
                 .stream = stream,
                 .pool = need < SMALL_MAX ? SMALL : LARGE,
                 .cached = cache};
    lock(pl);
    pl->be = blob__be;
    pl->st.driver_allocs++;
    pl->st.reserved += size;
    if (pl->st.reserved > pl->st.reserved_peak)
        pl->st.reserved_peak = pl->st.reserved;
    hand_out(pl, b, cache ? need : size, bytes);
    *out = b->ptr;
    unlock(pl);
    return BLOB_OK;
}

blob_status blob_place_alloc(blob_place place, size_t bytes, void *stream, void **out)
{
    place_state *pl;
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    BLOB_TRY(find_place(__func__, place, &pl));
    if (!atomic_load(&caching_set))
        BLOB_TRY(blob__env_raise(&caching_fault, __func__));
    if (!bytes)
        return BLOB_OK;
    if (place.kind == BLOB_PLACE_DEVICE)
        BLOB_TRY(blob__check_device(__func__, place.device));
    if (bytes > MAX_REQUEST)
        return oom(__func__, pl, bytes);
    bool cache = place.kind != BLOB_PLACE_HOST && atomic_load(&caching);
    size_t need = round_up(bytes, ROUND);
    block *b = NULL;
    lock(pl);
    blob_status st = admit(__func__, pl);
    if (st == BLOB_OK && cache) {
        b = take(pl, stream, need);
        if (!b && pl->pending) {
            poll(pl, false);
            b = take(pl, stream, need);
        }
        if (b) {
            pl->st.cache_hits++;
            hand_out(pl, b, need, bytes);
            *out = b->ptr;
        }
    }
    unlock(pl);
    if (st != BLOB_OK || b)
        return st;
    return grow(__func__, pl, need, bytes, stream, cache, out);
}

void blob_place_free(blob_place place, void *p)
{
    place_state *pl;
    if (!p || find_place(__func__, place, &pl) != BLOB_OK)
        return;
    block *out = NULL;
    lock(pl);
    const blob__backend *be = pl->be;
    block *b = hash_take(pl, p);
    if (b) {
        pl->st.in_use -= b->size;
        bool cache = atomic_load(&caching);
        if (!b->cached) {
            unreserve(pl, b, &out);
        } else {
            if (b->n_uses)
                defer(pl, b);
            else
                make_free(pl, b);
            if (!cache)
                poll(pl, true);
            trim(pl, cache ? pl->st.cached_limit : 0, &out);
        }
    }
    unlock(pl);
    release(pl, be, out);
}

static blob_status add_use(const char *func, block *b, void *stream)
{
    for (unsigned i = 0; i < b->n_uses; i++)
        if (b->uses[i] == stream)
            return BLOB_OK;
    if (b->n_uses == b->cap_uses) {
        unsigned cap = b->cap_uses ? 2 * b->cap_uses : 2;
        void **u = realloc(b->uses, cap * sizeof *u);
        if (!u)
            return blob__fail(BLOB_ENOMEM, func, "no memory to record a stream");
        b->uses = u;
        b->cap_uses = cap;
    }
    b->uses[b->n_uses++] = stream;
    return BLOB_OK;
}

blob_status blob_place_record_stream(blob_place place, void *p, void *stream)
{
    place_state *pl;
    BLOB_TRY(lock_place(__func__, place, &pl));
    blob_status st = BLOB_OK;
    block *b = p ? hash_find(pl, p) : NULL;
    if (!b)
        st = BLOB_FAIL(BLOB_EINVAL, "%p is not a block in use at %s", p, pl->name);
    else if (b->cached && stream != b->stream) /* a segment of its own waits at free */
        st = add_use(__func__, b, stream);
    unlock(pl);
    return st;
}

/* ---- public ---- */

blob_status blob_alloc_get_stats(blob_place place, blob_alloc_stats *out)
{
    place_state *pl;
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    BLOB_TRY(lock_place(__func__, place, &pl));
    *out = pl->st;
    unlock(pl);
    return BLOB_OK;
}

blob_status blob_alloc_reset_peaks(blob_place place)
{
    place_state *pl;
    BLOB_TRY(lock_place(__func__, place, &pl));
    pl->st.in_use_peak = pl->st.in_use;
    pl->st.reserved_peak = pl->st.reserved;
    unlock(pl);
    return BLOB_OK;
}

blob_status blob_alloc_empty_cache(blob_place place)
{
    place_state *pl;
    BLOB_TRY(find_place(__func__, place, &pl));
    drop_cache(pl);
    return BLOB_OK;
}

blob_status blob_alloc_set_cache_limit(blob_place place, size_t bytes)
{
    place_state *pl;
    BLOB_TRY(lock_place(__func__, place, &pl));
    block *out = NULL;
    const blob__backend *be = pl->be;
    pl->st.cached_limit = bytes;
    trim(pl, bytes, &out);
    unlock(pl);
    release(pl, be, out);
    return BLOB_OK;
}

blob_status blob_alloc_set_caching(bool enabled)
{
    pthread_once(&once, init);
    atomic_store(&caching, enabled);
    atomic_store(&caching_set, true);
    if (enabled)
        return BLOB_OK;
    int n = blob__be->device_count();
    for (int i = 0; i < 2 + (n < MAX_DEVICES ? n : MAX_DEVICES); i++)
        drop_cache(&places[i]);
    return BLOB_OK;
}

bool blob_alloc_caching(void)
{
    pthread_once(&once, init);
    return atomic_load(&caching);
}
