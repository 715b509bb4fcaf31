/* libFuzzer target: the whole planning path, from a config text to a JSON plan.
 *
 * Input: 4 bytes of run settings, then the config.json text. The settings pick a
 * sequence length and micro-batch (from small to the CLI's limits), gradient
 * accumulation, precision, attention, optimizer, offload and a global batch. With a
 * fixed GPU profile (devices/h100-sxm-80gb.json):
 *  1. the full model: recipe, sizes (refused with one line, or accepted), segment
 *     profile and the fast evaluator on a few settings, with invariants on the results;
 *  2. the same model cut to at most 6 layers: the full event walk of every
 *     every_n_layers x offload setting must give the fast evaluator's peak, breakdown,
 *     peak location and (up to rounding) times;
 *  3. gckpt_plan_run on the config written to a temporary file, gckpt_plan_to_json,
 *     printed and read back (well-formed JSON, no duplicate keys) and valid against
 *     reports/schema/plan.schema.json; the table and recommendation are printed. */
#include <math.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/planner/plan.h"
#include "schema_check.h"

static gckpt_device dev;
static char dev_path[64] = "", cfg_path[64] = "";
static cJSON *schema;
static FILE *devnull;

static void cleanup(void)
{
    if (dev_path[0]) unlink(dev_path);
    if (cfg_path[0]) unlink(cfg_path);
    cJSON_Delete(schema);
    if (devnull) fclose(devnull);
}

static void write_all(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f && fwrite(text, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    gckpt_err err = {{0}};
    char *text = gckpt_read_file(GCKPT_SOURCE_DIR "/devices/h100-sxm-80gb.json", 1u << 20, &err);
    FUZZ_CHECK(text && gckpt_device_parse("h100", text, &dev, &err), "%s", err.msg);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 32) tmp = "/tmp";
    snprintf(dev_path, sizeof dev_path, "%s/gckpt-fuzz-XXXXXX", tmp);
    int fd = mkstemp(dev_path);
    FUZZ_CHECK(fd >= 0, "mkstemp");
    close(fd);
    write_all(dev_path, text, strlen(text));
    free(text);
    snprintf(cfg_path, sizeof cfg_path, "%s/gckpt-fuzz-XXXXXX", tmp);
    fd = mkstemp(cfg_path);
    FUZZ_CHECK(fd >= 0, "mkstemp");
    close(fd);
    text = gckpt_read_file(GCKPT_SOURCE_DIR "/reports/schema/plan.schema.json", 1u << 20, &err);
    FUZZ_CHECK(text && (schema = cJSON_Parse(text)), "%s", err.msg);
    free(text);
    devnull = fopen("/dev/null", "w");
    FUZZ_CHECK(devnull, "/dev/null");
    atexit(cleanup);
    return 0;
}

static void check_result(const gckpt_ctx *c, const gckpt_recipe *r, const gckpt_result *res)
{
    int64_t base[GCKPT_NCOMP], persistent = 0, sum = 0;
    gckpt_persistent(c, base);
    for (int k = 0; k < GCKPT_NCOMP; k++) {
        persistent += base[k];
        sum += res->breakdown[k];
        FUZZ_CHECK(res->breakdown[k] >= 0, "component %s = %lld", gckpt_component_names[k],
                   (long long)res->breakdown[k]);
    }
    FUZZ_CHECK(sum >= 0 && (uint64_t)sum == res->peak_bytes, "breakdown sums to %lld, peak %llu",
               (long long)sum, (unsigned long long)res->peak_bytes);
    FUZZ_CHECK(res->peak_bytes >= (uint64_t)persistent, "peak below persistent memory");
    FUZZ_CHECK(res->after_forward_bytes <= res->peak_bytes, "after-forward above the peak");
    FUZZ_CHECK(res->device_peak_bytes >= res->peak_bytes, "device peak below the allocated peak");
    FUZZ_CHECK(res->peak_layer >= -1 && res->peak_layer <= (int64_t)c->model->layers + 1, "peak layer %d",
               res->peak_layer);
    FUZZ_CHECK(res->peak_tensor >= -1 && res->peak_tensor < r->nt, "peak tensor %d", res->peak_tensor);
    FUZZ_CHECK(res->peak_phase < GCKPT_NPHASE, "peak phase %d", res->peak_phase);
    const double t[] = {res->step_s, res->forward_s, res->backward_s, res->recompute_s, res->copy_s,
                        res->optimizer_s, res->model_flops, res->tokens_per_s, res->mfu};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        FUZZ_CHECK(isfinite(t[i]) && t[i] >= 0, "time figure %zu = %g", i, t[i]);
    FUZZ_CHECK(res->step_s > 0, "step time 0");
}

static void close_to(double a, double b, const char *what)
{
    double tol = 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15;
    FUZZ_CHECK(fabs(a - b) <= tol, "%s: walk %.17g fast %.17g", what, a, b);
}

/* Event walk against the fast evaluator on every setting of a model of <= 6 layers. */
static void walk_vs_fast(const gckpt_model *full, const gckpt_setting *s0)
{
    static gckpt_recipe r;
    static gckpt_profile prof;
    gckpt_model m = *full;
    m.layers = 1 + (m.layers - 1) % 6;
    gckpt_recipe_build(&m, s0->precision, s0->attention, &r);
    gckpt_ctx c;
    gckpt_err err = {{0}};
    if (!gckpt_ctx_init(&c, &m, &dev, &r, s0, &err)) {
        fuzz_check_error(&err, NULL);
        return;
    }
    FUZZ_CHECK(gckpt_profile_build(&c, &prof), "profile: out of memory");
    for (uint32_t n = 0; n <= m.layers; n++) {
        for (int off = 0; off < (n ? 2 : 1); off++) {
            c.set.every_n = n;
            c.set.offload = off;
            gckpt_schedule ev;
            FUZZ_CHECK(gckpt_schedule_build(&c, &ev), "schedule: out of memory");
            gckpt_result a, b;
            gckpt_walk(&c, &ev, &a);
            gckpt_schedule_free(&ev);
            gckpt_fast_eval(&c, &prof, n, off, c.set.grad_accum, &b);
            check_result(&c, &r, &a);
            FUZZ_CHECK(a.peak_bytes == b.peak_bytes, "n %u off %d: peak walk %llu fast %llu", n, off,
                       (unsigned long long)a.peak_bytes, (unsigned long long)b.peak_bytes);
            FUZZ_CHECK(a.device_peak_bytes == b.device_peak_bytes, "device peak");
            FUZZ_CHECK(a.host_pinned_bytes == b.host_pinned_bytes, "host pinned");
            FUZZ_CHECK(a.after_forward_bytes == b.after_forward_bytes, "after forward");
            for (int k = 0; k < GCKPT_NCOMP; k++)
                FUZZ_CHECK(a.breakdown[k] == b.breakdown[k], "n %u off %d: %s walk %lld fast %lld", n, off,
                           gckpt_component_names[k], (long long)a.breakdown[k], (long long)b.breakdown[k]);
            FUZZ_CHECK(a.peak_phase == b.peak_phase && a.peak_layer == b.peak_layer &&
                           a.peak_tensor == b.peak_tensor && a.peak_micro == b.peak_micro &&
                           a.peak_grad == b.peak_grad,
                       "n %u off %d: peak location differs", n, off);
            close_to(a.step_s, b.step_s, "step_s");
            close_to(a.recompute_s, b.recompute_s, "recompute_s");
            close_to(a.copy_s, b.copy_s, "copy_s");
            close_to(a.forward_s, b.forward_s, "forward_s");
            close_to(a.backward_s, b.backward_s, "backward_s");
            close_to(a.model_flops, b.model_flops, "model_flops");
        }
    }
}

static void full_model(const gckpt_model *m, const gckpt_setting *s)
{
    static gckpt_recipe r;
    static gckpt_profile prof;
    gckpt_recipe_build(m, s->precision, s->attention, &r);
    gckpt_ctx c;
    gckpt_err err = {{0}};
    if (!gckpt_ctx_init(&c, m, &dev, &r, s, &err)) {
        fuzz_check_error(&err, NULL);
        return;
    }
    FUZZ_CHECK(gckpt_profile_build(&c, &prof), "profile: out of memory");
    const uint32_t ns[] = {0, 1, 2, (uint32_t)m->layers};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        if (ns[i] > m->layers) continue;
        for (int off = 0; off < (ns[i] ? 2 : 1); off++) {
            gckpt_result res;
            gckpt_fast_eval(&c, &prof, ns[i], off, s->grad_accum, &res);
            check_result(&c, &r, &res);
        }
    }
}

static void plan(const char *text, size_t len, const gckpt_model *m, const gckpt_setting *s,
                 uint8_t sel)
{
    write_all(cfg_path, text, len);
    gckpt_plan_request q = {.seq = s->seq, .micro_batches = {s->micro_batch, 1}, .n_micro = 2, .allow_long_seq = true,
                            .grad_accum = s->grad_accum, .precision = s->precision,
                            .optimizer = s->optimizer, .attention = s->attention,
                            .offload = (gckpt_offload_sel)(sel % 3), .margin = 0.05};
    if (sel & 4) q.global_batch = s->micro_batch * s->grad_accum;
    if (sel & 8) q.budget_bytes = (uint64_t)1 << (20 + (sel >> 4));
    uint32_t every[3] = {0, 1, (uint32_t)m->layers};
    q.every_n = every;
    q.n_every = m->layers > 1 ? 3 : 2;
    snprintf(q.model_ref, sizeof q.model_ref, "%s", cfg_path);
    snprintf(q.gpu_ref, sizeof q.gpu_ref, "%s", dev_path);
    gckpt_plan p;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&q, &p, &err)) {
        fuzz_check_error(&err, NULL);
        return;
    }
    FUZZ_CHECK(p.n > 0 && p.smallest >= 0 && (size_t)p.smallest < p.n, "plan without entries");
    FUZZ_CHECK(p.recommended < 0 || (p.entries[p.recommended].fits && (size_t)p.recommended < p.n),
               "recommended entry does not fit");
    cJSON *j = gckpt_plan_to_json(&p, m->layers <= 256);
    FUZZ_CHECK(j, "plan JSON: out of memory");
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    FUZZ_CHECK(out, "plan JSON: out of memory");
    cJSON *back = gckpt_json_parse("plan.json", out, &err);
    FUZZ_CHECK(back, "the plan does not read back: %s", err.msg);
    char why[512];
    FUZZ_CHECK(schema_check(schema, back, why, sizeof why), "plan against the schema: %s", why);
    cJSON_Delete(back);
    free(out);
    gckpt_plan_print_table(&p, devnull, sel & 1);
    gckpt_plan_print_recommendation(&p, devnull);
    gckpt_plan_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    static const uint64_t seqs[16] = {1, 2, 3, 7, 16, 48, 96, 128, 257, 1024, 4096, 32768,
                                      131072, 1u << 20, (1u << 24) - 1, 1u << 24};
    static const uint64_t mbs[8] = {1, 2, 3, 4, 8, 64, 1024, 65536};
    gckpt_setting s = {.seq = seqs[data[0] & 15], .micro_batch = mbs[data[1] & 7],
                       .grad_accum = 1 + (data[1] >> 3) % 3,
                       .precision = (gckpt_precision)(data[2] & 3),
                       .attention = (gckpt_attention)((data[2] >> 2) & 1),
                       .optimizer = (gckpt_optimizer)((data[2] >> 3) & 3)};
    uint8_t sel = data[3];
    char *text = fuzz_text(data + 4, size - 4);
    gckpt_model m;
    gckpt_err err = {{0}};
    if (!gckpt_model_parse("fuzz.json", text, &m, &err)) {
        fuzz_check_error(&err, "fuzz.json");
        free(text);
        return 0;
    }
    full_model(&m, &s);
    walk_vs_fast(&m, &s);
    plan(text, strlen(text), &m, &s, sel);
    free(text);
    return 0;
}
