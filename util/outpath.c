/* Output paths checked up front (include/gckpt/util/outpath.h). */
#include "gckpt/util/outpath.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gckpt/util/atomic_file.h"

/* Where a path would live: its directory's identity and its name there. */
typedef struct {
    dev_t dev;
    ino_t ino;
    const char *base;
} place;

static bool place_of(const char *path, place *pl)
{
    const char *slash = strrchr(path, '/');
    pl->base = slash ? slash + 1 : path;
    char *dir = slash ? (slash == path ? strdup("/") : strndup(path, (size_t)(slash - path))) : strdup(".");
    struct stat st;
    bool ok = dir && stat(dir, &st) == 0;
    free(dir);
    if (ok) {
        pl->dev = st.st_dev;
        pl->ino = st.st_ino;
    }
    return ok;
}

static bool one(const char *out, const char *const *ins, int nin, gckpt_err *err)
{
    struct stat st;
    if (lstat(out, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            gckpt_seterr(err, "%s: is a directory, expected a file name to write", out);
            return false;
        }
        if (S_ISLNK(st.st_mode)) {
            gckpt_seterr(err, "%s: is a symbolic link; gckpt does not write through links (name the file itself)", out);
            return false;
        }
        if (!S_ISREG(st.st_mode)) {
            gckpt_seterr(err, "%s: is %s, not a regular file; gckpt writes only regular files ('-' writes to stdout)", out,
                         gckpt_file_kind(st.st_mode));
            return false;
        }
        for (int i = 0; i < nin; i++) {
            struct stat in;
            if (ins[i] && stat(ins[i], &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino) {
                gckpt_seterr(err, "%s: is the input %s (the same file); writing it would destroy the input, choose another output name",
                             out, ins[i]);
                return false;
            }
        }
    } else if (errno != ENOENT) {
        gckpt_seterr(err, "%s: cannot write: %s", out, strerror(errno));
        return false;
    }
    /* the directory takes a new file: create the temporary a real write would, and remove it,
     * with SIGINT / SIGTERM held off meanwhile (this runs before a program's handlers exist: a
     * signal between the two would kill it with the temporary left behind; held, it kills it
     * right after the removal) */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    gckpt_afile f;
    bool ok = gckpt_afile_open(&f, out, err);
    if (ok) gckpt_afile_abort(&f);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

bool gckpt_outpath_check(const char *const *outs, int nout, const char *const *ins, int nin, gckpt_err *err)
{
    for (int i = 0; i < nout; i++) {
        if (!outs[i] || !strcmp(outs[i], "-")) continue;
        if (!*outs[i]) {
            gckpt_seterr(err, "an output file name is empty");
            return false;
        }
        if (!one(outs[i], ins, nin, err)) return false;
        place a;
        if (!place_of(outs[i], &a)) continue; /* cannot happen after one() */
        for (int k = 0; k < i; k++) {
            place b;
            if (!outs[k] || !strcmp(outs[k], "-") || !place_of(outs[k], &b)) continue;
            struct stat sa, sb;
            bool same_file = lstat(outs[i], &sa) == 0 && lstat(outs[k], &sb) == 0 && sa.st_dev == sb.st_dev &&
                             sa.st_ino == sb.st_ino;
            if (same_file || (a.dev == b.dev && a.ino == b.ino && !strcmp(a.base, b.base))) {
                gckpt_seterr(err, "%s: is also written as %s (the same file); give each output its own name", outs[i], outs[k]);
                return false;
            }
        }
    }
    return true;
}
