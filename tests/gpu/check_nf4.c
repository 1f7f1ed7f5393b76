/* check_nf4.c: NF4 on the GPU against the CPU reference (identical bytes, identical dequantized values),
 * the device's rcp.approx against the CPU's emulation of it, dequantize bandwidth against a
 * device-to-device copy measured in the same run, and, when scripts/nf4_check_bnb.py has written its
 * files, bitsandbytes' own bytes (QLT_NF4_BNB_FILE) and a checkpoint saved by bitsandbytes
 * (QLT_NF4_BNB_CKPT). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "cuda/nf4.h"
#include "formats/bnb_checkpoint.h"
#include "formats/safetensors.h"
#include "gpu_check.h"
#include "nf4/nf4.h"

#define CK(stmt)                                                                                        \
    do {                                                                                                \
        cudaError_t e_ = (stmt);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            char why_[256];                                                                             \
            snprintf(why_, sizeof why_, "%s failed at %s:%d: %s", #stmt, __FILE__, __LINE__,            \
                     cudaGetErrorString(e_));                                                           \
            gpu_check_fail("nf4", why_);                                                                \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

static void *dalloc(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static int64_t count_diff(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    int64_t d = 0;
    for (size_t i = 0; i < n; i++) d += x[i] != y[i];
    return d;
}

/* Bytes of every array two host qlt_nf4 hold that differ (the offset counts as 4 bytes). */
static int64_t nf4_diff(const qlt_nf4 *a, const qlt_nf4 *b) {
    int64_t d = count_diff(a->codes, b->codes, (size_t)(a->numel + 1) / 2);
    if (a->double_quant) {
        d += count_diff(a->absmax_q, b->absmax_q, (size_t)a->nblocks);
        d += count_diff(a->nested_absmax, b->nested_absmax, (size_t)a->nested_nblocks * 4);
        d += count_diff(&a->offset, &b->offset, 4);
    } else {
        d += count_diff(a->absmax, b->absmax, (size_t)a->nblocks * 4);
    }
    return d;
}

/* ---- rcp.approx.ftz vs the CPU emulation, every mantissa ---- */

void check_nf4_rcp(void) {
    const int64_t n = 1 << 23;
    const int exps[] = {127, 127 - 40, 127 + 40, 1, 253}; /* [1,2), tiny, large, smallest/largest normal */
    float *h_in = malloc(n * sizeof(float)), *h_out = malloc(n * sizeof(float));
    float *d_in = dalloc(n * sizeof(float)), *d_out = dalloc(n * sizeof(float));
    int8_t *delta0 = calloc(n, 1);
    int64_t exceptions = 0, emu_mismatch = 0, exp_dependent = 0;
    for (size_t k = 0; k < sizeof exps / sizeof *exps; k++) {
        for (int64_t m = 0; m < n; m++) {
            uint32_t b = (uint32_t)exps[k] << 23 | (uint32_t)m;
            memcpy(&h_in[m], &b, 4);
        }
        CK(cudaMemcpy(d_in, h_in, n * sizeof(float), cudaMemcpyHostToDevice));
        if (qlt_cuda_nf4_rcp(d_out, d_in, n, NULL) != 0) {
            gpu_check_fail("nf4_rcp", qlt_error());
            return;
        }
        CK(cudaMemcpy(h_out, d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
        for (int64_t m = 0; m < n; m++) {
            float ieee = 1.0f / h_in[m], emu = qlt_nf4_bnb_rcp(h_in[m]);
            uint32_t gb, ib, eb;
            memcpy(&gb, &h_out[m], 4);
            memcpy(&ib, &ieee, 4);
            memcpy(&eb, &emu, 4);
            if (gb != eb) emu_mismatch++;
            if (fabsf(ieee) < 1.17549435e-38f || isinf(ieee)) continue; /* flushed: no mantissa to compare */
            int64_t delta = (int64_t)gb - (int64_t)ib;
            if (k == 0) {
                delta0[m] = (int8_t)delta;
                exceptions += delta != 0;
            } else if (delta != delta0[m] && gb != 0) {
                exp_dependent++;
            }
        }
    }
    gpu_check_perf("nf4_rcp rcp.approx!=IEEE", "2^23 mantissas", (double)exceptions, "mantissas");
    gpu_check_row("nf4_rcp exponent-dependent", "5 exponents", (double)exp_dependent, 0, "values");
    gpu_check_row("nf4_rcp CPU emulation", "5 x 2^23 values", (double)emu_mismatch, 0, "mismatches");
    const char *dir = getenv("QLT_NF4_RCP_OUT");
    if (emu_mismatch && dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/nf4_rcp_table.c", dir);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "/* nf4_rcp_table.c: where the GPU's rcp.approx.ftz.f32 (the instruction bitsandbytes' "
                       "fast-math kernels\n * use for 1/absmax) differs from the correctly rounded 1.0f/x, so "
                       "qlt_nf4_bnb_rcp reproduces it on the\n * host. Its result depends only on the input's "
                       "mantissa (the exponent just shifts it); each entry is\n * (mantissa << 8) | "
                       "(uint8_t)(int8_t)delta_ulps, sorted by mantissa.\n *\n * Generated on the GPU by "
                       "`QLT_NF4_RCP_OUT=dir qlt_gpu_check nf4_rcp`; the input of scripts/nf4_rcp_pack.py, which "
                       "packs it into\n * src/nf4/nf4_rcp_table.c. */\n#include <stdint.h>\n\n"
                       "const uint32_t qlt_nf4_rcp_exceptions[] = {\n");
            int64_t c = 0;
            for (int64_t m = 0; m < n; m++)
                if (delta0[m]) fprintf(f, "0x%08xu,%s", (uint32_t)m << 8 | (uint8_t)delta0[m], ++c % 8 ? " " : "\n");
            fprintf(f, "%s};\nconst int qlt_nf4_rcp_n_exceptions = %lld;\n", exceptions ? "" : "0", (long long)exceptions);
            fclose(f);
            printf("nf4_rcp: wrote %s (%lld exceptions): pack it with python3 scripts/nf4_rcp_pack.py %s "
                   "src/nf4/nf4_rcp_table.c\n", path, (long long)exceptions, path);
        }
    }
    free(h_in);
    free(h_out);
    free(delta0);
    cudaFree(d_in);
    cudaFree(d_out);
}

/* the CPU reference's dequantization of q into out (n elements of dtype: bf16, f16 or f32) */
static void cpu_dequantize(const qlt_nf4 *q, void *out, qlt_dtype dtype) {
    if (dtype == QLT_DTYPE_BF16) qlt_nf4_dequantize_bf16(q, out);
    else if (dtype == QLT_DTYPE_F16) qlt_nf4_dequantize_f16(q, out);
    else qlt_nf4_dequantize_f32(q, out);
}

/* ---- quantize / dequantize: GPU vs CPU ---- */

typedef enum { DIST_NORMAL, DIST_HEAVY, DIST_ZERO_BLOCKS, DIST_TINY } dist;

static void fill(float *x, int64_t n, dist d, uint64_t seed) {
    gpu_rng r = {seed};
    for (int64_t i = 0; i < n; i++) {
        float z = gpu_rng_normal(&r);
        switch (d) {
        case DIST_NORMAL: x[i] = 0.02f * z; break;
        case DIST_HEAVY: x[i] = z / sqrtf(fmaxf(-logf(fmaxf(gpu_rng_uniform(&r), 1e-30f)), 1e-12f)); break;
        case DIST_ZERO_BLOCKS: x[i] = ((i / 64) % 5 == 0 || (i / 4096) % 7 == 3) ? 0.0f : z; break;
        case DIST_TINY: x[i] = 1e-39f * z * (float)(i % 3); break; /* subnormals: fast-math flushes */
        }
    }
}

static void quantize_case(const char *name, int64_t rows, int64_t cols, int blocksize, int dq, qlt_dtype dtype,
                          dist d) {
    const int64_t n = rows * cols;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lld bs%d dq%d %s", (long long)rows, (long long)cols, blocksize, dq,
             qlt_dtype_name(dtype));
    float *x = malloc((size_t)n * sizeof(float));
    fill(x, n, d, 1234 + (uint64_t)n);
    size_t esz = qlt_dtype_size(dtype);
    void *hx = malloc((size_t)n * esz);
    qlt_convert_from_f32(hx, dtype, x, (size_t)n);
    qlt_convert_to_f32(x, hx, dtype, (size_t)n); /* the values the GPU sees */
    qlt_nf4 cpu, gpu, back;
    qlt_nf4_alloc_host(&cpu, n, blocksize, dq);
    qlt_nf4_alloc_host(&back, n, blocksize, dq);
    qlt_nf4_quantize_f32(&cpu, x);
    if (qlt_cuda_nf4_alloc(&gpu, n, blocksize, dq) != 0) {
        gpu_check_fail(name, qlt_error());
        return;
    }
    void *dx = dalloc((size_t)n * esz);
    CK(cudaMemcpy(dx, hx, (size_t)n * esz, cudaMemcpyHostToDevice));
    size_t ws_bytes = qlt_cuda_nf4_quantize_workspace(n, blocksize, dq);
    void *ws = ws_bytes ? dalloc(ws_bytes) : NULL;
    CK(cudaMemset(gpu.codes, 0xAB, (size_t)(n + 1) / 2)); /* poisoned */
    if (qlt_cuda_nf4_quantize(&gpu, dx, dtype, ws, NULL, NULL) != 0 || qlt_cuda_nf4_download(&back, &gpu) != 0) {
        gpu_check_fail(name, qlt_error());
        return;
    }
    CK(cudaDeviceSynchronize());
    char row[64];
    snprintf(row, sizeof row, "%s quantize bytes", name);
    gpu_check_row(row, shape, (double)nf4_diff(&cpu, &back), 0, "bytes differ");
    /* dequantize on both sides, all three output types */
    const qlt_dtype outs[3] = {QLT_DTYPE_BF16, QLT_DTYPE_F16, QLT_DTYPE_F32};
    void *dout = dalloc((size_t)n * 4);
    void *hg = malloc((size_t)n * 4), *hc = malloc((size_t)n * 4);
    for (int k = 0; k < 3; k++) {
        size_t osz = qlt_dtype_size(outs[k]);
        CK(cudaMemset(dout, 0xFF, (size_t)n * osz));
        if (qlt_cuda_nf4_dequantize(&gpu, dout, outs[k], NULL) != 0) {
            gpu_check_fail(name, qlt_error());
            return;
        }
        CK(cudaMemcpy(hg, dout, (size_t)n * osz, cudaMemcpyDeviceToHost));
        cpu_dequantize(&cpu, hc, outs[k]);
        snprintf(row, sizeof row, "%s dequant %s", name, qlt_dtype_name(outs[k]));
        gpu_check_row(row, shape, (double)count_diff(hg, hc, (size_t)n * osz), 0, "bytes differ");
    }
    free(x);
    free(hx);
    free(hg);
    free(hc);
    qlt_nf4_free_host(&cpu);
    qlt_nf4_free_host(&back);
    qlt_cuda_nf4_free(&gpu);
    cudaFree(dx);
    cudaFree(ws);
    cudaFree(dout);
}

void check_nf4_quantize(void) {
    quantize_case("nf4 normal", 1024, 4096, 64, 1, QLT_DTYPE_BF16, DIST_NORMAL);
    quantize_case("nf4 normal", 1024, 4096, 64, 0, QLT_DTYPE_F32, DIST_NORMAL);
    quantize_case("nf4 heavy", 777, 1001, 64, 1, QLT_DTYPE_F16, DIST_HEAVY);         /* odd numel, ragged */
    quantize_case("nf4 heavy", 333, 4097, 128, 1, QLT_DTYPE_F32, DIST_HEAVY);
    quantize_case("nf4 zero-blocks", 512, 2048, 64, 1, QLT_DTYPE_BF16, DIST_ZERO_BLOCKS);
    quantize_case("nf4 zero-blocks", 257, 999, 32, 0, QLT_DTYPE_F32, DIST_ZERO_BLOCKS);
    quantize_case("nf4 bs4096", 300, 5000, 4096, 1, QLT_DTYPE_BF16, DIST_NORMAL);
    quantize_case("nf4 subnormal", 64, 1000, 64, 1, QLT_DTYPE_F32, DIST_TINY);
    quantize_case("nf4 real-scale", 3584, 18944, 64, 1, QLT_DTYPE_BF16, DIST_NORMAL); /* Qwen2.5-7B down_proj */
}

/* ---- dequantize bandwidth vs device-to-device copy ---- */

static double time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

/* stream_kernels.cu: read 4 bytes, write 16, a chunk (the bf16 dequantization's pattern without arithmetic) */
void gpu_check_stream_1to4(void *out, const void *in, int64_t chunks);

void check_nf4_bandwidth(void) {
    const int64_t shapes[][2] = {{3584, 18944}, {8192, 28672}};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int iters = 50;
    for (size_t s = 0; s < 2; s++) {
        const int64_t n = shapes[s][0] * shapes[s][1];
        char shape[64];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)shapes[s][0], (long long)shapes[s][1]);
        qlt_nf4 q;
        if (qlt_cuda_nf4_alloc(&q, n, 64, 1) != 0) {
            gpu_check_fail("nf4_bandwidth", qlt_error());
            return;
        }
        CK(cudaMemset(q.codes, 0x5A, (size_t)n / 2));
        CK(cudaMemset(q.absmax_q, 0x80, (size_t)q.nblocks));
        CK(cudaMemset(q.nested_absmax, 0, (size_t)q.nested_nblocks * 4));
        void *out = dalloc((size_t)n * 4);
        /* device-to-device copy of the same number of bytes the bf16 dequant moves */
        const size_t dq_bytes = (size_t)n / 2 + (size_t)q.nblocks + (size_t)q.nested_nblocks * 4 + (size_t)n * 2;
        void *ca = dalloc(dq_bytes / 2), *cb = dalloc(dq_bytes / 2);
        CK(cudaMemcpy(cb, ca, dq_bytes / 2, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e0, NULL));
        for (int i = 0; i < iters; i++) CK(cudaMemcpyAsync(cb, ca, dq_bytes / 2, cudaMemcpyDeviceToDevice, NULL));
        CK(cudaEventRecord(e1, NULL));
        CK(cudaEventSynchronize(e1));
        const double copy_gbs = (double)(dq_bytes / 2) * 2 * iters / (time_ms(e0, e1) * 1e-3) / 1e9;
        gpu_check_perf("nf4 D2D copy (r+w)", shape, copy_gbs, "GB/s");
        /* what the bf16 dequantization's traffic pattern can move: n * 2 bytes written alone (memset), and
         * read 1 : write 4 with no arithmetic (8 codes -> 8 values) */
        CK(cudaEventRecord(e0, NULL));
        for (int i = 0; i < iters; i++) CK(cudaMemsetAsync(out, 0, (size_t)n * 2, NULL));
        CK(cudaEventRecord(e1, NULL));
        CK(cudaEventSynchronize(e1));
        gpu_check_perf("HBM write only (memset)", shape, (double)n * 2 * iters / (time_ms(e0, e1) * 1e-3) / 1e9, "GB/s");
        gpu_check_stream_1to4(out, q.codes, n / 8);
        CK(cudaEventRecord(e0, NULL));
        for (int i = 0; i < iters; i++) gpu_check_stream_1to4(out, q.codes, n / 8);
        CK(cudaEventRecord(e1, NULL));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        const double stream_gbs = (double)n * 2.5 * iters / (time_ms(e0, e1) * 1e-3) / 1e9;
        gpu_check_perf("HBM 1:4 read:write stream", shape, stream_gbs, "GB/s");
        const qlt_dtype outs[3] = {QLT_DTYPE_BF16, QLT_DTYPE_F16, QLT_DTYPE_F32};
        for (int k = 0; k < 3; k++) {
            size_t bytes = (size_t)n / 2 + (size_t)q.nblocks + (size_t)q.nested_nblocks * 4 +
                           (size_t)n * qlt_dtype_size(outs[k]);
            qlt_cuda_nf4_dequantize(&q, out, outs[k], NULL);
            CK(cudaEventRecord(e0, NULL));
            for (int i = 0; i < iters; i++) qlt_cuda_nf4_dequantize(&q, out, outs[k], NULL);
            CK(cudaEventRecord(e1, NULL));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            const double gbs = (double)bytes * iters / (time_ms(e0, e1) * 1e-3) / 1e9;
            char name[64];
            snprintf(name, sizeof name, "nf4 dequant->%s", qlt_dtype_name(outs[k]));
            gpu_check_perf(name, shape, gbs, "GB/s");
            snprintf(name, sizeof name, "nf4 dequant->%s %%copy", qlt_dtype_name(outs[k]));
            gpu_check_perf(name, shape, 100.0 * gbs / copy_gbs, "% of copy");
            if (outs[k] == QLT_DTYPE_BF16) {
                gpu_check_perf("nf4 dequant->BF16 %1:4 stream", shape, 100.0 * gbs / stream_gbs, "% of stream");
                snprintf(name, sizeof name, "nf4 dequant->BF16 copy/dq");
                gpu_check_row(name, shape, copy_gbs / gbs, 1.0 / 0.85, "x (<=1/0.85)");
            }
        }
        qlt_cuda_nf4_free(&q);
        cudaFree(out);
        cudaFree(ca);
        cudaFree(cb);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* ---- bitsandbytes' own outputs (scripts/nf4_check_bnb.py) ---- */

static const qlt_st_tensor *need_t(const qlt_st_file *f, const char *prefix, const char *suffix) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const qlt_st_tensor *t = qlt_st_find(f, name);
    if (!t) gpu_check_fail("nf4_bnb", name);
    return t;
}

/* Cases "caseK.*": input (F32/F16/BF16), blocksize I32[1], codes U8, absmax F32 or absmax U8 +
 * nested_absmax F32 + offset F32[1] + nested_code F32[256], dequant (bnb's dequantize_4bit, input dtype). */
void check_nf4_bnb(void) {
    const char *path = getenv("QLT_NF4_BNB_FILE");
    if (!path) {
        printf("nf4_bnb: QLT_NF4_BNB_FILE not set (scripts/gpu-check-nf4.sh sets it): skipped\n");
        return;
    }
    qlt_st_file f;
    if (qlt_st_open(&f, path) != 0) {
        gpu_check_fail("nf4_bnb", qlt_error());
        return;
    }
    float map[256];
    qlt_nf4_dynamic_map(map);
    for (int c = 0; c < 1000; c++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "case%d", c);
        char iname[64];
        snprintf(iname, sizeof iname, "%s.input", prefix);
        const qlt_st_tensor *in = qlt_st_find(&f, iname);
        if (!in) break;
        const qlt_st_tensor *bs_t = need_t(&f, prefix, "blocksize"), *codes = need_t(&f, prefix, "codes"),
                            *absmax = need_t(&f, prefix, "absmax"), *deq = need_t(&f, prefix, "dequant");
        if (!bs_t || !codes || !absmax || !deq) return;
        int32_t bs;
        memcpy(&bs, bs_t->data, 4);
        const int dq = absmax->dtype == QLT_DTYPE_U8;
        const int64_t n = in->numel;
        char shape[64];
        snprintf(shape, sizeof shape, "%lld %s bs%d dq%d", (long long)n, qlt_dtype_name(in->dtype), bs, dq);
        /* bnb's state as a qlt_nf4 */
        qlt_nf4 ref, cpu, cpu_o, back;
        qlt_nf4_alloc_host(&ref, n, bs, dq);
        memcpy(ref.codes, codes->data, (size_t)(n + 1) / 2);
        float offset = 0;
        if (dq) {
            const qlt_st_tensor *na = need_t(&f, prefix, "nested_absmax"), *off = need_t(&f, prefix, "offset"),
                                *nc = need_t(&f, prefix, "nested_code");
            if (!na || !off || !nc) return;
            memcpy(ref.absmax_q, absmax->data, (size_t)ref.nblocks);
            memcpy(ref.nested_absmax, na->data, (size_t)ref.nested_nblocks * 4);
            memcpy(&offset, off->data, 4);
            ref.offset = offset;
            char row[64];
            snprintf(row, sizeof row, "bnb%d dynamic map", c);
            gpu_check_row(row, shape, (double)count_diff(nc->data, map, 1024), 0, "bytes differ");
            memcpy(ref.nested_code, nc->data, 1024);
        } else {
            memcpy(ref.absmax, absmax->data, (size_t)ref.nblocks * 4);
        }
        /* ours on the CPU: with our own mean, and with bnb's offset */
        float *x = malloc((size_t)n * 4);
        qlt_convert_to_f32(x, in->data, in->dtype, (size_t)n);
        qlt_nf4_alloc_host(&cpu, n, bs, dq);
        qlt_nf4_quantize_f32(&cpu, x);
        char row[64];
        snprintf(row, sizeof row, "bnb%d codes CPU", c);
        gpu_check_row(row, shape, (double)count_diff(cpu.codes, ref.codes, (size_t)(n + 1) / 2), 0, "bytes differ");
        if (dq) {
            float *am = malloc((size_t)cpu.nblocks * 4);
            qlt_nf4_quantize_codes(cpu.codes, am, x, n, bs);
            qlt_nf4_alloc_host(&cpu_o, n, bs, dq);
            memcpy(cpu_o.codes, cpu.codes, (size_t)(n + 1) / 2);
            qlt_nf4_double_quant(&cpu_o, am, offset);
            snprintf(row, sizeof row, "bnb%d all bytes, bnb offset", c);
            gpu_check_row(row, shape, (double)nf4_diff(&cpu_o, &ref), 0, "bytes differ");
            snprintf(row, sizeof row, "bnb%d offset ulps (ours)", c);
            int32_t ob, rb;
            memcpy(&ob, &cpu.offset, 4);
            memcpy(&rb, &offset, 4);
            gpu_check_perf(row, shape, (double)abs(ob - rb), "ulp");
            snprintf(row, sizeof row, "bnb%d nested bytes (our mean)", c);
            gpu_check_perf(row, shape, (double)nf4_diff(&cpu, &ref), "bytes differ");
            qlt_nf4_free_host(&cpu_o);
            free(am);
        } else {
            snprintf(row, sizeof row, "bnb%d absmax CPU", c);
            gpu_check_row(row, shape, (double)count_diff(cpu.absmax, ref.absmax, (size_t)cpu.nblocks * 4), 0,
                          "bytes differ");
        }
        /* ours on the GPU, with bnb's offset: every byte */
        qlt_nf4 gpu;
        if (qlt_cuda_nf4_alloc(&gpu, n, bs, dq) != 0) {
            gpu_check_fail("nf4_bnb", qlt_error());
            return;
        }
        void *dx = dalloc(in->nbytes), *ws = dalloc(qlt_cuda_nf4_quantize_workspace(n, bs, dq) + 16);
        CK(cudaMemcpy(dx, in->data, in->nbytes, cudaMemcpyHostToDevice));
        qlt_nf4_alloc_host(&back, n, bs, dq);
        if (qlt_cuda_nf4_quantize(&gpu, dx, in->dtype, ws, dq ? &offset : NULL, NULL) != 0 ||
            qlt_cuda_nf4_download(&back, &gpu) != 0) {
            gpu_check_fail("nf4_bnb", qlt_error());
            return;
        }
        snprintf(row, sizeof row, "bnb%d all bytes GPU", c);
        gpu_check_row(row, shape, (double)nf4_diff(&back, &ref), 0, "bytes differ");
        /* dequantizing bnb's state gives bnb's dequantized tensor, on the CPU and the GPU */
        size_t osz = qlt_dtype_size(deq->dtype);
        void *hc = malloc((size_t)n * 4), *hg = malloc((size_t)n * 4);
        cpu_dequantize(&ref, hc, deq->dtype);
        snprintf(row, sizeof row, "bnb%d dequant CPU", c);
        gpu_check_row(row, shape, (double)count_diff(hc, deq->data, (size_t)n * osz), 0, "bytes differ");
        qlt_nf4 gref;
        void *dout = dalloc((size_t)n * osz);
        if (qlt_cuda_nf4_upload(&gref, &ref) != 0 || qlt_cuda_nf4_dequantize(&gref, dout, deq->dtype, NULL) != 0) {
            gpu_check_fail("nf4_bnb", qlt_error());
            return;
        }
        CK(cudaMemcpy(hg, dout, (size_t)n * osz, cudaMemcpyDeviceToHost));
        snprintf(row, sizeof row, "bnb%d dequant GPU", c);
        gpu_check_row(row, shape, (double)count_diff(hg, deq->data, (size_t)n * osz), 0, "bytes differ");
        qlt_cuda_nf4_free(&gref);
        qlt_cuda_nf4_free(&gpu);
        cudaFree(dx);
        cudaFree(ws);
        cudaFree(dout);
        free(hc);
        free(hg);
        free(x);
        qlt_nf4_free_host(&ref);
        qlt_nf4_free_host(&cpu);
        qlt_nf4_free_host(&back);
    }
    qlt_st_close(&f);
}

/* A checkpoint saved by bitsandbytes (QLT_NF4_BNB_CKPT dir, with reference.safetensors holding bnb's
 * dequantize_4bit of every quantized module as "<module>.dequant"): our reader + dequantize agree. */
void check_nf4_bnb_ckpt(void) {
    const char *dir = getenv("QLT_NF4_BNB_CKPT");
    if (!dir) {
        printf("nf4_bnb_ckpt: QLT_NF4_BNB_CKPT not set: skipped\n");
        return;
    }
    qlt_bnb_config bc;
    if (qlt_bnb_detect(dir, &bc) != 1) {
        gpu_check_fail("nf4_bnb_ckpt detect", qlt_error());
        return;
    }
    qlt_st_dir d;
    qlt_st_file ref;
    char rpath[1024];
    snprintf(rpath, sizeof rpath, "%s/reference.safetensors", dir);
    if (qlt_st_dir_open(&d, dir) != 0 || qlt_st_open(&ref, rpath) != 0) {
        gpu_check_fail("nf4_bnb_ckpt", qlt_error());
        return;
    }
    int64_t modules = 0, diff_cpu = 0, diff_gpu = 0;
    for (int i = 0; i < ref.n_tensors; i++) {
        const qlt_st_tensor *t = &ref.tensors[i];
        size_t len = strlen(t->name);
        if (len < 9 || strcmp(t->name + len - 8, ".dequant") != 0) continue;
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)len - 8, t->name);
        qlt_nf4 q, g;
        int64_t shape[QLT_MAX_DIMS];
        int nd;
        qlt_dtype dt;
        if (qlt_bnb_read_module(&d, module, &q, shape, &nd, &dt) != 0) {
            gpu_check_fail("nf4_bnb_ckpt read", qlt_error());
            return;
        }
        size_t osz = qlt_dtype_size(t->dtype);
        void *h = malloc(t->nbytes), *dout = dalloc(t->nbytes);
        cpu_dequantize(&q, h, t->dtype);
        diff_cpu += count_diff(h, t->data, (size_t)q.numel * osz);
        if (qlt_cuda_nf4_upload(&g, &q) != 0 || qlt_cuda_nf4_dequantize(&g, dout, t->dtype, NULL) != 0) {
            gpu_check_fail("nf4_bnb_ckpt", qlt_error());
            return;
        }
        CK(cudaMemcpy(h, dout, t->nbytes, cudaMemcpyDeviceToHost));
        diff_gpu += count_diff(h, t->data, (size_t)q.numel * osz);
        qlt_cuda_nf4_free(&g);
        qlt_nf4_free_host(&q);
        cudaFree(dout);
        free(h);
        modules++;
    }
    char shape[64];
    snprintf(shape, sizeof shape, "%lld modules", (long long)modules);
    gpu_check_row("bnb ckpt modules read", shape, modules > 0 ? 0 : 1, 0, "(0 = found)");
    gpu_check_row("bnb ckpt dequant CPU", shape, (double)diff_cpu, 0, "bytes differ");
    gpu_check_row("bnb ckpt dequant GPU", shape, (double)diff_gpu, 0, "bytes differ");
    qlt_st_close(&ref);
    qlt_st_dir_close(&d);
}
