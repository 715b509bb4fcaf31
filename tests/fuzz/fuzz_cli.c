/* libFuzzer target: gckpt-plan's command line (planner/main_plan.c, compiled in with
 * main renamed). The input is split at NUL and newline bytes into up to 24 arguments.
 * Every run must return 0 or 2 (bad usage or input, said on stderr) without a
 * sanitizer report or a leak. It runs in a scratch directory emptied after every input, with an
 * empty PATH (no gnuplot is started); arguments holding a '/' are skipped, so that
 * nothing is read or written outside the scratch directory and the data folder (and no
 * Hub model id, ORG/NAME, is formed; HF_HUB_OFFLINE and an empty cache folder besides). */
#include <dirent.h>
#include <unistd.h>

#include "fuzz_common.h"

int gckpt_plan_main(int argc, char **argv);
extern int optind;

static char scratch[64];
static FILE *sink;

static void empty_scratch(void)
{
    DIR *d = opendir(scratch);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    closedir(d);
}

static void cleanup(void)
{
    empty_scratch();
    rmdir(scratch);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 32) tmp = "/tmp";
    snprintf(scratch, sizeof scratch, "%s/gckpt-fuzz-cli-XXXXXX", tmp);
    FUZZ_CHECK(mkdtemp(scratch), "mkdtemp");
    FUZZ_CHECK(chdir(scratch) == 0, "chdir");
    setenv("PATH", "", 1);
    setenv("HF_HUB_OFFLINE", "1", 1);
    setenv("HF_HUB_CACHE", scratch, 1);
    setenv("GCKPT_DATA_DIR", GCKPT_SOURCE_DIR, 1);
    sink = fopen("/dev/null", "w");
    FUZZ_CHECK(sink, "/dev/null");
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024) return 0;
    char *buf = fuzz_text(data, size);
    char *argv[26] = {"gckpt-plan"};
    int argc = 1;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc < 25; i++) {
        if (i == size || data[i] == 0 || data[i] == '\n') {
            buf[i] = 0;
            argv[argc++] = buf + start;
            start = i + 1;
        }
    }
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++)
        if (strchr(argv[i], '/')) {
            free(buf);
            return 0;
        }
    char *msg = NULL;
    size_t msg_len = 0;
    FILE *out = stdout, *err = stderr, *ms = open_memstream(&msg, &msg_len);
    FUZZ_CHECK(ms, "open_memstream");
    stdout = sink;
    stderr = ms;
    optind = 0; /* getopt_long starts afresh */
    int rc = gckpt_plan_main(argc, argv);
    stdout = out;
    stderr = err;
    fclose(ms);
    FUZZ_CHECK(rc == 0 || rc == 2, "exit status %d", rc);
    if (rc == 2) /* refused: says why, as gckpt-plan */
        FUZZ_CHECK(!strncmp(msg, "gckpt-plan: ", 12) || !strncmp(msg, "usage: ", 7), "exit 2 with: %s", msg);
    free(msg);
    empty_scratch();
    free(buf);
    return 0;
}
