/* Context parallelism over FSDP2 per rank (accelerate's ParallelismConfig(dp_replicate_size, dp_shard_size,
 * cp_size) with the fsdp plugin, FSDP2 over the flattened dp_shard_cp mesh, HSDP across dp_replicate when
 * it is 2: FINDINGS R-CP-17, the fixture's replicas read into the layout) against tests/data/hf-cp-fsdp
 * (tools/hf_probe/probe_dist.py's cp-* cases: the Trainer's preparation and CP inputs, accelerate's
 * context_parallel, torch's ring with the per-block CPU flash kernel, FINDINGS R-CP-11), fake group:
 *   - the persistent bytes at step 2's start and end: FSDP2's over all C x S ranks (a replica's), exact;
 *   - step 2's live peak: FSDP2 over C x S ranks at S / C tokens (the fsdp planning path) plus CP's
 *     extras (gckpt_cp_step_extra), or a ring attention call with its replayed transients where that
 *     is higher (gckpt_cp_peak: the wide-attention llama's fixtures), within GCKPT_CP_PEAK_BOUND_PCT;
 *   - gckpt-plan's own sweep with --cp (gckpt_plan_run): every rank-0 fixture's peak within the same
 *     bound, its breakdown summing to it, tok/s per GPU the rank's B x S / C tokens per step.
 * The same on tests/data/hf-cp-peft (tools/hf_probe/probe_dist_peft.py --cp): LoRA q,v and all-linear
 * (FSDP2 + PEFT's units at S / C; no o_proj input copies unless an o_proj adapter's dropout is 0,
 * FINDINGS R-CP-23), activation offload with and without LoRA (the offloaded bytes exact, R-CP-24). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/cp.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/recipe.h"
#include "gckpt/planner/pc_config.h"
#include "gckpt/planner/plan.h"
#include "gckpt/util/jsonget.h"
#include "dist_fixture.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif
/* The fixture folders and how many per-rank fake-group fixtures each has at least: full fine-tuning
 * (probe_dist.py --set cp), and LoRA q,v / all-linear and activation offload (probe_dist_peft.py --cp,
 * FINDINGS R-CP-23..). */
static const struct {
    const char *dir;
    int min;
} DIRS[] = {{GCKPT_TEST_DATA "/hf-cp-fsdp", 40}, {GCKPT_TEST_DATA "/hf-cp-peft", 50}};
#define NDIRS (sizeof DIRS / sizeof DIRS[0])

static gckpt_recipe g_r;
static gckpt_device g_dev;

static int setup(void **state)
{
    (void)state;
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", &g_dev, &err)) fail_msg("%s", err.msg);
    return 0;
}

static gckpt_ctx g_c;

/* FSDP2's walked step of the rank at S / C (CPU target, exact allocator), in g_c. */
static void planned_step(const gckpt_model *m, const gckpt_setting *s, gckpt_result *res)
{
    gckpt_err err;
    gckpt_setting_recipe(m, s, GCKPT_TARGET_CPU, &g_r);
    if (!gckpt_ctx_init(&g_c, m, &g_dev, &g_r, s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule ev;
    if (!gckpt_schedule_build(&g_c, &ev)) fail_msg("out of memory");
    gckpt_walk(&g_c, &ev, res);
    gckpt_schedule_free(&ev);
}

/* The CP size from the probe's variant ("c<C>" or "c<C>s<S>"). */
static uint32_t cp_of(const dist_fixture *f)
{
    const char *c = strchr(f->variant, 'c');
    if (!c) fail_msg("variant '%s' names no cp size", f->variant);
    return (uint32_t)strtoul(c + 1, NULL, 10);
}

typedef void (*fx_fn)(const char *path, const char *name, const dist_fixture *f, uint32_t cp);

/* fn on every fake-group fixture of every folder; fails when a folder has fewer than its minimum. */
static void each_fixture(fx_fn fn)
{
    for (size_t i = 0; i < NDIRS; i++) {
        DIR *d = opendir(DIRS[i].dir);
        assert_non_null(d);
        int n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            size_t k = strlen(e->d_name);
            if (k < 6 || strcmp(e->d_name + k - 5, ".json")) continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", DIRS[i].dir, e->d_name);
            static dist_fixture f;
            dist_fixture_read(path, &f);
            if (!f.fake) continue;
            fn(path, e->d_name, &f, cp_of(&f));
            n++;
        }
        closedir(d);
        if (n < DIRS[i].min) fail_msg("%s: %d fake-group fixtures, at least %d expected", DIRS[i].dir, n, DIRS[i].min);
    }
}

static double g_worst;

/* Within GCKPT_CP_PEAK_BOUND_PCT; a peak planned inside a ring call within GCKPT_CP_RING_PEAK_BOUND_PCT
 * below the measured one, never above (what the replay leaves out only adds, R-CP-11). */
static void check_bound(const char *name, double measured, double planned, bool ring)
{
    const double err = (planned - measured) / measured;
    const double tol = atof(ring ? GCKPT_CP_RING_PEAK_BOUND_PCT : GCKPT_CP_PEAK_BOUND_PCT) / 100;
    if (fabs(err) > g_worst) g_worst = fabs(err);
    if (fabs(err) > tol || (ring && err > 1e-3))
        fail_msg("%s: planned %.0f, measured %.0f (%+.3f %%%s)", name, planned, measured, 100 * err,
                 ring ? ", the peak in a ring call" : "");
}

/* FSDP2 over every rank (dp_shard x cp: accelerate's dp_shard_cp) at S / C tokens, then gckpt_cp_peak
 * (CP's buffers, or a ring call when higher): within GCKPT_CP_PEAK_BOUND_PCT of step 2's measured peak. */
static void check_peak(const char *path, const char *name, const dist_fixture *f, uint32_t cp)
{
    (void)path;
    gckpt_setting s = f->s;
    const uint64_t seq = s.seq;
    s.seq = seq / cp;
    gckpt_result res;
    planned_step(&f->m, &s, &res);
    /* FSDP2's MixedPrecisionPolicy under bf16=True: the hidden states and attention in bf16 */
    const unsigned e = s.precision == GCKPT_FP32 ? 4 : 2;
    const uint32_t cp_rank = f->rank % cp; /* accelerate's mesh: cp inside dp_shard */
    const uint64_t fsdp = res.peak_bytes, x = gckpt_cp_step_extra(&f->m, &s, seq, cp, cp_rank, e, e);
    if (!gckpt_cp_peak(&g_c, seq, cp, cp_rank, GCKPT_CP_ALLGATHER, e, e, &res)) fail_msg("out of memory");
    const double planned = (double)res.peak_bytes, err = (planned - f->peak) / f->peak;
    print_message("%-42.42s cp rank %u: measured %9.0f, FSDP2 at S/C %9llu -> CP %9.0f (layer %d%s) %+7.3f%%  %s\n",
                  name, cp_rank, f->peak, (unsigned long long)fsdp, planned, res.peak_layer,
                  res.peak_bytes != fsdp + x ? ", a ring call" : "", 100 * err, f->where);
    check_bound(name, f->peak, planned, res.peak_bytes != fsdp + x);
    /* activation offload: the checkpointed layers' inputs on the host, exact (R-CP-24) */
    if (res.host_pinned_bytes != f->offload_bytes)
        fail_msg("%s: offloaded %llu planned, %llu measured", name, (unsigned long long)res.host_pinned_bytes,
                 (unsigned long long)f->offload_bytes);
}

static void test_peaks(void **state)
{
    (void)state;
    g_worst = 0;
    each_fixture(check_peak);
    print_message("CP x FSDP2: max |error| %.3f %%\n", 100 * g_worst);
}

/* Parameters, gradients and AdamW's states at step 2's start and end: FSDP2's over all C x S ranks. */
static void check_persistent(const char *path, const char *name, const dist_fixture *f, uint32_t cp)
{
    (void)path;
    (void)cp;
    static gckpt_params ps;
    gckpt_err err;
    bool overflow = false;
    gckpt_setting_recipe(&f->m, &f->s, GCKPT_TARGET_CPU, &g_r);
    if (!gckpt_params_build(&g_r, f->m.layers, f->s.optimizer, 1, &ps, &overflow, &err)) fail_msg("%s", err.msg);
    gckpt_params_shard(&ps, &f->m, &f->s.layout);
    gckpt_rank_bytes b;
    gckpt_rank_persistent(&ps, &f->m, &f->s, f->rank, 1, &b);
    if (b.total != f->start || b.total != f->end)
        fail_msg("%s: planned %llu, measured start %llu end %llu", name, (unsigned long long)b.total,
                 (unsigned long long)f->start, (unsigned long long)f->end);
}

static void test_persistent(void **state)
{
    (void)state;
    each_fixture(check_persistent);
}

/* A file under /tmp holding text; its path in path (a mkstemp template). */
static void temp_file(char *path, const char *text)
{
    int fd = mkstemp(path);
    if (fd < 0) fail_msg("mkstemp");
    FILE *o = fdopen(fd, "w");
    fputs(text, o);
    fclose(o);
}

/* gckpt_plan_run with --cp C (and the fixture's dp_shard and dp_replicate) on the fixture's model and setting. */
static void check_plan_run(const char *path, const char *name, const dist_fixture *f, uint32_t cp)
{
    if (f->rank) return; /* the plan is rank 0's */
    gckpt_err err = {{0}};
    cJSON *root = gckpt_json_read(path, 16u << 20, &err);
    if (!root) fail_msg("%s", err.msg);
    char *cfg_text = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "config"));
    cJSON_Delete(root);
    char cfg[] = "/tmp/gckpt-cp-config-XXXXXX", dev[] = "/tmp/gckpt-cp-device-XXXXXX";
    temp_file(cfg, cfg_text);
    free(cfg_text);
    /* the exact CPU profile with a bus bandwidth (the ring's exchanges are timed at it) */
    cJSON *dj = gckpt_json_read(GCKPT_TEST_DATA "/devices/cpu-exact.json", 1u << 20, &err);
    if (!dj) fail_msg("%s", err.msg);
    cJSON_AddNumberToObject(dj, "intra_node_bus_bytes_per_s", 1e11);
    char *dtext = cJSON_PrintUnformatted(dj);
    cJSON_Delete(dj);
    temp_file(dev, dtext);
    free(dtext);
    uint32_t every = f->s.every_n;
    gckpt_plan_request q = {.seq = f->s.seq, .micro_batches = {f->s.micro_batch}, .n_micro = 1,
                            .grad_accum = f->s.grad_accum, .precision = f->s.precision, .optimizer = GCKPT_ADAMW,
                            .attention = GCKPT_SDPA, .every_n = &every, .n_every = 1,
                            .offload = f->s.offload ? GCKPT_OFFLOAD_ON : GCKPT_OFFLOAD_OFF, .peft = f->s.peft,
                            .margin = 0.05, .target_given = true, .target = GCKPT_TARGET_CPU,
                            .layout = {.gpus = f->s.layout.gpus, .nodes = 1}};
    gckpt_plan_request_cp(&q, cp, f->s.layout.dp_replicate); /* HSDP's replicas too (R-CP-17) */
    snprintf(q.model_ref, sizeof q.model_ref, "%s", cfg);
    snprintf(q.gpu_ref, sizeof q.gpu_ref, "%s", dev);
    static gckpt_plan p;
    bool ok = gckpt_plan_run(&q, &p, &err);
    /* the ring's SDPA work (R-CP-12): the rank's FLOPs are one GPU's at S / C plus units - 1 times its
     * attention's, which one GPU's at 2 S / C less twice those at S / C gives (every other counted op
     * is per token, the attention per token and key: 2 T x 2 L - 2 (T x L) = 2 T L) */
    double hw[2] = {0};
    for (int k = 0; ok && k < 2; k++) {
        gckpt_plan_request one = q;
        one.cp = 0;
        /* one GPU: FSDP2 over the fixture's ranks without CP refuses fp32 LoRA (peft_ok: measured under CP only) */
        one.layout = (gckpt_layout){.gpus = 1, .nodes = 1};
        one.seq = q.seq / cp * (uint64_t)(k + 1);
        static gckpt_plan pk;
        if (!gckpt_plan_run(&one, &pk, &err)) fail_msg("%s: one GPU at %llu: %s", name, (unsigned long long)one.seq, err.msg);
        hw[k] = pk.entries[0].r.hw_flops;
        gckpt_plan_free(&pk);
    }
    remove(cfg);
    remove(dev);
    if (!ok) fail_msg("%s: %s", name, err.msg);
    uint32_t calls;
    const double units = gckpt_cp_attention_units(q.seq, cp, &calls), attn = (hw[1] - 2.0 * hw[0]) / 2.0;
    const double want_hw = hw[0] + (units - 1.0) * attn;
    assert_true(attn > 0);
    if (fabs(p.entries[0].r.hw_flops - want_hw) > 1e-9 * want_hw)
        fail_msg("%s: hw FLOPs %.6g planned, %.6g = one GPU's at S / C %.6g + (%g - 1) x its attention's %.6g", name,
                 p.entries[0].r.hw_flops, want_hw, hw[0], units, attn);
    assert_int_equal(p.n, 1);
    const gckpt_result *r = &p.entries[0].r;
    int64_t sum = 0;
    for (int k = 0; k < GCKPT_NCOMP; k++) {
        assert_true(r->breakdown[k] >= 0);
        sum += r->breakdown[k];
    }
    assert_int_equal((uint64_t)sum, r->peak_bytes);
    const double e = ((double)r->peak_bytes - f->peak) / f->peak;
    print_message("gckpt_plan_run --cp %u %-40.40s %10.0f %10llu %+7.3f%%\n", cp, name, f->peak,
                  (unsigned long long)r->peak_bytes, 100 * e);
    /* whether its peak is a ring call: the same rank through check_peak's path */
    gckpt_setting ls = f->s;
    ls.seq = f->s.seq / cp;
    gckpt_result walked;
    planned_step(&f->m, &ls, &walked);
    const unsigned el = ls.precision == GCKPT_FP32 ? 4 : 2;
    const uint64_t fsdp = walked.peak_bytes, x = gckpt_cp_step_extra(&f->m, &ls, f->s.seq, cp, 0, el, el);
    if (!gckpt_cp_peak(&g_c, f->s.seq, cp, 0, GCKPT_CP_ALLGATHER, el, el, &walked)) fail_msg("out of memory");
    check_bound(name, f->peak, (double)r->peak_bytes, walked.peak_bytes != fsdp + x);
    /* tok/s per GPU: each rank computes its S / C tokens of every sequence */
    const double tokens = (double)f->s.seq / cp * (double)f->s.micro_batch * (double)f->s.grad_accum;
    if (fabs(r->tokens_per_s * r->step_s - tokens) > 1e-9 * tokens)
        fail_msg("%s: %.6g tok/s x %.6g s is not the rank's %.0f tokens", name, r->tokens_per_s, r->step_s, tokens);
    gckpt_plan_free(&p);
}

static void test_plan_run(void **state)
{
    (void)state;
    each_fixture(check_plan_run);
}

/* CP x TP (FINDINGS R-CP-19): tools/hf_probe/cp_tp_check.py's record (tests/data/hf-cp-tp) of where each way of
 * asking transformers and the Trainer for tp 2 with cp 2 on 4 ranks stops; gckpt_pc_cp refuses tp with cp, its
 * line naming the library lines that raised on every case through a DistributedConfig of the data-parallel sizes
 * (the pp_size case, a pipeline split, stops elsewhere at load and is recorded only). */
static void test_cp_tp_refusal(void **state)
{
    (void)state;
    gckpt_pc_sizes pc = {.tp = 2, .cp = 2};
    uint32_t cp = 9, rep = 9;
    gckpt_err err = {{0}};
    assert_false(gckpt_pc_cp(&pc, 4, &cp, &rep, &err));
    assert_null(strchr(err.msg, '\n'));
    FILE *f = fopen(GCKPT_TEST_DATA "/hf-cp-tp/cp-tp-check.jsonl", "r");
    assert_non_null(f);
    static char line[1 << 14];
    int n = 0, named = 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(o, "raised_at"),
                    *dc = cJSON_GetObjectItemCaseSensitive(o, "distributed_config");
        if (!cJSON_IsString(at)) fail_msg("case %d ran: %s", n, line); /* none reaches a step */
        if (!cJSON_GetObjectItemCaseSensitive(dc, "pp_size")) {
            char src[128]; /* "transformers/distributed/utils.py:315 (fn)" -> "distributed/utils.py:315" */
            const char *s = strchr(at->valuestring, '/');
            snprintf(src, sizeof src, "%s", s ? s + 1 : at->valuestring);
            char *sp = strchr(src, ' ');
            if (sp) *sp = 0;
            if (!strstr(err.msg, src)) fail_msg("measured at %s, not named in: %s", src, err.msg);
            named++;
        }
        cJSON_Delete(o);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 4);
    assert_int_equal(named, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_persistent),
        cmocka_unit_test(test_peaks),
        cmocka_unit_test(test_plan_run),
        cmocka_unit_test(test_cp_tp_refusal),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
