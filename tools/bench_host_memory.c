/* What the host backend really takes beyond an entry's predicted allocations, next to
 * what the host memory guard (gckpt_host_need_of) assumes. Each case runs in a fresh
 * child process: the resident set's high-water mark is reset (/proc/self/clear_refs),
 * the entry is set up and one step runs, then the growth of the high-water mark over
 * the resident set before the entry is compared with the guard's parts. Not a test: a
 * report, run by hand (it takes a minute: GPT-2 steps on the CPU).
 *
 *   ./build/gckpt-bench-host-memory [tests/executor/data]                            */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gckpt/core/eval.h"
#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/executor.h"
#include "gckpt/executor/host_memory.h"

typedef struct {
    const char *model;
    gckpt_precision p;
    gckpt_attention a;
    uint64_t seq, mb;
    uint32_t every_n;
    bool offload;
} bench_case;

static double mib(unsigned long long b) { return (double)b / 1048576.0; }

static int one(const bench_case *c, const char *data)
{
    char path[1024];
    if (strchr(c->model, '/') || strstr(c->model, ".json")) snprintf(path, sizeof path, "%s", c->model);
    else if (!strncmp(c->model, "tiny-", 5)) snprintf(path, sizeof path, "%s/%s.json", data, c->model);
    else snprintf(path, sizeof path, "%s", c->model);
    gckpt_model m;
    gckpt_device d;
    gckpt_err err = {{0}};
    if (!gckpt_model_load(path, &m, &err) || !gckpt_device_load("h100-sxm-80gb", &d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    gckpt_setting s = {.seq = c->seq, .micro_batch = c->mb, .grad_accum = 1, .precision = c->p, .optimizer = GCKPT_ADAMW,
                       .attention = c->a, .every_n = c->every_n, .offload = c->offload};
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_exec_opts o = {.seed = 1};
    gckpt_exec *x = gckpt_exec_new(be, &m, &d, &s, &o, &err);
    if (!x) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    gckpt_result w;
    gckpt_walk(gckpt_exec_ctx(x), gckpt_exec_schedule(x), &w);
    gckpt_host_need need;
    gckpt_host_need_of(x, w.peak_bytes, w.host_pinned_bytes, 0, &need);
    unsigned long long rss0 = gckpt_self_status_bytes("VmRSS"), vm0 = gckpt_self_status_bytes("VmSize");
    FILE *cr = fopen("/proc/self/clear_refs", "w"); /* VmHWM := VmRSS */
    if (cr) {
        fputs("5", cr);
        fclose(cr);
    }
    be->reset_peaks(be);
    gckpt_xstatus rc = gckpt_exec_setup(x, &err);
    gckpt_step_opts so = {.update = true};
    gckpt_step_result res;
    if (rc == GCKPT_XS_OK) rc = gckpt_exec_step(x, &so, &res, &err);
    if (rc != GCKPT_XS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    /* a fresh process: its address-space peak so far is this entry's */
    unsigned long long hwm = gckpt_self_status_bytes("VmHWM"), vmpeak = gckpt_self_status_bytes("VmPeak");
    unsigned long long grew = hwm > rss0 ? hwm - rss0 : 0, vgrew = vmpeak > vm0 ? vmpeak - vm0 : 0;
    unsigned long long scratch = gckpt_host_scratch_peak();
    bool holds = grew <= need.total && vgrew <= need.total;
    printf("%-10s %-8s %-5s %5llu %3llu %-3s %-3s %9.1f %8.1f %8.1f %9.1f %9.1f %9.1f %9.1f  %s\n", m.name,
           gckpt_precision_names[c->p], gckpt_attention_names[c->a], (unsigned long long)c->seq, (unsigned long long)c->mb,
           c->every_n ? (char[8]){(char)('0' + c->every_n % 10), 0} : "off", c->offload ? "on" : "off",
           mib(need.predicted), mib(scratch), mib(need.scratch), mib(grew), mib(vgrew), mib(need.total),
           mib(need.total - (grew > vgrew ? grew : vgrew)), holds ? "yes" : "NO");
    fflush(stdout);
    gckpt_exec_free(x);
    be->destroy(be);
    return holds ? 0 : 2;
}

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "tests/executor/data";
    static const bench_case cases[] = {
        {"tiny-llama", GCKPT_AMP_BF16, GCKPT_SDPA, 256, 8, 0, false},
        {"tiny-llama", GCKPT_FP32, GCKPT_EAGER, 256, 16, 1, true},
        {"tiny-qwen3", GCKPT_BF16, GCKPT_SDPA, 128, 4, 2, false},
        {"gpt2", GCKPT_AMP_BF16, GCKPT_SDPA, 128, 1, 0, false},
        {"gpt2", GCKPT_AMP_BF16, GCKPT_SDPA, 128, 1, 1, true},
        {"gpt2", GCKPT_BF16, GCKPT_EAGER, 512, 2, 0, false},
        {"gpt2", GCKPT_FP32, GCKPT_SDPA, 256, 2, 2, false},
    };
    printf("host backend, MiB, one fresh process per entry (setup + one step): the entry's predicted allocations, the\n"
           "kernels' scratch (measured, and the guard's bound), the growth of the resident set's and of the address\n"
           "space's high-water marks, and what the host memory guard asks for (gckpt_host_need_of) with its margin\n");
    printf("%-10s %-8s %-5s %5s %3s %-3s %-3s %9s %8s %8s %9s %9s %9s %9s  %s\n", "model", "prec", "attn", "seq", "mb", "n",
           "off", "predicted", "scratch", "bound", "resident", "address", "guard", "margin", "holds");
    int worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) _exit(one(&cases[i], data));
        int st;
        waitpid(pid, &st, 0);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 3;
        if (rc > worst) worst = rc;
    }
    return worst;
}
