#include "gckpt/core/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/util/jsonget.h"
#include "gckpt/util/safe_text.h"

const char *const gckpt_target_names[GCKPT_NTARGET] = {"cuda", "cpu"};

const char *gckpt_target_label(gckpt_target t)
{
    return t < GCKPT_NTARGET ? gckpt_target_names[t] : "cpu-cuda-lists";
}

int gckpt_target_from(const char *s)
{
    for (int i = 0; i < GCKPT_NTARGET; i++)
        if (s && !strcmp(s, gckpt_target_names[i])) return i;
    return -1;
}

/* "kind": optional, "cuda" (the shipped GPU profiles) when absent */
static bool parse_kind(const cJSON *j, const char *f, gckpt_device *d, gckpt_err *err)
{
    char kind[16];
    if (!gckpt_json_str_opt(j, f, "kind", "cuda", kind, sizeof kind, err)) return false;
    int k = gckpt_target_from(kind);
    if (k < 0) {
        gckpt_seterr(err, "%s: field 'kind' = \"%s\", expected \"cuda\" or \"cpu\"", f, kind);
        return false;
    }
    d->kind = (gckpt_target)k;
    return true;
}

/* "calibration": optional (gckpt-plan --calibrate-from writes it, docs/calibration.md): where
 * the fitted fields came from. Checked for its shape, and each fitted knob's "after" must be
 * the field's value: a profile edited after its calibration says so instead of lying. */
static bool knob_field(const gckpt_device *d, const char *k, double *v)
{
    if (!strcmp(k, "matmul_efficiency")) *v = d->matmul_efficiency;
    else if (!strcmp(k, "hbm_efficiency")) *v = d->hbm_efficiency;
    else if (!strcmp(k, "h2d_bytes_per_s")) *v = d->h2d_bytes_per_s;
    else if (!strcmp(k, "d2h_bytes_per_s")) *v = d->d2h_bytes_per_s;
    else if (!strncmp(k, "code_bases.", 11)) { /* a code base's time parameter */
        const char *cb = k + 11, *dot = strchr(cb, '.');
        char name[16];
        if (!dot || (size_t)(dot - cb) >= sizeof name) return false;
        memcpy(name, cb, (size_t)(dot - cb));
        name[dot - cb] = 0;
        int i = gckpt_code_base_from(name);
        if (i < 0 || !d->has_code_bases) return false;
        const gckpt_code_base_eff *e = &d->code_base[i];
        const char *f = dot + 1;
        if (!strcmp(f, "matmul_factor")) *v = e->matmul_factor;
        else if (!strcmp(f, "attention_factor")) *v = e->attention_factor;
        else if (!strcmp(f, "hbm_factor")) *v = e->hbm_factor;
        else if (!strcmp(f, "op_overhead_s")) *v = e->op_overhead_s;
        else if (!strcmp(f, "step_overhead_s")) *v = e->step_overhead_s;
        else return false;
    } else return false;
    return true;
}

static bool parse_calibration(const cJSON *j, const char *f, const gckpt_device *d, gckpt_err *err)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "calibration");
    if (!c) return true;
    if (!cJSON_IsObject(c)) {
        gckpt_seterr(err, "%s: field 'calibration' must be an object, got %s", f, gckpt_json_type_name(c));
        return false;
    }
    char date[64];
    uint64_t nruns;
    if (!gckpt_json_str(c, f, "calibration.date", date, sizeof date, err) ||
        !gckpt_json_u64(c, f, "calibration.n_runs", 1, 1u << 30, &nruns, err))
        return false;
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(c, "from");
    const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(c, "knobs");
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(c, "runs");
    if (!cJSON_IsArray(from) || cJSON_GetArraySize(from) < 1) {
        gckpt_seterr(err, "%s: field 'calibration.from' must be a non-empty array (the files calibrated from)", f);
        return false;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, from) {
        char file[512], sha[80];
        if (!gckpt_json_str(it, f, "calibration.from[].file", file, sizeof file, err) ||
            !gckpt_json_str(it, f, "calibration.from[].sha256", sha, sizeof sha, err))
            return false;
        if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64) {
            gckpt_seterr(err, "%s: field 'calibration.from[].sha256' = \"%s\" is not 64 lowercase hex digits", f, sha);
            return false;
        }
    }
    if (!cJSON_IsArray(runs) || (uint64_t)cJSON_GetArraySize(runs) != nruns) {
        gckpt_seterr(err, "%s: field 'calibration.runs' must be an array of calibration.n_runs = %llu runs", f,
                     (unsigned long long)nruns);
        return false;
    }
    cJSON_ArrayForEach(it, runs) {
        double v;
        if (!gckpt_json_num(it, f, "calibration.runs[].measured_s", 1e-12, 1e12, &v, err) ||
            !gckpt_json_num(it, f, "calibration.runs[].predicted_before_s", 0, 1e12, &v, err) ||
            !gckpt_json_num(it, f, "calibration.runs[].predicted_after_s", 0, 1e12, &v, err))
            return false;
    }
    if (!cJSON_IsObject(knobs)) {
        gckpt_seterr(err, "%s: field 'calibration.knobs' must be an object (field: {before, after, fitted})", f);
        return false;
    }
    cJSON_ArrayForEach(it, knobs) {
        double field, before, after;
        char name[64];
        snprintf(name, sizeof name, "%s", it->string);
        if (!knob_field(d, it->string, &field)) {
            gckpt_seterr(err, "%s: field 'calibration.knobs.%s' is not a calibrated field (matmul_efficiency, "
                              "hbm_efficiency, h2d_bytes_per_s, d2h_bytes_per_s, code_bases.<code base>.<time parameter>)", f, name);
            return false;
        }
        const cJSON *fit = cJSON_GetObjectItemCaseSensitive(it, "fitted");
        if (!cJSON_IsObject(it) || !cJSON_IsBool(fit) ||
            !gckpt_json_num(it, f, "calibration.knobs.before", 0, 1e15, &before, err) ||
            !gckpt_json_num(it, f, "calibration.knobs.after", 0, 1e15, &after, err)) {
            if (!cJSON_IsObject(it) || !cJSON_IsBool(fit))
                gckpt_seterr(err, "%s: field 'calibration.knobs.%s' must be an object with before, after and fitted "
                                  "(true or false)", f, name);
            return false;
        }
        if (cJSON_IsTrue(fit) && after != field) {
            gckpt_seterr(err, "%s: field '%s' = %.17g but calibration.knobs.%s.after = %.17g: edited after the "
                              "calibration; calibrate again or remove the calibration object", f, name, field, name, after);
            return false;
        }
    }
    return true;
}

const gckpt_code_base_eff gckpt_code_base_neutral = {.matmul_factor = 1, .attention_factor = 1, .hbm_factor = 1,
                                                     .step_ratio_p10 = 1, .step_ratio_p90 = 1,
                                                     .ratio_p10 = 1, .ratio_p90 = 1};

const gckpt_code_base_eff *gckpt_code_base_of(const gckpt_device *d, gckpt_target target, unsigned code_base)
{
    return target != GCKPT_TARGET_CUDA || code_base >= GCKPT_NCODEBASE ? &gckpt_code_base_neutral
                                                                       : &d->code_base[code_base];
}

double gckpt_attention_eff(const gckpt_code_base_eff *e, double seq)
{
    return e->attention_factor * seq / (seq + e->attention_seq_half);
}

/* "code_bases": optional, {"hf": {...}, "fused": {...}, "fit": {...}}: each code base's time
 * parameters (every field required), and "fit", where they come from (kept as written). */
static bool parse_code_bases(const cJSON *j, const char *f, gckpt_device *d, gckpt_err *err)
{
    for (int k = 0; k < GCKPT_NCODEBASE; k++) d->code_base[k] = gckpt_code_base_neutral;
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(j, "code_bases");
    if (!cb) return true;
    if (!cJSON_IsObject(cb)) {
        gckpt_seterr(err, "%s: field 'code_bases' must be an object, got %s", f, gckpt_json_type_name(cb));
        return false;
    }
    d->has_code_bases = true;
    const cJSON *it;
    cJSON_ArrayForEach(it, cb) {
        char name[64];
        snprintf(name, sizeof name, "%s", it->string);
        gckpt_text_sanitize(name);
        if (!strcmp(it->string, "fit")) {
            char *t = cJSON_IsObject(it) ? cJSON_PrintUnformatted(it) : NULL;
            bool fits = t && strlen(t) < sizeof d->code_base_fit;
            if (fits) strcpy(d->code_base_fit, t);
            free(t);
            if (!fits) {
                gckpt_seterr(err, "%s: field 'code_bases.fit' must be an object of under %zu bytes", f,
                             sizeof d->code_base_fit);
                return false;
            }
            continue;
        }
        int k = gckpt_code_base_from(it->string);
        if (k < 0 || !cJSON_IsObject(it)) {
            gckpt_seterr(err, "%s: field 'code_bases.%s': expected an object named hf or fused (or fit)", f, name);
            return false;
        }
        gckpt_code_base_eff *e = &d->code_base[k];
        char fld[10][96];
        static const char *const keys[10] = {"matmul_factor", "attention_factor", "attention_seq_half", "hbm_factor",
                                             "op_overhead_s", "step_overhead_s", "step_ratio_p10", "step_ratio_p90",
                                             "ratio_p10", "ratio_p90"};
        for (int i = 0; i < 10; i++) snprintf(fld[i], sizeof fld[i], "code_bases.%s.%s", name, keys[i]);
        if (!gckpt_json_num(it, f, fld[0], 0.01, 10, &e->matmul_factor, err) ||
            !gckpt_json_num(it, f, fld[1], 0.01, 10, &e->attention_factor, err) ||
            !gckpt_json_num(it, f, fld[2], 0, 1e7, &e->attention_seq_half, err) ||
            !gckpt_json_num(it, f, fld[3], 0.01, 10, &e->hbm_factor, err) ||
            !gckpt_json_num(it, f, fld[4], 0, 1, &e->op_overhead_s, err) ||
            !gckpt_json_num(it, f, fld[5], 0, 1e3, &e->step_overhead_s, err) ||
            !gckpt_json_num_opt(it, f, fld[6], 0.01, 100, 1, &e->step_ratio_p10, err) ||
            !gckpt_json_num_opt(it, f, fld[7], 0.01, 100, 1, &e->step_ratio_p90, err) ||
            !gckpt_json_num_opt(it, f, fld[8], 0.01, 1, 1, &e->ratio_p10, err) ||
            !gckpt_json_num_opt(it, f, fld[9], 1, 100, 1, &e->ratio_p90, err))
            return false;
        /* a band of ratios taken both ways round holds 1 (the readers' ranges) and comes whole */
        if (!cJSON_GetObjectItemCaseSensitive(it, "ratio_p10") != !cJSON_GetObjectItemCaseSensitive(it, "ratio_p90")) {
            gckpt_seterr(err, "%s: field 'code_bases.%s.%s' without %s: give both or neither", f, name,
                         cJSON_GetObjectItemCaseSensitive(it, "ratio_p10") ? "ratio_p10" : "ratio_p90",
                         cJSON_GetObjectItemCaseSensitive(it, "ratio_p10") ? "ratio_p90" : "ratio_p10");
            return false;
        }
        if (e->step_ratio_p10 > e->step_ratio_p90) {
            gckpt_seterr(err, "%s: field 'code_bases.%s.step_ratio_p10' is above step_ratio_p90", f, name);
            return false;
        }
    }
    return true;
}

bool gckpt_device_parse(const char *f, const char *text, gckpt_device *d, gckpt_err *err)
{
    memset(d, 0, sizeof *d);
    cJSON *j = gckpt_json_parse(f, text, err);
    if (!j) return false;
    char schema[64];
    bool ok = gckpt_json_str(j, f, "schema", schema, sizeof schema, err);
    if (ok && strcmp(schema, "gckpt.device/1") != 0) {
        gckpt_seterr(err, "%s: field 'schema' = \"%s\", expected \"gckpt.device/1\"", f, schema);
        ok = false;
    }
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(j, "peak_tflops");
    const double big = 1e6; /* TFLOP/s */
    ok = ok && gckpt_json_str(j, f, "name", d->name, sizeof d->name, err) && parse_kind(j, f, d, err) &&
         gckpt_json_u64(j, f, "memory_bytes", 1u << 20, (uint64_t)1 << 50, &d->memory_bytes, err);
    if (ok && !cJSON_IsObject(tf)) {
        gckpt_seterr(err, "%s: missing field 'peak_tflops' (object with fp32, tf32, bf16, fp16)", f);
        ok = false;
    }
    ok = ok && gckpt_json_num(tf, f, "peak_tflops.fp32", 1e-3, big, &d->tflops_fp32, err) &&
         gckpt_json_num(tf, f, "peak_tflops.tf32", 1e-3, big, &d->tflops_tf32, err) &&
         gckpt_json_num(tf, f, "peak_tflops.bf16", 1e-3, big, &d->tflops_bf16, err) &&
         gckpt_json_num(tf, f, "peak_tflops.fp16", 1e-3, big, &d->tflops_fp16, err) &&
         gckpt_json_num(j, f, "matmul_efficiency", 0.01, 1, &d->matmul_efficiency, err) &&
         gckpt_json_num(j, f, "hbm_bytes_per_s", 1e6, 1e15, &d->hbm_bytes_per_s, err) &&
         gckpt_json_num(j, f, "hbm_efficiency", 0.01, 1, &d->hbm_efficiency, err) &&
         gckpt_json_num(j, f, "h2d_bytes_per_s", 1e6, 1e15, &d->h2d_bytes_per_s, err) &&
         gckpt_json_num(j, f, "d2h_bytes_per_s", 1e6, 1e15, &d->d2h_bytes_per_s, err) &&
         gckpt_json_u64(j, f, "context_bytes", 0, (uint64_t)1 << 40, &d->context_bytes, err) &&
         gckpt_json_u64(j, f, "workspace_bytes", 0, (uint64_t)1 << 40, &d->workspace_bytes, err) &&
         gckpt_json_u64(j, f, "alloc_round_bytes", 1, 1u << 30, &d->alloc_round_bytes, err) &&
         gckpt_json_u64(j, f, "segment_round_bytes", 1, 1u << 30, &d->segment_round_bytes, err) &&
         gckpt_json_num_opt(j, f, "intra_node_bus_bytes_per_s", 1e6, 1e15, 0, &d->intra_node_bus_bytes_per_s, err) &&
         gckpt_json_num_opt(j, f, "inter_node_bus_bytes_per_s", 1e6, 1e15, 0, &d->inter_node_bus_bytes_per_s, err) &&
         parse_code_bases(j, f, d, err) && parse_calibration(j, f, d, err);
    cJSON_Delete(j);
    gckpt_text_sanitize(d->name); /* shown on terminals, in tables and plots */
    return ok;
}

bool gckpt_device_load(const char *name_or_path, gckpt_device *d, gckpt_err *err)
{
    char path[4096];
    if (!gckpt_resolve_data("devices", name_or_path, path, sizeof path, err)) return false;
    char *text = gckpt_read_file(path, 1u << 20, err);
    if (!text) return false;
    bool ok = gckpt_device_parse(path, text, d, err);
    free(text);
    return ok;
}

double gckpt_copy_seconds(const gckpt_device *d, bool d2h, double bytes)
{
    return bytes / (d2h ? d->d2h_bytes_per_s : d->h2d_bytes_per_s);
}
