#include "fmnist.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_UBYTE 0x08
/* Bound on a dimension left free, so a forged header cannot ask for terabytes. */
#define MAX_FREE_DIM (1u << 20)

static int fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* Read exactly n bytes; 0 on success, -1 with err set (truncated or unreadable). */
static int read_all(gzFile gz, const char *path, void *buf, size_t n, char *err, size_t size)
{
    size_t done = 0; /* n < 2^30, given MAX_FREE_DIM */
    while (done < n) {
        int got = gzread(gz, (uint8_t *)buf + done, (unsigned)(n - done)), code;
        const char *msg = gzerror(gz, &code);
        if (got < 0 || (got == 0 && code != Z_OK && code != Z_BUF_ERROR))
            return code == Z_ERRNO ? fail(err, size, "%s: %s", path, strerror(errno))
                                   : fail(err, size, "%s", msg); /* msg names the file */
        if (got == 0)
            return fail(err, size, "%s: truncated: %zu bytes missing", path, n - done);
        done += (size_t)got;
    }
    return 0;
}

/* Read an IDX file of unsigned bytes with `ndims` dimensions, each equal to expect[i],
 * or at most MAX_FREE_DIM where that is 0 (what[i] names it in messages), into dims and a
 * fresh payload. */
static int read_idx(const char *path, int ndims, const uint32_t *expect,
                    const char *const *what, uint32_t *dims, uint8_t **payload, char *err,
                    size_t size)
{
    *payload = NULL;
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return fail(err, size, "%s: %s", path, errno ? strerror(errno) : "cannot open");
    uint8_t head[4 + 4 * 3];
    int rc = read_all(gz, path, head, 4 + 4 * (size_t)ndims, err, size);
    if (rc == 0 && (head[0] || head[1] || head[2] != IDX_UBYTE || head[3] != ndims))
        rc = fail(err, size, "%s: not %d-D IDX unsigned bytes (magic %02x%02x%02x%02x)", path,
                  ndims, head[0], head[1], head[2], head[3]);
    size_t n = 1;
    for (int i = 0; rc == 0 && i < ndims; i++) {
        const uint8_t *d = head + 4 + 4 * i;
        dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
        if (dims[i] == 0)
            rc = fail(err, size, "%s: no %s", path, what[i]);
        else if (expect[i] && dims[i] != expect[i])
            rc = fail(err, size, "%s: %u %s, expected %u", path, dims[i], what[i], expect[i]);
        else if (!expect[i] && dims[i] > MAX_FREE_DIM)
            rc = fail(err, size, "%s: %u %s, more than the %u accepted", path, dims[i],
                      what[i], MAX_FREE_DIM);
        n *= dims[i];
    }
    if (rc == 0 && !(*payload = malloc(n)))
        rc = fail(err, size, "%s: out of memory for %zu bytes", path, n);
    if (rc == 0)
        rc = read_all(gz, path, *payload, n, err, size);
    uint8_t extra;
    if (rc == 0 && gzread(gz, &extra, 1) != 0)
        rc = fail(err, size, "%s: unexpected data after %zu bytes of payload", path, n);
    gzclose(gz);
    if (rc) {
        free(*payload);
        *payload = NULL;
    }
    return rc;
}

int fmnist_load(fmnist_set *set, const char *dir, const char *prefix, char *err,
                size_t err_size)
{
    memset(set, 0, sizeof *set);
    char images[4096], labels[4096];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    static const char *const image_dims[] = {"images", "rows", "columns"};
    static const char *const label_dims[] = {"labels"};
    uint32_t idims[3], expect[3] = {0, FMNIST_SIDE, FMNIST_SIDE}, count;
    int rc = read_idx(images, 3, expect, image_dims, idims, &set->images, err, err_size);
    if (rc == 0)
        rc = read_idx(labels, 1, idims, label_dims, &count, &set->labels, err, err_size);
    for (uint32_t i = 0; rc == 0 && i < count; i++)
        if (set->labels[i] >= FMNIST_CLASSES)
            rc = fail(err, err_size, "%s: label %u of image %u is not in 0..%d", labels,
                      set->labels[i], i, FMNIST_CLASSES - 1);
    if (rc) {
        fmnist_free(set);
        return -1;
    }
    set->count = count;
    return 0;
}

void fmnist_free(fmnist_set *set)
{
    free(set->images);
    free(set->labels);
    memset(set, 0, sizeof *set);
}
