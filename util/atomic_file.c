/* Atomic file replacement through an unpredictable, locked temporary in the target's
 * directory (include/gckpt/util/atomic_file.h). */
#define _GNU_SOURCE /* flock, O_NOFOLLOW, getrandom */
#include "gckpt/util/atomic_file.h"
#include "gckpt/util/test_hooks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RAND_LEN 8
#define NAME_MAX_BYTES 255

/* ---- temporaries a signal handler may remove ---------------------------------------- */

enum { NSLOTS = 16 };
static struct {
    volatile sig_atomic_t live;
    int dirfd;
    char name[NAME_MAX_BYTES + 1];
} slots[NSLOTS];

static int slot_take(int dirfd, const char *name)
{
    for (int i = 0; i < NSLOTS; i++)
        if (!slots[i].live) {
            slots[i].dirfd = dirfd;
            memcpy(slots[i].name, name, strlen(name) + 1);
            atomic_signal_fence(memory_order_seq_cst);
            slots[i].live = 1;
            atomic_signal_fence(memory_order_seq_cst);
            return i;
        }
    return -1; /* still works; only a handler cannot remove it */
}

static void slot_drop(int i)
{
    if (i < 0) return;
    atomic_signal_fence(memory_order_seq_cst);
    slots[i].live = 0;
    atomic_signal_fence(memory_order_seq_cst);
}

void gckpt_afile_discard_all(void)
{
    for (int i = 0; i < NSLOTS; i++)
        if (slots[i].live) (void)unlinkat(slots[i].dirfd, slots[i].name, 0); /* async-signal-safe */
}

/* ---- names ---------------------------------------------------------------------------- */

/* The temporaries' common prefix for a target: the name (cut so that prefix + random part
 * fit in NAME_MAX) and the marker. */
static void tmp_prefix(const char *base, char *out, size_t n)
{
    size_t keep = strlen(base), room = NAME_MAX_BYTES - strlen(GCKPT_TMP_MARK) - RAND_LEN;
    if (keep > room) keep = room;
    snprintf(out, n, "%.*s%s", (int)keep, base, GCKPT_TMP_MARK);
}

static void random_part(char *out)
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[RAND_LEN];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* no entropy yet (early boot): the name only has to be unlikely, O_EXCL does the rest */
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        uint64_t x = (uint64_t)t.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() << 32 ^ (uint64_t)t.tv_sec;
        for (int i = 0; i < RAND_LEN; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL) r[i] = (unsigned char)(x >> 56);
    }
    for (int i = 0; i < RAND_LEN; i++) out[i] = alnum[r[i] % (sizeof alnum - 1)];
    out[RAND_LEN] = 0;
}

static bool is_ours_by_name(const char *name, const char *prefix)
{
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) || strlen(name + p) != RAND_LEN) return false;
    for (const char *c = name + p; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'))) return false;
    return true;
}

/* A temporary of this target left by a writer that died: our name pattern, a regular file
 * owned by us, and nobody holds its lock (a live writer always does). */
static unsigned remove_stale(int dirfd, const char *prefix)
{
    int dfd = dup(dirfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0) close(dfd);
        return 0;
    }
    unsigned removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_ours_by_name(e->d_name, prefix)) continue;
        int fd = openat(dirfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat a, b;
        if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) && a.st_uid == geteuid() && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            fstatat(dirfd, e->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev &&
            unlinkat(dirfd, e->d_name, 0) == 0)
            removed++;
        close(fd);
    }
    closedir(d);
    return removed;
}

/* ---- the writer ------------------------------------------------------------------------ */

void gckpt_afile_init(gckpt_afile *f)
{
    memset(f, 0, sizeof *f);
    f->fd = f->dirfd = f->slot = -1;
}

static bool split_path(gckpt_afile *f, const char *path, char **dir, gckpt_err *err)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        gckpt_seterr(err, "%s: is a directory name, expected a file name to write", path);
        return false;
    }
    f->path = strdup(path);
    f->base = strdup(base);
    if (!slash) *dir = strdup(".");
    else if (slash == path) *dir = strdup("/");
    else *dir = strndup(path, (size_t)(slash - path));
    if (!f->path || !f->base || !*dir) {
        gckpt_seterr(err, "%s: out of memory", path);
        return false;
    }
    return true;
}

bool gckpt_afile_open(gckpt_afile *f, const char *path, gckpt_err *err)
{
    gckpt_afile_init(f);
    char *dir = NULL;
    if (!split_path(f, path, &dir, err)) goto fail;
    f->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f->dirfd < 0) {
        gckpt_seterr(err, "%s: cannot write in directory %s: %s", path, dir, strerror(errno));
        goto fail;
    }
    char prefix[NAME_MAX_BYTES + 1];
    tmp_prefix(f->base, prefix, sizeof prefix);
    f->removed = remove_stale(f->dirfd, prefix);
    for (int tries = 0; tries < 64; tries++) {
        char rnd[RAND_LEN + 1];
        random_part(rnd);
        snprintf(f->tmp, sizeof f->tmp, "%s%s", prefix, rnd);
        int fd = openat(f->dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            gckpt_seterr(err, "%s: cannot write in directory %s: %s", path, dir, strerror(errno));
            goto fail;
        }
        /* locked from here on; a stale-temporary sweep that got in before the lock has
         * removed the name, which the inode check sees: then try another name */
        struct stat a, b;
        if (flock(fd, LOCK_EX) != 0 || fstat(fd, &a) != 0 ||
            fstatat(f->dirfd, f->tmp, &b, AT_SYMLINK_NOFOLLOW) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd);
            continue;
        }
        f->fd = fd;
        f->slot = slot_take(f->dirfd, f->tmp);
        /* a replaced file keeps its permissions */
        struct stat t;
        if (fstatat(f->dirfd, f->base, &t, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(t.st_mode))
            (void)fchmod(fd, t.st_mode & 07777);
        free(dir);
        return true;
    }
    gckpt_seterr(err, "%s: cannot create a temporary file in %s", path, dir);
fail:
    free(dir);
    f->tmp[0] = 0;
    gckpt_afile_abort(f);
    return false;
}

bool gckpt_afile_write(gckpt_afile *f, const void *p, size_t n, gckpt_err *err)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(f->fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            gckpt_seterr(err, "%s: cannot write: %s", f->path, w == 0 ? "no progress" : strerror(errno));
            return false;
        }
        c += w;
        n -= (size_t)w;
    }
    return true;
}

FILE *gckpt_afile_stream(gckpt_afile *f, gckpt_err *err)
{
    int fd = dup(f->fd);
    FILE *s = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!s) {
        if (fd >= 0) close(fd);
        gckpt_seterr(err, "%s: cannot write: %s", f->path, strerror(errno));
    }
    return s;
}

const char *gckpt_afile_tmp_path(const gckpt_afile *f, char *buf, size_t n)
{
    const char *slash = strrchr(f->path, '/');
    snprintf(buf, n, "%.*s%s", slash ? (int)(slash - f->path + 1) : 0, f->path, f->tmp);
    return buf;
}

const char *gckpt_file_kind(unsigned m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

bool gckpt_afile_commit(gckpt_afile *f, bool keep_open, gckpt_err *err)
{
    /* the data is on disk before the name points at it (EINVAL: a file system without
     * fsync, e.g. some FUSE mounts); late_sync: after, in gckpt_afile_sync */
    if (!f->late_sync && fsync(f->fd) != 0 && errno != EINVAL) {
        gckpt_seterr(err, "%s: cannot write: %s", f->path, strerror(errno));
        gckpt_afile_abort(f);
        return false;
    }
    struct stat t;
    if (fstatat(f->dirfd, f->base, &t, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(t.st_mode)) {
        if (S_ISDIR(t.st_mode)) gckpt_seterr(err, "%s: is a directory, expected a file name to write", f->path);
        else gckpt_seterr(err, "%s: is %s, not a regular file; not replaced", f->path, gckpt_file_kind(t.st_mode));
        gckpt_afile_abort(f);
        return false;
    }
    if (gckpt_hook_before_rename) gckpt_hook_before_rename(); /* tests only (test_hooks.h) */
    if (renameat(f->dirfd, f->tmp, f->dirfd, f->base) != 0) {
        gckpt_seterr(err, "%s: cannot write: %s", f->path, strerror(errno));
        gckpt_afile_abort(f);
        return false;
    }
    slot_drop(f->slot);
    f->slot = -1;
    f->tmp[0] = 0;
    if (f->late_sync && keep_open) f->unsynced = true;
    else (void)fsync(f->dirfd); /* the rename itself survives a power cut */
    if (!keep_open) gckpt_afile_close(f);
    return true;
}

bool gckpt_afile_sync(gckpt_afile *f, gckpt_err *err)
{
    if (f->unsynced) {
        f->unsynced = false;
        if (fsync(f->fd) != 0 && errno != EINVAL) {
            gckpt_seterr(err, "%s: cannot write: %s", f->path, strerror(errno));
            return false;
        }
        (void)fsync(f->dirfd);
        return true;
    }
    if (fdatasync(f->fd) != 0 && errno != EINVAL) {
        gckpt_seterr(err, "%s: cannot write: %s", f->path, strerror(errno));
        return false;
    }
    return true;
}

bool gckpt_afile_still_target(const gckpt_afile *f)
{
    struct stat a, b;
    return fstat(f->fd, &a) == 0 && fstatat(f->dirfd, f->base, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
           a.st_dev == b.st_dev;
}

void gckpt_afile_close(gckpt_afile *f)
{
    if (f->fd >= 0) close(f->fd);
    if (f->dirfd >= 0) close(f->dirfd);
    free(f->path);
    free(f->base);
    gckpt_afile_init(f);
}

void gckpt_afile_abort(gckpt_afile *f)
{
    if (f->tmp[0] && f->dirfd >= 0) (void)unlinkat(f->dirfd, f->tmp, 0);
    slot_drop(f->slot);
    f->slot = -1;
    f->tmp[0] = 0;
    gckpt_afile_close(f);
}

bool gckpt_afile_name(const char *path, int *dirfd, char *base, size_t nb, char *tmp, size_t nt, gckpt_err *err)
{
    gckpt_afile f;
    gckpt_afile_init(&f);
    char *dir = NULL;
    bool ok = split_path(&f, path, &dir, err);
    if (ok && (f.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        gckpt_seterr(err, "%s: cannot write in directory %s: %s", path, dir, strerror(errno));
        ok = false;
    }
    if (ok) {
        char prefix[NAME_MAX_BYTES + 1], rnd[RAND_LEN + 1];
        tmp_prefix(f.base, prefix, sizeof prefix);
        random_part(rnd);
        snprintf(tmp, nt, "%s%s", prefix, rnd);
        snprintf(base, nb, "%s", f.base);
        *dirfd = f.dirfd;
        f.dirfd = -1;
    }
    free(dir);
    gckpt_afile_close(&f);
    return ok;
}

bool gckpt_write_file_atomic(const char *path, const char *text, gckpt_err *err)
{
    size_t len = strlen(text);
    if (strcmp(path, "-") == 0) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            gckpt_seterr(err, "stdout: write error: %s", strerror(errno));
            return false;
        }
        return true;
    }
    gckpt_afile f;
    if (!gckpt_afile_open(&f, path, err)) return false;
    if (!gckpt_afile_write(&f, text, len, err)) {
        gckpt_afile_abort(&f);
        return false;
    }
    return gckpt_afile_commit(&f, false, err);
}
