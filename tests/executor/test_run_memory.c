/* The host backend and this machine's memory: the limits read (MemAvailable, cgroup v1 and
 * v2 over every ancestor, RLIMIT_AS, RLIMIT_DATA), entries that do not fit skipped with
 * status skipped_host_memory while the others run, --force running them into an out of
 * memory instead of a hang, and a run under a tight address-space limit ending when
 * asked (OpenBLAS loaded single-threaded after a headroom check). RLIMIT cases are
 * skipped under AddressSanitizer (it reserves terabytes of address space), the cgroup
 * case without root or a writable memory cgroup. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_harness.h"
#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/host_memory.h"
#include "gckpt/util/jsonget.h"
#include "plan_fixture.h"
#include "report_fixture.h"
#include "sanitizer.h"

static cJSON *schema;
static uint64_t need_small, need_big; /* what the guard asks for the two kinds of entry */
static int small_i, big_i;            /* their indices in mem.json */
static uint64_t base_vm;              /* gckpt-run's address space before its first kernel */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the limits, from fixture files ------------------------------------------------------- */

static void put_file(const char *rel, const char *text)
{
    char p[1024];
    cli_path(rel, p, sizeof p);
    for (char *s = strchr(p + strlen(cli_dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(p, 0755);
        *s = '/';
    }
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_limits_read(void **st)
{
    (void)st;
    char root[600];
    /* cgroup v2 in a container: the mount shows /ctr, the process is in /ctr/job; the
     * tightest level is the parent's (512 MiB - 500 MiB used) */
    put_file("v2/proc/meminfo", "MemTotal:       1000000 kB\nMemAvailable:    800000 kB\n");
    put_file("v2/proc/self/status", "Name:\tx\nVmSize:\t  100000 kB\nVmData:\t   40000 kB\n");
    put_file("v2/proc/self/cgroup", "0::/ctr/job\n");
    put_file("v2/proc/self/mountinfo",
             "22 1 0:20 / / rw - ext4 /dev/sda rw\n"
             "30 22 0:26 /ctr /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
    put_file("v2/sys/fs/cgroup/memory.max", "536870912\n");
    put_file("v2/sys/fs/cgroup/memory.current", "524288000\n");
    put_file("v2/sys/fs/cgroup/job/memory.max", "max\n");
    put_file("v2/sys/fs/cgroup/job/memory.current", "1000\n");
    cli_path("v2", root, sizeof root);
    gckpt_host_mem m;
    gckpt_host_memory_at(root, GCKPT_NO_LIMIT, GCKPT_NO_LIMIT, &m);
    assert_int_equal(m.mem_available, 800000ull * 1024);
    assert_int_equal(m.cgroup_left, 536870912ull - 524288000ull);
    assert_int_equal(m.left, m.cgroup_left);
    assert_non_null(strstr(m.which, "cgroup"));
    /* the rlimits against VmSize and VmData */
    gckpt_host_memory_at(root, 110000ull * 1024, GCKPT_NO_LIMIT, &m);
    assert_int_equal(m.as_left, 10000ull * 1024);
    assert_string_equal(m.which, "RLIMIT_AS (ulimit -v)");
    gckpt_host_memory_at(root, GCKPT_NO_LIMIT, 41000ull * 1024, &m);
    assert_int_equal(m.data_left, 1000ull * 1024);
    assert_string_equal(m.which, "RLIMIT_DATA (ulimit -d)");
    gckpt_host_memory_at(root, 90000ull * 1024, GCKPT_NO_LIMIT, &m); /* already beyond */
    assert_int_equal(m.as_left, 0);
    /* cgroup v1 (hybrid hierarchy: v2 mounted without a memory controller), "unlimited"
     * as v1 writes it, a limit on the process's own level */
    put_file("v1/proc/meminfo", "MemAvailable:   9000000 kB\n");
    put_file("v1/proc/self/status", "VmSize:\t1000 kB\nVmData:\t1000 kB\n");
    put_file("v1/proc/self/cgroup", "9:name=systemd:/\n4:memory:/batch/j1\n3:cpu,cpuacct:/\n0::/\n");
    put_file("v1/proc/self/mountinfo",
             "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
             "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
             "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
    put_file("v1/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put_file("v1/sys/fs/cgroup/memory/memory.usage_in_bytes", "4000000000\n");
    put_file("v1/sys/fs/cgroup/memory/batch/memory.limit_in_bytes", "9223372036854771712\n");
    put_file("v1/sys/fs/cgroup/memory/batch/memory.usage_in_bytes", "300000000\n");
    put_file("v1/sys/fs/cgroup/memory/batch/j1/memory.limit_in_bytes", "314572800\n");
    put_file("v1/sys/fs/cgroup/memory/batch/j1/memory.usage_in_bytes", "104857600\n");
    cli_path("v1", root, sizeof root);
    gckpt_host_memory_at(root, GCKPT_NO_LIMIT, GCKPT_NO_LIMIT, &m);
    assert_int_equal(m.cgroup_left, 314572800ull - 104857600ull);
    assert_int_equal(m.left, m.cgroup_left);
    /* no cgroup files at all: only MemAvailable */
    put_file("none/proc/meminfo", "MemAvailable:   123 kB\n");
    cli_path("none", root, sizeof root);
    gckpt_host_memory_at(root, GCKPT_NO_LIMIT, GCKPT_NO_LIMIT, &m);
    assert_int_equal(m.cgroup_left, GCKPT_NO_LIMIT);
    assert_int_equal(m.left, 123ull * 1024);
    assert_string_equal(m.which, "MemAvailable");
}

/* ---- runs under limits ------------------------------------------------------------------------ */

typedef struct {
    uint64_t rlimit_as;   /* 0: unchanged */
    const char *cgroup;   /* a cgroup directory to join, or NULL */
} limits;

/* gckpt-run --backend host ARGS under the limits; its wait status, bounded by `seconds`
 * (then killed: a hang); SIGTERM after term_after seconds when > 0, once its handler is in. */
static int run_limited(char *const args[], const limits *l, double seconds, double term_after, double *took)
{
    char *argv[32] = {GCKPT_RUN_EXE, "--backend", "host"};
    int n = 3;
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    double t0 = now();
    cli_spawn_opts o = {.rlimit_as = l->rlimit_as, .cgroup = l->cgroup};
    pid_t pid = cli_spawn(argv, &o);
    bool termed = false;
    int st;
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        double t = now() - t0;
        /* the signal waits for gckpt-run's handler too: under load a second can pass before
         * the process has installed it, and SIGTERM would then kill it outright */
        if (term_after > 0 && !termed && t > term_after && cli_catches(pid, SIGTERM)) {
            kill(pid, SIGTERM);
            termed = true;
        }
        if (t > seconds) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            char *err = cli_slurp("stderr.txt");
            fail_msg("gckpt-run did not end within %.0f s (a hang); stderr: %s", seconds, err ? err : "");
        }
        struct timespec z = {0, 5000000};
        nanosleep(&z, NULL);
    }
    if (took) *took = now() - t0;
    return st;
}

/* gckpt-run's address space when its first entry reaches its first kernel (its libraries:
 * a CUDA build maps cuBLAS, hundreds of MiB; the plan; the small entry's weights), read
 * from /proc while the test hook GCKPT_TEST_HOST_STALL_MS of gckpt-run's test build (the
 * same program and libraries) holds it there. The address-space
 * limits below are set relative to it. */
static uint64_t measure_base_vm(void)
{
    char sel[16];
    snprintf(sel, sizeof sel, "%d", small_i);
    char *const argv[] = {GCKPT_RUN_HOOKS_EXE, "--backend", "host", "--plan", "mem.json", "--entry", sel, "--steps", "1",
                          "-q", NULL};
    const char *const env[] = {"GCKPT_TEST_HOST_STALL_MS=30000", NULL};
    cli_spawn_opts o = {.tag = "base-vm", .env = env};
    pid_t pid = cli_spawn(argv, &o);
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    unsigned long long last = 0, kb = 0, most = 0;
    int same = 0;
    double until = now() + 20;
    while (same < 10 && now() < until) { /* unchanged for 0.5 s: it is in the stall */
        struct timespec z = {0, 50000000};
        nanosleep(&z, NULL);
        if (waitpid(pid, NULL, WNOHANG) == pid) { /* a gckpt-run without the hook: what it showed */
            pid = 0;
            break;
        }
        FILE *f = fopen(p, "r");
        kb = 0;
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "VmSize: %llu kB", &kb) == 1) break;
        if (f) fclose(f);
        same = kb && kb == last ? same + 1 : 0;
        last = kb;
        if (kb > most) most = kb;
    }
    if (pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (!most) fail_msg("could not read gckpt-run's address space");
    return (uint64_t)(same >= 10 ? kb : most) * 1024;
}

static cJSON *report(const char *name)
{
    char p[600], why[700];
    cli_path(name, p, sizeof p);
    cJSON *doc = rf_load_valid(p, schema, why, sizeof why);
    if (!doc) fail_msg("%s", why);
    return doc;
}

static const char *status_of(cJSON *doc, int k)
{
    char at[64];
    snprintf(at, sizeof at, "entries[%d].status", k);
    return cJSON_GetStringValue(pf_at(doc, at));
}

/* Under RLIMIT_AS between the two entries' needs: the big one is skipped (twice), the
 * small one runs; with --force the big one runs into an out of memory, not a hang. */
static void test_rlimit_as(void **st)
{
    (void)st;
    if (GCKPT_TEST_ASAN) skip();
    if (!base_vm) base_vm = measure_base_vm();
    limits l = {.rlimit_as = base_vm + need_small + (200u << 20)};
    assert_true(need_big > need_small + (400u << 20)); /* the cases are sized so */
    char sel[32];
    snprintf(sel, sizeof sel, "%d,%d,%d", big_i, small_i, big_i);
    int s = run_limited(A("--plan", "mem.json", "--entry", sel, "--steps", "1", "-o", "as.json"), &l, 60, 0, NULL);
    char *err = cli_slurp("stderr.txt");
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) fail_msg("wait status %d; stderr: %s", s, err);
    cJSON *doc = report("as.json");
    assert_string_equal(status_of(doc, 0), "skipped_host_memory");
    assert_string_equal(status_of(doc, 1), "ok");
    assert_string_equal(status_of(doc, 2), "skipped_host_memory");
    const char *msg = cJSON_GetStringValue(pf_at(doc, "entries[0].message"));
    if (!msg || !strstr(msg, "RLIMIT_AS") || !strstr(msg, "--force")) fail_msg("message: %s", msg ? msg : "(none)");
    assert_true(cJSON_IsNull(pf_at(doc, "entries[0].pass")));
    assert_int_equal((int)cJSON_GetNumberValue(pf_at(doc, "summary.skipped_host_memory")), 2);
    cJSON_Delete(doc);
    free(err);
    /* --force: run it anyway; the allocation fails and the entry says so */
    snprintf(sel, sizeof sel, "%d", big_i);
    s = run_limited(A("--plan", "mem.json", "--entry", sel, "--steps", "1", "--force", "-o", "force.json"), &l, 60, 0, NULL);
    err = cli_slurp("stderr.txt");
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 1) fail_msg("--force: wait status %d; stderr: %s", s, err);
    doc = report("force.json");
    assert_string_equal(status_of(doc, 0), "oom");
    assert_non_null(strstr(cJSON_GetStringValue(pf_at(doc, "entries[0].message")), "out of"));
    cJSON_Delete(doc);
    free(err);
}

/* The case: a small address-space limit (150 MiB beyond what gckpt-run maps by
 * itself). The run used to spin in OpenBLAS's buffer allocation forever (and ignore
 * SIGTERM); now it ends by itself, and at the latest when asked. */
static void test_tight_address_space_ends(void **st)
{
    (void)st;
    if (GCKPT_TEST_ASAN) skip();
    if (!base_vm) base_vm = measure_base_vm();
    limits l = {.rlimit_as = base_vm + (150u << 20)};
    char sel[16];
    snprintf(sel, sizeof sel, "%d", small_i);
    double took;
    int s = run_limited(A("--plan", "mem.json", "--entry", sel, "--steps", "1", "-o", "t1.json"), &l, 20, 0, &took);
    char *err = cli_slurp("stderr.txt");
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) fail_msg("wait status %d; stderr: %s", s, err);
    free(err);
    cJSON *doc = report("t1.json");
    assert_string_equal(status_of(doc, 0), "skipped_host_memory");
    cJSON_Delete(doc);
    /* forced and long, with a SIGTERM after a second: it ends (out of memory, or stopped) */
    s = run_limited(A("--plan", "mem.json", "--entry", sel, "--steps", "1000", "--force", "-o", "t2.json"), &l, 20, 1.0, &took);
    err = cli_slurp("stderr.txt");
    if (!WIFEXITED(s) || (WEXITSTATUS(s) != 1 && WEXITSTATUS(s) != 143)) fail_msg("forced: wait status %d; stderr: %s", s, err);
    free(err);
    doc = report("t2.json");
    const char *st0 = status_of(doc, 0);
    if (strcmp(st0, "oom") && strcmp(st0, "interrupted")) fail_msg("forced: status %s", st0);
    if (!strcmp(st0, "oom")) assert_non_null(strstr(cJSON_GetStringValue(pf_at(doc, "entries[0].message")), "OpenBLAS"));
    cJSON_Delete(doc);
}

/* A memory cgroup (v2 under the hierarchy's root, else v1 under ours) whose limit is
 * between the two entries' needs: the big entry is skipped instead of being killed by
 * the kernel's OOM killer. */
static bool make_cgroup(char *dir, size_t n, uint64_t limit)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[4096], v2[1024] = "", v1[1024] = "";
    while (f && fgets(line, sizeof line, f)) {
        char *dash = strstr(line, " - ");
        char mnt[1024], fs[64], opts[1024];
        if (!dash || sscanf(line, "%*s %*s %*s %*s %1023s", mnt) != 1 || sscanf(dash + 3, "%63s %*s %1023s", fs, opts) != 2)
            continue;
        if (!strcmp(fs, "cgroup2")) snprintf(v2, sizeof v2, "%s", mnt);
        if (!strcmp(fs, "cgroup") && strstr(opts, "memory")) snprintf(v1, sizeof v1, "%s", mnt);
    }
    if (f) fclose(f);
    char p[1200], ctl[256] = "";
    snprintf(p, sizeof p, "%s/cgroup.subtree_control", v2);
    f = v2[0] ? fopen(p, "r") : NULL;
    if (f) {
        if (!fgets(ctl, sizeof ctl, f)) ctl[0] = 0;
        fclose(f);
    }
    const char *file = NULL;
    if (strstr(ctl, "memory")) {
        snprintf(dir, n, "%.1000s/gckpt-test-%d", v2, (int)getpid());
        file = "memory.max";
    } else if (v1[0]) {
        char self[1024] = "/";
        f = fopen("/proc/self/cgroup", "r");
        while (f && fgets(line, sizeof line, f)) {
            char *c = strstr(line, ":memory:");
            if (c) snprintf(self, sizeof self, "%s", c + 8);
        }
        if (f) fclose(f);
        self[strcspn(self, "\n")] = 0;
        snprintf(dir, n, "%.500s%.500s/gckpt-test-%d", v1, strcmp(self, "/") ? self : "", (int)getpid());
        file = "memory.limit_in_bytes";
    } else {
        return false;
    }
    if (mkdir(dir, 0755) != 0) return false;
    snprintf(p, sizeof p, "%.1100s/%s", dir, file);
    f = fopen(p, "w");
    bool ok = f && fprintf(f, "%llu\n", (unsigned long long)limit) > 0;
    if (f) ok = (fclose(f) == 0) && ok;
    if (!ok) rmdir(dir);
    return ok;
}

static void test_cgroup(void **st)
{
    (void)st;
    char cg[1200];
    uint64_t limit = need_small + (150u << 20);
    if (geteuid() != 0 || !make_cgroup(cg, sizeof cg, limit)) skip();
    limits l = {.cgroup = cg};
    char sel[32];
    snprintf(sel, sizeof sel, "%d,%d", big_i, small_i);
    int s = run_limited(A("--plan", "mem.json", "--entry", sel, "--steps", "1", "-o", "cg.json"), &l, 60, 0, NULL);
    char *err = cli_slurp("stderr.txt");
    rmdir(cg);
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) fail_msg("wait status %d (9: the OOM killer); stderr: %s", s, err);
    free(err);
    cJSON *doc = report("cg.json");
    assert_string_equal(status_of(doc, 0), "skipped_host_memory");
    assert_non_null(strstr(cJSON_GetStringValue(pf_at(doc, "entries[0].message")), "cgroup"));
    assert_string_equal(status_of(doc, 1), "ok");
    cJSON_Delete(doc);
}

/* mem.json: tiny-llama, fp32 eager at seq 256: micro-batch 1 (small) and 64 (big). */
static int setup(void **st)
{
    (void)st;
    if (!cli_setup("gckpt-run-mem")) return -1;
    schema = rf_schema();
    gckpt_plan_request req = {.seq = 256, .micro_batches = {1, 64}, .n_micro = 2, .grad_accum = 1, .precision = GCKPT_FP32,
                              .optimizer = GCKPT_ADAMW, .attention = GCKPT_EAGER, .offload = GCKPT_OFFLOAD_OFF, .margin = 0.05};
    snprintf(req.model_ref, sizeof req.model_ref, "%s/tiny-llama.json", GCKPT_TEST_DATA);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[] = {0};
    req.every_n = ev;
    req.n_every = 1;
    gckpt_plan p;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&req, &p, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    /* what the guard asks for each, as gckpt-run computes it (OpenBLAS not loaded yet) */
    for (size_t i = 0; i < p.n; i++) {
        gckpt_setting s = {.seq = 256, .micro_batch = p.entries[i].micro_batch, .grad_accum = 1, .precision = GCKPT_FP32,
                           .optimizer = GCKPT_ADAMW, .attention = GCKPT_EAGER};
        gckpt_exec *x = gckpt_exec_new(NULL, &p.model, &p.dev, &s, NULL, &err);
        if (!x) return -1;
        gckpt_host_need nd;
        gckpt_host_need_of(x, p.entries[i].r.peak_bytes, p.entries[i].r.host_pinned_bytes, 0, &nd);
        gckpt_exec_free(x);
        if (s.micro_batch == 1) need_small = nd.total, small_i = (int)i;
        else need_big = nd.total, big_i = (int)i;
    }
    char *t = gckpt_json_text(gckpt_plan_to_json(&p, false), true);
    gckpt_plan_free(&p);
    if (!t) return -1;
    cli_write("mem.json", t);
    free(t);
    printf("the guard asks %llu MiB for micro-batch 1 and %llu MiB for micro-batch 64\n",
           (unsigned long long)(need_small >> 20), (unsigned long long)(need_big >> 20));
    return schema ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    cJSON_Delete(schema);
    cli_teardown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_read),
        cmocka_unit_test(test_rlimit_as),
        cmocka_unit_test(test_tight_address_space_ends),
        cmocka_unit_test(test_cgroup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
