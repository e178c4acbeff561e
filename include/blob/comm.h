/*
 * blob/comm.h - data-parallel training: a communicator of N ranks, one GPU each, and
 * collectives on lists of blobs (NCCL underneath).
 *
 *   blob_comm_options o;
 *   blob_comm_options_from_env(&o);   // RANK, WORLD_SIZE, LOCAL_RANK, BLOB_COMM_ID_FILE
 *   blob_comm *c;
 *   blob_comm_create(&c, &o);         // meets the other ranks; o.device becomes current
 *   blob_comm_list *params;
 *   blob_comm_list_create(&params, c, blobs, n);   // every rank checks the others' list
 *   blob_comm_broadcast(params, 0);                // rank 0's initial weights
 *   for (step...) {
 *       forward(...);
 *       blob_comm_reduce_begin(params, BLOB_COMM_MEAN);
 *       for (int l = last; l >= 0; l--) {
 *           backward(l);                            // on the thread's current stream
 *           blob_comm_reduce_ready(params, first[l], num[l]);  // sums overlap backward
 *       }
 *       blob_comm_reduce_end(params);    // the stream waits (on the device) for the sums
 *       update(...);
 *   }
 *   double stats[2] = {loss_sum, correct};
 *   blob_comm_all_reduce_host(c, stats, 2, BLOB_COMM_SUM);
 *   blob_comm_list_free(params);
 *   blob_comm_free(c);
 *
 * Ranks. A communicator is one rank of world_size; every rank has its own GPU. Ranks
 * may be threads of one process (blob_comm_create_local, or blob_comm_create with a
 * shared id), processes of one host (started by blob-launch), or processes on several
 * hosts (see docs/distributed.md). A communicator and its lists are used by one thread
 * at a time, with the communicator's GPU current; ranks in one process need one thread
 * each, because every collective needs all ranks to take part at once.
 *
 * Same calls on every rank. Every rank must make the same collective calls (broadcast,
 * all-reduce, reduce begin/ready/end, list creation, all_reduce_host) in the same order
 * with the same arguments, as NCCL requires. What the library checks: at list creation,
 * that every rank registered the same blobs (count and dtype of each, in order): a
 * mismatch gives BLOB_ESHAPE on every rank, naming the first differing blob.
 *
 * Streams. Collectives run on a stream of the communicator. A call orders the
 * communication after the work queued so far on the calling thread's current stream
 * (blob_stream_set), and blob_comm_reduce_end, blob_comm_all_reduce and
 * blob_comm_broadcast make that stream wait for the results, all by events on the
 * device: the host never waits, except in blob_comm_list_create, blob_comm_synchronize,
 * blob_comm_all_reduce_host and blob_comm_free.
 *
 * Failures never hang and never abort the process. Every wait has a deadline (the
 * communicator's timeout); a watchdog thread of the communicator checks the queued
 * operations and NCCL's error state while the caller is busy elsewhere. On a timeout, a
 * failed peer or a failed call, the communicator is aborted (which unblocks every
 * stream waiting for it) and every later call returns the same error: BLOB_ETIMEDOUT or
 * BLOB_ECOMM, with a message naming the operation and its sequence number (the number
 * of collectives this rank had started). Free it; a new communicator may be created.
 *
 * What a failure leaves. The library never writes a blob's data except in broadcast
 * (non-root ranks). Diffs of an all-reduce that failed are undefined (they may hold
 * partial sums); blobs stay readable. A trainer keeps its weights at the values of the
 * last completed step by calling blob_comm_synchronize after blob_comm_reduce_end and
 * running its update only when that returns BLOB_OK. Without it the host never waits,
 * and an update queued before the failure was detected may have used partial sums.
 *
 * Builds. Without NCCL (or with CUDA=0) a 1-rank communicator still works: its
 * collectives are no-ops (a mean over one rank is the identity), so training code is the
 * same on one device, with blobs anywhere. More ranks give BLOB_ENOTSUP.
 */
#ifndef BLOB_COMM_H
#define BLOB_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/status.h"
#include "blob/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct blob_comm blob_comm;
typedef struct blob_comm_list blob_comm_list;

typedef enum { BLOB_COMM_SUM = 0, BLOB_COMM_MEAN = 1 } blob_comm_op;

/* The id the ranks meet by: NCCL's unique id. It names a meeting point served by the
 * process that made it (blob_comm_id_new), which must live until every rank joined. */
#define BLOB_COMM_ID_BYTES 128
typedef struct {
    unsigned char bytes[BLOB_COMM_ID_BYTES];
} blob_comm_id;

/* Characters of an id in hex, terminator included. */
#define BLOB_COMM_ID_HEX_SIZE    (2 * BLOB_COMM_ID_BYTES + 1)
/* Bytes of an encoded id (the rendezvous file's contents). */
#define BLOB_COMM_ID_RECORD_SIZE 152

/* Defaults of blob_comm_options' zero fields. */
#define BLOB_COMM_DEFAULT_TIMEOUT_S    300.0
#define BLOB_COMM_DEFAULT_BUCKET_BYTES ((size_t)64 << 20)

typedef struct {
    int rank;       /* this rank: 0 <= rank < world_size */
    int world_size; /* number of ranks (0 reads as 1) */
    int device;     /* this rank's GPU (unused by a 1-rank communicator) */
    /* How the ranks meet (world_size > 1), the first that is set: an id every rank was
     * given (has_id); a rendezvous file (id_file: rank 0 writes it, the others wait for
     * it); NCCL_COMM_ID=host:port in the environment (NCCL's own: rank 0 listens there). */
    bool has_id;
    blob_comm_id id;
    const char *id_file; /* not copied: must live until blob_comm_create returns; one
                            file serves one creation */
    /* Deadline of every wait, in seconds; 0: BLOB_COMM_TIMEOUT from the environment if
     * set, else BLOB_COMM_DEFAULT_TIMEOUT_S. It also bounds the wait for the other ranks
     * at creation, so it must exceed the longest gap between the ranks' arrivals at a
     * collective (checkpoints, evaluation on one rank, slow starts). */
    double timeout_s;
    /* Bytes of an all-reduce bucket; 0: BLOB_COMM_BUCKET_MB (MiB) from the environment if
     * set, else BLOB_COMM_DEFAULT_BUCKET_BYTES. */
    size_t bucket_bytes;
    /* Reduce the diffs of float32 lists in bfloat16, as DDP's bf16_compress_hook does:
     * half the bytes on the wire; each rank's diffs are rounded to bfloat16 (8
     * significant bits) and summed in it, then widened back. Every rank must choose the
     * same (list creation checks it: BLOB_ESHAPE). false: BLOB_COMM_BF16=1 in the
     * environment turns it on. */
    bool bf16_reduce;
} blob_comm_options;

/* Fill *out from the environment, as torchrun sets it: RANK (default 0), WORLD_SIZE
 * (default 1), LOCAL_RANK as the device (default: the rank), BLOB_COMM_ID (the id in hex,
 * see blob_comm_id_to_hex) or else BLOB_COMM_ID_FILE (a path; the pointer is getenv's).
 * Each of torchrun's three that is not set comes from the first set of Slurm's
 * (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), Open MPI's (OMPI_COMM_WORLD_RANK, _SIZE,
 * _LOCAL_RANK) and PMI's (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID), in that order. Numbers
 * are decimal digits alone (no sign, space or other base).
 * timeout_s, bucket_bytes and bf16_reduce are left 0 (their variables are read by
 * create). Errors: BLOB_EINVAL naming the variable that is malformed or out of range. */
BLOB_API blob_status blob_comm_options_from_env(blob_comm_options *out);

/* Join the communicator described by opts (blob_comm_options_from_env, or filled by
 * hand: zero the struct first). A multi-rank communicator makes opts->device current on
 * the calling thread and returns once all world_size ranks have joined, or fails when
 * they have not within the timeout. Rank 0 removes the rendezvous file it wrote once
 * all ranks joined (and when it fails). *out is NULL on failure.
 * Errors: BLOB_EINVAL (bad options, no way to meet, a rendezvous file of another world
 * size), BLOB_ENOTSUP (more than one rank without NCCL), BLOB_ENODEV, BLOB_ERANGE (no
 * such GPU), BLOB_ETIMEDOUT (the file or the other ranks did not come), BLOB_EFORMAT and
 * BLOB_EIO (rendezvous file), BLOB_ECOMM (NCCL failed), BLOB_ENOMEM, BLOB_ECUDA. */
BLOB_API blob_status blob_comm_create(blob_comm **out, const blob_comm_options *opts);

/* Create all n ranks of a communicator in this process from one thread: comms[i] is
 * rank i on GPU devices[i] (distinct GPUs). Only timeout_s, bucket_bytes and bf16_reduce
 * of opts are used. The calling thread's current device is left as it was; each rank's
 * thread must make its device current (blob_device_set(blob_comm_device(comms[i]))).
 * comms[] is all NULL on failure. Errors: as blob_comm_create. */
BLOB_API blob_status blob_comm_create_local(blob_comm **comms, int n, const int *devices,
                                            const blob_comm_options *opts);

/* Leave the communicator: waits (within the timeout) for its queued collectives, then
 * releases NCCL's resources; a failed communicator, or one whose work does not complete
 * in time, is aborted instead. The abort of a failed one comes only once the deadlines
 * of its collectives in flight have passed, plus half the timeout (at most 5 s), so that
 * no peer still waiting takes an aborted kernel's output for data: a process may exit
 * without this call instead. Lists of it must be freed first. NULL is a no-op. */
BLOB_API void blob_comm_free(blob_comm *c);

/* Queries (0 for NULL; blob_comm_device gives -1 for NULL). */
BLOB_API int blob_comm_rank(const blob_comm *c);
BLOB_API int blob_comm_size(const blob_comm *c);
BLOB_API int blob_comm_device(const blob_comm *c);
BLOB_API double blob_comm_timeout(const blob_comm *c);

/* Set the deadline, in seconds (> 0), of the waits and operations started from now on.
 * Errors: BLOB_EINVAL. */
BLOB_API blob_status blob_comm_set_timeout(blob_comm *c, double seconds);

/* The error that brought the communicator down (BLOB_OK while it works), without
 * waiting; the detail message is recorded for blob_last_error(). */
BLOB_API blob_status blob_comm_status(blob_comm *c);

/* Wait on the host, within the timeout, until every collective started so far has
 * completed, and report the outcome. BLOB_OK means the results are in place. */
BLOB_API blob_status blob_comm_synchronize(blob_comm *c);

/* Reduce n doubles on the host across the ranks (sum or mean), in place, e.g. a loss
 * sum and a count of correct answers for reporting; waits for the result. values is
 * unchanged on failure. A collective: all ranks call it with the same n and op. */
BLOB_API blob_status blob_comm_all_reduce_host(blob_comm *c, double *values, int n,
                                               blob_comm_op op);

/* Register blobs[0..n) (n >= 1, one dtype, no blob twice; on the communicator's GPU when
 * there are several ranks) as a list for broadcasts and all-reduces. A collective: every
 * rank exchanges the count and dtype of each blob and all compare them, so that every
 * rank gets BLOB_ESHAPE naming the first blob that differs (a communicator left usable),
 * or the error of a rank that could not register its blobs (BLOB_ECOMM if a peer sends a
 * registration no rank of this library would). The blobs are borrowed:
 * they must outlive the list and keep their counts (a reshape to another count makes
 * the next collective fail). *out is NULL on failure.
 * Errors: BLOB_EINVAL, BLOB_ENOTSUP (a blob neither float32 nor float64), BLOB_ESHAPE,
 * BLOB_EDEVICE (not on the current GPU), communicator errors. */
BLOB_API blob_status blob_comm_list_create(blob_comm_list **out, blob_comm *c, blob *const *blobs,
                                           int n);

/* NULL is a no-op. Call it with no step begun (or after a failure). */
BLOB_API void blob_comm_list_free(blob_comm_list *l);

/* Copy the data of the list's blobs on rank `root` into theirs on every other rank.
 * Non-root data end on the GPU (their head AT_GPU); the current stream waits for them.
 * Errors: BLOB_ERANGE (root), BLOB_ESTATE (a reduce step is open), BLOB_ESHAPE (a blob
 * changed its count), communicator errors. */
BLOB_API blob_status blob_comm_broadcast(blob_comm_list *l, int root);

/* Reduce the diffs of the list's blobs across the ranks (sum or mean), in place, and
 * make the current stream wait for the result: blob_comm_reduce_begin + _end. */
BLOB_API blob_status blob_comm_all_reduce(blob_comm_list *l, blob_comm_op op);

/* The overlapped form, one step at a time:
 *   begin(op)       opens a step;
 *   ready(first, n) hands over the diffs of blobs [first, first + n): they are final on
 *                   the current stream, and neither the caller nor its streams touch
 *                   them until end. Buckets whose blobs are all handed over are reduced
 *                   at once, the last bucket first, while the caller queues more work;
 *   end()           reduces whatever is left (blobs never handed over included) and
 *                   makes the current stream wait for every bucket.
 * Buckets are runs of consecutive blobs, taken from the last blob back until a bucket
 * holds at least the communicator's bucket size (as DDP's are), so that a layer's bias
 * shares its weights' bucket; a bucket holds less than twice that size (a blob that
 * would take it further is split). A bucket is reduced in place when its diffs lie back
 * to back in device memory (one flat blob viewed by the list's blobs), and packed into
 * a buffer of the caching allocator otherwise. From a bucket's second all-reduce
 * on, its collective is replayed from a CUDA graph captured then (again when the op or
 * the address of a diff changes): NCCL launches on a nonblocking communicator through a
 * new thread every time, a replay costs a few microseconds. That is done where NCCL's
 * graph of a collective has no host function on any rank, as the communicator's first
 * list creation finds out; a network transport's proxy needs one, and the ranks of
 * several hosts keep NCCL's launches. A packed bucket keeps its buffer until the list
 * is freed, so that a step gives no memory back while its collectives are in flight.
 * The diffs end on the GPU (head AT_GPU). Errors: BLOB_EINVAL (op), BLOB_ESTATE (begin
 * twice, or ready/end with no step), BLOB_ERANGE (first, n), BLOB_ESHAPE (a blob changed
 * its count), communicator errors. */
BLOB_API blob_status blob_comm_reduce_begin(blob_comm_list *l, blob_comm_op op);
BLOB_API blob_status blob_comm_reduce_ready(blob_comm_list *l, int first, int n);
BLOB_API blob_status blob_comm_reduce_end(blob_comm_list *l);

/* Per-bucket updates. The diffs of the list's blobs laid end to end (blob i's first
 * element at the sum of the counts before it) fall into the list's buckets, reduced
 * from the last to the first. Once bucket k's all-reduce is queued (its blobs handed
 * over), blob_comm_reduce_wait makes the current stream wait for its sums alone, on
 * the device, so that the update of its elements can run while the buckets before it
 * are still being reduced:
 *   for (int k = blob_comm_list_num_buckets(l) - 1; k >= 0; k--) {
 *       blob_comm_list_bucket(l, k, &begin, &end);
 *       blob_comm_reduce_wait(l, k);
 *       update(begin, end);               // on the current stream
 *   }
 *   blob_comm_reduce_end(l);
 * blob_comm_list_num_buckets gives 0 for NULL; on one rank a list has no buckets to
 * wait for (its sums are its diffs), so the loop is the whole update only where there
 * are several ranks.
 * Errors: BLOB_EINVAL (NULL), BLOB_ERANGE (k), BLOB_ESTATE (no step open, or bucket k
 * not queued: a blob of it not handed over yet), communicator errors. */
BLOB_API int blob_comm_list_num_buckets(const blob_comm_list *l);
BLOB_API blob_status blob_comm_list_bucket(const blob_comm_list *l, int k, int64_t *begin,
                                           int64_t *end);
BLOB_API blob_status blob_comm_reduce_wait(blob_comm_list *l, int k);

/* Timing, to see how the all-reduce overlaps backward. With timing on, each step records
 * device events: where the caller's stream was at reduce_begin (time 0) and at
 * reduce_end (the end of backward, in *backward_end_ms), and for each bucket, where the
 * caller's stream was when its blobs were all handed over (ready_ms) and when its
 * all-reduce began and ended on the communicator's stream. blob_comm_list_timing waits
 * for the last step ended and reads them. Costs three events a bucket per step.
 * Errors: BLOB_EINVAL, BLOB_ESTATE (timing off, no step timed yet, or a step open),
 * BLOB_ENODEV, BLOB_ECUDA. */
typedef struct {
    int first, last; /* the blobs it overlaps */
    int64_t elements;
    double ready_ms; /* its blobs all handed over (the caller's stream) */
    double start_ms; /* its all-reduce began (the communicator's stream) */
    double end_ms;   /* ... and ended */
} blob_comm_bucket_timing;

BLOB_API blob_status blob_comm_list_set_timing(blob_comm_list *l, bool on);
/* buckets[0..max) gets the first min(max, buckets) in the order they were reduced (the
 * last bucket first); *num the number of buckets. */
BLOB_API blob_status blob_comm_list_timing(blob_comm_list *l, blob_comm_bucket_timing *buckets,
                                           int max, int *num, double *backward_end_ms);

/* Ids and the rendezvous. */

/* A new id. With NCCL_COMM_ID=host:port set, every process gets the same id and rank 0
 * listens at that address; otherwise this process serves the meeting while it lives.
 * Errors: BLOB_ENOTSUP (built without NCCL), BLOB_ECOMM. */
BLOB_API blob_status blob_comm_id_new(blob_comm_id *out);

/* The id as BLOB_COMM_ID_HEX_SIZE - 1 lowercase hex digits into buf (size bytes).
 * Errors: BLOB_EINVAL, BLOB_ERANGE (buf too small). */
BLOB_API blob_status blob_comm_id_to_hex(const blob_comm_id *id, char *buf, size_t size);

/* Parse exactly 2 * BLOB_COMM_ID_BYTES hex digits (either case, nothing else). *out is
 * unchanged on failure. Errors: BLOB_EINVAL. */
BLOB_API blob_status blob_comm_id_from_hex(blob_comm_id *out, const char *hex);

/* The record of an id and the world size it is for, as the rendezvous file holds it:
 * magic, version, world size, length, the id, and a CRC-32 of all that.
 * Errors: BLOB_EINVAL (world_size < 1), BLOB_ERANGE (size < BLOB_COMM_ID_RECORD_SIZE). */
BLOB_API blob_status blob_comm_id_encode(const blob_comm_id *id, int world_size, void *buf,
                                         size_t size);

/* Read a record (untrusted bytes): every truncated, damaged or foreign record gives
 * BLOB_EFORMAT with what is wrong, and leaves *out and *world_size unchanged. */
BLOB_API blob_status blob_comm_id_decode(blob_comm_id *out, int *world_size, const void *buf,
                                         size_t len);

/* Write the record to path atomically: a new file (mode 0600) in the same directory,
 * flushed to disk and renamed over path, so a reader sees no file or the whole record.
 * Symbolic links at the end of path are followed (a link into shared storage stays a
 * link, the record goes where it points); a path that is a FIFO, a directory or a device
 * is refused. The new file has no name until complete where the file system allows
 * (O_TMPFILE), else a temporary one, ".NAME.blob-tmp-XXXXXX", which a writer that dies
 * leaves behind and a later write into the directory removes once an hour old (as
 * blob_save_npy does). Errors: BLOB_EINVAL, BLOB_EIO. */
BLOB_API blob_status blob_comm_id_write_file(const blob_comm_id *id, int world_size,
                                             const char *path);

/* Wait up to timeout_s seconds (0: look once) for path to exist, then read its record.
 * A file that is there but not a valid record is an error at once, and so is one that
 * another user could have written, as ssh refuses such keys: not owned by the effective
 * user, or writable by its group or others.
 * Errors: BLOB_EINVAL (an empty path, a bad timeout), BLOB_ETIMEDOUT (no file by the
 * deadline), BLOB_EFORMAT (not a regular file, or not a valid record), BLOB_EIO (another
 * user's file, or one it could write; unreadable). */
BLOB_API blob_status blob_comm_id_read_file(blob_comm_id *out, int *world_size, const char *path,
                                            double timeout_s);

#ifdef __cplusplus
}
#endif
#endif
