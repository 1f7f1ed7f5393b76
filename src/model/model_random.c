/* model_random.c: a model with random weights built directly on the backend from a config (no weight
 * files): the built-in demo model and `qlora-train bench` use it. Linear and embedding weights have the
 * standard deviation transformers initializes them with (0.02; uniform here, for speed), norms are 1, biases 0; generated one tensor at a time
 * (host memory holds one tensor) and quantized to NF4 on the way when asked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/counter_hash.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "common/rng.h"
#include "model/gemma_model.h"
#include "model/model.h"

/* x[i] uniform with standard deviation `std` (|x| <= std * sqrt(3)), from a counter hash of (seed, i):
 * deterministic whatever the thread count, and fast enough for 72B-parameter benchmarks. */
static void fill_random(float *x, int64_t n, float std, uint64_t seed) {
    const float scale = std * 1.7320508f * (2.0f / 16777216.0f);
#pragma omp parallel for schedule(static) if (n > 1 << 20)
    for (int64_t i = 0; i < n; i++) {
        x[i] = ((float)(qlt_counter_hash(seed, (uint64_t)i) >> 40) - 8388608.0f) * scale;
    }
}

/* host NULL: shapes only (no values; the backend is planning) */
static int random_matrix(qlt_model *m, qlt_weight *w, int64_t rows, int64_t cols, int blocksize, int dq, qlt_rng *rng,
                         float *host) {
    uint64_t seed = qlt_rng_next(rng);
    if (host) fill_random(host, rows * cols, 0.02f, seed);
    return m->be->weight_create(m->be, w, host, QLT_DTYPE_F32, rows, cols, blocksize, dq);
}

static float *const_vector(qlt_model *m, int64_t n, float value) {
    float *host = qlt_xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) host[i] = value;
    float *dev = m->be->alloc(m->be, sizeof(float) * (size_t)n);
    if (dev) m->be->upload(m->be, dev, host, sizeof(float) * (size_t)n);
    free(host);
    return dev;
}

int qlt_model_init_random(qlt_model *m, qlt_backend *be, const qlt_model_config *cfg, uint64_t seed,
                          const qlt_model_load_opts *opts) {
    memset(m, 0, sizeof *m);
    QLT_TRY(qlt_gemma_backend_check(cfg, be, cfg->arch_name));
    QLT_TRY(qlt_model_check_backend(cfg, be, "random model"));
    m->be = be;
    m->cfg = *cfg;
    const qlt_model_config *c = &m->cfg;
    int blocksize = opts && opts->nf4 ? opts->nf4_blocksize : 0;
    int dq = opts ? opts->double_quant : 0;
    m->quantized = blocksize > 0;
    int64_t h = c->hidden;
    int64_t biggest = (int64_t)c->vocab * h; /* the host buffer holds the largest tensor */
    for (int p = 0; p < QLT_PROJ_COUNT; p++) {
        int64_t rows, cols;
        qlt_model_proj_shape(c, p, &rows, &cols);
        if (rows * cols > biggest) biggest = rows * cols;
    }
    float *host = opts && opts->shapes_only ? NULL : qlt_xmalloc(sizeof(float) * (size_t)biggest);
    qlt_rng rng;
    qlt_rng_seed(&rng, seed);
    int rc = -1;
    if (random_matrix(m, &m->embed, c->vocab, h, 0, 0, &rng, host)) goto done;
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head_shared = 1;
    } else if (random_matrix(m, &m->lm_head, c->vocab, h, 0, 0, &rng, host)) {
        goto done;
    }
    if (!(m->final_norm = const_vector(m, h, 1.0f))) goto oom;
    m->layers = qlt_xcalloc((size_t)c->n_layers, sizeof *m->layers);
    for (int l = 0; l < c->n_layers; l++) {
        qlt_layer *L = &m->layers[l];
        if (!(L->attn_norm = const_vector(m, h, 1.0f)) || !(L->mlp_norm = const_vector(m, h, 1.0f))) goto oom;
        if (c->gemma && (!(L->post_attn_norm = const_vector(m, h, 1.0f)) ||
                         !(L->post_mlp_norm = const_vector(m, h, 1.0f))))
            goto oom;
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            int64_t rows, cols;
            qlt_model_proj_shape(c, p, &rows, &cols);
            if (random_matrix(m, &L->proj[p], rows, cols, blocksize, dq, &rng, host)) goto done;
        }
        if (c->attention_bias)
            for (int p = 0; p < 3; p++)
                if (!(L->bias[p] = const_vector(m, L->proj[p].rows, 0.0f))) goto oom;
        if (c->qk_norm && (!(L->q_norm = const_vector(m, c->head_dim, 1.0f)) ||
                           !(L->k_norm = const_vector(m, c->head_dim, 1.0f))))
            goto oom;
    }
    if (qlt_model_finish(m)) goto done;
    rc = 0;
    goto done;
oom:
    qlt_fail("out of %s memory creating a random %s model", be->name, c->arch_name);
done:
    free(host);
    if (rc != 0) qlt_model_free(m);
    return rc;
}

#define RANDOM_PREFIX "random:"

char *qlt_model_dir_of(const char *path) {
    int random = strncmp(path, RANDOM_PREFIX, strlen(RANDOM_PREFIX)) == 0;
    if (!random && !qlt_file_exists(path)) return qlt_xstrdup(path);
    const char *config = random ? path + strlen(RANDOM_PREFIX) : path;
    const char *slash = strrchr(config, '/');
    if (!slash) return qlt_xstrdup(".");
    if (slash == config) return qlt_xstrdup("/");
    char *dir = qlt_xstrdup(config);
    dir[slash - config] = '\0';
    return dir;
}

int qlt_model_open(qlt_model *m, qlt_backend *be, const char *path, const qlt_model_load_opts *opts, uint64_t seed) {
    if (!path[0]) return qlt_fail("model.path is empty: set it to a Hugging Face model directory, a .gguf file or random:CONFIG.json");
    if (strncmp(path, RANDOM_PREFIX, strlen(RANDOM_PREFIX)) != 0) return qlt_model_load(m, be, path, opts);
    const char *config_path = path + strlen(RANDOM_PREFIX);
    if (!config_path[0]) return qlt_fail("model.path '%s' names no config.json: use random:path/to/config.json", path);
    char *text = NULL;
    QLT_TRY(qlt_read_file(config_path, &text, NULL));
    qlt_model_config mc;
    int rc = qlt_model_config_parse(&mc, text, config_path);
    free(text);
    if (rc != 0) return -1;
    return qlt_model_init_random(m, be, &mc, seed, opts);
}
