/* Internal: a host's board of a communicator's ranks (board.c). Each rank on the host
 * posts its process id, whether it still holds the communicator, and how many
 * collectives it has started; a rank whose collective missed its deadline reads the
 * others' posts to name the rank it waited for. Best effort: where no board can be had
 * (no shared memory, no memory), the messages stay general. Never installed.
 *
 * A board of ranks in several processes is a POSIX shared memory object named after the
 * communicator's id ("/blob-comm-" and 32 hex digits of it), made 0600 by the first rank
 * of the host to come, and refused if another user owns it, others may write it, or its
 * size is not the world's; every rank maps it before it joins, and it is unlinked once
 * all have joined (the mappings keep it). A rank killed while joining leaves it behind.
 * The ranks of one process (blob_comm_create_local) share a board in its memory. */
#ifndef BLOB_COMM_BOARD_H
#define BLOB_COMM_BOARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/comm.h"

/* What a rank posts. Written by its own rank only; read by every rank of the host, so
 * a reader trusts none of it (another process may have written anything). */
typedef struct {
    _Atomic uint64_t pid;   /* 0: no rank of this host posted here */
    _Atomic uint64_t state; /* BLOB__BOARD_JOINED or BLOB__BOARD_LEFT */
    _Atomic uint64_t seq;   /* collectives started */
} blob__board_slot;

enum { BLOB__BOARD_JOINED = 1, BLOB__BOARD_LEFT = 2 };

/* The shared page: a magic number, the world size, a slot per rank. */
typedef struct {
    _Atomic uint64_t magic;
    _Atomic uint64_t world;
    blob__board_slot slot[];
} blob__board_page;

typedef struct blob__board blob__board;

/* The name of id's board into name (size bytes, 64 are enough). */
void blob__board_name(const blob_comm_id *id, char *name, size_t size);

/* The bytes of the page of a world of ranks. */
size_t blob__board_page_bytes(int world);

/* The board of the communicator with id on this host, NULL where none can be had. */
blob__board *blob__board_open(const blob_comm_id *id, int world);

/* Remove the name of id's board (once every rank of the host has joined). */
void blob__board_unlink(const blob_comm_id *id);

/* A board for world ranks of this process, held once per rank; NULL with no memory. */
blob__board *blob__board_new_local(int world);

/* Take or drop a rank's hold (the last drop unmaps or frees it). NULL does nothing. */
void blob__board_hold(blob__board *b);
void blob__board_drop(blob__board *b);

/* Post rank's process as joined, its collectives started, or that it left. NULL does
 * nothing. */
void blob__board_join(blob__board *b, int rank);
void blob__board_started(blob__board *b, int rank, uint64_t seq);
void blob__board_leave(blob__board *b, int rank);

/* Into buf (size bytes, "" if nothing is known): what the posts of the ranks other
 * than self tell of why collective #seq of self did not complete, e.g. "rank 1 (pid
 * 4242) has ended, after collective #8". b NULL: "". */
void blob__board_explain(const blob__board *b, int self, uint64_t seq, char *buf, size_t size);

/* b's page (the tests and the fuzz target write into it). */
blob__board_page *blob__board_page_of(blob__board *b);

/* The same from a page of world ranks as another process may have left it. */
void blob__board_explain_page(const blob__board_page *p, int world, int self, uint64_t seq,
                              char *buf, size_t size);

#endif
