/* test_nf4_model.c: the model with NF4 linear layers: quantizing on load and loading the bitsandbytes
 * checkpoint written by `qlora-train quantize` give bit-identical logits, and the quantized model stays
 * close to the full-precision golden loss. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "model/forward.h"
#include "test_util.h"
#include "train/batch.h"

/* Logits [N, V] and mean loss of the base model in dir on the fixture's golden batch. */
static float *model_logits(const char *dir, const char *fixture, int nf4, double *loss, int64_t *numel) {
    qlt_backend *be = qlt_backend_cpu_create(0, 1);
    qlt_model m;
    qlt_model_load_opts opts = {.nf4 = nf4, .nf4_blocksize = 64, .double_quant = 1};
    cr_assert_eq(qlt_model_load(&m, be, dir, &opts), 0, "%s", qlt_error());
    int32_t *ids, *labels;
    int batch, seq;
    test_golden_batch(fixture, &ids, &labels, &batch, &seq);
    qlt_batch_buffers bb;
    cr_assert_eq(qlt_batch_buffers_init(&bb, be, batch, seq, m.cfg.sliding_window), 0);
    int64_t count = qlt_batch_upload(&bb, be, ids, labels, NULL);
    qlt_optim_scalars s = {0};
    void *scratch = malloc(qlt_loss_scratch_bytes(&m, (int64_t)batch * seq));
    qlt_graph gr;
    qlt_graph_init(&gr, be, 1);
    qlt_forward_opts o = {.scalars = &s, .loss_scratch = scratch};
    int hf = -1;
    for (int pass = 0; pass < 2; pass++) {
        qlt_graph_begin(&gr, pass == 0);
        hf = qlt_forward(&gr, &m, &bb.dev, &o);
        if (pass == 0) cr_assert_eq(qlt_graph_commit_plan(&gr), 0);
    }
    *numel = (int64_t)batch * seq * m.cfg.vocab;
    float *logits = malloc(sizeof(float) * (size_t)*numel);
    be->logits(be, logits, gr.values[hf].data, &m.lm_head, (int64_t)batch * seq);
    *loss = s.loss_sum / (double)count;
    cr_assert_eq(m.quantized, 1);
    qlt_graph_free(&gr);
    free(scratch);
    qlt_batch_buffers_free(&bb, be);
    qlt_model_free(&m);
    be->destroy(be);
    free(ids);
    free(labels);
    return logits;
}

Test(nf4_model, quantize_on_load_equals_bnb_checkpoint) {
    const char *models[] = {"tiny-llama", "tiny-qwen2", "tiny-qwen3"};
    const double golden_base_loss[] = {6.078609943389893, 6.28772497177124, 6.3026227951049805}; /* golden base_loss */
    for (int i = 0; i < 3; i++) {
        char *src = test_fixture_path(models[i], NULL);
        char *tmp = test_tmpdir();
        char *qdir = qlt_path_join(tmp, "q"), *args = NULL, *out = NULL;
        if (asprintf(&args, "quantize %s %s", src, qdir) < 0) abort();
        cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
        double loss_a, loss_b;
        int64_t na, nb;
        float *a = model_logits(src, models[i], 1, &loss_a, &na);
        float *b = model_logits(qdir, models[i], 0, &loss_b, &nb);
        cr_assert_eq(na, nb);
        cr_expect(memcmp(a, b, sizeof(float) * (size_t)na) == 0, "%s: logits differ between NF4-on-load and the "
                  "quantized checkpoint", models[i]);
        cr_expect_eq(loss_a, loss_b);
        /* 4-bit weights move the loss a little, not a lot */
        cr_expect(fabs(loss_a - golden_base_loss[i]) < 0.05 * golden_base_loss[i], "%s: NF4 loss %.4f", models[i], loss_a);
        free(a);
        free(b);
        qlt_remove_tree(tmp);
        free(tmp);
        free(qdir);
        free(args);
        free(out);
        free(src);
    }
}
