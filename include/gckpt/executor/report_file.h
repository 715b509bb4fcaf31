/* The report file of gckpt-run (schema gckpt.report/2): JSON Lines, one record per line.
 *
 *   {"schema": "gckpt.report/2", "record": "header", ...}   what ran where, with which options
 *   {"record": "entry", "index": 3, ...}                     one per finished entry, in run order
 *   {"record": "summary", ..., "ended": true}                once the run has ended
 *
 * (gckpt.TrainerCallback writes the same records from a Trainer run, with "step" and
 * "warning" records between them and a "rank" on each: docs/python-callback.md.)
 *
 * The first record written (the header with the first finished entry) replaces an existing
 * file atomically (gckpt_afile); every later record is appended with one write(), so the
 * cost of the run's writes grows linearly with its entries. Every complete line is a whole
 * record: a reader (gckpt_report_load) takes all complete lines and ignores a last line
 * without its newline (a write cut by kill -9). An entry that ran is on disk (fdatasync)
 * before the next entry starts; records of skipped entries, which cost nothing to redo,
 * are synced with the next one that runs, at the latest a second later, and at the end.
 * If another program replaces the file meanwhile, the whole report is written again. */
#ifndef GCKPT_REPORT_FILE_H
#define GCKPT_REPORT_FILE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "gckpt/util/atomic_file.h"
#include "gckpt/executor/exec_run.h"

typedef struct {
    const char *path;          /* NULL: no report; "-": stdout */
    gckpt_afile f;             /* the temporary until the first record lands, then the file */
    bool created;              /* the header is out */
    size_t written;            /* entry records out */
    double last_sync;          /* monotonic seconds of the last fdatasync */
    gckpt_report_tally tally;
    pthread_mutex_t lock;      /* around every write, the watchdog's included */
    /* For gckpt_report_file_cut: the header and the records of the entry running now as
     * "interrupted", then the summary, rendered in advance; the signal's name goes where
     * the text is split (cut_part[i] ends where a name belongs). */
    char *header;
    char *cut_text;            /* NULL: nothing to write (not armed, or the summary is out) */
    char *cut_out;             /* room for cut_text with the names in: written in one write(2) */
    size_t cut_part[4];
    int cut_nparts;
    bool cut_armed;
    bool cut_running;          /* the text holds the running entry as interrupted */
    double cut_grace;          /* the watchdog's grace (0: it writes at once, several ranks) */
    /* where the watchdog creates the file when no record is out yet (nothing is created
     * before: a process killed meanwhile leaves no temporary) */
    int cut_dirfd;
    char cut_base[256], cut_tmp[256];
} gckpt_report_file;

/* Nothing is written yet (the file is replaced only once the first entry has finished). */
bool gckpt_report_file_open(gckpt_report_file *rf, const char *path, const gckpt_report *r, gckpt_err *err);
/* Entry r->entries[k] has finished: its record (and, the first time, the header). */
bool gckpt_report_file_add(gckpt_report_file *rf, const gckpt_report *r, size_t k, gckpt_err *err);
/* The run is over: the summary record (signal: the stop signal or 0), synced. */
bool gckpt_report_file_finish(gckpt_report_file *rf, const gckpt_report *r, int signal, gckpt_err *err);
void gckpt_report_file_close(gckpt_report_file *rf);

/* Before entry running starts: render what gckpt_report_file_cut writes if the run has to
 * be abandoned while it runs (while memory is plentiful). Each entry record written after
 * re-renders it as the summary alone, the summary record clears it. grace_s: the watchdog's
 * (its message says it; 0: several ranks, written as soon as the signal comes). */
bool gckpt_report_file_arm(gckpt_report_file *rf, const gckpt_report *r, const gckpt_entry_report *running,
                           double grace_s, gckpt_err *err);
/* From the watchdog thread, when no safe point came within the grace time after signal
 * sig: write the armed records with plain system calls (no allocation, no stdio) and
 * sync them. false when the main thread holds the file (it is writing) or nothing is armed. */
bool gckpt_report_file_cut(gckpt_report_file *rf, int sig);

/* Reading a report file back: gckpt_report_load, include/gckpt/formats/report_doc.h. */

#endif
