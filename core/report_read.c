/* A gckpt.report/2 report read back as one document (include/gckpt/core/report_read.h). */
#include "gckpt/core/report_read.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gckpt/util/jsonget.h"

static cJSON *take_record(cJSON *o, const char *want)
{
    cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "record");
    if (!cJSON_IsString(rec) || strcmp(rec->valuestring, want)) return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(o, "record");
    return o;
}

static bool is_record(const cJSON *o, const char *want)
{
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "record");
    return cJSON_IsString(rec) && !strcmp(rec->valuestring, want);
}

/* The array k of doc, added when its first record comes (gckpt-run's reports have none). */
static cJSON *array_of(cJSON *doc, const char *k)
{
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, k);
    return arr ? arr : cJSON_AddArrayToObject(doc, k);
}

static void rank_text(const cJSON *r, char *out, size_t n)
{
    if (!r) snprintf(out, n, "absent");
    else if (cJSON_IsNumber(r)) snprintf(out, n, "%.0f", r->valuedouble);
    else snprintf(out, n, "not a number");
}

/* One process's records per file: gckpt.TrainerCallback writes its rank on every record and
 * one file per rank (NAME.rankR.EXT); gckpt-run writes no rank (rank 0 writes the report). */
static bool same_rank(const cJSON *doc, const cJSON *o, const char *label, gckpt_err *err)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(doc, "rank"), *r = cJSON_GetObjectItemCaseSensitive(o, "rank");
    if (!r && !h) return true;
    if (r && h && cJSON_IsNumber(r) && cJSON_IsNumber(h) && r->valuedouble == h->valuedouble) return true;
    char rt[32], ht[32];
    rank_text(r, rt, sizeof rt);
    rank_text(h, ht, sizeof ht);
    gckpt_seterr(err, "%s: field 'rank' = %s, the header's is %s: a report file holds one rank's records (each rank "
                      "writes its own, NAME.rankR.EXT)", label, rt, ht);
    return false;
}

static bool is_blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return false;
    return true;
}

cJSON *gckpt_report_read(const char *path, char *text, gckpt_err *err)
{
    cJSON *doc = NULL, *entries = NULL, *summary = NULL;
    size_t lineno = 0;
    bool ok = true;
    for (char *p = text; ok && *p;) {
        char *nl = strchr(p, '\n');
        if (!nl) break; /* a last line without its newline: a write cut short, not a record */
        *nl = 0;
        lineno++;
        if (is_blank(p)) {
            p = nl + 1;
            continue;
        }
        char label[600];
        snprintf(label, sizeof label, "%s: line %zu", path, lineno);
        cJSON *o = gckpt_json_parse(label, p, err);
        ok = o != NULL;
        if (ok && !doc) {
            const char *schema = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "schema"));
            const cJSON *sel = cJSON_GetObjectItemCaseSensitive(o, "selected");
            const cJSON *rank = cJSON_GetObjectItemCaseSensitive(o, "rank");
            if (!take_record(o, "header") || !schema || strcmp(schema, GCKPT_REPORT_SCHEMA) || (sel && !cJSON_IsNumber(sel))) {
                gckpt_seterr(err, "%s: not a gckpt report header (schema %s)", label, GCKPT_REPORT_SCHEMA);
                ok = false;
            } else if (rank && !(cJSON_IsNumber(rank) && rank->valuedouble >= 0 && rank->valuedouble < 1e9 &&
                                 rank->valuedouble == floor(rank->valuedouble))) {
                gckpt_seterr(err, "%s: field 'rank' must be a count (the writing process's rank)", label);
                ok = false;
            } else {
                doc = o;
                entries = cJSON_AddArrayToObject(doc, "entries");
                o = NULL;
            }
        } else if (ok && summary) {
            gckpt_seterr(err, "%s: a record after the summary", label);
            ok = false;
        } else if (ok && !same_rank(doc, o, label, err)) {
            ok = false;
        } else if (ok && (is_record(o, "step") || is_record(o, "warning"))) {
            /* gckpt.TrainerCallback's: kept whole, record field included ($defs/step_record,
             * $defs/warning_record), in file order */
            cJSON_AddItemToArray(array_of(doc, is_record(o, "step") ? "steps" : "warnings"), o);
            o = NULL;
        } else if (ok && take_record(o, "entry")) {
            cJSON_AddItemToArray(entries, o);
            o = NULL;
        } else if (ok && take_record(o, "summary")) {
            summary = o;
            o = NULL;
        } else if (ok) {
            gckpt_seterr(err, "%s: field 'record' must be \"entry\", \"summary\", \"step\" or \"warning\"", label);
            ok = false;
        }
        cJSON_Delete(o);
        p = nl + 1;
    }
    if (ok && !doc) {
        gckpt_seterr(err, "%s: no complete record", path);
        ok = false;
    }
    if (!ok) {
        cJSON_Delete(doc);
        cJSON_Delete(summary);
        return NULL;
    }
    if (summary) cJSON_AddItemToObject(doc, "summary", summary);
    return doc;
}
