/* lora.c: LoRA adapter state, PEFT-compatible init, load and save (see lora.h). */
#include "model/lora.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "common/rng.h"
#include "common/whole_number.h"
#include "config/config.h"
#include "formats/safetensors.h"
#include "model/fused_proj.h"

static const unsigned proj_target_bit[QLT_PROJ_COUNT] = {QLT_TARGET_Q, QLT_TARGET_K, QLT_TARGET_V, QLT_TARGET_O,
                                                         QLT_TARGET_GATE, QLT_TARGET_UP, QLT_TARGET_DOWN};

unsigned qlt_lora_target_bit(qlt_proj p) { return proj_target_bit[p]; }

const qlt_proj_group qlt_proj_groups[QLT_GROUP_COUNT] = {
    [QLT_GROUP_QKV] = {QLT_PROJ_Q, 3},
    [QLT_GROUP_O] = {QLT_PROJ_O, 1},
    [QLT_GROUP_GATE_UP] = {QLT_PROJ_GATE, 2},
    [QLT_GROUP_DOWN] = {QLT_PROJ_DOWN, 1},
};

/* PEFT's name of a module's A or B */
static void module_tensor_name(char *buf, size_t size, int fused, int layer, qlt_proj p, char which) {
    qlt_model_config mc = {.arch = fused ? QLT_ARCH_PHI3 : QLT_ARCH_LLAMA};
    snprintf(buf, size, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer, qlt_proj_parent(p),
             qlt_fused_module_name(&mc, p), which);
}

void qlt_lora_tensor_name(char *buf, size_t size, int layer, qlt_proj p, char which) {
    module_tensor_name(buf, size, 0, layer, p, which);
}

void qlt_lora_module_tensor_name(const qlt_lora *lora, char *buf, size_t size, int layer, qlt_proj p, char which) {
    module_tensor_name(buf, size, lora->fused, layer, p, which);
}

int qlt_lora_create(qlt_lora *lora, const qlt_model *model, int r, float alpha, unsigned targets, int rslora,
                    float dropout) {
    memset(lora, 0, sizeof *lora);
    if (r < 1) return qlt_fail("lora.r must be at least 1 (got %d)", r);
    if (!(targets & QLT_TARGET_ALL)) return qlt_fail("lora.targets is empty: name at least one of q,k,v,o,gate,up,down");
    lora->r = r;
    lora->alpha = alpha;
    lora->rslora = rslora;
    lora->scale = rslora ? alpha / sqrtf((float)r) : alpha / (float)r;
    lora->targets = targets;
    lora->dropout = dropout;
    lora->n_layers = model->cfg.n_layers;
    lora->fused = qlt_model_fused(&model->cfg);
    for (int p = 0; p < QLT_PROJ_COUNT; p++) { /* a fused module is adapted whole or not at all */
        qlt_fused_module fm = qlt_fused_module_of(&model->cfg, (qlt_proj)p);
        unsigned bits = 0;
        for (int j = 0; j < fm.count; j++) bits |= proj_target_bit[fm.first + j];
        if ((targets & bits) && (targets & bits) != bits)
            return qlt_fail("lora.targets names %s but not all of its module: %s fuses %s into %s, one adapter; name "
                            "all of them (or %s) or none", qlt_proj_name((qlt_proj)p), model->cfg.arch_name,
                            fm.count == 3 ? "q, k, v" : "gate, up", qlt_fused_module_name(&model->cfg, (qlt_proj)p),
                            qlt_fused_module_name(&model->cfg, (qlt_proj)p));
    }
    lora->be = model->be;
    lora->slots = qlt_xcalloc((size_t)lora->n_layers, sizeof *lora->slots);
    int64_t off = 0;
    for (int l = 0; l < lora->n_layers; l++) {
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            qlt_lora_slot *s = &lora->slots[l][p];
            if (!(targets & proj_target_bit[p])) continue;
            qlt_fused_module fm = qlt_fused_module_of(&model->cfg, (qlt_proj)p);
            s->active = 1;
            s->in = model->layers[l].proj[p].cols;
            s->out = model->layers[l].proj[p].rows;
            s->module_first = fm.first;
            s->module_out = 0;
            for (int j = 0; j < fm.count; j++) s->module_out += model->layers[l].proj[fm.first + j].rows;
            if ((int)fm.first == p) { /* the module's A, then its B */
                s->offset_a = off;
                s->offset_b = off + (int64_t)r * s->in;
                off += (int64_t)r * (s->in + s->module_out);
            } else { /* the module's A, and the rows of its B after the previous projection's */
                const qlt_lora_slot *prev = &lora->slots[l][p - 1];
                s->offset_a = prev->offset_a;
                s->offset_b = prev->offset_b + (int64_t)r * prev->out;
            }
        }
    }
    lora->n_params = off;
    size_t bytes = sizeof(float) * (size_t)off;
    qlt_backend *be = lora->be;
    lora->params = be->alloc(be, bytes);
    lora->grads = be->alloc(be, bytes);
    lora->m = be->alloc(be, bytes);
    lora->v = be->alloc(be, bytes);
    if (!lora->params || !lora->grads || !lora->m || !lora->v) {
        qlt_lora_free(lora);
        return qlt_fail("out of %s memory for %lld LoRA parameters", be->name, (long long)off);
    }
    be->zero(be, lora->params, bytes);
    be->zero(be, lora->grads, bytes);
    be->zero(be, lora->m, bytes);
    be->zero(be, lora->v, bytes);
    /* the groups the forward hands the backend, each the projections of it that carry an adapter: it
     * sizes its workspaces for them now, not in a step */
    for (int l = 0; l < lora->n_layers && be->lora_group_prepare; l++) {
        for (int gi = 0; gi < QLT_GROUP_COUNT; gi++) {
            int64_t outs[QLT_STACK_MAX], in = 0;
            int k = 0;
            for (int j = 0; j < qlt_proj_groups[gi].count; j++) {
                const qlt_lora_slot *s = &lora->slots[l][qlt_proj_groups[gi].first + j];
                if (!s->active) continue;
                in = s->in;
                outs[k++] = s->out;
            }
            if (k > 0 && be->lora_group_prepare(be, k, in, outs, r) != 0) {
                qlt_lora_free(lora);
                return -1;
            }
        }
    }
    /* gate+up with an adapter on each: room for the adapters' columns next to the stacked weight, where
     * the backend can fold them into the one GEMM (linear_lora_fwd) */
    unsigned gate_up = proj_target_bit[QLT_PROJ_GATE] | proj_target_bit[QLT_PROJ_UP];
    if ((targets & gate_up) == gate_up) {
        for (int l = 0; l < lora->n_layers; l++) {
            const qlt_weight *w[2] = {&model->layers[l].proj[QLT_PROJ_GATE], &model->layers[l].proj[QLT_PROJ_UP]};
            if (be->weight_stack_prepare(be, w, 2, 2 * 3 * (int64_t)r) != 0) {
                qlt_lora_free(lora);
                return -1;
            }
        }
    }
    return 0;
}

void qlt_lora_init_default(qlt_lora *lora, uint64_t seed) {
    float *host = qlt_xcalloc((size_t)lora->n_params, sizeof(float));
    qlt_rng rng;
    qlt_rng_seed(&rng, seed);
    for (int l = 0; l < lora->n_layers; l++) {
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            const qlt_lora_slot *s = &lora->slots[l][p];
            if (!qlt_lora_owns_module(s, p)) continue;
            float bound = 1.0f / sqrtf((float)s->in);
            for (int64_t i = 0; i < (int64_t)lora->r * s->in; i++)
                host[s->offset_a + i] = (2.0f * qlt_rng_uniform(&rng) - 1.0f) * bound;
        }
    }
    lora->be->upload(lora->be, lora->params, host, sizeof(float) * (size_t)lora->n_params);
    free(host);
}

int qlt_lora_read_peft_config(const char *dir, int *r, float *alpha, unsigned *targets, int *rslora, float *dropout) {
    char *path = qlt_path_join(dir, "adapter_config.json");
    char *text = NULL;
    int rc = qlt_read_file(path, &text, NULL);
    cJSON *root = rc == 0 ? cJSON_Parse(text) : NULL;
    free(text);
    if (rc == 0 && !cJSON_IsObject(root)) rc = qlt_fail("%s: not a JSON object", path);
    if (rc == 0) {
        const cJSON *jr = cJSON_GetObjectItemCaseSensitive(root, "r");
        const cJSON *ja = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
        const cJSON *jp = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(root, "use_rslora");
        const cJSON *jd = cJSON_GetObjectItemCaseSensitive(root, "lora_dropout");
        const cJSON *jdora = cJSON_GetObjectItemCaseSensitive(root, "use_dora");
        const cJSON *jrp = cJSON_GetObjectItemCaseSensitive(root, "rank_pattern");
        const cJSON *jap = cJSON_GetObjectItemCaseSensitive(root, "alpha_pattern");
        if (cJSON_IsString(jp) && strcmp(jp->valuestring, "LORA") != 0)
            rc = qlt_fail("%s: peft_type '%s' is not supported (only LORA)", path, jp->valuestring);
        else if (cJSON_IsTrue(jdora))
            rc = qlt_fail("%s: use_dora = true is not supported", path);
        else if ((cJSON_IsObject(jrp) && jrp->child) || (cJSON_IsObject(jap) && jap->child))
            rc = qlt_fail("%s: per-module rank_pattern / alpha_pattern are not supported: one r and lora_alpha for "
                          "every module", path);
        else if (!cJSON_IsNumber(jr) || jr->valuedouble < 1 || !qlt_is_int32(jr->valuedouble))
            rc = qlt_fail("%s: 'r' must be a positive integer", path);
        else if (!cJSON_IsNumber(ja) || !(ja->valuedouble > 0 && ja->valuedouble <= FLT_MAX))
            rc = qlt_fail("%s: 'lora_alpha' must be a positive number that fits a 32-bit float (as lora.alpha)", path);
        else if (js && !cJSON_IsNull(js) && !cJSON_IsBool(js))
            rc = qlt_fail("%s: 'use_rslora' must be true or false", path);
        else if (!cJSON_IsArray(jt) && !cJSON_IsString(jt))
            rc = qlt_fail("%s: 'target_modules' must be a list of module names", path);
        if (rc == 0) {
            *r = (int)jr->valuedouble;
            *alpha = (float)ja->valuedouble;
            *rslora = cJSON_IsTrue(js);
            *dropout = cJSON_IsNumber(jd) ? (float)jd->valuedouble : 0.0f;
            *targets = 0;
            if (cJSON_IsString(jt)) {
                if (strcmp(jt->valuestring, "all-linear") == 0) *targets = QLT_TARGET_ALL;
                else rc = qlt_fail("%s: target_modules '%s' (a regex) is not supported: list module names", path, jt->valuestring);
            } else {
                for (const cJSON *it = jt->child; it && rc == 0; it = it->next) {
                    unsigned bit = 0; /* stays 0 for an unknown name */
                    if (cJSON_IsString(it)) qlt_config_target_bits(it->valuestring, &bit);
                    if (!bit)
                        rc = qlt_fail("%s: target module '%s' is not supported (supported: q_proj, k_proj, v_proj, "
                                      "o_proj, gate_proj, up_proj, down_proj; Phi-3: qkv_proj, gate_up_proj)", path,
                                      cJSON_IsString(it) ? it->valuestring : "?");
                    *targets |= bit;
                }
            }
        }
    }
    cJSON_Delete(root);
    free(path);
    return rc;
}

int qlt_lora_peft_tensor(const qlt_st_file *f, int layer, qlt_proj p, char which, int r, int64_t in, int64_t out,
                         const qlt_st_tensor **t) {
    return qlt_lora_peft_module_tensor(f, 0, layer, p, which, r, in, out, t);
}

int qlt_lora_peft_module_tensor(const qlt_st_file *f, int fused, int layer, qlt_proj p, char which, int r, int64_t in,
                                int64_t out, const qlt_st_tensor **t) {
    char name[256];
    module_tensor_name(name, sizeof name, fused, layer, p, which);
    int64_t rows = which == 'B' ? out : r, cols = which == 'B' ? r : in;
    *t = qlt_st_find(f, name);
    if (!*t) return qlt_fail("%s: tensor '%s' is missing", f->path, name);
    const qlt_st_tensor *x = *t;
    if (x->ndim != 2 || x->shape[0] != rows || x->shape[1] != cols || !qlt_dtype_is_float(x->dtype)) {
        char got[64];
        qlt_st_format_shape(got, sizeof got, x->ndim, x->shape);
        return qlt_fail("%s: tensor '%s' is %s [%s]; this model needs a float [%lld, %lld] matrix (an adapter of "
                        "another model, or of another r?)", f->path, name, qlt_dtype_name(x->dtype), got,
                        (long long)rows, (long long)cols);
    }
    return 0;
}

int qlt_lora_load_peft(qlt_lora *lora, const char *dir) {
    char *path = qlt_path_join(dir, "adapter_model.safetensors");
    qlt_st_file f;
    if (qlt_st_open(&f, path) != 0) {
        free(path);
        return -1;
    }
    float *host = qlt_xcalloc((size_t)lora->n_params, sizeof(float));
    int rc = 0, used = 0;
    for (int l = 0; l < lora->n_layers && rc == 0; l++) {
        for (int p = 0; p < QLT_PROJ_COUNT && rc == 0; p++) {
            const qlt_lora_slot *s = &lora->slots[l][p];
            if (!qlt_lora_owns_module(s, p)) continue;
            for (int which = 0; which < 2 && rc == 0; which++) {
                const qlt_st_tensor *t;
                rc = qlt_lora_peft_module_tensor(&f, lora->fused, l, p, which ? 'B' : 'A', lora->r, s->in,
                                                 s->module_out, &t);
                if (rc == 0) {
                    qlt_st_read_f32(t, host + (which ? qlt_lora_offset_b(lora, s) : s->offset_a));
                    used++;
                }
            }
        }
    }
    if (rc == 0 && used != f.n_tensors)
        rc = qlt_fail("%s: holds %d tensors but lora.targets uses %d: set lora.targets to the adapter's "
                      "target_modules", path, f.n_tensors, used);
    if (rc == 0) lora->be->upload(lora->be, lora->params, host, sizeof(float) * (size_t)lora->n_params);
    free(host);
    qlt_st_close(&f);
    free(path);
    return rc;
}

int qlt_lora_save_peft(const qlt_lora *lora, const qlt_model_config *mc, const char *base_model, const char *dir) {
    float *host = qlt_xmalloc(sizeof(float) * (size_t)lora->n_params);
    lora->be->download(lora->be, host, lora->params, sizeof(float) * (size_t)lora->n_params);
    int rc = qlt_lora_save_peft_host(lora, host, mc, base_model, dir);
    free(host);
    return rc;
}

int qlt_lora_save_peft_host(const qlt_lora *lora, const float *host, const qlt_model_config *mc,
                            const char *base_model, const char *dir) {
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    qlt_st_writer_set_metadata(&w, "{\"format\":\"pt\"}");
    char name[256];
    cJSON *targets = cJSON_CreateArray();
    qlt_model_config kind = {.arch = lora->fused ? QLT_ARCH_PHI3 : QLT_ARCH_LLAMA};
    for (int p = 0; p < QLT_PROJ_COUNT; p++)
        if ((lora->targets & proj_target_bit[p]) && (int)qlt_fused_module_of(&kind, (qlt_proj)p).first == p)
            cJSON_AddItemToArray(targets, cJSON_CreateString(qlt_fused_module_name(&kind, (qlt_proj)p)));
    for (int l = 0; l < lora->n_layers; l++) {
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            const qlt_lora_slot *s = &lora->slots[l][p];
            if (!qlt_lora_owns_module(s, p)) continue;
            int64_t shape_a[2] = {lora->r, s->in}, shape_b[2] = {s->module_out, lora->r};
            qlt_lora_module_tensor_name(lora, name, sizeof name, l, p, 'A');
            qlt_st_writer_add(&w, name, QLT_DTYPE_F32, 2, shape_a, host + s->offset_a);
            qlt_lora_module_tensor_name(lora, name, sizeof name, l, p, 'B');
            qlt_st_writer_add(&w, name, QLT_DTYPE_F32, 2, shape_b, host + qlt_lora_offset_b(lora, s));
        }
    }
    char *st_path = qlt_path_join(dir, "adapter_model.safetensors");
    int rc = qlt_st_writer_write(&w, st_path);
    free(st_path);
    qlt_st_writer_free(&w);

    cJSON *root = cJSON_CreateObject();
    cJSON *am = cJSON_AddObjectToObject(root, "auto_mapping");
    cJSON_AddStringToObject(am, "base_model_class", mc->arch_name);
    cJSON_AddStringToObject(am, "parent_library", "transformers");
    if (base_model && base_model[0]) cJSON_AddStringToObject(root, "base_model_name_or_path", base_model);
    else cJSON_AddNullToObject(root, "base_model_name_or_path");
    cJSON_AddStringToObject(root, "bias", "none");
    cJSON_AddBoolToObject(root, "fan_in_fan_out", 0);
    cJSON_AddBoolToObject(root, "inference_mode", 1);
    cJSON_AddBoolToObject(root, "init_lora_weights", 1);
    cJSON_AddNullToObject(root, "layers_pattern");
    cJSON_AddNullToObject(root, "layers_to_transform");
    cJSON_AddNumberToObject(root, "lora_alpha", lora->alpha);
    cJSON_AddNumberToObject(root, "lora_dropout", lora->dropout);
    cJSON_AddNullToObject(root, "modules_to_save");
    cJSON_AddStringToObject(root, "peft_type", "LORA");
    cJSON_AddNumberToObject(root, "r", lora->r);
    cJSON_AddItemToObject(root, "rank_pattern", cJSON_CreateObject());
    cJSON_AddItemToObject(root, "alpha_pattern", cJSON_CreateObject());
    cJSON_AddNullToObject(root, "revision");
    cJSON_AddItemToObject(root, "target_modules", targets);
    cJSON_AddStringToObject(root, "task_type", "CAUSAL_LM");
    cJSON_AddBoolToObject(root, "use_dora", 0);
    cJSON_AddBoolToObject(root, "use_rslora", lora->rslora);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (rc == 0) {
        char *cfg_path = qlt_path_join(dir, "adapter_config.json");
        rc = qlt_write_file_atomic(cfg_path, text, strlen(text));
        free(cfg_path);
    }
    free(text);
    return rc;
}

void qlt_lora_free(qlt_lora *lora) {
    if (lora->be) {
        lora->be->free(lora->be, lora->params);
        lora->be->free(lora->be, lora->grads);
        lora->be->free(lora->be, lora->m);
        lora->be->free(lora->be, lora->v);
    }
    free(lora->slots);
    memset(lora, 0, sizeof *lora);
}
