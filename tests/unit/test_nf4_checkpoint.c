/* test_nf4_checkpoint.c: bitsandbytes 4-bit checkpoints: the quant_state JSON is byte-for-byte what
 * json.dumps writes, modules written and read back hold the same bytes, bad checkpoints fail with one
 * line naming the tensor, and `qlora-train quantize` round-trips losslessly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "formats/bnb_checkpoint.h"
#include "formats/safetensors.h"
#include "nf4/nf4.h"
#include "test_util.h"

Test(nf4_checkpoint, python_float_repr) {
    struct { double v; const char *want; } cases[] = {
        {0.1, "0.1"},        {1e-05, "1e-05"},  {3.0, "3.0"},     {0.0001, "0.0001"},   {1e16, "1e+16"},
        {-0.5, "-0.5"},      {0.0, "0.0"},      {123.25, "123.25"}, {1.5e-07, "1.5e-07"},
        {(double)0.02154541015625f, "0.02154541015625"},
        {(double)0.1f, "0.10000000149011612"},
        {1234567890123456.0, "1234567890123456.0"},
        {12345678901234567.0, "1.2345678901234568e+16"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        qlt_py_float_repr(cases[i].v, buf, sizeof buf);
        cr_assert_str_eq(buf, cases[i].want, "repr(%.17g)", cases[i].v);
    }
}

static void random_nf4(qlt_nf4 *q, int64_t n, int blocksize, int dq, unsigned seed) {
    cr_assert_eq(qlt_nf4_alloc_host(q, n, blocksize, dq), 0);
    float *x = malloc((size_t)n * sizeof(float));
    srand(seed);
    for (int64_t i = 0; i < n; i++) x[i] = ((float)rand() / RAND_MAX - 0.5f) * (1 + (float)(i % 97));
    qlt_nf4_quantize_f32(q, x);
    free(x);
}

Test(nf4_checkpoint, quant_state_json_as_bitsandbytes_writes_it) {
    qlt_nf4 q;
    random_nf4(&q, 96 * 40, 64, 1, 1);
    q.offset = 0.02154541015625f;
    int64_t shape[2] = {96, 40};
    char *j = qlt_bnb_quant_state_json(&q, shape, 2, QLT_DTYPE_BF16);
    cr_assert_str_eq(j, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [96, 40], "
                        "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.02154541015625}");
    free(j);
    qlt_nf4_free_host(&q);
    random_nf4(&q, 33, 32, 0, 2);
    int64_t s2[2] = {3, 11};
    j = qlt_bnb_quant_state_json(&q, s2, 2, QLT_DTYPE_F32);
    cr_assert_str_eq(j, "{\"quant_type\": \"nf4\", \"blocksize\": 32, \"dtype\": \"float32\", \"shape\": [3, 11]}");
    free(j);
    qlt_nf4_free_host(&q);
}

static void write_one(const char *dir, const char *file, const qlt_nf4 *q, const int64_t *shape) {
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    qlt_bnb_write_module(&w, "model.layers.0.mlp.up_proj", q, shape, 2, QLT_DTYPE_F16);
    char *p = qlt_path_join(dir, file);
    cr_assert_eq(qlt_st_writer_write(&w, p), 0, "%s", qlt_error());
    free(p);
    qlt_st_writer_free(&w);
}

static void assert_same_nf4(const qlt_nf4 *a, const qlt_nf4 *b) {
    cr_assert_eq(a->numel, b->numel);
    cr_assert_eq(a->blocksize, b->blocksize);
    cr_assert_eq(a->double_quant, b->double_quant);
    cr_assert_eq(memcmp(a->codes, b->codes, (size_t)(a->numel + 1) / 2), 0);
    cr_assert_eq(memcmp(a->code, b->code, 64), 0);
    if (a->double_quant) {
        cr_assert_eq(memcmp(a->absmax_q, b->absmax_q, (size_t)a->nblocks), 0);
        cr_assert_eq(memcmp(a->nested_absmax, b->nested_absmax, (size_t)a->nested_nblocks * 4), 0);
        cr_assert_eq(memcmp(a->nested_code, b->nested_code, 1024), 0);
        cr_assert_eq(a->offset, b->offset);
    } else {
        cr_assert_eq(memcmp(a->absmax, b->absmax, (size_t)a->nblocks * 4), 0);
    }
}

Test(nf4_checkpoint, write_then_read_same_bytes) {
    char *dir = test_tmpdir();
    for (int dq = 0; dq < 2; dq++) {
        qlt_nf4 q, r;
        int64_t shape[2] = {77, 333}; /* odd numel, ragged block, several nested blocks */
        random_nf4(&q, 77 * 333, 64, dq, 3 + dq);
        write_one(dir, "model.safetensors", &q, shape);
        qlt_st_dir d;
        cr_assert_eq(qlt_st_dir_open(&d, dir), 0, "%s", qlt_error());
        cr_assert(qlt_bnb_module_is_quantized(&d, "model.layers.0.mlp.up_proj"));
        cr_assert(!qlt_bnb_module_is_quantized(&d, "model.layers.0.mlp.down_proj"));
        int64_t got_shape[QLT_MAX_DIMS];
        int ndim;
        qlt_dtype dt;
        cr_assert_eq(qlt_bnb_read_module(&d, "model.layers.0.mlp.up_proj", &r, got_shape, &ndim, &dt), 0, "%s",
                     qlt_error());
        cr_assert_eq(ndim, 2);
        cr_assert_eq(got_shape[0], 77);
        cr_assert_eq(got_shape[1], 333);
        cr_assert_eq(dt, QLT_DTYPE_F16);
        assert_same_nf4(&q, &r);
        qlt_st_dir_close(&d);
        qlt_nf4_free_host(&q);
        qlt_nf4_free_host(&r);
        char *p = qlt_path_join(dir, "model.safetensors");
        unlink(p);
        free(p);
    }
    qlt_remove_tree(dir);
    free(dir);
}

/* Writes a module, then replaces or drops one tensor, and expects reading to fail naming `expect`. */
static void expect_bad(const char *drop, const char *replace_json, qlt_dtype replace_dtype, int64_t replace_len,
                       const char *expect) {
    char *dir = test_tmpdir();
    qlt_nf4 q;
    random_nf4(&q, 64 * 10, 64, 1, 9);
    int64_t shape[2] = {10, 64};
    qlt_st_writer w0, w;
    qlt_st_writer_init(&w0);
    qlt_st_writer_init(&w);
    qlt_bnb_write_module(&w0, "m.q_proj", &q, shape, 2, QLT_DTYPE_BF16);
    for (int i = 0; i < w0.n; i++) {
        struct qlt_st_wtensor *t = &w0.items[i];
        if (drop && !strcmp(t->name, drop)) {
            if (replace_json) {
                int64_t n = (int64_t)strlen(replace_json);
                qlt_st_writer_add(&w, t->name, QLT_DTYPE_U8, 1, &n, replace_json);
            } else if (replace_len > 0) {
                void *z = calloc((size_t)replace_len, 4);
                qlt_st_writer_add(&w, t->name, replace_dtype, 1, &replace_len, z);
                free(z);
            }
            continue;
        }
        qlt_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    char *p = qlt_path_join(dir, "model.safetensors");
    cr_assert_eq(qlt_st_writer_write(&w, p), 0);
    qlt_st_dir d;
    cr_assert_eq(qlt_st_dir_open(&d, dir), 0);
    qlt_nf4 r;
    int64_t s[QLT_MAX_DIMS];
    int nd;
    qlt_dtype dt;
    cr_assert_eq(qlt_bnb_read_module(&d, "m.q_proj", &r, s, &nd, &dt), -1);
    cr_assert(strstr(qlt_error(), expect), "error '%s' should name '%s'", qlt_error(), expect);
    cr_assert_null(strchr(qlt_error(), '\n'));
    qlt_st_dir_close(&d);
    qlt_st_writer_free(&w0);
    qlt_st_writer_free(&w);
    qlt_nf4_free_host(&q);
    free(p);
    qlt_remove_tree(dir);
    free(dir);
}

Test(nf4_checkpoint, bad_checkpoints_name_the_tensor) {
    expect_bad("m.q_proj.weight.absmax", NULL, QLT_DTYPE_U8, 0, "m.q_proj.weight.absmax' is missing");
    expect_bad("m.q_proj.weight.absmax", NULL, QLT_DTYPE_U8, 9, "m.q_proj.weight.absmax' has shape [9]");
    expect_bad("m.q_proj.weight.absmax", NULL, QLT_DTYPE_F32, 10, "m.q_proj.weight.absmax' is F32, expected U8");
    expect_bad("m.q_proj.weight.nested_absmax", NULL, QLT_DTYPE_U8, 0, "m.q_proj.weight.nested_absmax' is missing");
    expect_bad("m.q_proj.weight", NULL, QLT_DTYPE_U8, 0, "m.q_proj.weight' is missing");
    expect_bad("m.q_proj.weight.quant_map", NULL, QLT_DTYPE_F32, 16, "m.q_proj.weight.quant_map' is not the NF4");
    expect_bad("m.q_proj.weight.quant_state.bitsandbytes__nf4", "{\"quant_type\": \"nf4\", \"blocksize\": 6",
               QLT_DTYPE_U8, 0, "m.q_proj.weight.quant_state.bitsandbytes__nf4' does not hold a JSON object");
    expect_bad("m.q_proj.weight.quant_state.bitsandbytes__nf4",
               "{\"quant_type\": \"nf4\", \"blocksize\": 48, \"dtype\": \"bfloat16\", \"shape\": [10, 64]}",
               QLT_DTYPE_U8, 0, "blocksize must be a power of two");
    expect_bad("m.q_proj.weight.quant_state.bitsandbytes__nf4",
               "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [10, 65], "
               "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.5}",
               QLT_DTYPE_U8, 0, "m.q_proj.weight' has shape [320, 1], expected [325, 1]");
    expect_bad("m.q_proj.weight.quant_state.bitsandbytes__nf4",
               "{\"quant_type\": \"fp4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [10, 64]}",
               QLT_DTYPE_U8, 0, "quant_type is fp4");
    expect_bad("m.q_proj.weight.quant_state.bitsandbytes__nf4", NULL, QLT_DTYPE_U8, 0,
               "is not a bitsandbytes 4-bit module");
}

/* Writes text as dir/config.json. */
static void write_config_json(const char *dir, const char *text) {
    char *p = qlt_path_join(dir, "config.json");
    test_write_text(p, text);
    free(p);
}

Test(nf4_checkpoint, detect_config) {
    char *dir = test_tmpdir();
    qlt_bnb_config c;
    write_config_json(dir, "{\"model_type\": \"llama\"}");
    cr_assert_eq(qlt_bnb_detect(dir, &c), 0);
    write_config_json(dir, "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, "
                           "\"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true, "
                           "\"bnb_4bit_compute_dtype\": \"bfloat16\"}}");
    cr_assert_eq(qlt_bnb_detect(dir, &c), 1);
    cr_assert_eq(c.double_quant, 1);
    write_config_json(dir, "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_8bit\": true}}");
    cr_assert_eq(qlt_bnb_detect(dir, &c), -1);
    cr_assert(strstr(qlt_error(), "8-bit"));
    write_config_json(dir, "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, "
                           "\"bnb_4bit_quant_type\": \"fp4\"}}");
    cr_assert_eq(qlt_bnb_detect(dir, &c), -1);
    write_config_json(dir, "{\"quantization_config\": {\"quant_method\": \"gptq\"}}");
    cr_assert_eq(qlt_bnb_detect(dir, &c), -1);
    cr_assert(strstr(qlt_error(), "gptq"));
    qlt_remove_tree(dir);
    free(dir);
}

static int is_linear(const char *name) {
    static const char *const s[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                                    "gate_proj.weight", "up_proj.weight", "down_proj.weight"};
    for (size_t i = 0; i < 7; i++) {
        size_t n = strlen(name), m = strlen(s[i]);
        if (n > m && !strcmp(name + n - m, s[i])) return 1;
    }
    return 0;
}

/* quantize MODEL OUT: every linear equals quantizing the input directly, every other tensor is unchanged,
 * config.json is detected, and writing what was read gives the same bytes again. */
static void quantize_round_trip(const char *fixture, const char *model_file, const char *extra_args) {
    char *tmp = test_tmpdir();
    char *in = qlt_path_join(tmp, "in"), *out = qlt_path_join(tmp, "out"), *again = qlt_path_join(tmp, "again");
    char *src_dir = test_fixture_path(fixture, NULL), cmd[16384], *output;
    cr_assert_eq(qlt_mkdirs(in), 0);
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/ && cp %s/%s %s/model.safetensors", src_dir, in, src_dir,
             model_file, in);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "quantize %s %s %s", in, out, extra_args);
    cr_assert_eq(test_run_cli(NULL, cmd, &output), 0, "%s: %s", cmd, output);
    free(output);
    qlt_bnb_config bc;
    cr_assert_eq(qlt_bnb_detect(out, &bc), 1, "%s", qlt_error());
    qlt_st_dir din, dout;
    cr_assert_eq(qlt_st_dir_open(&din, in), 0);
    cr_assert_eq(qlt_st_dir_open(&dout, out), 0, "%s", qlt_error());
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    int n_lin = 0;
    for (int i = 0; i < din.files[0].n_tensors; i++) {
        const qlt_st_tensor *t = &din.files[0].tensors[i];
        if (!is_linear(t->name)) {
            const qlt_st_tensor *o = qlt_st_dir_find(&dout, t->name);
            cr_assert_not_null(o, "%s", t->name);
            cr_assert_eq(o->dtype, t->dtype);
            cr_assert_eq(o->nbytes, t->nbytes);
            cr_assert_eq(memcmp(o->data, t->data, t->nbytes), 0, "%s changed", t->name);
            continue;
        }
        n_lin++;
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)strlen(t->name) - 7, t->name);
        qlt_nf4 want, got;
        cr_assert_eq(qlt_nf4_alloc_host(&want, t->numel, 64, bc.double_quant), 0);
        qlt_nf4_quantize(&want, t->data, t->dtype);
        int64_t shape[QLT_MAX_DIMS];
        int nd;
        qlt_dtype dt;
        cr_assert_eq(qlt_bnb_read_module(&dout, module, &got, shape, &nd, &dt), 0, "%s", qlt_error());
        cr_assert_eq(dt, t->dtype);
        cr_assert_eq(shape[0], t->shape[0]);
        cr_assert_eq(shape[1], t->shape[1]);
        assert_same_nf4(&want, &got);
        qlt_bnb_write_module(&w, module, &got, shape, nd, dt);
        qlt_nf4_free_host(&want);
        qlt_nf4_free_host(&got);
    }
    cr_assert_gt(n_lin, 0);
    /* what we read, written again: the same bytes as the command's output, tensor by tensor */
    cr_assert_eq(qlt_mkdirs(again), 0);
    char *p = qlt_path_join(again, "model.safetensors");
    cr_assert_eq(qlt_st_writer_write(&w, p), 0);
    qlt_st_dir dagain;
    cr_assert_eq(qlt_st_dir_open(&dagain, again), 0);
    for (int i = 0; i < dagain.files[0].n_tensors; i++) {
        const qlt_st_tensor *a = &dagain.files[0].tensors[i], *o = qlt_st_dir_find(&dout, a->name);
        cr_assert_not_null(o, "%s", a->name);
        cr_assert_eq(o->nbytes, a->nbytes, "%s", a->name);
        cr_assert_eq(memcmp(o->data, a->data, a->nbytes), 0, "%s", a->name);
    }
    qlt_st_dir_close(&dagain);
    qlt_st_writer_free(&w);
    qlt_st_dir_close(&din);
    qlt_st_dir_close(&dout);
    /* the output is not quantized twice */
    snprintf(cmd, sizeof cmd, "quantize %s %s/twice", out, tmp);
    cr_assert_neq(test_run_cli(NULL, cmd, NULL), 0, "a quantized model quantized again");
    /* inspect counts the stored 4-bit layers as they are, not as weights to quantize */
    snprintf(cmd, sizeof cmd, "inspect %s", out);
    cr_assert_eq(test_run_cli(NULL, cmd, &output), 0, "%s", output);
    cr_expect(strstr(output, "already NF4 (a bitsandbytes 4-bit checkpoint"), "%s", output);
    cr_expect(!strstr(output, "linear layers only"), "no NF4 estimate from the packed codes: %s", output);
    free(output);
    free(src_dir);
    free(p);
    free(in);
    free(out);
    free(again);
    qlt_remove_tree(tmp);
    free(tmp);
}

Test(nf4_checkpoint, quantize_command_round_trip_llama_f32) { quantize_round_trip("tiny-llama", "model.safetensors", ""); }
Test(nf4_checkpoint, quantize_command_round_trip_qwen2_bf16_no_dq) {
    quantize_round_trip("tiny-qwen2", "model.bf16.safetensors", "--no-double-quant");
}
Test(nf4_checkpoint, quantize_command_shards) {
    quantize_round_trip("tiny-qwen3", "model.bf16.safetensors", "--max-shard-size 100KB");
}

/* The quant_state is checked against the stored tensors before anything is allocated for it: a corrupt
 * shape of 4e15 values is a one-line error naming the tensor, not a 2 PB allocation; an offset no float
 * holds (it made every weight NaN) is refused too. */
Test(nf4_checkpoint, quant_state_is_checked_before_allocating) {
    expect_bad("m.q_proj.weight.quant_state.bitsandbytes__nf4",
               "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [2000000000, 2000000], "
               "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.5}",
               QLT_DTYPE_U8, 0, "m.q_proj.weight' has shape [320, 1], expected [2000000000000000, 1]");
    expect_bad("m.q_proj.weight.quant_state.bitsandbytes__nf4",
               "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [10, 64], "
               "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 1e300}",
               QLT_DTYPE_U8, 0, "nested_offset must be a number that fits a 32-bit float");
}
