/* A VLM's text model as its text family's recipe (the text and image tokens of a sample its
 * sequence) against the qwen2_5_vl fixtures of tests/data/hf-vlm (tools/hf_probe/vlm_cases.py:
 * fp32, bf16 and amp-bf16 with CUDA's lists; every_n off / 1 / 2 / 3; offload; the tower
 * trained and frozen; one and two images). Exact, per text layer: a checkpointed layer keeps
 * its input (nothing offloaded), a plain one the recipe's block, and the first plain one the
 * rotary tables too (every layer's, the probe files them there). Qwen2.5-VL's M-RoPE makes
 * the tables per token ([b, 1, s, head_dim]: get_rope_index's 3-D position ids differ per
 * sample), where a text model's are per position (FINDINGS R-VLM-23). */
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
#include "gckpt/core/schedule.h"
#include "gckpt/core/step.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/vision.h"
#include "gckpt/util/util.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

#include "hf_compare.h"
#include "json_file.h"

static gckpt_device g_dev;

/* Bytes the block's ops save of tensors the embedding made (the rotary tables). */
static uint64_t shared_saved(const gckpt_ctx *ctx, const gckpt_recipe *r)
{
    bool seen[GCKPT_MAX_TENSORS] = {false};
    uint64_t sum = 0;
    for (int i = r->sec_begin[GCKPT_SEC_BLOCK]; i < r->sec_end[GCKPT_SEC_BLOCK]; i++)
        for (int k = 0; k < r->op[i].nsaved; k++) {
            int t = ctx->storage[r->op[i].saved[k]];
            if (seen[t] || r->t[t].section != GCKPT_SEC_EMBED || r->t[t].kind == GCKPT_T_PARAM) continue;
            seen[t] = true;
            sum += ctx->raw[t];
        }
    return sum;
}

typedef struct {
    int files, layers, plain;
} tally;

static void check_fixture(const char *path, const char *name, void *arg)
{
    (void)name;
    tally *ty = arg;
    cJSON *j = read_json(path);
    const cJSON *set = at(j, "setting");
    char *cfg = cJSON_PrintUnformatted(at(j, "config"));
    gckpt_vlm v;
    gckpt_err err;
    if (!gckpt_vlm_parse(path, cfg, &v, &err)) fail_msg("%s: %s", path, err.msg);
    free(cfg);
    int p = hf_precision_from(at(set, "precision")->valuestring);
    if (p < 0) fail_msg("%s: precision", path);
    gckpt_target target = cJSON_IsString(at(set, "autocast_lists")) ? GCKPT_TARGET_CPU_CUDA_LISTS : GCKPT_TARGET_CPU;
    const cJSON *en = at(set, "every_n_layers");
    uint32_t every_n = cJSON_IsNumber(en) ? (uint32_t)en->valuedouble : 0;
    bool offload = cJSON_IsTrue(at(set, "offload"));
    uint64_t b = (uint64_t)at(set, "micro_batch")->valuedouble, seq = (uint64_t)at(set, "seq")->valuedouble;
    static gckpt_recipe r;
    gckpt_recipe_build_seq(&v.text, (gckpt_precision)p, GCKPT_SDPA, target, NULL, seq, &r);
    gckpt_setting s = {.seq = seq, .micro_batch = b, .grad_accum = 1, .precision = (gckpt_precision)p,
                       .attention = GCKPT_SDPA, .every_n = every_n, .offload = offload};
    static gckpt_ctx ctx;
    if (!gckpt_ctx_init(&ctx, &v.text, &g_dev, &r, &s, &err)) fail_msg("%s: %s", path, err.msg);
    uint64_t towers[2], ck_idx[GCKPT_MAX_LAYERS];
    gckpt_vlm_towers(&v, towers);
    size_t nck = gckpt_tower_checkpointed(every_n, GCKPT_CKPT_TOWERS_ALL, towers, 1, ck_idx, GCKPT_MAX_LAYERS);
    bool ck[GCKPT_MAX_LAYERS] = {false};
    for (size_t k = 0; k < nck; k++) ck[ck_idx[k]] = true;
    uint64_t plain = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_BLOCK), shared = shared_saved(&ctx, &r);
    const cJSON *layers = at(at(j, "saved"), "layers");
    bool first = true;
    for (uint64_t i = 0; i < towers[1]; i++) {
        const cJSON *l = cJSON_GetArrayItem(layers, (int)(towers[0] + i));
        if (cJSON_IsTrue(at(l, "checkpointed")) != ck[i]) fail_msg("%s: text layer %llu's mode", path,
                                                                   (unsigned long long)i);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "language_model.layers.%llu", (unsigned long long)i);
        uint64_t got = measured(at(l, "tensors"), prefix);
        uint64_t want = ck[i] ? (offload ? 0 : ctx.raw[r.block_in]) : plain + (first ? shared : 0);
        if (!ck[i]) first = false;
        if (got != want)
            fail_msg("%s: text layer %llu (%s) keeps %llu bytes measured, %llu planned", path, (unsigned long long)i,
                     ck[i] ? "checkpointed" : "plain", (unsigned long long)got, (unsigned long long)want);
        ty->layers++;
        ty->plain += !ck[i];
    }
    ty->files++;
    cJSON_Delete(j);
}

static tally family_text(const char *prefix)
{
    tally ty = {0};
    each_json_file(GCKPT_TEST_DATA "/hf-vlm", prefix, check_fixture, &ty);
    printf("%s: %d fixtures, %d text layers (%d plain): saved bytes exact\n", prefix, ty.files, ty.layers, ty.plain);
    assert_true(ty.plain > 0 && ty.layers > ty.plain);
    return ty;
}

static void qwen2_5_vl_text(void **state)
{
    (void)state;
    assert_int_equal(family_text("qwen2_5_vl-").files, 54);
}

static void qwen3_vl_text(void **state)
{
    (void)state;
    assert_int_equal(family_text("qwen3_vl-").files, 42);
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", &g_dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(qwen2_5_vl_text), cmocka_unit_test(qwen3_vl_text)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
