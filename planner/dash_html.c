/* The dashboard page: the plan and its reports as escaped JSON inside one HTML file with
 * the page's own style and script (include/gckpt/planner/dash_html.h; the page's parts are
 * planner/dash/page.html, dash.css and dash.js, built in as gckpt_dash_asset_*). */
#include "gckpt/planner/dash_html.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gckpt/util/safe_text.h"

extern const char gckpt_dash_asset_page[], gckpt_dash_asset_css[], gckpt_dash_asset_js[];

/* ---- checking a report against the plan ------------------------------------------------ */

static const cJSON *at(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* A name as the plan reader keeps it (truncated to its field, sanitised): what gckpt-run
 * writes into its report's header. */
static void as_read(const char *s, char *out, size_t n)
{
    snprintf(out, n, "%s", s ? s : "");
    gckpt_text_sanitize(out);
}

static bool same_text(const cJSON *plan_s, const cJSON *rep_s)
{
    char a[128], b[128];
    if (!cJSON_IsString(plan_s) || !cJSON_IsString(rep_s)) return false;
    as_read(plan_s->valuestring, a, sizeof a);
    as_read(rep_s->valuestring, b, sizeof b);
    return !strcmp(a, b);
}

static bool is_count(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble == floor(v->valuedouble); }
static bool num_or_null(const cJSON *v) { return !v || cJSON_IsNull(v) || (cJSON_IsNumber(v) && isfinite(v->valuedouble)); }
static bool bool_or_null(const cJSON *v) { return !v || cJSON_IsNull(v) || cJSON_IsBool(v); }
static bool str_or_null(const cJSON *v) { return !v || cJSON_IsNull(v) || cJSON_IsString(v); }

/* A {predicted, measured, relative_error, pass} check whose prediction is the plan's; rec
 * names the record ("entries[3]", "steps[0]"). */
static bool check_field(const cJSON *mem, const char *k, const cJSON *plan_v, const char *file, const char *rec, gckpt_err *err)
{
    const cJSON *c = at(mem, k);
    if (!cJSON_IsObject(c) || !is_count(at(c, "predicted")) || !num_or_null(at(c, "measured")) ||
        !num_or_null(at(c, "relative_error")) || !bool_or_null(at(c, "pass")))
        return gckpt_seterr(err, "%s: field '%s.memory.%s' must be a check {predicted, measured, relative_error, pass}",
                            file, rec, k), false;
    if (!cJSON_IsNumber(plan_v) || at(c, "predicted")->valuedouble != plan_v->valuedouble)
        return gckpt_seterr(err, "%s: field '%s.memory.%s.predicted' = %.0f is not the plan's (%.0f): a report of another plan",
                            file, rec, k, at(c, "predicted")->valuedouble, cJSON_IsNumber(plan_v) ? plan_v->valuedouble : -1.0), false;
    return true;
}

/* time.predicted_step_s of a record is the plan entry's step time (as written and read back). */
static bool same_step_s(const cJSON *rec_time, const cJSON *plan_entry)
{
    const cJSON *ts = at(rec_time, "predicted_step_s"), *ps = at(at(plan_entry, "time"), "step_s");
    return cJSON_IsNumber(ts) && cJSON_IsNumber(ps) && fabs(ts->valuedouble - ps->valuedouble) <= 1e-12 * fabs(ps->valuedouble);
}

/* gckpt.TrainerCallback's step records (one per optimizer step) and warning records: each
 * step is of an entry of the plan with the plan's predictions, as its entry record is. */
static bool check_steps(const cJSON *plan, const cJSON *doc, const char *f, gckpt_err *err)
{
    const cJSON *pe = at(plan, "entries"), *steps = at(doc, "steps"), *warns = at(doc, "warnings"), *rank = at(doc, "rank");
    size_t n = (size_t)cJSON_GetArraySize(pe), j = 0;
    if (rank && !is_count(rank)) return gckpt_seterr(err, "%s: field 'rank' must be a count", f), false;
    if (steps && !cJSON_IsArray(steps)) return gckpt_seterr(err, "%s: field 'steps' must be an array", f), false;
    if (warns && !cJSON_IsArray(warns)) return gckpt_seterr(err, "%s: field 'warnings' must be an array", f), false;
    for (const cJSON *s = steps ? steps->child : NULL; s; s = s->next, j++) {
        char rec[48];
        snprintf(rec, sizeof rec, "steps[%zu]", j);
        const cJSON *ix = at(s, "entry"), *st = at(s, "step"), *t = at(s, "time");
        if (!cJSON_IsObject(s) || !is_count(ix) || ix->valuedouble >= (double)n)
            return gckpt_seterr(err, "%s: field '%s.entry' is not an entry of the plan (%zu entries): a report of another plan",
                                f, rec, n), false;
        if (!is_count(st) || st->valuedouble < 1 || !cJSON_IsBool(at(s, "judged")) || !bool_or_null(at(s, "pass")))
            return gckpt_seterr(err, "%s: field '%s': step (from 1), judged (boolean), pass (boolean or null)", f, rec), false;
        const cJSON *p = cJSON_GetArrayItem(pe, (int)ix->valuedouble), *m = at(s, "memory"), *pm = at(p, "memory");
        if (!cJSON_IsObject(m)) return gckpt_seterr(err, "%s: missing field '%s.memory' (object)", f, rec), false;
        if (!check_field(m, "peak_bytes", at(pm, "peak_bytes"), f, rec, err) ||
            !check_field(m, "device_peak_bytes", at(pm, "device_peak_bytes"), f, rec, err))
            return false;
        if (!cJSON_IsObject(t) || !cJSON_IsNumber(at(t, "predicted_step_s")) || !num_or_null(at(t, "measured_step_s")) ||
            !num_or_null(at(t, "relative_error")))
            return gckpt_seterr(err, "%s: field '%s.time' must hold predicted_step_s, measured_step_s, relative_error", f, rec), false;
        if (!same_step_s(t, p))
            return gckpt_seterr(err, "%s: field '%s.time.predicted_step_s' is not the plan's: a report of another plan", f, rec), false;
    }
    j = 0;
    for (const cJSON *w = warns ? warns->child : NULL; w; w = w->next, j++)
        if (!cJSON_IsObject(w) || !cJSON_IsString(at(w, "code")) || !cJSON_IsString(at(w, "message")))
            return gckpt_seterr(err, "%s: field 'warnings[%zu]': code and message (strings)", f, j), false;
    return true;
}

bool gckpt_dash_report_check(const cJSON *plan, const gckpt_dash_report *r, gckpt_err *err)
{
    const char *f = r->file;
    const cJSON *in = at(plan, "inputs"), *pe = at(plan, "entries"), *hp = at(r->doc, "plan");
    if (!cJSON_IsObject(hp)) return gckpt_seterr(err, "%s: missing field 'plan' (object)", f), false;
    /* the plan it ran: the fields gckpt-run copies from the plan into its header */
    struct { const char *rk; const cJSON *pv; } same[] = {
        {"model", at(at(in, "model"), "name")}, {"model_type", at(at(in, "model"), "model_type")},
        {"device", at(at(in, "device"), "name")}, {"precision", at(in, "precision")},
        {"optimizer", at(in, "optimizer")}, {"attention", at(in, "attention")}};
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
        if (!same_text(same[k].pv, at(hp, same[k].rk))) {
            char a[128], b[128];
            as_read(cJSON_GetStringValue(at(hp, same[k].rk)), a, sizeof a);
            as_read(cJSON_GetStringValue(same[k].pv), b, sizeof b);
            return gckpt_seterr(err, "%s: field 'plan.%s' = \"%s\", the plan's is \"%s\": a report of another plan", f,
                                same[k].rk, a, b), false;
        }
    const cJSON *seq = at(hp, "seq");
    if (!cJSON_IsNumber(seq) || !cJSON_IsNumber(at(in, "seq")) || seq->valuedouble != at(in, "seq")->valuedouble)
        return gckpt_seterr(err, "%s: field 'plan.seq' = %.0f, the plan's is %.0f: a report of another plan", f,
                            cJSON_IsNumber(seq) ? seq->valuedouble : -1.0, cJSON_GetNumberValue(at(in, "seq"))), false;
    const cJSON *es = at(r->doc, "entries");
    if (!cJSON_IsArray(es)) return gckpt_seterr(err, "%s: missing field 'entries' (array)", f), false;
    size_t i = 0, n = (size_t)cJSON_GetArraySize(pe);
    for (const cJSON *e = es->child; e; e = e->next, i++) {
        const cJSON *ix = at(e, "index");
        if (!cJSON_IsObject(e) || !is_count(ix) || ix->valuedouble >= (double)n)
            return gckpt_seterr(err, "%s: field 'entries[%zu].index' is not an entry of the plan (%zu entries): a report of another plan",
                                f, i, n), false;
        const cJSON *p = cJSON_GetArrayItem(pe, (int)ix->valuedouble);
        /* the setting */
        static const char *const keys[] = {"every_n_layers", "offload", "micro_batch", "grad_accum"};
        for (size_t k = 0; k < 4; k++) {
            const cJSON *a = at(e, keys[k]), *b = at(p, keys[k]);
            bool eq = a && b && (cJSON_IsBool(b) ? cJSON_IsBool(a) && cJSON_IsTrue(a) == cJSON_IsTrue(b)
                                                 : cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble == b->valuedouble);
            if (!eq)
                return gckpt_seterr(err, "%s: field 'entries[%zu].%s' differs from the plan's entry %.0f: a report of another plan",
                                    f, i, keys[k], ix->valuedouble), false;
        }
        if (!cJSON_IsString(at(e, "status")) || !bool_or_null(at(e, "pass")) || !str_or_null(at(e, "message")))
            return gckpt_seterr(err, "%s: field 'entries[%zu]': status (string), pass (boolean or null), message (string or null)", f, i), false;
        const cJSON *m = at(e, "memory"), *pm = at(p, "memory");
        if (!cJSON_IsObject(m)) return gckpt_seterr(err, "%s: missing field 'entries[%zu].memory' (object)", f, i), false;
        char rec[48];
        snprintf(rec, sizeof rec, "entries[%zu]", i);
        if (!check_field(m, "peak_bytes", at(pm, "peak_bytes"), f, rec, err) ||
            !check_field(m, "device_peak_bytes", at(pm, "device_peak_bytes"), f, rec, err) ||
            !check_field(m, "host_pinned_bytes", at(pm, "host_pinned_bytes"), f, rec, err))
            return false;
        const cJSON *t = at(e, "time"), *ts = at(t, "predicted_step_s");
        if (!cJSON_IsObject(t) || !cJSON_IsNumber(ts) || !num_or_null(at(t, "measured_step_s")) ||
            !num_or_null(at(t, "relative_error")) || !bool_or_null(at(t, "pass")))
            return gckpt_seterr(err, "%s: field 'entries[%zu].time' must hold predicted_step_s, measured_step_s, relative_error, pass", f, i), false;
        if (!same_step_s(t, p))
            return gckpt_seterr(err, "%s: field 'entries[%zu].time.predicted_step_s' is not the plan's: a report of another plan", f, i), false;
        const cJSON *rk = at(e, "ranks");
        if (rk && !cJSON_IsArray(rk)) return gckpt_seterr(err, "%s: field 'entries[%zu].ranks' must be an array", f, i), false;
        size_t j = 0;
        for (const cJSON *x = rk ? rk->child : NULL; x; x = x->next, j++)
            if (!cJSON_IsObject(x) || !is_count(at(x, "rank")) || !str_or_null(at(x, "status")) ||
                !cJSON_IsObject(at(x, "peak_bytes")) || !num_or_null(at(at(x, "peak_bytes"), "predicted")) ||
                !num_or_null(at(at(x, "peak_bytes"), "measured")) || !num_or_null(at(x, "measured_step_s")))
                return gckpt_seterr(err, "%s: field 'entries[%zu].ranks[%zu]': rank, status, peak_bytes {predicted, measured}, measured_step_s", f, i, j), false;
    }
    return check_steps(plan, r->doc, f, err);
}

/* ---- the page ---------------------------------------------------------------------------- */

/* Every string (and key) as terminals get it: no control characters, bidi overrides or
 * malformed UTF-8 reach the page. */
static void sanitize_tree(cJSON *j)
{
    for (; j; j = j->next) {
        if (j->string) gckpt_text_sanitize(j->string);
        if (cJSON_IsString(j) && j->valuestring) gckpt_text_sanitize(j->valuestring);
        sanitize_tree(j->child);
    }
}

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (b->n + n + 1 > cap) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* JSON text safe inside <script type="application/json">: <, >, & and the JavaScript line
 * separators as \uXXXX (they occur only inside strings, where the escape means the same). */
static void put_json_escaped(buf *b, const char *s)
{
    const char *run = s;
    for (; *s; s++) {
        const char *esc = NULL;
        size_t skip = 1;
        if (*s == '<') esc = "\\u003c";
        else if (*s == '>') esc = "\\u003e";
        else if (*s == '&') esc = "\\u0026";
        else if ((unsigned char)s[0] == 0xE2 && (unsigned char)s[1] == 0x80 && ((unsigned char)s[2] == 0xA8 || (unsigned char)s[2] == 0xA9)) {
            esc = (unsigned char)s[2] == 0xA8 ? "\\u2028" : "\\u2029";
            skip = 3;
        }
        if (!esc) continue;
        put(b, run, (size_t)(s - run));
        puts_(b, esc);
        s += skip - 1;
        run = s + 1;
    }
    put(b, run, (size_t)(s - run));
}

/* A value for the policy's nonce: 128 random bits as hex (the page is written once, so an
 * injected element cannot know it). */
static void make_nonce(char out[33])
{
    unsigned char r[16] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, r, sizeof r) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof r) { /* no /dev/urandom: the clock and the process */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t x = (uint64_t)t.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 32);
        for (int i = 0; i < 16; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            r[i] = (unsigned char)x;
        }
    }
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* The data the script reads: the plan without its HF config (the page shows the model's
 * dimensions, not its config), the plan's file name, the reports with their names and dates. */
static cJSON *page_data(const cJSON *plan, const char *plan_file, const gckpt_dash_report *reps, size_t nrep)
{
    cJSON *d = cJSON_CreateObject(), *p = cJSON_Duplicate(plan, true), *ra = cJSON_CreateArray();
    if (!d || !p || !ra) {
        cJSON_Delete(d);
        cJSON_Delete(p);
        cJSON_Delete(ra);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "inputs"), "model"), "config");
    cJSON_AddStringToObject(d, "plan_file", plan_file ? plan_file : "");
    cJSON_AddItemToObject(d, "plan", p);
    cJSON_AddItemToObject(d, "reports", ra);
    for (size_t i = 0; i < nrep; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(ra, o);
        cJSON_AddStringToObject(o, "file", reps[i].file ? reps[i].file : "");
        cJSON_AddNumberToObject(o, "date", (double)reps[i].date);
        cJSON_AddItemToObject(o, "report", cJSON_Duplicate(reps[i].doc, true));
    }
    sanitize_tree(d);
    return d;
}

char *gckpt_dash_page(const cJSON *plan, const char *plan_file, const gckpt_dash_report *reps, size_t nrep, gckpt_err *err)
{
    cJSON *d = page_data(plan, plan_file, reps, nrep);
    char *json = d ? cJSON_PrintUnformatted(d) : NULL;
    cJSON_Delete(d);
    if (!json) {
        gckpt_seterr(err, "out of memory while writing the dashboard");
        return NULL;
    }
    char nonce[33];
    make_nonce(nonce);
    /* the page's template with its markers filled in */
    static const struct { const char *mark; int what; } marks[] = {
        {"@NONCE@", 0}, {"@CSS@", 1}, {"@DATA@", 2}, {"@JS@", 3}};
    buf b = {0};
    const char *s = gckpt_dash_asset_page;
    for (;;) {
        const char *next = NULL;
        int what = -1;
        size_t mlen = 0;
        for (size_t k = 0; k < sizeof marks / sizeof marks[0]; k++) {
            const char *q = strstr(s, marks[k].mark);
            if (q && (!next || q < next)) {
                next = q;
                what = marks[k].what;
                mlen = strlen(marks[k].mark);
            }
        }
        if (!next) break;
        put(&b, s, (size_t)(next - s));
        if (what == 0) puts_(&b, nonce);
        else if (what == 1) puts_(&b, gckpt_dash_asset_css);
        else if (what == 2) put_json_escaped(&b, json);
        else puts_(&b, gckpt_dash_asset_js);
        s = next + mlen;
    }
    puts_(&b, s);
    cJSON_free(json);
    if (b.oom) {
        free(b.p);
        gckpt_seterr(err, "out of memory while writing the dashboard");
        return NULL;
    }
    return b.p;
}
