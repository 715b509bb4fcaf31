/* Standard output treated as an output like any other: a program started with a closed
 * descriptor 0, 1 or 2 never hands that number to a file it opens (a report would
 * otherwise receive the table), and a failed write or close of stdout is an error. */
#ifndef GCKPT_STDIO_CHECK_H
#define GCKPT_STDIO_CHECK_H

#include <stdbool.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Call first in main: a closed descriptor 0, 1 or 2 is opened on /dev/null (1 read-only,
 * so that writes to a closed stdout still fail and are reported). */
void gckpt_stdio_guard(void);
/* Flush stdout and report a write that failed now or earlier (and an error closing it,
 * through a duplicate, so stdout stays usable). false with err "stdout: write error: ...". */
bool gckpt_stdout_check(gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
