/* Benchmark (not a test): time a full sweep of Llama-3.1-70B over every
 * every_n_layers (off, 1..80) x offload (off, on) x micro-batch 1..64 x
 * seq 512..131072 (powers of two) with the fast evaluator, on one core.
 * Usage: gckpt-bench-sweep [--model NAME] [--gpu NAME] [--repeat N] [--check N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gckpt/core/eval.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *model = "llama-3.1-70b", *gpu = "h100-sxm-80gb";
    int repeat = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--gpu") && i + 1 < argc) gpu = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: gckpt-bench-sweep [--model NAME] [--gpu NAME] [--repeat N]\n");
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    gckpt_model m;
    gckpt_device d;
    gckpt_err err;
    if (!gckpt_model_load(model, &m, &err) || !gckpt_device_load(gpu, &d, &err)) {
        fprintf(stderr, "gckpt-bench-sweep: %s\n", err.msg);
        return 2;
    }
    static gckpt_recipe r;
    static gckpt_profile prof;
    gckpt_recipe_build(&m, GCKPT_AMP_BF16, GCKPT_SDPA, &r);
    gckpt_profiler *pr = gckpt_profiler_new();
    if (!pr) return 2;
    double best = 1e30, checksum = 0;
    size_t configs = 0, fits = 0;
    for (int rep = 0; rep < repeat; rep++) {
        configs = fits = 0;
        checksum = 0;
        double t0 = now();
        for (uint64_t seq = 512; seq <= 131072; seq *= 2) {
            for (uint64_t mb = 1; mb <= 64; mb++) {
                gckpt_setting s = {.seq = seq, .micro_batch = mb, .grad_accum = 1,
                                   .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW,
                                   .attention = GCKPT_SDPA};
                gckpt_ctx c;
                if (!gckpt_ctx_init(&c, &m, &d, &r, &s, &err) || !gckpt_profile_build_with(pr, &c, &prof)) {
                    fprintf(stderr, "gckpt-bench-sweep: %s\n", err.msg);
                    return 2;
                }
                for (uint32_t n = 0; n <= m.layers; n++) {
                    for (int off = 0; off < (n ? 2 : 1); off++) {
                        gckpt_result res;
                        gckpt_fast_eval_ex(&c, &prof, n, off, 1, false, &res);
                        configs++;
                        fits += res.device_peak_bytes <= d.memory_bytes;
                        checksum += (double)res.peak_bytes * 1e-12 + res.step_s;
                    }
                }
            }
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    gckpt_profiler_free(pr);
    printf("model %s, gpu %s: %zu configurations (every_n off/1..%llu x offload x micro-batch 1..64 x seq 512..131072)\n",
           m.name, d.name, configs, (unsigned long long)m.layers);
    printf("best of %d: %.1f ms for the whole sweep, %.2f M configurations/s, %zu fit in %.0f GiB (checksum %.6g)\n",
           repeat, best * 1e3, (double)configs / best / 1e6, fits, (double)d.memory_bytes / 1073741824.0, checksum);
    return 0;
}
