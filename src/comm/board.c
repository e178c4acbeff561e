/* A host's board of a communicator's ranks: see board.h. */
#include "board.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/core.h"

#define BOARD_MAGIC     0x6472616f62626c62ull /* "blbboard" */
#define BOARD_MAX_WORLD 65536
#define TOLD_AT_MOST    2 /* ranks a message names; the others are counted */

struct blob__board {
    blob__board_page *page;
    size_t bytes;
    int world;
    bool mapped; /* a shared memory object's mapping, else this process's memory */
    _Atomic int holds;
};

size_t blob__board_page_bytes(int world)
{
    return sizeof(blob__board_page) + (size_t)world * sizeof(blob__board_slot);
}

/* "/blob-comm-" and two 64-bit FNV-1a hashes of the id's bytes, in hex. */
void blob__board_name(const blob_comm_id *id, char *name, size_t size)
{
    uint64_t h[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof id->bytes; i++)
            h[k] = (h[k] ^ id->bytes[i]) * 0x100000001b3ull;
    snprintf(name, size, "/blob-comm-%016llx%016llx", (unsigned long long)h[0],
             (unsigned long long)h[1]);
}

static blob__board *wrap(blob__board_page *page, size_t bytes, int world, bool mapped)
{
    blob__board *b = blob__obj_alloc(sizeof *b);
    if (b)
        *b = (blob__board){
            .page = page, .bytes = bytes, .world = world, .mapped = mapped, .holds = 1};
    return b;
}

/* The first rank to come writes the header; the others find it as theirs would be. */
static bool claim(blob__board_page *p, int world)
{
    if (atomic_load(&p->magic) == 0) {
        atomic_store(&p->world, (uint64_t)world);
        uint64_t zero = 0;
        atomic_compare_exchange_strong(&p->magic, &zero, BOARD_MAGIC);
    }
    return atomic_load(&p->magic) == BOARD_MAGIC && atomic_load(&p->world) == (uint64_t)world;
}

blob__board *blob__board_open(const blob_comm_id *id, int world)
{
    if (!id || world < 2 || world > BOARD_MAX_WORLD)
        return NULL;
    char name[64];
    blob__board_name(id, name, sizeof name);
    const size_t bytes = blob__board_page_bytes(world);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    blob__board *b = NULL;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        !(st.st_mode & 077) &&
        (st.st_size == (off_t)bytes || (st.st_size == 0 && ftruncate(fd, (off_t)bytes) == 0))) {
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED && !(b = wrap(m, bytes, world, true)))
            munmap(m, bytes);
    }
    close(fd);
    if (b && !claim(b->page, world)) {
        blob__board_drop(b);
        b = NULL;
    }
    return b;
}

void blob__board_unlink(const blob_comm_id *id)
{
    char name[64];
    blob__board_name(id, name, sizeof name);
    (void)shm_unlink(name);
}

blob__board *blob__board_new_local(int world)
{
    if (world < 2 || world > BOARD_MAX_WORLD)
        return NULL;
    const size_t bytes = blob__board_page_bytes(world);
    blob__board_page *p = blob__obj_alloc(bytes);
    if (!p)
        return NULL;
    memset(p, 0, bytes);
    claim(p, world);
    blob__board *b = wrap(p, bytes, world, false);
    if (!b)
        blob__obj_free(p);
    return b;
}

void blob__board_hold(blob__board *b)
{
    if (b)
        atomic_fetch_add(&b->holds, 1);
}

void blob__board_drop(blob__board *b)
{
    if (!b || atomic_fetch_sub(&b->holds, 1) != 1)
        return;
    if (b->mapped)
        munmap(b->page, b->bytes);
    else
        blob__obj_free(b->page);
    blob__obj_free(b);
}

blob__board_page *blob__board_page_of(blob__board *b) { return b ? b->page : NULL; }

static blob__board_slot *slot(blob__board *b, int rank)
{
    return b && rank >= 0 && rank < b->world ? &b->page->slot[rank] : NULL;
}

void blob__board_join(blob__board *b, int rank)
{
    blob__board_slot *s = slot(b, rank);
    if (s) {
        atomic_store(&s->seq, 0);
        atomic_store(&s->state, BLOB__BOARD_JOINED);
        atomic_store(&s->pid, (uint64_t)getpid());
    }
}

void blob__board_started(blob__board *b, int rank, uint64_t seq)
{
    blob__board_slot *s = slot(b, rank);
    if (s)
        atomic_store(&s->seq, seq);
}

void blob__board_leave(blob__board *b, int rank)
{
    blob__board_slot *s = slot(b, rank);
    if (s)
        atomic_store(&s->state, BLOB__BOARD_LEFT);
}

/* What rank r's post says of collective #seq into one (size bytes); false when it
 * says nothing: no post, a post no rank writes, or a rank that has started it. */
static bool explain_rank(const blob__board_slot *s, int r, uint64_t seq, char *one, size_t size)
{
    const uint64_t pid = atomic_load(&s->pid), state = atomic_load(&s->state),
                   last = atomic_load(&s->seq);
    if (pid == 0 || pid > INT32_MAX || (state != BLOB__BOARD_JOINED && state != BLOB__BOARD_LEFT))
        return false;
    char after[48];
    if (last)
        snprintf(after, sizeof after, "after collective #%llu", (unsigned long long)last);
    else
        snprintf(after, sizeof after, "before any collective");
    if (state == BLOB__BOARD_LEFT)
        snprintf(one, size, "rank %d (pid %llu) has freed its communicator, %s", r,
                 (unsigned long long)pid, after);
    else if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        snprintf(one, size, "rank %d (pid %llu) has ended, %s", r, (unsigned long long)pid, after);
    else if (last < seq)
        snprintf(one, size, "rank %d (pid %llu) has not started it, its last is #%llu", r,
                 (unsigned long long)pid, (unsigned long long)last);
    else
        return false;
    return true;
}

void blob__board_explain_page(const blob__board_page *p, int world, int self, uint64_t seq,
                              char *buf, size_t size)
{
    if (!size)
        return;
    buf[0] = '\0';
    if (!p || world < 2 || world > BOARD_MAX_WORLD || atomic_load(&p->magic) != BOARD_MAGIC ||
        atomic_load(&p->world) != (uint64_t)world)
        return;
    int told = 0, more = 0;
    size_t used = 0;
    for (int r = 0; r < world; r++) {
        char one[128];
        if (r == self || !explain_rank(&p->slot[r], r, seq, one, sizeof one))
            continue;
        if (told == TOLD_AT_MOST) {
            more++;
            continue;
        }
        int n = snprintf(buf + used, size - used, "%s%s", told ? "; " : "", one);
        used = n < 0 || (size_t)n >= size - used ? size - 1 : used + (size_t)n;
        told++;
    }
    if (more && used < size - 1)
        snprintf(buf + used, size - used, "; and %d more", more);
}

void blob__board_explain(const blob__board *b, int self, uint64_t seq, char *buf, size_t size)
{
    if (size)
        buf[0] = '\0';
    if (b)
        blob__board_explain_page(b->page, b->world, self, seq, buf, size);
}
