/* bench/bench.h - the pieces shared by the benchmark program (not part of libblob). */
#ifndef BENCH_H
#define BENCH_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/blob.h"

#define KIB      ((size_t)1 << 10)
#define MIB      ((size_t)1 << 20)
#define GIB      ((size_t)1 << 30)
#define COUNT(a) (sizeof(a) / sizeof((a)[0])) /* elements of the array a */

/* ---- timing.c ---- */

/* Record why the current measurement failed; returns -1 for `return bench_fail(...)`. */
int bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *bench_error(void);

/* Fail with the library's detail unless expr returns BLOB_OK. */
#define BTRY(expr)                                                                               \
    do {                                                                                         \
        blob_status btry_ = (expr);                                                              \
        if (btry_ != BLOB_OK)                                                                    \
            return bench_fail("%s: %s (%s)", #expr, blob_status_name(btry_), blob_last_error()); \
    } while (0)

/* An operation to time: run() does it n times; settle(), if set, runs untimed after
 * each timed batch (e.g. to drain queued device work). Both return 0 or -1. */
typedef struct {
    int (*run)(void *ctx, int n);
    int (*settle)(void *ctx);
    void *ctx;
} bench_op;

/* A clock: begin() starts it, end() returns the ns since (NAN on failure). */
typedef struct {
    void (*begin)(void);
    double (*end)(void);
} bench_clock;

extern const bench_clock bench_wall; /* CLOCK_MONOTONIC */

double bench_now_ns(void);

/* One untimed warm-up batch, then `reps` timed batches of `batch` calls: the median ns
 * per call, or NAN on failure (bench_error() says why). reps <= BENCH_MAX_REPS. */
#define BENCH_MAX_REPS 64
double bench_time(const bench_op *op, int batch, int reps, const bench_clock *clock);
/* bench_time of a and b in the order a, b, b, a, so that neither gains from running
 * second (clocks, caches): each one's figure is the mean of its two medians, into *a_ns
 * and *b_ns. 0, or -1 on failure (bench_error() says why). */
int bench_time_pair(const bench_op *a, const bench_op *b, int batch, int reps,
                    const bench_clock *clock, double *a_ns, double *b_ns);

/* ---- report.c: the table on stdout and the JSON file ---- */

typedef enum {
    GOAL_NONE = 0,
    GOAL_DEV_ALLOC,
    GOAL_PINNED_ALLOC,
    GOAL_SYNC_BW,
    GOAL_ACCESS,
    GOAL_UPDATE,
    GOAL_LOOP_DRIVER,
    GOAL_LOOP_RESERVED,
    GOAL_OPTIM,
    GOAL_IM2COL,
    GOAL_COUNT
} bench_goal;

/* Header facts (date, device, versions): printed at once, written to the file. */
void report_meta(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The meta key "env": those of the n environment variables vars that are set, as
 * NAME=value, or `none` when none is. */
void report_env(const char *const *vars, int n, const char *none);
/* The value of a meta key ("" if none). */
const char *report_meta_value(const char *key);
/* Open the JSON file (after the meta). On failure the table is still printed. */
void report_open(const char *path);
/* Start a section; `cols` names the value columns (ncols <= REPORT_MAX_COLS). */
#define REPORT_MAX_COLS 10
void report_section(const char *id, const char *title, int ncols, const char *const *cols);
/* A free-text line under the current section. */
void report_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A row of values (NAN prints "-", JSON null). With a goal, `pass` says whether the
 * row meets it. */
void report_row(const char *label, const double *v, bench_goal goal, bool pass);
/* A row that could not be measured: prints the error and counts it. */
void report_error(const char *label, const char *msg);
/* Print the goal summary and close the file; the exit status: 1 if any row failed. */
int report_close(void);

/* Size as "512 B", "64 KiB", "1 GiB". */
const char *fmt_bytes(size_t bytes, char buf[32]);

/* The Python of the PyTorch peers: $BLOB_BENCH_PYTHON, or python3. */
const char *bench_python(void);
/* Run the PyTorch reference script ($BLOB_BENCH_TORCH, default bench/torch_ref.py) under
 * bench_python() with `args` and keep its figures; says in the meta why there are none
 * when torch cannot be imported. */
void torch_load(const char *args);
/* torch_load of `script` (unless $BLOB_BENCH_TORCH names another), nproc processes of
 * it under the launcher. */
void torch_load_launched(const char *launcher, int nproc, const char *script, const char *args);
/* A figure of the script (key, size), or NAN if it has none. */
double torch_ref(const char *key, double size);

/* ---- api.c: rows measured through the public API alone (every build) ---- */

void bench_access(bool gpu);  /* 4 */
void bench_reshape(void);     /* 5 */
void bench_update_host(void); /* 6, host side */
void bench_loop(bool gpu);    /* 7 */

/* ---- dlpack.c ---- */

void bench_dlpack(bool gpu); /* D: DLPack round trips */

/* A float32 blob b of n elements for the update rows (6 and 6h): data and diff are its
 * buffers on the side measured; c0 and c1 are scratch of the GPU rows. */
typedef struct {
    blob *b;
    float *data;
    const float *diff;
    void *c0, *c1;
    int64_t n;
} bench_update_ctx;

/* A bench_op run: blob_update(b) n times. */
int bench_update_run(void *ctx, int n);

/* ---- gpu.c (CUDA builds) or gpu_none.c ---- */

/* Probe the GPU, record its facts and run the PyTorch script: true if one is usable. */
bool bench_gpu_open(bool with_torch);
void bench_gpu_alloc(void);  /* 1 */
void bench_gpu_pinned(void); /* 2 */
void bench_gpu_sync(void);   /* 3 */
void bench_gpu_update(void); /* 6 */
void bench_gpu_close(void);
/* CUDA events on the legacy default stream, where the library and the raw calls run. */
extern const bench_clock bench_gpu_events;

/* ---- conv.c (CUDA builds; a no-op in gpu_none.c) ---- */

void bench_gpu_conv(void); /* C */
/* Append the --conv cases of section C to the PyTorch script's arguments in buf. */
void bench_conv_torch_args(char *buf, size_t size);

/* ---- fused.c (CUDA builds) or gpu_none.c: the training step's building blocks ---- */

/* Append the PyTorch script's options for these rows to buf. */
void bench_fused_torch_args(char *buf, size_t size);
void bench_gpu_optim(void);      /* 8 */
void bench_gpu_fused_gemm(void); /* 9 */
void bench_gpu_gemm16(void);     /* H */

#endif
