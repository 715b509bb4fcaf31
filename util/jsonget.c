#include "gckpt/util/jsonget.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A key given twice is ambiguous (cJSON would silently take the first): refuse it.
 * Large objects are checked by sorting their keys, so that a file with a million keys
 * takes a moment, not hours. */
static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *duplicate_key(const cJSON *o, int depth)
{
    if (depth > 64) return NULL;
    if (cJSON_IsObject(o)) {
        size_t n = 0;
        for (const cJSON *a = o->child; a; a = a->next) n += a->string != NULL;
        const char **keys = n > 16 ? malloc(n * sizeof *keys) : NULL;
        if (keys) {
            size_t k = 0;
            for (const cJSON *a = o->child; a; a = a->next)
                if (a->string) keys[k++] = a->string;
            qsort(keys, n, sizeof *keys, cmp_key);
            const char *dup = NULL;
            for (size_t i = 1; i < n && !dup; i++)
                if (!strcmp(keys[i - 1], keys[i])) dup = keys[i];
            free(keys);
            if (dup) return dup;
        } else {
            for (const cJSON *a = o->child; a; a = a->next)
                for (const cJSON *b = a->next; a->string && b; b = b->next)
                    if (b->string && !strcmp(a->string, b->string)) return a->string;
        }
    }
    for (const cJSON *a = o ? o->child : NULL; a; a = a->next) {
        if (cJSON_IsObject(a) || cJSON_IsArray(a)) {
            const char *d = duplicate_key(a, depth + 1);
            if (d) return d;
        }
    }
    return NULL;
}

/* cJSON returns NULL both for a syntax error and for a failed allocation; these hooks
 * tell the two apart (installed around the parse only). */
static bool parse_oom;

static void *noting_malloc(size_t n)
{
    void *p = malloc(n);
    if (!p) parse_oom = true;
    return p;
}

cJSON *gckpt_json_parse(const char *file, const char *text, gckpt_err *err)
{
    const char *where = NULL;
    cJSON_Hooks hooks = {.malloc_fn = noting_malloc, .free_fn = free};
    parse_oom = false;
    cJSON_InitHooks(&hooks);
    cJSON *root = cJSON_ParseWithOpts(text, &where, true);
    cJSON_InitHooks(NULL);
    if (!root) {
        size_t off = where ? (size_t)(where - text) : 0;
        if (parse_oom)
            gckpt_seterr(err, "%s: out of memory parsing %zu bytes of JSON (a memory limit, not a syntax error)", file,
                         strlen(text));
        else if (!*text)
            gckpt_seterr(err, "%s: empty file, expected a JSON object", file);
        else
            gckpt_seterr(err, "%s: malformed JSON at byte %zu", file, off);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        gckpt_seterr(err, "%s: expected a JSON object at top level", file);
        cJSON_Delete(root);
        return NULL;
    }
    const char *dup = duplicate_key(root, 0);
    if (dup) {
        gckpt_seterr(err, "%s: field '%s' appears twice", file, dup);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

char *gckpt_json_text(cJSON *j, bool pretty)
{
    char *t = j ? (pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j)) : NULL;
    cJSON_Delete(j);
    size_t n = t ? strlen(t) : 0;
    char *l = t ? realloc(t, n + 2) : NULL;
    if (!l) {
        free(t);
        return NULL;
    }
    memcpy(l + n, "\n", 2);
    return l;
}

/* Fields may be named by their dotted path ("peak_tflops.bf16"); the key is the last part. */
static const char *key_of(const char *field)
{
    const char *d = strrchr(field, '.');
    return d ? d + 1 : field;
}

const char *gckpt_json_type_name(const cJSON *it)
{
    if (!it) return "nothing";
    if (cJSON_IsString(it)) return "a string";
    if (cJSON_IsBool(it)) return "a boolean";
    if (cJSON_IsNull(it)) return "null";
    if (cJSON_IsArray(it)) return "an array";
    if (cJSON_IsObject(it)) return "an object";
    if (cJSON_IsNumber(it)) return "a number";
    return "invalid";
}

static bool get_u64(const cJSON *it, const char *file, const char *field, uint64_t lo, uint64_t hi,
                    uint64_t *out, gckpt_err *err)
{
    if (!cJSON_IsNumber(it)) {
        gckpt_seterr(err, "%s: field '%s' must be an integer, got %s", file, field, gckpt_json_type_name(it));
        return false;
    }
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v)) {
        gckpt_seterr(err, "%s: field '%s' must be an integer, got %.17g", file, field, v);
        return false;
    }
    if (v < (double)lo || v > (double)hi) {
        gckpt_seterr(err, "%s: field '%s' = %.6g is out of range [%llu, %llu]", file, field, v,
                     (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

bool gckpt_json_u64(const cJSON *obj, const char *file, const char *field, uint64_t lo,
                    uint64_t hi, uint64_t *out, gckpt_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key_of(field));
    if (!it) {
        gckpt_seterr(err, "%s: missing field '%s' (integer)", file, field);
        return false;
    }
    return get_u64(it, file, field, lo, hi, out, err);
}

bool gckpt_json_u64_opt(const cJSON *obj, const char *file, const char *field, uint64_t lo,
                        uint64_t hi, uint64_t dflt, uint64_t *out, gckpt_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key_of(field));
    if (!it || cJSON_IsNull(it)) {
        *out = dflt;
        return true;
    }
    return get_u64(it, file, field, lo, hi, out, err);
}

static bool get_num(const cJSON *it, const char *file, const char *field, double lo, double hi,
                    double *out, gckpt_err *err)
{
    if (!cJSON_IsNumber(it)) {
        gckpt_seterr(err, "%s: field '%s' must be a number, got %s", file, field, gckpt_json_type_name(it));
        return false;
    }
    double v = it->valuedouble;
    if (!isfinite(v)) { /* a literal such as 1e999: valid JSON, beyond a double */
        gckpt_seterr(err, "%s: field '%s' must be a finite number, got one beyond a double's range", file, field);
        return false;
    }
    if (v < lo || v > hi) {
        gckpt_seterr(err, "%s: field '%s' = %g is out of range [%g, %g]", file, field, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool gckpt_json_num(const cJSON *obj, const char *file, const char *field, double lo, double hi,
                    double *out, gckpt_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key_of(field));
    if (!it) {
        gckpt_seterr(err, "%s: missing field '%s' (number)", file, field);
        return false;
    }
    return get_num(it, file, field, lo, hi, out, err);
}

bool gckpt_json_num_opt(const cJSON *obj, const char *file, const char *field, double lo,
                        double hi, double dflt, double *out, gckpt_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key_of(field));
    if (!it || cJSON_IsNull(it)) {
        *out = dflt;
        return true;
    }
    return get_num(it, file, field, lo, hi, out, err);
}

bool gckpt_json_bool_opt(const cJSON *obj, const char *file, const char *field, bool dflt,
                         bool *out, gckpt_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key_of(field));
    if (!it || cJSON_IsNull(it)) {
        *out = dflt;
        return true;
    }
    if (!cJSON_IsBool(it)) {
        gckpt_seterr(err, "%s: field '%s' must be true or false, got %s", file, field, gckpt_json_type_name(it));
        return false;
    }
    *out = cJSON_IsTrue(it);
    return true;
}

static bool get_str(const cJSON *it, const char *file, const char *field, char *out, size_t n,
                    gckpt_err *err)
{
    if (!cJSON_IsString(it) || !it->valuestring) {
        gckpt_seterr(err, "%s: field '%s' must be a string, got %s", file, field, gckpt_json_type_name(it));
        return false;
    }
    if (strlen(it->valuestring) >= n) {
        gckpt_seterr(err, "%s: field '%s' is too long (max %zu characters)", file, field, n - 1);
        return false;
    }
    strcpy(out, it->valuestring);
    return true;
}

bool gckpt_json_str(const cJSON *obj, const char *file, const char *field, char *out, size_t n,
                    gckpt_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key_of(field));
    if (!it) {
        gckpt_seterr(err, "%s: missing field '%s' (string)", file, field);
        return false;
    }
    return get_str(it, file, field, out, n, err);
}

bool gckpt_json_str_opt(const cJSON *obj, const char *file, const char *field, const char *dflt,
                        char *out, size_t n, gckpt_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key_of(field));
    if (!it || cJSON_IsNull(it)) {
        snprintf(out, n, "%s", dflt);
        return true;
    }
    return get_str(it, file, field, out, n, err);
}

cJSON *gckpt_json_read(const char *path, size_t max, gckpt_err *err)
{
    char *text = gckpt_read_file(path, max, err);
    if (!text) return NULL;
    cJSON *root = gckpt_json_parse(path, text, err);
    free(text);
    return root;
}
