/* blob-launch: start the ranks of a program on this host, as torchrun --nproc-per-node
 * does, for communicators made with blob_comm_options_from_env.
 *
 *   blob-launch --nproc N [--nnodes M --node-rank K] [--rendezvous FILE] [--grace S]
 *               [--one-gpu] [--] program [args...]
 *
 * Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK and
 * BLOB_COMM_ID_FILE (FILE, or a file in a fresh temporary directory removed at the end),
 * MASTER_ADDR/MASTER_PORT (127.0.0.1 and a free port on one host, unless set) so that
 * torch.distributed scripts run too, and /dev/null as its standard input: a rank is not
 * in the terminal's foreground group, and reading the terminal would stop it.
 *
 * Each rank runs in a process group of its own, led by a keeper: a small process of this
 * program that starts the rank, waits for it and exits as it did. SIGINT, SIGTERM,
 * SIGHUP and SIGQUIT sent to the launcher are forwarded to every group (the keepers
 * ignore them). When a rank fails (a non-zero exit or a signal) the others get SIGTERM,
 * and SIGKILL after the grace period; so do all ranks after a forwarded signal. When a
 * rank ends, what it left running in its group is killed. The exit status is the first
 * failed rank's (128 + the signal if it was killed), 128 + the signal the launcher
 * received, or 0.
 *
 * If the launcher dies, even by SIGKILL, each keeper learns it from the kernel
 * (PR_SET_PDEATHSIG) and kills its group, the rank's children included: being in the
 * group, the keeper keeps its id from being reused meanwhile. What a rank moved out of
 * its group (setsid, setpgid: daemons) escapes this, as it escapes the launcher's own
 * signals. A rank stopped for using the terminal (SIGTTIN, SIGTTOU) is killed with a
 * message instead of stopping the run silently.
 *
 * --one-gpu tries a run of several hosts on one GPU: every rank gets LOCAL_RANK 0 and a
 * host of its own in NCCL's eyes (NCCL_HOSTID), so that the ranks share GPU 0 and talk
 * through NCCL's network transport, as ranks on different hosts do.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/comm/record.h"
#include "../src/core/clock.h"
#include "../src/core/file_kind.h"
#include "launch_options.h"

typedef struct {
    pid_t pid; /* the keeper's, which is the group's */
    bool alive;
} rank_proc;

static const char *prog = "blob-launch";

/* The signals forwarded to the ranks, and SIGCHLD: blocked, taken by sigtimedwait. */
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

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

/* Remove the rendezvous file at the end of path's symbolic links if it is an empty
 * regular file or a rendezvous record of this user: 0 (also when there is none), or -1
 * with a message saying what is there instead, which stays. */
static int remove_record(const char *path)
{
    char target[PATH_MAX];
    if (!realpath(path, target))
        return 0; /* nothing there (or a dangling link): rank 0's writer will say more */
    struct stat sb;
    int fd = -1;
    unsigned char head[BLOB__RECORD_MAGIC_LEN];
    const char *why = NULL;
    if (lstat(target, &sb) != 0)
        return 0;
    if (!S_ISREG(sb.st_mode))
        why = blob__file_kind(sb.st_mode);
    else if (sb.st_uid != geteuid())
        why = "another user's file";
    else if (sb.st_size > 0 &&
             ((fd = open(target, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
              pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head ||
              memcmp(head, BLOB__RECORD_MAGIC, sizeof head) != 0))
        why = "a file that is not a rendezvous record";
    if (fd >= 0)
        close(fd);
    if (why) {
        fprintf(stderr,
                "%s: --rendezvous %s: %s is %s, so it stays; give each job a rendezvous "
                "path of its own (nothing there, an empty file or a record of this user)\n",
                prog, path, target, why);
        return -1;
    }
    if (unlink(target) != 0 && errno != ENOENT) {
        fprintf(stderr, "%s: cannot remove the old rendezvous file %s: %s\n", prog, target,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* End as status says the rank ended: exit with its code, or die of its signal (with no
 * core dump of the keeper's own). */
_Noreturn static void end_as(int status)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

/* The rank's process, forked by its keeper (keeper_pid): dies with the keeper, reads
 * /dev/null, and runs the program under the launcher's signal mask, old. */
_Noreturn static void run_rank(char **cmd, long rank, pid_t keeper_pid, const sigset_t *old)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != keeper_pid)
        _exit(1);
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0 || dup2(in, STDIN_FILENO) < 0) {
        fprintf(stderr, "%s: rank %ld: cannot open /dev/null as its input: %s\n", prog, rank,
                strerror(errno));
        _exit(127);
    }
    sigprocmask(SIG_SETMASK, old, NULL);
    execvp(cmd[0], cmd);
    fprintf(stderr, "%s: cannot run %s: %s\n", prog, cmd[0], strerror(errno));
    _exit(127);
}

/* The keeper's watch over the rank's process pid, woken by the signals of set: kill the
 * group if the launcher dies, kill the rank if it is stopped for using the terminal, and
 * end as the rank ends. */
_Noreturn static void watch_rank(pid_t pid, long rank, pid_t launcher, const sigset_t *set)
{
    for (;;) {
        siginfo_t info;
        sigwaitinfo(set, &info);
        if (getppid() != launcher)
            kill(0, SIGKILL); /* the launcher died: the group goes, this keeper with it */
        int ws;
        pid_t got;
        while ((got = waitpid(pid, &ws, WNOHANG | WUNTRACED)) == pid) {
            if (!WIFSTOPPED(ws))
                end_as(ws);
            int sig = WSTOPSIG(ws);
            if (sig == SIGTTIN || sig == SIGTTOU) {
                fprintf(stderr,
                        "%s: rank %ld (pid %d) was stopped by %s: it used the terminal, "
                        "which ranks do not own (their input is /dev/null); killing it\n",
                        prog, rank, (int)pid, signal_name(sig));
                kill(pid, SIGKILL);
            }
        }
    }
}

/* The keeper of rank r (its process group's leader; the launcher's signals blocked, in
 * `set`): start the program, kill the group if the launcher dies, kill a rank stopped for
 * using the terminal, and end as the rank ends. */
_Noreturn static void keeper(const launch_options *o, char **cmd, int r, pid_t launcher,
                             const sigset_t *set, const sigset_t *old)
{
    setpgid(0, 0);
    long rank = (long)o->node_rank * o->nproc + r;
    set_env_int("RANK", rank);
    set_env_int("LOCAL_RANK", o->one_gpu ? 0 : r);
    if (o->one_gpu) {
        char host[64];
        snprintf(host, sizeof host, "blob-launch-host-%ld", rank);
        setenv("NCCL_HOSTID", host, 1);
    }
    sigset_t stops; /* sent to the whole group when the rank uses the terminal */
    sigemptyset(&stops);
    sigaddset(&stops, SIGTTIN);
    sigaddset(&stops, SIGTTOU);
    sigaddset(&stops, SIGTSTP);
    sigprocmask(SIG_BLOCK, &stops, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* one of `set`: woken, it finds the launcher gone */
    if (getppid() != launcher)
        kill(0, SIGKILL);
    pid_t keeper_pid = getpid(), pid = fork();
    if (pid == 0)
        run_rank(cmd, rank, keeper_pid, old);
    if (pid < 0) {
        fprintf(stderr, "%s: rank %ld: fork failed: %s\n", prog, rank, strerror(errno));
        _exit(1);
    }
    watch_rank(pid, rank, launcher, set);
}

/* The launcher's run: its ranks, the signals it takes, and how the run is ending. */
typedef struct {
    const launch_options *o;
    char dir[PATH_MAX];       /* the fresh temporary directory, or "" */
    char file[PATH_MAX + 16]; /* the rendezvous file */
    sigset_t set, old;        /* the signals taken by sigtimedwait; the mask before */
    rank_proc ranks[LAUNCH_MAX_NPROC];
    int nproc, alive;        /* the ranks started; those not reaped yet */
    int status, stop_signal; /* the first failed rank's status; the first forwarded signal */
    bool stopping;
    double kill_at; /* when the ranks still running get SIGKILL, once stopping */
} launcher;

/* The rendezvous file: the given one (a stale record removed by node 0, before any rank
 * starts), or one in a fresh directory. 0, or 1 with a message. */
static int make_rendezvous(launcher *l)
{
    if (l->o->rendezvous) {
        snprintf(l->file, sizeof l->file, "%s", l->o->rendezvous);
        return l->o->node_rank == 0 && remove_record(l->file) != 0 ? 1 : 0;
    }
    const char *tmp = getenv("TMPDIR");
    if (snprintf(l->dir, sizeof l->dir, "%s/blob-launch.XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
            (int)sizeof l->dir ||
        !mkdtemp(l->dir)) {
        fprintf(stderr, "%s: cannot make a temporary directory in %s: %s\n", prog,
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
        return 1;
    }
    snprintf(l->file, sizeof l->file, "%s/comm-id", l->dir);
    return 0;
}

/* The environment every rank shares. */
static void export_world(const launch_options *o, const char *file)
{
    set_env_int("WORLD_SIZE", (long)o->nproc * o->nnodes);
    set_env_int("LOCAL_WORLD_SIZE", o->nproc);
    set_env_int("GROUP_RANK", o->node_rank);
    setenv("BLOB_COMM_ID_FILE", file, 1);
    if (o->nnodes == 1 && !getenv("MASTER_ADDR"))
        setenv("MASTER_ADDR", "127.0.0.1", 1);
    if (o->nnodes == 1 && !getenv("MASTER_PORT")) {
        int port = free_port();
        if (port > 0)
            set_env_int("MASTER_PORT", port);
    }
}

/* Signals arrive through sigtimedwait only. */
static void block_signals(launcher *l)
{
    sigemptyset(&l->set);
    for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++)
        sigaddset(&l->set, forwarded[k]);
    sigaddset(&l->set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &l->set, &l->old);
}

/* The run begins to stop: the ranks still running get SIGKILL after the grace period. */
static void begin_stopping(launcher *l)
{
    l->stopping = true;
    l->kill_at = blob__now() + l->o->grace;
}

/* A keeper for each rank; if a fork fails, the run stops with the ranks started. */
static void start_ranks(launcher *l, char **cmd)
{
    pid_t self = getpid();
    for (int r = 0; r < l->o->nproc; r++) {
        pid_t pid = fork();
        if (pid == 0)
            keeper(l->o, cmd, r, self, &l->set, &l->old);
        if (pid < 0) {
            fprintf(stderr, "%s: fork failed: %s\n", prog, strerror(errno));
            l->status = 1;
            begin_stopping(l);
            signal_all(l->ranks, r, SIGTERM);
            return;
        }
        setpgid(pid, pid); /* as the keeper does: whichever runs first */
        l->ranks[r] = (rank_proc){pid, true};
        l->nproc++;
        l->alive++;
    }
}

/* Rank r's keeper (pid) ended with ws: a failure, the first, stops the others. */
static void rank_ended(launcher *l, int r, pid_t pid, int ws)
{
    l->ranks[r].alive = false;
    l->alive--;
    bool failed = !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    if (!failed || l->stopping)
        return;
    int global = l->o->node_rank * l->o->nproc + r;
    if (WIFSIGNALED(ws)) {
        fprintf(stderr,
                "%s: rank %d (process group %d) was killed by %s; stopping the "
                "others\n",
                prog, global, (int)pid, signal_name(WTERMSIG(ws)));
        l->status = 128 + WTERMSIG(ws);
    } else {
        fprintf(stderr,
                "%s: rank %d (process group %d) exited with status %d; "
                "stopping the others\n",
                prog, global, (int)pid, WEXITSTATUS(ws));
        l->status = WEXITSTATUS(ws);
    }
    begin_stopping(l);
    signal_all(l->ranks, l->nproc, SIGTERM);
}

/* Each keeper that ended: its group is killed while the unreaped keeper still holds the
 * group's id, then it is reaped. */
static void reap_keepers(launcher *l)
{
    for (;;) {
        siginfo_t ended = {0};
        if (waitid(P_ALL, 0, &ended, WEXITED | WNOHANG | WNOWAIT) != 0 || !ended.si_pid)
            break;
        pid_t pid = ended.si_pid;
        int r = 0;
        while (r < l->nproc && l->ranks[r].pid != pid)
            r++;
        if (r < l->nproc)
            kill(-pid, SIGKILL); /* what the rank left running in its group */
        int ws;
        if (waitpid(pid, &ws, 0) == pid && r < l->nproc)
            rank_ended(l, r, pid, ws);
    }
}

/* The next signal, or a negative value at the timeout: a second while running, the time
 * left to the SIGKILL once stopping (sent when it has come). */
static int next_signal(launcher *l)
{
    struct timespec wait = {1, 0};
    if (l->stopping) {
        double left = l->kill_at - blob__now();
        if (left <= 0) {
            signal_all(l->ranks, l->nproc, SIGKILL);
            left = 1;
        }
        wait.tv_sec = (time_t)left; /* below LAUNCH_MAX_GRACE_S + 1 */
        wait.tv_nsec = (long)((left - floor(left)) * 1e9);
    }
    siginfo_t info;
    return sigtimedwait(&l->set, &info, &wait);
}

/* Wait for every rank, passing on the signals the launcher gets. */
static void supervise(launcher *l)
{
    while (l->alive > 0) {
        int sig = next_signal(l);
        if (sig < 0)
            continue; /* the timeout, or EINTR */
        if (sig == SIGCHLD) {
            reap_keepers(l);
            continue;
        }
        fprintf(stderr, "%s: got %s, passing it to the ranks\n", prog, signal_name(sig));
        signal_all(l->ranks, l->nproc, sig);
        if (!l->stop_signal)
            l->stop_signal = sig;
        if (!l->stopping)
            begin_stopping(l);
    }
}

int main(int argc, char **argv)
{
    launch_options o;
    char err[256];
    if (launch_parse(argc, argv, &o, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        launch_usage(stderr);
        return 2;
    }
    if (o.help) {
        launch_usage(stdout);
        return 0;
    }
    launcher l = {.o = &o};
    if (make_rendezvous(&l) != 0)
        return 1;
    export_world(&o, l.file);
    block_signals(&l);
    start_ranks(&l, argv + o.program);
    supervise(&l);

    if (o.node_rank == 0)
        remove_record(l.file); /* rank 0 removes its record; one left by a crash goes here */
    if (*l.dir)
        rmdir(l.dir);
    if (l.stop_signal && !l.status)
        return 128 + l.stop_signal;
    return l.status;
}
