/* gckpt-run's test build (gckpt-run-testhooks): executor/main_run.c compiled with
 * GCKPT_TEST_HOOKS calls gckpt_test_hooks_install() first, which sets the hooks of
 * include/gckpt/util/test_hooks.h from the environment. gckpt-run itself never reads
 * these variables.
 *   GCKPT_TEST_RENAME_DELAY_MS  hold every report temporary this long before its rename
 *                               (test_run_interrupt, test_run_outputs)
 *   GCKPT_TEST_RENAME_READY     with the delay: created (holding the process id) when a
 *                               report temporary is whole and held before its rename
 *   GCKPT_TEST_HOST_STALL_MS    the process's first forward kernel takes this long without
 *                               looking at the stop flag, as a library call that never
 *                               returns would (test_run_outputs, test_run_memory)
 *   GCKPT_TEST_STALL_RANK       under mpirun: only this rank stalls
 *   GCKPT_TEST_READY_FILE       created when the stall begins, holding the process id (a
 *                               test acts on it)
 *   GCKPT_TEST_SKIP_COLLECTIVE  R:N: rank R leaves out its collective number N, as if its
 *                               code had not called it (test_run_mpi_fail)
 *   GCKPT_TEST_INIT_READY       under mpirun: every rank creates PATH.<rank> (holding its
 *                               process id) right before MPI_Init (test_run_mpi_fail)
 *   GCKPT_TEST_INIT_STALL_MS    under mpirun: rank GCKPT_TEST_STALL_RANK then waits this long
 *                               before MPI_Init, so the other ranks wait in it
 *   GCKPT_TEST_GRAD_DUMP        every gradient piece the checksums hash appended to PATH.<rank>
 *                               (grad_dump_record, then its n floats; test_run_mpi's tp tests) */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gckpt/util/test_hooks.h"

void gckpt_test_hooks_install(void);

static long rename_delay_ms, stall_ms;

static void sleep_ms(long ms, int resume_on_signal_only)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L}, rem;
    while (nanosleep(&t, &rem) != 0 && (!resume_on_signal_only || errno == EINTR)) t = rem; /* signals do not shorten it */
}

static void say_ready(const char *ready);
/* the temporary is whole and about to be renamed: say so (GCKPT_TEST_RENAME_READY), then hold it */
static void before_rename(void)
{
    say_ready(getenv("GCKPT_TEST_RENAME_READY"));
    sleep_ms(rename_delay_ms, 1);
}

/* The process id in file `ready`, written under another name and renamed: whole when it appears. */
static void say_ready(const char *ready)
{
    if (!ready || !*ready) return;
    char tmp[4096], pid[32];
    int len = snprintf(tmp, sizeof tmp, "%s.part", ready);
    if (len < 0 || (size_t)len >= sizeof tmp) return; /* a name too long to hold: no signal */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        (void)!write(fd, pid, (size_t)n);
        close(fd);
        (void)rename(tmp, ready);
    }
}

static void host_forward(void)
{
    static int done;
    if (done) return;
    done = 1;
    say_ready(getenv("GCKPT_TEST_READY_FILE"));
    sleep_ms(stall_ms, 0);
}

static long skip_rank = -1, skip_seq;

static bool skip_collective(int rank, unsigned long long seq)
{
    static bool done; /* once: the next call has the same number again */
    if (done || rank != skip_rank || (long long)seq != skip_seq) return false;
    return done = true;
}

/* This process's rank under mpirun (0 without). */
static long launch_rank(void)
{
    const char *v = getenv("OMPI_COMM_WORLD_RANK");
    return v ? strtol(v, NULL, 10) : 0;
}

static long ms_of(const char *name, long max)
{
    const char *v = getenv(name);
    long ms = v ? strtol(v, NULL, 10) : 0;
    return ms > 0 && ms <= max ? ms : 0;
}

static long init_stall_ms;

static void before_mpi_init(void)
{
    const char *ready = getenv("GCKPT_TEST_INIT_READY");
    if (ready && *ready) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%ld", ready, launch_rank());
        say_ready(path);
    }
    const char *who = getenv("GCKPT_TEST_STALL_RANK");
    if (init_stall_ms && (!who || strtol(who, NULL, 10) == launch_rank())) sleep_ms(init_stall_ms, 0);
}

/* GCKPT_TEST_GRAD_DUMP's records (tests/executor/test_run_mpi.c reads them) */
typedef struct {
    int32_t tensor, layer;
    uint64_t lo, n;
} grad_dump_record;

static FILE *grad_dump;

static void grad_piece(int tensor, int layer, unsigned long long lo, const float *v, unsigned long long n)
{
    grad_dump_record r = {tensor, layer, lo, n};
    if (fwrite(&r, sizeof r, 1, grad_dump) != 1 || fwrite(v, sizeof *v, n, grad_dump) != n) abort();
    fflush(grad_dump);
}

void gckpt_test_hooks_install(void)
{
    const char *dump = getenv("GCKPT_TEST_GRAD_DUMP");
    if (dump && *dump) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%ld", dump, launch_rank());
        if ((grad_dump = fopen(path, "ab"))) gckpt_hook_grad_piece = grad_piece;
    }
    if ((rename_delay_ms = ms_of("GCKPT_TEST_RENAME_DELAY_MS", 60000))) gckpt_hook_before_rename = before_rename;
    const char *who = getenv("GCKPT_TEST_STALL_RANK");
    if ((stall_ms = ms_of("GCKPT_TEST_HOST_STALL_MS", 600000)) && (!who || strtol(who, NULL, 10) == launch_rank()))
        gckpt_hook_host_forward = host_forward;
    const char *skip = getenv("GCKPT_TEST_SKIP_COLLECTIVE");
    if (skip && sscanf(skip, "%ld:%ld", &skip_rank, &skip_seq) == 2) gckpt_hook_skip_collective = skip_collective;
    init_stall_ms = ms_of("GCKPT_TEST_INIT_STALL_MS", 600000);
    if (init_stall_ms || getenv("GCKPT_TEST_INIT_READY")) gckpt_hook_before_mpi_init = before_mpi_init;
}
