/*
 * fmnist.h - Fashion-MNIST from its gzip-compressed IDX files.
 *
 *   fmnist_set train;
 *   char err[256];
 *   if (fmnist_load(&train, "/usr/share/datasets/fashion-mnist", "train", err, sizeof err))
 *       fprintf(stderr, "%s\n", err);
 *
 * The files are untrusted: a wrong magic number, images other than 28x28, more than
 * 2^20 images, label and image counts that differ, labels outside 0..9, corrupt or
 * truncated data, and decompressed data after the payload are all reported as errors.
 * (zlib itself skips any non-gzip bytes after the last gzip member: those pass.) Memory
 * grows with the data actually read, never with what a header claims: a 16-byte header
 * asking for 2^20 images costs 64 KiB until that many pixels arrive. Uncompressed IDX
 * files are read as well (zlib passes them through). fmnist_load opens regular files
 * only: a FIFO, a directory or a device at a path is an error at once, never a wait.
 */
#ifndef MLP_FMNIST_H
#define MLP_FMNIST_H

#include <stddef.h>
#include <stdint.h>

#define FMNIST_SIDE        28
#define FMNIST_PIXELS      (FMNIST_SIDE * FMNIST_SIDE)
#define FMNIST_CLASSES     10
/* Where Debian's dataset-fashion-mnist package puts the files. */
#define FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

typedef struct {
    int64_t count;
    uint8_t *images; /* count x 784 pixels, row-major */
    uint8_t *labels; /* count classes in 0..9 */
} fmnist_set;

/* Read DIR/PREFIX-images-idx3-ubyte.gz and DIR/PREFIX-labels-idx1-ubyte.gz (PREFIX is
 * "train" or "t10k"). Returns 0, or -1 with a message naming the file in err. */
int fmnist_load(fmnist_set *set, const char *dir, const char *prefix, char *err, size_t err_size);

/* The same from open files (any file descriptor: a pipe, a memfd), which stay open;
 * the names are used in messages. */
int fmnist_read(fmnist_set *set, int images_fd, const char *images_name, int labels_fd,
                const char *labels_name, char *err, size_t err_size);

/* Free the arrays; the set becomes empty. */
void fmnist_free(fmnist_set *set);

#endif
