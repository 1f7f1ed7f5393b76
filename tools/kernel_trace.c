/* kernel_trace.c: an LD_PRELOAD library for the GPU machine, which has no Nsight Systems: records the
 * start and end of every kernel and memory copy (graph replays included, node by node) with CUPTI's
 * activity API and writes them, in device time order, to $QLT_TRACE_OUT as TSV:
 *   start_ns  end_ns  kind(K|C|S)  graph_node_id  name
 * It shows what a kernel-serializing profiler cannot: the gaps between the kernels of a replayed graph.
 * Build: scripts/package-gpu.sh (carry/bin/libkernel_trace.so); use: scripts/trace-step.sh. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned long long start, end, node;
  char kind;
  const char *name;
} trace_row;

static trace_row *rows;
static size_t n_rows, cap_rows;

static void add_row(unsigned long long start, unsigned long long end, char kind,
                    unsigned long long node, const char *name) {
  if (n_rows == cap_rows) {
    cap_rows = cap_rows ? cap_rows * 2 : 65536;
    rows = realloc(rows, cap_rows * sizeof *rows);
    if (!rows) { fprintf(stderr, "kernel_trace: out of memory\n"); exit(1); }
  }
  /* Kernel names live in CUPTI's buffers, which are freed: keep a copy. */
  rows[n_rows++] = (trace_row){start, end, node, kind, name ? strdup(name) : "?"};
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = 8 << 20;
  *buffer = aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
  CUpti_Activity *record = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)record;
      add_row(k->start, k->end, 'K', k->graphNodeId, k->name);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const CUpti_ActivityMemcpy6 *c = (const CUpti_ActivityMemcpy6 *)record;
      add_row(c->start, c->end, 'C', c->graphNodeId, "memcpy");
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const CUpti_ActivityMemset4 *s = (const CUpti_ActivityMemset4 *)record;
      add_row(s->start, s->end, 'S', s->graphNodeId, "memset");
    }
  }
  free(buffer);
}

static int by_start(const void *a, const void *b) {
  const trace_row *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

__attribute__((destructor)) static void trace_finish(void) {
  cuptiActivityFlushAll(1);
  const char *path = getenv("QLT_TRACE_OUT");
  FILE *f = fopen(path ? path : "kernel-trace.tsv", "w");
  if (!f) { perror("kernel_trace: QLT_TRACE_OUT"); return; }
  qsort(rows, n_rows, sizeof *rows, by_start);
  for (size_t i = 0; i < n_rows; i++)
    fprintf(f, "%llu\t%llu\t%c\t%llu\t%.150s\n", rows[i].start, rows[i].end, rows[i].kind, rows[i].node,
            rows[i].name);
  fclose(f);
}

__attribute__((constructor)) static void trace_start(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS)
    fprintf(stderr, "kernel_trace: CUPTI could not be enabled; no trace\n");
}
