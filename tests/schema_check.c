#include "schema_check.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const cJSON *root;
    char *err;
    size_t n;
} ctx;

static bool fail(ctx *c, const char *path, const char *why)
{
    snprintf(c->err, c->n, "%s: %s", path[0] ? path : "(root)", why);
    return false;
}

static bool type_ok(const cJSON *d, const char *t)
{
    if (!strcmp(t, "object")) return cJSON_IsObject(d);
    if (!strcmp(t, "array")) return cJSON_IsArray(d);
    if (!strcmp(t, "string")) return cJSON_IsString(d);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(d);
    if (!strcmp(t, "null")) return cJSON_IsNull(d);
    if (!strcmp(t, "number")) return cJSON_IsNumber(d);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(d) && d->valuedouble == floor(d->valuedouble);
    return false;
}

static bool equal(const cJSON *a, const cJSON *b) { return cJSON_Compare(a, b, true); }

static bool check(ctx *c, const cJSON *s, const cJSON *d, const char *path)
{
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (cJSON_IsString(ref)) {
        const char *pfx = "#/$defs/";
        if (strncmp(ref->valuestring, pfx, strlen(pfx))) return fail(c, path, "unsupported $ref");
        const cJSON *defs = cJSON_GetObjectItemCaseSensitive(c->root, "$defs");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(defs, ref->valuestring + strlen(pfx));
        if (!t) return fail(c, path, "dangling $ref");
        return check(c, t, d, path);
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type) && !type_ok(d, type->valuestring)) return fail(c, path, "wrong type");
    if (cJSON_IsArray(type)) {
        bool any = false;
        const cJSON *t;
        cJSON_ArrayForEach(t, type) any |= cJSON_IsString(t) && type_ok(d, t->valuestring);
        if (!any) return fail(c, path, "wrong type");
    }
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (cst && !equal(cst, d)) return fail(c, path, "not the constant value");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_IsArray(en)) {
        bool any = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, en) any |= equal(e, d);
        if (!any) return fail(c, path, "not one of the enum values");
    }
    if (cJSON_IsNumber(d)) {
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
        if (cJSON_IsNumber(mn) && d->valuedouble < mn->valuedouble) return fail(c, path, "below minimum");
        if (cJSON_IsNumber(mx) && d->valuedouble > mx->valuedouble) return fail(c, path, "above maximum");
    }
    if (cJSON_IsString(d)) { /* pattern as a POSIX extended expression (the schema's are ERE too) */
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
        size_t l = strlen(d->valuestring);
        if (cJSON_IsNumber(mn) && (double)l < mn->valuedouble) return fail(c, path, "shorter than minLength");
        if (cJSON_IsNumber(mx) && (double)l > mx->valuedouble) return fail(c, path, "longer than maxLength");
        if (cJSON_IsString(pat)) {
            regex_t re;
            if (regcomp(&re, pat->valuestring, REG_EXTENDED | REG_NOSUB)) return fail(c, path, "bad pattern in the schema");
            int m = regexec(&re, d->valuestring, 0, NULL, 0);
            regfree(&re);
            if (m) return fail(c, path, "does not match the pattern");
        }
    }
    char sub[512];
    if (cJSON_IsObject(d)) {
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *r;
        cJSON_ArrayForEach(r, req) {
            if (!cJSON_GetObjectItemCaseSensitive(d, r->valuestring)) {
                snprintf(sub, sizeof sub, "%s/%s", path, r->valuestring);
                return fail(c, sub, "required field missing");
            }
        }
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        const cJSON *f;
        cJSON_ArrayForEach(f, d) {
            snprintf(sub, sizeof sub, "%s/%s", path, f->string);
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, f->string);
            if (ps) {
                if (!check(c, ps, f, sub)) return false;
            } else if (cJSON_IsFalse(addl)) {
                return fail(c, sub, "field not allowed by the schema");
            }
        }
    }
    if (cJSON_IsArray(d)) {
        const cJSON *mi = cJSON_GetObjectItemCaseSensitive(s, "minItems");
        if (cJSON_IsNumber(mi) && cJSON_GetArraySize(d) < (int)mi->valuedouble) return fail(c, path, "too few items");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        if (items) {
            int i = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, d) {
                snprintf(sub, sizeof sub, "%s/%d", path, i++);
                if (!check(c, items, it, sub)) return false;
            }
        }
    }
    return true;
}

bool schema_check(const cJSON *schema, const cJSON *doc, char *err, size_t n)
{
    ctx c = {schema, err, n};
    if (n) err[0] = 0;
    return check(&c, schema, doc, "");
}

bool schema_check_def(const cJSON *schema, const char *def, const cJSON *doc, char *err, size_t n)
{
    ctx c = {schema, err, n};
    if (n) err[0] = 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(schema, "$defs"), def);
    if (!t) return fail(&c, def, "no such definition in $defs");
    return check(&c, t, doc, def);
}
