/* A run ends when asked. SIGINT / SIGTERM only set a flag that the run honours at its
 * next safe point (between events, steps and entries). Code that never returns to a safe
 * point (a BLAS call stuck retrying an allocation, a hung driver call) would keep the
 * process alive forever; this watchdog thread bounds that: if the run has not finished
 * GCKPT_STOP_GRACE_S seconds after the first signal, it writes the report from the last
 * safe point (gckpt_report_file_cut: every finished entry, the running one as
 * interrupted, the summary) and ends the process with exit status 128 + N. */
#ifndef GCKPT_STOP_WATCHDOG_H
#define GCKPT_STOP_WATCHDOG_H

#include <stdbool.h>

#include "gckpt/executor/report_file.h"

#define GCKPT_STOP_GRACE_S 5.0

/* Start the thread (it waits for a signal); rf is what it cuts. false when it cannot be
 * started (the run then still stops at safe points, unbounded). grace_s 0 (several ranks:
 * mpirun kills a rank about 1 s after its SIGTERM): no wait, the report is cut as soon as the
 * first signal comes and the process ends with 128 + N. */
bool gckpt_watchdog_start(gckpt_report_file *rf, double grace_s);
/* From the signal handler (async-signal-safe): the first stop signal came. */
void gckpt_watchdog_notify(int sig);
/* The run reached its end (the final report is written): the watchdog stands down. */
void gckpt_watchdog_done(void);

#endif
