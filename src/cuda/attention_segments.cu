/* attention_segments.cu: the per-example tables cuDNN's ragged ("THD") attention reads, made on the GPU from
 * seg_start, so packed rows (several examples a row) run through cuDNN with each example as its own
 * sequence. Row r's examples take the slots r*K .. r*K+K-1 in order; a row with more than K examples (only
 * trailing ones no loss is taken from, by how K is chosen: qlt_dataset_max_row_examples) has the extra ones
 * merged into its last slot; unused slots get length 0. Stream-ordered, no allocation, graph-capturable. */
#include "cuda/attention_segments.h"
#include "cuda/cuda_common.h"

/* grid: batch rows, one warp each. tok_off [batch*K + 1]: first token of each slot (row-major tokens);
 * q_off / kv_off / stats_off [batch*K + 1] = tok_off * (n_heads*hd, n_kv*hd, n_heads) elements;
 * seq_len [batch*K] tokens. */
static __global__ void attn_segment_table_kernel(const int32_t *__restrict__ seg_start, int seq, int K, int n_heads,
                                                 int n_kv, int hd, int64_t *__restrict__ q_off,
                                                 int64_t *__restrict__ kv_off, int64_t *__restrict__ stats_off,
                                                 int32_t *__restrict__ seq_len, int batch) {
    __shared__ int starts[32];
    const int r = blockIdx.x, lane = threadIdx.x;
    const int32_t *seg = seg_start + (int64_t)r * seq;
    int found = 0; /* examples seen so far in the row (all lanes agree) */
    for (int t0 = 0; t0 < seq && found < K; t0 += 32) {
        const int t = t0 + lane;
        const bool is_start = t < seq && (t == 0 || seg[t] == t);
        const unsigned mask = __ballot_sync(0xffffffffu, is_start);
        const int idx = found + __popc(mask & ((1u << lane) - 1u));
        if (is_start && idx < K) starts[idx] = t;
        found += __popc(mask);
    }
    __syncwarp();
    const int used = found < K ? found : K;
    if (lane < K) {
        const int start = lane < used ? starts[lane] : seq;
        const int end = lane + 1 < used ? starts[lane + 1] : seq;
        const int64_t slot = (int64_t)r * K + lane, tok = (int64_t)r * seq + start;
        q_off[slot] = tok * n_heads * hd;
        kv_off[slot] = tok * n_kv * hd;
        stats_off[slot] = tok * n_heads;
        seq_len[slot] = end - start;
        if (r == batch - 1 && lane == K - 1) { /* the end of the last slot */
            const int64_t all = (int64_t)batch * seq;
            q_off[slot + 1] = all * n_heads * hd;
            kv_off[slot + 1] = all * n_kv * hd;
            stats_off[slot + 1] = all * n_heads;
        }
    }
}

extern "C" void qlt_attn_segment_table(cudaStream_t stream, const int32_t *seg_start, int batch, int seq, int K,
                                       int n_heads, int n_kv, int hd, int64_t *q_off, int64_t *kv_off,
                                       int64_t *stats_off, int32_t *seq_len) {
    attn_segment_table_kernel<<<batch, 32, 0, stream>>>(seg_start, seq, K, n_heads, n_kv, hd, q_off, kv_off,
                                                        stats_off, seq_len, batch);
    CUDA_CHECK_LAUNCH();
}
