/* The bound on how long a stop request may take (include/gckpt/executor/stop_watchdog.h). */
#define _GNU_SOURCE
#include "gckpt/executor/stop_watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sem_t signalled, finished;
static volatile sig_atomic_t which, started;
static gckpt_report_file *cut_rf;
static double grace;

static void say(const char *a, const char *b, const char *c)
{
    /* write(2) only: stdio may be locked by the stuck thread */
    (void)!write(2, a, strlen(a));
    (void)!write(2, b, strlen(b));
    (void)!write(2, c, strlen(c));
}

static void *watch(void *arg)
{
    (void)arg;
    while (sem_wait(&signalled) != 0 && errno == EINTR) {}
    int sig = which;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)grace;
    until.tv_nsec += (long)((grace - (double)(time_t)grace) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int rc = -1;
    /* several ranks (grace 0): mpirun's SIGKILL comes about 1 s after its SIGTERM, so the
     * record is written now and the process ends (the system frees its memory) */
    while (grace > 0 && (rc = sem_timedwait(&finished, &until)) != 0 && errno == EINTR) {}
    if (rc == 0) return NULL; /* the run finished by itself */
    bool cut = gckpt_report_file_cut(cut_rf, sig);
    if (grace <= 0) {
        /* before the first entry (the ranks starting: MPI_Init) only the header and the summary */
        if (cut) say("gckpt-run: stopped by ", gckpt_signal_name(sig),
                     cut_rf->cut_running ? ": the report holds every finished entry and the running one as interrupted\n"
                     : cut_rf->written   ? ": the report holds every finished entry and the summary\n"
                                         : " before the first entry: the report holds its header and the summary\n");
        _exit(128 + sig);
    }
    char secs[32];
    snprintf(secs, sizeof secs, "%g", grace);
    say("gckpt-run: stopped by ", gckpt_signal_name(sig), ": no safe point was reached within ");
    say(secs, " s; ", cut ? "the report holds every finished entry and the running one as interrupted\n"
                          : "the report keeps the entries finished before the signal\n");
    _exit(128 + sig);
}

bool gckpt_watchdog_start(gckpt_report_file *rf, double grace_s)
{
    cut_rf = rf;
    grace = grace_s;
    if (sem_init(&signalled, 0, 0) != 0 || sem_init(&finished, 0, 0) != 0) return false;
    /* the handler runs on the main thread: block the stop signals here */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    bool ok = pthread_create(&t, &at, watch, NULL) == 0;
    started = ok;
    if (ok && which) sem_post(&signalled); /* a signal came before (several ranks: while starting) */
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

void gckpt_watchdog_notify(int sig)
{
    which = sig;
    if (started) sem_post(&signalled); /* async-signal-safe; before the start the run stops by itself */
}

void gckpt_watchdog_done(void) { sem_post(&finished); }
