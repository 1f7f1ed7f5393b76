/* test_gguf.c: the GGUF reader and dequantizers (src/formats/gguf*.c).
 *   - types.gguf (scripts/gguf_fixtures.py: a tensor of every supported type with random valid blocks)
 *     dequantizes to exactly the values of llama.cpp's gguf-py (types.expected.safetensors): bit for bit,
 *     no tolerance, since both sides do the same float32 operations in the same order;
 *   - every key/value type reads back as written, nested arrays included;
 *   - bad files (truncated at every length, offsets past the end, overflowing shapes, huge counts, an
 *     unknown type, misaligned data, bad alignment, version, overlap, duplicates, random byte damage)
 *     fail with one line naming the file and the key or tensor, and never crash (ASan in CI). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "common/rng.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "formats/safetensors.h"
#include "test_util.h"

static char *gguf_fixture(const char *file) {
    char *p = NULL;
    if (asprintf(&p, "%s/gguf/%s", QLT_TEST_DATA, file) < 0) abort();
    return p;
}

/* Every tensor of types.gguf against gguf-py's values: equal bit patterns (-0.0 and 0.0 told apart). */
Test(gguf, dequant_matches_gguf_py_exactly) {
    char *path = gguf_fixture("types.gguf"), *exp_path = gguf_fixture("types.expected.safetensors");
    qlt_gguf g;
    qlt_st_file e;
    cr_assert_eq(qlt_gguf_open(&g, path), 0, "%s", qlt_error());
    cr_assert_eq(qlt_st_open(&e, exp_path), 0, "%s", qlt_error());
    const uint32_t want[] = {QLT_GGML_F32,  QLT_GGML_F16,  QLT_GGML_BF16, QLT_GGML_Q8_0, QLT_GGML_Q4_0, QLT_GGML_Q4_1,
                             QLT_GGML_Q5_0, QLT_GGML_Q5_1, QLT_GGML_Q4_K, QLT_GGML_Q5_K, QLT_GGML_Q6_K};
    cr_assert_eq(g.n_tensors, (int64_t)(sizeof want / sizeof want[0]));
    for (int64_t i = 0; i < g.n_tensors; i++) {
        const qlt_gguf_tensor *t = &g.tensors[i];
        cr_expect_eq(t->type, want[i], "%s: type %u", t->name, t->type);
        cr_assert_eq(t->ndim, 2);
        cr_expect(t->ne[0] == 512 && t->ne[1] == 3, "%s: dims", t->name);
        const qlt_st_tensor *ref = qlt_st_find(&e, t->name);
        cr_assert(ref && ref->numel == t->numel, "%s: no expected values", t->name);
        float *got = malloc(sizeof(float) * (size_t)t->numel);
        cr_assert_eq(qlt_gguf_tensor_to_f32(&g, t, got), 0, "%s", qlt_error());
        int64_t wrong = 0, first = -1;
        for (int64_t k = 0; k < t->numel; k++) {
            if (memcmp(&got[k], (const float *)ref->data + k, 4) != 0) {
                wrong++;
                if (first < 0) first = k;
            }
        }
        cr_expect_eq(wrong, 0, "%s (%s): %lld of %lld values differ from gguf-py's, first at %lld: %.9g vs %.9g",
                     t->name, qlt_ggml_type_name(t->type), (long long)wrong, (long long)t->numel, (long long)first,
                     first >= 0 ? got[first] : 0.0, first >= 0 ? ((const float *)ref->data)[first] : 0.0);
        free(got);
    }
    qlt_st_close(&e);
    qlt_gguf_close(&g);
    free(path);
    free(exp_path);
}

/* A damaged nibble order or scale unpacking would change values: flipping one byte of a block's quants
 * must change the dequantized output (the comparison above can fail). */
Test(gguf, dequant_depends_on_every_block_byte) {
    char *path = gguf_fixture("types.gguf");
    qlt_gguf g;
    cr_assert_eq(qlt_gguf_open(&g, path), 0, "%s", qlt_error());
    const qlt_gguf_tensor *t = qlt_gguf_find_tensor(&g, "t.q6_k");
    cr_assert(t);
    uint8_t *copy = malloc(t->nbytes);
    float *a = malloc(sizeof(float) * 256), *b = malloc(sizeof(float) * 256);
    memcpy(copy, t->data, t->nbytes);
    qlt_gguf_dequantize(t->type, copy, a, 256);
    for (int byte = 0; byte < 208; byte++) { /* quants and scales of the first block (d is checked above) */
        copy[byte] ^= 0x11;
        qlt_gguf_dequantize(t->type, copy, b, 256);
        copy[byte] ^= 0x11;
        cr_expect(memcmp(a, b, sizeof(float) * 256) != 0, "Q6_K byte %d does not reach any value", byte);
    }
    free(copy);
    free(a);
    free(b);
    qlt_gguf_close(&g);
    free(path);
}

Test(gguf, reads_every_value_type) {
    char *path = gguf_fixture("types.gguf");
    qlt_gguf g;
    cr_assert_eq(qlt_gguf_open(&g, path), 0, "%s", qlt_error());
    cr_expect_eq(g.version, 3);
    cr_expect_eq(g.alignment, 32);
    int64_t v;
    const struct {
        const char *key;
        int64_t want;
    } ints[] = {{"test.u8", 200},         {"test.i8", -100},          {"test.u16", 60000},
                {"test.i16", -30000},     {"test.u32", 4000000000LL}, {"test.i32", -2000000000LL},
                {"test.u64", 1LL << 40},  {"test.i64", -(1LL << 40)}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        cr_expect_eq(qlt_gguf_get_int(&g, ints[i].key, 0, &v), 1, "%s: %s", ints[i].key, qlt_error());
        cr_expect_eq(v, ints[i].want, "%s = %lld", ints[i].key, (long long)v);
    }
    double f;
    cr_expect_eq(qlt_gguf_get_float(&g, "test.f32", 0, &f), 1);
    cr_expect_eq(f, 1.5);
    cr_expect_eq(qlt_gguf_get_float(&g, "test.f64", 0, &f), 1);
    cr_expect_eq(f, 0.1);
    int b;
    cr_expect_eq(qlt_gguf_get_bool(&g, "test.bool", 0, &b), 1);
    cr_expect_eq(b, 1);
    const char *s;
    uint64_t len;
    cr_expect_eq(qlt_gguf_get_string(&g, "test.string", &s, &len), 1);
    cr_expect(len == 6 && memcmp(s, "h\xc3\xa9llo", 6) == 0);
    cr_expect_eq(qlt_gguf_get_string(&g, "general.architecture", &s, &len), 1);
    cr_expect(len == 5 && memcmp(s, "llama", 5) == 0);
    const qlt_gguf_kv *kv;
    cr_expect_eq(qlt_gguf_get_array(&g, "test.array_i32", QLT_GGUF_VAL_I32, &kv), 1);
    cr_assert(kv && kv->count == 3);
    cr_expect(qlt_gguf_array_int(kv, 0) == 1 && qlt_gguf_array_int(kv, 1) == -2 && qlt_gguf_array_int(kv, 2) == 3);
    cr_expect_eq(qlt_gguf_get_array(&g, "test.array_str", QLT_GGUF_VAL_STRING, &kv), 1);
    cr_assert(kv && kv->count == 3);
    const uint8_t *p = kv->data;
    const char *want_s[] = {"a", "bc", ""};
    for (int i = 0; i < 3; i++) {
        qlt_gguf_next_string(&p, &s, &len);
        cr_expect(len == strlen(want_s[i]) && memcmp(s, want_s[i], len) == 0, "element %d", i);
    }
    cr_expect_eq(qlt_gguf_get_array(&g, "test.array_nested", QLT_GGUF_VAL_ARRAY, &kv), 1);
    cr_expect(kv && kv->count == 2);
    /* absent keys give the default; wrong types name the file and key */
    cr_expect_eq(qlt_gguf_get_int(&g, "test.absent", 7, &v), 0);
    cr_expect_eq(v, 7);
    cr_expect_eq(qlt_gguf_get_int(&g, "test.string", 0, &v), -1);
    cr_expect(strstr(qlt_error(), path) && strstr(qlt_error(), "test.string") && strstr(qlt_error(), "integer"), "%s",
              qlt_error());
    cr_expect_eq(qlt_gguf_get_string(&g, "test.u8", &s, &len), -1);
    cr_expect_eq(qlt_gguf_get_array(&g, "test.array_str", QLT_GGUF_VAL_I32, &kv), -1);
    cr_expect(strstr(qlt_error(), "array of string"), "%s", qlt_error());
    cr_expect(qlt_gguf_find_tensor(&g, "t.q4_k") != NULL);
    cr_expect(qlt_gguf_find_tensor(&g, "t.nope") == NULL);
    qlt_gguf_close(&g);
    free(path);
}

/* ---- bad files, built byte by byte ---- */

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
} gbuf;

static void put(gbuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_u32(gbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(gbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(gbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void pad_to(gbuf *b, size_t align) {
    while (b->n % align) put(b, "", 1);
}

/* What a test file holds: one string key (general.architecture) plus `extra_kv` extra u32 keys, and
 * tensors described by the fields below (dims innermost first). The data section gets `data_bytes`
 * pattern bytes. Fields left 0 take the defaults of a valid file. */
typedef struct spec {
    uint32_t version;
    uint64_t n_tensors_field, n_kv_field; /* 0: the real counts */
    int n_tensors;
    const char *names[3];
    uint32_t ndim[3];
    uint64_t dims[3][8]; /* room past the 4 GGUF allows, for files that claim more */
    uint32_t type[3];
    uint64_t offset[3];
    uint64_t data_bytes;
    int64_t alignment_kv; /* >0: a general.alignment u32 key of this value */
    const char *dup_key;  /* a second key of this name */
} spec;

static gbuf build(const spec *s) {
    gbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, s->version ? s->version : 3);
    int n_kv = 1 + (s->alignment_kv > 0) + (s->dup_key != NULL);
    put_u64(&b, s->n_tensors_field ? s->n_tensors_field : (uint64_t)s->n_tensors);
    put_u64(&b, s->n_kv_field ? s->n_kv_field : (uint64_t)n_kv);
    put_str(&b, "general.architecture");
    put_u32(&b, QLT_GGUF_VAL_STRING);
    put_str(&b, "llama");
    if (s->alignment_kv > 0) {
        put_str(&b, "general.alignment");
        put_u32(&b, QLT_GGUF_VAL_U32);
        put_u32(&b, (uint32_t)s->alignment_kv);
    }
    if (s->dup_key) {
        put_str(&b, s->dup_key);
        put_u32(&b, QLT_GGUF_VAL_STRING);
        put_str(&b, "again");
    }
    for (int t = 0; t < s->n_tensors; t++) {
        put_str(&b, s->names[t]);
        put_u32(&b, s->ndim[t]);
        for (uint32_t d = 0; d < s->ndim[t]; d++) put_u64(&b, s->dims[t][d]);
        put_u32(&b, s->type[t]);
        put_u64(&b, s->offset[t]);
    }
    pad_to(&b, s->alignment_kv > 0 ? (size_t)s->alignment_kv : 32);
    for (uint64_t i = 0; i < s->data_bytes; i++) put(&b, &(uint8_t){(uint8_t)(i * 13 + 5)}, 1);
    return b;
}

/* The valid base: tensor "w" F32 [2, 32] at offset 0, 256 data bytes. */
static spec base_spec(void) {
    spec s;
    memset(&s, 0, sizeof s);
    s.n_tensors = 1;
    s.names[0] = "w";
    s.ndim[0] = 2;
    s.dims[0][0] = 32;
    s.dims[0][1] = 2;
    s.type[0] = QLT_GGML_F32;
    s.data_bytes = 256;
    return s;
}

/* Writes the bytes to a temp file and opens it: returns the rc; the file path in *path_out (heap). */
static int open_bytes(const void *data, size_t n, qlt_gguf *g, char **dir_out, char **path_out) {
    *dir_out = test_tmpdir();
    *path_out = qlt_path_join(*dir_out, "bad.gguf");
    test_write_bytes(*path_out, data, n);
    return qlt_gguf_open(g, *path_out);
}

/* Opening must fail with one line that names the file and holds every needle. */
static void expect_bad(const spec *s, const char *needle1, const char *needle2) {
    gbuf b = build(s);
    qlt_gguf g;
    char *dir, *path;
    int rc = open_bytes(b.p, b.n, &g, &dir, &path);
    cr_expect_eq(rc, -1, "opening should fail (expected an error with '%s')", needle1);
    if (rc == 0) qlt_gguf_close(&g);
    const char *e = qlt_error();
    cr_expect(strstr(e, path) != NULL, "error names the file: %s", e);
    cr_expect(strstr(e, needle1) != NULL, "error mentions '%s': %s", needle1, e);
    if (needle2) cr_expect(strstr(e, needle2) != NULL, "error mentions '%s': %s", needle2, e);
    cr_expect(strchr(e, '\n') == NULL, "one line: %s", e);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    free(b.p);
}

Test(gguf_bad, the_base_file_is_valid) {
    spec s = base_spec();
    gbuf b = build(&s);
    qlt_gguf g;
    char *dir, *path;
    cr_assert_eq(open_bytes(b.p, b.n, &g, &dir, &path), 0, "%s", qlt_error());
    cr_expect_eq(g.n_tensors, 1);
    cr_expect_eq(g.tensors[0].nbytes, 256);
    cr_expect_eq(g.data_offset % 32, 0);
    qlt_gguf_close(&g);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    free(b.p);
}

/* Every prefix of a valid file (cut at each byte) is refused with one line; none crashes. */
Test(gguf_bad, truncated_at_every_length) {
    spec s = base_spec();
    gbuf b = build(&s);
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "cut.gguf");
    int64_t not_refused = 0;
    for (size_t n = 0; n < b.n; n++) {
        test_write_bytes(path, b.p, n);
        qlt_gguf g;
        if (qlt_gguf_open(&g, path) == 0) {
            not_refused++;
            qlt_gguf_close(&g);
            continue;
        }
        cr_expect(strstr(qlt_error(), path) && !strchr(qlt_error(), '\n'), "cut at %zu: %s", n, qlt_error());
    }
    cr_expect_eq(not_refused, 0, "%lld truncated copies opened", (long long)not_refused);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    free(b.p);
}

Test(gguf_bad, data_past_the_end) {
    spec s = base_spec();
    s.offset[0] = 1ULL << 40;
    expect_bad(&s, "'w'", "past the end");
    s = base_spec();
    s.data_bytes = 200; /* 56 bytes short */
    expect_bad(&s, "'w'", "truncated");
    s = base_spec();
    s.offset[0] = UINT64_MAX - 31; /* offset + size wraps 64 bits */
    expect_bad(&s, "'w'", "past the end");
}

Test(gguf_bad, overflowing_shapes) {
    spec s = base_spec();
    s.ndim[0] = 3;
    s.dims[0][0] = 1ULL << 32;
    s.dims[0][1] = 1ULL << 32;
    s.dims[0][2] = 1ULL << 32;
    expect_bad(&s, "'w'", "overflows");
    s = base_spec();
    s.dims[0][0] = 1ULL << 62; /* fits int64 as a count, not as bytes (x4) */
    s.dims[0][1] = 1;
    expect_bad(&s, "'w'", "overflows");
    s = base_spec();
    s.dims[0][1] = UINT64_MAX;
    expect_bad(&s, "'w'", "2^63");
    s = base_spec();
    s.ndim[0] = 5;
    expect_bad(&s, "'w'", "5 dims");
}

Test(gguf_bad, huge_counts) {
    spec s = base_spec();
    s.n_tensors_field = 1ULL << 60;
    expect_bad(&s, "claims", "tensors");
    s = base_spec();
    s.n_kv_field = 1ULL << 60;
    expect_bad(&s, "claims", "key/values");
    /* a key whose length field claims 2^60 bytes */
    gbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 1);
    put_u64(&b, 1ULL << 60);
    put(&b, "general.architecture", 20);
    qlt_gguf g;
    char *dir, *path;
    cr_expect_eq(open_bytes(b.p, b.n, &g, &dir, &path), -1);
    cr_expect(strstr(qlt_error(), path) && strstr(qlt_error(), "claims") && strstr(qlt_error(), "key/value #0"), "%s",
              qlt_error());
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    /* an array whose count claims 2^60 elements */
    b.n = 0;
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 1);
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, QLT_GGUF_VAL_ARRAY);
    put_u32(&b, QLT_GGUF_VAL_STRING);
    put_u64(&b, 1ULL << 60);
    put_str(&b, "a");
    cr_expect_eq(open_bytes(b.p, b.n, &g, &dir, &path), -1);
    cr_expect(strstr(qlt_error(), path) && strstr(qlt_error(), "tokenizer.ggml.tokens") && strstr(qlt_error(), "cannot fit"),
              "%s", qlt_error());
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    free(b.p);
}

Test(gguf_bad, unknown_and_unsupported_types) {
    spec s = base_spec();
    s.type[0] = 99;
    expect_bad(&s, "'w'", "unknown ggml type 99");
    /* a known type the dequantizer does not cover opens, then is refused by name and type */
    s = base_spec();
    s.type[0] = 10; /* Q2_K: 256 values in 84 bytes */
    s.dims[0][0] = 256;
    s.dims[0][1] = 1;
    s.data_bytes = 96;
    gbuf b = build(&s);
    qlt_gguf g;
    char *dir, *path;
    cr_assert_eq(open_bytes(b.p, b.n, &g, &dir, &path), 0, "%s", qlt_error());
    float out[256];
    cr_expect_eq(qlt_gguf_tensor_to_f32(&g, &g.tensors[0], out), -1);
    cr_expect(strstr(qlt_error(), path) && strstr(qlt_error(), "'w'") && strstr(qlt_error(), "Q2_K"), "%s", qlt_error());
    qlt_gguf_close(&g);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    free(b.p);
    /* a row length that is not a whole number of blocks */
    s = base_spec();
    s.type[0] = QLT_GGML_Q4_0;
    s.dims[0][0] = 20;
    expect_bad(&s, "'w'", "not a multiple of the Q4_0 block");
}

Test(gguf_bad, misaligned_and_alignment) {
    spec s = base_spec();
    s.offset[0] = 8;
    s.data_bytes = 264;
    expect_bad(&s, "'w'", "not a multiple of the alignment 32");
    s = base_spec();
    s.alignment_kv = 48;
    expect_bad(&s, "general.alignment", "power of two");
    /* a custom power-of-two alignment is honoured */
    s = base_spec();
    s.alignment_kv = 128;
    gbuf b = build(&s);
    qlt_gguf g;
    char *dir, *path;
    cr_assert_eq(open_bytes(b.p, b.n, &g, &dir, &path), 0, "%s", qlt_error());
    cr_expect_eq(g.alignment, 128);
    cr_expect_eq(g.data_offset % 128, 0);
    qlt_gguf_close(&g);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    free(b.p);
}

Test(gguf_bad, versions_magic_overlap_duplicates) {
    spec s = base_spec();
    s.version = 1;
    expect_bad(&s, "version 1", NULL);
    s.version = 0x03000000u;
    expect_bad(&s, "big-endian", NULL);
    s = base_spec();
    s.n_tensors = 2;
    s.names[1] = "v";
    s.ndim[1] = 1;
    s.dims[1][0] = 32;
    s.type[1] = QLT_GGML_F32;
    s.offset[1] = 128; /* inside w's 256 bytes */
    expect_bad(&s, "overlap", "'w'");
    s.names[1] = "w";
    s.offset[1] = 256;
    s.data_bytes = 384;
    expect_bad(&s, "'w'", "appears twice");
    s = base_spec();
    s.dup_key = "general.architecture";
    expect_bad(&s, "general.architecture", "appears twice");
    qlt_gguf g;
    char *dir, *path;
    cr_expect_eq(open_bytes("GGML-not-gguf-at-all-xxxxxxxx", 29, &g, &dir, &path), -1);
    cr_expect(strstr(qlt_error(), path) && strstr(qlt_error(), "not a GGUF file"), "%s", qlt_error());
    qlt_remove_tree(dir);
    free(dir);
    free(path);
}

/* Random damage to the header region of a real file: every open either succeeds (and then every tensor
 * lies inside the file) or fails with one line; nothing crashes or reads outside the map (ASan). */
Test(gguf_bad, random_byte_damage) {
    char *src = gguf_fixture("types.gguf");
    char *data;
    size_t len;
    cr_assert_eq(qlt_read_file(src, &data, &len), 0, "%s", qlt_error());
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "damaged.gguf");
    qlt_rng rng;
    qlt_rng_seed(&rng, 1234);
    size_t header = 2600 < len ? 2600 : len; /* key/values and tensor infos */
    int opened = 0, refused = 0;
    for (int it = 0; it < 400; it++) {
        char *copy = malloc(len);
        memcpy(copy, data, len);
        int flips = 1 + (int)(qlt_rng_next(&rng) % 4);
        for (int k = 0; k < flips; k++) copy[qlt_rng_next(&rng) % header] ^= (char)(1 + qlt_rng_next(&rng) % 255);
        test_write_bytes(path, copy, len);
        qlt_gguf g;
        if (qlt_gguf_open(&g, path) == 0) {
            opened++;
            for (int64_t t = 0; t < g.n_tensors; t++)
                cr_expect((const uint8_t *)g.tensors[t].data + g.tensors[t].nbytes <= (const uint8_t *)g.map + g.map_size);
            qlt_gguf_close(&g);
        } else {
            refused++;
            cr_expect(strstr(qlt_error(), path) && !strchr(qlt_error(), '\n'), "%s", qlt_error());
        }
        free(copy);
    }
    cr_expect(refused > 0, "no damaged copy was refused (%d opened)", opened);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    free(data);
    free(src);
}
