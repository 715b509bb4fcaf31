/* LoRA and QLoRA per rank (core/parallel.c, core/sim_parallel.c) against the fixtures of
 * tests/data/hf-dist-peft (tools/hf_probe/probe_dist_peft.py: the HF Trainer's own DDP / FSDP2 /
 * DeepSpeed ZeRO-1/2/3 preparation of a PeftModel, memory measured per rank on PyTorch's fake
 * process group; FINDINGS R-DISTPEFT-1..8; the `fp32` fixtures: LoRA under FSDP2 / HSDP with the Trainer's
 * bf16=False, R-DISTPEFT-24, which gckpt_layout_check refused before):
 *   - every fake-group fixture: the planned persistent bytes of its rank equal the allocator's
 *     live bytes at step 2's start and end;
 *   - every fake-group fixture: step 2's planned live peak (the walk, CPU target, exact allocator)
 *     within the single-GPU LoRA fixtures' tolerance (test_hf_peft: 0.5 %) under ddp and zero1,
 *     and within the bound the parallel_peak_approximate warning states for LoRA under fsdp,
 *     zero2 and zero3 (GCKPT_PARALLEL_PEFT_*_BOUND_PCT); max and mean |error| printed per mode,
 *     and each fixture beyond 0.5 % listed (none: the zero3 every_n 1 all-linear and QLoRA fixtures
 *     were -0.50 % .. -0.85 % until a recompute that stops at LinearFunctionForZeroStage3 made that
 *     op's output before the stop drops it, FINDINGS R-DISTPEFT-20; ZeRO-3's forward prefetch,
 *     R-DISTPEFT-10 (c), gathers parameters modules ahead in the forward and is not modelled: every
 *     parameter is gathered by the forward's end under the default limits, and no fixture peaks
 *     before it). Modelled and measured: ZeRO-3's F.linear saves its input for a frozen
 *     weight too; a frozen parameter whose module runs no backward (the embedding, and layer
 *     0's frozen linears without checkpointing) is released after its forward when its
 *     module does not come back in the trace, else at the backward's end.
 * The schedule's collectives (bytes of the forward's and the backward's all-gathers and of the
 * reductions) equal step 2's on every fsdp, zero2 and zero3 fixture (zero3 with checkpointing: the
 * frozen parameters of a checkpointed layer gathered once more in each micro-step's backward,
 * core/sim_parallel.c z3_regather).
 * Not compared, each listed by name: the gloo twins (their allocator misses frees made on gloo's
 * threads, FINDINGS R-PROBE-5), and the `lb16` variant (a LoRA base loaded in bf16 and trained
 * under the Trainer's bf16=True autocast: the planner's precisions have no such setting). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "dist_fixture.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/recipe.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

#define DIR_PEFT GCKPT_TEST_DATA "/hf-dist-peft"
#define PEAK_TOL 0.005 /* test_hf_peft's LoRA tolerance (hf_tolerance: bf16 and amp fixtures) */

/* The peak tolerance of a mode: the warning's bound where it states one. */
static double peak_tol(int mode)
{
    return mode == GCKPT_PAR_FSDP    ? atof(GCKPT_PARALLEL_PEFT_FSDP_BOUND_PCT) / 100
           : mode == GCKPT_PAR_ZERO2 ? atof(GCKPT_PARALLEL_PEFT_ZERO2_BOUND_PCT) / 100
           : mode == GCKPT_PAR_ZERO3 ? atof(GCKPT_PARALLEL_PEFT_ZERO3_BOUND_PCT) / 100
                                     : PEAK_TOL;
}

static gckpt_recipe g_r;
static gckpt_params g_ps;

/* The planner's persistent bytes of f's rank (each allocation unrounded: the CPU's exact allocator). */
static uint64_t plan_persistent(const dist_fixture *f)
{
    gckpt_err err;
    bool overflow = false;
    gckpt_setting_recipe(&f->m, &f->s, GCKPT_TARGET_CPU, &g_r);
    if (!gckpt_params_build(&g_r, f->m.layers, f->s.optimizer, 1, &g_ps, &overflow, &err)) fail_msg("%s", err.msg);
    assert_false(overflow);
    gckpt_params_shard(&g_ps, &f->m, &f->s.layout);
    gckpt_rank_bytes b;
    gckpt_rank_persistent(&g_ps, &f->m, &f->s, f->rank, 1, &b);
    return b.total;
}

/* The schedule's events with the running total (GCKPT_PEFT_DUMP=<fixture file name>: where measured
 * and planned part). */
static void dump_events(const gckpt_ctx *c, const gckpt_schedule *ev)
{
    gckpt_mem m = {{0}};
    gckpt_persistent(c, m.cur);
    for (int i = 0; i < GCKPT_NCOMP; i++) m.total += m.cur[i];
    for (size_t si = 0; si < ev->nseg; si++) {
        const gckpt_sched_seg *g = &ev->seg[si];
        for (size_t i = g->begin; i < g->end; i++) {
            const gckpt_event *e = &ev->ev[i];
            gckpt_mem_apply(&m, e);
            const char *what = e->op >= 0 ? g_r.op[e->op].name : e->tensor >= 0 ? g_r.t[e->tensor].name : "-";
            printf("micro%u %s L%d %s %s%s %llu %lld\n", g->seg.micro + 1, gckpt_phase_names[gckpt_seg_phase(&g->seg)],
                   gckpt_seg_place(&g->seg, c->model->layers), gckpt_event_names[e->kind], e->grad ? "grad:" : "", what,
                   (unsigned long long)e->bytes, (long long)m.total);
        }
    }
}

/* The rank's planned step 2: the walk of its schedule on the exact CPU device. */
static void plan_step(const char *name, const dist_fixture *f, const gckpt_device *dev, gckpt_result *res)
{
    static gckpt_ctx c;
    gckpt_err err;
    gckpt_setting_recipe(&f->m, &f->s, GCKPT_TARGET_CPU, &g_r);
    if (!gckpt_ctx_init(&c, &f->m, dev, &g_r, &f->s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule ev;
    if (!gckpt_schedule_build(&c, &ev)) fail_msg("out of memory");
    gckpt_walk(&c, &ev, res);
    const char *dump = getenv("GCKPT_PEFT_DUMP");
    if (dump && !strcmp(dump, name)) dump_events(&c, &ev);
    gckpt_schedule_free(&ev);
}

typedef int (*fixture_fn)(const char *name, const dist_fixture *f, void *ctx);

/* Every fixture of the folder in name order; the gloo twins and lb16 listed and skipped. Returns
 * the sum of fn's results (its failures). */
static int each_fixture(fixture_fn fn, void *ctx, int *compared)
{
    struct dirent **list;
    int n = scandir(DIR_PEFT, &list, NULL, alphasort), bad = 0, gloo = 0, lb16 = 0;
    assert_true(n > 0);
    *compared = 0;
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        size_t k = strlen(name);
        if (k > 5 && !strcmp(name + k - 5, ".json")) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", DIR_PEFT, name);
            static dist_fixture f;
            dist_fixture_read(path, &f);
            if (!f.fake) gloo++;
            else if (f.bf16_base) {
                print_message("not compared: %s (a bf16-loaded LoRA base under autocast: no planner setting)\n", name);
                lb16++;
            } else {
                bad += fn(name, &f, ctx);
                (*compared)++;
            }
        }
        free(list[i]);
    }
    free(list);
    print_message("%d fixtures compared, %d gloo twins and %d lb16 fixtures not compared\n", *compared, gloo, lb16);
    return bad;
}

static int check_persistent(const char *name, const dist_fixture *f, void *ctx)
{
    (void)ctx;
    uint64_t p = plan_persistent(f);
    if (p == f->start && p == f->end) return 0;
    print_message("%s: planned %llu, measured start %llu end %llu (%+lld)\n", name, (unsigned long long)p,
                  (unsigned long long)f->start, (unsigned long long)f->end, (long long)p - (long long)f->start);
    return 1;
}

/* Persistent bytes per rank, exact, on every compared fixture. */
static void test_persistent_exact(void **state)
{
    (void)state;
    int compared;
    int bad = each_fixture(check_persistent, NULL, &compared);
    print_message("persistent bytes per rank: %d/%d fixtures exact\n", compared - bad, compared);
    assert_true(compared >= 120);
    assert_int_equal(bad, 0);
}

typedef struct {
    gckpt_device dev;
    double worst[GCKPT_NPAR], sum[GCKPT_NPAR];
    int count[GCKPT_NPAR], beyond[GCKPT_NPAR]; /* fixtures, of them beyond 0.5 % */
    int coll_same[GCKPT_NPAR];                 /* ... whose collectives equal the schedule's */
} peak_tally;

static int check_peak(const char *name, const dist_fixture *f, void *ctx)
{
    peak_tally *t = ctx;
    gckpt_result res;
    plan_step(name, f, &t->dev, &res);
    double planned = (double)res.peak_bytes, e = (planned - f->peak) / f->peak;
    int mode = f->s.layout.mode;
    print_message("%-56.56s %9.0f %9.0f %+7.3f%%  %s (planned: micro %d, phase %d, layer %d, %s)\n", name, f->peak,
                  planned, 100 * e, f->where, res.peak_micro, res.peak_phase, res.peak_layer,
                  res.peak_tensor >= 0 ? g_r.t[res.peak_tensor].name : "-");
    if (fabs(e) > t->worst[mode]) t->worst[mode] = fabs(e);
    t->sum[mode] += fabs(e);
    t->count[mode]++;
    /* the schedule's collectives against step 2's (all-gather output, reduce-scatter input,
     * all-reduce buffer bytes; as test_parallel's test_collective_volumes) */
    if (mode == GCKPT_PAR_FSDP || mode == GCKPT_PAR_ZERO2 || mode == GCKPT_PAR_ZERO3) {
        bool same = res.coll_gather_fwd == f->gather_fwd && res.coll_gather_bwd == f->gather_bwd &&
                    res.coll_reduce == f->reduce;
        t->coll_same[mode] += same;
        if (!same)
            print_message("  collectives: planned all-gather forward %.0f backward %.0f, reduce %.0f; measured %.0f %.0f "
                          "%.0f\n", res.coll_gather_fwd, res.coll_gather_bwd, res.coll_reduce, f->gather_fwd,
                          f->gather_bwd, f->reduce);
    }
    /* fsdp, zero2 and zero3: every fixture's collectives are the schedule's */
    int bad = 0;
    if ((mode == GCKPT_PAR_FSDP || mode == GCKPT_PAR_ZERO2 || mode == GCKPT_PAR_ZERO3) && !(res.coll_gather_fwd == f->gather_fwd &&
                                                                 res.coll_gather_bwd == f->gather_bwd &&
                                                                 res.coll_reduce == f->reduce))
        bad = 1;
    if (fabs(e) > PEAK_TOL) {
        print_message("  ^ not matched within %.1f %% (the reason: this file's header)\n", 100 * PEAK_TOL);
        t->beyond[mode]++;
    }
    if (fabs(e) <= peak_tol(mode)) return bad;
    print_message("  ^ beyond the %s bound, %.2f %%\n", gckpt_parallel_names[mode], 100 * peak_tol(mode));
    return 1;
}

/* Step 2's live peak per rank within the single-GPU LoRA tolerance; max / mean |error| per mode. */
static void test_peaks(void **state)
{
    (void)state;
    static peak_tally t;
    memset(&t, 0, sizeof t);
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", &t.dev, &err)) fail_msg("%s", err.msg);
    print_message("%-56s %9s %9s %8s  %s\n", "fixture (fake group)", "measured", "planned", "error", "measured peak at");
    int compared;
    int bad = each_fixture(check_peak, &t, &compared);
    for (int m = 1; m < GCKPT_NPAR; m++)
        if (t.count[m])
            print_message("%-6s %3d fixtures: max |error| %.3f %%, mean %.3f %%, %d beyond 0.5 %% (bound %.2f %%); "
                          "collectives equal on %d\n", gckpt_parallel_names[m], t.count[m], 100 * t.worst[m],
                          100 * t.sum[m] / t.count[m], t.beyond[m], 100 * peak_tol(m), t.coll_same[m]);
    assert_true(compared >= 120);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_persistent_exact),
        cmocka_unit_test(test_peaks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
