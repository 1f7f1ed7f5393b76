/* attention_segments.h: the segment tables of cuDNN's ragged attention (attention_segments.cu), C callable
 * from attention_cudnn.cpp. */
#ifndef QLT_CUDA_ATTENTION_SEGMENTS_H
#define QLT_CUDA_ATTENTION_SEGMENTS_H

#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* From seg_start [batch, seq] (1 <= K <= 32 slots a row): q_off, kv_off, stats_off [batch*K + 1] element
 * offsets of each slot's first token in q / out ([N, n_heads*hd]), k / v ([N, n_kv*hd]) and lse ([N, n_heads]);
 * seq_len [batch*K] its tokens (0 for an unused slot). Enqueued on stream. */
void qlt_attn_segment_table(cudaStream_t stream, const int32_t *seg_start, int batch, int seq, int K, int n_heads,
                            int n_kv, int hd, int64_t *q_off, int64_t *kv_off, int64_t *stats_off, int32_t *seq_len);

#ifdef __cplusplus
}
#endif

#endif
