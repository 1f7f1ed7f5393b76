/* cmd_bench.c: `qlora-train bench --model CONFIG.json [...]`: trains a few steps of a model of that
 * architecture with random weights (created directly in NF4 on the backend, no weight files) on random
 * tokens, and prints tokens/s, step time, peak memory, MFU and the per-phase time breakdown. The run goes
 * through the real trainer (same code path as `train`). */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench_decode.h"
#include "cli/cli_config.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "common/rng.h"
#include "cpu/backend_cpu.h"
#include "train/trainer.h"

typedef struct bench_opts {
    const char *model;
    int micro_batch, seq, steps, warmup, r, threads;
    const char *quant, *device, *backward_a, *grad_checkpoint, *attention, *dequant_cache;
    int cuda_graph, deterministic, json, cpu_reference;
    int decode, prompt_len; /* --decode N: the generation benchmark instead (bench_decode.c) */
} bench_opts;

const qlt_cli_option qlt_bench_options[] = {
    {"--model", "CONFIG.json", NULL, "the architecture (a Hugging Face config.json; random weights) (required)"},
    {"--micro-batch", "N", "4", "sequences a step"},
    {"--seq", "N", "2048", "tokens a sequence"},
    {"--steps", "N", "10", "measured steps"},
    {"--warmup", "N", "3", "steps run before the measured ones"},
    {"--r", "N", "16", "LoRA rank (alpha = 2r, all seven projections)"},
    {"--quant", "nf4|none", "nf4", "model.quant"},
    {"--device", "auto|cpu|cuda", "auto", "train.device"},
    {"--backward-a", "bf16|fp16|fp32", "bf16", "train.backward_a"},
    {"--grad-checkpoint", "none|layer|auto", "none", "train.grad_checkpoint"},
    {"--attention", "auto|own|cudnn", "auto", "train.attention"},
    {"--cuda-graph", NULL, "off (or the CUDA_GRAPH environment variable)", "train.cuda_graph: true"},
    {"--deterministic", NULL, "off", "train.deterministic: true"},
    {"--dequant-cache", "GIB", "0", "train.dequant_cache_gib"},
    {"--threads", "N", "0 (all cores)", "train.threads (CPU)"},
    {"--cpu-reference", NULL, "off", "train.cpu_reference: the CPU's double-summing reference ops"},
    {"--json", NULL, "off", "one JSON line instead of the text report"},
    {"--decode", "N", "off", "the generation benchmark instead: N new tokens one a step (greedy, KV cache)"},
    {"--prompt-len", "N", "128", "--decode: tokens of the random prompt"},
    {NULL, NULL, NULL, NULL},
};

static void usage(void) {
    printf("usage: qlora-train bench --model CONFIG.json [--micro-batch 4] [--seq 2048] [--steps 10] [--warmup 3]\n"
           "                         [--r 16] [--quant nf4|none] [--device auto|cpu|cuda] [--backward-a bf16|fp16|fp32]\n"
           "                         [--grad-checkpoint none|layer|auto] [--attention auto|own|cudnn] [--cuda-graph]\n"
           "                         [--deterministic] [--dequant-cache GIB] [--threads N] [--cpu-reference]\n"
           "                         [--json]\n"
           "       qlora-train bench --model CONFIG.json --decode N [--prompt-len 128] [--quant nf4|none] [--device ...]\n\n"
           "Trains LoRA (all seven projections, alpha = 2r) on a random-weight model of CONFIG.json with random\n"
           "tokens; prints tokens/s (median step), peak memory, MFU (4 x linear params x tokens/s over the measured\n"
           "GEMM peak: bf16 on a GPU, OpenBLAS's sgemm on the CPU) and where the time goes; on the CPU also the\n"
           "frozen-weight GEMMs' rate (NF4 dequantization included) against OpenBLAS's sgemm alone on the same\n"
           "shapes. --dequant-cache: train.dequant_cache_gib (GiB that keep the NF4 weights dequantized between\n"
           "steps; 0 = off, the default). --threads: train.threads (CPU; 0 = all cores, the default).\n"
           "--cpu-reference: train.cpu_reference (the CPU's double-summing reference ops).\n"
           "--decode N: generation instead: a random prompt of --prompt-len tokens, then N tokens one a step (greedy,\n"
           "KV cache, as `generate`); prints tokens/s and the bandwidth a step reaches against the device's copy\n"
           "bandwidth.\n");
    qlt_cli_print_options(stdout, qlt_bench_options);
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.micro_batch = 4, .seq = 2048, .steps = 10, .warmup = 3, .r = 16, .quant = "nf4",
                      .device = "auto", .backward_a = "bf16", .grad_checkpoint = "none",
                      .attention = "auto", .dequant_cache = "0", .prompt_len = 128};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--cuda-graph") == 0) { o->cuda_graph = 1; continue; }
        if (strcmp(a, "--json") == 0) { o->json = 1; continue; }
        if (strcmp(a, "--deterministic") == 0) { o->deterministic = 1; continue; }
        if (strcmp(a, "--cpu-reference") == 0) { o->cpu_reference = 1; continue; }
        if (!v) return qlt_fail("%s needs a value (see qlora-train bench --help)", a);
        i++;
        if (strcmp(a, "--model") == 0) o->model = v;
        else if (strcmp(a, "--micro-batch") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 24, &o->micro_batch));
        else if (strcmp(a, "--seq") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 24, &o->seq));
        else if (strcmp(a, "--steps") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 24, &o->steps));
        else if (strcmp(a, "--warmup") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 24, &o->warmup));
        else if (strcmp(a, "--r") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 24, &o->r));
        else if (strcmp(a, "--threads") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 0, 4096, &o->threads));
        else if (strcmp(a, "--quant") == 0) o->quant = v;
        else if (strcmp(a, "--device") == 0) o->device = v;
        else if (strcmp(a, "--backward-a") == 0) o->backward_a = v;
        else if (strcmp(a, "--grad-checkpoint") == 0) o->grad_checkpoint = v;
        else if (strcmp(a, "--attention") == 0) o->attention = v;
        else if (strcmp(a, "--dequant-cache") == 0) o->dequant_cache = v;
        else if (strcmp(a, "--decode") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 20, &o->decode));
        else if (strcmp(a, "--prompt-len") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 20, &o->prompt_len));
        else return qlt_fail("unknown option '%s' (see qlora-train bench --help)", a);
    }
    if (!o->model) return qlt_fail("--model CONFIG.json is required (e.g. a Hugging Face config.json)");
    return 0;
}

/* Random token rows, one per line, for (warmup + steps) steps. */
static int write_tokens(const char *path, const bench_opts *o, int vocab) {
    FILE *f = fopen(path, "w");
    if (!f) return qlt_fail("%s: cannot write", path);
    qlt_rng rng;
    qlt_rng_seed(&rng, 7);
    int64_t rows = (int64_t)(o->warmup + o->steps) * o->micro_batch;
    for (int64_t r = 0; r < rows; r++) {
        fputs("{\"input_ids\": [", f);
        for (int s = 0; s < o->seq; s++) fprintf(f, "%s%d", s ? "," : "", (int)qlt_rng_below(&rng, (uint64_t)vocab));
        fputs("]}\n", f);
    }
    return fclose(f) == 0 ? 0 : qlt_fail("%s: write failed", path);
}

static int set_fmt(qlt_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int set_fmt(qlt_config *cfg, const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return qlt_config_set(cfg, buf);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run_bench(const bench_opts *o, const char *tmp) {
    char *text = NULL;
    QLT_TRY(qlt_read_file(o->model, &text, NULL));
    qlt_model_config mc;
    int rc = qlt_model_config_parse(&mc, text, o->model);
    free(text);
    if (rc != 0) return -1;
    char *tokens = qlt_path_join(tmp, "tokens.jsonl");
    rc = write_tokens(tokens, o, mc.vocab);
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    if (rc == 0)
        rc = set_fmt(&cfg, "model.path=random:%s", o->model) || set_fmt(&cfg, "model.quant=%s", o->quant) ||
             set_fmt(&cfg, "lora.r=%d", o->r) || set_fmt(&cfg, "lora.alpha=%d", 2 * o->r) ||
             set_fmt(&cfg, "lora.targets=all-linear") || set_fmt(&cfg, "data.train=%s", tokens) ||
             set_fmt(&cfg, "data.format=tokens") || set_fmt(&cfg, "data.seq_len=%d", o->seq) ||
             set_fmt(&cfg, "data.packing=false") || set_fmt(&cfg, "data.shuffle=false") ||
             set_fmt(&cfg, "data.cache=false") || set_fmt(&cfg, "train.device=%s", o->device) ||
             set_fmt(&cfg, "train.micro_batch=%d", o->micro_batch) ||
             set_fmt(&cfg, "train.max_steps=%d", o->warmup + o->steps) || set_fmt(&cfg, "train.lr=1e-4") ||
             set_fmt(&cfg, "train.backward_a=%s", o->backward_a) ||
             set_fmt(&cfg, "train.grad_checkpoint=%s", o->grad_checkpoint) ||
             (o->cuda_graph ? set_fmt(&cfg, "train.cuda_graph=true") : qlt_config_apply_env(&cfg)) ||
             set_fmt(&cfg, "train.deterministic=%s", o->deterministic ? "true" : "false") ||
             set_fmt(&cfg, "train.attention=%s", o->attention) ||
             set_fmt(&cfg, "train.dequant_cache_gib=%s", o->dequant_cache) ||
             set_fmt(&cfg, "train.threads=%d", o->threads) ||
             set_fmt(&cfg, "train.cpu_reference=%s", o->cpu_reference ? "true" : "false") ||
             set_fmt(&cfg, "output.dir=%s", tmp) || qlt_config_validate(&cfg)
                 ? -1
                 : 0;
    free(tokens);
    if (rc != 0) {
        qlt_config_free(&cfg);
        return -1;
    }
    double t0 = qlt_now_seconds();
    qlt_trainer t;
    if (qlt_trainer_init(&t, &cfg, QLT_TRAINER_TRAIN) != 0) {
        qlt_config_free(&cfg);
        return -1;
    }
    double load_s = qlt_now_seconds() - t0;
    qlt_backend *be = t.be;
    double *step_s = qlt_xcalloc((size_t)o->steps, sizeof(double));
    double phase_ms[QLT_PHASE_COUNT] = {0}, first_step_s = 0, last_loss = 0;
    /* graph mode reports each step one call later: record metrics by the step they belong to */
    int profile = be->profile_on && !t.graph_mode;
    qlt_clock_report clocks = {0};
    /* which attention runs, as the trainer chose it (bench rows are one example each) */
    char attention[48] = "own kernels";
    if (t.attention_plan != QLT_ATTENTION_OWN)
        snprintf(attention, sizeof attention, "cuDNN %d.%d.%d fused", be->cudnn_version / 10000,
                 be->cudnn_version / 100 % 100, be->cudnn_version % 100);
    for (int s = 0; s <= o->warmup + o->steps && rc == 0; s++) {
        qlt_step_metrics m;
        if (s == o->warmup && profile) be->profile_on(be, 1);
        if (s == o->warmup && be->clock_monitor) be->clock_monitor(be, 1, NULL);
        rc = s < o->warmup + o->steps ? qlt_trainer_step(&t, &m) : qlt_trainer_flush(&t, &m);
        if (rc != 0 || !m.valid) continue;
        int k = (int)m.step - 1;
        if (k == 0) first_step_s = m.seconds;
        if (k >= o->warmup) step_s[k - o->warmup] = m.seconds;
        last_loss = m.loss;
    }
    if (be->clock_monitor) be->clock_monitor(be, 0, &clocks); /* before the GEMM-peak measurement below */
    /* CPU: the frozen-weight products against OpenBLAS's sgemm alone on the same shapes (read before
     * profile_on(0), which forgets them) */
    qlt_cpu_gemm_report gemm = {0};
    const bool cpu = strcmp(be->name, "cpu") == 0;
    if (rc == 0 && profile) {
        be->profile_read(be, phase_ms);
        if (cpu) rc = qlt_backend_cpu_gemm_report(be, &gemm);
        be->profile_on(be, 0);
    }
    if (rc == 0) {
        qsort(step_s, (size_t)o->steps, sizeof(double), cmp_double);
        double median = step_s[o->steps / 2];
        double tokens_per_step = (double)o->micro_batch * o->seq;
        double tokens_per_s = tokens_per_step / median;
        double peak_gib = be->peak_bytes ? (double)be->peak_bytes(be) / (1 << 30) : 0;
        double held_gib = be->dequant_cache_held ? (double)be->dequant_cache_held(be) / (1 << 30) : 0;
        /* the memory plan against what the run took: the backend's own peak (plan less the libraries' share) and the
         * device's memory in use now, less what was in use before the run began (the CUDA context) */
        const qlt_memory_plan *plan = &t.mem_plan;
        double plan_gib = plan->total / (1 << 30), plan_backend_gib = (plan->total - plan->libraries) / (1 << 30);
        double device_gib = be->device_used_bytes && plan->total > 0
                                ? ((double)be->device_used_bytes(be) - plan->context) / (1 << 30)
                                : 0;
        double peak_tflops = be->gemm_peak_tflops ? be->gemm_peak_tflops(be) : 0;
        double linear = (double)qlt_model_linear_params(&mc);
        double mfu = peak_tflops > 0 ? 4.0 * linear * tokens_per_s / (peak_tflops * 1e12) : 0;
        double total_ms = 0;
        for (int p = 0; p < QLT_PHASE_COUNT; p++) total_ms += phase_ms[p];
        /* the linear ops' share of the time: their GEMMs, forward and backward, and the NF4 dequantization */
        const double linear_ms = phase_ms[QLT_PHASE_FWD_GEMM] + phase_ms[QLT_PHASE_BWD_GEMM] + phase_ms[QLT_PHASE_DEQUANT];
        const double linear_gflops = linear_ms > 0 ? gemm.flops / (linear_ms * 1e-3) / 1e9 : 0;
        const double sgemm_gflops = gemm.sgemm_ms > 0 ? gemm.flops / (gemm.sgemm_ms * 1e-3) / 1e9 : 0;
        /* energy from the GPU's counter over the measured steps (0 where there is none) */
        const bool metered = clocks.energy_j > 0;
        const double joules_step = clocks.energy_j / o->steps, mj_token = 1e3 * joules_step / tokens_per_step;
        const double watts = metered ? clocks.energy_j / clocks.energy_wall_s : clocks.power_w_mean;
        if (o->json) {
            printf("{\"model\": \"%s\", \"device\": \"%s\", \"quant\": \"%s\", \"micro_batch\": %d, \"seq\": %d, \"r\": %d, "
                   "\"tokens_per_s\": %.1f, \"step_s_median\": %.5f, \"peak_gib\": %.3f, \"mfu\": %.4f, "
                   "\"gemm_peak_tflops\": %.1f, \"load_s\": %.3f, \"first_step_s\": %.3f, \"loss\": %.5f",
                   o->model, be->name, o->quant, o->micro_batch, o->seq, o->r, tokens_per_s, median, peak_gib, mfu,
                   peak_tflops, load_s, first_step_s, last_loss);
            printf(", \"attention\": \"%s\", \"dequant_cache_gib\": %g, \"dequant_cache_held_gib\": %.3f", attention,
                   cfg.train.dequant_cache_gib, held_gib);
            if (plan->total > 0)
                printf(", \"plan_gib\": %.3f, \"plan_backend_gib\": %.3f, \"device_gib\": %.3f, \"context_gib\": %.3f",
                       plan_gib, plan_backend_gib, device_gib, plan->context / (1 << 30));
            if (gemm.calls)
                printf(", \"threads\": %d, \"cpu_reference\": %s, \"linear_gflops\": %.1f, \"sgemm_same_shapes_gflops\": %.1f",
                       gemm.threads, o->cpu_reference ? "true" : "false", linear_gflops, sgemm_gflops);
            if (metered)
                printf(", \"joules_per_step\": %.2f, \"millijoules_per_token\": %.3f, \"power_w_energy\": %.1f",
                       joules_step, mj_token, watts);
            if (clocks.samples)
                printf(", \"sm_mhz_median\": %.0f, \"sm_mhz_min\": %.0f, \"sm_mhz_max\": %.0f, \"power_w\": %.1f, "
                       "\"power_limit_w\": %.1f, \"power_capped_share\": %.3f",
                       clocks.sm_mhz_median, clocks.sm_mhz_min, clocks.sm_mhz_max, clocks.power_w_mean,
                       clocks.power_limit_w, clocks.capped_share);
            if (profile) /* graph mode is not profiled: its steps are single launches */
                for (int p = 0; p < QLT_PHASE_COUNT; p++)
                    printf(", \"ms_%s\": %.3f", qlt_phase_name(p), phase_ms[p] / o->steps);
            printf("}\n");
        } else {
            printf("model %s (%s, %.2fB linear params), %s backend%s, %s base, micro_batch %d x seq %d, LoRA r %d\n",
                   o->model, mc.arch_name, linear / 1e9, be->name, cpu && o->cpu_reference ? " (reference ops)" : "",
                   o->quant, o->micro_batch, o->seq, o->r);
            printf("load (random init%s): %.2f s, first step %.3f s; attention: %s",
                   strcmp(o->quant, "nf4") == 0 ? " + NF4" : "", load_s, first_step_s, attention);
            if (cfg.train.dequant_cache_gib > 0)
                printf("; weights kept dequantized %.2f GiB (budget %g)", held_gib, cfg.train.dequant_cache_gib);
            printf("\n");
            printf("tokens/s %.0f   step %.1f ms (median of %d)   peak memory %.2f GiB", tokens_per_s, median * 1e3,
                   o->steps, peak_gib);
            if (peak_tflops > 0 && !cpu) printf("   MFU %.1f%% of %.0f TFLOP/s", 100 * mfu, peak_tflops);
            if (peak_tflops > 0 && cpu) printf("   MFU %.1f%% of %.0f GFLOP/s", 100 * mfu, 1e3 * peak_tflops);
            printf("\n");
            if (plan->total > 0) {
                printf("memory plan %.2f GiB: backend %.2f GiB (its peak: %.2f GiB)", plan_gib, plan_backend_gib, peak_gib);
                if (device_gib > 0)
                    printf(", with the libraries %.2f GiB (the device's use now, less the %.2f GiB in use before the "
                           "run)", device_gib, plan->context / (1 << 30));
                printf("\n");
            }
            if (gemm.calls)
                printf("frozen-weight GEMMs (%lld a step, %d shapes; NF4 dequantization included): %.1f GFLOP/s on %d "
                       "threads; OpenBLAS sgemm alone on the same shapes: %.1f GFLOP/s (%.0f%%)\n",
                       (long long)(gemm.calls / o->steps), gemm.shapes, linear_gflops, gemm.threads, sgemm_gflops,
                       sgemm_gflops > 0 ? 100 * linear_gflops / sgemm_gflops : 0);
            /* power from the energy counter where there is one: NVML's power readings are averaged over about a
             * second and lag a run this short */
            if (clocks.samples)
                printf("GPU during the measured steps: SM clock median %.0f MHz (lowest %.0f, maximum %.0f), power-capped "
                       "in %.0f%% of %d samples, power %.0f W of %.0f W (%s)\n",
                       clocks.sm_mhz_median, clocks.sm_mhz_min, clocks.sm_mhz_max, 100 * clocks.capped_share,
                       clocks.samples, watts, clocks.power_limit_w,
                       metered ? "energy counter" : "mean of the power readings");
            if (metered)
                printf("energy (the GPU's counter over the measured steps): %.1f J a step, %.2f mJ a token\n",
                       joules_step, mj_token);
            if (profile) printf("\n| phase | ms / step | share |\n|---|---|---|\n");
            else printf("(CUDA graph mode: no per-phase breakdown; run without --cuda-graph for it)\n");
            for (int p = 0; p < QLT_PHASE_COUNT; p++)
                if (phase_ms[p] > 0)
                    printf("| %s | %.2f | %.1f%% |\n", qlt_phase_name(p), phase_ms[p] / o->steps,
                           total_ms > 0 ? 100 * phase_ms[p] / total_ms : 0);
        }
    }
    free(step_s);
    qlt_trainer_free(&t);
    qlt_config_free(&cfg);
    return rc;
}

int qlt_cmd_bench(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage();
        return 0;
    }
    bench_opts o;
    if (parse_args(argc, argv, &o) != 0) return qlt_cli_report_error();
    if (o.decode > 0) {
        qlt_bench_decode_opts d = {o.model, o.quant, o.device, o.prompt_len, o.decode, o.json};
        return qlt_bench_decode(&d) == 0 ? 0 : qlt_cli_report_error();
    }
    char tmp[] = "/tmp/qlt-bench-XXXXXX";
    if (!mkdtemp(tmp)) {
        qlt_fail("cannot create a temporary directory in /tmp");
        return qlt_cli_report_error();
    }
    int rc = run_bench(&o, tmp);
    if (rc != 0) qlt_cli_report_error();
    qlt_remove_tree(tmp);
    return rc == 0 ? 0 : 1;
}
