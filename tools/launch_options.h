/* blob-launch's command line, parsed apart from the launching so that it can be driven
 * from C (test/fuzz/fuzz_launch_options.c). */
#ifndef BLOB_LAUNCH_OPTIONS_H
#define BLOB_LAUNCH_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define LAUNCH_MAX_NPROC   1024
#define LAUNCH_MAX_NNODES  (1 << 20)
#define LAUNCH_MAX_RANKS   (1 << 30)
#define LAUNCH_MAX_GRACE_S 3600

typedef struct {
    int nproc, nnodes, node_rank;
    double grace;           /* seconds from SIGTERM to SIGKILL */
    const char *rendezvous; /* NULL: a file in a fresh temporary directory */
    bool one_gpu;
    bool help;   /* -h or --help: print the usage, start nothing */
    int program; /* argv[program] is the program to run (unless help) */
} launch_options;

/* Parse argv[1..argc): 0, or -1 with what is wrong in err (size bytes, always
 * terminated), a usage error. Numbers are decimal digits alone (no sign, space, other
 * base or exponent); every value is bounded. */
int launch_parse(int argc, char *const *argv, launch_options *o, char *err, size_t size);

void launch_usage(FILE *f);

#endif
