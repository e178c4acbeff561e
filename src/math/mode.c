/* The process-wide math mode of float32 GPU products and GEMM tuning (blob/math_mode.h). */
#include <pthread.h>
#include <stdatomic.h>

#include "blob/math_mode.h"
#include "../core/core.h"
#include "../core/env.h"
#include "math_impl.h"

static blob_math_mode env_mode = BLOB_MATH_FP32;
static blob__env_fault env_mode_fault;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static _Atomic int current_mode = BLOB_MATH_DEFAULT; /* DEFAULT: the environment's */

static void read_env(void)
{
    static const char *const names[] = {"fp32", "tf32", "bf16", NULL};
    int i = 0;
    blob__env_keep(&env_mode_fault, blob__env_choice(NULL, "BLOB_MATH_MODE", names, &i));
    env_mode = (blob_math_mode)(BLOB_MATH_FP32 + i);
}

blob_status blob_math_mode_set(blob_math_mode mode)
{
    if (mode < BLOB_MATH_DEFAULT || mode > BLOB_MATH_BF16)
        return BLOB_FAIL(BLOB_EINVAL, "bad math mode %d", (int)mode);
    atomic_store(&current_mode, (int)mode);
    return BLOB_OK;
}

/* The process-wide mode; *from_env: it is the environment's. */
static blob_math_mode process_mode(bool *from_env)
{
    int m = atomic_load(&current_mode);
    *from_env = m == BLOB_MATH_DEFAULT;
    if (!*from_env)
        return (blob_math_mode)m;
    pthread_once(&env_once, read_env);
    return env_mode;
}

blob_math_mode blob_math_mode_get(void)
{
    bool from_env;
    return process_mode(&from_env);
}

const char *blob_math_mode_name(blob_math_mode mode)
{
    switch (mode) {
    case BLOB_MATH_DEFAULT: return "default";
    case BLOB_MATH_FP32: return "fp32";
    case BLOB_MATH_TF32: return "tf32";
    case BLOB_MATH_BF16: return "bf16";
    }
    return "unknown";
}

blob_status blob__check_math_mode(const char *fn, blob_math_mode mode)
{
    if (mode < BLOB_MATH_DEFAULT || mode > BLOB_MATH_BF16)
        return blob__fail(BLOB_EINVAL, fn, "bad math mode %d", (int)mode);
    return BLOB_OK;
}

blob_status blob__math_mode_for(const char *func, blob_dtype dtype, blob_math_mode mode,
                                blob_math_mode *out)
{
    bool from_env = false;
    *out = dtype != BLOB_FLOAT32       ? BLOB_MATH_FP32
           : mode != BLOB_MATH_DEFAULT ? mode
                                       : process_mode(&from_env);
    return from_env ? blob__env_raise(&env_mode_fault, func) : BLOB_OK;
}

static pthread_once_t tuning_once = PTHREAD_ONCE_INIT;
static _Atomic bool tuning;     /* the environment's until set; read once before any set */
static _Atomic bool tuning_set; /* by the program: the environment's no longer matters */
static blob__env_fault tuning_fault;

static void read_tuning_env(void)
{
    bool on = false;
    blob__env_keep(&tuning_fault, blob__env_bool(NULL, "BLOB_GEMM_TUNING", &on));
    atomic_store(&tuning, on);
}

void blob_gemm_tuning_set(bool on)
{
    pthread_once(&tuning_once, read_tuning_env);
    atomic_store(&tuning, on);
    atomic_store(&tuning_set, true);
}

bool blob_gemm_tuning_get(void)
{
    pthread_once(&tuning_once, read_tuning_env);
    return atomic_load(&tuning);
}

blob_status blob__gemm_tuning(const char *func, bool *on)
{
    *on = blob_gemm_tuning_get();
    return atomic_load(&tuning_set) ? BLOB_OK : blob__env_raise(&tuning_fault, func);
}
