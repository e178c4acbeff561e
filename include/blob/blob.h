/*
 * blob/blob.h - the whole public API of libblob.
 *
 *   #include <blob/blob.h>
 *   cc app.c $(pkg-config --cflags --libs blob)
 */
#ifndef BLOB_BLOB_H
#define BLOB_BLOB_H

#include "blob/status.h"
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
