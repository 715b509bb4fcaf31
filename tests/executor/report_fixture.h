/* Reading a gckpt-run (or gckpt.TrainerCallback) report (JSON Lines) in tests: every complete line validates against
 * its record's definition in reports/schema/report.schema.json, and the document
 * gckpt_report_load assembles validates against the schema's top level. */
#ifndef GCKPT_TEST_REPORT_FIXTURE_H
#define GCKPT_TEST_REPORT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/report_file.h"
#include "schema_check.h"

/* The report at path, or NULL with why (when the file is missing, damaged or invalid). */
static inline cJSON *rf_load_valid(const char *path, const cJSON *schema, char *why, size_t n)
{
    gckpt_err err = {{0}};
    char *text = gckpt_read_file(path, 1u << 30, &err);
    if (!text) {
        snprintf(why, n, "%s", err.msg);
        return NULL;
    }
    size_t lineno = 0;
    for (char *p = text, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
        *nl = 0;
        cJSON *o = cJSON_Parse(p);
        const char *rec = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "record"));
        const char *def = !rec                      ? ""
                          : !strcmp(rec, "header")  ? "header_record"
                          : !strcmp(rec, "entry")   ? "entry"
                          : !strcmp(rec, "step")    ? "step_record"
                          : !strcmp(rec, "warning") ? "warning_record"
                                                    : "summary";
        char w[400];
        bool ok = o && rec && schema_check_def(schema, def, o, w, sizeof w);
        cJSON_Delete(o);
        lineno++;
        if (!ok) {
            snprintf(why, n, "%.200s line %zu does not validate: %.300s", path, lineno, rec ? w : "no record field");
            free(text);
            return NULL;
        }
    }
    free(text);
    cJSON *doc = gckpt_report_load(path, &err);
    if (!doc) {
        snprintf(why, n, "%s", err.msg);
        return NULL;
    }
    char w[400];
    if (!schema_check(schema, doc, w, sizeof w)) {
        snprintf(why, n, "%.200s read back does not validate: %.300s", path, w);
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

/* The report at path, schema-valid, or the test fails naming why (every user includes cmocka). */
static inline cJSON *rf_load_or_fail(const char *path, const cJSON *schema)
{
    char why[1024];
    cJSON *r = rf_load_valid(path, schema, why, sizeof why);
    if (!r) fail_msg("%s", why);
    return r;
}

static inline cJSON *rf_schema(void)
{
    gckpt_err err = {{0}};
    char *t = gckpt_read_file(GCKPT_REPORT_SCHEMA_FILE, 1u << 20, &err);
    cJSON *s = t ? cJSON_Parse(t) : NULL;
    free(t);
    return s;
}

#endif
