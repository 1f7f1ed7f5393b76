/* checkpoint.c: see checkpoint.h. */
#define _GNU_SOURCE
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/env.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "formats/safetensors.h"
#include "train/checkpoint_verify.h"
#include "train/data_parallel.h"

/* 2: + files (sizes and CRC-32s), model_fingerprint, tokenizer, lora shape, best eval loss, early stopping */
#define TRAINER_STATE_VERSION 2

/* QLT_TEST_KILL_IN_SAVE=PHASE[:STEP]: the process kills itself with SIGKILL when a save of step STEP (any save
 * without it) reaches PHASE, so a test can land a kill between the files of a checkpoint deterministically. */
static void test_kill_point(const qlt_trainer *t, const char *phase) {
    const char *hook = qlt_env(QLT_ENV_TEST_KILL_IN_SAVE);
    if (!hook) return;
    size_t n = strlen(phase);
    if (strncmp(hook, phase, n) != 0 || (hook[n] != '\0' && hook[n] != ':')) return;
    if (hook[n] == ':' && strtoll(hook + n + 1, NULL, 10) != t->step) return;
    fprintf(stderr, "qlora-train: QLT_TEST_KILL_IN_SAVE: killed at '%s' of the save of step %lld\n", phase,
            (long long)t->step);
    kill(getpid(), SIGKILL);
}

/* What a save writes, downloaded once for both the finiteness check and the files: the adapter and, for a
 * checkpoint, both Adam moments (m and v NULL for final/), float [n_params] each. */
typedef struct saved_state {
    float *params, *m, *v;
} saved_state;

static float *download_floats(const qlt_trainer *t, const float *dev) {
    size_t bytes = sizeof(float) * (size_t)t->lora.n_params;
    float *host = qlt_xmalloc(bytes ? bytes : sizeof(float));
    t->be->download(t->be, host, dev, bytes);
    return host;
}

static void download_state(const qlt_trainer *t, int checkpoint, saved_state *st) {
    st->params = download_floats(t, t->lora.params);
    st->m = checkpoint ? download_floats(t, t->lora.m) : NULL;
    st->v = checkpoint ? download_floats(t, t->lora.v) : NULL;
}

static void free_state(saved_state *st) {
    free(st->params);
    free(st->m);
    free(st->v);
}

/* How many of x's count floats are NaN or infinite (x NULL: none). */
static int64_t count_non_finite(const float *x, int64_t count) {
    int64_t bad = 0;
    for (int64_t i = 0; x && i < count; i++) bad += !isfinite(x[i]);
    return bad;
}

/* A NaN never reaches a checkpoint: the adapter (and for a checkpoint both Adam moments) must be finite, else
 * nothing is written and the earlier checkpoints stay the latest. */
static int check_finite(const qlt_trainer *t, const char *dir, const saved_state *st) {
    int64_t n = t->lora.n_params;
    int64_t bad_p = count_non_finite(st->params, n), bad_m = count_non_finite(st->m, n);
    int64_t bad_v = count_non_finite(st->v, n);
    if (bad_p + bad_m + bad_v == 0) return 0;
    char *latest = qlt_checkpoint_find_latest(t->cfg->output.dir);
    if (latest)
        qlt_fail("%s: not written: %lld adapter values, %lld exp_avg and %lld exp_avg_sq values are NaN or infinite "
                 "(step %lld); the latest checkpoint, %s, is kept: resume from it with a lower train.lr", dir,
                 (long long)bad_p, (long long)bad_m, (long long)bad_v, (long long)t->step, latest);
    else
        qlt_fail("%s: not written: %lld adapter values, %lld exp_avg and %lld exp_avg_sq values are NaN or infinite "
                 "(step %lld), and there is no earlier checkpoint: start again with a lower train.lr", dir,
                 (long long)bad_p, (long long)bad_m, (long long)bad_v, (long long)t->step);
    free(latest);
    return -1;
}

static char *tmp_sibling(const char *dir) {
    char *p = NULL;
    if (asprintf(&p, "%s.tmp-%d", dir, (int)getpid()) < 0) abort();
    return p;
}

/* Renames tmp over final; an existing final (same step saved again) is moved aside first. */
static int replace_dir(const char *tmp, const char *final_dir) {
    if (!qlt_dir_exists(final_dir)) return qlt_commit_dir(tmp, final_dir);
    char *old = NULL;
    if (asprintf(&old, "%s.old-%d", final_dir, (int)getpid()) < 0) abort();
    int rc = rename(final_dir, old) == 0 ? 0 : qlt_fail("%s: cannot replace existing directory", final_dir);
    if (rc == 0) rc = qlt_commit_dir(tmp, final_dir);
    if (rc == 0) qlt_remove_tree(old);
    free(old);
    return rc;
}

static int write_optimizer(const qlt_trainer *t, const saved_state *st, const char *dir) {
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    int64_t shape[1] = {t->lora.n_params};
    qlt_st_writer_add(&w, "exp_avg", QLT_DTYPE_F32, 1, shape, st->m);
    qlt_st_writer_add(&w, "exp_avg_sq", QLT_DTYPE_F32, 1, shape, st->v);
    char *path = qlt_path_join(dir, "optimizer.safetensors");
    int rc = qlt_st_writer_write(&w, path);
    free(path);
    qlt_st_writer_free(&w);
    return rc;
}

static int write_state(const qlt_trainer *t, const char *dir, int checkpoint) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "format_version", TRAINER_STATE_VERSION);
    cJSON_AddBoolToObject(s, "adapter_only", !checkpoint); /* final/: no optimizer state, not resumable */
    cJSON_AddNumberToObject(s, "step", (double)t->step);
    cJSON_AddNumberToObject(s, "total_steps", (double)t->total_steps);
    cJSON_AddNumberToObject(s, "epoch", (double)t->epoch);
    cJSON_AddNumberToObject(s, "cursor", (double)t->cursor);
    cJSON_AddNumberToObject(s, "tokens_seen", (double)t->tokens_seen);
    {   /* the optimizer's own counters (device memory): Adam's step count leaves out skipped steps */
        qlt_optim_scalars sc;
        t->be->download(t->be, &sc, t->scalars, sizeof sc);
        cJSON_AddNumberToObject(s, "adam_step", (double)sc.adam_step);
        cJSON_AddNumberToObject(s, "skipped_steps", (double)sc.skipped_steps);
        cJSON_AddNumberToObject(s, "bad_streak", (double)sc.bad_streak);
    }
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->cfg->train.seed);
    cJSON_AddStringToObject(s, "seed", seed); /* a string: 64-bit seeds do not fit a JSON double */
    cJSON_AddNumberToObject(s, "n_params", (double)t->lora.n_params);
    cJSON_AddNumberToObject(s, "train_rows", (double)t->train.n_rows);
    cJSON_AddNumberToObject(s, "micro_batch", t->micro_batch);
    cJSON_AddNumberToObject(s, "grad_accum", t->grad_accum);
    cJSON_AddNumberToObject(s, "world_size", t->dist_world); /* data parallel ranks: a step read all their rows */
    cJSON_AddNumberToObject(s, "seq_len", t->seq);
    if (isnan(t->run.best_eval_loss)) cJSON_AddNullToObject(s, "best_eval_loss");
    else cJSON_AddNumberToObject(s, "best_eval_loss", t->run.best_eval_loss);
    cJSON_AddNumberToObject(s, "best_step", (double)t->run.best_step);
    cJSON_AddNumberToObject(s, "evals_without_improvement", (double)t->run.evals_without_improvement);
    cJSON_AddBoolToObject(s, "early_stopped", t->run.early_stopped);
    char model_fp[17], tokenizer_id[24];
    qlt_ckpt_model_fingerprint(&t->model.cfg, model_fp);
    qlt_ckpt_tokenizer_id(t->cfg, tokenizer_id);
    cJSON_AddStringToObject(s, "model_fingerprint", model_fp);
    cJSON_AddStringToObject(s, "tokenizer", tokenizer_id);
    cJSON *lora = cJSON_AddObjectToObject(s, "lora");
    cJSON_AddNumberToObject(lora, "r", t->lora.r);
    cJSON_AddNumberToObject(lora, "alpha", t->lora.alpha);
    cJSON_AddNumberToObject(lora, "targets", t->lora.targets);
    cJSON_AddBoolToObject(lora, "rslora", t->lora.rslora);
    cJSON *files = qlt_ckpt_files_record(dir);
    if (!files) {
        cJSON_Delete(s);
        return -1;
    }
    cJSON_AddItemToObject(s, "files", files);
    char *text = cJSON_Print(s);
    cJSON_Delete(s);
    char *path = qlt_path_join(dir, "trainer_state.json");
    int rc = qlt_write_file_atomic(path, text, strlen(text));
    free(path);
    free(text);
    return rc;
}

/* Writes the adapter (and, for a checkpoint, the optimizer state, the effective config and the trainer
 * state, last) into a temporary sibling of dir, then renames it over dir: dir is complete or untouched. */
static int save_dir(const qlt_trainer *t, const char *dir, const saved_state *st) {
    const int checkpoint = st->m != NULL;
    char *tmp = tmp_sibling(dir);
    qlt_remove_tree(tmp);
    int rc = qlt_mkdirs(tmp);
    if (checkpoint) test_kill_point(t, "adapter");
    if (rc == 0) rc = qlt_lora_save_peft_host(&t->lora, st->params, &t->model.cfg, t->cfg->model.path, tmp);
    if (rc == 0 && checkpoint) {
        test_kill_point(t, "optimizer");
        rc = write_optimizer(t, st, tmp);
        if (rc == 0) {
            char *cfg_path = qlt_path_join(tmp, "run_config.json");
            rc = qlt_config_write_json(t->cfg, cfg_path);
            free(cfg_path);
        }
    }
    /* last: its presence marks a complete checkpoint; in final/ it records the step the adapter is from */
    if (rc == 0 && checkpoint) test_kill_point(t, "state");
    if (rc == 0) rc = write_state(t, tmp, checkpoint);
    if (rc == 0 && checkpoint) test_kill_point(t, "rename");
    if (rc == 0) rc = replace_dir(tmp, dir);
    if (rc != 0) qlt_remove_tree(tmp);
    free(tmp);
    return rc;
}

/* check_finite, then save_dir, on one download of the state: 0 written, -1 refused as not finite (the message
 * says so), 1 the write failed (the message is its cause). */
static int save_checked(const qlt_trainer *t, const char *dir, int checkpoint) {
    saved_state st;
    download_state(t, checkpoint, &st);
    int rc = check_finite(t, dir, &st);
    if (rc == 0) rc = save_dir(t, dir, &st) == 0 ? 0 : 1;
    free_state(&st);
    return rc;
}

int qlt_adapter_save(const qlt_trainer *t, const char *dir) {
    if (!qlt_dp_is_root(t)) return 0; /* data parallel: every rank holds the same adapter; rank 0 writes it */
    return save_checked(t, dir, 0) == 0 ? 0 : -1;
}

int qlt_checkpoint_save(const qlt_trainer *t, const char *dir) {
    if (!qlt_dp_is_root(t)) return 0;
    int rc = save_checked(t, dir, 1);
    if (rc <= 0) return rc; /* written, or refused as not finite */
    /* nothing of it was renamed into place (its temporary folder is removed): the latest complete checkpoint is
     * still the one before */
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", qlt_error());
    char *latest = qlt_checkpoint_find_latest(t->cfg->output.dir);
    qlt_fail("saving checkpoint %s failed: %s; %s%s%s: free space on it or make output.dir writable, then --resume "
             "auto", dir, cause, latest ? "the latest checkpoint, " : "there is no earlier checkpoint",
             latest ? latest : "", latest ? ", is kept" : "");
    free(latest);
    return -1;
}

/* Every number of trainer_state.json is a count: a whole number from 0 to 2^53 (what a JSON double holds). */
static int state_int(const cJSON *s, const char *key, const char *path, int64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!cJSON_IsNumber(it)) return qlt_fail("%s: missing or non-numeric '%s' (corrupt checkpoint?)", path, key);
    double d = it->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d))
        return qlt_fail("%s: '%s' is %g, not a whole number >= 0 (corrupt checkpoint?)", path, key, d);
    *out = (int64_t)d;
    return 0;
}

/* Before anything is loaded: the files are the ones written (sizes, CRC-32s), and the checkpoint belongs to
 * this run's base model, tokenizer and LoRA shape. Each refusal names dir and what differs. */
static int check_identity(const qlt_trainer *t, const cJSON *s, const char *dir) {
    QLT_TRY(qlt_ckpt_files_verify(dir, cJSON_GetObjectItemCaseSensitive(s, "files")));
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(s, "model_fingerprint");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(s, "tokenizer");
    const cJSON *lora = cJSON_GetObjectItemCaseSensitive(s, "lora");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(lora, "r"), *alpha = cJSON_GetObjectItemCaseSensitive(lora, "alpha");
    const cJSON *targets = cJSON_GetObjectItemCaseSensitive(lora, "targets");
    const cJSON *rslora = cJSON_GetObjectItemCaseSensitive(lora, "rslora");
    if (!cJSON_IsString(fp) || !cJSON_IsString(tok) || !cJSON_IsNumber(r) || !cJSON_IsNumber(alpha) ||
        !cJSON_IsNumber(targets) || !cJSON_IsBool(rslora))
        return qlt_fail("%s/trainer_state.json: missing model_fingerprint, tokenizer or lora {r, alpha, targets, "
                        "rslora} (corrupt checkpoint?)", dir);
    char model_fp[17], tokenizer_id[24];
    qlt_ckpt_model_fingerprint(&t->model.cfg, model_fp);
    qlt_ckpt_tokenizer_id(t->cfg, tokenizer_id);
    if (strcmp(fp->valuestring, model_fp) != 0)
        return qlt_fail("%s: the checkpoint was trained on another base model (fingerprint %s, model.path %s gives "
                        "%s: a different architecture or sizes): resume with the model.path it was trained on",
                        dir, fp->valuestring, t->cfg->model.path, model_fp);
    if (strcmp(tok->valuestring, tokenizer_id) != 0)
        return qlt_fail("%s: the checkpoint was trained with another tokenizer (%s, this run's is %s): resume with "
                        "the data.tokenizer / model.path it was trained with", dir, tok->valuestring, tokenizer_id);
    if (r->valuedouble != t->lora.r || (float)alpha->valuedouble != t->lora.alpha ||
        targets->valuedouble != t->lora.targets || cJSON_IsTrue(rslora) != t->lora.rslora)
        return qlt_fail("%s: the checkpoint's LoRA is r %g, alpha %g, targets 0x%x%s; this run's is r %d, alpha %g, "
                        "targets 0x%x%s: resume with the lora settings it was trained with", dir, r->valuedouble,
                        alpha->valuedouble, (unsigned)targets->valuedouble, cJSON_IsTrue(rslora) ? ", rslora" : "",
                        t->lora.r, t->lora.alpha, t->lora.targets, t->lora.rslora ? ", rslora" : "");
    return 0;
}

/* The best eval loss and the early-stopping count (early_stopped again from this run's patience, so a
 * resume with a larger one trains on). */
static int read_run_state(const cJSON *s, const char *path, qlt_run_state *run, int patience) {
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(s, "best_eval_loss");
    const cJSON *best_step = cJSON_GetObjectItemCaseSensitive(s, "best_step");
    const cJSON *bad = cJSON_GetObjectItemCaseSensitive(s, "evals_without_improvement");
    if (!(cJSON_IsNull(best) || cJSON_IsNumber(best)) || !cJSON_IsNumber(best_step) || !cJSON_IsNumber(bad) ||
        best_step->valuedouble < -1 || bad->valuedouble < 0)
        return qlt_fail("%s: missing or bad best_eval_loss / best_step / evals_without_improvement (corrupt "
                        "checkpoint?)", path);
    run->best_eval_loss = cJSON_IsNumber(best) ? best->valuedouble : NAN;
    run->best_step = (int64_t)best_step->valuedouble;
    run->evals_without_improvement = (int64_t)bad->valuedouble;
    run->early_stopped = patience > 0 && run->evals_without_improvement >= patience;
    return 0;
}

int qlt_checkpoint_load(qlt_trainer *t, const char *dir) {
    char *path = qlt_path_join(dir, "trainer_state.json");
    char *text = NULL;
    if (qlt_read_file(path, &text, NULL) != 0) {
        free(path);
        return qlt_fail_context("%s is not a complete checkpoint", dir);
    }
    cJSON *s = cJSON_Parse(text);
    free(text);
    int rc = cJSON_IsObject(s) ? 0 : qlt_fail("%s: not a JSON object", path);
    int64_t version = 0, step = 0, epoch = 0, cursor = 0, tokens = 0, n_params = 0, rows = 0, micro = 0, accum = 0,
            seq = 0, total = 0;
    if (rc == 0)
        rc = state_int(s, "format_version", path, &version) || state_int(s, "step", path, &step) ||
                     state_int(s, "epoch", path, &epoch) || state_int(s, "cursor", path, &cursor) ||
                     state_int(s, "tokens_seen", path, &tokens) || state_int(s, "n_params", path, &n_params) ||
                     state_int(s, "train_rows", path, &rows) || state_int(s, "micro_batch", path, &micro) ||
                     state_int(s, "grad_accum", path, &accum) || state_int(s, "seq_len", path, &seq) ||
                     state_int(s, "total_steps", path, &total)
                 ? -1
                 : 0;
    if (rc == 0 && version != TRAINER_STATE_VERSION)
        rc = qlt_fail("%s: format_version %lld is not %d (written by another qlora-train version)", path,
                      (long long)version, TRAINER_STATE_VERSION);
    if (rc == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "adapter_only")))
        rc = qlt_fail("%s holds only the adapter of a finished run, not a checkpoint: resume from a "
                      "checkpoint-<step> directory", dir);
    if (rc == 0) rc = check_identity(t, s, dir);
    if (rc == 0 && n_params != t->lora.n_params)
        rc = qlt_fail("%s: the checkpoint has %lld LoRA parameters but this run has %lld: lora.r / lora.targets / "
                      "model differ from the run that wrote it", path, (long long)n_params, (long long)t->lora.n_params);
    int64_t world = 1; /* written before data parallel: one process */
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(s, "world_size") && state_int(s, "world_size", path, &world) != 0)
        rc = -1;
    /* the global batch (micro_batch x grad_accum x ranks) must be the same; how it is split over ranks need not */
    int64_t global = micro * accum * world, here = (int64_t)t->micro_batch * t->grad_accum * t->dist_world;
    if (rc == 0 && (rows != t->train.n_rows || global != here || seq != t->seq))
        rc = qlt_fail("%s: the data or batch shape differs from the run that wrote it (rows %lld vs %lld, "
                      "micro_batch x grad_accum x ranks %lld x %lld x %lld vs %d x %d x %d, seq_len %lld vs %d): "
                      "resume with the same data, seq_len and global batch", path, (long long)rows,
                      (long long)t->train.n_rows, (long long)micro, (long long)accum, (long long)world,
                      t->micro_batch, t->grad_accum, t->dist_world, (long long)seq, t->seq);
    if (rc == 0 && cursor > rows)
        rc = qlt_fail("%s: cursor %lld is past the %lld training rows (corrupt checkpoint?)", path, (long long)cursor,
                      (long long)rows);
    if (rc == 0 && total != t->total_steps)
        fprintf(stderr, "qlora-train: warning: the checkpoint's run had %lld steps, this one has %lld: the learning "
                        "rate schedule continues with this run's length, so steps after %lld differ from the "
                        "original run\n", (long long)total, (long long)t->total_steps, (long long)step);
    /* the optimizer's counters; a checkpoint written before they were recorded had no skipped steps */
    int64_t adam_step = step, skipped = 0, streak = 0;
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(s, "adam_step"))
        rc = state_int(s, "adam_step", path, &adam_step) || state_int(s, "skipped_steps", path, &skipped) ||
                     state_int(s, "bad_streak", path, &streak)
                 ? -1
                 : 0;
    if (rc == 0 && (adam_step > step || skipped > step || streak > skipped))
        rc = qlt_fail("%s: adam_step %lld, skipped_steps %lld and bad_streak %lld do not fit step %lld (corrupt "
                      "checkpoint?)", path, (long long)adam_step, (long long)skipped, (long long)streak, (long long)step);
    qlt_run_state run = t->run;
    if (rc == 0) rc = read_run_state(s, path, &run, t->cfg->train.early_stopping_patience);
    cJSON_Delete(s);
    free(path);
    if (rc == 0) rc = qlt_lora_load_peft(&t->lora, dir);
    if (rc == 0) {
        char *opt = qlt_path_join(dir, "optimizer.safetensors");
        qlt_st_file f;
        rc = qlt_st_open(&f, opt);
        if (rc == 0) {
            const qlt_st_tensor *m = qlt_st_find(&f, "exp_avg"), *v = qlt_st_find(&f, "exp_avg_sq");
            if (!m || !v || m->dtype != QLT_DTYPE_F32 || v->dtype != QLT_DTYPE_F32 || m->numel != n_params ||
                v->numel != n_params) {
                rc = qlt_fail("%s: needs F32 tensors exp_avg and exp_avg_sq of %lld elements", opt, (long long)n_params);
            } else {
                t->be->upload(t->be, t->lora.m, m->data, m->nbytes);
                t->be->upload(t->be, t->lora.v, v->data, v->nbytes);
            }
            qlt_st_close(&f);
        }
        free(opt);
    }
    if (rc != 0) return -1;
    qlt_optim_scalars sc = {0};
    sc.adam_step = adam_step;
    sc.skipped_steps = skipped;
    sc.bad_streak = (int32_t)streak;
    t->be->upload(t->be, t->scalars, &sc, sizeof sc);
    t->skipped_steps = skipped;
    t->bad_streak = streak;
    t->last_good_step = step;
    t->step = step;
    t->epoch = epoch;
    t->cursor = cursor;
    t->tokens_seen = tokens;
    t->run = run;
    return 0;
}

/* Step number of a "checkpoint-<digits>" name, or -1 (also for more digits than a step count has). */
static int64_t checkpoint_step(const char *name) {
    if (strncmp(name, "checkpoint-", 11) != 0 || !name[11] || strlen(name + 11) > 18) return -1;
    int64_t v = 0;
    for (const char *p = name + 11; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

typedef struct ckpt_entry {
    int64_t step;
    char *path;
} ckpt_entry;

static int cmp_ckpt(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step;
}

/* The checkpoint-<step> directories of output_dir, sorted by step: the complete ones (trainer_state.json
 * written) only, or every one when !complete_only. */
static int list_checkpoints(const char *output_dir, int complete_only, ckpt_entry **out) {
    *out = NULL;
    DIR *d = opendir(output_dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step = checkpoint_step(e->d_name);
        if (step < 0) continue;
        char *path = qlt_path_join(output_dir, e->d_name);
        char *state = qlt_path_join(path, "trainer_state.json");
        if (complete_only ? qlt_file_exists(state) : qlt_dir_exists(path)) {
            *out = qlt_xrealloc(*out, sizeof **out * (size_t)(n + 1));
            (*out)[n].step = step;
            (*out)[n].path = path;
            n++;
        } else {
            free(path);
        }
        free(state);
    }
    closedir(d);
    if (n > 1) qsort(*out, (size_t)n, sizeof **out, cmp_ckpt); /* *out is NULL when n == 0 */
    return n;
}

char *qlt_checkpoint_find_latest(const char *output_dir) {
    ckpt_entry *list;
    int n = list_checkpoints(output_dir, 1, &list);
    char *latest = n ? list[n - 1].path : NULL;
    for (int i = 0; i + 1 < n; i++) free(list[i].path);
    free(list);
    return latest;
}

int qlt_checkpoint_claim_output(const char *output_dir, int overwrite) {
    ckpt_entry *found;
    int n = list_checkpoints(output_dir, 0, &found); /* complete or not: both would be mixed with this run's */
    for (int k = 0; k < 2; k++) { /* final/ and best/ (output.save_best) of an earlier run too */
        char *other = qlt_path_join(output_dir, k == 0 ? "final" : "best");
        if (qlt_dir_exists(other)) {
            found = qlt_xrealloc(found, sizeof *found * (size_t)(n + 1));
            found[n++] = (ckpt_entry){INT64_MAX, other};
        } else {
            free(other);
        }
    }
    int rc = 0;
    if (n > 0 && !overwrite) {
        char *latest = qlt_checkpoint_find_latest(output_dir);
        const char *name = strrchr(found[0].path, '/') ? strrchr(found[0].path, '/') + 1 : found[0].path;
        rc = qlt_fail("output.dir %s holds an earlier run (%s%s): %s--set output.overwrite=true deletes it, or set "
                      "another output.dir", output_dir, name, n > 1 ? " and more" : "",
                      latest ? "--resume auto continues it, " : "");
        free(latest);
    }
    for (int i = 0; i < n; i++) {
        if (rc == 0) {
            fprintf(stderr, "qlora-train: output.overwrite: deleting %s\n", found[i].path);
            rc = qlt_remove_tree(found[i].path);
        }
        free(found[i].path);
    }
    free(found);
    return rc;
}

int qlt_checkpoint_prune(const char *output_dir, int keep_last) {
    if (keep_last <= 0) return 0;
    ckpt_entry *list;
    int n = list_checkpoints(output_dir, 1, &list);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (i < n - keep_last && rc == 0) rc = qlt_remove_tree(list[i].path);
        free(list[i].path);
    }
    free(list);
    return rc;
}
