/* Running gnuplot on a script: the script on its stdin, the image on its stdout (a file
 * descriptor of ours), its stderr collected and condensed into one line. */
#ifndef GCKPT_GNUPLOT_RUN_H
#define GCKPT_GNUPLOT_RUN_H

#include <stdbool.h>
#include <stddef.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gnuplot is an executable on PATH. */
bool gckpt_gnuplot_available(void);

/* Run gnuplot with script (n bytes) on its stdin and its stdout on out_fd. false when it
 * cannot be started or fails: err then says so in one line with the gist of what gnuplot
 * printed. On success, note (size note_n, may be NULL) receives the gist of any warning
 * it printed ("" when none). */
bool gckpt_gnuplot_run(const char *script, size_t n, int out_fd, char *note, size_t note_n, gckpt_err *err);

/* The gist of gnuplot's stderr text: its last "line N: message" (the message and the
 * line), else its last line that is not an echo or a caret; "" when there is none. */
void gckpt_gnuplot_gist(const char *text, char *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
