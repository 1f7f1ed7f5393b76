/* arena_plan.h: offsets for a fixed sequence of allocations whose lifetimes are known, so that buffers
 * that are never alive at the same time share memory. The planning pass of a step records, for the k-th
 * allocation, its size and the first and last "clock" (op index) at which it is touched; qlt_arena_plan_pack
 * then assigns offsets (largest first, each at the lowest offset that does not overlap a placed buffer whose
 * lifetime intersects its own). Every later step makes the same allocations in the same order and gets
 * the same offsets. */
#ifndef QLT_ARENA_PLAN_H
#define QLT_ARENA_PLAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct qlt_arena_plan {
    int ready;       /* packed: offsets valid */
    int n, cap;
    size_t *size;    /* [n] bytes, aligned */
    size_t *start;   /* [n] distinct addresses of the planning pass (for looking buffers up by pointer) */
    int64_t *first;  /* [n] clock of the allocation */
    int64_t *last;   /* [n] clock of the last touch */
    size_t *offset;  /* [n] assigned by pack */
    size_t total;    /* bytes the plan needs */
} qlt_arena_plan;

void qlt_arena_plan_reset(qlt_arena_plan *p);
/* Records allocation number p->n. */
void qlt_arena_plan_add(qlt_arena_plan *p, size_t size, size_t start, int64_t clock);
/* The allocation whose planning range holds address `at`, or -1. */
int qlt_arena_plan_find(const qlt_arena_plan *p, size_t at);
/* Assigns offsets (aligned to `align`) and sets total. */
void qlt_arena_plan_pack(qlt_arena_plan *p, size_t align);
void qlt_arena_plan_free(qlt_arena_plan *p);

#endif
