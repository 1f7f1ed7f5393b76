/* bench_decode.h: the generation benchmark of `qlora-train bench --decode N` (bench_decode.c). */
#ifndef QLT_BENCH_DECODE_H
#define QLT_BENCH_DECODE_H

typedef struct qlt_bench_decode_opts {
    const char *model;  /* config.json of the architecture (random weights) */
    const char *quant;  /* nf4 | none */
    const char *device; /* auto | cpu | cuda */
    int prompt_len, tokens;
    int json;
} qlt_bench_decode_opts;

/* Runs it and prints the result; 0, or -1 with qlt_fail. */
int qlt_bench_decode(const qlt_bench_decode_opts *o);

#endif
