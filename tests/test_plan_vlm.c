/* gckpt-plan on a vision-language model (planner/plan_vlm.c) against what was measured:
 * for every llava, llava_next, gemma3, qwen2_5_vl, qwen3_vl and mllama fixture of tests/data/hf-vlm (tools/hf_probe/vlm_cases.py),
 * gckpt_plan_run plans the fixture's own config.json (written to a file, as a user passes
 * it) at the fixture's setting (micro-batch, sequence, accumulation, precision, every_n,
 * offload, images per sample and their size, the tower trained or frozen; on the
 * exact-accounting CPU profile), and its one entry's live peak is held to the measured one
 * within the planner's fixture tolerance (0.1 % fp32 and amp, 0.5 % bf16). The plan JSON of
 * each carries the images and the checkpointed layers of both towers the probe saw, and
 * passes reports/schema/plan.schema.json. The --checkpoint-towers fixtures of
 * tests/data/hf-vlm-towers the same way, with each layer's measured saved tensors against its
 * planned mode and the snippet's per-layer code against the lines the probe ran. */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include "gckpt/core/towers.h"
#include "gckpt/planner/plan.h"
#include "gckpt/util/util.h"
#include "schema_check.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

#include "hf_compare.h"
#include "json_file.h"

static cJSON *g_schema; /* reports/schema/plan.schema.json */

/* the probe's checkpointed layers of one tower against the plan JSON's */
static bool same_array(const cJSON *a, const cJSON *b)
{
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return false;
    for (int i = 0; i < cJSON_GetArraySize(a); i++)
        if (cJSON_GetArrayItem(a, i)->valuedouble != cJSON_GetArrayItem(b, i)->valuedouble) return false;
    return true;
}

typedef struct {
    int files, passed;
    double worst;
} tally;

static void check_fixture(const char *path, const char *name, tally *ty)
{
    cJSON *j = read_json(path);
    const cJSON *set = at(j, "setting"), *im = at(j, "images"), *hw = at(im, "size_hw");
    char cfg_path[64];
    snprintf(cfg_path, sizeof cfg_path, "./plan-vlm-%d.json", (int)getpid());
    char *cfg = cJSON_Print(at(j, "config"));
    FILE *f = fopen(cfg_path, "w");
    if (!f || fputs(cfg, f) < 0 || fclose(f)) fail_msg("cannot write %s", cfg_path);
    free(cfg);

    const char *prec = at(set, "precision")->valuestring;
    int p = hf_precision_from(prec);
    if (p < 0) fail_msg("%s: precision %s", path, prec);
    const cJSON *en = at(set, "every_n_layers");
    uint32_t every = cJSON_IsNumber(en) ? (uint32_t)en->valuedouble : 0;
    gckpt_plan_request q = {.seq = (uint64_t)at(set, "seq")->valuedouble,
                            .micro_batches = {(uint64_t)at(set, "micro_batch")->valuedouble},
                            .n_micro = 1,
                            .grad_accum = (uint64_t)at(set, "grad_accum")->valuedouble,
                            .precision = (gckpt_precision)p,
                            .optimizer = GCKPT_ADAMW,
                            .attention = GCKPT_SDPA,
                            .every_n = &every,
                            .n_every = 1,
                            .offload = cJSON_IsTrue(at(set, "offload")) ? GCKPT_OFFLOAD_ON : GCKPT_OFFLOAD_OFF,
                            .margin = 0.05,
                            .target_given = true,
                            .target = cJSON_IsString(at(set, "autocast_lists")) ? GCKPT_TARGET_CPU_CUDA_LISTS
                                                                                : GCKPT_TARGET_CPU,
                            .images = (uint64_t)at(im, "per_sample")->valuedouble,
                            .image_h = (uint64_t)cJSON_GetArrayItem(hw, 0)->valuedouble,
                            .image_w = (uint64_t)cJSON_GetArrayItem(hw, 1)->valuedouble,
                            /* "frozen", or the LoRA fixtures' "frozen (get_peft_model)" */
                            .vision_tower = strncmp(at(set, "vision_tower")->valuestring, "frozen", 6)
                                                ? GCKPT_VISION_TRAINED
                                                : GCKPT_VISION_FROZEN,
                            /* vlm_cases.py casts the batch's pixels to bf16 for its pure-bf16 cases */
                            .pixel_dtype = p == GCKPT_BF16 ? GCKPT_DT_BF16 : 0};
    /* tests/data/hf-vlm-towers: --checkpoint-towers text | vision, the probe running the
     * per-layer code the snippet prints */
    const cJSON *ct = at(set, "checkpoint_towers");
    if (cJSON_IsString(ct)) {
        int v = gckpt_ckpt_towers_from(ct->valuestring);
        if (v < 0) fail_msg("%s: checkpoint_towers %s", path, ct->valuestring);
        q.checkpoint_towers = (uint8_t)v;
        q.checkpoint_towers_given = true;
    }
    /* tests/data/hf-vlm-peft: LoRA on the text model (method, lora) */
    gckpt_err err;
    gckpt_setting ps = {0};
    if (!hf_peft_read(path, j, &ps, &err)) fail_msg("%s: %s", path, err.msg);
    q.peft = ps.peft;
    snprintf(q.model_ref, sizeof q.model_ref, "%s", cfg_path);
    snprintf(q.gpu_ref, sizeof q.gpu_ref, "%s", GCKPT_TEST_DATA "/devices/cpu-exact.json");
    gckpt_plan plan;
    bool planned = gckpt_plan_run(&q, &plan, &err);
    unlink(cfg_path);
    if (!planned) fail_msg("%s: %s", name, err.msg);
    assert_int_equal(plan.n, 1);
    const gckpt_result *r = &plan.entries[0].r;

    const cJSON *steps = at(j, "steps"), *last = cJSON_GetArrayItem(steps, cJSON_GetArraySize(steps) - 1);
    double peak = hf_vlm_step_peak(last);
    double e = ((double)r->peak_bytes - peak) / peak, tol = p == GCKPT_BF16 ? 0.005 : 0.001;
    bool pass = fabs(e) <= tol;

    /* the plan JSON: the images as the probe fed them, both towers' checkpointed layers */
    cJSON *doc = gckpt_plan_to_json(&plan, true);
    char why[512];
    /* the schema knows the targets a user plans, not the probe's CUDA-lists emulation */
    if (q.target == GCKPT_TARGET_CPU && !schema_check(g_schema, doc, why, sizeof why)) fail_msg("%s: %s", name, why);
    /* LoRA: inputs.lora.target_modules is the regex the probe gave LoraConfig */
    const cJSON *ftm = at(at(j, "lora"), "target_modules"), *ptm = at(at(at(doc, "inputs"), "lora"), "target_modules");
    if (cJSON_IsString(ftm) && (!cJSON_IsString(ptm) || strcmp(ftm->valuestring, ptm->valuestring)))
        fail_msg("%s: the plan's inputs.lora.target_modules is not the probe's %s", name, ftm->valuestring);
    const cJSON *vin = at(at(doc, "inputs"), "vision"), *ent = cJSON_GetArrayItem(at(doc, "entries"), 0);
    if (!vin || at(vin, "images")->valuedouble != at(im, "per_sample")->valuedouble ||
        at(vin, "tokens_per_image")->valuedouble != at(im, "tokens_per_image")->valuedouble)
        fail_msg("%s: the plan's inputs.vision differs from the fixture's images", name);
    if (!same_array(at(ent, "checkpointed_layers"), at(at(at(j, "towers"), "text"), "checkpointed")) ||
        !same_array(at(ent, "vision_checkpointed_layers"), at(at(at(j, "towers"), "vision"), "checkpointed")))
        fail_msg("%s: the plan's checkpointed layers differ from the probe's", name);
    /* what each layer saved, measured: a checkpointed one only its checkpoint's inputs (or
     * nothing, offloaded), a plain one its ops' tensors (a flag set False after
     * gradient_checkpointing_enable runs the layer plain, FINDINGS R-VLM-71) */
    if (cJSON_IsString(ct)) {
        const cJSON *layers = at(at(j, "saved"), "layers");
        int nv = (int)at(at(at(j, "towers"), "vision"), "layers")->valuedouble;
        /* (the tower's last block's region also holds the projector's tensors: not judged) */
        for (int k = 0; k < cJSON_GetArraySize(layers); k++) {
            if (k == nv - 1) continue;
            const cJSON *want = at(ent, k < nv ? "vision_checkpointed_layers" : "checkpointed_layers"), *x;
            bool ck = false, frame_only = true;
            cJSON_ArrayForEach(x, want) ck |= (int)x->valuedouble == (k < nv ? k : k - nv);
            cJSON_ArrayForEach(x, at(cJSON_GetArrayItem(layers, k), "tensors"))
                frame_only &= !strcmp(at(x, "op")->valuestring, "checkpoint.save_inputs");
            if (ck != frame_only)
                fail_msg("%s: module-order layer %d is %s but saved %s", name, k, ck ? "planned checkpointed" : "planned plain",
                         frame_only ? "only checkpoint inputs" : "its ops' tensors");
        }
    }
    /* the timeline (its entry's step walked into buckets) reaches the entry's peak, no higher */
    double top = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, at(at(ent, "timeline"), "allocated_bytes")) top = b->valuedouble > top ? b->valuedouble : top;
    if (top != (double)r->peak_bytes) fail_msg("%s: the timeline's top %.0f is not the peak %llu", name, top,
                                               (unsigned long long)r->peak_bytes);
    cJSON_Delete(doc);
    /* LoRA: the snippet loads the VLM class and passes LoraConfig the probe's target_modules
     * (the regex that keeps the adapters on the text model, FINDINGS R-VLM-40) */
    const cJSON *tm = at(at(j, "lora"), "target_modules");
    const cJSON *code = at(set, "per_layer_code");
    if (cJSON_IsString(tm) || cJSON_IsArray(code)) {
        char *out = NULL, want[160];
        size_t len = 0;
        FILE *mf = open_memstream(&out, &len);
        gckpt_plan_print_snippet(&plan, &plan.entries[0], mf);
        fclose(mf);
        if (cJSON_IsString(tm)) {
            snprintf(want, sizeof want, "target_modules=r\"%s\",", tm->valuestring);
            if (!strstr(out, want) || !strstr(out, "model = AutoModelForImageTextToText.from_pretrained("))
                fail_msg("%s: the snippet does not load the VLM with %s:\n%s", name, want, out);
            /* QLoRA: loaded 4-bit and prepared as the probe did */
            if (!strcmp(at(j, "method")->valuestring, "qlora") &&
                (!strstr(out, "BitsAndBytesConfig(") || !strstr(out, "prepare_model_for_kbit_training(")))
                fail_msg("%s: the snippet does not load the VLM in 4 bits and prepare it:\n%s", name, out);
        }
        /* the per-layer code the probe ran, line for line, and the Trainer's checkpointing off */
        if (cJSON_IsArray(code)) {
            size_t n = 1;
            const cJSON *l;
            cJSON_ArrayForEach(l, code) n += strlen(l->valuestring) + 1;
            char *block = malloc(n), *w = block;
            cJSON_ArrayForEach(l, code) w += sprintf(w, "%s\n", l->valuestring);
            if (!strstr(out, block) || !strstr(out, "gradient_checkpointing=False,") ||
                !strstr(out, "from transformers.modeling_layers import GradientCheckpointingLayer\n"))
                fail_msg("%s: the snippet is not the per-layer code the probe ran:\n%s\nwanted:\n%s", name, out, block);
            free(block);
        }
        free(out);
    }
    printf("%-58s measured %9.0f planned %9llu %+7.3f%% %s\n", name, peak, (unsigned long long)r->peak_bytes, e * 100,
           pass ? "ok" : "BEYOND");
    ty->files++;
    ty->passed += pass;
    if (fabs(e) / tol > ty->worst) ty->worst = fabs(e) / tol;
    gckpt_plan_free(&plan);
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

static tally family_in(const char *dir, const char *prefix, void (*fn)(const char *, const char *, void *))
{
    tally ty = {0};
    each_json_file(dir, prefix, fn, &ty);
    printf("%s: %d of %d plans' peaks within the tolerance of the measured (the worst at %.2f x it)\n", prefix,
           ty.passed, ty.files, ty.worst);
    return ty;
}

static tally family(const char *prefix)
{
    return family_in(GCKPT_TEST_DATA "/hf-vlm", prefix, check_one);
}

static void llava_plans(void **state)
{
    (void)state;
    tally ty = family("llava-");
    assert_int_equal(ty.files, 54);
    assert_int_equal(ty.passed, ty.files);
}

static void llava_next_plans(void **state)
{
    (void)state;
    tally ty = family("llava_next-");
    assert_int_equal(ty.files, 42);
    assert_int_equal(ty.passed, ty.files);
}

/* Gemma 3: the SigLIP tower and the pooled projector (mm_tokens_per_image per image) */
static void gemma3_plans(void **state)
{
    (void)state;
    tally ty = family("gemma3-");
    assert_int_equal(ty.files, 42);
    assert_int_equal(ty.passed, ty.files);
}

/* Qwen2.5-VL: its tokens per image from --image-size (smart_resize's grid merged 2 x 2) */
static void qwen2_5_vl_plans(void **state)
{
    (void)state;
    tally ty = family("qwen2_5_vl-");
    assert_int_equal(ty.files, 54);
    assert_int_equal(ty.passed, ty.files);
}

/* Adapters on a VLM's text model (tests/data/hf-vlm-peft), the tower and projector frozen: a
 * case per fixture prefix and count (FINDINGS R-VLM-40 to R-VLM-43: LoRA on LLaVA; R-VLM-41,
 * R-VLM-92: QLoRA on LLaVA, nf4 with double quantization under amp-bf16, the tower's and the
 * projector's linears 4-bit too; R-VLM-93, R-VLM-94: LoRA and QLoRA on Gemma 3, the SigLIP
 * tower's linears 4-bit under QLoRA) */
typedef struct {
    const char *prefix;
    int files;
} adapter_case;

static const adapter_case adapter_cases[] = {
    {"llava-lora-", 15}, {"llava-qlora-", 5}, {"gemma3-lora-", 15}, {"gemma3-qlora-", 5}};

static void adapter_plans(void **state)
{
    const adapter_case *c = *state;
    tally ty = family_in(GCKPT_TEST_DATA "/hf-vlm-peft", c->prefix, check_text_adapters);
    assert_int_equal(ty.files, c->files);
    assert_int_equal(ty.passed, ty.files);
}

/* Qwen3-VL: the same token rule at patch 16; the deepstack mergers in the step (R-VLM-53) */
static void qwen3_vl_plans(void **state)
{
    (void)state;
    tally ty = family("qwen3_vl-");
    assert_int_equal(ty.files, 42);
    assert_int_equal(ty.passed, ty.files);
}

/* --checkpoint-towers text | vision on LLaVA (tests/data/hf-vlm-towers): every_n from one
 * tower's layer 0, the other's plain, as the snippet's per-layer code sets them */
static void llava_tower_plans(void **state)
{
    (void)state;
    tally ty = family_in(GCKPT_TEST_DATA "/hf-vlm-towers", "llava-", check_one);
    assert_int_equal(ty.files, 20);
    assert_int_equal(ty.passed, ty.files);
}

/* tests/data/vlm-trainer-towers.json (tools/hf_probe/vlm_trainer_towers.py): the snippet run
 * with the Trainer for a step. Its per-layer code with gradient_checkpointing=False leaves
 * the planned layers checkpointed after train(); turned True (every_n_layers 2), the
 * Trainer's own call redoes every_n over both towers (FINDINGS R-VLM-71). */
static bool same_list(const cJSON *a, const uint64_t *l, size_t n)
{
    if ((size_t)cJSON_GetArraySize(a) != n) return false;
    for (size_t i = 0; i < n; i++)
        if ((uint64_t)cJSON_GetArrayItem(a, (int)i)->valuedouble != l[i]) return false;
    return true;
}

static void trainer_keeps_flags(void **state)
{
    (void)state;
    cJSON *j = read_json(GCKPT_TEST_DATA "/vlm-trainer-towers.json");
    const cJSON *c;
    const uint64_t towers[2] = {3, 4}; /* vlm_cases.py's llava: 3 CLIP blocks, 4 Llama layers */
    static const char *const names[2] = {"vision", "text"};
    int n = 0;
    cJSON_ArrayForEach(c, at(j, "cases"))
    {
        bool trainer_gc = cJSON_IsTrue(at(c, "trainer_gradient_checkpointing"));
        uint8_t which = (uint8_t)gckpt_ckpt_towers_from(at(c, "checkpoint_towers")->valuestring);
        for (size_t t = 0; t < 2; t++) {
            uint64_t l[8];
            size_t k = gckpt_tower_checkpointed(2, trainer_gc ? GCKPT_CKPT_TOWERS_ALL : which, towers, t, l, 8);
            if (!same_list(at(at(c, "after_train"), names[t]), l, k))
                fail_msg("%s%s: %s layers after train() are not the rule's", at(c, "checkpoint_towers")->valuestring,
                         trainer_gc ? " (Trainer's checkpointing on)" : "", names[t]);
            if (!trainer_gc && !same_list(at(at(c, "planned"), names[t]), l, k))
                fail_msg("%s: the plan's %s layers are not the rule's", at(c, "checkpoint_towers")->valuestring, names[t]);
        }
        n++;
    }
    assert_int_equal(n, 4);
    cJSON_Delete(j);
}

/* Llama 3.2 Vision: the tiled tower (never checkpointed), the cross-attention layers reading the
 * projector's output (R-VLM-62); one and two images */
static void mllama_plans(void **state)
{
    (void)state;
    tally ty = family("mllama-");
    assert_int_equal(ty.files, 42 + 12);
    assert_int_equal(ty.passed, ty.files);
}

int main(void)
{
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/../../reports/schema/plan.schema.json", 1 << 20, &err);
    if (!text || !(g_schema = cJSON_Parse(text))) {
        fprintf(stderr, "plan.schema.json: %s\n", text ? "not JSON" : err.msg);
        return 1;
    }
    free(text);
    const struct CMUnitTest tests[] = {cmocka_unit_test(llava_plans), cmocka_unit_test(llava_next_plans),
                                       cmocka_unit_test(gemma3_plans), cmocka_unit_test(qwen2_5_vl_plans),
                                       cmocka_unit_test(qwen3_vl_plans),
                                       cmocka_unit_test(llava_tower_plans), cmocka_unit_test(trainer_keeps_flags),
                                       cmocka_unit_test(mllama_plans),
                                       cmocka_unit_test_prestate(adapter_plans, (void *)&adapter_cases[0]),
                                       cmocka_unit_test_prestate(adapter_plans, (void *)&adapter_cases[1]),
                                       cmocka_unit_test_prestate(adapter_plans, (void *)&adapter_cases[2]),
                                       cmocka_unit_test_prestate(adapter_plans, (void *)&adapter_cases[3])};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
