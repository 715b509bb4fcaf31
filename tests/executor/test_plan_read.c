/* The plan reader: a plan written by the planner reads back to the same model, device
 * and entries; every kind of damage or self-contradiction is rejected with one line
 * naming the file and the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <unistd.h>

#include "gckpt/core/plan_read.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/towers.h"
#include "plan_fixture.h"

static const uint32_t every[] = {0, 1, 2, 3};

static void test_round_trip(void **st)
{
    (void)st;
    char *text = pf_plan_text("tiny-llama", GCKPT_AMP_BF16, GCKPT_EAGER, every, 4, 2, 2, 0);
    assert_non_null(text);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("plan.json", text, &pf, &err)) fail_msg("%s", err.msg);
    /* the same sweep from the library */
    gckpt_plan_request req = {.seq = 16, .micro_batches = {2}, .n_micro = 1, .grad_accum = 2,
                              .precision = GCKPT_AMP_BF16, .attention = GCKPT_EAGER, .offload = GCKPT_OFFLOAD_BOTH,
                              .margin = 0.05};
    snprintf(req.model_ref, sizeof req.model_ref, "%s/tiny-llama.json", GCKPT_TEST_DATA);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[4] = {0, 1, 2, 3};
    req.every_n = ev;
    req.n_every = 4;
    gckpt_plan plan;
    assert_true(gckpt_plan_run(&req, &plan, &err));
    assert_int_equal(pf.n, plan.n);
    assert_int_equal(pf.n, 7); /* off, then 1..3 x offload off/on */
    assert_int_equal(pf.model.layers, plan.model.layers);
    assert_int_equal(pf.model.hidden, plan.model.hidden);
    assert_int_equal(pf.model.kv_heads, plan.model.kv_heads);
    assert_int_equal(pf.model.head_dim, plan.model.head_dim);
    assert_int_equal(pf.model.vocab, plan.model.vocab);
    assert_true(pf.model.rope_theta == plan.model.rope_theta);
    assert_string_equal(pf.model.name, "tiny-llama");
    assert_string_equal(pf.dev.name, plan.dev.name);
    assert_int_equal(pf.dev.memory_bytes, plan.dev.memory_bytes);
    assert_int_equal(pf.dev.alloc_round_bytes, plan.dev.alloc_round_bytes);
    assert_int_equal(pf.precision, GCKPT_AMP_BF16);
    assert_int_equal(pf.attention, GCKPT_EAGER);
    assert_int_equal(pf.seq, 16);
    assert_int_equal(pf.recommended, plan.recommended);
    for (size_t i = 0; i < pf.n; i++) {
        const gckpt_entry *a = &pf.entries[i], *b = &plan.entries[i];
        assert_int_equal(a->every_n, b->every_n);
        assert_int_equal(a->offload, b->offload);
        assert_int_equal(a->micro_batch, b->micro_batch);
        assert_int_equal(a->grad_accum, b->grad_accum);
        assert_int_equal(a->r.peak_bytes, b->r.peak_bytes);
        assert_int_equal(a->r.device_peak_bytes, b->r.device_peak_bytes);
        assert_int_equal(a->r.host_pinned_bytes, b->r.host_pinned_bytes);
        /* cJSON prints 15 significant digits when they read back as nearly equal */
        assert_true(fabs(a->r.step_s - b->r.step_s) <= 1e-13 * b->r.step_s);
        gckpt_setting s = gckpt_plan_file_setting(&pf, i);
        assert_int_equal(s.every_n, b->every_n);
        assert_int_equal(s.grad_accum, 2);
    }
    gckpt_plan_free(&plan);
    gckpt_plan_file_free(&pf);
    /* from a file; a missing file names its path */
    char path[] = "/tmp/gckpt-plan-read-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_true(gckpt_plan_read(path, &pf, &err));
    assert_string_equal(pf.file, path);
    gckpt_plan_file_free(&pf);
    unlink(path);
    assert_false(gckpt_plan_read(path, &pf, &err));
    assert_non_null(strstr(err.msg, path));
    free(text);
}

typedef struct {
    const char *path;   /* item to change */
    const char *json;   /* its new value (NULL: delete it) */
    const char *expect; /* a piece of the message */
    bool exec_only;     /* read, then refused by gckpt_plan_executable (gckpt-run) */
} mutation;

static void expect_reject(const char *text, const char *what, const char *expect)
{
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    bool ok = gckpt_plan_parse("bad-plan.json", text, &pf, &err);
    if (ok) {
        gckpt_plan_file_free(&pf);
        fail_msg("%s: accepted", what);
    }
    if (strncmp(err.msg, "bad-plan.json", 13) || !strstr(err.msg, expect) || strchr(err.msg, '\n'))
        fail_msg("%s: message \"%s\" lacks \"%s\" or the file name", what, err.msg, expect);
    assert_null(pf.entries);
}

/* A plan the reader accepts (gckpt-dash draws it) and gckpt-run refuses, one line. */
static void expect_not_executed(const char *text, const char *what, const char *expect)
{
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("bad-plan.json", text, &pf, &err)) fail_msg("%s: refused by the reader: %s", what, err.msg);
    bool ok = gckpt_plan_executable(&pf, &err);
    gckpt_plan_file_free(&pf);
    if (ok) fail_msg("%s: executable", what);
    if (strncmp(err.msg, "bad-plan.json", 13) || !strstr(err.msg, expect) || strchr(err.msg, '\n'))
        fail_msg("%s: message \"%s\" lacks \"%s\" or the file name", what, err.msg, expect);
}

static void mutate_all(const char *base, const mutation *ms, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cJSON *root = cJSON_Parse(base);
        assert_non_null(root);
        cJSON *v = ms[i].json ? cJSON_Parse(ms[i].json) : NULL;
        if (ms[i].json) assert_non_null(v);
        if (!pf_set(root, ms[i].path, v)) fail_msg("no %s in the plan", ms[i].path);
        char *t = cJSON_Print(root);
        if (ms[i].exec_only) expect_not_executed(t, ms[i].path, ms[i].expect);
        else expect_reject(t, ms[i].path, ms[i].expect);
        free(t);
        cJSON_Delete(root);
    }
}

static void test_rejects(void **st)
{
    (void)st;
    char *base = pf_plan_text("tiny-llama", GCKPT_FP32, GCKPT_SDPA, every, 4, 2, 1, 0);
    assert_non_null(base);
    /* the entries are: 0 off, 1 n1, 2 n1 offload, 3 n2, 4 n2 offload, 5 n3, 6 n3 offload */
    const mutation ms[] = {
        {"schema", "\"gckpt.plan/3\"", "field 'schema'"},
        {"schema", NULL, "'schema'"},
        {"generator.name", "\"someone\"", "generator.name"},
        {"inputs.seq", NULL, "inputs.seq"},
        {"inputs.seq", "0", "inputs.seq"},
        {"inputs.seq", "16.5", "inputs.seq"},
        {"inputs.precision", "\"fp8\"", "inputs.precision"},
        {"inputs.attention", "7", "inputs.attention"},
        {"inputs.offload", "\"sometimes\"", "inputs.offload"},
        {"inputs.micro_batches", "[]", "inputs.micro_batches"},
        {"inputs.every_n_layers[1]", "9", "inputs.every_n_layers[1]"},
        {"inputs.global_batch", "4", "global_batch"},
        {"inputs.usable_bytes", "12345", "inputs.usable_bytes"},
        {"inputs.model.layers", "4", "inputs.model.layers"},
        {"inputs.model.parameters", "1", "inputs.model.parameters"},
        {"inputs.model.tied_embeddings", "true", "inputs.model.tied_embeddings"},
        {"inputs.model.model_type", "\"gpt2\"", "inputs.model.model_type"},
        {"inputs.model.config.num_hidden_layers", "\"three\"", "num_hidden_layers"},
        {"inputs.model.config.model_type", "\"t5\"", "inputs.model.config"},
        /* issue 26: DeepSeek-V2 refused naming the family and what is not planned */
        {"inputs.model.config.model_type", "\"deepseek_v2\"",
         "inputs.model.config: field 'model_type' = \"deepseek_v2\": mixture-of-experts models are not supported yet "
         "(not planned: multi-head latent attention"},
        {"inputs.model.config", NULL, "inputs.model.config"},
        /* a text model's plan whose config is a vision-language model's (gckpt-plan plans LLaVA
         * with inputs.vision): refused in one line */
        {"inputs.model.config",
         "{\"model_type\": \"llava\", \"vision_config\": {\"model_type\": \"clip_vision_model\"}, "
         "\"text_config\": {\"model_type\": \"llama\"}}",
         "inputs.model.config: field 'model_type' = \"llava\": a vision-language model (LLaVA) is planned by "
         "gckpt-plan only (not yet: gckpt-run's execution on the CUDA backend and in pure bf16"},
        {"inputs.device.memory_bytes", NULL, "memory_bytes"},
        {"inputs.device.schema", "\"gckpt.device/9\"", "inputs.device"},
        {"entries", "[]", "entries"},
        {"entries[0]", "5", "entries[0]"},
        {"entries[1].index", "5", "entries[1].index"},
        {"entries[0].every_n_layers", "7", "entries[0].every_n_layers"},
        {"entries[0].offload", "true", "entries[0].offload"},
        {"entries[1].offload", "\"yes\"", "entries[1].offload"},
        {"entries[1].checkpointed_layers", "[0, 1]", "entries[1].checkpointed_layers"},
        {"entries[3].checkpointed_layers", "[0, 1]", "entries[3].checkpointed_layers[1]"},
        {"entries[2].micro_batch", "5", "entries[2].micro_batch"},
        {"entries[2].grad_accum", "3", "entries[2].grad_accum"},
        {"entries[0].memory.peak_bytes", "-5", "entries[0].memory.peak_bytes"},
        {"entries[0].memory.peak_bytes", NULL, "entries[0].memory.peak_bytes"},
        {"entries[0].memory.device_peak_bytes", "1", "entries[0].memory.device_peak_bytes"},
        {"entries[0].memory.host_pinned_bytes", "1024", "entries[0].memory.host_pinned_bytes"},
        {"entries[2].memory.host_pinned_bytes", "0", "entries[2].memory.host_pinned_bytes"},
        {"inputs.target", NULL, "inputs.target"},
        {"inputs.target", "\"tpu\"", "inputs.target"},
        {"inputs.target", "1", "inputs.target"},
        {"inputs.device.kind", "\"tpu\"", "'kind'"},
        {"entries[1].memory.host_rng_state_bytes", NULL, "entries[1].memory.host_rng_state_bytes"},
        {"entries[1].memory.host_rng_state_bytes", "0", "entries[1].memory.host_rng_state_bytes"},
        {"entries[0].memory.host_rng_state_bytes", "5056", "entries[0].memory.host_rng_state_bytes"},
        {"entries[1].memory.host_rng_state_bytes", "-1", "entries[1].memory.host_rng_state_bytes"},
        {"entries[1].memory.breakdown.weights", "0", "entries[1].memory.breakdown"},
        {"entries[1].memory.peak_phase", "\"lunch\"", "entries[1].memory.peak_phase"},
        {"entries[1].memory.context_bytes", "7", "entries[1].memory.context_bytes"},
        {"entries[1].time.step_s", "\"fast\"", "entries[1].time.step_s"},
        {"entries[0].time.recompute_s", "0.5", "entries[0].time.recompute_s"},
        {"entries[1].time.offload_copy_s", "0.5", "entries[1].time.offload_copy_s"},
        {"entries[0].fits", "false", "entries[0].fits"},
        {"entries[0].headroom_bytes", "0", "entries[0].headroom_bytes"},
        {"entries[0].pareto", NULL, "entries[0].pareto"},
        {"recommended", "99", "recommended"},
        {"smallest", "\"0\"", "smallest"},
    };
    mutate_all(base, ms, sizeof ms / sizeof ms[0]);
    expect_reject("{", "truncated", "malformed");
    expect_reject("[]", "array", "object");
    expect_reject("", "empty", "empty");
    free(base);
}

/* A gckpt.plan/1 file (CUDA only: no inputs.target, no host_rng_state_bytes) is still
 * read, as a CUDA plan; a /2 plan records its target and the RNG state bytes. */
static void test_version1(void **st)
{
    (void)st;
    char *base = pf_plan_text("tiny-llama", GCKPT_FP32, GCKPT_SDPA, every, 4, 2, 1, 0);
    assert_non_null(base);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("plan.json", base, &pf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(pf.version, 2);
    assert_int_equal(pf.target, GCKPT_TARGET_CUDA);
    /* entry 1: every_n 1 on tiny-llama's layers, one CUDA state for the hidden states */
    assert_int_equal(pf.entries[1].r.host_rng_bytes, (pf.model.layers + 1) * (5056 + 16));
    assert_int_equal(pf.entries[0].r.host_rng_bytes, 0);
    gckpt_plan_file_free(&pf);
    cJSON *root = cJSON_Parse(base);
    cJSON_ReplaceItemInObject(root, "schema", cJSON_CreateString("gckpt.plan/1"));
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(root, "inputs"), "target");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "inputs"), "device"), "kind");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "entries"))
        cJSON_DeleteItemFromObject(cJSON_GetObjectItem(e, "memory"), "host_rng_state_bytes");
    char *t = cJSON_Print(root);
    cJSON_Delete(root);
    if (!gckpt_plan_parse("plan.json", t, &pf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(pf.version, 1);
    assert_int_equal(pf.target, GCKPT_TARGET_CUDA);
    assert_int_equal(pf.entries[1].r.host_rng_bytes, 0);
    gckpt_plan_file_free(&pf);
    free(t);
    free(base);
}

/* With a global batch, micro_batch x grad_accum must make it. */
static void test_rejects_global_batch(void **st)
{
    (void)st;
    char *base = pf_plan_text("tiny-gpt2", GCKPT_BF16, GCKPT_EAGER, every, 2, 2, 1, 4);
    assert_non_null(base);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("plan.json", base, &pf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(pf.global_batch, 4);
    assert_true(pf.n >= 2);
    for (size_t i = 0; i < pf.n; i++) assert_int_equal(pf.entries[i].micro_batch * pf.entries[i].grad_accum, 4);
    gckpt_plan_file_free(&pf);
    const mutation ms[] = {
        {"entries[0].grad_accum", "3", "inputs.global_batch"},
        {"inputs.grad_accum", "2", "exactly one must be null"},
        {"inputs.global_batch", "null", "exactly one must be null"},
    };
    mutate_all(base, ms, sizeof ms / sizeof ms[0]);
    free(base);
}

/* A plan per rank of several GPUs (issue 14) is refused with one line: gckpt-run has no
 * multi-rank execution yet; a one-GPU layout is read as before. */
/* inputs.layout: read back into the setting (gckpt-run runs ddp with one process per rank);
 * a damaged or self-contradicting layout is refused. */
static void test_layout(void **st)
{
    (void)st;
    char *base = pf_plan_text("tiny-llama", GCKPT_FP32, GCKPT_SDPA, every, 2, 2, 1, 0);
    assert_non_null(base);
    static const char *const ds = "\"deepspeed\": {\"file\": null, \"reduce_bucket_size\": 4096, "
                                  "\"stage3_param_persistence_threshold\": 640, \"stage3_max_live_parameters\": 1000000000, "
                                  "\"sub_group_size\": 1000000000}";
    char zero1[512], zero1_nods[512], zero3_off[640];
    snprintf(zero1, sizeof zero1, "{\"gpus\": 2, \"nodes\": 2, \"world_size\": 4, \"parallel\": \"zero1\", %s}", ds);
    /* CPU offload is planned from the source only: gckpt-run refuses it (one line) */
    snprintf(zero3_off, sizeof zero3_off, "{\"gpus\": 2, \"nodes\": 1, \"world_size\": 2, \"parallel\": \"zero3\", %s, "
             "\"offload\": {\"optimizer\": true, \"param\": false}}", ds);
    snprintf(zero1_nods, sizeof zero1_nods, "{\"gpus\": 4, \"nodes\": 1, \"world_size\": 4, \"parallel\": \"zero1\"}");
    const struct { const char *layout, *expect; int mode; uint32_t world; bool exec_only; } cases[] = {
        {"{\"gpus\": 8, \"nodes\": 1, \"world_size\": 8, \"parallel\": \"ddp\"}", NULL, GCKPT_PAR_DDP, 8},
        {"{\"gpus\": 8, \"nodes\": 1, \"world_size\": 8, \"parallel\": \"fsdp\"}", NULL, GCKPT_PAR_FSDP, 8},
        {zero1, NULL, GCKPT_PAR_ZERO1, 4},
        {"{\"gpus\": 1, \"nodes\": 1, \"world_size\": 1, \"parallel\": \"none\"}", NULL, GCKPT_PAR_NONE, 1},
        {zero1_nods, "inputs.layout.deepspeed", 0, 0},
        {zero3_off, "field 'inputs.layout.offload': CPU offload on several GPUs is planned from the source, not executed", 0, 0, 1},
        {"{\"gpus\": 2, \"nodes\": 1, \"world_size\": 2, \"parallel\": \"fsdp\", \"offload\": {\"optimizer\": \"yes\", "
         "\"param\": true}}", "bad-plan.json: field 'inputs.layout.offload.optimizer' must be true or false", 0, 0, 0},
        {"{\"world_size\": 16, \"parallel\": \"zero3\"}", "inputs.layout.gpus", 0, 0},
        {"{\"gpus\": 2, \"nodes\": 2, \"world_size\": 8, \"parallel\": \"ddp\"}", "not gpus x nodes", 0, 0},
        {"{\"gpus\": 4, \"nodes\": 1, \"world_size\": 4, \"parallel\": \"none\"}", "inputs.layout.parallel", 0, 0},
        {"{\"gpus\": 1, \"nodes\": 1, \"world_size\": 1, \"parallel\": \"ddp\"}", "inputs.layout.parallel", 0, 0},
        {"{\"world_size\": 2, \"parallel\": \"tp\"}", "inputs.layout.parallel", 0, 0},
        {"{\"world_size\": 0, \"parallel\": \"ddp\"}", "inputs.layout.world_size", 0, 0},
        {"[1]", "inputs.layout", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *root = cJSON_Parse(base);
        assert_non_null(root);
        cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(root, "inputs"), "layout", cJSON_Parse(cases[i].layout));
        char *t = cJSON_Print(root);
        if (!cases[i].expect) {
            gckpt_plan_file pf;
            gckpt_err err = {{0}};
            if (!gckpt_plan_parse("plan.json", t, &pf, &err)) fail_msg("%s: %s", cases[i].layout, err.msg);
            gckpt_setting s = gckpt_plan_file_setting(&pf, 0);
            assert_int_equal(s.layout.mode, cases[i].mode);
            assert_int_equal(gckpt_layout_world(&s.layout), cases[i].world);
            if (cases[i].mode == GCKPT_PAR_ZERO1) assert_int_equal(s.layout.ds.reduce_bucket, 4096);
            gckpt_plan_file_free(&pf);
        } else if (cases[i].exec_only) {
            expect_not_executed(t, cases[i].layout, cases[i].expect);
        } else {
            expect_reject(t, cases[i].layout, cases[i].expect);
        }
        free(t);
        cJSON_Delete(root);
    }
    free(base);
}

/* A TP plan (gckpt-plan --tp T): read back with the layout's tp (every entry's setting carries it);
 * a damaged tensor_parallel section and TP with a parallel mode refused, one line; TP x DDP, TP x FSDP
 * and HSDP x TP read as world rank 0's layout. */
static void test_tp(void **st)
{
    (void)st;
    char *base = pf_plan_text_tp("tiny-llama", GCKPT_FP32, GCKPT_SDPA, every, 2, 2, 1, 0, NULL, NULL, 2, 0);
    assert_non_null(base);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("plan.json", base, &pf, &err)) fail_msg("%s", err.msg);
    gckpt_setting s = gckpt_plan_file_setting(&pf, 0);
    assert_int_equal(s.layout.tp, 2);
    assert_int_equal(s.layout.mode, GCKPT_PAR_NONE);
    assert_int_equal(pf.model.heads, 4); /* the whole model (each rank makes its local one) */
    assert_int_equal(gckpt_plan_file_ranks(&pf), 2);
    gckpt_plan_file_free(&pf);
    /* TP x DDP, TP x FSDP, HSDP x TP: executed, each entry as world rank 0's FSDP2 over its
     * (dp_replicate, fsdp) mesh (gckpt_tp_hsdp_layout, R-TP-8, R-TP-11) on tp x R x S processes */
    const uint32_t mesh[][2] = {{2, 0}, {0, 2}, {2, 2}};
    for (size_t k = 0; k < sizeof mesh / sizeof *mesh; k++) {
        uint32_t R = mesh[k][0], S = mesh[k][1];
        char *t = pf_plan_text_mesh("tiny-llama", GCKPT_FP32, GCKPT_SDPA, every, 2, 2, 1, 0, NULL, NULL, 2, R, S);
        assert_non_null(t);
        if (!gckpt_plan_parse("plan.json", t, &pf, &err) || !gckpt_plan_executable(&pf, &err)) fail_msg("%s", err.msg);
        s = gckpt_plan_file_setting(&pf, 0);
        assert_int_equal(s.layout.mode, GCKPT_PAR_FSDP);
        assert_int_equal(s.layout.tp, 2);
        assert_int_equal(gckpt_layout_replicate(&s.layout), R ? R : 1);
        assert_int_equal(gckpt_layout_shard_world(&s.layout), S ? S : 1);
        assert_int_equal(gckpt_plan_file_ranks(&pf), 2 * (R ? R : 1) * (S ? S : 1));
        gckpt_plan_file_free(&pf);
        free(t);
    }
    const mutation ms[] = {
        {"inputs.tensor_parallel.tp_size", "1", "inputs.tensor_parallel.tp_size"},
        {"inputs.tensor_parallel.tp_size", "4", "field 'inputs.tensor_parallel.world_size': 2 is not tp_size 4"},
        {"inputs.tensor_parallel.world_size", "4", "field 'inputs.tensor_parallel.world_size': 4 is not tp_size 2"},
        {"inputs.tensor_parallel.world_size", NULL, "inputs.tensor_parallel.world_size"},
        {"inputs.tensor_parallel", "{\"tp_size\": 2, \"world_size\": 8, \"fsdp_size\": 2}",
         "field 'inputs.tensor_parallel.world_size': 8 is not tp_size x fsdp_size x dp_replicate_size (2 x 2 x 1)"},
        {"inputs.tensor_parallel", "{\"tp_size\": 2, \"world_size\": 4, \"fsdp_size\": \"2\"}",
         "inputs.tensor_parallel.fsdp_size"},
        {"inputs.tensor_parallel", "[]", "inputs.tensor_parallel"},
    };
    mutate_all(base, ms, sizeof ms / sizeof *ms);
    cJSON *root = cJSON_Parse(base);
    assert_non_null(root);
    cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(root, "inputs"), "layout",
                          cJSON_Parse("{\"gpus\": 2, \"nodes\": 1, \"world_size\": 2, \"parallel\": \"ddp\"}"));
    char *t = cJSON_Print(root);
    expect_reject(t, "layout", "field 'inputs.layout': tensor parallelism with a parallel mode");
    free(t);
    cJSON_Delete(root);
    free(base);
}

/* A context-parallel plan (gckpt-plan --cp C): read (gckpt-dash draws it), its cp_size recorded;
 * gckpt-run executes it (alone and with dp_shard) in fp32 (R-EXEC-6);
 * a context_parallel section contradicting the layout or the sequence is refused by the reader. */
static void test_cp(void **st)
{
    (void)st;
    char *plain = pf_plan_text("tiny-llama", GCKPT_FP32, GCKPT_SDPA, every, 2, 2, 1, 0);
    assert_non_null(plain);
    cJSON *root = cJSON_Parse(plain);
    assert_non_null(root);
    cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    double seq = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(in, "seq"));
    char cp[200];
    snprintf(cp, sizeof cp, "{\"cp_size\": 2, \"dp_shard_size\": 1, \"dp_replicate_size\": 1, \"local_seq\": %.0f, "
                            "\"load_balanced\": true}", seq / 2);
    cJSON_AddItemToObject(in, "layout", cJSON_Parse("{\"gpus\": 2, \"nodes\": 1, \"world_size\": 2, \"parallel\": \"fsdp\"}"));
    cJSON_AddItemToObject(in, "context_parallel", cJSON_Parse(cp));
    char *base = cJSON_Print(root);
    cJSON_Delete(root);
    free(plain);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("plan.json", base, &pf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(pf.cp, 2);
    /* executed (CP alone, fp32: R-EXEC-6): the rank's setting is S / C tokens with cp_size in its layout */
    if (!gckpt_plan_executable(&pf, &err)) fail_msg("%s", err.msg);
    gckpt_setting s = gckpt_plan_file_setting(&pf, 0);
    assert_int_equal(s.seq, (uint64_t)seq / 2);
    assert_int_equal(s.layout.cp, 2);
    gckpt_plan_file_free(&pf);
    /* CP x dp_shard: read and executed */
    cJSON *r4 = cJSON_Parse(base);
    assert_non_null(r4);
    assert_true(pf_set(r4, "inputs.layout", cJSON_Parse("{\"gpus\": 4, \"nodes\": 1, \"world_size\": 4, \"parallel\": \"fsdp\"}")));
    assert_true(pf_set(r4, "inputs.context_parallel.dp_shard_size", cJSON_CreateNumber(2)));
    char *t4 = cJSON_Print(r4);
    cJSON_Delete(r4);
    if (!gckpt_plan_parse("plan.json", t4, &pf, &err) || !gckpt_plan_executable(&pf, &err)) fail_msg("%s", err.msg);
    gckpt_plan_file_free(&pf);
    free(t4);
    /* CP x HSDP (R-CP-17): dp_replicate_size the layout's dp_replicate, read and executed; a
     * dp_replicate_size the layout lacks refused */
    cJSON *r8 = cJSON_Parse(base);
    assert_non_null(r8);
    assert_true(pf_set(r8, "inputs.layout", cJSON_Parse("{\"gpus\": 8, \"nodes\": 1, \"world_size\": 8, \"parallel\": "
                                                         "\"fsdp\", \"dp_replicate\": 2}")));
    assert_true(pf_set(r8, "inputs.context_parallel.dp_shard_size", cJSON_CreateNumber(2)));
    assert_true(pf_set(r8, "inputs.context_parallel.dp_replicate_size", cJSON_CreateNumber(2)));
    char *t8 = cJSON_Print(r8);
    if (!gckpt_plan_parse("plan.json", t8, &pf, &err) || !gckpt_plan_executable(&pf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(pf.layout.dp_replicate, 2);
    assert_int_equal(gckpt_plan_file_ranks(&pf), 8);
    gckpt_plan_file_free(&pf);
    free(t8);
    assert_true(pf_set(r8, "inputs.layout", cJSON_Parse("{\"gpus\": 8, \"nodes\": 1, \"world_size\": 8, \"parallel\": "
                                                         "\"fsdp\", \"dp_replicate\": 4}")));
    assert_true(pf_set(r8, "inputs.context_parallel.dp_shard_size", cJSON_CreateNumber(2)));
    t8 = cJSON_Print(r8);
    cJSON_Delete(r8);
    if (gckpt_plan_parse("plan.json", t8, &pf, &err))
        fail_msg("a dp_replicate_size 2 against the layout's dp_replicate 4 was read");
    if (!strstr(err.msg, "field 'inputs.context_parallel.dp_replicate_size' = 2 contradicts inputs.layout.dp_replicate (4)"))
        fail_msg("%s", err.msg);
    free(t8);
    const mutation ms[] = {
        {"inputs.context_parallel.cp_size", "4", "field 'inputs.context_parallel.cp_size': 4 x dp_shard_size 1 x "
                                                 "dp_replicate_size 1 is not"},
        {"inputs.context_parallel.dp_replicate_size", "2", "field 'inputs.context_parallel.cp_size': 2 x dp_shard_size 1 x "
                                                           "dp_replicate_size 2 is not"},
        {"inputs.context_parallel.dp_replicate_size", "0", "inputs.context_parallel.dp_replicate_size"},
        {"inputs.context_parallel.dp_shard_size", "\"1\"", "inputs.context_parallel.dp_shard_size"},
        {"inputs.context_parallel.local_seq", "1", "field 'inputs.context_parallel.local_seq' = 1 contradicts"},
        {"inputs.context_parallel.load_balanced", NULL, "inputs.context_parallel.load_balanced"},
        {"inputs.layout", NULL, "field 'inputs.context_parallel.cp_size'"},
    };
    mutate_all(base, ms, sizeof ms / sizeof *ms);
    free(base);
}

/* A LLaVA plan (gckpt-plan --images 1): inputs.vision read back (images, tiles, tokens, the
 * tower, the image size); gckpt-run executes it and a llava_next one (the VLM table's host flag). */
static char *vlm_plan_towers(const char *config, bool frozen, bool lora, uint8_t towers)
{
    gckpt_plan_request req = {.seq = 32, .micro_batches = {2}, .n_micro = 1, .grad_accum = 1, .precision = GCKPT_FP32,
                              .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH,
                              .margin = 0.05, .images = 1,
                              .vision_tower = frozen ? GCKPT_VISION_FROZEN : GCKPT_VISION_TRAINED,
                              .checkpoint_towers = towers};
    if (lora) gckpt_peft_default(GCKPT_METHOD_LORA, &req.peft);
    snprintf(req.model_ref, sizeof req.model_ref, "%s/%s.json", GCKPT_TEST_DATA, config);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[2] = {0, 2};
    req.every_n = ev;
    req.n_every = 2;
    gckpt_plan plan;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&req, &plan, &err)) fail_msg("plan: %s", err.msg);
    cJSON *j = gckpt_plan_to_json(&plan, true);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    gckpt_plan_free(&plan);
    return text;
}

static char *vlm_plan(const char *config, bool frozen, bool lora)
{
    return vlm_plan_towers(config, frozen, lora, GCKPT_CKPT_TOWERS_ALL);
}

/* --checkpoint-towers text: read back into the setting gckpt-run walks; its layers checked
 * against that rule (every_n_layers' own would contradict them), a bad value refused, and
 * a plan without the field (written before the option) read as all */
static void test_vlm_towers(void **st)
{
    (void)st;
    char *text = vlm_plan_towers("tiny-llava", false, false, GCKPT_CKPT_TOWERS_TEXT);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("towers.json", text, &pf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(pf.ckpt_towers, GCKPT_CKPT_TOWERS_TEXT);
    assert_int_equal(gckpt_plan_file_setting(&pf, 1).ckpt_towers, GCKPT_CKPT_TOWERS_TEXT);
    gckpt_plan_file_free(&pf);
    cJSON *j = cJSON_Parse(text);
    cJSON *vis = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "vision");
    cJSON_ReplaceItemInObject(vis, "checkpoint_towers", cJSON_CreateString("both"));
    char *bad = cJSON_Print(j);
    assert_false(gckpt_plan_parse("bad.json", bad, &pf, &err));
    assert_non_null(strstr(err.msg, "inputs.vision.checkpoint_towers"));
    free(bad);
    /* as all, the text layers [0, 2] contradict every_n_layers = 2 over both towers */
    cJSON_DeleteItemFromObject(vis, "checkpoint_towers");
    char *old = cJSON_Print(j);
    assert_false(gckpt_plan_parse("old.json", old, &pf, &err));
    assert_non_null(strstr(err.msg, "contradicts every_n_layers = 2"));
    free(old);
    cJSON_Delete(j);
    free(text);
}

static void test_vlm(void **st)
{
    (void)st;
    char *llava = vlm_plan("tiny-llava", true, false), *next = vlm_plan("tiny-llava-next", false, false);
    char *lora = vlm_plan("tiny-llava", true, true);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse("llava.json", llava, &pf, &err)) fail_msg("%s", err.msg);
    assert_true(pf.vlm);
    assert_int_equal(pf.vlm_images, 1);
    assert_int_equal(pf.vlm_tiles, 1);
    assert_int_equal(pf.vlm_tokens, 16);
    assert_false(pf.vlm_tower_trained);
    if (!gckpt_plan_executable(&pf, &err)) fail_msg("%s", err.msg);
    gckpt_plan_file_free(&pf);
    if (!gckpt_plan_parse("next.json", next, &pf, &err)) fail_msg("%s", err.msg);
    assert_true(pf.vlm_tower_trained);
    /* the config's 28x28 images: the base tile and the best pinpoint's two (R-VLM-37) */
    assert_int_equal(pf.vlm_h, 28);
    assert_int_equal(pf.vlm_w, 28);
    assert_int_equal(pf.vlm_tiles, 3);
    assert_int_equal(pf.vlm_tokens, 10);
    if (!gckpt_plan_executable(&pf, &err)) fail_msg("%s", err.msg);
    gckpt_plan_file_free(&pf);
    /* tiles or tokens that are not the image size's: refused naming the fields */
    cJSON *j = cJSON_Parse(next);
    cJSON *vis = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "vision");
    cJSON_ReplaceItemInObject(vis, "tiles_per_image", cJSON_CreateNumber(4));
    char *bad = cJSON_Print(j);
    memset(&err, 0, sizeof err);
    assert_false(gckpt_plan_parse("bad.json", bad, &pf, &err));
    assert_non_null(strstr(err.msg, "bad.json: fields 'inputs.vision.tiles_per_image' = 4 and 'tokens_per_image' = 10 "
                                    "contradict 'inputs.vision.image_size' (28x28: 3 tiles, 10 tokens)"));
    free(bad);
    cJSON_ReplaceItemInObject(vis, "tiles_per_image", cJSON_CreateNumber(3));
    cJSON *sz = cJSON_CreateArray();
    cJSON_AddItemToArray(sz, cJSON_CreateNumber(60));
    cJSON_AddItemToArray(sz, cJSON_CreateNumber(40));
    cJSON_ReplaceItemInObject(vis, "image_size", sz);
    bad = cJSON_Print(j);
    memset(&err, 0, sizeof err);
    assert_false(gckpt_plan_parse("bad.json", bad, &pf, &err));
    assert_non_null(strstr(err.msg, "(60x40: 5 tiles, 16 tokens)"));
    free(bad);
    cJSON_Delete(j);
    /* LoRA on llava: read (its parameter count is the model's, not the adapters'), not executed */
    if (!gckpt_plan_parse("lora.json", lora, &pf, &err)) fail_msg("%s", err.msg);
    assert_false(gckpt_plan_executable(&pf, &err));
    assert_non_null(strstr(err.msg, "lora.json: field 'inputs.method': lora on a vision-language model is planned, "
                                    "not executed by gckpt-run"));
    gckpt_plan_file_free(&pf);
    free(llava);
    free(next);
    free(lora);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip), cmocka_unit_test(test_rejects), cmocka_unit_test(test_vlm_towers),
                                       cmocka_unit_test(test_rejects_global_batch),
                                       cmocka_unit_test(test_version1), cmocka_unit_test(test_layout),
                                       cmocka_unit_test(test_tp), cmocka_unit_test(test_cp),
                                       cmocka_unit_test(test_vlm)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
