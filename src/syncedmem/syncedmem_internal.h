/* Internal: what the layers above (blob, interop) need to know about a block beyond the
 * public API. */
#ifndef BLOB_SYNCEDMEM_INTERNAL_H
#define BLOB_SYNCEDMEM_INTERNAL_H

#include "blob/syncedmem.h"

/* Whether more than one reference holds the block. */
bool blob__syncedmem_shared(const blob_syncedmem *mem);

/* The device (gpu) or host side for writing, for a caller that knows it holds the
 * newest bytes or will overwrite all of it: allocated if missing (not zeroed), ordered
 * on the current stream, nothing copied, head unchanged. After a successful write,
 * blob__syncedmem_claim makes it the newest side; after a failed one nothing changed.
 * A failure is recorded under func, the public call. */
blob_status blob__syncedmem_write_side(const char *func, blob_syncedmem *mem, bool gpu, void **out);

/* The device (gpu) or host side's memory as it stands, NULL where there is none: no
 * access, nothing allocated, copied or ordered (for a caller comparing addresses). */
const void *blob__syncedmem_side(const blob_syncedmem *mem, bool gpu);

/* Make the device (gpu) or host side, just written, the head: the other side is stale.
 * Every write that claims the head, inside syncedmem as in its callers, ends here. */
void blob__syncedmem_claim(blob_syncedmem *mem, bool gpu);

#endif
