/* The example's IDX reader (examples/data/fmnist.c) on an arbitrary pair of files, gzip
 * or not. The input is the images file's length (4 bytes, big-endian), the images file,
 * then the labels file. Invariants: a successful read holds count images and labels in
 * range, no more than the data read; a failure says why and leaves the set empty; and
 * memory grows with the data actually read (at most four times the decompressed bytes,
 * doubling included), never with what a header claims, plus a fixed allowance for zlib's
 * state and the first 64 KiB chunk of each file. */
#include <string.h>
#include <zlib.h>

#include "../../examples/data/fmnist.h"
#include "fuzz.h"

#define ALLOWANCE (512 << 10)

/* Bytes zlib yields from fd, read as the reader reads it; fd is rewound. */
static size_t decompressed_size(int fd)
{
    gzFile gz = gzdopen(dup(fd), "rb");
    fuzz_check(gz, "gzdopen");
    size_t total = 0;
    static unsigned char buf[1 << 16];
    for (int got; (got = gzread(gz, buf, sizeof buf)) > 0;)
        total += (size_t)got;
    gzclose(gz);
    lseek(fd, 0, SEEK_SET);
    return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t split = (size_t)data[0] << 24 | (size_t)data[1] << 16 | (size_t)data[2] << 8 | data[3];
    split = split < size - 4 ? split : size - 4;
    int images = fuzz_file(0, data + 4, split);
    int labels = fuzz_file(1, data + 4 + split, size - 4 - split);
    size_t read_bytes = decompressed_size(images) + decompressed_size(labels);

    fmnist_set set;
    char err[256] = "";
    fuzz_count_begin();
    int rc = fmnist_read(&set, images, "images", labels, "labels", err, sizeof err);
    size_t allocated = fuzz_count_end();
    fuzz_check(allocated <= 4 * read_bytes + ALLOWANCE, "%zu bytes allocated for %zu bytes of data",
               allocated, read_bytes);
    if (rc == 0) {
        fuzz_check(set.count > 0 && set.images && set.labels, "empty set read");
        fuzz_check((size_t)set.count * (FMNIST_PIXELS + 1) <= read_bytes,
                   "%lld images from %zu bytes", (long long)set.count, read_bytes);
        for (int64_t i = 0; i < set.count; i++)
            fuzz_check(set.labels[i] < FMNIST_CLASSES, "label %u", set.labels[i]);
    } else {
        fuzz_check(rc == -1 && err[0], "rc %d, message '%s'", rc, err);
        fuzz_check(!set.images && !set.labels && set.count == 0, "set not empty on failure");
    }
    fmnist_free(&set);
    return 0;
}
