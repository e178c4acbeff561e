/* Internal: allocation at a place through the caching allocators (blob/alloc.h).
 *
 * Backend contract: every block, cached segment and idle event of a place is given back
 * through the backend table that allocated it, whichever table is installed by then.
 * While a place holds anything of one table it refuses requests under another
 * (BLOB_EBUSY). So before blob__backend_install switches tables: free every block, then
 * call blob_alloc_empty_cache for every place; a place with nothing in use holds no
 * driver memory and no event after that. */
#ifndef BLOB_ALLOC_INTERNAL_H
#define BLOB_ALLOC_INTERNAL_H

#include "blob/alloc.h"

/* Allocate `bytes` at `place`; bytes == 0 gives *out = NULL and BLOB_OK without a driver
 * call. A device place must be the current device. The block belongs to `stream` (NULL:
 * the default stream) and may be used on it at once; use on other streams must be
 * declared by blob__alloc_record_stream before it is freed. *out is NULL on failure.
 * Errors: BLOB_EINVAL, BLOB_ERANGE (no such GPU), BLOB_EDEVICE (not the current
 * device), BLOB_EBUSY (see the backend contract), BLOB_ENOMEM (host, pinned, or the
 * allocator's own records), BLOB_EDEVMEM (device), both only after the cache has been
 * released and the driver asked again; other driver errors are passed on. */
blob_status blob__alloc(blob_place place, size_t bytes, void *stream, void **out);

/* Free a block of blob__alloc at the same place, from any thread and with any device
 * current. The block is reused on its own stream at once and, if other streams were
 * recorded, only after the work queued on them before this call has completed. NULL and
 * pointers the place never handed out are ignored. */
void blob__free(blob_place place, void *p);

/* Declare that the block `p` is also used on `stream`. Pinned blocks: `stream` must
 * belong to the device current when the block is freed (or it is synchronised then).
 * BLOB_EINVAL if p is not a live block of the place; BLOB_ENOMEM. */
blob_status blob__alloc_record_stream(blob_place place, void *p, void *stream);

#endif
