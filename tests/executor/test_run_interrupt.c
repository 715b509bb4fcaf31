/* Nothing lost: a host-backend gckpt-run on a seven-entry plan is stopped with SIGINT or
 * SIGTERM once its report shows a finished entry. It must exit with 128 + the signal,
 * leave a report that parses and validates against reports/schema/report.schema.json,
 * keep the finished entries exactly as they were reported before the signal, mark the
 * entry that was running "interrupted", and leave no temporary file. A second signal
 * while it writes that report must end it at once, killed by the signal, with the
 * previous whole report in place and no temporary file.
 *
 * Synchronisation is by polling the report file (JSON Lines: created by a rename, then
 * appended record by record, so every read sees whole records) and the child's state;
 * the only waits are polls with generous deadlines, bounded overall by BUDGET_S. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gckpt/util/atomic_file.h"
#include "gckpt/util/util.h"
#include "plan_fixture.h"
#include "cli_harness.h"
#include "report_fixture.h"
#include "schema_check.h"

#define BUDGET_S 55.0   /* the whole test, all cases */
#define NENTRIES 7      /* every_n off, 1, 2, 3 x offload off / on */
#define STEPS "600"     /* measured steps per entry: about 0.5 s each (tiny gpt2, seq 16), 3 s under ASan */

static cJSON *schema;
static double t_start;

static double now(void) { return cli_now(); }

static double deadline(double seconds)
{
    double d = now() + seconds, end = t_start + BUDGET_S;
    return d < end ? d : end;
}

static void nap(void)
{
    struct timespec ts = {0, 5 * 1000 * 1000}; /* 5 ms */
    nanosleep(&ts, NULL);
}

static void path_of(char *p, size_t n, const char *name) { cli_path(name, p, n); }

static void remove_if_there(const char *name)
{
    char p[512];
    path_of(p, sizeof p, name);
    (void)unlink(p);
}

/* gckpt-run (or its test-hooks build: exe) --backend host --plan plan.json --all --steps N
 * -q -o report.json in the scratch directory, with stdout and stderr in files; env entries
 * "NAME=value" (NULL-terminated) or NULL. */
static pid_t spawn_run(const char *exe, const char *const *env)
{
    char *const argv[] = {(char *)exe, "--backend", "host", "--plan", "plan.json", "--all", "--steps", STEPS,
                          "-q", "-o", "report.json", NULL};
    cli_spawn_opts o = {.env = env};
    return cli_spawn(argv, &o);
}

static pid_t start_run(void)
{
    remove_if_there("report.json");
    return spawn_run(GCKPT_RUN_EXE, NULL);
}

static char *slurp(const char *name, bool must)
{
    char p[512];
    path_of(p, sizeof p, name);
    gckpt_err err = {{0}};
    char *t = gckpt_read_file(p, 64u << 20, &err);
    if (!t && must) fail_msg("%s", err.msg);
    return t;
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* The child's wait status, or fail (after killing it) past the deadline. */
static int wait_exit(pid_t pid, double until)
{
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        if (r < 0 && errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
        if (now() > until) {
            kill_and_reap(pid);
            fail_msg("gckpt-run did not end in time after the signal");
        }
        nap();
    }
}

/* The report, which must parse and validate whenever it exists. */
static cJSON *read_report(bool must)
{
    char p[512], why[600];
    path_of(p, sizeof p, "report.json");
    struct stat st;
    if (!must && stat(p, &st) != 0) return NULL;
    cJSON *doc = rf_load_valid(p, schema, why, sizeof why);
    if (!doc) fail_msg("report.json: %s", why);
    return doc;
}

static int nentries(cJSON *doc) { return cJSON_GetArraySize(cJSON_GetObjectItem(doc, "entries")); }

/* Poll until the report shows at least one finished entry; then wait a quarter of that
 * entry's wall time more, so that the signal lands inside the next entry rather than in
 * the microseconds between two. Returns the report seen then (the finished entries). */
static cJSON *wait_finished_entry(pid_t pid)
{
    double until = deadline(40);
    cJSON *seen = NULL;
    while (!seen) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char *e = slurp("stderr.txt", false);
            fail_msg("gckpt-run ended before it was signalled (status %d): %s", st, e ? e : "");
        }
        if (now() > until) {
            kill_and_reap(pid);
            fail_msg("no finished entry in the report in time");
        }
        cJSON *doc = read_report(false);
        if (doc && nentries(doc) >= 1) seen = doc;
        else cJSON_Delete(doc);
        if (!seen) nap();
    }
    double w = cJSON_GetNumberValue(pf_at(seen, "entries[0].wall_s"));
    double t = now() + (w > 0 && w < 8 ? w / 4 : 0.25);
    while (now() < t) nap();
    /* the report may have moved on meanwhile: take the latest */
    cJSON *latest = read_report(true);
    cJSON_Delete(seen);
    return latest;
}

static void no_temp_files(void) { cli_assert_no_temporaries(cli_dir); }

static const char *str_at(cJSON *doc, const char *path)
{
    cJSON *s = pf_at(doc, path);
    return cJSON_IsString(s) ? s->valuestring : "";
}

/* Entries [0, n) of before are in after unchanged, and they finished. */
static void finished_intact(cJSON *before, cJSON *after, int n)
{
    cJSON *eb = cJSON_GetObjectItem(before, "entries"), *ea = cJSON_GetObjectItem(after, "entries");
    const char *sum0 = NULL;
    for (int i = 0; i < n; i++) {
        cJSON *b = cJSON_GetArrayItem(eb, i), *a = cJSON_GetArrayItem(ea, i);
        assert_non_null(a);
        if (b && !cJSON_Compare(a, b, true)) fail_msg("entry %d changed after the signal", i);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(a, "status")), "ok");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(a, "pass")));
        assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(a, "index")), i);
        /* the measured steps are all there, and the gradients are bitwise equal across
         * settings (a torn or mixed-up entry would not be) */
        assert_int_equal(cJSON_GetArraySize(pf_at(a, "time.steps_s")), atoi(STEPS));
        const char *sum = cJSON_GetStringValue(pf_at(a, "numerics.grad_checksum"));
        assert_non_null(sum);
        if (!sum0) sum0 = sum;
        assert_string_equal(sum, sum0);
    }
}

static void stopped_by(int sig, int code, const char *name)
{
    pid_t pid = start_run();
    cJSON *before = wait_finished_entry(pid);
    int nb = nentries(before);
    assert_true(nb >= 1 && nb < NENTRIES);
    assert_int_equal(kill(pid, sig), 0);
    double t0 = now();
    int st = wait_exit(pid, deadline(30));
    double took = now() - t0;
    char *err = slurp("stderr.txt", true);
    if (!WIFEXITED(st)) fail_msg("gckpt-run did not exit (wait status %d); stderr: %s", st, err);
    if (WEXITSTATUS(st) != code) fail_msg("exit status %d, expected %d; stderr: %s", WEXITSTATUS(st), code, err);
    if (took > 20) fail_msg("gckpt-run took %.1f s to stop", took);
    char want[64];
    snprintf(want, sizeof want, "stopped by %s", name);
    if (!strstr(err, want)) fail_msg("stderr does not say \"%s\": %s", want, err);
    free(err);

    cJSON *after = read_report(true);
    int n = nentries(after);
    /* every entry finished before the signal, then the one running, then nothing */
    assert_true(n >= nb + 1 && n <= NENTRIES);
    finished_intact(before, after, n - 1);
    char at[64];
    snprintf(at, sizeof at, "entries[%d].status", n - 1);
    assert_string_equal(str_at(after, at), "interrupted");
    snprintf(at, sizeof at, "entries[%d].pass", n - 1);
    assert_true(cJSON_IsFalse(pf_at(after, at)));
    snprintf(at, sizeof at, "entries[%d].message", n - 1);
    if (!strstr(str_at(after, at), want)) fail_msg("the interrupted entry's message \"%s\" lacks \"%s\"", str_at(after, at), want);
    snprintf(at, sizeof at, "entries[%d].numerics.grad_checksum", n - 1);
    assert_true(cJSON_IsNull(pf_at(after, at)));
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(after, "summary.selected")), NENTRIES);
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(after, "summary.ok")), n - 1);
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(after, "summary.interrupted")), 1);
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(after, "summary.failed")), 1);
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(after, "summary.not_started")), NENTRIES - n);
    assert_true(cJSON_IsFalse(pf_at(after, "summary.complete")));
    assert_string_equal(str_at(after, "summary.signal"), name);
    no_temp_files();
    cJSON_Delete(before);
    cJSON_Delete(after);
}

static void test_sigint(void **st)
{
    (void)st;
    stopped_by(SIGINT, 130, "SIGINT");
}

static void test_sigterm(void **st)
{
    (void)st;
    stopped_by(SIGTERM, 143, "SIGTERM");
}

static bool temp_file_exists(void)
{
    DIR *d = opendir(cli_dir);
    assert_non_null(d);
    struct dirent *de;
    bool found = false;
    while (!found && (de = readdir(d))) found = strstr(de->d_name, "report.json" GCKPT_TMP_MARK) != NULL;
    closedir(d);
    return found;
}

/* Whether SIGINT is still pending for the process (Linux: /proc/PID/status, SigPnd and ShdPnd):
 * a second SIGINT sent before the first is delivered merges with it. */
static bool sigint_pending(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool pending = false;
    unsigned long long mask;
    while (fgets(line, sizeof line, f))
        if ((sscanf(line, "SigPnd: %llx", &mask) == 1 || sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
            (mask & (1ull << (SIGINT - 1))))
            pending = true;
    fclose(f);
    return pending;
}

/* Removes the report temporaries a SIGKILLed run left (the next run would, but only once it
 * runs: one seen before then is not the new run's). */
static void remove_temp_files(void)
{
    DIR *d = opendir(cli_dir);
    assert_non_null(d);
    struct dirent *de;
    char path[1024];
    while ((de = readdir(d)))
        if (strstr(de->d_name, "report.json" GCKPT_TMP_MARK)) {
            snprintf(path, sizeof path, "%s/%s", cli_dir, de->d_name);
            unlink(path);
        }
    closedir(d);
}

/* A second SIGINT while the first is being dealt with, at the worst moment: while the
 * report file is being created (the signal came during the first entry, so the report's
 * first records go to a temporary that is then renamed over the old report; the test hook
 * of gckpt-run's test build, GCKPT_TEST_RENAME_DELAY_MS, holds the temporary before the
 * rename). The process must die of the signal at once, remove the temporary, and leave
 * the old report as it was. */
static void test_second_signal(void **st)
{
    (void)st;
    /* a report of an earlier run is in place */
    pid_t first = start_run();
    cJSON *earlier = wait_finished_entry(first);
    cJSON_Delete(earlier);
    kill_and_reap(first);
    remove_temp_files();
    char *old = slurp("report.json", true);
    /* the readiness file: the report's temporary is whole and held before its rename */
    char ready[600], ready_env[700];
    cli_path("second.ready", ready, sizeof ready);
    unlink(ready);
    snprintf(ready_env, sizeof ready_env, "GCKPT_TEST_RENAME_READY=%s", ready);
    const char *const env[] = {"GCKPT_TEST_RENAME_DELAY_MS=20000", ready_env, NULL};
    pid_t pid = spawn_run(GCKPT_RUN_HOOKS_EXE, env);
    /* the temporary of the new report exists once the first entry ends, with the handlers
     * installed (SigCgt: checked too, for the output check at the start creates and removes a
     * temporary of its own before the handlers exist) */
    double until = deadline(30);
    while (!cli_catches(pid, SIGINT) || !temp_file_exists()) {
        int s;
        if (waitpid(pid, &s, WNOHANG) == pid) fail_msg("gckpt-run ended (status %d) before its first entry", s);
        if (now() > until) {
            kill_and_reap(pid);
            fail_msg("no report temporary in time");
        }
        nap();
    }
    assert_int_equal(kill(pid, SIGINT), 0);
    /* the entry stops at its next event; the report is then held 20 s before its rename: the
     * readiness file says the hold has begun, and the first signal must have been delivered */
    double until2 = deadline(30);
    while (access(ready, F_OK) != 0 || sigint_pending(pid)) {
        int s;
        if (waitpid(pid, &s, WNOHANG) == pid) fail_msg("gckpt-run ended (status %d) before the second signal", s);
        if (now() > until2) {
            kill_and_reap(pid);
            fail_msg("the report was not held before its rename in time");
        }
        nap();
    }
    assert_true(temp_file_exists());
    assert_int_equal(kill(pid, SIGINT), 0);
    double t0 = now();
    int status = wait_exit(pid, deadline(30));
    if (now() - t0 > 1.5) fail_msg("gckpt-run took %.2f s to end after the second signal", now() - t0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGINT)
        fail_msg("wait status %d: not killed by the second SIGINT", status);
    no_temp_files();
    char *now_text = slurp("report.json", true);
    assert_string_equal(now_text, old);
    free(now_text);
    free(old);
}

static int setup(void **st)
{
    (void)st;
    t_start = now();
    if (!cli_setup("gckpt-interrupt-test")) return -1;
    static const uint32_t every[] = {0, 1, 2, 3};
    char *plan = pf_plan_text("tiny-gpt2", GCKPT_AMP_BF16, GCKPT_SDPA, every, 4, 1, 1, 0);
    if (!plan) return -1;
    cli_write("plan.json", plan);
    free(plan);
    gckpt_err err = {{0}};
    char *text = gckpt_read_file(GCKPT_REPORT_SCHEMA_FILE, 1u << 20, &err);
    if (!text) return -1;
    schema = cJSON_Parse(text);
    free(text);
    return schema ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    cli_teardown();
    cJSON_Delete(schema);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigint),
        cmocka_unit_test(test_sigterm),
        cmocka_unit_test(test_second_signal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
