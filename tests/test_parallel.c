/* The per-rank persistent memory (core/parallel.c) against ground truth:
 *   - the per-rank fixtures of tests/data/hf-dist (tools/hf_probe/probe_dist.py: the HF
 *     Trainer's own DDP / FSDP2 / DeepSpeed ZeRO preparation, memory measured on PyTorch's
 *     fake process group): the allocator's live bytes at the start and the end of step 2
 *     equal the planned persistent bytes exactly. The gloo twins are not compared (their
 *     allocator misses frees made on gloo's threads, FINDINGS R-PROBE-5);
 *   - closed forms for every shipped model from its published parameter count P and N ranks:
 *     DDP amp AdamW 16 P, ZeRO-1/2 2 P + 12 P / N, ZeRO-3 16 P / N, FSDP2 12 P / N, each up
 *     to the documented padding and scalars. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/recipe.h"
#include "gckpt/util/jsonget.h"
#include "dist_fixture.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

static gckpt_recipe g_r;
static gckpt_params g_ps;

/* The planner's per-rank persistent bytes for model m under setting s. */
static void plan_rank(const gckpt_model *m, const gckpt_setting *s, uint32_t rank, gckpt_rank_bytes *out)
{
    gckpt_err err;
    bool overflow = false;
    gckpt_recipe_build(m, s->precision, GCKPT_SDPA, &g_r);
    if (!gckpt_params_build(&g_r, m->layers, s->optimizer, 1, &g_ps, &overflow, &err)) fail_msg("%s", err.msg);
    assert_false(overflow);
    gckpt_params_shard(&g_ps, m, &s->layout);
    gckpt_rank_persistent(&g_ps, m, s, rank, 1, out);
}

typedef struct {
    int compared, exact, gloo;
} tally;

/* One fixture: false when it differs (printed). */
static bool check_fixture(const char *path, tally *t)
{
    dist_fixture f;
    dist_fixture_read(path, &f);
    if (!f.fake) {
        t->gloo++;
        return true;
    }
    gckpt_rank_bytes b;
    plan_rank(&f.m, &f.s, f.rank, &b);
    t->compared++;
    if (b.total == f.start && b.total == f.end) {
        t->exact++;
        return true;
    }
    print_message("%s: planned %llu, measured start %llu end %llu\n", path, (unsigned long long)b.total,
                  (unsigned long long)f.start, (unsigned long long)f.end);
    return false;
}

static void test_fixtures_exact(void **state)
{
    (void)state;
    const char *dir = GCKPT_TEST_DATA "/hf-dist";
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    tally t = {0};
    int bad = 0;
    while ((e = readdir(d))) {
        size_t k = strlen(e->d_name);
        if (k < 6 || strcmp(e->d_name + k - 5, ".json")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        bad += !check_fixture(path, &t);
    }
    closedir(d);
    print_message("per-rank persistent bytes (step 2's start and end): %d/%d fixtures exact (%d gloo twins)\n", t.exact,
                  t.compared, t.gloo);
    assert_true(t.compared >= 150);
    assert_int_equal(bad, 0);
}

/* The rank's planned step 2 (CPU target, exact allocator as test_hf_fixtures): the walk. */
/* The recipe of fixture f into g_r, built as gckpt-plan builds it (gckpt_setting_recipe) for
 * the CPU: at the fixture's sequence, so that a sliding layer under SDPA past the window is its
 * own block type (the masked path, FINDINGS R-ATTN-8); built without the sequence, gemma3_text's
 * sliding layers were planned as full ones, 12,288 B less each on the tiny model. */
static void fixture_recipe(const dist_fixture *f) { gckpt_setting_recipe(&f->m, &f->s, GCKPT_TARGET_CPU, &g_r); }

static void planned_step(const dist_fixture *f, const gckpt_device *dev, gckpt_result *res)
{
    static gckpt_ctx c;
    gckpt_err err;
    fixture_recipe(f);
    if (!gckpt_ctx_init(&c, &f->m, dev, &g_r, &f->s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule ev;
    if (!gckpt_schedule_build(&c, &ev)) fail_msg("out of memory");
    gckpt_walk(&c, &ev, res);
    gckpt_schedule_free(&ev);
}

/* The fixtures' folder, and the CPU device whose allocator is exact (as test_hf_fixtures). */
static DIR *open_fixtures(gckpt_device *dev)
{
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", dev, &err)) fail_msg("%s", err.msg);
    DIR *d = opendir(GCKPT_TEST_DATA "/hf-dist");
    assert_non_null(d);
    return d;
}

/* The next fake-group fixture of folder d (its file name in *name); false after the last. */
static bool next_fake_fixture(DIR *d, dist_fixture *f, const char **name)
{
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t k = strlen(e->d_name);
        if (k < 6 || strcmp(e->d_name + k - 5, ".json")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", GCKPT_TEST_DATA "/hf-dist", e->d_name);
        dist_fixture_read(path, f);
        if (!f->fake) continue;
        *name = e->d_name;
        return true;
    }
    return false;
}

/* The step's live peak of every measured rank against the fixtures. Checkpointed DDP and
 * ZeRO-1, where FINDINGS R-DIST-16 and R-DIST-18 derive the peak exactly (one GPU's + the buckets / the rank's
 * persistent bytes + the ipg bucket), within the single-GPU planner's tolerance
 * (test_hf_fixtures: 0.1 % amp and fp32, 0.5 % bf16), and DDP without checkpointing also
 * within 8 B on every fixture (its peak at _DDPSink's clones, the fp32 logits twice over the
 * state after the forward). FSDP2, ZeRO-2 and ZeRO-3, whose working set is the schedule's
 * events (core/sim_parallel.c), within the bound the parallel_peak_approximate warning states
 * (GCKPT_PARALLEL_PEAK_BOUND_PCT). The table is printed. */
static void test_fixture_peaks(void **state)
{
    (void)state;
    gckpt_device dev;
    DIR *d = open_fixtures(&dev);
    int n = 0, bad = 0, sink_exact = 0;
    double worst[GCKPT_NPAR][2] = {{0}}; /* per mode: max |error|, [1] checkpointed */
    int count[GCKPT_NPAR][2] = {{0}};
    print_message("%-52s %10s %10s %8s  %s\n", "fixture (fake group)", "measured", "planned", "error", "measured peak at");
    dist_fixture f;
    const char *name;
    while (next_fake_fixture(d, &f, &name)) { /* every rank measured */
        gckpt_result res;
        planned_step(&f, &dev, &res);
        double planned = (double)res.peak_bytes, err_rel = (planned - f.peak) / f.peak;
        int mode = f.s.layout.mode, ck = f.s.every_n > 0;
        bool derived = mode == GCKPT_PAR_DDP || mode == GCKPT_PAR_ZERO1;
        double tol = derived ? (f.s.precision == GCKPT_FP32 || mode == GCKPT_PAR_DDP ? 0.001 : 0.005)
                             : atof(GCKPT_PARALLEL_PEAK_BOUND_PCT) / 100;
        /* overlap_comm's second ipg bucket (ZeRO-2 `overlap` variant): -0.27 % without it */
        if (!strcmp(f.variant, "overlap")) tol = 0.0005;
        print_message("%-52.52s %10.0f %10.0f %+7.2f%%  %s\n", name, f.peak, planned, 100 * err_rel, f.where);
        if (fabs(err_rel) > worst[mode][ck]) worst[mode][ck] = fabs(err_rel);
        /* _DDPSink's clones at the forward's end (every_n off): -520 B on each before */
        sink_exact += mode == GCKPT_PAR_DDP && !ck && fabs(planned - f.peak) <= 8;
        count[mode][ck]++;
        n++;
        if (fabs(err_rel) > tol) {
            print_message("  ^ beyond %.2f %%\n", 100 * tol);
            bad++;
        }
    }
    closedir(d);
    for (int m = 1; m < GCKPT_NPAR; m++)
        for (int ck = 0; ck < 2; ck++)
            if (count[m][ck])
                print_message("%-6s %-16s %3d fixtures, max |error| %.2f %%\n", gckpt_parallel_names[m],
                              ck ? "checkpointed" : "no checkpointing", count[m][ck], 100 * worst[m][ck]);
    assert_true(n >= 70);
    print_message("ddp without checkpointing: %d fixtures within 8 B (the peak at _DDPSink's clones)\n", sink_exact);
    assert_int_equal(sink_exact, count[GCKPT_PAR_DDP][0]);
    assert_int_equal(bad, 0);
}

/* The schedule's COLLECTIVE events of FSDP2, ZeRO-2 and ZeRO-3 (the volumes a plan times) against
 * the collectives each fixture recorded in step 2 (the probe's dispatch mode on the c10d ops):
 * the forward's and the backward's all-gathers (ZeRO-3 `tight`: the recompute's and the
 * backward's re-gathers) and the backward's reductions, byte for byte. */
static void test_collective_volumes(void **state)
{
    (void)state;
    gckpt_device dev;
    DIR *d = open_fixtures(&dev);
    int n = 0;
    dist_fixture f;
    const char *name;
    while (next_fake_fixture(d, &f, &name)) {
        int mode = f.s.layout.mode;
        if (mode != GCKPT_PAR_FSDP && mode != GCKPT_PAR_ZERO2 && mode != GCKPT_PAR_ZERO3) continue;
        gckpt_result res;
        planned_step(&f, &dev, &res);
        if (res.coll_gather_fwd != f.gather_fwd || res.coll_gather_bwd != f.gather_bwd || res.coll_reduce != f.reduce)
            fail_msg("%s: planned all-gather forward %.0f backward %.0f, reduce %.0f; measured %.0f %.0f %.0f", name,
                     res.coll_gather_fwd, res.coll_gather_bwd, res.coll_reduce, f.gather_fwd, f.gather_bwd, f.reduce);
        n++;
    }
    closedir(d);
    print_message("collective bytes of step 2: %d fixtures equal\n", n);
    assert_true(n >= 90);
}

/* DDP's and ZeRO-1's reduction after the last micro-step, the schedule's COLLECTIVE events opening
 * the optimizer segment (a closed form outside the schedule before): the bytes they all-reduce
 * equal the gradients' all-reduces each DDP and ZeRO-1 fixture recorded in step 2 (the planner
 * times them: res.coll_all_reduce), and DDP's are one per bucket its reducer fired (with
 * checkpointing: gckpt_ddp_buckets, FINDINGS R-DIST-11). ZeRO-1's are one per ipg bucket flush;
 * DeepSpeed all-reduces a flush in pieces (allreduce_and_scatter), its calls are printed. */
static void test_sync_collectives(void **state)
{
    (void)state;
    gckpt_device dev;
    DIR *d = open_fixtures(&dev);
    int n = 0;
    dist_fixture f;
    const char *name;
    static gckpt_ctx c;
    while (next_fake_fixture(d, &f, &name)) {
        int mode = f.s.layout.mode;
        if (mode != GCKPT_PAR_DDP && mode != GCKPT_PAR_ZERO1) continue;
        gckpt_err err;
        fixture_recipe(&f);
        if (!gckpt_ctx_init(&c, &f.m, &dev, &g_r, &f.s, &err)) fail_msg("%s", err.msg);
        gckpt_schedule ev;
        if (!gckpt_schedule_build(&c, &ev)) fail_msg("out of memory");
        gckpt_result res;
        gckpt_walk(&c, &ev, &res);
        int events = 0;
        for (size_t i = 0; i < ev.n; i++) events += ev.ev[i].kind == GCKPT_EV_COLLECTIVE;
        gckpt_schedule_free(&ev);
        print_message("%-52.52s all-reduce %10.0f B in %3d events; measured %10.0f B in %3d calls\n", name,
                      res.coll_all_reduce, events, f.grad_all_reduce, f.grad_all_reduce_calls);
        if (res.coll_all_reduce != f.grad_all_reduce || res.coll_reduce != res.coll_all_reduce)
            fail_msg("%s: planned all-reduce %.0f B (reductions %.0f B), measured %.0f B", name, res.coll_all_reduce,
                     res.coll_reduce, f.grad_all_reduce);
        if (mode == GCKPT_PAR_DDP && f.s.every_n > 0 && events != f.grad_all_reduce_calls)
            fail_msg("%s: %d bucket all-reduces planned, %d measured", name, events, f.grad_all_reduce_calls);
        n++;
    }
    closedir(d);
    print_message("gradients' all-reduce of step 2, ddp and zero1: %d fixtures equal\n", n);
    assert_true(n >= 70);
}

/* The all-gathers after the optimizer step, COLLECTIVE events of the optimizer segment (a closed
 * form before): ZeRO-1/2's of each optimizer group's flat weights, ZeRO-3's of each persistent
 * parameter, byte for byte and call for call the all-gathers every ZeRO fixture recorded in step
 * 2's optimizer phase (DDP and FSDP2 gather nothing there). */
static void test_step_gathers(void **state)
{
    (void)state;
    gckpt_device dev;
    DIR *d = open_fixtures(&dev);
    int n = 0;
    dist_fixture f;
    const char *name;
    static gckpt_ctx c;
    while (next_fake_fixture(d, &f, &name)) {
        gckpt_err err;
        fixture_recipe(&f);
        if (!gckpt_ctx_init(&c, &f.m, &dev, &g_r, &f.s, &err)) fail_msg("%s", err.msg);
        gckpt_schedule ev;
        if (!gckpt_schedule_build(&c, &ev)) fail_msg("out of memory");
        gckpt_result res;
        gckpt_walk(&c, &ev, &res);
        int events = 0;
        for (size_t si = 0; si < ev.nseg; si++)
            for (size_t i = ev.seg[si].begin; ev.seg[si].seg.part == GCKPT_PART_OPTIMIZER && i < ev.seg[si].end; i++)
                events += ev.ev[i].kind == GCKPT_EV_COLLECTIVE && ev.ev[i].arg.coll.kind == GCKPT_COLL_ALL_GATHER;
        gckpt_schedule_free(&ev);
        if (res.coll_gather_opt != f.gather_opt || events != f.gather_opt_calls)
            fail_msg("%s: planned %.0f B in %d all-gathers after the step, measured %.0f B in %d", name, res.coll_gather_opt,
                     events, f.gather_opt, f.gather_opt_calls);
        n++;
    }
    closedir(d);
    print_message("all-gathers after the optimizer step: %d fixtures equal\n", n);
    assert_true(n >= 200);
}

/* ---- collectives per optimizer step at every grad_accum (FINDINGS R-DIST-26) ----
 * A step's collectives by kind (all-gathers also by phase: the micro-steps' forward and backward,
 * after the optimizer step): calls and bytes. */
enum { CK_AG_FWD, CK_AG_BWD, CK_AG_OPT, CK_REDUCE, NCK };
static const char *const ck_names[NCK] = {"all-gather forward", "all-gather backward", "all-gather after the step",
                                          "reduction"};
typedef struct {
    double calls[NCK], bytes[NCK];
} step_colls;

/* What fixture `name` (tests/data/hf-dist) measured in step 2: the c10d calls of the gradients'
 * and weights' collectives; left out: DDP's buffer broadcast and find_unused_parameters' int32 map
 * (none with checkpointing), DeepSpeed's scalars (overflow flag, norms), as in dist_rules.py. */
static void measured_colls(const char *name, step_colls *out)
{
    char path[1024];
    gckpt_err err;
    memset(out, 0, sizeof *out);
    snprintf(path, sizeof path, "%s/%s", GCKPT_TEST_DATA "/hf-dist", name);
    char *text = gckpt_read_file(path, 256u << 20, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *root = gckpt_json_parse(path, text, &err);
    free(text);
    if (!root) fail_msg("%s", err.msg);
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(
                              cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "collectives"),
                                                               "per_step"),
                              "2"))
    {
        const char *key = k->string;
        int c = -1;
        if (!strncmp(key, "all_gather/", 11)) {
            const char *ph = strrchr(key, '/');
            c = !strcmp(ph, "/forward") ? CK_AG_FWD : !strcmp(ph, "/backward") ? CK_AG_BWD : CK_AG_OPT;
        } else if (!strcmp(key, "reduce_scatter/bfloat16/backward") || !strcmp(key, "all_reduce/bfloat16/backward") ||
                   !strcmp(key, "all_reduce/float32/backward")) {
            c = CK_REDUCE;
        }
        if (c < 0) continue;
        out->calls[c] += cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(k, "calls"));
        out->bytes[c] += cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(k, "bytes"));
    }
    cJSON_Delete(root);
}

/* The planned step's COLLECTIVE events, each counted as often as its segment runs (repeat). */
static void planned_colls(const dist_fixture *f, const gckpt_device *dev, uint64_t grad_accum, step_colls *out)
{
    static gckpt_ctx c;
    gckpt_err err;
    gckpt_setting s = f->s;
    s.grad_accum = grad_accum;
    memset(out, 0, sizeof *out);
    gckpt_setting_recipe(&f->m, &s, GCKPT_TARGET_CPU, &g_r);
    if (!gckpt_ctx_init(&c, &f->m, dev, &g_r, &s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule sc;
    if (!gckpt_schedule_build(&c, &sc)) fail_msg("out of memory");
    for (size_t si = 0; si < sc.nseg; si++) {
        const gckpt_sched_seg *g = &sc.seg[si];
        for (size_t i = g->begin; i < g->end; i++) {
            const gckpt_event *e = &sc.ev[i];
            if (e->kind != GCKPT_EV_COLLECTIVE) continue;
            int ck = CK_REDUCE;
            if (e->arg.coll.kind == GCKPT_COLL_ALL_GATHER) {
                gckpt_phase ph = gckpt_seg_phase(&g->seg);
                ck = ph == GCKPT_PH_OPTIMIZER ? CK_AG_OPT : ph == GCKPT_PH_BACKWARD ? CK_AG_BWD : CK_AG_FWD;
            }
            out->calls[ck] += (double)g->repeat;
            out->bytes[ck] += (double)g->repeat * (double)e->bytes;
        }
    }
    gckpt_schedule_free(&sc);
}

/* Every mode's collectives per optimizer step at grad_accum 1 .. 4, calls and bytes, on the tiny
 * llama (world 2, every_n 1, bf16=True, rank 0). Against the fixtures where the probe measured that
 * grad_accum (2, 3, 4), and at every grad_accum against the closed form of the libraries' rule
 * (FINDINGS R-DIST-12, R-DIST-26), scaled from what the grad_accum 3 fixture measured: an
 * all-gather of the forward or the backward runs in every micro-step (x grad_accum / 3), one
 * after the optimizer step once; the gradients' reduction once per step under DDP and FSDP2 (the
 * Trainer's no_sync on every micro-step but the last) and ZeRO-1 (DeepSpeed reduces at the
 * boundary only), in every micro-step under ZeRO-2 and ZeRO-3 (their reduce hooks run in each
 * backward). Calls: DDP's buckets, FSDP2's units, ZeRO-1's flushes and the all-gathers after the
 * step are one c10d call per event, equal to the measured calls; ZeRO-2/3's events are one per
 * parameter where DeepSpeed's calls are per bucket or fetch (39 events, 35 reduce calls on this
 * model), so there the events of one micro-step (grad_accum 1) are held to the rule's multiple
 * and the bytes to the measured. Before the synchronising
 * micro-step was walked apart, FSDP2's reduce-scatters were counted grad_accum - 1 times (2 and 3
 * times here at grad_accum 3 and 4). */
static void test_collectives_grad_accum(void **state)
{
    (void)state;
    static const struct {
        const char *fixture; /* the grad_accum 2 fixture; its -ga3 / -ga4 twins */
        bool reduce_every_micro;
        bool per_param; /* the micro-steps' events are per parameter, not per c10d call (ZeRO-2/3) */
    } modes[] = {{"ddp-llama-amp-bf16-n1-plain-w2", false, false},
                 {"fsdp2-llama-bf16-n1-plain-w2", false, false},
                 {"zero1-llama-bf16-n1-plain-w2", false, false},
                 {"zero2-llama-bf16-n1-plain-w2", true, true},
                 {"zero3-llama-bf16-n1-plain-w2", true, true}};
    gckpt_device dev;
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", &dev, &err)) fail_msg("%s", err.msg);
    int bad = 0;
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        char name[128], path[1024];
        snprintf(name, sizeof name, "%s-ga3-r0.json", modes[m].fixture);
        snprintf(path, sizeof path, "%s/%s", GCKPT_TEST_DATA "/hf-dist", name);
        dist_fixture f;
        dist_fixture_read(path, &f);
        assert_int_equal(f.s.grad_accum, 3);
        step_colls ga3, one;
        measured_colls(name, &ga3);
        planned_colls(&f, &dev, 1, &one);
        for (uint64_t ga = 1; ga <= 4; ga++) {
            step_colls plan, closed, meas;
            planned_colls(&f, &dev, ga, &plan);
            for (int k = 0; k < NCK; k++) {
                bool every = k == CK_AG_FWD || k == CK_AG_BWD || (k == CK_REDUCE && modes[m].reduce_every_micro);
                double x = every ? (double)ga / 3 : 1;
                bool own = modes[m].per_param && k != CK_AG_OPT; /* events per parameter: calls by the rule */
                closed.calls[k] = own ? one.calls[k] * (every ? (double)ga : 1) : ga3.calls[k] * x;
                closed.bytes[k] = ga3.bytes[k] * x;
            }
            bool have = ga >= 2;
            if (ga == 2) snprintf(name, sizeof name, "%s-r0.json", modes[m].fixture);
            else if (have) snprintf(name, sizeof name, "%s-ga%llu-r0.json", modes[m].fixture, (unsigned long long)ga);
            if (have) measured_colls(name, &meas);
            for (int k = 0; k < NCK; k++) {
                bool own = modes[m].per_param && k != CK_AG_OPT;
                bool ok = plan.calls[k] == closed.calls[k] && plan.bytes[k] == closed.bytes[k] &&
                          (!have || ((own || plan.calls[k] == meas.calls[k]) && plan.bytes[k] == meas.bytes[k]));
                print_message("%-30s ga %llu %-26s planned %4.0f calls %9.0f B, closed form %4.0f %9.0f%s\n",
                              modes[m].fixture, (unsigned long long)ga, ck_names[k], plan.calls[k], plan.bytes[k],
                              closed.calls[k], closed.bytes[k], ok ? "" : "  <- differs");
                if (have && !ok)
                    print_message("%-30s       measured (%s) %4.0f calls %9.0f B\n", "", name, meas.calls[k], meas.bytes[k]);
                bad += !ok;
            }
        }
    }
    assert_int_equal(bad, 0);
}

/* Tied heads (tie_word_embeddings) under FSDP2 and ZeRO-3 (refused before: -1.2 .. -2.7 % with
 * the untied schedule): their fixtures are held by the tests above like the others; here every
 * rank of the tied llama is planned to within 8 B of its measured peak (FSDP2's unit [final
 * norm, embedding = head] kept gathered to the backward's end; ZeRO-3's shared weight kept
 * gathered from the embedding's forward to its backward and reduced once), and a shipped
 * tied model (Llama-3.2-1B) is accepted under both. */
static void test_tied(void **state)
{
    (void)state;
    gckpt_device dev;
    DIR *d = open_fixtures(&dev);
    dist_fixture f;
    const char *name;
    int n = 0;
    while (next_fake_fixture(d, &f, &name)) {
        int mode = f.s.layout.mode;
        if (!f.m.tied || (mode != GCKPT_PAR_FSDP && mode != GCKPT_PAR_ZERO3) || !strstr(name, "-llamat-")) continue;
        gckpt_result res;
        planned_step(&f, &dev, &res);
        print_message("%-44s measured %10.0f, planned %10llu\n", name, f.peak, (unsigned long long)res.peak_bytes);
        assert_true(fabs((double)res.peak_bytes - f.peak) <= 8);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 3);
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load("llama-3.2-1b", &m, &err)) fail_msg("%s", err.msg);
    assert_true(m.tied);
    for (int mode = GCKPT_PAR_FSDP; mode <= GCKPT_PAR_ZERO3; mode++) {
        gckpt_setting s = {.precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW, .layout = {8, 1, (uint8_t)mode}};
        if (!gckpt_layout_check(&s, &err)) fail_msg("%s", err.msg);
    }
}

/* A plan's figure (the fast evaluator, rank 0's setting) is the busiest rank's: under ZeRO-2 the
 * last rank's gradient slice holds the head's and is made at the backward's first reduce hook,
 * so that rank peaks higher (FINDINGS R-DIST-19); every zero2 case's plan is within 1 % of the larger
 * of its ranks' measured peaks. */
static void test_zero2_busiest_rank(void **state)
{
    (void)state;
    gckpt_device dev;
    DIR *d = open_fixtures(&dev);
    int n = 0, last_higher = 0;
    gckpt_err err;
    const char *dir = GCKPT_TEST_DATA "/hf-dist";
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t k = strlen(e->d_name);
        if (strncmp(e->d_name, "zero2-", 6) || k < 9 || strcmp(e->d_name + k - 8, "-r0.json")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        dist_fixture f0, fl;
        dist_fixture_read(path, &f0);
        if (!f0.fake) continue;
        snprintf(path + strlen(path) - 7, 16, "r%u.json", f0.s.layout.gpus - 1);
        dist_fixture_read(path, &fl);
        static gckpt_ctx c;
        static gckpt_profile prof;
        fixture_recipe(&f0);
        if (!gckpt_ctx_init(&c, &f0.m, &dev, &g_r, &f0.s, &err)) fail_msg("%s", err.msg);
        assert_true(gckpt_profile_build(&c, &prof));
        gckpt_result res;
        gckpt_fast_eval(&c, &prof, f0.s.every_n, f0.s.offload, f0.s.grad_accum, &res);
        double busiest = f0.peak > fl.peak ? f0.peak : fl.peak, rel = ((double)res.peak_bytes - busiest) / busiest;
        print_message("%-44s rank 0 %10.0f, rank %u %10.0f, planned %10llu (%+.2f %%)\n", e->d_name, f0.peak, fl.rank,
                      fl.peak, (unsigned long long)res.peak_bytes, 100 * rel);
        last_higher += fl.peak > f0.peak;
        assert_true(fabs(rel) <= 0.01);
        n++;
    }
    closedir(d);
    assert_true(n >= 10);
    assert_true(last_higher > 0); /* the case this test is for exists among the fixtures */
}

/* fp32 ZeRO-1/2 per rank (the second held-out check): DeepSpeed's reductions (stage_1_and_2.py; FINDINGS R-DIST-25)
 * make each rank's grads_in_partition at its own moment, ZeRO-1 while every .grad is live, so the
 * ranks' peaks differ. Every measured rank's step within 8 B of its own planned schedule (the
 * probe's 4 B loss scalar), and the plan (rank 0's setting, the fast evaluator) the busiest
 * rank's. Before: ZeRO-1 -9.3 % / -5.3 % (ranks 0 / 1, every_n 1, grad_accum 1) and +0.52 %
 * without checkpointing (the bucket), ZeRO-2 +3.4 % on rank 1 without checkpointing. */
static void test_zero12_fp32_ranks(void **state)
{
    (void)state;
    gckpt_device dev;
    DIR *d = open_fixtures(&dev);
    int n = 0, differ = 0;
    dist_fixture f;
    const char *name;
    while (next_fake_fixture(d, &f, &name)) {
        int mode = f.s.layout.mode;
        if ((mode != GCKPT_PAR_ZERO1 && mode != GCKPT_PAR_ZERO2) || f.s.precision != GCKPT_FP32) continue;
        gckpt_result res;
        planned_step(&f, &dev, &res);
        double err_b = (double)res.peak_bytes - f.peak;
        if (fabs(err_b) > 8) fail_msg("%s: planned %llu, measured %.0f", name, (unsigned long long)res.peak_bytes, f.peak);
        /* the other rank of a 2-rank case: the plan shows the larger */
        if (f.s.layout.gpus == 2 && f.rank == 0) {
            char path[1024];
            dist_fixture g;
            snprintf(path, sizeof path, "%s/%.*sr1.json", GCKPT_TEST_DATA "/hf-dist", (int)strlen(name) - 7, name);
            dist_fixture_read(path, &g);
            static gckpt_ctx c;
            static gckpt_profile prof;
            gckpt_err err;
            fixture_recipe(&f);
            if (!gckpt_ctx_init(&c, &f.m, &dev, &g_r, &f.s, &err)) fail_msg("%s", err.msg);
            assert_true(gckpt_profile_build(&c, &prof));
            gckpt_result plan;
            gckpt_fast_eval(&c, &prof, f.s.every_n, f.s.offload, f.s.grad_accum, &plan);
            double busiest = f.peak > g.peak ? f.peak : g.peak;
            if (fabs((double)plan.peak_bytes - busiest) > 8)
                fail_msg("%s: the plan %llu, the busiest rank measured %.0f", name, (unsigned long long)plan.peak_bytes,
                         busiest);
            differ += f.peak != g.peak;
        }
        n++;
    }
    closedir(d);
    print_message("fp32 zero1/zero2: %d per-rank fixtures within 8 B, %d cases whose ranks peak differently\n", n, differ);
    assert_true(n >= 24);
    assert_true(differ >= 4);
}

/* Closed forms per shipped model, N = 8 ranks, amp-bf16 AdamW with checkpointing. */
static void test_closed_forms(void **state)
{
    (void)state;
    static const char *const models[] = {"gpt2", "gpt2-medium", "gpt2-xl", "llama-3.2-1b", "llama-3.2-3b",
                                         "llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.3", "qwen2.5-0.5b",
                                         "qwen2.5-7b", "qwen3-8b", "gemma-2-2b", "gemma-2-9b", "gemma-3-1b",
                                         "phi-3-mini-4k", "phi-4-mini", "pythia-1.4b", "olmo-2-7b",
                                         "mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b", "gpt-oss-20b"};
    const uint64_t N = 8;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(models[i], &m, &err)) fail_msg("%s", err.msg);
        uint64_t P = gckpt_param_count(&m);
        gckpt_setting s = {0};
        s.seq = s.micro_batch = s.grad_accum = 1;
        s.every_n = 1;
        s.optimizer = GCKPT_ADAMW;
        s.precision = GCKPT_AMP_BF16;
        s.layout = (gckpt_layout){(uint32_t)N, 1, GCKPT_PAR_DDP};
        gckpt_rank_bytes b;
        plan_rank(&m, &s, 0, &b);
        uint64_t T = 0; /* parameter tensors */
        for (int k = 0; k < g_ps.n; k++) T += g_ps.p[k].copies;
        /* DDP: fp32 weights, fp32 buckets, two fp32 AdamW states: 16 P, plus a step per tensor */
        assert_int_equal(b.total - b.buffers, 16 * P + 4 * T);
        double gib[4] = {b.total / 1073741824.0};
        /* ZeRO-2: bf16 flat weights 2 P, fp32 master + states 12 P / N; two groups padded to 2N */
        s.layout.mode = GCKPT_PAR_ZERO2;
        plan_rank(&m, &s, 0, &b);
        uint64_t core = b.weights + b.master + b.states;
        assert_true(core >= 2 * P + 12 * P / N && core <= 2 * P + 12 * P / N + 2 * 16 * 2 * N);
        gib[1] = b.total / 1073741824.0;
        /* ZeRO-3: bf16 partition + bf16 gradient partition + fp32 master + states = 16 P / N,
         * each tensor padded to a multiple of N; plus the whole persistent tensors and the ipg bucket */
        s.layout.mode = GCKPT_PAR_ZERO3;
        plan_rank(&m, &s, 0, &b);
        uint64_t whole = 0;
        for (int k = 0; k < g_ps.n; k++)
            if (g_ps.p[k].numel < 10 * m.hidden) whole += g_ps.p[k].copies * g_ps.p[k].numel;
        core = b.weights + b.grads + b.master + b.states - 2 * whole - 2 * m.hidden * m.hidden;
        assert_true(core >= 16 * P / N && core <= 16 * P / N + 16 * T);
        gib[2] = b.total / 1073741824.0;
        /* FSDP2: fp32 shards 4 P / N, AdamW on the local rows 8 P / N, dim 0 padded to N */
        s.layout.mode = GCKPT_PAR_FSDP;
        plan_rank(&m, &s, 0, &b);
        core = b.weights + b.states;
        uint64_t rowmax = m.vocab > m.intermediate ? m.hidden : m.intermediate; /* elements of a padding row */
        assert_true(core >= 12 * P / N && core <= 12 * P / N + 12 * T * N * rowmax);
        print_message("%-16s P %llu: ddp %.2f GiB, zero2 %.2f GiB, zero3 %.2f GiB, fsdp %.2f GiB per rank of %llu\n",
                      models[i], (unsigned long long)P, gib[0], gib[1], gib[2], b.total / 1073741824.0, (unsigned long long)N);
    }
}

/* The shipped models the offload tests plan on 8 ranks. */
static const char *const offload_models[] = {"gpt2", "gpt2-xl", "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b",
                                             "mistral-7b-v0.3", "qwen2.5-7b", "qwen3-8b"};
#define N_OFFLOAD_MODELS (sizeof offload_models / sizeof *offload_models)
#define OFFLOAD_RANKS 8

static gckpt_device h100(void)
{
    gckpt_device dev;
    gckpt_err err;
    if (!gckpt_device_load("h100-sxm-80gb", &dev, &err)) fail_msg("%s", err.msg);
    return dev;
}

/* check(name, model, device) for each of offload_models. */
static void each_offload_model(void (*check)(const char *, gckpt_model, gckpt_device))
{
    gckpt_device dev = h100();
    for (size_t i = 0; i < N_OFFLOAD_MODELS; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(offload_models[i], &m, &err)) fail_msg("%s", err.msg);
        check(offload_models[i], m, dev);
    }
}

/* Rank 0's contexts of model m under `mode` on OFFLOAD_RANKS ranks, amp-bf16 AdamW, every
 * layer checkpointed, seq 512, grad_accum ga: without (off) and with (on) the offload bits;
 * the setting with them is returned. */
static gckpt_setting offload_pair(const gckpt_model *m, const gckpt_device *dev, gckpt_parallel mode, uint8_t offload,
                                  uint64_t ga, gckpt_ctx *off, gckpt_ctx *on)
{
    gckpt_err err;
    gckpt_setting s = {0};
    s.seq = 512;
    s.micro_batch = 1;
    s.grad_accum = ga;
    s.every_n = 1;
    s.optimizer = GCKPT_ADAMW;
    s.precision = GCKPT_AMP_BF16;
    s.layout = (gckpt_layout){OFFLOAD_RANKS, 1, (uint8_t)mode};
    gckpt_recipe_build(m, gckpt_parallel_compute_precision(&s), GCKPT_SDPA, &g_r);
    if (!gckpt_ctx_init(off, m, dev, &g_r, &s, &err)) fail_msg("%s", err.msg);
    s.layout.offload = offload;
    if (!gckpt_ctx_init(on, m, dev, &g_r, &s, &err)) fail_msg("%s", err.msg);
    return s;
}

/* CPU offload (FINDINGS R-OFFLOAD-8). ZeRO-3 with offload_optimizer and offload_param (read in
 * DeepSpeed's stage3.py), per shipped model on 8 ranks, from the parameter count P and the
 * tensors' partitions Q = sum ceil(numel / N) (P / N <= Q <= P / N + T): the device keeps no
 * fp32 master, no AdamW state, no gradient partition, no optimizer-step temporary and only the
 * persistent parameters' whole copies; the host keeps 12 Q pageable (fp32 master + two states)
 * and, pinned, the bf16 gradient partitions 2 Q, the sub-groups' fp32 gradients 4 Q and every
 * tensor's bf16 partition 2 Q, the persistent ones' too (run with LoRA: R-DISTPEFT-16). The
 * scalars lose AdamW's step tensors (DeepSpeedCPUAdam keeps an int) and the gradient norm's 4 B
 * (R-DISTPEFT-15). */
static void zero3_fsdp_offload(const char *name, gckpt_model m, gckpt_device dev)
{
    const uint64_t N = OFFLOAD_RANKS;
    static gckpt_ctx on, off;
    uint64_t P = gckpt_param_count(&m);
    gckpt_setting s = offload_pair(&m, &dev, GCKPT_PAR_ZERO3, GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM, 1, &off, &on);
    uint64_t T = 0, Q = 0, Qp = 0, kept = 0, R = dev.alloc_round_bytes;
    for (int k = 0; k < on.params.n; k++) {
        const gckpt_param *p = &on.params.p[k];
        uint64_t part = (p->numel + N - 1) / N;
        T += p->copies;
        Q += p->copies * part;
        if (p->numel < 10 * m.hidden) { /* persistent: the whole tensor stays */
            Qp += p->copies * part;
            kept += p->copies * gckpt_round_up(2 * p->numel, R);
        }
    }
    assert_true(Q >= P / N && Q <= P / N + T);
    assert_int_equal(on.opt_states, 0);
    assert_int_equal(on.opt_temp, 0);
    assert_int_equal(on.weights, kept);
    /* the ipg bucket stays; AdamW's step per group (2: decay and none) and the norm leave */
    assert_int_equal(on.parallel, off.parallel - gckpt_round_up(2 * Q, R) - 2 * 4 - 4);
    assert_int_equal(off.opt_states, gckpt_round_up(4 * Q, R) * 3);
    assert_int_equal(on.par.host_pageable, 12 * Q);
    assert_true(Qp > 0);
    assert_int_equal(on.par.host_pinned, 2 * Q + 4 * Q + 2 * Q);
    assert_int_equal(off.par.host_pinned + off.par.host_pageable, 0);
    /* FSDP2's CPUOffloadPolicy: the fp32 shards (4 P / N, dim 0 padded) and their
     * gradients pinned on the host, AdamW's states (8 P / N on the local rows) pageable;
     * nothing of them on the device */
    s.layout.mode = GCKPT_PAR_FSDP;
    s.layout.offload = GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM;
    gckpt_recipe_build(&m, gckpt_parallel_compute_precision(&s), GCKPT_SDPA, &g_r);
    static gckpt_ctx fs;
    gckpt_err err;
    if (!gckpt_ctx_init(&fs, &m, &dev, &g_r, &s, &err)) fail_msg("%s", err.msg);
    uint64_t rowmax = m.vocab > m.intermediate ? m.hidden : m.intermediate; /* elements of a padding row */
    assert_int_equal(fs.weights + fs.opt_states + fs.opt_temp + fs.grads + fs.step_grads, 0);
    assert_true(fs.par.host_pinned >= 8 * P / N && fs.par.host_pinned <= 8 * P / N + 8 * T * N * rowmax);
    assert_true(fs.par.host_pageable >= 8 * P / N - 8 && fs.par.host_pageable <= 8 * P / N + 8 * T * N * rowmax);
    print_message("%-16s P %llu: zero3 offload: device persistent %.2f -> %.2f GiB, host pinned %.2f GiB, "
                  "pageable %.2f GiB per rank of %llu\n", name, (unsigned long long)P,
                  (off.weights + off.opt_states + off.parallel) / 1073741824.0,
                  (on.weights + on.opt_states + on.parallel) / 1073741824.0, on.par.host_pinned / 1073741824.0,
                  on.par.host_pageable / 1073741824.0, (unsigned long long)N);
}

static void test_offload_closed_forms(void **state)
{
    (void)state;
    each_offload_model(zero3_fsdp_offload);
}

/* FSDP2's CPUOffloadPolicy with LoRA / QLoRA (FINDINGS R-DISTPEFT-12, read in torch's _fully_shard
 * and run on the CPU under the Trainer), Llama-3.1-8B / -70B and Qwen2.5-7B at 2 and 8 ranks, r 16
 * all-linear, against closed forms from the model's shapes (every dim divides the ranks: no
 * padding): P the base's parameters, Q the quantized linears' elements (per layer q, k, v, o, gate,
 * up, down), T = r x the sum of each linear's in + out (the adapters). Every parameter FSDP
 * shards, frozen too, goes to pinned host memory in its sharded dtype (fp32; a bf16 Params4bit as
 * Q / 4 bf16 elements), the adapters' fp32 gradients too (4 T / N) and AdamW's states pageable
 * (8 T / N); the device keeps no weight, state or gradient of them, a uint8 Params4bit whole
 * (ignored_params, not FSDP's) and every quantization statistic (the module's quant_state). */
static void test_peft_fsdp_offload(void **state)
{
    (void)state;
    static const char *const names[] = {"llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b"};
    static const uint64_t ranks[] = {2, 8};
    gckpt_device dev = h100();
    static gckpt_ctx on, off;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(names[i], &m, &err)) fail_msg("%s", err.msg);
        uint64_t h = m.hidden, I = m.intermediate, qd = m.heads * m.head_dim, kvd = m.kv_heads * m.head_dim;
        uint64_t P = gckpt_param_count(&m), r = 16;
        uint64_t Q = m.layers * (2 * h * qd + 2 * h * kvd + 3 * h * I);
        uint64_t T = m.layers * r * (2 * (h + qd) + 2 * (h + kvd) + 3 * (h + I));
        for (size_t k = 0; k < sizeof ranks / sizeof *ranks; k++)
            for (int v = 0; v < 3; v++) { /* LoRA, QLoRA with bf16 storage, QLoRA with uint8 storage */
                const uint64_t N = ranks[k];
                gckpt_setting s = {0};
                s.seq = 512;
                s.micro_batch = s.grad_accum = s.every_n = 1;
                s.optimizer = GCKPT_ADAMW;
                s.precision = GCKPT_AMP_BF16;
                s.layout = (gckpt_layout){(uint32_t)N, 1, GCKPT_PAR_FSDP};
                gckpt_peft_default(v ? GCKPT_METHOD_QLORA : GCKPT_METHOD_LORA, &s.peft);
                if (v == 1) s.peft.quant_storage = GCKPT_DT_BF16;
                gckpt_setting_recipe(&m, &s, GCKPT_TARGET_CUDA, &g_r);
                if (!gckpt_ctx_init(&off, &m, &dev, &g_r, &s, &err)) fail_msg("%s", err.msg);
                s.layout.offload = GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM; /* --fsdp-offload on */
                if (!gckpt_ctx_init(&on, &m, &dev, &g_r, &s, &err)) fail_msg("%s %s N=%llu: %s", names[i],
                                                                            v ? "qlora" : "lora", (unsigned long long)N, err.msg);
                uint64_t frozen_host = v == 0 ? 4 * P : 4 * (P - Q) + (v == 1 ? 2 * (Q / 4) : 0);
                assert_int_equal(on.par.host_pinned, (frozen_host + 4 * T) / N + 4 * T / N);
                assert_int_equal(on.par.host_pageable, 8 * T / N);
                assert_int_equal(on.weights + on.opt_states + on.opt_temp + on.grads + on.step_grads, 0);
                assert_true(off.weights > 0 && off.opt_states > 0);
                assert_int_equal(on.quant_weights, v == 2 ? off.quant_weights : 0);
                assert_true(v != 2 || on.quant_weights > 0);
                assert_int_equal(on.quant_stats, off.quant_stats);
                assert_int_equal(off.par.host_pinned + off.par.host_pageable, 0);
            }
    }
}

/* ZeRO-1/2 offload_optimizer (FINDINGS R-OFFLOAD-7, read in DeepSpeed's stage_1_and_2.py), per
 * shipped model on 8 ranks, against closed forms from the parameter table's groups alone
 * (G_g elements, A_g = ceil(G_g / 2N) 2N, a partition A_g / N): the device loses exactly the
 * fp32 master partition and the two AdamW states (3 x 4 A_g / N per group) and, under ZeRO-2,
 * the reduced gradient partition, and gains one model-dtype buffer of the largest parameter;
 * the host holds, pinned, the fp32 master, its bf16 copy and its fp32 gradient (10 A_g / N)
 * and a bf16 buffer of the largest parameter, and pageable the two states (8 A_g / N); with
 * gradient accumulation (ZeRO-2) a pinned bf16 accumulator per parameter of the partition, whole. */
static void zero12_offload(const char *name, gckpt_model m, gckpt_device dev)
{
    const uint64_t N = OFFLOAD_RANKS;
    static gckpt_ctx on, off;
    static gckpt_profile prof;
    for (int z = 0; z < 2; z++) {
        gckpt_parallel mode = z ? GCKPT_PAR_ZERO2 : GCKPT_PAR_ZERO1;
        offload_pair(&m, &dev, mode, GCKPT_OFFLOAD_OPTIMIZER, 2, &off, &on);
        uint64_t G[2] = {0, 0}, largest = 0, R = dev.alloc_round_bytes, states = 0, parts = 0, real = 0, maxpart = 0;
        for (int k = 0; k < on.params.n; k++) {
            const gckpt_param *p = &on.params.p[k];
            /* transformers' get_decay_parameter_names: norms and biases without decay */
            G[p->role == GCKPT_ROLE_NORM_WEIGHT || p->role == GCKPT_ROLE_BIAS] += p->copies * p->numel;
            if (p->numel > largest) largest = p->numel;
        }
        for (int g = 0; g < 2; g++) {
            if (!G[g]) continue;
            uint64_t part = (G[g] + 2 * N - 1) / (2 * N) * 2;
            states += 3 * gckpt_round_up(4 * part, R);
            parts += part;
            real += G[g] < part ? G[g] : part; /* rank 0's elements that are not padding */
            if (part > maxpart) maxpart = part;
        }
        assert_int_equal(off.opt_states, states);
        assert_int_equal(on.opt_states, 0);
        assert_int_equal(on.weights, off.weights);
        /* ZeRO-1's ipg bucket is an event of the first backward (core/sim.c), with offload_optimizer
         * too (R-DISTPEFT-19); less AdamW's step per group and the gradient norm (4 B each, R-DISTPEFT-15) */
        assert_int_equal(on.parallel, off.parallel + gckpt_round_up(2 * largest, R) - 4 * (G[0] != 0) -
                                          4 * (G[1] != 0) - 4);
        assert_int_equal(on.par.host_pinned, (4 + 2 + 4) * parts + 2 * largest);
        assert_int_equal(on.par.host_pageable, 8 * parts);
        assert_int_equal(off.par.host_pinned + off.par.host_pageable, 0);
        if (mode == GCKPT_PAR_ZERO2) { /* no reduced partition, no step temporaries on the device */
            assert_true(off.grads > 0 && off.opt_temp > 0);
            assert_int_equal(on.grads + on.step_grads + on.opt_temp, 0);
        } else { /* the full .grads as on one GPU; the largest slice's fp64 norm copy */
            assert_int_equal(on.grads, off.grads);
            assert_int_equal(on.step_grads, on.grads);
            assert_true(on.opt_temp > 0 && on.opt_temp <= gckpt_round_up(8 * maxpart, R));
        }
        /* the accumulators: ZeRO-2's, every parameter overlapping the partition, whole; ZeRO-1 makes
         * none (R-DISTPEFT-19) */
        uint64_t K = on.par.z12_offload_numel;
        if (mode == GCKPT_PAR_ZERO1) assert_int_equal(K, 0);
        else assert_true(K >= real && K <= parts + 4 * largest);
        if (m.layers > 40) continue; /* the walks below: the small models are enough */
        gckpt_result r_on, r_off, r_one;
        assert_true(gckpt_profile_build(&on, &prof));
        gckpt_fast_eval(&on, &prof, 1, false, 2, &r_on);
        gckpt_fast_eval(&on, &prof, 1, false, 1, &r_one);
        /* (zero2's result is the busiest rank's, whose partition holds other parameters) */
        uint64_t acc = r_on.host_pinned_bytes - on.par.host_pinned;
        if (mode == GCKPT_PAR_ZERO1) assert_int_equal(acc, 0);
        else assert_true(acc % 2 == 0 && acc >= 2 * (parts - 2 * N) && acc <= 2 * (parts + 4 * largest));
        assert_int_equal(r_one.host_pinned_bytes, on.par.host_pinned);
        assert_int_equal(r_on.host_pageable_bytes, 8 * parts);
        assert_true(gckpt_profile_build(&off, &prof));
        gckpt_fast_eval(&off, &prof, 1, false, 2, &r_off);
        assert_true(r_on.peak_bytes < r_off.peak_bytes);
        assert_true(r_on.copy_s > r_off.copy_s);
        print_message("%-16s %s offload_optimizer, rank of 8: device peak %.3f -> %.3f GiB, host pinned %.3f GiB, "
                      "pageable %.3f GiB (grad_accum 2)\n", name, gckpt_parallel_names[mode],
                      r_off.peak_bytes / 1073741824.0, r_on.peak_bytes / 1073741824.0,
                      r_on.host_pinned_bytes / 1073741824.0, r_on.host_pageable_bytes / 1073741824.0);
    }
}

static void test_zero12_offload(void **state)
{
    (void)state;
    each_offload_model(zero12_offload);
}

/* gckpt_zero12_slice (the flat order as a sum) against the partition's closed form: over every
 * parameter instance, rank r's slices add up to its elements that are not padding,
 * clamp(G_g - r A_g / N, 0, A_g / N) per group, and over the ranks to every element. */
static void test_zero12_slices(void **state)
{
    (void)state;
    static const char *const models[] = {"gpt2", "llama-3.2-1b", "qwen3-8b", "gemma-2-2b"};
    gckpt_err err;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        gckpt_model m;
        if (!gckpt_model_load(models[i], &m, &err)) fail_msg("%s", err.msg);
        for (uint32_t n = 2; n <= 8; n *= 2) {
            gckpt_setting s = {.precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW};
            s.layout = (gckpt_layout){n, 1, GCKPT_PAR_ZERO2};
            gckpt_rank_bytes rb;
            plan_rank(&m, &s, 0, &rb);
            uint64_t G[2] = {0, 0}, all = 0;
            for (int k = 0; k < g_ps.n; k++) G[g_ps.p[k].shard.group] += g_ps.p[k].copies * g_ps.p[k].numel;
            for (uint32_t r = 0; r < n; r++) {
                uint64_t got = 0, want = 0;
                for (int k = 0; k < g_ps.n; k++)
                    for (uint64_t c = 0; c < g_ps.p[k].copies; c++) got += gckpt_zero12_slice(&g_ps, m.layers, n, r, k, c);
                for (int g = 0; g < 2; g++) {
                    uint64_t part = (G[g] + 2 * n - 1) / (2 * n) * 2, lo = r * part;
                    want += G[g] > lo ? (G[g] - lo < part ? G[g] - lo : part) : 0;
                }
                assert_int_equal(got, want);
                all += got;
            }
            assert_int_equal(all, G[0] + G[1]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_exact),
        cmocka_unit_test(test_closed_forms),
        cmocka_unit_test(test_offload_closed_forms),
        cmocka_unit_test(test_zero12_offload),
        cmocka_unit_test(test_zero12_slices),
        cmocka_unit_test(test_zero12_fp32_ranks),
        cmocka_unit_test(test_fixture_peaks),
        cmocka_unit_test(test_zero2_busiest_rank),
        cmocka_unit_test(test_collective_volumes),
        cmocka_unit_test(test_sync_collectives),
        cmocka_unit_test(test_step_gathers),
        cmocka_unit_test(test_collectives_grad_accum),
        cmocka_unit_test(test_tied),
        cmocka_unit_test(test_peft_fsdp_offload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
