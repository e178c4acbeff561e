/* blob-launch's command line (launch_options.h). */
#include "launch_options.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "../src/core/number.h"

void launch_usage(FILE *f)
{
    fprintf(f,
            "usage: blob-launch --nproc N [--nnodes M --node-rank K] [--rendezvous FILE]\n"
            "       [--grace S] [--one-gpu] [--] program [args...]\n"
            "Starts N ranks of program with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,\n"
            "GROUP_RANK, BLOB_COMM_ID_FILE, MASTER_ADDR and MASTER_PORT set, and /dev/null\n"
            "as their input; when one fails, stops the others (SIGTERM, then SIGKILL after S\n"
            "seconds, default 5, at most %d).\n"
            "Several hosts: run it on each with --nnodes and --node-rank, and a --rendezvous\n"
            "file on storage every host can read.\n"
            "--one-gpu: every rank on GPU 0, each a host of its own to NCCL (NCCL_HOSTID),\n"
            "so that a run of several hosts can be tried on one GPU.\n",
            LAUNCH_MAX_GRACE_S);
}

__attribute__((format(printf, 3, 4))) static int refuse(char *err, size_t size, const char *fmt,
                                                        ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* v as an integer of option in [lo, hi] into *out. */
static int int_value(const char *option, const char *v, int lo, int hi, int *out, char *err,
                     size_t size)
{
    int64_t x;
    if (!blob__parse_int(v, lo, hi, &x))
        return refuse(err, size, "%s must be a whole number in [%d, %d], got \"%.40s\"", option, lo,
                      hi, v);
    *out = (int)x;
    return 0;
}

/* Whether option a takes a value (the next argument). */
static bool valued(const char *a)
{
    return !strcmp(a, "--nproc") || !strcmp(a, "--nnodes") || !strcmp(a, "--node-rank") ||
           !strcmp(a, "--rendezvous") || !strcmp(a, "--grace");
}

/* The valued option a's value v into *o: 0, or -1 with what is wrong in err. */
static int set_value(const char *a, const char *v, launch_options *o, char *err, size_t size)
{
    if (!strcmp(a, "--nproc"))
        return int_value(a, v, 1, LAUNCH_MAX_NPROC, &o->nproc, err, size);
    if (!strcmp(a, "--nnodes"))
        return int_value(a, v, 1, LAUNCH_MAX_NNODES, &o->nnodes, err, size);
    if (!strcmp(a, "--node-rank"))
        return int_value(a, v, 0, LAUNCH_MAX_NNODES - 1, &o->node_rank, err, size);
    if (!strcmp(a, "--grace") && !blob__parse_decimal(v, 0, LAUNCH_MAX_GRACE_S, &o->grace))
        return refuse(err, size, "--grace must be a number of seconds in [0, %d], got \"%.40s\"",
                      LAUNCH_MAX_GRACE_S, v);
    if (!strcmp(a, "--rendezvous") && (!*v || strlen(v) >= PATH_MAX))
        return refuse(err, size, "--rendezvous needs a path of 1 to %d characters", PATH_MAX - 1);
    if (!strcmp(a, "--rendezvous"))
        o->rendezvous = v;
    return 0;
}

/* The options as a whole, the program at argv[program] (argc: none): 0, or -1 with what
 * is wrong in err. */
static int check_options(const launch_options *o, int program, int argc, char *err, size_t size)
{
    if (!o->nproc)
        return refuse(err, size, "--nproc N is required");
    if (program >= argc)
        return refuse(err, size, "no program to run");
    if (o->node_rank >= o->nnodes)
        return refuse(err, size, "--node-rank %d must be below --nnodes %d", o->node_rank,
                      o->nnodes);
    if (o->nnodes > 1 && !o->rendezvous)
        return refuse(err, size,
                      "several hosts meet through a --rendezvous file that every "
                      "host can read (see docs/distributed.md)");
    if ((int64_t)o->nproc * o->nnodes > LAUNCH_MAX_RANKS)
        return refuse(err, size, "%d x %d ranks: more than %d", o->nnodes, o->nproc,
                      LAUNCH_MAX_RANKS);
    return 0;
}

int launch_parse(int argc, char *const *argv, launch_options *o, char *err, size_t size)
{
    *o = (launch_options){.nnodes = 1, .grace = 5};
    if (size)
        err[0] = '\0';
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = true;
            return 0;
        }
        if (!strcmp(a, "--one-gpu")) {
            o->one_gpu = true;
            continue;
        }
        if (!valued(a) && a[0] == '-')
            return refuse(err, size, "unknown option %.40s", a);
        if (!valued(a))
            break;
        if (i + 1 == argc)
            return refuse(err, size, "%s needs a value", a);
        if (set_value(a, argv[i + 1], o, err, size) != 0)
            return -1;
        i++;
    }
    if (check_options(o, i, argc, err, size) != 0)
        return -1;
    o->program = i;
    return 0;
}
