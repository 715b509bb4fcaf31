/* A gckpt report as one document, for every program that reads or summarises one: the
 * entries' run statuses, the summary's counts (one rule for the writer, gckpt-run, and
 * the readers), and the loader that reads a report file back (gckpt-run, gckpt-dash,
 * gckpt-plan --calibrate-from). Here, in gckpt_formats, so that no reader depends on the
 * executor. */
#ifndef GCKPT_FORMATS_REPORT_DOC_H
#define GCKPT_FORMATS_REPORT_DOC_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* INTERRUPTED: the run was stopped by a signal while this entry ran (pass is false).
 * SKIPPED: predicted not to fit the plan's GPU; SKIPPED_HOST_MEMORY: the host backend
 * would need more memory than this machine has available (both: not run, pass null). */
typedef enum {
    GCKPT_RS_OK,
    GCKPT_RS_OOM,
    GCKPT_RS_SKIPPED,
    GCKPT_RS_ERROR,
    GCKPT_RS_INTERRUPTED,
    GCKPT_RS_SKIPPED_HOST_MEMORY,
    GCKPT_NRS
} gckpt_run_status;
extern const char *const gckpt_run_status_names[GCKPT_NRS];
static inline bool gckpt_run_status_skipped(int s) { return s == GCKPT_RS_SKIPPED || s == GCKPT_RS_SKIPPED_HOST_MEMORY; }

/* The counts of a summary, from entry records: the one rule for writer and reader. */
typedef struct {
    size_t selected, n, run, passed, failed, count[GCKPT_NRS];
} gckpt_report_tally;
void gckpt_report_tally_add(gckpt_report_tally *t, const cJSON *entry);
/* signal: the name of the signal that stopped the run or NULL; ended: the run is over
 * (false for a summary computed from a report whose run is still going or was killed). */
cJSON *gckpt_report_summary_json(const gckpt_report_tally *t, const char *signal, bool ended);

/* Read a report file back into one JSON document (gckpt_report_read's,
 * include/gckpt/core/report_read.h): the header's fields, "entries" (the entry
 * records) and "summary" (the summary record, or one computed here from the entries with
 * "ended": false when the run has not ended); a report of gckpt.TrainerCallback (backend
 * hf-trainer) adds its "rank", "steps" and "warnings". NULL with err (one line naming the
 * file, the line and the field) on a damaged file. */
cJSON *gckpt_report_load(const char *path, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
