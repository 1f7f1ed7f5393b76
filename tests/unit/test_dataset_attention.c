/* test_dataset_attention.c: packed rows never let a token attend to another example. A naive float
 * attention (causal, restricted to the token's own segment via seg_start, positions t - seg_start[t])
 * over each packed row gives, at every token, exactly the output of running that token's example
 * alone from position 0. Queries/keys/values are a fixed pseudo-random function of (token id,
 * position), as a model's would be after embedding + RoPE. Without the segment mask the outputs differ,
 * so the test can fail. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "data/dataset.h"
#include "test_util.h"

enum { DIM = 8 };

static float feature(int32_t id, int pos, int which, int d) {
    uint32_t h = (uint32_t)id * 2654435761u ^ (uint32_t)pos * 40503u ^ (uint32_t)(which * 97 + d) * 2246822519u;
    h ^= h >> 15;
    h *= 2654435761u;
    h ^= h >> 13;
    return (float)(h % 2001) / 1000.0f - 1.0f;
}

/* out[t] = softmax_j(q_t . k_j / sqrt(DIM)) v_j over j <= t with seg[j] == seg[t] (all j <= t when !use_seg). */
static void attention(const int32_t *ids, const int32_t *seg, int n, int use_seg, float *out) {
    for (int t = 0; t < n; t++) {
        int pt = t - seg[t];
        float scores[4096], m = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
            scores[j] = -INFINITY;
            if (use_seg && seg[j] != seg[t]) continue;
            int pj = j - seg[j];
            float s = 0;
            for (int d = 0; d < DIM; d++) s += feature(ids[t], pt, 0, d) * feature(ids[j], pj, 1, d);
            scores[j] = s / sqrtf((float)DIM);
            if (scores[j] > m) m = scores[j];
        }
        for (int d = 0; d < DIM; d++) out[t * DIM + d] = 0;
        for (int j = 0; j <= t; j++) {
            if (scores[j] == -INFINITY) continue;
            float w = expf(scores[j] - m);
            sum += w;
            for (int d = 0; d < DIM; d++) out[t * DIM + d] += w * feature(ids[j], j - seg[j], 2, d);
        }
        for (int d = 0; d < DIM; d++) out[t * DIM + d] /= sum;
    }
}

Test(dataset_attention, packed_rows_equal_examples_alone) {
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "a.jsonl");
    FILE *f = fopen(path, "w");
    /* examples of 1..13 tokens, so rows hold several and some continue into the next row */
    for (int e = 0; e < 40; e++) {
        fprintf(f, "{\"input_ids\": [");
        for (int i = 0; i <= e % 13; i++) fprintf(f, "%s%d", i ? ", " : "", 10 + (e * 31 + i * 7) % 500);
        fprintf(f, "]}\n");
    }
    fclose(f);
    qlt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.data.format = QLT_DATA_FORMAT_TOKENS;
    cfg.data.seq_len = 32;
    cfg.data.packing = 1;
    cfg.data.threads = 1;
    qlt_path_list files = {1, {path}};
    qlt_dataset ds;
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), 0, "%s", qlt_error());
    cr_assert_gt(ds.n_rows, 3);
    int S = ds.seq_len, segments = 0, differs = 0;
    float packed[32 * DIM], alone[32 * DIM], unmasked[32 * DIM];
    for (int64_t r = 0; r < ds.n_rows; r++) {
        const int32_t *ids = ds.input_ids + r * S, *seg = ds.seg_start + r * S;
        attention(ids, seg, S, 1, packed);
        attention(ids, seg, S, 0, unmasked);
        for (int t = 0; t < S; t++)
            for (int d = 0; d < DIM; d++) differs += fabsf(unmasked[t * DIM + d] - packed[t * DIM + d]) > 1e-4f;
        for (int s = 0; s < S;) { /* each segment run alone, from position 0 */
            int e = s;
            while (e < S && seg[e] == s) e++;
            int32_t zeros[32] = {0};
            attention(ids + s, zeros, e - s, 1, alone);
            for (int t = s; t < e; t++) {
                cr_assert_eq(seg[t], s);
                for (int d = 0; d < DIM; d++)
                    cr_assert_eq(packed[t * DIM + d], alone[(t - s) * DIM + d], "row %lld token %d differs from its "
                                 "example alone", (long long)r, t);
            }
            segments++;
            s = e;
        }
    }
    cr_assert_gt(segments, (int)ds.n_rows); /* rows really hold several examples */
    cr_assert_gt(differs, 0, "without the segment mask attention must leak across examples");
    qlt_dataset_free(&ds);
    qlt_remove_tree(dir);
    free(path);
    free(dir);
}
