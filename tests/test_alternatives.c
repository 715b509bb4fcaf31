/* "What would fit instead" on several GPUs (gckpt_plan_print_alternatives, planner/alternatives.c):
 * the other modes and the tensor- and context-parallel layouts the planner accepts for the model
 * and the world,
 * each line the recommended (or smallest) entry of that layout's own plan, planned separately from
 * the options a user would type (the memory and time of a TP plan are checked against the fixtures
 * in test_parallel_tp; here only which layouts are tried and what their lines say):
 *   - a case where only TP fits (llama-3.1-70b on 8 GPUs at a 138 GiB budget): --tp 8 fits, the
 *     modes do not, each TP line (TP alone, x FSDP, x DDP) equals its separate plan's entry;
 *   - a model with q / k norms (qwen3): TP alone is said, TP x FSDP (refused for it) is not;
 *   - several nodes: the TP layouts with a TP group inside a node (the rest across nodes), each
 *     line equal to its separate plan's entry on the same nodes; no TP group wider than a node;
 *   - a TP request: the modes over its GPUs and the other TP layouts, not itself;
 *   - a case where only CP fits (llama-3.1-8b on 8 H100s at 128k tokens, HF's fp32 logits over
 *     the whole sequence): --cp 8 and --cp 4 --dp-shard 2 fit, no mode or TP layout (HSDP x TP
 *     included) does, each line equal to its separate plan's entry (the CP plan's memory and time
 *     are checked against the fixtures in test_parallel_cp*);
 *   - CP refused (q / k norms, activation offload on): no CP line; over several nodes the CP
 *     layouts, each line equal to its separate plan's entry;
 *   - a CP request: the modes (fsdp included, with the request's offload sweep), the TP layouts
 *     and the other CP layouts, not itself;
 *   - FSDP2 with CPU offload (--fsdp-offload on) when the request has none: QLoRA llama-3.1-70b
 *     on 2 RTX 4090s fits only so. */
#define _GNU_SOURCE /* open_memstream */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/planner/plan.h"
#include "gckpt/planner/plan_args.h"

/* The request of a command line's planning options (NULL-terminated, "--name", "value" pairs or
 * a flag), through the CLI's own reader. */
static void request(const char *const *argv, gckpt_plan_args *a)
{
    gckpt_plan_args_init(a);
    for (int i = 0; argv[i]; i++) {
        const gckpt_plan_option *o = gckpt_plan_option_find(argv[i] + 2);
        if (!o) fail_msg("unknown option %s", argv[i]);
        const char *v = o->has_arg ? argv[++i] : NULL;
        if (gckpt_plan_args_set(a, o, v)) fail_msg("%s: %s", argv[i], a->err.msg);
    }
    if (gckpt_plan_args_finish(a)) fail_msg("%s", a->err.msg);
}

/* The alternatives' text of a request that fits nowhere (malloc'd). */
static char *alternatives(const char *const *argv)
{
    gckpt_plan_args a;
    request(argv, &a);
    gckpt_plan p;
    gckpt_err err;
    if (!gckpt_plan_run(&a.req, &p, &err)) fail_msg("%s", err.msg);
    assert_true(p.recommended < 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    gckpt_plan_print_alternatives(&a.req, &p, f);
    fclose(f);
    gckpt_plan_free(&p);
    gckpt_plan_args_free(&a);
    return text;
}

/* The line that starts with "  " label followed by spaces, or NULL. */
static const char *line_of(const char *text, const char *label)
{
    size_t n = strlen(label);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, "  ", 2) && !strncmp(l + 2, label, n) && l[2 + n] == ' ') {
            const char *v = l + 2 + n;
            while (*v == ' ') v++;
            /* "--tp 2" must not match "--tp 2 --dp-shard 4" */
            if (strncmp(v, "fits: ", 6) && strncmp(v, "does not fit either", 19)) continue;
            return l;
        }
    return NULL;
}

/* The layout's own plan (base options + the layout's), as its alternatives line says it. */
static void expected_line(const char *const *base, const char *const *layout, char *out, size_t n)
{
    const char *argv[64];
    int k = 0;
    for (int i = 0; base[i]; i++) argv[k++] = base[i];
    for (int i = 0; layout[i]; i++) argv[k++] = layout[i];
    argv[k] = NULL;
    gckpt_plan_args a;
    request(argv, &a);
    gckpt_plan p;
    gckpt_err err;
    if (!gckpt_plan_run(&a.req, &p, &err)) fail_msg("%s", err.msg);
    if (p.recommended >= 0) {
        const gckpt_entry *e = &p.entries[p.recommended];
        char en[16];
        if (e->every_n) snprintf(en, sizeof en, "%u", e->every_n);
        else snprintf(en, sizeof en, "off");
        snprintf(out, n, "fits: every_n_layers=%s offload=%s mb %llu, %.2f GiB per rank, step %.3f s, %.0f tokens/s per GPU\n",
                 en, e->offload ? "on" : "off", (unsigned long long)e->micro_batch,
                 (double)e->r.device_peak_bytes / 1073741824.0, e->r.step_s, e->r.tokens_per_s);
    } else {
        snprintf(out, n, "does not fit either (smallest %.2f GiB)\n",
                 (double)p.entries[p.smallest].r.device_peak_bytes / 1073741824.0);
    }
    gckpt_plan_free(&p);
    gckpt_plan_args_free(&a);
}

static void check_line(const char *text, const char *label, const char *const *base, const char *const *layout)
{
    const char *l = line_of(text, label);
    if (!l) fail_msg("no line for %s in:\n%s", label, text);
    char want[256];
    expected_line(base, layout, want, sizeof want);
    const char *v = l + 2 + strlen(label);
    while (*v == ' ') v++;
    if (strncmp(v, want, strlen(want))) fail_msg("%s: '%.*s', its own plan: '%s'", label, (int)strcspn(v, "\n"), v, want);
}

/* llama-3.1-70b on 8 H100s at 8k tokens under a 138 GiB budget (no margin): FSDP2's smallest is
 * 140.7 GiB, ZeRO-3's 144.4, TP 4 x FSDP 2's 144.2; TP 8 alone fits at 135.7 GiB. */
static void test_only_tp_fits(void **state)
{
    (void)state;
    static const char *const base[] = {"--model", "llama-3.1-70b", "--gpus", "8", "--seq", "8192", "--budget",
                                       "138GiB", "--margin", "0", "--every-n", "1", NULL};
    const char *req[] = {"--model", "llama-3.1-70b", "--gpus", "8", "--seq", "8192", "--budget", "138GiB", "--margin",
                         "0", "--every-n", "1", "--parallel", "fsdp", NULL};
    char *text = alternatives(req);
    print_message("%s", text);
    static const char *const tp8[] = {"--tp", "8", NULL}, *const tp4[] = {"--tp", "4", "--dp-shard", "2", NULL},
                             *const tp2[] = {"--tp", "2", "--dp-shard", "4", NULL},
                             *const z3[] = {"--parallel", "zero3", NULL}, *const ddp[] = {"--parallel", "ddp", NULL};
    check_line(text, "--tp 8", base, tp8);
    check_line(text, "--tp 4 --dp-shard 2", base, tp4);
    check_line(text, "--tp 2 --dp-shard 4", base, tp2);
    static const char *const td4[] = {"--tp", "2", "--dp-replicate", "4", NULL};
    check_line(text, "--tp 2 --dp-replicate 4", base, td4);
    check_line(text, "--parallel zero3", base, z3);
    check_line(text, "--parallel ddp", base, ddp);
    /* only TP fits: its line says so, every mode's does not */
    assert_non_null(strstr(line_of(text, "--tp 8"), "fits: every_n_layers=1"));
    assert_null(line_of(text, "--parallel fsdp")); /* the request itself */
    static const char *const modes[] = {"--parallel ddp", "--parallel zero1", "--parallel zero2", "--parallel zero3"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const char *l = line_of(text, modes[i]);
        assert_non_null(l);
        const char *v = l + 2 + strlen(modes[i]);
        while (*v == ' ') v++;
        assert_int_equal(strncmp(v, "does not fit either", 19), 0);
    }
    assert_non_null(strstr(text, "(--tp T: the T ranks of a TP group share one batch"));
    free(text);
}

/* qwen3 (q / k norms): TP alone is planned, TP x FSDP is refused, so only --tp 4 is said. */
static void test_refused_layouts_left_out(void **state)
{
    (void)state;
    const char *req[] = {"--model", "qwen3-8b", "--gpus", "4", "--seq", "131072", "--allow-long-seq", "--every-n", "1",
                         "--parallel", "ddp", NULL};
    char *text = alternatives(req);
    print_message("%s", text);
    assert_non_null(line_of(text, "--tp 4"));
    assert_null(strstr(text, "--dp-shard"));
    assert_null(strstr(text, "--dp-replicate"));
    free(text);
    /* several nodes: TP layouts with a TP group inside a node (T divides its 4 GPUs), the rest across
     * nodes, each said as its own plan on the same nodes; no TP group of 8 (it would span nodes) */
    static const char *const nbase[] = {"--model", "llama-3.1-70b", "--gpus", "4", "--nodes", "2", "--seq", "8192",
                                        "--every-n", "1", NULL};
    const char *nodes[] = {"--model", "llama-3.1-70b", "--gpus", "4", "--nodes", "2", "--seq", "8192", "--every-n",
                           "1", "--parallel", "ddp", NULL};
    text = alternatives(nodes);
    static const char *const tp4s2[] = {"--tp", "4", "--dp-shard", "2", NULL},
                             *const tp2r2s2[] = {"--tp", "2", "--dp-replicate", "2", "--dp-shard", "2", NULL},
                             *const fsdp[] = {"--parallel", "fsdp", NULL};
    check_line(text, "--parallel fsdp", nbase, fsdp);
    check_line(text, "--tp 4 --dp-shard 2", nbase, tp4s2);
    check_line(text, "--tp 2 --dp-replicate 2 --dp-shard 2", nbase, tp2r2s2);
    assert_null(line_of(text, "--tp 8"));
    free(text);
}

/* A TP request that fits nowhere: the modes over its T x S GPUs and the other TP layouts, not its own. */
static void test_tp_request(void **state)
{
    (void)state;
    static const char *const base[] = {"--model", "llama-3.1-70b", "--gpus", "8", "--seq", "8192", "--budget",
                                       "138GiB", "--margin", "0", "--every-n", "1", NULL};
    const char *req[] = {"--model", "llama-3.1-70b", "--gpus", "8", "--seq", "8192", "--budget", "138GiB", "--margin",
                         "0", "--every-n", "1", "--tp", "4", "--dp-shard", "2", NULL};
    char *text = alternatives(req);
    print_message("%s", text);
    static const char *const tp8[] = {"--tp", "8", NULL}, *const fsdp[] = {"--parallel", "fsdp", NULL};
    check_line(text, "--tp 8", base, tp8);
    check_line(text, "--parallel fsdp", base, fsdp);
    assert_null(line_of(text, "--tp 4 --dp-shard 2"));
    assert_non_null(line_of(text, "--tp 2 --dp-shard 4"));
    free(text);
}

/* llama-3.1-8b on 8 H100s at 128k tokens: HF's fp32 logits and their gradient over the whole
 * sequence put every mode and TP layout above 200 GiB; CP splits the sequence (each rank's logits
 * of seq / C tokens): --cp 8 fits, and --cp 4 --dp-shard 2. */
static const char *const cp_base[] = {"--model", "llama-3.1-8b", "--gpus", "8", "--seq", "131072", NULL};

static void test_only_cp_fits(void **state)
{
    (void)state;
    const char *req[] = {"--model", "llama-3.1-8b", "--gpus", "8", "--seq", "131072", "--parallel", "fsdp", NULL};
    char *text = alternatives(req);
    print_message("%s", text);
    static const char *const cp8[] = {"--cp", "8", NULL}, *const cp4[] = {"--cp", "4", "--dp-shard", "2", NULL},
                             *const cp2[] = {"--cp", "2", "--dp-shard", "4", NULL},
                             *const cp2h[] = {"--cp", "2", "--dp-replicate", "2", "--dp-shard", "2", NULL},
                             *const hsdp_tp[] = {"--tp", "2", "--dp-replicate", "2", "--dp-shard", "2", NULL},
                             *const tp8[] = {"--tp", "8", NULL}, *const z3[] = {"--parallel", "zero3", NULL};
    check_line(text, "--cp 8", cp_base, cp8);
    check_line(text, "--cp 4 --dp-shard 2", cp_base, cp4);
    check_line(text, "--cp 2 --dp-shard 4", cp_base, cp2);
    check_line(text, "--cp 2 --dp-replicate 2 --dp-shard 2", cp_base, cp2h); /* CP x HSDP (R-CP-17) */
    check_line(text, "--tp 2 --dp-replicate 2 --dp-shard 2", cp_base, hsdp_tp);
    check_line(text, "--tp 8", cp_base, tp8);
    check_line(text, "--parallel zero3", cp_base, z3);
    assert_non_null(strstr(line_of(text, "--cp 8"), "fits: every_n_layers="));
    assert_non_null(strstr(line_of(text, "--cp 4 --dp-shard 2"), "fits: every_n_layers="));
    /* nothing else fits: every line before the CP ones says so */
    static const char *const others[] = {"--parallel ddp", "--parallel zero1", "--parallel zero2", "--parallel zero3",
                                         "--tp 2 --dp-shard 4", "--tp 2 --dp-replicate 4",
                                         "--tp 2 --dp-replicate 2 --dp-shard 2", "--tp 4 --dp-shard 2",
                                         "--tp 4 --dp-replicate 2", "--tp 8"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        const char *l = line_of(text, others[i]);
        if (!l) fail_msg("no line for %s", others[i]);
        const char *v = l + 2 + strlen(others[i]);
        while (*v == ' ') v++;
        assert_int_equal(strncmp(v, "does not fit either", 19), 0);
    }
    assert_null(line_of(text, "--parallel fsdp")); /* the request itself */
    assert_non_null(strstr(text, "(--cp C: the C ranks of a CP group share one batch"));
    free(text);
}

/* CP refused by the planner: no --cp line (q / k norms, FSDP2's CPU offload); over nodes it is
 * planned (the ring at its group's placement). */
static void test_refused_cp_left_out(void **state)
{
    (void)state;
    const char *qwen[] = {"--model", "qwen3-8b", "--gpus", "4", "--seq", "131072", "--allow-long-seq", "--every-n", "1",
                          "--parallel", "ddp", NULL};
    char *text = alternatives(qwen);
    assert_non_null(line_of(text, "--tp 4"));
    assert_null(strstr(text, "--cp"));
    free(text);
    const char *off[] = {"--model", "llama-3.1-8b", "--gpus", "8", "--seq", "131072", "--parallel", "fsdp",
                         "--fsdp-offload", "on", NULL};
    text = alternatives(off);
    assert_non_null(line_of(text, "--parallel zero3"));
    assert_null(strstr(text, "--cp"));
    free(text);
    const char *nodes[] = {"--model", "llama-3.1-8b", "--gpus", "4", "--nodes", "2", "--seq", "131072", "--parallel",
                           "fsdp", NULL};
    text = alternatives(nodes);
    assert_non_null(line_of(text, "--parallel zero3"));
    static const char *const nbase[] = {"--model", "llama-3.1-8b", "--gpus", "4", "--nodes", "2", "--seq", "131072",
                                        NULL};
    static const char *const cp8[] = {"--cp", "8", NULL}, *const cp4[] = {"--cp", "4", "--dp-shard", "2", NULL};
    check_line(text, "--cp 8", nbase, cp8);
    check_line(text, "--cp 4 --dp-shard 2", nbase, cp4);
    free(text);
}

/* A CP request that fits nowhere (--cp 2 --dp-shard 4 at 128k): the modes over its GPUs, FSDP2
 * included and with the default offload sweep (as --parallel fsdp plans it), plain TP layouts,
 * the other CP layouts, not its own. */
static void test_cp_request(void **state)
{
    (void)state;
    const char *req[] = {"--model", "llama-3.1-8b", "--gpus", "8", "--seq", "131072", "--cp", "2", "--dp-shard", "4",
                         NULL};
    char *text = alternatives(req);
    print_message("%s", text);
    static const char *const cp8[] = {"--cp", "8", NULL}, *const fsdp[] = {"--parallel", "fsdp", NULL},
                             *const tp4[] = {"--tp", "4", "--dp-shard", "2", NULL};
    check_line(text, "--parallel fsdp", cp_base, fsdp);
    check_line(text, "--tp 4 --dp-shard 2", cp_base, tp4);
    check_line(text, "--cp 8", cp_base, cp8);
    assert_null(line_of(text, "--cp 2 --dp-shard 4"));
    free(text);
}

/* QLoRA (bf16 storage, the FSDP + QLoRA recipe) of llama-3.1-70b on 2 RTX 4090s at 2k tokens:
 * nothing fits in any mode (FSDP2's smallest 28.96 GiB), FSDP2 with CPU offload does (the
 * shards, frozen ones too, and AdamW's states on the host); its line equals its own plan's
 * entry. A request with the offload already on gets no such line. */
static void test_fsdp_offload_line(void **state)
{
    (void)state;
    static const char *const base[] = {"--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--method", "qlora",
                                       "--quant-storage", "bf16", "--gpus", "2", "--seq", "2048", "--every-n", "1", NULL};
    const char *req[] = {"--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--method", "qlora", "--quant-storage", "bf16",
                         "--gpus", "2", "--seq", "2048", "--every-n", "1", "--parallel", "fsdp", NULL};
    static const char *const off[] = {"--parallel", "fsdp", "--fsdp-offload", "on", NULL};
    char *text = alternatives(req);
    check_line(text, "--parallel fsdp --fsdp-offload on", base, off);
    assert_non_null(strstr(line_of(text, "--parallel fsdp --fsdp-offload on"), "fits: "));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_only_tp_fits),
        cmocka_unit_test(test_refused_layouts_left_out),
        cmocka_unit_test(test_tp_request),
        cmocka_unit_test(test_only_cp_fits),
        cmocka_unit_test(test_refused_cp_left_out),
        cmocka_unit_test(test_cp_request),
        cmocka_unit_test(test_fsdp_offload_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
