/* Every output path of a command, checked before any work is done, so that a bad one
 * costs nothing: no file is written, none is replaced, no entry is run. */
#ifndef GCKPT_OUTPATH_H
#define GCKPT_OUTPATH_H

#include <stdbool.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* true when each of outs[0..nout) can be written through gckpt_afile: its directory exists
 * and takes a new file (a temporary is created there and removed again); the path is
 * absent or a regular file (not a symbolic link, device, FIFO, socket or directory); it is
 * not the same file (device and inode) as any existing one of ins[0..nin), nor the same
 * as another output. NULL entries and "-" (stdout) are skipped. Otherwise false, with err
 * naming the path and the reason in one line. */
bool gckpt_outpath_check(const char *const *outs, int nout, const char *const *ins, int nin, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
