/* gckpt-run's pre-run estimate of a host-backend step (executor/host_estimate.c): the bytes
 * its memory-bound ops move. The planner times such an op as traffic / HBM rate plus the
 * code base's launch overhead, and the optimizer step plus step_overhead_s; the estimate
 * takes the traffic only. Checked against the same plan on the profile with both overheads
 * zero, where seconds x rate is the traffic itself: the bytes must not move (they were
 * 101 GB per step for tiny-llama on h100-sxm-80gb, the overheads taken for bytes, against
 * 6.4 MB). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "host_estimate.h"
#include "plan_fixture.h"
#include "gckpt/core/plan_read.h"

static bool read_plan(const char *text, gckpt_plan_file *pf)
{
    char path[] = "/tmp/gckpt-estimate-plan-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return false;
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    gckpt_err err = {{0}};
    bool ok = gckpt_plan_read(path, pf, &err);
    if (!ok) fprintf(stderr, "%s\n", err.msg);
    unlink(path);
    return ok;
}

/* entry i's bytes and FLOPs on the plan's profile equal those with the overheads zero */
static void check_entries(gckpt_plan_file *pf, const char *what)
{
    double op_over = 0, step_over = 0;
    for (int c = 0; c < GCKPT_NCODEBASE; c++) {
        op_over += pf->dev.code_base[c].op_overhead_s;
        step_over += pf->dev.code_base[c].step_overhead_s;
    }
    assert_true(op_over > 0 && step_over > 0); /* the profile has both, or this checks nothing */
    assert_true(pf->n > 0);
    for (size_t i = 0; i < pf->n; i++) {
        double flops, bytes, flops0, bytes0;
        assert_true(gckpt_entry_step_work(pf, i, &flops, &bytes));
        gckpt_plan_file bare = *pf;
        for (int c = 0; c < GCKPT_NCODEBASE; c++)
            bare.dev.code_base[c].op_overhead_s = bare.dev.code_base[c].step_overhead_s = 0;
        assert_true(gckpt_entry_step_work(&bare, i, &flops0, &bytes0));
        printf("%s entry %zu: %.6g GB with the profile's overheads, %.6g GB without; %.6g GFLOP\n", what, i,
               bytes / 1e9, bytes0 / 1e9, flops / 1e9);
        assert_true(bytes0 > 0);
        assert_true(fabs(bytes - bytes0) <= 1e-6 * bytes0);
        assert_true(flops == flops0);
    }
}

static void overheads_move_no_bytes(void **st)
{
    (void)st;
    static const uint32_t every[] = {0, 1, 2};
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_AMP_BF16};
    for (int k = 0; k < 2; k++) {
        char *text = pf_plan_text("tiny-llama", precs[k], GCKPT_SDPA, every, 3, 2, 2, 0);
        assert_non_null(text);
        gckpt_plan_file pf;
        assert_true(read_plan(text, &pf));
        free(text);
        check_entries(&pf, gckpt_precision_names[precs[k]]);
        gckpt_plan_file_free(&pf);
    }
}

/* a VLM plan's entries: both towers' steps and the bridge (core/vlm_step.c), two optimizer
 * steps' overheads (197 GB per step for tiny-llava before) */
static void vlm_overheads_move_no_bytes(void **st)
{
    (void)st;
    gckpt_plan_request req = {.seq = 32, .micro_batches = {2}, .n_micro = 1, .grad_accum = 1,
                              .precision = GCKPT_FP32, .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA,
                              .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05, .images = 1,
                              .vision_tower = GCKPT_VISION_TRAINED};
    snprintf(req.model_ref, sizeof req.model_ref, "%s/tiny-llava.json", GCKPT_TEST_DATA);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[2] = {0, 1};
    req.every_n = ev;
    req.n_every = 2;
    gckpt_plan plan;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&req, &plan, &err)) fail_msg("plan: %s", err.msg);
    cJSON *j = gckpt_plan_to_json(&plan, true);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    gckpt_plan_free(&plan);
    gckpt_plan_file pf;
    assert_true(read_plan(text, &pf));
    free(text);
    assert_true(pf.vlm);
    check_entries(&pf, "llava fp32");
    gckpt_plan_file_free(&pf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(overheads_move_no_bytes),
                                       cmocka_unit_test(vlm_overheads_move_no_bytes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
