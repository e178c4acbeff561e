/* Communicators: options, the meeting of ranks, the watchdog, deadlines and failure,
 * and collectives on host values. */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blob/alloc.h"
#include "blob/device.h"
#include "../core/core.h"
#include "../core/env.h"
#include "comm_impl.h"
#include "record.h"

/* The communicator's stream is the most urgent the device has (a priority beyond its
 * range is clamped): when a bucket's gradients are ready, its all-reduce takes SMs as
 * the backward kernels free them, rather than after the kernels queued behind them. */
#define COMM_STREAM_PRIORITY 100

/* How often the watchdog looks at the queued operations. */
#define WATCHDOG_TICK_S 0.02

/* How long after the deadlines of its collectives in flight a failed handle is aborted:
 * half the timeout, at most this (see blob__comm_fail). */
#define ABORT_MARGIN_MAX_S 5.0

static const blob__ccl *installed_ccl;

const blob__ccl *blob__ccl_current(void)
{
    return installed_ccl ? installed_ccl : blob__ccl_default();
}

void blob__ccl_install(const blob__ccl *ccl)
{
    installed_ccl = ccl;
}

double blob__comm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void blob__comm_sleep(double seconds)
{
    if (!(seconds > 0))
        return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - floor(seconds)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Between polls: yield for the first millisecond of a wait (little latency), then
 * sleep 50 us at a time (little CPU). */
static void poll_pause(double waited)
{
    if (waited < 1e-3)
        sched_yield();
    else
        blob__comm_sleep(50e-6);
}

blob_status blob_comm_id_new(blob_comm_id *out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    return blob__ccl_current()->new_id(out);
}

/* ---- options ---- */

/* The settings of a communicator: opts', else their environment variables, else the
 * defaults. */
typedef struct {
    double timeout;
    size_t bucket;
    bool bf16;
} settings;

static blob_status resolve(const char *func, const blob_comm_options *o, settings *out)
{
    if (!(o->timeout_s >= 0) || isinf(o->timeout_s))
        return blob__fail(BLOB_EINVAL, func, "timeout %g s is not a finite number >= 0",
                          o->timeout_s);
    out->timeout = o->timeout_s;
    if (out->timeout == 0) {
        out->timeout = BLOB_COMM_DEFAULT_TIMEOUT_S;
        BLOB_TRY(blob__env_seconds(func, "BLOB_COMM_TIMEOUT", 1e-3, 1e6, &out->timeout));
    }
    out->bucket = o->bucket_bytes;
    if (out->bucket == 0) {
        int64_t mb = BLOB_COMM_DEFAULT_BUCKET_BYTES >> 20;
        BLOB_TRY(blob__env_int(func, "BLOB_COMM_BUCKET_MB", 1, 1 << 20, &mb));
        out->bucket = (size_t)mb << 20;
    }
    out->bf16 = o->bf16_reduce;
    if (!out->bf16)
        BLOB_TRY(blob__env_bool(func, "BLOB_COMM_BF16", &out->bf16));
    return BLOB_OK;
}

/* ---- failure ---- */

/* mu held: destroy the replay graphs of c's lists (a graph still running is freed when
 * it ends). */
static void destroy_replays(blob_comm *c)
{
    for (blob_comm_list *l = c->live; l; l = l->next_live)
        for (int k = 0; k < l->num_buckets; k++) {
            blob__be->graph_destroy(l->replays[k].graph, l->replays[k].exec);
            l->replays[k].graph = l->replays[k].exec = NULL;
        }
}

static void *aborter_main(void *arg)
{
    blob_comm *c = arg;
    blob__comm_sleep(c->abort_at - blob__comm_now());
    c->ccl->abort(c->aborting);
    return NULL;
}

/* mu held: hand c's handle to the aborter (see blob__comm_fail). */
static void start_abort(blob_comm *c)
{
    double now = blob__comm_now(), last = now;
    for (size_t i = 0; i < c->num_ops; i++)
        last = fmax(last, c->ops[i].deadline);
    c->abort_at = c->num_ops ? last + fmin(c->timeout_s / 2, ABORT_MARGIN_MAX_S) : now;
    c->aborting = c->handle;
    c->handle = NULL;
    c->aborter_running = pthread_create(&c->aborter, NULL, aborter_main, c) == 0;
    if (!c->aborter_running) { /* no thread: at once, the graphs first */
        destroy_replays(c);
        c->ccl->abort(c->aborting);
    } else if (c->watching) {
        pthread_cond_signal(&c->wake);
    }
}

/* Without mu: wait for the aborter, c's graphs destroyed. */
static void join_aborter(blob_comm *c)
{
    if (c->aborter_running) {
        pthread_join(c->aborter, NULL);
        c->aborter_running = false;
    }
}

blob_status blob__comm_failed(blob_comm *c, const char *func)
{
    return blob__fail(c->failure, func, "%s", c->failure_msg);
}

blob_status blob__comm_fail(blob_comm *c, const char *func, blob_status status, const char *fmt,
                            ...)
{
    if (c->failure == BLOB_OK) {
        char detail[320];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
        snprintf(c->failure_msg, sizeof c->failure_msg, "rank %d of %d: %s", c->rank, c->size,
                 detail);
        c->failure = status;
        if (c->handle)
            start_abort(c);
    }
    return blob__comm_failed(c, func);
}

blob_status blob__comm_fail_last(blob_comm *c, const char *func, blob_status status,
                                 const char *what)
{
    char detail[256];
    snprintf(detail, sizeof detail, "%s", blob_last_error());
    return blob__comm_fail(c, func, status, "%s: %s", what, detail);
}

blob_status blob__comm_poison(blob_comm *c, const char *func, blob_status status,
                              const char *what)
{
    char detail[256];
    snprintf(detail, sizeof detail, "%s", blob_last_error());
    pthread_mutex_lock(&c->mu);
    blob_status st = blob__comm_fail(c, func, status, "%s failed: %s", what, detail);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- events and the operations in flight (mu held) ---- */

static blob_status take_event(blob_comm *c, void **out)
{
    if (c->num_spare) {
        *out = c->spare_events[--c->num_spare];
        return BLOB_OK;
    }
    return blob__be->event_create(out);
}

static void give_event(blob_comm *c, void *event)
{
    if (c->num_spare == c->cap_spare) {
        size_t cap = c->cap_spare ? 2 * c->cap_spare : 16;
        void **p = blob__obj_alloc(cap * sizeof *p);
        if (!p) {
            blob__be->event_destroy(event);
            return;
        }
        if (c->num_spare)
            memcpy(p, c->spare_events, c->num_spare * sizeof *p);
        blob__obj_free(c->spare_events);
        c->spare_events = p;
        c->cap_spare = cap;
    }
    c->spare_events[c->num_spare++] = event;
}

blob_status blob__comm_track(blob_comm *c, const char *func, const char *what)
{
    if (c->num_ops == c->cap_ops) {
        size_t cap = c->cap_ops ? 2 * c->cap_ops : 16;
        blob__comm_op *p = blob__obj_alloc(cap * sizeof *p);
        if (!p)
            return blob__comm_fail(c, func, BLOB_ENOMEM, "%s: no memory to watch it", what);
        if (c->num_ops)
            memcpy(p, c->ops, c->num_ops * sizeof *p);
        blob__obj_free(c->ops);
        c->ops = p;
        c->cap_ops = cap;
    }
    void *event = NULL;
    blob_status st = take_event(c, &event);
    if (st == BLOB_OK)
        st = blob__be->event_record(event, c->stream);
    if (st != BLOB_OK) {
        if (event)
            blob__be->event_destroy(event);
        char detail[256];
        snprintf(detail, sizeof detail, "%s", blob_last_error());
        return blob__comm_fail(c, func, st, "%s: cannot watch it: %s", what, detail);
    }
    blob__comm_op *op = &c->ops[c->num_ops++];
    op->event = event;
    op->deadline = blob__comm_now() + c->timeout_s;
    snprintf(op->what, sizeof op->what, "%s", what);
    return BLOB_OK;
}

blob_status blob__comm_settle(blob_comm *c, const char *func, const char *what,
                              const char *hint)
{
    double start = blob__comm_now();
    for (;;) {
        if (c->failure != BLOB_OK)
            return blob__comm_failed(c, func);
        bool ready = false;
        if (c->ccl->state(c->handle, &ready) != BLOB_OK)
            return blob__comm_fail_last(c, func, BLOB_ECOMM, what);
        if (ready)
            return BLOB_OK;
        double waited = blob__comm_now() - start;
        if (waited > c->timeout_s)
            return blob__comm_fail(c, func, BLOB_ETIMEDOUT, "%s did not finish within %.1f s: %s",
                                   what, c->timeout_s, hint);
        poll_pause(waited);
    }
}

blob_status blob__comm_all_reduce_launch(blob_comm *c, const char *func, const char *what,
                                         void *buf, size_t count, blob_dtype dtype,
                                         blob_comm_op op)
{
    blob_status st;
    pthread_mutex_lock(&c->mu);
    if (c->failure != BLOB_OK)
        st = blob__comm_failed(c, func);
    else if ((st = c->ccl->all_reduce(c->handle, buf, count, dtype, op, c->stream)) != BLOB_OK)
        st = blob__comm_fail_last(c, func, st, what);
    else
        st = blob__comm_settle(c, func, what, BLOB__COMM_PEER_HINT);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Retire the operations that completed; bring c down on NCCL's error or on an
 * operation past its deadline. */
static blob_status check_locked(blob_comm *c, const char *func)
{
    if (c->failure != BLOB_OK)
        return blob__comm_failed(c, func);
    if (!c->handle)
        return BLOB_OK;
    bool ready;
    if (c->ccl->state(c->handle, &ready) != BLOB_OK)
        return blob__comm_fail_last(c, func, BLOB_ECOMM,
                                    c->num_ops ? c->ops[0].what : "between collectives");
    double now = blob__comm_now();
    size_t done = 0;
    blob_status st = BLOB_OK;
    while (done < c->num_ops) {
        blob__comm_op *op = &c->ops[done];
        bool finished = false;
        st = blob__be->event_query(op->event, &finished);
        if (st != BLOB_OK) {
            st = blob__comm_fail_last(c, func, st, op->what);
            break;
        }
        if (!finished) {
            if (now > op->deadline)
                st = blob__comm_fail(c, func, BLOB_ETIMEDOUT,
                                     "%s did not complete within %.1f s: a rank did not take "
                                     "part (it stopped, failed, or made other calls)",
                                     op->what, c->timeout_s);
            break;
        }
        give_event(c, op->event);
        done++;
    }
    if (done) {
        c->num_ops -= done;
        memmove(c->ops, c->ops + done, c->num_ops * sizeof *c->ops);
    }
    return st;
}

/* mu held (released while it waits): until every queued operation has completed, or
 * c has failed. */
static blob_status drain_locked(blob_comm *c, const char *func)
{
    double start = blob__comm_now();
    blob_status st;
    while ((st = check_locked(c, func)) == BLOB_OK && c->num_ops) {
        pthread_mutex_unlock(&c->mu);
        poll_pause(blob__comm_now() - start);
        pthread_mutex_lock(&c->mu);
    }
    return st;
}

blob_status blob__comm_order(blob_comm *c, void *waiter, void *stream)
{
    if (!c->order_event)
        BLOB_TRY(blob__be->event_create(&c->order_event));
    /* a wait takes the event as recorded at the call: it may be recorded again at once */
    BLOB_TRY(blob__be->event_record(c->order_event, stream));
    return blob__be->stream_wait_event(waiter, c->order_event);
}

blob_status blob__comm_usable(blob_comm *c, const char *func)
{
    pthread_mutex_lock(&c->mu);
    blob_status st = check_locked(c, func);
    pthread_mutex_unlock(&c->mu);
    BLOB_TRY(st);
    if (blob__check_device(func, c->device) != BLOB_OK)
        return blob__comm_poison(c, func, BLOB_EDEVICE, "the device check");
    return BLOB_OK;
}

/* ---- the watchdog ---- */

static struct timespec abs_time_after(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double ns = (double)ts.tv_nsec + seconds * 1e9;
    ts.tv_sec += (time_t)(ns / 1e9);
    ts.tv_nsec = (long)fmod(ns, 1e9);
    return ts;
}

/* Checks the queued operations while the owner's thread is busy elsewhere (perhaps
 * blocked on a stream that waits for a hung collective): aborting the handle on a
 * failure or a missed deadline lets every such wait end. */
static void *watchdog_main(void *arg)
{
    blob_comm *c = arg;
    (void)blob__be->set_device(c->device); /* events are queried on the rank's device */
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        if (c->failure == BLOB_OK)
            (void)check_locked(c, "watchdog");
        if (c->failure != BLOB_OK)
            destroy_replays(c); /* the abort waits for them */
        struct timespec until = abs_time_after(WATCHDOG_TICK_S);
        pthread_cond_timedwait(&c->wake, &c->mu, &until);
    }
    c->watching = false;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static blob_status watchdog_start(blob_comm *c, const char *func)
{
    int r = pthread_create(&c->watchdog, NULL, watchdog_main, c);
    if (r != 0)
        return blob__fail(BLOB_ENOMEM, func, "cannot start the watchdog thread: %s",
                          strerror(r));
    c->watching = true;
    return BLOB_OK;
}

static void watchdog_stop(blob_comm *c)
{
    if (!c->watching)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->watchdog, NULL);
}

/* ---- creation and release ---- */

static blob_status comm_alloc(blob_comm **out, int rank, int size, int device,
                              const settings *set)
{
    blob_comm *c = blob__obj_alloc(sizeof *c);
    if (!c)
        return BLOB_ENOMEM;
    c->rank = rank;
    c->size = size;
    c->device = device;
    c->timeout_s = set->timeout;
    c->bucket_bytes = set->bucket;
    c->bf16 = set->bf16;
    c->ccl = blob__ccl_current();
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->wake, &attr);
    pthread_condattr_destroy(&attr);
    *out = c;
    return BLOB_OK;
}

/* Release what comm_alloc and the start made; the handle is gone already. */
static void comm_release(blob_comm *c)
{
    for (size_t i = 0; i < c->num_ops; i++)
        blob__be->event_destroy(c->ops[i].event);
    for (size_t i = 0; i < c->num_spare; i++)
        blob__be->event_destroy(c->spare_events[i]);
    blob__be->event_destroy(c->order_event);
    blob__obj_free(c->ops);
    blob__obj_free(c->spare_events);
    blob_stream_destroy(c->stream); /* back to the pool: blocks may still name it */
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->mu);
    blob__obj_free(c);
}

/* Wait until c's join has finished; mu held. */
static blob_status await_join(blob_comm *c, const char *func)
{
    char what[96];
    snprintf(what, sizeof what, "joining %d ranks", c->size);
    return blob__comm_settle(c, func, what,
                             "not every rank arrived (is WORLD_SIZE right on every rank, and "
                             "did every rank start?)");
}

/* The id of opts' meeting for rank and world; *wrote: this rank wrote the file. */
static blob_status meet(const char *func, const blob_comm_options *o, const blob__ccl *ccl,
                        double timeout, blob_comm_id *id, bool *wrote)
{
    *wrote = false;
    if (o->has_id) {
        *id = o->id;
        return BLOB_OK;
    }
    if (o->id_file) {
        if (o->rank == 0) {
            BLOB_TRY(ccl->new_id(id));
            BLOB_TRY(blob_comm_id_write_file(id, o->world_size, o->id_file));
            *wrote = true;
            return BLOB_OK;
        }
        int world = 0;
        BLOB_TRY(blob_comm_id_read_file(id, &world, o->id_file, timeout));
        if (world != o->world_size)
            return blob__fail(BLOB_EINVAL, func,
                              "%s was written for %d ranks, this rank expects %d (do the ranks "
                              "agree on WORLD_SIZE? is the file left from another run?)",
                              o->id_file, world, o->world_size);
        return BLOB_OK;
    }
    if (blob__env_raw("NCCL_COMM_ID"))
        return ccl->new_id(id);
    return blob__fail(BLOB_EINVAL, func,
                      "no way to meet the other %d ranks: pass an id, or set BLOB_COMM_ID_FILE, "
                      "BLOB_COMM_ID or NCCL_COMM_ID (see docs/distributed.md)",
                      o->world_size - 1);
}

/* The multi-rank part of blob_comm_create: c's device is current. */
static blob_status join(blob_comm *c, const blob_comm_options *o, const char *func)
{
    blob_comm_id id;
    bool wrote = false;
    blob_status st = meet(func, o, c->ccl, c->timeout_s, &id, &wrote);
    if (st == BLOB_OK)
        st = blob_stream_create_with_priority(&c->stream, COMM_STREAM_PRIORITY);
    if (st == BLOB_OK)
        st = c->ccl->init(&c->handle, &id, c->size, c->rank);
    if (st == BLOB_OK) {
        pthread_mutex_lock(&c->mu);
        st = await_join(c, func);
        pthread_mutex_unlock(&c->mu);
    }
    if (st == BLOB_OK)
        st = watchdog_start(c, func);
    if (wrote)
        blob__comm_id_remove_file(o->id_file); /* all ranks have read it, or this one gave up */
    return st;
}

static blob_status check_options(const char *func, const blob_comm_options *o, int *world)
{
    *world = o->world_size ? o->world_size : 1;
    if (*world < 1)
        return blob__fail(BLOB_EINVAL, func, "world size %d < 1", o->world_size);
    if (o->rank < 0 || o->rank >= *world)
        return blob__fail(BLOB_EINVAL, func, "rank %d not in [0, %d)", o->rank, *world);
    return BLOB_OK;
}

blob_status blob_comm_create(blob_comm **out, const blob_comm_options *opts)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    if (!opts)
        return BLOB_FAIL(BLOB_EINVAL, "opts is NULL");
    int world;
    settings set;
    BLOB_TRY(check_options(__func__, opts, &world));
    BLOB_TRY(resolve(__func__, opts, &set));
    if (world > 1) {
        if (!blob__ccl_current()->multi_rank)
            return BLOB_FAIL(BLOB_ENOTSUP,
                             "a communicator of %d ranks needs NCCL, and this build has none "
                             "(see docs/distributed.md)",
                             world);
        BLOB_TRY(blob_device_set(opts->device));
    }
    blob_comm *c;
    BLOB_TRY(comm_alloc(&c, opts->rank, world, opts->device, &set));
    if (world > 1) {
        blob_status st = join(c, opts, __func__);
        if (st != BLOB_OK) {
            blob_comm_free(c);
            return st;
        }
    }
    *out = c;
    return BLOB_OK;
}

blob_status blob_comm_create_local(blob_comm **comms, int n, const int *devices,
                                   const blob_comm_options *opts)
{
    if (!comms || !devices || !opts)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (n < 1)
        return BLOB_FAIL(BLOB_EINVAL, "%d ranks", n);
    for (int i = 0; i < n; i++)
        comms[i] = NULL;
    settings set;
    BLOB_TRY(resolve(__func__, opts, &set));
    if (n > 1 && !blob__ccl_current()->multi_rank)
        return BLOB_FAIL(BLOB_ENOTSUP,
                         "a communicator of %d ranks needs NCCL, and this build has none", n);
    int count = blob_device_count();
    for (int i = 0; i < n && n > 1; i++) {
        if (devices[i] < 0 || devices[i] >= count)
            return BLOB_FAIL(count ? BLOB_ERANGE : BLOB_ENODEV, "rank %d: no GPU %d (%d present)",
                             i, devices[i], count);
        for (int j = 0; j < i; j++)
            if (devices[j] == devices[i])
                return BLOB_FAIL(BLOB_EINVAL, "ranks %d and %d both on GPU %d", j, i, devices[i]);
    }
    int saved = -1;
    if (n > 1)
        BLOB_TRY(blob_device_get(&saved));
    blob_status st = BLOB_OK;
    for (int i = 0; i < n && st == BLOB_OK; i++)
        st = comm_alloc(&comms[i], i, n, devices[i], &set);
    void *handles[n];
    if (st == BLOB_OK && n > 1)
        st = comms[0]->ccl->init_local(handles, n, devices);
    for (int i = 0; i < n && n > 1; i++) {
        if (comms[i])
            comms[i]->handle = st == BLOB_OK ? handles[i] : NULL;
    }
    /* each rank's stream on its device; then every join, under one deadline */
    for (int i = 0; i < n && n > 1 && st == BLOB_OK; i++) {
        st = blob_device_set(devices[i]);
        if (st == BLOB_OK)
            st = blob_stream_create_with_priority(&comms[i]->stream, COMM_STREAM_PRIORITY);
    }
    for (int i = 0; i < n && n > 1 && st == BLOB_OK; i++) {
        pthread_mutex_lock(&comms[i]->mu);
        st = await_join(comms[i], __func__);
        pthread_mutex_unlock(&comms[i]->mu);
    }
    for (int i = 0; i < n && n > 1 && st == BLOB_OK; i++)
        st = watchdog_start(comms[i], __func__);
    if (saved >= 0)
        (void)blob_device_set(saved);
    if (st != BLOB_OK) {
        for (int i = 0; i < n; i++) {
            if (comms[i] && comms[i]->handle) {
                comms[i]->ccl->abort(comms[i]->handle);
                comms[i]->handle = NULL;
            }
            blob_comm_free(comms[i]);
            comms[i] = NULL;
        }
        return st;
    }
    return BLOB_OK;
}

/* Let NCCL flush and release the handle, within the timeout; abort it otherwise. */
static void leave(blob_comm *c)
{
    pthread_mutex_lock(&c->mu);
    (void)drain_locked(c, "blob_comm_free");
    destroy_replays(c); /* of lists not freed first: NCCL would wait for their graphs */
    if (c->failure == BLOB_OK && c->ccl->finalize(c->handle) == BLOB_OK &&
        blob__comm_settle(c, "blob_comm_free", "leaving", "NCCL did not finish its work") ==
            BLOB_OK) {
        c->ccl->destroy(c->handle);
        c->handle = NULL;
    }
    if (c->handle)
        start_abort(c);
    pthread_mutex_unlock(&c->mu);
}

void blob_comm_free(blob_comm *c)
{
    if (!c)
        return;
    watchdog_stop(c);
    if (c->handle) {
        leave(c);
    } else {
        pthread_mutex_lock(&c->mu);
        destroy_replays(c); /* of lists not freed first: the abort waits for them */
        pthread_mutex_unlock(&c->mu);
    }
    join_aborter(c);
    comm_release(c);
}

/* ---- queries ---- */

/* A query given NULL records the detail and returns its neutral value. */
static bool null_comm(const blob_comm *c, const char *func)
{
    if (!c)
        blob__fail(BLOB_EINVAL, func, "communicator is NULL");
    return !c;
}

int blob_comm_rank(const blob_comm *c) { return null_comm(c, __func__) ? 0 : c->rank; }
int blob_comm_size(const blob_comm *c) { return null_comm(c, __func__) ? 0 : c->size; }
int blob_comm_device(const blob_comm *c) { return null_comm(c, __func__) ? -1 : c->device; }

double blob_comm_timeout(const blob_comm *c)
{
    if (null_comm(c, __func__))
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    double t = c->timeout_s;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    return t;
}

blob_status blob_comm_set_timeout(blob_comm *c, double seconds)
{
    if (!c)
        return BLOB_FAIL(BLOB_EINVAL, "c is NULL");
    if (!(seconds > 0) || isinf(seconds))
        return BLOB_FAIL(BLOB_EINVAL, "timeout %g s is not a finite number > 0", seconds);
    pthread_mutex_lock(&c->mu);
    c->timeout_s = seconds;
    pthread_mutex_unlock(&c->mu);
    return BLOB_OK;
}

blob_status blob_comm_status(blob_comm *c)
{
    if (!c)
        return BLOB_FAIL(BLOB_EINVAL, "c is NULL");
    pthread_mutex_lock(&c->mu);
    blob_status st = check_locked(c, __func__);
    pthread_mutex_unlock(&c->mu);
    return st;
}

blob_status blob_comm_synchronize(blob_comm *c)
{
    if (!c)
        return BLOB_FAIL(BLOB_EINVAL, "c is NULL");
    pthread_mutex_lock(&c->mu);
    blob_status st = drain_locked(c, __func__);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- collectives on host values ---- */

/* Copy in (in_bytes) to the device, run the collective there, bring out_bytes back to
 * out, and wait. An all-gather puts this rank's in at rank * in_bytes of out. */
static blob_status host_collective(blob_comm *c, const char *func, const char *name, bool gather,
                                   const void *in, size_t in_bytes, void *out, size_t out_bytes,
                                   blob_comm_op op)
{
    BLOB_TRY(blob__comm_usable(c, func));
    void *host = NULL, *dev = NULL;
    size_t at = gather ? (size_t)c->rank * in_bytes : 0;
    blob_status st = blob_place_alloc(blob_place_pinned(), out_bytes, c->stream, &host);
    if (st == BLOB_OK)
        st = blob_place_alloc(blob_place_device(c->device), out_bytes, c->stream, &dev);
    if (st == BLOB_OK) {
        memcpy(host, in, in_bytes);
        st = blob__be->copy_async((char *)dev + at, host, in_bytes, BLOB__H2D, c->stream);
    }
    if (st != BLOB_OK) {
        blob_place_free(blob_place_pinned(), host);
        blob_place_free(blob_place_device(c->device), dev);
        return blob__comm_poison(c, func, st, name);
    }
    char what[96];
    pthread_mutex_lock(&c->mu);
    snprintf(what, sizeof what, "%s #%llu", name, (unsigned long long)++c->seq);
    if (c->failure != BLOB_OK)
        st = blob__comm_failed(c, func);
    else if (gather)
        st = c->ccl->all_gather(c->handle, (char *)dev + at, dev, in_bytes, c->stream);
    else
        st = c->ccl->all_reduce(c->handle, dev, in_bytes / sizeof(double), BLOB_FLOAT64, op,
                                c->stream);
    if (st != BLOB_OK && c->failure == BLOB_OK)
        st = blob__comm_fail_last(c, func, st, what);
    if (st == BLOB_OK)
        st = blob__comm_settle(c, func, what, BLOB__COMM_PEER_HINT);
    pthread_mutex_unlock(&c->mu);
    if (st == BLOB_OK) {
        st = blob__be->copy_async(host, dev, out_bytes, BLOB__D2H, c->stream);
        if (st != BLOB_OK)
            st = blob__comm_poison(c, func, st, what);
    }
    if (st == BLOB_OK) {
        pthread_mutex_lock(&c->mu);
        st = blob__comm_track(c, func, what);
        pthread_mutex_unlock(&c->mu);
    }
    if (st == BLOB_OK)
        st = blob_comm_synchronize(c);
    if (st == BLOB_OK)
        memcpy(out, host, out_bytes);
    /* after a failure the stream still runs the queued copies: both blocks are freed
     * once they have (the allocator waits for the stream) */
    blob_place_free(blob_place_pinned(), host);
    blob_place_free(blob_place_device(c->device), dev);
    return st;
}

blob_status blob__comm_gather_host(blob_comm *c, const char *func, const void *in, size_t bytes,
                                   void *out)
{
    return host_collective(c, func, "all_gather", true, in, bytes, out, bytes * (size_t)c->size,
                           BLOB_COMM_SUM);
}

/* Capture an all-reduce of one element on c's stream and look for host functions in
 * the graph: *ok when there are none. A graph that cannot be made leaves *ok false; a
 * failed collective call brings c down. */
static blob_status probe_capture(blob_comm *c, const char *func, bool *ok)
{
    *ok = false;
    void *buf = NULL, *graph = NULL, *exec = NULL;
    if (blob_place_alloc(blob_place_device(c->device), sizeof(float), c->stream, &buf) != BLOB_OK)
        return BLOB_OK;
    blob_status st = BLOB_OK;
    if (blob__be->graph_begin(c->stream) == BLOB_OK) {
        st = blob__comm_all_reduce_launch(c, func, "the replay probe", buf, 1, BLOB_FLOAT32,
                                          BLOB_COMM_SUM);
        int64_t kernels = 0, host = 0, total = 0;
        if (blob__be->graph_end(c->stream, &graph, &exec) == BLOB_OK &&
            blob__be->graph_count_nodes(graph, &kernels, &host, &total) == BLOB_OK)
            *ok = st == BLOB_OK && kernels > 0 && host == 0;
        blob__be->graph_destroy(graph, exec);
    }
    blob_place_free(blob_place_device(c->device), buf);
    return st;
}

blob_status blob__comm_decide_replay(blob_comm *c, const char *func)
{
    if (c->replay_decided)
        return BLOB_OK;
    bool ok = false;
    if (c->ccl->graphs)
        BLOB_TRY(probe_capture(c, func, &ok));
    double refusing = !ok; /* summed: the ranks that cannot replay */
    BLOB_TRY(host_collective(c, func, "replay_decision", false, &refusing,
                             sizeof refusing, &refusing, sizeof refusing, BLOB_COMM_SUM));
    c->replay = refusing == 0;
    c->replay_decided = true;
    return BLOB_OK;
}

blob_status blob_comm_all_reduce_host(blob_comm *c, double *values, int n, blob_comm_op op)
{
    if (!c || !values)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    blob_status st = BLOB_OK;
    if (n < 1)
        st = BLOB_FAIL(BLOB_EINVAL, "%d values", n);
    else if (op != BLOB_COMM_SUM && op != BLOB_COMM_MEAN)
        st = BLOB_FAIL(BLOB_EINVAL, "unknown op %d", (int)op);
    if (c->size == 1)
        return st; /* the sum and the mean of one rank's values are those values */
    if (st != BLOB_OK)
        return blob__comm_poison(c, __func__, st, "the arguments check");
    return host_collective(c, __func__, "all_reduce_host", false, values,
                           (size_t)n * sizeof(double), values, (size_t)n * sizeof(double), op);
}
