/* gemm_probe.cu: a measuring tool for the GPU machine (not part of qlora-train): for Qwen2.5-7B's GEMM shapes
 * at M tokens, times cublasGemmEx's own kernel choice and every kernel cuBLASLt's heuristic offers (without and
 * with a 64 MiB workspace), and says whether each one's output has the same values as cublasGemmEx's (max
 * |difference| 0). Operands are deterministic pseudo-random bf16 in [-0.5, 0.5). Run it under scripts/trace-step.sh's tracer
 * (LD_PRELOAD=libkernel_trace.so QLT_TRACE_OUT=...) to see the kernels' names.
 * PROBE_ENERGY_SECONDS=S: each kernel also runs back to back for S seconds between two reads of the GPU's energy
 * counter (after S seconds of warm-up GEMMs a shape), giving its sustained TFLOP/s and joules a TFLOP under the
 * power limit; PROBE_SHAPES=TEXT keeps the shapes whose name contains TEXT.
 *   gemm_probe [M=2048] [CANDIDATES=8]      (built by scripts/package-gpu.sh into carry/bin) */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "probe_check.h"
#include "probe_energy.h"
#include "probe_operands.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(x) PROBE_CHECK("gemm_probe", x)

/* row-major C [m, n] = op(A) op(B) + beta C, as src/cuda/gemm.cu calls cuBLAS */
struct shape {
    const char *name;
    int ta, tb;
    long n, k, lda, ldb, ldc;
    float beta;
};

int main(int argc, char **argv) {
    const long M = argc > 1 ? atol(argv[1]) : 2048;
    const int want = argc > 2 ? atoi(argv[2]) : 8;
    const shape shapes[] = {
        {"fwd q/o", 0, 1, 3584, 3584, 3584, 3584, 3584, 0},
        {"fwd k/v", 0, 1, 512, 3584, 3584, 3584, 512, 0},
        {"fwd gate/up (adapters folded)", 0, 1, 37888, 3632, 3632, 3632, 37888, 0},
        {"fwd down", 0, 1, 3584, 18944, 18944, 18944, 3584, 0},
        {"bwd q/o dX", 0, 0, 3584, 3584, 3584, 3584, 3584, 0},
        {"bwd k/v dX +=", 0, 0, 3584, 512, 512, 3584, 3584, 1},
        {"bwd gate/up dX", 0, 0, 3584, 37888, 37888, 3584, 3584, 0},
        {"bwd down dX (adapter folded)", 0, 0, 18944, 3632, 3632, 18944, 18944, 0},
    };
    cublasHandle_t h;
    cublasLtHandle_t lt;
    CHECK(cublasCreate(&h));
    CHECK(cublasLtCreate(&lt));
    /* as the backend: split-K partials in fp32, no workspace */
    CHECK(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CHECK(cublasSetWorkspace(h, NULL, 0));
    const size_t ws_bytes = 64 << 20;
    void *ws;
    CHECK(cudaMalloc(&ws, ws_bytes));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    float *dmax;
    CHECK(cudaMalloc(&dmax, 4));
    const double energy_s = getenv("PROBE_ENERGY_SECONDS") ? atof(getenv("PROBE_ENERGY_SECONDS")) : 0;
    const char *only = getenv("PROBE_SHAPES");
    probe_energy meter;
    const bool metered = energy_s > 0 && meter.open();
    if (energy_s > 0 && !metered) printf("gemm_probe: no energy counter (NVML) here: energy columns skipped\n");
    for (const shape &s : shapes) {
        if (only && !strstr(s.name, only)) continue;
        const size_t na = (size_t)M * s.lda, nb = (size_t)(s.tb ? s.n : s.k) * s.ldb, nc = (size_t)M * s.ldc;
        __nv_bfloat16 *A, *B, *C, *C0, *ref;
        CHECK(cudaMalloc(&A, na * 2));
        CHECK(cudaMalloc(&B, nb * 2));
        CHECK(cudaMalloc(&C, nc * 2));
        CHECK(cudaMalloc(&C0, nc * 2));
        CHECK(cudaMalloc(&ref, nc * 2));
        fill_kernel<<<1024, 256>>>(A, na, 1, 1.0f);
        fill_kernel<<<1024, 256>>>(B, nb, 2, 1.0f);
        fill_kernel<<<1024, 256>>>(C0, nc, 3, 1.0f);
        const float one = 1, beta = s.beta;
        const double flop = 2.0 * M * s.n * s.k;
        /* median of 10 timed calls after 3 untimed ones; C restored first (beta != 0 reads it) */
        auto median_ms = [&](auto call) {
            std::vector<float> t;
            CHECK(cudaMemcpy(C, C0, nc * 2, cudaMemcpyDeviceToDevice));
            for (int i = 0; i < 3; i++) call();
            for (int i = 0; i < 10; i++) {
                float ms;
                CHECK(cudaEventRecord(e0));
                call();
                CHECK(cudaEventRecord(e1));
                CHECK(cudaEventSynchronize(e1));
                CHECK(cudaEventElapsedTime(&ms, e0, e1));
                t.push_back(ms);
            }
            std::sort(t.begin(), t.end());
            return t[t.size() / 2];
        };
        auto ex = [&]() {
            CHECK(cublasGemmEx(h, s.tb ? CUBLAS_OP_T : CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.n, M, s.k, &one, B,
                               CUDA_R_16BF, s.ldb, A, CUDA_R_16BF, s.lda, &beta, C, CUDA_R_16BF, s.ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
        };
        /* sustained: back to back for energy_s seconds; returns "TFLOP/s, J/TFLOP, W" (empty without a meter) */
        auto sustained = [&](auto call, double ms_each) {
            char text[96] = "";
            if (!metered) return std::string(text);
            const int n = std::max(1, (int)(energy_s * 1e3 / ms_each));
            double secs, joules;
            meter.sustain(call, n, &secs, &joules);
            const double tflop = flop * n / 1e12;
            snprintf(text, sizeof text, "  sustained %4.0f TFLOP/s %.3f J/TFLOP %3.0f W", tflop / secs, joules / tflop,
                     joules / secs);
            return std::string(text);
        };
        const float t_ex = median_ms(ex);
        if (metered) { /* warm-up: the power limit takes hold over seconds */
            const int n = std::max(1, (int)(energy_s * 1e3 / t_ex));
            for (int i = 0; i < n; i++) ex();
            CHECK(cudaDeviceSynchronize());
        }
        const std::string e_ex = sustained(ex, t_ex);
        CHECK(cudaMemcpy(C, C0, nc * 2, cudaMemcpyDeviceToDevice));
        ex();
        CHECK(cudaMemcpy(ref, C, nc * 2, cudaMemcpyDeviceToDevice));
        printf("== %s  M%ld N%ld K%ld beta %g: cublasGemmEx %.1f us, %.0f TFLOP/s%s\n", s.name, M, s.n, s.k, s.beta,
               t_ex * 1e3, flop / t_ex / 1e9, e_ex.c_str());
        /* column-major, operands swapped: C^T [n, M] = op(B^T) op(A^T) */
        cublasLtMatmulDesc_t op;
        CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t o1 = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N, o2 = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &o1, sizeof o1));
        CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &o2, sizeof o2));
        cublasLtMatrixLayout_t la, lb, lc;
        CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, o1 == CUBLAS_OP_N ? s.n : s.k, o1 == CUBLAS_OP_N ? s.k : s.n, s.ldb));
        CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, o2 == CUBLAS_OP_N ? s.k : M, o2 == CUBLAS_OP_N ? M : s.k, s.lda));
        CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, M, s.ldc));
        for (int with_ws = 0; with_ws < 2; with_ws++) {
            const size_t wsz = with_ws ? ws_bytes : 0;
            cublasLtMatmulPreference_t pref;
            CHECK(cublasLtMatmulPreferenceCreate(&pref));
            CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
            std::vector<cublasLtMatmulHeuristicResult_t> res(want);
            int found = 0;
            CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, want, res.data(), &found));
            for (int i = 0; i < found; i++) {
                const cublasLtMatmulAlgo_t &al = res[i].algo;
                int32_t tile = 0, split = 0;
                size_t got;
                cublasLtMatmulAlgoConfigGetAttribute(&al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
                cublasLtMatmulAlgoConfigGetAttribute(&al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split, &got);
                auto run = [&]() { CHECK(cublasLtMatmul(lt, op, &one, B, la, A, lb, &beta, C, lc, C, lc, &al, ws, wsz, 0)); };
                const float t = median_ms(run);
                CHECK(cudaMemcpy(C, C0, nc * 2, cudaMemcpyDeviceToDevice));
                run();
                float md;
                CHECK(cudaMemset(dmax, 0, 4));
                maxdiff_kernel<<<1024, 256>>>(C, ref, nc, dmax);
                CHECK(cudaMemcpy(&md, dmax, 4, cudaMemcpyDeviceToHost));
                const std::string e = sustained(run, t);
                printf("  workspace %d candidate %d: %7.1f us %4.0f TFLOP/s  tile id %d split-K %d  %s%s\n", with_ws, i,
                       t * 1e3, flop / t / 1e9, tile, split, md == 0 ? "same values" : "other values", e.c_str());
            }
            cublasLtMatmulPreferenceDestroy(pref);
        }
        cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
        cudaFree(A), cudaFree(B), cudaFree(C), cudaFree(C0), cudaFree(ref);
    }
    return 0;
}
