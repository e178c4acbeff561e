/* libFuzzer target: the environment's settings (src/core/env.c) and the strict numbers
 * under them, and blob_comm_options_from_env on the launchers' variables. The first byte
 * picks the reader, the rest (to a NUL) is the value. Invariants: a value is accepted or
 * refused with BLOB_EINVAL, never more; a refusal names the call and the variable and
 * leaves the output as it was; an accepted number is in its bounds and is the decimal
 * the value writes. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <blob/comm.h>

#include "../../src/core/env.h"
#include "fuzz.h"

#define VAR "BLOB_FUZZ_SETTING"

/* The refusal of a reader: EINVAL, the detail "fuzz: NAME...", the output untouched. */
static void check_refusal(blob_status st, const char *name, bool untouched)
{
    fuzz_check(st == BLOB_EINVAL, "status %d", (int)st);
    fuzz_check(untouched, "output written on refusal");
    char want[96];
    snprintf(want, sizeof want, "fuzz: %s", name);
    fuzz_check(!strncmp(blob_last_error(), want, strlen(want)), "detail \"%s\"", blob_last_error());
}

/* Whether v, with its leading zeros, is the decimal x. */
static bool writes(const char *v, int64_t x)
{
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, x);
    bool neg = *v == '-';
    const char *p = v + neg;
    while (*p == '0' && p[1])
        p++;
    return x == 0 ? !strcmp(p, "0") : neg == (x < 0) && !strcmp(p, text + (x < 0));
}

/* setenv(name, value, 1) without glibc's copy of each value set, which it never frees
 * (a long run would grow without bound): "name=value" in a buffer of the target's own,
 * one per slot, unset before the slot is used again. */
static void put(int slot, const char *name, const char *value)
{
    static char vars[3][600];
    snprintf(vars[slot], sizeof vars[slot], "%s=%s", name, value);
    putenv(vars[slot]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char value[512];
    size_t n = size - 1 < sizeof value - 1 ? size - 1 : sizeof value - 1;
    memcpy(value, data + 1, n);
    value[n] = '\0';
    put(0, VAR, value);
    blob_status st;
    switch (data[0] % 6) {
    case 0: {
        int64_t x = -77;
        st = blob__env_int("fuzz", VAR, -1000, INT64_MAX, &x);
        if (st == BLOB_OK)
            fuzz_check(x >= -1000 && writes(value, x), "\"%s\" read as %" PRId64, value, x);
        else
            check_refusal(st, VAR, x == -77);
        break;
    }
    case 1: {
        double x = -77;
        st = blob__env_seconds("fuzz", VAR, 1e-3, 1e6, &x);
        if (st == BLOB_OK)
            fuzz_check(x >= 1e-3 && x <= 1e6 && strtod(value, NULL) == x, "\"%s\" read as %.17g",
                       value, x);
        else
            check_refusal(st, VAR, x == -77);
        break;
    }
    case 2: {
        bool x = true;
        st = blob__env_bool("fuzz", VAR, &x);
        if (st == BLOB_OK)
            fuzz_check(!strcmp(value, x ? "1" : "0"), "\"%s\" read as %d", value, x);
        else
            check_refusal(st, VAR, x);
        break;
    }
    case 3: {
        static const char *const choices[] = {"fp32", "tf32", "bf16", NULL};
        int x = -1;
        st = blob__env_choice("fuzz", VAR, choices, &x);
        if (st == BLOB_OK)
            fuzz_check(x >= 0 && x < 3 && !strcasecmp(value, choices[x]), "\"%s\" read as %d",
                       value, x);
        else
            check_refusal(st, VAR, x == -1);
        break;
    }
    case 4: {
        const char *x = NULL;
        st = blob__env_text("fuzz", VAR, 64, &x);
        if (st == BLOB_OK)
            fuzz_check(x && !strcmp(x, value) && *x && strlen(x) <= 64, "\"%s\"", value);
        else
            check_refusal(st, VAR, !x);
        break;
    }
    default: { /* the value as each launcher's rank, over a world of 8 */
        static const char *const ranks[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                                            "PMI_RANK"};
        static const char *const worlds[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                                             "PMI_SIZE"};
        int k = (data[0] / 6) % 4;
        put(1, ranks[k], value);
        put(2, worlds[k], "8");
        blob_comm_options o = {.rank = -5};
        st = blob_comm_options_from_env(&o);
        unsetenv(ranks[k]);
        unsetenv(worlds[k]);
        if (st == BLOB_OK) {
            fuzz_check(o.rank >= 0 && o.rank < 8 && o.world_size == 8 && writes(value, o.rank),
                       "\"%s\" read as rank %d", value, o.rank);
        } else {
            fuzz_check(st == BLOB_EINVAL && o.rank == -5, "status %d", (int)st);
            fuzz_check(strstr(blob_last_error(), ranks[k]), "detail \"%s\" names no %s",
                       blob_last_error(), ranks[k]);
        }
    }
    }
    unsetenv(VAR);
    return 0;
}
