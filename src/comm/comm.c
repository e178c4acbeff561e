/* Communicators' lifetime: blob_comm_create (the ranks meet and join), its local form
 * for every rank of one process, blob_comm_free, and what a communicator tells of
 * itself; the collective library table in use. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "blob/alloc.h"
#include "blob/device.h"
#include "../core/core.h"
#include "record.h"
#include "watch.h"

/* The communicator's stream is the most urgent the device has (a priority beyond its
 * range is clamped): when a bucket's gradients are ready, its all-reduce takes SMs as
 * the backward kernels free them, rather than after the kernels queued behind them. */
#define COMM_STREAM_PRIORITY 100

static const blob__ccl *installed_ccl;

const blob__ccl *blob__ccl_current(void)
{
    return installed_ccl ? installed_ccl : blob__ccl_default();
}

void blob__ccl_install(const blob__ccl *ccl) { installed_ccl = ccl; }

blob_status blob_comm_id_new(blob_comm_id *out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    return blob__ccl_current()->new_id(out);
}

/* ---- creation and release ---- */

static blob_status comm_alloc(blob_comm **out, int rank, int size, int device,
                              const blob__comm_settings *set)
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

/* Release what comm_alloc and the start made; the handle and the events of the
 * operations are gone already (blob__comm_watch_end). */
static void comm_release(blob_comm *c)
{
    blob__board_leave(c->board, c->rank);
    blob__board_drop(c->board);
    blob__be->event_destroy(c->order_event);
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

/* The multi-rank part of blob_comm_create: c's device is current. */
static blob_status join(blob_comm *c, const blob_comm_options *o, const char *func)
{
    blob_comm_id id;
    bool wrote = false;
    blob_status st = blob__comm_meet(func, o, c->ccl, c->timeout_s, &id, &wrote);
    if (st == BLOB_OK) {
        c->board = blob__board_open(&id, c->size); /* before the join, which all must reach */
        blob__board_join(c->board, c->rank);
        st = blob_stream_create_with_priority(&c->stream, COMM_STREAM_PRIORITY);
    }
    if (st == BLOB_OK)
        st = c->ccl->init(&c->handle, &id, c->size, c->rank);
    if (st == BLOB_OK) {
        pthread_mutex_lock(&c->mu);
        st = await_join(c, func);
        pthread_mutex_unlock(&c->mu);
    }
    if (c->board)
        blob__board_unlink(&id); /* every rank has mapped it, or this one gave up */
    if (st == BLOB_OK)
        st = blob__comm_watch_start(c, func);
    if (wrote)
        blob__comm_id_remove_file(o->id_file); /* all ranks have read it, or this one gave up */
    return st;
}

blob_status blob_comm_create(blob_comm **out, const blob_comm_options *opts)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    *out = NULL;
    if (!opts)
        return BLOB_FAIL(BLOB_EINVAL, "opts is NULL");
    int world;
    blob__comm_settings set;
    BLOB_TRY(blob__comm_check_place(__func__, opts, &world));
    BLOB_TRY(blob__comm_resolve(__func__, opts, &set));
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

/* The GPUs of a local group of n ranks: each present, no two ranks on one. */
static blob_status check_local_devices(const char *func, int n, const int *devices)
{
    int count = blob_device_count();
    for (int i = 0; i < n && n > 1; i++) {
        if (devices[i] < 0 || devices[i] >= count)
            return blob__fail(count ? BLOB_ERANGE : BLOB_ENODEV, func,
                              "rank %d: no GPU %d (%d present)", i, devices[i], count);
        for (int j = 0; j < i; j++)
            if (devices[j] == devices[i])
                return blob__fail(BLOB_EINVAL, func, "ranks %d and %d both on GPU %d", j, i,
                                  devices[i]);
    }
    return BLOB_OK;
}

/* The multi-rank part of blob_comm_create_local: the n ranks of comms join as one group,
 * each with its stream on its device (the last one is left current). */
static blob_status join_local(blob_comm **comms, int n, const int *devices, const char *func)
{
    blob__board *board = blob__board_new_local(n);
    for (int i = 0; i < n && board; i++) {
        if (i)
            blob__board_hold(board);
        comms[i]->board = board;
        blob__board_join(board, i);
    }
    void *handles[n];
    blob_status st = comms[0]->ccl->init_local(handles, n, devices);
    for (int i = 0; i < n; i++)
        comms[i]->handle = st == BLOB_OK ? handles[i] : NULL;
    /* each rank's stream on its device; then every join, under one deadline */
    for (int i = 0; i < n && st == BLOB_OK; i++) {
        st = blob_device_set(devices[i]);
        if (st == BLOB_OK)
            st = blob_stream_create_with_priority(&comms[i]->stream, COMM_STREAM_PRIORITY);
    }
    for (int i = 0; i < n && st == BLOB_OK; i++) {
        pthread_mutex_lock(&comms[i]->mu);
        st = await_join(comms[i], func);
        pthread_mutex_unlock(&comms[i]->mu);
    }
    for (int i = 0; i < n && st == BLOB_OK; i++)
        st = blob__comm_watch_start(comms[i], func);
    return st;
}

/* Release the n communicators of a local group that did not come up; their handles, not
 * watched yet, are aborted at once. */
static void free_local(blob_comm **comms, int n)
{
    for (int i = 0; i < n; i++) {
        if (comms[i] && comms[i]->handle) {
            comms[i]->ccl->abort(comms[i]->handle);
            comms[i]->handle = NULL;
        }
        blob_comm_free(comms[i]);
        comms[i] = NULL;
    }
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
    blob__comm_settings set;
    BLOB_TRY(blob__comm_resolve(__func__, opts, &set));
    if (n > 1 && !blob__ccl_current()->multi_rank)
        return BLOB_FAIL(BLOB_ENOTSUP,
                         "a communicator of %d ranks needs NCCL, and this build has none", n);
    BLOB_TRY(check_local_devices(__func__, n, devices));
    int saved = -1;
    if (n > 1)
        BLOB_TRY(blob_device_get(&saved));
    blob_status st = BLOB_OK;
    for (int i = 0; i < n && st == BLOB_OK; i++)
        st = comm_alloc(&comms[i], i, n, devices[i], &set);
    if (st == BLOB_OK && n > 1)
        st = join_local(comms, n, devices, __func__);
    if (saved >= 0)
        (void)blob_device_set(saved);
    if (st != BLOB_OK) {
        free_local(comms, n);
        return st;
    }
    return BLOB_OK;
}

void blob_comm_free(blob_comm *c)
{
    if (!c)
        return;
    blob__comm_watch_end(c);
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
