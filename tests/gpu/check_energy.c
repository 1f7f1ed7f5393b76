/* check_energy.c: what each kind of work in a training step costs in energy on this GPU. An H100 runs
 * qlora-train's steps at its power limit (700 W), so a step's time is set by the energy it needs as much as by
 * its kernels' speed. Each workload runs back to back (about 1.5 s by default, QLT_ENERGY_SECONDS sets it)
 * between two reads of the GPU's energy counter (the backend's clock monitor, NVML), giving its mean power and
 * its energy per unit of work: idle (nothing launched); bf16 GEMMs (cuBLAS, as the step's frozen GEMMs: J per
 * TFLOP); the NF4 dequantization, its traffic pattern without arithmetic (read 1 : write 4), HBM written alone
 * (memset), a device-to-device copy and SwiGLU's forward (J per GB moved). The power limit takes seconds to act,
 * so the first GEMM runs again after the second; 4 s a workload gives steady figures (1.5 s does not).
 * The dynamic rows subtract the idle power: (P - P_idle) x time / work, the energy the work itself adds.
 * Performance rows only: there is nothing to compare them against, docs/PERF.md reads them. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "common/dtype.h"
#include "common/error.h"
#include "cuda/backend_cuda.h"
#include "cuda/nf4.h"
#include "gpu_check.h"

/* seconds a workload runs (QLT_ENERGY_SECONDS overrides) */
static double energy_seconds(void) {
    const char *e = getenv("QLT_ENERGY_SECONDS");
    return e && atof(e) > 0 ? atof(e) : 1.5;
}

typedef void (*workload_fn)(qlt_backend *be, void *ctx);

typedef struct energy_result {
    double seconds, watts, mhz, capped; /* watts 0: the counter is not available */
    int calls;
} energy_result;

/* Runs fn enough times to fill ENERGY_SECONDS (timed from three calls first) between the monitor's on and off. */
static energy_result measure(qlt_backend *be, workload_fn fn, void *ctx) {
    energy_result r = {0};
    be->sync(be);
    double t0 = gpu_check_now_s();
    for (int i = 0; i < 3; i++) fn(be, ctx);
    be->sync(be);
    const double per_call = (gpu_check_now_s() - t0) / 3;
    r.calls = per_call > 0 ? (int)(energy_seconds() / per_call) + 1 : 1;
    qlt_clock_report rep;
    be->clock_monitor(be, 1, NULL);
    t0 = gpu_check_now_s();
    for (int i = 0; i < r.calls; i++) fn(be, ctx);
    be->sync(be);
    r.seconds = gpu_check_now_s() - t0;
    be->clock_monitor(be, 0, &rep);
    if (rep.energy_j > 0) r.watts = rep.energy_j / rep.energy_wall_s;
    r.mhz = rep.sm_mhz_median;
    r.capped = rep.capped_share;
    return r;
}

static void sleep_workload(qlt_backend *be, void *ctx) {
    (void)be, (void)ctx;
    struct timespec t = {0, 100 * 1000000L};
    nanosleep(&t, NULL);
}

typedef struct gemm_ctx {
    const qlt_weight *w;
    void *x, *y;
    int64_t n;
} gemm_ctx;

static void gemm_workload(qlt_backend *be, void *ctx) {
    gemm_ctx *g = (gemm_ctx *)ctx;
    be->linear_fwd(be, g->y, g->x, &g->w, 1, NULL, g->n);
}

typedef struct dequant_ctx {
    const qlt_nf4 *q;
    void *out;
} dequant_ctx;

static void dequant_workload(qlt_backend *be, void *ctx) {
    dequant_ctx *d = (dequant_ctx *)ctx;
    qlt_cuda_nf4_dequantize(d->q, d->out, QLT_DTYPE_BF16, qlt_cuda_stream(be));
}

typedef struct copy_ctx {
    void *dst;
    const void *src;
    size_t bytes;
} copy_ctx;

static void copy_workload(qlt_backend *be, void *ctx) {
    copy_ctx *c = (copy_ctx *)ctx;
    cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)qlt_cuda_stream(be));
}

/* stream_kernels.cu: read 4 bytes, write 16, a chunk (the bf16 dequantization's traffic with no arithmetic) */
void gpu_check_stream_1to4(void *out, const void *in, int64_t chunks);

typedef struct stream_ctx {
    void *out;
    const void *in;
    int64_t chunks;
} stream_ctx;

/* on the default stream, as stream_kernels.cu launches it; measure() synchronizes the device around it */
static void stream_workload(qlt_backend *be, void *ctx) {
    stream_ctx *c = (stream_ctx *)ctx;
    (void)be;
    gpu_check_stream_1to4(c->out, c->in, c->chunks);
}

static void memset_workload(qlt_backend *be, void *ctx) {
    copy_ctx *c = (copy_ctx *)ctx;
    cudaMemsetAsync(c->dst, 0, c->bytes, (cudaStream_t)qlt_cuda_stream(be));
}

typedef struct swiglu_ctx {
    void *h;
    const void *gu;
    int64_t n, inter;
} swiglu_ctx;

static void swiglu_workload(qlt_backend *be, void *ctx) {
    swiglu_ctx *s = (swiglu_ctx *)ctx;
    be->swiglu_fwd(be, s->h, s->gu, s->n, s->inter);
}

/* Rows for one workload: power, SM clock, and energy per unit of work (units / call), total and above idle. */
static void report(const char *name, const char *shape, const energy_result *r, double idle_w, double units_per_call,
                   const char *unit) {
    char row[64], per[32];
    snprintf(row, sizeof row, "energy %s W", name);
    gpu_check_perf(row, shape, r->watts, "W");
    snprintf(row, sizeof row, "energy %s SM MHz", name);
    gpu_check_perf(row, shape, r->mhz, "MHz");
    snprintf(row, sizeof row, "energy %s capped", name);
    gpu_check_perf(row, shape, 100 * r->capped, "% samples");
    if (units_per_call <= 0) return;
    const double units = units_per_call * r->calls;
    snprintf(row, sizeof row, "energy %s rate", name);
    snprintf(per, sizeof per, "%s/s", unit);
    gpu_check_perf(row, shape, units / r->seconds, per);
    snprintf(row, sizeof row, "energy %s J/%s", name, unit);
    snprintf(per, sizeof per, "J/%s", unit);
    gpu_check_perf(row, shape, r->watts * r->seconds / units, per);
    snprintf(row, sizeof row, "energy %s dyn J/%s", name, unit);
    gpu_check_perf(row, shape, (r->watts - idle_w) * r->seconds / units, per);
}

static void *dev(qlt_backend *be, size_t bytes) {
    void *p = be->alloc(be, bytes);
    if (!p) {
        fprintf(stderr, "check_energy: device allocation of %zu bytes failed\n", bytes);
        exit(2);
    }
    return p;
}

/* [rows, cols] host floats, normal with the given scale (non-zero: a GEMM on zeros draws less power) */
static float *host_normal(int64_t rows, int64_t cols, float scale, uint64_t seed) {
    gpu_rng r = {seed};
    float *h = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) h[i] = scale * gpu_rng_normal(&r);
    return h;
}

/* n random bf16 values (normal, scale 1) in new device memory */
static void *dev_random_bf16(qlt_backend *be, int64_t n, uint64_t seed) {
    gpu_rng r = {seed};
    uint16_t *t = malloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) t[i] = qlt_f32_to_bf16(gpu_rng_normal(&r));
    void *d = dev(be, 2 * (size_t)n);
    be->upload(be, d, t, 2 * (size_t)n);
    free(t);
    return d;
}

void check_energy(void) {
    qlt_backend *be = qlt_backend_cuda_create(0);
    if (!be) {
        gpu_check_fail("energy", qlt_error());
        return;
    }
    energy_result idle = measure(be, sleep_workload, NULL);
    if (idle.watts <= 0) {
        printf("energy: the GPU's energy counter is not readable here (NVML): skipped\n");
        be->destroy(be);
        return;
    }
    report("idle", "-", &idle, idle.watts, 0, "");
    /* Qwen2.5-7B's gate projection forward at 8,192 and 2,048 tokens: y [n, 18944] = x [n, 3584] W^T */
    const int64_t rows = 18944, cols = 3584;
    float *h = host_normal(rows, cols, 0.02f, 7);
    qlt_weight wb, wq;
    if (be->weight_create(be, &wb, h, QLT_DTYPE_F32, rows, cols, 0, 0) != 0 ||
        be->weight_create(be, &wq, h, QLT_DTYPE_F32, rows, cols, 64, 1) != 0) {
        gpu_check_fail("energy weight_create", qlt_error());
        free(h);
        be->destroy(be);
        return;
    }
    free(h);
    const int64_t tokens[3] = {8192, 2048, 8192}; /* the first shape again last: how far the GPU drifted */
    void *x = dev_random_bf16(be, tokens[0] * cols, 8), *y = dev(be, 2 * (size_t)(tokens[0] * rows));
    for (int t = 0; t < 3; t++) {
        gemm_ctx g = {&wb, x, y, tokens[t]};
        energy_result r = measure(be, gemm_workload, &g);
        char shape[64];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld bf16", (long long)tokens[t], (long long)rows, (long long)cols);
        report("GEMM", shape, &r, idle.watts, 2.0 * tokens[t] * rows * cols / 1e12, "TFLOP");
    }
    /* the NF4 dequantization of that weight into bf16 (bytes: codes, 8-bit scales, nested scales, output) */
    {
        dequant_ctx d = {&wq.nf4, y};
        energy_result r = measure(be, dequant_workload, &d);
        const double bytes = (double)wq.nf4.numel / 2 + (double)wq.nf4.nblocks + 4.0 * wq.nf4.nested_nblocks +
                             2.0 * wq.nf4.numel;
        report("NF4 dequant", "18944x3584 ->bf16", &r, idle.watts, bytes / 1e9, "GB");
    }
    /* the dequantization's traffic without its arithmetic: 4 code bytes read, 16 bytes written, a chunk of 8 */
    {
        stream_ctx c = {y, wq.nf4.codes, wq.nf4.numel / 8};
        energy_result r = measure(be, stream_workload, &c);
        report("1:4 stream", "18944x3584 codes", &r, idle.watts, 2.5 * wq.nf4.numel / 1e9, "GB");
    }
    /* HBM written alone: a memset of the dequantization's output bytes */
    {
        copy_ctx c = {y, NULL, 2 * (size_t)wq.nf4.numel};
        energy_result r = measure(be, memset_workload, &c);
        report("memset", "18944x3584 bf16", &r, idle.watts, 2.0 * wq.nf4.numel / 1e9, "GB");
    }
    /* a device-to-device copy of 310 MB (read + write counted) */
    {
        const size_t bytes = 2 * (size_t)(tokens[0] * rows) / 2;
        copy_ctx c = {y, (char *)y + bytes, bytes};
        energy_result r = measure(be, copy_workload, &c);
        report("D2D copy", "155 MB", &r, idle.watts, 2.0 * bytes / 1e9, "GB");
    }
    /* SwiGLU forward at 7B micro-batch 4: h [8192, 18944] from gu [8192, 2 x 18944] (bytes: 2 read, 1 written) */
    {
        const int64_t n = tokens[0], inter = rows;
        void *gu = dev_random_bf16(be, n * 2 * inter, 9);
        swiglu_ctx s = {y, gu, n, inter};
        energy_result r = measure(be, swiglu_workload, &s);
        report("SwiGLU fwd", "8192x18944", &r, idle.watts, 3.0 * 2 * n * inter / 1e9, "GB");
        be->free(be, gu);
    }
    be->free(be, x);
    be->free(be, y);
    be->weight_free(be, &wb);
    be->weight_free(be, &wq);
    be->destroy(be);
}
