/* The environment's settings (env.h). */
#include "env.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core.h"
#include "number.h"

/* The value as messages show it: up to 40 characters, those outside printable ASCII as
 * '?', "..." after a longer one. */
static const char *shown(const char *v, char buf[48])
{
    size_t n = 0;
    for (; v[n] && n < 40; n++)
        buf[n] = v[n] >= ' ' && v[n] <= '~' ? v[n] : '?';
    strcpy(buf + n, v[n] ? "..." : "");
    return buf;
}

/* BLOB_EINVAL: `NAME="value" is not <what>`. */
__attribute__((format(printf, 4, 5))) static blob_status refuse(const char *func, const char *name,
                                                                const char *value, const char *what,
                                                                ...)
{
    char why[160], buf[48];
    va_list ap;
    va_start(ap, what);
    vsnprintf(why, sizeof why, what, ap);
    va_end(ap);
    return blob__fail(BLOB_EINVAL, func, "%s=\"%s\" is not %s", name, shown(value, buf), why);
}

blob_status blob__env_int(const char *func, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = getenv(name);
    if (v && !blob__parse_int(v, lo, hi, out))
        return refuse(func, name, v, "an integer in [%" PRId64 ", %" PRId64 "]", lo, hi);
    return BLOB_OK;
}

blob_status blob__env_seconds(const char *func, const char *name, double lo, double hi, double *out)
{
    const char *v = getenv(name);
    if (v && !blob__parse_decimal(v, lo, hi, out))
        return refuse(func, name, v, "a number of seconds in [%g, %g]", lo, hi);
    return BLOB_OK;
}

blob_status blob__env_bool(const char *func, const char *name, bool *out)
{
    const char *v = getenv(name);
    if (!v)
        return BLOB_OK;
    if (strcmp(v, "0") && strcmp(v, "1"))
        return refuse(func, name, v, "0 or 1");
    *out = v[0] == '1';
    return BLOB_OK;
}

blob_status blob__env_choice(const char *func, const char *name, const char *const *choices,
                             int *out)
{
    const char *v = getenv(name);
    if (!v)
        return BLOB_OK;
    char list[160] = "";
    for (int i = 0; choices[i]; i++) {
        if (!strcasecmp(v, choices[i])) {
            *out = i;
            return BLOB_OK;
        }
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", choices[i]);
    }
    return refuse(func, name, v, "one of %s", list);
}

blob_status blob__env_text(const char *func, const char *name, size_t max, const char **out)
{
    const char *v = getenv(name);
    if (!v)
        return BLOB_OK;
    if (!*v)
        return blob__fail(BLOB_EINVAL, func, "%s is empty", name);
    if (strnlen(v, max + 1) > max)
        return blob__fail(BLOB_EINVAL, func, "%s is longer than %zu characters", name, max);
    *out = v;
    return BLOB_OK;
}

const char *blob__env_raw(const char *name) { return getenv(name); }

void blob__env_keep(blob__env_fault *f, blob_status st)
{
    f->status = st;
    if (st != BLOB_OK)
        snprintf(f->detail, sizeof f->detail, "%s", blob_last_error());
}

blob_status blob__env_raise(const blob__env_fault *f, const char *func)
{
    if (f->status != BLOB_OK)
        return blob__fail(f->status, func, "%s", f->detail);
    return BLOB_OK;
}
