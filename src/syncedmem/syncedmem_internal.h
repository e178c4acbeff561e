/* Internal: what the blob layer needs to know about a block beyond the public API. */
#ifndef BLOB_SYNCEDMEM_INTERNAL_H
#define BLOB_SYNCEDMEM_INTERNAL_H

#include "blob/syncedmem.h"

/* Whether more than one reference holds the block. */
bool blob__syncedmem_shared(const blob_syncedmem *mem);

#endif
