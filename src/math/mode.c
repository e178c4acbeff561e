/* The process-wide math mode of float32 GPU products and GEMM tuning (blob/math.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "blob/math.h"
#include "../core/core.h"
#include "math_impl.h"

static blob_math_mode env_mode = BLOB_MATH_FP32;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static _Atomic int current_mode = BLOB_MATH_DEFAULT; /* DEFAULT: the environment's */

static void read_env(void)
{
    const char *v = getenv("BLOB_MATH_MODE");
    if (!v)
        return;
    if (!strcasecmp(v, "tf32"))
        env_mode = BLOB_MATH_TF32;
    else if (!strcasecmp(v, "bf16"))
        env_mode = BLOB_MATH_BF16;
}

blob_status blob_set_math_mode(blob_math_mode mode)
{
    if (mode < BLOB_MATH_DEFAULT || mode > BLOB_MATH_BF16)
        return BLOB_FAIL(BLOB_EINVAL, "bad math mode %d", (int)mode);
    atomic_store(&current_mode, (int)mode);
    return BLOB_OK;
}

blob_math_mode blob_get_math_mode(void)
{
    int m = atomic_load(&current_mode);
    if (m != BLOB_MATH_DEFAULT)
        return (blob_math_mode)m;
    pthread_once(&env_once, read_env);
    return env_mode;
}

const char *blob_math_mode_name(blob_math_mode mode)
{
    switch (mode) {
    case BLOB_MATH_DEFAULT:
        return "default";
    case BLOB_MATH_FP32:
        return "fp32";
    case BLOB_MATH_TF32:
        return "tf32";
    case BLOB_MATH_BF16:
        return "bf16";
    }
    return "unknown";
}

blob_status blob__check_math_mode(const char *fn, blob_math_mode mode)
{
    if (mode < BLOB_MATH_DEFAULT || mode > BLOB_MATH_BF16)
        return blob__fail(BLOB_EINVAL, fn, "bad math mode %d", (int)mode);
    return BLOB_OK;
}

blob_math_mode blob__math_mode_for(blob_dtype dtype, blob_math_mode mode)
{
    if (dtype != BLOB_FLOAT32)
        return BLOB_MATH_FP32;
    return mode == BLOB_MATH_DEFAULT ? blob_get_math_mode() : mode;
}

static pthread_once_t tuning_once = PTHREAD_ONCE_INIT;
static _Atomic bool tuning; /* the environment's until set; read once before any set */

static void read_tuning_env(void)
{
    const char *v = getenv("BLOB_GEMM_TUNING");
    atomic_store(&tuning, v && !strcmp(v, "1"));
}

void blob_set_gemm_tuning(bool on)
{
    pthread_once(&tuning_once, read_tuning_env);
    atomic_store(&tuning, on);
}

bool blob_get_gemm_tuning(void)
{
    pthread_once(&tuning_once, read_tuning_env);
    return atomic_load(&tuning);
}
