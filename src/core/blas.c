/* The host BLAS: which one is linked (OpenBLAS, BLIS, MKL, or another CBLAS), the OpenBLAS
 * core it runs, and the library's host threads (blob/host_blas.h, blob_blas_get_info,
 * blob_host_threads_set).
 *
 * OpenBLAS builds with DYNAMIC_ARCH pick their kernels at load time from the CPU model.
 * On virtual machines that hide the model they fall back to a generic core (Prescott)
 * even where AVX-512 is there, and GEMMs run several times slower. OpenBLAS reads
 * OPENBLAS_CORETYPE when (re)initialised, so at load time, before any thread of ours
 * uses it, we set that variable for the fast core, re-run its initialisation, and unset
 * the variable again.
 *
 * A BLAS's own threads split a GEMM poorly at the sizes of small nets (a 64 x 256 x 784
 * product took 134 us on 16 of OpenBLAS's and 29 us cut into 16 blocks, one per thread of
 * the library's, each a one-thread call), and OpenBLAS's keep spinning after it, taking
 * the cores from the host loops that follow. So where the BLAS can run a call on its
 * caller alone (a pthreads or serial OpenBLAS, BLIS, MKL), the library sets it to one
 * thread from load time on and threads the host math itself, with as many threads as
 * the BLAS would have used. A caller who gives the BLAS its threads back
 * (openblas_set_num_threads, bli_thread_set_num_threads, mkl_set_num_threads) gets its
 * products whole again. The BLAS's own entry points are weak: any CBLAS still links,
 * and then runs each call whole with its own threading. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "blob/host_blas.h"
#include "core.h"
#include "env.h"

extern char *openblas_get_config(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));
extern int openblas_get_parallel(void) __attribute__((weak));
extern void openblas_set_num_threads(int n) __attribute__((weak));
extern int blas_thread_shutdown_(void) __attribute__((weak));
extern char *bli_info_get_version_str(void) __attribute__((weak));
extern int bli_arch_query_id(void) __attribute__((weak));
extern char *bli_arch_string(int arch) __attribute__((weak));
extern long bli_thread_get_num_threads(void) __attribute__((weak)); /* -1: never set */
extern void bli_thread_set_num_threads(long n) __attribute__((weak));
/* MKL's C entry points (its lower-case names are the Fortran ones) */
extern void MKL_Get_Version_String(char *buf, int len) __attribute__((weak));
extern int MKL_Get_Max_Threads(void) __attribute__((weak));
extern void MKL_Set_Num_Threads(int n) __attribute__((weak));

typedef enum { BLAS_OTHER, BLAS_OPENBLAS, BLAS_BLIS, BLAS_MKL } blas_kind;

/* The BLAS the process runs, known by its entry points. */
static blas_kind linked_blas(void)
{
    if (openblas_get_config)
        return BLAS_OPENBLAS;
    if (bli_info_get_version_str && bli_thread_get_num_threads && bli_thread_set_num_threads)
        return BLAS_BLIS;
    if (MKL_Get_Version_String && MKL_Get_Max_Threads && MKL_Set_Num_Threads)
        return BLAS_MKL;
    return BLAS_OTHER;
}

/* Cores whose kernels predate AVX2: OpenBLAS's choices when it cannot name the CPU. */
static const char *const generic_cores[] = {
    "Prescott", "Katmai",        "Coppermine", "Northwood", "Banias",      "Atom",
    "Core2",    "Penryn",        "Dunnington", "Nehalem",   "Sandybridge", "Athlon",
    "Opteron",  "Opteron(SSE3)", "Barcelona",  "Bobcat",    "Nano"};

static pthread_mutex_t info_mu = PTHREAD_MUTEX_INITIALIZER;
static char detected[32]; /* the core OpenBLAS chose itself, when we changed it */
static char action[96];   /* what was done about the core, for the summary */

static blas_kind blas; /* set at load time */

/* OpenBLAS's core, or BLIS's kernel set. */
static const char *core_name(void)
{
    const char *c = openblas_get_corename                  ? openblas_get_corename()
                    : bli_arch_query_id && bli_arch_string ? bli_arch_string(bli_arch_query_id())
                                                           : NULL;
    return c ? c : "";
}

static bool is_generic(const char *core)
{
    for (size_t i = 0; i < sizeof generic_cores / sizeof generic_cores[0]; i++)
        if (!strcasecmp(core, generic_cores[i]))
            return true;
    return false;
}

/* The fast core this CPU can run (the OS saving its vector state included), or NULL. */
static const char *fast_core(const char **why)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) {
        *why = "AVX-512";
        return "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *why = "AVX2";
        return "Haswell";
    }
    return NULL;
}

void blob__blas_select_core(const char *user_coretype)
{
    pthread_mutex_lock(&info_mu);
    detected[0] = action[0] = '\0';
    if (!openblas_get_corename || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) {
        pthread_mutex_unlock(&info_mu);
        return;
    }
    const char *core = core_name(), *why = NULL, *target = fast_core(&why);
    if (user_coretype && *user_coretype) {
        snprintf(action, sizeof action, " (set by OPENBLAS_CORETYPE)");
    } else if (target && is_generic(core)) {
        snprintf(detected, sizeof detected, "%s", core);
        setenv("OPENBLAS_CORETYPE", target, 1);
        gotoblas_dynamic_quit();
        gotoblas_dynamic_init();
        unsetenv("OPENBLAS_CORETYPE");
        if (strcasecmp(core_name(), target))
            snprintf(action, sizeof action, " (chosen for this %s CPU; switching to %s failed)",
                     why, target);
        else
            snprintf(action, sizeof action, " (%s CPU; OPENBLAS_CORETYPE chooses)", why);
    }
    pthread_mutex_unlock(&info_mu);
}

static _Atomic int host_threads = 1; /* the library's host threads, the caller's included */
static bool one_thread_blas;         /* the BLAS runs a call on its caller alone (its own
                                        count permitting) */

int blob__blas_threads(void)
{
    switch (blas) {
    case BLAS_OPENBLAS: return openblas_get_num_threads ? openblas_get_num_threads() : 0;
    case BLAS_BLIS: return (int)bli_thread_get_num_threads();
    case BLAS_MKL: return MKL_Get_Max_Threads();
    default: return 0;
    }
}

void blob__blas_set_threads(int n)
{
    switch (blas) {
    case BLAS_OPENBLAS:
        if (openblas_set_num_threads)
            openblas_set_num_threads(n);
        break;
    case BLAS_BLIS: bli_thread_set_num_threads(n); break;
    case BLAS_MKL: MKL_Set_Num_Threads(n); break;
    default: break;
    }
}

bool blob__blas_one_thread(void) { return one_thread_blas; }

/* At load time, while no thread of ours is inside the BLAS. */
__attribute__((constructor)) static void blas_init(void)
{
    blas = linked_blas();
    blob__blas_select_core(blob__env_raw("OPENBLAS_CORETYPE"));
    long n = blob__blas_threads();
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    host_threads = n < 1 ? 1 : n > BLOB__MAX_HOST_THREADS ? BLOB__MAX_HOST_THREADS : (int)n;
    if (blas == BLAS_OPENBLAS && openblas_get_parallel && openblas_set_num_threads &&
        openblas_get_num_threads) {
        int kind = openblas_get_parallel(); /* 0 serial, 1 pthreads, 2 OpenMP */
        if (kind == 1) {
            openblas_set_num_threads(1);
            /* its idle threads would spin for a while yet, taking cores from ours; it
               starts them again itself if given threads back */
            if (blas_thread_shutdown_)
                blas_thread_shutdown_();
        }
        one_thread_blas = kind == 0 || kind == 1;
    } else if (blas == BLAS_BLIS || blas == BLAS_MKL) {
        blob__blas_set_threads(1);
        one_thread_blas = true;
    }
}

blob_status blob_host_threads_set(int n)
{
    if (n < 1 || n > BLOB__MAX_HOST_THREADS)
        return BLOB_FAIL(BLOB_EINVAL, "%d host threads: must be 1 to %d", n,
                         BLOB__MAX_HOST_THREADS);
    host_threads = n;
    return BLOB_OK;
}

int blob__host_threads(int64_t work)
{
    enum { MIN_PER_THREAD = 1 << 14 }; /* elements; below this a thread costs more than it saves */
    if (work < 2 * MIN_PER_THREAD)
        return 1;
    int64_t n = work / MIN_PER_THREAD, max = host_threads;
    return (int)(n < max ? n : max);
}

/* Threads cut a GEMM only while the BLAS would run each piece alone. */
static bool slicing(void)
{
    return one_thread_blas && blob__blas_threads() == 1 && host_threads > 1;
}

void blob__gemm_grid(int64_t M, int64_t N, int64_t K, size_t elem, bool whole_rows, int64_t *rows,
                     int64_t *cols)
{
    /* Multiply-adds below which a block costs more to hand out than it saves; the cost of
     * packing an element of A or B into the BLAS's panels, in multiply-adds. */
    enum { MIN_BLOCK_WORK = 1 << 16, PACK_COST = 24, ROW_ALIGN = 8 };
    const int64_t col_align = (int64_t)(64 / elem); /* blocks of C meet at cache lines */
    *rows = M;
    *cols = N;
    const double work = (double)M * (double)N * (double)K;
    int nt = slicing() ? host_threads : 1;
    if (work / MIN_BLOCK_WORK < nt)
        nt = (int)(work / MIN_BLOCK_WORK);
    double best = work + PACK_COST * (double)(M + N) * (double)K;
    for (int r = 1; r <= (whole_rows ? 1 : nt); r++)
        for (int c = 1; r * c <= nt; c++) {
            int64_t bm = (M + r - 1) / r, bn = (N + c - 1) / c;
            bm = (bm + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
            bn = (bn + col_align - 1) / col_align * col_align;
            double cost = ((double)bm * (double)bn + PACK_COST * (double)(bm + bn)) * (double)K;
            if (cost < best) {
                best = cost;
                *rows = bm < M ? bm : M;
                *cols = bn < N ? bn : N;
            }
        }
}

/* "OpenBLAS 0.3.21", "BLIS 0.9.0", "MKL 2026.2", or "CBLAS" for another. */
static void blas_name(char *out, size_t size)
{
    char version[32] = "", mkl[160] = "";
    switch (blas) {
    case BLAS_OPENBLAS:
        sscanf(openblas_get_config(), "OpenBLAS %31s", version);
        snprintf(out, size, "OpenBLAS%s%s", *version ? " " : "", version);
        break;
    case BLAS_BLIS: snprintf(out, size, "BLIS %s", bli_info_get_version_str()); break;
    case BLAS_MKL: { /* "Intel(R) oneAPI Math Kernel Library Version 2026.2-Product Build ..." */
        MKL_Get_Version_String(mkl, (int)sizeof mkl);
        const char *v = strstr(mkl, "Version ");
        if (v)
            sscanf(v, "Version %31[^- ]", version);
        snprintf(out, size, "MKL%s%s", *version ? " " : "", version);
        break;
    }
    default: snprintf(out, size, "CBLAS");
    }
}

blob_status blob_blas_get_info(blob_blas_info *out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&info_mu);
    blas_name(out->name, sizeof out->name);
    snprintf(out->core, sizeof out->core, "%s", core_name());
    snprintf(out->detected, sizeof out->detected, "%s", detected);
    out->threads = host_threads;
    int n;
    if (!*out->core)
        n = snprintf(out->summary, sizeof out->summary, "%s", out->name);
    else if (*detected)
        n = snprintf(out->summary, sizeof out->summary, "%s, core %s -> %s%s", out->name, detected,
                     out->core, action);
    else
        n = snprintf(out->summary, sizeof out->summary, "%s, core %s%s", out->name, out->core,
                     action);
    if (n >= 0 && (size_t)n < sizeof out->summary)
        snprintf(out->summary + n, sizeof out->summary - (size_t)n, ", %d thread%s%s", out->threads,
                 out->threads == 1 ? "" : "s",
                 slicing() ? " (GEMMs cut into blocks, one BLAS thread each)" : "");
    pthread_mutex_unlock(&info_mu);
    return BLOB_OK;
}
