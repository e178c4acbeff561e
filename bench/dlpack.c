/* D: DLPack round trips in C (blob_to_dlpack + blob_from_dlpack + blob_free), through the
 * public API. The Python figures (NumPy, PyTorch) come from bench/dlpack.py. */
#include <stdio.h>

#include "blob/dlpack.h"
#include "bench.h"

#define ROUND_TRIP_GOAL_NS 1000.0

typedef struct {
    blob *b;
    blob_dlpack_side side;
} round_trip_ctx;

static int round_trip_run(void *ctx, int n)
{
    round_trip_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        DLManagedTensor *t;
        blob *imported;
        BTRY(blob_to_dlpack(c->b, BLOB_PART_DATA, c->side, BLOB_DLPACK_WRITABLE, NULL, &t));
        blob_status st = blob_from_dlpack(&imported, t, BLOB_HOST_ONLY);
        if (st != BLOB_OK) {
            blob_dlpack_delete(t);
            return bench_fail("blob_from_dlpack: %s (%s)", blob_status_name(st), blob_last_error());
        }
        blob_free(imported);
    }
    return 0;
}

static int round_trip_case(int device, blob_dlpack_side side, double *ns)
{
    int64_t shape[] = {1024};
    round_trip_ctx c = {NULL, side};
    void *p;
    BTRY(blob_create(&c.b, BLOB_FLOAT32, device, 1, shape));
    blob_status st =
        side == BLOB_DLPACK_HOST ? blob_mutable_cpu_data(c.b, &p) : blob_mutable_gpu_data(c.b, &p);
    int rc = st == BLOB_OK ? 0 : bench_fail("first access: %s", blob_last_error());
    bench_op op = {round_trip_run, NULL, &c};
    if (rc == 0 && isnan(*ns = bench_time(&op, 20000, 15, &bench_wall)))
        rc = -1;
    blob_free(c.b);
    return rc;
}

void bench_dlpack(bool gpu)
{
    static const char *const cols[] = {"ns"};
    static const struct {
        const char *label;
        bool gpu;
        blob_dlpack_side side;
    } cases[] = {
        {"host-only blob, kDLCPU", false, BLOB_DLPACK_HOST},
        {"GPU blob, pinned host side", true, BLOB_DLPACK_HOST},
        {"GPU blob, device side, kDLCUDA", true, BLOB_DLPACK_DEVICE},
    };
    report_section("D", "DLPack round trip: export + import + free (1024 floats)", 1, cols);
    int measured = 0, missed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].gpu && !gpu)
            continue;
        double ns;
        if (round_trip_case(cases[i].gpu ? BLOB_DEVICE_DEFAULT : BLOB_HOST_ONLY, cases[i].side,
                            &ns) != 0) {
            report_error(cases[i].label, bench_error());
            continue;
        }
        report_row(cases[i].label, &ns, GOAL_NONE, false);
        measured++;
        missed += !(ns <= ROUND_TRIP_GOAL_NS);
    }
    if (!gpu)
        report_note("GPU rows skipped: no GPU found");
    if (measured)
        report_note("goal: a round trip <= %.0f ns: %s (%d of %d rows)", ROUND_TRIP_GOAL_NS,
                    missed ? "MISS" : "PASS", measured - missed, measured);
    report_note("NumPy and PyTorch (from_dlpack from Python) follow, from bench/dlpack.py");
}
