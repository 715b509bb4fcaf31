/* gckpt-run: run a plan's entries for real and compare with the predictions. */
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gckpt/util/atomic_file.h"
#include "gckpt/executor/exec_host.h"
#include "host_estimate.h"
#include "gckpt/executor/exec_run.h"
#include "gckpt/executor/exec_vlm.h"
#include "gckpt/util/outpath.h"
#include "gckpt/core/plan_read.h"
#include "gckpt/executor/report_file.h"
#include "gckpt/util/safe_text.h"
#include "gckpt/executor/stop_watchdog.h"
#include "gckpt/util/stdio_check.h"
#ifdef GCKPT_HAVE_CUDA
#include "gckpt/executor/exec_cuda.h"
#endif

static const char *const usage_text =
    "usage: gckpt-run --plan FILE [options]\n"
    "       gckpt-run --calibrate -o devices/local.json [--gpu BASE] [--model NAME|PATH]\n"
    "\n"
    "Run the entries of a plan written by gckpt-plan as real training steps (forward,\n"
    "backward with the entry's checkpointing and offload, optimizer step) with the\n"
    "model's dimensions, measure memory and time, and compare with the plan.\n"
    "\n"
    "  --plan FILE            the plan (schema gckpt.plan/2)\n"
    "  --entry N[,N...]       entries to run, by index\n"
    "  --recommended          the plan's recommended entry (default)\n"
    "  --all                  every entry\n"
    "  --backend cuda|host    where to run (default: cuda when a GPU is present, else host)\n"
    "  --steps N              measured steps per entry (default 3)\n"
    "  --warmup N             warm-up steps before them (default 1)\n"
    "  --tolerance X          relative tolerance of the memory checks (default 0.02)\n"
    "  --time-tolerance X     also judge the median step time (cuda only; default: report only)\n"
    "  --force                run entries the plan predicts not to fit, and (host backend)\n"
    "                         entries this machine has not the memory for (the kernel may\n"
    "                         then end the process)\n"
    "  --host-memory-limit SIZE\n"
    "                         fail allocations beyond SIZE, e.g. 64MiB (simulated out of memory)\n"
    "  --seed N               weights, data and dropout seed (default 0)\n"
    "  --sync-alloc           cuda: cudaMalloc/cudaFree instead of the stream-ordered allocator\n"
    "  --collective-timeout S several ranks: end the run when a collective between the ranks\n"
    "                         makes no progress for S seconds (a rank that died, hangs or\n"
    "                         runs other collectives); default 300, or GCKPT_COLLECTIVE_TIMEOUT\n"
    "  -o, --output FILE      write the report (schema gckpt.report/2: JSON Lines, one record\n"
    "                         per finished entry); '-' streams it to stdout\n"
    "  -q, --quiet            no table on stdout\n"
    "  --calibrate            measure this GPU and write a device profile to -o (cuda only)\n"
    "  --gpu NAME|PATH        with --calibrate: profile whose peak figures are kept\n"
    "  --model NAME|PATH      with --calibrate: model whose GEMM shapes are measured\n"
    "  -h, --help             this help\n"
    "  -V, --version          version\n"
    "\n"
    "Exit status: 0 every entry run passed, 1 an entry failed (out of tolerance, out of\n"
    "memory against the prediction, or an error), 2 bad usage or input (or the report or\n"
    "stdout could not be written), 128+N stopped by signal N: 130 SIGINT, 143 SIGTERM.\n"
    "\n"
    "On the host backend an entry that needs more memory than this machine has available\n"
    "(MemAvailable, the cgroup's limit, ulimit -v and -d) gets status skipped_host_memory.\n"
    "\n"
    "SIGINT / SIGTERM stop the run at the next event or step boundary: the running entry\n"
    "gets status \"interrupted\" (pass false), all device and pinned memory is freed,\n"
    "the report (every finished entry and the interrupted one; entries not started are\n"
    "left out and counted in summary.not_started) is written, and the exit status is\n"
    "128+N. Without a safe point within 5 s (a call that does not return), the report of\n"
    "the last safe point is written and the process exits 128+N. A second signal ends the\n"
    "process at once, killed by that signal; the report keeps every record written.\n"
    "\n"
    "Several ranks (mpirun -np N gckpt-run ...): every collective is first announced to every\n"
    "rank (its number, kind, size and the event it belongs to); ranks that announce different\n"
    "ones, or one that does not come within --collective-timeout, end the run on every rank\n"
    "with an error naming the ranks, their events and collectives. mpirun kills its ranks about\n"
    "1 s after a SIGTERM (sent when it is signalled or a rank has ended), so rank 0 writes the\n"
    "running entry as interrupted and the summary as soon as the signal comes (a second\n"
    "signal does not cut that short) and the ranks end with 128+N.\n";

typedef struct {
    const char *plan, *out, *backend, *entries, *limit, *gpu, *model;
    bool all, recommended, force, quiet, calibrate, sync_alloc;
    uint64_t steps, warmup, seed, limit_bytes;
    double tolerance, time_tolerance, coll_timeout;
} args_t;

/* This process's rank (mpirun: one process per rank of the plan); only rank 0 speaks. */
static int my_rank;

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
    if (my_rank) return GCKPT_EXIT_INPUT; /* every rank decides alike; rank 0 says why */
    va_list ap;
    va_start(ap, fmt);
    char msg[1024]; /* one line, arguments sanitised */
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gckpt_text_sanitize(msg);
    fprintf(stderr, "gckpt-run: %s\n", msg);
    return GCKPT_EXIT_INPUT;
}

static bool parse_double(const char *s, double lo, double hi, double *out)
{
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, args_t *a)
{
    memset(a, 0, sizeof *a);
    a->steps = 3;
    a->warmup = 1;
    a->tolerance = 0.02;
    a->time_tolerance = -1;
    a->coll_timeout = GCKPT_COLL_TIMEOUT_S;
    const char *env = getenv("GCKPT_COLLECTIVE_TIMEOUT");
    if (env && *env && !parse_double(env, 0.001, 1e6, &a->coll_timeout))
        return bad("GCKPT_COLLECTIVE_TIMEOUT: \"%s\" is not a number of seconds in [0.001, 1e6]", env);
    int sel = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV                                                                                      \
    do {                                                                                           \
        if (!v) return bad("%s needs a value", o);                                           \
        i++;                                                                                       \
    } while (0)
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            fputs(usage_text, stdout);
            exit(0);
        } else if (!strcmp(o, "-V") || !strcmp(o, "--version")) {
            printf("gckpt-run %s\n", GCKPT_VERSION);
            exit(0);
        } else if (!strcmp(o, "--plan")) { NEEDV; a->plan = v; }
        else if (!strcmp(o, "--entry")) { NEEDV; a->entries = v; sel++; }
        else if (!strcmp(o, "--all")) { a->all = true; sel++; }
        else if (!strcmp(o, "--recommended")) { a->recommended = true; sel++; }
        else if (!strcmp(o, "--backend")) {
            NEEDV;
            if (strcmp(v, "cuda") && strcmp(v, "host")) return bad("--backend: \"%s\" is not cuda or host", v);
            a->backend = v;
        } else if (!strcmp(o, "--steps")) {
            NEEDV;
            if (!gckpt_parse_u64(v, 1, GCKPT_MAX_STEPS, &a->steps)) return bad("--steps: \"%s\" is not an integer in [1, 1000]", v);
        } else if (!strcmp(o, "--warmup")) {
            NEEDV;
            if (!gckpt_parse_u64(v, 0, GCKPT_MAX_STEPS, &a->warmup)) return bad("--warmup: \"%s\" is not an integer in [0, 1000]", v);
        } else if (!strcmp(o, "--tolerance")) {
            NEEDV;
            if (!parse_double(v, 0, 1, &a->tolerance)) return bad("--tolerance: \"%s\" is not a number in [0, 1]", v);
        } else if (!strcmp(o, "--time-tolerance")) {
            NEEDV;
            if (!parse_double(v, 0, 100, &a->time_tolerance)) return bad("--time-tolerance: \"%s\" is not a number in [0, 100]", v);
        } else if (!strcmp(o, "--collective-timeout")) {
            NEEDV;
            if (!parse_double(v, 0.001, 1e6, &a->coll_timeout))
                return bad("--collective-timeout: \"%s\" is not a number of seconds in [0.001, 1e6]", v);
        } else if (!strcmp(o, "--force")) a->force = true;
        else if (!strcmp(o, "--host-memory-limit")) {
            NEEDV;
            if (!gckpt_parse_size(v, &a->limit_bytes) || !a->limit_bytes) return bad("--host-memory-limit: \"%s\" is not a size such as 64MiB", v);
            a->limit = v;
        } else if (!strcmp(o, "--seed")) {
            NEEDV;
            if (!gckpt_parse_u64(v, 0, UINT64_MAX >> 1, &a->seed)) return bad("--seed: \"%s\" is not a non-negative integer", v);
        } else if (!strcmp(o, "--sync-alloc")) a->sync_alloc = true;
        else if (!strcmp(o, "-o") || !strcmp(o, "--output")) { NEEDV; a->out = v; }
        else if (!strcmp(o, "-q") || !strcmp(o, "--quiet")) a->quiet = true;
        else if (!strcmp(o, "--calibrate")) a->calibrate = true;
        else if (!strcmp(o, "--gpu")) { NEEDV; a->gpu = v; }
        else if (!strcmp(o, "--model")) { NEEDV; a->model = v; }
        else return bad("unknown option \"%s\" (see --help)", o);
#undef NEEDV
    }
    if (sel > 1) return bad("--entry, --recommended and --all exclude each other");
    if (a->calibrate) {
        if (a->plan || sel) return bad("--calibrate takes no plan or entries");
        if (!a->out || !strcmp(a->out, "-")) return bad("--calibrate needs -o FILE for the device profile");
    } else {
        if (!a->plan) return bad("--plan FILE is required (see --help)");
        if (a->gpu || a->model) return bad("--gpu and --model go with --calibrate only");
    }
    return 0;
}

/* The output (report or device profile) is checked before anything runs: a missing or
 * read-only directory, a non-regular file or one of the inputs costs nothing. */
static int check_output(const args_t *a)
{
    gckpt_err err = {{0}};
    char gpu[4096] = "", model[4096] = "";
    if ((a->gpu && !gckpt_resolve_data("devices", a->gpu, gpu, sizeof gpu, &err)) ||
        (a->model && !gckpt_resolve_data("models", a->model, model, sizeof model, &err)))
        return bad("%s", err.msg);
    const char *ins[] = {a->plan, gpu[0] ? gpu : NULL, model[0] ? model : NULL};
    if (!gckpt_outpath_check(&a->out, 1, ins, 3, &err)) return bad("%s", err.msg);
    return 0;
}

static int calibrate(const args_t *a)
{
#ifdef GCKPT_HAVE_CUDA
    if (a->backend && !strcmp(a->backend, "host"))
        return bad("--calibrate measures a GPU; it does not run on the host backend");
    gckpt_err err = {{0}};
    gckpt_device base, *bp = NULL;
    if (a->gpu) {
        if (!gckpt_device_load(a->gpu, &base, &err)) return bad("%s", err.msg);
        bp = &base;
    }
    uint64_t h = 0, inter = 0;
    if (a->model) {
        gckpt_model m;
        if (!gckpt_model_load(a->model, &m, &err)) return bad("%s", err.msg);
        h = m.hidden;
        inter = m.intermediate;
    }
    if (!gckpt_cuda_available(&err)) return bad("--calibrate needs a CUDA GPU: %s", err.msg);
    if (!gckpt_cuda_calibrate(0, bp, h, inter, 0, a->out, stderr, &err)) {
        fprintf(stderr, "gckpt-run: calibration failed: %s\n", err.msg);
        return GCKPT_EXIT_CHECK;
    }
    fprintf(stderr, "gckpt-run: device profile written to %s\n", a->out);
    return 0;
#else
    (void)a;
    return bad("--calibrate needs a GPU and this gckpt-run was built without CUDA (nvcc was not found); "
               "it cannot calibrate on the host backend");
#endif
}

/* Indices of the entries to run; count or -1 (message printed). */
static long select_entries(const args_t *a, const gckpt_plan_file *pf, size_t **out)
{
    size_t *sel = NULL;
    long n = 0;
    if (a->all) {
        sel = malloc(sizeof *sel * pf->n);
        if (!sel) return bad("out of memory"), -1;
        for (size_t i = 0; i < pf->n; i++) sel[n++] = i;
    } else if (a->entries) {
        uint64_t v[1024];
        int k = gckpt_parse_list(a->entries, 0, pf->n - 1, v, 1024);
        if (k <= 0) {
            char hi[32];
            snprintf(hi, sizeof hi, "%zu", pf->n - 1);
            return bad("--entry: \"%s\" is not a list of entry indices in [0, %s]", a->entries, hi), -1;
        }
        sel = malloc(sizeof *sel * (size_t)k);
        if (!sel) return bad("out of memory"), -1;
        for (int i = 0; i < k; i++) sel[n++] = (size_t)v[i];
    } else {
        if (pf->recommended < 0)
            return bad("%s: the plan recommends no entry (nothing fits); choose with --entry N or --all", pf->file), -1;
        sel = malloc(sizeof *sel);
        if (!sel) return bad("out of memory"), -1;
        sel[n++] = (size_t)pf->recommended;
    }
    *out = sel;
    return n;
}

static gckpt_backend *make_backend(const args_t *a, int *rc)
{
    bool want_cuda = a->backend && !strcmp(a->backend, "cuda");
    bool want_host = a->backend && !strcmp(a->backend, "host");
#ifdef GCKPT_HAVE_CUDA
    gckpt_err err = {{0}};
    if (!want_host) {
        if (gckpt_cuda_available(&err)) {
            gckpt_cuda_opts co = {.device = gckpt_comm_launched() ? gckpt_comm_local_rank() : 0, .sync_alloc = a->sync_alloc, .memory_limit = a->limit_bytes};
            gckpt_backend *be = gckpt_cuda_backend_new(&co, &err);
            if (be) return be;
            *rc = bad("--backend cuda: %s", err.msg);
            return NULL;
        }
        if (want_cuda) {
            *rc = bad("--backend cuda: no usable CUDA GPU: %s", err.msg);
            return NULL;
        }
        fprintf(stderr, "gckpt-run: no CUDA GPU (%s); running on the host backend\n", err.msg);
    }
#else
    (void)want_host;
    if (want_cuda) {
        *rc = bad("--backend cuda: this gckpt-run was built without CUDA (nvcc was not found)");
        return NULL;
    }
#endif
    gckpt_backend *be = gckpt_host_backend_new(a->limit_bytes);
    if (!be) *rc = bad("out of memory");
    return be;
}

/* ---- SIGINT / SIGTERM -------------------------------------------------------------------- */

/* The first signal's number; the run stops at the next safe point (between the
 * interpreter's events, between steps, between entries). */
static volatile sig_atomic_t stop_signal;
/* How long the watchdog lets the run reach a safe point after it (0: several ranks) */
static double stop_grace = GCKPT_STOP_GRACE_S;

static void on_signal(int sig)
{
    if (!stop_signal) {
        stop_signal = sig;
        gckpt_watchdog_notify(sig);
        return;
    }
    /* Several ranks: mpirun sends its ranks SIGTERM more than once; the watchdog is writing
     * the report now and ends the process (a second signal must not cut that write short). */
    if (stop_grace <= 0) return;
    /* A second signal while finishing: end now. Only async-signal-safe calls: remove the
     * temporary file of a report write in progress (the report itself is replaced by
     * rename only, so it stays whole), then die of the signal. */
    gckpt_afile_discard_all();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(sig, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    (void)raise(sig);
    (void)sigprocmask(SIG_UNBLOCK, &set, NULL);
    _exit(128 + sig);
}

static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART; /* reads and writes go on; the flag is polled */
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
}

/* Progress: before the run a first estimate from FLOPs and bytes at rates measured here;
 * after the first entry's second step, an estimate from its measured setup and step
 * times, scaled by the other entries' work; on a terminal the running entry's step. */
typedef struct {
    size_t index, k, n;
    bool tty;
    double gemm, elem;      /* measured rates (0: no estimate) */
    double first_work;      /* seconds of work of the first entry's step at those rates */
    double all_work;        /* the same summed over the entries that run */
    int steps;              /* per entry, warm-up included */
    struct timespec start;  /* the first entry's start */
    double t1;              /* until the end of its first step */
} progress;

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void on_step(void *ctx, int step, int total)
{
    progress *p = ctx;
    if (p->k == 1 && p->first_work > 0 && step <= 2) {
        double t = since(&p->start);
        if (step == 1) p->t1 = t;
        else {
            double per_step = t - p->t1, setup = p->t1 - per_step;
            double est = (setup > 0 ? setup : 0) + per_step * total, all = est * p->all_work / p->first_work;
            fprintf(stderr, "%sgckpt-run: measured: setup %.1f s, %.2f s per step: about %.0f s for the whole run\n",
                    p->tty ? "\r" : "", setup > 0 ? setup : 0, per_step, all);
        }
    }
    if (!p->tty) return;
    fprintf(stderr, "\rgckpt-run: entry %zu (%zu/%zu): step %d of %d ", p->index, p->k, p->n, step, total);
    if (step == total) fprintf(stderr, "\r%*s\r", 60, "");
    fflush(stderr);
}

/* Before a host-backend run: roughly how long it will take. */
static void say_estimate(const gckpt_plan_file *pf, const size_t *sel, long nsel, const args_t *a, progress *p)
{
    p->gemm = gckpt_host_gemm_rate();
    p->elem = gckpt_host_elem_rate();
    double flops = 0, bytes = 0;
    long run = 0;
    for (long k = 0; k < nsel; k++) {
        double f, b;
        if (!(pf->entries[sel[k]].fits || a->force) || !gckpt_entry_step_work(pf, sel[k], &f, &b))
            continue; /* skipped entries take no time */
        if (k == 0) p->first_work = f / p->gemm + b / p->elem;
        flops += f;
        bytes += b;
        run++;
    }
    if (!run || p->gemm <= 0 || p->elem <= 0) return;
    p->all_work = flops / p->gemm + bytes / p->elem;
    double s = p->steps * p->all_work;
    fprintf(stderr, "gckpt-run: host backend: at least %.0f s for %ld entr%s x %d steps (per step %.3g GFLOP at "
                    "%.3g GFLOP/s and %.3g GB at %.3g GB/s, measured here); a measured estimate follows the first steps\n",
            s < 1 ? 1 : s, run, run == 1 ? "y" : "ies", p->steps, flops / (double)run / 1e9, p->gemm / 1e9,
            bytes / (double)run / 1e9, p->elem / 1e9);
}

/* Every selected entry in turn, each one's report record written as it finishes; stops at
 * a stop request or a failed write (*write_failed). Returns 0, or 1 when an entry failed. */
static int run_entries(gckpt_backend *be, gckpt_plan_file *pf, const size_t *sel, long nsel, gckpt_report *rep,
                       gckpt_report_file *rf, progress *prog, bool *write_failed)
{
    gckpt_err err = {{0}};
    int status = GCKPT_EXIT_OK;
    const gckpt_comm *comm = rep->opts.comm;
    /* a failed communicator (ranks out of step, one gone) ends the run on every rank */
    for (long k = 0; k < nsel && !stop_signal && !*write_failed && !(comm && comm->failed); k++) {
        gckpt_entry_report *e = &rep->entries[k];
        prog->index = sel[k];
        prog->k = (size_t)k + 1;
        gckpt_entry_begin(pf, sel[k], e);
        if (!gckpt_report_file_arm(rf, rep, e, stop_grace, &err)) {
            fprintf(stderr, "gckpt-run: %s\n", err.msg);
            *write_failed = true;
            break;
        }
        gckpt_run_entry(be, pf, sel[k], &rep->opts, e);
        rep->n = (size_t)k + 1;
        if (!my_rank) gckpt_entry_progress(e, (size_t)k + 1, (size_t)nsel, stderr);
        if (e->pass == 0) status = GCKPT_EXIT_CHECK;
        if (!gckpt_report_file_add(rf, rep, (size_t)k, &err)) {
            fprintf(stderr, "gckpt-run: %s\n", err.msg);
            *write_failed = true;
        }
    }
    return status;
}

/* The run has ended: the summary record, the stop message, the table. Returns the exit
 * status: 2 when results were lost (no report, or the table on stdout), else 128 + N
 * after a signal, else status (0 / 1). */
static int end_run(const args_t *a, const gckpt_backend *be, const gckpt_plan_file *pf, gckpt_report *rep,
                   gckpt_report_file *rf, int status, bool write_failed)
{
    gckpt_err err = {{0}};
    bool to_file = a->out && strcmp(a->out, "-");
    int sig = stop_signal;
    /* the summary: the signal noted (it may have come between two entries) */
    if (!write_failed && !gckpt_report_file_finish(rf, rep, sig, &err)) {
        fprintf(stderr, "gckpt-run: %s\n", err.msg);
        write_failed = true;
    }
    gckpt_watchdog_done();
    if (sig && !my_rank) { /* rank 0 speaks */
        size_t ni = rep->n && rep->entries[rep->n - 1].status == GCKPT_RS_INTERRUPTED;
        fprintf(stderr, "gckpt-run: stopped by %s: %zu entr%s finished, %zu interrupted, %zu not started\n",
                gckpt_signal_name(sig), rep->n - ni, rep->n - ni == 1 ? "y" : "ies", ni, rep->planned - rep->n);
    }
    if (!a->quiet) {
        FILE *f = a->out && !to_file ? stderr : stdout;
        fprintf(f, "%s on %s (%s backend), seq %llu, %s, %s, %s attention\n", pf->model.name, rep->dev.name, be->name,
                (unsigned long long)pf->seq, gckpt_precision_names[pf->precision], gckpt_optimizer_names[pf->optimizer],
                gckpt_attention_names[pf->attention]);
        gckpt_report_print_table(rep, f);
    }
    /* one error line: a report going to stdout has said it already */
    bool stdout_failed = !gckpt_stdout_check(&err);
    if (stdout_failed && !write_failed) fprintf(stderr, "gckpt-run: %s\n", err.msg);
    if (to_file && !write_failed) fprintf(stderr, "gckpt-run: report written to %s\n", a->out);
    if (write_failed || stdout_failed) return GCKPT_EXIT_INPUT;
    return sig ? 128 + sig : status;
}

#ifdef GCKPT_TEST_HOOKS
void gckpt_test_hooks_install(void); /* the test build only (tests/executor/run_test_hooks.c) */
#endif

/* The ranks the plan needs against the ranks started (one line on rank 0, exit 2). */
/* HSDP (the plan's dp_replicate, FINDINGS R-DIST-27): the dp_shard groups (consecutive ranks, as
 * accelerate's mesh puts dp_shard inner) and the dp_replicate groups (ranks dp_shard apart), split
 * from the world and joined by the backend; under TP x FSDP (transformers' dense mesh (dp_replicate,
 * fsdp, tp), tp innermost: R-TP-1) the TP group (tp consecutive ranks) and those two among the ranks
 * of one TP rank (world rank r is TP rank r % tp of data-parallel rank r / tp). groups[] owns them.
 * 0, or the exit status. */
/* CP (innermost, R-CP-1): its group of cp consecutive ranks, then under HSDP FSDP2's two over the
 * flattened dp_shard_cp dimension (shard_world consecutive ranks) as without CP (R-CP-17). */
static int join_groups(gckpt_backend *be, gckpt_comm *comm, const gckpt_layout *l, gckpt_comm *groups[GCKPT_NGROUP])
{
    uint32_t rep = gckpt_layout_replicate(l), shard = gckpt_layout_shard_world(l);
    int T = l->tp > 1 && gckpt_layout_multi(l) ? (int)l->tp : 1;
    gckpt_err err = {0};
    if (l->cp > 1 && (uint32_t)comm->world > l->cp) { /* CP x dp_shard: the ring in the CP group (cp innermost, R-CP-1) */
        if (!be->attach_group || !be->collective_group || !comm->split)
            return bad("--backend %s: context parallelism with dp_shard needs process groups, which this backend does "
                       "not run (the host backend does)", be->name);
        if (!(groups[GCKPT_GROUP_CP] = comm->split(comm, comm->rank / (int)l->cp, comm->rank, &err)))
            return bad("CP's process groups: %s", err.msg);
        if (be->attach_group(be, GCKPT_GROUP_CP, groups[GCKPT_GROUP_CP]) != GCKPT_XS_OK)
            return bad("--backend %s: joining the cp group: %s", be->name, be->err.msg);
        if (rep < 2) return 0; /* HSDP with CP: FSDP2's groups over dp_shard_cp below (R-CP-17) */
    }
    if ((rep < 2 && T < 2) || comm->world < 2) return 0;
    if (!be->attach_group || !be->collective_group || !comm->split)
        return bad("--backend %s: a plan with %s needs process groups, which this backend does not run (the host "
                   "and CUDA backends do)", be->name, T > 1 ? "tensor parallelism over data-parallel ranks" : "dp_replicate (HSDP)");
    int r = comm->rank, tr = r % T, d = r / T, S = (int)shard;
    if (!(groups[GCKPT_GROUP_SHARD] = comm->split(comm, tr + T * (d / S), r, &err)) ||
        !(groups[GCKPT_GROUP_REPLICATE] = comm->split(comm, tr + T * (d % S), r, &err)) ||
        (T > 1 && !(groups[GCKPT_GROUP_TP] = comm->split(comm, r / T, r, &err))))
        return bad("%s process groups: %s", T > 1 ? "TP x FSDP's" : "HSDP's", err.msg);
    for (int g = GCKPT_GROUP_SHARD; g < GCKPT_NGROUP; g++)
        if (groups[g] && be->attach_group(be, (gckpt_coll_group)g, groups[g]) != GCKPT_XS_OK)
            return bad("--backend %s: joining the %s group: %s", be->name, gckpt_coll_group_names[g], be->err.msg);
    return 0;
}

static int check_ranks(const gckpt_plan_file *pf, const gckpt_comm *comm)
{
    uint32_t want = gckpt_plan_file_ranks(pf);
    if ((uint32_t)comm->world == want) return 0;
    char line[800];
    snprintf(line, sizeof line, "mpirun -np %u gckpt-run --plan %s ... (as root add --allow-run-as-root; more ranks "
                                "than cores: --oversubscribe)", want, pf->file);
    if (comm->world == 1)
        return bad("%s: a plan for %u ranks (%s): run one process per rank: %s", pf->file, want,
                   pf->layout.tp > 1 ? "tensor parallelism" : gckpt_parallel_names[pf->layout.mode], line);
    return bad("%s: a plan for %u rank%s, started as %d ranks: %s", pf->file, want, want == 1 ? "" : "s", comm->world,
               want == 1 ? "run it without mpirun" : line);
}

/* The plan's fields gckpt-run cannot execute (one line on rank 0, exit 2). */
static int check_plan(const gckpt_plan_file *pf)
{
    gckpt_err why = {{0}};
    if (pf->target != GCKPT_TARGET_CUDA) /* the executor performs the CUDA recipe (gckpt_exec_recipe) */
        return bad("%s: field 'inputs.target' = \"%s\": gckpt-run executes plans of PyTorch's CUDA kernels; "
                   "plan with --target cuda", pf->file, gckpt_target_names[pf->target]);
    if (pf->optimizer == GCKPT_PAGED_ADAMW_8BIT || pf->optimizer == GCKPT_PAGED_ADAMW_32BIT)
        return bad("%s: optimizer %s: gckpt-run has no paged (managed-memory) optimizer states", pf->file,
                   gckpt_optimizer_names[pf->optimizer]);
    if (!gckpt_exec_model_ok(&pf->model, &why))
        return bad("%s: %s", pf->file, why.msg);
    if (pf->loss != GCKPT_LOSS_HF) /* planned only (core/fused_loss.c): no backend has its kernels */
        return bad("%s: field 'inputs.loss' = \"%s\": gckpt-run has no fused-loss kernels; it executes plans of "
                   "--loss hf", pf->file, gckpt_loss_names[pf->loss]);
    return 0;
}

/* Several ranks: mpirun's SIGKILL follows its SIGTERM within a second, so from now on the
 * watchdog writes at once what the report lacks (before the first entry: the header and the
 * summary) and ends the process. */
static void arm_ranks(gckpt_report_file *rf, gckpt_report *rep, bool *write_failed)
{
    gckpt_err err = {{0}};
    stop_grace = 0;
    if (!*write_failed && !gckpt_report_file_arm(rf, rep, NULL, stop_grace, &err)) {
        fprintf(stderr, "gckpt-run: %s\n", err.msg);
        *write_failed = true;
    }
    if (!gckpt_watchdog_start(rf, stop_grace))
        fprintf(stderr, "gckpt-run: note: no watchdog thread; a stop request waits for the next safe point\n");
}

static int run_plan(const args_t *a_in, bool launched, int *argc, char ***argv);

int main(int argc, char **argv)
{
#ifdef GCKPT_TEST_HOOKS
    gckpt_test_hooks_install();
#endif
    gckpt_stdio_guard();
    my_rank = gckpt_comm_launch_rank();
    args_t a;
    int rc = parse_args(argc, argv, &a);
    if (!rc) rc = check_output(&a);
    if (rc) return rc;
    if (a.calibrate) return calibrate(&a);
    /* under mpirun a SIGTERM may come while the ranks start (MPI_Init waits for every rank):
     * it stops the run before its first entry, and the report says so */
    bool launched = gckpt_comm_launched();
    /* several ranks: mpirun may send its SIGTERM more than once; from the first one on, the
     * watchdog writes the report (at once when armed, else as soon as it starts): a second
     * signal before must not end the process with nothing written */
    if (launched && gckpt_comm_launch_world() > 1) stop_grace = 0;
    if (launched) install_handlers();
    return run_plan(&a, launched, &argc, &argv);
}

/* A VLM plan: whether this backend runs its step at the plan's precision (exec_vlm.h's word);
 * else one line naming the plan's field, exit 2. */
static int vlm_runs(const gckpt_plan_file *pf, const gckpt_backend *be)
{
    gckpt_err err = {{0}};
    gckpt_vlm *v = malloc(sizeof *v);
    if (!v) return bad("out of memory");
    gckpt_setting s = pf->n ? gckpt_plan_file_setting(pf, 0) : (gckpt_setting){.precision = pf->precision};
    bool ok = gckpt_vlm_parse(pf->file, pf->config_text, v, &err) && gckpt_vexec_supported(be, v, &s, &err);
    free(v);
    return ok ? 0 : bad("--backend %s: %s: field 'inputs.vision': %s", be->name, pf->file, err.msg);
}

/* Under mpirun everything rank 0's report names (the plan, the entries, the backend and its
 * device) is settled and the watchdog armed before MPI_Init: a rank that ends while the ranks
 * start, or a SIGTERM to mpirun then, leaves the others waiting in MPI_Init until mpirun's
 * SIGKILL about 1 s later, and the report (header and summary) must be out by then. */
static int run_plan(const args_t *a_in, bool launched, int *argc, char ***argv)
{
    args_t a = *a_in;
    int rc = 0;
    if (my_rank) { /* rank 0 writes the one report and the table */
        a.out = NULL;
        a.quiet = true;
    }
    gckpt_err err = {{0}};
    gckpt_plan_file pf;
    if (!gckpt_plan_read(a.plan, &pf, &err)) return bad("%s", err.msg);
    if (!gckpt_plan_executable(&pf, &err)) { /* a plan kind gckpt-plan plans and gckpt-run does not run */
        gckpt_plan_file_free(&pf);
        return bad("%s", err.msg);
    }
    size_t *sel = NULL;
    gckpt_backend *be = NULL;
    gckpt_comm *comm = gckpt_comm_single();
    gckpt_comm *groups[GCKPT_NGROUP] = {NULL}; /* HSDP's (join_groups) */
    gckpt_report rep = {.plan = &pf};
    gckpt_report_file rf;
    bool rf_open = false;
    if ((rc = check_plan(&pf)) != 0) goto out;
    long nsel = select_entries(&a, &pf, &sel);
    if (nsel < 0) {
        rc = GCKPT_EXIT_INPUT;
        goto out;
    }
    if (!(be = make_backend(&a, &rc))) goto out;
    if (pf.layout.cp > 1 && !be->ring_pack) { /* interp_cp.c's ring attention runs on the backend's ring_* ops */
        rc = bad("--backend %s: %s: a context-parallel plan (cp_size %u) needs the backend's ring attention ops, "
                 "which it has not (--backend host)", be->name, pf.file, pf.layout.cp);
        goto out;
    }
    if (pf.vlm && (rc = vlm_runs(&pf, be)) != 0) goto out;
    rep = (gckpt_report){.plan = &pf, .backend = be->name, .planned = (size_t)nsel};
    rep.opts = (gckpt_run_opts){.steps = (int)a.steps, .warmup = (int)a.warmup, .tolerance = a.tolerance,
                                .time_tolerance = a.time_tolerance, .force = a.force, .seed = a.seed,
                                .memory_limit = a.limit_bytes, .host_guard = !strcmp(be->name, "host")};
    be->describe(be, &rep.dev);
    rep.entries = calloc((size_t)nsel, sizeof *rep.entries);
    if (!rep.entries) {
        rc = bad("out of memory for the reports of %ld entries", nsel);
        goto out;
    }
    bool write_failed = false;
    rf_open = true;
    if (!gckpt_report_file_open(&rf, a.out, &rep, &err)) {
        fprintf(stderr, "gckpt-run: %s\n", err.msg);
        write_failed = true;
    }
    /* From here on SIGINT / SIGTERM stop the run at the next safe point instead of killing
     * it: the entry running is reported as interrupted and everything is freed. Code that
     * never reaches a safe point is cut off by the watchdog after GCKPT_STOP_GRACE_S. */
    rep.opts.stop = &stop_signal;
    /* several ranks by the launcher's word: armed before MPI_Init; a launcher that does not
     * say how many ranks it started: after */
    bool ranks = launched && gckpt_comm_launch_world() > 1;
    if (ranks) arm_ranks(&rf, &rep, &write_failed);
    if (launched) {
        if (!(comm = gckpt_comm_mpi_new(argc, argv, &err))) {
            comm = gckpt_comm_single();
            rc = bad("%s", err.msg);
            goto out;
        }
        if (comm->rank != my_rank) { /* the report's writer was chosen by the launcher's rank */
            int env_rank = my_rank;
            my_rank = comm->rank;
            rc = bad("the launcher's environment gives this process rank %d, MPI rank %d", env_rank, comm->rank);
            goto out;
        }
        comm->timeout_s = a.coll_timeout;
        if (!ranks && comm->world > 1) arm_ranks(&rf, &rep, &write_failed);
        ranks = comm->world > 1;
    }
    rep.opts.comm = comm;
    if ((rc = check_ranks(&pf, comm)) != 0) goto out;
    gckpt_xstatus xs = be->attach(be, comm);
    if (xs != GCKPT_XS_OK) {
        rc = bad("--backend %s: joining the %d ranks: %s", be->name, comm->world, be->err.msg);
        goto out;
    }
    gckpt_layout lay = pf.n ? gckpt_plan_file_setting(&pf, 0).layout : pf.layout; /* every entry's */
    if ((rc = join_groups(be, comm, &lay, groups)) != 0) goto out;
    progress prog = {.n = (size_t)nsel, .tty = !comm->rank && isatty(STDERR_FILENO), .steps = (int)(a.steps + a.warmup)};
    if (!strcmp(be->name, "host") && !comm->rank) say_estimate(&pf, sel, nsel, &a, &prog);
    clock_gettime(CLOCK_MONOTONIC, &prog.start);
    rep.opts.on_step = on_step;
    rep.opts.on_step_ctx = &prog;
    if (!ranks && !gckpt_watchdog_start(&rf, stop_grace))
        fprintf(stderr, "gckpt-run: note: no watchdog thread; a stop request waits for the next safe point\n");
    install_handlers();
    int status = run_entries(be, &pf, sel, nsel, &rep, &rf, &prog, &write_failed);
    rc = end_run(&a, be, &pf, &rep, &rf, status, write_failed);
out:
    if (rf_open) gckpt_report_file_close(&rf);
    for (size_t i = 0; i < rep.n; i++) gckpt_entry_report_free(&rep.entries[i]);
    free(rep.entries);
    if (be) be->destroy(be);
    for (int g = GCKPT_NGROUP - 1; g > GCKPT_GROUP_WORLD; g--)
        if (groups[g]) groups[g]->destroy(groups[g]);
    free(sel);
    gckpt_plan_file_free(&pf);
    comm->destroy(comm);
    return rc;
}
