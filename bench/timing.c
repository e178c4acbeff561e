/* The one timing loop of the benchmarks (and its a, b, b, a pairing), the wall clock, and
 * the failure message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"

static char error_msg[512];

int bench_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_msg, sizeof error_msg, fmt, ap);
    va_end(ap);
    return -1;
}

const char *bench_error(void) { return error_msg; }

double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double wall_start;

static void wall_begin(void) { wall_start = bench_now_ns(); }

static double wall_end(void) { return bench_now_ns() - wall_start; }

const bench_clock bench_wall = {wall_begin, wall_end};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_time(const bench_op *op, int batch, int reps, const bench_clock *clock)
{
    double v[BENCH_MAX_REPS];
    if (reps < 1 || reps > BENCH_MAX_REPS || batch < 1) {
        bench_fail("bad batch %d or reps %d", batch, reps);
        return NAN;
    }
    for (int r = -1; r < reps; r++) { /* r = -1: the warm-up batch */
        clock->begin();
        if (op->run(op->ctx, batch) != 0)
            return NAN;
        double t = clock->end();
        if (isnan(t) || (op->settle && op->settle(op->ctx) != 0))
            return NAN;
        if (r >= 0)
            v[r] = t / batch;
    }
    qsort(v, (size_t)reps, sizeof v[0], cmp_double);
    return reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
}

int bench_time_pair(const bench_op *a, const bench_op *b, int batch, int reps,
                    const bench_clock *clock, double *a_ns, double *b_ns)
{
    double a1, b1, b2, a2;
    if (isnan(a1 = bench_time(a, batch, reps, clock)) ||
        isnan(b1 = bench_time(b, batch, reps, clock)) ||
        isnan(b2 = bench_time(b, batch, reps, clock)) ||
        isnan(a2 = bench_time(a, batch, reps, clock)))
        return -1;
    *a_ns = (a1 + a2) / 2;
    *b_ns = (b1 + b2) / 2;
    return 0;
}
