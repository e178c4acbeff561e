/* The environment's settings (src/core/env.c) and the strict numbers under them
 * (src/core/number.c): what is accepted, what is refused and how the refusal reads, and
 * the settings of the library read through them, each in a fresh child where the library
 * reads it once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/env.h"
#include "../src/core/number.h"
#include "blob/alloc.h"
#include "blob/math.h"
#include "testutil.h"

START_TEST(test_parse_int)
{
    static const struct {
        const char *s;
        int64_t v;
    } good[] = {{"0", 0},
                {"7", 7},
                {"007", 7},
                {"-3", -3},
                {"-0", 0},
                {"9223372036854775807", INT64_MAX},
                {"-9223372036854775808", INT64_MIN}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t v = 42;
        ck_assert_msg(blob__parse_int(good[i].s, INT64_MIN, INT64_MAX, &v), "%s", good[i].s);
        ck_assert_int_eq(v, good[i].v);
    }
    static const char *const bad[] = {"",
                                      "-",
                                      " 0",
                                      "0 ",
                                      "+1",
                                      "0x10",
                                      "1e3",
                                      "1.0",
                                      "--1",
                                      "9223372036854775808",
                                      "-9223372036854775809",
                                      "1\n",
                                      "٣"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 42;
        ck_assert_msg(!blob__parse_int(bad[i], INT64_MIN, INT64_MAX, &v), "\"%s\"", bad[i]);
        ck_assert_int_eq(v, 42);
    }
    int64_t v = 42;
    ck_assert(!blob__parse_int("5", 6, 9, &v) && !blob__parse_int("10", 6, 9, &v) && v == 42);
    ck_assert(blob__parse_int("6", 6, 9, &v) && v == 6);
}
END_TEST

START_TEST(test_parse_decimal)
{
    static const struct {
        const char *s;
        double v;
    } good[] = {{"0", 0},
                {"5", 5},
                {"2.5", 2.5},
                {"0.1", 0.1},
                {"2.", 2},
                {"-1.25", -1.25},
                {"123456789012345", 123456789012345.0},
                {"0.0000000000000000000001", 1e-22},
                {"300.000", 300}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        double v = 42;
        ck_assert_msg(blob__parse_decimal(good[i].s, -1e300, 1e300, &v), "%s", good[i].s);
        ck_assert_msg(v == good[i].v, "%s read as %.17g", good[i].s, v);
    }
    static const char *const bad[] = {"",
                                      ".",
                                      ".5",
                                      "-",
                                      " 5",
                                      "5 ",
                                      "+5",
                                      "0x10",
                                      "1e3",
                                      "1e-300",
                                      "inf",
                                      "nan",
                                      "1..2",
                                      "1.2.3",
                                      "1,5",
                                      "1234567890123456",
                                      "0.00000000000000000000001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double v = 42;
        ck_assert_msg(!blob__parse_decimal(bad[i], -1e300, 1e300, &v), "\"%s\"", bad[i]);
        ck_assert(v == 42);
    }
    double v = 42;
    ck_assert(!blob__parse_decimal("0.0009", 1e-3, 1e6, &v) &&
              !blob__parse_decimal("1000001", 1e-3, 1e6, &v) && v == 42);
    ck_assert(blob__parse_decimal("0.001", 1e-3, 1e6, &v) && v == 1e-3);
}
END_TEST

#define VAR "BLOB_TEST_SETTING"

START_TEST(test_env_readers)
{
    unsetenv(VAR);
    int64_t i = 5;
    double d = 2.5;
    bool b = true;
    int c = 1;
    const char *t = "default";
    static const char *const choices[] = {"fp32", "tf32", "bf16", NULL};
    /* unset: every default stays */
    ck_ok(blob__env_int("f", VAR, 0, 9, &i));
    ck_ok(blob__env_seconds("f", VAR, 1, 9, &d));
    ck_ok(blob__env_bool("f", VAR, &b));
    ck_ok(blob__env_choice("f", VAR, choices, &c));
    ck_ok(blob__env_text("f", VAR, 8, &t));
    ck_assert(i == 5 && d == 2.5 && b && c == 1 && !strcmp(t, "default"));
    ck_assert_ptr_null(blob__env_raw(VAR));

    setenv(VAR, "7", 1);
    ck_ok(blob__env_int("f", VAR, 0, 9, &i));
    ck_ok(blob__env_seconds("f", VAR, 1, 9, &d));
    ck_assert(i == 7 && d == 7);
    setenv(VAR, "0", 1);
    ck_ok(blob__env_bool("f", VAR, &b));
    ck_assert(!b);
    setenv(VAR, "BF16", 1);
    ck_ok(blob__env_choice("f", VAR, choices, &c));
    ck_assert_int_eq(c, 2);
    ck_ok(blob__env_text("f", VAR, 8, &t));
    ck_assert_str_eq(t, "BF16");
    ck_assert_str_eq(blob__env_raw(VAR), "BF16");

    /* set but malformed: EINVAL naming the call, the variable and its value; nothing
     * written */
    i = 5, d = 2.5, b = true, c = 1, t = "default";
    setenv(VAR, " 5", 1);
    ck_status(blob__env_int("blob_call", VAR, 0, 9, &i), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_call: " VAR "=\" 5\" is not an integer in [0, 9]");
    setenv(VAR, "1e-300", 1);
    ck_status(blob__env_seconds("blob_call", VAR, 0.001, 1e6, &d), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(),
                     "blob_call: " VAR "=\"1e-300\" is not a number of seconds in [0.001, 1e+06]");
    setenv(VAR, "yes", 1);
    ck_status(blob__env_bool("blob_call", VAR, &b), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_call: " VAR "=\"yes\" is not 0 or 1");
    setenv(VAR, "fp16", 1);
    ck_status(blob__env_choice("blob_call", VAR, choices, &c), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(),
                     "blob_call: " VAR "=\"fp16\" is not one of fp32, tf32, bf16");
    setenv(VAR, "", 1);
    ck_status(blob__env_int("blob_call", VAR, 0, 9, &i), BLOB_EINVAL);
    ck_status(blob__env_text("blob_call", VAR, 8, &t), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_call: " VAR " is empty");
    setenv(VAR, "123456789", 1);
    ck_status(blob__env_text("blob_call", VAR, 8, &t), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_call: " VAR " is longer than 8 characters");
    ck_assert(i == 5 && d == 2.5 && b && c == 1 && !strcmp(t, "default"));
    /* the value as shown: control bytes as '?', a long one cut */
    setenv(VAR, "a\nb\x01", 1);
    ck_status(blob__env_int(NULL, VAR, 0, 9, &i), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), VAR "=\"a?b?\" is not an integer in [0, 9]");
    char longer[100];
    memset(longer, '9', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    setenv(VAR, longer, 1);
    ck_status(blob__env_int(NULL, VAR, 0, 9, &i), BLOB_EINVAL);
    char shown[64];
    snprintf(shown, sizeof shown, "=\"%.40s...\"", longer);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), shown));

    /* a failure kept for later calls, named by each */
    blob__env_fault f = {0};
    ck_ok(blob__env_raise(&f, "blob_later"));
    setenv(VAR, "2", 1);
    blob__env_keep(&f, blob__env_bool(NULL, VAR, &b));
    ck_status(blob__env_raise(&f, "blob_later"), BLOB_EINVAL);
    ck_assert_str_eq(blob_last_error(), "blob_later: " VAR "=\"2\" is not 0 or 1");
    unsetenv(VAR);
}
END_TEST

/* Run fn in a child with name=value set: its exit status (0: fn returned true). */
static int in_child(const char *name, const char *value, bool (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv(name, value, 1);
        _exit(fn() ? 0 : 1);
    }
    int status = -1;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* A malformed BLOB_MATH_MODE fails the float32 GEMMs that would run in it, naming the
 * call and the setting; the getter gives fp32; a mode set by the program, an explicit
 * mode, and float64 do not read it. */
static bool bad_math_mode(void)
{
    static const float a[1];
    float c[1];
    bool fused;
    bool ok = blob_math_mode_get() == BLOB_MATH_FP32;
    ok &= blob_gpu_gemm(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 1, 1, a, a, 0, c) ==
              BLOB_EINVAL &&
          !strcmp(blob_last_error(),
                  "blob_gpu_gemm: BLOB_MATH_MODE=\"tf33\" is not one of fp32, tf32, bf16");
    ok &= blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 1,
                                       BLOB_EPILOGUE_NONE, false, BLOB_MATH_DEFAULT,
                                       &fused) == BLOB_EINVAL &&
          !strncmp(blob_last_error(), "blob_gpu_gemm_epilogue_fused: BLOB_MATH_MODE=", 45);
    /* past the setting: no GPU here */
    ok &= blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 1,
                                       BLOB_EPILOGUE_NONE, false, BLOB_MATH_TF32,
                                       &fused) != BLOB_EINVAL;
    ok &= blob_gpu_gemm_epilogue_fused(BLOB_FLOAT64, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 1,
                                       BLOB_EPILOGUE_NONE, false, BLOB_MATH_DEFAULT,
                                       &fused) != BLOB_EINVAL;
    ok &= blob_math_mode_set(BLOB_MATH_FP32) == BLOB_OK;
    ok &= blob_gpu_gemm_epilogue_fused(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 1,
                                       BLOB_EPILOGUE_NONE, false, BLOB_MATH_DEFAULT,
                                       &fused) != BLOB_EINVAL;
    return ok;
}

/* A malformed BLOB_GEMM_TUNING fails the GEMMs with epilogues (which tune) until the
 * program chooses. */
static bool bad_tuning(void)
{
    static const float a[16];
    float c[16];
    bool ok = !blob_gemm_tuning_get();
    ok &=
        blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 1, a, a, c,
                               BLOB_EPILOGUE_NONE, NULL, NULL, BLOB_MATH_FP32) == BLOB_EINVAL &&
        !strcmp(blob_last_error(), "blob_gpu_gemm_epilogue: BLOB_GEMM_TUNING=\"on\" is not 0 or 1");
    blob_gemm_tuning_set(false);
    ok &= blob_gpu_gemm_epilogue(BLOB_FLOAT32, BLOB_NO_TRANS, BLOB_NO_TRANS, 1, 1, 1, a, a, c,
                                 BLOB_EPILOGUE_NONE, NULL, NULL, BLOB_MATH_FP32) != BLOB_EINVAL;
    return ok;
}

/* A malformed BLOB_ALLOC_CACHE fails allocations, naming the setting, until the program
 * chooses; the getter gives the default (on). */
static bool bad_alloc_cache(void)
{
    void *p = NULL;
    bool ok = blob_alloc_caching();
    ok &= blob_place_alloc(blob_place_host(), 64, NULL, &p) == BLOB_EINVAL && !p &&
          !strcmp(blob_last_error(), "blob_place_alloc: BLOB_ALLOC_CACHE=\"false\" is not 0 or 1");
    blob *b = NULL;
    int64_t n = 4;
    ok &= blob_create(&b, BLOB_FLOAT32, BLOB_HOST_ONLY, 1, &n) == BLOB_OK; /* lazy */
    const void *x;
    ok &= blob_cpu_data(b, &x) == BLOB_EINVAL &&
          strstr(blob_last_error(), "BLOB_ALLOC_CACHE=\"false\"");
    ok &= blob_alloc_set_caching(true) == BLOB_OK && blob_cpu_data(b, &x) == BLOB_OK;
    blob_free(b);
    return ok;
}

static bool good_alloc_cache(void) { return !blob_alloc_caching(); }

START_TEST(test_library_settings)
{
    ck_assert_int_eq(in_child("BLOB_MATH_MODE", "tf33", bad_math_mode), 0);
    ck_assert_int_eq(in_child("BLOB_GEMM_TUNING", "on", bad_tuning), 0);
    ck_assert_int_eq(in_child("BLOB_ALLOC_CACHE", "false", bad_alloc_cache), 0);
    ck_assert_int_eq(in_child("BLOB_ALLOC_CACHE", "0", good_alloc_cache), 0);
}
END_TEST

void env_suite(Suite *s)
{
    add_tests(suite_case(s, "readers", NULL, 0, NULL, NULL), test_parse_int, test_parse_decimal,
              test_env_readers);
    /* the GEMMs past the settings would hand host arrays to a real GPU */
    add_tests(suite_case(s, "settings", "nogpu", 0, NULL, NULL), test_library_settings);
}
