/* The calibration's inputs: gckpt.report/2 JSON Lines reports, written by gckpt-run (backend
 * host or cuda) or by gckpt.TrainerCallback (generator gckpt-python, backend hf-trainer),
 * read by the one report reader (gckpt_report_read, include/gckpt/core/report_read.h). The
 * plan each ran is read back from the header's plan.file; each entry's measured step is its
 * entry record's time.measured_step_s, or, for an entry without one (a Trainer run that was
 * killed), the median of its judged step records'. docs/calibration.md lists the fields read.
 * Every error is one line naming the file (and the line and field). */
#include "calibrate_runs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gckpt/core/plan_read.h"
#include "gckpt/core/report_read.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/safe_text.h"
#include "gckpt/util/sha256.h"

/* A report is JSON Lines, never rewritten: as large as a plan may be. */
#define CAL_MAX_BYTES GCKPT_PLAN_MAX_BYTES

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static bool add_run(cal_input *in, const cal_run *r, gckpt_err *err)
{
    if (in->nrun == in->cap) {
        size_t cap = in->cap ? 2 * in->cap : 16;
        cal_run *p = realloc(in->run, cap * sizeof *p);
        if (!p) {
            gckpt_seterr(err, "out of memory");
            return false;
        }
        in->run = p;
        in->cap = cap;
    }
    in->run[in->nrun++] = *r;
    return true;
}

/* The next line of text at *p (NUL-terminated in place); NULL at the end. A last line
 * without its newline is a write cut short (report.schema.json) and is not returned. */
static char *next_line(char **p)
{
    char *s = *p;
    if (!s || !*s) return NULL;
    char *nl = strchr(s, '\n');
    if (!nl) return NULL;
    *nl = 0;
    *p = nl + 1;
    return s;
}

static bool is_blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return false;
    return true;
}

/* The plan of a gckpt-run report: plan.file as written at run time is relative to where
 * gckpt-run ran; looked for next to the report, then from the current directory. */
static bool find_plan(const char *report, const char *plan, char *out, size_t n)
{
    struct stat st;
    if (plan[0] != '/') {
        const char *slash = strrchr(report, '/');
        if (slash) {
            snprintf(out, n, "%.*s/%s", (int)(slash - report), report, plan);
            if (stat(out, &st) == 0) return true;
        }
    }
    snprintf(out, n, "%s", plan);
    return stat(out, &st) == 0;
}

/* A string field of o into out ("" when absent or not a string). */
static void str_or_empty(const cJSON *o, const char *k, char *out, size_t n)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    snprintf(out, n, "%s", cJSON_IsString(it) ? it->valuestring : "");
    gckpt_text_sanitize(out);
}

/* The run of plan entry i of pf, measured in measured_s. */
static cal_run run_of(const gckpt_plan_file *pf, size_t i, size_t src, long entry, double measured_s)
{
    cal_run r = {.src = src, .entry = entry, .measured_s = measured_s, .planned_s = pf->entries[i].r.step_s,
                 .model = pf->model, .plan_dev = pf->dev, .target = pf->target,
                 .set = gckpt_plan_file_setting(pf, i)};
    r.set.grad_accum = pf->entries[i].grad_accum;
    return r;
}

/* ---- gckpt-run reports ------------------------------------------------------------------ */

/* The header's fields a calibration needs. */
static bool report_header(const char *f, const cJSON *h, cal_source *s, char *plan_file, size_t n, char *plan_ver,
                          size_t nv, gckpt_err *err)
{
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(h, "generator");
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(h, "plan");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(h, "device");
    char gname[32], gver[32];
    const char *missing = !cJSON_IsObject(gen) ? "generator" : !cJSON_IsObject(plan) ? "plan" : !cJSON_IsObject(dev) ? "device" : NULL;
    if (missing) {
        gckpt_seterr(err, "%s: line 1: missing field '%s' (object)", f, missing);
        return false;
    }
    if (!gckpt_json_str(gen, f, "generator.name", gname, sizeof gname, err) ||
        !gckpt_json_str(gen, f, "generator.version", gver, sizeof gver, err) ||
        !gckpt_json_str(plan, f, "plan.file", plan_file, n, err) ||
        !gckpt_json_str(plan, f, "plan.generator_version", plan_ver, nv, err) ||
        !gckpt_json_str(plan, f, "plan.device", s->planned_for, sizeof s->planned_for, err) ||
        !gckpt_json_str(h, f, "backend", s->backend, sizeof s->backend, err) ||
        !gckpt_json_str(dev, f, "device.kind", s->kind, sizeof s->kind, err) ||
        !gckpt_json_str(dev, f, "device.name", s->measured_on, sizeof s->measured_on, err))
        return false;
    snprintf(s->generator, sizeof s->generator, "%s %s", gname, gver);
    gckpt_text_sanitize(s->generator);
    gckpt_text_sanitize(s->planned_for);
    gckpt_text_sanitize(s->measured_on);
    return true;
}

/* One entry record: its index, setting, predicted and measured step time (measured < 0:
 * none, the entry did not run to the end: oom, skipped, error, interrupted). */
typedef struct {
    uint64_t index, every_n, micro_batch, grad_accum;
    bool offload;
    double predicted_s, measured_s;
} report_entry;

static bool report_entry_read(const char *where, const cJSON *e, report_entry *out, gckpt_err *err)
{
    char status[32];
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "time");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "offload");
    if (!gckpt_json_u64(e, where, "index", 0, GCKPT_MAX_ENTRIES, &out->index, err) ||
        !gckpt_json_u64(e, where, "every_n_layers", 0, 1u << 20, &out->every_n, err) ||
        !gckpt_json_u64(e, where, "micro_batch", 1, 1u << 20, &out->micro_batch, err) ||
        !gckpt_json_u64(e, where, "grad_accum", 1, 1u << 20, &out->grad_accum, err) ||
        !gckpt_json_str(e, where, "status", status, sizeof status, err))
        return false;
    if (!cJSON_IsBool(off)) {
        gckpt_seterr(err, "%s: field 'offload' must be true or false, got %s", where, gckpt_json_type_name(off));
        return false;
    }
    out->offload = cJSON_IsTrue(off);
    if (!cJSON_IsObject(t)) {
        gckpt_seterr(err, "%s: missing field 'time' (object)", where);
        return false;
    }
    if (!gckpt_json_num(t, where, "time.predicted_step_s", 0, GCKPT_MAX_SECONDS, &out->predicted_s, err) ||
        !gckpt_json_num_opt(t, where, "time.measured_step_s", 1e-12, GCKPT_MAX_SECONDS, -1, &out->measured_s, err))
        return false;
    if (strcmp(status, "ok")) out->measured_s = -1; /* not a whole step of the entry */
    return true;
}

/* The plan a report ran, checked to be the one it ran (its generator, device and each run
 * entry's setting and predicted time as the report wrote them). */
static bool report_plan(const char *f, const char *plan_file, const char *plan_ver, const cal_source *s,
                        gckpt_plan_file *pf, gckpt_err *err)
{
    char path[4096];
    if (plan_file[0] == '<') { /* gckpt.TrainerCallback given a Plan or a dict: "<Plan>", "<dict>" */
        gckpt_seterr(err, "%s: field 'plan.file' = \"%s\": the run's plan is not in a file; save it (Plan.to_json(PATH)) and "
                          "give the callback PATH (the calibration re-evaluates the plan's entries)", f, plan_file);
        return false;
    }
    if (!find_plan(f, plan_file, path, sizeof path)) {
        gckpt_seterr(err, "%s: field 'plan.file' = \"%s\": no such plan next to the report or in the current directory "
                          "(the calibration re-evaluates the plan's entries)", f, plan_file);
        return false;
    }
    gckpt_err perr;
    if (!gckpt_plan_read(path, pf, &perr)) {
        gckpt_seterr(err, "%s: its plan.file: %s", f, perr.msg);
        return false;
    }
    /* its entries are re-evaluated as gckpt-run's settings (gckpt_plan_file_setting), which
     * carry no vision tower: those plans stay refused (a VLM's by name: gckpt-run executes
     * llava's); so do TP x FSDP's and CP's (gckpt-run runs them, the re-evaluation is of the
     * whole model, not a TP rank's local one or a CP rank's walk) */
    if (pf->vlm) {
        gckpt_seterr(err, "%s: its plan.file: field 'inputs.vision': a vision-language model's plan is not calibrated "
                          "(its entries are re-evaluated as text models' settings)", f);
        gckpt_plan_file_free(pf);
        return false;
    }
    bool ok = gckpt_plan_executable(pf, &perr);
    if (ok && (pf->tp_fsdp > 1 || pf->tp_replicate > 1)) {
        gckpt_seterr(&perr, "%s: field 'inputs.tensor_parallel': TP x FSDP (or with replicas) is not re-evaluated by "
                            "the calibration", pf->file);
        ok = false;
    } else if (ok && pf->cp > 1) { /* gckpt-run runs it; a CP rank's step is the planner's CP walk, not re-evaluated */
        gckpt_seterr(&perr, "%s: field 'inputs.context_parallel': context parallelism is not re-evaluated by the "
                            "calibration", pf->file);
        ok = false;
    }
    if (!ok) {
        gckpt_seterr(err, "%s: its plan.file: %s", f, perr.msg);
        gckpt_plan_file_free(pf);
        return false;
    }
    if (strcmp(pf->generator_version, plan_ver) || strcmp(pf->dev.name, s->planned_for)) {
        gckpt_seterr(err, "%s: field 'plan.file' = \"%s\" is not the plan this report ran (generator %s, device \"%s\"; "
                          "the report says %s, \"%s\")", f, path, pf->generator_version, pf->dev.name, plan_ver,
                     s->planned_for);
        gckpt_plan_file_free(pf);
        return false;
    }
    return true;
}

static bool entry_matches(const gckpt_plan_file *pf, const report_entry *re)
{
    if (re->index >= pf->n) return false;
    const gckpt_entry *e = &pf->entries[re->index];
    double d = fabs(e->r.step_s - re->predicted_s);
    return e->every_n == re->every_n && e->offload == re->offload && e->micro_batch == re->micro_batch &&
           e->grad_accum == re->grad_accum && d <= 1e-12 * fmax(e->r.step_s, 1e-300);
}

/* The judged step records' times of one entry (hf-trainer), for an entry without a record. */
typedef struct {
    uint64_t index;
    double *s;
    size_t n, cap;
    bool has_entry; /* an entry record with a measured time came */
} step_times;

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static bool step_record(const char *where, const cJSON *j, step_times *st, gckpt_err *err)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "time"), *judged = cJSON_GetObjectItemCaseSensitive(j, "judged");
    uint64_t entry;
    double s;
    if (!gckpt_json_u64(j, where, "entry", 0, GCKPT_MAX_ENTRIES, &entry, err)) return false;
    if (!cJSON_IsObject(t)) {
        gckpt_seterr(err, "%s: missing field 'time' (object)", where);
        return false;
    }
    if (!gckpt_json_num(t, where, "time.measured_step_s", 0, GCKPT_MAX_SECONDS, &s, err)) return false;
    if (!cJSON_IsTrue(judged) || !(s > 0)) return true; /* step 1: the optimizer creates its states */
    if (st->n && st->index != entry) {
        gckpt_seterr(err, "%s: field 'entry' = %llu, earlier step records %llu: one entry per Trainer run", where,
                     (unsigned long long)entry, (unsigned long long)st->index);
        return false;
    }
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 64;
        double *p = realloc(st->s, cap * sizeof *p);
        if (!p) {
            gckpt_seterr(err, "out of memory");
            return false;
        }
        st->s = p;
        st->cap = cap;
    }
    st->index = entry;
    st->s[st->n++] = s;
    return true;
}

/* The plan entry an hf-trainer report's step records measured, as an entry record would say it. */
static bool steps_as_entry(const char *f, const gckpt_plan_file *pf, step_times *st, report_entry *re, gckpt_err *err)
{
    if (st->index >= pf->n) {
        gckpt_seterr(err, "%s: step records of entry %llu, its plan has %zu entries: not the plan this report ran", f,
                     (unsigned long long)st->index, pf->n);
        return false;
    }
    const gckpt_entry *e = &pf->entries[st->index];
    qsort(st->s, st->n, sizeof *st->s, cmp_dbl);
    *re = (report_entry){.index = st->index, .every_n = e->every_n, .micro_batch = e->micro_batch,
                         .grad_accum = e->grad_accum, .offload = e->offload, .predicted_s = e->r.step_s,
                         .measured_s = st->n % 2 ? st->s[st->n / 2] : 0.5 * (st->s[st->n / 2 - 1] + st->s[st->n / 2])};
    return true;
}

static bool add_entry(const char *f, const char *where, const report_entry *re, const gckpt_plan_file *pf,
                      const char *plan_file, cal_input *in, gckpt_err *err)
{
    if (!entry_matches(pf, re)) {
        gckpt_seterr(err, "%s: entry %llu (every_n %llu, offload %s, micro-batch %llu x %llu, predicted %.6g s) "
                          "is not entry %llu of its plan.file \"%s\": not the plan this report ran",
                     where, (unsigned long long)re->index, (unsigned long long)re->every_n,
                     re->offload ? "on" : "off", (unsigned long long)re->micro_batch,
                     (unsigned long long)re->grad_accum, re->predicted_s, (unsigned long long)re->index, plan_file);
        return false;
    }
    (void)f;
    cal_run r = run_of(pf, re->index, in->nsrc, (long)re->index, re->measured_s);
    return add_run(in, &r, err);
}

/* A report read by the one report reader (gckpt_report_read): its entry records, and the
 * step records of a Trainer run that has none for its entry. */
static bool read_report(const char *f, char *text, cal_input *in, gckpt_err *err)
{
    cJSON *doc = gckpt_report_read(f, text, err);
    if (!doc) return false;
    cal_source *s = &in->src[in->nsrc];
    char plan_file[1024], plan_ver[32];
    gckpt_plan_file pf;
    bool have_plan = false, ok = report_header(f, doc, s, plan_file, sizeof plan_file, plan_ver, sizeof plan_ver, err);
    size_t first = in->nrun, i = 0;
    step_times st = {0};
    char where[300];
    const cJSON *j;
    cJSON_ArrayForEach(j, cJSON_GetObjectItemCaseSensitive(doc, "steps"))
    {
        if (!ok) break;
        snprintf(where, sizeof where, "%s: steps[%zu]", f, i++);
        ok = step_record(where, j, &st, err);
    }
    i = 0;
    cJSON_ArrayForEach(j, cJSON_GetObjectItemCaseSensitive(doc, "entries"))
    {
        if (!ok) break;
        report_entry re;
        snprintf(where, sizeof where, "%s: entries[%zu]", f, i++);
        ok = report_entry_read(where, j, &re, err);
        if (ok && re.measured_s > 0) {
            if (!have_plan) ok = have_plan = report_plan(f, plan_file, plan_ver, s, &pf, err);
            ok = ok && add_entry(f, where, &re, &pf, plan_file, in, err);
            if (ok && re.index == st.index) st.has_entry = true;
        }
    }
    if (ok && st.n && !st.has_entry) { /* a Trainer run without its entry record */
        report_entry re;
        if (!have_plan) ok = have_plan = report_plan(f, plan_file, plan_ver, s, &pf, err);
        ok = ok && steps_as_entry(f, &pf, &st, &re, err) && add_entry(f, f, &re, &pf, plan_file, in, err);
    }
    free(st.s);
    cJSON_Delete(doc);
    if (have_plan) gckpt_plan_file_free(&pf);
    if (ok && in->nrun == first) {
        gckpt_seterr(err, "%s: no entry with a measured step time (an entry record with status \"ok\" and "
                          "time.measured_step_s, or judged step records)", f);
        ok = false;
    }
    if (!ok) in->nrun = first;
    return ok;
}

/* ---- either ----------------------------------------------------------------------------- */

bool gckpt_cal_read(const char *path, cal_input *in, gckpt_err *err)
{
    cal_source *src = realloc(in->src, (in->nsrc + 1) * sizeof *src);
    if (!src) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    in->src = src;
    cal_source *s = &in->src[in->nsrc];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", base_name(path));
    gckpt_text_sanitize(s->name);
    char *text = gckpt_read_file(path, CAL_MAX_BYTES, err);
    if (!text) return false;
    gckpt_sha256_hex(text, strlen(text), s->sha256);
    if (!*text) {
        gckpt_seterr(err, "%s: empty file: not a report", path);
        free(text);
        return false;
    }
    char *whole_text = strdup(text); /* for the report reader: the lines below are cut in place */
    bool have_copy = whole_text != NULL;
    char *rest = text, *first = next_line(&rest);
    while (first && is_blank(first)) first = next_line(&rest);
    cJSON *head = first ? cJSON_Parse(first) : NULL;
    bool ok = false;
    char schema[64];
    str_or_empty(head, "schema", schema, sizeof schema);
    if (!cJSON_IsObject(head)) {
        /* a whole JSON document (a plan, a profile) or no JSON at all */
        cJSON *whole = first ? NULL : cJSON_Parse(text);
        if (!whole && first) {
            /* restore the newline cut at the end of the first line and try the whole text */
            first[strlen(first)] = '\n';
            whole = cJSON_Parse(text);
        }
        char ws[64];
        str_or_empty(whole, "schema", ws, sizeof ws);
        if (ws[0])
            gckpt_seterr(err, "%s: field 'schema' = \"%s\": not a report (gckpt.report/2 JSON Lines of gckpt-run or "
                              "gckpt.TrainerCallback)", path, ws);
        else
            gckpt_seterr(err, "%s: line 1 is not a JSON object: not a report (gckpt.report/2 JSON Lines of gckpt-run or "
                              "gckpt.TrainerCallback)", path);
        cJSON_Delete(whole);
    } else if (!strcmp(schema, GCKPT_REPORT_SCHEMA)) {
        ok = have_copy && read_report(path, whole_text, in, err);
        if (!have_copy) gckpt_seterr(err, "out of memory");
    } else {
        gckpt_seterr(err, "%s: line 1: field 'schema' = \"%s\", expected \"gckpt.report/2\" (a report of gckpt-run or "
                          "gckpt.TrainerCallback)", path, schema);
    }
    cJSON_Delete(head);
    free(text);
    free(whole_text);
    if (ok) in->nsrc++;
    return ok;
}

void gckpt_cal_input_free(cal_input *in)
{
    free(in->src);
    free(in->run);
    memset(in, 0, sizeof *in);
}
