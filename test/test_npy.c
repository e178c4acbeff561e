/* .npy files: round trips, files written by numpy (test/data, made by make_fixtures.py),
 * our files read by numpy, one test per malformed-file defect, failure injection, and
 * the atomic write. */
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "../src/blob/blob_impl.h"
#include "../src/core/file.h"
#include "fake_backend.h"
#include "testutil.h"

/* Each test case gets a root directory (made and removed in the runner's process, so
 * even a failed test leaves nothing behind), each test an empty directory in it. */
static char root[32], dir[48];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void root_setup(void)
{
    strcpy(root, "/tmp/blob_npy_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
}

static void root_teardown(void)
{
    ck_assert_int_eq(nftw(root, remove_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
}

static void dir_setup(void)
{
    snprintf(dir, sizeof dir, "%s/XXXXXX", root);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void dir_teardown(void)
{
    ck_assert_int_eq(nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* dir/name in buf (a compound literal: valid in the calling block). */
#define PATH(name) path_in((name), (char[96]){0})
static char *path_in(const char *name, char *buf)
{
    snprintf(buf, 96, "%s/%s", dir, name);
    return buf;
}

/* The whole file in a malloc'd buffer; *n its size. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char *buf = malloc(1 << 16);
    *n = fread(buf, 1, 1 << 16, f);
    ck_assert(feof(f));
    fclose(f);
    return buf;
}

static void assert_same_file(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *pa = read_bytes(a, &na), *pb = read_bytes(b, &nb);
    ck_assert_msg(na == nb && memcmp(pa, pb, na) == 0, "%s and %s differ", a, b);
    free(pa);
    free(pb);
}

/* The values of every fixture: element i is i * 1.375 - 7.0625 (exact in float32). */
#define RAMP 1.375, -7.0625
static double ramp(int64_t i) { return (double)i * 1.375 - 7.0625; }

/* A file of format major.0 with the header `text` as it is (numpy needs no padding)
 * and `ndata` bytes of float32 ramp data in the host's byte order. */
static void write_crafted(const char *path, int major, const char *text, size_t ndata)
{
    unsigned char buf[4096] = {0};
    size_t lsize = major == 1 ? 2 : 4, pre = 8 + lsize, hlen = strlen(text);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    for (size_t i = 0; i < lsize; i++)
        buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, text, hlen);
    for (size_t i = 0; i < ndata / 4; i++) {
        float v = (float)ramp((int64_t)i);
        memcpy(buf + pre + hlen + 4 * i, &v, 4);
    }
    test_write_file(path, buf, pre + hlen + ndata);
}

/* Values of test data: element i of a part is i * scale + offset. */
static void fill(blob *b, blob_part part, double scale, double offset)
{
    void *p;
    ck_ok(part == BLOB_PART_DATA ? blob_mutable_cpu_data(b, &p) : blob_mutable_cpu_diff(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++)
        test_put(blob_get_dtype(b), p, i, (double)i * scale + offset);
}

static void assert_values(blob *b, blob_part part, double scale, double offset)
{
    const void *p;
    ck_ok(part == BLOB_PART_DATA ? blob_cpu_data(b, &p) : blob_cpu_diff(b, &p));
    for (int64_t i = 0; i < blob_count(b); i++) {
        double v = (double)i * scale + offset;
        if (blob_get_dtype(b) == BLOB_FLOAT32)
            ck_assert_msg(((const float *)p)[i] == (float)v, "element %lld", (long long)i);
        else
            ck_assert_msg(((const double *)p)[i] == v, "element %lld", (long long)i);
    }
}

static void assert_shape(const blob *b, int n, const int64_t *shape)
{
    ck_assert_int_eq(blob_num_axes(b), n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(blob_shape(b)[i], shape[i]);
}

static blob *make(blob_dtype dt, int n, const int64_t *shape)
{
    blob *b;
    ck_ok(blob_create(&b, dt, BLOB_DEVICE_DEFAULT, n, shape));
    return b;
}

/* A 2x3 blob with data 100 + i and diff -i, which a failed load must keep. */
static blob *make_guard_of(blob_dtype dt)
{
    blob *b = make(dt, 2, (const int64_t[]){2, 3});
    fill(b, BLOB_PART_DATA, 1, 100);
    fill(b, BLOB_PART_DIFF, -1, 0);
    return b;
}

static blob *make_guard(void) { return make_guard_of(BLOB_FLOAT32); }

static void assert_guard(blob *b, blob_syncedmem *data, blob_syncedmem *diff)
{
    assert_shape(b, 2, (const int64_t[]){2, 3});
    ck_assert_int_eq(blob_count(b), 6);
    ck_assert_ptr_eq(blob_data_mem(b), data);
    ck_assert_ptr_eq(blob_diff_mem(b), diff);
    assert_values(b, BLOB_PART_DATA, 1, 100);
    assert_values(b, BLOB_PART_DIFF, -1, 0);
}

/* Loading path into data and into diff of a blob of dtype dt fails with `want`, the
 * detail containing `detail`, and leaves the blob as it was. */
static void assert_load_fails_into(blob_dtype dt, const char *path, blob_status want,
                                   const char *detail)
{
    blob *b = make_guard_of(dt);
    blob_syncedmem *data = blob_data_mem(b), *diff = blob_diff_mem(b);
    for (int part = 0; part < 2; part++) {
        ck_status(blob_load_npy(b, (blob_part)part, path), want);
        ck_assert_msg(strstr(blob_last_error(), detail), "detail '%s' lacks '%s'",
                      blob_last_error(), detail);
        assert_guard(b, data, diff);
    }
    blob_free(b);
}

static void assert_load_fails(const char *path, blob_status want, const char *detail)
{
    assert_load_fails_into(BLOB_FLOAT32, path, want, detail);
}

static void assert_text_fails(const char *text, const char *detail)
{
    write_crafted(PATH("bad.npy"), 1, text, 24);
    assert_load_fails(PATH("bad.npy"), BLOB_EFORMAT, detail);
}

/* ---- round trips ---- */

static const struct {
    int n;
    int64_t shape[4];
} shapes[] = {{0, {0}}, {1, {5}}, {4, {2, 3, 4, 5}}, {3, {3, 0, 2}}};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Loop index: shape, part, dtype. */
START_TEST(test_round_trip)
{
    int s = _i % N_SHAPES;
    blob_part part = (blob_part)(_i / N_SHAPES % 2);
    blob_dtype dt = (blob_dtype)(_i / N_SHAPES / 2);
    blob *src = make(dt, shapes[s].n, shapes[s].shape);
    test_seed((uint64_t)_i + 1);
    void *p;
    ck_ok(part == BLOB_PART_DATA ? blob_mutable_cpu_data(src, &p) : blob_mutable_cpu_diff(src, &p));
    test_fill(dt, p, blob_count(src), -1e6, 1e6);
    ck_ok(blob_save_npy(src, part, PATH("a.npy")));
    ck_assert_int_eq(test_dir_entries(dir), 1);

    blob *dst = make(dt, 1, (const int64_t[]){7});
    blob_part other = (blob_part)!part;
    fill(dst, other, 2, 1);
    blob_syncedmem *kept = other == BLOB_PART_DATA ? blob_data_mem(dst) : blob_diff_mem(dst);
    ck_ok(blob_load_npy(dst, part, PATH("a.npy")));
    assert_shape(dst, shapes[s].n, shapes[s].shape);
    ck_assert_int_eq(blob_count(dst), blob_count(src));
    const void *a, *b;
    ck_ok(part == BLOB_PART_DATA ? blob_cpu_data(dst, &b) : blob_cpu_diff(dst, &b));
    ck_ok(part == BLOB_PART_DATA ? blob_cpu_data(src, &a) : blob_cpu_diff(src, &a));
    if (blob_count(src))
        ck_assert(memcmp(a, b, (size_t)blob_count(src) * blob_dtype_size(dt)) == 0);
    /* The other part is reshaped like blob_reshape: kept block and values when they fit. */
    blob_syncedmem *now = other == BLOB_PART_DATA ? blob_data_mem(dst) : blob_diff_mem(dst);
    ck_assert_int_eq(now == kept, blob_count(src) <= 7);
    ck_assert_int_ge(blob_capacity(dst), blob_count(src));
    if (now == kept)
        assert_values(dst, other, 2, 1);
    blob_free(src);
    blob_free(dst);
}
END_TEST

/* Loop index: the dtype saved; it is loaded into the other one. */
START_TEST(test_convert_dtype)
{
    blob_dtype from = (blob_dtype)_i, to = (blob_dtype)!_i;
    int64_t n = 1000;
    blob *src = make(from, 1, &n), *dst = make(to, 0, NULL);
    void *p;
    ck_ok(blob_mutable_cpu_data(src, &p));
    test_fill(from, p, n, -1e3, 1e3);
    if (from == BLOB_FLOAT64)
        ((double *)p)[0] = 1e300; /* becomes inf */
    ck_ok(blob_save_npy(src, BLOB_PART_DATA, PATH("a.npy")));
    ck_ok(blob_load_npy(dst, BLOB_PART_DATA, PATH("a.npy")));
    assert_shape(dst, 1, &n);
    const void *q;
    ck_ok(blob_cpu_data(dst, &q));
    for (int64_t i = 0; i < n; i++) {
        if (from == BLOB_FLOAT64)
            ck_assert(((const float *)q)[i] == (float)((const double *)p)[i]);
        else
            ck_assert(((const double *)q)[i] == (double)((const float *)p)[i]);
    }
    blob_free(src);
    blob_free(dst);
}
END_TEST

/* ---- files written by numpy ---- */

static const struct {
    const char *name;
    int n;
    int64_t shape[16];
    bool ours; /* exactly what blob_save_npy writes: '<', format 1.0 */
} fixtures[] = {
    {"f4_2x3.npy", 2, {2, 3}, true},
    {"f8_scalar.npy", 0, {0}, true},
    {"f4_5.npy", 1, {5}, true},
    {"f8_2x3x4.npy", 3, {2, 3, 4}, true},
    {"f4_2x0x3.npy", 3, {2, 0, 3}, true},
    {"f4_16axes.npy", 16, {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3}, true},
    {"f4_big_2x3.npy", 2, {2, 3}, false},
    {"f8_big_7.npy", 1, {7}, false},
    {"f8_v2_3x2.npy", 2, {3, 2}, false},
    {"f4_v3_4.npy", 1, {4}, false},
};

/* Loop index: fixture and the dtype of the blob it is loaded into. */
START_TEST(test_numpy_fixtures)
{
    int f = _i / 2;
    blob_dtype dt = (blob_dtype)(_i % 2);
    char path[64];
    snprintf(path, sizeof path, "test/data/%s", fixtures[f].name);
    blob *b = make(dt, 2, (const int64_t[]){4, 4});
    ck_ok(blob_load_npy(b, BLOB_PART_DIFF, path));
    assert_shape(b, fixtures[f].n, fixtures[f].shape);
    assert_values(b, BLOB_PART_DIFF, RAMP);
    if (fixtures[f].ours && fixtures[f].name[1] == (dt == BLOB_FLOAT32 ? '4' : '8')) {
        ck_ok(blob_save_npy(b, BLOB_PART_DIFF, PATH("ours.npy")));
        assert_same_file(PATH("ours.npy"), path);
    }
    blob_free(b);
}
END_TEST

START_TEST(test_numpy_rejects)
{
    assert_load_fails("test/data/f8_fortran_2x3.npy", BLOB_EFORMAT, "fortran_order True");
    assert_load_fails("test/data/i4_6.npy", BLOB_EFORMAT, "int32 does not load into a float32");
}
END_TEST

/* Our files read back by numpy (the case needs "numpy"). */
START_TEST(test_numpy_reads_ours)
{
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd, "python3 test/npy_numpy_check.py");
    for (int i = 0; i < N_SHAPES * 2; i++) {
        int s = i / 2;
        blob_dtype dt = (blob_dtype)(i % 2);
        blob *b = make(dt, shapes[s].n, shapes[s].shape);
        fill(b, BLOB_PART_DATA, RAMP);
        char name[16];
        snprintf(name, sizeof name, "%d.npy", i);
        ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH(name)));
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " f%zu:", blob_dtype_size(dt));
        for (int a = 0; a < shapes[s].n; a++)
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, a ? "x%lld" : "%lld",
                          (long long)shapes[s].shape[a]);
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, ":%s", PATH(name));
        blob_free(b);
    }
    int rc = system(cmd);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0,
                  "numpy disagrees with our files (see above), or is missing (exit %d)",
                  WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
}
END_TEST

/* What numpy accepts beyond its own style: any key order, double quotes, no trailing
 * commas, a trailing comma in the shape, Python 2's long suffix, no padding, '=' byte
 * order; and 32 axes. */
START_TEST(test_header_variants)
{
    blob *b = make(BLOB_FLOAT64, 0, NULL);
    write_crafted(PATH("a.npy"), 1,
                  "{\"shape\" : (2L,3L,) , 'fortran_order':False,'descr':\"<f4\"}", 24);
    ck_ok(blob_load_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    assert_shape(b, 2, (const int64_t[]){2, 3});
    assert_values(b, BLOB_PART_DATA, RAMP);

    write_crafted(PATH("a.npy"), 2, "{'descr': '=f4', 'fortran_order': False, 'shape': (6,), }\n\n",
                  24);
    ck_ok(blob_load_npy(b, BLOB_PART_DIFF, PATH("a.npy")));
    assert_shape(b, 1, (const int64_t[]){6});
    assert_values(b, BLOB_PART_DIFF, RAMP);

    char text[256];
    int n = sprintf(text, "{'descr': '=f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < BLOB_MAX_AXES; i++)
        n += sprintf(text + n, "1, ");
    sprintf(text + n, ")}");
    write_crafted(PATH("a.npy"), 1, text, 4);
    ck_ok(blob_load_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    ck_assert_int_eq(blob_num_axes(b), BLOB_MAX_AXES);
    ck_assert_int_eq(blob_count(b), 1);
    assert_values(b, BLOB_PART_DATA, RAMP);
    blob_free(b);
}
END_TEST

/* ---- malformed files: one defect each ---- */

#define GOOD_DICT "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"

START_TEST(test_bad_magic)
{
    write_crafted(PATH("a.npy"), 1, GOOD_DICT, 24);
    FILE *f = fopen(PATH("a.npy"), "r+b");
    fputc('Z', f);
    fclose(f);
    assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, "bad magic");
}
END_TEST

START_TEST(test_bad_version)
{
    static const char *const versions[] = {"\x04\x00", "\x00\x00", "\x01\x01", "\x02\x05"};
    for (int i = 0; i < 4; i++) {
        write_crafted(PATH("a.npy"), 1, GOOD_DICT, 24);
        FILE *f = fopen(PATH("a.npy"), "r+b");
        fseek(f, 6, SEEK_SET);
        fwrite(versions[i], 1, 2, f);
        fclose(f);
        assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, "unsupported format version");
    }
}
END_TEST

START_TEST(test_truncated_preamble)
{
    static const struct {
        size_t n;
        const char *what;
    } cuts[] = {{0, "magic"}, {5, "magic"}, {8, "header length"}, {9, "header length"}};
    for (int i = 0; i < 4; i++) {
        test_write_file(PATH("a.npy"), "\x93NUMPY\x01\x00\x76", cuts[i].n);
        assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, cuts[i].what);
    }
    test_write_file(PATH("a.npy"), "\x93NUMPY\x02\x00\x76\x00\x00", 11);
    assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, "header length");
}
END_TEST

START_TEST(test_truncated_header)
{
    write_crafted(PATH("a.npy"), 1, GOOD_DICT, 24);
    ck_assert_int_eq(truncate(PATH("a.npy"), 40), 0);
    assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, "runs past the end");
}
END_TEST

START_TEST(test_oversized_header)
{
    /* Lengths past the cap are refused before anything is allocated or read. */
    test_write_file(PATH("a.npy"), "\x93NUMPY\x02\x00\x01\x00\x01\x00{", 13);
    assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, "header length 65537 exceeds");
    test_write_file(PATH("a.npy"), "\x93NUMPY\x03\x00\xff\xff\xff\xff{", 13);
    assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, "header length 4294967295 exceeds");
}
END_TEST

START_TEST(test_header_syntax)
{
    static const char *const texts[] = {
        "",
        "[]",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x",
        "{'descr': '<f4",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, , 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3)}",
        "{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': 6}",
        "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3)}",
        "{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\xc2\xa0",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        assert_text_fails(texts[i], "header byte");
    /* A NUL inside the header. */
    write_crafted(PATH("a.npy"), 1, GOOD_DICT, 24);
    FILE *f = fopen(PATH("a.npy"), "r+b");
    fseek(f, 22, SEEK_SET); /* inside '<f4' */
    fputc(0, f);
    fclose(f);
    assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, "header byte");
}
END_TEST

START_TEST(test_missing_key)
{
    assert_text_fails("{'descr': '<f4', 'shape': (2, 3), }", "missing key 'fortran_order'");
    assert_text_fails("{}", "missing key 'descr'");
}
END_TEST

START_TEST(test_duplicate_key)
{
    assert_text_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (6,)}",
                      "duplicate key 'shape'");
}
END_TEST

START_TEST(test_unknown_key)
{
    assert_text_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}",
                      "unexpected key 'x'");
}
END_TEST

START_TEST(test_unknown_dtype)
{
    static const char *const descrs[] = {"<i2",     "|f4",  "<f3", "<c8", "f4",
                                         "float32", "<f16", "<u8", ">f"};
    char text[128], detail[64];
    for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++) {
        sprintf(text, "{'descr': '%s', 'fortran_order': False, 'shape': (2, 3)}", descrs[i]);
        sprintf(detail, "unsupported dtype '%s'", descrs[i]);
        assert_text_fails(text, detail);
    }
    assert_text_fails("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}",
                      "expected a quoted string");
}
END_TEST

START_TEST(test_fortran_order)
{
    assert_text_fails("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                      "fortran_order True is not supported");
}
END_TEST

START_TEST(test_too_many_axes)
{
    char text[256];
    int n = sprintf(text, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i <= BLOB_MAX_AXES; i++)
        n += sprintf(text + n, "1, ");
    sprintf(text + n, "), }");
    assert_text_fails(text, "more than 32 axes");
}
END_TEST

START_TEST(test_negative_dim)
{
    assert_text_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }",
                      "dim 1 is negative");
}
END_TEST

START_TEST(test_absurd_dim)
{
    assert_text_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775808,)}",
                      "dim 0 is too large");
    /* Fits in int64 but not in the file: refused before anything is allocated. */
    assert_text_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (2305843009213693951,)}",
                      "the shape needs 9223372036854775804");
}
END_TEST

START_TEST(test_count_overflow)
{
    assert_text_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
                      "count overflows");
}
END_TEST

/* A file of GOOD_DICT's shape (24 bytes of data) holding `bytes` bytes is refused. */
static void assert_data_fails(int bytes)
{
    char detail[64];
    snprintf(detail, sizeof detail, "data holds %d bytes, the shape needs 24", bytes);
    write_crafted(PATH("a.npy"), 1, GOOD_DICT, bytes);
    assert_load_fails(PATH("a.npy"), BLOB_EFORMAT, detail);
}

START_TEST(test_data_short)
{
    assert_data_fails(20);
    assert_data_fails(23);
}
END_TEST

START_TEST(test_data_long)
{
    assert_data_fails(28);
    assert_data_fails(25);
}
END_TEST

/* A FIFO without a writer, a device and a directory are refused at once, with no open
 * that could block. */
START_TEST(test_read_errors)
{
    ck_assert_int_eq(mkfifo(PATH("fifo"), 0600), 0);
    assert_load_fails(PATH("fifo"), BLOB_EIO, "not a regular file (a FIFO)");
    assert_load_fails(PATH("missing.npy"), BLOB_EIO, "open: No such file");
    assert_load_fails(dir, BLOB_EIO, "not a regular file (a directory)");
    assert_load_fails("/dev/null", BLOB_EIO, "not a regular file (a character device)");
}
END_TEST

START_TEST(test_bad_arguments)
{
    blob *b = make_guard();
    ck_status(blob_load_npy(NULL, BLOB_PART_DATA, PATH("a.npy")), BLOB_EINVAL);
    ck_status(blob_load_npy(b, BLOB_PART_DATA, NULL), BLOB_EINVAL);
    ck_status(blob_load_npy(b, (blob_part)2, PATH("a.npy")), BLOB_EINVAL);
    ck_status(blob_save_npy(NULL, BLOB_PART_DATA, PATH("a.npy")), BLOB_EINVAL);
    ck_status(blob_save_npy(b, BLOB_PART_DATA, NULL), BLOB_EINVAL);
    ck_status(blob_save_npy(b, (blob_part)-1, PATH("a.npy")), BLOB_EINVAL);
    ck_assert_int_eq(test_dir_entries(dir), 0);
    blob_free(b);
}
END_TEST

/* ---- failing saves ---- */

START_TEST(test_save_unwritable)
{
    blob *b = make_guard();
    ck_status(blob_save_npy(b, BLOB_PART_DATA, PATH("no/such/dir.npy")), BLOB_EIO);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "open the directory: No such file"));
    ck_assert_int_eq(test_dir_entries(dir), 0);
    ck_assert_int_eq(mkdir(PATH("ro"), 0500), 0);
    if (geteuid() != 0) { /* root writes anyway */
        ck_status(blob_save_npy(b, BLOB_PART_DATA, PATH("ro/a.npy")), BLOB_EIO);
        ck_assert_ptr_nonnull(strstr(blob_last_error(), "Permission denied"));
    }
    ck_assert_int_eq(test_dir_entries(dir), 1);
    blob_free(b);
}
END_TEST

/* ---- where a save goes, what it leaves, what it guarantees ---- */

/* Loop index of the save tests below: 0 writes an unnamed file first (O_TMPFILE, where
 * /tmp has it), 1 takes the path of file systems without O_TMPFILE. */
static void choose_tmpfile(int i) { blob__replace_tmpfile = i == 0; }

static mode_t mode_of(const char *path)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return sb.st_mode & 07777;
}

/* The guard's data was saved at path (a 2x3 float32 file). */
static void assert_saved_guard(const char *path)
{
    blob *b = make(BLOB_FLOAT32, 0, NULL);
    ck_ok(blob_load_npy(b, BLOB_PART_DIFF, path));
    assert_shape(b, 2, (const int64_t[]){2, 3});
    assert_values(b, BLOB_PART_DIFF, 1, 100);
    blob_free(b);
}

/* Saving over a directory, a FIFO or a device node is refused, root or not, and each is
 * left as it was, with no temporary file beside it. As root the device node is made in
 * the test's directory (a copy of /dev/null), so that a failure cannot harm the real one;
 * others cannot replace /dev/null anyway, and use it. */
START_TEST(test_save_not_regular)
{
    choose_tmpfile(_i);
    blob *b = make_guard();
    ck_assert_int_eq(mkdir(PATH("sub"), 0700), 0);
    ck_assert_int_eq(mkfifo(PATH("fifo"), 0600), 0);
    char dev[96] = "/dev/null";
    if (geteuid() == 0) {
        path_in("null", dev);
        ck_assert_int_eq(mknod(dev, S_IFCHR | 0666, makedev(1, 3)), 0);
    }
    int entries = test_dir_entries(dir);
    static const struct {
        const char *name;
        mode_t type;
        const char *kind;
    } targets[] = {{"sub", S_IFDIR, "a directory"},
                   {"fifo", S_IFIFO, "a FIFO"},
                   {"sub/", S_IFDIR, "a directory"},
                   {NULL, S_IFCHR, "a character device"}};
    for (int i = 0; i < 4; i++) {
        char *path = targets[i].name ? PATH(targets[i].name) : dev;
        ck_status(blob_save_npy(b, BLOB_PART_DATA, path), BLOB_EIO);
        ck_assert_msg(strstr(blob_last_error(), targets[i].kind), "%s", blob_last_error());
        struct stat sb;
        ck_assert_int_eq(lstat(path, &sb), 0);
        ck_assert_int_eq(sb.st_mode & S_IFMT, targets[i].type);
        ck_assert_int_eq(test_dir_entries(dir), entries);
    }
    blob_free(b);
}
END_TEST

/* A symbolic link is followed, as numpy follows it: the file it points to is replaced
 * (relative and absolute links, a chain, a link into another directory) and the link
 * stays a link. A dangling link makes its target. */
START_TEST(test_save_through_symlink)
{
    choose_tmpfile(_i);
    blob *b = make_guard();
    ck_assert_int_eq(mkdir(PATH("sub"), 0700), 0);
    test_write_file(PATH("sub/t.npy"), "old", 3);
    ck_assert_int_eq(symlink("sub/t.npy", PATH("rel")), 0);
    ck_assert_int_eq(symlink(PATH("sub/t.npy"), PATH("abs")), 0);
    ck_assert_int_eq(symlink("rel", PATH("chain")), 0);
    ck_assert_int_eq(symlink("../rel", PATH("sub/up")), 0);
    const char *links[] = {"rel", "abs", "chain", "sub/up"};
    for (int i = 0; i < 4; i++) {
        test_write_file(PATH("sub/t.npy"), "old", 3);
        ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH(links[i])));
        assert_saved_guard(PATH("sub/t.npy"));
        struct stat sb;
        ck_assert_int_eq(lstat(PATH(links[i]), &sb), 0);
        ck_assert_msg(S_ISLNK(sb.st_mode), "%s is no longer a link", links[i]);
    }
    ck_assert_int_eq(symlink("sub/new.npy", PATH("dangling")), 0);
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("dangling")));
    assert_saved_guard(PATH("sub/new.npy"));
    ck_assert_int_eq(test_dir_entries(dir), 5); /* sub, three links and the dangling one */
    ck_assert_int_eq(symlink("loop", PATH("loop")), 0);
    ck_status(blob_save_npy(b, BLOB_PART_DATA, PATH("loop")), BLOB_EIO);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "symbolic links"));
    blob_free(b);
}
END_TEST

/* New files get 0666 less the umask, as numpy's; a replaced file keeps its mode. */
START_TEST(test_save_modes)
{
    choose_tmpfile(_i);
    blob *b = make_guard();
    mode_t old = umask(022);
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    ck_assert_int_eq(mode_of(PATH("a.npy")), 0644);
    umask(077);
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("b.npy")));
    ck_assert_int_eq(mode_of(PATH("b.npy")), 0600);
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    ck_assert_int_eq(mode_of(PATH("a.npy")), 0644);
    ck_assert_int_eq(chmod(PATH("a.npy"), 0640), 0);
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    ck_assert_int_eq(mode_of(PATH("a.npy")), 0640);
    umask(0);
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("c.npy")));
    ck_assert_int_eq(mode_of(PATH("c.npy")), 0666);
    umask(old);
    ck_assert_int_eq(test_dir_entries(dir), 3);
    blob_free(b);
}
END_TEST

/* Every fsync of this process comes here, so that the tests see what a save syncs:
 * for a directory, the size of the file at sync_watch at that moment is recorded. */
static const char *sync_watch;
static int file_syncs, dir_syncs;
static off_t watched_size_at_dir_sync = -1;

int fsync(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        dir_syncs++;
        struct stat wb;
        if (sync_watch && stat(sync_watch, &wb) == 0)
            watched_size_at_dir_sync = wb.st_size;
    } else {
        file_syncs++;
    }
    return (int)syscall(SYS_fsync, fd);
}

/* The file is synced before the rename, the directory after it: when the directory is
 * synced, the new file is already at the path. */
START_TEST(test_save_syncs)
{
    choose_tmpfile(_i);
    blob *b = make(BLOB_FLOAT64, 1, (const int64_t[]){1000});
    test_write_file(PATH("a.npy"), "old", 3);
    sync_watch = PATH("a.npy");
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, sync_watch));
    ck_assert_int_eq(file_syncs, 1);
    ck_assert_int_eq(dir_syncs, 1);
    ck_assert_int_eq(watched_size_at_dir_sync, 128 + 8000);
    sync_watch = NULL;
    blob_free(b);
}
END_TEST

/* A save killed while writing (here by SIGXFSZ, at the file size limit) leaves the old
 * file as it was. With O_TMPFILE it leaves nothing else either (the case needs
 * "tmpfile"); without, its temporary file remains (loop index 1) until a later save
 * finds it stale (test_save_removes_stale). */
START_TEST(test_save_killed)
{
    choose_tmpfile(_i);
    blob *guard = make_guard();
    ck_ok(blob_save_npy(guard, BLOB_PART_DATA, PATH("a.npy")));
    blob_free(guard);
    int64_t n = 100000;
    blob *big;
    ck_ok(blob_create(&big, BLOB_FLOAT64, BLOB_HOST_ONLY, 1, &n));
    fill(big, BLOB_PART_DATA, RAMP); /* the child only writes: no device call after fork */
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rlimit small = {4096, 4096}, no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        setrlimit(RLIMIT_FSIZE, &small);
        signal(SIGXFSZ, SIG_DFL);
        blob_save_npy(big, BLOB_PART_DATA, PATH("a.npy"));
        _exit(0); /* not reached */
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ, "status %#x", status);
    assert_saved_guard(PATH("a.npy"));
    ck_assert_int_eq(test_dir_entries(dir), (_i == 0 ? 1 : 2));
    blob_free(big);
}
END_TEST

/* What a save killed between naming its file and renaming it leaves, a full-size
 * ".NAME.blob-tmp-XXXXXX", is removed by the next save into the directory once nobody
 * has touched it for BLOB__STALE_TEMP_S; a temporary file still being written (recent),
 * names of other patterns, and (as root, who can make one) another user's are kept. */
START_TEST(test_save_removes_stale)
{
    choose_tmpfile(_i);
    blob *b = make_guard();
    static const char *const names[] = {".a.npy.blob-tmp-Xy12Zw", ".b.npy.blob-tmp-000000",
                                        ".a.npy.blob-tmp-recent", "a.npy.backup",
                                        "a.npy.Xy12Zw",           ".a.npy.blob-tmp-others"};
    static const bool removed[] = {true, true, false, false, false, false};
    for (int i = 0; i < 6; i++) {
        test_write_file(PATH(names[i]), "residue", 7);
        struct timespec old = {time(NULL) - BLOB__STALE_TEMP_S - 60, 0}, t[2] = {old, old};
        if (i != 2)
            ck_assert_int_eq(utimensat(AT_FDCWD, PATH(names[i]), t, 0), 0);
    }
    if (geteuid() == 0)
        ck_assert_int_eq(chown(PATH(names[5]), 65534, 65534), 0);
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    assert_saved_guard(PATH("a.npy"));
    for (int i = 0; i < 6; i++) {
        bool gone = removed[i] || (i == 5 && geteuid() != 0);
        ck_assert_msg((access(PATH(names[i]), F_OK) != 0) == gone, "%s", names[i]);
    }
    blob_free(b);
}
END_TEST

/* A count-0 shape must fit in memory as the file's elements, dims of 0 or not, as numpy
 * requires: (0, 2^60) does as f4 (2^62 bytes) but not as f8. An f4 file of that shape
 * loads into an f4 blob; into an f8 blob it gives EOVERFLOW, as blob_reshape would. An f8
 * file of that shape is malformed for either. */
START_TEST(test_count_zero_huge_dims)
{
    blob_dtype dt = (blob_dtype)_i;
    write_crafted(PATH("f4.npy"), 1,
                  "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1152921504606846976)}", 0);
    write_crafted(PATH("f8.npy"), 1,
                  "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 1152921504606846976)}", 0);
    if (dt == BLOB_FLOAT32) {
        blob *b = make(dt, 1, (const int64_t[]){3});
        ck_ok(blob_load_npy(b, BLOB_PART_DATA, PATH("f4.npy")));
        assert_shape(b, 2, (const int64_t[]){0, (int64_t)1 << 60});
        ck_assert_int_eq(blob_count(b), 0);
        blob_free(b);
    } else {
        assert_load_fails_into(dt, PATH("f4.npy"), BLOB_EOVERFLOW,
                               "overflows as the blob's 8-byte");
    }
    assert_load_fails_into(dt, PATH("f8.npy"), BLOB_EFORMAT, "count overflows");
}
END_TEST

/* A save that fails while writing (the file size limit) leaves the old file as it was. */
START_TEST(test_failed_write_keeps_old_file)
{
    blob *b = make_guard();
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("copy.npy")));
    blob *big = make(BLOB_FLOAT64, 1, (const int64_t[]){100000});
    struct rlimit old, small;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = (struct rlimit){4096, old.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    void (*handler)(int) = signal(SIGXFSZ, SIG_IGN);
    blob_status st = blob_save_npy(big, BLOB_PART_DATA, PATH("a.npy"));
    signal(SIGXFSZ, handler);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_status(st, BLOB_EIO);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "write: File too large"));
    ck_assert_int_eq(test_dir_entries(dir), 2);
    assert_same_file(PATH("a.npy"), PATH("copy.npy"));
    blob_free(big);
    blob_free(b);
}
END_TEST

/* ---- the fake device: blobs on a GPU, failure injection ---- */

/* Every allocation reaches the fake device, so failure injection hits each of them. */
static bool caching_was;

static void no_cache_setup(void)
{
    caching_was = blob_alloc_caching();
    ck_ok(blob_alloc_set_caching(false));
}

static void no_cache_teardown(void) { ck_ok(blob_alloc_set_caching(caching_was)); }

/* n float64 whose data is the ramp on the fake GPU (head AT_GPU); *dev points at it. */
static blob *make_gpu_ramp(int64_t n, double **dev)
{
    blob *b = make(BLOB_FLOAT64, 1, &n);
    ck_ok(blob_mutable_gpu_data(b, (void **)dev));
    fake_drain(); /* the queued zero fill; fake device memory is host memory */
    for (int64_t i = 0; i < n; i++)
        (*dev)[i] = ramp(i);
    return b;
}

START_TEST(test_gpu_resident)
{
    double *d;
    blob *b = make_gpu_ramp(12, &d);
    fake_reset_counts();
    ck_ok(blob_save_npy(b, BLOB_PART_DATA, PATH("a.npy")));
    ck_assert_uint_eq(fake_get_stats().d2h, 1);
    ck_ok(blob_load_npy(b, BLOB_PART_DIFF, PATH("a.npy")));
    ck_assert_int_eq(blob_syncedmem_head(blob_diff_mem(b)), BLOB_HEAD_AT_CPU);
    ck_assert(blob_syncedmem_host_pinned(blob_diff_mem(b)));
    const double *g;
    ck_ok(blob_gpu_diff(b, (const void **)&g));
    for (int i = 0; i < 12; i++)
        ck_assert(g[i] == ramp(i));
    blob_free(b);
}
END_TEST

/* Failure injection: the k-th allocation from now fails (and with `persistent` every
 * later one), for k = 1, 2, ... until k passes the operation's last allocation. A
 * transient failure of pinned memory is absorbed by the allocator's retry. */
static uint64_t injected(void) { return fake_get_stats().failed_allocs; }

/* Loop index: part, and whether failures persist. The file's 20 elements exceed the
 * blob's 6, so the other part needs a new block as well. */
START_TEST(test_load_alloc_failure)
{
    blob_part part = (blob_part)(_i % 2);
    bool persistent = _i / 2;
    blob *src = make(BLOB_FLOAT64, 2, (const int64_t[]){4, 5});
    fill(src, BLOB_PART_DATA, RAMP);
    ck_ok(blob_save_npy(src, BLOB_PART_DATA, PATH("a.npy")));
    blob_free(src);
    int failures = 0;
    for (uint64_t k = 1, fired = 1; fired; k++) {
        ck_assert_uint_lt(k, 50);
        blob *b = make_guard();
        blob_syncedmem *data = blob_data_mem(b), *diff = blob_diff_mem(b);
        fired = injected();
        fake_fail_alloc_at(k, persistent);
        blob_status st = blob_load_npy(b, part, PATH("a.npy"));
        fake_fail_alloc_at(0, false);
        fired = injected() - fired;
        if (st == BLOB_OK) {
            assert_shape(b, 2, (const int64_t[]){4, 5});
            assert_values(b, part, RAMP);
            ck_assert_int_eq(blob_capacity(b), 20);
        } else {
            ck_status(st, BLOB_ENOMEM);
            assert_guard(b, data, diff);
            failures++;
        }
        blob_free(b);
    }
    ck_assert_int_ge(failures, 3); /* header text, block, other block (, host side) */
}
END_TEST

/* The same for saving a blob whose data is on the GPU (the copy to the host needs a
 * host side) over an existing file, which every failure must leave as it was. Loop
 * index: whether failures persist. */
START_TEST(test_save_alloc_failure)
{
    blob *old = make_guard();
    ck_ok(blob_save_npy(old, BLOB_PART_DATA, PATH("old.npy")));
    blob_free(old);
    size_t n;
    unsigned char *old_bytes = read_bytes(PATH("old.npy"), &n);
    int failures = 0;
    for (uint64_t k = 1, fired = 1; fired; k++) {
        ck_assert_uint_lt(k, 50);
        test_write_file(PATH("a.npy"), old_bytes, n);
        double *d;
        blob *b = make_gpu_ramp(9, &d);
        fired = injected();
        fake_fail_alloc_at(k, _i);
        blob_status st = blob_save_npy(b, BLOB_PART_DATA, PATH("a.npy"));
        fake_fail_alloc_at(0, false);
        fired = injected() - fired;
        ck_assert_int_eq(test_dir_entries(dir), 2);
        if (st == BLOB_OK) {
            blob *back = make(BLOB_FLOAT32, 0, NULL);
            ck_ok(blob_load_npy(back, BLOB_PART_DATA, PATH("a.npy")));
            assert_shape(back, 1, (const int64_t[]){9});
            assert_values(back, BLOB_PART_DATA, RAMP);
            blob_free(back);
        } else {
            ck_status(st, BLOB_ENOMEM);
            for (int i = 0; i < 9; i++)
                ck_assert(d[i] == ramp(i));
            assert_same_file(PATH("a.npy"), PATH("old.npy"));
            failures++;
        }
        blob_free(b);
    }
    ck_assert_int_ge(failures, 1); /* temporary name (, host side) */
    free(old_bytes);
}
END_TEST

/* A case of the suite with its root directory, made once for the case (dir_setup makes
 * each test's directory in it). */
static TCase *files_case(Suite *s, const char *name, const char *tags)
{
    TCase *tc = suite_case(s, name, tags, 0, NULL, NULL);
    tcase_add_unchecked_fixture(tc, root_setup, root_teardown);
    return tc;
}

void npy_suite(Suite *s)
{
    TCase *tc = files_case(s, "files", NULL);
    tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
    add_loop_tests(tc, 0, N_SHAPES * 4, test_round_trip);
    add_loop_tests(tc, 0, 2, test_convert_dtype);
    add_loop_tests(tc, 0, (int)(sizeof fixtures / sizeof fixtures[0]) * 2, test_numpy_fixtures);
    add_tests(tc, test_numpy_rejects, test_header_variants, test_bad_magic, test_bad_version,
              test_truncated_preamble, test_truncated_header, test_oversized_header,
              test_header_syntax, test_missing_key, test_duplicate_key, test_unknown_key,
              test_unknown_dtype, test_fortran_order, test_too_many_axes, test_negative_dim,
              test_absurd_dim, test_count_overflow, test_data_short, test_data_long,
              test_read_errors, test_bad_arguments, test_save_unwritable);
    add_loop_tests(tc, 0, 2, test_save_not_regular, test_save_through_symlink, test_save_modes,
                   test_save_syncs);
    add_loop_tests(tc, 1, 2, test_save_killed);
    add_loop_tests(tc, 0, 2, test_save_removes_stale, test_count_zero_huge_dims);
    add_tests(tc, test_failed_write_keeps_old_file);

    tc = files_case(s, "numpy", "numpy");
    tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
    add_tests(tc, test_numpy_reads_ours);

    tc = files_case(s, "tmpfile", "tmpfile");
    tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
    add_loop_tests(tc, 0, 1, test_save_killed);

    tc = files_case(s, "fake", NULL);
    tcase_add_checked_fixture(tc, fake_setup, fake_teardown);
    tcase_add_checked_fixture(tc, no_cache_setup, no_cache_teardown);
    tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
    add_tests(tc, test_gpu_resident);
    add_loop_tests(tc, 0, 4, test_load_alloc_failure);
    add_loop_tests(tc, 0, 2, test_save_alloc_failure);
}
