/* A gckpt report as one document (include/gckpt/formats/report_doc.h): run statuses, the
 * summary's counts, the loader. */
#include "gckpt/formats/report_doc.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/core/report_read.h"

const char *const gckpt_run_status_names[GCKPT_NRS] = {"ok", "oom", "skipped", "error", "interrupted", "skipped_host_memory"};

static void str_or_null(cJSON *o, const char *k, const char *s)
{
    if (s && *s) cJSON_AddStringToObject(o, k, s);
    else cJSON_AddNullToObject(o, k);
}

void gckpt_report_tally_add(gckpt_report_tally *t, const cJSON *entry)
{
    const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "status"));
    const cJSON *pass = cJSON_GetObjectItemCaseSensitive(entry, "pass");
    t->n++;
    for (int k = 0; st && k < GCKPT_NRS; k++)
        if (!strcmp(st, gckpt_run_status_names[k])) {
            t->count[k]++;
            if (!gckpt_run_status_skipped(k)) t->run++;
        }
    if (cJSON_IsTrue(pass)) t->passed++;
    if (cJSON_IsFalse(pass)) t->failed++;
}

cJSON *gckpt_report_summary_json(const gckpt_report_tally *t, const char *signal, bool ended)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "record", "summary");
    cJSON_AddNumberToObject(s, "selected", (double)t->selected);
    cJSON_AddNumberToObject(s, "run", (double)t->run);
    cJSON_AddNumberToObject(s, "passed", (double)t->passed);
    cJSON_AddNumberToObject(s, "failed", (double)t->failed);
    for (int k = 0; k < GCKPT_NRS; k++) cJSON_AddNumberToObject(s, gckpt_run_status_names[k], (double)t->count[k]);
    cJSON_AddNumberToObject(s, "not_started", (double)(t->selected > t->n ? t->selected - t->n : 0));
    cJSON_AddBoolToObject(s, "complete", t->n == t->selected && !t->count[GCKPT_RS_INTERRUPTED]);
    str_or_null(s, "signal", signal);
    cJSON_AddBoolToObject(s, "ended", ended);
    return s;
}

cJSON *gckpt_report_load(const char *path, gckpt_err *err)
{
    char *text = gckpt_read_file(path, 1u << 30, err);
    if (!text) return NULL;
    cJSON *doc = gckpt_report_read(path, text, err);
    free(text);
    if (!doc) return NULL;
    /* the summary of a run that has not ended: computed from its entries and the header's
     * count of selected entries (gckpt-run and the callback write it) */
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(doc, "selected");
    if (!cJSON_IsNumber(sel)) {
        gckpt_seterr(err, "%s: the header: missing field 'selected' (number)", path);
        cJSON_Delete(doc);
        return NULL;
    }
    gckpt_report_tally t = {0};
    t.selected = (size_t)sel->valuedouble;
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "selected");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "entries")) gckpt_report_tally_add(&t, e);
    if (!cJSON_GetObjectItemCaseSensitive(doc, "summary")) {
        cJSON *summary = gckpt_report_summary_json(&t, NULL, false);
        cJSON_DeleteItemFromObjectCaseSensitive(summary, "record");
        cJSON_AddItemToObject(doc, "summary", summary);
    }
    return doc;
}
