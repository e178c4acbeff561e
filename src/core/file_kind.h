/* Internal: what a path that is not a regular file is, for messages; shared by the atomic
 * file writer (file.c) and blob-launch, which includes it on its own (no library header
 * comes with it). */
#ifndef BLOB_FILE_KIND_H
#define BLOB_FILE_KIND_H

#include <sys/stat.h>

/* "a directory", "a FIFO", ... for the file type of mode; "not a regular file" for the
 * rest. */
static inline const char *blob__file_kind(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

#endif
