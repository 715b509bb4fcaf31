/* The dashboard: one self-contained HTML page (inline SVG, CSS and a small script, no
 * network access) over a plan and, optionally, gckpt-run's reports of it. Written by
 * gckpt-dash and by gckpt-plan --html (docs/dashboard.md).
 *
 * The page embeds its data as JSON in a <script type="application/json"> block: every
 * string is sanitised (gckpt_text_sanitize: control characters, bidi overrides and
 * malformed UTF-8 become '?') and <, >, &, U+2028 and U+2029 are written as \uXXXX, so no
 * string can end the block; the script puts every string into the page with textContent.
 * A Content-Security-Policy forbids every connection and runs only the page's own script
 * and style (a nonce). */
#ifndef GCKPT_DASH_HTML_H
#define GCKPT_DASH_HTML_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A report of the plan, read back as one document (gckpt_report_load's: the header's
 * fields, "entries", "summary", and from gckpt.TrainerCallback "rank", "steps",
 * "warnings"). */
typedef struct {
    const char *file;    /* the path as given */
    const cJSON *doc;
    long long date;      /* its date, seconds since the epoch (the file's modification time) */
} gckpt_dash_report;

/* Whether report r is one of plan's (a plan that gckpt_plan_parse accepted): the plan it
 * names (model, model type, device, sequence, precision, optimizer, attention) is this
 * one, and each of its entries is an entry of this plan with the same setting (every_n,
 * offload, micro-batch, grad-accum) and the same predictions (allocated and device peak,
 * pinned bytes, step time); so is each step record of a gckpt.TrainerCallback report
 * (entry, allocated and device peak, step time); the fields the page reads have their
 * types. false with one line naming the file and the field. */
bool gckpt_dash_report_check(const cJSON *plan, const gckpt_dash_report *r, gckpt_err *err);

/* The page (malloc'd, NUL-terminated) for plan (the JSON document, checked) written to
 * plan_file, with reports reps[0..nrep) (each checked). NULL with err when out of memory. */
char *gckpt_dash_page(const cJSON *plan, const char *plan_file, const gckpt_dash_report *reps, size_t nrep,
                      gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
