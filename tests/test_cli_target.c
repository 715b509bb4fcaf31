/* gckpt-plan --target cpu|cuda through the command line. A sample of probe fixtures (every
 * family group, full fine-tuning, LoRA and QLoRA, offload, dropout, several micro-steps) is
 * planned from its own config.json with the exact-bytes CPU profile, as a user checking a
 * plan against a CPU run would: the plan's figures must be the probe's measurements
 * (offloaded and host bytes exact, the peak and after-forward bytes within the comparison
 * harness's tolerance) and byte for byte what the harness plans with the library
 * (tests/hf_compare.c). The profile's kind decides the target when --target is absent;
 * --target cuda plans CUDA's kernels (dropout's bool masks, no input casts in
 * bitsandbytes' layers under autocast, the CUDA RNG states). Bad values are refused with
 * one line naming the option or the field, and gckpt-run refuses a CPU plan. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "cli_harness.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/quant_layout.h"
#include "gckpt/util/jsonget.h"
#include "hf_compare.h"

#ifndef GCKPT_PLAN_EXE
#error GCKPT_PLAN_EXE must name the gckpt-plan binary
#endif
#ifndef GCKPT_RUN_EXE
#error GCKPT_RUN_EXE must name the gckpt-run binary
#endif

#define EXACT GCKPT_TEST_DATA "/devices/cpu-exact.json"

static char err[8192];

/* A fixture, and whether CUDA's kernels change its peak (the CPU rules it rests on). */
static const struct {
    const char *path;
    bool cuda_peak_differs;
} sample[] = {
    {"hf/llama-bf16-sdpa-n1-offload-b2s32.json", false},
    {"hf/llama-amp-bf16-eager-n2-plain-b1s48.json", false},
    {"hf/gpt2-fp32-eager-n1-offload-b2s32.json", false},
    {"hf-gen/gpt2-01-fp32-eager-n1-offload-b1s76-ga2.json", true},     /* dropout: noise vs bool masks */
    {"hf-fam/gemma2-bf16-eager-n2-offload-b2s32.json", false},
    {"hf-moe/mixtral-bf16-eager-n1-plain-b2s32.json", false},
    {"hf-peft/qwen2-lora-amp-bf16-all-d0.05-sdpa-n1-offload-b1s48.json", true}, /* LoRA dropout */
    {"hf-peft/qwen2-lora-bf16-all-d0-sdpa-n3-plain-b2s32.json", false},
    {"hf-peft/llama-qlora-nf4dq-amp-bf16-all-d0.05-sdpa-n3-plain-b2s32.json", true}, /* bnb's casts (C2) */
    {"hf-peft/qwen2-qlora-int8-fp32-all-d0.05-sdpa-n1-offload-b1s48.json", true},
    {"hf-peft/llama-lora-bf16-all-d0-sdpa-n1-offload-b1s48.json", false},  /* bf16 + fp32 add: a promoted copy */
    {"hf/gpt2-amp-bf16-sdpa-n2-offload-b2s32.json", false},                  /* CPU autocast's op lists */
    {"hf-peft/gpt2-qlora-nf4dq-amp-bf16-all-d0.05-sdpa-n2-plain-b2s32.json", true}, /* q/k/v casts */
};

static int plan(char *const args[]) { return cli_run(GCKPT_PLAN_EXE, args, NULL, err, sizeof err); }

/* stderr is exactly one line and holds needle */
static void one_line(const char *what, const char *needle)
{
    size_t len = strlen(err);
    if (len == 0 || err[len - 1] != '\n' || memchr(err, '\n', len - 1)) fail_msg("%s: stderr is not one line: '%s'", what, err);
    if (!strstr(err, needle)) fail_msg("%s: '%s' does not mention '%s'", what, err, needle);
}

static const cJSON *at(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static uint64_t u(const cJSON *o, const char *k)
{
    const cJSON *it = at(o, k);
    if (!cJSON_IsNumber(it)) fail_msg("plan: '%s' is not a number", k);
    return (uint64_t)it->valuedouble;
}

/* The plan file the last run wrote: its one entry's memory object (*root to free). */
static const cJSON *entry_memory(const char *name, cJSON **root, const char *target)
{
    char *t = cli_slurp(name);
    if (!t) fail_msg("%s was not written", name);
    *root = cJSON_Parse(t);
    free(t);
    if (!*root) fail_msg("%s is not JSON", name);
    const cJSON *in = at(*root, "inputs");
    if (!cJSON_IsString(at(in, "target")) || strcmp(at(in, "target")->valuestring, target))
        fail_msg("%s: inputs.target is not \"%s\"", name, target);
    const cJSON *es = at(*root, "entries");
    if (cJSON_GetArraySize(es) != 1) fail_msg("%s: %d entries, expected 1", name, cJSON_GetArraySize(es));
    return at(cJSON_GetArrayItem(es, 0), "memory");
}

/* The fixture's config.json as the user would have it, written to the scratch directory. */
static void write_config(const char *path)
{
    gckpt_err e = {{0}};
    char *text = gckpt_read_file(path, 256u << 20, &e);
    if (!text) fail_msg("%s", e.msg);
    cJSON *root = cJSON_Parse(text);
    free(text);
    char *cfg = root ? cJSON_Print(at(root, "config")) : NULL;
    if (!cfg) fail_msg("%s: no config", path);
    cli_write("config.json", cfg);
    free(cfg);
    cJSON_Delete(root);
}

/* "a,b,c" from the fixture's lora.targets (a string or a list) */
static void fixture_targets(const char *path, char *out, size_t n)
{
    gckpt_err e = {{0}};
    char *text = gckpt_read_file(path, 256u << 20, &e);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *tg = at(at(root, "lora"), "targets"), *it;
    out[0] = 0;
    if (cJSON_IsString(tg)) snprintf(out, n, "%s", tg->valuestring);
    cJSON_ArrayForEach(it, tg) if (cJSON_IsString(it)) {
        size_t k = strlen(out);
        snprintf(out + k, n - k, "%s%s", k ? "," : "", it->valuestring);
    }
    cJSON_Delete(root);
}

/* The command line of fixture f: argv (NULL-terminated) in args, its strings in buf. */
typedef struct {
    char *argv[48];
    int n;
    char buf[24][128];
    int nb;
} cmdline;

static void add(cmdline *c, const char *s) { c->argv[c->n++] = (char *)s; c->argv[c->n] = NULL; }

static void addf(cmdline *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(cmdline *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->buf[c->nb], sizeof c->buf[0], fmt, ap);
    va_end(ap);
    add(c, c->buf[c->nb++]);
}

static void fixture_cmdline(const char *path, const hf_fixture *f, const char *target, cmdline *c)
{
    const gckpt_setting *s = &f->s;
    memset(c, 0, sizeof *c);
    add(c, "--model");
    add(c, "./config.json");
    add(c, "--gpu");
    add(c, EXACT);
    if (target) {
        add(c, "--target");
        add(c, target);
    }
    add(c, "--precision");
    add(c, gckpt_precision_names[s->precision]);
    add(c, "--attention");
    add(c, gckpt_attention_names[s->attention]);
    add(c, "--seq");
    addf(c, "%llu", (unsigned long long)s->seq);
    add(c, "--micro-batch");
    addf(c, "%llu", (unsigned long long)s->micro_batch);
    add(c, "--grad-accum");
    addf(c, "%llu", (unsigned long long)s->grad_accum);
    add(c, "--every-n");
    addf(c, "%u", s->every_n);
    add(c, "--offload");
    add(c, s->offload ? "on" : "off");
    const gckpt_peft *pf = &s->peft;
    if (pf->method != GCKPT_METHOD_FULL) {
        static char targets[256];
        fixture_targets(path, targets, sizeof targets);
        add(c, "--method");
        add(c, gckpt_method_names[pf->method]);
        add(c, "--lora-rank");
        addf(c, "%u", pf->rank);
        add(c, "--lora-alpha");
        addf(c, "%.17g", pf->alpha);
        add(c, "--lora-dropout");
        addf(c, "%.17g", pf->dropout);
        add(c, "--lora-targets");
        add(c, targets);
    }
    if (pf->method == GCKPT_METHOD_QLORA) {
        add(c, "--quant");
        add(c, gckpt_quant_names[pf->quant]);
        if (pf->quant != GCKPT_QUANT_INT8) {
            add(c, "--double-quant");
            add(c, pf->double_quant ? "on" : "off");
            add(c, "--compute-dtype");
            add(c, pf->compute_dtype == GCKPT_DT_F32 ? "fp32" : pf->compute_dtype == GCKPT_DT_F16 ? "fp16" : "bf16");
        }
    }
    add(c, "-q");
    add(c, "-o");
    add(c, "plan.json");
}

static uint64_t checkpointed(const hf_fixture *f)
{
    uint64_t n = 0;
    for (uint64_t i = 0; f->s.every_n && i < f->m.layers; i++) n += i % f->s.every_n == 0;
    return n;
}

/* 1. --target cpu with the exact-bytes profile gives the probe's bytes for every fixture
 * of the sample, and the library harness's plan byte for byte; without --target the
 * profile's kind ("cpu") gives the same plan. */
static void test_cpu_plans_match_probe(void **st)
{
    (void)st;
    gckpt_device dev;
    gckpt_err e = {{0}};
    if (!gckpt_device_load(EXACT, &dev, &e)) fail_msg("%s", e.msg);
    assert_int_equal(dev.kind, GCKPT_TARGET_CPU);
    for (size_t i = 0; i < sizeof sample / sizeof sample[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", GCKPT_TEST_DATA, sample[i].path);
        static hf_fixture f;
        static hf_cmp c;
        if (!hf_fixture_read(path, &f, &e)) fail_msg("%s", e.msg);
        if (!f.comparable) fail_msg("%s: not comparable (%s)", path, f.why_not);
        if (!hf_compare(&f, &dev, &c, &e)) fail_msg("%s", e.msg);
        if (!hf_pass(&f, &c)) fail_msg("%s: the library harness fails it", path);
        write_config(path);
        for (int given = 0; given < 2; given++) {
            cmdline cl;
            fixture_cmdline(path, &f, given ? "cpu" : NULL, &cl);
            if (plan(cl.argv) != 0) fail_msg("%s: gckpt-plan failed: %s", path, err);
            cJSON *root;
            const cJSON *m = entry_memory("plan.json", &root, "cpu");
            uint64_t peak = u(m, "peak_bytes"), after = u(m, "after_forward_bytes");
            uint64_t pinned = u(m, "host_pinned_bytes"), rng = u(m, "host_rng_state_bytes");
            cJSON_Delete(root);
            /* the probe's measurements */
            double tol = hf_tolerance(&f);
            if (fabs((double)peak - f.peak) > tol * f.peak || fabs((double)after - f.after) > tol * f.after)
                fail_msg("%s: planned peak %llu / after forward %llu, measured %.0f / %.0f (tolerance %.1f%%)", path,
                         (unsigned long long)peak, (unsigned long long)after, f.peak, f.after, tol * 100);
            assert_int_equal(pinned, f.offload);
            assert_true(f.host_peak >= 0);
            assert_int_equal(pinned + rng, (uint64_t)f.host_peak);
            assert_int_equal(rng, checkpointed(&f) ? (checkpointed(&f) + 1) * GCKPT_CPU_RNG_STATE_BYTES : 0);
            /* the harness's plan */
            assert_int_equal(peak, c.peak);
            assert_int_equal(after, c.after);
            assert_int_equal(pinned + rng, c.host);
        }
    }
}

/* 2. --target cuda on the same profile plans CUDA's kernels: the CUDA RNG states on the
 * host, and another peak where a CPU rule applies (dropout's masks, bitsandbytes' casts). */
static void test_cuda_differs_where_it_should(void **st)
{
    (void)st;
    gckpt_err e = {{0}};
    for (size_t i = 0; i < sizeof sample / sizeof sample[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", GCKPT_TEST_DATA, sample[i].path);
        static hf_fixture f;
        if (!hf_fixture_read(path, &f, &e)) fail_msg("%s", e.msg);
        write_config(path);
        uint64_t peak[2], rng[2];
        for (int t = 0; t < 2; t++) {
            cmdline cl;
            fixture_cmdline(path, &f, t ? "cuda" : "cpu", &cl);
            if (plan(cl.argv) != 0) fail_msg("%s: gckpt-plan failed: %s", path, err);
            cJSON *root;
            const cJSON *m = entry_memory("plan.json", &root, t ? "cuda" : "cpu");
            peak[t] = u(m, "peak_bytes");
            rng[t] = u(m, "host_rng_state_bytes");
            cJSON_Delete(root);
        }
        uint64_t n = checkpointed(&f);
        bool mask_positional = f.m.family == GCKPT_FAMILY_GPT2 && f.s.attention == GCKPT_EAGER;
        uint64_t want = n ? (n + 1) * (GCKPT_CPU_RNG_STATE_BYTES + GCKPT_CUDA_RNG_STATE_BYTES * (1 + mask_positional)) : 0;
        if (rng[1] != want) fail_msg("%s: CUDA RNG state bytes %llu, expected %llu", path, (unsigned long long)rng[1], (unsigned long long)want);
        if (sample[i].cuda_peak_differs && peak[0] == peak[1])
            fail_msg("%s: --target cuda plans the CPU's peak %llu", path, (unsigned long long)peak[0]);
    }
}

/* 3. The default target is the profile's kind: a GPU profile plans CUDA. */
static void test_default_is_profile_kind(void **st)
{
    (void)st;
    assert_int_equal(plan(A("--model", "gpt2", "--seq", "128", "--every-n", "2", "--offload", "off", "-q", "-o", "plan.json")), 0);
    cJSON *root;
    const cJSON *m = entry_memory("plan.json", &root, "cuda");
    assert_int_equal(u(m, "host_rng_state_bytes"), 7 * (GCKPT_CPU_RNG_STATE_BYTES + GCKPT_CUDA_RNG_STATE_BYTES));
    cJSON_Delete(root);
    /* the table's header says which kernels */
    assert_int_equal(plan(A("--model", "gpt2", "--seq", "128", "--every-n", "2", "--offload", "off", "--gpu", EXACT)), 0);
    assert_non_null(strstr(cli_out, "(PyTorch CPU kernels)"));
    assert_int_equal(plan(A("--model", "gpt2", "--seq", "128", "--every-n", "2", "--offload", "off", "--gpu", EXACT,
                            "--target", "cuda")), 0);
    assert_non_null(strstr(cli_out, "(CUDA kernels)"));
}

/* 4. Bad values: one line naming the option or the field, exit 2, no plan. */
static void test_bad_values(void **st)
{
    (void)st;
    const struct {
        const char *what;
        char *const *args;
        const char *needle;
    } cases[] = {
        {"unknown target", A("--model", "gpt2", "--target", "tpu", "-o", "bad.json"), "--target"},
        {"empty target", A("--model", "gpt2", "--target", "", "-o", "bad.json"), "--target"},
        {"upper-case target", A("--model", "gpt2", "--target", "CPU", "-o", "bad.json"), "--target"},
        {"target without value", A("--model", "gpt2", "-o", "bad.json", "--target"), "--target"},
        {"flash-attn on the CPU", A("--model", "gpt2", "--target", "cpu", "--attention", "flash_attention_2", "-o", "bad.json"),
         "--attention flash_attention_2"},
        {"flash-attn on a CPU profile", A("--model", "gpt2", "--gpu", EXACT, "--attention", "flash_attention_2", "-o", "bad.json"),
         "kind cpu"},
        {"profile kind unknown", A("--model", "gpt2", "--gpu", "./kind-tpu.json", "-o", "bad.json"), "'kind'"},
        {"profile kind a number", A("--model", "gpt2", "--gpu", "./kind-num.json", "-o", "bad.json"), "'kind'"},
        {"profile kind hostile", A("--model", "gpt2", "--gpu", "./kind-esc.json", "-o", "bad.json"), "'kind'"},
    };
    gckpt_err e = {{0}};
    char *t = gckpt_read_file(EXACT, 1u << 20, &e);
    if (!t) fail_msg("%s", e.msg);
    static const struct { const char *file, *value; } kinds[] = {
        {"kind-tpu.json", "\"tpu\""}, {"kind-num.json", "3"}, {"kind-esc.json", "\"\\u001b[31mcpu\\n\""}};
    for (size_t k = 0; k < 3; k++) {
        char *p = strstr(t, "\"kind\": \"cpu\"");
        assert_non_null(p);
        char buf[8192];
        snprintf(buf, sizeof buf, "%.*s\"kind\": %s%s", (int)(p - t), t, kinds[k].value, p + strlen("\"kind\": \"cpu\""));
        cli_write(kinds[k].file, buf);
    }
    free(t);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = plan(cases[i].args);
        if (rc != 2) fail_msg("%s: exit %d, expected 2 (%s)", cases[i].what, rc, err);
        one_line(cases[i].what, cases[i].needle);
        if (strchr(err, '\033')) fail_msg("%s: an escape reached stderr", cases[i].what);
        assert_false(cli_exists("bad.json"));
    }
}

/* 5. gckpt-run executes CUDA plans only: a CPU plan is refused with one line naming
 * inputs.target; its CUDA twin is read. */
static void test_run_refuses_cpu_plan(void **st)
{
    (void)st;
    assert_int_equal(plan(A("--model", GCKPT_TEST_DATA "/../executor/data/tiny-llama.json", "--gpu", EXACT, "--seq", "16",
                            "--every-n", "1", "--offload", "off", "-q", "-o", "cpu.json")), 0);
    int rc = cli_run(GCKPT_RUN_EXE, A("--plan", "cpu.json", "--backend", "host", "-q"), NULL, err, sizeof err);
    assert_int_equal(rc, 2);
    one_line("cpu plan", "inputs.target");
}

int main(void)
{
    if (!cli_setup("gckpt-target")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_plans_match_probe),
        cmocka_unit_test(test_cuda_differs_where_it_should),
        cmocka_unit_test(test_default_is_profile_kind),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_run_refuses_cpu_plan),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cli_teardown();
    return rc;
}
