/* Every public function with NULL in each pointer argument, the others valid: the calls
 * are generated from the headers by test/null_args.py (see there for what is checked
 * and how to cover a new type). One test makes every call, each with a fixture of its
 * own (one CUDA start for all); it lists every call that failed, and a crash names
 * the call. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/core.h"
#include "null_args.h"
#include "testutil.h"

null_fixture fx;

void null_release(void *ctx) { (void)ctx; }
void null_deleter(DLManagedTensor *t) { (void)t; }
static const null_call *current;
static char dir[32];

/* A valid .npy file, written without the library: the runner's process makes no device
 * call before the tests fork. */
static void dir_setup(void)
{
    strcpy(dir, "/tmp/blob_null_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(fx.path, sizeof fx.path, "%s/a.npy", dir);
    char header[128]; /* the magic, version 1.0, the dict's length 118, the dict */
    int n = snprintf(header, sizeof header, "\x93NUMPY%c%c%c%c%s", 1, 0, 118, 0,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    memset(header + n, ' ', sizeof header - 1 - (size_t)n);
    header[sizeof header - 1] = '\n';
    float data[6] = {1, 2, 3, 4, 5, 6};
    FILE *f = fopen(fx.path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(header, 1, sizeof header, f), sizeof header);
    ck_assert_uint_eq(fwrite(data, sizeof data, 1, f), 1);
    ck_assert_int_eq(fclose(f), 0);
}

static void dir_teardown(void)
{
    unlink(fx.path);
    ck_assert_int_eq(rmdir(dir), 0);
}

static struct sigaction previous[32];

/* Name the call that crashed, then let the signal take its course (a sanitizer's
 * handler, when there is one, reports it as well). */
static void on_crash(int sig)
{
    char msg[160];
    int n = snprintf(msg, sizeof msg, "null argument test: %s(%s = NULL) crashed\n",
                     current ? current->function : "?", current ? current->param : "?");
    if (n > 0 && write(2, msg, (size_t)n) < 0)
        _exit(1);
    sigaction(sig, &previous[sig], NULL);
}

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

static void fixture_setup(void)
{
    fx.shape[0] = 2;
    fx.shape[1] = 3;
    ck_ok(blob_create(&fx.b, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 2, fx.shape));
    ck_ok(blob_create(&fx.b2, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 2, fx.shape));
    ck_ok(blob_syncedmem_create(&fx.mem, 64, BLOB_DEVICE_DEFAULT));
    void *p;
    ck_ok(blob_mutable_cpu_data(fx.b, &p));
    ck_ok(blob_mutable_cpu_data(fx.b2, &p));
    ck_ok(blob_syncedmem_mutable_cpu_data(fx.mem, &p));
    ck_ok(blob_place_alloc(blob_place_host(), 64, NULL, &fx.place_block));
    fx.tensor_shape[0] = 2;
    fx.tensor_shape[1] = 3;
    fx.tensor = (DLManagedTensor){.dl_tensor = {.data = fx.host,
                                                .device = {kDLCPU, 0},
                                                .ndim = 2,
                                                .dtype = {kDLFloat, 32, 1},
                                                .shape = fx.tensor_shape},
                                  .deleter = null_deleter};
    fx.geom = (blob_conv_geometry){.channels = 1,
                                   .height = 4,
                                   .width = 4,
                                   .kernel_h = 2,
                                   .kernel_w = 2,
                                   .stride_h = 1,
                                   .stride_w = 1,
                                   .dilation_h = 1,
                                   .dilation_w = 1};
    fx.comm_opts = (blob_comm_options){0};
    ck_ok(blob_comm_create(&fx.comm, &fx.comm_opts));
    fx.blobs[0] = fx.b;
    fx.blobs[1] = fx.b2;
    ck_ok(blob_comm_list_create(&fx.list, fx.comm, fx.blobs, 2));
    fx.devices[0] = 0;
    fx.devices[1] = 1;
    fx.optim = blob_optim_default(BLOB_OPTIM_ADAM, 0.1);
    ck_ok(blob_optim_state_create(&fx.optim_state));
    ck_ok(blob_grad_scaler_create(&fx.grad_scaler, 1024));
    fx.arrays[0] = fx.host;
    fx.arrays[1] = fx.host + 32;
    fx.dev = fx.host;
    if (test_real_gpu) { /* zeros: a call that runs reads initialized memory */
        const size_t bytes = sizeof fx.host;
        ck_ok(blob_place_alloc(blob_place_device(0), bytes, NULL, &fx.dev));
        ck_ok(blob_gpu_set(BLOB_FLOAT32, (int64_t)(bytes / sizeof(float)), 0.0, fx.dev));
    }
}

static void fixture_teardown(void)
{
    blob_comm_list_free(fx.out_list);
    blob_comm_list_free(fx.list);
    blob_comm_free(fx.out_comm);
    blob_comm_free(fx.comm);
    fx.out_list = NULL;
    fx.out_comm = NULL;
    blob_optim_state_free(fx.optim_state);
    blob_optim_state_free(fx.out_optim_state);
    fx.out_optim_state = NULL;
    blob_grad_scaler_free(fx.grad_scaler);
    blob_grad_scaler_free(fx.out_grad_scaler);
    fx.out_grad_scaler = NULL;
    blob_free(fx.b);
    blob_free(fx.b2);
    blob_syncedmem_free(fx.mem);
    blob_place_free(blob_place_host(), fx.place_block);
    blob_dlpack_delete(fx.out_tensor);
    blob_free(fx.out_blob);
    fx.out_tensor = NULL;
    fx.out_blob = NULL;
    if (fx.dev != fx.host)
        blob_place_free(blob_place_device(0), fx.dev);
    current = NULL;
}

#define SENTINEL "null_args: no detail yet"

static char failures[4096]; /* one line per failed call, as many as fit */
static int num_failures;

static void failed(const char *what, const char *detail)
{
    size_t used = strlen(failures);
    snprintf(failures + used, sizeof failures - used, "\n  %s(%s = NULL) %s%s", current->function,
             current->param, what, detail);
    num_failures++;
}

static void check_detail(void)
{
    if (strcmp(blob_last_error(), SENTINEL) == 0)
        failed("recorded no detail", "");
}

void null_check_status(blob_status st)
{
    if (current->may_be_null)
        return;
    if (st == BLOB_EINVAL || (st == BLOB_ENODEV && !test_real_gpu)) {
        check_detail();
    } else {
        char detail[320];
        snprintf(detail, sizeof detail, "%s (%s), expected EINVAL", blob_status_name(st),
                 blob_last_error());
        failed("returned ", detail);
    }
}

void null_check_value(bool neutral)
{
    if (current->may_be_null)
        return;
    if (neutral)
        check_detail();
    else
        failed("did not return its neutral value", "");
}

START_TEST(test_null_arguments)
{
    struct sigaction sa = {.sa_handler = on_crash};
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
        sigaction(crash_signals[i], &sa, &previous[crash_signals[i]]);
    num_failures = 0;
    failures[0] = '\0';
    for (int i = 0; i < null_num_calls; i++) {
        fixture_setup();
        current = &null_calls[i];
        blob__fail(BLOB_OK, "null_args", "no detail yet");
        current->call();
        fixture_teardown();
    }
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
        sigaction(crash_signals[i], &previous[crash_signals[i]], NULL);
    ck_assert_msg(num_failures == 0, "%d of %d calls failed:%s", num_failures, null_num_calls,
                  failures);
}
END_TEST

void null_args_suite(Suite *s)
{
    TCase *tc = suite_case(s, "calls", NULL, 120, NULL, NULL);
    tcase_add_unchecked_fixture(tc, dir_setup, dir_teardown);
    add_tests(tc, test_null_arguments);
}
