#include "cli_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

char cli_dir[256];
char cli_out[1 << 16];

bool cli_setup(const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(cli_dir, sizeof cli_dir, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    return mkdtemp(cli_dir) != NULL;
}

void cli_teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cli_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", cli_dir);
}

void cli_path(const char *name, char *out, size_t n) { snprintf(out, n, "%s/%s", cli_dir, name); }

void cli_write(const char *name, const char *text)
{
    char path[512];
    cli_path(name, path, sizeof path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

bool cli_exists(const char *name)
{
    char path[512];
    cli_path(name, path, sizeof path);
    struct stat s;
    return stat(path, &s) == 0;
}

static void slurp(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = 0;
    if (f) fclose(f);
}

int cli_run(const char *exe, char *const args[], const char *path_env, char *err, size_t n)
{
    char errpath[512], outpath[512];
    cli_path("stderr.txt", errpath, sizeof errpath);
    cli_path("stdout.txt", outpath, sizeof outpath);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int ofd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || ofd < 0) _exit(99);
        dup2(fd, 2);
        dup2(ofd, 1);
        if (path_env) setenv("PATH", path_env, 1);
        char *argv[64] = {(char *)exe};
        int k = 1;
        for (int i = 0; args[i] && k < 63; i++) argv[k++] = args[i];
        argv[k] = NULL;
        if (chdir(cli_dir) != 0) _exit(98);
        execv(exe, argv);
        _exit(97);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    slurp(errpath, err, n);
    slurp(outpath, cli_out, sizeof cli_out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
