/* attention_wgmma_probe.cu: a measuring tool for the GPU machine (not part of qlora-train): the Hopper (wgmma)
 * attention kernels for head_dim 128 (tools/attention_fwd_wgmma.cu, tools/attention_bwd_wgmma.cu) against the
 * product's own mma.sync kernels (src/cuda/attention.cu, attention_bwd_fused.cu: what the CUDA backend runs
 * where cuDNN's fused attention does not), on the same inputs: the largest difference between the two sides'
 * outputs relative to the product's largest magnitude (both round to bf16 from fp32 accumulations in different
 * orders, so they agree to a few bf16 ulps, not bit for bit), and the median time of each.
 *   attention_wgmma_probe [B=4] [EXAMPLE_LEN=0]   (B rows of 2048 tokens, 28 query / 4 kv heads; EXAMPLE_LEN > 0
 *   packs examples of that many tokens into each row)   (built by scripts/package-gpu.sh into carry/bin) */
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attention_bwd_wgmma.h"
#include "attention_fwd_wgmma.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_common.h"
#include "probe_check.h"

#define CHECK(x) PROBE_CHECK("attention_wgmma_probe", x)
#define CHECK_QLT(x) PROBE_CHECK_QLT("attention_wgmma_probe", x)

/* dk / dv [rows, n_kv, hd] = the sum over each GQA group's query heads of the partials [rows, n_heads, hd] */
static __global__ void group_sum_kernel(bf16 *dk, bf16 *dv, const bf16 *pdk, const bf16 *pdv, long rows, int n_heads,
                                        int n_kv, int hd) {
    const int group = n_heads / n_kv;
    const long total = rows * n_kv * hd;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const long row = i / ((long)n_kv * hd);
        const int rem = (int)(i - row * n_kv * hd), kvh = rem / hd, e = rem - kvh * hd;
        float sk = 0.0f, sv = 0.0f;
        for (int j = 0; j < group; j++) {
            const long at = (row * n_heads + (long)kvh * group + j) * hd + e;
            sk += __bfloat162float(pdk[at]);
            sv += __bfloat162float(pdv[at]);
        }
        dk[i] = __float2bfloat16(sk);
        dv[i] = __float2bfloat16(sv);
    }
}

static __global__ void dq_from_acc_kernel(bf16 *dq, const float *acc, long count, float scale) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x)
        dq[i] = __float2bfloat16(acc[i] * scale);
}

static std::vector<float> to_host(const bf16 *d, long count) {
    std::vector<bf16> b((size_t)count);
    CHECK(cudaMemcpy(b.data(), d, sizeof(bf16) * (size_t)count, cudaMemcpyDeviceToHost));
    std::vector<float> f((size_t)count);
    for (long i = 0; i < count; i++) f[(size_t)i] = __bfloat162float(b[(size_t)i]);
    return f;
}

/* max |a - b| / max |a| */
static double rel_diff(const bf16 *a, const bf16 *b, long count) {
    std::vector<float> x = to_host(a, count), y = to_host(b, count);
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); i++) {
        num = std::max(num, (double)std::fabs(x[i] - y[i]));
        den = std::max(den, (double)std::fabs(x[i]));
    }
    return den > 0 ? num / den : num;
}

template <typename F> static double median_ms(cudaStream_t s, F run) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int it = 0; it < 12; it++) {
        CHECK(cudaEventRecord(a, s));
        run();
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        if (it >= 2) t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main(int argc, char **argv) {
    const int B = argc > 1 ? atoi(argv[1]) : 4, example = argc > 2 ? atoi(argv[2]) : 0;
    const int S = 2048, H = 28, KV = 4, HD = 128;
    const long n = (long)B * S, qn = n * H * HD, kn = n * KV * HD;
    const float scale = 1.0f / sqrtf((float)HD);
    qlt_backend *be = qlt_backend_cuda_create(0);
    if (!be) CHECK_QLT(-1);
    if (!qlt_attn_fwd_wgmma_usable(HD) || !qlt_attn_bwd_wgmma_usable(HD)) {
        fprintf(stderr, "attention_wgmma_probe: the wgmma kernels need a compute capability 9.0 device\n");
        return 1;
    }
    be->attention_own = 1; /* the product's own kernels, never cuDNN's */
    cudaStream_t s = (cudaStream_t)qlt_cuda_stream(be);
    bf16 *q, *k, *v, *dout, *o[2], *dq[2], *dk[2], *dv[2], *pdk, *pdv;
    float *lse[2], *acc, *scratch;
    int32_t *seg;
    const size_t scratch_bytes = be->attention_bwd_scratch_bytes(be, n, H, KV, HD);
    CHECK(cudaMalloc(&q, 2 * qn) | cudaMalloc(&k, 2 * kn) | cudaMalloc(&v, 2 * kn) | cudaMalloc(&dout, 2 * qn));
    for (int side = 0; side < 2; side++)
        CHECK(cudaMalloc(&o[side], 2 * qn) | cudaMalloc(&dq[side], 2 * qn) | cudaMalloc(&dk[side], 2 * kn) |
              cudaMalloc(&dv[side], 2 * kn) | cudaMalloc(&lse[side], 4 * n * H));
    CHECK(cudaMalloc(&pdk, 2 * qn) | cudaMalloc(&pdv, 2 * qn) | cudaMalloc(&acc, 4 * qn) |
          cudaMalloc(&scratch, scratch_bytes) | cudaMalloc(&seg, 4 * n));
    qlt_cuda_fill_random_bf16(s, q, qn, 1);
    qlt_cuda_fill_random_bf16(s, k, kn, 2);
    qlt_cuda_fill_random_bf16(s, v, kn, 3);
    qlt_cuda_fill_random_bf16(s, dout, qn, 4);
    std::vector<int32_t> hseg((size_t)n);
    for (long t = 0; t < n; t++) {
        const long i = t % S;
        hseg[(size_t)t] = example > 0 ? (int32_t)(i - i % example) : 0;
    }
    CHECK(cudaMemcpy(seg, hseg.data(), 4 * n, cudaMemcpyHostToDevice));

    /* the product: forward, then the backward, which leaves D = rowsum(dO O) at the start of its scratch */
    auto prod_fwd = [&] { be->attention_fwd(be, o[0], lse[0], q, k, v, seg, B, S, H, KV, HD, scale); };
    auto prod_bwd = [&] {
        be->attention_bwd(be, dq[0], dk[0], dv[0], scratch, dout, o[0], lse[0], q, k, v, seg, B, S, H, KV, HD, scale);
    };
    auto wg_fwd = [&] { qlt_attn_fwd_wgmma(s, o[1], lse[1], q, k, v, seg, B, S, H, KV, scale); };
    auto wg_bwd = [&] {
        CHECK(cudaMemsetAsync(acc, 0, 4 * qn, s));
        qlt_attn_bwd_wgmma(s, acc, dk[1], dv[1], pdk, pdv, scratch, dout, lse[1], q, k, v, seg, B, S, H, KV, scale);
        dq_from_acc_kernel<<<2048, 256, 0, s>>>(dq[1], acc, qn, scale);
        group_sum_kernel<<<2048, 256, 0, s>>>(dk[1], dv[1], pdk, pdv, n, H, KV, HD);
    };
    auto wg_bwd_det = [&] {
        qlt_attn_bwd_wgmma_deterministic(s, dq[1], dk[1], dv[1], pdk, pdv, scratch, dout, lse[1], q, k, v, seg, B, S,
                                         H, KV, scale);
        group_sum_kernel<<<2048, 256, 0, s>>>(dk[1], dv[1], pdk, pdv, n, H, KV, HD);
    };
    const double t_prod_fwd = median_ms(s, prod_fwd), t_wg_fwd = median_ms(s, wg_fwd);
    const double t_prod_bwd = median_ms(s, prod_bwd), t_wg_bwd = median_ms(s, wg_bwd);
    CHECK(cudaStreamSynchronize(s));
    const double e_out = rel_diff(o[0], o[1], qn), e_dq = rel_diff(dq[0], dq[1], qn), e_dk = rel_diff(dk[0], dk[1], kn),
                 e_dv = rel_diff(dv[0], dv[1], kn);
    be->deterministic = 1;
    const double t_prod_det = median_ms(s, prod_bwd), t_wg_det = median_ms(s, wg_bwd_det);
    CHECK(cudaStreamSynchronize(s));
    const double e_dq_det = rel_diff(dq[0], dq[1], qn);
    printf("B%d S%d H%d/%d hd%d %s\n", B, S, H, KV, HD, example > 0 ? "packed" : "causal");
    printf("| part | product mma.sync ms | wgmma ms | wgmma / product | max rel diff |\n|---|---|---|---|---|\n");
    printf("| forward | %.3f | %.3f | %.2fx | out %.2e |\n", t_prod_fwd, t_wg_fwd, t_wg_fwd / t_prod_fwd, e_out);
    printf("| backward | %.3f | %.3f | %.2fx | dq %.2e dk %.2e dv %.2e |\n", t_prod_bwd, t_wg_bwd,
           t_wg_bwd / t_prod_bwd, e_dq, e_dk, e_dv);
    printf("| backward, deterministic | %.3f | %.3f | %.2fx | dq %.2e |\n", t_prod_det, t_wg_det, t_wg_det / t_prod_det,
           e_dq_det);
    const double worst = std::max(std::max(e_out, e_dq), std::max(std::max(e_dk, e_dv), e_dq_det));
    be->destroy(be);
    return worst <= 2e-2 ? 0 : 3; /* the two sides' outputs differ by more than bf16 rounding explains */
}
