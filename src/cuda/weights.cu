/* weights.cu: the frozen weights' lifecycle on the device: upload (bf16 as stored, other float types
 * converted), NF4 quantization on load, a bitsandbytes checkpoint's blocks taken as they are, freeing, and
 * the dequantization scratch every NF4 weight is dequantized into before each use (qlt_cuda_weight_bf16).
 *
 * NF4: weight_create uploads the tensor as stored and quantizes it on the GPU (src/cuda/nf4.cu: the same
 * bytes as the CPU reference and bitsandbytes); a bitsandbytes checkpoint's blocks are uploaded as they are. */
#include "cuda/cuda_common.h"

#include <string.h>

extern "C" {
#include "nf4/nf4.h"
}
#include "cuda/nf4.h"

/* Device bytes of an NF4 weight's arrays (what qlt_cuda_nf4_alloc allocated), for the memory report. */
static size_t nf4_device_bytes(const qlt_nf4 *q) {
    size_t bytes = (size_t)(q->numel + 1) / 2 + sizeof(float) * 16;
    if (q->double_quant)
        bytes += (size_t)q->nblocks + sizeof(float) * ((size_t)q->nested_nblocks + 256);
    else
        bytes += sizeof(float) * (size_t)q->nblocks;
    return bytes;
}

/* Grows the dequantization scratch to numel bf16 values (load time only, never inside a step). */
int qlt_cuda_reserve_dequant(qlt_backend *be, int64_t numel) {
    cuda_impl *impl = cuda_impl_of(be);
    if (impl->plan.on) { /* note the size only */
        if (numel > impl->plan.dequant_elems) impl->plan.dequant_elems = numel;
        return 0;
    }
    if (numel <= impl->dequant_elems) return 0;
    CUDA_CHECK(cudaStreamSynchronize(impl->stream));
    qlt_cuda_free_tracked(be, impl->dequant, sizeof(bf16) * (size_t)impl->dequant_elems);
    impl->dequant = (bf16 *)qlt_cuda_alloc_tracked(be, sizeof(bf16) * (size_t)numel);
    impl->dequant_elems = impl->dequant ? numel : 0;
    if (!impl->dequant)
        return qlt_fail("CUDA: out of device memory for the weight dequantization scratch (%.1f MiB)",
                        (double)numel * 2 / (1 << 20));
    return 0;
}

/* Makes w the NF4 weight dq (device arrays) and grows the dequantization scratch (load time only). */
static int nf4_adopt(qlt_backend *be, qlt_weight *w, const qlt_nf4 *dq) {
    cuda_impl *impl = cuda_impl_of(be);
    int64_t numel = dq->numel;
    w->format = QLT_WFORMAT_NF4;
    w->nf4 = *dq;
    qlt_cuda_track(be, (int64_t)nf4_device_bytes(dq));
    (void)impl;
    return qlt_cuda_reserve_dequant(be, numel);
}

int qlt_cuda_weight_from_nf4(qlt_backend *be, qlt_weight *w, qlt_nf4 *host, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    qlt_nf4 dq;
    if (qlt_cuda_nf4_upload(&dq, host) != 0) return -1;
    qlt_nf4_free_host(host);
    return nf4_adopt(be, w, &dq);
}

/* Planning: the weight's shape and format, its bytes counted (and the staging of an NF4 quantization, briefly),
 * nothing read or made. */
static int plan_weight_create(qlt_backend *be, qlt_weight *w, qlt_dtype dtype, int nf4_blocksize, int double_quant) {
    const int64_t numel = w->rows * w->cols;
    if (nf4_blocksize > 0) {
        QLT_TRY(qlt_nf4_check_blocksize(nf4_blocksize));
        size_t staging = (size_t)numel * qlt_dtype_size(dtype) + qlt_cuda_nf4_quantize_workspace(numel, nf4_blocksize,
                                                                                                 double_quant);
        qlt_cuda_track(be, (int64_t)staging);
        qlt_cuda_track(be, -(int64_t)staging);
        qlt_nf4 shape;
        QLT_TRY(qlt_nf4_shape(&shape, numel, nf4_blocksize, double_quant));
        return nf4_adopt(be, w, &shape);
    }
    w->format = QLT_WFORMAT_BF16;
    w->data = qlt_cuda_alloc_tracked(be, sizeof(bf16) * (size_t)numel);
    return 0;
}

int qlt_cuda_weight_create(qlt_backend *be, qlt_weight *w, const void *host, qlt_dtype dtype, int64_t rows,
                           int64_t cols, int nf4_blocksize, int double_quant) {
    cuda_impl *impl = cuda_impl_of(be);
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    if (impl->plan.on) return plan_weight_create(be, w, dtype, nf4_blocksize, double_quant);
    int64_t numel = rows * cols;
    if (nf4_blocksize > 0) {
        /* the source tensor goes to the device as stored; the quantizer there writes the same bytes as
         * the CPU reference (and bitsandbytes) */
        QLT_TRY(qlt_nf4_check_blocksize(nf4_blocksize));
        size_t src_bytes = (size_t)numel * qlt_dtype_size(dtype);
        size_t ws_bytes = qlt_cuda_nf4_quantize_workspace(numel, nf4_blocksize, double_quant);
        void *src = qlt_cuda_alloc_tracked(be, src_bytes + ws_bytes);
        if (!src)
            return qlt_fail("CUDA: out of device memory staging a [%lld, %lld] weight for NF4 quantization",
                            (long long)rows, (long long)cols);
        CUDA_CHECK(cudaMemcpyAsync(src, host, src_bytes, cudaMemcpyHostToDevice, impl->stream));
        qlt_nf4 dq;
        int rc = qlt_cuda_nf4_alloc(&dq, numel, nf4_blocksize, double_quant);
        if (rc == 0) rc = qlt_cuda_nf4_quantize(&dq, src, dtype, ws_bytes ? (char *)src + src_bytes : NULL, NULL,
                                                impl->stream);
        CUDA_CHECK(cudaStreamSynchronize(impl->stream));
        qlt_cuda_free_tracked(be, src, src_bytes + ws_bytes);
        if (rc != 0) return -1;
        return nf4_adopt(be, w, &dq);
    }
    bf16 *dst = (bf16 *)qlt_cuda_alloc_tracked(be, sizeof(bf16) * (size_t)numel);
    if (!dst)
        return qlt_fail("CUDA: out of device memory for a [%lld, %lld] bf16 weight (%.1f MiB): use "
                        "--set model.quant=nf4 or a smaller model",
                        (long long)rows, (long long)cols, (double)numel * 2 / (1 << 20));
    w->format = QLT_WFORMAT_BF16;
    w->data = dst;
    if (dtype == QLT_DTYPE_BF16) {
        CUDA_CHECK(cudaMemcpyAsync(dst, host, sizeof(bf16) * (size_t)numel, cudaMemcpyHostToDevice, impl->stream));
        CUDA_CHECK(cudaStreamSynchronize(impl->stream));
        return 0;
    }
    /* other float types: stage through the conversion workspace in chunks, convert on the device */
    size_t stage_bytes = sizeof(float) * 3 * (size_t)QLT_CUDA_CONV_ELEMS;
    int64_t chunk = (int64_t)(stage_bytes / sizeof(float));
    float *host_f32 = NULL;
    if (dtype != QLT_DTYPE_F32 && dtype != QLT_DTYPE_F16) host_f32 = (float *)qlt_xmalloc(sizeof(float) * (size_t)chunk);
    for (int64_t i0 = 0; i0 < numel; i0 += chunk) {
        int64_t cn = numel - i0 < chunk ? numel - i0 : chunk;
        if (dtype == QLT_DTYPE_F32) {
            CUDA_CHECK(cudaMemcpyAsync(impl->conv, (const float *)host + i0, sizeof(float) * (size_t)cn,
                                       cudaMemcpyHostToDevice, impl->stream));
            qlt_cuda_f32_to_bf16(impl->stream, dst + i0, impl->conv, cn);
        } else if (dtype == QLT_DTYPE_F16) {
            CUDA_CHECK(cudaMemcpyAsync(impl->conv, (const uint16_t *)host + i0, 2 * (size_t)cn, cudaMemcpyHostToDevice,
                                       impl->stream));
            qlt_cuda_f16_to_bf16(impl->stream, dst + i0, (const __half *)impl->conv, cn);
        } else {
            qlt_convert_to_f32(host_f32, (const char *)host + (size_t)i0 * qlt_dtype_size(dtype), dtype, (size_t)cn);
            CUDA_CHECK(cudaMemcpyAsync(impl->conv, host_f32, sizeof(float) * (size_t)cn, cudaMemcpyHostToDevice,
                                       impl->stream));
            qlt_cuda_f32_to_bf16(impl->stream, dst + i0, impl->conv, cn);
        }
        CUDA_CHECK(cudaStreamSynchronize(impl->stream)); /* the staging buffer is reused next chunk */
    }
    free(host_f32);
    return 0;
}

void qlt_cuda_weight_free(qlt_backend *be, qlt_weight *w) {
    cuda_impl *impl = cuda_impl_of(be);
    CUDA_CHECK(cudaStreamSynchronize(impl->stream));
    qlt_cuda_cache_drop(be, w);
    if (w->format == QLT_WFORMAT_NF4) {
        qlt_cuda_track(be, -(int64_t)nf4_device_bytes(&w->nf4));
        if (!impl->plan.on) qlt_cuda_nf4_free(&w->nf4);
    } else if (w->data) {
        qlt_cuda_free_tracked(be, w->data, qlt_dtype_size(w->format == QLT_WFORMAT_F32 ? QLT_DTYPE_F32 : QLT_DTYPE_BF16) *
                                               (size_t)(w->rows * w->cols));
    }
    memset(w, 0, sizeof *w);
}

/* Dequantizes w into dst (stream-ordered), charged to the dequant phase. */
static void dequantize_into(qlt_backend *be, bf16 *dst, const qlt_weight *w) {
    cuda_impl *impl = cuda_impl_of(be);
    qlt_phase was = impl->phase;
    if (be->phase) be->phase(be, QLT_PHASE_DEQUANT);
    QLT_ASSERT(qlt_cuda_nf4_dequantize(&w->nf4, dst, QLT_DTYPE_BF16, impl->stream) == 0);
    if (be->phase) be->phase(be, was);
}

const bf16 *qlt_cuda_weight_bf16(qlt_backend *be, const qlt_weight *w) {
    if (w->format == QLT_WFORMAT_BF16) return (const bf16 *)w->data;
    if (w->format == QLT_WFORMAT_NF4) {
        int64_t ld;
        const bf16 *kept = qlt_cuda_cache_stack(be, &w, 1, w->cols, 1, 0, &ld);
        if (kept) return kept;
        cuda_impl *impl = cuda_impl_of(be);
        QLT_ASSERT(w->rows * w->cols <= impl->dequant_elems);
        dequantize_into(be, impl->dequant, w);
        return impl->dequant;
    }
    QLT_ASSERT(!"CUDA linear ops take bf16 (or NF4) frozen weights");
    return NULL;
}
