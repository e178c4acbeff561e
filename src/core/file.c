/* Files replaced whole and atomically, and untrusted files opened for reading (file.h). */
#include "file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "file_kind.h"

#define TEMP_MARK    ".blob-tmp-" /* a temporary name: "." NAME TEMP_MARK and 6 letters */
#define TEMP_LETTERS 6
static const char letters[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

bool blob__replace_tmpfile = true;

/* Where a write goes: the file at the end of the path's symbolic links, replaced by a
 * file made in the same directory. */
typedef struct {
    const char *func, *path; /* the call and the path it was given, for messages */
    char target[PATH_MAX];   /* the path with its symbolic links followed */
    const char *name;        /* the target's name within its directory */
    int dir;                 /* the target's directory, open */
    bool replace;            /* the target exists */
    mode_t mode;             /* the new file's */
    char tmp[NAME_MAX + 1];  /* the new file's temporary name in dir */
} replace_ctx;

/* BLOB_EIO for a failed system call `what`, with errno's text; errno is kept. */
static blob_status errno_fail(const char *func, const char *path, const char *what)
{
    int err = errno;
    char buf[128];
    blob__fail(BLOB_EIO, func, "%s: %s: %s", path, what, strerror_r(err, buf, sizeof buf));
    errno = err;
    return BLOB_EIO;
}

static blob_status not_regular(blob_status st, const char *func, const char *path, mode_t mode)
{
    return blob__fail(st, func, "%s: not a regular file (%s)", path, blob__file_kind(mode));
}

/* Follow symbolic links at the end of c->target. Resolution stops at the first name that
 * is not a link (or does not exist: the calls that follow report real errors). */
static blob_status follow_links(replace_ctx *c)
{
    char link[PATH_MAX];
    for (int hops = 0;; hops++) {
        ssize_t n = readlink(c->target, link, sizeof link);
        if (n < 0)
            return BLOB_OK;
        if (hops == 40) /* the kernel's own limit */
            return blob__fail_path(BLOB_EIO, c->func, c->path, "too many levels of symbolic links");
        const char *slash = strrchr(c->target, '/');
        size_t keep = link[0] == '/' || !slash ? 0 : (size_t)(slash - c->target) + 1;
        if ((size_t)n >= sizeof link || keep + (size_t)n >= sizeof c->target)
            return blob__fail_path(BLOB_EIO, c->func, c->path, "symbolic link target too long");
        memcpy(c->target + keep, link, (size_t)n);
        c->target[keep + (size_t)n] = '\0';
    }
}

/* Find the file to replace, open its directory, and refuse a target that exists and is
 * not a regular file. */
static blob_status open_target(replace_ctx *c, bool keep_mode)
{
    if (strlen(c->path) >= sizeof c->target)
        return blob__fail_path(BLOB_EIO, c->func, c->path, "path too long");
    strcpy(c->target, c->path);
    BLOB_TRY(follow_links(c));
    char *slash = strrchr(c->target, '/');
    c->name = slash ? slash + 1 : c->target;
    if (!*c->name)
        return blob__fail_path(BLOB_EIO, c->func, c->path, "not a regular file (a directory)");
    if (slash)
        *slash = '\0';
    c->dir = open(!slash               ? "."
                  : slash == c->target ? "/"
                                       : c->target,
                  O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (slash)
        *slash = '/';
    if (c->dir < 0)
        return errno_fail(c->func, c->path, "open the directory");
    struct stat sb;
    if (fstatat(c->dir, c->name, &sb, 0) == 0) {
        if (!S_ISREG(sb.st_mode))
            return not_regular(BLOB_EIO, c->func, c->path, sb.st_mode);
        c->replace = true;
        if (keep_mode)
            c->mode = sb.st_mode & 07777;
    } else if (errno != ENOENT) {
        return errno_fail(c->func, c->path, "stat");
    }
    return BLOB_OK;
}

/* Whether name is a temporary name of this file: "." NAME TEMP_MARK and 6 letters. */
static bool is_temp_name(const char *name)
{
    size_t n = strlen(name), mark = sizeof TEMP_MARK - 1;
    if (name[0] != '.' || n < 2 + mark + TEMP_LETTERS)
        return false;
    const char *tail = name + n - TEMP_LETTERS;
    return memcmp(tail - mark, TEMP_MARK, mark) == 0 && strspn(tail, letters) == TEMP_LETTERS;
}

/* Remove the temporary files that writers which died left in the directory: names of the
 * pattern, regular files of this user with one link, untouched for BLOB__STALE_TEMP_S.
 * Best effort: what cannot be read or removed stays. */
static void remove_stale(const replace_ctx *c)
{
    int fd = openat(c->dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    time_t now = time(NULL);
    uid_t me = geteuid();
    for (struct dirent *e; (e = readdir(d));) {
        struct stat sb;
        if (is_temp_name(e->d_name) && fstatat(c->dir, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(sb.st_mode) && sb.st_uid == me && sb.st_nlink == 1 &&
            now - sb.st_mtime > BLOB__STALE_TEMP_S)
            unlinkat(c->dir, e->d_name, 0);
    }
    closedir(d);
}

/* A fresh temporary name for the new file (O_EXCL and linkat refuse a name that exists,
 * and the caller draws again). */
static void temp_name(replace_ctx *c)
{
    static atomic_ulong counter;
    unsigned long r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = ((unsigned long)getpid() << 20) ^ (unsigned long)time(NULL) ^
            atomic_fetch_add(&counter, 0x9e3779b9ul);
    char suffix[TEMP_LETTERS + 1];
    for (int i = 0; i < TEMP_LETTERS; i++, r /= sizeof letters - 1)
        suffix[i] = letters[r % (sizeof letters - 1)];
    suffix[TEMP_LETTERS] = '\0';
    snprintf(c->tmp, sizeof c->tmp, ".%.230s" TEMP_MARK "%s", c->name, suffix);
}

/* Give the unnamed file fd a temporary name in the directory: through /proc, or with
 * AT_EMPTY_PATH where privileges allow. -1 with errno when neither can. */
static int link_temp(replace_ctx *c, int fd)
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

/* The contents, the mode and the data on disk. */
static blob_status fill(const replace_ctx *c, int fd, blob_status (*write)(int, void *), void *ctx)
{
    if (c->replace && fchmod(fd, c->mode) != 0)
        return errno_fail(c->func, c->path, "chmod");
    BLOB_TRY(write(fd, ctx));
    if (fsync(fd) != 0)
        return errno_fail(c->func, c->path, "fsync");
    return BLOB_OK;
}

/* Write the complete new file under c->tmp in the target's directory. It is written as
 * an unnamed file and named only when complete; where the file system has no O_TMPFILE
 * or the file cannot be named, it is written under a temporary name from the start. On
 * failure no name is left. */
static blob_status write_new(replace_ctx *c, blob_status (*write)(int, void *), void *ctx)
{
    if (blob__replace_tmpfile) {
        int fd = openat(c->dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, c->mode);
        if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            return errno_fail(c->func, c->path, "open an unnamed file");
        if (fd >= 0) {
            blob_status st = fill(c, fd, write, ctx);
            bool linked = st == BLOB_OK && link_temp(c, fd) == 0;
            if (close(fd) != 0 && st == BLOB_OK)
                st = errno_fail(c->func, c->path, "close");
            if (st != BLOB_OK && linked)
                unlinkat(c->dir, c->tmp, 0);
            if (st != BLOB_OK || linked)
                return st;
        }
    }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        temp_name(c);
        fd = openat(c->dir, c->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, c->mode);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        return errno_fail(c->func, c->path, "create a temporary file");
    blob_status st = fill(c, fd, write, ctx);
    if (close(fd) != 0 && st == BLOB_OK)
        st = errno_fail(c->func, c->path, "close");
    if (st != BLOB_OK)
        unlinkat(c->dir, c->tmp, 0);
    return st;
}

blob_status blob__replace_file(const char *func, const char *path, mode_t mode, bool keep_mode,
                               blob_status (*write)(int fd, void *ctx), void *ctx)
{
    replace_ctx *c = blob__obj_alloc(sizeof *c);
    if (!c)
        return blob__fail(BLOB_ENOMEM, func, "%s: no memory to write it", path);
    *c = (replace_ctx){.func = func, .path = path, .dir = -1, .mode = mode};
    blob_status st = open_target(c, keep_mode);
    if (st == BLOB_OK) {
        remove_stale(c);
        st = write_new(c, write, ctx);
    }
    if (st == BLOB_OK && renameat(c->dir, c->tmp, c->dir, c->name) != 0) {
        st = errno_fail(func, path, "rename");
        unlinkat(c->dir, c->tmp, 0);
    }
    /* The rename is durable once the directory is; a file system that cannot sync a
     * directory says EINVAL, and there is nothing more to do. */
    if (st == BLOB_OK && fsync(c->dir) != 0 && errno != EINVAL)
        st = errno_fail(func, path, "fsync of the directory");
    if (c->dir >= 0)
        close(c->dir);
    blob__obj_free(c);
    return st;
}

blob_status blob__write_all(const char *func, const char *path, int fd, const void *buf, size_t n)
{
    for (const char *p = buf; n > 0;) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno_fail(func, path, "write");
        p += k;
        n -= (size_t)k;
    }
    return BLOB_OK;
}

blob_status blob__open_regular(const char *func, const char *path, blob_status not_reg, int *fd,
                               struct stat *sb)
{
    if (stat(path, sb) != 0)
        return errno_fail(func, path, "open");
    if (!S_ISREG(sb->st_mode))
        return not_regular(not_reg, func, path, sb->st_mode);
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (f < 0)
        return errno_fail(func, path, "open");
    blob_status st = BLOB_OK;
    if (fstat(f, sb) != 0)
        st = errno_fail(func, path, "fstat");
    else if (!S_ISREG(sb->st_mode)) /* the path changed meanwhile */
        st = not_regular(not_reg, func, path, sb->st_mode);
    if (st != BLOB_OK) {
        close(f);
        return st;
    }
    *fd = f;
    return BLOB_OK;
}
