/*
 * blob/status.h - status codes, their messages, and the per-thread detail.
 *
 *   blob_status st = blob_create(&b, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 2, shape);
 *   if (st != BLOB_OK)
 *       fprintf(stderr, "%s: %s\n", blob_status_name(st), blob_last_error());
 *
 * Every fallible call returns a blob_status: 0 on success, a negative code otherwise.
 * A failed call leaves its objects as they were. Nothing a caller can cause aborts.
 */
#ifndef BLOB_STATUS_H
#define BLOB_STATUS_H

#if defined(BLOB_BUILDING) && defined(__GNUC__)
#define BLOB_API __attribute__((visibility("default")))
#else
#define BLOB_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message): the single source of the enum, the names and messages. */
#define BLOB_STATUS_MAP(X)                                              \
    X(OK, 0, "success")                                                 \
    X(EINVAL, -1, "invalid argument")                                   \
    X(ENOMEM, -2, "out of host memory")                                 \
    X(EDEVMEM, -3, "out of device memory")                              \
    X(ENODEV, -4, "no GPU available")                                   \
    X(EDEVICE, -5, "current device differs from the object's device")   \
    X(ECUDA, -6, "CUDA runtime error")                                  \
    X(ECUBLAS, -7, "cuBLAS error")                                      \
    X(ESHAPE, -8, "shape mismatch")                                     \
    X(EOVERFLOW, -9, "size overflows")                                  \
    X(ERANGE, -10, "index or axis out of range")                        \
    X(ESTATE, -11, "operation not valid in the object's current state") \
    X(EIO, -12, "input/output error")                                   \
    X(EFORMAT, -13, "malformed or unsupported file")                    \
    X(EBUSY, -14, "resource still in use")                              \
    X(ETIMEDOUT, -15, "operation did not complete within its deadline") \
    X(ECOMM, -16, "communication with another rank failed")             \
    X(ENOTSUP, -17, "not supported by this build or for this dtype")

typedef enum {
#define BLOB__STATUS_ENUM(name, value, msg) BLOB_##name = (value),
    BLOB_STATUS_MAP(BLOB__STATUS_ENUM)
#undef BLOB__STATUS_ENUM
} blob_status;

/* A static message for the code ("unknown status" for values outside the enum). */
BLOB_API const char *blob_strerror(blob_status status);

/* The code's name without prefix, e.g. "EINVAL"; "UNKNOWN" outside the enum. */
BLOB_API const char *blob_status_name(blob_status status);

/* The detail of the most recent failure on the calling thread: which call failed and
 * why (with the CUDA or cuBLAS error name where one is involved). Never NULL; valid
 * until the next failing call on this thread. Successful calls do not clear it. */
BLOB_API const char *blob_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
