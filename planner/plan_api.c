/* JSON in, JSON out (include/gckpt/planner/plan_api.h): a request's options go through
 * plan_args.c as the command line's do, the plan through plan_json.c as -o writes it. */
#include "gckpt/planner/plan_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/planner/calibrate.h"
#include "gckpt/planner/hub.h"
#include "gckpt/planner/plan_args.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/util.h"

static char *answer(cJSON *body)
{
    return gckpt_json_text(body, false);
}

static char *refuse(const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", false);
    cJSON_AddStringToObject(o, "error", msg);
    return answer(o);
}

static char *refusef(const char *fmt, const char *a)
{
    gckpt_err e;
    gckpt_seterr(&e, fmt, a);
    return refuse(e.msg);
}

static char *options(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", true);
    cJSON *list = cJSON_AddArrayToObject(o, "options");
    for (const gckpt_plan_option *p = gckpt_plan_options; p->name; p++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "name", p->name);
        cJSON_AddBoolToObject(it, "has_arg", p->has_arg);
        cJSON_AddItemToArray(list, it);
    }
    return answer(o);
}

/* args ([[name, value-or-null], ...]) into a; NULL, or the refusal's answer. */
static char *read_args(const cJSON *args, gckpt_plan_args *a)
{
    if (args && !cJSON_IsArray(args)) return refuse("request: \"args\" is not a list of [name, value] pairs");
    const cJSON *it;
    cJSON_ArrayForEach(it, args) {
        const cJSON *name = cJSON_GetArrayItem(it, 0), *value = cJSON_GetArrayItem(it, 1);
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsString(name) ||
            !(cJSON_IsString(value) || cJSON_IsNull(value)))
            return refuse("request: each of \"args\" is a pair [name, value] of strings (value null for a flag)");
        const gckpt_plan_option *o = gckpt_plan_option_find(name->valuestring);
        if (!o) return refusef("unknown option '%s'", name->valuestring);
        if (!o->has_arg && !cJSON_IsNull(value)) return refusef("option '%s' is a flag: its value is null", o->name);
        if (gckpt_plan_args_set(a, o, cJSON_IsString(value) ? value->valuestring : NULL)) return refuse(a->err.msg);
    }
    if (gckpt_plan_args_finish(a)) return refuse(a->err.msg);
    if (a->n_modes > 1)
        return refuse("--parallel with a list compares modes on the command line; plan one mode at a time");
    return NULL;
}

/* What gckpt-plan prints (header, table, recommendation), or one entry's snippet. */
static char *text(const gckpt_plan *p, const gckpt_plan_args *a, const cJSON *entry, bool snippet)
{
    long idx = p->recommended >= 0 ? p->recommended : p->smallest;
    if (snippet && entry) {
        if (!cJSON_IsNumber(entry) || entry->valuedouble < 0 || entry->valuedouble >= (double)p->n ||
            entry->valuedouble != (double)(long)entry->valuedouble)
            return refuse("request: \"entry\" is not the index of one of the plan's entries");
        idx = (long)entry->valuedouble;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    if (snippet) {
        gckpt_plan_print_snippet(p, &p->entries[idx], f);
    } else {
        gckpt_plan_print_header(p, f);
        if (a->attn_note[0]) fprintf(f, "note: %s\n\n", a->attn_note);
        gckpt_plan_print_table(p, f, false);
        gckpt_plan_print_recommendation(p, f);
    }
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", true);
    cJSON_AddStringToObject(o, "text", buf);
    free(buf);
    return answer(o);
}

/* {"op": "calibrate", "reports": [paths], "gpu": base profile or absent}: the calibrated
 * profile (as gckpt-plan --calibrate-from writes it) and the summary it prints. */
static char *calibrate(const cJSON *req)
{
    const cJSON *reports = cJSON_GetObjectItemCaseSensitive(req, "reports");
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(req, "gpu");
    int n = cJSON_GetArraySize(reports);
    if (!cJSON_IsArray(reports) || n < 1) return refuse("request: \"reports\" is not a non-empty list of report paths");
    if (gpu && !cJSON_IsString(gpu) && !cJSON_IsNull(gpu)) return refuse("request: \"gpu\" is not a profile name or path");
    const char **paths = calloc((size_t)n, sizeof *paths);
    if (!paths) return NULL;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, reports) {
        if (!cJSON_IsString(it)) {
            free(paths);
            return refuse("request: each of \"reports\" is a path (a string)");
        }
        paths[k++] = it->valuestring;
    }
    char *profile = NULL, *text = NULL;
    size_t len = 0;
    gckpt_calibration_summary sum;
    gckpt_err err;
    bool ok = gckpt_calibrate(paths, (size_t)n, cJSON_IsString(gpu) ? gpu->valuestring : NULL, &profile, &sum, &err);
    free(paths);
    if (!ok) return refuse(err.msg);
    FILE *f = open_memstream(&text, &len);
    if (f) {
        gckpt_calibration_print(&sum, f);
        fclose(f);
    }
    gckpt_calibration_summary_free(&sum);
    cJSON *o = cJSON_CreateObject(), *prof = cJSON_Parse(profile);
    cJSON_AddBoolToObject(o, "ok", true);
    cJSON_AddItemToObject(o, "profile", prof);
    cJSON_AddStringToObject(o, "text", text ? text : "");
    free(profile);
    free(text);
    return prof ? answer(o) : (cJSON_Delete(o), refuse("the calibrated profile did not parse (a bug)"));
}

/* {"op": "resolve", "model": ref, "revision": rev or absent}: where --model ref's config.json
 * is, as the plan would read it (gckpt_model_ref_resolve: a shipped name as it is, a path, a
 * folder's config.json, a Hub id's cached or downloaded file) and the Hub source. */
static char *resolve(const cJSON *req)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
    const cJSON *rev = cJSON_GetObjectItemCaseSensitive(req, "revision");
    if (!cJSON_IsString(model)) return refuse("request: \"model\" is not a string");
    if (rev && !cJSON_IsString(rev) && !cJSON_IsNull(rev)) return refuse("request: \"revision\" is not a string");
    char path[4096];
    gckpt_hub_source src;
    gckpt_err err;
    if (!gckpt_model_ref_resolve(model->valuestring, cJSON_IsString(rev) ? rev->valuestring : NULL, path, sizeof path,
                                 &src, &err))
        return refuse(err.msg);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", true);
    cJSON_AddStringToObject(o, "path", path);
    if (src.id[0]) {
        cJSON *h = cJSON_AddObjectToObject(o, "hub");
        cJSON_AddStringToObject(h, "id", src.id);
        cJSON_AddStringToObject(h, "revision", src.revision);
        cJSON_AddStringToObject(h, "commit", src.commit);
    } else {
        cJSON_AddNullToObject(o, "hub");
    }
    return answer(o);
}

char *gckpt_api_call(const char *request)
{
    gckpt_err err;
    cJSON *req = gckpt_json_parse("request", request ? request : "", &err);
    if (!req) return refuse(err.msg);
    char *out = NULL;
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(req, "op");
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(req, "data_dir");
    if (!cJSON_IsObject(req) || !cJSON_IsString(op)) {
        out = refuse("request: not an object with a string \"op\"");
    } else if (dir && !cJSON_IsString(dir)) {
        out = refuse("request: \"data_dir\" is not a string");
    } else if (!strcmp(op->valuestring, "options")) {
        out = options();
    } else if (!strcmp(op->valuestring, "calibrate")) {
        gckpt_data_dir_set(dir ? dir->valuestring : NULL);
        out = calibrate(req);
        gckpt_data_dir_set(NULL);
    } else if (!strcmp(op->valuestring, "resolve")) {
        gckpt_data_dir_set(dir ? dir->valuestring : NULL);
        out = resolve(req);
        gckpt_data_dir_set(NULL);
    } else if (strcmp(op->valuestring, "plan") && strcmp(op->valuestring, "snippet") && strcmp(op->valuestring, "text")) {
        out = refusef("request: unknown op '%s' (plan, snippet, text, options, calibrate, resolve)", op->valuestring);
    } else {
        gckpt_data_dir_set(dir ? dir->valuestring : NULL);
        gckpt_plan_args a;
        gckpt_plan_args_init(&a);
        gckpt_plan p;
        out = read_args(cJSON_GetObjectItemCaseSensitive(req, "args"), &a);
        if (!out && !gckpt_plan_run(&a.req, &p, &err)) out = refuse(err.msg);
        else if (!out) {
            if (!strcmp(op->valuestring, "plan")) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddBoolToObject(o, "ok", true);
                cJSON_AddItemToObject(o, "plan", gckpt_plan_to_json(&p, true));
                out = answer(o);
            } else {
                out = text(&p, &a, cJSON_GetObjectItemCaseSensitive(req, "entry"), !strcmp(op->valuestring, "snippet"));
            }
            gckpt_plan_free(&p);
        }
        gckpt_plan_args_free(&a);
        gckpt_data_dir_set(NULL);
    }
    cJSON_Delete(req);
    return out;
}

void gckpt_api_free(char *answer_text)
{
    free(answer_text);
}
