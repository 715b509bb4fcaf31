/* Running a program under test in a scratch directory: its exit status, stderr and
 * stdout, and the files it leaves. Shared by the CLI tests. */
#ifndef GCKPT_CLI_HARNESS_H
#define GCKPT_CLI_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

extern char cli_dir[256];     /* the scratch directory (the child's working directory) */
extern char cli_out[1 << 16]; /* stdout of the last run */

/* Create the scratch directory (prefix like "gckpt-cli"); false on failure. */
bool cli_setup(const char *prefix);
/* Remove it and everything in it. */
void cli_teardown(void);
void cli_path(const char *name, char *out, size_t n);
void cli_write(const char *name, const char *text);
bool cli_exists(const char *name);
/* The whole file, malloc'd; NULL when it cannot be read. */
char *cli_slurp(const char *name);
/* Fail when dir holds a temporary of gckpt's atomic writer (GCKPT_TMP_MARK in its name). */
void cli_assert_no_temporaries(const char *dir);
/* Run exe with args (NULL-terminated, without argv[0]) in the scratch directory;
 * path_env, when given, replaces PATH. stderr goes to err (NUL-terminated), stdout to
 * cli_out. Returns the exit status, -1 when killed by a signal. */
int cli_run(const char *exe, char *const args[], const char *path_env, char *err, size_t n);

/* cli_run with more control over the child. */
typedef struct {
    const char *path_env;     /* replaces PATH when given */
    const char *stdout_file;  /* stdout goes here instead of cli_out (e.g. "/dev/full") */
    bool close_stdout;        /* start the program with descriptor 1 closed */
    const char *env[4];       /* "NAME=value" set in the child */
} cli_opts;
int cli_run_opts(const char *exe, char *const args[], const cli_opts *o, char *err, size_t n);

/* Start a program (argv[0]) in the scratch directory without waiting for it: stdout and
 * stderr go to TAG.out and TAG.err there (tag NULL: stdout.txt and stderr.txt), SIGINT
 * and SIGTERM at their defaults and none blocked, env entries "NAME=value" set (NULL
 * terminated), an address-space limit (0: none), a cgroup directory to join (NULL: none). */
typedef struct {
    const char *tag;
    const char *const *env;
    uint64_t rlimit_as;
    const char *cgroup;
} cli_spawn_opts;
pid_t cli_spawn(char *const argv[], const cli_spawn_opts *o);
/* The wait status of a spawned program; killed and the test failed after `seconds`. */
int cli_wait(pid_t pid, double seconds);
/* Monotonic seconds. */
double cli_now(void);
/* Whether process pid catches signal sig now (its handler is installed: SigCgt in
 * /proc/PID/status): the readiness a test waits for before it signals a child. */
bool cli_catches(pid_t pid, int sig);

#define A(...) ((char *const[]){__VA_ARGS__, NULL})

#endif
