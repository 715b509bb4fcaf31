/* gckpt-run's LLaVA and LLaVA-NeXT steps on the host backend (executor/interp_vlm.c,
 * gckpt/executor/exec_vlm.h):
 *  - its loss and every trained parameter's gradient norm against transformers 5.24's
 *    LlavaForConditionalGeneration / LlavaNextForConditionalGeneration on the same weights,
 *    batch and pixels (tests/executor/data/hf-tiny-llava*.json, written by
 *    tools/hf_probe/exec_vlm.py from gckpt-exec-dump-vlm's step; FINDINGS R-EXEC-5, R-EXEC-7),
 *    the tower trained and frozen; LLaVA-NeXT at the image processor's shapes for images of
 *    40x60, 60x40 (5 anyres tiles, 14 and 16 packed rows: unpadded in height, in width) and
 *    28x28 (3 tiles, 10 rows);
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

#include "gckpt/core/towers.h"
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

/* one image per sample of h x w pixels (0: the tower's square), its tiles and tokens */
static gckpt_vlm_images images_at(const gckpt_vlm *v, bool trained, uint64_t h, uint64_t w)
{
    if (!h) h = w = v->vision.image_size;
    gckpt_vlm_images im = {.images = 1, .tiles = gckpt_image_tiles(v, h, w), .tower_trained = trained, .h = h, .w = w};
    gckpt_err err = {{0}};
    if (!gckpt_image_tokens(v, "images", h, w, &im.tokens, &err)) fail_msg("%s", err.msg);
    return im;
}

static gckpt_vlm_images images_of(const gckpt_vlm *v, bool trained) { return images_at(v, trained, 0, 0); }

/* the probe's setting: mb 2, seq 32 (16 image tokens), fp32, SDPA, AdamW */
static uint8_t g_towers; /* --checkpoint-towers (gckpt_ckpt_towers; 0: all) of the settings below */

static gckpt_setting setting(uint32_t every_n, bool offload, uint64_t grad_accum)
{
    return (gckpt_setting){.seq = 32, .micro_batch = 2, .grad_accum = grad_accum, .precision = GCKPT_FP32,
                           .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = every_n, .offload = offload,
                           .ckpt_towers = g_towers};
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
static void matches_at(const char *config, const char *fixture, bool trained, uint32_t every_n, gckpt_precision prec,
                       double loss_tol, double norm_tol, uint64_t h, uint64_t w)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", GCKPT_TEST_DATA, fixture);
    gckpt_err err = {{0}};
    char *text = gckpt_read_file(path, 1u << 24, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *hf = cJSON_Parse(text);
    free(text);
    assert_non_null(hf);
    gckpt_vlm v = load_vlm(config);
    gckpt_device d = device();
    gckpt_vlm_images im = images_at(&v, trained, h, w);
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
    printf("# %s vs transformers %s (%s, SDPA, mb 2, seq 32, %llux%llu images, %llu tiles, %llu tokens, the tower %s, "
           "every_n %u): loss %.9f vs %.9f; largest relative gradient-norm difference %.2e (%s) over %zu parameters\n",
           fixture, cJSON_GetObjectItem(hf, "transformers")->valuestring, gckpt_precision_names[prec],
           (unsigned long long)im.h, (unsigned long long)im.w, (unsigned long long)im.tiles,
           (unsigned long long)im.tokens, trained ? "trained" : "frozen", every_n, res.loss, want, worst, where, i);
    assert_int_equal(i, g.n);
    assert_true(fabs(res.loss - want) < loss_tol * fabs(want));
    assert_true(worst < norm_tol);
    cJSON_Delete(hf);
    gckpt_vexec_free(vx);
    be->destroy(be);
}

static void matches_transformers(const char *fixture, bool trained, uint32_t every_n, gckpt_precision prec,
                                 double loss_tol, double norm_tol)
{
    matches_at("tiny-llava", fixture, trained, every_n, prec, loss_tol, norm_tol, 0, 0);
}

/* LLaVA-NeXT (tools/hf_probe/exec_vlm.py's LlavaNextForConditionalGeneration): pixel_values
 * [images, tiles, 3, 28, 28] and image_sizes as its image processor makes them */
static void next_matches_transformers(void **st)
{
    (void)st;
    matches_at("tiny-llava-next", "hf-tiny-llava-next", true, 0, GCKPT_FP32, 1e-6, 1e-5, 40, 60);
    matches_at("tiny-llava-next", "hf-tiny-llava-next-frozen", false, 2, GCKPT_FP32, 1e-6, 1e-5, 60, 40);
    matches_at("tiny-llava-next", "hf-tiny-llava-next-amp", true, 0, GCKPT_AMP_BF16, 1e-4, 2e-2, 28, 28);
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
static double peak_at(const gckpt_vlm *v, bool trained, uint32_t every_n, bool offload, uint64_t ga,
                      gckpt_precision p, uint64_t images, uint64_t h, uint64_t w)
{
    gckpt_device d = device();
    gckpt_vlm_images im = images_at(v, trained, h, w);
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
    printf("# %s %s, %llu image(s) of %llux%llu, tower %s, every_n %u%s, grad_accum %llu: peak %llu (plan %llu), pinned %llu "
           "(plan %llu), loss %.6f, %.6f\n",
           v->model_type, gckpt_precision_names[p], (unsigned long long)images, (unsigned long long)im.h,
           (unsigned long long)im.w, trained ? "trained" : "frozen", every_n,
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

static double peak_images(const gckpt_vlm *v, bool trained, uint32_t every_n, bool offload, uint64_t ga,
                          gckpt_precision p, uint64_t images)
{
    return peak_at(v, trained, every_n, offload, ga, p, images, 0, 0);
}

static double peak_is_the_plans(const gckpt_vlm *v, bool trained, uint32_t every_n, bool offload, uint64_t ga,
                                gckpt_precision p)
{
    return peak_images(v, trained, every_n, offload, ga, p, 1);
}

/* LLaVA-NeXT: fp32 and amp-bf16 x every_n off / 1 / 2 x offload x the tower trained / frozen
 * (an image of 40x60: 5 tiles, 14 packed rows), equal losses over the checkpointed settings;
 * grad_accum 2 (image_newline's .grad made in the first micro-step only) and two images of
 * 60x40 and 28x28 */
static void next_peaks_are_the_plans(void **st)
{
    (void)st;
    gckpt_vlm v = load_vlm("tiny-llava-next");
    const struct {
        uint32_t n;
        bool off;
    } grid[] = {{0, false}, {1, false}, {1, true}, {2, false}, {2, true}};
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_AMP_BF16};
    for (int k = 0; k < 4; k++) {
        bool tr = k % 2 == 0;
        double first = 0;
        for (size_t i = 0; i < sizeof grid / sizeof *grid; i++) {
            double loss = peak_at(&v, tr, grid[i].n, grid[i].off, 1, precs[k / 2], 1, 40, 60);
            if (grid[i].n && !first) first = loss;
            else if (grid[i].n) assert_memory_equal(&loss, &first, sizeof loss);
        }
    }
    peak_at(&v, true, 2, true, 2, GCKPT_FP32, 1, 40, 60);
    peak_at(&v, false, 1, false, 3, GCKPT_AMP_BF16, 1, 40, 60);
    peak_at(&v, true, 0, false, 2, GCKPT_FP32, 2, 60, 40);
    peak_at(&v, true, 1, true, 1, GCKPT_AMP_BF16, 2, 28, 28);
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

/* --checkpoint-towers text | vision: one tower's layers checkpointed from its layer 0, the
 * other's plain (the tower trained and frozen, whose hooked embedding stays: FINDINGS
 * R-VLM-70); the allocator's peaks are the walk's, and the loss is the checkpointed one */
static void tower_choice_peaks_are_the_plans(void **st)
{
    (void)st;
    gckpt_vlm v = load_vlm("tiny-llava");
    for (int k = 0; k < 4; k++) {
        bool tr = k % 2 == 0;
        gckpt_precision p = k / 2 ? GCKPT_AMP_BF16 : GCKPT_FP32;
        g_towers = GCKPT_CKPT_TOWERS_ALL;
        double want = peak_is_the_plans(&v, tr, 1, false, 1, p);
        for (uint8_t t = GCKPT_CKPT_TOWERS_TEXT; t <= GCKPT_CKPT_TOWERS_VISION; t++) {
            g_towers = t;
            double a = peak_is_the_plans(&v, tr, 2, false, 1, p), b = peak_is_the_plans(&v, tr, 1, true, 2, p);
            assert_memory_equal(&a, &want, sizeof a);
            (void)b;
        }
    }
    g_towers = GCKPT_CKPT_TOWERS_ALL;
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
    /* a VLM whose row has no host flag */
    gckpt_vlm other = v;
    snprintf(other.model_type, sizeof other.model_type, "qwen2_5_vl");
    s = setting(0, false, 1);
    memset(&err, 0, sizeof err);
    assert_false(gckpt_vexec_supported(be, &other, &s, &err));
    assert_non_null(strstr(err.msg, "\"qwen2_5_vl\" (Qwen2.5-VL) is planned, not executed by gckpt-run"));
    /* LLaVA-NeXT: tiles or tokens that are not the image size's (the pack's rows follow it) */
    gckpt_vlm next = load_vlm("tiny-llava-next");
    gckpt_vlm_images ni = images_at(&next, true, 40, 60);
    ni.tiles = 3;
    memset(&err, 0, sizeof err);
    assert_null(gckpt_vexec_new(be, &next, &d, &s, &ni, NULL, &err));
    assert_non_null(strstr(err.msg, "3 tiles per image planned, an image of 40x60 has 5"));
    ni = images_at(&next, true, 40, 60);
    ni.tokens = 16;
    memset(&err, 0, sizeof err);
    assert_null(gckpt_vexec_new(be, &next, &d, &s, &ni, NULL, &err));
    assert_non_null(strstr(err.msg, "16 tokens per image planned, pack_image_features makes 14 of an image of 40x60"));
    ni.h = ni.w = 0;
    memset(&err, 0, sizeof err);
    assert_null(gckpt_vexec_new(be, &next, &d, &s, &ni, NULL, &err));
    assert_non_null(strstr(err.msg, "needs the images' size"));
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
        cmocka_unit_test(next_matches_transformers),
        cmocka_unit_test(peaks_are_the_plans), cmocka_unit_test(tower_choice_peaks_are_the_plans),
        cmocka_unit_test(next_peaks_are_the_plans),
        cmocka_unit_test(what_it_does_not_run_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
