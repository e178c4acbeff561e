#include <stdarg.h>
#include <stdio.h>

#include "core.h"

const char *blob_strerror(blob_status status)
{
    switch (status) {
#define BLOB__STATUS_MESSAGE(name, value, msg) \
    case BLOB_##name: return msg;
        BLOB_STATUS_MAP(BLOB__STATUS_MESSAGE)
#undef BLOB__STATUS_MESSAGE
    }
    return "unknown status";
}

const char *blob_status_name(blob_status status)
{
    switch (status) {
#define BLOB__STATUS_NAME(name, value, msg) \
    case BLOB_##name: return #name;
        BLOB_STATUS_MAP(BLOB__STATUS_NAME)
#undef BLOB__STATUS_NAME
    }
    return "UNKNOWN";
}

static _Thread_local char last_error[512];

const char *blob_last_error(void) { return last_error; }

/* last_error = "func: path: " and the message, func and path each left out when NULL. */
static void record(const char *func, const char *path, const char *fmt, va_list ap)
{
    int n = snprintf(last_error, sizeof last_error, "%s%s%s%s", func ? func : "", func ? ": " : "",
                     path ? path : "", path ? ": " : "");
    if (n >= 0 && (size_t)n < sizeof last_error)
        vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
}

blob_status blob__fail(blob_status status, const char *func, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(func, NULL, fmt, ap);
    va_end(ap);
    return status;
}

blob_status blob__fail_path(blob_status status, const char *func, const char *path, const char *fmt,
                            ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(func, path, fmt, ap);
    va_end(ap);
    return status;
}
