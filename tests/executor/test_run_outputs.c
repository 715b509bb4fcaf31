/* gckpt-run's outputs and its end: the report path is checked before any entry runs (a
 * missing directory, a device, FIFO or link, the plan itself), stdout write errors are
 * exit 2, names reach the terminal sanitised, two runs in different PID namespaces
 * writing one report both finish, a temporary left by kill -9 is removed by the next run,
 * the bytes written grow linearly with the entries, and a run stuck outside a safe point
 * ends within the watchdog's grace time after SIGTERM with the report of its last safe
 * point; gckpt.TrainerCallback's reports are read by the same reader. Cases that need root
 * (mknod) or PID namespaces (unshare) are skipped without. */
#define _GNU_SOURCE /* mknod, waitid */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_harness.h"
#include "gckpt/util/atomic_file.h"
#include "gckpt/util/jsonget.h"
#include "plan_fixture.h"
#include "report_fixture.h"

static char err[1 << 16];
static cJSON *schema;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nap(int ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int run(char *const args[]) { return cli_run(GCKPT_RUN_EXE, args, NULL, err, sizeof err); }

static char *slurp(const char *name) { return cli_slurp(name); }

static cJSON *report(const char *name)
{
    char p[512], why[700];
    cli_path(name, p, sizeof p);
    cJSON *doc = rf_load_valid(p, schema, why, sizeof why);
    if (!doc) fail_msg("%s", why);
    return doc;
}

/* how many lines of stderr hold needle; and stderr has that one at least */
static int lines_with(const char *needle)
{
    int n = 0;
    for (const char *p = err; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* A plan of the tiny gpt2 with the given micro-batches, every_n off and 1, budget (0: the GPU's). */
static void write_plan(const char *name, const char *fixture, const uint64_t *mbs, int nmb, uint64_t budget)
{
    gckpt_plan_request req = {.seq = 16, .n_micro = nmb, .grad_accum = 1, .precision = GCKPT_AMP_BF16,
                              .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH,
                              .margin = 0.05, .budget_bytes = budget};
    memcpy(req.micro_batches, mbs, sizeof *mbs * (size_t)nmb);
    snprintf(req.model_ref, sizeof req.model_ref, "%s/%s.json", GCKPT_TEST_DATA, fixture);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[] = {0, 1};
    req.every_n = ev;
    req.n_every = 2;
    gckpt_plan p;
    gckpt_err e = {{0}};
    if (!gckpt_plan_run(&req, &p, &e)) fail_msg("plan: %s", e.msg);
    char *t = gckpt_json_text(gckpt_plan_to_json(&p, false), true);
    gckpt_plan_free(&p);
    assert_non_null(t);
    cli_write(name, t);
    free(t);
}

static bool can_unshare_pid(void)
{
    char e[256];
    return cli_run("/usr/bin/unshare", A("--pid", "--fork", "/bin/true"), NULL, e, sizeof e) == 0;
}

/* Start gckpt-run in the scratch directory (argv[0] is the program), output in files
 * named after tag; env entries "NAME=value". */
static pid_t spawn(char *const argv[], const char *tag, const char *const *env)
{
    cli_spawn_opts o = {.tag = tag, .env = env};
    return cli_spawn(argv, &o);
}

static int wait_bounded(pid_t pid, double seconds) { return cli_wait(pid, seconds); }

static bool has_temporary(void)
{
    DIR *d = opendir(cli_dir);
    assert_non_null(d);
    struct dirent *e;
    bool found = false;
    /* ours, and the PID-named ones of older versions */
    while (!found && (e = readdir(d))) found = strstr(e->d_name, GCKPT_TMP_MARK) || strstr(e->d_name, ".json.tmp.");
    closedir(d);
    return found;
}

/* ---- the report path, checked before any entry runs --------------------------------------- */

static void test_output_checked_first(void **st)
{
    (void)st;
    cli_write("keep.json", "precious");
    struct {
        const char *what, *needle;
        char *const *args;
    } cases[] = {
        {"missing directory", "nodir", A("--backend", "host", "--plan", "tiny.json", "--all", "-o", "nodir/r.json")},
        {"the plan itself", "is the input", A("--backend", "host", "--plan", "tiny.json", "--all", "-o", "tiny.json")},
        {"the plan, other spelling", "is the input", A("--backend", "host", "--plan", "./tiny.json", "--all", "-o", "tiny.json")},
        {"a link", "symbolic link", A("--backend", "host", "--plan", "tiny.json", "--all", "-o", "link.json")},
        {"a FIFO", "a FIFO", A("--backend", "host", "--plan", "tiny.json", "--all", "-o", "fifo.json")},
    };
    char p[512], l[512];
    cli_path("keep.json", p, sizeof p);
    cli_path("link.json", l, sizeof l);
    assert_int_equal(symlink(p, l), 0);
    cli_path("fifo.json", p, sizeof p);
    assert_int_equal(mkfifo(p, 0600), 0);
    char *plan = slurp("tiny.json");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = run(cases[i].args);
        if (rc != 2) fail_msg("%s: exit %d (%s)", cases[i].what, rc, err);
        if (lines_with("\n") != 1 || !strstr(err, cases[i].needle)) fail_msg("%s: stderr '%s'", cases[i].what, err);
        char *t = slurp("tiny.json");
        assert_string_equal(t, plan);
        free(t);
    }
    free(plan);
    struct stat s;
    assert_int_equal(lstat(l, &s), 0);
    assert_true(S_ISLNK(s.st_mode));
    assert_int_equal(lstat(p, &s), 0);
    assert_true(S_ISFIFO(s.st_mode));
    char *k = slurp("keep.json");
    assert_string_equal(k, "precious");
    free(k);
    unlink(l);
    unlink(p);
    /* a device node (root only) */
    cli_path("null", p, sizeof p);
    if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        assert_int_equal(run(A("--backend", "host", "--plan", "tiny.json", "--all", "-o", "null")), 2);
        assert_non_null(strstr(err, "a character device"));
        assert_int_equal(lstat(p, &s), 0);
        assert_true(S_ISCHR(s.st_mode));
        unlink(p);
    } else {
        printf("(mknod: %s: device case not run)\n", strerror(errno));
    }
    assert_false(has_temporary());
}

/* A read-only directory (a read-only bind mount in a mount namespace of its own; skipped
 * without one): refused before any entry runs. */
static void test_read_only_directory(void **st)
{
    (void)st;
    char ro[600];
    cli_path("ro", ro, sizeof ro);
    assert_int_equal(mkdir(ro, 0755), 0);
    char script[2048];
    snprintf(script, sizeof script,
             "mount --bind '%s' '%s' && mount -o remount,bind,ro '%s' || exit 77; exec '%s' --backend host --plan tiny.json --all -o ro/r.json",
             ro, ro, ro, GCKPT_RUN_EXE);
    int rc = cli_run("/usr/bin/unshare", A("--mount", "/bin/sh", "-c", script), NULL, err, sizeof err);
    rmdir(ro);
    if (rc == 77 || (rc != 2 && strstr(err, "unshare"))) skip();
    if (rc != 2) fail_msg("exit %d: %s", rc, err);
    if (lines_with("\n") != 1 || !strstr(err, "Read-only file system")) fail_msg("stderr '%s'", err);
}

/* ---- stdout ------------------------------------------------------------------------------------ */

static void test_stdout_errors(void **st)
{
    (void)st;
    struct {
        const char *what;
        cli_opts o;
        char *const *args;
    } cases[] = {
        {"table to /dev/full", {.stdout_file = "/dev/full"}, A("--backend", "host", "--plan", "tiny.json", "--all", "--steps", "1", "-o", "s1.json")},
        {"closed stdout", {.close_stdout = true}, A("--backend", "host", "--plan", "tiny.json", "--all", "--steps", "1", "-o", "s2.json")},
        {"-o - to /dev/full", {.stdout_file = "/dev/full"}, A("--backend", "host", "--plan", "tiny.json", "--all", "--steps", "1", "-o", "-")},
        {"-o - to a closed stdout", {.close_stdout = true}, A("--backend", "host", "--plan", "tiny.json", "--all", "--steps", "1", "-o", "-")},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = cli_run_opts(GCKPT_RUN_EXE, cases[i].args, &cases[i].o, err, sizeof err);
        if (rc != 2) fail_msg("%s: exit %d (%s)", cases[i].what, rc, err);
        if (lines_with("stdout: write error") != 1) fail_msg("%s: stderr '%s'", cases[i].what, err);
    }
    /* the report itself is written, and the table never lands in it */
    cJSON *doc = report("s2.json");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "entries")), 3);
    cJSON_Delete(doc);
}

/* ---- names ------------------------------------------------------------------------------------- */

static void no_controls(const char *what, const char *text)
{
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        bool c1 = c[0] == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F;
        if (*c == 0x1B || *c == 0x07 || c1) fail_msg("%s holds a control byte 0x%02x: %s", what, *c, text);
    }
}

static void test_names_sanitised(void **st)
{
    (void)st;
    char *t = slurp("tiny.json");
    cJSON *plan = cJSON_Parse(t);
    free(t);
    pf_set(plan, "inputs.model.name", cJSON_CreateString("tiny\x1b]0;owned\x07gpt2\xc2\x9b" "2J"));
    pf_set(plan, "inputs.device.name", cJSON_CreateString("GPU\x1b[31m red"));
    t = cJSON_Print(plan);
    cJSON_Delete(plan);
    cli_write("evil.json", t);
    free(t);
    int rc = run(A("--backend", "host", "--plan", "evil.json", "--all", "--steps", "1", "-o", "e.json"));
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(cli_out, "tiny?]0;owned?gpt2?2J"));
    no_controls("stdout", cli_out);
    no_controls("stderr", err);
    t = slurp("e.json");
    no_controls("report", t);
    free(t);
}

/* ---- writers that collide ------------------------------------------------------------------- */

/* Two runs in their own PID namespaces (both PID 1) write one report, each holding its
 * temporary a while before the rename (for an older gckpt-run both names were
 * report.tmp.1): both finish, and the report is a whole one. */
static void test_pid_namespaces(void **st)
{
    (void)st;
    if (!can_unshare_pid()) skip();
    const char *env[] = {"GCKPT_TEST_RENAME_DELAY_MS=400", "GCKPT_RUN_TEST_RENAME_DELAY_MS=400", NULL};
    char *const argv[] = {"/usr/bin/unshare", "--pid", "--fork", GCKPT_RUN_HOOKS_EXE, "--backend", "host", "--plan", "tiny.json",
                          "--all", "--steps", "1", "-q", "-o", "same.json", NULL};
    pid_t a = spawn(argv, "ns1", env);
    nap(100);
    pid_t b = spawn(argv, "ns2", env);
    int sa = wait_bounded(a, 60), sb = wait_bounded(b, 60);
    char *ea = slurp("ns1.err"), *eb = slurp("ns2.err");
    if (!WIFEXITED(sa) || WEXITSTATUS(sa) || !WIFEXITED(sb) || WEXITSTATUS(sb))
        fail_msg("status %d / %d; stderr:\n%s\n%s", sa, sb, ea, eb);
    free(ea);
    free(eb);
    cJSON *doc = report("same.json");
    assert_true(cJSON_IsTrue(pf_at(doc, "summary.complete")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "entries")), 3);
    cJSON_Delete(doc);
    assert_false(has_temporary());
}

/* kill -9 while the report's temporary exists; the next run on the same path removes it. */
static void test_kill9_leftover(void **st)
{
    (void)st;
    /* the readiness file says the report's temporary is whole and held before its rename (a
     * temporary-looking name seen before then may be another, gone by the kill) */
    char ready[600], ready_env[700];
    cli_path("k9.ready", ready, sizeof ready);
    unlink(ready);
    snprintf(ready_env, sizeof ready_env, "GCKPT_TEST_RENAME_READY=%s", ready);
    const char *env[] = {"GCKPT_TEST_RENAME_DELAY_MS=5000", "GCKPT_RUN_TEST_RENAME_DELAY_MS=5000", ready_env, NULL};
    char *const argv[] = {GCKPT_RUN_HOOKS_EXE, "--backend", "host", "--plan", "tiny.json", "--all", "--steps", "1", "-q", "-o", "k.json", NULL};
    pid_t pid = spawn(argv, "k9", env);
    double until = now() + 30;
    while (access(ready, F_OK) != 0) {
        int s;
        if (waitpid(pid, &s, WNOHANG) == pid) fail_msg("gckpt-run ended (status %d) before its temporary appeared", s);
        if (now() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("no temporary in time");
        }
        nap(5);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_true(has_temporary()); /* the leftover */
    assert_int_equal(run(A("--backend", "host", "--plan", "tiny.json", "--all", "--steps", "1", "-q", "-o", "k.json")), 0);
    assert_false(has_temporary());
    cJSON *doc = report("k.json");
    assert_true(cJSON_IsTrue(pf_at(doc, "summary.complete")));
    cJSON_Delete(doc);
}

/* ---- cost ---------------------------------------------------------------------------------------- */

static unsigned long long io_field(pid_t pid, const char *field)
{
    char p[64], line[128];
    snprintf(p, sizeof p, "/proc/%d/io", (int)pid);
    FILE *f = fopen(p, "r");
    unsigned long long v = 0;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') v = strtoull(line + n + 1, NULL, 10);
    if (f) fclose(f);
    return v;
}

/* 64 micro-batches x 3 settings = 192 entries, none fits a 64 MiB budget: --all skips
 * them all, so the run is almost nothing but its report writes. Everything the process
 * writes (report, temporaries, stderr) must stay within a small multiple of what it
 * leaves: rewriting the report after every entry would write ~N/2 times the report. */
static void test_linear_writes(void **st)
{
    (void)st;
    uint64_t mbs[64];
    for (int i = 0; i < 64; i++) mbs[i] = (uint64_t)i + 1;
    write_plan("many.json", "tiny-llama", mbs, 64, 64u << 20);
    char *const argv[] = {GCKPT_RUN_EXE, "--backend", "host", "--plan", "many.json", "--all", "-q", "-o", "many-r.json", NULL};
    pid_t pid = spawn(argv, "many", NULL);
    siginfo_t si;
    double until = now() + 120;
    for (;;) { /* exited, not reaped: its /proc/PID/io is still there */
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | WNOHANG) == 0 && si.si_pid == pid) break;
        if (now() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("gckpt-run did not finish in 120 s");
        }
        nap(10);
    }
    unsigned long long wchar = io_field(pid, "wchar");
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct stat r, e;
    char p[512];
    cli_path("many-r.json", p, sizeof p);
    assert_int_equal(stat(p, &r), 0);
    cli_path("many.err", p, sizeof p);
    assert_int_equal(stat(p, &e), 0);
    double ratio = (double)wchar / (double)(r.st_size + e.st_size);
    printf("192 entries: %llu bytes written for a %lld-byte report and %lld bytes of stderr (%.2fx)\n", wchar,
           (long long)r.st_size, (long long)e.st_size, ratio);
    if (ratio > 2.0) fail_msg("the run wrote %.1f times what it left: not linear in the entries", ratio);
    cJSON *doc = report("many-r.json");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "entries")), 192);
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(doc, "summary.skipped")), 192);
    cJSON_Delete(doc);
}

/* ---- the watchdog ------------------------------------------------------------------------- */

/* Entry 0 (micro-batch 32) does not fit and is skipped; entry 1 runs and stalls inside
 * the backend (GCKPT_TEST_HOST_STALL_MS, as a library call that never returns). SIGTERM:
 * the run must end 5 s later with status 143 and the report of its last safe point. */
static void test_watchdog(void **st)
{
    (void)st;
    uint64_t mbs[] = {1, 32};
    write_plan("mixed.json", "tiny-gpt2", mbs, 2, 0);
    /* a budget between the two micro-batches' device peaks */
    char *t = slurp("mixed.json");
    cJSON *plan = cJSON_Parse(t);
    free(t);
    double small = cJSON_GetNumberValue(pf_at(plan, "entries[0].memory.device_peak_bytes"));
    double big = 0;
    int big_i = -1, small_i = 0;
    cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(plan, "entries")) {
        double d = cJSON_GetNumberValue(pf_at(e, "memory.device_peak_bytes"));
        if (d > big) big = d, big_i = i;
        if (d < small) small = d, small_i = i;
        i++;
    }
    cJSON_Delete(plan);
    assert_true(big > small);
    write_plan("mixed.json", "tiny-gpt2", mbs, 2, (uint64_t)((small + big) / 2 / 0.95));
    char sel[32];
    snprintf(sel, sizeof sel, "%d,%d", big_i, small_i);
    /* the skipped entry's record is written, then the second entry starts and stalls in its
     * first forward kernel, where the hook creates the ready file: the signal waits for it */
    char ready[512], ready_env[600];
    cli_path("stall.ready", ready, sizeof ready);
    snprintf(ready_env, sizeof ready_env, "GCKPT_TEST_READY_FILE=%s", ready);
    const char *env[] = {"GCKPT_TEST_HOST_STALL_MS=60000", ready_env, NULL};
    char *const argv[] = {GCKPT_RUN_HOOKS_EXE, "--backend", "host", "--plan", "mixed.json", "--entry", sel, "--steps", "1", "-q",
                          "-o", "w.json", NULL};
    pid_t pid = spawn(argv, "wd", env);
    double until = now() + 60;
    struct stat s;
    while (stat(ready, &s) != 0) {
        if (now() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("the second entry did not reach its stall within 60 s");
        }
        nap(5);
    }
    assert_int_equal(kill(pid, SIGTERM), 0);
    double t0 = now();
    int status = wait_bounded(pid, 30);
    double took = now() - t0;
    char *errs = slurp("wd.err");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 143) fail_msg("status %d; stderr: %s", status, errs);
    if (took < 4.5 || took > 9) fail_msg("ended %.1f s after SIGTERM (the grace time is 5 s)", took);
    assert_non_null(strstr(errs, "no safe point was reached within 5 s"));
    free(errs);
    cJSON *doc = report("w.json");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "entries")), 2);
    assert_string_equal(cJSON_GetStringValue(pf_at(doc, "entries[0].status")), "skipped");
    assert_string_equal(cJSON_GetStringValue(pf_at(doc, "entries[1].status")), "interrupted");
    assert_non_null(strstr(cJSON_GetStringValue(pf_at(doc, "entries[1].message")), "stopped by SIGTERM: no safe point"));
    assert_string_equal(cJSON_GetStringValue(pf_at(doc, "summary.signal")), "SIGTERM");
    assert_true(cJSON_IsTrue(pf_at(doc, "summary.ended")));
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(doc, "summary.interrupted")), 1);
    cJSON_Delete(doc);
    assert_false(has_temporary());
}

static int setup(void **st)
{
    (void)st;
    if (!cli_setup("gckpt-run-out")) return -1;
    static const uint32_t every[] = {0, 1};
    char *plan = pf_plan_text("tiny-gpt2", GCKPT_AMP_BF16, GCKPT_SDPA, every, 2, 1, 1, 0);
    if (!plan) return -1;
    cli_write("tiny.json", plan);
    free(plan);
    schema = rf_schema();
    return schema ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    cJSON_Delete(schema);
    cli_teardown();
    return 0;
}

/* gckpt.TrainerCallback's reports (tests/data/dash: real Trainer runs on the CPU) read by the
 * one report reader: every line valid against its record's definition and the document
 * against the schema's top level, with its steps, warnings and rank; a file holding two
 * ranks' records, or a record of no known kind, is refused naming the line. */
#define CALLBACK_DATA GCKPT_TEST_DATA "/../../data/dash/"

static cJSON *callback_report(const char *name)
{
    char why[1024];
    cJSON *doc = rf_load_valid(name, schema, why, sizeof why);
    if (!doc) fail_msg("%s", why);
    return doc;
}

static void test_callback_reports(void **st)
{
    (void)st;
    cJSON *doc = callback_report(CALLBACK_DATA "callback.jsonl");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(doc, "steps");
    assert_int_equal(cJSON_GetArraySize(steps), 4);
    int i = 0;
    for (const cJSON *s = steps->child; s; s = s->next, i++) {
        assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, "step")), i + 1);
        assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "judged")), i > 0); /* step 1: not judged */
        assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, "entry")), 1);
    }
    assert_null(cJSON_GetObjectItemCaseSensitive(doc, "warnings"));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(doc, "backend")), "hf-trainer");
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(doc, "rank")), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "entries")), 1);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "summary"), "ended")));
    cJSON_Delete(doc);

    doc = callback_report(CALLBACK_DATA "callback-warn.jsonl");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(doc, "warnings");
    assert_int_equal(cJSON_GetArraySize(w), 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w->child, "code")), "optimizer");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w->child, "message")),
                        "optimizer: the plan has 'adamw', the run 'adamw-foreach'");
    cJSON_Delete(doc);

    doc = callback_report(CALLBACK_DATA "callback-ddp.rank1.jsonl");
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(doc, "rank")), 1);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "steps")), 4);
    cJSON_Delete(doc);

    /* rank 0's header, then a record of rank 1; then a record of no known kind */
    gckpt_err e = {{0}};
    char *text = gckpt_read_file(CALLBACK_DATA "callback.jsonl", 1u << 20, &e);
    assert_non_null(text);
    *strchr(text, '\n') = 0;
    static const struct { const char *line, *want; } bad[] = {
        {"{\"record\": \"warning\", \"rank\": 1, \"code\": \"seq\", \"message\": \"m\", \"planned\": 32, \"live\": 64}",
         "mixed.jsonl: line 2: field 'rank' = 1, the header's is 0: a report file holds one rank's records"},
        {"{\"record\": \"note\", \"rank\": 0}", "mixed.jsonl: line 2: field 'record' must be \"entry\", \"summary\", \"step\" or \"warning\""},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t n = strlen(text) + strlen(bad[k].line) + 3;
        char *t = malloc(n), p[512];
        snprintf(t, n, "%s\n%s\n", text, bad[k].line);
        cli_write("mixed.jsonl", t);
        free(t);
        cli_path("mixed.jsonl", p, sizeof p);
        e = (gckpt_err){{0}};
        cJSON *d = gckpt_report_load(p, &e);
        assert_null(d);
        if (!strstr(e.msg, bad[k].want)) fail_msg("got \"%s\", expected \"%s\"", e.msg, bad[k].want);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output_checked_first), cmocka_unit_test(test_read_only_directory),
        cmocka_unit_test(test_stdout_errors),
        cmocka_unit_test(test_names_sanitised),      cmocka_unit_test(test_pid_namespaces),
        cmocka_unit_test(test_kill9_leftover),       cmocka_unit_test(test_linear_writes),
        cmocka_unit_test(test_watchdog),             cmocka_unit_test(test_callback_reports),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
