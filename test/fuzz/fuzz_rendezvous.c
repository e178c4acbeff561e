/* libFuzzer target: the rendezvous record, as blob_comm_id_decode reads it from bytes and
 * blob_comm_id_read_file from a file. Invariants: every input gives BLOB_OK or
 * BLOB_EFORMAT, the file gives the same answer as the bytes, a refused record leaves the
 * outputs untouched, and an accepted one encodes back to the same bytes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <blob/comm.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(blob_status st, const blob_comm_id *id, int world, const uint8_t *data,
                  size_t size)
{
    blob_comm_id untouched;
    memset(&untouched, 0xa5, sizeof untouched);
    if (st == BLOB_OK) {
        unsigned char again[BLOB_COMM_ID_RECORD_SIZE];
        if (size != sizeof again || blob_comm_id_encode(id, world, again, sizeof again) ||
            memcmp(again, data, size))
            abort();
    } else if (st != BLOB_EFORMAT || world != -7 || memcmp(id, &untouched, sizeof *id)) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    if (!data)
        data = empty;
    blob_comm_id id;
    memset(&id, 0xa5, sizeof id);
    int world = -7;
    blob_status st = blob_comm_id_decode(&id, &world, data, size);
    check(st, &id, world, data, size);

    /* the same bytes as a file (an in-memory one, named through /proc) */
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("rendezvous", 0);
        if (fd < 0 || fchmod(fd, 0600) != 0) { /* as rank 0 writes it: the reader trusts it */
            perror("rendezvous file");
            exit(1);
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    blob_comm_id from_file;
    memset(&from_file, 0xa5, sizeof from_file);
    int file_world = -7;
    blob_status fst = blob_comm_id_read_file(&from_file, &file_world, path, 0);
    if (fst != st)
        abort();
    check(fst, &from_file, file_world, data, size);
    return 0;
}
