/* blob-launch: start the ranks of a program on this host, as torchrun --nproc-per-node
 * does, for communicators made with blob_comm_options_from_env.
 *
 *   blob-launch --nproc N [--nnodes M --node-rank K] [--rendezvous FILE] [--grace S]
 *               [--one-gpu] [--] program [args...]
 *
 * Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK and
 * BLOB_COMM_ID_FILE (FILE, or a file in a fresh temporary directory removed at the end),
 * and MASTER_ADDR/MASTER_PORT (127.0.0.1 and a free port on one host, unless set) so
 * that torch.distributed scripts run too. Each rank runs in a process group of its own:
 * SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the launcher are forwarded to every rank
 * (and its children). When a rank fails (a non-zero exit or a signal) the others get
 * SIGTERM, and SIGKILL after the grace period (5 s by default); so do all ranks after a
 * forwarded signal. The exit status is the first failed rank's (128 + the signal if it
 * was killed), 128 + the signal the launcher received, or 0. If the launcher itself is
 * killed, the kernel kills the ranks (PR_SET_PDEATHSIG).
 *
 * --one-gpu tries a run of several hosts on one GPU: every rank gets LOCAL_RANK 0 and a
 * host of its own in NCCL's eyes (NCCL_HOSTID), so that the ranks share GPU 0 and talk
 * through NCCL's network transport, as ranks on different hosts do.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NPROC 1024

typedef struct {
    pid_t pid;
    bool alive;
} rank_proc;

static const char *prog = "blob-launch";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s --nproc N [--nnodes M --node-rank K] [--rendezvous FILE] [--grace S]\n"
            "       [--one-gpu] [--] program [args...]\n"
            "Starts N ranks of program with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,\n"
            "GROUP_RANK, BLOB_COMM_ID_FILE, MASTER_ADDR and MASTER_PORT set; when one fails,\n"
            "stops the others (SIGTERM, then SIGKILL after S seconds, default 5).\n"
            "Several hosts: run it on each with --nnodes and --node-rank, and a --rendezvous\n"
            "file on storage every host can read.\n"
            "--one-gpu: every rank on GPU 0, each a host of its own to NCCL (NCCL_HOSTID),\n"
            "so that a run of several hosts can be tried on one GPU.\n",
            prog);
}

static int parse_int(const char *s, const char *what, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s must be an integer in [%ld, %ld], got \"%s\"\n", prog, what, lo,
                hi, s);
        exit(2);
    }
    return (int)v;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A TCP port nobody listens on now (for torch.distributed's store). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void set_env_int(const char *name, long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    setenv(name, buf, 1);
}

static void signal_all(rank_proc *ranks, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (ranks[i].alive)
            kill(-ranks[i].pid, sig); /* the rank's process group */
}

static const char *signal_name(int sig)
{
    const char *s = sigabbrev_np(sig);
    return s ? s : "?";
}

int main(int argc, char **argv)
{
    int nproc = 0, nnodes = 1, node_rank = 0;
    double grace = 5;
    const char *rendezvous = NULL;
    bool one_gpu = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--nproc") && has_value) {
            nproc = parse_int(argv[++i], "--nproc", 1, MAX_NPROC);
        } else if (!strcmp(a, "--nnodes") && has_value) {
            nnodes = parse_int(argv[++i], "--nnodes", 1, 1 << 20);
        } else if (!strcmp(a, "--node-rank") && has_value) {
            node_rank = parse_int(argv[++i], "--node-rank", 0, (1 << 20) - 1);
        } else if (!strcmp(a, "--rendezvous") && has_value) {
            rendezvous = argv[++i];
        } else if (!strcmp(a, "--one-gpu")) {
            one_gpu = true;
        } else if (!strcmp(a, "--grace") && has_value) {
            char *end;
            grace = strtod(argv[++i], &end);
            if (*end || !(grace >= 0) || isinf(grace)) {
                fprintf(stderr, "%s: --grace must be a number of seconds >= 0\n", prog);
                return 2;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "%s: unknown option or missing value: %s\n", prog, a);
            usage(stderr);
            return 2;
        } else {
            break;
        }
    }
    if (nproc < 1 || i >= argc) {
        usage(stderr);
        return 2;
    }
    if (node_rank >= nnodes) {
        fprintf(stderr, "%s: --node-rank %d must be below --nnodes %d\n", prog, node_rank, nnodes);
        return 2;
    }
    if (nnodes > 1 && !rendezvous) {
        fprintf(stderr, "%s: several hosts meet through a --rendezvous file that every host "
                "can read (see docs/distributed.md)\n", prog);
        return 2;
    }
    if ((long)nproc * nnodes > 1L << 30) {
        fprintf(stderr, "%s: too many ranks\n", prog);
        return 2;
    }
    char **cmd = argv + i;

    /* the rendezvous file: the given one (a stale copy removed by node 0, before any rank
     * starts), or one in a fresh directory */
    char dir[4096] = "", file[4200];
    if (rendezvous) {
        snprintf(file, sizeof file, "%s", rendezvous);
        if (node_rank == 0 && unlink(file) != 0 && errno != ENOENT) {
            fprintf(stderr, "%s: cannot remove the old %s: %s\n", prog, file, strerror(errno));
            return 1;
        }
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/blob-launch.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "%s: cannot make a temporary directory: %s\n", prog, strerror(errno));
            return 1;
        }
        snprintf(file, sizeof file, "%s/comm-id", dir);
    }

    set_env_int("WORLD_SIZE", (long)nproc * nnodes);
    set_env_int("LOCAL_WORLD_SIZE", nproc);
    set_env_int("GROUP_RANK", node_rank);
    setenv("BLOB_COMM_ID_FILE", file, 1);
    if (nnodes == 1 && !getenv("MASTER_ADDR"))
        setenv("MASTER_ADDR", "127.0.0.1", 1);
    if (nnodes == 1 && !getenv("MASTER_PORT")) {
        int port = free_port();
        if (port > 0)
            set_env_int("MASTER_PORT", port);
    }

    /* signals arrive through sigtimedwait only */
    sigset_t set, old;
    sigemptyset(&set);
    int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++)
        sigaddset(&set, forwarded[k]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);

    rank_proc ranks[MAX_NPROC];
    int alive = 0, status = 0, stop_signal = 0;
    bool stopping = false;
    double kill_at = 0;
    pid_t launcher = getpid();
    for (int r = 0; r < nproc; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != launcher)
                _exit(1);
            sigprocmask(SIG_SETMASK, &old, NULL);
            long rank = (long)node_rank * nproc + r;
            set_env_int("RANK", rank);
            set_env_int("LOCAL_RANK", one_gpu ? 0 : r);
            if (one_gpu) {
                char host[64];
                snprintf(host, sizeof host, "blob-launch-host-%ld", rank);
                setenv("NCCL_HOSTID", host, 1);
            }
            execvp(cmd[0], cmd);
            fprintf(stderr, "%s: cannot run %s: %s\n", prog, cmd[0], strerror(errno));
            _exit(127);
        }
        if (pid < 0) {
            fprintf(stderr, "%s: fork failed: %s\n", prog, strerror(errno));
            status = 1;
            stopping = true;
            kill_at = now() + grace;
            signal_all(ranks, r, SIGTERM);
            nproc = r;
            break;
        }
        setpgid(pid, pid); /* as the child does: whichever runs first */
        ranks[r] = (rank_proc){pid, true};
        alive++;
    }

    while (alive > 0) {
        struct timespec wait = {1, 0};
        if (stopping) {
            double left = kill_at - now();
            if (left <= 0) {
                signal_all(ranks, nproc, SIGKILL);
                left = 1;
            }
            wait.tv_sec = (time_t)left;
            wait.tv_nsec = (long)((left - floor(left)) * 1e9);
        }
        siginfo_t info;
        int sig = sigtimedwait(&set, &info, &wait);
        if (sig < 0)
            continue; /* the timeout, or EINTR */
        if (sig != SIGCHLD) {
            fprintf(stderr, "%s: got %s, passing it to the ranks\n", prog, signal_name(sig));
            signal_all(ranks, nproc, sig);
            if (!stop_signal)
                stop_signal = sig;
            if (!stopping) {
                stopping = true;
                kill_at = now() + grace;
            }
            continue;
        }
        int ws;
        pid_t pid;
        while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
            int r = 0;
            while (r < nproc && ranks[r].pid != pid)
                r++;
            if (r == nproc)
                continue;
            ranks[r].alive = false;
            alive--;
            kill(-pid, SIGKILL); /* what the rank left running in its group */
            bool failed = !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
            if (!failed || stopping)
                continue;
            int global = node_rank * nproc + r;
            if (WIFSIGNALED(ws)) {
                fprintf(stderr, "%s: rank %d (pid %d) was killed by %s; stopping the others\n",
                        prog, global, (int)pid, signal_name(WTERMSIG(ws)));
                status = 128 + WTERMSIG(ws);
            } else {
                fprintf(stderr, "%s: rank %d (pid %d) exited with status %d; stopping the "
                        "others\n", prog, global, (int)pid, WEXITSTATUS(ws));
                status = WEXITSTATUS(ws);
            }
            stopping = true;
            kill_at = now() + grace;
            signal_all(ranks, nproc, SIGTERM);
        }
    }

    if (node_rank == 0)
        unlink(file);
    if (*dir)
        rmdir(dir);
    if (stop_signal && !status)
        return 128 + stop_signal;
    return status;
}
