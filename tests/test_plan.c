/* Plans: JSON against reports/schema/plan.schema.json, round trip, recommendation,
 * Pareto frontier, budgets and batch splits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gckpt/util/jsonget.h"
#include "gckpt/planner/plan.h"
#include "gckpt/core/plan_read.h"
#include "schema_check.h"

static cJSON *schema;

static gckpt_plan_request req(const char *model, uint64_t seq)
{
    gckpt_plan_request q = {.seq = seq, .micro_batches = {1, 2}, .n_micro = 2, .grad_accum = 1,
                            .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW,
                            .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05};
    snprintf(q.model_ref, sizeof q.model_ref, "%s", model);
    snprintf(q.gpu_ref, sizeof q.gpu_ref, "h100-sxm-80gb");
    return q;
}

static cJSON *roundtrip(const gckpt_plan *p)
{
    cJSON *j = gckpt_plan_to_json(p, true);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    gckpt_err err;
    cJSON *back = gckpt_json_parse("plan.json", text, &err);
    free(text);
    if (!back) fail_msg("%s", err.msg);
    return back;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(it)) fail_msg("field %s missing", k);
    return it->valuedouble;
}

/* Mixture of experts: inputs.moe records the routing assumption; under grouped_mm the
 * plan does not depend on it (FINDINGS R-MOE-3: measured, tests/data/hf-moe); the experts'
 * forward FLOPs per token are the router's 2 h E plus top_k experts' 2 x 3 h Im. */
static void moe_plans(void **state)
{
    (void)state;
    gckpt_plan_request q = req("olmoe-1b-7b", 512);
    q.every_n = (uint32_t[]){0, 1, 4};
    q.n_every = 3;
    gckpt_plan a, b;
    gckpt_err err;
    if (!gckpt_plan_run(&q, &a, &err)) fail_msg("%s", err.msg);
    q.moe_imbalance = 2;
    if (!gckpt_plan_run(&q, &b, &err)) fail_msg("%s", err.msg);
    cJSON *ja = roundtrip(&a), *jb = roundtrip(&b);
    char why[512];
    if (!schema_check(schema, ja, why, sizeof why) || !schema_check(schema, jb, why, sizeof why)) fail_msg("%s", why);
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ja, "inputs"), "moe");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(jb, "inputs"), "moe");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ma, "routing")->valuestring, "balanced");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(mb, "routing")->valuestring, "imbalanced");
    assert_true(num(ma, "imbalance") == 1 && num(mb, "imbalance") == 2 && num(ma, "experts") == 64);
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++)
        assert_true(a.entries[i].r.peak_bytes == b.entries[i].r.peak_bytes && a.entries[i].r.step_s == b.entries[i].r.step_s);
    assert_null(cJSON_GetObjectItemCaseSensitive(ma, "router_aux_loss_coef"));
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    gckpt_plan_free(&a);
    gckpt_plan_free(&b);
    /* the bound is checked against the model: at most every token to one expert (64 / 8) */
    q.moe_imbalance = 8.5;
    assert_false(gckpt_plan_run(&q, &a, &err));
    assert_non_null(strstr(err.msg, "--moe-imbalance: 8.5 is outside [1, 8]"));
    gckpt_plan_request d = req("llama-3.2-1b", 512);
    d.moe_imbalance = 2;
    assert_false(gckpt_plan_run(&d, &a, &err));
    assert_non_null(strstr(err.msg, "has no experts"));
    /* the load-balancing loss (config output_router_logits: models/olmoe-1b-7b.json with
     * it on) is recorded, off by default */
    q = req(GCKPT_TEST_DATA "/configs/olmoe-aux.json", 512);
    if (!gckpt_plan_run(&q, &a, &err)) fail_msg("%s", err.msg);
    ja = roundtrip(&a);
    if (!schema_check(schema, ja, why, sizeof why)) fail_msg("%s", why);
    ma = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ja, "inputs"), "moe");
    assert_true(num(ma, "router_aux_loss_coef") == 0.01);
    cJSON_Delete(ja);
    gckpt_plan_free(&a);
    /* expert FLOPs: the MoE block's GEMMs per token, forward */
    gckpt_model m;
    assert_true(gckpt_model_load("qwen3-30b-a3b", &m, &err));
    static gckpt_recipe r;
    gckpt_recipe_build(&m, GCKPT_BF16, GCKPT_SDPA, &r);
    double f = 0;
    for (int i = r.sec_begin[GCKPT_SEC_BLOCK]; i < r.sec_end[GCKPT_SEC_BLOCK]; i++)
        if (!strncmp(r.op[i].name, "mlp.", 4)) f += r.op[i].fT;
    double h = (double)m.hidden, E = (double)m.experts, k = (double)m.top_k, Im = (double)m.expert_inter;
    assert_true(f == 2 * h * E + k * 2 * 3 * h * Im);
}

static void schema_and_roundtrip(void **state)
{
    (void)state;
    const char *models[] = {"gpt2", "llama-3.2-1b", "qwen2.5-0.5b"};
    for (int i = 0; i < 3; i++) {
        gckpt_plan_request q = req(models[i], 512);
        gckpt_plan p;
        gckpt_err err;
        if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
        cJSON *j = roundtrip(&p);
        char why[512];
        if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s: %s", models[i], why);
        const cJSON *es = cJSON_GetObjectItemCaseSensitive(j, "entries");
        assert_int_equal((size_t)cJSON_GetArraySize(es), p.n);
        for (size_t k = 0; k < p.n; k++) {
            const gckpt_entry *e = &p.entries[k];
            const cJSON *x = cJSON_GetArrayItem(es, (int)k);
            const cJSON *mem = cJSON_GetObjectItemCaseSensitive(x, "memory");
            assert_int_equal((uint64_t)num(mem, "peak_bytes"), e->r.peak_bytes);
            assert_int_equal((uint64_t)num(mem, "device_peak_bytes"), e->r.device_peak_bytes);
            assert_int_equal((uint64_t)num(mem, "host_pinned_bytes"), e->r.host_pinned_bytes);
            assert_int_equal((uint32_t)num(x, "every_n_layers"), e->every_n);
            assert_int_equal((uint64_t)num(x, "micro_batch"), e->micro_batch);
            assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "offload")), e->offload);
            assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "fits")), e->fits);
            const cJSON *cl = cJSON_GetObjectItemCaseSensitive(x, "checkpointed_layers");
            assert_int_equal((uint64_t)cJSON_GetArraySize(cl), gckpt_checkpointed_count(e->every_n, p.model.layers));
            int idx = 0;
            const cJSON *v;
            cJSON_ArrayForEach(v, cl) assert_int_equal((uint64_t)v->valuedouble, (uint64_t)idx++ * e->every_n);
            const cJSON *bd = cJSON_GetObjectItemCaseSensitive(mem, "breakdown");
            double sum = 0;
            cJSON_ArrayForEach(v, bd) sum += v->valuedouble;
            assert_int_equal((uint64_t)sum, e->r.peak_bytes);
            /* the recommended entry carries its timeline; its maximum is the peak */
            const cJSON *tl = cJSON_GetObjectItemCaseSensitive(x, "timeline");
            if ((long)k == p.recommended) {
                assert_non_null(tl);
                double mx = 0, prev = -1;
                cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(tl, "allocated_bytes")) if (v->valuedouble > mx) mx = v->valuedouble;
                cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(tl, "seconds")) {
                    assert_true(v->valuedouble >= prev);
                    prev = v->valuedouble;
                }
                assert_int_equal((uint64_t)mx, e->r.peak_bytes);
            } else {
                assert_null(tl);
            }
        }
        /* the config travels with the plan */
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "inputs"), "model"), "config");
        char *ct = cJSON_PrintUnformatted(cfg);
        gckpt_model m2;
        assert_true(gckpt_model_parse("embedded", ct, &m2, &err));
        free(ct);
        assert_int_equal(gckpt_param_count(&m2), gckpt_param_count(&p.model));
        cJSON_Delete(j);
        gckpt_plan_free(&p);
    }
}

/* A plan of a Hub model id records where its config came from (inputs.model.hub), the
 * schema takes it, and the plan reader reads plans with it and without it and refuses a
 * malformed one naming the field. */
static void hub_source(void **state)
{
    (void)state;
    static const char sha[] = "0123456789abcdef0123456789abcdef01234567";
    gckpt_plan_request q = req("gpt2", 256);
    q.hub = (gckpt_hub_source){.id = "openai-community/gpt2", .revision = "main", .downloaded = true};
    memcpy(q.hub.commit, sha, sizeof q.hub.commit);
    gckpt_plan p, plain;
    gckpt_err err;
    gckpt_plan_request q0 = req("gpt2", 256);
    if (!gckpt_plan_run(&q, &p, &err) || !gckpt_plan_run(&q0, &plain, &err)) fail_msg("%s", err.msg);
    assert_string_equal(p.model.name, "openai-community/gpt2");
    cJSON *j = roundtrip(&p), *j0 = roundtrip(&plain);
    char why[512];
    if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s", why);
    const cJSON *hub = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "inputs"), "model"), "hub");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(hub, "id")->valuestring, "openai-community/gpt2");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(hub, "revision")->valuestring, "main");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(hub, "commit")->valuestring, sha);
    assert_null(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j0, "inputs"), "model"), "hub"));

    gckpt_plan_file pf;
    char *text = cJSON_Print(j);
    if (!gckpt_plan_parse("hub.json", text, &pf, &err)) fail_msg("%s", err.msg);
    free(text);
    assert_string_equal(pf.hub.id, "openai-community/gpt2");
    assert_string_equal(pf.hub.revision, "main");
    assert_string_equal(pf.hub.commit, sha);
    assert_string_equal(pf.model.name, "openai-community/gpt2");
    gckpt_plan_file_free(&pf);
    text = cJSON_Print(j0);
    if (!gckpt_plan_parse("plain.json", text, &pf, &err)) fail_msg("%s", err.msg);
    free(text);
    assert_string_equal(pf.hub.id, "");
    gckpt_plan_file_free(&pf);

    static const struct { const char *key, *value, *want; } bad[] = {
        {"commit", "0123", "hub.json: field 'inputs.model.hub.commit' = \"0123\" is not a commit sha"},
        {"id", "gpt2", "hub.json: field 'inputs.model.hub.id' = \"gpt2\" is not a Hub model id"},
        {"revision", "../x", "hub.json: field 'inputs.model.hub.revision' = \"../x\" is not a branch"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *b = cJSON_Duplicate(j, true);
        cJSON *h = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "inputs"), "model"), "hub");
        cJSON_ReplaceItemInObject(h, bad[i].key, cJSON_CreateString(bad[i].value));
        if (i == 0 && schema_check(schema, b, why, sizeof why)) fail_msg("a short commit passed the schema");
        text = cJSON_Print(b);
        assert_false(gckpt_plan_parse("hub.json", text, &pf, &err));
        if (!strstr(err.msg, bad[i].want)) fail_msg("'%s' not in: %s", bad[i].want, err.msg);
        gckpt_plan_file_free(&pf);
        free(text);
        cJSON_Delete(b);
    }
    cJSON_Delete(j);
    cJSON_Delete(j0);
    gckpt_plan_free(&p);
    gckpt_plan_free(&plain);
}

static void schema_rejects(void **state)
{
    (void)state;
    gckpt_plan_request q = req("gpt2", 256);
    gckpt_plan p;
    gckpt_err err;
    assert_true(gckpt_plan_run(&q, &p, &err));
    static const char *mutations[] = {"drop-entries", "bad-precision", "negative-bytes", "extra-field", "string-seq", "bad-schema"};
    for (int i = 0; i < 6; i++) {
        cJSON *j = roundtrip(&p);
        cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "inputs");
        cJSON *e0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "entries"), 0);
        switch (i) {
        case 0: cJSON_DeleteItemFromObject(j, "entries"); break;
        case 1: cJSON_ReplaceItemInObject(in, "precision", cJSON_CreateString("fp8")); break;
        case 2: cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(e0, "memory"), "peak_bytes", cJSON_CreateNumber(-1)); break;
        case 3: cJSON_AddNumberToObject(e0, "surprise", 1); break;
        case 4: cJSON_ReplaceItemInObject(in, "seq", cJSON_CreateString("512")); break;
        case 5: cJSON_ReplaceItemInObject(j, "schema", cJSON_CreateString("gckpt.plan/3")); break;
        }
        char why[512];
        if (schema_check(schema, j, why, sizeof why)) fail_msg("mutation %s passed the schema", mutations[i]);
        cJSON_Delete(j);
    }
    gckpt_plan_free(&p);
}

static void recommendation(void **state)
{
    (void)state;
    gckpt_plan_request q = req("llama-3.2-1b", 2048);
    q.micro_batches[2] = 4;
    q.n_micro = 3;
    gckpt_plan p;
    gckpt_err err;
    assert_true(gckpt_plan_run(&q, &p, &err));
    assert_int_equal(p.usable_bytes, (uint64_t)((double)p.dev.memory_bytes * 0.95));
    long best = -1, small = -1;
    for (size_t i = 0; i < p.n; i++) {
        const gckpt_entry *e = &p.entries[i];
        assert_int_equal(e->fits, e->r.device_peak_bytes <= p.usable_bytes);
        if (e->fits && (best < 0 || e->r.tokens_per_s > p.entries[best].r.tokens_per_s)) best = (long)i;
        if (small < 0 || e->r.device_peak_bytes < p.entries[small].r.device_peak_bytes) small = (long)i;
        /* nothing beats a Pareto entry on both memory and throughput */
        if (e->pareto)
            for (size_t k = 0; k < p.n; k++) {
                const gckpt_entry *o = &p.entries[k];
                assert_false(o->r.device_peak_bytes < e->r.device_peak_bytes && o->r.tokens_per_s > e->r.tokens_per_s);
            }
    }
    assert_true(best >= 0);
    /* the rule: of the entries that fit within the profile's ratio band of the fastest (both
     * ways round) with its offload, the smallest device peak (tools/step_time_pairs.py's band, read here from the
     * profile as data) */
    const gckpt_code_base_eff *cb = &p.dev.code_base[q.code_base];
    long want = best;
    for (size_t i = 0; i < p.n; i++) {
        const gckpt_entry *e = &p.entries[i];
        double r = e->r.tokens_per_s / p.entries[best].r.tokens_per_s;
        if (e->fits && e->offload == p.entries[best].offload && r >= cb->ratio_p10 && r <= cb->ratio_p90 &&
            1 / r >= cb->ratio_p10 && 1 / r <= cb->ratio_p90 && e->r.device_peak_bytes < p.entries[want].r.device_peak_bytes)
            want = (long)i;
    }
    assert_true(p.entries[best].r.tokens_per_s == p.entries[p.fastest].r.tokens_per_s);
    assert_int_equal(p.entries[want].r.device_peak_bytes, p.entries[p.recommended].r.device_peak_bytes);
    assert_true(p.entries[p.recommended].fits);
    assert_int_equal(p.entries[small].r.device_peak_bytes, p.entries[p.smallest].r.device_peak_bytes);
    gckpt_plan_free(&p);

    /* a budget nothing fits: no recommendation, the smallest entry is named */
    q.budget_bytes = 1u << 30;
    assert_true(gckpt_plan_run(&q, &p, &err));
    assert_int_equal(p.recommended, -1);
    assert_true(p.smallest >= 0);
    for (size_t i = 0; i < p.n; i++) assert_false(p.entries[i].fits);
    cJSON *j = roundtrip(&p);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "recommended")));
    char why[512];
    if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s", why);
    cJSON_Delete(j);
    gckpt_plan_free(&p);
}

static void batch_splits(void **state)
{
    (void)state;
    gckpt_plan_request q = req("gpt2", 1024);
    q.micro_batches[0] = 1;
    q.micro_batches[1] = 3;
    q.micro_batches[2] = 4;
    q.micro_batches[3] = 8;
    q.n_micro = 4;
    q.global_batch = 8;
    gckpt_plan p;
    gckpt_err err;
    assert_true(gckpt_plan_run(&q, &p, &err));
    bool seen3 = false;
    for (size_t i = 0; i < p.n; i++) {
        assert_int_equal(p.entries[i].micro_batch * p.entries[i].grad_accum, 8);
        seen3 |= p.entries[i].micro_batch == 3;
    }
    assert_false(seen3); /* 3 does not divide 8 */
    gckpt_plan_free(&p);
    q.global_batch = 7;
    q.micro_batches[0] = 2;
    q.n_micro = 1;
    assert_false(gckpt_plan_run(&q, &p, &err));
    assert_non_null(strstr(err.msg, "--global-batch"));
    /* every_n beyond the model's depth is refused */
    q = req("gpt2", 128);
    uint32_t ev[] = {0, 13};
    q.every_n = ev;
    q.n_every = 2;
    assert_false(gckpt_plan_run(&q, &p, &err));
    assert_non_null(strstr(err.msg, "exceeds the model's 12 layers"));
}

/* Plans per rank of several GPUs (issue 14): valid against the schema with inputs.layout,
 * each entry's breakdown sums to its peak and global_batch = micro x accumulation x ranks;
 * the persistent part of ZeRO-3 and FSDP2 shrinks with the ranks, DDP's does not; the plan
 * reader (gckpt-run) reads the layout back as planned (the DeepSpeed limits resolved). */
/* An untied shipped model of hidden 2048 (a tied one: tied_plans below). */
#define UNTIED "pythia-1.4b"

/* The timeline is the step the entry's numbers come from: under every parallel mode, on
 * every entry, its highest point is the entry's planned peak. (Once it missed DDP's
 * find_unused_parameters maps, which the evaluators add with every_n off, and under ZeRO-1/2
 * drew rank 0 where the entry is the busiest rank's.) */
static void timeline_peaks(void **state)
{
    (void)state;
    enum { MAXP = 1000 };
    double *ts = malloc(sizeof *ts * MAXP), *bs = malloc(sizeof *bs * MAXP);
    uint8_t *ph = malloc(MAXP);
    assert_true(ts && bs && ph);
    for (int run = 0; run < 2 * GCKPT_NPAR; run++) {
        int mode = run / 2;
        gckpt_plan_request q = req("llama-3.2-1b", 512);
        if (run % 2) q.grad_accum = 3; /* a later micro-step, repeated */
        else q.precision = GCKPT_FP32;
        if (mode != GCKPT_PAR_NONE) q.layout = (gckpt_layout){4, 1, (uint8_t)mode};
        gckpt_plan p;
        gckpt_err err;
        if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s: %s", gckpt_parallel_names[mode], err.msg);
        for (size_t i = 0; i < p.n; i++) {
            const gckpt_entry *e = &p.entries[i];
            size_t np = gckpt_plan_timeline(&p, e, ts, bs, ph, MAXP);
            assert_true(np > 0);
            double mx = 0;
            for (size_t k = 0; k < np; k++) mx = bs[k] > mx ? bs[k] : mx;
            if ((uint64_t)mx != e->r.peak_bytes)
                fail_msg("%s, every_n %u, offload %d, micro-batch %llu, grad_accum %llu: the timeline's peak %.0f, the "
                         "entry's %llu",
                         gckpt_parallel_names[mode], e->every_n, e->offload, (unsigned long long)e->micro_batch,
                         (unsigned long long)e->grad_accum, mx, (unsigned long long)e->r.peak_bytes);
        }
        gckpt_plan_free(&p);
    }
    free(ts);
    free(bs);
    free(ph);
}

/* A mode's words in the plan (the header's title, the snippet's TrainingArguments) come from its
 * row in the mode table (gckpt_par_mode.title, trainer, zero_stage): every mode's header names its
 * row's title and its arguments are its trainer's; a row without them is refused with one line
 * naming the mode and the table (before, planner/plan_parallel.c's own switch printed "one GPU"
 * and no arguments for a mode it had no case for). */
static void mode_words(void **state)
{
    (void)state;
    gckpt_err err;
    for (int mode = GCKPT_PAR_DDP; mode < GCKPT_NPAR; mode++) {
        const gckpt_par_mode *d = gckpt_par_mode_of((unsigned)mode);
        if (!gckpt_plan_mode_ok(d, gckpt_parallel_names[mode], &err)) fail_msg("%s", err.msg);
        gckpt_plan_request q = req(UNTIED, 512);
        q.layout = (gckpt_layout){2, 1, (uint8_t)mode};
        gckpt_plan p;
        if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s: %s", gckpt_parallel_names[mode], err.msg);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        assert_non_null(f);
        gckpt_plan_parallel_header(&p, f);
        fclose(f);
        if (!strstr(buf, d->title)) fail_msg("%s: the header does not name its row's title: %s", gckpt_parallel_names[mode], buf);
        free(buf);
        cJSON *args = cJSON_CreateObject();
        gckpt_plan_parallel_args(&p, args);
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(args, "deepspeed");
        switch ((gckpt_trainer_args)d->trainer) {
        case GCKPT_TRAINER_DDP: assert_null(args->child); break;
        case GCKPT_TRAINER_FSDP2:
            assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "fsdp")));
            assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(args, "fsdp_config"),
                                                             "version")->valueint, 2);
            break;
        case GCKPT_TRAINER_DEEPSPEED:
            assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ds, "zero_optimization"),
                                                             "stage")->valueint, d->zero_stage);
            break;
        default: fail_msg("%s: no trainer", gckpt_parallel_names[mode]);
        }
        cJSON_Delete(args);
        gckpt_plan_free(&p);
    }
    /* rows that say nothing, or a DeepSpeed row without its stage: refused, naming the table */
    const gckpt_par_mode bare = {.multi = true}, untitled = {.multi = true, .trainer = GCKPT_TRAINER_DDP},
                         stageless = {.multi = true, .title = "t", .trainer = GCKPT_TRAINER_DEEPSPEED};
    const gckpt_par_mode *bad[] = {&bare, &untitled, &stageless};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        err.msg[0] = 0;
        assert_false(gckpt_plan_mode_ok(bad[k], "new", &err));
        assert_non_null(strstr(err.msg, "--parallel new"));
        assert_non_null(strstr(err.msg, "core/parallel_modes.c"));
    }
    assert_true(gckpt_plan_mode_ok(gckpt_par_mode_of(GCKPT_PAR_NONE), "none", &err)); /* one GPU: no words needed */
}

static void parallel_plans(void **state)
{
    (void)state;
    uint64_t weights[GCKPT_NPAR][2];
    for (int mode = GCKPT_PAR_DDP; mode < GCKPT_NPAR; mode++)
        for (int k = 0; k < 2; k++) {
            gckpt_plan_request q = req(UNTIED, 512);
            q.grad_accum = 2;
            q.layout = (gckpt_layout){k ? 8 : 2, 1, (uint8_t)mode};
            gckpt_plan p;
            gckpt_err err;
            if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s: %s", gckpt_parallel_names[mode], err.msg);
            cJSON *j = roundtrip(&p);
            char why[512];
            if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s: %s", gckpt_parallel_names[mode], why);
            const cJSON *lay = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "inputs"), "layout");
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(lay, "parallel")->valuestring, gckpt_parallel_names[mode]);
            const cJSON *e0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "entries"), 0);
            assert_int_equal(cJSON_GetObjectItemCaseSensitive(e0, "global_batch")->valuedouble, 2 * (k ? 8 : 2));
            for (size_t i = 0; i < p.n; i++) {
                int64_t sum = 0;
                for (int c = 0; c < GCKPT_NCOMP; c++) sum += p.entries[i].r.breakdown[c];
                assert_int_equal(sum, (int64_t)p.entries[i].r.peak_bytes);
            }
            weights[mode][k] = (uint64_t)p.entries[0].r.breakdown[GCKPT_C_WEIGHTS] +
                               (uint64_t)p.entries[0].r.breakdown[GCKPT_C_OPTIMIZER];
            char *text = cJSON_Print(j);
            cJSON_Delete(j);
            gckpt_plan_file pf;
            if (!gckpt_plan_parse("plan.json", text, &pf, &err)) fail_msg("%s: %s", gckpt_parallel_names[mode], err.msg);
            assert_int_equal(pf.layout.mode, mode);
            assert_int_equal(gckpt_layout_world(&pf.layout), k ? 8 : 2);
            assert_int_equal(gckpt_ds_reduce_bucket(&p.model, &pf.layout), gckpt_ds_reduce_bucket(&p.model, &q.layout));
            assert_int_equal(gckpt_ds_persistence_threshold(&p.model, &pf.layout),
                             gckpt_ds_persistence_threshold(&p.model, &q.layout));
            gckpt_plan_file_free(&pf);
            free(text);
            gckpt_plan_free(&p);
        }
    assert_int_equal(weights[GCKPT_PAR_DDP][0], weights[GCKPT_PAR_DDP][1]);
    /* ZeRO-2 with overlap_comm: the plan records it (schema), the reader gets it back, and the
     * first micro-step's backward holds a second bucket of reduce_bucket_size bf16 elements */
    {
        uint64_t peak[2];
        for (int ov = 0; ov < 2; ov++) {
            gckpt_plan_request q = req("llama-3.2-1b", 512);
            q.layout = (gckpt_layout){8, 1, GCKPT_PAR_ZERO2, {0}};
            q.layout.ds.overlap_comm = ov;
            gckpt_plan p;
            gckpt_err err;
            if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
            cJSON *j = roundtrip(&p);
            char why[512];
            if (!schema_check(schema, j, why, sizeof why)) fail_msg("zero2 overlap_comm %d: %s", ov, why);
            char *text = cJSON_Print(j);
            cJSON_Delete(j);
            gckpt_plan_file pf;
            if (!gckpt_plan_parse("plan.json", text, &pf, &err)) fail_msg("%s", err.msg);
            assert_int_equal(pf.layout.ds.overlap_comm, ov);
            assert_int_equal(gckpt_ds_ipg_buckets(&pf.layout), ov ? 2 : 1);
            gckpt_plan_file_free(&pf);
            free(text);
            peak[ov] = p.entries[0].r.peak_bytes;
            gckpt_plan_free(&p);
        }
        assert_true(peak[1] >= peak[0] && peak[1] <= peak[0] + 2 * 2048 * 2048);
    }
    /* DeepSpeed's limits: "auto" as the Trainer resolves it (hidden 2048), or a ds_config's */
    for (int set = 0; set < 2; set++) {
        gckpt_plan_request q = req(UNTIED, 512);
        q.layout = (gckpt_layout){8, 1, GCKPT_PAR_ZERO3, {0}};
        if (set) q.layout.ds = (gckpt_ds_limits){GCKPT_DS_REDUCE_BUCKET | GCKPT_DS_PERSISTENCE, 1000, 0, 0, 0};
        gckpt_plan p;
        gckpt_err err;
        if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
        cJSON *j = gckpt_plan_to_json(&p, false);
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "inputs"), "layout"), "deepspeed");
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(ds, "reduce_bucket_size")->valuedouble, set ? 1000 : 2048 * 2048);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(ds, "stage3_param_persistence_threshold")->valuedouble,
                         set ? 0 : 20480);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(ds, "stage3_max_live_parameters")->valuedouble, 1000000000);
        cJSON_Delete(j);
        gckpt_plan_free(&p);
    }
    /* ZeRO-3 with offload_optimizer and offload_param, ZeRO-1/2 with offload_optimizer (a
     * ds_config's) and FSDP2's CPUOffloadPolicy (FINDINGS R-OFFLOAD-5 to R-OFFLOAD-8): the plan records it, warns
     * that it is unverified, and keeps no optimizer state on the device */
    static const gckpt_parallel offloaded[] = {GCKPT_PAR_FSDP, GCKPT_PAR_ZERO3, GCKPT_PAR_ZERO1, GCKPT_PAR_ZERO2};
    for (int k = 0; k < 4; k++) {
        gckpt_parallel mode = offloaded[k];
        bool z12 = mode == GCKPT_PAR_ZERO1 || mode == GCKPT_PAR_ZERO2;
        gckpt_plan_request q = req(UNTIED, 512);
        q.layout = (gckpt_layout){8, 1, (uint8_t)mode, {0}};
        q.layout.offload = GCKPT_OFFLOAD_OPTIMIZER | (z12 ? 0 : GCKPT_OFFLOAD_PARAM);
        gckpt_plan p;
        gckpt_err err;
        if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
        bool warned = false;
        for (size_t w = 0; w < p.n_warnings; w++) warned |= !strcmp(p.warnings[w].code, "parallel_offload_unverified");
        assert_true(warned);
        for (size_t i = 0; i < p.n; i++) {
            assert_int_equal(p.entries[i].r.breakdown[GCKPT_C_OPTIMIZER], 0);
            assert_true(p.entries[i].r.host_pageable_bytes > 0);
            assert_true(p.entries[i].r.host_pinned_bytes >= p.entries[i].r.host_pageable_bytes / 2);
        }
        cJSON *j = gckpt_plan_to_json(&p, false);
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "inputs"), "layout"), "offload");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(off, "optimizer")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(off, "param")) == !z12);
        cJSON_Delete(j);
        j = roundtrip(&p); /* the layout's offload and host_pageable_bytes are in the schema */
        char why[512];
        if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s offload: %s", gckpt_parallel_names[mode], why);
        cJSON_Delete(j);
        gckpt_plan_free(&p);
    }
    assert_true(weights[GCKPT_PAR_ZERO3][1] * 3 < weights[GCKPT_PAR_ZERO3][0]);
    assert_true(weights[GCKPT_PAR_FSDP][1] * 3 < weights[GCKPT_PAR_FSDP][0]);
}

/* A tied head (Llama-3.2-1B) under FSDP2, ZeRO-2 and ZeRO-3 (FSDP2 / ZeRO-3 refused before):
 * planned, valid against the schema, and gckpt-run's reader takes the plan back. */
static void tied_plans(void **state)
{
    (void)state;
    static const gckpt_parallel modes[] = {GCKPT_PAR_FSDP, GCKPT_PAR_ZERO3, GCKPT_PAR_ZERO2};
    for (int k = 0; k < 3; k++) {
        gckpt_plan_request q = req("llama-3.2-1b", 512);
        q.layout = (gckpt_layout){8, 1, (uint8_t)modes[k], {0}};
        gckpt_plan p;
        gckpt_err err;
        if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s: %s", gckpt_parallel_names[modes[k]], err.msg);
        cJSON *j = roundtrip(&p);
        char why[512];
        if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s: %s", gckpt_parallel_names[modes[k]], why);
        char *json = cJSON_Print(j);
        cJSON_Delete(j);
        gckpt_plan_file pf;
        if (!gckpt_plan_parse("plan.json", json, &pf, &err)) fail_msg("%s: %s", gckpt_parallel_names[modes[k]], err.msg);
        free(json);
        assert_true(pf.model.tied);
        assert_int_equal(pf.layout.mode, modes[k]);
        gckpt_plan_file_free(&pf);
        gckpt_plan_free(&p);
    }
}

/* LoRA and QLoRA plans (issue 12): valid against the schema, the breakdown (with QLoRA's
 * quantized_weights and quant_stats) sums to the peak, and the plan reader gives back the
 * method's every input and every entry's peak. */
static void peft_plans(void **state)
{
    (void)state;
    for (int m = GCKPT_METHOD_LORA; m <= GCKPT_METHOD_QLORA; m++) {
        gckpt_plan_request q = req("llama-3.2-1b", 512);
        gckpt_peft_default((gckpt_method)m, &q.peft);
        q.peft.rank = 8;
        q.peft.alpha = 24;
        q.peft.targets = (1u << GCKPT_LT_Q) | (1u << GCKPT_LT_DOWN);
        q.peft.modules_to_save = GCKPT_MTS_LM_HEAD;
        if (m == GCKPT_METHOD_QLORA) {
            q.peft.quant = GCKPT_QUANT_FP4;
            q.peft.double_quant = false;
            q.peft.compute_dtype = GCKPT_DT_F16;
            q.optimizer = GCKPT_PAGED_ADAMW_32BIT; /* lora_B of down_proj... [2048, 8] is under 1e5: none paged */
            q.peft.rank = 64;                      /* down_proj's lora_A [64, 8192]: paged */
        }
        gckpt_plan p;
        gckpt_err err;
        if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
        cJSON *j = roundtrip(&p);
        char why[512];
        if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s: %s", gckpt_method_names[m], why);
        char *text = cJSON_Print(j);
        cJSON_Delete(j);
        gckpt_plan_file pf;
        if (!gckpt_plan_parse("plan.json", text, &pf, &err)) fail_msg("%s", err.msg);
        free(text);
        assert_int_equal(pf.peft.method, m);
        assert_int_equal(pf.peft.rank, q.peft.rank);
        assert_int_equal(pf.optimizer, q.optimizer);
        assert_true(pf.peft.alpha == 24 && pf.peft.dropout == 0.05);
        assert_int_equal(pf.peft.targets, q.peft.targets);
        assert_int_equal(pf.peft.modules_to_save, GCKPT_MTS_LM_HEAD);
        assert_int_equal(pf.peft.quant, q.peft.quant);
        assert_int_equal(pf.peft.double_quant, q.peft.double_quant);
        assert_int_equal(pf.peft.compute_dtype, q.peft.compute_dtype);
        assert_int_equal(pf.n, p.n);
        for (size_t k = 0; k < p.n; k++) {
            assert_int_equal(pf.entries[k].r.peak_bytes, p.entries[k].r.peak_bytes);
            int64_t quant = pf.entries[k].r.breakdown[GCKPT_C_QUANT_WEIGHTS] + pf.entries[k].r.breakdown[GCKPT_C_QUANT_STATS];
            assert_true(m == GCKPT_METHOD_QLORA ? quant > 0 : quant == 0);
            int64_t paged = pf.entries[k].r.breakdown[GCKPT_C_PAGED_STATES];
            assert_true(m == GCKPT_METHOD_QLORA ? paged == (int64_t)p.params->paged_bytes && paged > 0 : paged == 0);
        }
        gckpt_plan_file_free(&pf);
        gckpt_plan_free(&p);
    }
}

/* MFU, one definition (PaLM / torchtitan): llama-3.1-8b's 8,030,261,248 parameters (published)
 * less its 128256 x 4096 token embedding, 6 per token, plus 12 x 32 layers x 32 heads x 128 x seq;
 * HFU the FLOPs executed, the recompute's included; inputs.code_base, time.hfu and
 * time.step_s_range (the shipped h100 profile's fitted ratios) in the schema, code_base read
 * back from the plan. */
static void mfu_hfu_code_base(void **state)
{
    (void)state;
    gckpt_plan_request q = req("llama-3.1-8b", 1024);
    q.code_base = GCKPT_CB_FUSED;
    gckpt_plan p;
    gckpt_err err;
    if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
    cJSON *j = roundtrip(&p);
    char why[512];
    if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s", why);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(in, "code_base")->valuestring, "fused");
    const double per_token = 6.0 * (8030261248.0 - 128256.0 * 4096.0) + 12.0 * 32 * 32 * 128 * 1024;
    const double peak = p.dev.tflops_bf16 * 1e12;
    for (size_t k = 0; k < p.n; k++) {
        const gckpt_result *r = &p.entries[k].r;
        if (r->step_s <= 0) continue;
        double tokens = 1024.0 * (double)p.entries[k].micro_batch * (double)p.entries[k].grad_accum;
        double mfu = per_token * tokens / (r->step_s * peak), hfu = r->hw_flops / (r->step_s * peak);
        assert_true(fabs(r->mfu - mfu) <= 1e-12 * mfu && fabs(r->hfu - hfu) <= 1e-12 * hfu);
        /* a checkpointed layer's forward runs twice */
        assert_true(p.entries[k].every_n ? r->hw_flops > r->model_flops : r->hw_flops == r->model_flops);
        /* the range: step_s times the code base's held-out ratios */
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "entries"),
                                                                             (int)k), "time");
        const cJSON *rg = cJSON_GetObjectItemCaseSensitive(t, "step_s_range");
        const gckpt_code_base_eff *cb = &p.dev.code_base[GCKPT_CB_FUSED];
        assert_true(p.dev.has_code_bases && cb->step_ratio_p10 < 1 && cb->step_ratio_p90 > 1);
        assert_int_equal(cJSON_GetArraySize(rg), 2);
        double lo = r->step_s * cb->step_ratio_p10, hi = r->step_s * cb->step_ratio_p90;
        assert_true(fabs(cJSON_GetArrayItem(rg, 0)->valuedouble - lo) <= 1e-12 * lo &&
                    fabs(cJSON_GetArrayItem(rg, 1)->valuedouble - hi) <= 1e-12 * hi);
    }
    char *text = cJSON_PrintUnformatted(j);
    gckpt_plan_file pf;
    if (!gckpt_plan_parse("plan.json", text, &pf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(pf.code_base, GCKPT_CB_FUSED);
    gckpt_plan_file_free(&pf);
    free(text);
    cJSON_Delete(j);
    gckpt_plan_free(&p);
}

/* The tie rule in closed form: two entries are tied when each one's tokens/s over the other's
 * lies in [p10, p90] and their offload is the same; the recommendation is the fastest that fits unless a tied one has more
 * headroom. Two entries, their tokens/s, peaks and the band. */
static void tie_rule(void **state)
{
    (void)state;
    assert_true(gckpt_time_tied(100, 95, 0.93, 1.08));   /* 1.053 and 0.95 inside */
    assert_false(gckpt_time_tied(100, 90, 0.93, 1.08));  /* 1.111 above p90 */
    assert_false(gckpt_time_tied(110, 100, 0.95, 1.2));  /* 1.1 inside, 0.909 below p10 */
    assert_true(gckpt_time_tied(104, 100, 0.95, 1.2));   /* 1.04 and 0.962 inside */
    assert_false(gckpt_time_tied(100.001, 100, 1, 1));   /* no band: only equal tokens/s */
    assert_true(gckpt_time_tied(100, 100, 1, 1));
    gckpt_entry es[2] = {0};
    gckpt_plan p;
    memset(&p, 0, sizeof p);
    p.entries = es;
    p.n = 2;
    p.target = GCKPT_TARGET_CUDA;
    p.req.code_base = GCKPT_CB_FUSED;
    for (int k = 0; k < GCKPT_NCODEBASE; k++) p.dev.code_base[k] = gckpt_code_base_neutral;
    p.dev.code_base[GCKPT_CB_FUSED].ratio_p10 = 0.93;
    p.dev.code_base[GCKPT_CB_FUSED].ratio_p90 = 1.08;
    static const struct { double tps0, tps1; uint64_t peak0, peak1; bool fits1, off1; gckpt_target t; long fastest, rec; } c[] = {
        {1000, 950, 70, 50, true, false, GCKPT_TARGET_CUDA, 0, 1},  /* 5.3% apart, 1 has more headroom */
        {1000, 900, 70, 50, true, false, GCKPT_TARGET_CUDA, 0, 0},  /* 11% apart: the fastest */
        {1000, 950, 50, 70, true, false, GCKPT_TARGET_CUDA, 0, 0},  /* tied, the fastest has more headroom */
        {1000, 950, 70, 50, false, false, GCKPT_TARGET_CUDA, 0, 0}, /* 1 does not fit */
        {1000, 950, 70, 50, true, false, GCKPT_TARGET_CPU, 0, 0},   /* no band on the CPU target */
        {950, 1000, 50, 70, true, false, GCKPT_TARGET_CUDA, 1, 0},  /* the other way round */
        {1000, 950, 70, 50, true, true, GCKPT_TARGET_CUDA, 0, 0},   /* 1 offloads, 0 does not: not tied */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        es[0].fits = true;
        es[0].r.tokens_per_s = c[i].tps0;
        es[0].r.device_peak_bytes = c[i].peak0;
        es[1].fits = c[i].fits1;
        es[1].r.tokens_per_s = c[i].tps1;
        es[1].r.device_peak_bytes = c[i].peak1;
        es[1].offload = c[i].off1;
        p.target = c[i].t;
        gckpt_plan_choose(&p);
        if (p.fastest != c[i].fastest || p.recommended != c[i].rec)
            fail_msg("case %zu: fastest %ld recommended %ld, want %ld %ld", i, p.fastest, p.recommended, c[i].fastest,
                     c[i].rec);
    }
}

/* A profile file: h200 with its code bases' ratio band removed (none: NULL) or set. */
static void band_profile(const char *path, const double *band)
{
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/../../devices/h200.json", 1 << 20, &err);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!j) fail_msg("h200.json");
    cJSON *cbs = cJSON_GetObjectItemCaseSensitive(j, "code_bases");
    for (int k = 0; k < GCKPT_NCODEBASE; k++) {
        cJSON *cb = cJSON_GetObjectItemCaseSensitive(cbs, gckpt_code_base_names[k]);
        cJSON_DeleteItemFromObjectCaseSensitive(cb, "ratio_p10");
        cJSON_DeleteItemFromObjectCaseSensitive(cb, "ratio_p90");
        if (band) {
            cJSON_AddNumberToObject(cb, "ratio_p10", band[0]);
            cJSON_AddNumberToObject(cb, "ratio_p90", band[1]);
        }
    }
    char *out = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    if (!f || fputs(out, f) < 0 || fclose(f)) fail_msg("cannot write %s", path);
    free(out);
    free(text);
    cJSON_Delete(j);
}

/* The tie-break in a plan: llama-3.2-1b at seq 4096 on an H200 with the fused code base. Without
 * a band the fastest that fits is recommended; with the band [0.93, 1.08] an entry that fits
 * within it of the fastest and has a smaller device peak is recommended instead, and the JSON
 * says which entries tied and why. */
static void tie_break_plan(void **state)
{
    (void)state;
    gckpt_plan_request q = req("llama-3.2-1b", 4096);
    q.code_base = GCKPT_CB_FUSED;
    q.micro_batches[2] = 4;
    q.micro_batches[3] = 8;
    q.n_micro = 4;
    char path[64];
    snprintf(path, sizeof path, "tie-band-%d.json", (int)getpid());
    gckpt_plan a, b;
    gckpt_err err;
    band_profile(path, NULL);
    snprintf(q.gpu_ref, sizeof q.gpu_ref, "./%s", path);
    if (!gckpt_plan_run(&q, &a, &err)) fail_msg("%s", err.msg);
    band_profile(path, (const double[]){0.93, 1.08});
    if (!gckpt_plan_run(&q, &b, &err)) fail_msg("%s", err.msg);
    remove(path);
    assert_int_equal(a.n, b.n);
    assert_true(a.fastest >= 0 && a.recommended == a.fastest && b.fastest == a.fastest);
    assert_true(b.recommended != b.fastest);
    const gckpt_entry *fa = &b.entries[b.fastest], *re = &b.entries[b.recommended];
    assert_true(re->fits && re->r.device_peak_bytes < fa->r.device_peak_bytes);
    assert_true(fa->r.tokens_per_s / re->r.tokens_per_s <= 1.08 && re->r.tokens_per_s < fa->r.tokens_per_s);
    /* no entry within the band has a smaller peak than the recommended one */
    for (size_t i = 0; i < b.n; i++) {
        const gckpt_entry *e = &b.entries[i];
        if (e->fits && e->offload == fa->offload && fa->r.tokens_per_s / e->r.tokens_per_s <= 1.08)
            assert_true(e->r.device_peak_bytes >= re->r.device_peak_bytes);
    }
    cJSON *ja = roundtrip(&a), *jb = roundtrip(&b);
    char why[512];
    if (!schema_check(schema, jb, why, sizeof why)) fail_msg("%s", why);
    assert_null(cJSON_GetObjectItemCaseSensitive(ja, "recommendation"));
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(jb, "recommendation");
    assert_int_equal((long)num(rc, "fastest"), b.fastest);
    assert_int_equal((long)num(jb, "recommended"), b.recommended);
    bool has_rec = false, has_fast = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(rc, "tied")) {
        has_rec |= (long)it->valuedouble == b.recommended;
        has_fast |= (long)it->valuedouble == b.fastest;
    }
    assert_true(has_rec && has_fast);
    const cJSON *band = cJSON_GetObjectItemCaseSensitive(rc, "ratio_band");
    assert_true(cJSON_GetArrayItem(band, 0)->valuedouble == 0.93 && cJSON_GetArrayItem(band, 1)->valuedouble == 1.08);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    gckpt_plan_free(&a);
    gckpt_plan_free(&b);
}

int main(void)
{
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/../../reports/schema/plan.schema.json", 1 << 20, &err);
    if (!text || !(schema = gckpt_json_parse("plan.schema.json", text, &err))) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    free(text);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(schema_and_roundtrip), cmocka_unit_test(moe_plans), cmocka_unit_test(schema_rejects), cmocka_unit_test(hub_source), cmocka_unit_test(peft_plans),
        cmocka_unit_test(recommendation), cmocka_unit_test(batch_splits), cmocka_unit_test(parallel_plans), cmocka_unit_test(mode_words), cmocka_unit_test(tied_plans),
        cmocka_unit_test(timeline_peaks), cmocka_unit_test(mfu_hfu_code_base), cmocka_unit_test(tie_rule),
        cmocka_unit_test(tie_break_plan),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cJSON_Delete(schema);
    return rc;
}
