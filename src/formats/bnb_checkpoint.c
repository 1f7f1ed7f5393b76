/* bnb_checkpoint.c: reading and writing bitsandbytes' 4-bit checkpoint tensors (see bnb_checkpoint.h).
 * The names, dtypes, shapes and the packed quant_state JSON follow bitsandbytes' QuantState.as_dict /
 * from_dict and Linear4bit._save_to_state_dict; the JSON is written byte-for-byte as Python's json.dumps
 * would, so a checkpoint we write and one bitsandbytes writes hold the same bytes. */
#include "formats/bnb_checkpoint.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "nf4/nf4.h"

/* ---- config.json ---- */

static const char *torch_dtype_name(qlt_dtype t) {
    switch (t) {
    case QLT_DTYPE_F32: return "float32";
    case QLT_DTYPE_F16: return "float16";
    case QLT_DTYPE_BF16: return "bfloat16";
    default: return NULL;
    }
}

static int parse_torch_dtype(const char *s, qlt_dtype *out) {
    if (!strcmp(s, "float32") || !strcmp(s, "float")) *out = QLT_DTYPE_F32;
    else if (!strcmp(s, "float16") || !strcmp(s, "half")) *out = QLT_DTYPE_F16;
    else if (!strcmp(s, "bfloat16")) *out = QLT_DTYPE_BF16;
    else return -1;
    return 0;
}

int qlt_bnb_check_config(const cJSON *qc, const char *path, qlt_bnb_config *cfg) {
    qlt_bnb_config unused;
    if (!cfg) cfg = &unused;
    memset(cfg, 0, sizeof *cfg);
    if (!qc || cJSON_IsNull(qc)) return 0; /* not quantized */
    if (!cJSON_IsObject(qc)) return qlt_fail("%s: quantization_config must be an object", path);
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    if (!cJSON_IsString(method) || strcmp(method->valuestring, "bitsandbytes") != 0)
        return qlt_fail("%s: quantization_config.quant_method is %s: only bitsandbytes 4-bit NF4 checkpoints load "
                        "(or use the unquantized model; model.quant: nf4 quantizes it on load)",
                        path, cJSON_IsString(method) ? method->valuestring : "missing");
    const cJSON *l4 = cJSON_GetObjectItemCaseSensitive(qc, "load_in_4bit");
    if (!l4) l4 = cJSON_GetObjectItemCaseSensitive(qc, "_load_in_4bit");
    if (!cJSON_IsTrue(l4))
        return qlt_fail("%s: quantization_config is bitsandbytes but not load_in_4bit (8-bit checkpoints are not "
                        "supported: use the unquantized model)", path);
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(qc, "bnb_4bit_quant_type");
    if (cJSON_IsString(qt) && strcmp(qt->valuestring, "nf4") != 0)
        return qlt_fail("%s: bnb_4bit_quant_type is '%s': only nf4 is supported", path, qt->valuestring);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(qc, "bnb_4bit_quant_storage");
    if (cJSON_IsString(st) && strcmp(st->valuestring, "uint8") != 0)
        return qlt_fail("%s: bnb_4bit_quant_storage is '%s': only uint8 is supported", path, st->valuestring);
    const cJSON *cd = cJSON_GetObjectItemCaseSensitive(qc, "bnb_4bit_compute_dtype");
    qlt_dtype compute;
    if (cJSON_IsString(cd) && parse_torch_dtype(cd->valuestring, &compute) != 0)
        return qlt_fail("%s: bnb_4bit_compute_dtype '%s' is not float32, float16 or bfloat16", path, cd->valuestring);
    cfg->double_quant = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(qc, "bnb_4bit_use_double_quant"));
    return 1;
}

int qlt_bnb_detect(const char *model_dir, qlt_bnb_config *cfg) {
    char *path = qlt_path_join(model_dir, "config.json"), *text = NULL;
    size_t len;
    if (qlt_read_file(path, &text, &len) != 0) {
        free(path);
        return -1;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = !root || !cJSON_IsObject(root)
                 ? qlt_fail("%s: not a JSON object", path)
                 : qlt_bnb_check_config(cJSON_GetObjectItemCaseSensitive(root, "quantization_config"), path, cfg);
    cJSON_Delete(root);
    free(path);
    return rc;
}

/* ---- Python float repr ---- */

void qlt_py_float_repr(double v, char *buf, int size) {
    if (isnan(v)) {
        snprintf(buf, (size_t)size, "NaN"); /* json.dumps spelling */
        return;
    }
    if (isinf(v)) {
        snprintf(buf, (size_t)size, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char tmp[64];
    for (int p = 0; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p, v);
        if (strtod(tmp, NULL) == v) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX: collect the digits and the decimal exponent */
    const char *s = tmp;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    char digits[32];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') digits[nd++] = *s;
    int exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char out[80];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(buf, (size_t)size, "%s", out);
}

/* ---- quant_state JSON ---- */

char *qlt_bnb_quant_state_json(const qlt_nf4 *q, const int64_t *shape, int ndim, qlt_dtype orig_dtype) {
    const char *dt = torch_dtype_name(orig_dtype);
    QLT_ASSERT(dt);
    char shp[256];
    qlt_st_format_shape(shp, sizeof shp, ndim, shape);
    char *json = qlt_xmalloc(1024);
    int n = snprintf(json, 1024, "{\"quant_type\": \"nf4\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": [%s]",
                     q->blocksize, dt, shp);
    if (q->double_quant) {
        char off[64];
        qlt_py_float_repr((double)q->offset, off, sizeof off);
        n += snprintf(json + n, 1024 - (size_t)n,
                      ", \"nested_blocksize\": %d, \"nested_dtype\": \"float32\", \"nested_offset\": %s",
                      q->nested_blocksize, off);
    }
    snprintf(json + n, 1024 - (size_t)n, "}");
    return json;
}

/* ---- reading ---- */

typedef struct found {
    const qlt_st_tensor *t;
    const char *file;
} found;

static found find_tensor(const qlt_st_dir *d, const char *name) {
    found f = {NULL, ""};
    for (int i = 0; i < d->n_files; i++) {
        const qlt_st_tensor *t = qlt_st_find(&d->files[i], name);
        if (t) {
            f.t = t;
            f.file = d->files[i].path;
            return f;
        }
    }
    return f;
}

int qlt_bnb_module_is_quantized(const qlt_st_dir *d, const char *module) {
    char name[512];
    snprintf(name, sizeof name, "%s.weight.quant_state.bitsandbytes__nf4", module);
    return qlt_st_dir_find(d, name) != NULL;
}

/* Looks up P.weight<suffix> and checks its dtype and 1-D/2-D shape. */
static int need(const qlt_st_dir *d, const char *module, const char *suffix, qlt_dtype dtype, int64_t dim0,
                int64_t dim1, found *out) {
    char name[512];
    snprintf(name, sizeof name, "%s.weight%s", module, suffix);
    *out = find_tensor(d, name);
    const qlt_st_tensor *t = out->t;
    if (!t)
        return qlt_fail("tensor '%s' is missing: the bitsandbytes 4-bit checkpoint is incomplete (re-save it, or "
                        "quantize the original model with `qlora-train quantize`)", name);
    if (t->dtype != dtype)
        return qlt_fail("%s: tensor '%s' is %s, expected %s", out->file, name, qlt_dtype_name(t->dtype),
                        qlt_dtype_name(dtype));
    int want_ndim = dim1 >= 0 ? 2 : 1;
    if (t->ndim != want_ndim || t->shape[0] != dim0 || (dim1 >= 0 && t->shape[1] != dim1)) {
        char got[128];
        qlt_st_format_shape(got, sizeof got, t->ndim, t->shape);
        if (dim1 >= 0)
            return qlt_fail("%s: tensor '%s' has shape [%s], expected [%lld, %lld] for its quant_state", out->file, name,
                            got, (long long)dim0, (long long)dim1);
        return qlt_fail("%s: tensor '%s' has shape [%s], expected [%lld] for its quant_state", out->file, name, got,
                        (long long)dim0);
    }
    return 0;
}

static int json_int(const cJSON *o, const char *key, int64_t *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble)) return -1;
    *v = (int64_t)it->valuedouble;
    return 0;
}

int qlt_bnb_read_module(const qlt_st_dir *d, const char *module, qlt_nf4 *q, int64_t *shape, int *ndim,
                        qlt_dtype *orig_dtype) {
    memset(q, 0, sizeof *q);
    char qs_name[512];
    snprintf(qs_name, sizeof qs_name, "%s.weight.quant_state.bitsandbytes__nf4", module);
    found qs = find_tensor(d, qs_name);
    if (!qs.t) {
        char fp4[512];
        snprintf(fp4, sizeof fp4, "%s.weight.quant_state.bitsandbytes__fp4", module);
        if (find_tensor(d, fp4).t) return qlt_fail("tensor '%s': fp4 quantization is not supported (only nf4)", fp4);
        return qlt_fail("tensor '%s' is missing: '%s' is not a bitsandbytes 4-bit module", qs_name, module);
    }
    if (qs.t->dtype != QLT_DTYPE_U8 || qs.t->ndim != 1)
        return qlt_fail("%s: tensor '%s' must be U8 bytes of a JSON object (got %s with %d dims)", qs.file, qs_name,
                        qlt_dtype_name(qs.t->dtype), qs.t->ndim);
    char *text = qlt_xmalloc(qs.t->nbytes + 1);
    memcpy(text, qs.t->data, qs.t->nbytes);
    text[qs.t->nbytes] = 0;
    cJSON *js = cJSON_Parse(text);
    free(text);
    int rc = -1;
    int64_t blocksize = 0, nested_bs = 0, n = 1;
    double offset = 0;
    int nested = 0;
    if (!js || !cJSON_IsObject(js)) {
        qlt_fail("%s: tensor '%s' does not hold a JSON object (malformed quant_state: re-save the checkpoint)",
                 qs.file, qs_name);
        goto out;
    }
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(js, "quant_type");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(js, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(js, "shape");
    if (!cJSON_IsString(qt) || strcmp(qt->valuestring, "nf4") != 0) {
        qlt_fail("%s: tensor '%s': quant_type is %s, expected \"nf4\"", qs.file, qs_name,
                 cJSON_IsString(qt) ? qt->valuestring : "missing");
        goto out;
    }
    if (json_int(js, "blocksize", &blocksize) != 0 || blocksize > 4096 || blocksize < 1 ||
        qlt_nf4_check_blocksize((int)blocksize) != 0) {
        qlt_fail("%s: tensor '%s': blocksize must be a power of two from 32 to 4096", qs.file, qs_name);
        goto out;
    }
    if (!cJSON_IsString(dt) || parse_torch_dtype(dt->valuestring, orig_dtype) != 0) {
        qlt_fail("%s: tensor '%s': dtype must be \"float32\", \"float16\" or \"bfloat16\"", qs.file, qs_name);
        goto out;
    }
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) < 1 || cJSON_GetArraySize(sh) > QLT_MAX_DIMS) {
        qlt_fail("%s: tensor '%s': shape must be a list of 1 to %d dims", qs.file, qs_name, QLT_MAX_DIMS);
        goto out;
    }
    *ndim = cJSON_GetArraySize(sh);
    for (int i = 0; i < *ndim; i++) {
        const cJSON *it = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble != floor(it->valuedouble) ||
            it->valuedouble > 4e15 / (double)n) {
            qlt_fail("%s: tensor '%s': shape entry %d is not a positive integer", qs.file, qs_name, i);
            goto out;
        }
        shape[i] = (int64_t)it->valuedouble;
        n *= shape[i];
    }
    nested = cJSON_GetObjectItemCaseSensitive(js, "nested_absmax") != NULL ||
             cJSON_GetObjectItemCaseSensitive(js, "nested_offset") != NULL;
    if (nested) {
        const cJSON *nd = cJSON_GetObjectItemCaseSensitive(js, "nested_dtype");
        const cJSON *no = cJSON_GetObjectItemCaseSensitive(js, "nested_offset");
        if (json_int(js, "nested_blocksize", &nested_bs) != 0 || nested_bs != QLT_NF4_NESTED_BLOCKSIZE) {
            qlt_fail("%s: tensor '%s': nested_blocksize must be %d", qs.file, qs_name, QLT_NF4_NESTED_BLOCKSIZE);
            goto out;
        }
        if (!cJSON_IsString(nd) || strcmp(nd->valuestring, "float32") != 0) {
            qlt_fail("%s: tensor '%s': nested_dtype must be \"float32\"", qs.file, qs_name);
            goto out;
        }
        if (!cJSON_IsNumber(no) || !(fabs(no->valuedouble) <= FLT_MAX)) {
            qlt_fail("%s: tensor '%s': nested_offset must be a number that fits a 32-bit float", qs.file, qs_name);
            goto out;
        }
        offset = no->valuedouble;
    }
    /* the tensors, each checked against the quant_state before anything is allocated for it (a corrupt
     * shape could otherwise ask for terabytes) */
    int64_t nblocks = (n + blocksize - 1) / blocksize;
    int64_t nested_nblocks = (nblocks + QLT_NF4_NESTED_BLOCKSIZE - 1) / QLT_NF4_NESTED_BLOCKSIZE;
    found codes, code, absmax, nested_absmax = {0}, nested_code = {0};
    if (need(d, module, "", QLT_DTYPE_U8, (n + 1) / 2, 1, &codes) != 0 ||
        need(d, module, ".quant_map", QLT_DTYPE_F32, 16, -1, &code) != 0 ||
        need(d, module, ".absmax", nested ? QLT_DTYPE_U8 : QLT_DTYPE_F32, nblocks, -1, &absmax) != 0 ||
        (nested && (need(d, module, ".nested_absmax", QLT_DTYPE_F32, nested_nblocks, -1, &nested_absmax) != 0 ||
                    need(d, module, ".nested_quant_map", QLT_DTYPE_F32, 256, -1, &nested_code) != 0)))
        goto out;
    if (memcmp(code.t->data, qlt_nf4_codebook, sizeof qlt_nf4_codebook) != 0) {
        qlt_fail("%s: tensor '%s.weight.quant_map' is not the NF4 codebook (only nf4 is supported)", code.file, module);
        goto out;
    }
    if (qlt_nf4_alloc_host(q, n, (int)blocksize, nested) != 0) goto out;
    q->offset = (float)offset;
    memcpy(q->codes, codes.t->data, (size_t)(n + 1) / 2);
    memcpy(q->code, code.t->data, 16 * sizeof(float));
    if (nested) {
        memcpy(q->absmax_q, absmax.t->data, (size_t)q->nblocks);
        memcpy(q->nested_absmax, nested_absmax.t->data, (size_t)q->nested_nblocks * sizeof(float));
        memcpy(q->nested_code, nested_code.t->data, 256 * sizeof(float));
    } else {
        memcpy(q->absmax, absmax.t->data, (size_t)q->nblocks * sizeof(float));
    }
    rc = 0;
out:
    cJSON_Delete(js);
    if (rc) qlt_nf4_free_host(q);
    return rc;
}

/* ---- writing ---- */

void qlt_bnb_write_module(qlt_st_writer *w, const char *module, const qlt_nf4 *q, const int64_t *shape, int ndim,
                          qlt_dtype orig_dtype) {
    char name[512];
    int64_t s2[2] = {(q->numel + 1) / 2, 1}, s1[1];
    snprintf(name, sizeof name, "%s.weight", module);
    qlt_st_writer_add(w, name, QLT_DTYPE_U8, 2, s2, q->codes);
    s1[0] = q->nblocks;
    snprintf(name, sizeof name, "%s.weight.absmax", module);
    if (q->double_quant)
        qlt_st_writer_add(w, name, QLT_DTYPE_U8, 1, s1, q->absmax_q);
    else
        qlt_st_writer_add(w, name, QLT_DTYPE_F32, 1, s1, q->absmax);
    s1[0] = 16;
    snprintf(name, sizeof name, "%s.weight.quant_map", module);
    qlt_st_writer_add(w, name, QLT_DTYPE_F32, 1, s1, q->code);
    if (q->double_quant) {
        s1[0] = q->nested_nblocks;
        snprintf(name, sizeof name, "%s.weight.nested_absmax", module);
        qlt_st_writer_add(w, name, QLT_DTYPE_F32, 1, s1, q->nested_absmax);
        s1[0] = 256;
        snprintf(name, sizeof name, "%s.weight.nested_quant_map", module);
        qlt_st_writer_add(w, name, QLT_DTYPE_F32, 1, s1, q->nested_code);
    }
    char *json = qlt_bnb_quant_state_json(q, shape, ndim, orig_dtype);
    s1[0] = (int64_t)strlen(json);
    snprintf(name, sizeof name, "%s.weight.quant_state.bitsandbytes__nf4", module);
    qlt_st_writer_add(w, name, QLT_DTYPE_U8, 1, s1, json);
    free(json);
}
