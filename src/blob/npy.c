/* NumPy .npy files: an atomic writer of format 1.0 and a reader that treats every file
 * as hostile. Layout: "\x93NUMPY", major, minor, header length (u16 little-endian in
 * 1.0, u32 in 2.0 and 3.0), a Python dict literal padded with spaces and '\n', data. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/core.h"
#include "blob_impl.h"

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
#define ALIGN 64                 /* the data offset of files numpy writes */
#define HEADER_LIMIT (64 * 1024) /* longest header read; numpy itself stops at 10000 */
#define GROWTH_DIGITS 21         /* numpy leaves room for the first dim to grow this long */
#define CHUNK 16384              /* bytes converted per read or write */
#define HOST_BIG (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
#define SAVE "blob_save_npy"      /* the public functions, named in failure details */
#define LOAD "blob_load_npy"

/* Record a failure of `func` concerning the file `path`. */
__attribute__((format(printf, 4, 5))) static blob_status
file_fail(blob_status st, const char *func, const char *path, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return blob__fail(st, func, "%s: %s", path, msg);
}

/* BLOB_EIO for a failed system call `what`, with errno's text. */
static blob_status errno_fail(const char *func, const char *path, const char *what)
{
    char buf[128];
    return file_fail(BLOB_EIO, func, path, "%s: %s", what, strerror_r(errno, buf, sizeof buf));
}

static blob_status check_args(const blob *b, blob_part part, const char *path,
                              const char *func)
{
    if (!b || !path)
        return blob__fail(BLOB_EINVAL, func, "NULL argument");
    if (part != BLOB_PART_DATA && part != BLOB_PART_DIFF)
        return blob__fail(BLOB_EINVAL, func, "bad part %d", (int)part);
    return BLOB_OK;
}

/* How elements lie in memory: their type, and whether their bytes are reversed with
 * respect to the host's order. */
typedef struct {
    blob_dtype dtype;
    bool swap;
} elem_fmt;

static void copy_bytes(unsigned char *dst, const unsigned char *src, size_t n, bool swap)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[swap ? n - 1 - i : i];
}

/* Convert n elements; values change type by C conversion (f8 -> f4 rounds). */
static void convert(void *dst, elem_fmt to, const void *src, elem_fmt from, size_t n)
{
    size_t ds = blob_dtype_size(to.dtype), ss = blob_dtype_size(from.dtype);
    if (to.dtype == from.dtype && to.swap == from.swap) {
        memcpy(dst, src, n * ss);
        return;
    }
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++, d += ds, s += ss) {
        unsigned char in[8], out[8];
        copy_bytes(in, s, ss, from.swap);
        if (to.dtype == from.dtype) {
            memcpy(out, in, ss);
        } else if (to.dtype == BLOB_FLOAT32) {
            double v;
            memcpy(&v, in, sizeof v);
            float f = (float)v;
            memcpy(out, &f, sizeof f);
        } else {
            float f;
            memcpy(&f, in, sizeof f);
            double v = f;
            memcpy(out, &v, sizeof v);
        }
        copy_bytes(d, out, ds, to.swap);
    }
}

/* ---- writing ---- */

/* The header numpy writes for this array: magic, version 1.0, length, then the dict,
 * room for the first dim to grow, spaces and '\n' up to the next multiple of ALIGN.
 * Returns its length; buf must hold HEADER_WRITE_MAX bytes. */
#define HEADER_WRITE_MAX 1024 /* 32 axes of 19 digits need about 830 */
static size_t make_header(char *buf, blob_dtype dtype, int num_axes, const int64_t *shape)
{
    size_t n = MAGIC_LEN + 4, spaces = 0;
    n += (size_t)sprintf(buf + n, "{'descr': '<f%zu', 'fortran_order': False, 'shape': (",
                         blob_dtype_size(dtype));
    for (int i = 0; i < num_axes; i++) {
        int k = sprintf(buf + n, i ? ", %lld" : "%lld", (long long)shape[i]);
        if (i == 0)
            spaces = GROWTH_DIGITS - (size_t)k;
        n += (size_t)k;
    }
    n += (size_t)sprintf(buf + n, num_axes == 1 ? ",), }" : "), }");
    spaces += ALIGN - (n + spaces + 1) % ALIGN;
    memset(buf + n, ' ', spaces);
    n += spaces;
    buf[n++] = '\n';
    size_t hlen = n - MAGIC_LEN - 4;
    memcpy(buf, MAGIC "\x01\x00", MAGIC_LEN + 2);
    buf[MAGIC_LEN + 2] = (char)(hlen & 0xff);
    buf[MAGIC_LEN + 3] = (char)(hlen >> 8);
    return n;
}

/* write(2) all n bytes of buf. */
static blob_status write_all(int fd, const char *path, const void *buf, size_t n)
{
    for (const char *p = buf; n > 0;) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno_fail(SAVE, path, "write");
        p += k;
        n -= (size_t)k;
    }
    return BLOB_OK;
}

/* Where a save goes: the file at the end of the path's symbolic links, replaced by a
 * file made in the same directory. */
typedef struct {
    char target[PATH_MAX];   /* the path with its symbolic links followed */
    const char *name;        /* the target's name within its directory */
    int dir;                 /* the target's directory, open */
    bool replace;            /* the target exists: the new file gets its mode */
    mode_t mode;
    char tmp[NAME_MAX + 1];  /* the new file's temporary name in dir */
} save_ctx;

bool blob__npy_tmpfile = true;

/* What a path that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device"
         : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

static blob_status not_regular(const char *func, const char *path, mode_t mode)
{
    return file_fail(BLOB_EIO, func, path, "not a regular file (%s)", file_kind(mode));
}

/* Follow symbolic links at the end of c->target, as numpy's open() does: a save through
 * a link replaces the file it points to. Resolution stops at the first name that is
 * not a link (or does not exist: the calls that follow report real errors). */
static blob_status follow_links(save_ctx *c, const char *path)
{
    char link[PATH_MAX];
    for (int hops = 0;; hops++) {
        ssize_t n = readlink(c->target, link, sizeof link);
        if (n < 0)
            return BLOB_OK;
        if (hops == 40) /* the kernel's own limit */
            return file_fail(BLOB_EIO, SAVE, path, "too many levels of symbolic links");
        const char *slash = strrchr(c->target, '/');
        size_t keep = link[0] == '/' || !slash ? 0 : (size_t)(slash - c->target) + 1;
        if ((size_t)n >= sizeof link || keep + (size_t)n >= sizeof c->target)
            return file_fail(BLOB_EIO, SAVE, path, "symbolic link target too long");
        memcpy(c->target + keep, link, (size_t)n);
        c->target[keep + (size_t)n] = '\0';
    }
}

/* Find the file a save replaces, open its directory, and refuse a target that exists
 * and is not a regular file (a device node or FIFO would otherwise be replaced by a
 * regular file when run as root). */
static blob_status open_target(save_ctx *c, const char *path)
{
    if (strlen(path) >= sizeof c->target)
        return file_fail(BLOB_EIO, SAVE, path, "path too long");
    strcpy(c->target, path);
    BLOB_TRY(follow_links(c, path));
    char *slash = strrchr(c->target, '/');
    c->name = slash ? slash + 1 : c->target;
    if (!*c->name)
        return file_fail(BLOB_EIO, SAVE, path, "not a regular file (a directory)");
    if (slash)
        *slash = '\0';
    c->dir = open(!slash ? "." : slash == c->target ? "/" : c->target,
                  O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (slash)
        *slash = '/';
    if (c->dir < 0)
        return errno_fail(SAVE, path, "open the directory");
    struct stat sb;
    if (fstatat(c->dir, c->name, &sb, 0) == 0) {
        if (!S_ISREG(sb.st_mode))
            return not_regular(SAVE, path, sb.st_mode);
        c->replace = true;
        c->mode = sb.st_mode & 07777;
    } else if (errno != ENOENT) {
        return errno_fail(SAVE, path, "stat");
    }
    return BLOB_OK;
}

/* A fresh temporary name for the new file: the target's name and six random letters
 * (O_EXCL and linkat refuse a name that exists, and the caller draws again). */
static void temp_name(save_ctx *c)
{
    static const char letters[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static atomic_ulong counter;
    unsigned long r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = ((unsigned long)getpid() << 20) ^ (unsigned long)time(NULL) ^
            atomic_fetch_add(&counter, 0x9e3779b9ul);
    char suffix[7];
    for (int i = 0; i < 6; i++, r /= 62)
        suffix[i] = letters[r % 62];
    suffix[6] = '\0';
    snprintf(c->tmp, sizeof c->tmp, "%.240s.%s", c->name, suffix);
}

/* The header and count elements of `src` (host order), little-endian, then fsync. The
 * file gets the mode of the file it replaces; a new file keeps the mode it was created
 * with, 0666 less the umask, as numpy's files. */
static blob_status write_npy(const save_ctx *c, int fd, const char *path, const blob *b,
                             const void *src)
{
    if (c->replace && fchmod(fd, c->mode) != 0)
        return errno_fail(SAVE, path, "chmod");
    char header[HEADER_WRITE_MAX];
    size_t hlen = make_header(header, b->dtype, b->num_axes, b->shape);
    BLOB_TRY(write_all(fd, path, header, hlen));
    size_t es = blob_dtype_size(b->dtype), per = CHUNK / es;
    unsigned char buf[CHUNK];
    for (size_t done = 0, left = (size_t)b->count; left > 0;) {
        size_t n = left < per ? left : per;
        convert(buf, (elem_fmt){b->dtype, HOST_BIG}, (const unsigned char *)src + done * es,
                (elem_fmt){b->dtype, false}, n);
        BLOB_TRY(write_all(fd, path, buf, n * es));
        done += n;
        left -= n;
    }
    if (fsync(fd) != 0)
        return errno_fail(SAVE, path, "fsync");
    return BLOB_OK;
}

/* Give the unnamed file fd a temporary name in the directory: through /proc, or with
 * AT_EMPTY_PATH where privileges allow. -1 with errno when neither can. */
static int link_temp(save_ctx *c, int fd)
{
    char proc[40];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    for (int tries = 0; tries < 100; tries++) {
        temp_name(c);
        if (linkat(AT_FDCWD, proc, c->dir, c->tmp, AT_SYMLINK_FOLLOW) == 0 ||
            linkat(fd, "", c->dir, c->tmp, AT_EMPTY_PATH) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

/* Write the complete new file under c->tmp in the target's directory. It is written as
 * an unnamed file (O_TMPFILE) and named only when complete, so that a crash leaves
 * nothing behind; where the file system has no O_TMPFILE or the file cannot be named,
 * it is written under a temporary name from the start. On failure no name is left. */
static blob_status write_new(save_ctx *c, const char *path, const blob *b, const void *src)
{
    if (blob__npy_tmpfile) {
        int fd = openat(c->dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            return errno_fail(SAVE, path, "open an unnamed file");
        if (fd >= 0) {
            blob_status st = write_npy(c, fd, path, b, src);
            bool linked = st == BLOB_OK && link_temp(c, fd) == 0;
            if (close(fd) != 0 && st == BLOB_OK)
                st = errno_fail(SAVE, path, "close");
            if (st != BLOB_OK && linked)
                unlinkat(c->dir, c->tmp, 0);
            if (st != BLOB_OK || linked)
                return st;
        }
    }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        temp_name(c);
        fd = openat(c->dir, c->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        return errno_fail(SAVE, path, "create a temporary file");
    blob_status st = write_npy(c, fd, path, b, src);
    if (close(fd) != 0 && st == BLOB_OK)
        st = errno_fail(SAVE, path, "close");
    if (st != BLOB_OK)
        unlinkat(c->dir, c->tmp, 0);
    return st;
}

blob_status blob_save_npy(blob *b, blob_part part, const char *path)
{
    BLOB_TRY(check_args(b, part, path, SAVE));
    const void *src;
    BLOB_TRY(part == BLOB_PART_DATA ? blob_cpu_data(b, &src) : blob_cpu_diff(b, &src));
    save_ctx *c = blob__obj_alloc(sizeof *c);
    if (!c)
        return BLOB_ENOMEM;
    c->dir = -1;
    blob_status st = open_target(c, path);
    if (st == BLOB_OK)
        st = write_new(c, path, b, src);
    if (st == BLOB_OK && renameat(c->dir, c->tmp, c->dir, c->name) != 0) {
        st = errno_fail(SAVE, path, "rename");
        unlinkat(c->dir, c->tmp, 0);
    }
    /* The rename is durable once the directory is; a file system that cannot sync a
     * directory says EINVAL, and there is nothing more to do. */
    if (st == BLOB_OK && fsync(c->dir) != 0 && errno != EINVAL)
        st = errno_fail(SAVE, path, "fsync of the directory");
    if (c->dir >= 0)
        close(c->dir);
    blob__obj_free(c);
    return st;
}

/* ---- reading ---- */

typedef struct {
    blob_dtype dtype;
    bool big_endian;
    int num_axes;
    int64_t shape[BLOB_MAX_AXES];
    int64_t count;
} npy_header;

/* The unparsed rest of the header dict. */
typedef struct {
    const char *p, *start, *end;
    const char *path;
} cursor;

__attribute__((format(printf, 2, 3))) static blob_status syntax(const cursor *c,
                                                                 const char *fmt, ...)
{
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return file_fail(BLOB_EFORMAT, LOAD, c->path, "header byte %td: %s", c->p - c->start, msg);
}

static void skip_space(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

/* Skip white space, then consume ch if it comes next. */
static bool at(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static blob_status expect(cursor *c, char ch)
{
    return at(c, ch) ? BLOB_OK : syntax(c, "expected '%c'", ch);
}

/* A quoted string without escapes: '...' or "...". */
static blob_status parse_string(cursor *c, const char **s, int *len)
{
    char q = at(c, '\'') ? '\'' : at(c, '"') ? '"' : 0;
    if (!q)
        return syntax(c, "expected a quoted string");
    const char *e = c->p;
    while (e < c->end && *e != q && *e != '\\' && *e != '\n' && *e)
        e++;
    if (e == c->end || *e != q)
        return syntax(c, "unterminated string or escape sequence");
    *s = c->p;
    *len = (int)(e - c->p);
    c->p = e + 1;
    return BLOB_OK;
}

static blob_status parse_bool(cursor *c, bool *v)
{
    skip_space(c);
    const char *e = c->p;
    while (e < c->end && (*e == '_' || (*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z')))
        e++;
    int n = (int)(e - c->p);
    if ((n == 4 && !memcmp(c->p, "True", 4)) || (n == 5 && !memcmp(c->p, "False", 5))) {
        *v = n == 4;
        c->p = e;
        return BLOB_OK;
    }
    return syntax(c, "fortran_order is not True or False");
}

/* A tuple of non-negative decimal ints: "()", "(5,)", "(2, 3)", "(2, 3,)". */
static blob_status parse_shape(cursor *c, npy_header *h)
{
    BLOB_TRY(expect(c, '('));
    bool comma = false;
    h->num_axes = 0;
    while (!at(c, ')')) {
        if (h->num_axes == BLOB_MAX_AXES)
            return syntax(c, "shape has more than %d axes", BLOB_MAX_AXES);
        bool neg = at(c, '-');
        const char *d = c->p;
        int64_t v = 0;
        for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
            if (v > (INT64_MAX - (*c->p - '0')) / 10)
                return syntax(c, "dim %d is too large", h->num_axes);
            v = v * 10 + (*c->p - '0');
        }
        if (c->p == d)
            return syntax(c, "expected a dim");
        if (c->p < c->end && *c->p == 'L') /* a long, in files written by Python 2 */
            c->p++;
        if (neg)
            return syntax(c, "dim %d is negative", h->num_axes);
        h->shape[h->num_axes++] = v;
        comma = at(c, ',');
        if (!comma && !at(c, ')'))
            return syntax(c, "expected ',' or ')' in shape");
        if (!comma)
            break;
    }
    if (h->num_axes == 1 && !comma)
        return syntax(c, "shape is not a tuple (a 1-tuple needs a trailing comma)");
    return BLOB_OK;
}

static blob_status parse_descr(cursor *c, npy_header *h)
{
    const char *s;
    int n;
    BLOB_TRY(parse_string(c, &s, &n));
    if (n != 3 || !strchr("<>=", s[0]) || s[1] != 'f' || (s[2] != '4' && s[2] != '8'))
        return file_fail(BLOB_EFORMAT, LOAD, c->path,
                         "unsupported dtype '%.*s' (only '<f4', '<f8', '>f4', '>f8')", n, s);
    h->dtype = s[2] == '4' ? BLOB_FLOAT32 : BLOB_FLOAT64;
    h->big_endian = s[0] == '=' ? HOST_BIG : s[0] == '>';
    return BLOB_OK;
}

/* The header dict: exactly the keys descr, fortran_order and shape, in any order. */
static blob_status parse_dict(cursor *c, npy_header *h)
{
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    bool seen[3] = {false, false, false}, fortran = false;
    BLOB_TRY(expect(c, '{'));
    while (!at(c, '}')) {
        const char *k;
        int n, i = 0;
        BLOB_TRY(parse_string(c, &k, &n));
        while (i < 3 && !((int)strlen(keys[i]) == n && !memcmp(k, keys[i], (size_t)n)))
            i++;
        if (i == 3)
            return file_fail(BLOB_EFORMAT, LOAD, c->path, "unexpected key '%.*s'", n, k);
        if (seen[i])
            return file_fail(BLOB_EFORMAT, LOAD, c->path, "duplicate key '%s'", keys[i]);
        seen[i] = true;
        BLOB_TRY(expect(c, ':'));
        BLOB_TRY(i == 0 ? parse_descr(c, h) : i == 1 ? parse_bool(c, &fortran) : parse_shape(c, h));
        if (!at(c, ',')) {
            BLOB_TRY(expect(c, '}'));
            break;
        }
    }
    skip_space(c);
    if (c->p != c->end)
        return syntax(c, "unexpected text after the dict");
    for (int i = 0; i < 3; i++)
        if (!seen[i])
            return file_fail(BLOB_EFORMAT, LOAD, c->path, "missing key '%s'", keys[i]);
    if (fortran)
        return file_fail(BLOB_EFORMAT, LOAD, c->path, "fortran_order True is not supported");
    return BLOB_OK;
}

/* A read that came up short: an I/O error, or a file that ends early. */
static blob_status short_read(FILE *f, const char *path, const char *what)
{
    if (ferror(f))
        return errno_fail(LOAD, path, "read");
    return file_fail(BLOB_EFORMAT, LOAD, path, "file ends inside the %s", what);
}

/* Read and check everything up to the data, leaving f at the data: the header, and that
 * the rest of the file holds exactly the elements the shape needs. The shape is checked
 * to fit in memory as `dtype`. */
static blob_status read_header(FILE *f, const char *path, blob_dtype dtype, npy_header *h)
{
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        return errno_fail(LOAD, path, "fstat");
    if (!S_ISREG(sb.st_mode)) /* the path changed after open_regular's check */
        return not_regular(LOAD, path, sb.st_mode);
    unsigned char pre[MAGIC_LEN + 6];
    if (fread(pre, 1, MAGIC_LEN + 2, f) != MAGIC_LEN + 2)
        return short_read(f, path, "magic string");
    if (memcmp(pre, MAGIC, MAGIC_LEN) != 0)
        return file_fail(BLOB_EFORMAT, LOAD, path, "not a .npy file (bad magic string)");
    int major = pre[MAGIC_LEN], minor = pre[MAGIC_LEN + 1];
    if (major < 1 || major > 3 || minor != 0)
        return file_fail(BLOB_EFORMAT, LOAD, path, "unsupported format version %d.%d", major,
                         minor);
    size_t lsize = major == 1 ? 2 : 4;
    unsigned char *l = pre + MAGIC_LEN + 2;
    if (fread(l, 1, lsize, f) != lsize)
        return short_read(f, path, "header length");
    uint32_t hlen = l[0] | (uint32_t)l[1] << 8;
    if (lsize == 4)
        hlen |= (uint32_t)l[2] << 16 | (uint32_t)l[3] << 24;
    if (hlen > HEADER_LIMIT)
        return file_fail(BLOB_EFORMAT, LOAD, path, "header length %u exceeds the limit of %d",
                         hlen, HEADER_LIMIT);
    int64_t data_at = MAGIC_LEN + 2 + (int64_t)lsize + hlen;
    if (data_at > sb.st_size)
        return file_fail(BLOB_EFORMAT, LOAD, path,
                         "header of %u bytes runs past the end of the %lld-byte file", hlen,
                         (long long)sb.st_size);
    char *text = blob__obj_alloc(hlen ? hlen : 1);
    if (!text)
        return BLOB_ENOMEM;
    blob_status st = fread(text, 1, hlen, f) == hlen ? BLOB_OK : short_read(f, path, "header");
    if (st == BLOB_OK) {
        cursor c = {text, text, text + hlen, path};
        st = parse_dict(&c, h);
    }
    blob__obj_free(text);
    BLOB_TRY(st);
    /* The shape must fit in memory as the file's own elements, as numpy requires (the
     * dims other than 0 included), and then as the blob's. */
    if (blob__shape_count(LOAD, h->dtype, h->num_axes, h->shape, &h->count) != BLOB_OK)
        return file_fail(BLOB_EFORMAT, LOAD, path, "shape's element count overflows");
    uint64_t avail = (uint64_t)(sb.st_size - data_at);
    uint64_t need = (uint64_t)h->count * blob_dtype_size(h->dtype);
    if (avail != need)
        return file_fail(BLOB_EFORMAT, LOAD, path, "data holds %llu bytes, the shape needs %llu",
                         (unsigned long long)avail, (unsigned long long)need);
    int64_t count;
    if (blob__shape_count(LOAD, dtype, h->num_axes, h->shape, &count) != BLOB_OK)
        return file_fail(BLOB_EOVERFLOW, LOAD, path,
                         "the shape overflows as the blob's %zu-byte elements",
                         blob_dtype_size(dtype));
    return BLOB_OK;
}

/* Read the data into a new block of h->count elements of `dtype` on `device`. */
static blob_status read_block(FILE *f, const char *path, const npy_header *h, blob_dtype dtype,
                              int device, blob_syncedmem **out)
{
    size_t ds = blob_dtype_size(dtype), ss = blob_dtype_size(h->dtype), per = CHUNK / ss;
    blob_syncedmem *mem;
    void *dst;
    BLOB_TRY(blob_syncedmem_create(&mem, (size_t)h->count * ds, device));
    blob_status st = blob_syncedmem_mutable_cpu_data(mem, &dst);
    unsigned char buf[CHUNK];
    for (size_t done = 0, left = (size_t)h->count; st == BLOB_OK && left > 0;) {
        size_t n = left < per ? left : per;
        if (fread(buf, ss, n, f) != n) {
            st = short_read(f, path, "data");
            break;
        }
        convert((unsigned char *)dst + done * ds, (elem_fmt){dtype, false}, buf,
                (elem_fmt){h->dtype, h->big_endian != HOST_BIG}, n);
        done += n;
        left -= n;
    }
    if (st != BLOB_OK) {
        blob_syncedmem_free(mem);
        return st;
    }
    *out = mem;
    return BLOB_OK;
}

/* Open path for reading if it is a regular file. Anything else is refused before it is
 * opened (opening a FIFO waits for a writer; opening a device may act on it), and the
 * open does not block either, in case the path changes in between: read_header checks
 * the type of what was opened. */
static blob_status open_regular(const char *path, FILE **out)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return errno_fail(LOAD, path, "open");
    if (!S_ISREG(sb.st_mode))
        return not_regular(LOAD, path, sb.st_mode);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return errno_fail(LOAD, path, "open");
    if (!(*out = fdopen(fd, "rb"))) {
        blob_status st = errno_fail(LOAD, path, "fdopen");
        close(fd);
        return st;
    }
    return BLOB_OK;
}

blob_status blob_load_npy(blob *b, blob_part part, const char *path)
{
    BLOB_TRY(check_args(b, part, path, LOAD));
    FILE *f;
    BLOB_TRY(open_regular(path, &f));
    npy_header h;
    blob_syncedmem *mem = NULL, *other = part == BLOB_PART_DATA ? b->diff : b->data;
    blob_status st = read_header(f, path, b->dtype, &h);
    if (st == BLOB_OK)
        st = read_block(f, path, &h, b->dtype, b->device, &mem);
    fclose(f);
    if (st == BLOB_OK && (st = blob__block_for(b, other, h.count, &other)) != BLOB_OK)
        blob_syncedmem_free(mem);
    BLOB_TRY(st);
    if (part == BLOB_PART_DATA)
        blob__commit(b, h.num_axes, h.shape, h.count, mem, other);
    else
        blob__commit(b, h.num_axes, h.shape, h.count, other, mem);
    return BLOB_OK;
}
