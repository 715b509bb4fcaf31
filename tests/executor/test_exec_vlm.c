/* gckpt-run's LLaVA step on the host backend (executor/interp_vlm.c, gckpt/executor/exec_vlm.h):
 *  - its loss and every trained parameter's gradient norm against transformers 5.24's
 *    LlavaForConditionalGeneration on the same weights, batch and pixels
 *    (tests/executor/data/hf-tiny-llava*.json, written by tools/hf_probe/exec_vlm.py from
 *    gckpt-exec-dump-vlm's step; FINDINGS R-EXEC-5), the tower trained and frozen;
 *  - the allocator's peak and pinned peak equal to the planner's walk of the same step
 *    (gckpt_vlm_walk: the plan's peak) for every_n off / 1 / 2 / 3, with and without offload,
 *    the tower trained and frozen, one and two micro-steps, and nothing left allocated;
 *  - what it does not run refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/device.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/vision.h"
#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/exec_vlm.h"
#include "gckpt/util/util.h"

static gckpt_vlm load_vlm(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", GCKPT_TEST_DATA, name);
    gckpt_err err = {{0}};
    gckpt_vlm v;
    char *text = gckpt_read_file(path, 1u << 20, &err);
    if (!text || !gckpt_vlm_parse(path, text, &v, &err)) fail_msg("%s", err.msg);
    free(text);
    return v;
}

static gckpt_device device(void)
{
    gckpt_err err = {{0}};
    gckpt_device d;
    if (!gckpt_device_load("h100-sxm-80gb", &d, &err)) fail_msg("%s", err.msg);
    return d;
}

static gckpt_vlm_images images_of(const gckpt_vlm *v, bool trained)
{
    gckpt_vlm_images im = {.images = 1, .tiles = 1, .tower_trained = trained};
    gckpt_err err = {{0}};
    if (!gckpt_image_tokens(v, "images", v->vision.image_size, v->vision.image_size, &im.tokens, &err))
        fail_msg("%s", err.msg);
    return im;
}

/* the probe's setting: mb 2, seq 32 (16 image tokens), fp32, SDPA, AdamW */
static gckpt_setting setting(uint32_t every_n, bool offload, uint64_t grad_accum)
{
    return (gckpt_setting){.seq = 32, .micro_batch = 2, .grad_accum = grad_accum, .precision = GCKPT_FP32,
                           .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = every_n, .offload = offload};
}

/* ---- numerics ------------------------------------------------------------------------- */

typedef struct {
    gckpt_vexec *vx;
    double *norms;
    size_t n, cap;
    int failed;
} grads_ctx;

/* every trained parameter's gradient norm, in gckpt-exec-dump-vlm's order: the text side's,
 * then the tower's, each in its recipe's order, each layer */
static void side_norms(gckpt_exec *x, grads_ctx *g)
{
    const gckpt_ctx *c = gckpt_exec_ctx(x);
    const gckpt_recipe *r = c->recipe;
    gckpt_err err = {{0}};
    for (int t = 0; t < r->nt; t++) {
        if (r->t[t].kind != GCKPT_T_PARAM || !r->t[t].requires_grad) continue;
        uint64_t n = gckpt_exec_param_numel(x, t), layers = gckpt_sec_is_block(r->t[t].section) ? c->model->layers : 1;
        float *v = malloc(sizeof *v * (n ? n : 1));
        for (uint64_t l = 0; v && l < layers; l++) {
            if (!gckpt_exec_param_in_layer(x, t, (int)l)) continue;
            if (gckpt_exec_read_grad(x, (int)l, t, v, &err) != GCKPT_XS_OK || g->n == g->cap) {
                g->failed = 1;
                break;
            }
            double ss = 0;
            for (uint64_t i = 0; i < n; i++) ss += (double)v[i] * (double)v[i];
            g->norms[g->n++] = sqrt(ss);
        }
        free(v);
    }
}

static void collect(gckpt_exec *x, void *user)
{
    grads_ctx *g = user;
    (void)x;
    side_norms(gckpt_vexec_side(g->vx, false), g);
    side_norms(gckpt_vexec_side(g->vx, true), g);
}

/* loss_tol, norm_tol: relative (fp32: rounding; amp-bf16: transformers under CPU autocast with
 * CUDA's fp32 lists emulated, bf16 roundings in another order) */
static void matches_transformers(const char *fixture, bool trained, uint32_t every_n, gckpt_precision prec,
                                 double loss_tol, double norm_tol)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", GCKPT_TEST_DATA, fixture);
    gckpt_err err = {{0}};
    char *text = gckpt_read_file(path, 1u << 24, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *hf = cJSON_Parse(text);
    free(text);
    assert_non_null(hf);
    gckpt_vlm v = load_vlm("tiny-llava");
    gckpt_device d = device();
    gckpt_vlm_images im = images_of(&v, trained);
    gckpt_setting s = setting(every_n, false, 1);
    s.precision = prec;
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_exec_opts o = {.seed = 7, .init_std = 0.05, .bias_std = 0.05}; /* gckpt-exec-dump-vlm's */
    gckpt_vexec *vx = gckpt_vexec_new(be, &v, &d, &s, &im, &o, &err);
    if (!vx) fail_msg("%s", err.msg);
    double norms[256];
    grads_ctx g = {vx, norms, 0, 256, 0};
    gckpt_step_opts so = {.update = true, .on_grads = collect, .user = &g};
    gckpt_step_result res;
    if (gckpt_vexec_setup(vx, &err) != GCKPT_XS_OK || gckpt_vexec_step(vx, &so, &res, &err) != GCKPT_XS_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(g.failed, 0);
    double want = cJSON_GetObjectItem(hf, "loss")->valuedouble, worst = 0, top = 0;
    const char *where = "";
    size_t i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(hf, "params")) top = fmax(top, cJSON_GetObjectItem(p, "grad_norm")->valuedouble);
    /* a gradient that is zero in exact arithmetic (a key projection's bias: softmax ignores a
     * per-query constant) holds rounding noise on both sides: relative to 1e-3 of the largest */
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(hf, "params")) {
        assert_true(i < g.n);
        double ref = cJSON_GetObjectItem(p, "grad_norm")->valuedouble;
        double rel = fabs(norms[i] - ref) / fmax(ref, 1e-3 * top);
        if (rel > worst) {
            worst = rel;
            where = cJSON_GetObjectItem(p, "name")->valuestring;
        }
        i++;
    }
    printf("# %s vs transformers %s (%s, SDPA, mb 2, seq 32, the tower %s, every_n %u): loss %.9f vs %.9f; largest "
           "relative gradient-norm difference %.2e (%s) over %zu parameters\n",
           fixture, cJSON_GetObjectItem(hf, "transformers")->valuestring, gckpt_precision_names[prec],
           trained ? "trained" : "frozen", every_n, res.loss, want, worst, where, i);
    assert_int_equal(i, g.n);
    assert_true(fabs(res.loss - want) < loss_tol * fabs(want));
    assert_true(worst < norm_tol);
    cJSON_Delete(hf);
    gckpt_vexec_free(vx);
    be->destroy(be);
}

static void trained_tower_matches_transformers(void **st)
{
    (void)st;
    matches_transformers("hf-tiny-llava", true, 0, GCKPT_FP32, 1e-6, 1e-5);
}

/* amp-bf16: the loss within 1.8e-05 of transformers' (the projector reading rows 1.. of every
 * image in place, not a copy: read from row 0 on, 4.9e-04) */
static void amp_matches_transformers(void **st)
{
    (void)st;
    matches_transformers("hf-tiny-llava-amp", true, 0, GCKPT_AMP_BF16, 1e-4, 2e-2);
}

static void frozen_tower_matches_transformers(void **st)
{
    (void)st;
    matches_transformers("hf-tiny-llava-frozen", false, 2, GCKPT_FP32, 1e-6, 1e-5);
}

/* ---- memory --------------------------------------------------------------------------- */

/* two steps of the setting: the allocator's peaks against the walk's */
/* (returns the second step's loss) */
static double peak_images(const gckpt_vlm *v, bool trained, uint32_t every_n, bool offload, uint64_t ga,
                          gckpt_precision p, uint64_t images)
{
    gckpt_device d = device();
    gckpt_vlm_images im = images_of(v, trained);
    gckpt_setting s = setting(every_n, offload, ga);
    s.precision = p;
    im.images = images; /* two: the placeholder runs one after the other, seq 48 (the probe's) */
    if (images > 1) s.seq = 48;
    gckpt_err err = {{0}};
    gckpt_result pred;
    gckpt_vlm_step_info info;
    if (!gckpt_vlm_walk(v, &d, &s, GCKPT_TARGET_CUDA, &im, &pred, &info, &err)) fail_msg("%s", err.msg);
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_exec_opts o = {.seed = 3};
    gckpt_vexec *vx = gckpt_vexec_new(be, v, &d, &s, &im, &o, &err);
    if (!vx) fail_msg("%s", err.msg);
    be->reset_peaks(be);
    gckpt_step_result res[2];
    if (gckpt_vexec_setup(vx, &err) != GCKPT_XS_OK || gckpt_vexec_step(vx, NULL, &res[0], &err) != GCKPT_XS_OK ||
        gckpt_vexec_step(vx, NULL, &res[1], &err) != GCKPT_XS_OK)
        fail_msg("%s", err.msg);
    gckpt_memstat ms;
    be->memstat(be, &ms);
    printf("# %s, %llu image(s), tower %s, every_n %u%s, grad_accum %llu: peak %llu (plan %llu), pinned %llu (plan %llu), loss %.6f, "
           "%.6f\n",
           gckpt_precision_names[p], (unsigned long long)images, trained ? "trained" : "frozen", every_n,
           offload ? " + offload" : "",
           (unsigned long long)ga,
           (unsigned long long)ms.allocated_peak, (unsigned long long)pred.peak_bytes,
           (unsigned long long)ms.pinned_peak, (unsigned long long)pred.host_pinned_bytes, res[0].loss, res[1].loss);
    assert_int_equal(ms.allocated_peak, pred.peak_bytes);
    assert_int_equal(ms.pinned_peak, pred.host_pinned_bytes);
    assert_true(isfinite(res[1].loss) && res[1].loss > 0);
    gckpt_vexec_free(vx);
    be->memstat(be, &ms);
    assert_int_equal(ms.allocated + ms.pinned, 0);
    be->destroy(be);
    return res[1].loss;
}

static double peak_is_the_plans(const gckpt_vlm *v, bool trained, uint32_t every_n, bool offload, uint64_t ga,
                                gckpt_precision p)
{
    return peak_images(v, trained, every_n, offload, ga, p, 1);
}

static void peaks_are_the_plans(void **st)
{
    (void)st;
    gckpt_vlm v = load_vlm("tiny-llava");
    const struct {
        uint32_t n;
        bool off;
    } grid[] = {{0, false}, {1, false}, {1, true}, {2, false}, {2, true}, {3, true}};
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_AMP_BF16};
    for (int k = 0; k < 4; k++) {
        bool tr = k % 2 == 0;
        gckpt_precision p = precs[k / 2];
        double first = 0;
        for (size_t i = 0; i < sizeof grid / sizeof *grid; i++) {
            double loss = peak_is_the_plans(&v, tr, grid[i].n, grid[i].off, 1, p);
            /* checkpointing and offload change no number: the checkpointed settings' losses
             * (one text recipe: without checkpointing it has the DynamicCache's tensors, and its
             * weights other keys) are equal bit for bit */
            if (grid[i].n && !first) first = loss;
            else if (grid[i].n) assert_memory_equal(&loss, &first, sizeof loss);
        }
    }
    peak_is_the_plans(&v, true, 0, false, 2, GCKPT_FP32);
    peak_is_the_plans(&v, true, 2, true, 2, GCKPT_FP32);
    peak_is_the_plans(&v, false, 1, false, 3, GCKPT_FP32);
    peak_is_the_plans(&v, true, 3, true, 2, GCKPT_AMP_BF16);
    peak_is_the_plans(&v, false, 1, true, 3, GCKPT_AMP_BF16);
    peak_images(&v, true, 2, true, 1, GCKPT_FP32, 2);
    peak_images(&v, true, 0, false, 2, GCKPT_AMP_BF16, 2);
}

/* ---- refusals ------------------------------------------------------------------------- */

static void what_it_does_not_run_is_refused(void **st)
{
    (void)st;
    gckpt_vlm v = load_vlm("tiny-llava");
    gckpt_device d = device();
    gckpt_vlm_images im = images_of(&v, true);
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_err err = {{0}};
    gckpt_setting s = setting(0, false, 1);
    s.precision = GCKPT_BF16; /* pure bf16: the batch's pixels in bf16, not run */
    assert_null(gckpt_vexec_new(be, &v, &d, &s, &im, NULL, &err));
    assert_non_null(strstr(err.msg, "fp32 and amp-bf16 only"));
    gckpt_vlm next = v;
    next.vision.projector = GCKPT_PROJ_LLAVA_NEXT;
    snprintf(next.model_type, sizeof next.model_type, "llava_next");
    s = setting(0, false, 1);
    memset(&err, 0, sizeof err);
    assert_false(gckpt_vexec_supported(be, &next, &s, &err));
    assert_non_null(strstr(err.msg, "\"llava_next\" (LLaVA-NeXT) is planned, not executed by gckpt-run"));
    /* adapters: planned (FINDINGS R-VLM-43, R-VLM-92), not executed */
    s = setting(1, false, 1);
    gckpt_peft_default(GCKPT_METHOD_QLORA, &s.peft);
    memset(&err, 0, sizeof err);
    assert_false(gckpt_vexec_supported(be, &v, &s, &err));
    assert_non_null(strstr(err.msg, "its LoRA and QLoRA steps are planned, not executed by gckpt-run"));
    s = setting(0, false, 1);
    /* another backend than the host's: its kernels of the tower are unverified */
    gckpt_backend cuda = {.name = "cuda"};
    memset(&err, 0, sizeof err);
    assert_false(gckpt_vexec_supported(&cuda, &v, &s, &err));
    assert_non_null(strstr(err.msg, "host backend only (--backend host): the tower's kernels on CUDA are unverified"));
    be->destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(trained_tower_matches_transformers),
        cmocka_unit_test(frozen_tower_matches_transformers),
        cmocka_unit_test(amp_matches_transformers),
        cmocka_unit_test(peaks_are_the_plans),
        cmocka_unit_test(what_it_does_not_run_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
