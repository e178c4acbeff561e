/* A kernel trace of a process's last CUDA graph launch (make bench-trace): loaded by the
 * CUDA driver as CUDA_INJECTION64_PATH, it records every kernel, copy and memset through
 * CUPTI's activity API and, at exit, prints the nodes of the last graph launch in the
 * order they started: start (us from the launch's first node), duration, the stream the
 * graph ran it on, the kind (K kernel, C copy, S memset), the name, and the node's mean
 * duration over the last AVERAGED launches of the same graph. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AVERAGED = 20, BUFFER_BYTES = 8 << 20 };

typedef struct {
    uint64_t start, end;
    uint32_t correlation, graph, stream;
    char kind;
    char name[96];
} record;

static record *records;
static size_t num_records, cap_records;
static int lost; /* records dropped for want of memory */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void add(uint64_t start, uint64_t end, uint32_t correlation, uint32_t graph, uint32_t stream,
                char kind, const char *name)
{
    if (num_records == cap_records) {
        size_t cap = cap_records ? 2 * cap_records : 1 << 16;
        record *r = realloc(records, cap * sizeof *r);
        if (!r) {
            lost++;
            return;
        }
        records = r, cap_records = cap;
    }
    record *r = &records[num_records++];
    *r = (record){start, end, correlation, graph, stream, kind, ""};
    snprintf(r->name, sizeof r->name, "%s", name ? name : "?");
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *a = NULL;
    char name[64];
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const void *)a;
            add(k->start, k->end, k->correlationId, k->graphId, k->streamId, 'K', k->name);
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const void *)a;
            snprintf(name, sizeof name, "copy of kind %u, %llu bytes", m->copyKind,
                     (unsigned long long)m->bytes);
            add(m->start, m->end, m->correlationId, m->graphId, m->streamId, 'C', name);
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const void *)a;
            snprintf(name, sizeof name, "memset of %llu bytes", (unsigned long long)m->bytes);
            add(m->start, m->end, m->correlationId, m->graphId, m->streamId, 'S', name);
        }
    }
    free(buffer);
}

static int by_start(const void *x, const void *y)
{
    const record *a = x, *b = y;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* Whether correlation is one of the n in list. */
static int listed(const uint32_t *list, int n, uint32_t correlation)
{
    for (int i = 0; i < n; i++)
        if (list[i] == correlation)
            return 1;
    return 0;
}

static void report(void)
{
    cuptiActivityFlushAll(1);
    qsort(records, num_records, sizeof *records, by_start);
    size_t end = num_records;
    while (end > 0 && !records[end - 1].graph)
        end--;
    if (!end) {
        printf("ktrace: %zu records, no graph launch\n", num_records);
        return;
    }
    /* all nodes of one graph launch share the launch's correlation id */
    const uint32_t graph = records[end - 1].graph;
    uint32_t launches[AVERAGED];
    int n = 0;
    for (size_t i = end; i-- > 0 && n < AVERAGED;)
        if (records[i].graph == graph && !listed(launches, n, records[i].correlation))
            launches[n++] = records[i].correlation;
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (size_t i = 0; i < num_records; i++)
        if (records[i].correlation == launches[0]) {
            t0 = records[i].start < t0 ? records[i].start : t0;
            t1 = records[i].end > t1 ? records[i].end : t1;
        }
    printf("ktrace: graph %u, its last launch %.1f us from the first node's start to the last "
           "one's end; means over %d launches%s\n",
           graph, (double)(t1 - t0) / 1e3, n, lost ? " (records lost: out of memory)" : "");
    printf("  start    dur  stream     name  (mean)\n");
    for (size_t i = 0; i < num_records; i++) {
        const record *r = &records[i];
        if (r->correlation != launches[0])
            continue;
        double sum = 0;
        int count = 0;
        for (size_t k = 0; k < num_records; k++) {
            const record *o = &records[k];
            if (o->graph == graph && o->stream == r->stream && !strcmp(o->name, r->name) &&
                listed(launches, n, o->correlation))
                sum += (double)(o->end - o->start) / 1e3, count++;
        }
        printf("%7.1f %6.1f %7u  %c  %.90s  (%.1f)\n", (double)(r->start - t0) / 1e3,
               (double)(r->end - r->start) / 1e3, r->stream, r->kind, r->name, sum / count);
    }
}

int InitializeInjection(void)
{
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: CUPTI's activity API could not be set up\n");
        return 0;
    }
    atexit(report);
    return 1;
}
