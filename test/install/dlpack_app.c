/* A consumer of the installed blob/dlpack.h: DLPack's own header comes from the system
 * include path, the rest from pkg-config, as for app.c. */
#include <blob/dlpack.h>
#include <stdio.h>

int main(void)
{
    int64_t shape[] = {4};
    blob *b, *c;
    DLManagedTensor *t;
    float *p;
    if (blob_create(&b, BLOB_FLOAT32, BLOB_HOST_ONLY, 1, shape) != BLOB_OK ||
        blob_mutable_cpu_data(b, (void **)&p) != BLOB_OK ||
        blob_to_dlpack(b, BLOB_PART_DATA, BLOB_DLPACK_HOST, 0, NULL, &t) != BLOB_OK) {
        fprintf(stderr, "export: %s\n", blob_last_error());
        return 1;
    }
    blob_free(b);
    if (blob_from_dlpack(&c, t, BLOB_HOST_ONLY) != BLOB_OK) {
        fprintf(stderr, "import: %s\n", blob_last_error());
        blob_dlpack_delete(t);
        return 1;
    }
    const void *q;
    int same = blob_cpu_data(c, &q) == BLOB_OK && q == (void *)p;
    blob_free(c);
    printf("dlpack consumer: %s memory after a round trip\n", same ? "the same" : "OTHER");
    return same ? 0 : 1;
}
