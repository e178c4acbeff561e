/* libFuzzer target: blob-launch's command line (tools/launch_options.c). The input is the
 * arguments after the program's name, separated by NUL bytes. Invariants: every input is
 * accepted or refused, never exits or aborts; a refusal says why; an accepted line has
 * every value in its bounds, a program to run (unless --help), and its numbers written
 * as decimal digits on the command line. */
#include <math.h>
#include <string.h>

#include "../../tools/launch_options.h"
#include "fuzz.h"

#define MAX_ARGS 64

/* Whether one of argv[1..argc) is option followed by a value reading as v. */
static bool given(int argc, char **argv, const char *option, long v)
{
    char text[32];
    snprintf(text, sizeof text, "%ld", v);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], option)) {
            const char *p = argv[i + 1];
            while (*p == '0' && p[1])
                p++;
            if (!strcmp(p, text))
                return true;
        }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[4096];
    if (size >= sizeof buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1] = {"blob-launch"};
    int argc = 1;
    for (char *p = buf; p <= buf + size && argc < MAX_ARGS; p += strlen(p) + 1)
        argv[argc++] = p;
    argv[argc] = NULL;

    launch_options o;
    char err[128];
    memset(err, 'x', sizeof err);
    int rc = launch_parse(argc, argv, &o, err, sizeof err);
    fuzz_check(rc == 0 || rc == -1, "rc %d", rc);
    if (rc) {
        fuzz_check(memchr(err, '\0', sizeof err) && err[0], "no reason given");
        return 0;
    }
    if (o.help)
        return 0;
    fuzz_check(o.program >= 1 && o.program < argc, "program at %d of %d", o.program, argc);
    fuzz_check(o.nproc >= 1 && o.nproc <= LAUNCH_MAX_NPROC, "nproc %d", o.nproc);
    fuzz_check(o.nnodes >= 1 && o.nnodes <= LAUNCH_MAX_NNODES, "nnodes %d", o.nnodes);
    fuzz_check(o.node_rank >= 0 && o.node_rank < o.nnodes, "node rank %d", o.node_rank);
    fuzz_check((long long)o.nproc * o.nnodes <= LAUNCH_MAX_RANKS, "ranks");
    fuzz_check(isfinite(o.grace) && o.grace >= 0 && o.grace <= LAUNCH_MAX_GRACE_S, "grace %g",
               o.grace);
    fuzz_check(!o.rendezvous || *o.rendezvous, "empty rendezvous");
    fuzz_check(o.nnodes == 1 || o.rendezvous, "several hosts without a rendezvous");
    fuzz_check(given(argc, argv, "--nproc", o.nproc), "--nproc %d not given so", o.nproc);
    fuzz_check(o.nnodes == 1 || given(argc, argv, "--nnodes", o.nnodes), "--nnodes %d", o.nnodes);
    return 0;
}
