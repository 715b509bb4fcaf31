/* The report's records (schema gckpt.report/2, written by report_file.c): JSON for
 * tools, a table and progress lines for people. Byte counts are JSON integers; values
 * that were not measured are null. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/parallel.h"
#include "gckpt/util/atomic_file.h"
#include "gckpt/executor/exec_run.h"

static void num_or_null(cJSON *o, const char *k, bool have, double v)
{
    if (have && isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

static void str_or_null(cJSON *o, const char *k, const char *s)
{
    if (s && *s) cJSON_AddStringToObject(o, k, s);
    else cJSON_AddNullToObject(o, k);
}

static void bool_or_null(cJSON *o, const char *k, bool have, bool v)
{
    if (have) cJSON_AddBoolToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

static void check_json(cJSON *parent, const char *k, const gckpt_check *c)
{
    cJSON *o = cJSON_AddObjectToObject(parent, k);
    cJSON_AddNumberToObject(o, "predicted", (double)c->predicted);
    num_or_null(o, "measured", c->measured, (double)c->value);
    num_or_null(o, "relative_error", c->measured, c->rel);
    bool_or_null(o, "pass", c->measured && c->judged, c->pass);
}

static void hash_or_null(cJSON *o, const char *k, bool have, uint64_t h)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    str_or_null(o, k, have ? hex : NULL);
}

/* Several ranks: each one's measured allocator peak against its own schedule's walk, its
 * pinned bytes, time and numbers (rank 0 gathered them; gckpt_rank_result). */
static void ranks_json(cJSON *entry, const gckpt_entry_report *e)
{
    cJSON *a = cJSON_AddArrayToObject(entry, "ranks");
    for (int r = 0; r < e->nranks; r++) {
        const gckpt_rank_result *x = &e->ranks[r];
        bool ran = x->status == GCKPT_RS_OK;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(a, o);
        cJSON_AddNumberToObject(o, "rank", x->rank);
        cJSON_AddStringToObject(o, "status", x->status >= 0 && x->status < GCKPT_NRS ? gckpt_run_status_names[x->status] : "error");
        bool_or_null(o, "pass", x->pass >= 0, x->pass == 1);
        str_or_null(o, "message", x->message);
        cJSON *pk = cJSON_AddObjectToObject(o, "peak_bytes");
        num_or_null(pk, "predicted", x->pred_peak > 0, (double)x->pred_peak);
        num_or_null(pk, "measured", ran, (double)x->peak);
        bool_or_null(pk, "exact", ran && x->pred_peak > 0, x->peak == x->pred_peak);
        cJSON *pn = cJSON_AddObjectToObject(o, "host_pinned_bytes");
        cJSON_AddNumberToObject(pn, "predicted", (double)x->pred_pinned);
        num_or_null(pn, "measured", ran, (double)x->pinned);
        num_or_null(o, "measured_step_s", x->has_time, x->step_s);
        num_or_null(o, "loss", x->has_numbers, x->loss);
        hash_or_null(o, "grad_checksum", x->has_numbers, x->grad_hash);
        num_or_null(o, "grad_norm", x->has_numbers, x->grad_norm);
    }
}

cJSON *gckpt_report_entry_json(const gckpt_entry_report *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "record", "entry");
    cJSON_AddNumberToObject(o, "index", (double)e->index);
    cJSON_AddNumberToObject(o, "every_n_layers", e->every_n);
    cJSON_AddBoolToObject(o, "offload", e->offload);
    cJSON_AddNumberToObject(o, "micro_batch", (double)e->micro_batch);
    cJSON_AddNumberToObject(o, "grad_accum", (double)e->grad_accum);
    cJSON_AddBoolToObject(o, "fits_predicted", e->fits);
    cJSON_AddStringToObject(o, "status", gckpt_run_status_names[e->status]);
    bool_or_null(o, "pass", e->pass >= 0, e->pass == 1);
    str_or_null(o, "message", e->message);
    cJSON *m = cJSON_AddObjectToObject(o, "memory");
    check_json(m, "peak_bytes", &e->peak);
    check_json(m, "device_peak_bytes", &e->device_peak);
    check_json(m, "host_pinned_bytes", &e->pinned);
    num_or_null(m, "schedule_peak_bytes", e->pred_schedule_peak > 0, (double)e->pred_schedule_peak);
    num_or_null(m, "device_over_baseline_bytes", e->device_peak.measured, (double)e->device_over_baseline);
    num_or_null(m, "context_bytes", e->device_peak.measured, (double)e->context_bytes);
    cJSON *t = cJSON_AddObjectToObject(o, "time");
    cJSON_AddNumberToObject(t, "predicted_step_s", e->pred_step_s);
    num_or_null(t, "measured_step_s", e->has_time, e->step_s);
    num_or_null(t, "relative_error", e->has_time, e->step_rel);
    cJSON_AddBoolToObject(t, "judged", e->time_judged);
    bool_or_null(t, "pass", e->time_judged, e->time_pass);
    cJSON *st = cJSON_AddArrayToObject(t, "steps_s");
    for (int i = 0; i < e->nsteps; i++) cJSON_AddItemToArray(st, cJSON_CreateNumber(e->step_times[i]));
    cJSON *n = cJSON_AddObjectToObject(o, "numerics");
    num_or_null(n, "loss", e->has_numbers, e->loss);
    hash_or_null(n, "grad_checksum", e->has_numbers, e->grad_hash);
    num_or_null(n, "grad_norm", e->has_numbers, e->grad_norm);
    cJSON_AddNumberToObject(o, "wall_s", e->wall_s);
    if (e->nranks > 0) ranks_json(o, e);
    return o;
}

cJSON *gckpt_report_header_json(const gckpt_report *r)
{
    const gckpt_plan_file *pf = r->plan;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", GCKPT_REPORT_SCHEMA);
    cJSON_AddStringToObject(root, "record", "header");
    cJSON *g = cJSON_AddObjectToObject(root, "generator");
    cJSON_AddStringToObject(g, "name", "gckpt-run");
    cJSON_AddStringToObject(g, "version", GCKPT_VERSION);
    cJSON *p = cJSON_AddObjectToObject(root, "plan");
    cJSON_AddStringToObject(p, "file", pf->file);
    cJSON_AddStringToObject(p, "generator_version", pf->generator_version);
    cJSON_AddStringToObject(p, "model", pf->model.name);
    cJSON_AddStringToObject(p, "model_type", pf->model.model_type);
    cJSON_AddStringToObject(p, "device", pf->dev.name);
    cJSON_AddNumberToObject(p, "seq", (double)pf->seq);
    cJSON_AddStringToObject(p, "precision", gckpt_precision_names[pf->precision]);
    cJSON_AddStringToObject(p, "optimizer", gckpt_optimizer_names[pf->optimizer]);
    cJSON_AddStringToObject(p, "attention", gckpt_attention_names[pf->attention]);
    cJSON_AddStringToObject(root, "backend", r->backend);
    cJSON *d = cJSON_AddObjectToObject(root, "device");
    cJSON_AddStringToObject(d, "kind", r->dev.kind[0] ? r->dev.kind : "cpu");
    cJSON_AddStringToObject(d, "name", r->dev.name[0] ? r->dev.name : "unknown");
    num_or_null(d, "memory_bytes", r->dev.memory_bytes > 0, (double)r->dev.memory_bytes);
    str_or_null(d, "driver_version", r->dev.driver);
    str_or_null(d, "runtime_version", r->dev.runtime);
    str_or_null(d, "arch", r->dev.arch);
    cJSON *op = cJSON_AddObjectToObject(root, "options");
    cJSON_AddNumberToObject(op, "steps", r->opts.steps);
    cJSON_AddNumberToObject(op, "warmup", r->opts.warmup);
    cJSON_AddNumberToObject(op, "tolerance", r->opts.tolerance);
    num_or_null(op, "time_tolerance", r->opts.time_tolerance >= 0, r->opts.time_tolerance);
    cJSON_AddBoolToObject(op, "force", r->opts.force);
    cJSON_AddNumberToObject(op, "seed", (double)r->opts.seed);
    num_or_null(op, "memory_limit_bytes", r->opts.memory_limit > 0, (double)r->opts.memory_limit);
    cJSON_AddNumberToObject(root, "selected", (double)r->planned);
    bool tp = pf->layout.tp > 1; /* tensor parallelism (over data-parallel ranks too): one process per rank */
    if (gckpt_layout_multi(&pf->layout) || tp) { /* one process per rank; this report is rank 0's */
        cJSON *rk = cJSON_AddObjectToObject(root, "ranks");
        cJSON_AddNumberToObject(rk, "world_size", gckpt_plan_file_ranks(pf));
        cJSON_AddStringToObject(rk, "parallel", tp ? "tp" : gckpt_parallel_names[pf->layout.mode]);
    }
    return root;
}

static void fmt_rel(char *buf, size_t n, bool have, double rel)
{
    if (!have) snprintf(buf, n, "-");
    else if (isnan(rel)) snprintf(buf, n, "n/a");
    else snprintf(buf, n, "%+.2f%%", 100.0 * rel);
}

void gckpt_entry_progress(const gckpt_entry_report *e, size_t k, size_t n, FILE *f)
{
    char pk[32], pm[32], rel[24];
    fprintf(f, "gckpt-run: entry %zu (%zu/%zu): every_n %u, offload %s, micro-batch %llu x %llu: %s", e->index, k, n,
            e->every_n, e->offload ? "on" : "off", (unsigned long long)e->micro_batch,
            (unsigned long long)e->grad_accum, gckpt_run_status_names[e->status]);
    if (e->peak.measured) {
        fmt_rel(rel, sizeof rel, true, e->peak.rel);
        fprintf(f, ", allocated peak %s (predicted %s, %s)", gckpt_fmt_bytes(e->peak.value, pk, sizeof pk),
                gckpt_fmt_bytes(e->peak.predicted, pm, sizeof pm), rel);
    }
    if (e->device_peak.measured) {
        fmt_rel(rel, sizeof rel, true, e->device_peak.rel);
        fprintf(f, ", device peak %s (predicted %s, %s)", gckpt_fmt_bytes(e->device_peak.value, pk, sizeof pk),
                gckpt_fmt_bytes(e->device_peak.predicted, pm, sizeof pm), rel);
    }
    if (e->has_time) fprintf(f, ", step %.4g s (predicted %.4g s)", e->step_s, e->pred_step_s);
    if (e->pass >= 0) fprintf(f, ": %s", e->pass ? "pass" : "FAIL");
    if (e->message[0]) fprintf(f, " (%s)", e->message);
    fputc('\n', f);
}

/* A rank's line under its entry: its own schedule's peak and the measured one (pass
 * column: whether they are equal), its time and numbers. */
static void print_rank(const gckpt_rank_result *x, FILE *f)
{
    char who[32], a1[32] = "-", r1[24] = "-", ms[24] = "-", ls[24] = "-", hx[20] = "-";
    bool ran = x->status == GCKPT_RS_OK;
    snprintf(who, sizeof who, "  rank %d %s", x->rank,
             x->status >= 0 && x->status < GCKPT_NRS ? gckpt_run_status_names[x->status] : "error");
    if (ran) {
        snprintf(a1, sizeof a1, "%llu", (unsigned long long)x->peak);
        fmt_rel(r1, sizeof r1, x->pred_peak > 0, ((double)x->peak - (double)x->pred_peak) / (double)x->pred_peak);
    }
    if (x->has_time) snprintf(ms, sizeof ms, "%.4g", x->step_s);
    if (x->has_numbers) {
        snprintf(ls, sizeof ls, "%.6f", x->loss);
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)x->grad_hash);
    }
    fprintf(f, "%5s %7s %7s %4s %4s %-19s %14llu %14s %8s %14s %14s %8s %10s %10s %9s %-16s %s\n", "", "", "", "", "",
            who, (unsigned long long)x->pred_peak, a1, r1, "", "", "", "", ms, ls, hx,
            !ran ? "-" : x->peak == x->pred_peak ? "exact" : "NO");
}

void gckpt_report_print_table(const gckpt_report *r, FILE *f)
{
    fprintf(f, "%5s %7s %7s %4s %4s %-19s %14s %14s %8s %14s %14s %8s %10s %10s %9s %-16s %s\n", "entry", "every_n",
            "offload", "mb", "ga", "status", "pred alloc", "meas alloc", "err", "pred device", "meas device", "err",
            "pred s", "meas s", "loss", "grad checksum", "pass");
    for (size_t i = 0; i < r->n; i++) {
        const gckpt_entry_report *e = &r->entries[i];
        char en[16], a1[32] = "-", d1[32] = "-", r1[24], r2[24], ms[24] = "-", ls[24] = "-", hx[20] = "-";
        if (e->every_n) snprintf(en, sizeof en, "%u", e->every_n);
        else snprintf(en, sizeof en, "off");
        if (e->peak.measured) snprintf(a1, sizeof a1, "%llu", (unsigned long long)e->peak.value);
        if (e->device_peak.measured) snprintf(d1, sizeof d1, "%llu", (unsigned long long)e->device_peak.value);
        fmt_rel(r1, sizeof r1, e->peak.measured, e->peak.rel);
        fmt_rel(r2, sizeof r2, e->device_peak.measured, e->device_peak.rel);
        if (e->has_time) snprintf(ms, sizeof ms, "%.4g", e->step_s);
        if (e->has_numbers) {
            snprintf(ls, sizeof ls, "%.6f", e->loss);
            snprintf(hx, sizeof hx, "%016llx", (unsigned long long)e->grad_hash);
        }
        fprintf(f, "%5zu %7s %7s %4llu %4llu %-19s %14llu %14s %8s %14llu %14s %8s %10.4g %10s %9s %-16s %s\n", e->index, en,
                e->every_n ? (e->offload ? "on" : "off") : "-", (unsigned long long)e->micro_batch,
                (unsigned long long)e->grad_accum, gckpt_run_status_names[e->status],
                (unsigned long long)e->peak.predicted, a1, r1, (unsigned long long)e->device_peak.predicted, d1, r2,
                e->pred_step_s, ms, ls, hx, e->pass < 0 ? "-" : e->pass ? "yes" : "NO");
        for (int k = 0; k < e->nranks; k++) print_rank(&e->ranks[k], f);
    }
}
