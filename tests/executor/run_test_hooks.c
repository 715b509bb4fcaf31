/* gckpt-run's test build (gckpt-run-testhooks): executor/main_run.c compiled with
 * GCKPT_TEST_HOOKS calls gckpt_test_hooks_install() first, which sets the hooks of
 * include/gckpt/util/test_hooks.h from the environment. gckpt-run itself never reads
 * these variables.
 *   GCKPT_TEST_RENAME_DELAY_MS  hold every report temporary this long before its rename
 *                               (test_run_interrupt, test_run_outputs)
 *   GCKPT_TEST_HOST_STALL_MS    the process's first forward kernel takes this long without
 *                               looking at the stop flag, as a library call that never
 *                               returns would (test_run_outputs, test_run_memory) */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "gckpt/util/test_hooks.h"

void gckpt_test_hooks_install(void);

static long rename_delay_ms, stall_ms;

static void sleep_ms(long ms, int resume_on_signal_only)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L}, rem;
    while (nanosleep(&t, &rem) != 0 && (!resume_on_signal_only || errno == EINTR)) t = rem; /* signals do not shorten it */
}

static void before_rename(void) { sleep_ms(rename_delay_ms, 1); }

static void host_forward(void)
{
    static int done;
    if (done) return;
    done = 1;
    sleep_ms(stall_ms, 0);
}

static long ms_of(const char *name, long max)
{
    const char *v = getenv(name);
    long ms = v ? strtol(v, NULL, 10) : 0;
    return ms > 0 && ms <= max ? ms : 0;
}

void gckpt_test_hooks_install(void)
{
    if ((rename_delay_ms = ms_of("GCKPT_TEST_RENAME_DELAY_MS", 60000))) gckpt_hook_before_rename = before_rename;
    if ((stall_ms = ms_of("GCKPT_TEST_HOST_STALL_MS", 600000))) gckpt_hook_host_forward = host_forward;
}
