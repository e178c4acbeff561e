/* Internal: a communicator's operations in flight and its failure (watch.c), as the
 * collectives (list.c, host.c) and the lifetime (comm.c) use them. Never installed. */
#ifndef BLOB_COMM_WATCH_H
#define BLOB_COMM_WATCH_H

#include "comm_impl.h"

/* ---- failure ---- */

/* Bring c down (mu held): the first failure wins and is kept, and NCCL's handle is
 * aborted so that nothing waits for it any more, by a thread of its own that takes no
 * lock and makes no CUDA call before NCCL's abort flags are up:
 *  - Not before the deadlines of the collectives in flight have passed, plus a margin
 *    for the ranks that started them later. An aborted NCCL kernel may pass on what its
 *    buffers held as if it were data (LL protocols), and a peer still waiting for that
 *    collective would take it as complete: by then every peer has given up on it.
 *  - NCCL's abort waits until every CUDA graph that captured a collective of the handle
 *    is destroyed: the watchdog destroys the replay graphs of c's lists meanwhile, and
 *    blob_comm_free at the latest. A CUDA call may wait for NCCL's kernels to end (a
 *    kernel's first launch may load its module and wait for the device), so nothing
 *    that the abort needs is made to wait for CUDA.
 * Returns the failure, its detail recorded. */
blob_status blob__comm_fail(blob_comm *c, const char *func, blob_status status, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));

/* blob__comm_fail (mu held) with the detail just recorded on this thread: "what: detail". */
blob_status blob__comm_fail_last(blob_comm *c, const char *func, blob_status status,
                                 const char *what);

/* The failure that brought c down, recorded again for this thread under func. */
blob_status blob__comm_failed(blob_comm *c, const char *func);

/* Bring c down with the failure just recorded on this thread, as the failure of what
 * (mu not held). For failures after which the ranks may no longer make the same calls. */
blob_status blob__comm_poison(blob_comm *c, const char *func, blob_status status, const char *what);

/* ---- the collectives ---- */

/* Check that c is a working multi-rank communicator that the calling thread may use:
 * its failure if it failed, BLOB_EDEVICE if its GPU is not current. */
blob_status blob__comm_usable(blob_comm *c, const char *func);

/* mu held: wait until the handle has finished its last call, what (within the timeout;
 * hint says why it would not, and the board what it knows of the other ranks). */
blob_status blob__comm_settle(blob_comm *c, const char *func, const char *what, const char *hint);
#define BLOB__COMM_PEER_HINT "NCCL is waiting for a rank that did not take part"

/* mu not held: all-reduce count elements of dtype at buf, on c->stream, and wait until
 * the handle has launched it (a failure brings c down). */
blob_status blob__comm_all_reduce_launch(blob_comm *c, const char *func, const char *what,
                                         void *buf, size_t count, blob_dtype dtype,
                                         blob_comm_op op);

/* The number of the collective c starts now (one more than the last), posted on c's
 * board. */
uint64_t blob__comm_next_seq(blob_comm *c);

/* mu held: watch the work just queued on c->stream, named what, until it completes. */
blob_status blob__comm_track(blob_comm *c, const char *func, const char *what);

/* ---- the lifetime ---- */

/* Start c's watchdog, once c has joined. */
blob_status blob__comm_watch_start(blob_comm *c, const char *func);

/* mu not held, c used by no other thread: stop the watchdog, let NCCL flush and release
 * the handle within the timeout (abort it otherwise), wait for the aborter, c's replay
 * graphs destroyed, and release the events of the operations. */
void blob__comm_watch_end(blob_comm *c);

#endif
