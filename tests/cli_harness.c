#include "cli_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>

#include "gckpt/util/atomic_file.h"

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

char *cli_slurp(const char *name)
{
    char p[512];
    cli_path(name, p, sizeof p);
    gckpt_err e = {{0}};
    return gckpt_read_file(p, 1u << 30, &e);
}

void cli_assert_no_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, GCKPT_TMP_MARK)) fail_msg("temporary file %s left behind", e->d_name);
    closedir(d);
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
    cli_opts o = {.path_env = path_env};
    return cli_run_opts(exe, args, &o, err, n);
}

int cli_run_opts(const char *exe, char *const args[], const cli_opts *o, char *err, size_t n)
{
    char errpath[512], outpath[512];
    cli_path("stderr.txt", errpath, sizeof errpath);
    cli_path("stdout.txt", outpath, sizeof outpath);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int ofd = open(o->stdout_file ? o->stdout_file : outpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || ofd < 0) _exit(99);
        dup2(fd, 2);
        dup2(ofd, 1);
        close(fd);
        close(ofd);
        if (o->close_stdout) close(1);
        if (o->path_env) setenv("PATH", o->path_env, 1);
        for (int i = 0; i < 4 && o->env[i]; i++) {
            const char *eq = strchr(o->env[i], '=');
            char name[128];
            if (!eq || (size_t)(eq - o->env[i]) >= sizeof name) _exit(96);
            snprintf(name, sizeof name, "%.*s", (int)(eq - o->env[i]), o->env[i]);
            setenv(name, eq + 1, 1);
        }
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
    if (o->stdout_file || o->close_stdout) cli_out[0] = 0;
    else slurp(outpath, cli_out, sizeof cli_out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

double cli_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

bool cli_catches(pid_t pid, int sig)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    unsigned long long mask = 0;
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) found = sscanf(line, "SigCgt: %llx", &mask) == 1;
    if (f) fclose(f);
    return found && (mask >> (sig - 1) & 1);
}

/* In the child: what cli_spawn_opts asks for; exits (9x) when it cannot. */
static void child_setup(const cli_spawn_opts *o)
{
    char out[600], err[600], name[300];
    snprintf(name, sizeof name, "%s%s", o->tag ? o->tag : "stdout", o->tag ? ".out" : ".txt");
    cli_path(name, out, sizeof out);
    snprintf(name, sizeof name, "%s%s", o->tag ? o->tag : "stderr", o->tag ? ".err" : ".txt");
    cli_path(name, err, sizeof err);
    if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr) || chdir(cli_dir)) _exit(99);
    /* a clean signal state whatever the test runner had */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int i = 0; o->env && o->env[i]; i++) {
        const char *eq = strchr(o->env[i], '=');
        char k[128];
        if (!eq || (size_t)(eq - o->env[i]) >= sizeof k) _exit(96);
        snprintf(k, sizeof k, "%.*s", (int)(eq - o->env[i]), o->env[i]);
        setenv(k, eq + 1, 1);
    }
    if (o->cgroup) {
        char p[600];
        snprintf(p, sizeof p, "%s/cgroup.procs", o->cgroup);
        FILE *f = fopen(p, "w");
        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) _exit(97);
    }
    if (o->rlimit_as) {
        struct rlimit r = {(rlim_t)o->rlimit_as, (rlim_t)o->rlimit_as};
        if (setrlimit(RLIMIT_AS, &r) != 0) _exit(96);
    }
}

pid_t cli_spawn(char *const argv[], const cli_spawn_opts *o)
{
    static const cli_spawn_opts none = {0};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        child_setup(o ? o : &none);
        execv(argv[0], argv);
        _exit(98);
    }
    return pid;
}

int cli_wait(pid_t pid, double seconds)
{
    double until = cli_now() + seconds;
    int st;
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) return st;
        if (cli_now() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("process %d did not end within %.0f s", (int)pid, seconds);
        }
        struct timespec z = {0, 5000000};
        nanosleep(&z, NULL);
    }
}
