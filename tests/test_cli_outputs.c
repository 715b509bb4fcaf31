/* gckpt-plan's outputs cannot be turned against the user: no link is followed (not even a
 * temporary name planted for a predictable PID), devices, FIFOs and links are refused, an
 * output is never an input, every output is checked before any work and a failure
 * anywhere (gnuplot included, its stderr condensed) leaves no new file and every existing
 * one untouched; a failed write to stdout is exit 2; names reach the terminal, the table
 * and the plot sanitised. Cases that need root (mknod) or PID namespaces (unshare) are
 * skipped without them. */
#define _GNU_SOURCE /* mknod */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_harness.h"
#include "gckpt/util/atomic_file.h"

#ifndef GCKPT_PLAN_EXE
#error GCKPT_PLAN_EXE must name the gckpt-plan binary
#endif

static char err[8192];

static int plan(char *const args[]) { return cli_run(GCKPT_PLAN_EXE, args, NULL, err, sizeof err); }

static char *slurp(const char *name) { return cli_slurp(name); }

static void assert_content(const char *name, const char *want)
{
    char *t = slurp(name);
    if (!t || strcmp(t, want)) fail_msg("%s: \"%s\", expected \"%s\"", name, t ? t : "(unreadable)", want);
    free(t);
}

/* stderr is exactly one line and holds needle */
static void one_line(const char *what, const char *needle)
{
    size_t len = strlen(err);
    if (len == 0 || err[len - 1] != '\n' || memchr(err, '\n', len - 1)) fail_msg("%s: stderr is not one line: '%s'", what, err);
    if (!strstr(err, needle)) fail_msg("%s: '%s' does not mention '%s'", what, err, needle);
}

/* No temporary of ours and none of the named files in the scratch directory. */
static void absent(const char *const *names)
{
    cli_assert_no_temporaries(cli_dir);
    for (int i = 0; names && names[i]; i++)
        if (cli_exists(names[i])) fail_msg("%s was written", names[i]);
}

/* models/ and devices/ (ctest sets GCKPT_DATA_DIR) */
static const char *data_dir(void)
{
    const char *d = getenv("GCKPT_DATA_DIR");
    return d && *d ? d : GCKPT_TEST_DATA "/..";
}

static void copy_data(const char *sub, const char *name, const char *to)
{
    char src[1024];
    snprintf(src, sizeof src, "%s/%s/%s.json", data_dir(), sub, name);
    gckpt_err e = {{0}};
    char *t = gckpt_read_file(src, 1u << 20, &e);
    if (!t) fail_msg("%s", e.msg);
    cli_write(to, t);
    free(t);
}

static bool can_unshare_pid(void)
{
    char e[256];
    return cli_run("/usr/bin/unshare", A("--pid", "--fork", "/bin/true"), NULL, e, sizeof e) == 0;
}

/* 1. A link planted at the temporary name an older gckpt-plan used in a fresh PID
 * namespace (PLAN.tmp.1) is not followed; the file it points to keeps its content. */
static void test_planted_link(void **st)
{
    (void)st;
    if (!can_unshare_pid()) skip();
    cli_write("victim", "secret");
    char v[512], l[512];
    cli_path("victim", v, sizeof v);
    for (int pid = 1; pid <= 3; pid++) {
        snprintf(l, sizeof l, "%s/plan.json.tmp.%d", cli_dir, pid);
        assert_int_equal(symlink(v, l), 0);
    }
    int rc = cli_run("/usr/bin/unshare",
                     A("--pid", "--fork", GCKPT_PLAN_EXE, "--model", "gpt2", "--seq", "128", "--every-n", "off,1", "-q", "-o", "plan.json"),
                     NULL, err, sizeof err);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_content("victim", "secret");
    char *t = slurp("plan.json");
    assert_non_null(t);
    assert_non_null(strstr(t, "\"gckpt.plan/2\""));
    free(t);
    struct stat s;
    cli_path("plan.json", l, sizeof l);
    assert_int_equal(lstat(l, &s), 0);
    assert_true(S_ISREG(s.st_mode));
    for (int pid = 1; pid <= 3; pid++) {
        snprintf(l, sizeof l, "%s/plan.json.tmp.%d", cli_dir, pid);
        unlink(l);
    }
    absent(NULL);
}

/* 2. Outputs that exist and are not regular files are refused and stay what they were. */
static void test_non_regular_outputs(void **st)
{
    (void)st;
    char p[512];
    cli_path("fifo.json", p, sizeof p);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(plan(A("--model", "gpt2", "--seq", "128", "-o", "fifo.json")), 2);
    one_line("FIFO output", "a FIFO, not a regular file");
    struct stat s;
    assert_int_equal(lstat(p, &s), 0);
    assert_true(S_ISFIFO(s.st_mode));
    /* a link to stdout, as /dev/stdout is */
    cli_path("stdout", p, sizeof p);
    assert_int_equal(symlink("/proc/self/fd/1", p), 0);
    assert_int_equal(plan(A("--model", "gpt2", "--seq", "128", "-o", "stdout")), 2);
    one_line("link output", "symbolic link");
    assert_int_equal(lstat(p, &s), 0);
    assert_true(S_ISLNK(s.st_mode));
    /* a side file of the plot that is a FIFO: nothing at all is written */
    cli_path("p.png.gp", p, sizeof p);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(plan(A("--model", "gpt2", "--seq", "128", "-o", "plan2.json", "--plot", "p.png")), 2);
    one_line("FIFO side file", "p.png.gp");
    absent((const char *[]){"plan2.json", "p.png", "p.png.entries.dat", "p.png.timeline.dat", NULL});
    unlink(p);
    /* device nodes, as /dev/null and /dev/full are (mknod needs root) */
    static const struct {
        const char *name;
        unsigned minor;
    } dev[] = {{"null", 3}, {"full", 7}};
    for (int i = 0; i < 2; i++) {
        cli_path(dev[i].name, p, sizeof p);
        if (mknod(p, S_IFCHR | 0666, makedev(1, dev[i].minor)) != 0) {
            printf("(mknod %s: %s: device case not run)\n", dev[i].name, strerror(errno));
            continue;
        }
        assert_int_equal(plan(A("--model", "gpt2", "--seq", "128", "-o", (char *)dev[i].name)), 2);
        one_line("device output", "a character device");
        assert_int_equal(lstat(p, &s), 0);
        assert_true(S_ISCHR(s.st_mode));
        unlink(p);
    }
    absent(NULL);
}

/* 3. An output that is one of the inputs (same file, whatever the spelling) is refused
 * and the input is unchanged. */
static void test_output_is_input(void **st)
{
    (void)st;
    copy_data("models", "gpt2", "x.json");
    copy_data("devices", "h100-sxm-80gb", "g.json");
    copy_data("devices", "h100-sxm-80gb", "p.png.timeline.dat");
    char *model = slurp("x.json"), *gpu = slurp("g.json");
    char a[512], b[512];
    cli_path("x.json", a, sizeof a);
    cli_path("hard.json", b, sizeof b);
    assert_int_equal(link(a, b), 0);
    struct {
        const char *what;
        char *const *args;
    } cases[] = {
        {"-o the model", A("--model", "./x.json", "--seq", "128", "-o", "x.json")},
        {"-o the model, other spelling", A("--model", "x.json", "--seq", "128", "-o", "./x.json")},
        {"-o a hard link of the model", A("--model", "./x.json", "--seq", "128", "-o", "hard.json")},
        {"-o the gpu", A("--model", "gpt2", "--seq", "128", "--gpu", "./g.json", "-o", "g.json")},
        {"a plot side file is the gpu", A("--model", "gpt2", "--seq", "128", "--gpu", "./p.png.timeline.dat", "--plot", "p.png")},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = plan(cases[i].args);
        if (rc != 2) fail_msg("%s: exit %d (%s)", cases[i].what, rc, err);
        one_line(cases[i].what, "is the input");
        assert_content("x.json", model);
        assert_content("g.json", gpu);
        assert_content("p.png.timeline.dat", gpu);
    }
    free(model);
    free(gpu);
    unlink(b);
    cli_path("p.png.timeline.dat", b, sizeof b);
    unlink(b);
    absent((const char *[]){"p.png", "p.png.gp", "p.png.entries.dat", NULL});
}

/* 4. Every output is checked before any work; a failure anywhere, gnuplot's included,
 * leaves no new file and the existing plan untouched; gnuplot's stderr becomes one line. */
static void test_checked_first(void **st)
{
    (void)st;
    cli_write("plan.json", "precious");
    struct {
        const char *what, *needle;
        char *const *args;
    } cases[] = {
        {"plot into a missing directory", "nodir", A("--model", "gpt2", "--seq", "128", "-o", "plan.json", "--plot", "nodir/p.png")},
        {"plan into a missing directory", "nodir", A("--model", "gpt2", "--seq", "128", "-o", "nodir/plan.json", "--plot", "p.png")},
        {"plan is the plot's script", "the same file", A("--model", "gpt2", "--seq", "128", "-o", "p.png.gp", "--plot", "p.png")},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = plan(cases[i].args);
        if (rc != 2) fail_msg("%s: exit %d (%s)", cases[i].what, rc, err);
        one_line(cases[i].what, cases[i].needle);
        assert_content("plan.json", "precious");
        absent((const char *[]){"p.png", "p.png.gp", "p.png.entries.dat", "p.png.timeline.dat", NULL});
    }
    /* a gnuplot that fails with several lines on stderr */
    char bin[512], gp[512];
    cli_path("bin", bin, sizeof bin);
    assert_int_equal(mkdir(bin, 0755), 0);
    cli_path("bin/gnuplot", gp, sizeof gp);
    FILE *f = fopen(gp, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\ncat >/dev/null\necho 'gnuplot> plot x' >&2\necho '         ^' >&2\n"
          "echo '         line 3: cannot open file' >&2\necho '         line 9: undefined variable: y' >&2\nexit 1\n",
          f);
    fclose(f);
    chmod(gp, 0755);
    cli_opts o = {.path_env = bin};
    int rc = cli_run_opts(GCKPT_PLAN_EXE, A("--model", "gpt2", "--seq", "128", "-q", "-o", "plan.json", "--plot", "p.png"), &o,
                          err, sizeof err);
    if (rc != 2) fail_msg("failing gnuplot: exit %d (%s)", rc, err);
    one_line("failing gnuplot", "gnuplot failed (exit 1): cannot open file (and 1 more error)");
    assert_content("plan.json", "precious");
    absent((const char *[]){"p.png", "p.png.gp", "p.png.entries.dat", "p.png.timeline.dat", NULL});
    unlink(gp);
    rmdir(bin);
}

/* 5. A write error on stdout is exit 2 with one line, and then no file is written. */
static void test_stdout_errors(void **st)
{
    (void)st;
    struct {
        const char *what;
        cli_opts o;
        char *const *args;
        int want;
    } cases[] = {
        {"table to /dev/full", {.stdout_file = "/dev/full"}, A("--model", "gpt2", "--seq", "128", "-o", "s1.json"), 2},
        {"-o - to /dev/full", {.stdout_file = "/dev/full"}, A("--model", "gpt2", "--seq", "128", "-q", "-o", "-"), 2},
        {"closed stdout", {.close_stdout = true}, A("--model", "gpt2", "--seq", "128", "-o", "s2.json"), 2},
        {"closed stdout, -o -", {.close_stdout = true}, A("--model", "gpt2", "--seq", "128", "-q", "-o", "-"), 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = cli_run_opts(GCKPT_PLAN_EXE, cases[i].args, &cases[i].o, err, sizeof err);
        if (rc != cases[i].want) fail_msg("%s: exit %d (%s)", cases[i].what, rc, err);
        one_line(cases[i].what, "stdout: write error");
    }
    absent((const char *[]){"s1.json", "s2.json", NULL});
    /* with nothing for stdout, a closed stdout is fine, and the plan does not land on it */
    cli_opts closed = {.close_stdout = true};
    assert_int_equal(cli_run_opts(GCKPT_PLAN_EXE, A("--model", "gpt2", "--seq", "128", "-q", "-o", "s3.json"), &closed, err, sizeof err), 0);
    char *t = slurp("s3.json");
    assert_non_null(t);
    assert_true(t[0] == '{');
    free(t);
}

static void no_controls(const char *what, const char *text)
{
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        bool c1 = c[0] == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F;
        if (*c == 0x1B || *c == 0x07 || *c == 0x9B || c1) fail_msg("%s holds a control byte 0x%02x at %td", what, *c, (const char *)c - text);
    }
}

/* 6. Model and device names with terminal controls reach stdout, stderr, the plan and the
 * plot sanitised. */
static void test_names_sanitised(void **st)
{
    (void)st;
    copy_data("models", "gpt2", "m\x1b[2J\x1b]0;owned\x07.json");
    char *dev = NULL;
    {
        char src[1024];
        snprintf(src, sizeof src, "%s/devices/h100-sxm-80gb.json", data_dir());
        gckpt_err e = {{0}};
        char *t = gckpt_read_file(src, 1u << 20, &e);
        assert_non_null(t);
        char *name = strstr(t, "\"name\"");
        assert_non_null(name);
        char *q1 = strchr(name + 6, '"'), *q2 = q1 ? strchr(q1 + 1, '"') : NULL;
        assert_non_null(q2);
        size_t n = strlen(t) + 64;
        dev = malloc(n);
        snprintf(dev, n, "%.*s\"Evil\\u001b[31mGPU\\u009b2J\\u0007\\u202e\"%s", (int)(q1 - t), t, q2 + 1);
        free(t);
    }
    cli_write("evil-gpu.json", dev);
    free(dev);
    int rc = plan(A("--model", "./m\x1b[2J\x1b]0;owned\x07.json", "--gpu", "./evil-gpu.json", "--seq", "128", "--every-n", "off,1",
                    "-o", "e.json", "--plot", "e.svg"));
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(cli_out, "Evil?[31mGPU?2J??"));
    assert_non_null(strstr(cli_out, "m?[2J?]0;owned?"));
    no_controls("stdout", cli_out);
    no_controls("stderr", err);
    const char *files[] = {"e.json", "e.svg.gp", "e.svg"};
    for (int i = 0; i < 3; i++) {
        char *t = slurp(files[i]);
        if (!t) continue; /* e.svg without gnuplot */
        no_controls(files[i], t);
        free(t);
    }
    /* an error message quoting the name is sanitised too */
    rc = plan(A("--model", "./absent\x1b]0;owned\x07\xc2\x9b.json", "--seq", "128"));
    assert_int_equal(rc, 2);
    no_controls("stderr", err);
    /* and so is an option's value echoed back */
    rc = plan(A("--precision", "\x1b]0;owned\x07"));
    assert_int_equal(rc, 2);
    no_controls("stderr", err);
    /* --list shows file names sanitised */
    rc = plan(A("--list"));
    no_controls("stdout", cli_out);
}

int main(void)
{
    if (!cli_setup("gckpt-cli-out")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_link),     cmocka_unit_test(test_non_regular_outputs),
        cmocka_unit_test(test_output_is_input),  cmocka_unit_test(test_checked_first),
        cmocka_unit_test(test_stdout_errors),    cmocka_unit_test(test_names_sanitised),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cli_teardown();
    return rc;
}
