/* Internal: the environment's settings, each read here and nowhere else, strictly, in
 * the spirit of NCCL_PARAM. A setting that is not set leaves *out as it was (its
 * default). A setting that is set but malformed is BLOB_EINVAL, its detail recorded
 * under func, the public call that reads it, naming the variable and its value, e.g.
 * `blob_comm_create: BLOB_COMM_TIMEOUT="0x10" is not a number of seconds in [0.001,
 * 31536000]`. With func NULL the detail is the message alone (for blob__env_keep). Never
 * installed. */
#ifndef BLOB_ENV_H
#define BLOB_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/status.h"

/* A decimal integer in [lo, hi] (number.h's syntax). */
blob_status blob__env_int(const char *func, const char *name, int64_t lo, int64_t hi, int64_t *out);

/* A number of seconds in [lo, hi], a decimal (number.h's syntax). */
blob_status blob__env_seconds(const char *func, const char *name, double lo, double hi,
                              double *out);

/* "0" or "1". */
blob_status blob__env_bool(const char *func, const char *name, bool *out);

/* One of choices (a NULL-terminated list), in any case: *out is its index. */
blob_status blob__env_choice(const char *func, const char *name, const char *const *choices,
                             int *out);

/* Text of 1 to max characters; the pointer is getenv's. */
blob_status blob__env_text(const char *func, const char *name, size_t max, const char **out);

/* The value as it is, or NULL: of another library's variable, which this one passes on
 * or only looks for (OPENBLAS_CORETYPE, NCCL_COMM_ID), or to find which of several
 * variables is set before reading it. */
const char *blob__env_raw(const char *name);

/* The failure of a process-wide setting read once, at first use, where no call can
 * report it: kept, and reported again by each call that depends on the setting, under
 * that call's name. Zero-initialized: no failure. */
typedef struct {
    blob_status status;
    char detail[200];
} blob__env_fault;

/* Keep st, the result of a read with func NULL (its detail just recorded). */
void blob__env_keep(blob__env_fault *f, blob_status st);

/* BLOB_OK, or the kept failure recorded under func. */
blob_status blob__env_raise(const blob__env_fault *f, const char *func);

#endif
