/* Internal: strict decimal numbers, read the same way by the environment's settings
 * (env.c) and blob-launch's options. No space, '+', hex, exponent, "inf" or "nan" is
 * accepted, and the locale plays no part. Depends on nothing else of the library. Never
 * installed. */
#ifndef BLOB_NUMBER_H
#define BLOB_NUMBER_H

#include <stdbool.h>
#include <stdint.h>

/* s as an integer in [lo, hi]: an optional '-' then decimal digits. */
bool blob__parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* s as a number in [lo, hi]: an optional '-' then decimal digits with at most one '.'
 * among or after them ("2", "2.5", "0.25", "2."; not ".5"), at most 15 significant
 * digits and 22 after the point, so that the value is the decimal's nearest double. */
bool blob__parse_decimal(const char *s, double lo, double hi, double *out);

#endif
