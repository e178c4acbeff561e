/* The operations in flight on a communicator and its failure: the events that mark
 * them, their deadlines, the watchdog thread that checks them while the owner's thread
 * is busy, the failure that brings the communicator down, and the aborter thread that
 * then aborts NCCL's handle (watch.h says when). */
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/clock.h"
#include "../core/core.h"
#include "watch.h"

/* How often the watchdog looks at the queued operations. */
#define WATCHDOG_TICK_S 0.02

/* How long after the deadlines of its collectives in flight a failed handle is aborted:
 * half the timeout, at most this (see blob__comm_fail). */
#define ABORT_MARGIN_MAX_S 5.0

/* Between polls: yield for the first millisecond of a wait (little latency), then
 * sleep 50 us at a time (little CPU). */
static void poll_pause(double waited)
{
    if (waited < 1e-3)
        sched_yield();
    else
        blob__sleep(50e-6);
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
    blob__sleep(c->abort_at - blob__now());
    c->ccl->abort(c->aborting);
    return NULL;
}

/* mu held: hand c's handle to the aborter (see blob__comm_fail). */
static void start_abort(blob_comm *c)
{
    double now = blob__now(), last = now;
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
        char detail[440];
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

blob_status blob__comm_poison(blob_comm *c, const char *func, blob_status status, const char *what)
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

/* What c's board tells of the other ranks and collective #seq, as the end of a message:
 * ": rank 1 (pid ...) ..." into told (size > 2 bytes), or "" when it tells nothing. */
static void board_told(const blob_comm *c, uint64_t seq, char *told, size_t size)
{
    blob__board_explain(c->board, c->rank, seq, told + 2, size - 2);
    if (told[2])
        memcpy(told, ": ", 2);
    else
        told[0] = '\0';
}

uint64_t blob__comm_next_seq(blob_comm *c)
{
    blob__board_started(c->board, c->rank, ++c->seq);
    return c->seq;
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
    op->deadline = blob__now() + c->timeout_s;
    op->seq = c->seq;
    snprintf(op->what, sizeof op->what, "%s", what);
    return BLOB_OK;
}

blob_status blob__comm_settle(blob_comm *c, const char *func, const char *what, const char *hint)
{
    double start = blob__now();
    for (;;) {
        if (c->failure != BLOB_OK)
            return blob__comm_failed(c, func);
        bool ready = false;
        if (c->ccl->state(c->handle, &ready) != BLOB_OK)
            return blob__comm_fail_last(c, func, BLOB_ECOMM, what);
        if (ready)
            return BLOB_OK;
        double waited = blob__now() - start;
        if (waited > c->timeout_s) {
            char told[200];
            board_told(c, c->seq, told, sizeof told);
            return blob__comm_fail(c, func, BLOB_ETIMEDOUT, "%s did not finish within %.1f s: %s%s",
                                   what, c->timeout_s, hint, told);
        }
        poll_pause(waited);
    }
}

blob_status blob__comm_all_reduce_launch(blob_comm *c, const char *func, const char *what,
                                         void *buf, size_t count, blob_dtype dtype, blob_comm_op op)
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
    double now = blob__now();
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
            if (now > op->deadline) {
                char told[200];
                board_told(c, op->seq, told, sizeof told);
                st = blob__comm_fail(c, func, BLOB_ETIMEDOUT,
                                     "%s did not complete within %.1f s: a rank did not take "
                                     "part (it stopped, failed, or made other calls)%s",
                                     op->what, c->timeout_s, told);
            }
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
    double start = blob__now();
    blob_status st;
    while ((st = check_locked(c, func)) == BLOB_OK && c->num_ops) {
        pthread_mutex_unlock(&c->mu);
        poll_pause(blob__now() - start);
        pthread_mutex_lock(&c->mu);
    }
    return st;
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
        struct timespec until = blob__time_after(WATCHDOG_TICK_S);
        pthread_cond_timedwait(&c->wake, &c->mu, &until);
    }
    c->watching = false;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

blob_status blob__comm_watch_start(blob_comm *c, const char *func)
{
    int r = pthread_create(&c->watchdog, NULL, watchdog_main, c);
    if (r != 0)
        return blob__fail(BLOB_ENOMEM, func, "cannot start the watchdog thread: %s", strerror(r));
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

/* ---- the end ---- */

/* Let NCCL flush and release the handle, within the timeout; abort it otherwise. The
 * replay graphs of lists not freed first go before: NCCL's destroy and abort (also one
 * already handed to the aborter) wait for them. */
static void leave(blob_comm *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->handle)
        (void)drain_locked(c, "blob_comm_free");
    destroy_replays(c);
    if (c->handle && c->failure == BLOB_OK && c->ccl->finalize(c->handle) == BLOB_OK &&
        blob__comm_settle(c, "blob_comm_free", "leaving", "NCCL did not finish its work") ==
            BLOB_OK) {
        c->ccl->destroy(c->handle);
        c->handle = NULL;
    }
    if (c->handle)
        start_abort(c);
    pthread_mutex_unlock(&c->mu);
}

void blob__comm_watch_end(blob_comm *c)
{
    watchdog_stop(c);
    leave(c);
    join_aborter(c);
    for (size_t i = 0; i < c->num_ops; i++)
        blob__be->event_destroy(c->ops[i].event);
    for (size_t i = 0; i < c->num_spare; i++)
        blob__be->event_destroy(c->spare_events[i]);
    blob__obj_free(c->ops);
    blob__obj_free(c->spare_events);
}

/* ---- the public checks ---- */

/* check(c, func) under c's lock, for the public call func. */
static blob_status under_lock(const char *func, blob_comm *c,
                              blob_status (*check)(blob_comm *, const char *))
{
    if (!c)
        return blob__fail(BLOB_EINVAL, func, "c is NULL");
    pthread_mutex_lock(&c->mu);
    blob_status st = check(c, func);
    pthread_mutex_unlock(&c->mu);
    return st;
}

blob_status blob_comm_status(blob_comm *c) { return under_lock(__func__, c, check_locked); }

blob_status blob_comm_synchronize(blob_comm *c) { return under_lock(__func__, c, drain_locked); }
