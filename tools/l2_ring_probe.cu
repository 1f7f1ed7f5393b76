/* l2_ring_probe.cu: a measuring tool for the GPU machine (not part of qlora-train). The step is bound by the
 * GPU's 700 W power limit, and the NF4 dequantization's bf16 weight (written to HBM, read back by the GEMM) is
 * ~26 GB of HBM traffic a 7B step each way. This probe asks whether that traffic can stay in L2 instead: the
 * weight dequantized in row chunks of a few tens of MB into ONE reused buffer, each chunk's GEMM run right after
 * its dequantization (the chunk still in L2; the next chunk overwrites the same lines, so the dirty lines need
 * not reach HBM), optionally with the buffer marked persisting in L2 (cudaAccessPolicyWindow).
 * Shape: Qwen2.5-7B's gate+up forward, y [M, 37888] = x [M, 3584] . W^T, W NF4 (blocksize 64, double quant).
 * For each mode: the time of one whole product (median of 7 rounds of 5), the GPU energy a product (NVML's
 * counter over ~2 s of back-to-back products, after the rounds), and max |y - y_full| over the output.
 *   l2_ring_probe [M=2048] [CHUNK_ROWS=3328,1664,...]   (built by scripts/package-gpu.sh into carry/bin) */
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "common/error.h"
}
#include "cuda/nf4.h"
#include "probe_check.h"
#include "probe_energy.h"
#include "probe_operands.h"

#define CHECK(x) PROBE_CHECK_QLT("l2_ring_probe", x)

static const int64_t ROWS = 37888, COLS = 3584; /* gate+up of Qwen2.5-7B */

/* rows [r0, r0 + rows) of q as an NF4 tensor of its own (r0 * COLS a multiple of 64 * 256 elements) */
static qlt_nf4 row_view(const qlt_nf4 &q, int64_t r0, int64_t rows) {
    qlt_nf4 v = q;
    const int64_t e0 = r0 * COLS;
    v.numel = rows * COLS;
    v.codes = q.codes + e0 / 2;
    v.absmax_q = q.absmax_q + e0 / q.blocksize;
    v.nblocks = v.numel / q.blocksize;
    v.nested_absmax = q.nested_absmax + e0 / q.blocksize / q.nested_blocksize;
    v.nested_nblocks = (v.nblocks + q.nested_blocksize - 1) / q.nested_blocksize;
    return v;
}

struct probe {
    cublasHandle_t h;
    cudaStream_t s;
    qlt_nf4 q;
    __nv_bfloat16 *x, *y, *wfull, *ring;
    int64_t m;
};

/* y [m, ROWS] = x [m, COLS] . W^T for weight rows [r0, r0 + rows) (row-major, as src/cuda/gemm.cu calls it) */
static void gemm_rows(probe &p, const __nv_bfloat16 *w, int64_t r0, int64_t rows) {
    const float one = 1.0f, zero = 0.0f;
    CHECK(cublasGemmEx(p.h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)p.m, (int)COLS, &one, w, CUDA_R_16BF, (int)COLS,
                       p.x, CUDA_R_16BF, (int)COLS, &zero, p.y + r0, CUDA_R_16BF, (int)ROWS, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT));
}

/* one whole product: chunk 0 = the whole weight dequantized, then one GEMM (what the trainer runs) */
static void product(probe &p, int64_t chunk) {
    if (chunk == 0) {
        CHECK(qlt_cuda_nf4_dequantize(&p.q, p.wfull, QLT_DTYPE_BF16, p.s));
        gemm_rows(p, p.wfull, 0, ROWS);
        return;
    }
    for (int64_t r0 = 0; r0 < ROWS; r0 += chunk) {
        const int64_t rows = std::min(chunk, ROWS - r0);
        qlt_nf4 v = row_view(p.q, r0, rows);
        CHECK(qlt_cuda_nf4_dequantize(&v, p.ring, QLT_DTYPE_BF16, p.s));
        gemm_rows(p, p.ring, r0, rows);
    }
}

static void set_persisting(probe &p, size_t bytes) {
    cudaStreamAttrValue a;
    memset(&a, 0, sizeof a);
    a.accessPolicyWindow.base_ptr = p.ring;
    a.accessPolicyWindow.num_bytes = bytes;
    a.accessPolicyWindow.hitRatio = bytes ? 1.0f : 0.0f;
    a.accessPolicyWindow.hitProp = bytes ? cudaAccessPropertyPersisting : cudaAccessPropertyNormal;
    a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(p.s, cudaStreamAttributeAccessPolicyWindow, &a));
    if (!bytes) CHECK(cudaCtxResetPersistingL2Cache());
}

int main(int argc, char **argv) {
    probe p;
    p.m = argc > 1 ? atol(argv[1]) : 2048;
    std::vector<int64_t> chunks = {0};
    std::string list = argc > 2 ? argv[2] : "4736,3328,2368,1664,1024";
    for (size_t i = 0; i < list.size();) {
        size_t j = list.find(',', i);
        chunks.push_back(atol(list.substr(i, j == std::string::npos ? std::string::npos : j - i).c_str()));
        if (j == std::string::npos) break;
        i = j + 1;
    }
    chunks.push_back(0); /* the whole weight again last: the GPU's drift over the run */
    for (int64_t c : chunks)
        if (c < 0 || (c * COLS) % (64 * 256) != 0) {
            fprintf(stderr, "l2_ring_probe: chunk rows %lld: must be a multiple of 32 (whole nested scale blocks)\n",
                    (long long)c);
            return 2;
        }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: L2 %d MB, persisting max %d MB, access window max %d MB; M = %lld tokens\n", prop.name,
           prop.l2CacheSize >> 20, prop.persistingL2CacheMaxSize >> 20, prop.accessPolicyMaxWindowSize >> 20,
           (long long)p.m);
    CHECK(cublasCreate(&p.h));
    CHECK(cudaStreamCreate(&p.s));
    CHECK(cublasSetStream(p.h, p.s));
    int64_t max_chunk = 0;
    for (int64_t c : chunks) max_chunk = std::max(max_chunk, c);
    CHECK(cudaMalloc(&p.x, sizeof(__nv_bfloat16) * p.m * COLS));
    CHECK(cudaMalloc(&p.y, sizeof(__nv_bfloat16) * p.m * ROWS));
    CHECK(cudaMalloc(&p.wfull, sizeof(__nv_bfloat16) * ROWS * COLS));
    CHECK(cudaMalloc(&p.ring, sizeof(__nv_bfloat16) * std::max<int64_t>(max_chunk, 1) * COLS));
    __nv_bfloat16 *yref;
    CHECK(cudaMalloc(&yref, sizeof(__nv_bfloat16) * p.m * ROWS));
    float *dmax;
    CHECK(cudaMalloc(&dmax, sizeof(float)));
    fill_kernel<<<1024, 256, 0, p.s>>>(p.x, (size_t)(p.m * COLS), 11u, 2.0f);
    fill_kernel<<<1024, 256, 0, p.s>>>(p.wfull, (size_t)(ROWS * COLS), 12u, 0.05f);
    size_t ws_bytes = qlt_cuda_nf4_quantize_workspace(ROWS * COLS, 64, 1);
    void *ws;
    CHECK(cudaMalloc(&ws, ws_bytes));
    CHECK(qlt_cuda_nf4_alloc(&p.q, ROWS * COLS, 64, 1));
    CHECK(qlt_cuda_nf4_quantize(&p.q, p.wfull, QLT_DTYPE_BF16, ws, NULL, p.s));
    CHECK(cudaStreamSynchronize(p.s));
    probe_energy ec;
    const bool have_energy = ec.open();
    printf("| mode | chunk rows | chunk MB | us a product | TFLOP/s | J a product | W | max |y - y_full| |\n"
           "|---|---|---|---|---|---|---|---|\n");
    const double flop = 2.0 * p.m * ROWS * COLS;
    for (int persist = 0; persist < 2; persist++) {
        for (int64_t chunk : chunks) {
            if (persist && chunk == 0) continue;
            const size_t ring_bytes = sizeof(__nv_bfloat16) * (size_t)chunk * COLS;
            if (persist) {
                if (ring_bytes > (size_t)prop.persistingL2CacheMaxSize ||
                    ring_bytes > (size_t)prop.accessPolicyMaxWindowSize)
                    continue;
                CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, ring_bytes));
                set_persisting(p, ring_bytes);
            }
            product(p, chunk);
            CHECK(cudaStreamSynchronize(p.s));
            float diff = 0;
            if (chunk == 0) {
                CHECK(cudaMemcpyAsync(yref, p.y, sizeof(__nv_bfloat16) * p.m * ROWS, cudaMemcpyDeviceToDevice, p.s));
            } else {
                CHECK(cudaMemsetAsync(dmax, 0, sizeof(float), p.s));
                maxdiff_kernel<<<1024, 256, 0, p.s>>>(p.y, yref, (size_t)(p.m * ROWS), dmax);
                CHECK(cudaMemcpyAsync(&diff, dmax, sizeof(float), cudaMemcpyDeviceToHost, p.s));
            }
            CHECK(cudaStreamSynchronize(p.s));
            std::vector<double> us;
            cudaEvent_t e0, e1;
            CHECK(cudaEventCreate(&e0));
            CHECK(cudaEventCreate(&e1));
            for (int round = 0; round < 7; round++) {
                CHECK(cudaEventRecord(e0, p.s));
                for (int i = 0; i < 5; i++) product(p, chunk);
                CHECK(cudaEventRecord(e1, p.s));
                CHECK(cudaEventSynchronize(e1));
                float ms = 0;
                CHECK(cudaEventElapsedTime(&ms, e0, e1));
                us.push_back(ms * 1e3 / 5);
            }
            std::sort(us.begin(), us.end());
            const double med = us[us.size() / 2];
            double joules = -1, watts = -1;
            if (have_energy) {
                const int n = std::max(1, (int)(2.0e6 / med));
                double secs, total;
                ec.sustain([&]() { product(p, chunk); }, n, &secs, &total);
                joules = total / n;
                watts = total / secs;
            }
            printf("| %s | %lld | %.1f | %.1f | %.0f | %.4f | %.0f | %.3g |\n",
                   chunk == 0 ? "whole weight" : persist ? "ring, L2-persisting" : "ring", (long long)chunk,
                   ring_bytes / 1e6, med, flop / (med * 1e-6) / 1e12, joules, watts, diff);
            fflush(stdout);
            if (persist) set_persisting(p, 0);
            CHECK(cudaEventDestroy(e0));
            CHECK(cudaEventDestroy(e1));
        }
    }
    return 0;
}
