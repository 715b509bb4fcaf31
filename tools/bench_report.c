/* The cost of gckpt-run's report writes as the number of entries grows. Plans of
 * Llama-3.1-70B on an 80 GB GPU (every_n off and 1..80 x offload x 1 to 64 micro-batches:
 * nothing fits) are run with --all, so every entry is skipped and the run is almost only
 * its report writes. For 256, 512, 1024 and 10304 entries it prints the wall time, the time
 * per entry, the report's size and the bytes the process wrote (/proc/PID/io wchar). Not a
 * test: a report.
 *
 *   ./build/gckpt-bench-report [GCKPT_RUN [COUNTS...]]     (default ./build/gckpt-run)  */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gckpt/util/jsonget.h"
#include "gckpt/planner/plan.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A plan with about n entries (micro-batches 1..m, every_n off and 1..k: m (1 + 2k)
 * entries, k <= 80); the count it has goes to *got. */
static bool write_plan(const char *path, int n, int *got)
{
    gckpt_plan_request req = {.seq = 4096, .grad_accum = 1, .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW,
                              .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05};
    snprintf(req.model_ref, sizeof req.model_ref, "llama-3.1-70b");
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    /* entries per micro-batch with every_n in {off, 1..k}: 1 + 2k */
    int mbs = (n + 160) / 161;
    if (mbs > GCKPT_MAX_MB) mbs = GCKPT_MAX_MB;
    int k = (n / mbs - 1) / 2;
    if (k > 80) k = 80;
    if (k < 1) k = 1;
    uint32_t every[81];
    every[0] = 0;
    for (int i = 1; i <= k; i++) every[i] = (uint32_t)i;
    req.every_n = every;
    req.n_every = k + 1;
    for (int i = 0; i < mbs; i++) req.micro_batches[i] = (uint64_t)i + 1;
    req.n_micro = mbs;
    gckpt_plan p;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&req, &p, &err)) {
        fprintf(stderr, "plan: %s\n", err.msg);
        return false;
    }
    char *t = gckpt_json_text(gckpt_plan_to_json(&p, false), false);
    size_t entries = p.n;
    gckpt_plan_free(&p);
    FILE *f = fopen(path, "w");
    bool ok = t && f && fputs(t, f) >= 0;
    if (f) ok = (fclose(f) == 0) && ok;
    free(t);
    *got = (int)entries;
    return ok;
}

static unsigned long long wchar_of(pid_t pid)
{
    char p[64], line[128];
    snprintf(p, sizeof p, "/proc/%d/io", (int)pid);
    FILE *f = fopen(p, "r");
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "wchar:", 6)) v = strtoull(line + 6, NULL, 10);
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    const char *run = argc > 1 ? argv[1] : "./build/gckpt-run";
    int counts[16] = {256, 512, 1024, 10304}, nc = 4;
    if (argc > 2) {
        nc = 0;
        for (int i = 2; i < argc && nc < 16; i++) counts[nc++] = atoi(argv[i]);
    }
    char dir[] = "/tmp/gckpt-bench-report-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    printf("gckpt-run --all over plans whose entries are all skipped (the run is its report writes): %s\n", run);
    printf("%8s %10s %14s %12s %14s %10s\n", "entries", "wall s", "ms per entry", "report MB", "written MB", "written/report");
    int rc = 0;
    for (int i = 0; i < nc; i++) {
        char plan[128], rep[128], out[128];
        snprintf(plan, sizeof plan, "%s/plan-%d.json", dir, counts[i]);
        snprintf(rep, sizeof rep, "%s/report-%d.json", dir, counts[i]);
        snprintf(out, sizeof out, "%s/stderr-%d.txt", dir, counts[i]);
        int n;
        if (!write_plan(plan, counts[i], &n)) return 1;
        fflush(stdout);
        double t0 = now();
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen(out, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(99);
            execl(run, run, "--backend", "host", "--plan", plan, "--all", "-q", "-o", rep, (char *)NULL);
            _exit(98);
        }
        siginfo_t si;
        memset(&si, 0, sizeof si);
        waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT);
        double wall = now() - t0;
        unsigned long long w = wchar_of(pid);
        int st;
        waitpid(pid, &st, 0);
        struct stat s;
        long long size = stat(rep, &s) == 0 ? (long long)s.st_size : -1;
        if (!WIFEXITED(st) || WEXITSTATUS(st) > 1 || size < 0) {
            fprintf(stderr, "%d entries: gckpt-run failed (status %d, see %s)\n", n, st, out);
            rc = 1;
            continue;
        }
        printf("%8d %10.2f %14.3f %12.2f %14.2f %10.2fx\n", n, wall, 1e3 * wall / n, (double)size / 1e6,
               (double)w / 1e6, (double)w / (double)size);
        fflush(stdout);
        unlink(plan);
        unlink(rep);
        unlink(out);
    }
    rmdir(dir);
    return rc;
}
