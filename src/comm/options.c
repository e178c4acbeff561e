/* A communicator's options, checked and resolved: what blob_comm_options gives, else
 * the BLOB_COMM_TIMEOUT, BLOB_COMM_BUCKET_MB and BLOB_COMM_BF16 variables, else the
 * defaults of comm.h. (The launcher's variables are read by rendezvous.c.) */
#include <math.h>

#include "../core/core.h"
#include "../core/env.h"
#include "comm_impl.h"

blob_status blob__comm_check_place(const char *func, const blob_comm_options *o, int *world)
{
    *world = o->world_size ? o->world_size : 1;
    if (*world < 1)
        return blob__fail(BLOB_EINVAL, func, "world size %d < 1", o->world_size);
    if (o->rank < 0 || o->rank >= *world)
        return blob__fail(BLOB_EINVAL, func, "rank %d not in [0, %d)", o->rank, *world);
    return BLOB_OK;
}

blob_status blob__comm_resolve(const char *func, const blob_comm_options *o,
                               blob__comm_settings *out)
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
