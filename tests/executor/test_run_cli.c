/* gckpt-run end to end on the host backend: reports that validate against
 * reports/schema/report.schema.json, equal checksums across settings, out of memory
 * reported as a status (not a crash) with the run going on, skipped entries, and bad
 * input answered with exit 2, one line on stderr and no report file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gckpt/util/atomic_file.h"
#include "gckpt/util/util.h"
#include "plan_fixture.h"
#include "cli_harness.h"
#include "report_fixture.h"
#include "schema_check.h"

static void put(const char *name, const char *text) { cli_write(name, text); }
static bool exists(const char *name) { return cli_exists(name); }

/* Run gckpt-run with args (NULL-terminated) through the CLI harness (stdout and stderr
 * are kept in files): the host backend unless a case names one (a GPU machine would pick
 * cuda). */
static int run(const char *const *args)
{
    char *argv[32];
    int n = 0;
    bool named = false;
    for (int i = 0; args[i]; i++) named |= !strcmp(args[i], "--backend");
    if (!named) {
        argv[n++] = "--backend";
        argv[n++] = "host";
    }
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char err[4096];
    int rc = cli_run(GCKPT_RUN_EXE, argv, NULL, err, sizeof err);
    assert_true(rc >= 0); /* exited, not killed */
    return rc;
}

static char *slurp(const char *name)
{
    char *t = cli_slurp(name);
    if (!t) fail_msg("cannot read %s", name);
    return t;
}

/* stderr is exactly one line that contains want */
static void one_line(const char *want)
{
    char *e = slurp("stderr.txt");
    size_t lines = 0;
    for (char *c = e; *c; c++) lines += *c == '\n';
    if (lines != 1 || !strstr(e, want)) fail_msg("stderr \"%s\" is not one line with \"%s\"", e, want);
    free(e);
}

static cJSON *report(const char *name)
{
    char p[512], why[600];
    cli_path(name, p, sizeof p);
    cJSON *schema = rf_schema();
    assert_non_null(schema);
    cJSON *doc = rf_load_valid(p, schema, why, sizeof why);
    if (!doc) fail_msg("%s", why);
    cJSON_Delete(schema);
    /* the pattern the small validator does not check */
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
        cJSON *h = pf_at(e, "numerics.grad_checksum");
        if (cJSON_IsString(h)) {
            assert_int_equal(strlen(h->valuestring), 16);
            for (const char *c = h->valuestring; *c; c++) assert_true(isdigit((unsigned char)*c) || (*c >= 'a' && *c <= 'f'));
        }
    }
    return doc;
}

static void no_temp_files(void) { cli_assert_no_temporaries(cli_dir); }

static const uint32_t every[] = {0, 1, 2, 3};

static int setup(void **st)
{
    (void)st;
    if (!cli_setup("gckpt-run-test")) return -1;
    char *a = pf_plan_text("tiny-llama", GCKPT_AMP_BF16, GCKPT_SDPA, every, 4, 2, 2, 0);
    char *b = pf_plan_text("tiny-gpt2-dropout", GCKPT_BF16, GCKPT_EAGER, every, 4, 2, 1, 0);
    if (!a || !b) return -1;
    put("llama.json", a);
    put("gpt2.json", b);
    free(a);
    free(b);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    cli_teardown();
    return 0;
}

static void test_all_entries(void **st)
{
    (void)st;
    const char *args[] = {"--plan", "llama.json", "--all", "--steps", "2", "--warmup", "1", "-o", "r1.json", NULL};
    assert_int_equal(run(args), 0);
    cJSON *doc = report("r1.json");
    cJSON *es = cJSON_GetObjectItem(doc, "entries");
    assert_int_equal(cJSON_GetArraySize(es), 7);
    const char *sum0 = NULL;
    cJSON *e;
    cJSON_ArrayForEach(e, es) {
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(e, "status")), "ok");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(e, "pass")));
        double pred = pf_at(e, "memory.peak_bytes.predicted")->valuedouble;
        double meas = pf_at(e, "memory.peak_bytes.measured")->valuedouble;
        assert_true(pred == meas);
        assert_true(pf_at(e, "memory.host_pinned_bytes.predicted")->valuedouble ==
                    pf_at(e, "memory.host_pinned_bytes.measured")->valuedouble);
        assert_true(cJSON_IsNull(pf_at(e, "memory.device_peak_bytes.measured")));
        assert_int_equal(cJSON_GetArraySize(pf_at(e, "time.steps_s")), 2);
        const char *sum = pf_at(e, "numerics.grad_checksum")->valuestring;
        if (!sum0) sum0 = sum;
        assert_string_equal(sum, sum0); /* the same gradients for every setting */
    }
    assert_true(cJSON_IsTrue(pf_at(doc, "summary.complete")));
    assert_int_equal(pf_at(doc, "summary.passed")->valueint, 7);
    assert_string_equal(pf_at(doc, "backend")->valuestring, "host");
    cJSON_Delete(doc);
    no_temp_files();
    /* the user is told how long it will take: before the run, and measured after the
     * first entry's second step (stderr is not a terminal here: no per-step line) */
    char *err = slurp("stderr.txt");
    assert_non_null(strstr(err, "gckpt-run: host backend: at least "));
    assert_non_null(strstr(err, " s for 7 entries x 3 steps ("));
    assert_non_null(strstr(err, "gckpt-run: measured: setup "));
    assert_non_null(strstr(err, " s for the whole run\n"));
    assert_null(strstr(err, "step 1 of 3"));
    free(err);
}

/* gckpt-run --all on plan (7 entries) with steps measured steps: every entry ok and
 * passing with no message (no note: the executor's schedule is the plan's), the measured
 * peak the plan's prediction, the same gradients for every setting. */
static void runs_exactly(const char *plan, const char *steps)
{
    const char *args[] = {"--plan", plan, "--all", "--steps", steps, "--warmup", "0", "-o", "rx.json", NULL};
    assert_int_equal(run(args), 0);
    cJSON *doc = report("rx.json");
    cJSON *e;
    const char *sum0 = NULL;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(e, "status")), "ok");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(e, "pass")));
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(e, "message"));
        if (msg && *msg) fail_msg("%s: %s", plan, msg);
        assert_true(pf_at(e, "memory.peak_bytes.predicted")->valuedouble == pf_at(e, "memory.peak_bytes.measured")->valuedouble);
        const char *sum = pf_at(e, "numerics.grad_checksum")->valuestring;
        if (!sum0) sum0 = sum;
        assert_string_equal(sum, sum0);
        n++;
    }
    assert_int_equal(n, 7);
    cJSON_Delete(doc);
}

/* Plans with sliding windows shorter than the sequence (16 > 8) run end to end, the
 * plan's own peak measured: the executor builds the recipe at the plan's sequence
 * (Mistral's masked SDPA; Gemma 3's and Qwen2's two block sections), as the planner does. */
static void plan_runs_exactly(const char *fixture, gckpt_precision p, gckpt_attention a)
{
    char *text = pf_plan_text(fixture, p, a, every, 4, 2, 2, 0);
    assert_non_null(text);
    put("sliding.json", text);
    free(text);
    runs_exactly("sliding.json", "1");
}

static void test_sliding_plans(void **st)
{
    (void)st;
    plan_runs_exactly("tiny-mistral-sw8", GCKPT_AMP_BF16, GCKPT_SDPA);
    plan_runs_exactly("tiny-mistral-sw8", GCKPT_BF16, GCKPT_EAGER);
    plan_runs_exactly("tiny-gemma2", GCKPT_AMP_BF16, GCKPT_EAGER);
    plan_runs_exactly("tiny-gemma3", GCKPT_BF16, GCKPT_EAGER);
    plan_runs_exactly("tiny-gemma3-w32", GCKPT_AMP_BF16, GCKPT_SDPA);
    /* two block sections: masked SDPA in the sliding layers, causal in the full ones */
    plan_runs_exactly("tiny-gemma3", GCKPT_AMP_BF16, GCKPT_SDPA);
    plan_runs_exactly("tiny-qwen2-sw", GCKPT_BF16, GCKPT_SDPA);
    plan_runs_exactly("tiny-phi3", GCKPT_AMP_BF16, GCKPT_SDPA);
    plan_runs_exactly("tiny-phi3-partial", GCKPT_BF16, GCKPT_EAGER);
    plan_runs_exactly("tiny-gpt-neox", GCKPT_AMP_BF16, GCKPT_SDPA);
    /* the sequential GPT-NeoX block: use_parallel_residual reaches gckpt-run through the
     * plan's config_text */
    plan_runs_exactly("tiny-gpt-neox-seq", GCKPT_AMP_BF16, GCKPT_EAGER);
}

/* LoRA and QLoRA plans run end to end on the host backend: every entry ok, the measured
 * peak equal to the plan's prediction, the same gradients for every setting */
static void test_lora_qlora(void **st)
{
    (void)st;
    gckpt_peft lora, qlora;
    gckpt_peft_default(GCKPT_METHOD_LORA, &lora);
    lora.rank = 4;
    lora.alpha = 8;
    gckpt_peft_default(GCKPT_METHOD_QLORA, &qlora);
    qlora.rank = 4;
    qlora.alpha = 8;
    char *a = pf_plan_text_peft("tiny-llama", GCKPT_AMP_BF16, GCKPT_SDPA, every, 4, 2, 2, 0, &lora);
    char *b = pf_plan_text_peft("tiny-gpt2", GCKPT_AMP_BF16, GCKPT_SDPA, every, 4, 2, 2, 0, &qlora);
    assert_non_null(a);
    assert_non_null(b);
    put("lora.json", a);
    put("qlora.json", b);
    free(a);
    free(b);
    runs_exactly("lora.json", "2");
    runs_exactly("qlora.json", "2");
    no_temp_files();
}

/* Issue 13's mixture-of-experts plans run end to end on the host backend (router,
 * grouped_mm experts, the load-balancing loss) */
static void test_moe(void **st)
{
    (void)st;
    char *a = pf_plan_text("tiny-qwen3-moe-aux", GCKPT_AMP_BF16, GCKPT_EAGER, every, 4, 2, 2, 0);
    assert_non_null(a);
    put("moe-aux.json", a);
    free(a);
    runs_exactly("moe-aux.json", "2");
    /* gpt_oss (sinks, the half-split rotary, sliding and full layers, biased experts over
     * interleaved gate / up, the clamped SwiGLU), with the load-balancing loss */
    char *oss = pf_plan_text("tiny-gpt-oss-aux", GCKPT_AMP_BF16, GCKPT_EAGER, every, 4, 2, 2, 0);
    assert_non_null(oss);
    put("gpt-oss.json", oss);
    free(oss);
    runs_exactly("gpt-oss.json", "2");
    no_temp_files();
}

/* A LLaVA plan (gckpt-plan --images 1: the tower and the text model walked as one step,
 * core/vlm_step.c) as JSON text: mb 2, seq 32 (16 image tokens), every_n off / 1 / 2 / 3 x
 * offload; the tower trained or frozen; grad_accum from the global batch. */
static char *vlm_plan_at(const char *config, gckpt_precision p, bool frozen, uint64_t global_batch, uint64_t h,
                         uint64_t w)
{
    gckpt_plan_request req = {.seq = 32, .micro_batches = {2}, .n_micro = 1, .grad_accum = 1,
                              .global_batch = global_batch, .precision = p, .optimizer = GCKPT_ADAMW,
                              .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05, .images = 1,
                              .image_h = h, .image_w = w,
                              .vision_tower = frozen ? GCKPT_VISION_FROZEN : GCKPT_VISION_TRAINED};
    snprintf(req.model_ref, sizeof req.model_ref, "%s/%s.json", GCKPT_TEST_DATA, config);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[4] = {0, 1, 2, 3};
    req.every_n = ev;
    req.n_every = 4;
    gckpt_plan plan;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&req, &plan, &err)) fail_msg("plan: %s", err.msg);
    cJSON *j = gckpt_plan_to_json(&plan, true);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    gckpt_plan_free(&plan);
    return text;
}

static char *llava_plan(const char *config, gckpt_precision p, bool frozen, uint64_t global_batch)
{
    return vlm_plan_at(config, p, frozen, global_batch, 0, 0);
}

/* gckpt-run executes a LLaVA plan on the host backend: every entry ok and passing, the
 * allocator's peak and pinned peak the plan's, the same gradients for every checkpointed
 * setting (without checkpointing the text model fills transformers' DynamicCache: another
 * recipe, whose weights the executor draws by other keys; LLaVA-NeXT's does not: off_too,
 * every entry's gradients alike) */
static void vlm_runs_exactly(const char *plan, bool off_too)
{
    const char *args[] = {"--plan", plan, "--all", "--steps", "1", "--warmup", "0", "-o", "rv.json", NULL};
    assert_int_equal(run(args), 0);
    cJSON *doc = report("rv.json");
    cJSON *e;
    const char *sum0 = NULL;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(e, "status")), "ok");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(e, "pass")));
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(e, "message"));
        if (msg && *msg) fail_msg("%s: %s", plan, msg);
        assert_true(pf_at(e, "memory.peak_bytes.predicted")->valuedouble == pf_at(e, "memory.peak_bytes.measured")->valuedouble);
        assert_true(pf_at(e, "memory.host_pinned_bytes.predicted")->valuedouble ==
                    pf_at(e, "memory.host_pinned_bytes.measured")->valuedouble);
        const char *sum = pf_at(e, "numerics.grad_checksum")->valuestring;
        if (n++ == 0 && !off_too) continue; /* every_n off */
        if (!sum0) sum0 = sum;
        assert_string_equal(sum, sum0);
    }
    assert_int_equal(n, 7);
    cJSON_Delete(doc);
}

static void llava_runs_exactly(const char *plan) { vlm_runs_exactly(plan, false); }

static void test_llava(void **st)
{
    (void)st;
    char *tr = llava_plan("tiny-llava", GCKPT_FP32, false, 0), *fr = llava_plan("tiny-llava", GCKPT_FP32, true, 4);
    put("llava-trained.json", tr);
    put("llava-frozen.json", fr);
    free(tr);
    free(fr);
    llava_runs_exactly("llava-trained.json");
    llava_runs_exactly("llava-frozen.json"); /* grad_accum 2 */
    char *amp = llava_plan("tiny-llava", GCKPT_AMP_BF16, false, 0);
    put("llava-amp.json", amp);
    free(amp);
    llava_runs_exactly("llava-amp.json");
    /* LLaVA-NeXT (anyres tiles, pack_image_features): images of 40x60 (5 tiles, 14 packed
     * rows) trained, 60x40 frozen with grad_accum 2, the config's 28x28 (3 tiles) under amp */
    char *nx = vlm_plan_at("tiny-llava-next", GCKPT_FP32, false, 0, 40, 60);
    char *nf = vlm_plan_at("tiny-llava-next", GCKPT_FP32, true, 4, 60, 40);
    char *na = vlm_plan_at("tiny-llava-next", GCKPT_AMP_BF16, false, 0, 0, 0);
    put("next-trained.json", nx);
    put("next-frozen.json", nf);
    put("next-amp.json", na);
    free(nx);
    free(nf);
    free(na);
    vlm_runs_exactly("next-trained.json", true);
    vlm_runs_exactly("next-frozen.json", true);
    vlm_runs_exactly("next-amp.json", true);
    /* what it does not run: one line naming the plan's field, exit 2, no report */
    char *bf = llava_plan("tiny-llava", GCKPT_BF16, false, 0);
    put("llava-bf16.json", bf);
    free(bf);
    const char *a1[] = {"--plan", "llava-bf16.json", "-o", "rbf.json", NULL};
    assert_int_equal(run(a1), 2);
    one_line("llava-bf16.json: field 'inputs.vision': model_type \"llava\": its step is executed in fp32 and amp-bf16 "
             "only");
    assert_false(exists("rbf.json"));
    no_temp_files();
}

/* A limit below some entries' peaks: those are out of memory, the others still run. */
static void test_oom_goes_on(void **st)
{
    (void)st;
    char *text = slurp("gpt2.json");
    cJSON *plan = cJSON_Parse(text);
    free(text);
    uint64_t lo = UINT64_MAX, hi = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(plan, "entries")) {
        uint64_t p = (uint64_t)pf_at(e, "memory.peak_bytes")->valuedouble;
        lo = p < lo ? p : lo;
        hi = p > hi ? p : hi;
    }
    cJSON_Delete(plan);
    assert_true(lo < hi);
    char lim[32];
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)lo);
    const char *args[] = {"--plan", "gpt2.json", "--all", "--steps", "1", "--host-memory-limit", lim, "-o", "r2.json", NULL};
    assert_int_equal(run(args), 1);
    cJSON *doc = report("r2.json");
    int ok = 0, oom = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
        const char *s = pf_at(e, "status")->valuestring;
        uint64_t p = (uint64_t)pf_at(e, "memory.peak_bytes.predicted")->valuedouble;
        if (p <= lo) {
            assert_string_equal(s, "ok");
            assert_true(cJSON_IsTrue(pf_at(e, "pass")));
            ok++;
        } else {
            assert_string_equal(s, "oom");
            assert_true(cJSON_IsFalse(pf_at(e, "pass")));
            assert_non_null(strstr(pf_at(e, "message")->valuestring, "out of memory"));
            oom++;
        }
    }
    assert_true(ok >= 1 && oom >= 1);
    assert_int_equal(pf_at(doc, "summary.oom")->valueint, oom);
    assert_int_equal(pf_at(doc, "options.memory_limit_bytes")->valuedouble, (double)lo);
    cJSON_Delete(doc);
    /* a tiny limit: everything is out of memory, nothing crashes */
    const char *tiny[] = {"--plan", "llama.json", "--entry", "0,2", "--host-memory-limit", "1MiB", "-o", "r3.json", NULL};
    assert_int_equal(run(tiny), 1);
    doc = report("r3.json");
    assert_int_equal(pf_at(doc, "summary.oom")->valueint, 2);
    cJSON_Delete(doc);
}

/* Entries predicted not to fit are skipped unless --force. */
static void test_skip_force(void **st)
{
    (void)st;
    /* a budget below every entry's predicted device peak */
    gckpt_plan_request req = {.seq = 16, .micro_batches = {2}, .n_micro = 1, .grad_accum = 1,
                              .precision = GCKPT_FP32, .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH,
                              .budget_bytes = 64u << 20, .margin = 0.05};
    snprintf(req.model_ref, sizeof req.model_ref, "%s/tiny-qwen3.json", GCKPT_TEST_DATA);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[2] = {0, 1};
    req.every_n = ev;
    req.n_every = 2;
    gckpt_plan p;
    gckpt_err err = {{0}};
    assert_true(gckpt_plan_run(&req, &p, &err));
    assert_int_equal(p.recommended, -1);
    cJSON *j = gckpt_plan_to_json(&p, false);
    char *t = cJSON_Print(j);
    put("nofit.json", t);
    free(t);
    cJSON_Delete(j);
    gckpt_plan_free(&p);
    const char *rec[] = {"--plan", "nofit.json", "-o", "r4.json", NULL};
    assert_int_equal(run(rec), 2);
    one_line("recommends no entry");
    assert_false(exists("r4.json"));
    const char *all[] = {"--plan", "nofit.json", "--all", "-o", "r5.json", NULL};
    assert_int_equal(run(all), 0);
    cJSON *doc = report("r5.json");
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
        assert_string_equal(pf_at(e, "status")->valuestring, "skipped");
        assert_true(cJSON_IsNull(pf_at(e, "pass")));
        assert_true(cJSON_IsNull(pf_at(e, "memory.peak_bytes.measured")));
    }
    cJSON_Delete(doc);
    const char *force[] = {"--plan", "nofit.json", "--all", "--force", "--steps", "1", "-o", "r6.json", NULL};
    assert_int_equal(run(force), 0);
    doc = report("r6.json");
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
        assert_string_equal(pf_at(e, "status")->valuestring, "ok");
        assert_true(cJSON_IsTrue(pf_at(e, "pass")));
    }
    assert_true(cJSON_IsTrue(pf_at(doc, "options.force")));
    cJSON_Delete(doc);
}

typedef struct {
    const char *args[12];
    const char *expect;
} bad_case;

static void test_bad_input(void **st)
{
    (void)st;
    char *text = slurp("llama.json");
    cJSON *plan = cJSON_Parse(text);
    free(text);
    pf_set(plan, "entries[0].offload", cJSON_CreateTrue());
    char *t = cJSON_Print(plan);
    put("broken.json", t);
    free(t);
    cJSON_Delete(plan);
    put("notjson.json", "{\"schema\": \"gckpt.plan/1\",");
    plan = cJSON_Parse(text = slurp("llama.json")); /* a paged optimizer: no managed-memory states here */
    free(text);
    pf_set(plan, "inputs.optimizer", cJSON_CreateString("paged-adamw-8bit"));
    t = cJSON_Print(plan);
    put("paged.json", t);
    free(t);
    cJSON_Delete(plan);
    plan = cJSON_Parse(text = slurp("llama.json")); /* a fused loss: planned only (docs/fused-loss.md) */
    free(text);
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(plan, "inputs"), "loss", "liger");
    t = cJSON_Print(plan);
    put("liger.json", t);
    free(t);
    cJSON_Delete(plan);
    /* planned, not executed: a gpt_oss rope_type other than default and yarn */
    static const uint32_t one[] = {1};
    char *lin = pf_plan_text("tiny-gpt-oss-rope-linear", GCKPT_BF16, GCKPT_EAGER, one, 1, 1, 1, 0);
    assert_non_null(lin);
    put("rope-linear.json", lin);
    free(lin);
    /* ... phi3's longrope (phi-4-mini), and a padding index outside the vocabulary
     * (Phi3Config's default 32000 for 211 tokens: nn.Embedding raises) */
    lin = pf_plan_text("tiny-phi3-longrope", GCKPT_BF16, GCKPT_EAGER, one, 1, 1, 1, 0);
    assert_non_null(lin);
    put("rope-longrope.json", lin);
    free(lin);
    lin = pf_plan_text("tiny-phi3-pad-default", GCKPT_BF16, GCKPT_EAGER, one, 1, 1, 1, 0);
    assert_non_null(lin);
    put("pad-outside.json", lin);
    free(lin);
    char adir[512];
    cli_path("adir", adir, sizeof adir);
    mkdir(adir, 0700);
    const bad_case cases[] = {
        {{NULL}, "--plan FILE is required"},
        {{"--plan", "missing.json", "-o", "bad.json", NULL}, "missing.json"},
        {{"--plan", "broken.json", "-o", "bad.json", NULL}, "entries[0].offload"},
        {{"--plan", "notjson.json", "-o", "bad.json", NULL}, "notjson.json"},
        {{"--plan", "paged.json", "--backend", "host", "-o", "bad.json", NULL}, "no paged (managed-memory) optimizer states"},
        {{"--plan", "liger.json", "--backend", "host", "-o", "bad.json", NULL}, "field 'inputs.loss' = \"liger\": gckpt-run has no fused-loss kernels"},
        {{"--plan", "llama.json", "--entry", "99", "-o", "bad.json", NULL}, "--entry"},
        {{"--plan", "llama.json", "--entry", "1,x", "-o", "bad.json", NULL}, "--entry"},
        {{"--plan", "llama.json", "--all", "--recommended", "-o", "bad.json", NULL}, "exclude"},
        {{"--plan", "llama.json", "--steps", "0", "-o", "bad.json", NULL}, "--steps"},
        {{"--plan", "llama.json", "--warmup", "-1", "-o", "bad.json", NULL}, "--warmup"},
        {{"--plan", "llama.json", "--tolerance", "2", "-o", "bad.json", NULL}, "--tolerance"},
        {{"--plan", "llama.json", "--tolerance", "nan", "-o", "bad.json", NULL}, "--tolerance"},
        {{"--plan", "llama.json", "--host-memory-limit", "lots", "-o", "bad.json", NULL}, "--host-memory-limit"},
        {{"--plan", "llama.json", "--backend", "tpu", "-o", "bad.json", NULL}, "--backend"},
        {{"--plan", "llama.json", "--frobnicate", "-o", "bad.json", NULL}, "--frobnicate"},
        {{"--plan", "llama.json", "-o", NULL}, "-o needs a value"},
        {{"--plan", "llama.json", "-o", "adir", NULL}, "is a directory"},
        {{"--calibrate", "-o", "bad.json", "--backend", "host", NULL}, "calibrate"},
        {{"--calibrate", NULL}, "-o FILE"},
        {{"--plan", "llama.json", "--gpu", "h200", "-o", "bad.json", NULL}, "--calibrate"},
        {{"--plan", "rope-linear.json", "-o", "bad.json", NULL}, "rope_parameters.rope_type \"linear\" is planned but not executed"},
        {{"--plan", "rope-longrope.json", "-o", "bad.json", NULL}, "rope_parameters.rope_type \"longrope\" is planned but not executed"},
        {{"--plan", "pad-outside.json", "-o", "bad.json", NULL}, "pad_token_id = 32000 is outside the vocabulary"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].args);
        if (rc != 2) fail_msg("case %zu (%s): exit %d, expected 2", i, cases[i].expect, rc);
        one_line(cases[i].expect);
        assert_false(exists("bad.json"));
    }
    /* without CUDA in the build, or without a GPU, --backend cuda is bad input */
    const char *cuda[] = {"--plan", "llama.json", "--backend", "cuda", "--steps", "1", "-o", "cuda.json", NULL};
    int rc = run(cuda);
#ifdef GCKPT_HAVE_CUDA
    if (rc != 0) {
        assert_int_equal(rc, 2);
        one_line("--backend cuda");
        assert_false(exists("cuda.json"));
    }
#else
    assert_int_equal(rc, 2);
    one_line("without CUDA");
    assert_false(exists("cuda.json"));
#endif
    no_temp_files();
}

static void test_help_version(void **st)
{
    (void)st;
    const char *h[] = {"--help", NULL};
    assert_int_equal(run(h), 0);
    char *o = slurp("stdout.txt");
    assert_non_null(strstr(o, "usage: gckpt-run"));
    /* every option main_run.c parses (issue 28: README's summary had lost some) */
    static const char *const opts[] = {"--plan", "--entry", "--recommended", "--all", "--backend", "--steps",
                                       "--warmup", "--tolerance", "--time-tolerance", "--force",
                                       "--host-memory-limit", "--seed", "--sync-alloc", "-o", "--output", "-q",
                                       "--quiet", "--calibrate", "--gpu", "--model", "-h", "--help", "-V",
                                       "--version"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        size_t n = strlen(opts[i]);
        bool listed = false;
        for (const char *p = o; !listed && (p = strstr(p, opts[i])); p += n)
            listed = p > o && p[-1] == ' ' && strchr(" ,\n", p[n]);
        if (!listed) fail_msg("--help does not list %s:\n%s", opts[i], o);
    }
    free(o);
    const char *v[] = {"--version", NULL};
    assert_int_equal(run(v), 0);
    o = slurp("stdout.txt");
    assert_non_null(strstr(o, GCKPT_VERSION));
    free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_entries), cmocka_unit_test(test_oom_goes_on), cmocka_unit_test(test_skip_force),
        cmocka_unit_test(test_bad_input),   cmocka_unit_test(test_help_version), cmocka_unit_test(test_lora_qlora),
        cmocka_unit_test(test_moe),         cmocka_unit_test(test_sliding_plans), cmocka_unit_test(test_llava),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
