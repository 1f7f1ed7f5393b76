/* attention_cudnn.cpp: causal grouped-query attention through cuDNN's fused flash-attention graphs (the
 * cudnn-frontend SDPA nodes), the fastest attention on the GPUs it supports (docs/PERF.md has the numbers).
 *
 * cuDNN is optional at build time (QLT_HAVE_CUDNN: its headers and cudnn-frontend's were found) and at run
 * time: libcudnn.so.9 is opened with dlopen when the backend is created, so the binary runs without it. Any failure (no
 * library, a shape cuDNN does not support, a plan that does not build) makes the call answer 0 and the
 * backend runs its own kernels; nothing is printed unless QLT_CUDNN_LIBRARY named a library.
 *
 * Tensors are given to cuDNN in place, without copies: q / out [B*S, H*hd] are B x H x S x hd with strides
 * (S*H*hd, hd, H*hd, 1) ("BSHD"); k / v likewise with n_kv heads (GQA handled by cuDNN). Dense shapes (one
 * sequence a row) keep cuDNN's Stats packed in the lse buffer, [B, H, S] (its backward before 9.26 reads no
 * other non-ragged layout), not the own kernels' [B*S, H]; ragged shapes (attention_segments.cu's tables)
 * keep [B*S, H]. Either way a shape runs both directions through cuDNN or neither, and both plans are built
 * before the first forward is enqueued. One graph (and execution plan) is built per shape and direction,
 * the first time it is met. A build can happen while the stream is being captured into a CUDA graph
 * (the trainer captures its first step): the thread's capture mode is relaxed around it, since a build
 * compiles and loads kernels (and may allocate the workspace), none of which is stream work. */
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <deque>
#include <memory>

#include "common/env.h"
#include "cuda/attention_cudnn.h"
#include "cuda/attention_segments.h"

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; /* the frontend's symbol table reads libcudnn through this handle */
}

namespace fe = cudnn_frontend;

namespace {

enum : int64_t {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_Q_OFF, UID_KV_OFF, UID_STATS_OFF, UID_SEQ_LEN /* ragged layout: the segment tables */
};

/* slots == 0: dense (every row one sequence; lse packed [B, H, S]); slots = K >= 1: ragged, K sequences a row
 * (the examples of packed rows; lse [B*S, H]) */
struct plan_key {
    int backward, batch, seq, n_heads, n_kv, hd, slots, deterministic;
    float scale;
    bool operator==(const plan_key &o) const {
        return backward == o.backward && batch == o.batch && seq == o.seq && n_heads == o.n_heads &&
               n_kv == o.n_kv && hd == o.hd && slots == o.slots && deterministic == o.deterministic &&
               memcmp(&scale, &o.scale, sizeof scale) == 0;
    }
};

struct plan_entry {
    plan_key key;
    std::shared_ptr<fe::graph::Graph> graph; /* null: cuDNN rejected this shape (remembered, not retried) */
    int64_t workspace_bytes;
};

/* the device tables of a ragged shape (attention_segments.h), [batch*K + 1] offsets and [batch*K] lengths */
struct segment_tables {
    int batch = 0, seq = 0, slots = 0, n_heads = 0, n_kv = 0, hd = 0;
    int64_t *q_off = nullptr, *kv_off = nullptr, *stats_off = nullptr;
    int32_t *seq_len = nullptr;
    size_t capacity = 0; /* slots the buffers hold */
};

/* dims B x heads x S x hd over a token-major [B*S, heads*hd] buffer */
std::shared_ptr<fe::graph::Tensor_attributes> bshd(fe::graph::Graph &g, const char *name, int64_t uid, int64_t b,
                                                   int64_t heads, int64_t s, int64_t hd) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({b, heads, s, hd})
                        .set_stride({s * heads * hd, hd, heads * hd, 1}));
}

void set_bshd(const std::shared_ptr<fe::graph::Tensor_attributes> &t, int64_t uid, int64_t b, int64_t heads, int64_t s,
              int64_t hd) {
    t->set_output(true).set_uid(uid).set_dim({b, heads, s, hd}).set_stride({s * heads * hd, hd, heads * hd, 1});
}

std::shared_ptr<fe::graph::Graph> new_graph() {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

/* The tensors both directions share, over the dense batch or the ragged slots. */
struct graph_tensors {
    std::shared_ptr<fe::graph::Tensor_attributes> q, k, v, q_off, kv_off, stats_off, seq_len;
    int64_t b; /* sequences: batch, or batch * slots */
};

std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph &g, const char *name, int64_t uid,
                                                           int64_t n, fe::DataType_t type) {
    return g.tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(type));
}

graph_tensors inputs_of(fe::graph::Graph &g, const plan_key &k) {
    graph_tensors t;
    t.b = k.slots ? (int64_t)k.batch * k.slots : k.batch;
    t.q = bshd(g, "q", UID_Q, t.b, k.n_heads, k.seq, k.hd);
    t.k = bshd(g, "k", UID_K, t.b, k.n_kv, k.seq, k.hd);
    t.v = bshd(g, "v", UID_V, t.b, k.n_kv, k.seq, k.hd);
    if (k.slots) {
        t.q_off = index_tensor(g, "q_off", UID_Q_OFF, t.b + 1, fe::DataType_t::INT64);
        t.kv_off = index_tensor(g, "kv_off", UID_KV_OFF, t.b + 1, fe::DataType_t::INT64);
        t.stats_off = index_tensor(g, "stats_off", UID_STATS_OFF, t.b + 1, fe::DataType_t::INT64);
        t.seq_len = index_tensor(g, "seq_len", UID_SEQ_LEN, t.b, fe::DataType_t::INT32);
        t.q->set_ragged_offset(t.q_off);
        t.k->set_ragged_offset(t.kv_off);
        t.v->set_ragged_offset(t.kv_off);
    }
    return t;
}

/* Stats over lse: dense packed [B, H, S]; ragged [B*S, H] (the own kernels' layout) with the slots' offsets */
void set_stats(const std::shared_ptr<fe::graph::Tensor_attributes> &st, const plan_key &k, const graph_tensors &t) {
    st->set_uid(UID_STATS).set_dim({t.b, k.n_heads, k.seq, 1}).set_data_type(fe::DataType_t::FLOAT);
    if (k.slots) {
        st->set_stride({(int64_t)k.seq * k.n_heads, 1, k.n_heads, 1}).set_ragged_offset(t.stats_off);
    } else {
        st->set_stride({(int64_t)k.n_heads * k.seq, k.seq, 1, 1});
    }
}

template <typename Options> void set_masks(Options &opts, const plan_key &k, const graph_tensors &t) {
    opts.set_causal_mask(true);
    if (k.slots) {
        const int64_t tokens = (int64_t)k.batch * k.seq;
        opts.set_padding_mask(true).set_seq_len_q(t.seq_len).set_seq_len_kv(t.seq_len);
        opts.set_max_total_seq_len_q(tokens).set_max_total_seq_len_kv(tokens);
    }
}

std::shared_ptr<fe::graph::Graph> forward_graph(const plan_key &k) {
    auto g = new_graph();
    graph_tensors t = inputs_of(*g, k);
    auto opts = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_attn_scale(k.scale);
    set_masks(opts, k, t);
    auto [o, stats] = g->sdpa(t.q, t.k, t.v, opts);
    set_bshd(o, UID_O, t.b, k.n_heads, k.seq, k.hd);
    if (k.slots) o->set_ragged_offset(t.q_off);
    stats->set_output(true);
    set_stats(stats, k, t);
    return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const plan_key &k) {
    auto g = new_graph();
    graph_tensors t = inputs_of(*g, k);
    auto o = bshd(*g, "o", UID_O, t.b, k.n_heads, k.seq, k.hd);
    auto dout = bshd(*g, "dout", UID_DO, t.b, k.n_heads, k.seq, k.hd);
    auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats"));
    set_stats(stats, k, t);
    if (k.slots) o->set_ragged_offset(t.q_off), dout->set_ragged_offset(t.q_off);
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("attention_backward")
                    .set_attn_scale(k.scale)
                    .set_deterministic_algorithm(k.deterministic != 0);
    set_masks(opts, k, t);
    auto [dq, dk, dv] = g->sdpa_backward(t.q, t.k, t.v, o, dout, stats, opts);
    set_bshd(dq, UID_DQ, t.b, k.n_heads, k.seq, k.hd);
    set_bshd(dk, UID_DK, t.b, k.n_kv, k.seq, k.hd);
    set_bshd(dv, UID_DV, t.b, k.n_kv, k.seq, k.hd);
    if (k.slots) dq->set_ragged_offset(t.q_off), dk->set_ragged_offset(t.kv_off), dv->set_ragged_offset(t.kv_off);
    return g;
}

} // namespace

struct qlt_cudnn_attn {
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    int version = 0;
    bool verbose = false; /* QLT_CUDNN_LIBRARY set: say why cuDNN is not used */
    std::deque<plan_entry> plans; /* a deque: the entries find_plan hands out stay where they are */
    segment_tables tables;     /* ragged shapes: this batch's, remade by every call (stream-ordered) */
    void *workspace = nullptr; /* grown at plan builds only; the backend frees it with its other allocations */
    size_t workspace_bytes = 0;
    void *(*alloc)(void *ctx, size_t bytes) = nullptr;
    void *alloc_ctx = nullptr;
};

/* Builds (or finds) the plan for key; NULL when cuDNN cannot run it. Relaxes the thread's capture mode
 * around the build (see the top of the file). */
static plan_entry *find_plan(qlt_cudnn_attn *a, const plan_key &key) {
    for (auto &p : a->plans)
        if (p.key == key) return p.graph ? &p : nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    plan_entry e{key, nullptr, 0};
    try {
        auto g = key.backward ? backward_graph(key) : forward_graph(key);
        auto st = g->build(a->handle, {fe::HeurMode_t::A});
        int64_t ws = 0;
        if (st.is_good()) st = g->get_workspace_size(ws);
        if (st.is_good()) {
            e.graph = g;
            e.workspace_bytes = ws;
        } else if (a->verbose) {
            fprintf(stderr, "qlora-train: cuDNN attention (%s, B%d S%d H%d/%d hd%d) not supported: %s; using the "
                            "own kernels\n", key.backward ? "backward" : "forward", key.batch, key.seq, key.n_heads,
                    key.n_kv, key.hd, st.get_message().c_str());
        }
    } catch (const std::exception &ex) {
        if (a->verbose) fprintf(stderr, "qlora-train: cuDNN attention: %s; using the own kernels\n", ex.what());
        e.graph = nullptr;
    }
    cudaThreadExchangeStreamCaptureMode(&mode);
    a->plans.push_back(e);
    return e.graph ? &a->plans.back() : nullptr;
}

/* The workspace for p: the caller's scratch when it is large enough, else the wrapper's own (grown with the
 * capture mode relaxed, as above). NULL with ok = false when it cannot be had. */
static void *workspace_for(qlt_cudnn_attn *a, const plan_entry *p, void *scratch, size_t scratch_bytes, bool *ok) {
    *ok = true;
    if (p->workspace_bytes == 0) return nullptr;
    if (scratch && (size_t)p->workspace_bytes <= scratch_bytes) return scratch;
    if ((size_t)p->workspace_bytes > a->workspace_bytes) {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&mode);
        /* the old block may still be read by enqueued work: it is kept (it happens once a shape) */
        void *w = a->alloc(a->alloc_ctx, (size_t)p->workspace_bytes);
        if (!w) {
            *ok = false;
        } else {
            a->workspace = w;
            a->workspace_bytes = (size_t)p->workspace_bytes;
        }
        cudaThreadExchangeStreamCaptureMode(&mode);
        if (!*ok) return nullptr;
    }
    return a->workspace;
}

static bool shape_supported(int seq, int n_heads, int n_kv, int hd) {
    /* bf16 flash attention in cuDNN: head dims multiple of 8 up to 256; GQA needs whole groups */
    return seq > 0 && hd % 8 == 0 && hd <= 256 && n_kv > 0 && n_heads % n_kv == 0;
}

extern "C" qlt_cudnn_attn *qlt_cudnn_attn_create(cudaStream_t stream, void *(*alloc)(void *ctx, size_t bytes),
                                                  void *ctx) {
    /* QLT_CUDNN_LIBRARY (common/env.h) names a particular libcudnn.so.9 (e.g. a newer one from a pip wheel);
     * when it is set, what goes wrong with it is said */
    const char *named = qlt_env(QLT_ENV_CUDNN_LIBRARY);
    const bool verbose = named != nullptr;
    if (!fe::cudnn_dlhandle) {
        const char *lib = named ? named : "libcudnn.so.9";
        fe::cudnn_dlhandle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!fe::cudnn_dlhandle) {
            if (verbose)
                fprintf(stderr, "qlora-train: %s cannot be loaded (%s); using the own attention kernels\n", lib,
                        dlerror());
            return nullptr;
        }
    }
    qlt_cudnn_attn *a = new qlt_cudnn_attn();
    a->stream = stream;
    a->verbose = verbose;
    a->alloc = alloc;
    a->alloc_ctx = ctx;
    try {
        a->version = (int)fe::detail::get_backend_version();
        if (a->version < 90500) throw std::runtime_error("cuDNN 9.5 or newer is needed");
        fe::detail::create_handle(&a->handle);
        fe::detail::set_stream(a->handle, stream);
    } catch (const std::exception &ex) {
        if (verbose) fprintf(stderr, "qlora-train: cuDNN attention unavailable: %s\n", ex.what());
        delete a;
        return nullptr;
    }
    return a;
}

extern "C" void qlt_cudnn_attn_destroy(qlt_cudnn_attn *a) {
    if (!a) return;
    a->plans.clear();
    if (a->handle) {
        try {
            fe::detail::destroy_handle(a->handle);
        } catch (...) {
        }
    }
    delete a;
}

extern "C" int qlt_cudnn_attn_version(const qlt_cudnn_attn *a) { return a ? a->version : 0; }

static plan_key key_of(const qlt_cudnn_attn_shape *sh, int backward) {
    return plan_key{backward,   sh->batch, sh->seq, sh->n_heads, sh->n_kv, sh->hd, sh->slots, sh->deterministic,
                    sh->scale};
}

extern "C" int qlt_cudnn_attn_usable(qlt_cudnn_attn *a, const qlt_cudnn_attn_shape *sh) {
    if (!a || !shape_supported(sh->seq, sh->n_heads, sh->n_kv, sh->hd) || sh->slots < 0 || sh->slots > 32) return 0;
    return find_plan(a, key_of(sh, 0)) && find_plan(a, key_of(sh, 1));
}

/* Ragged shapes: makes this batch's segment tables from seg_start (stream-ordered; the buffers grow, with the
 * capture mode relaxed, only when a larger shape first comes). false when they cannot be allocated. */
static bool enqueue_tables(qlt_cudnn_attn *a, const qlt_cudnn_attn_shape *sh, const int32_t *seg_start) {
    segment_tables &t = a->tables;
    const size_t slots = (size_t)sh->batch * (size_t)sh->slots;
    if (slots > t.capacity) {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&mode);
        char *mem = (char *)a->alloc(a->alloc_ctx, 3 * sizeof(int64_t) * (slots + 1) + sizeof(int32_t) * slots);
        cudaThreadExchangeStreamCaptureMode(&mode);
        if (!mem) return false;
        t.q_off = (int64_t *)mem;
        t.kv_off = t.q_off + slots + 1;
        t.stats_off = t.kv_off + slots + 1;
        t.seq_len = (int32_t *)(t.stats_off + slots + 1);
        t.capacity = slots;
    }
    qlt_attn_segment_table(a->stream, seg_start, sh->batch, sh->seq, sh->slots, sh->n_heads, sh->n_kv, sh->hd,
                           t.q_off, t.kv_off, t.stats_off, t.seq_len);
    return true;
}

static void add_tables(const qlt_cudnn_attn *a, std::unordered_map<int64_t, void *> &pack) {
    pack[UID_Q_OFF] = a->tables.q_off;
    pack[UID_KV_OFF] = a->tables.kv_off;
    pack[UID_STATS_OFF] = a->tables.stats_off;
    pack[UID_SEQ_LEN] = a->tables.seq_len;
}

static int run_plan(qlt_cudnn_attn *a, const plan_entry *p, std::unordered_map<int64_t, void *> &pack, void *ws) {
    try {
        return p->graph->execute(a->handle, pack, ws).is_good() ? 1 : 0;
    } catch (const std::exception &) {
        return 0;
    }
}

extern "C" int qlt_cudnn_attn_fwd(qlt_cudnn_attn *a, const qlt_cudnn_attn_shape *sh, void *out, float *lse,
                                  const void *q, const void *k, const void *v, const int32_t *seg_start) {
    if (!qlt_cudnn_attn_usable(a, sh)) return 0;
    plan_entry *p = find_plan(a, key_of(sh, 0));
    bool ok;
    void *ws = workspace_for(a, p, nullptr, 0, &ok);
    if (!ok || (sh->slots && !enqueue_tables(a, sh, seg_start))) return 0;
    std::unordered_map<int64_t, void *> pack = {{UID_Q, (void *)q}, {UID_K, (void *)k},     {UID_V, (void *)v},
                                                {UID_O, out},       {UID_STATS, (void *)lse}};
    if (sh->slots) add_tables(a, pack);
    return run_plan(a, p, pack, ws);
}

extern "C" int qlt_cudnn_attn_bwd(qlt_cudnn_attn *a, const qlt_cudnn_attn_shape *sh, void *dq, void *dk, void *dv,
                                  void *scratch, size_t scratch_bytes, const void *dout, const void *out,
                                  const float *lse, const void *q, const void *k, const void *v,
                                  const int32_t *seg_start) {
    if (!qlt_cudnn_attn_usable(a, sh)) return 0;
    plan_entry *p = find_plan(a, key_of(sh, 1));
    bool ok;
    void *ws = workspace_for(a, p, scratch, scratch_bytes, &ok);
    if (!ok || (sh->slots && !enqueue_tables(a, sh, seg_start))) return 0;
    std::unordered_map<int64_t, void *> pack = {
        {UID_Q, (void *)q},       {UID_K, (void *)k}, {UID_V, (void *)v}, {UID_O, (void *)out}, {UID_DO, (void *)dout},
        {UID_STATS, (void *)lse}, {UID_DQ, dq},       {UID_DK, dk},       {UID_DV, dv}};
    if (sh->slots) add_tables(a, pack);
    return run_plan(a, p, pack, ws);
}
