/* Internal: failure recording and the check macros shared by the C and CUDA files. A
 * check evaluates its argument once; on failure it returns a status from the calling
 * function, the detail recorded under func (the public call) or the calling function. */
#ifndef BLOB_CHECKS_H
#define BLOB_CHECKS_H

#include "blob/status.h"

/* Record the calling thread's failure detail, "func: " and the message (the message
 * alone with func NULL), and return status. */
blob_status blob__fail(blob_status status, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define BLOB_FAIL(status, ...) blob__fail((status), __func__, __VA_ARGS__)
/* The same for a failure concerning the file path: "func: path: " and the message (the
 * message alone after func with path NULL). */
blob_status blob__fail_path(blob_status status, const char *func, const char *path, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));

/* A public query, `type func(const obj_type *arg)`: expr, or for arg NULL the neutral value
 * with the detail "what is NULL" recorded. */
#define BLOB__QUERY_FN(type, func, obj_type, arg, what, neutral, expr) \
    type func(const obj_type *arg)                                     \
    {                                                                  \
        if (!arg) {                                                    \
            blob__fail(BLOB_EINVAL, #func, what " is NULL");           \
            return neutral;                                            \
        }                                                              \
        return expr;                                                   \
    }

/* CUDA builds: record a failed CUDA runtime call (err is its cudaError_t) under func,
 * clear the sticky error, and map it: out of memory is BLOB_EDEVMEM, no device or driver
 * BLOB_ENODEV, anything else BLOB_ECUDA. */
blob_status blob__cuda_fail(int err, const char *call, const char *func);

/* Propagate a failed status (its detail is already recorded). */
#define BLOB_TRY(expr)                \
    do {                              \
        blob_status try_st_ = (expr); \
        if (try_st_ != BLOB_OK)       \
            return try_st_;           \
    } while (0)

/* Fail with BLOB_EINVAL, the message recorded under func, unless cond holds. */
#define BLOB_NEED(cond, func, ...)                               \
    do {                                                         \
        if (!(cond))                                             \
            return blob__fail(BLOB_EINVAL, (func), __VA_ARGS__); \
    } while (0)

/* A CUDA runtime call (needs <cuda_runtime_api.h>); a failure is recorded by
 * blob__cuda_fail under func, or under the calling function for CUDA_TRY. */
#define CUDA_TRY_AT(func, call) BLOB__CUDA_CHECK((func), (call), #call)
#define CUDA_TRY(call)          BLOB__CUDA_CHECK(__func__, (call), #call)
#define BLOB__CUDA_CHECK(func, call, text)                 \
    do {                                                   \
        cudaError_t cuda_err_ = call;                      \
        if (cuda_err_ != cudaSuccess)                      \
            return blob__cuda_fail(cuda_err_, text, func); \
    } while (0)

#endif
