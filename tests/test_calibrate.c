/* gckpt-plan --calibrate-from (planner/calibrate.c, docs/calibration.md).
 *
 * Closed forms: every op's time is max(FLOPs / matmul rate, bytes / HBM rate), copies
 * bytes / copy rate, so slowing all three knobs by one factor k slows every step exactly k
 * times: reports measuring k x the plan's times must give knobs / k and a calibrated plan
 * predicting the measured times. Known knobs: reports whose "measured" times are the
 * plans of a truth profile (other efficiencies, slower copies) must give back the truth's
 * knobs. One run identifies one knob, fitted so that run is predicted exactly.
 * gckpt.TrainerCallback's reports calibrate as gckpt-run's do. Bad inputs exit 2
 * with one line naming the file and leave the output as it was; the profile loads with the
 * device reader, which refuses one edited after its calibration. And on real host runs
 * (gckpt-run's CPU backend) the calibrated profile predicts the measured steps better. */
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
#include "gckpt/core/device.h"
#include "gckpt/planner/calibrate.h"
#include "gckpt/util/sha256.h"

#ifndef GCKPT_PLAN_EXE
#error GCKPT_PLAN_EXE must name the gckpt-plan binary
#endif
#ifndef GCKPT_RUN_EXE
#error GCKPT_RUN_EXE must name the gckpt-run binary
#endif

#define EXACT GCKPT_TEST_DATA "/devices/cpu-exact.json"
#define TINY GCKPT_TEST_DATA "/../executor/data/tiny-llama.json"

static char err[8192];

static const cJSON *at(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static double num(const cJSON *o, const char *k)
{
    const cJSON *it = at(o, k);
    if (!cJSON_IsNumber(it)) fail_msg("'%s' is not a number", k);
    return it->valuedouble;
}

/* A file of the scratch directory, or an absolute path. */
static char *slurp(const char *name)
{
    if (name[0] != '/') return cli_slurp(name);
    FILE *f = fopen(name, "rb");
    char *t = f ? calloc(1, 1 << 20) : NULL;
    if (t) fread(t, 1, (1 << 20) - 1, f);
    if (f) fclose(f);
    return t;
}

static cJSON *load(const char *name)
{
    char *t = slurp(name);
    if (!t) fail_msg("%s: cannot read", name);
    cJSON *j = cJSON_Parse(t);
    free(t);
    if (!j) fail_msg("%s: not JSON", name);
    return j;
}

static void save(const char *name, cJSON *j)
{
    char *t = cJSON_Print(j);
    cli_write(name, t);
    free(t);
}

static int plan(const char *gpu, const char *out)
{
    return cli_run(GCKPT_PLAN_EXE, A("--model", TINY, "--gpu", (char *)gpu, "--target", "cuda", "--seq", "64", "--precision", "fp32",
                                     "--every-n", "off,1", "--micro-batch", "1,4", "-q", "-o", (char *)out),
                   NULL, err, sizeof err);
}

static int calibrate(char *const args[]) { return cli_run(GCKPT_PLAN_EXE, args, NULL, err, sizeof err); }

/* The exact-bytes CPU profile with slower copies (so offload is a fair share of a step and
 * all three knobs are identifiable), and a truth profile: the same GPU... CPU at other
 * efficiencies. */
static void write_profiles(void)
{
    cJSON *d = load(EXACT);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "name", cJSON_CreateString("calibration test CPU"));
    cJSON_ReplaceItemInObjectCaseSensitive(d, "h2d_bytes_per_s", cJSON_CreateNumber(1e8));
    cJSON_ReplaceItemInObjectCaseSensitive(d, "d2h_bytes_per_s", cJSON_CreateNumber(1e8));
    save("base.json", d);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "matmul_efficiency", cJSON_CreateNumber(0.5));
    cJSON_ReplaceItemInObjectCaseSensitive(d, "hbm_efficiency", cJSON_CreateNumber(0.8));
    cJSON_ReplaceItemInObjectCaseSensitive(d, "h2d_bytes_per_s", cJSON_CreateNumber(4e7));
    cJSON_ReplaceItemInObjectCaseSensitive(d, "d2h_bytes_per_s", cJSON_CreateNumber(4e7));
    save("truth.json", d);
    cJSON_Delete(d);
    /* for real host runs: peaks near this kind of machine's (100 GFLOP/s, 10 GB/s), so the
     * fitted efficiencies stay inside (0.01, 1] however busy the machine is */
    d = load(EXACT);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "name", cJSON_CreateString("calibration host test CPU"));
    static const char *const prec[] = {"fp32", "tf32", "bf16", "fp16"};
    for (int i = 0; i < 4; i++)
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "peak_tflops"), prec[i], cJSON_CreateNumber(0.1));
    cJSON_ReplaceItemInObjectCaseSensitive(d, "hbm_bytes_per_s", cJSON_CreateNumber(1e10));
    save("host.json", d);
    cJSON_Delete(d);
    assert_int_equal(plan("base.json", "base-plan.json"), 0);
    assert_int_equal(plan("truth.json", "truth-plan.json"), 0);
}

/* What a report says each entry measured. */
typedef struct {
    double scale;            /* measured = scale x the plan's step (when truth is NULL) */
    const cJSON *truth;      /* or: the truth plan's step of the same entry */
    long only;               /* -1: every entry; else only this one */
    const char *device;      /* the measured device's name (default "AMD EPYC") */
    const char *kind;        /* "cpu" (default) or "gpu" */
    bool no_time;            /* every entry out of memory: measured_step_s null */
    const char *plan_device; /* the header's plan.device (default: the plan's) */
} measure;

static double measured_of(const measure *m, const cJSON *e)
{
    if (!m->truth) return m->scale * num(at(e, "time"), "step_s");
    return num(at(cJSON_GetArrayItem(at(m->truth, "entries"), (int)num(e, "index")), "time"), "step_s");
}

/* A gckpt-run report (gckpt.report/2 JSON Lines) of plan_file's entries as m says. */
static void write_report(const char *name, const char *plan_file, const measure *m)
{
    cJSON *p = load(plan_file);
    const cJSON *in = at(p, "inputs");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "schema", "gckpt.report/2");
    cJSON_AddStringToObject(h, "record", "header");
    cJSON *g = cJSON_AddObjectToObject(h, "generator");
    cJSON_AddStringToObject(g, "name", "gckpt-run");
    cJSON_AddStringToObject(g, "version", GCKPT_VERSION);
    cJSON *pl = cJSON_AddObjectToObject(h, "plan");
    cJSON_AddStringToObject(pl, "file", plan_file);
    cJSON_AddStringToObject(pl, "generator_version", at(at(p, "generator"), "version")->valuestring);
    cJSON_AddStringToObject(pl, "model", at(at(in, "model"), "name")->valuestring);
    cJSON_AddStringToObject(pl, "device", m->plan_device ? m->plan_device : at(at(in, "device"), "name")->valuestring);
    cJSON_AddStringToObject(h, "backend", m->kind && !strcmp(m->kind, "gpu") ? "cuda" : "host");
    cJSON *d = cJSON_AddObjectToObject(h, "device");
    cJSON_AddStringToObject(d, "kind", m->kind ? m->kind : "cpu");
    cJSON_AddStringToObject(d, "name", m->device ? m->device : "AMD EPYC");
    char *line = cJSON_PrintUnformatted(h);
    fprintf(f, "%s\n", line);
    free(line);
    cJSON_Delete(h);
    const cJSON *e;
    cJSON_ArrayForEach(e, at(p, "entries")) {
        if (m->only >= 0 && num(e, "index") != m->only) continue;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "record", "entry");
        static const char *const keys[] = {"index", "every_n_layers", "offload", "micro_batch", "grad_accum"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            cJSON_AddItemToObject(r, keys[k], cJSON_Duplicate(at(e, keys[k]), true));
        cJSON_AddStringToObject(r, "status", m->no_time ? "oom" : "ok");
        cJSON *t = cJSON_AddObjectToObject(r, "time");
        cJSON_AddNumberToObject(t, "predicted_step_s", num(at(e, "time"), "step_s"));
        if (m->no_time) cJSON_AddNullToObject(t, "measured_step_s");
        else cJSON_AddNumberToObject(t, "measured_step_s", measured_of(m, e));
        line = cJSON_PrintUnformatted(r);
        fprintf(f, "%s\n", line);
        free(line);
        cJSON_Delete(r);
    }
    fprintf(f, "{\"record\":\"summary\",\"ended\":true}\n");
    fclose(f);
    cli_write(name, text);
    free(text);
    cJSON_Delete(p);
}

/* What gckpt.TrainerCallback writes (python/gckpt/callback.py): a gckpt.report/2 of one entry,
 * generator gckpt-python, backend hf-trainer, a rank on every record, one step record per
 * optimizer step (step 1 not judged) and, when the run ended, the entry record with the
 * median of the judged steps. */
static void write_trainer(const char *name, const char *plan_file, const cJSON *entry, double step_s, bool with_entry,
                          const char *file_in_header)
{
    cJSON *p = load(plan_file);
    const cJSON *in = at(p, "inputs");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    double pred = num(at(entry, "time"), "step_s");
    fprintf(f, "{\"schema\": \"gckpt.report/2\", \"record\": \"header\", \"rank\": 0, \"generator\": {\"name\": "
               "\"gckpt-python\", \"version\": \"%s\"}, \"plan\": {\"file\": \"%s\", \"generator_version\": \"%s\", "
               "\"model\": \"tiny-llama\", \"model_type\": \"llama\", \"device\": \"%s\", \"seq\": 64, \"precision\": "
               "\"fp32\", \"optimizer\": \"adamw\", \"attention\": \"sdpa\"}, \"backend\": \"hf-trainer\", \"device\": "
               "{\"kind\": \"cpu\", \"name\": \"AMD EPYC\", \"memory_bytes\": null, \"driver_version\": null, "
               "\"runtime_version\": null, \"arch\": null}, \"selected\": 1}\n",
            GCKPT_VERSION, file_in_header, at(at(p, "generator"), "version")->valuestring,
            at(at(in, "device"), "name")->valuestring);
    /* steps 1..5: step 1 slow and not judged, the others around step_s (median step_s) */
    static const double k[] = {7.0, 1.02, 0.99, 1.0, 1.05};
    for (int s = 0; s < 5; s++)
        fprintf(f, "{\"record\": \"step\", \"rank\": 0, \"step\": %d, \"entry\": %d, \"judged\": %s, \"pass\": null, "
                   "\"memory\": {}, \"time\": {\"predicted_step_s\": %.17g, \"measured_step_s\": %.17g, "
                   "\"relative_error\": null}}\n",
                s + 1, (int)num(entry, "index"), s ? "true" : "false", pred, k[s] * step_s);
    if (with_entry)
        fprintf(f, "{\"record\": \"entry\", \"rank\": 0, \"index\": %d, \"every_n_layers\": %d, \"offload\": %s, "
                   "\"micro_batch\": %d, \"grad_accum\": 1, \"status\": \"ok\", \"time\": {\"predicted_step_s\": %.17g, "
                   "\"measured_step_s\": %.17g}}\n",
                (int)num(entry, "index"), (int)num(entry, "every_n_layers"), cJSON_IsTrue(at(entry, "offload")) ? "true" : "false",
                (int)num(entry, "micro_batch"), pred, (1.0 + 1.02) / 2 * step_s);
    fclose(f);
    cli_write(name, text);
    free(text);
    cJSON_Delete(p);
}

static void near(double got, double want, double rel, const char *what)
{
    if (!(fabs(got - want) <= rel * fabs(want))) fail_msg("%s: %.10g, expected %.10g (within %g)", what, got, want, rel);
}

/* A plan with profile `gpu` predicts each entry of base-plan.json as m measured it. */
static void plan_predicts(const char *gpu, const measure *m, double rel)
{
    assert_int_equal(plan(gpu, "check-plan.json"), 0);
    cJSON *c = load("check-plan.json"), *b = load("base-plan.json");
    for (int i = 0; i < cJSON_GetArraySize(at(b, "entries")); i++) {
        char what[64];
        snprintf(what, sizeof what, "entry %d's step", i);
        near(num(at(cJSON_GetArrayItem(at(c, "entries"), i), "time"), "step_s"),
             measured_of(m, cJSON_GetArrayItem(at(b, "entries"), i)), rel, what);
    }
    cJSON_Delete(c);
    cJSON_Delete(b);
}

static const cJSON *knob(const cJSON *prof, const char *k) { return at(at(at(prof, "calibration"), "knobs"), k); }

/* 1. SHA-256 against FIPS 180-4's examples and Python's hashlib (both padding cases). */
static void test_sha256(void **st)
{
    (void)st;
    static const struct { size_t n; const char *hex; } a[] = {
        {0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"}};
    char buf[128], hex[65];
    memset(buf, 'a', sizeof buf);
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        gckpt_sha256_hex(buf, a[i].n, hex);
        assert_string_equal(hex, a[i].hex);
    }
    gckpt_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    gckpt_sha256_hex(m2, strlen(m2), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

/* 2. Every step measured 2.5 x its prediction: each knob / 2.5, the plans then exact. */
static void test_uniform_slowdown(void **st)
{
    (void)st;
    measure m = {.scale = 2.5, .only = -1};
    write_report("scale.jsonl", "base-plan.json", &m);
    assert_int_equal(calibrate(A("--calibrate-from", "scale.jsonl", "--gpu", "base.json", "-o", "cal.json", "-q")), 0);
    cJSON *c = load("cal.json");
    near(num(c, "matmul_efficiency"), 1.0 / 2.5, 1e-6, "matmul_efficiency");
    near(num(c, "hbm_efficiency"), 1.0 / 2.5, 1e-6, "hbm_efficiency");
    near(num(c, "h2d_bytes_per_s"), 1e8 / 2.5, 1e-6, "h2d_bytes_per_s");
    near(num(c, "d2h_bytes_per_s"), 1e8 / 2.5, 1e-6, "d2h_bytes_per_s");
    assert_true(cJSON_IsTrue(at(knob(c, "matmul_efficiency"), "fitted")));
    assert_true(cJSON_IsTrue(at(knob(c, "h2d_bytes_per_s"), "fitted")));
    cJSON_Delete(c);
    plan_predicts("cal.json", &m, 1e-5);
}

/* 3. Measured = a truth profile's plan: the truth's knobs back, with provenance. */
static void test_recovers_truth(void **st)
{
    (void)st;
    cJSON *truth = load("truth-plan.json");
    measure m = {.truth = truth, .only = -1};
    write_report("truth.jsonl", "base-plan.json", &m);
    assert_int_equal(calibrate(A("--calibrate-from", "truth.jsonl", "--gpu", "base.json", "-o", "cal.json")), 0);
    if (!strstr(cli_out, "matmul_efficiency") || !strstr(cli_out, "RMS")) fail_msg("no summary on stdout: %s", cli_out);
    cJSON *c = load("cal.json");
    near(num(c, "matmul_efficiency"), 0.5, 1e-5, "matmul_efficiency");
    near(num(c, "hbm_efficiency"), 0.8, 1e-5, "hbm_efficiency");
    near(num(c, "h2d_bytes_per_s"), 4e7, 1e-5, "h2d_bytes_per_s");
    const cJSON *cal = at(c, "calibration");
    assert_int_equal((int)num(cal, "n_runs"), 6);
    assert_int_equal(cJSON_GetArraySize(at(cal, "runs")), 6);
    near(num(knob(c, "hbm_efficiency"), "before"), 1.0, 0, "hbm before");
    near(num(knob(c, "hbm_efficiency"), "after"), num(c, "hbm_efficiency"), 0, "hbm after");
    const cJSON *from = cJSON_GetArrayItem(at(cal, "from"), 0);
    assert_string_equal(at(from, "file")->valuestring, "truth.jsonl");
    char *rep = cli_slurp("truth.jsonl"), hex[65];
    gckpt_sha256_hex(rep, strlen(rep), hex);
    free(rep);
    assert_string_equal(at(from, "sha256")->valuestring, hex);
    assert_string_equal(at(at(cal, "base"), "file")->valuestring, "base.json");
    assert_true(num(cal, "rms_error_after") < 1e-5);
    assert_true(num(cal, "rms_error_before") > 0.2);
    /* the sources say which fields were calibrated; the rest is the base profile's */
    assert_non_null(strstr(at(at(c, "sources"), "matmul_efficiency")->valuestring, "calibrated"));
    near(num(at(c, "peak_tflops"), "bf16"), 1.0, 0, "peak_tflops.bf16");
    cJSON_Delete(c);
    plan_predicts("cal.json", &m, 1e-5);
    cJSON_Delete(truth);
}

/* 4. One run identifies one knob (the largest share): that run predicted exactly, the
 * others kept. */
static void test_one_run(void **st)
{
    (void)st;
    measure m = {.scale = 3, .only = 0};
    write_report("one.jsonl", "base-plan.json", &m);
    assert_int_equal(calibrate(A("--calibrate-from", "one.jsonl", "--gpu", "base.json", "-o", "cal.json", "-q")), 0);
    cJSON *c = load("cal.json");
    assert_false(cJSON_IsTrue(at(knob(c, "matmul_efficiency"), "fitted")));
    assert_true(cJSON_IsTrue(at(knob(c, "hbm_efficiency"), "fitted")));
    assert_false(cJSON_IsTrue(at(knob(c, "h2d_bytes_per_s"), "fitted")));
    near(num(c, "matmul_efficiency"), 1.0, 0, "matmul_efficiency kept");
    near(num(c, "h2d_bytes_per_s"), 1e8, 0, "h2d kept");
    const cJSON *run = cJSON_GetArrayItem(at(at(c, "calibration"), "runs"), 0);
    near(num(run, "predicted_after_s"), num(run, "measured_s"), 1e-5, "the run after calibration");
    cJSON_Delete(c);
}

/* 4b. Noisy runs (the truth's steps x 1.2, 0.8, 0.8, 1.2, 1.2, 0.8): matmul_efficiency, the
 * least determined knob, cannot be told from hbm_efficiency and is kept; the others fitted
 * with their uncertainty, the error smaller than before. */
static void test_noisy_runs(void **st)
{
    (void)st;
    cJSON *truth = load("truth-plan.json");
    static const double noise[] = {1.2, 0.8, 0.8, 1.2, 1.2, 0.8};
    cJSON *t = cJSON_Duplicate(truth, true);
    for (int i = 0; i < 6; i++) {
        cJSON *time = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "entries"), i), "time");
        cJSON_ReplaceItemInObjectCaseSensitive(time, "step_s", cJSON_CreateNumber(noise[i] * num(time, "step_s")));
    }
    measure m = {.truth = t, .only = -1};
    write_report("noisy.jsonl", "base-plan.json", &m);
    assert_int_equal(calibrate(A("--calibrate-from", "noisy.jsonl", "--gpu", "base.json", "-o", "cal.json", "-q")), 0);
    cJSON *c = load("cal.json");
    assert_false(cJSON_IsTrue(at(knob(c, "matmul_efficiency"), "fitted")));
    assert_non_null(strstr(at(knob(c, "matmul_efficiency"), "why")->valuestring, "cannot tell"));
    near(num(c, "matmul_efficiency"), 1.0, 0, "matmul_efficiency kept");
    assert_true(cJSON_IsTrue(at(knob(c, "hbm_efficiency"), "fitted")));
    assert_true(cJSON_IsTrue(at(knob(c, "h2d_bytes_per_s"), "fitted")));
    assert_non_null(strstr(at(knob(c, "hbm_efficiency"), "why")->valuestring, "+-"));
    const cJSON *cal = at(c, "calibration");
    assert_true(num(cal, "rms_error_after") < num(cal, "rms_error_before") / 2);
    cJSON_Delete(c);
    cJSON_Delete(t);
    cJSON_Delete(truth);
}

/* 4c. A plan for several GPUs (ZeRO-3 on 4, its collectives partly exposed): its entries
 * are predicted again as the plan did (the bus bandwidth read back from inputs.layout: the
 * embedded profile has none), and the profile written from the plans' own keeps it. */
static void test_several_gpus(void **st)
{
    (void)st;
    assert_int_equal(cli_run(GCKPT_PLAN_EXE, A("--model", "llama-3.2-1b", "--gpus", "4", "--parallel", "zero3", "--seq", "2048",
                                               "--every-n", "off,1,4", "--micro-batch", "1,2", "-q", "-o", "zero3.json"),
                             NULL, err, sizeof err), 0);
    cJSON *p = load("zero3.json");
    double exposed = num(at(cJSON_GetArrayItem(at(p, "entries"), 0), "time"), "collective_exposed_s");
    cJSON_Delete(p);
    assert_true(exposed > 0); /* the case that needs the bus bandwidth */
    measure m = {.scale = 1.25, .only = -1, .kind = "gpu", .device = "NVIDIA H100 80GB HBM3"};
    write_report("zero3.jsonl", "zero3.json", &m);
    assert_int_equal(calibrate(A("--calibrate-from", "zero3.jsonl", "-o", "cal.json", "-q")), 0);
    cJSON *c = load("cal.json");
    near(num(c, "intra_node_bus_bytes_per_s"), 450e9, 0, "intra_node_bus_bytes_per_s");
    assert_true(num(at(c, "calibration"), "rms_error_after") < 0.05);
    cJSON_Delete(c);
}

/* 5. gckpt.TrainerCallback's reports of the truth runs, one entry per run, with and without
 * their entry record (a killed run: the judged steps' median): the truth's knobs again; a
 * report of a Plan that is in no file says how to give one. */
static void test_trainer_reports(void **st)
{
    (void)st;
    cJSON *truth = load("truth-plan.json"), *base = load("base-plan.json");
    char *args[20] = {"--calibrate-from"};
    int na = 1;
    char names[6][32];
    for (int i = 0; i < 6; i++) {
        const cJSON *e = cJSON_GetArrayItem(at(base, "entries"), i);
        double t = num(at(cJSON_GetArrayItem(at(truth, "entries"), i), "time"), "step_s");
        snprintf(names[i], sizeof names[i], "trainer%d.jsonl", i);
        /* with its entry record: the record's median of steps 2..5 (1.01 x t); without: the
         * median of the judged steps (1.01 x t) */
        write_trainer(names[i], "base-plan.json", e, t / 1.01, i % 2 == 0, "base-plan.json");
        args[na++] = names[i];
    }
    args[na++] = "--gpu";
    args[na++] = "base.json";
    args[na++] = "-o";
    args[na++] = "cal.json";
    args[na++] = "-q";
    args[na] = NULL;
    assert_int_equal(calibrate(args), 0);
    cJSON *c = load("cal.json");
    near(num(c, "matmul_efficiency"), 0.5, 1e-5, "matmul_efficiency");
    near(num(c, "hbm_efficiency"), 0.8, 1e-5, "hbm_efficiency");
    near(num(c, "h2d_bytes_per_s"), 4e7, 1e-5, "h2d_bytes_per_s");
    const cJSON *from = at(at(c, "calibration"), "from");
    assert_int_equal(cJSON_GetArraySize(from), 6);
    assert_string_equal(at(cJSON_GetArrayItem(from, 1), "generator")->valuestring, "gckpt-python " GCKPT_VERSION);
    assert_string_equal(at(at(at(c, "calibration"), "measured_on"), "backend")->valuestring, "hf-trainer");
    cJSON_Delete(c);
    write_trainer("inmemory.jsonl", "base-plan.json", cJSON_GetArrayItem(at(base, "entries"), 0), 1.0, true, "<Plan>");
    assert_int_equal(calibrate(A("--calibrate-from", "inmemory.jsonl", "-o", "cal2.json")), 2);
    if (!strstr(err, "Plan.to_json")) fail_msg("no advice: %s", err);
    assert_false(cli_exists("cal2.json"));
    cJSON_Delete(truth);
    cJSON_Delete(base);
}

/* 6. The library call: the summary, and nothing allocated on an error. */
static void test_library(void **st)
{
    (void)st;
    char rep[512], base[512], missing[512];
    cli_path("truth.jsonl", rep, sizeof rep);
    cli_path("base.json", base, sizeof base);
    cli_path("missing.jsonl", missing, sizeof missing);
    const char *paths[] = {rep};
    char *json = (char *)1;
    gckpt_calibration_summary sum;
    gckpt_err e;
    assert_true(gckpt_calibrate(paths, 1, base, &json, &sum, &e));
    assert_non_null(json);
    assert_int_equal(sum.n_runs, 6);
    assert_true(sum.knob[GCKPT_CAL_MATMUL].fitted);
    near(sum.knob[GCKPT_CAL_MATMUL].after, 0.5, 1e-5, "summary matmul");
    assert_true(sum.rms_after < 1e-5 && sum.rms_before > 0.2);
    gckpt_device d;
    assert_true(gckpt_device_parse("cal", json, &d, &e));
    free(json);
    gckpt_calibration_summary_free(&sum);
    const char *bad[] = {rep, missing};
    json = (char *)1;
    assert_false(gckpt_calibrate(bad, 2, base, &json, &sum, &e));
    assert_null(json);
    assert_null(sum.runs);
    assert_non_null(strstr(e.msg, "missing.jsonl"));
}

static void one_line(const char *what, const char *needle)
{
    size_t len = strlen(err);
    if (len == 0 || err[len - 1] != '\n' || memchr(err, '\n', len - 1)) fail_msg("%s: stderr is not one line: '%s'", what, err);
    if (!strstr(err, needle)) fail_msg("%s: '%s' does not mention '%s'", what, err, needle);
}

/* 7. Bad inputs: exit 2, one line naming the file (and the field), the output untouched. */
static void test_bad_inputs(void **st)
{
    (void)st;
    measure ok = {.scale = 2, .only = -1}, gpu = {.scale = 2, .only = -1, .kind = "gpu", .device = "NVIDIA H100 80GB HBM3"},
            other = {.scale = 2, .only = -1, .device = "Intel Xeon"}, none = {.scale = 2, .only = -1, .no_time = true},
            h100 = {.scale = 2, .only = -1, .plan_device = "NVIDIA H100 SXM5 80GB"};
    write_report("ok.jsonl", "base-plan.json", &ok);
    write_report("gpu.jsonl", "base-plan.json", &gpu);
    write_report("xeon.jsonl", "base-plan.json", &other);
    write_report("none.jsonl", "base-plan.json", &none);
    write_report("h100.jsonl", "base-plan.json", &h100);
    /* a report of another plan than the one at plan.file; a plan of an unknown schema */
    write_report("stale.jsonl", "truth-plan.json", &ok);
    char *t = cli_slurp("stale.jsonl");
    char *p = strstr(t, "truth-plan.json");
    memcpy(p, "base-", 5); /* "base-plan.json": the header names the base plan, entries are the truth's */
    memmove(p + 5, p + 6, strlen(p + 6) + 1);
    cli_write("stale.jsonl", t);
    free(t);
    t = cli_slurp("base-plan.json");
    p = strstr(t, "gckpt.plan/2");
    p[strlen("gckpt.plan/")] = '9';
    cli_write("plan9.json", t);
    free(t);
    write_report("plan9.jsonl", "base-plan.json", &ok);
    t = cli_slurp("plan9.jsonl");
    p = strstr(t, "\"base-plan.json\"");
    cli_write("plan9.jsonl", "");
    {
        char *u = malloc(strlen(t) + 8);
        sprintf(u, "%.*s\"plan9.json\"%s", (int)(p - t), t, p + strlen("\"base-plan.json\""));
        cli_write("plan9.jsonl", u);
        free(u);
    }
    free(t);
    t = cli_slurp("ok.jsonl");
    char *nl = strchr(t, '\n');
    nl[2] = '#'; /* line 2 corrupt: {#record"... */
    cli_write("corrupt.jsonl", t);
    free(t);
    /* read by the one report reader (core/report_read.c): one rank's records per file */
    t = cli_slurp("ok.jsonl");
    {
        const char *w = "{\"record\": \"warning\", \"rank\": 1, \"code\": \"seq\", \"message\": \"m\", \"planned\": 32, \"live\": 64}\n";
        char *u = malloc(strlen(t) + strlen(w) + 1);
        char *sum = strstr(t, "{\"record\":\"summary\"");
        assert_non_null(sum);
        sprintf(u, "%.*s%s%s", (int)(sum - t), t, w, sum);
        cli_write("two-ranks.jsonl", u);
        free(u);
    }
    free(t);
    cli_write("garbage.jsonl", "this is not JSON\n");
    cli_write("nothing.jsonl", "");
    static const struct {
        const char *what, *args[6], *needle;
    } cases[] = {
        {"missing file", {"--calibrate-from", "missing.jsonl"}, "missing.jsonl"},
        {"another device's profile", {"--calibrate-from", "ok.jsonl", "--gpu", "h100-sxm-80gb"}, "planned for"},
        {"planned for another device", {"--calibrate-from", "h100.jsonl", "--gpu", "base.json"}, "h100.jsonl"},
        {"no measured time", {"--calibrate-from", "none.jsonl"}, "measured_step_s"},
        {"corrupt JSON", {"--calibrate-from", "corrupt.jsonl"}, "corrupt.jsonl: line 2"},
        {"two ranks' records in one file", {"--calibrate-from", "two-ranks.jsonl"}, "one rank's records"},
        {"not JSON", {"--calibrate-from", "garbage.jsonl"}, "not a report"},
        {"empty", {"--calibrate-from", "nothing.jsonl"}, "nothing.jsonl"},
        {"not a report: a plan", {"--calibrate-from", "base-plan.json"}, "gckpt.plan/2\": not a report"},
        {"not a report: a profile", {"--calibrate-from", "base.json"}, "gckpt.device/1\": not a report"},
        {"unknown plan schema", {"--calibrate-from", "plan9.jsonl"}, "gckpt.plan/9"},
        {"not the plan it ran", {"--calibrate-from", "stale.jsonl"}, "not the plan this report ran"},
        {"mixed devices", {"--calibrate-from", "ok.jsonl", "xeon.jsonl"}, "mixed devices"},
        {"a GPU's times for a CPU profile", {"--calibrate-from", "gpu.jsonl"}, "GPU"},
        {"a planning option", {"--calibrate-from", "ok.jsonl", "--seq", "8"}, "--calibrate-from takes"},
    };
    cli_write("out.json", "old\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *args[10];
        int k = 0;
        for (; k < 6 && cases[i].args[k]; k++) args[k] = (char *)cases[i].args[k];
        args[k++] = "-o";
        args[k++] = "out.json";
        args[k] = NULL;
        int rc = calibrate(args);
        if (rc != 2) fail_msg("%s: exit %d, expected 2 (%s)", cases[i].what, rc, err);
        one_line(cases[i].what, cases[i].needle);
        char *o = cli_slurp("out.json");
        if (strcmp(o, "old\n")) fail_msg("%s: the output was touched", cases[i].what);
        free(o);
        if (cli_out[0]) fail_msg("%s: wrote to stdout: %s", cases[i].what, cli_out);
    }
    assert_int_equal(calibrate(A("--calibrate-from", "ok.jsonl")), 2);
    one_line("no -o", "-o FILE");
    cli_assert_no_temporaries(cli_dir);
    /* a good run replaces it whole */
    assert_int_equal(calibrate(A("--calibrate-from", "ok.jsonl", "-o", "out.json", "-q")), 0);
    cJSON *c = load("out.json");
    cJSON_Delete(c);
    cli_assert_no_temporaries(cli_dir);
}

/* 8. The profile loads with the device reader (a plan with --gpu), which refuses one whose
 * fitted field was edited after its calibration. */
static void test_profile_edited(void **st)
{
    (void)st;
    measure m = {.scale = 2.5, .only = -1};
    write_report("scale.jsonl", "base-plan.json", &m);
    assert_int_equal(calibrate(A("--calibrate-from", "scale.jsonl", "-o", "cal.json", "-q")), 0);
    assert_int_equal(plan("cal.json", "p.json"), 0);
    cJSON *c = load("cal.json");
    cJSON_ReplaceItemInObjectCaseSensitive(c, "hbm_efficiency", cJSON_CreateNumber(0.9));
    save("edited.json", c);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "calibration"), "runs");
    save("noruns.json", c);
    cJSON_Delete(c);
    assert_int_equal(plan("edited.json", "p2.json"), 2);
    one_line("edited profile", "calibration.knobs.hbm_efficiency.after");
    assert_int_equal(plan("noruns.json", "p2.json"), 2);
    one_line("no runs", "calibration.runs");
    assert_false(cli_exists("p2.json"));
}

/* 9. Real runs: gckpt-run's CPU backend runs a plan of the tiny llama for a CPU profile; the
 * profile calibrated from that report predicts the measured steps better than before.
 * (Measured times on a shared machine scatter: only the direction is asserted.) */
static void test_host_runs(void **st)
{
    (void)st;
    assert_int_equal(plan("host.json", "host-plan.json"), 0);
    int rc = cli_run(GCKPT_RUN_EXE, A("--plan", "host-plan.json", "--all", "--backend", "host", "--steps", "3", "-q", "-o",
                                      "host.jsonl"), NULL, err, sizeof err);
    if (rc != 0) fail_msg("gckpt-run: exit %d: %s", rc, err);
    rc = calibrate(A("--calibrate-from", "host.jsonl", "-o", "host-cal.json", "-q"));
    if (rc != 0) fail_msg("calibrate: exit %d: %s", rc, err);
    cJSON *c = load("host-cal.json");
    const cJSON *cal = at(c, "calibration");
    double before = num(cal, "rms_error_before"), after = num(cal, "rms_error_after");
    /* the median |relative error|: a step that a busy machine stretched weighs no more than one */
    double mb = num(cal, "median_error_before"), ma = num(cal, "median_error_after");
    print_message("host runs: relative error RMS %.1f%% -> %.1f%%, median %.1f%% -> %.1f%%\n", 100 * before, 100 * after,
                  100 * mb, 100 * ma);
    assert_true(ma < mb);
    assert_true(cJSON_IsTrue(at(knob(c, "matmul_efficiency"), "fitted")) || cJSON_IsTrue(at(knob(c, "hbm_efficiency"), "fitted")));
    assert_string_equal(at(at(cal, "measured_on"), "backend")->valuestring, "host");
    cJSON_Delete(c);
}

/* ---- the code base's time parameters (a profile with code_bases, runs for CUDA kernels) ---- */

#define H100 GCKPT_TEST_DATA "/../../devices/h100-sxm-80gb.json"
static const double cb_base[5] = {0.8, 0.5, 2, 2e-6, 0.01};  /* matmul, attention, hbm factors; op, step overheads */
static const double cb_truth[5] = {0.6, 0.3, 1.5, 8e-6, 0.05};
static const char *const cb_keys[5] = {"matmul_factor", "attention_factor", "hbm_factor", "op_overhead_s", "step_overhead_s"};

/* The shipped H100 profile with code base `cb`'s parameters set to v. */
static void cb_profile(const char *name, const char *cb, const double v[5])
{
    cJSON *d = load(H100);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "code_bases"), cb);
    for (int k = 0; k < 5; k++) cJSON_ReplaceItemInObjectCaseSensitive(e, cb_keys[k], cJSON_CreateNumber(v[k]));
    save(name, d);
    cJSON_Delete(d);
}

static int plan_cb(const char *model, const char *seq, const char *ga, const char *cb, const char *gpu, const char *out)
{
    return cli_run(GCKPT_PLAN_EXE, A("--model", (char *)model, "--gpu", (char *)gpu, "--code-base", (char *)cb, "--seq",
                                     (char *)seq, "--grad-accum", (char *)ga, "--every-n", "off,1,4", "--offload", "off",
                                     "--micro-batch", "1,2,8", "--budget", "1000GiB", "-q", "-o", (char *)out),
                   NULL, err, sizeof err);
}

/* The reports of llama-3.2-1b at seq 128, 1024, 8192 and qwen2.5-0.5b at 256, 8192, each at
 * grad_accum 1 and 8 (9 entries a plan), planned with cb-base.json, measured as cb-truth.json
 * plans them; their names into names[] (10). */
static void cb_reports(const char *base, const char *truth_gpu, const char *pre, char names[10][32])
{
    static const struct { const char *model, *seq; } runs[5] = {
        {"llama-3.2-1b", "128"}, {"llama-3.2-1b", "1024"}, {"llama-3.2-1b", "8192"}, {"qwen2.5-0.5b", "256"},
        {"qwen2.5-0.5b", "8192"}};
    int n = 0;
    for (int i = 0; i < 5; i++)
        for (int g = 0; g < 2; g++) {
            const char *ga = g ? "8" : "1";
            char bp[64], tp[64];
            snprintf(bp, sizeof bp, "%s-base-%d%d.json", pre, i, g);
            snprintf(tp, sizeof tp, "%s-truth-%d%d.json", pre, i, g);
            assert_int_equal(plan_cb(runs[i].model, runs[i].seq, ga, "fused", base, bp), 0);
            assert_int_equal(plan_cb(runs[i].model, runs[i].seq, ga, "fused", truth_gpu, tp), 0);
            cJSON *truth = load(tp);
            measure m = {.truth = truth, .only = -1, .kind = "gpu", .device = "NVIDIA H100 80GB HBM3"};
            snprintf(names[n], sizeof names[n], "%s-%d%d.jsonl", pre, i, g);
            write_report(names[n++], bp, &m);
            cJSON_Delete(truth);
        }
}

/* 10. Measured = the plans of a truth profile whose fused code base has other parameters (the
 * chip's efficiencies the same): the fit gives back the truth's five parameters, writes them
 * into code_bases.fused with provenance, keeps the efficiencies and the hf code base, and the
 * calibrated profile plans the truth's step times. A fit that recovers parameters from
 * measurements made with them is the fit's test, whatever the planner's numbers are. */
static void test_code_base_truth(void **st)
{
    (void)st;
    cb_profile("cb-base.json", "fused", cb_base);
    cb_profile("cb-truth.json", "fused", cb_truth);
    char names[10][32];
    cb_reports("cb-base.json", "cb-truth.json", "cb", names);
    char *args[20] = {"--calibrate-from"};
    int k = 1;
    for (int i = 0; i < 10; i++) args[k++] = names[i];
    args[k++] = "--gpu";
    args[k++] = "cb-base.json";
    args[k++] = "-o";
    args[k++] = "cb-cal.json";
    args[k] = NULL;
    if (calibrate(args) != 0) fail_msg("calibrate: %s", err);
    if (!strstr(cli_out, "code_bases.fused.attention_factor")) fail_msg("stdout: %s", cli_out);
    cJSON *c = load("cb-cal.json"), *h = load(H100);
    const cJSON *e = at(at(c, "code_bases"), "fused");
    for (int i = 0; i < 5; i++) {
        near(num(e, cb_keys[i]), cb_truth[i], 1e-4, cb_keys[i]);
        char kn[64];
        snprintf(kn, sizeof kn, "code_bases.fused.%s", cb_keys[i]);
        const cJSON *kb = knob(c, kn);
        if (!cJSON_IsTrue(at(kb, "fitted"))) fail_msg("%s not fitted", kn);
        near(num(kb, "before"), cb_base[i], 0, "before");
        near(num(kb, "after"), num(e, cb_keys[i]), 0, "after");
    }
    /* no offload: the copy rates are not fitted, and the chip's efficiencies are not knobs here */
    assert_false(cJSON_IsTrue(at(knob(c, "h2d_bytes_per_s"), "fitted")));
    assert_null(knob(c, "matmul_efficiency"));
    near(num(c, "matmul_efficiency"), num(h, "matmul_efficiency"), 0, "matmul_efficiency kept");
    near(num(at(at(c, "code_bases"), "hf"), "matmul_factor"), num(at(at(h, "code_bases"), "hf"), "matmul_factor"), 0,
         "hf kept");
    const cJSON *cal = at(c, "calibration");
    assert_string_equal(at(cal, "code_base")->valuestring, "fused");
    assert_int_equal((int)num(cal, "n_runs"), 90);
    assert_int_equal(cJSON_GetArraySize(at(cal, "from")), 10);
    assert_true(num(cal, "rms_error_after") < 1e-4 && num(cal, "rms_error_before") > 0.2);
    const cJSON *cf = at(at(at(c, "code_bases"), "fit"), "calibrated");
    assert_string_equal(at(cf, "code_base")->valuestring, "fused");
    assert_int_equal((int)num(cf, "n_runs"), 90);
    assert_non_null(at(at(at(c, "code_bases"), "fit"), "ratio_from")); /* the published fit's provenance stays */
    assert_non_null(strstr(at(at(c, "sources"), "code_bases.fused.hbm_factor")->valuestring, "calibrated"));
    cJSON_Delete(h);
    cJSON_Delete(c);
    /* the calibrated profile plans what the truth planned */
    assert_int_equal(plan_cb("qwen2.5-0.5b", "8192", "8", "fused", "cb-cal.json", "cb-check.json"), 0);
    cJSON *a = load("cb-check.json"), *b = load("cb-truth-41.json");
    for (int i = 0; i < cJSON_GetArraySize(at(b, "entries")); i++)
        near(num(at(cJSON_GetArrayItem(at(a, "entries"), i), "time"), "step_s"),
             num(at(cJSON_GetArrayItem(at(b, "entries"), i), "time"), "step_s"), 1e-4, "calibrated step");
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* edited after the calibration: the device reader says which field */
    c = load("cb-cal.json");
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "code_bases"), "fused"), "hbm_factor", cJSON_CreateNumber(3));
    save("cb-edited.json", c);
    cJSON_Delete(c);
    assert_int_equal(plan_cb("qwen2.5-0.5b", "256", "1", "fused", "cb-edited.json", "cb-x.json"), 2);
    one_line("edited code base", "calibration.knobs.code_bases.fused.hbm_factor.after");
}

/* 10b. A GPU profile without code_bases (as gckpt-run --calibrate writes one): the calibrated
 * profile gets them, the runs' code base fitted, the other neutral, and the step-time range
 * stays absent (no published fit behind it). From neutral rates the attention is under 5 % of
 * the predicted steps, so it is not fitted (and says so) and the others take up its part: the
 * error falls, the parameters are not the truth's. */
static void test_code_base_created(void **st)
{
    (void)st;
    cJSON *d = load(H100);
    cJSON_DeleteItemFromObjectCaseSensitive(d, "code_bases");
    cJSON_ReplaceItemInObjectCaseSensitive(d, "name", cJSON_CreateString("local H100"));
    save("nocb.json", d);
    cJSON_Delete(d);
    cb_profile("nocb-truth.json", "fused", cb_truth);
    d = load("nocb-truth.json");
    cJSON_ReplaceItemInObjectCaseSensitive(d, "name", cJSON_CreateString("local H100"));
    save("nocb-truth.json", d);
    cJSON_Delete(d);
    char names[10][32];
    cb_reports("nocb.json", "nocb-truth.json", "nc", names);
    char *args[20] = {"--calibrate-from"};
    int k = 1;
    for (int i = 0; i < 10; i++) args[k++] = names[i];
    args[k++] = "--gpu";
    args[k++] = "nocb.json";
    args[k++] = "-o";
    args[k++] = "nc-cal.json";
    args[k++] = "-q";
    args[k] = NULL;
    if (calibrate(args) != 0) fail_msg("calibrate: %s", err);
    cJSON *c = load("nc-cal.json");
    const cJSON *ka = knob(c, "code_bases.fused.attention_factor");
    assert_non_null(ka);
    assert_false(cJSON_IsTrue(at(ka, "fitted")));
    assert_non_null(strstr(at(ka, "why")->valuestring, "under 5%"));
    near(num(at(at(c, "code_bases"), "fused"), "attention_factor"), 1, 0, "attention kept");
    assert_true(cJSON_IsTrue(at(knob(c, "code_bases.fused.matmul_factor"), "fitted")));
    assert_true(cJSON_IsTrue(at(knob(c, "code_bases.fused.step_overhead_s"), "fitted")));
    const cJSON *cal = at(c, "calibration");
    assert_true(num(cal, "rms_error_after") < 0.2 * num(cal, "rms_error_before"));
    near(num(at(at(c, "code_bases"), "hf"), "matmul_factor"), 1, 0, "hf neutral");
    near(num(at(at(c, "code_bases"), "hf"), "step_overhead_s"), 0, 0, "hf neutral");
    cJSON_Delete(c);
    assert_int_equal(plan_cb("qwen2.5-0.5b", "256", "1", "fused", "nc-cal.json", "nc-check.json"), 0);
    c = load("nc-check.json");
    assert_null(at(at(cJSON_GetArrayItem(at(c, "entries"), 0), "time"), "step_s_range"));
    assert_null(at(c, "recommendation"));
    cJSON_Delete(c);
}

/* 11. Few runs fit fewer parameters and say which: one report of 9 runs of one model at one
 * seq and grad_accum cannot tell the overheads from the rates; every knob is listed, fitted or
 * with its reason, and the runs are predicted better than before. */
static void test_code_base_few_runs(void **st)
{
    (void)st;
    assert_int_equal(calibrate(A("--calibrate-from", "cb-00.jsonl", "--gpu", "cb-base.json", "-o", "cb-few.json", "-q")), 0);
    cJSON *c = load("cb-few.json");
    int fitted = 0;
    for (int i = 0; i < 5; i++) {
        char kn[64];
        snprintf(kn, sizeof kn, "code_bases.fused.%s", cb_keys[i]);
        const cJSON *kb = knob(c, kn);
        assert_non_null(kb);
        fitted += cJSON_IsTrue(at(kb, "fitted"));
        if (!cJSON_IsTrue(at(kb, "fitted"))) assert_non_null(strstr(at(kb, "why")->valuestring, "not fitted"));
    }
    assert_true(fitted >= 1 && fitted < 5);
    const cJSON *cal = at(c, "calibration");
    assert_true(num(cal, "rms_error_after") < num(cal, "rms_error_before"));
    cJSON_Delete(c);
}

/* 12. Refused, one line, exit 2: runs of two code bases; a zero measured time; a report of a
 * plan for another GPU than the base profile. */
static void test_code_base_refusals(void **st)
{
    (void)st;
    assert_int_equal(plan_cb("llama-3.2-1b", "1024", "1", "hf", "cb-base.json", "cb-hf.json"), 0);
    measure m = {.scale = 1.5, .only = -1, .kind = "gpu", .device = "NVIDIA H100 80GB HBM3"};
    write_report("cb-hf.jsonl", "cb-hf.json", &m);
    write_report("cb-zero.jsonl", "cb-base-10.json", &m);
    char *t = cli_slurp("cb-zero.jsonl"), *p = strstr(t, "\"measured_step_s\":");
    assert_non_null(p);
    p += strlen("\"measured_step_s\":");
    char *q = p + strcspn(p, ",}");
    char *u = malloc(strlen(t) + 2);
    sprintf(u, "%.*s0%s", (int)(p - t), t, q);
    cli_write("cb-zero.jsonl", u);
    free(u);
    free(t);
    assert_int_equal(plan_cb("llama-3.2-1b", "1024", "1", "fused", "h200", "cb-h200.json"), 0);
    write_report("cb-h200.jsonl", "cb-h200.json", &m);
    static const struct { const char *what, *a, *b, *needle; } cases[] = {
        {"two code bases", "cb-10.jsonl", "cb-hf.jsonl", "calibrate each code base from its own runs"},
        {"a zero time", "cb-zero.jsonl", NULL, "time.measured_step_s"},
        {"another GPU", "cb-h200.jsonl", NULL, "cb-h200.jsonl: planned for \"NVIDIA H200"},
    };
    cli_write("cb-out.json", "old\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cases[i].b ? calibrate(A("--calibrate-from", (char *)cases[i].a, (char *)cases[i].b, "--gpu", "cb-base.json",
                                          "-o", "cb-out.json"))
                            : calibrate(A("--calibrate-from", (char *)cases[i].a, "--gpu", "cb-base.json", "-o", "cb-out.json"));
        if (rc != 2) fail_msg("%s: exit %d, expected 2 (%s)", cases[i].what, rc, err);
        one_line(cases[i].what, cases[i].needle);
        char *o = cli_slurp("cb-out.json");
        if (strcmp(o, "old\n")) fail_msg("%s: the output was touched", cases[i].what);
        free(o);
    }
}

static int setup(void **st)
{
    (void)st;
    write_profiles();
    return 0;
}

int main(void)
{
    if (!cli_setup("gckpt-calibrate")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_uniform_slowdown),
        cmocka_unit_test(test_recovers_truth),
        cmocka_unit_test(test_one_run),
        cmocka_unit_test(test_noisy_runs),
        cmocka_unit_test(test_several_gpus),
        cmocka_unit_test(test_trainer_reports),
        cmocka_unit_test(test_library),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_profile_edited),
        cmocka_unit_test(test_host_runs),
        cmocka_unit_test(test_code_base_truth),
        cmocka_unit_test(test_code_base_created),
        cmocka_unit_test(test_code_base_few_runs),
        cmocka_unit_test(test_code_base_refusals),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    cli_teardown();
    return rc;
}
