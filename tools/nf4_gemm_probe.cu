/* nf4_gemm_probe.cu: a measuring tool for the GPU machine (not part of qlora-train): on Qwen2.5-7B's frozen
 * weight shapes at M tokens, compares the NF4-dequantizing GEMM (tools/nf4_gemm.cu) with what the trainer
 * runs otherwise, the dequantization kernel + cublasGemmEx, for values and time.
 *   values: both against an fp32-output cuBLAS GEMM of the same dequantized weight; prints each path's
 *           max |error| relative to max |reference| (the fused path must not be worse than 1.5x cuBLAS's).
 *   time:   median of 5 alternating rounds of 10 launches each, microseconds a GEMM and TFLOP/s.
 * Weights: random bf16 quantized by the trainer's own NF4 quantizer (double quantization).
 *   nf4_gemm_probe [M=2048] [BN=0 (pick) | 128 | 256 | -1: the register-A forward, tools/nf4_gemm_rs.cu]
 *   (built by scripts/package-gpu.sh into carry/bin)
 * PROBE_ENERGY_SECONDS=S: each path of each shape also runs back to back for S seconds (after S seconds of
 * warm-up) between two reads of the GPU's energy counter: sustained microseconds and joules a product, for
 * dequantize + cuBLAS, the dequantization alone, cuBLAS alone (on the already dequantized weight) and fused.
 * PROBE_ONLY=TEXT: only the shapes whose name contains TEXT (e.g. "gate+up").
 * Exit status 1 when a shape's values fail the check. */
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "common/error.h"
}
#include "cuda/nf4.h"
#include "nf4_gemm.h"
#include "probe_check.h"
#include "probe_energy.h"
#include "probe_operands.h"

#define CHECK(x) PROBE_CHECK_QLT("nf4_gemm_probe", x)

/* out[0] = max |a - ref|, out[1] = max |ref| (float bits: non-negative floats order like ints) */
template <typename T>
static __global__ void err_kernel(const T *a, const float *ref, size_t n, float *out) {
    float e = 0, r = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = (float)a[i];
        e = fmaxf(e, fabsf(v - ref[i]));
        r = fmaxf(r, fabsf(ref[i]));
    }
    atomicMax((int *)out, __float_as_int(e));
    atomicMax((int *)out + 1, __float_as_int(r));
}

struct shape {
    const char *name;
    bool bwd;
    int parts;
    long rows[2];
    long cols;
    float beta;
};

static cublasHandle_t blas;

/* the GEMM of the unfused path on the dequantized stack wbuf, as src/cuda/gemm.cu calls it */
static void gemm_only(const shape &s, const __nv_bfloat16 *wbuf, long R, long M, const __nv_bfloat16 *in, void *out,
                      cudaDataType_t out_type, float beta) {
    const float one = 1.0f;
    if (!s.bwd) /* y [M, R] = x [M, cols] W^T */
        CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)R, (int)M, (int)s.cols, &one, wbuf, CUDA_R_16BF,
                           (int)s.cols, in, CUDA_R_16BF, (int)s.cols, &beta, out, out_type, (int)R, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
    else /* dx [M, cols] = beta dx + dy [M, R] W */
        CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)s.cols, (int)M, (int)R, &one, wbuf, CUDA_R_16BF,
                           (int)s.cols, in, CUDA_R_16BF, (int)R, &beta, out, out_type, (int)s.cols, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
}

/* the trainer's unfused path: dequantize the stack, one cuBLAS GEMM */
static void unfused(const shape &s, qlt_nf4 *const *q, __nv_bfloat16 *wbuf, long R, long M, const __nv_bfloat16 *in,
                    void *out, cudaDataType_t out_type, float beta) {
    __nv_bfloat16 *dst = wbuf;
    for (int i = 0; i < s.parts; i++) {
        CHECK(qlt_cuda_nf4_dequantize(q[i], dst, QLT_DTYPE_BF16, NULL));
        dst += s.rows[i] * s.cols;
    }
    gemm_only(s, wbuf, R, M, in, out, out_type, beta);
}

/* the register-A kernel's copies of the weights: the same arrays, the codes in its layout */
static qlt_nf4 rs_q[2];

static void fused(const shape &s, qlt_nf4 *const *q, long R, long M, const __nv_bfloat16 *in, __nv_bfloat16 *out, int bn) {
    const qlt_nf4 *qs[2] = {q[0], q[1]};
    const qlt_nf4 *rq[2] = {&rs_q[0], &rs_q[1]};
    if (bn < 0) CHECK(qlt_cuda_nf4_gemm_rs_fwd(out, R, in, s.cols, M, rq, s.rows, s.parts, s.cols, NULL));
    else if (!s.bwd) CHECK(qlt_cuda_nf4_gemm_fwd(out, R, in, s.cols, M, qs, s.rows, s.parts, s.cols, bn, NULL));
    else CHECK(qlt_cuda_nf4_gemm_bwd(out, s.cols, in, R, M, qs, s.rows, s.parts, s.cols, s.beta, bn, NULL));
}

int main(int argc, char **argv) {
    const long M = argc > 1 ? atol(argv[1]) : 2048;
    const int bn = argc > 2 ? atoi(argv[2]) : 0;
    const shape shapes[] = {
        {"fwd q/o", false, 1, {3584, 0}, 3584, 0},
        {"fwd k/v", false, 1, {512, 0}, 3584, 0},
        {"fwd gate+up", false, 2, {18944, 18944}, 3584, 0},
        {"fwd down", false, 1, {3584, 0}, 18944, 0},
        {"bwd q/o dX", true, 1, {3584, 0}, 3584, 0},
        {"bwd k/v dX +=", true, 1, {512, 0}, 3584, 1},
        {"bwd gate+up dX", true, 2, {18944, 18944}, 3584, 0},
        {"bwd down dX", true, 1, {3584, 0}, 18944, 0},
    };
    CHECK(cublasCreate(&blas));
    const double energy_s = getenv("PROBE_ENERGY_SECONDS") ? atof(getenv("PROBE_ENERGY_SECONDS")) : 0;
    probe_energy meter;
    const bool metered = energy_s > 0 && meter.open();
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    int failed = 0;
    printf("%-16s %6s %6s %6s | %10s %10s %6s | %7s %9s %8s %6s %7s %7s\n", "shape", "M", "N", "K", "err cuBLAS",
           "err fused", "check", "us deq", "us deq+blas", "us fused", "speed", "TF/s", "TF/s bl");
    const char *only = getenv("PROBE_ONLY");
    for (const shape &s : shapes) {
        if (bn < 0 && s.bwd) continue; /* the register-A kernel is forward only */
        if (only && !strstr(s.name, only)) continue;
        const long R = s.rows[0] + (s.parts > 1 ? s.rows[1] : 0);
        const long in_cols = s.bwd ? R : s.cols, out_cols = s.bwd ? s.cols : R;
        qlt_nf4 q[2];
        qlt_nf4 *qp[2] = {&q[0], &q[1]};
        __nv_bfloat16 *src, *wbuf, *in, *out_a, *out_b, *init;
        float *ref, *errs;
        CHECK(cudaMalloc(&src, sizeof(__nv_bfloat16) * R * s.cols));
        CHECK(cudaMalloc(&wbuf, sizeof(__nv_bfloat16) * R * s.cols));
        CHECK(cudaMalloc(&in, sizeof(__nv_bfloat16) * M * in_cols));
        CHECK(cudaMalloc(&out_a, sizeof(__nv_bfloat16) * M * out_cols));
        CHECK(cudaMalloc(&out_b, sizeof(__nv_bfloat16) * M * out_cols));
        CHECK(cudaMalloc(&init, sizeof(__nv_bfloat16) * M * out_cols));
        CHECK(cudaMalloc(&ref, sizeof(float) * M * out_cols));
        CHECK(cudaMalloc(&errs, sizeof(float) * 4));
        fill_kernel<<<1024, 256>>>(in, M * in_cols, 7u, 2.0f);
        fill_kernel<<<1024, 256>>>(init, M * out_cols, 11u, 4.0f);
        for (int i = 0; i < s.parts; i++) {
            fill_kernel<<<1024, 256>>>(src, s.rows[i] * s.cols, 3u + 17u * i, 0.1f);
            size_t ws_bytes = qlt_cuda_nf4_quantize_workspace(s.rows[i] * s.cols, 64, 1);
            void *ws;
            CHECK(cudaMalloc(&ws, ws_bytes));
            CHECK(qlt_cuda_nf4_alloc(&q[i], s.rows[i] * s.cols, 64, 1));
            CHECK(qlt_cuda_nf4_quantize(&q[i], src, QLT_DTYPE_BF16, ws, NULL, NULL));
            CHECK(cudaFree(ws));
            rs_q[i] = q[i];
            if (bn < 0) {
                CHECK(cudaMalloc(&rs_q[i].codes, (size_t)(s.rows[i] * s.cols / 2)));
                CHECK(qlt_cuda_nf4_gemm_rs_layout(rs_q[i].codes, q[i].codes, s.rows[i] * s.cols, NULL));
            }
        }
        /* values */
        float beta = s.beta;
        CHECK(cudaMemset(ref, 0, sizeof(float) * M * out_cols));
        if (beta != 0) {
            /* ref starts as init in fp32 */
            std::vector<__nv_bfloat16> h(M * out_cols);
            std::vector<float> hf(M * out_cols);
            CHECK(cudaMemcpy(h.data(), init, sizeof(__nv_bfloat16) * h.size(), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < h.size(); i++) hf[i] = __bfloat162float(h[i]);
            CHECK(cudaMemcpy(ref, hf.data(), sizeof(float) * hf.size(), cudaMemcpyHostToDevice));
        }
        unfused(s, qp, wbuf, R, M, in, ref, CUDA_R_32F, beta);
        CHECK(cudaMemcpy(out_a, init, sizeof(__nv_bfloat16) * M * out_cols, cudaMemcpyDeviceToDevice));
        CHECK(cudaMemcpy(out_b, init, sizeof(__nv_bfloat16) * M * out_cols, cudaMemcpyDeviceToDevice));
        unfused(s, qp, wbuf, R, M, in, out_a, CUDA_R_16BF, beta);
        fused(s, qp, R, M, in, out_b, bn);
        CHECK(cudaMemset(errs, 0, sizeof(float) * 4));
        err_kernel<<<1024, 256>>>(out_a, ref, M * out_cols, errs);
        err_kernel<<<1024, 256>>>(out_b, ref, M * out_cols, errs + 2);
        CHECK(cudaDeviceSynchronize());
        float he[4];
        CHECK(cudaMemcpy(he, errs, sizeof he, cudaMemcpyDeviceToHost));
        const float ea = he[0] / he[1], eb = he[2] / he[3];
        const bool ok = eb <= 1.5f * ea + 1e-6f && he[3] > 0;
        failed += !ok;
        /* the paths measured: dequantize alone, dequantize + cuBLAS, fused, cuBLAS alone (on the weight wbuf holds) */
        auto deq = [&]() {
            for (int i = 0; i < s.parts; i++) CHECK(qlt_cuda_nf4_dequantize(&q[i], wbuf, QLT_DTYPE_BF16, NULL));
        };
        auto unf = [&]() { unfused(s, qp, wbuf, R, M, in, out_a, CUDA_R_16BF, beta); };
        auto fus = [&]() { fused(s, qp, R, M, in, out_b, bn); };
        auto gemm = [&]() { gemm_only(s, wbuf, R, M, in, out_a, CUDA_R_16BF, beta); };
        /* time: 5 alternating rounds of 10 launches of the first three, microseconds a launch */
        auto ten_launches_us = [&](auto call) {
            float ms;
            CHECK(cudaEventRecord(e0));
            for (int r = 0; r < 10; r++) call();
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            return ms * 100;
        };
        std::vector<float> t_deq, t_unf, t_fus;
        for (int round = 0; round < 5; round++) {
            t_deq.push_back(ten_launches_us(deq));
            t_unf.push_back(ten_launches_us(unf));
            t_fus.push_back(ten_launches_us(fus));
        }
        std::sort(t_deq.begin(), t_deq.end());
        std::sort(t_unf.begin(), t_unf.end());
        std::sort(t_fus.begin(), t_fus.end());
        if (metered) {
            /* sustained: us and J a product, each path back to back for energy_s seconds after a warm-up */
            auto sustain = [&](auto call, float us_each, double *us, double *joules) {
                const int n = std::max(1, (int)(energy_s * 1e6 / us_each));
                double secs, total;
                meter.sustain(call, n, &secs, &total);
                *us = secs * 1e6 / n, *joules = total / n;
            };
            double us_u, j_u, us_f, j_f, us_d, j_d, us_g, j_g;
            sustain(unf, t_unf[2], &us_u, &j_u); /* warm-up */
            sustain(unf, t_unf[2], &us_u, &j_u);
            sustain(deq, t_deq[2], &us_d, &j_d);
            sustain(gemm, t_unf[2] - t_deq[2], &us_g, &j_g);
            sustain(fus, t_fus[2], &us_f, &j_f);
            printf("%-16s sustained: dequantize + cuBLAS %.1f us %.4f J, dequantize alone %.1f us %.4f J, cuBLAS alone "
                   "%.1f us %.4f J, fused %.1f us %.4f J (energy %.2fx; fused over cuBLAS alone %.1f pJ a weight value)\n",
                   s.name, us_u, j_u, us_d, j_d, us_g, j_g, us_f, j_f, j_f / j_u,
                   (j_f - j_g) / ((double)R * s.cols) * 1e12);
        }
        const double flop = 2.0 * M * R * s.cols;
        printf("%-16s %6ld %6ld %6ld | %10.2e %10.2e %6s | %7.1f %9.1f %8.1f %5.2fx %7.0f %7.0f\n", s.name, M, out_cols,
               in_cols, ea, eb, ok ? "ok" : "FAILED", t_deq[2], t_unf[2], t_fus[2], t_unf[2] / t_fus[2],
               flop / (t_fus[2] * 1e-6) / 1e12, flop / ((t_unf[2] - t_deq[2]) * 1e-6) / 1e12);
        fflush(stdout);
        for (int i = 0; i < s.parts; i++) {
            if (bn < 0) cudaFree(rs_q[i].codes);
            qlt_cuda_nf4_free(&q[i]);
        }
        cudaFree(src), cudaFree(wbuf), cudaFree(in), cudaFree(out_a), cudaFree(out_b), cudaFree(init), cudaFree(ref),
            cudaFree(errs);
    }
    printf("(us deq: the dequantization alone; speed: (dequantize + cuBLAS) / fused; TF/s: the fused kernel's, TF/s bl: "
           "cuBLAS's without the dequantization)\n");
    printf("%s\n", failed ? "nf4_gemm_probe: FAILED" : "nf4_gemm_probe: all shapes ok");
    return failed ? 1 : 0;
}
