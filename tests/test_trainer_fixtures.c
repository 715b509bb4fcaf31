/* The printed Trainer lines, executed: tools/hf_probe/trainer_check.py ran them for one
 * step on CPU (transformers 5.24, torch 2.15, bitsandbytes 0.50.2) for a tiny Llama and
 * recorded what the Trainer built (the JSON files in tests/data/trainer). Here the plan of the same
 * request must print exactly the lines that were run, and its model must be what ran:
 * the model's dtype, the checkpointed layers, and every optimizer state per parameter
 * (elements and dtype, gckpt/core/params.h). Not compared: AdamW's one-element `step`
 * scalars (left out of the model, see README) and bitsandbytes' qmap1/qmap2 (one shared
 * 256-entry code map per optimizer).
 *
 * LoRA / QLoRA (tests/data/trainer-peft, issue 12): the same, and every parameter the
 * PeftModel holds (its name as the base model names it, dtype, elements, whether it
 * trains) must be one the parameter state table plans, with the same dtype, elements
 * (a Params4bit: its packed uint8 elements) and trainability, as often as the table
 * has copies of it. Two of them run issue 13's families by their own names (Phi-3's
 * fused qkv_proj, GPT-NeoX's embed_in copy under QLoRA; the fixture's "model"). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/planner/cli_names.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/core/params.h"
#include "gckpt/planner/plan.h"

#define DIR_ GCKPT_TEST_DATA "/trainer"

/* a LoRA / QLoRA option of the fixture's gckpt_plan_args (--method comes first) */
static void peft_arg(const char *k, const char *v, gckpt_peft *pf)
{
    char bad[64];
    if (!strcmp(k, "--method")) gckpt_peft_default((gckpt_method)gckpt_method_from(v), pf);
    else if (!strcmp(k, "--lora-rank")) pf->alpha = 2 * (pf->rank = (uint32_t)atoi(v));
    else if (!strcmp(k, "--lora-targets")) assert_true(gckpt_lora_targets_parse(v, &pf->targets, bad, sizeof bad));
    else if (!strcmp(k, "--modules-to-save")) assert_true(gckpt_mts_parse(v, &pf->modules_to_save, bad, sizeof bad));
    else if (!strcmp(k, "--quant")) pf->quant = !strcmp(v, "int8") ? GCKPT_QUANT_INT8 : !strcmp(v, "fp4") ? GCKPT_QUANT_FP4 : GCKPT_QUANT_NF4;
    else fail_msg("unexpected argument %s", k);
}

/* gckpt_plan_args of the fixture -> a request; its "model" (repository-relative; absent:
 * the tiny Llama) */
static void request_of(const cJSON *fx, gckpt_plan_request *q, uint32_t *every)
{
    const cJSON *args = cJSON_GetObjectItem(fx, "gckpt_plan_args"), *model = cJSON_GetObjectItem(fx, "model");
    memset(q, 0, sizeof *q);
    *q = (gckpt_plan_request){.micro_batches = {1}, .n_micro = 1, .grad_accum = 1, .margin = 0.05};
    if (cJSON_IsString(model))
        snprintf(q->model_ref, sizeof q->model_ref, "%s/../../%s", GCKPT_TEST_DATA, model->valuestring);
    else
        snprintf(q->model_ref, sizeof q->model_ref, "%s", DIR_ "/tiny-llama.json");
    snprintf(q->gpu_ref, sizeof q->gpu_ref, "h100-sxm-80gb");
    q->every_n = every;
    q->n_every = 1;
    int n = cJSON_GetArraySize(args);
    for (int i = 0; i + 1 < n; i += 2) {
        const char *k = cJSON_GetArrayItem(args, i)->valuestring, *v = cJSON_GetArrayItem(args, i + 1)->valuestring;
        if (!strcmp(k, "--seq")) q->seq = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--offload")) q->offload = !strcmp(v, "on") ? GCKPT_OFFLOAD_ON : GCKPT_OFFLOAD_OFF;
        else if (!strcmp(k, "--precision")) q->precision = (gckpt_precision)gckpt_precision_from_user(v);
        else if (!strcmp(k, "--optimizer")) q->optimizer = (gckpt_optimizer)gckpt_optimizer_from_user(v);
        else if (!strcmp(k, "--every-n")) *every = !strcmp(v, "off") ? 0 : (uint32_t)atoi(v);
        else peft_arg(k, v, &q->peft);
    }
}

/* The printed lines from "import torch" to "trainer = Trainer(...)". */
static char *printed_snippet(const gckpt_plan *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    gckpt_plan_print_recommendation(p, f);
    fclose(f);
    char *a = strstr(text, "\nimport torch\n");
    assert_non_null(a);
    char *b = strstr(a, "\ntrainer = Trainer(");
    assert_non_null(b);
    char *e = strchr(b + 1, '\n');
    assert_non_null(e);
    char *out = strndup(a + 1, (size_t)(e - a));
    free(text);
    return out;
}

/* recipe tensor of an HF parameter name; *layer = -1 outside the blocks */
static int tensor_of(const gckpt_recipe *r, const char *hf)
{
    const char *name = hf;
    if (!strncmp(hf, "model.layers.", 13)) name = strchr(hf + 13, '.') + 1;
    else if (!strncmp(hf, "gpt_neox.layers.", 16)) name = strchr(hf + 16, '.') + 1;
    else if (!strncmp(hf, "model.", 6)) name = hf + 6;
    else if (!strncmp(hf, "gpt_neox.", 9)) name = hf + 9;
    for (int t = 0; t < r->nt; t++)
        if (r->t[t].kind == GCKPT_T_PARAM && !strcmp(r->t[t].name, name)) return t;
    fail_msg("no recipe tensor for %s", hf);
    return -1;
}

static const char *dtype_name(uint8_t dt)
{
    if (dt == GCKPT_DT_U8) return "uint8";
    if (dt == GCKPT_DT_I8) return "int8";
    if (dt == GCKPT_DT_F32) return "float32";
    return "bfloat16";
}

/* the states of one parameter: "numel:dtype" strings sorted */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void check_states(const char *hf, const cJSON *got, const gckpt_param *l)
{
    char want[4][48], have[8][48];
    const char *w[4], *h[8];
    int nw = 0, nh = 0;
    for (int k = 0; k < l->nstates; k++) {
        snprintf(want[nw], sizeof want[nw], "%llu:%s", (unsigned long long)l->state[k].numel, dtype_name(l->state[k].dtype));
        w[nw] = want[nw];
        nw++;
    }
    const cJSON *s;
    cJSON_ArrayForEach(s, got) {
        if (!strcmp(s->string, "step") || !strncmp(s->string, "qmap", 4)) continue;
        assert_true(nh < 8);
        snprintf(have[nh], sizeof have[nh], "%d:%s", cJSON_GetObjectItem(s, "numel")->valueint,
                 cJSON_GetObjectItem(s, "dtype")->valuestring);
        h[nh] = have[nh];
        nh++;
    }
    qsort(w, (size_t)nw, sizeof *w, cmp_str);
    qsort(h, (size_t)nh, sizeof *h, cmp_str);
    if (nw != nh) fail_msg("%s: %d states planned, %d allocated by the Trainer", hf, nw, nh);
    for (int k = 0; k < nw; k++)
        if (strcmp(w[k], h[k])) fail_msg("%s: planned state %s, the Trainer allocated %s", hf, w[k], h[k]);
}

/* every parameter of a PeftModel against the table */
static void check_parameters(const char *path, const cJSON *params, const gckpt_plan *p)
{
    uint64_t seen[GCKPT_MAX_PARAMS] = {0}, n = 0, copies = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, params) {
        const char *name = cJSON_GetObjectItem(x, "name")->valuestring;
        int t = tensor_of(p->recipe, name);
        const gckpt_param *l = gckpt_params_of(p->params, t);
        assert_non_null(l);
        if (strcmp(cJSON_GetObjectItem(x, "dtype")->valuestring, dtype_name(l->weight.dtype)) ||
            (uint64_t)cJSON_GetObjectItem(x, "numel")->valuedouble != l->weight.numel ||
            cJSON_IsTrue(cJSON_GetObjectItem(x, "trainable")) != l->trainable)
            fail_msg("%s: %s is %s x %.0f (trainable %d), planned %s x %llu (trainable %d)", path, name,
                     cJSON_GetObjectItem(x, "dtype")->valuestring, cJSON_GetObjectItem(x, "numel")->valuedouble,
                     cJSON_IsTrue(cJSON_GetObjectItem(x, "trainable")), dtype_name(l->weight.dtype),
                     (unsigned long long)l->weight.numel, l->trainable);
        seen[l - p->params->p]++;
        n++;
    }
    for (int i = 0; i < p->params->n; i++) {
        if (seen[i] != p->params->p[i].copies)
            fail_msg("%s: %s: %llu in the model, %llu planned", path, p->params->p[i].name, (unsigned long long)seen[i],
                     (unsigned long long)p->params->p[i].copies);
        copies += p->params->p[i].copies;
    }
    assert_int_equal(n, copies);
}

static void one_fixture(const char *path)
{
    gckpt_err err;
    char *text = gckpt_read_file(path, 1 << 22, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *fx = gckpt_json_parse(path, text, &err);
    free(text);
    if (!fx) fail_msg("%s", err.msg);
    gckpt_plan_request q;
    uint32_t every = 0;
    request_of(fx, &q, &every);
    gckpt_plan p;
    if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.recommended, 0);
    const gckpt_entry *e = &p.entries[0];

    /* the lines printed today are the lines that ran */
    char *snip = printed_snippet(&p);
    const char *ran = cJSON_GetObjectItem(fx, "snippet")->valuestring;
    if (strcmp(snip, ran)) fail_msg("%s: the printed lines differ from those run:\n%s---\n%s", path, snip, ran);
    free(snip);

    /* the model's dtype: fp32 master weights unless pure bf16 (LoRA / QLoRA: per parameter) */
    const cJSON *params = cJSON_GetObjectItem(fx, "parameters");
    if (!params)
        assert_string_equal(cJSON_GetObjectItem(fx, "model_dtype")->valuestring,
                            p.req.precision == GCKPT_BF16 ? "bfloat16" : "float32");
    else
        check_parameters(path, params, &p);
    /* the checkpointed layers */
    uint64_t want[64];
    size_t nl = gckpt_checkpointed_layers(e->every_n, p.model.layers, want, 64);
    const cJSON *got = cJSON_GetObjectItem(fx, "checkpointed_layers");
    assert_int_equal((size_t)cJSON_GetArraySize(got), nl);
    for (size_t i = 0; i < nl; i++) assert_int_equal(cJSON_GetArrayItem(got, (int)i)->valueint, want[i]);
    /* every parameter's optimizer states */
    const cJSON *st, *states = cJSON_GetObjectItem(fx, "optimizer_states");
    uint64_t nparams = 0, trainable = 0;
    cJSON_ArrayForEach(st, states) {
        check_states(st->string, st, gckpt_params_of(p.params, tensor_of(p.recipe, st->string)));
        nparams++;
    }
    for (int i = 0; i < p.params->n; i++) trainable += p.params->p[i].trainable ? p.params->p[i].copies : 0;
    assert_int_equal(nparams, trainable); /* full: embed, norm, lm_head and 9 per block */
    gckpt_plan_free(&p);
    cJSON_Delete(fx);
}

static int fixtures_in(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json") || !strcmp(de->d_name, "tiny-llama.json")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        one_fixture(path);
        n++;
    }
    closedir(d);
    return n;
}

static void fixtures(void **state)
{
    (void)state;
    assert_int_equal(fixtures_in(DIR_), 5);
}

static void peft_fixtures(void **state)
{
    (void)state;
    assert_int_equal(fixtures_in(GCKPT_TEST_DATA "/trainer-peft"), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(fixtures), cmocka_unit_test(peft_fixtures)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
