/* What a user copies, reads and acts on (issue: "What a user copies, reads and looks at
 * must be right"): the printed Trainer lines per precision and optimizer, the model's
 * sequence limit, warnings (table and JSON, against the schema), the Transformers
 * spellings of options, one line for an unknown option, the header before the table,
 * the peak in words; and no plan that gckpt-run's reader refuses, for every shipped
 * model x GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli_harness.h"
#include "gckpt/core/parallel.h"
#include "gckpt/planner/plan_args.h"
#include "gckpt/planner/cli_names.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/planner/plan.h"
#include "gckpt/core/plan_read.h"
#include "schema_check.h"

#ifndef GCKPT_PLAN_EXE
#error GCKPT_PLAN_EXE must name the gckpt-plan binary
#endif

static cJSON *schema;
static char err[4096];

static int run(char *const args[]) { return cli_run(GCKPT_PLAN_EXE, args, NULL, err, sizeof err); }

static int setup(void **state)
{
    (void)state;
    return cli_setup("gckpt-advice") ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cli_teardown();
    return 0;
}

/* Whole lines of the last run's stdout */
static void has_line(const char *line)
{
    const char *p = cli_out;
    size_t n = strlen(line);
    while ((p = strstr(p, line))) {
        if ((p == cli_out || p[-1] == '\n') && (p[n] == '\n' || !p[n])) return;
        p += n;
    }
    fail_msg("line not printed: [%s]\n--- stdout:\n%s", line, cli_out);
}

static void one_line(const char *needle)
{
    size_t l = strlen(err);
    if (!l || err[l - 1] != '\n' || strchr(err, '\n') != err + l - 1)
        fail_msg("stderr is not one line: [%s]", err);
    if (!strstr(err, needle)) fail_msg("'%s' not in: %s", needle, err);
}

static cJSON *read_plan(const char *name)
{
    char path[512];
    gckpt_err e;
    cli_path(name, path, sizeof path);
    char *text = gckpt_read_file(path, 64u << 20, &e);
    if (!text) fail_msg("%s", e.msg);
    cJSON *j = gckpt_json_parse(name, text, &e);
    free(text);
    if (!j) fail_msg("%s", e.msg);
    char why[512];
    if (!schema_check(schema, j, why, sizeof why)) fail_msg("%s against the schema: %s", name, why);
    return j;
}

static const char *warning_of(const cJSON *plan, const char *code)
{
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(plan, "warnings"))
        if (!strcmp(cJSON_GetObjectItem(w, "code")->valuestring, code))
            return cJSON_GetObjectItem(w, "message")->valuestring;
    return NULL;
}

/* Mixed precision loads fp32 master weights (transformers v5 defaults to dtype="auto"),
 * pure bf16 loads bf16; the 8-bit line says which parameters keep 32-bit states; SGD
 * with momentum is built as an optimizer handed to the Trainer. */
static void snippets(void **state)
{
    (void)state;
    const char *amp_comment =
        "# fp32 master weights under autocast: transformers v5 would load the checkpoint's dtype (dtype=\"auto\")";
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--every-n", "off,1")), 0);
    has_line(amp_comment);
    has_line("model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=\"sdpa\", dtype=torch.float32)");
    has_line("    bf16=True,");
    has_line("    optim=\"adamw_torch_fused\",");
    has_line("trainer = Trainer(model=model, args=args, ...)");

    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--precision", "amp-fp16", "--every-n", "1")), 0);
    has_line(amp_comment);
    has_line("model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=\"sdpa\", dtype=torch.float32)");
    has_line("    fp16=True,");

    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--precision", "bf16", "--every-n", "1")), 0);
    has_line("# pure bf16: weights, gradients and optimizer states in bf16");
    has_line("model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=\"sdpa\", dtype=torch.bfloat16)");
    assert_null(strstr(cli_out, "bf16=True"));

    /* gpt-oss-20b's MXFP4 experts: loaded dequantized to the planned dtype (FINDINGS R-QUANT-17) */
    assert_int_equal(run(A("--model", "gpt-oss-20b", "--gpu", "h200", "--precision", "bf16", "--optimizer", "adamw-8bit",
                           "--every-n", "2")), 0);
    has_line("from transformers import AutoModelForCausalLM, Mxfp4Config, Trainer, TrainingArguments");
    has_line("model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=\"eager\", dtype=torch.bfloat16,");
    has_line("                                             quantization_config=Mxfp4Config(dequantize=True))");

    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--optimizer", "adamw-8bit", "--every-n", "1")), 0);
    has_line("    optim=\"adamw_bnb_8bit\",");
    has_line("  32-bit optimizer states: wte.weight, wpe.weight (nn.Embedding: the Trainer registers it for "
             "32-bit states), 98 tensors under 4096 elements (bitsandbytes min_8bit_size)");

    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--optimizer", "sgd", "--every-n", "2")), 0);
    has_line("sgd = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)");
    has_line("trainer = Trainer(model=model, args=args, optimizers=(sgd, None), ...)");
    assert_null(strstr(cli_out, "    optim_args="));
    assert_null(strstr(cli_out, "    optim=\"sgd\","));
    has_line("    gradient_checkpointing_kwargs={\"every_n_layers\": 2, \"offload\": False},");
}

/* A sequence beyond the model's positions is an input error unless allowed; the default
 * is min(4096, the limit); an allowed one is recorded and read back. */
static void positions(void **state)
{
    (void)state;
    assert_int_equal(run(A("--model", "gpt2", "--seq", "4096", "-o", "p.json")), 2);
    one_line("n_positions = 1024");
    assert_false(cli_exists("p.json"));
    assert_int_equal(run(A("--model", "gpt2", "--allow-long-seq", "--seq", "1025", "-o", "p.json")), 2);
    one_line("cannot run");

    assert_int_equal(run(A("--model", "gpt2", "--every-n", "off", "-q", "-o", "g.json")), 0);
    cJSON *j = read_plan("g.json");
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "seq")->valueint, 1024);
    cJSON_Delete(j);

    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "262144", "--every-n", "1", "-o", "l.json")), 2);
    one_line("--allow-long-seq");
    assert_false(cli_exists("l.json"));
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "262144", "--allow-long-seq", "--every-n", "1",
                           "--offload", "off", "-o", "l.json")), 0);
    assert_non_null(strstr(cli_out, "seq 262144 (beyond max_position_embeddings: --allow-long-seq)"));
    j = read_plan("l.json");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "allow_long_seq")));
    char *text = cJSON_Print(j);
    gckpt_plan_file pf;
    gckpt_err e;
    assert_true(gckpt_plan_parse("l.json", text, &pf, &e));
    assert_true(pf.allow_long_seq);
    gckpt_plan_file_free(&pf);
    free(text);
    /* without the flag the reader refuses it, naming the field */
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "inputs"), "allow_long_seq");
    text = cJSON_Print(j);
    assert_false(gckpt_plan_parse("l.json", text, &pf, &e));
    assert_non_null(strstr(e.msg, "inputs.seq"));
    free(text);
    cJSON_Delete(j);
}

/* --loss: recorded in the plan's inputs (absent for hf), read back by gckpt-run's reader;
 * refused in one line where it is not planned (docs/fused-loss.md) */
static void fused_loss(void **state)
{
    (void)state;
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "4096", "--precision", "bf16", "--loss", "cce",
                           "--every-n", "1", "-q", "-o", "f.json")), 0);
    cJSON *j = read_plan("f.json");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "loss")->valuestring, "cce");
    char *text = cJSON_Print(j);
    gckpt_plan_file pf;
    gckpt_err e;
    assert_true(gckpt_plan_parse("f.json", text, &pf, &e));
    assert_int_equal(pf.loss, GCKPT_LOSS_CCE);
    gckpt_plan_file_free(&pf);
    free(text);
    cJSON_Delete(j);
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "4096", "--every-n", "1", "-q", "-o", "h.json")), 0);
    j = read_plan("h.json");
    assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "loss"));
    cJSON_Delete(j);
    assert_int_equal(run(A("--model", "gpt2", "--loss", "liger", "-o", "b.json")), 2);
    one_line("--loss liger: liger-kernel 0.8.5 has no apply_liger_kernel_to_ function");
    one_line("model_type gpt2");
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--loss", "cce", "-o", "b.json")), 2);
    one_line("--precision bf16");
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--loss", "fused", "-o", "b.json")), 2);
    one_line("--loss: unknown 'fused'");
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--loss", "liger", "--target", "cpu", "-o", "b.json")), 2);
    one_line("--target cuda");
    assert_false(cli_exists("b.json"));
}

/* --liger-kernels (liger_kernel_config's keys): the kernels on recorded in inputs.liger_kernels,
 * read back as the bits off; without rms_norm and rope the layers (not checkpointed) keep transformers' norm and
 * rotary tensors, so the plan's peak is higher; refused in one line with a bad name or without
 * --loss liger, and a plan file with a bad name is refused naming the field */
static void liger_kernels(void **state)
{
    (void)state;
    char *base[] = {"--model", "llama-3.2-1b", "--seq", "4096", "--precision", "bf16", "--loss", "liger",
                    "--every-n", "0", "--offload", "off", "-q"};
    assert_int_equal(run(A(base[0], base[1], base[2], base[3], base[4], base[5], base[6], base[7], base[8], base[9],
                           base[10], base[11], base[12], "-o", "all.json")), 0);
    assert_int_equal(run(A(base[0], base[1], base[2], base[3], base[4], base[5], base[6], base[7], base[8], base[9],
                           base[10], base[11], base[12], "--liger-kernels", "swiglu,fused_linear_cross_entropy", "-o",
                           "some.json")), 0);
    cJSON *ja = read_plan("all.json"), *js = read_plan("some.json");
    const cJSON *la = cJSON_GetObjectItem(cJSON_GetObjectItem(ja, "inputs"), "liger_kernels");
    const cJSON *ls = cJSON_GetObjectItem(cJSON_GetObjectItem(js, "inputs"), "liger_kernels");
    assert_int_equal(cJSON_GetArraySize(la), 4);
    assert_int_equal(cJSON_GetArraySize(ls), 2);
    assert_string_equal(cJSON_GetArrayItem(ls, 0)->valuestring, "swiglu");
    double pa = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ja, "entries"), 0), "memory"),
                                    "peak_bytes")->valuedouble;
    double ps = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(js, "entries"), 0), "memory"),
                                    "peak_bytes")->valuedouble;
    assert_true(ps > pa);
    char *text = cJSON_Print(js);
    gckpt_plan_file pf;
    gckpt_err e;
    assert_true(gckpt_plan_parse("some.json", text, &pf, &e));
    assert_int_equal(pf.liger_off, (1 << GCKPT_LK_ROPE) | (1 << GCKPT_LK_RMS_NORM));
    gckpt_plan_file_free(&pf);
    free(text);
    cJSON_ReplaceItemInArray((cJSON *)ls, 0, cJSON_CreateString("layer_norm"));
    text = cJSON_Print(js);
    assert_false(gckpt_plan_parse("some.json", text, &pf, &e));
    assert_non_null(strstr(e.msg, "inputs.liger_kernels"));
    assert_non_null(strstr(e.msg, "layer_norm"));
    free(text);
    cJSON_Delete(ja);
    cJSON_Delete(js);
    assert_int_equal(run(A(base[0], base[1], base[2], base[3], base[4], base[5], base[6], base[7], base[8], base[9],
                           "--liger-kernels", "rope,bogus", "-o", "b.json")), 2);
    one_line("--liger-kernels: 'bogus' is not a Liger kernel");
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--liger-kernels", "rope", "-o", "b.json")), 2);
    one_line("--liger-kernels needs --loss liger");
    assert_false(cli_exists("b.json"));
}

/* A profile slow enough to make a step longer than the reader's bound is refused
 * before a plan is written. */
static void slow_profile(void **state)
{
    (void)state;
    cli_write("slow.json", "{\"schema\":\"gckpt.device/1\",\"name\":\"slow\",\"memory_bytes\":1125899906842624,"
                           "\"peak_tflops\":{\"fp32\":0.001,\"tf32\":0.001,\"bf16\":0.001,\"fp16\":0.001},"
                           "\"matmul_efficiency\":0.01,\"hbm_bytes_per_s\":1e6,\"hbm_efficiency\":0.01,"
                           "\"h2d_bytes_per_s\":1e6,\"d2h_bytes_per_s\":1e6,\"context_bytes\":0,"
                           "\"workspace_bytes\":0,\"alloc_round_bytes\":512,\"segment_round_bytes\":2097152}");
    assert_int_equal(run(A("--model", "llama-3.1-70b", "--gpu", "./slow.json", "--allow-long-seq", "--seq",
                           "4194304", "--every-n", "off", "-o", "s.json")), 2);
    one_line("profile's rates");
    assert_false(cli_exists("s.json"));
}

/* Every shipped model on every shipped GPU, with the defaults: the plan reader of
 * gckpt-run accepts the plan. */
static void shipped_plans_read_back(void **state)
{
    (void)state;
    static const char *models[] = {"gpt2", "gpt2-medium", "gpt2-xl", "llama-3.2-1b", "llama-3.2-3b",
                                   "llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.3", "qwen2.5-0.5b",
                                   "qwen2.5-7b", "qwen3-8b"};
    static const char *gpus[] = {"a100-40gb", "a100-80gb", "h100-pcie-80gb", "h100-sxm-80gb", "h200", "l40s",
                                 "rtx-4090"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        for (size_t k = 0; k < sizeof gpus / sizeof gpus[0]; k++) {
            gckpt_plan_request q = {.micro_batches = {1}, .n_micro = 1, .grad_accum = 1,
                                    .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW,
                                    .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05};
            snprintf(q.model_ref, sizeof q.model_ref, "%s", models[i]);
            snprintf(q.gpu_ref, sizeof q.gpu_ref, "%s", gpus[k]);
            gckpt_plan p;
            gckpt_err e;
            if (!gckpt_plan_run(&q, &p, &e)) fail_msg("%s on %s: %s", models[i], gpus[k], e.msg);
            cJSON *j = gckpt_plan_to_json(&p, true);
            char *text = cJSON_Print(j);
            gckpt_plan_file pf;
            if (!gckpt_plan_parse("plan.json", text, &pf, &e)) fail_msg("%s on %s: %s", models[i], gpus[k], e.msg);
            assert_int_equal(pf.n, p.n);
            assert_int_equal(pf.n_warnings, p.n_warnings);
            gckpt_plan_file_free(&pf);
            free(text);
            cJSON_Delete(j);
            gckpt_plan_free(&p);
        }
}

/* Plan args (writing w.json): the plan warns `has` (unless NULL) and not `lacks` (unless NULL). */
static void plan_warns(char *const args[], const char *has, const char *lacks)
{
    assert_int_equal(run(args), 0);
    cJSON *j = read_plan("w.json");
    if (has) assert_non_null(warning_of(j, has));
    if (lacks) assert_null(warning_of(j, lacks));
    cJSON_Delete(j);
}

/* Each documented limit shows where it applies, in the table and in the JSON. */
static void warnings(void **state)
{
    (void)state;
    /* fp32 + GQA under SDPA: what eager-like memory would be (without checkpointing the attention
     * matrices are live at the peak) */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "2048", "--precision", "fp32", "--every-n", "0",
                           "-o", "w.json")), 0);
    cJSON *j = read_plan("w.json");
    const char *m = warning_of(j, "sdpa_fp32_gqa_math_fallback");
    assert_non_null(m);
    assert_non_null(strstr(m, "about 31.89 GiB instead of 23.52 GiB"));
    assert_non_null(strstr(cli_out, "warning [sdpa_fp32_gqa_math_fallback]: fp32 with grouped-query attention"));
    cJSON_Delete(j);
    /* every_n 1: the peak is the embedding's backward, eager's is the same: no comparison of equals */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "2048", "--precision", "fp32", "--every-n", "1",
                           "-o", "w.json")), 0);
    j = read_plan("w.json");
    m = warning_of(j, "sdpa_fp32_gqa_math_fallback");
    assert_non_null(m);
    assert_null(strstr(m, "instead of"));
    assert_non_null(warning_of(j, "use_cache_on"));
    assert_null(warning_of(j, "padding_not_modelled"));
    cJSON_Delete(j);
    /* not for bf16, not for eager, not without GQA (gpt2) */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "2048", "--precision", "fp32", "--attention", "eager",
                           "--every-n", "1", "-q", "-o", "w.json")), 0);
    j = read_plan("w.json");
    assert_null(warning_of(j, "sdpa_fp32_gqa_math_fallback"));
    cJSON_Delete(j);
    assert_int_equal(run(A("--model", "gpt2", "--seq", "256", "--precision", "fp32", "--every-n", "1", "-q", "-o",
                           "w.json")), 0);
    j = read_plan("w.json");
    assert_null(warning_of(j, "sdpa_fp32_gqa_math_fallback"));
    cJSON_Delete(j);
    /* nor where eager attention runs although sdpa is asked for (Gemma 2: GQA, soft-capping) */
    plan_warns(A("--model", "gemma-2-2b", "--seq", "512", "--precision", "fp32", "--every-n", "1", "-q", "-o", "w.json"),
               "sdpa_unsupported_eager_planned", "sdpa_fp32_gqa_math_fallback");

    /* several GPUs: collective times always unverified; the scheduled working set of
     * fsdp / zero2 / zero3 said with its measured error and what is not measured, not for ddp */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--gpus", "8", "--parallel", "zero3", "--every-n", "1", "-q",
                           "-o", "w.json")), 0);
    j = read_plan("w.json");
    assert_non_null(warning_of(j, "collective_time_unverified"));
    m = warning_of(j, "parallel_peak_approximate");
    assert_non_null(m);
    assert_non_null(strstr(m, "within " GCKPT_PARALLEL_PEAK_BOUND_PCT " % of every measured rank"));
    cJSON_Delete(j);
    plan_warns(A("--model", "llama-3.1-8b", "--gpus", "8", "--parallel", "ddp", "--every-n", "1", "-q", "-o", "w.json"),
               "collective_time_unverified", "parallel_peak_approximate");
    /* QLoRA: the CUDA-only parts of bitsandbytes said per quantization, not for LoRA */
    plan_warns(A("--model", "llama-3.2-1b", "--seq", "512", "--method", "qlora", "--every-n", "1", "-q", "-o", "w.json"),
               "qlora_4bit_cuda_unverified", "qlora_int8_cuda_unverified");
    plan_warns(A("--model", "llama-3.2-1b", "--seq", "512", "--method", "qlora", "--quant", "int8", "--every-n", "1",
                 "-q", "-o", "w.json"),
               "qlora_int8_cuda_unverified", "qlora_4bit_cuda_unverified");
    /* the input an 8-bit linear keeps, and how long; the whole sentence (the message's
     * buffer is bounded) */
    j = read_plan("w.json");
    m = warning_of(j, "qlora_int8_cuda_unverified");
    assert_non_null(strstr(m, "kept by its autograd node to the end of the micro-step's backward"));
    assert_non_null(strstr(m, "outlier columns"));
    assert_non_null(strstr(m, "unverified, expect a higher peak"));
    cJSON_Delete(j);
    plan_warns(A("--model", "llama-3.2-1b", "--seq", "512", "--method", "lora", "--every-n", "1", "-q", "-o", "w.json"),
               NULL, "qlora_4bit_cuda_unverified");
    /* a list of modes: a later mode's warnings under the table, once */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--gpus", "8", "--parallel", "ddp,fsdp,zero3")), 0);
    const char *pw = strstr(cli_out, "warning [parallel_peak_approximate] (fsdp): ");
    assert_non_null(pw);
    assert_null(strstr(pw + 1, "warning [parallel_peak_approximate]"));
    assert_non_null(strstr(cli_out, "warning [collective_time_unverified]: "));
    assert_null(strstr(cli_out, "warning [collective_time_unverified] ("));
    plan_warns(A("--model", "gpt2", "--seq", "256", "--every-n", "1", "-q", "-o", "w.json"), NULL,
               "collective_time_unverified");
    /* mixture of experts: grouped_mm's CUDA paths; several GPUs measured on dense models only */
    plan_warns(A("--model", "mixtral-8x7b", "--seq", "512", "--every-n", "1", "-q", "-o", "w.json"),
               "moe_grouped_mm_cuda_unverified", "moe_parallel_unverified");
    plan_warns(A("--model", "olmoe-1b-7b", "--seq", "512", "--gpus", "2", "--parallel", "ddp", "--every-n", "1", "-q",
                 "-o", "w.json"),
               "moe_parallel_unverified", NULL);
    plan_warns(A("--model", "llama-3.2-1b", "--seq", "512", "--every-n", "1", "-q", "-o", "w.json"), NULL,
               "moe_grouped_mm_cuda_unverified");
    /* QLoRA on experts: only q/k/v/o quantized, the experts fp32 */
    plan_warns(A("--model", "qwen3-30b-a3b", "--seq", "512", "--every-n", "1", "--method", "qlora", "--lora-targets",
                 "q_proj,k_proj,v_proj,o_proj", "-q", "-o", "w.json"),
               "qlora_moe_experts_fp32", NULL);
    plan_warns(A("--model", "qwen3-30b-a3b", "--seq", "512", "--every-n", "1", "--method", "lora", "--lora-targets",
                 "q_proj,v_proj", "-q", "-o", "w.json"),
               NULL, "qlora_moe_experts_fp32");

    /* sliding windows: Mistral's (default 4096 when the key is absent) below seq */
    cli_write("mistral-sw.json", "{\"model_type\":\"mistral\",\"num_hidden_layers\":2,\"hidden_size\":64,"
                                 "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,"
                                 "\"vocab_size\":256,\"use_cache\":false}");
    assert_int_equal(run(A("--model", "./mistral-sw.json", "--seq", "8192", "--micro-batch", "1,2", "-q", "-o",
                           "w.json")), 0);
    j = read_plan("w.json");
    /* every layer slides: the masked SDPA form is planned (FINDINGS R-ATTN-8) */
    assert_null(warning_of(j, "sliding_window_not_modelled"));
    m = warning_of(j, "sliding_window_masked_sdpa");
    assert_non_null(m);
    assert_non_null(strstr(m, "every layer's sliding window (4096 tokens) is at most seq 8192"));
    assert_non_null(warning_of(j, "padding_not_modelled"));
    assert_null(warning_of(j, "use_cache_on"));
    cJSON_Delete(j);
    /* padding: eager builds the same mask either way (measured), also where transformers
     * runs eager for an sdpa request (Gemma 2's soft-capping) */
    plan_warns(A("--model", "./mistral-sw.json", "--seq", "1024", "--micro-batch", "2", "--attention", "eager", "-q",
                 "-o", "w.json"),
               NULL, "padding_not_modelled");
    plan_warns(A("--model", "gemma-2-2b", "--seq", "1024", "--micro-batch", "2", "--every-n", "1", "-q", "-o",
                 "w.json"),
               "sdpa_unsupported_eager_planned", "padding_not_modelled");
    assert_int_equal(run(A("--model", "./mistral-sw.json", "--seq", "4095", "-q", "-o", "w.json")), 0);
    j = read_plan("w.json");
    assert_null(warning_of(j, "sliding_window_not_modelled"));
    assert_null(warning_of(j, "sliding_window_masked_sdpa")); /* below the window: no mask */
    cJSON_Delete(j);
    /* eager materialises the masks at any length: modelled, no warning */
    assert_int_equal(run(A("--model", "./mistral-sw.json", "--seq", "8192", "--attention", "eager", "-q", "-o",
                           "w.json")), 0);
    j = read_plan("w.json");
    assert_null(warning_of(j, "sliding_window_not_modelled"));
    assert_null(warning_of(j, "sliding_window_masked_sdpa"));
    cJSON_Delete(j);
    /* Gemma 2 and gpt_oss asked for sdpa: planned as the eager attention transformers runs */
    static char *const refuses_sdpa[][2] = {
        {"gemma-2-2b", "gemma2 does not support sdpa (attention logit soft-capping)"},
        {"gpt-oss-20b", "gpt_oss does not support sdpa (attention sinks)"},
    };
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(run(A("--model", refuses_sdpa[i][0], "--seq", "1024", "--every-n", "1", "-q", "-o", "w.json")), 0);
        j = read_plan("w.json");
        m = warning_of(j, "sdpa_unsupported_eager_planned");
        assert_non_null(m);
        assert_non_null(strstr(m, refuses_sdpa[i][1]));
        cJSON_Delete(j);
    }
    /* Qwen2: only with use_sliding_window, only layers >= max_window_layers */
    cli_write("qwen-sw.json", "{\"model_type\":\"qwen2\",\"num_hidden_layers\":6,\"hidden_size\":64,"
                              "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,"
                              "\"vocab_size\":256,\"use_sliding_window\":true,\"sliding_window\":1024,"
                              "\"max_window_layers\":4}");
    assert_int_equal(run(A("--model", "./qwen-sw.json", "--seq", "2048", "-q", "-o", "w.json")), 0);
    j = read_plan("w.json");
    /* two block types (masked sliding layers, causal full ones): planned per layer */
    assert_null(warning_of(j, "sliding_window_not_modelled"));
    m = warning_of(j, "sliding_window_masked_sdpa");
    assert_non_null(m);
    assert_non_null(strstr(m, "2 of 6 layers use a sliding window (1024 tokens) at most seq 2048"));
    assert_non_null(strstr(m, "the other layers run causal SDPA without a mask"));
    cJSON_Delete(j);
    assert_int_equal(run(A("--model", "qwen2.5-7b", "--seq", "8192", "--every-n", "1", "-q", "-o", "w.json")), 0);
    j = read_plan("w.json");
    assert_null(warning_of(j, "sliding_window_masked_sdpa")); /* use_sliding_window: false */
    cJSON_Delete(j);

    /* dropout: modelled as CUDA runs it, which the CPU probe cannot measure (gpt2 ships 0.1) */
    assert_int_equal(run(A("--model", "gpt2", "--seq", "256", "--every-n", "1", "-q", "-o", "w.json")), 0);
    j = read_plan("w.json");
    m = warning_of(j, "dropout_cuda_sdpa_unverified");
    assert_non_null(m);
    assert_non_null(strstr(m, "could not measure"));
    cJSON_Delete(j);
    assert_int_equal(run(A("--model", "gpt2", "--seq", "256", "--every-n", "1", "--attention", "eager", "-o", "w.json")), 0);
    assert_non_null(strstr(cli_out, "warning [dropout_cuda_mask_unverified]"));
    j = read_plan("w.json");
    assert_null(warning_of(j, "dropout_cuda_sdpa_unverified"));
    assert_non_null(warning_of(j, "dropout_cuda_mask_unverified"));
    cJSON_Delete(j);
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "256", "--every-n", "1", "-q", "-o", "w.json")), 0);
    j = read_plan("w.json");
    assert_null(warning_of(j, "dropout_cuda_sdpa_unverified"));
    assert_null(warning_of(j, "dropout_cuda_mask_unverified"));
    cJSON_Delete(j);
}

/* TrainingArguments / attn_implementation spellings, any-case precisions, Hub ids. */
/* An option's or a value's name in --help as a word (not inside a longer name). */
static void in_help(const char *name)
{
    size_t n = strlen(name);
    for (const char *p = cli_out; (p = strstr(p, name)); p += n) {
        bool left = p == cli_out || strchr(" \n(|,", p[-1]), right = !p[n] || strchr(" \n),;:|=", p[n]);
        if (left && right) return;
    }
    fail_msg("--help does not list '%s':\n%s", name, cli_out);
}

/* --help lists every option gckpt-plan parses and every optimizer with its
 * TrainingArguments names (the paged ones were missing: issue 28) */
static void help_lists_everything(void **state)
{
    (void)state;
    static const char *const opts[] = {
        "--model", "--gpu", "--seq", "--allow-long-seq", "--micro-batch", "--grad-accum", "--global-batch",
        "--precision", "--optimizer", "--attention", "--method", "--lora-rank", "--lora-alpha", "--lora-dropout",
        "--lora-targets", "--modules-to-save", "--quant", "--double-quant", "--compute-dtype", "--quant-storage", "--gpus", "--nodes",
        "--parallel", "--moe-imbalance", "--deepspeed", "--fsdp-offload", "--every-n", "--offload", "--budget",
        "--margin", "-o", "--output", "--plot", "--table", "-q", "--quiet", "--list", "--calibrate-from", "-h", "--help", "-V",
        "--version"};
    assert_int_equal(run(A("--help")), 0);
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) in_help(opts[i]);
    for (const gckpt_plan_option *o = gckpt_plan_options; o->name; o++) { /* every planning option of the table */
        char name[64];
        snprintf(name, sizeof name, "--%s", o->name);
        in_help(name);
    }
    for (int i = 0; i < GCKPT_NOPT; i++) in_help(gckpt_optimizer_names[i]);
    /* and each TrainingArguments name the error message lists, which parses back */
    char list[512];
    gckpt_optimizer_spellings(list, sizeof list, false);
    for (char *tok = strtok(list, ", "); tok; tok = strtok(NULL, ", "))
        if (strcmp(tok, "or")) {
            in_help(tok);
            assert_true(gckpt_optimizer_from_user(tok) >= 0);
        }
}

static void aliases(void **state)
{
    (void)state;
    static const struct { const char *arg, *want; } opt[] = {
        {"adamw_torch_fused", "adamw"}, {"adamw_torch", "adamw-foreach"}, {"adamw_bnb_8bit", "adamw-8bit"},
        {"adamw_8bit", "adamw-8bit"},   {"sgd", "sgd"},
    };
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
        assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--every-n", "1", "--optimizer", (char *)opt[i].arg, "-q",
                               "-o", "a.json")), 0);
        cJSON *j = read_plan("a.json");
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "optimizer")->valuestring,
                            opt[i].want);
        cJSON_Delete(j);
    }
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--every-n", "1", "--precision", "BF16", "-q", "-o",
                           "a.json")), 0);
    cJSON *j = read_plan("a.json");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "precision")->valuestring, "bf16");
    cJSON_Delete(j);
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--every-n", "1", "--precision", "Amp-BF16")), 0);

    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--every-n", "1", "--attention", "flash_attention_2",
                           "-o", "a.json")), 0);
    assert_non_null(strstr(cli_out, "note: --attention flash_attention_2 is planned as sdpa"));
    has_line("model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=\"flash_attention_2\", "
             "dtype=torch.float32)");
    j = read_plan("a.json");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "inputs"), "attention")->valuestring, "sdpa");
    cJSON_Delete(j);

    /* a Hub id goes to the Hub (tests/hub_test.py runs a stand-in); offline with an empty
     * cache it is one line */
    char cache[320];
    snprintf(cache, sizeof cache, "HF_HUB_CACHE=%s/hf-empty", cli_dir);
    cli_opts off = {.env = {"HF_HUB_OFFLINE=1", cache}};
    assert_int_equal(cli_run_opts(GCKPT_PLAN_EXE, A("--model", "meta-llama/Llama-3.1-8B"), &off, err, sizeof err), 2);
    one_line("meta-llama/Llama-3.1-8B at revision main is not in the Hugging Face cache");
    assert_false(cli_exists("hf-empty"));
    assert_int_equal(run(A("--model", "gpt2", "--revision", "main")), 2);
    one_line("--revision applies to a Hugging Face model id (ORG/NAME), not to --model gpt2");
    assert_int_equal(run(A("--optimizer", "adam")), 2);
    one_line("adamw_bnb_8bit");
}

/* One line for an unknown option; header before the table; the peak in words. */
static void what_users_read(void **state)
{
    (void)state;
    assert_int_equal(run(A("--bogus", "--seq", "128")), 2);
    one_line("unknown option '--bogus' (see --help)");
    assert_int_equal(run(A("--budget=80GiB", "--frobnicate=3")), 2);
    one_line("unknown option '--frobnicate' (see --help)");
    assert_int_equal(run(A("-qz")), 2);
    one_line("unknown option '-z'");
    assert_int_equal(run(A("--seq")), 2);
    one_line("option '--seq' needs a value");
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--every-n", "off,1,2")), 0);
    const char *head = strstr(cli_out, "budget 79.65 GiB, usable 75.67 GiB");
    const char *table = strstr(cli_out, "every_n offload");
    assert_non_null(head);
    assert_non_null(table);
    assert_true(head < table);
    assert_true(cli_out == strstr(cli_out, "llama-3.1-8b (8030261248 parameters) on NVIDIA H100 SXM5 80GB"));
    assert_null(strstr(cli_out, "nll_loss.total_weight"));
    assert_null(strstr(cli_out, "logits.float"));
    assert_non_null(strstr(cli_out, "backward, lm_head/loss: fp32 logits gradient"));
    assert_non_null(strstr(cli_out, "backward, embedding: fp32 gradient of embed_tokens.weight"));
    assert_non_null(strstr(cli_out, "loss, lm_head/loss: computing the loss (nll_loss)"));
}

/* --plot: the budget is inside the x range, points coloured by every_n and shaped by
 * offload, no "recommended/fits" key when nothing fits, phases and the peak marked. */
static void plot_script(void **state)
{
    (void)state;
    assert_int_equal(cli_run(GCKPT_PLAN_EXE, A("-q", "--plot", "d.svg", "-o", "d.json"), "/nonexistent", err, sizeof err), 0);
    char path[512];
    gckpt_err e;
    cli_path("d.svg.gp", path, sizeof path);
    char *gp = gckpt_read_file(path, 1 << 20, &e);
    assert_non_null(gp);
    double lo = 0, hi = 0;
    const char *xr = strstr(gp, "set xrange [");
    assert_non_null(xr);
    assert_int_equal(sscanf(xr, "set xrange [%lf:%lf]", &lo, &hi), 2);
    assert_true(lo < 75.67 && 75.67 < hi); /* the default plan's usable budget */
    assert_non_null(strstr(gp, "lc palette title 'offload off (colour: every_n)'"));
    assert_non_null(strstr(gp, "title 'offload on'"));
    assert_null(strstr(gp, "recommended"));
    assert_non_null(strstr(gp, "nothing fits"));
    for (int k = 0; k < GCKPT_NPHASE; k++) {
        char t[64];
        snprintf(t, sizeof t, "title '%s'", gckpt_phase_names[k]);
        assert_non_null(strstr(gp, t));
    }
    /* the peak marked is the shown (smallest) entry's allocated peak */
    cJSON *j = read_plan("d.json");
    cJSON *ent = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "entries"),
                                    (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "smallest")));
    double pk = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(ent, "memory"), "peak_bytes"));
    char want[64];
    snprintf(want, sizeof want, "set label 4 'peak %.2f GiB'", pk / 1073741824.0);
    if (!strstr(gp, want)) fail_msg("no \"%s\" in the script", want);
    cJSON_Delete(j);
    free(gp);
    assert_int_equal(cli_run(GCKPT_PLAN_EXE, A("-q", "--precision", "bf16", "--optimizer", "adamw-8bit", "--seq", "8192",
                                               "--plot", "f.svg"), "/nonexistent", err, sizeof err), 0);
    cli_path("f.svg.gp", path, sizeof path);
    gp = gckpt_read_file(path, 1 << 20, &e);
    assert_non_null(strstr(gp, "title 'recommended (fits)'"));
    assert_null(strstr(gp, "nothing fits"));
    free(gp);
}

int main(void)
{
    gckpt_err e;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/../../reports/schema/plan.schema.json", 1 << 20, &e);
    if (!text || !(schema = gckpt_json_parse("plan.schema.json", text, &e))) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    free(text);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(snippets), cmocka_unit_test(positions), cmocka_unit_test(slow_profile),
        cmocka_unit_test(shipped_plans_read_back), cmocka_unit_test(warnings), cmocka_unit_test(aliases), cmocka_unit_test(help_lists_everything),
        cmocka_unit_test(what_users_read), cmocka_unit_test(plot_script), cmocka_unit_test(fused_loss), cmocka_unit_test(liger_kernels),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    cJSON_Delete(schema);
    return rc;
}
