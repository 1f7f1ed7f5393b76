/* gemm_beta_probe.cu: a measuring tool for the GPU machine (not part of qlora-train): what reading a GEMM's
 * output costs. For Qwen2.5-7B's GEMM shapes at M tokens it times cublasGemmEx with beta 0 and with beta 1 (C
 * read in the epilogue), the adapters' K = 48 products (3r at r 16) as a write (beta 0) and as an add (beta 1),
 * and the backward's folded [dy_k | dy_v | du3] . [W_k; W_v; A3] GEMM against the k / v dX GEMMs it replaces:
 * the numbers behind src/cuda/lora.cu's choice of forms for linear_lora_fwd / linear_lora_bwd. Median of 7
 * rounds of 5 launches; operands are deterministic pseudo-random bf16 values in [-0.5, 0.5).
 *   gemm_beta_probe [M=8192]      (built by scripts/package-gpu.sh into carry/bin) */
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "probe_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x) PROBE_CHECK("gemm_beta_probe", x)

typedef __nv_bfloat16 bf16;

static __global__ void pseudo_random_kernel(bf16 *p, size_t count, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = ((unsigned)i * 2654435761u) ^ seed;
        h = (h ^ (h >> 13)) * 0x5bd1e995u;
        p[i] = __float2bfloat16(((h ^ (h >> 15)) & 0xffff) / 65536.0f - 0.5f);
    }
}

/* one timed GEMM: row-major C [M, n] = A [M, k] . op(B) + beta C (B [n, k] when trans_b, else [k, n]) */
struct variant {
    const char *name;
    int trans_b;
    long n, k;
    float beta;
};

int main(int argc, char **argv) {
    const long M = argc > 1 ? atol(argv[1]) : 8192;
    const long widest = 37888, deepest = 37888; /* gate+up's 2I, as N or as K */
    cublasHandle_t blas;
    CHECK(cublasCreate(&blas));
    bf16 *a, *b, *c;
    CHECK(cudaMalloc(&a, sizeof(bf16) * (size_t)(M * deepest)));
    CHECK(cudaMalloc(&b, sizeof(bf16) * (size_t)(widest * 3632)));
    CHECK(cudaMalloc(&c, sizeof(bf16) * (size_t)(M * widest)));
    pseudo_random_kernel<<<1024, 256>>>(a, (size_t)(M * deepest), 1);
    pseudo_random_kernel<<<1024, 256>>>(b, (size_t)(widest * 3632), 2);
    pseudo_random_kernel<<<1024, 256>>>(c, (size_t)(M * widest), 3);
    CHECK(cudaGetLastError());
    const variant variants[] = {
        {"fwd q (N 3584, K 3584) beta 0", 1, 3584, 3584, 0}, {"fwd q beta 1", 1, 3584, 3584, 1},
        {"fwd k/v (N 512, K 3584) beta 0", 1, 512, 3584, 0}, {"fwd k/v beta 1", 1, 512, 3584, 1},
        {"fwd down (N 3584, K 18944) beta 0", 1, 3584, 18944, 0}, {"fwd down beta 1", 1, 3584, 18944, 1},
        {"fwd adapter q/o (N 3584, K 48) beta 1", 1, 3584, 48, 1}, {"fwd adapter q/o beta 0", 1, 3584, 48, 0},
        {"fwd adapter k/v (N 512, K 48) beta 1", 1, 512, 48, 1}, {"fwd adapter k/v beta 0", 1, 512, 48, 0},
        {"bwd q dX (N 3584, K 3584) beta 0", 0, 3584, 3584, 0}, {"bwd q dX beta 1", 0, 3584, 3584, 1},
        {"bwd k/v dX (K 512) beta 1", 0, 3584, 512, 1}, {"bwd k+v+adapters folded (K 1168) beta 0", 0, 3584, 1168, 0},
        {"bwd adapters (K 48) beta 0", 0, 3584, 48, 0}, {"bwd adapters beta 1", 0, 3584, 48, 1},
        {"bwd gate/up dX (K 37888) beta 0", 0, 3584, 37888, 0}, {"bwd gate/up dX beta 1", 0, 3584, 37888, 1},
    };
    const int count = (int)(sizeof variants / sizeof variants[0]), rounds = 7, launches = 5;
    std::vector<std::vector<float>> us(count);
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < count; i++) { /* interleaved, so clock drift under the power cap hits all alike */
            const variant &v = variants[i];
            const float one = 1.0f;
            CHECK(cudaEventRecord(start));
            for (int l = 0; l < launches; l++)
                CHECK(cublasGemmEx(blas, v.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, (int)v.n, (int)M, (int)v.k,
                                   &one, b, CUDA_R_16BF, (int)(v.trans_b ? v.k : v.n), a, CUDA_R_16BF, (int)v.k,
                                   &v.beta, c, CUDA_R_16BF, (int)v.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            CHECK(cudaEventRecord(stop));
            CHECK(cudaEventSynchronize(stop));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, start, stop));
            us[i].push_back(ms * 1000.0f / launches);
        }
    }
    printf("M = %ld tokens\n| GEMM | us (median) | TFLOP/s |\n|---|---|---|\n", M);
    for (int i = 0; i < count; i++) {
        std::sort(us[i].begin(), us[i].end());
        const float median = us[i][rounds / 2];
        printf("| %s | %.1f | %.0f |\n", variants[i].name, median, 2.0 * M * variants[i].n * variants[i].k / median / 1e6);
    }
    return 0;
}
