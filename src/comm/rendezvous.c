/* How ranks find their place and meet without MPI: the launcher's variables, the id in
 * hex (an environment variable) or in a record written atomically to a file that every
 * rank can read, and the choice among them when a communicator is created. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/clock.h"
#include "../core/core.h"
#include "../core/env.h"
#include "../core/file.h"
#include "comm_impl.h"
#include "record.h"

/* The record: magic, version, world size, id length, id, CRC-32 of what precedes it;
 * integers little-endian. */
#define RECORD_VERSION 1u
#define OFF_VERSION    8
#define OFF_WORLD      12
#define OFF_LENGTH     16
#define OFF_ID         20
#define OFF_CRC        (OFF_ID + BLOB_COMM_ID_BYTES)
_Static_assert(OFF_CRC + 4 == BLOB_COMM_ID_RECORD_SIZE, "record layout");
_Static_assert(BLOB__RECORD_MAGIC_LEN == OFF_VERSION, "the magic comes first");

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* CRC-32 (IEEE, reflected), as zlib computes it. */
static uint32_t crc32(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return ~c;
}

blob_status blob_comm_id_encode(const blob_comm_id *id, int world_size, void *buf, size_t size)
{
    if (!id || !buf)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (world_size < 1)
        return BLOB_FAIL(BLOB_EINVAL, "world size %d < 1", world_size);
    if (size < BLOB_COMM_ID_RECORD_SIZE)
        return BLOB_FAIL(BLOB_ERANGE, "buffer of %zu bytes, a record needs %d", size,
                         BLOB_COMM_ID_RECORD_SIZE);
    unsigned char *p = buf;
    memcpy(p, BLOB__RECORD_MAGIC, BLOB__RECORD_MAGIC_LEN);
    put_u32(p + OFF_VERSION, RECORD_VERSION);
    put_u32(p + OFF_WORLD, (uint32_t)world_size);
    put_u32(p + OFF_LENGTH, BLOB_COMM_ID_BYTES);
    memcpy(p + OFF_ID, id->bytes, BLOB_COMM_ID_BYTES);
    put_u32(p + OFF_CRC, crc32(p, OFF_CRC));
    return BLOB_OK;
}

/* blob_comm_id_decode, failures recorded under func about path (NULL: bytes). */
static blob_status decode(const char *func, const char *path, blob_comm_id *out, int *world_size,
                          const unsigned char *p, size_t len)
{
    size_t head = len < BLOB__RECORD_MAGIC_LEN ? len : BLOB__RECORD_MAGIC_LEN;
    if (len == 0 || memcmp(p, BLOB__RECORD_MAGIC, head) != 0)
        return blob__fail_path(BLOB_EFORMAT, func, path,
                               "not a rendezvous record (%zu bytes, no magic)", len);
    if (len < OFF_LENGTH + 4)
        return blob__fail_path(BLOB_EFORMAT, func, path, "record truncated: %zu of %d bytes", len,
                               BLOB_COMM_ID_RECORD_SIZE);
    uint32_t version = get_u32(p + OFF_VERSION);
    if (version != RECORD_VERSION)
        return blob__fail_path(BLOB_EFORMAT, func, path,
                               "record version %u (this library reads version %u)", version,
                               RECORD_VERSION);
    uint32_t length = get_u32(p + OFF_LENGTH);
    if (length != BLOB_COMM_ID_BYTES)
        return blob__fail_path(BLOB_EFORMAT, func, path,
                               "record holds an id of %u bytes, expected %d", length,
                               BLOB_COMM_ID_BYTES);
    if (len != BLOB_COMM_ID_RECORD_SIZE)
        return blob__fail_path(BLOB_EFORMAT, func, path, "record %s: %zu of %d bytes",
                               len < BLOB_COMM_ID_RECORD_SIZE ? "truncated" : "has trailing bytes",
                               len, BLOB_COMM_ID_RECORD_SIZE);
    uint32_t crc = crc32(p, OFF_CRC);
    if (get_u32(p + OFF_CRC) != crc)
        return blob__fail_path(BLOB_EFORMAT, func, path,
                               "record damaged: checksum %08x, computed %08x", get_u32(p + OFF_CRC),
                               crc);
    uint32_t world = get_u32(p + OFF_WORLD);
    if (world < 1 || world > INT32_MAX)
        return blob__fail_path(BLOB_EFORMAT, func, path, "record names a world size of %u", world);
    memcpy(out->bytes, p + OFF_ID, BLOB_COMM_ID_BYTES);
    *world_size = (int)world;
    return BLOB_OK;
}

blob_status blob_comm_id_decode(blob_comm_id *out, int *world_size, const void *buf, size_t len)
{
    if (!out || !world_size || !buf)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    return decode(__func__, NULL, out, world_size, buf, len);
}

blob_status blob_comm_id_to_hex(const blob_comm_id *id, char *buf, size_t size)
{
    if (!id || !buf)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (size < BLOB_COMM_ID_HEX_SIZE)
        return BLOB_FAIL(BLOB_ERANGE, "buffer of %zu bytes, the hex form needs %d", size,
                         BLOB_COMM_ID_HEX_SIZE);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < BLOB_COMM_ID_BYTES; i++) {
        buf[2 * i] = digits[id->bytes[i] >> 4];
        buf[2 * i + 1] = digits[id->bytes[i] & 15];
    }
    buf[2 * BLOB_COMM_ID_BYTES] = '\0';
    return BLOB_OK;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* hex as an id into *out; failures recorded under func, what naming the value ("" for
 * none). */
static blob_status parse_hex(const char *func, const char *what, blob_comm_id *out, const char *hex)
{
    size_t len = strnlen(hex, 2 * BLOB_COMM_ID_BYTES + 1);
    if (len != 2 * BLOB_COMM_ID_BYTES)
        return blob__fail(BLOB_EINVAL, func, "%s%san id is %d hex digits, got %s%zu characters",
                          what, *what ? ": " : "", 2 * BLOB_COMM_ID_BYTES,
                          len > 2 * BLOB_COMM_ID_BYTES ? "more than " : "",
                          len > 2 * BLOB_COMM_ID_BYTES ? (size_t)2 * BLOB_COMM_ID_BYTES : len);
    blob_comm_id id;
    for (int i = 0; i < BLOB_COMM_ID_BYTES; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return blob__fail(BLOB_EINVAL, func, "%s%snot a hex digit at position %d", what,
                              *what ? ": " : "", hi < 0 ? 2 * i : 2 * i + 1);
        id.bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    *out = id;
    return BLOB_OK;
}

blob_status blob_comm_id_from_hex(blob_comm_id *out, const char *hex)
{
    if (!out || !hex)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    return parse_hex(__func__, "", out, hex);
}

/* ---- the environment ---- */

/* Where a rank finds its place, by launcher, in the order they are read: torchrun's
 * (and blob-launch's), Slurm's (srun), Open MPI's, and PMI's (MPICH, Intel MPI). */
static const char *const rank_vars[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                        NULL};
static const char *const world_vars[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                                         "PMI_SIZE", NULL};
static const char *const local_vars[] = {"LOCAL_RANK", "SLURM_LOCALID",
                                         "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", NULL};

/* The first of names that is set, read as an integer in [lo, hi] into *out; *name is it
 * (NULL, *out untouched, when none is set). */
static blob_status first_int(const char *func, const char *const *names, int64_t lo, int64_t hi,
                             int64_t *out, const char **name)
{
    *name = NULL;
    for (; *names && !*name; names++)
        if (blob__env_raw(*names)) {
            *name = *names;
            BLOB_TRY(blob__env_int(func, *names, lo, hi, out));
        }
    return BLOB_OK;
}

blob_status blob_comm_options_from_env(blob_comm_options *out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    int64_t rank = 0, world = 1, local = -1;
    const char *rank_name, *world_name, *local_name;
    BLOB_TRY(first_int(__func__, rank_vars, 0, INT_MAX - 1, &rank, &rank_name));
    BLOB_TRY(first_int(__func__, world_vars, 1, INT_MAX, &world, &world_name));
    BLOB_TRY(first_int(__func__, local_vars, 0, INT_MAX, &local, &local_name));
    if (rank >= world && world_name)
        return BLOB_FAIL(BLOB_EINVAL, "%s=%lld is not below %s=%lld", rank_name, (long long)rank,
                         world_name, (long long)world);
    if (rank >= world)
        return BLOB_FAIL(BLOB_EINVAL, "%s=%lld, but no world size is set (%s, %s, %s or %s)",
                         rank_name, (long long)rank, world_vars[0], world_vars[1], world_vars[2],
                         world_vars[3]);
    blob_comm_options o;
    memset(&o, 0, sizeof o);
    o.rank = (int)rank;
    o.world_size = (int)world;
    o.device = (int)(local_name ? local : rank);
    const char *hex = NULL;
    BLOB_TRY(blob__env_text(__func__, "BLOB_COMM_ID", 2 * BLOB_COMM_ID_BYTES, &hex));
    if (hex) {
        BLOB_TRY(parse_hex(__func__, "BLOB_COMM_ID", &o.id, hex));
        o.has_id = true;
    }
    BLOB_TRY(blob__env_text(__func__, "BLOB_COMM_ID_FILE", PATH_MAX - 1, &o.id_file));
    *out = o;
    return BLOB_OK;
}

/* ---- the rendezvous file ---- */

typedef struct {
    const char *func, *path;
    unsigned char rec[BLOB_COMM_ID_RECORD_SIZE];
} record_file;

static blob_status write_record(int fd, void *ctx)
{
    const record_file *f = ctx;
    return blob__write_all(f->func, f->path, fd, f->rec, sizeof f->rec);
}

blob_status blob_comm_id_write_file(const blob_comm_id *id, int world_size, const char *path)
{
    if (!id || !path)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (!*path)
        return BLOB_FAIL(BLOB_EINVAL, "empty path");
    record_file f = {.func = __func__, .path = path};
    BLOB_TRY(blob_comm_id_encode(id, world_size, f.rec, sizeof f.rec));
    return blob__replace_file(__func__, path, 0600, false, write_record, &f);
}

/* Read at most size bytes of fd: the count, or -1 with errno. */
static ssize_t read_all(int fd, unsigned char *buf, size_t size)
{
    size_t n = 0;
    while (n < size) {
        ssize_t r = read(fd, buf + n, size - n);
        if (r == 0)
            break;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        n += (size_t)r;
    }
    return (ssize_t)n;
}

/* Refuse a file another user could have written, as ssh refuses its keys: not owned by
 * this process's effective user, or writable by its group or others. */
static blob_status check_trusted(const char *func, const char *path, const struct stat *sb)
{
    char why[96];
    if (sb->st_uid != geteuid())
        snprintf(why, sizeof why, "owned by uid %u, not by this process's user (uid %u)",
                 (unsigned)sb->st_uid, (unsigned)geteuid());
    else if (sb->st_mode & (S_IWGRP | S_IWOTH))
        snprintf(why, sizeof why, "writable by %s (mode %04o)",
                 sb->st_mode & S_IWGRP ? "its group" : "others", (unsigned)(sb->st_mode & 07777));
    else
        return BLOB_OK;
    return blob__fail(BLOB_EIO, func,
                      "%s: %s: refused, as another user could have put an id of theirs in it "
                      "(all ranks must run as one user; rank 0 writes it with mode 0600)",
                      path, why);
}

blob_status blob_comm_id_read_file(blob_comm_id *out, int *world_size, const char *path,
                                   double timeout_s)
{
    if (!out || !world_size || !path)
        return BLOB_FAIL(BLOB_EINVAL, "NULL argument");
    if (!*path)
        return BLOB_FAIL(BLOB_EINVAL, "empty path");
    if (!(timeout_s >= 0) || isinf(timeout_s))
        return BLOB_FAIL(BLOB_EINVAL, "timeout %g s is not a finite number >= 0", timeout_s);
    double deadline = blob__now() + timeout_s;
    int fd;
    struct stat sb;
    blob_status st;
    while ((st = blob__open_regular(__func__, path, BLOB_EFORMAT, &fd, &sb)) != BLOB_OK) {
        if (st != BLOB_EIO || errno != ENOENT)
            return st;
        double left = deadline - blob__now();
        if (left <= 0)
            return BLOB_FAIL(BLOB_ETIMEDOUT,
                             "rendezvous file %s did not appear within %.1f s (rank 0 writes "
                             "it: is rank 0 running, and given the same path?)",
                             path, timeout_s);
        blob__sleep(left < 0.02 ? left : 0.02);
    }
    unsigned char rec[BLOB_COMM_ID_RECORD_SIZE + 1]; /* one more shows trailing bytes */
    ssize_t n = -1;
    st = check_trusted(__func__, path, &sb);
    if (st == BLOB_OK && (n = read_all(fd, rec, sizeof rec)) < 0)
        st = blob__fail(BLOB_EIO, __func__, "%s: read: %s", path, strerror(errno));
    close(fd);
    BLOB_TRY(st);
    return decode(__func__, path, out, world_size, rec, (size_t)n);
}

/* ---- the meeting ---- */

blob_status blob__comm_meet(const char *func, const blob_comm_options *o, const blob__ccl *ccl,
                            double timeout, blob_comm_id *id, bool *wrote)
{
    *wrote = false;
    if (o->has_id) {
        *id = o->id;
        return BLOB_OK;
    }
    if (o->id_file) {
        if (o->rank == 0) {
            BLOB_TRY(ccl->new_id(id));
            BLOB_TRY(blob_comm_id_write_file(id, o->world_size, o->id_file));
            *wrote = true;
            return BLOB_OK;
        }
        int world = 0;
        BLOB_TRY(blob_comm_id_read_file(id, &world, o->id_file, timeout));
        if (world != o->world_size)
            return blob__fail(BLOB_EINVAL, func,
                              "%s was written for %d ranks, this rank expects %d (do the ranks "
                              "agree on WORLD_SIZE? is the file left from another run?)",
                              o->id_file, world, o->world_size);
        return BLOB_OK;
    }
    if (blob__env_raw("NCCL_COMM_ID"))
        return ccl->new_id(id);
    return blob__fail(BLOB_EINVAL, func,
                      "no way to meet the other %d ranks: pass an id, or set BLOB_COMM_ID_FILE, "
                      "BLOB_COMM_ID or NCCL_COMM_ID (see docs/distributed.md)",
                      o->world_size - 1);
}

void blob__comm_id_remove_file(const char *path)
{
    char target[PATH_MAX];
    if (realpath(path, target))
        unlink(target);
}
