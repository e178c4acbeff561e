/* NumPy .npy files: an atomic writer of format 1.0 and a reader that treats every file
 * as hostile. Layout: "\x93NUMPY", major, minor, header length (u16 little-endian in
 * 1.0, u32 in 2.0 and 3.0), a Python dict literal padded with spaces and '\n', data. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/core.h"
#include "../core/file.h"
#include "blob/blas.h"
#include "blob_impl.h"

#define MAGIC         "\x93NUMPY"
#define MAGIC_LEN     6
#define ALIGN         64          /* the data offset of files numpy writes */
#define HEADER_LIMIT  (64 * 1024) /* longest header read; numpy itself stops at 10000 */
#define GROWTH_DIGITS 21          /* numpy leaves room for the first dim to grow this long */
#define CHUNK         16384       /* bytes converted per read or write */
#define HOST_BIG      (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
#define SAVE          "blob_save_npy" /* the public functions, named in failure details */
#define LOAD          "blob_load_npy"

/* Record a failure of `func` concerning the file `path`. */
#define file_fail blob__fail_path

/* BLOB_EIO for a failed system call `what`, with errno's text. */
static blob_status errno_fail(const char *func, const char *path, const char *what)
{
    char buf[128];
    return file_fail(BLOB_EIO, func, path, "%s: %s", what, strerror_r(errno, buf, sizeof buf));
}

static blob_status check_args(const blob *b, blob_part part, const char *path, const char *func)
{
    if (!b || !path)
        return blob__fail(BLOB_EINVAL, func, "NULL argument");
    if (part != BLOB_PART_DATA && part != BLOB_PART_DIFF)
        return blob__fail(BLOB_EINVAL, func, "bad part %d", (int)part);
    return BLOB_OK;
}

/* The .npy descr of each dtype but bfloat16, which NumPy lacks: kind and size. */
static const struct {
    char kind, size;
    blob_dtype dtype;
} DESCRS[] = {{'f', '2', BLOB_FLOAT16}, {'f', '4', BLOB_FLOAT32}, {'f', '8', BLOB_FLOAT64},
              {'i', '4', BLOB_INT32},   {'i', '8', BLOB_INT64},   {'u', '1', BLOB_UINT8}};
#define NDESCRS (sizeof DESCRS / sizeof *DESCRS)

/* The index in DESCRS of dtype; BLOB_ENOTSUP, recorded under func, for bfloat16. */
static blob_status descr_of(const char *func, blob_dtype dtype, size_t *out)
{
    for (size_t i = 0; i < NDESCRS; i++)
        if (DESCRS[i].dtype == dtype) {
            *out = i;
            return BLOB_OK;
        }
    return blob__fail(BLOB_ENOTSUP, func,
                      "%s blobs have no .npy dtype (NumPy has no "
                      "bfloat16; blob_convert_from gives a float32 copy)",
                      blob_dtype_name(dtype));
}

/* Reverse the bytes of each of the n elements of es bytes at p. */
static void swap_each(unsigned char *p, size_t n, size_t es)
{
    for (size_t i = 0; i < n; i++, p += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* ---- writing ---- */

/* The header numpy writes for this array: magic, version 1.0, length, then the dict,
 * room for the first dim to grow, spaces and '\n' up to the next multiple of ALIGN.
 * Returns its length; buf must hold HEADER_WRITE_MAX bytes. */
#define HEADER_WRITE_MAX 1024 /* 32 axes of 19 digits need about 830 */
static size_t make_header(char *buf, size_t descr, int num_axes, const int64_t *shape)
{
    size_t n = MAGIC_LEN + 4, spaces = 0;
    n += (size_t)sprintf(buf + n, "{'descr': '%c%c%c', 'fortran_order': False, 'shape': (",
                         DESCRS[descr].size == '1' ? '|' : '<', DESCRS[descr].kind,
                         DESCRS[descr].size);
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

/* What a save writes: the header and count elements of src (host order),
 * little-endian. */
typedef struct {
    const char *path;
    const blob *b;
    size_t descr;
    const void *src;
} save_args;

static blob_status write_npy(int fd, void *ctx)
{
    const save_args *a = ctx;
    const blob *b = a->b;
    char header[HEADER_WRITE_MAX];
    size_t hlen = make_header(header, a->descr, b->num_axes, b->shape);
    BLOB_TRY(blob__write_all(SAVE, a->path, fd, header, hlen));
    size_t es = blob_dtype_size(b->dtype), per = CHUNK / es;
    unsigned char buf[CHUNK];
    for (size_t done = 0, left = (size_t)b->count; left > 0;) {
        size_t n = left < per ? left : per;
        memcpy(buf, (const unsigned char *)a->src + done * es, n * es);
        if (HOST_BIG)
            swap_each(buf, n, es);
        BLOB_TRY(blob__write_all(SAVE, a->path, fd, buf, n * es));
        done += n;
        left -= n;
    }
    return BLOB_OK;
}

/* A new file gets 0666 less the umask, as numpy's files; a replaced file keeps its
 * mode. */
blob_status blob_save_npy(blob *b, blob_part part, const char *path)
{
    BLOB_TRY(check_args(b, part, path, SAVE));
    save_args a = {path, b, 0, NULL};
    BLOB_TRY(descr_of(SAVE, b->dtype, &a.descr));
    BLOB_TRY(part == BLOB_PART_DATA ? blob_cpu_data(b, &a.src) : blob_cpu_diff(b, &a.src));
    return blob__replace_file(SAVE, path, 0666, true, write_npy, &a);
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

__attribute__((format(printf, 2, 3))) static blob_status syntax(const cursor *c, const char *fmt,
                                                                ...)
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
    for (size_t i = 0; n == 3 && i < NDESCRS; i++)
        if (s[1] == DESCRS[i].kind && s[2] == DESCRS[i].size && s[0] &&
            strchr(DESCRS[i].size == '1' ? "<>=|" : "<>=", s[0])) {
            h->dtype = DESCRS[i].dtype;
            h->big_endian = s[0] == '=' ? HOST_BIG : s[0] == '>';
            return BLOB_OK;
        }
    return file_fail(BLOB_EFORMAT, LOAD, c->path,
                     "unsupported dtype '%.*s' (only f2, f4, f8, "
                     "i4, i8 and u1, with '<', '>' or '=', or '|' for u1)",
                     n, s);
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

/* Read and check everything up to the data, leaving f (of status sb) at the data: the
 * header, and that the rest of the file holds exactly the elements the shape needs. The
 * shape is checked to fit in memory as `dtype`. */
static blob_status read_header(FILE *f, const struct stat *sb, const char *path, blob_dtype dtype,
                               npy_header *h)
{
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
        return file_fail(BLOB_EFORMAT, LOAD, path, "header length %u exceeds the limit of %d", hlen,
                         HEADER_LIMIT);
    int64_t data_at = MAGIC_LEN + 2 + (int64_t)lsize + hlen;
    if (data_at > sb->st_size)
        return file_fail(BLOB_EFORMAT, LOAD, path,
                         "header of %u bytes runs past the end of the %lld-byte file", hlen,
                         (long long)sb->st_size);
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
    if (h->dtype != dtype && !(blob_dtype_is_float(h->dtype) && blob_dtype_is_float(dtype)))
        return file_fail(BLOB_EFORMAT, LOAD, path,
                         "the file's %s does not load into a %s "
                         "blob (floats convert between float dtypes, integers load into their "
                         "own)",
                         blob_dtype_name(h->dtype), blob_dtype_name(dtype));
    /* The shape must fit in memory as the file's own elements, as numpy requires (the
     * dims other than 0 included), and then as the blob's. */
    if (blob__shape_count(LOAD, h->dtype, h->num_axes, h->shape, &h->count) != BLOB_OK)
        return file_fail(BLOB_EFORMAT, LOAD, path, "shape's element count overflows");
    uint64_t avail = (uint64_t)(sb->st_size - data_at);
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
        if (h->big_endian != HOST_BIG)
            swap_each(buf, n, ss);
        if (h->dtype == dtype)
            memcpy((unsigned char *)dst + done * ds, buf, n * ss);
        else
            st = blob_cpu_convert(h->dtype, dtype, (int64_t)n, buf,
                                  (unsigned char *)dst + done * ds);
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

/* Open path for reading if it is a regular file (blob__open_regular). */
static blob_status open_npy(const char *path, FILE **out, struct stat *sb)
{
    int fd;
    BLOB_TRY(blob__open_regular(LOAD, path, BLOB_EIO, &fd, sb));
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
    size_t descr;
    BLOB_TRY(descr_of(LOAD, b->dtype, &descr));
    FILE *f;
    struct stat sb;
    BLOB_TRY(open_npy(path, &f, &sb));
    npy_header h;
    blob_syncedmem *mem = NULL, *other = part == BLOB_PART_DATA ? b->diff : b->data;
    blob_status st = read_header(f, &sb, path, b->dtype, &h);
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
