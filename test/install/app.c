/* A consumer of the installed library, built the way a user builds:
 *   cc app.c $(pkg-config --cflags --libs blob) */
#include <blob/blob.h>
#include <stdio.h>

int main(void)
{
    int64_t shape[] = {2, 3};
    blob *b;
    blob_status st = blob_create(&b, BLOB_FLOAT32, BLOB_DEVICE_DEFAULT, 2, shape);
    if (st != BLOB_OK) {
        fprintf(stderr, "blob_create: %s\n", blob_last_error());
        return 1;
    }
    float *data, *diff;
    blob_mutable_cpu_data(b, (void **)&data);
    blob_mutable_cpu_diff(b, (void **)&diff);
    for (int i = 0; i < 6; i++) {
        data[i] = (float)i;
        diff[i] = 0.5f;
    }
    double asum = 0;
    if (blob_update(b) != BLOB_OK || blob_asum_data(b, &asum) != BLOB_OK) {
        fprintf(stderr, "update: %s\n", blob_last_error());
        return 1;
    }
    char s[BLOB_SHAPE_STRING_MAX];
    blob_shape_string(b, s, sizeof s);
    printf("consumer: shape %s, asum after update %.1f, %d GPU(s)\n", s, asum, blob_device_count());
    blob_free(b);
    return asum == 13.0 ? 0 : 1; /* |i - 0.5| summed over i = 0..5 */
}
