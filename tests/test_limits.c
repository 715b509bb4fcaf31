/* Limits that protect users: a request whose host-side work or sizes are absurd is
 * refused at once (exit 2, one line naming the file or option, no output file) instead
 * of running for minutes, allocating gigabytes or overflowing 64-bit byte counts; a
 * large but sane one still plans. Names read from files cannot inject commands into the
 * gnuplot script. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_harness.h"

static int run(char *const args[], char *err, size_t n) { return cli_run(GCKPT_PLAN_EXE, args, NULL, err, n); }

#include "gckpt/util/jsonget.h"
#include "gckpt/planner/plan.h"

#ifndef GCKPT_PLAN_EXE
#error GCKPT_PLAN_EXE must name the gckpt-plan binary
#endif


/* 4096 layers (the reader's maximum) with every other dimension at its maximum. */
static const char huge_cfg[] =
    "{\"model_type\":\"llama\",\"num_hidden_layers\":4096,\"hidden_size\":1048576,"
    "\"num_attention_heads\":4096,\"num_key_value_heads\":4096,\"intermediate_size\":4194304,"
    "\"vocab_size\":16777216}";
/* 4096 small layers: cheap sizes, many layers. */
static const char deep_cfg[] =
    "{\"model_type\":\"llama\",\"num_hidden_layers\":4096,\"hidden_size\":1024,"
    "\"num_attention_heads\":8,\"intermediate_size\":4096,\"vocab_size\":32000}";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}






/* Exit 2 within a second, one line containing needle, no plan written. */
static void refused(char *const args[], const char *needle)
{
    char err[2048];
    double t0 = now();
    int rc = run(args, err, sizeof err);
    double dt = now() - t0;
    if (rc != 2) fail_msg("exit %d (expected 2), stderr: %s", rc, err);
    char *nl = strchr(err, '\n');
    if (!nl || nl[1]) fail_msg("expected one line on stderr, got: %s", err);
    if (!strstr(err, needle)) fail_msg("'%s' not in: %s", needle, err);
    if (!strstr(err, "gckpt-plan: ")) fail_msg("no program name in: %s", err);
    if (cli_exists("out.json")) fail_msg("a plan was written although the request was refused");
    if (dt > 5.0) fail_msg("refusing took %.1f s", dt);
    printf("refused in %.3f s: %s", dt, err);
}

/* A model with maximal dimensions at seq 16M: every step bound exceeds 2^62 bytes.
 * Before the bound, micro-batch 2 and up ran and printed peaks of ~9.22e18 bytes:
 * signed 64-bit running totals had wrapped. */
static void huge_dims(void **state)
{
    (void)state;
    cli_write("huge.json", huge_cfg);
    refused(A("--model", "huge.json", "--allow-long-seq", "--seq", "16777216", "-o", "out.json"), "huge: at micro-batch 1, seq 16777216");
    refused(A("--model", "huge.json", "--allow-long-seq", "--seq", "16777216", "--micro-batch", "2", "-o", "out.json"), "2^62 bytes");
    refused(A("--model", "huge.json", "--allow-long-seq", "--seq", "16777216", "--micro-batch", "16", "-o", "out.json"), "reduce --seq");

    /* the library says the same, and names the model */
    gckpt_model m;
    gckpt_err err = {{0}};
    assert_true(gckpt_model_parse("huge.json", huge_cfg, &m, &err));
    static gckpt_recipe r;
    gckpt_recipe_build(&m, GCKPT_AMP_BF16, GCKPT_SDPA, &r);
    gckpt_device d;
    assert_true(gckpt_device_load("h100-sxm-80gb", &d, &err));
    gckpt_setting s = {.seq = 1u << 24, .micro_batch = 1, .grad_accum = 1, .precision = GCKPT_AMP_BF16,
                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA};
    gckpt_ctx c;
    assert_false(gckpt_ctx_init(&c, &m, &d, &r, &s, &err));
    assert_non_null(strstr(err.msg, "huge.json: "));
}

/* Every figure of an accepted large request is exact: the breakdown sums to the peak,
 * nothing is negative, the peak is below the bound. */
static void large_but_sane(void **state)
{
    (void)state;
    gckpt_plan_request q = {.seq = 1u << 24, .micro_batches = {1, 64}, .n_micro = 2, .grad_accum = 1,
                            .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW,
                            .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05,
                            .allow_long_seq = true};
    snprintf(q.model_ref, sizeof q.model_ref, "llama-3.1-70b");
    snprintf(q.gpu_ref, sizeof q.gpu_ref, "h100-sxm-80gb");
    gckpt_plan p;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
    for (size_t i = 0; i < p.n; i++) {
        const gckpt_result *r = &p.entries[i].r;
        int64_t sum = 0;
        for (int k = 0; k < GCKPT_NCOMP; k++) {
            assert_true(r->breakdown[k] >= 0);
            sum += r->breakdown[k];
        }
        assert_int_equal((uint64_t)sum, r->peak_bytes);
        assert_true(r->peak_bytes < GCKPT_MAX_STEP_BYTES);
        assert_true(r->device_peak_bytes >= r->peak_bytes);
    }
    gckpt_plan_free(&p);
}

/* The default sweep of a 4096-layer model plans (8193 entries x 4096 layers); 64
 * micro-batch sizes of it (524352 entries, 2.1e9 layer evaluations: 45 s and 3.6 GB
 * with -o before the limit) are refused at once. */
static void sweep_work(void **state)
{
    (void)state;
    cli_write("deep.json", deep_cfg);
    char mbs[256] = "";
    for (int i = 1; i <= 64; i++) snprintf(mbs + strlen(mbs), sizeof mbs - strlen(mbs), "%s%d", i > 1 ? "," : "", i);
    refused(A("--model", "deep.json", "--seq", "1024", "--micro-batch", mbs, "-o", "out.json"), "layer evaluations");

    char path[512];
    cli_path("deep.json", path, sizeof path);
    gckpt_plan_request q = {.seq = 1024, .micro_batches = {1}, .n_micro = 1, .grad_accum = 1,
                            .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW,
                            .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05};
    snprintf(q.model_ref, sizeof q.model_ref, "%s", path);
    snprintf(q.gpu_ref, sizeof q.gpu_ref, "h100-sxm-80gb");
    gckpt_plan p;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
    assert_int_equal(p.n, 8193);
    gckpt_plan_free(&p);

    q.n_micro = 64;
    for (int i = 0; i < 64; i++) q.micro_batches[i] = (uint64_t)i + 1;
    assert_false(gckpt_plan_run(&q, &p, &err));
    assert_non_null(strstr(err.msg, "narrow --every-n or --micro-batch"));
}

/* Duplicate keys are refused in n log n: 200k keys took ~45 s with the pairwise scan. */
static void many_keys(void **state)
{
    (void)state;
    size_t cap = 8u << 20, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text, cap, "%s", deep_cfg);
    len--; /* drop the closing brace */
    for (int i = 0; i < 200000; i++) len += (size_t)snprintf(text + len, cap - len, ",\"k%d\":%d", i, i);
    snprintf(text + len, cap - len, "}");
    gckpt_model m;
    gckpt_err err = {{0}};
    double t0 = now();
    assert_true(gckpt_model_parse("keys.json", text, &m, &err));
    /* the same with one duplicate at the end */
    snprintf(text + len, cap - len, ",\"k7\":1}");
    assert_false(gckpt_model_parse("keys.json", text, &m, &err));
    double dt = now() - t0;
    assert_non_null(strstr(err.msg, "keys.json: field 'k7' appears twice"));
    if (dt > 5.0) fail_msg("parsing 200k keys twice took %.1f s", dt);
    free(text);
}

/* Names from downloaded files end up in the gnuplot script inside single quotes: a
 * quote in a GPU name must not end the string (it could run system()), a newline must
 * not end the command. */
static void plot_script_quotes_names(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/devices/h100-sxm-80gb.json", getenv("GCKPT_DATA_DIR") ? getenv("GCKPT_DATA_DIR") : ".");
    gckpt_err err = {{0}};
    char *text = gckpt_read_file(path, 1u << 20, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    cJSON_ReplaceItemInObject(j, "name", cJSON_CreateString("H100' ; system('touch PWNED') ; print '\nsystem('touch PWNED2')"));
    char *dev = cJSON_Print(j);
    cJSON_Delete(j);
    cli_write("evil-gpu.json", dev);
    free(dev);
    char out[2048];
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--gpu", "./evil-gpu.json", "-q", "--plot", "it's.svg"), out, sizeof out), 0);
    assert_false(cli_exists("PWNED"));
    assert_false(cli_exists("PWNED2"));
    cli_path("it's.svg.gp", path, sizeof path);
    text = gckpt_read_file(path, 1u << 20, &err);
    if (!text) fail_msg("%s", err.msg);
    assert_non_null(strstr(text, "set output 'it''s.svg'"));
    assert_non_null(strstr(text, "on H100'' ; system(''touch PWNED'') ; print ''?system(''touch PWNED2''), seq 128"));
    assert_non_null(strstr(text, "plot 'it''s.svg.entries.dat' using"));
    free(text);
    /* a control character in the plot's own name is refused before anything is written */
    refused(A("--model", "gpt2", "--seq", "128", "-o", "out.json", "--plot", "a\nb.svg"), "control character");
    const char *side[] = {"it's.svg", "it's.svg.gp", "it's.svg.entries.dat", "it's.svg.timeline.dat", "evil-gpu.json"};
    for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
        cli_path(side[i], path, sizeof path);
        unlink(path);
    }
}

static int setup(void **state)
{
    (void)state;
    return cli_setup("gckpt-limits") ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cli_teardown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(huge_dims),
        cmocka_unit_test(large_but_sane),
        cmocka_unit_test(sweep_work),
        cmocka_unit_test(many_keys),
        cmocka_unit_test(plot_script_quotes_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
