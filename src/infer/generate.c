/* generate.c: one prompt in, text out (see generate.h). */
#include "infer/generate.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "data/chat_template.h"
#include "infer/kv_decoder.h"

/* The ids that end a generation: end of text, the template's end of turn, and the usual names of both. */
typedef struct stop_ids {
    int32_t id[8];
    int n;
} stop_ids;

static void stop_add(stop_ids *s, int32_t id) {
    if (id < 0 || s->n == 8) return;
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id) return;
    s->id[s->n++] = id;
}

static int is_stop(const stop_ids *s, int32_t id) {
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id) return 1;
    return 0;
}

/* Streams the decoded text of ids[0..n) beyond the *printed bytes already written; a trailing replacement
 * character (an incomplete UTF-8 sequence) waits for the next token unless final. */
static int stream_text(const qlt_tokenizer *tok, const int32_t *ids, int64_t n, size_t *printed, int final,
                       FILE *out) {
    char *text;
    size_t len;
    QLT_TRY(qlt_tokenizer_decode(tok, ids, n, &text, &len));
    size_t upto = len;
    if (!final && len >= 3 && memcmp(text + len - 3, "\xef\xbf\xbd", 3) == 0) upto = len - 3;
    if (upto > *printed) {
        if (out) {
            fwrite(text + *printed, 1, upto - *printed, out);
            fflush(out);
        }
        *printed = upto;
    }
    free(text);
    return 0;
}

/* the end tokens of this tokenizer (and template): end of text, end of turn, and their usual names */
static void collect_stops(const qlt_tokenizer *tok, const qlt_generate_opts *o, stop_ids *stops) {
    static const char *const end_names[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>"};
    stops->n = 0;
    stop_add(stops, qlt_tokenizer_eos_id(tok));
    for (size_t i = 0; i < sizeof end_names / sizeof end_names[0]; i++)
        stop_add(stops, qlt_tokenizer_token_id(tok, end_names[i]));
    if (o->chat) stop_add(stops, qlt_chat_end_of_turn(o->tmpl, tok));
}

int qlt_generate(const qlt_model *m, const qlt_lora *lora, const qlt_tokenizer *tok, const qlt_generate_opts *o,
                 const char *prompt, qlt_rng *rng, FILE *stream, qlt_generation *out) {
    memset(out, 0, sizeof *out);
    qlt_ids ids = {0};
    qlt_encoder *enc = qlt_encoder_new(tok);
    int rc;
    if (o->chat) {
        qlt_chat_message msgs[2];
        int n = 0;
        if (o->system) msgs[n++] = (qlt_chat_message){"system", o->system};
        msgs[n++] = (qlt_chat_message){"user", prompt};
        rc = qlt_chat_encode_prompt(o->tmpl, tok, enc, msgs, n, &ids);
    } else {
        rc = qlt_encoder_encode(enc, prompt, strlen(prompt), &ids);
    }
    qlt_encoder_free(enc);
    if (rc != 0 || ids.len == 0) {
        qlt_ids_free(&ids);
        return rc != 0 ? rc : qlt_fail("generate: the prompt encodes to no tokens");
    }
    stop_ids stops;
    collect_stops(tok, o, &stops);
    const int32_t vocab = m->cfg.vocab;
    const int64_t prompt_len = ids.len;
    qlt_kv_decoder d;
    if (qlt_kv_decoder_init(&d, m, lora, prompt_len + o->max_new_tokens, 512) != 0) {
        qlt_ids_free(&ids);
        return -1;
    }
    float *logits = qlt_xmalloc(sizeof(float) * (size_t)vocab);
    void *scratch = qlt_xmalloc(qlt_sample_scratch_bytes(vocab));
    double t0 = qlt_now_seconds();
    rc = qlt_kv_decoder_step(&d, ids.data, prompt_len, logits, NULL);
    double t1 = qlt_now_seconds();
    out->prompt_tokens = prompt_len;
    out->prefill_s = t1 - t0;
    out->stop = "length";
    size_t printed = 0;
    for (int step = 0; rc == 0 && step < o->max_new_tokens; step++) {
        int32_t next = qlt_sample_next(&o->sample, logits, vocab, ids.data, ids.len, rng, scratch);
        if (is_stop(&stops, next)) {
            out->stop = "eos";
            break;
        }
        qlt_ids_push(&ids, next);
        out->new_tokens++;
        if (stream) rc = stream_text(tok, ids.data + prompt_len, out->new_tokens, &printed, 0, stream);
        if (rc == 0 && step + 1 < o->max_new_tokens) rc = qlt_kv_decoder_step(&d, &next, 1, logits, NULL);
    }
    out->decode_s = qlt_now_seconds() - t1;
    if (rc == 0 && stream) rc = stream_text(tok, ids.data + prompt_len, out->new_tokens, &printed, 1, stream);
    if (rc == 0) {
        size_t len;
        rc = qlt_tokenizer_decode(tok, ids.data + prompt_len, out->new_tokens, &out->text, &len);
    }
    free(scratch);
    free(logits);
    qlt_kv_decoder_free(&d);
    qlt_ids_free(&ids);
    return rc;
}

void qlt_generation_free(qlt_generation *g) {
    free(g->text);
    g->text = NULL;
}
