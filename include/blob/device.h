/*
 * blob/device.h - GPUs, streams and the calling thread's current stream.
 *
 *   if (blob_device_count() > 0) {
 *       void *s;
 *       blob_stream_create(&s);
 *       blob_stream_set(s);          // device math of this thread now runs on s
 *       ...
 *       blob_stream_synchronize(s);
 *       blob_stream_set(NULL);
 *       blob_stream_destroy(s);
 *   }
 *
 * Streams are CUDA streams passed as void * (NULL is the legacy default stream), so no
 * CUDA header is needed. In a build without CUDA, or on a machine without a GPU or
 * driver, blob_device_count() is 0 and every device call returns BLOB_ENODEV.
 */
#ifndef BLOB_DEVICE_H
#define BLOB_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "blob/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable GPUs; 0 when the build has no CUDA or no driver/GPU is found. */
BLOB_API int blob_device_count(void);

/* Whether the library was built with CUDA (true even when no GPU is present). */
BLOB_API bool blob_built_with_cuda(void);

/* The calling thread's current device, read from the driver. BLOB_ENODEV without GPUs.
 *
 * The library keeps a per-thread record of the current device, written by
 * blob_device_set and blob_device_get, and checks every object's device against it
 * without asking the driver. A thread that switches devices with cudaSetDevice directly
 * must call blob_device_set or blob_device_get before touching library objects. */
BLOB_API blob_status blob_device_get(int *device);

/* Make device current for the calling thread. BLOB_ERANGE if there is no such device. */
BLOB_API blob_status blob_device_set(int device);

/* Wait until all work on the current device is complete. */
BLOB_API blob_status blob_device_synchronize(void);

/* Create a non-blocking stream on the current device; *stream is NULL on failure. */
BLOB_API blob_status blob_stream_create(void **stream);

/* The same with a scheduling priority: 0 is the default (blob_stream_create's); each
 * level above it is more urgent, up to the device's most urgent (the levels beyond are
 * that one). The GPU starts blocks of more urgent streams' kernels first, which shortens
 * a chain of small kernels that runs beside other work, such as a training step's next
 * layer beside the weight gradients on a second stream. Kernels captured from a stream
 * keep its priority in the graph (blob_graph_end). Errors: BLOB_EINVAL (NULL, a
 * negative priority), BLOB_ENODEV, BLOB_ECUDA. */
BLOB_API blob_status blob_stream_create_with_priority(void **stream, int priority);

/* Give back a stream made by blob_stream_create(_with_priority). Blocks used on it may
 * outlive it: the library keeps the CUDA stream alive and hands it out again later (for
 * the same priority). NULL is a no-op; BLOB_EINVAL for a stream not made by those (or
 * given back already).
 * A stream the caller creates itself and passes to blob_stream_set must outlive every
 * block used on it. */
BLOB_API blob_status blob_stream_destroy(void *stream);

/* Wait until all work queued on stream is complete. */
BLOB_API blob_status blob_stream_synchronize(void *stream);

/* Make the work queued on stream from now on wait, on the device, for all the work queued
 * on waited_stream so far (the host does not wait): an event recorded on waited_stream,
 * which the library takes from a pool and may record again at once. Both are streams of
 * the current device; NULL is the legacy default stream; a stream waiting for itself is
 * a no-op. This is how work forks onto a second stream and joins back:
 *
 *   blob_stream_wait_stream(side, main);  // side starts after main's work so far
 *   ... queue work on side (blob_stream_set(side)) and on main ...
 *   blob_stream_wait_stream(main, side);  // main goes on after side's work
 *
 * While waited_stream is being captured (blob_graph_begin), stream joins the capture and
 * its work becomes a parallel branch of the graph; it must be joined back into the
 * capturing stream, as above, before blob_graph_end. Errors: BLOB_ENODEV, BLOB_ENOMEM,
 * BLOB_ECUDA (the event could not be made, recorded or waited for). */
BLOB_API blob_status blob_stream_wait_stream(void *stream, void *waited_stream);

/* An event: a mark in the work of a stream that other streams and the host can wait for,
 * also from outside a graph that records it, e.g. to read a result that a replayed
 * graph computes early while the graph goes on:
 *
 *   blob_graph_begin(s); ... blob_event_record(ready, s); ... blob_graph_end(s, &g);
 *   blob_graph_launch(g, s);
 *   blob_stream_wait_event(copy, ready);  // copy's later work waits for that point only
 *
 * An event belongs to the GPU current when it is made, which must be current to record
 * or wait for it. Errors of all four: BLOB_EINVAL (NULL event), BLOB_ENODEV,
 * BLOB_EDEVICE (another GPU is current), BLOB_ENOMEM, BLOB_ECUDA. */
typedef struct blob_event blob_event;
BLOB_API blob_status blob_event_create(blob_event **out);
/* NULL is a no-op. Waits already queued are not affected. */
BLOB_API void blob_event_free(blob_event *event);
/* Mark the work queued on stream so far. While stream is being captured
 * (blob_graph_begin) the mark becomes part of the graph: each launch marks the event
 * when the graph's work before the mark has completed, and the waits queued after the
 * launch wait for that. Inside a capture, join streams with blob_stream_wait_stream, not
 * with an event of these. */
BLOB_API blob_status blob_event_record(blob_event *event, void *stream);
/* Make the work queued on stream from now on wait, on the device, for the event's
 * latest mark (none yet: nothing to wait for). */
BLOB_API blob_status blob_stream_wait_event(void *stream, blob_event *event);
/* Wait on the host for the event's latest mark. */
BLOB_API blob_status blob_event_synchronize(blob_event *event);

/* Set the stream on which this thread's device math (blob/math.h) and blob updates run.
 * NULL selects the legacy default stream. The stream is not owned. */
BLOB_API void blob_stream_set(void *stream);

/* The calling thread's current stream (NULL: the legacy default stream). */
BLOB_API void *blob_stream_get(void);

/* Release the calling thread's library resources (its cuBLAS handles). Threads do this
 * by themselves when they exit; the main thread may call it before returning from main
 * so that leak checkers find nothing outstanding. Later device math recreates them. */
BLOB_API void blob_thread_release(void);

/* A recorded sequence of device work that can be replayed with one launch (a CUDA
 * graph): capture a training step once, then launch it every step.
 *
 *   blob_graph_begin(s);   ... queue device math on s (blob_stream_set(s)) ...
 *   blob_graph_end(s, &g);
 *   for (...) blob_graph_launch(g, s);
 *
 * While capturing, only queue work on the stream: calls that synchronise (dot, asum,
 * host/device transfers) or allocate device memory make blob_graph_end fail; touch
 * every blob once before capturing so its memory exists (blob_graph_begin itself makes
 * the thread's cuBLAS handle ready). The default stream cannot be captured
 * (BLOB_EINVAL). */
typedef struct blob_graph blob_graph;
BLOB_API blob_status blob_graph_begin(void *stream);
/* End the capture on stream and make it launchable; *out is NULL on failure. */
BLOB_API blob_status blob_graph_end(void *stream, blob_graph **out);
BLOB_API blob_status blob_graph_launch(blob_graph *graph, void *stream);
/* NULL is a no-op. */
BLOB_API void blob_graph_free(blob_graph *graph);
/* Count what a graph replays: *kernels its kernel launches, *total all its operations
 * (kernels, copies, memsets, event records and waits; nested graphs by their contents).
 * The outputs are untouched on failure. Errors: BLOB_EINVAL (NULL), BLOB_ENODEV,
 * BLOB_ENOMEM, BLOB_ECUDA. */
BLOB_API blob_status blob_graph_count_nodes(const blob_graph *graph, int64_t *kernels,
                                            int64_t *total);

#ifdef __cplusplus
}
#endif
#endif
