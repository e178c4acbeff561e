/* Shared by the libFuzzer targets (make fuzz): the input as a file, and the bytes
 * allocated during a call. Each target is one file, test/fuzz/fuzz_NAME.c, defining
 * LLVMFuzzerTestOneInput, with seeds in test/fuzz/corpus/NAME/. A target checks its
 * reader's invariants and abort()s, with a message, when one is broken: libFuzzer then
 * keeps the input as a crash. */
#ifndef BLOB_FUZZ_H
#define BLOB_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Stop with a message: an invariant is broken. */
#define fuzz_check(cond, ...)                                      \
    do {                                                           \
        if (!(cond)) {                                             \
            fprintf(stderr, "fuzz invariant broken: %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__);                          \
            fprintf(stderr, "\n");                                 \
            abort();                                               \
        }                                                          \
    } while (0)

/* An in-memory file holding exactly data (memfd: a regular file, which readers can
 * open through /proc/self/fd/N or use as a descriptor), rewound. Made once per slot. */
static inline int fuzz_file(int slot, const uint8_t *data, size_t size)
{
    static int fds[4] = {-1, -1, -1, -1};
    if (fds[slot] < 0 && (fds[slot] = memfd_create("fuzz-input", MFD_CLOEXEC)) < 0) {
        perror("memfd_create");
        exit(1);
    }
    int fd = fds[slot];
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size) ||
        lseek(fd, 0, SEEK_SET) != 0) {
        perror("fuzz input file");
        exit(1);
    }
    return fd;
}

/* Bytes requested from the malloc family, on any thread, while counting is on; seen
 * through the sanitizer runtime's hooks (every make fuzz build has them). */
void __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                               void (*free_hook)(const volatile void *));
static size_t fuzz_allocated;
static bool fuzz_counting;

static void fuzz_malloc_hook(const volatile void *p, size_t size)
{
    (void)p;
    if (fuzz_counting)
        fuzz_allocated += size;
}

static void fuzz_free_hook(const volatile void *p) { (void)p; }

__attribute__((constructor)) static void fuzz_install_hooks(void)
{
    __sanitizer_install_malloc_and_free_hooks(fuzz_malloc_hook, fuzz_free_hook);
}

static inline void fuzz_count_begin(void)
{
    fuzz_allocated = 0;
    fuzz_counting = true;
}

/* Bytes allocated since fuzz_count_begin. */
static inline size_t fuzz_count_end(void)
{
    fuzz_counting = false;
    return fuzz_allocated;
}

#endif
