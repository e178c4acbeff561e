#include <stdlib.h>
#include <string.h>

#include "core.h"

const blob__backend *blob__be;
unsigned blob__backend_generation;

/* The default table is chosen before main() so that blob__be is never NULL. */
__attribute__((constructor)) static void backend_init(void)
{
    if (!blob__be)
        blob__be = blob__backend_default();
}

void blob__backend_install(const blob__backend *be)
{
    blob__be = be ? be : blob__backend_default();
    blob__backend_generation++;
}

void *blob__obj_alloc(size_t bytes)
{
    void *p = NULL;
    if (blob__be->host_alloc(bytes, &p) != BLOB_OK)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

void blob__obj_free(void *p) { blob__be->host_free(p); }

blob_status blob__system_host_alloc(size_t bytes, void **out)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        return BLOB_FAIL(BLOB_ENOMEM, "malloc(%zu) failed", bytes);
    *out = p;
    return BLOB_OK;
}

void blob__system_host_free(void *p) { free(p); }
