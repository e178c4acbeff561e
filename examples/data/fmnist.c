#define _POSIX_C_SOURCE 200809L /* dup, O_CLOEXEC, O_NOCTTY */

#include "fmnist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_UBYTE    0x08
/* Bound on a dimension left free, so a forged header cannot ask for terabytes. */
#define MAX_FREE_DIM (1u << 20)
/* The payload buffer starts this large and doubles as data arrives. */
#define FIRST_CHUNK  (64u << 10)

static int fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* Read up to n bytes (n < 2^31): the count read, 0 at the end of the data, or -1 with
 * err set (unreadable or corrupt). */
static long read_some(gzFile gz, const char *name, void *buf, size_t n, char *err, size_t size)
{
    int got = gzread(gz, buf, (unsigned)n), code;
    if (got > 0)
        return got;
    const char *msg = gzerror(gz, &code);
    if (got == 0 && (code == Z_OK || code == Z_BUF_ERROR))
        return 0;
    if (code == Z_ERRNO)
        return fail(err, size, "%s: %s", name, strerror(errno));
    const char *sep = strstr(msg, ": "); /* zlib's message starts with "<fd:N>: " */
    return fail(err, size, "%s: %s", name, sep ? sep + 2 : msg);
}

/* Read exactly n bytes into buf; 0, or -1 with err set (truncated or unreadable). */
static int read_all(gzFile gz, const char *name, uint8_t *buf, size_t n, char *err, size_t size)
{
    for (size_t done = 0; done < n;) {
        long got = read_some(gz, name, buf + done, n - done, err, size);
        if (got < 0)
            return -1;
        if (got == 0)
            return fail(err, size, "%s: truncated: %zu bytes missing", name, n - done);
        done += (size_t)got;
    }
    return 0;
}

/* Read the n-byte payload into a fresh buffer that grows (doubling) as the data arrives,
 * so that a header claiming more than the file holds costs no more memory than the data
 * actually read. */
static int read_payload(gzFile gz, const char *name, size_t n, uint8_t **out, char *err,
                        size_t size)
{
    uint8_t *buf = NULL;
    size_t cap = 0, done = 0;
    while (done < n) {
        if (done == cap) {
            cap = cap ? cap * 2 : FIRST_CHUNK;
            cap = cap < n ? cap : n;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                return fail(err, size, "%s: out of memory for %zu bytes", name, cap);
            }
            buf = grown;
        }
        long got = read_some(gz, name, buf + done, cap - done, err, size);
        if (got <= 0) {
            free(buf);
            return got < 0 ? -1
                           : fail(err, size, "%s: truncated: %zu bytes missing", name, n - done);
        }
        done += (size_t)got;
    }
    *out = buf;
    return 0;
}

/* Read an IDX file of unsigned bytes with `ndims` dimensions, each equal to expect[i],
 * or at most MAX_FREE_DIM where that is 0 (what[i] names it in messages), into dims and a
 * fresh payload. fd stays open. */
static int read_idx(int fd, const char *name, int ndims, const uint32_t *expect,
                    const char *const *what, uint32_t *dims, uint8_t **payload, char *err,
                    size_t size)
{
    *payload = NULL;
    errno = 0;
    int own = dup(fd);
    gzFile gz = own < 0 ? NULL : gzdopen(own, "rb");
    if (!gz) {
        int e = errno;
        if (own >= 0)
            close(own);
        return fail(err, size, "%s: %s", name, e ? strerror(e) : "cannot read");
    }
    uint8_t head[4 + 4 * 3];
    int rc = read_all(gz, name, head, 4 + 4 * (size_t)ndims, err, size);
    if (rc == 0 && (head[0] || head[1] || head[2] != IDX_UBYTE || head[3] != ndims))
        rc = fail(err, size, "%s: not %d-D IDX unsigned bytes (magic %02x%02x%02x%02x)", name,
                  ndims, head[0], head[1], head[2], head[3]);
    size_t n = 1;
    for (int i = 0; rc == 0 && i < ndims; i++) {
        const uint8_t *d = head + 4 + 4 * i;
        dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
        if (dims[i] == 0)
            rc = fail(err, size, "%s: no %s", name, what[i]);
        else if (expect[i] && dims[i] != expect[i])
            rc = fail(err, size, "%s: %u %s, expected %u", name, dims[i], what[i], expect[i]);
        else if (!expect[i] && dims[i] > MAX_FREE_DIM)
            rc = fail(err, size, "%s: %u %s, more than the %u accepted", name, dims[i], what[i],
                      MAX_FREE_DIM);
        n *= dims[i];
    }
    if (rc == 0)
        rc = read_payload(gz, name, n, payload, err, size);
    uint8_t extra;
    if (rc == 0 && gzread(gz, &extra, 1) != 0)
        rc = fail(err, size, "%s: unexpected data after %zu bytes of payload", name, n);
    gzclose(gz);
    if (rc) {
        free(*payload);
        *payload = NULL;
    }
    return rc;
}

int fmnist_read(fmnist_set *set, int images_fd, const char *images_name, int labels_fd,
                const char *labels_name, char *err, size_t err_size)
{
    memset(set, 0, sizeof *set);
    static const char *const image_dims[] = {"images", "rows", "columns"};
    static const char *const label_dims[] = {"labels"};
    uint32_t idims[3], expect[3] = {0, FMNIST_SIDE, FMNIST_SIDE}, count;
    int rc =
        read_idx(images_fd, images_name, 3, expect, image_dims, idims, &set->images, err, err_size);
    if (rc == 0)
        rc = read_idx(labels_fd, labels_name, 1, idims, label_dims, &count, &set->labels, err,
                      err_size);
    for (uint32_t i = 0; rc == 0 && i < count; i++)
        if (set->labels[i] >= FMNIST_CLASSES)
            rc = fail(err, err_size, "%s: label %u of image %u is not in 0..%d", labels_name,
                      set->labels[i], i, FMNIST_CLASSES - 1);
    if (rc) {
        fmnist_free(set);
        return -1;
    }
    set->count = count;
    return 0;
}

/* Open path for reading if it is a regular file, as blob_load_npy does: anything else
 * is refused before it is opened (opening a FIFO waits for a writer, opening a device may
 * act on it), and the open does not block either, in case the path changes in between.
 * The descriptor, or -1 with err set. */
static int open_regular(const char *path, char *err, size_t size)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return fail(err, size, "%s: %s", path, strerror(errno));
    int fd = -1;
    if (S_ISREG(sb.st_mode) && (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) < 0)
        return fail(err, size, "%s: %s", path, strerror(errno));
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
        return fd;
    if (fd >= 0)
        close(fd);
    return fail(err, size, "%s: not a regular file (%s)", path,
                S_ISDIR(sb.st_mode)                          ? "a directory"
                : S_ISFIFO(sb.st_mode)                       ? "a FIFO"
                : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                                                             : "a socket");
}

int fmnist_load(fmnist_set *set, const char *dir, const char *prefix, char *err, size_t err_size)
{
    memset(set, 0, sizeof *set);
    char images[4096], labels[4096];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    int ifd = open_regular(images, err, err_size);
    if (ifd < 0)
        return -1;
    int lfd = open_regular(labels, err, err_size);
    if (lfd < 0) {
        close(ifd);
        return -1;
    }
    int rc = fmnist_read(set, ifd, images, lfd, labels, err, err_size);
    close(ifd);
    close(lfd);
    return rc;
}

void fmnist_free(fmnist_set *set)
{
    free(set->images);
    free(set->labels);
    memset(set, 0, sizeof *set);
}
