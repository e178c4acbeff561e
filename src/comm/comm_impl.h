/* Internal: the communicator and its lists, shared by the files of src/comm; the pure
 * pieces of list.c (bucket plan, contiguity, table comparison) that the tests reach; and
 * what options.c, rendezvous.c and host.c give the others. The failure and the
 * operations in flight are watch.h's, the host's board of the ranks board.h's. Never
 * installed. */
#ifndef BLOB_COMM_IMPL_H
#define BLOB_COMM_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "blob/comm.h"
#include "board.h"
#include "ccl.h"

/* An operation queued on the communicator's stream, not yet known to be complete. */
typedef struct {
    void *event;     /* recorded on the stream behind the operation */
    double deadline; /* blob__now() by which it must complete */
    uint64_t seq;    /* the collective's number (blob_comm.seq when it was queued) */
    char what[96];   /* "all_reduce #12 (bucket 3 of 5)" */
} blob__comm_op;

struct blob_comm {
    int rank, size, device;
    size_t bucket_bytes;
    const blob__ccl *ccl;
    void *stream;                /* the communicator's stream (blob_stream_create's, so that blocks
                      used on it may outlive the communicator); NULL for 1 rank */
    void *order_event;           /* orders it and the caller's stream (the owner's thread only) */
    uint64_t seq;                /* collectives started: names them in messages */
    blob__board *board;          /* this host's posts of the ranks, or NULL (board.h) */
    int lists;                   /* lists created, to name them */
    bool replay_decided, replay; /* see blob__comm_decide_replay */
    bool bf16;                   /* blob_comm_options.bf16_reduce, or BLOB_COMM_BF16 */

    /* Guarded by mu, which the watchdog thread takes too. NCCL calls on handle are made
     * with mu held and never block for long (the communicator is nonblocking); CUDA
     * calls that may wait for the device are made without it, so that the watchdog can
     * always abort a hung handle. */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    double timeout_s;
    void *handle;    /* NCCL's communicator; NULL for 1 rank and once failed */
    void *aborting;  /* the handle of a failure, which the aborter thread aborts at */
    double abort_at; /* this time (see blob__comm_fail); both set before it starts */
    pthread_t aborter;
    bool aborter_running;
    blob_comm_list *live; /* the lists of c, whose replay graphs a failure destroys */
    blob__comm_op *ops;
    size_t num_ops, cap_ops;
    void **spare_events;
    size_t num_spare, cap_spare;
    blob_status failure; /* BLOB_OK while the communicator works */
    char failure_msg[480];
    bool stopping;
    bool watching;
    pthread_t watchdog;
};

/* A bucket: elements [begin, end) of the list's diffs laid end to end, which overlap
 * blobs first..last. */
typedef struct {
    int64_t begin, end;
    int first, last;
} blob__comm_bucket;

/* What a bucket keeps from one all-reduce to the next: its count of calls, a packed
 * bucket's buffer, and the all-reduce (pack, NCCL, unpack) captured in a CUDA graph and
 * replayed: NCCL launches on a nonblocking communicator through a new thread each time,
 * tens of microseconds of host time, while a replay costs a few. */
typedef struct {
    int calls;          /* all-reduces of the bucket so far */
    void *graph, *exec; /* NULL until captured */
    blob_comm_op op;    /* as captured */
    char **dev;         /* device sides of the bucket's blobs (first..last), as captured */
    void *buf;          /* a packed bucket's buffer, kept with the list (reduce_bucket) */
} blob__comm_replay;

struct blob_comm_list {
    blob_comm *c;
    blob_comm_list *prev_live, *next_live; /* c->live, guarded by c->mu */
    int id;                                /* 1 for the communicator's first list, ... */
    int n;
    blob **blobs;
    int64_t *counts; /* at registration */
    int64_t *offset; /* of each blob's first element; offset[n] is the total */
    blob_dtype dtype;
    size_t elem;
    bool bf16;        /* float32 diffs reduced in bfloat16 (blob_comm_options.bf16_reduce) */
    size_t wire_elem; /* bytes of an element as reduced */
    int num_buckets;
    blob__comm_bucket *buckets;
    blob__comm_replay *replays; /* one per bucket */
    char **replay_dev;          /* the replays' dev arrays, end to end */
    /* the step begun and not ended */
    bool open;
    blob_comm_op op;
    bool *ready; /* handed over */
    char **dev;  /* device sides taken for the collective in progress: the diffs
                        handed over, or the data of a broadcast */
    int next;    /* the next bucket to reduce (they go from the last down) */
    void **done; /* per bucket: recorded behind its all-reduce (made at first use) */
    /* timing (blob_comm_list_set_timing): events [0] reduce_begin, [1] reduce_end on
     * the caller's stream, then per bucket ready, start, end; timed: a step recorded */
    void **timing;
    bool timed;
};

/* One rank's registration as exchanged at list creation. */
typedef struct {
    int64_t n;        /* blobs */
    int64_t status;   /* BLOB_OK, or why this rank could not register */
    int64_t bad_blob; /* the blob at fault, or -1 */
} blob__comm_header;

typedef struct {
    int64_t count;
    int64_t dtype; /* -1: no such blob on this rank; | BLOB__COMM_ENTRY_BF16 */
} blob__comm_entry;
#define BLOB__COMM_ENTRY_BF16 ((int64_t)1 << 8) /* reduced in bfloat16 */

/* Split blobs of counts[0..n) into buckets, walking from the last blob back: a bucket
 * takes whole blobs until it holds at least bucket_elems elements, as DDP's do, so
 * that a layer's small blobs (a bias) share a bucket with its large ones. A blob that
 * would take the open bucket to twice bucket_elems or more is cut: the bucket takes
 * the elements at its end that bring it to bucket_elems, full buckets follow, and its
 * front piece joins the next bucket. So every bucket holds fewer than 2 x bucket_elems
 * elements, and all but the first at least bucket_elems. Blobs of count 0 hold no
 * elements. Writes at most max buckets to out (ascending) and returns how many there
 * are. */
int blob__comm_plan(const int64_t *counts, int n, int64_t bucket_elems, blob__comm_bucket *out,
                    int max);

/* Whether the diffs of blobs first..last (counts[i] elements of elem bytes at ptrs[i])
 * lie back to back in that order; blobs of count 0 are skipped. */
bool blob__comm_contiguous(char *const *ptrs, const int64_t *counts, int first, int last,
                           size_t elem);

/* Check the world ranks' headers, as they came from the peers, and give in *len the
 * entries each rank sends next: enough to find the first blob at which the lists differ
 * (one past the shortest list, at most the longest), so never more than one past this
 * rank's own list. BLOB_ECOMM, with the rank named, for a header no rank of this library
 * sends (a negative or out-of-range count, an unknown status, or a failed rank that
 * claims blobs). */
blob_status blob__comm_table_length(const blob__comm_header *headers, int world, int64_t *len);

/* Compare the world ranks' registrations: headers[r] (checked by
 * blob__comm_table_length), and len entries of rank r at tables[r * len]. BLOB_OK if all
 * agree; otherwise the status every rank returns, with the detail (which rank, which
 * blob) recorded. */
blob_status blob__comm_compare(const blob__comm_header *headers, const blob__comm_entry *tables,
                               int world, int64_t len);

/* ---- options.c ---- */

/* The settings of a communicator: its options', else their environment variables
 * (BLOB_COMM_TIMEOUT, BLOB_COMM_BUCKET_MB, BLOB_COMM_BF16), else the defaults. */
typedef struct {
    double timeout;
    size_t bucket;
    bool bf16;
} blob__comm_settings;

/* o's world size (0 means 1) into *world, checked with o's rank. */
blob_status blob__comm_check_place(const char *func, const blob_comm_options *o, int *world);

/* o's settings, resolved as blob__comm_settings says, checked. */
blob_status blob__comm_resolve(const char *func, const blob_comm_options *o,
                               blob__comm_settings *out);

/* ---- rendezvous.c ---- */

/* The id of o's meeting for its rank and world: o's id, the one in o's rendezvous file
 * (waited for up to timeout; *wrote: this rank wrote the file), or with NCCL_COMM_ID set
 * the one ccl makes of it. */
blob_status blob__comm_meet(const char *func, const blob_comm_options *o, const blob__ccl *ccl,
                            double timeout, blob_comm_id *id, bool *wrote);

/* ---- host.c ---- */

/* Gather bytes of host memory at in from every rank into out (size * bytes, rank r's
 * at r * bytes) and wait for it. A failure brings c down. */
blob_status blob__comm_gather_host(blob_comm *c, const char *func, const void *in, size_t bytes,
                                   void *out);

/* Decide once, with the other ranks, whether c's collectives may be replayed from CUDA
 * graphs (c->replay): only if the collective library can be captured and a probe
 * capture holds no host function on any rank. NCCL puts one in a graph for the proxy of
 * a network transport; every launch of such a graph waits until the host function of
 * the one before has run, and a dead peer can make that wait forever. A collective:
 * every rank calls it at the same point. A failure brings c down. */
blob_status blob__comm_decide_replay(blob_comm *c, const char *func);

#endif
