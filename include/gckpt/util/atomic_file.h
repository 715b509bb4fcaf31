/* The one way gckpt writes a file: a temporary in the target's directory, then a rename.
 *
 * - The temporary is created with O_CREAT | O_EXCL | O_NOFOLLOW under an unpredictable
 *   name (TARGET.gckpt-tmp-XXXXXXXX), so a link planted in advance is never followed and
 *   two writers never share a temporary (whatever their PIDs or PID namespaces).
 * - The writer holds flock(LOCK_EX) on its temporary. A temporary of this target that is
 *   not locked, is a regular file owned by us and has our name pattern is a leftover of a
 *   writer that was killed (kill -9, a power cut): opening the target again removes it.
 * - Commit: fsync the data, refuse a target that has become something other than a
 *   regular file, rename over the target, fsync the directory. Readers see the old file
 *   or the new one, never a part.
 * - The target itself is never followed: an existing symbolic link, device, FIFO or
 *   directory is refused (gckpt_outpath_check says so before any work). */
#ifndef GCKPT_ATOMIC_FILE_H
#define GCKPT_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The marker in a temporary's name: TARGET + GCKPT_TMP_MARK + 8 random letters/digits. */
#define GCKPT_TMP_MARK ".gckpt-tmp-"

typedef struct {
    int fd;             /* the temporary (after a commit with keep_open: the file itself); -1: none */
    int dirfd;          /* the target's directory */
    int slot;           /* entry in the table of named temporaries (signal-safe discard) */
    char *path;         /* the target as given, for messages */
    char *base;         /* the target's name inside its directory */
    char tmp[256];      /* the temporary's name inside the directory ("" when committed) */
    unsigned removed;   /* stale temporaries of this target removed when it was opened */
    /* Set after open: commit renames first and leaves the fsyncs to the next gckpt_afile_sync
     * (a writer that must not hold a lock through a slow fsync; the file is whole when
     * renamed, but a power cut before that sync may lose it). */
    bool late_sync;
    bool unsynced;      /* renamed, not yet synced (late_sync) */
} gckpt_afile;

/* An unused f (nothing open; abort and close are no-ops). */
void gckpt_afile_init(gckpt_afile *f);
/* Create the temporary for path (removing stale ones of ours first). On failure err
 * names path and the reason; nothing is left behind. */
bool gckpt_afile_open(gckpt_afile *f, const char *path, gckpt_err *err);
/* Append n bytes to the temporary (or, after a keep_open commit, to the file). */
bool gckpt_afile_write(gckpt_afile *f, const void *p, size_t n, gckpt_err *err);
/* A stdio stream on a duplicate of the file descriptor (fclose it, checking the result);
 * NULL with err set. */
FILE *gckpt_afile_stream(gckpt_afile *f, gckpt_err *err);
/* The temporary's path (the target's directory as given + its name), for another program. */
const char *gckpt_afile_tmp_path(const gckpt_afile *f, char *buf, size_t n);
/* Make the temporary the target: fsync, rename, fsync the directory. keep_open: the
 * descriptor stays open on the (now named) file for later appends (gckpt_afile_sync);
 * otherwise everything is closed. On failure the temporary is removed. */
bool gckpt_afile_commit(gckpt_afile *f, bool keep_open, gckpt_err *err);
/* After a keep_open commit: make the appended data durable (fdatasync; after a late_sync
 * commit also the file and its directory entry). */
bool gckpt_afile_sync(gckpt_afile *f, gckpt_err *err);
/* After a keep_open commit: false when the target's name no longer refers to our file
 * (another program replaced or removed it). */
bool gckpt_afile_still_target(const gckpt_afile *f);
/* Remove the temporary (if any) and close everything. Safe on a zeroed or closed f. */
void gckpt_afile_abort(gckpt_afile *f);
/* Close a committed file (after keep_open). */
void gckpt_afile_close(gckpt_afile *f);

/* Async-signal-safe: unlink every temporary of this process that has not been committed
 * yet (for a handler that ends the process). */
void gckpt_afile_discard_all(void);

/* For a writer that must create its file later with plain system calls (a watchdog thread
 * when the process is about to end): the target's directory opened (*dirfd), the target's
 * name in it and a temporary's name of the usual pattern, nothing created. */
bool gckpt_afile_name(const char *path, int *dirfd, char *base, size_t nb, char *tmp, size_t nt, gckpt_err *err);

/* "a directory", "a symbolic link", "a character device", ... for a st_mode that is not a
 * regular file's. */
const char *gckpt_file_kind(unsigned st_mode);

/* The whole file at once: open, write, commit. path "-" writes to stdout instead (and
 * reports a failed write or flush). */
bool gckpt_write_file_atomic(const char *path, const char *text, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
