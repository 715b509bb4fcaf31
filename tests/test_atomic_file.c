/* The atomic writer (util/atomic_file.c) and the up-front output checks
 * (util/outpath.c): unpredictable temporaries created without following links, stale
 * temporaries of killed writers removed and live ones kept, commit / abort / append, and
 * refusals of outputs that are links, devices, FIFOs, directories or inputs. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_harness.h"
#include "gckpt/util/atomic_file.h"
#include "gckpt/util/outpath.h"

static pid_t child; /* a live writer of test_stale_temporaries, killed on every path */

static int setup(void **st)
{
    (void)st;
    return cli_setup("gckpt-afile") ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    cli_teardown();
    return 0;
}

static int count_temps(void)
{
    DIR *d = opendir(cli_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strstr(e->d_name, GCKPT_TMP_MARK) != NULL;
    closedir(d);
    return n;
}

static char *slurp(const char *name)
{
    char p[512];
    cli_path(name, p, sizeof p);
    gckpt_err err = {{0}};
    return gckpt_read_file(p, 1u << 20, &err);
}

/* Two writers of one target get different temporaries, each commit is whole, and
 * nothing is left behind. */
static void test_commit_and_abort(void **st)
{
    (void)st;
    char p[512];
    cli_path("t.json", p, sizeof p);
    gckpt_afile a, b;
    gckpt_err err = {{0}};
    assert_true(gckpt_afile_open(&a, p, &err));
    assert_true(gckpt_afile_open(&b, p, &err));
    assert_string_not_equal(a.tmp, b.tmp);
    assert_non_null(strstr(a.tmp, "t.json" GCKPT_TMP_MARK));
    assert_int_equal(count_temps(), 2);
    assert_true(gckpt_afile_write(&a, "first\n", 6, &err));
    assert_true(gckpt_afile_write(&b, "second\n", 7, &err));
    assert_true(gckpt_afile_commit(&a, false, &err));
    char *t = slurp("t.json");
    assert_string_equal(t, "first\n");
    free(t);
    gckpt_afile_abort(&b); /* the other writer gives up: the file stays as it was */
    t = slurp("t.json");
    assert_string_equal(t, "first\n");
    free(t);
    assert_int_equal(count_temps(), 0);
    /* the replaced file keeps its permissions */
    assert_int_equal(chmod(p, 0640), 0);
    assert_true(gckpt_write_file_atomic(p, "third\n", &err));
    struct stat s;
    assert_int_equal(stat(p, &s), 0);
    assert_int_equal(s.st_mode & 07777, 0640);
}

/* After a keep_open commit the file takes appends; a replacement by someone else is seen. */
static void test_append_and_replaced(void **st)
{
    (void)st;
    char p[512];
    cli_path("r.jsonl", p, sizeof p);
    gckpt_afile a;
    gckpt_err err = {{0}};
    assert_true(gckpt_afile_open(&a, p, &err));
    assert_true(gckpt_afile_write(&a, "1\n", 2, &err));
    assert_true(gckpt_afile_commit(&a, true, &err));
    assert_true(gckpt_afile_write(&a, "2\n", 2, &err));
    assert_true(gckpt_afile_sync(&a, &err));
    char *t = slurp("r.jsonl");
    assert_string_equal(t, "1\n2\n");
    free(t);
    assert_true(gckpt_afile_still_target(&a));
    assert_true(gckpt_write_file_atomic(p, "other\n", &err));
    assert_false(gckpt_afile_still_target(&a));
    gckpt_afile_close(&a);
}

/* A temporary left by a killed writer (our pattern, unlocked) is removed by the next
 * writer of the same target; a live writer's (locked) temporary, other targets'
 * temporaries and files that only look similar are kept. */
static void test_stale_temporaries(void **st)
{
    (void)st;
    char p[512];
    cli_path("s.json", p, sizeof p);
    cli_write("s.json" GCKPT_TMP_MARK "AbCd1234", "left by kill -9");
    cli_write("other.json" GCKPT_TMP_MARK "AbCd1234", "another target's");
    cli_write("s.json" GCKPT_TMP_MARK "short", "not our pattern");
    char lp[512], fp[512];
    cli_path("s.json" GCKPT_TMP_MARK "Link0000", lp, sizeof lp);
    cli_path("victim", fp, sizeof fp);
    cli_write("victim", "keep");
    assert_int_equal(symlink(fp, lp), 0);
    gckpt_afile a;
    gckpt_err err = {{0}};
    assert_true(gckpt_afile_open(&a, p, &err));
    assert_int_equal(a.removed, 1);
    assert_false(cli_exists("s.json" GCKPT_TMP_MARK "AbCd1234"));
    assert_true(cli_exists("other.json" GCKPT_TMP_MARK "AbCd1234"));
    assert_true(cli_exists("s.json" GCKPT_TMP_MARK "short"));
    struct stat ls;
    assert_int_equal(lstat(lp, &ls), 0); /* a link is not ours: kept, not followed */
    gckpt_afile_abort(&a);
    /* a live writer in another process holds its lock: its temporary is kept */
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        gckpt_afile live;
        gckpt_err e = {{0}};
        if (!gckpt_afile_open(&live, p, &e)) _exit(1);
        if (write(pipefd[1], live.tmp, sizeof live.tmp) != (ssize_t)sizeof live.tmp) _exit(1);
        pause(); /* killed by the test */
        _exit(0);
    }
    char live_name[256];
    assert_int_equal(read(pipefd[0], live_name, sizeof live_name), (ssize_t)sizeof live_name);
    assert_true(gckpt_afile_open(&a, p, &err));
    assert_int_equal(a.removed, 0);
    assert_true(cli_exists(live_name));
    gckpt_afile_abort(&a);
    /* once the live writer is killed, its temporary is a leftover */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    child = 0;
    assert_true(cli_exists(live_name));
    assert_true(gckpt_afile_open(&a, p, &err));
    assert_int_equal(a.removed, 1);
    assert_false(cli_exists(live_name));
    gckpt_afile_abort(&a);
    char *t = slurp("victim");
    assert_string_equal(t, "keep");
    free(t);
    close(pipefd[0]);
    close(pipefd[1]);
    unlink(lp);
    cli_path("other.json" GCKPT_TMP_MARK "AbCd1234", lp, sizeof lp);
    unlink(lp);
    cli_path("s.json" GCKPT_TMP_MARK "short", lp, sizeof lp);
    unlink(lp);
}

/* Outputs that must not be written, named before any work. */
static void test_outpath_refusals(void **st)
{
    (void)st;
    char in[512], lnk[512], fifo[512], dir[512], hard[512], missing[512], ok[512], same[512];
    cli_write("in.json", "{}");
    cli_path("in.json", in, sizeof in);
    cli_path("link.json", lnk, sizeof lnk);
    cli_path("fifo.json", fifo, sizeof fifo);
    cli_path("adir", dir, sizeof dir);
    cli_path("hard.json", hard, sizeof hard);
    cli_path("nodir/x.json", missing, sizeof missing);
    cli_path("new.json", ok, sizeof ok);
    cli_path("./new.json", same, sizeof same);
    assert_int_equal(symlink(in, lnk), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(link(in, hard), 0);
    const char *ins[] = {in, NULL};
    struct {
        const char *out, *want;
    } cases[] = {
        {lnk, "symbolic link"}, {fifo, "a FIFO, not a regular file"}, {dir, "is a directory"},
        {in, "is the input"},    {hard, "is the input"},                {missing, "No such file or directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gckpt_err err = {{0}};
        const char *outs[] = {cases[i].out};
        assert_false(gckpt_outpath_check(outs, 1, ins, 2, &err));
        if (!strstr(err.msg, cases[i].want)) fail_msg("%s: \"%s\" lacks \"%s\"", cases[i].out, err.msg, cases[i].want);
    }
    gckpt_err err = {{0}};
    const char *two[] = {ok, "-", same};
    assert_false(gckpt_outpath_check(two, 3, ins, 1, &err));
    assert_non_null(strstr(err.msg, "the same file"));
    const char *good[] = {ok, "-", NULL, lnk};
    assert_true(gckpt_outpath_check(good, 2, ins, 1, &err));
    assert_int_equal(count_temps(), 0);
    assert_false(cli_exists("new.json")); /* checking creates nothing */
    struct stat s;
    assert_int_equal(lstat(fifo, &s), 0);
    assert_true(S_ISFIFO(s.st_mode));
    unlink(lnk);
    unlink(fifo);
    unlink(hard);
    rmdir(dir);
}

/* A device node as the output (as root: mknod; skipped otherwise): refused, the node kept. */
static void test_device_output(void **st)
{
    (void)st;
    char node[512];
    cli_path("null", node, sizeof node);
    if (mknod(node, S_IFCHR | 0666, makedev(1, 3)) != 0) skip();
    gckpt_err err = {{0}};
    const char *outs[] = {node};
    assert_false(gckpt_outpath_check(outs, 1, NULL, 0, &err));
    assert_non_null(strstr(err.msg, "a character device"));
    /* and the writer itself refuses to rename over it */
    gckpt_afile a;
    assert_true(gckpt_afile_open(&a, node, &err));
    assert_false(gckpt_afile_commit(&a, false, &err));
    struct stat s;
    assert_int_equal(lstat(node, &s), 0);
    assert_true(S_ISCHR(s.st_mode));
    assert_int_equal(count_temps(), 0);
    unlink(node);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_and_abort),  cmocka_unit_test(test_append_and_replaced),
        cmocka_unit_test(test_stale_temporaries), cmocka_unit_test(test_outpath_refusals),
        cmocka_unit_test(test_device_output),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
