#include <string.h>

#include "../src/core/core.h"
#include "testutil.h"

START_TEST(test_names_and_messages)
{
    ck_assert_str_eq(blob_status_name(BLOB_OK), "OK");
    ck_assert_str_eq(blob_status_name(BLOB_EDEVICE), "EDEVICE");
    ck_assert_str_eq(blob_strerror(BLOB_ENOMEM), "out of host memory");
    ck_assert_str_eq(blob_status_name((blob_status)-999), "UNKNOWN");
    ck_assert_str_eq(blob_strerror((blob_status)5), "unknown status");
}
END_TEST

START_TEST(test_last_error_detail)
{
    blob *b;
    int64_t shape[] = {2, -1};
    ck_status(blob_create(&b, BLOB_FLOAT32, BLOB_HOST_ONLY, 2, shape), BLOB_EINVAL);
    ck_assert_ptr_nonnull(strstr(blob_last_error(), "dim 1 is negative"));
}
END_TEST

START_TEST(test_no_gpu_reports)
{
    if (blob_device_count() > 0)
        return;
    int d;
    void *s;
    ck_status(blob_device_get(&d), BLOB_ENODEV);
    ck_status(blob_device_set(0), BLOB_ENODEV);
    ck_status(blob_stream_create(&s), BLOB_ENODEV);
    ck_assert_ptr_null(s);
    ck_status(blob_device_synchronize(), BLOB_ENODEV);
    blob_syncedmem *m;
    ck_ok(blob_syncedmem_create(&m, 16, BLOB_DEVICE_DEFAULT));
    ck_assert_int_eq(blob_syncedmem_device(m), BLOB_HOST_ONLY);
    const void *p;
    ck_ok(blob_syncedmem_cpu_data(m, &p));
    ck_assert(!blob_syncedmem_host_pinned(m));
    ck_status(blob_syncedmem_gpu_data(m, &p), BLOB_ENODEV);
    blob_syncedmem_free(m);
    ck_status(blob_syncedmem_create(&m, 16, 0), BLOB_ERANGE);
}
END_TEST

Suite *status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_names_and_messages);
    tcase_add_test(tc, test_last_error_detail);
    tcase_add_test(tc, test_no_gpu_reports);
    suite_add_tcase(s, tc);
    return s;
}
