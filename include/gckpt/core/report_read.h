/* Reading a gckpt.report/2 report back: the JSON Lines of gckpt-run (executor/report_file.c
 * writes them) or of gckpt.TrainerCallback (python/gckpt/callback.py), one reader for
 * every program that reads reports (gckpt-dash and gckpt-run's tests through
 * gckpt_report_load, gckpt-plan --calibrate-from). Here, below the executor, because the
 * calibration (planner) reads reports too. */
#ifndef GCKPT_REPORT_READ_H
#define GCKPT_REPORT_READ_H

#include <cjson/cJSON.h>

#include "gckpt/util/util.h"

#define GCKPT_REPORT_SCHEMA "gckpt.report/2"

/* The records of text (the file's contents, NUL-terminated; cut into lines in place) as
 * one document: the header's fields (with "selected", a number when present, and from
 * the callback "rank"),
 * "entries" (the entry records without their record field), from the callback "steps"
 * (its step records, one per optimizer step) and "warnings" (its warning records), each
 * whole and in file order, and "summary" (the summary record without its record field;
 * absent when the run has not ended). Every record of a file carries the header's rank
 * (one file per rank) or none. Blank lines are skipped; a last line without its newline
 * is a write cut short and ignored. NULL with err, one line naming path, the line and the
 * field, on a damaged file. */
cJSON *gckpt_report_read(const char *path, char *text, gckpt_err *err);

#endif
