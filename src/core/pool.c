/* The host threads of the library's loops (core.h, blob__host_for).
 *
 * Elementwise and reduction loops on the host split their range between the calling
 * thread and a few workers, as many as the BLAS uses. The workers are our own rather
 * than OpenMP's: libgomp's keep spinning for milliseconds after every parallel region
 * (its default GOMP_SPINCOUNT, which only the environment at load time can change),
 * taking the cores from OpenBLAS's threads in the GEMMs that follow, which made the
 * host MLP step several times slower. Ours spin for at most SPIN_S after a loop, in case
 * another follows, then sleep on a condition variable. One loop runs at a time; a call
 * that finds the workers busy with another thread's loop runs its loop alone. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "clock.h"
#include "core.h"

enum { MAX_WORKERS = BLOB__MAX_HOST_THREADS - 1 };
static const double SPIN_S = 50e-6;

static pthread_mutex_t dispatch_mu = PTHREAD_MUTEX_INITIALIZER; /* one loop at a time */
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The loop being run, written by the dispatching thread before it hands out the ranges. */
static blob__range_fn job_fn;
static void *job_ctx;
static _Atomic int pending; /* ranges handed to workers and not finished */

/* Each worker's range: handed over by bumping `go` (the worker counts the bumps). */
static struct {
    _Atomic uint64_t go;
    int64_t lo, hi;
} slot[MAX_WORKERS];
static int workers; /* started (under dispatch_mu) */

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg)
{
    const int w = (int)(intptr_t)arg;
    uint64_t seen = 0; /* a slot's go starts at 0 and is bumped only after its worker exists */
    for (;;) {
        /* spin a little for the next range, then sleep until it comes */
        const double until = blob__now() + SPIN_S;
        for (int i = 0; atomic_load_explicit(&slot[w].go, memory_order_acquire) == seen; i++) {
            relax();
            if (i % 64 == 63 && blob__now() > until) {
                pthread_mutex_lock(&wake_mu);
                while (atomic_load(&slot[w].go) == seen)
                    pthread_cond_wait(&wake, &wake_mu);
                pthread_mutex_unlock(&wake_mu);
            }
        }
        seen++;
        job_fn(job_ctx, slot[w].lo, slot[w].hi);
        atomic_fetch_sub_explicit(&pending, 1, memory_order_release);
    }
    return NULL;
}

/* In a forked child the workers are gone and the locks may be held by threads that are
 * gone too: start again from nothing. */
static void after_fork_child(void)
{
    pthread_mutex_init(&dispatch_mu, NULL);
    pthread_mutex_init(&wake_mu, NULL);
    pthread_cond_init(&wake, NULL);
    for (int w = 0; w < workers; w++)
        atomic_store(&slot[w].go, 0);
    workers = 0;
    atomic_store(&pending, 0);
}

static void register_fork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* Start workers up to `want` (under dispatch_mu); returns how many there are. */
static int start_workers(int want)
{
    if (want > MAX_WORKERS)
        want = MAX_WORKERS;
    while (workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0)
            break;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)workers);
        pthread_attr_destroy(&attr);
        if (err != 0)
            break;
        workers++;
    }
    return workers;
}

void blob__host_for(int nt, int64_t n, blob__range_fn fn, void *ctx)
{
    pthread_once(&fork_once, register_fork);
    if (nt <= 1 || n < 2 || pthread_mutex_trylock(&dispatch_mu) != 0) {
        fn(ctx, 0, n);
        return;
    }
    int parts = start_workers(nt - 1) + 1;
    if (parts > nt)
        parts = nt;
    if (parts > n)
        parts = (int)n;
    job_fn = fn;
    job_ctx = ctx;
    atomic_store(&pending, parts - 1);
    for (int p = 1; p < parts; p++) {
        slot[p - 1].lo = n * p / parts;
        slot[p - 1].hi = n * (p + 1) / parts;
    }
    pthread_mutex_lock(&wake_mu);
    for (int p = 1; p < parts; p++)
        atomic_fetch_add_explicit(&slot[p - 1].go, 1, memory_order_release);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&wake_mu);
    fn(ctx, 0, n / parts);
    for (int i = 0; atomic_load_explicit(&pending, memory_order_acquire) > 0; i++)
        i < 4096 ? relax() : (void)sched_yield();
    pthread_mutex_unlock(&dispatch_mu);
}
