/*
 * blob/blob.h - the whole public API of libblob.
 *
 *   #include <blob/blob.h>
 *   cc app.c $(pkg-config --cflags --libs blob)
 *
 * Threads: process-wide state (the allocators, the settings, the stream and event pools,
 * the host threads) may be used from any thread at once; the current device, the current
 * stream and the failure detail are per thread; an object (a block, a blob, an optimizer
 * state, a communicator and its lists, an event) is used by one thread at a time
 * (README.md, "Threads").
 */
#ifndef BLOB_BLOB_H
#define BLOB_BLOB_H

#include "blob/status.h"
#include "blob/types.h"
#include "blob/device.h"
#include "blob/alloc.h"
#include "blob/syncedmem.h"
#include "blob/tensor.h"
#include "blob/math.h"
#include "blob/optim.h"
#include "blob/comm.h"

#define BLOB_VERSION_MAJOR 0
#define BLOB_VERSION_MINOR 1
#define BLOB_VERSION_PATCH 0

#endif
