/* The host BLAS: what it is, the OpenBLAS core it runs, and the thread count that the
 * host loops share with it (blob/math.h, blob_blas_get_info).
 *
 * OpenBLAS builds with DYNAMIC_ARCH pick their kernels at load time from the CPU model.
 * On virtual machines that hide the model they fall back to a generic core (Prescott)
 * even where AVX-512 is there, and GEMMs run several times slower. OpenBLAS reads
 * OPENBLAS_CORETYPE when (re)initialised, so at load time, before any thread of ours
 * uses it, we set that variable for the fast core, re-run its initialisation, and unset
 * the variable again. The OpenBLAS entry points are weak: any CBLAS still links. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "blob/math.h"
#include "core.h"

extern char *openblas_get_config(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

/* Cores whose kernels predate AVX2: OpenBLAS's choices when it cannot name the CPU. */
static const char *const generic_cores[] = {
    "Prescott", "Katmai",   "Coppermine", "Northwood", "Banias", "Atom",
    "Core2",    "Penryn",   "Dunnington", "Nehalem",   "Sandybridge", "Athlon",
    "Opteron",  "Opteron(SSE3)", "Barcelona", "Bobcat", "Nano"};

static pthread_mutex_t info_mu = PTHREAD_MUTEX_INITIALIZER;
static char detected[32]; /* the core OpenBLAS chose itself, when we changed it */
static char action[96];   /* what was done about the core, for the summary */

static const char *core_name(void)
{
    const char *c = openblas_get_corename ? openblas_get_corename() : NULL;
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

/* At load time, while no thread of ours is inside OpenBLAS. */
__attribute__((constructor)) static void blas_init(void)
{
    blob__blas_select_core(getenv("OPENBLAS_CORETYPE"));
}

static int blas_threads(void)
{
    long n = openblas_get_num_threads ? openblas_get_num_threads()
                                      : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int blob__host_threads(int64_t work)
{
    enum { MIN_PER_THREAD = 1 << 18 }; /* elements; below this a thread costs more than it saves */
    if (work < 2 * MIN_PER_THREAD)
        return 1;
    int64_t n = work / MIN_PER_THREAD, max = blas_threads();
    return (int)(n < max ? n : max);
}

blob_status blob_blas_get_info(blob_blas_info *out)
{
    if (!out)
        return BLOB_FAIL(BLOB_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&info_mu);
    char version[32];
    if (openblas_get_config && sscanf(openblas_get_config(), "OpenBLAS %31s", version) == 1)
        snprintf(out->name, sizeof out->name, "OpenBLAS %s", version);
    else
        snprintf(out->name, sizeof out->name, "%s", openblas_get_config ? "OpenBLAS" : "CBLAS");
    snprintf(out->core, sizeof out->core, "%s", core_name());
    snprintf(out->detected, sizeof out->detected, "%s", detected);
    out->threads = blas_threads();
    int n;
    if (!*out->core)
        n = snprintf(out->summary, sizeof out->summary, "%s", out->name);
    else if (*detected)
        n = snprintf(out->summary, sizeof out->summary, "%s, core %s -> %s%s", out->name,
                     detected, out->core, action);
    else
        n = snprintf(out->summary, sizeof out->summary, "%s, core %s%s", out->name, out->core,
                     action);
    if (n >= 0 && (size_t)n < sizeof out->summary)
        snprintf(out->summary + n, sizeof out->summary - (size_t)n, ", %d thread%s",
                 out->threads, out->threads == 1 ? "" : "s");
    pthread_mutex_unlock(&info_mu);
    return BLOB_OK;
}
