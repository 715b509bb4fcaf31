/* A VLM training step (core/vlm_step.c) against every walked family's fixtures of
 * tests/data/hf-vlm (tools/hf_probe/vlm_cases.py: fp32, bf16 and amp-bf16 with
 * CUDA's lists; every_n off / 1 / 2 / 3; offload; the tower trained and frozen; one and two
 * images; LLaVA-NeXT's anyres tiles): the planned live peak
 * of the steady-state step against the measured one (the last step's live_peak_bytes), within
 * the planner's fixture tolerance (0.1 % fp32 and amp, 0.5 % bf16, tests/hf_compare.h; the
 * live bytes after micro-step 1's forward as well), one
 * line per fixture; the host peak (both towers' offloaded inputs, the checkpoints' RNG
 * states) exactly; which layers of each tower are checkpointed against the probe's
 * (towers.vision / towers.text.checkpointed); the tokens per image. The LoRA fixtures of
 * tests/data/hf-vlm-peft (adapters on the text model) the same way, and each plain layer's
 * saved bytes exactly, the live bytes after the forward exactly but the 8-byte Python scalars
 * (R-AUTOGRAD-4); the QLoRA ones (the tower's and projector's linears 4-bit) likewise. Every
 * fixture's step start exactly: weights, quantized storage and statistics, optimizer states,
 * the model's buffers and AdamW's step counters (FINDINGS R-VLM-90). mllama (Llama 3.2 Vision)
 * the same way, and its backward's tail (the text embedding's, the projector's and the tower's
 * backward after text layer 0's: where cross_attention_states' gradient waits for the
 * projector, R-VLM-34) exactly; Llama-3.2-11B-Vision's step weights against transformers'
 * parameter count. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include "gckpt/core/device.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/vlm_step.h"
#include "gckpt/util/util.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

#include "hf_compare.h"
#include "json_file.h"

static gckpt_device g_dev;

/* the probe's checkpointed layers of one tower against the planner's */
static bool same_layers(const cJSON *tower, const uint64_t *got, size_t n)
{
    const cJSON *ck = at(tower, "checkpointed"), *e;
    size_t i = 0;
    cJSON_ArrayForEach(e, ck)
    {
        if (i >= n || (uint64_t)e->valuedouble != got[i]) return false;
        i++;
    }
    return i == n;
}

/* A steady-state step ends where it began: every component's live bytes back at the step's
 * start (what the step allocates it frees; the optimizer's zero_grad frees exactly the
 * gradients the backward made, LLaVA-NeXT's image_newline's among them). */
/* mllama's layernorm_post and post-tile embedding (weight, bias; table, gate): where the step
 * makes their .grad. MllamaVisionModel.forward runs them between the local and the global
 * encoder, so the autograd engine reaches them right after the first global layer's backward
 * (tower layer num_hidden_layers), before the last local layer's (FINDINGS R-VLM-63). */
typedef struct {
    const gckpt_vlm_step *p;
    int at, elsewhere;
    int first_global;
} lead_watch;

static void watch_lead(void *user, const gckpt_walk_state *w, const gckpt_event *e)
{
    lead_watch *l = user;
    if (e->kind != GCKPT_EV_ALLOC || e->comp != GCKPT_C_GRADS || e->tensor < 0 || e->inst < l->p->vision_ids) return;
    const char *n = l->p->vr.t[e->tensor].name;
    if (strncmp(n, "layernorm_post.", 15) && strncmp(n, "post_tile_positional_embedding.", 31)) return;
    bool there = w->seg && w->seg->stage == GCKPT_STAGE_BACKWARD && w->seg->layer == l->first_global;
    if (there) l->at++;
    else l->elsewhere++;
}

static void step_returns(const char *path, const gckpt_vlm *v, const gckpt_setting *s, gckpt_target target,
                         const gckpt_vlm_images *im, bool lead)
{
    static gckpt_vlm_step_info info;
    gckpt_err err;
    gckpt_vlm_step *p = gckpt_vlm_step_new(v, &g_dev, s, target, im, &info, &err);
    if (!p) fail_msg("%s: %s", path, err.msg);
    gckpt_walk_state w;
    gckpt_walk_begin(&w, p->start, true);
    lead_watch lw = {.p = p, .first_global = (int)v->vision.layers};
    gckpt_walk_schedule(&w, &p->sched, lead ? watch_lead : NULL, &lw);
    for (int k = 0; k < GCKPT_NCOMP; k++)
        if (w.m.cur[k] != p->start[k])
            fail_msg("%s: component %s ends the step at %lld bytes, began at %lld", path, gckpt_component_names[k],
                     (long long)w.m.cur[k], (long long)p->start[k]);
    /* the first micro-step makes the four .grad (later ones accumulate through temporaries) */
    if (lead && (lw.at != 4 || lw.elsewhere))
        fail_msg("%s: layernorm_post's and the post-tile embedding's .grad: %d made in global layer %d's backward "
                 "(4 expected), %d elsewhere", path, lw.at, lw.first_global, lw.elsewhere);
    gckpt_vlm_step_free(p);
}

typedef struct {
    int files, passed, layers_exact, tails, starts_exact, forwards_exact;
    double worst;
    bool exact_layers; /* check each plain layer's saved bytes */
    /* check the backward's tail: mllama's text embedding, projector and tower after text layer 0's */
    bool tail;
    bool adapters; /* LoRA / QLoRA: the live bytes after the forward exactly, but the scalars */
} tally;

/* The planned backward's tail, the last micro-step's: the live bytes when text layer 0's backward
 * begins (its first event: the micro-step's first row-6 segment of layer 0, the text's) and
 * their highest point from the text embedding's backward after it (row 7) to the micro-step's
 * end (row 9): what the probe's micro<k>.backward.layer.0.start live_bytes and
 * micro<k>.backward.end max_since_prev measure. */
typedef struct {
    bool open, at0, seen6;
    int64_t prev, base, max, last_base, last_max;
} tail_watch;

static void watch_tail(void *user, const gckpt_walk_state *w, const gckpt_event *e)
{
    (void)e;
    tail_watch *t = user;
    const gckpt_seg *g = w->seg;
    if (g && g->micro != GCKPT_MICRO_NONE) {
        if (g->row == 6 && g->layer == 0 && !t->at0 && !t->open) {
            t->at0 = true;
            t->base = t->prev;
        }
        if (g->row == 6) t->seen6 = true;
        if (!t->open && t->seen6 && g->row == 7) {
            t->open = true;
            t->max = t->prev;
        }
        if (t->open && g->row == 9) {
            t->open = t->seen6 = t->at0 = false;
            t->last_base = t->base;
            t->last_max = t->max;
        }
        if (t->open && w->m.total > t->max) t->max = w->m.total;
    }
    t->prev = w->m.total;
}

static void check_fixture(const char *path, const char *name, tally *ty)
{
    cJSON *j = read_json(path);
    const cJSON *set = at(j, "setting");
    char *cfg = cJSON_PrintUnformatted(at(j, "config"));
    gckpt_vlm v;
    gckpt_err err;
    if (!gckpt_vlm_parse(path, cfg, &v, &err)) fail_msg("%s: %s", path, err.msg);
    free(cfg);
    const char *prec = at(set, "precision")->valuestring;
    int p = hf_precision_from(prec);
    if (p < 0) fail_msg("%s: precision %s", path, prec);
    gckpt_target target = cJSON_IsString(at(set, "autocast_lists")) ? GCKPT_TARGET_CPU_CUDA_LISTS : GCKPT_TARGET_CPU;
    const cJSON *en = at(set, "every_n_layers");
    gckpt_setting s = {.micro_batch = (uint64_t)at(set, "micro_batch")->valuedouble,
                       .seq = (uint64_t)at(set, "seq")->valuedouble,
                       .grad_accum = (uint64_t)at(set, "grad_accum")->valuedouble,
                       .precision = (gckpt_precision)p,
                       .attention = GCKPT_SDPA,
                       .every_n = cJSON_IsNumber(en) ? (uint32_t)en->valuedouble : 0,
                       .offload = cJSON_IsTrue(at(set, "offload")),
                       .optimizer = GCKPT_ADAMW};
    const cJSON *im = at(j, "images"), *hw = at(im, "size_hw");
    uint64_t h = (uint64_t)cJSON_GetArrayItem(hw, 0)->valuedouble, w = (uint64_t)cJSON_GetArrayItem(hw, 1)->valuedouble;
    gckpt_vlm_images images = {.images = (uint64_t)at(im, "per_sample")->valuedouble,
                               .tiles = gckpt_image_tiles(&v, h, w),
                               /* "frozen", or the LoRA fixtures' "frozen (get_peft_model)" */
                               .tower_trained = strncmp(at(set, "vision_tower")->valuestring, "frozen", 6) != 0,
                               /* vlm_cases.py casts the batch's pixels to bf16 for its pure-bf16 cases */
                               .pixel_dtype = p == GCKPT_BF16 ? GCKPT_DT_BF16 : GCKPT_DT_F32,
                               .h = h,
                               .w = w};
    if (!gckpt_image_tokens(&v, "image", h, w, &images.tokens, &err)) fail_msg("%s: %s", path, err.msg);
    /* tests/data/hf-vlm-peft: LoRA on the text model (method, lora) */
    if (!hf_peft_read(path, j, &s, &err)) fail_msg("%s: %s", path, err.msg);
    /* tests/data/hf-vlm-towers: --checkpoint-towers text | vision */
    const cJSON *ct = at(set, "checkpoint_towers");
    if (cJSON_IsString(ct)) s.ckpt_towers = (uint8_t)gckpt_ckpt_towers_from(ct->valuestring);
    if (images.tokens != (uint64_t)at(im, "tokens_per_image")->valuedouble)
        fail_msg("%s: %llu tokens per image planned, %.0f measured", path, (unsigned long long)images.tokens,
                 at(im, "tokens_per_image")->valuedouble);
    gckpt_result res;
    static gckpt_vlm_step_info info;
    tail_watch tw = {0};
    if (!gckpt_vlm_walk_events(&v, &g_dev, &s, target, &images, &res, &info, ty->tail ? watch_tail : NULL, &tw, &err))
        fail_msg("%s: %s", path, err.msg);
    step_returns(path, &v, &s, target, &images, ty->tail && images.tower_trained); /* (ty->tail: mllama's) */
    const cJSON *towers = at(j, "towers");
    if (!same_layers(at(towers, "vision"), info.vision_ckpt, info.nvision_ckpt) ||
        !same_layers(at(towers, "text"), info.text_ckpt, info.ntext_ckpt))
        fail_msg("%s: the checkpointed layers differ from the probe's", path);
    /* what each plain layer saves, exact (the LoRA fixtures; their text layers are all
     * alike): the text layers but the first plain one (its region also holds the rotary pair
     * every layer shares), the vision blocks past block 0 that reach the projector but the
     * tower's last (whose region holds the projector's tensors; the probe's regions: the
     * vision blocks first, module order) */
    const cJSON *layers = at(at(j, "saved"), "layers");
    uint64_t nv = (uint64_t)at(at(towers, "vision"), "layers")->valuedouble;
    bool first_text = true;
    for (int k = 0; k < cJSON_GetArraySize(layers) && ty->exact_layers; k++) {
        const cJSON *l = cJSON_GetArrayItem(layers, k);
        bool vis = (uint64_t)k < nv, plain = !cJSON_IsTrue(at(l, "checkpointed"));
        uint64_t i = vis ? (uint64_t)k : (uint64_t)k - nv;
        bool skip = !plain || (vis ? i == 0 || i >= info.vision_live || i + 1 == nv : first_text);
        if (!vis && plain) first_text = false;
        if (skip) continue;
        uint64_t want = vis ? info.vision_layer_saved : info.text_layer_saved;
        if ((uint64_t)at(l, "bytes")->valuedouble != want)
            fail_msg("%s: %s layer %llu saves %.0f bytes, %llu planned", path, vis ? "vision" : "text",
                     (unsigned long long)i, at(l, "bytes")->valuedouble, (unsigned long long)want);
        ty->layers_exact++;
    }
    const cJSON *steps = at(j, "steps"), *last = cJSON_GetArrayItem(steps, cJSON_GetArraySize(steps) - 1);
    /* the step's start exactly: the weights, the quantized ones' storage and statistics, the
     * optimizer's states, the model's buffers and AdamW's step counters (the probe's
     * live_at_start_bytes: every parameter, gradient, buffer and optimizer state tensor) */
    static gckpt_vlm_step_info sinfo;
    gckpt_vlm_step *st = gckpt_vlm_step_new(&v, &g_dev, &s, target, &images, &sinfo, &err);
    if (!st) fail_msg("%s: %s", path, err.msg);
    int64_t start = 0;
    for (int k = 0; k < GCKPT_NCOMP; k++) start += k == GCKPT_C_WORKSPACE ? 0 : st->start[k];
    gckpt_vlm_step_free(st);
    double start_m = at(last, "live_at_start_bytes")->valuedouble;
    if ((double)start != start_m)
        fail_msg("%s: the step starts at %.0f bytes measured, %lld planned", path, start_m, (long long)start);
    ty->starts_exact++;
    /* (a peak between the micro-steps is the probe's batch making: hf_vlm_step_peak) */
    double peak = hf_vlm_step_peak(last), after = at(last, "after_forward_bytes")->valuedouble;
    /* the host: both towers' offloaded inputs and the checkpoints' RNG states, exact */
    double host = at(last, "host_peak_bytes")->valuedouble;
    if ((double)(res.host_pinned_bytes + res.host_rng_bytes) != host)
        fail_msg("%s: host peak %.0f measured, %llu planned (offloaded %llu, RNG states %llu)", path, host,
                 (unsigned long long)(res.host_pinned_bytes + res.host_rng_bytes),
                 (unsigned long long)res.host_pinned_bytes, (unsigned long long)res.host_rng_bytes);
    /* LoRA / QLoRA: after the first micro-step's forward the plan holds what was measured but
     * the 8-byte Python scalars it leaves out (FINDINGS R-AUTOGRAD-4): each adapter's `*
     * scaling` in every text layer, checkpointed or not, CLIP's `1.702 * x` (quick_gelu) in each
     * live vision layer when the hooked tower builds a graph, the loss's one (R-VLM-91) */
    if (ty->adapters) {
        double after1 = cJSON_GetArrayItem(at(last, "after_forward_bytes_micro"), 0)->valuedouble;
        uint64_t n = (uint64_t)__builtin_popcount(s.peft.targets & gckpt_lora_family_targets(v.text.family)) *
                         info.text_layers +
                     (s.every_n && v.vision.act == GCKPT_VACT_QUICK_GELU ? info.vision_live : 0) + 1;
        if (after1 - (double)res.after_forward_bytes != 8.0 * (double)n)
            fail_msg("%s: %.0f bytes after the forward measured, %llu planned: not the %llu 8-byte scalars apart", path,
                     after1, (unsigned long long)res.after_forward_bytes, (unsigned long long)n);
        ty->forwards_exact++;
    }
    double e = ((double)res.peak_bytes - peak) / peak, ea = ((double)res.after_forward_bytes - after) / after;
    double tol = p == GCKPT_BF16 ? 0.005 : 0.001;
    bool pass = fabs(e) <= tol && fabs(ea) <= tol; /* the live bytes after the forward too, as hf_pass */
    if (ty->tail) {
        /* the backward's tail (the text embedding's, the projector's and the tower's backward after
         * text layer 0's): its height above the live bytes where layer 0's backward begins, exact */
        const cJSON *ev, *l0 = NULL, *end = NULL;
        char want[48], want0[48];
        snprintf(want, sizeof want, "micro%d.backward.end", (int)s.grad_accum);
        snprintf(want0, sizeof want0, "micro%d.backward.layer.0.start", (int)s.grad_accum);
        cJSON_ArrayForEach(ev, at(last, "timeline"))
        {
            if (!strcmp(at(ev, "event")->valuestring, want)) end = ev;
            if (!strcmp(at(ev, "event")->valuestring, want0)) l0 = ev;
        }
        if (!end || !l0) fail_msg("%s: no %s or %s in the last step's timeline", path, want0, want);
        double rise = at(end, "max_since_prev")->valuedouble - at(l0, "live_bytes")->valuedouble;
        double prise = (double)(tw.last_max - tw.last_base);
        if (prise != rise) {
            printf("%s: the backward's tail peaks %+.0f bytes from text layer 0's backward start measured, %+.0f "
                   "planned\n", name, rise, prise);
            pass = false;
        }
        ty->tails += prise == rise;
    }
    printf("%-58s peak measured %9.0f planned %9llu %+7.3f%% %s  (after forward %+7.3f%%; planned in %s%s)\n", name,
           peak, (unsigned long long)res.peak_bytes, e * 100, pass ? "ok" : "BEYOND", ea * 100,
           gckpt_phase_names[res.peak_phase], info.peak_in_vision ? ", vision tower" : "");
    ty->files++;
    ty->passed += pass;
    if (fabs(e) / tol > ty->worst) ty->worst = fabs(e) / tol;
    cJSON_Delete(j);
}

static void check_one(const char *path, const char *name, void *ty)
{
    check_fixture(path, name, ty);
}

/* the LoRA fixtures with adapters on the text model only (the regex targets: "-textattn-") */
static void check_text_adapters(const char *path, const char *name, void *ty)
{
    if (strstr(name, "-textattn-")) check_fixture(path, name, ty);
}

static tally dir_peaks(const char *dir, const char *prefix, void (*fn)(const char *, const char *, void *))
{
    tally ty = {.exact_layers = strncmp(prefix, "llava-lora-", 11) == 0 || strstr(dir, "hf-vlm-towers"),
                .tail = strcmp(prefix, "mllama-") == 0, .adapters = strstr(prefix, "lora-") != NULL};
    each_json_file(dir, prefix, fn, &ty);
    printf("%s: %d of %d fixtures' live peaks within the tolerance (the worst at %.2f x it); %d plain layers' saved "
           "bytes exact; %d steps' start bytes exact; %d forwards exact but the scalars", prefix, ty.passed, ty.files,
           ty.worst, ty.layers_exact, ty.starts_exact, ty.forwards_exact);
    if (ty.tail) printf("; %d backward tails exact", ty.tails);
    printf("\n");
    return ty;
}

static tally family_peaks(const char *prefix)
{
    return dir_peaks(GCKPT_TEST_DATA "/hf-vlm", prefix, check_one);
}

static void llava_peaks(void **state)
{
    (void)state;
    tally ty = family_peaks("llava-");
    assert_int_equal(ty.files, 54);
    assert_int_equal(ty.passed, ty.files);
}

/* LLaVA-NeXT: the tower on every anyres tile, pack_image_features between the towers */
static void llava_next_peaks(void **state)
{
    (void)state;
    tally ty = family_peaks("llava_next-");
    assert_int_equal(ty.files, 42);
    assert_int_equal(ty.passed, ty.files);
}

/* Gemma 3: the SigLIP tower, post_layernorm and the pooled projector, token_type_ids' masks
 * on every text layer (sliding and full) */
static void gemma3_peaks(void **state)
{
    (void)state;
    tally ty = family_peaks("gemma3-");
    assert_int_equal(ty.files, 42);
    assert_int_equal(ty.passed, ty.files);
}

/* Qwen2.5-VL: the windowed ViT and its merger, M-RoPE text layers */
static void qwen2_5_vl_peaks(void **state)
{
    (void)state;
    tally ty = family_peaks("qwen2_5_vl-");
    assert_int_equal(ty.files, 54);
    assert_int_equal(ty.passed, ty.files);
}

/* Adapters on a VLM's text model (tests/data/hf-vlm-peft, tools/hf_probe/probe_vlm_peft.py),
 * the tower and the projector frozen, hooked under checkpointing; every fixture's live bytes
 * after the forward exact but the scalars. A case per fixture prefix: LoRA on LLaVA (FINDINGS
 * R-VLM-40 to R-VLM-43; fp32, bf16, amp-bf16 over every_n off / 1 / 2 x offload; each plain
 * layer's saved bytes exact: every_n off 3 text, 1 vision, every_n 2 1 and 1), QLoRA on LLaVA
 * (nf4, double quantization, bf16 compute, amp-bf16: the tower's and the projector's linears
 * 4-bit too, R-VLM-41), LoRA and QLoRA on Gemma 3 (R-VLM-93, R-VLM-94: the SigLIP tower's
 * linears and its pooling head's MLP 4-bit under QLoRA) */
typedef struct {
    const char *prefix;
    int files, layers_exact; /* layers_exact < 0: not checked */
} adapter_case;

static const adapter_case adapter_cases[] = {
    {"llava-lora-", 15, 24}, {"llava-qlora-", 5, -1}, {"gemma3-lora-", 15, -1}, {"gemma3-qlora-", 5, -1}};

static void adapter_peaks(void **state)
{
    const adapter_case *c = *state;
    tally ty = dir_peaks(GCKPT_TEST_DATA "/hf-vlm-peft", c->prefix, check_text_adapters);
    assert_int_equal(ty.files, c->files);
    if (c->layers_exact >= 0) assert_int_equal(ty.layers_exact, c->layers_exact);
    assert_int_equal(ty.forwards_exact, ty.files);
    assert_int_equal(ty.passed, ty.files);
}

/* Qwen3-VL: its ViT, the merger and the deepstack mergers, whose features the first text
 * layers add (R-VLM-53) */
static void qwen3_vl_peaks(void **state)
{
    (void)state;
    tally ty = family_peaks("qwen3_vl-");
    assert_int_equal(ty.files, 42);
    assert_int_equal(ty.passed, ty.files);
}

/* --checkpoint-towers text | vision on LLaVA (tests/data/hf-vlm-towers, vlm_cases.tower_cases):
 * every_n counted from one tower's layer 0, the other's layers plain, as the probe's run of
 * the per-layer code gckpt-plan prints set them (FINDINGS R-VLM-70..72) */
static void llava_tower_peaks(void **state)
{
    (void)state;
    tally ty = dir_peaks(GCKPT_TEST_DATA "/hf-vlm-towers", "llava-", check_one);
    assert_int_equal(ty.files, 20);
    assert_true(ty.layers_exact > 0);
    assert_int_equal(ty.passed, ty.files);
}

/* Llama 3.2 Vision: the tiled tower (local, then gated global layers, never checkpointed), the
 * projector's output as the cross-attention layers' states, the text backward before the
 * projector's (R-VLM-34); one and two images per sample */
static void mllama_peaks(void **state)
{
    (void)state;
    tally ty = family_peaks("mllama-");
    assert_int_equal(ty.files, 42 + 12);
    assert_int_equal(ty.tails, ty.files);
    assert_int_equal(ty.passed, ty.files);
}

/* Llama-3.2-11B-Vision's step holds every parameter once: its recipes' weights (the text model
 * with the cross-attention layers and embed_tokens' 8 extra rows, the tower's local and global
 * layers, the projector) against transformers' count on the meta device
 * (tests/data/vlm-counts.json, tools/hf_probe/vlm_facts.py), fp32 */
static void mllama_real_parameters(void **state)
{
    (void)state;
    cJSON *counts = read_json(GCKPT_TEST_DATA "/vlm-counts.json");
    const cJSON *c = at(at(counts, "models"), "llama-3.2-11b-vision.json");
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/configs/llama-3.2-11b-vision.json", 1u << 20, &err);
    if (!text) fail_msg("%s", err.msg);
    static gckpt_vlm v;
    if (!gckpt_vlm_parse("llama-3.2-11b-vision.json", text, &v, &err)) fail_msg("%s", err.msg);
    free(text);
    gckpt_setting s = {.micro_batch = 1, .seq = 64, .grad_accum = 1, .precision = GCKPT_FP32,
                       .attention = GCKPT_SDPA, .optimizer = GCKPT_ADAMW};
    gckpt_vlm_images im = {.images = 1, .tiles = 1, .tokens = 1, .tower_trained = true, .h = 560, .w = 560};
    static gckpt_vlm_step_info info;
    gckpt_vlm_step *p = gckpt_vlm_step_new(&v, &g_dev, &s, GCKPT_TARGET_CUDA, &im, &info, &err);
    if (!p) fail_msg("%s", err.msg);
    double want = at(c, "parameters")->valuedouble;
    /* the weights component holds the model's buffers too (R-VLM-90) */
    int64_t weights = p->start[GCKPT_C_WEIGHTS] - p->kept_buffers;
    printf("Llama-3.2-11B-Vision: the step's weights %lld B (and %lld B of buffers), 4 x %.0f parameters measured\n",
           (long long)weights, (long long)p->kept_buffers, want);
    assert_true((double)weights == 4 * want);
    assert_int_equal(info.nvision_ckpt, 0); /* no vision layer is a GradientCheckpointingLayer */
    gckpt_vlm_step_free(p);
    cJSON_Delete(counts);
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", &g_dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(llava_peaks), cmocka_unit_test(llava_next_peaks),
                                       cmocka_unit_test(gemma3_peaks), cmocka_unit_test(qwen2_5_vl_peaks),
                                       cmocka_unit_test(qwen3_vl_peaks),
                                       cmocka_unit_test(llava_tower_peaks), cmocka_unit_test(mllama_peaks),
                                       cmocka_unit_test(mllama_real_parameters),
                                       cmocka_unit_test_prestate(adapter_peaks, (void *)&adapter_cases[0]),
                                       cmocka_unit_test_prestate(adapter_peaks, (void *)&adapter_cases[1]),
                                       cmocka_unit_test_prestate(adapter_peaks, (void *)&adapter_cases[2]),
                                       cmocka_unit_test_prestate(adapter_peaks, (void *)&adapter_cases[3])};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
