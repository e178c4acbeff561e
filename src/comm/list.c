/* Lists of blobs: the registration check across ranks, the bucket plan, broadcast, and
 * the bucketed all-reduce of diffs, overlapped with the caller's backward. */
#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "blob/alloc.h"
#include "blob/device.h"
#include "../core/core.h"
#include "../kernels/kernels.h"
#include "watch.h"

/* ---- the pure pieces ---- */

int blob__comm_plan(const int64_t *counts, int n, int64_t bucket_elems, blob__comm_bucket *out,
                    int max)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += counts[i];
    int num = 0;
#define EMIT(b, e)                                            \
    do {                                                      \
        if (num < max)                                        \
            out[num] = (blob__comm_bucket){(b), (e), -1, -1}; \
        num++;                                                \
    } while (0)
    int64_t end = total; /* where the open bucket ends */
    int64_t size = 0;    /* elements in it: fewer than bucket_elems */
    for (int i = n - 1; i >= 0; i--) {
        int64_t rest = counts[i]; /* of blob i, not in a bucket yet */
        /* a blob that would bring it to 2 x bucket_elems: the bucket takes its end */
        while (rest - (bucket_elems - size) >= bucket_elems) {
            rest -= bucket_elems - size;
            EMIT(end - bucket_elems, end);
            end -= bucket_elems;
            size = 0;
        }
        size += rest;
        if (size >= bucket_elems) {
            EMIT(end - size, end);
            end -= size;
            size = 0;
        }
    }
    if (size > 0)
        EMIT(end - size, end);
#undef EMIT
    if (num > max)
        return num;
    for (int i = 0; i < num / 2; i++) { /* ascending */
        blob__comm_bucket t = out[i];
        out[i] = out[num - 1 - i];
        out[num - 1 - i] = t;
    }
    int b = 0;
    int64_t at = 0; /* first element of blob */
    for (int k = 0; k < num; k++) {
        while (at + counts[b] <= out[k].begin)
            at += counts[b++];
        out[k].first = b;
        int last = b;
        int64_t last_at = at;
        while (last_at + counts[last] < out[k].end)
            last_at += counts[last++];
        out[k].last = last;
    }
    return num;
}

bool blob__comm_contiguous(char *const *ptrs, const int64_t *counts, int first, int last,
                           size_t elem)
{
    const char *next = NULL; /* where the next blob's diff must start */
    for (int i = first; i <= last; i++) {
        if (counts[i] == 0)
            continue;
        if (next && ptrs[i] != next)
            return false;
        next = ptrs[i] + (size_t)counts[i] * elem;
    }
    return true;
}

static void describe(char *buf, size_t size, const blob__comm_entry *e, int64_t n)
{
    int64_t dtype = e->dtype & ~BLOB__COMM_ENTRY_BF16;
    if (e->dtype < 0)
        snprintf(buf, size, "no such blob (it registered %lld)", (long long)n);
    else
        snprintf(buf, size, "%lld %s elements%s", (long long)e->count,
                 dtype == BLOB_FLOAT32   ? "float32"
                 : dtype == BLOB_FLOAT64 ? "float64"
                                         : "unknown",
                 e->dtype & BLOB__COMM_ENTRY_BF16 ? " (reduced in bfloat16)" : "");
}

/* Whether a rank of this library can have sent h. */
static bool header_valid(const blob__comm_header *h)
{
    if (h->n < 0 || h->n > INT_MAX || h->bad_blob < -1 || h->bad_blob > INT_MAX)
        return false;
    if (h->status == BLOB_OK)
        return h->bad_blob == -1;
    return h->n == 0 && h->status < 0 && h->status > INT_MIN &&
           strcmp(blob_status_name((blob_status)h->status), "UNKNOWN") != 0;
}

blob_status blob__comm_table_length(const blob__comm_header *headers, int world, int64_t *len)
{
    *len = 0;
    int64_t shortest = INT64_MAX, longest = 0;
    for (int r = 0; r < world; r++) {
        const blob__comm_header *h = &headers[r];
        if (!header_valid(h))
            return blob__fail(BLOB_ECOMM, "blob_comm_list_create",
                              "rank %d sent a malformed registration (%lld blobs, status "
                              "%lld, blob at fault %lld)",
                              r, (long long)h->n, (long long)h->status, (long long)h->bad_blob);
        shortest = h->n < shortest ? h->n : shortest;
        longest = h->n > longest ? h->n : longest;
    }
    *len = shortest < longest ? shortest + 1 : longest;
    return BLOB_OK;
}

blob_status blob__comm_compare(const blob__comm_header *headers, const blob__comm_entry *tables,
                               int world, int64_t len)
{
    for (int r = 0; r < world; r++)
        if (headers[r].status != BLOB_OK) {
            char where[32] = "";
            if (headers[r].bad_blob >= 0)
                snprintf(where, sizeof where, "blob %lld: ", (long long)headers[r].bad_blob);
            return blob__fail((blob_status)headers[r].status, "blob_comm_list_create",
                              "rank %d could not register its list (%s%s; that rank's own "
                              "error says more)",
                              r, where, blob_strerror((blob_status)headers[r].status));
        }
    for (int64_t i = 0; i < len; i++)
        for (int r = 1; r < world; r++) {
            const blob__comm_entry *a = &tables[i], *b = &tables[r * len + i];
            if (a->count == b->count && a->dtype == b->dtype)
                continue;
            char da[64], db[64];
            describe(da, sizeof da, a, headers[0].n);
            describe(db, sizeof db, b, headers[r].n);
            return blob__fail(BLOB_ESHAPE, "blob_comm_list_create",
                              "the ranks registered different lists: blob %lld differs: rank 0 "
                              "has %s, rank %d has %s",
                              (long long)i, da, r, db);
        }
    return BLOB_OK;
}

/* ---- lists ---- */

/* Destroy the n events of *events (those made) and free the array. */
static void events_free(void ***events, int n)
{
    for (int i = 0; *events && i < n; i++)
        blob__be->event_destroy((*events)[i]);
    blob__obj_free(*events);
    *events = NULL;
}

static int timing_events(const blob_comm_list *l) { return 2 + 3 * l->num_buckets; }

static void list_release(blob_comm_list *l)
{
    events_free(&l->done, l->num_buckets);
    events_free(&l->timing, timing_events(l));
    blob__obj_free(l->blobs);
    blob__obj_free(l->counts);
    blob__obj_free(l->offset);
    blob__obj_free(l->buckets);
    blob__obj_free(l->replays);
    blob__obj_free(l->replay_dev);
    blob__obj_free(l->ready);
    blob__obj_free(l->dev);
    blob__obj_free(l);
}

/* The list's arrays for n blobs; a list with a NULL array means out of memory. */
static blob_comm_list *list_alloc(int n)
{
    blob_comm_list *l = blob__obj_alloc(sizeof *l);
    if (!l)
        return NULL;
    size_t un = (size_t)n;
    l->blobs = blob__obj_alloc(un * sizeof *l->blobs);
    l->counts = blob__obj_alloc(un * sizeof *l->counts);
    l->offset = blob__obj_alloc((un + 1) * sizeof *l->offset);
    l->ready = blob__obj_alloc(un * sizeof *l->ready);
    l->dev = blob__obj_alloc(un * sizeof *l->dev);
    return l;
}

/* This rank's own check of its list: BLOB_OK, or the status and *bad the blob at fault
 * (detail recorded under func). */
static blob_status check_blobs(const char *func, const blob_comm *c, blob *const *blobs, int n,
                               int *bad)
{
    *bad = -1;
    for (int i = 0; i < n; i++) {
        *bad = i;
        if (!blobs[i])
            return blob__fail(BLOB_EINVAL, func, "blob %d is NULL", i);
        if (blob_get_dtype(blobs[i]) != BLOB_FLOAT32 && blob_get_dtype(blobs[i]) != BLOB_FLOAT64)
            return blob__fail(BLOB_ENOTSUP, func,
                              "blob %d is %s: lists take float32 and "
                              "float64 blobs",
                              i, blob_dtype_name(blob_get_dtype(blobs[i])));
        if (blob_get_dtype(blobs[i]) != blob_get_dtype(blobs[0]))
            return blob__fail(BLOB_EINVAL, func,
                              "blob %d's dtype differs from blob 0's (a list "
                              "has one dtype)",
                              i);
        for (int j = 0; j < i; j++)
            if (blobs[j] == blobs[i])
                return blob__fail(BLOB_EINVAL, func, "blob %d is blob %d again", i, j);
        if (c->size > 1 && blob_device(blobs[i]) != c->device)
            return blob__fail(BLOB_EDEVICE, func,
                              "blob %d is on %s %d, the communicator's GPU is %d", i,
                              blob_device(blobs[i]) < 0 ? "the host, not a GPU:" : "GPU",
                              blob_device(blobs[i]), c->device);
    }
    *bad = -1;
    return BLOB_OK;
}

/* The list's replay records, none captured yet. */
static blob_status replays_alloc(blob_comm_list *l)
{
    size_t keys = 0;
    for (int k = 0; k < l->num_buckets; k++)
        keys += (size_t)(l->buckets[k].last - l->buckets[k].first + 1);
    l->replays = blob__obj_alloc((size_t)l->num_buckets * sizeof *l->replays);
    l->replay_dev = blob__obj_alloc(keys * sizeof *l->replay_dev);
    l->done = blob__obj_alloc((size_t)l->num_buckets * sizeof *l->done);
    if (!l->replays || !l->replay_dev || !l->done)
        return BLOB_ENOMEM; /* detail recorded by the allocation */
    memset(l->replays, 0, (size_t)l->num_buckets * sizeof *l->replays);
    char **dev = l->replay_dev;
    for (int k = 0; k < l->num_buckets; k++) {
        l->replays[k].dev = dev;
        dev += l->buckets[k].last - l->buckets[k].first + 1;
    }
    return BLOB_OK;
}

/* Every rank exchanges its registration and all compare them (c has several ranks). The
 * peers' headers are checked before they size anything. */
static blob_status agree(blob_comm *c, const blob_comm_list *l, blob_status local, int bad)
{
    const char *func = "blob_comm_list_create";
    blob__comm_header mine = {local == BLOB_OK ? l->n : 0, local, bad};
    size_t world = (size_t)c->size;
    blob__comm_header *headers = blob__obj_alloc(world * sizeof *headers);
    if (!headers)
        return blob__comm_poison(c, func, BLOB_ENOMEM, "the registration exchange");
    blob_status st = blob__comm_gather_host(c, func, &mine, sizeof mine, headers);
    int64_t len = 0; /* at most mine.n + 1 */
    if (st == BLOB_OK)
        st = blob__comm_table_length(headers, c->size, &len);
    blob__comm_entry *entries = NULL, *tables = NULL;
    if (st == BLOB_OK && len > (int64_t)(SIZE_MAX / world / sizeof *tables))
        st = blob__comm_poison(c, func, BLOB_EOVERFLOW, "the registration exchange");
    if (st == BLOB_OK && len > 0) {
        entries = blob__obj_alloc((size_t)len * sizeof *entries);
        tables = blob__obj_alloc(world * (size_t)len * sizeof *tables);
        if (!entries || !tables)
            st = blob__comm_poison(c, func, BLOB_ENOMEM, "the registration exchange");
    }
    if (st == BLOB_OK && len > 0) {
        for (int64_t i = 0; i < len; i++) {
            bool have = i < mine.n;
            entries[i].count = have ? l->counts[i] : -1;
            entries[i].dtype =
                have ? (int64_t)l->dtype | (l->bf16 ? BLOB__COMM_ENTRY_BF16 : 0) : -1;
        }
        st = blob__comm_gather_host(c, func, entries, (size_t)len * sizeof *entries, tables);
    }
    if (st == BLOB_OK)
        st = blob__comm_compare(headers, tables, c->size, len);
    blob__obj_free(headers);
    blob__obj_free(entries);
    blob__obj_free(tables);
    return st;
}

/* Fill a new list l of c with blobs[0..n), checked, and plan its buckets. */
static blob_status list_fill(blob_comm_list *l, blob_comm *c, blob *const *blobs, int n)
{
    l->c = c;
    l->n = n;
    l->dtype = blob_get_dtype(blobs[0]);
    l->elem = blob_dtype_size(l->dtype);
    l->bf16 = c->bf16 && c->size > 1 && l->dtype == BLOB_FLOAT32;
    l->wire_elem = l->bf16 ? sizeof(uint16_t) : l->elem;
    for (int i = 0; i < n; i++) {
        l->blobs[i] = blobs[i];
        l->counts[i] = blob_count(blobs[i]);
        l->offset[i + 1] = l->offset[i] + l->counts[i];
    }
    int64_t bucket_elems = (int64_t)(c->bucket_bytes / l->elem);
    if (bucket_elems < 1)
        bucket_elems = 1;
    l->num_buckets = blob__comm_plan(l->counts, n, bucket_elems, NULL, 0);
    if (l->num_buckets <= 0)
        return BLOB_OK;
    l->buckets = blob__obj_alloc((size_t)l->num_buckets * sizeof *l->buckets);
    if (!l->buckets)
        return BLOB_ENOMEM;
    blob__comm_plan(l->counts, n, bucket_elems, l->buckets, l->num_buckets);
    return replays_alloc(l);
}

/* Name l and put it among its communicator's live lists. */
static void list_link(blob_comm_list *l)
{
    blob_comm *c = l->c;
    pthread_mutex_lock(&c->mu);
    l->id = ++c->lists;
    l->next_live = c->live;
    if (c->live)
        c->live->prev_live = l;
    c->live = l;
    pthread_mutex_unlock(&c->mu);
}

blob_status blob_comm_list_create(blob_comm_list **out, blob_comm *c, blob *const *blobs, int n)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    if (!c)
        return BLOB_FAIL(BLOB_EINVAL, "c is NULL");
    if (c->size > 1)
        BLOB_TRY(blob__comm_usable(c, __func__));
    /* A rank that cannot register still takes part in the exchange, so that all fail
     * together instead of the others waiting for it. */
    int bad = -1;
    blob_status local = BLOB_OK;
    if (!blobs || n < 1)
        local = BLOB_FAIL(BLOB_EINVAL, blobs ? "%d blobs" : "blobs is NULL", n);
    else
        local = check_blobs(__func__, c, blobs, n, &bad);
    blob_comm_list *l = local == BLOB_OK ? list_alloc(n) : NULL;
    if (local == BLOB_OK && (!l || !l->blobs || !l->counts || !l->offset || !l->ready || !l->dev))
        local = BLOB_ENOMEM; /* detail recorded by the allocation */
    if (local == BLOB_OK)
        local = list_fill(l, c, blobs, n);
    blob_status st = local;
    if (c->size > 1) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", blob_last_error());
        st = agree(c, l, local, bad);
        if (st == local && st != BLOB_OK) /* this rank's own error, with its own detail */
            st = BLOB_FAIL(local, "%s", detail);
    }
    if (st == BLOB_OK && c->size > 1)
        st = blob__comm_decide_replay(c, __func__);
    if (st != BLOB_OK) {
        if (l)
            list_release(l);
        return st;
    }
    list_link(l);
    *out = l;
    return BLOB_OK;
}

void blob_comm_list_free(blob_comm_list *l)
{
    if (!l)
        return;
    blob_comm *c = l->c;
    /* a graph still running is freed when it ends; the buffer is reused on the
     * communicator's stream, after the work queued there */
    pthread_mutex_lock(&c->mu);
    if (l->prev_live)
        l->prev_live->next_live = l->next_live;
    else
        c->live = l->next_live;
    if (l->next_live)
        l->next_live->prev_live = l->prev_live;
    for (int k = 0; k < l->num_buckets; k++)
        blob__be->graph_destroy(l->replays[k].graph, l->replays[k].exec);
    pthread_mutex_unlock(&c->mu);
    for (int k = 0; k < l->num_buckets; k++)
        if (l->replays[k].buf)
            blob_place_free(blob_place_device(c->device), l->replays[k].buf);
    list_release(l);
}

/* ---- collectives on lists ---- */

/* Make `waiter` wait (on the device) for the work queued on `stream` so far, by c's
 * ordering event: the caller's stream and the communicator's, either way. */
static blob_status order(blob_comm *c, void *waiter, void *stream)
{
    if (!c->order_event)
        BLOB_TRY(blob__be->event_create(&c->order_event));
    /* a wait takes the event as recorded at the call: it may be recorded again at once */
    BLOB_TRY(blob__be->event_record(c->order_event, stream));
    return blob__be->stream_wait_event(waiter, c->order_event);
}

/* A failed collective call: on several ranks the communicator goes down with it, since
 * the others may already have started the collective. */
static blob_status call_failed(blob_comm_list *l, const char *func, blob_status st,
                               const char *what)
{
    if (l->c->size > 1)
        return blob__comm_poison(l->c, func, st, what);
    return st;
}

static blob_status check_counts(const char *func, const blob_comm_list *l, int first, int n)
{
    for (int i = first; i < first + n; i++)
        if (blob_count(l->blobs[i]) != l->counts[i])
            return blob__fail(BLOB_ESHAPE, func,
                              "blob %d of list %d has %lld elements, %lld "
                              "when it was registered",
                              i, l->id, (long long)blob_count(l->blobs[i]),
                              (long long)l->counts[i]);
    return BLOB_OK;
}

/* The device side of blob i's data or diff for the communicator's stream (which the
 * blob's own ordering makes wait for its last user). */
static blob_status device_side(blob_comm_list *l, int i, bool diff, bool write, char **out)
{
    blob *b = l->blobs[i];
    void *p = NULL;
    blob_status st;
    if (diff)
        st = blob_mutable_gpu_diff(b, &p);
    else if (write)
        st = blob_mutable_gpu_data(b, &p);
    else
        st = blob_gpu_data(b, (const void **)&p);
    *out = p;
    return st;
}

blob_status blob_comm_broadcast(blob_comm_list *l, int root)
{
    if (!l)
        return BLOB_FAIL(BLOB_EINVAL, "l is NULL");
    blob_comm *c = l->c;
    blob_status st = BLOB_OK;
    if (root < 0 || root >= c->size)
        st = BLOB_FAIL(BLOB_ERANGE, "root %d not in [0, %d)", root, c->size);
    else if (l->open)
        st = BLOB_FAIL(BLOB_ESTATE, "a reduce step of list %d is open", l->id);
    if (st == BLOB_OK)
        st = check_counts(__func__, l, 0, l->n);
    if (st != BLOB_OK)
        return call_failed(l, __func__, st, "broadcast");
    if (c->size == 1)
        return BLOB_OK;
    BLOB_TRY(blob__comm_usable(c, __func__));
    void *caller = blob_stream_get();
    st = order(c, c->stream, caller);
    blob__stream_enter(c->stream);
    for (int i = 0; i < l->n && st == BLOB_OK; i++)
        st = device_side(l, i, false, c->rank != root, &l->dev[i]);
    blob__stream_leave(caller);
    if (st != BLOB_OK)
        return blob__comm_poison(c, __func__, st, "broadcast");
    char what[96];
    pthread_mutex_lock(&c->mu);
    snprintf(what, sizeof what, "broadcast #%llu (list %d, %d blobs, root %d)",
             (unsigned long long)blob__comm_next_seq(c), l->id, l->n, root);
    if (c->failure != BLOB_OK)
        st = blob__comm_failed(c, __func__);
    bool grouped = false;
    if (st == BLOB_OK) {
        st = c->ccl->group_begin();
        grouped = st == BLOB_OK;
    }
    for (int i = 0; i < l->n && st == BLOB_OK; i++)
        if (l->counts[i])
            st = c->ccl->broadcast(c->handle, l->dev[i], (size_t)l->counts[i], l->dtype, root,
                                   c->stream);
    if (grouped) { /* closed even after a failure, before any abort */
        blob_status end = c->ccl->group_end();
        if (st == BLOB_OK)
            st = end;
    }
    if (st != BLOB_OK && c->failure == BLOB_OK)
        st = blob__comm_fail_last(c, __func__, st, what);
    if (st == BLOB_OK)
        st = blob__comm_settle(c, __func__, what, BLOB__COMM_PEER_HINT);
    if (st == BLOB_OK)
        st = blob__comm_track(c, __func__, what);
    pthread_mutex_unlock(&c->mu);
    if (st == BLOB_OK && order(c, caller, c->stream) != BLOB_OK)
        st = blob__comm_poison(c, __func__, BLOB_ECUDA, what);
    return st;
}

/* Move the pieces of bucket k between the diffs and buf, in the wire's type: into buf
 * when pack. */
static blob_status move_pieces(blob_comm_list *l, const blob__comm_bucket *k, char *buf, bool pack)
{
    void *stream = l->c->stream;
    for (int i = k->first; i <= k->last; i++) {
        int64_t from = l->offset[i] > k->begin ? l->offset[i] : k->begin;
        int64_t to = l->offset[i + 1] < k->end ? l->offset[i + 1] : k->end;
        if (from >= to)
            continue;
        char *piece = buf + (size_t)(from - k->begin) * l->wire_elem;
        char *diff = l->dev[i] + (size_t)(from - l->offset[i]) * l->elem;
        if (l->bf16)
            BLOB_TRY(
                pack
                    ? blob__k_convert(stream, BLOB_FLOAT32, BLOB_BFLOAT16, to - from, diff, piece)
                    : blob__k_convert(stream, BLOB_BFLOAT16, BLOB_FLOAT32, to - from, piece, diff));
        else
            BLOB_TRY(blob__be->copy_async(pack ? piece : diff, pack ? diff : piece,
                                          (size_t)(to - from) * l->elem, BLOB__D2D, stream));
    }
    return BLOB_OK;
}

/* Pack bucket k into buf (unless in place), all-reduce it there and unpack it, on the
 * communicator's stream; what names it. A failure brings the communicator down. */
static blob_status bucket_collective(blob_comm_list *l, const blob__comm_bucket *k, char *buf,
                                     bool in_place, const char *func, const char *what)
{
    blob_comm *c = l->c;
    if (!in_place && move_pieces(l, k, buf, true) != BLOB_OK)
        return blob__comm_poison(c, func, BLOB_ECUDA, what);
    blob_status st = blob__comm_all_reduce_launch(c, func, what, buf, (size_t)(k->end - k->begin),
                                                  l->bf16 ? BLOB__CCL_BFLOAT16 : l->dtype, l->op);
    if (st == BLOB_OK && !in_place && move_pieces(l, k, buf, false) != BLOB_OK)
        st = blob__comm_poison(c, func, BLOB_ECUDA, what);
    return st;
}

/* Whether bucket kb's graph holds the list's op and diffs of now. */
static bool replay_current(const blob_comm_list *l, int kb)
{
    const blob__comm_replay *r = &l->replays[kb];
    const blob__comm_bucket *k = &l->buckets[kb];
    return r->exec && r->op == l->op &&
           !memcmp(r->dev, l->dev + k->first, (size_t)(k->last - k->first + 1) * sizeof *r->dev);
}

/* Capture bucket kb's collective in a graph, replacing the one it had. The graphs of a
 * working communicator change under mu (a failure destroys them: blob__comm_fail). */
static blob_status capture(blob_comm_list *l, int kb, char *buf, bool in_place, const char *func,
                           const char *what)
{
    blob_comm *c = l->c;
    blob__comm_replay *r = &l->replays[kb];
    const blob__comm_bucket *k = &l->buckets[kb];
    pthread_mutex_lock(&c->mu);
    blob__be->graph_destroy(r->graph, r->exec);
    r->graph = r->exec = NULL;
    pthread_mutex_unlock(&c->mu);
    blob_status st = blob__be->graph_begin(c->stream);
    if (st != BLOB_OK)
        return blob__comm_poison(c, func, st, what);
    blob_status queued = bucket_collective(l, k, buf, in_place, func, what);
    void *graph = NULL, *exec = NULL;
    st = blob__be->graph_end(c->stream, &graph, &exec); /* ends the capture in any case */
    if (queued != BLOB_OK) {
        blob__be->graph_destroy(graph, exec);
        return queued;
    }
    if (st != BLOB_OK)
        return blob__comm_poison(c, func, st, what);
    pthread_mutex_lock(&c->mu);
    if (c->failure != BLOB_OK) { /* its abort waits for this graph */
        blob__be->graph_destroy(graph, exec);
        st = blob__comm_failed(c, func);
    } else {
        r->graph = graph;
        r->exec = exec;
        r->op = l->op;
        memcpy(r->dev, l->dev + k->first, (size_t)(k->last - k->first + 1) * sizeof *r->dev);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Launch bucket kb's graph on the communicator's stream and watch it (what). */
static blob_status replay(blob_comm_list *l, int kb, const char *func, const char *what)
{
    blob_comm *c = l->c;
    blob_status st;
    pthread_mutex_lock(&c->mu);
    if (c->failure != BLOB_OK) /* the graph is gone */
        st = blob__comm_failed(c, func);
    else if ((st = blob__be->graph_launch(l->replays[kb].exec, c->stream)) != BLOB_OK)
        st = blob__comm_fail_last(c, func, st, what);
    else
        st = blob__comm_track(c, func, what);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Record timing event i on stream, if timing is on. */
static blob_status mark(blob_comm_list *l, int i, void *stream)
{
    return l->timing ? blob__be->event_record(l->timing[i], stream) : BLOB_OK;
}

/* After bucket kb's all-reduce is queued: mark its end (blob_comm_reduce_wait). */
static blob_status mark_done(blob_comm_list *l, int kb)
{
    if (!l->done[kb])
        BLOB_TRY(blob__be->event_create(&l->done[kb]));
    BLOB_TRY(blob__be->event_record(l->done[kb], l->c->stream));
    return mark(l, 2 + 3 * kb + 2, l->c->stream);
}

/* All-reduce bucket kb on the communicator's stream: in place when its diffs lie back
 * to back, else packed into a buffer of the caching allocator and unpacked after. The
 * buffer stays with the list for the next calls and the replays: given back while the
 * collective may wait for a peer, it would make the allocator synchronise the device
 * when its cache is off, before the collective is watched (a survivor of a dead peer
 * hung so, with no deadline running). From the bucket's second all-reduce on (the first
 * lets NCCL connect), the collective is replayed from a graph, captured again when the
 * op or a diff moved; every rank makes the same choice, as all make the same calls.
 * func: the public call that queues it, named in errors. */
static blob_status reduce_bucket(blob_comm_list *l, int kb, const char *func)
{
    blob_comm *c = l->c;
    const blob__comm_bucket *k = &l->buckets[kb];
    blob__comm_replay *r = &l->replays[kb];
    size_t bytes = (size_t)(k->end - k->begin) * l->wire_elem;
    bool in_place =
        !l->bf16 && blob__comm_contiguous(l->dev, l->counts, k->first, k->last, l->elem);
    bool replayed = c->replay && r->calls++ > 0;
    char what[96];
    pthread_mutex_lock(&c->mu);
    snprintf(what, sizeof what, "all_reduce #%llu (list %d, bucket %d of %d, %zu elements)",
             (unsigned long long)blob__comm_next_seq(c), l->id, kb + 1, l->num_buckets,
             bytes / l->wire_elem);
    pthread_mutex_unlock(&c->mu);
    char *buf = NULL;
    blob_status st = BLOB_OK;
    if (in_place) {
        buf = l->dev[k->first] + (size_t)(k->begin - l->offset[k->first]) * l->elem;
    } else {
        /* padded to 16 bytes: NCCL reads its input in whole words past the end of a
         * 2-byte type's last element (only the buffer holds such a type, never a blob) */
        if (!r->buf)
            st = blob_place_alloc(blob_place_device(c->device), (bytes + 15) & ~(size_t)15,
                                  c->stream, &r->buf);
        buf = r->buf;
    }
    if (st == BLOB_OK)
        st = mark(l, 2 + 3 * kb + 1, c->stream);
    if (st != BLOB_OK)
        return blob__comm_poison(c, func, st, what);
    if (replayed) {
        pthread_mutex_lock(&c->mu);
        bool current = c->failure == BLOB_OK && replay_current(l, kb);
        pthread_mutex_unlock(&c->mu);
        if (!current)
            st = capture(l, kb, buf, in_place, func, what);
        if (st == BLOB_OK)
            st = replay(l, kb, func, what);
    } else {
        st = bucket_collective(l, k, buf, in_place, func, what);
        if (st == BLOB_OK) {
            pthread_mutex_lock(&c->mu);
            st = blob__comm_track(c, func, what);
            pthread_mutex_unlock(&c->mu);
        }
    }
    if (st == BLOB_OK && mark_done(l, kb) != BLOB_OK)
        st = blob__comm_poison(c, func, BLOB_ECUDA, what);
    return st;
}

/* Hand over blobs [first, first + n) not handed over yet, then reduce every bucket
 * whose turn has come and whose blobs are all handed over. */
static blob_status hand_over(blob_comm_list *l, int first, int n, const char *func)
{
    blob_comm *c = l->c;
    BLOB_TRY(blob__comm_usable(c, func));
    blob_status st = check_counts(func, l, first, n);
    bool fresh = false;
    for (int i = first; i < first + n; i++)
        fresh |= !l->ready[i];
    void *caller = blob_stream_get();
    if (st == BLOB_OK && fresh) /* after what the caller queued so far */
        st = order(c, c->stream, caller);
    blob__stream_enter(c->stream);
    for (int i = first; i < first + n && st == BLOB_OK; i++)
        if (!l->ready[i]) {
            st = device_side(l, i, true, true, &l->dev[i]);
            l->ready[i] = st == BLOB_OK;
        }
    blob__stream_leave(caller);
    if (st != BLOB_OK)
        return blob__comm_poison(c, func, st, "handing over diffs");
    for (; l->next >= 0; l->next--) {
        const blob__comm_bucket *k = &l->buckets[l->next];
        for (int i = k->first; i <= k->last; i++)
            if (!l->ready[i])
                return BLOB_OK;
        if (mark(l, 2 + 3 * l->next, caller) != BLOB_OK)
            return blob__comm_poison(c, func, BLOB_ECUDA, "timing");
        BLOB_TRY(reduce_bucket(l, l->next, func));
    }
    return BLOB_OK;
}

blob_status blob_comm_reduce_begin(blob_comm_list *l, blob_comm_op op)
{
    if (!l)
        return BLOB_FAIL(BLOB_EINVAL, "l is NULL");
    blob_status st = BLOB_OK;
    if (op != BLOB_COMM_SUM && op != BLOB_COMM_MEAN)
        st = BLOB_FAIL(BLOB_EINVAL, "unknown op %d", (int)op);
    else if (l->open)
        st = BLOB_FAIL(BLOB_ESTATE, "a reduce step of list %d is open already", l->id);
    if (st != BLOB_OK)
        return call_failed(l, __func__, st, "reduce_begin");
    if (l->c->size > 1) {
        BLOB_TRY(blob__comm_usable(l->c, __func__));
        if (mark(l, 0, blob_stream_get()) != BLOB_OK)
            return blob__comm_poison(l->c, __func__, BLOB_ECUDA, "timing");
    }
    l->timed = false;
    l->open = true;
    l->op = op;
    memset(l->ready, 0, (size_t)l->n * sizeof *l->ready);
    l->next = l->num_buckets - 1;
    return BLOB_OK;
}

blob_status blob_comm_reduce_ready(blob_comm_list *l, int first, int n)
{
    if (!l)
        return BLOB_FAIL(BLOB_EINVAL, "l is NULL");
    blob_status st = BLOB_OK;
    if (!l->open)
        st = BLOB_FAIL(BLOB_ESTATE, "no reduce step of list %d is open", l->id);
    else if (first < 0 || n < 0 || first > l->n - n)
        st = BLOB_FAIL(BLOB_ERANGE, "blobs [%d, %d + %d) of a list of %d", first, first, n, l->n);
    if (st != BLOB_OK)
        return call_failed(l, __func__, st, "reduce_ready");
    if (l->c->size == 1) {
        st = check_counts(__func__, l, first, n);
        for (int i = first; i < first + n && st == BLOB_OK; i++)
            l->ready[i] = true;
        return st;
    }
    return hand_over(l, first, n, __func__);
}

blob_status blob_comm_reduce_end(blob_comm_list *l)
{
    if (!l)
        return BLOB_FAIL(BLOB_EINVAL, "l is NULL");
    if (!l->open)
        return call_failed(l, __func__,
                           BLOB_FAIL(BLOB_ESTATE, "no reduce step of list %d is open", l->id),
                           "reduce_end");
    blob_comm *c = l->c;
    l->open = false;
    if (c->size == 1)
        return check_counts(__func__, l, 0, l->n);
    if (mark(l, 1, blob_stream_get()) != BLOB_OK)
        return blob__comm_poison(c, __func__, BLOB_ECUDA, "timing");
    BLOB_TRY(hand_over(l, 0, l->n, __func__));
    if (order(c, blob_stream_get(), c->stream) != BLOB_OK)
        return blob__comm_poison(c, __func__, BLOB_ECUDA, "joining the caller's stream");
    l->timed = l->timing != NULL;
    return blob_comm_status(c);
}

int blob_comm_list_num_buckets(const blob_comm_list *l)
{
    if (!l) {
        blob__fail(BLOB_EINVAL, __func__, "l is NULL");
        return 0;
    }
    return l->c->size > 1 ? l->num_buckets : 0;
}

blob_status blob_comm_list_bucket(const blob_comm_list *l, int k, int64_t *begin, int64_t *end)
{
    if (!l || !begin || !end)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (k < 0 || k >= blob_comm_list_num_buckets(l))
        return BLOB_FAIL(BLOB_ERANGE, "bucket %d of %d", k, blob_comm_list_num_buckets(l));
    *begin = l->buckets[k].begin;
    *end = l->buckets[k].end;
    return BLOB_OK;
}

blob_status blob_comm_reduce_wait(blob_comm_list *l, int k)
{
    if (!l)
        return BLOB_FAIL(BLOB_EINVAL, "l is NULL");
    if (k < 0 || k >= blob_comm_list_num_buckets(l))
        return BLOB_FAIL(BLOB_ERANGE, "bucket %d of %d", k, blob_comm_list_num_buckets(l));
    if (!l->open)
        return BLOB_FAIL(BLOB_ESTATE, "no reduce step of list %d is open", l->id);
    if (k <= l->next)
        return BLOB_FAIL(BLOB_ESTATE,
                         "bucket %d of list %d is not queued: blobs %d to %d are "
                         "not all handed over",
                         k, l->id, l->buckets[k].first, l->buckets[k].last);
    BLOB_TRY(blob__comm_usable(l->c, __func__));
    return blob__be->stream_wait_event(blob_stream_get(), l->done[k]);
}

blob_status blob_comm_list_set_timing(blob_comm_list *l, bool on)
{
    if (!l)
        return BLOB_FAIL(BLOB_EINVAL, "l is NULL");
    if (l->open)
        return BLOB_FAIL(BLOB_ESTATE, "a reduce step of list %d is open", l->id);
    l->timed = false;
    if (!on || l->c->size == 1 || l->timing) {
        if (!on)
            events_free(&l->timing, timing_events(l));
        return BLOB_OK;
    }
    int n = timing_events(l);
    l->timing = blob__obj_alloc((size_t)n * sizeof *l->timing);
    if (!l->timing)
        return BLOB_ENOMEM; /* detail recorded by the allocation */
    for (int i = 0; i < n; i++) {
        blob_status st = blob__be->event_create_timed(&l->timing[i]);
        if (st != BLOB_OK) {
            events_free(&l->timing, n);
            return st;
        }
    }
    return BLOB_OK;
}

blob_status blob_comm_list_timing(blob_comm_list *l, blob_comm_bucket_timing *buckets, int max,
                                  int *num, double *backward_end_ms)
{
    if (!l || !buckets || !num || !backward_end_ms || max < 0)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument or max %d", max);
    *num = 0;
    *backward_end_ms = 0;
    if (l->c->size == 1)
        return BLOB_OK; /* nothing is reduced */
    if (!l->timed)
        return BLOB_FAIL(BLOB_ESTATE, "list %d has no timed step (timing %s%s)", l->id,
                         l->timing ? "on" : "off", l->open ? ", a step open" : "");
    void **ev = l->timing;
    for (int kb = 0; kb < l->num_buckets; kb++)
        BLOB_TRY(blob__be->event_synchronize(ev[2 + 3 * kb + 2]));
    BLOB_TRY(blob__be->event_synchronize(ev[1]));
    BLOB_TRY(blob__be->event_elapsed(ev[0], ev[1], backward_end_ms));
    for (int i = 0; i < max && i < l->num_buckets; i++) {
        int kb = l->num_buckets - 1 - i;
        const blob__comm_bucket *k = &l->buckets[kb];
        blob_comm_bucket_timing *t = &buckets[i];
        t->first = k->first;
        t->last = k->last;
        t->elements = k->end - k->begin;
        BLOB_TRY(blob__be->event_elapsed(ev[0], ev[2 + 3 * kb], &t->ready_ms));
        BLOB_TRY(blob__be->event_elapsed(ev[0], ev[2 + 3 * kb + 1], &t->start_ms));
        BLOB_TRY(blob__be->event_elapsed(ev[0], ev[2 + 3 * kb + 2], &t->end_ms));
    }
    *num = l->num_buckets;
    return BLOB_OK;
}

blob_status blob_comm_all_reduce(blob_comm_list *l, blob_comm_op op)
{
    BLOB_TRY(blob_comm_reduce_begin(l, op));
    return blob_comm_reduce_end(l);
}
