/* Internal: files replaced whole and atomically (blob_save_npy, the rendezvous record),
 * and untrusted files opened for reading without blocking. Failures are recorded under
 * func, the public call, as "path: what: why". Never installed. */
#ifndef BLOB_FILE_H
#define BLOB_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "blob/status.h"

/* Write the file at path anew: write(fd, ctx) writes the whole contents to fd, a new
 * empty file, and returns BLOB_OK or its failure (recorded); it may be called a second
 * time, on a fresh file, where the first could not be named. Symbolic links at the end
 * of path are followed, as numpy's open() follows them: the file they point to is
 * replaced and the links stay. A target that exists and is not a regular file is
 * refused (a device node or FIFO would otherwise be replaced by a regular file). The new
 * file is made in the target's directory, unnamed (O_TMPFILE) where the file system
 * allows, else under a temporary name ".NAME.blob-tmp-XXXXXX"; it gets mode (less the
 * umask) or, with keep_mode and a target that exists, the target's mode. Once written it
 * is synced, renamed over the target, and the directory synced: a reader sees the old
 * file or the whole new one, and on failure the target is as it was with no temporary
 * name left. Temporary names of that pattern left in the directory by writers that
 * died (regular files of this user untouched for BLOB__STALE_TEMP_S) are removed first.
 * Errors: BLOB_EIO, BLOB_ENOMEM, and write's. */
blob_status blob__replace_file(const char *func, const char *path, mode_t mode, bool keep_mode,
                               blob_status (*write)(int fd, void *ctx), void *ctx);

/* write(2) all n bytes of buf to fd, a file that path names (for messages).
 * Errors: BLOB_EIO. */
blob_status blob__write_all(const char *func, const char *path, int fd, const void *buf, size_t n);

/* Whether blob__replace_file tries O_TMPFILE; tests turn it off to take the path of
 * file systems without it. */
extern bool blob__replace_tmpfile;

/* A temporary file untouched this long is one whose writer died. Over an hour, so that
 * no live writer (whose file changes as it writes, and is renamed at once after) nor a
 * clock differing between hosts of a shared file system is mistaken for one. */
#define BLOB__STALE_TEMP_S 3600

/* Open path for reading if it is a regular file; anything else is refused before it is
 * opened (opening a FIFO waits for a writer, opening a device may act on it) with
 * not_regular as the status, and the open does not block either, in case the path
 * changes in between: the type of what was opened is checked again. *sb is its status.
 * Errors: not_regular, BLOB_EIO (errno kept: ENOENT for a path that does not exist). */
blob_status blob__open_regular(const char *func, const char *path, blob_status not_regular, int *fd,
                               struct stat *sb);

#endif
