/* arena_plan.c: lifetime-based packing of a step's allocations (see arena_plan.h). */
#include "autograd/arena_plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

void qlt_arena_plan_reset(qlt_arena_plan *p) {
    p->n = 0;
    p->ready = 0;
    p->total = 0;
}

void qlt_arena_plan_add(qlt_arena_plan *p, size_t size, size_t start, int64_t clock) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->size = qlt_xrealloc(p->size, sizeof *p->size * (size_t)p->cap);
        p->start = qlt_xrealloc(p->start, sizeof *p->start * (size_t)p->cap);
        p->first = qlt_xrealloc(p->first, sizeof *p->first * (size_t)p->cap);
        p->last = qlt_xrealloc(p->last, sizeof *p->last * (size_t)p->cap);
        p->offset = qlt_xrealloc(p->offset, sizeof *p->offset * (size_t)p->cap);
    }
    p->size[p->n] = size;
    p->start[p->n] = start;
    p->first[p->n] = clock;
    p->last[p->n] = clock;
    p->n++;
}

int qlt_arena_plan_find(const qlt_arena_plan *p, size_t at) {
    int lo = 0, hi = p->n - 1, found = -1;
    while (lo <= hi) { /* starts increase with the index: the last start <= at */
        int mid = (lo + hi) / 2;
        if (p->start[mid] <= at) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (found >= 0 && at < p->start[found] + (p->size[found] ? p->size[found] : 1)) return found;
    return -1;
}

typedef struct placed {
    size_t offset, end;
} placed;

static int cmp_placed(const void *a, const void *b) {
    const placed *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static const qlt_arena_plan *sort_plan; /* qsort has no context argument in C11 */

static int cmp_by_size(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    const qlt_arena_plan *p = sort_plan;
    if (p->size[i] != p->size[j]) return p->size[i] > p->size[j] ? -1 : 1;
    return p->first[i] < p->first[j] ? -1 : p->first[i] > p->first[j];
}

void qlt_arena_plan_pack(qlt_arena_plan *p, size_t align) {
    int n = p->n;
    int *order = qlt_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) order[i] = i;
    sort_plan = p;
    qsort(order, (size_t)n, sizeof(int), cmp_by_size);
    sort_plan = NULL;
    int *done = qlt_xcalloc((size_t)(n ? n : 1), sizeof(int));
    placed *busy = qlt_xmalloc(sizeof(placed) * (size_t)(n ? n : 1));
    size_t total = 0;
    for (int k = 0; k < n; k++) {
        int i = order[k];
        int nb = 0;
        for (int j = 0; j < n; j++) { /* placed buffers alive at the same time as i */
            if (!done[j] || p->last[j] < p->first[i] || p->last[i] < p->first[j]) continue;
            busy[nb].offset = p->offset[j];
            busy[nb].end = p->offset[j] + p->size[j];
            nb++;
        }
        qsort(busy, (size_t)nb, sizeof(placed), cmp_placed);
        size_t at = 0;
        for (int b = 0; b < nb; b++) {
            if (busy[b].offset >= at + p->size[i]) break; /* fits in the gap before this one */
            if (busy[b].end > at) at = (busy[b].end + align - 1) & ~(align - 1);
        }
        p->offset[i] = at;
        done[i] = 1;
        if (at + p->size[i] > total) total = at + p->size[i];
    }
    free(order);
    free(done);
    free(busy);
    p->total = total;
    p->ready = 1;
}

void qlt_arena_plan_free(qlt_arena_plan *p) {
    free(p->size);
    free(p->start);
    free(p->first);
    free(p->last);
    free(p->offset);
    memset(p, 0, sizeof *p);
}
