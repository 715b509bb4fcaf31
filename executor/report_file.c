/* The report as JSON Lines: created atomically with its first records, then appended
 * (include/gckpt/executor/report_file.h). */
#define _GNU_SOURCE /* pthread_mutex_timedlock, fdatasync */
#include "gckpt/executor/report_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gckpt/util/jsonget.h"

#define SIG_MARK "@SIGNAL@"

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char *line_of(cJSON *j) { return gckpt_json_text(j, false); }

static bool to_stdout(const gckpt_report_file *rf) { return !strcmp(rf->path, "-"); }

static bool render_cut(gckpt_report_file *rf, const gckpt_entry_report *running, gckpt_err *err);

/* The cut text and the room it is composed in, gone (nothing left to write). */
static void drop_cut(gckpt_report_file *rf)
{
    free(rf->cut_text);
    free(rf->cut_out);
    rf->cut_text = rf->cut_out = NULL;
}

static bool put(gckpt_report_file *rf, const char *text, gckpt_err *err)
{
    if (!to_stdout(rf)) return gckpt_afile_write(&rf->f, text, strlen(text), err);
    if (fputs(text, stdout) == EOF || fflush(stdout) != 0) {
        gckpt_seterr(err, "stdout: write error: %s", strerror(errno));
        return false;
    }
    return true;
}

bool gckpt_report_file_open(gckpt_report_file *rf, const char *path, const gckpt_report *r, gckpt_err *err)
{
    memset(rf, 0, sizeof *rf);
    gckpt_afile_init(&rf->f);
    pthread_mutex_init(&rf->lock, NULL);
    rf->cut_dirfd = -1;
    rf->path = path;
    rf->tally.selected = r->planned;
    if (!path) return true;
    rf->header = line_of(gckpt_report_header_json(r));
    if (!rf->header) {
        gckpt_seterr(err, "%s: out of memory writing the report", path);
        return false;
    }
    return true;
}

/* The file under a new temporary: the header and the records of entries 0..k, renamed
 * into place (the first time, and when another program replaced our file). */
static bool create(gckpt_report_file *rf, const gckpt_report *r, size_t k, const char *last_line, gckpt_err *err)
{
    gckpt_afile old = rf->f;
    if (rf->created) gckpt_afile_init(&rf->f); /* the replaced one is closed below */
    bool ok = rf->f.fd >= 0 || gckpt_afile_open(&rf->f, rf->path, err);
    /* several ranks: the lock is not held through the fsync (the watchdog has about 1 s) */
    rf->f.late_sync = rf->cut_armed && rf->cut_grace <= 0;
    ok = ok && put(rf, rf->header, err);
    for (size_t i = 0; ok && i < k; i++) {
        char *l = line_of(gckpt_report_entry_json(&r->entries[i]));
        ok = l && put(rf, l, err);
        if (!l) gckpt_seterr(err, "%s: out of memory writing the report", rf->path);
        free(l);
    }
    ok = ok && put(rf, last_line, err) && gckpt_afile_commit(&rf->f, true, err);
    if (!ok) gckpt_afile_abort(&rf->f);
    if (rf->created) gckpt_afile_close(&old);
    rf->created = ok;
    rf->last_sync = mono();
    return ok;
}

/* One record out: to stdout (after the header), into a new file with the records of
 * entries 0..k-1 before it (the first time, or when our file was replaced), or appended;
 * synced when sync says so. rearm: an entry's record (the watchdog's text follows it);
 * otherwise the summary (the watchdog has nothing left to write). */
static bool emit(gckpt_report_file *rf, const gckpt_report *r, size_t k, char *line, bool sync, bool rearm,
                 gckpt_err *err)
{
    if (!line) {
        gckpt_seterr(err, "%s: out of memory writing the report", rf->path);
        return false;
    }
    pthread_mutex_lock(&rf->lock);
    bool ok, sync_now = false;
    if (to_stdout(rf)) {
        ok = (rf->created || put(rf, rf->header, err)) && put(rf, line, err);
        rf->created = rf->created || ok;
    } else if (!rf->created || !gckpt_afile_still_target(&rf->f)) {
        ok = create(rf, r, k, line, err);
        sync_now = ok && rf->f.unsynced;
    } else {
        ok = put(rf, line, err);
        sync_now = ok && (sync || mono() - rf->last_sync > 1.0);
    }
    /* what the watchdog would write from here on: the summary over every record out (no
     * record twice), nothing once the summary is out */
    if (ok && rf->cut_armed && rearm) {
        gckpt_err ignore = {{0}};
        if (!render_cut(rf, NULL, &ignore)) drop_cut(rf);
    } else if (ok && !rearm) {
        drop_cut(rf);
    }
    pthread_mutex_unlock(&rf->lock);
    /* synced outside the lock: a slow fdatasync must not hold off the watchdog (only this
     * thread replaces rf->f) */
    if (sync_now) {
        ok = gckpt_afile_sync(&rf->f, err);
        rf->last_sync = mono();
    }
    free(line);
    return ok;
}

bool gckpt_report_file_add(gckpt_report_file *rf, const gckpt_report *r, size_t k, gckpt_err *err)
{
    cJSON *e = gckpt_report_entry_json(&r->entries[k]);
    if (e) gckpt_report_tally_add(&rf->tally, e);
    if (!rf->path) {
        cJSON_Delete(e);
        return true;
    }
    /* an entry that ran is durable before the next starts; skipped ones ride along */
    bool ok = emit(rf, r, k, line_of(e), !gckpt_run_status_skipped(r->entries[k].status), true, err);
    if (ok) rf->written++;
    return ok;
}

bool gckpt_report_file_finish(gckpt_report_file *rf, const gckpt_report *r, int signal, gckpt_err *err)
{
    if (!rf->path) return true;
    cJSON *s = gckpt_report_summary_json(&rf->tally, signal ? gckpt_signal_name(signal) : NULL, true);
    return emit(rf, r, rf->written, line_of(s), true, false, err);
}

void gckpt_report_file_close(gckpt_report_file *rf)
{
    pthread_mutex_lock(&rf->lock);
    gckpt_afile_abort(&rf->f); /* a temporary that never became the report, or the file's descriptors */
    if (rf->cut_dirfd >= 0) close(rf->cut_dirfd);
    rf->cut_dirfd = -1;
    free(rf->header);
    rf->header = NULL;
    drop_cut(rf);
    pthread_mutex_unlock(&rf->lock);
    pthread_mutex_destroy(&rf->lock);
}

/* ---- the watchdog's records ------------------------------------------------------------ */

/* The text the watchdog writes: the header when the file does not exist yet, the running
 * entry as interrupted (none between entries), the summary over base and it; the signal's
 * name goes where SIG_MARK stands. Under the lock. */
static bool render_cut(gckpt_report_file *rf, const gckpt_entry_report *running, gckpt_err *err)
{
    cJSON *e = NULL;
    if (running) {
        gckpt_entry_report *cut = malloc(sizeof *cut);
        if (!cut) return gckpt_seterr(err, "%s: out of memory writing the report", rf->path), false;
        *cut = *running;
        cut->status = GCKPT_RS_INTERRUPTED;
        cut->pass = 0;
        if (rf->cut_grace > 0)
            snprintf(cut->message, sizeof cut->message,
                     "stopped by " SIG_MARK ": no safe point was reached within %g s, so the entry was abandoned where it "
                     "was (inside the backend) and the process ended",
                     rf->cut_grace);
        else /* several ranks: mpirun's SIGKILL follows its SIGTERM within a second */
            snprintf(cut->message, sizeof cut->message,
                     "stopped by " SIG_MARK " while running on several ranks: recorded at once, before anything was "
                     "freed (mpirun sends every rank SIGTERM when it is signalled or when a rank has ended, and "
                     "SIGKILL about 1 s later)");
        e = gckpt_report_entry_json(cut);
        free(cut);
        if (!e) return gckpt_seterr(err, "%s: out of memory writing the report", rf->path), false;
    }
    gckpt_report_tally t = rf->tally;
    if (e) gckpt_report_tally_add(&t, e);
    char *a = e ? line_of(e) : NULL, *b = line_of(gckpt_report_summary_json(&t, SIG_MARK, true));
    bool with_header = !rf->created;
    size_t n = (with_header ? strlen(rf->header) : 0) + (a ? strlen(a) : 0) + (b ? strlen(b) : 0) + 1;
    char *text = (!e || a) && b ? malloc(n) : NULL;
    if (!text) {
        free(a);
        free(b);
        return gckpt_seterr(err, "%s: out of memory writing the report", rf->path), false;
    }
    snprintf(text, n, "%s%s%s", with_header ? rf->header : "", a ? a : "", b);
    free(a);
    free(b);
    /* cut the text at the markers: the signal's name goes into each gap */
    int np = 0;
    char *w = text;
    for (const char *p = text; *p;) {
        if (!strncmp(p, SIG_MARK, strlen(SIG_MARK)) && np < 4) {
            rf->cut_part[np++] = (size_t)(w - text);
            p += strlen(SIG_MARK);
        } else {
            *w++ = *p++;
        }
    }
    *w = 0;
    /* gckpt_signal_name's names are shorter than 32 bytes */
    char *out = malloc((size_t)(w - text) + 32u * (size_t)np + 1);
    if (!out) {
        free(text);
        return gckpt_seterr(err, "%s: out of memory writing the report", rf->path), false;
    }
    drop_cut(rf);
    rf->cut_text = text;
    rf->cut_out = out;
    rf->cut_nparts = np;
    rf->cut_running = running != NULL;
    return true;
}

bool gckpt_report_file_arm(gckpt_report_file *rf, const gckpt_report *r, const gckpt_entry_report *running,
                           double grace_s, gckpt_err *err)
{
    if (!rf->path) return true;
    (void)r;
    /* the file may not exist yet: the watchdog then creates it with plain system calls (no
     * temporary lies around before it is needed: a process killed meanwhile leaves none) */
    if (!rf->created && !to_stdout(rf) && rf->cut_dirfd < 0 &&
        !gckpt_afile_name(rf->path, &rf->cut_dirfd, rf->cut_base, sizeof rf->cut_base, rf->cut_tmp, sizeof rf->cut_tmp,
                          err))
        return false;
    pthread_mutex_lock(&rf->lock);
    rf->cut_grace = grace_s;
    rf->cut_armed = true;
    bool ok = render_cut(rf, running, err);
    pthread_mutex_unlock(&rf->lock);
    return ok;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

bool gckpt_report_file_cut(gckpt_report_file *rf, int sig)
{
    if (!rf->path) return false;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    if (pthread_mutex_timedlock(&rf->lock, &until) != 0) return false; /* the main thread is writing */
    if (!rf->cut_text) { /* nothing armed, or the summary is out */
        pthread_mutex_unlock(&rf->lock);
        return false;
    }
    bool fresh = !rf->created && !to_stdout(rf), unnamed = false;
    int fd = to_stdout(rf) ? 1 : rf->f.fd;
    if (fresh) { /* a file without a name until it is whole (O_TMPFILE), else the temporary's name */
        fd = openat(rf->cut_dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        unnamed = fd >= 0;
        if (!unnamed) fd = openat(rf->cut_dirfd, rf->cut_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    }
    if (fd < 0) {
        pthread_mutex_unlock(&rf->lock);
        return false;
    }
    /* composed first and written by one write(2): a SIGKILL between several writes would
     * leave a record cut in the middle */
    const char *name = gckpt_signal_name(sig);
    size_t at = 0, len = 0, nl = strlen(name) < 32 ? strlen(name) : 31;
    for (int i = 0; i < rf->cut_nparts; i++) {
        memcpy(rf->cut_out + len, rf->cut_text + at, rf->cut_part[i] - at);
        len += rf->cut_part[i] - at;
        memcpy(rf->cut_out + len, name, nl);
        len += nl;
        at = rf->cut_part[i];
    }
    size_t rest = strlen(rf->cut_text + at);
    memcpy(rf->cut_out + len, rf->cut_text + at, rest);
    len += rest;
    bool ok = write_all(fd, rf->cut_out, len);
    if (fresh) {
        /* renamed before the fsync: under mpirun a SIGKILL may follow within a second, and a
         * whole file in the page cache outlives the process (the fsync then guards against a
         * power cut only) */
        if (ok && unnamed) { /* named only now: a process killed before leaves nothing */
            char self[64];
            snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
            ok = linkat(AT_FDCWD, self, rf->cut_dirfd, rf->cut_tmp, AT_SYMLINK_FOLLOW) == 0;
        }
        ok = ok && renameat(rf->cut_dirfd, rf->cut_tmp, rf->cut_dirfd, rf->cut_base) == 0;
        if (ok) {
            (void)fsync(fd);
            (void)fsync(rf->cut_dirfd);
        } else {
            (void)unlinkat(rf->cut_dirfd, rf->cut_tmp, 0); /* no temporary stays behind */
        }
        close(fd);
    } else if (ok && !to_stdout(rf)) {
        (void)fdatasync(fd);
    }
    return ok; /* the lock stays held: the process ends now */
}

/* ---- reading ----------------------------------------------------------------------------- */

