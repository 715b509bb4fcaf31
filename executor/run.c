/* Running one plan entry: rebuild its schedule, allocate the persistent state, run
 * warm-up and measured steps, read the backend's memory counters and timer, free
 * everything, and judge the measurements against the plan. Out of memory, errors and a
 * stop request (a signal: status interrupted) become the entry's status; the backend is
 * left empty for the next entry on every path. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gckpt/core/cp.h"
#include "gckpt/core/eval.h"
#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/exec_run.h"
#include "gckpt/executor/exec_vlm.h"


const char *gckpt_signal_name(int sig)
{
    static char buf[24];
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
    }
}

static bool stopping(const gckpt_run_opts *o) { return o->stop && *o->stop; }

static void append(char *buf, size_t n, const char *text)
{
    size_t l = strlen(buf);
    if (l + 1 < n) snprintf(buf + l, n - l, "%s", text);
}

static void check(gckpt_check *c, uint64_t predicted, uint64_t value, double tol, bool judged)
{
    c->measured = true;
    c->judged = judged;
    c->predicted = predicted;
    c->value = value;
    if (predicted) c->rel = ((double)value - (double)predicted) / (double)predicted;
    else c->rel = value ? NAN : 0.0;
    c->pass = !isnan(c->rel) && fabs(c->rel) <= tol;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double *t = malloc(sizeof *t * (size_t)(n ? n : 1));
    if (!t) return v[n / 2];
    memcpy(t, v, sizeof *t * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void set_status(gckpt_entry_report *rep, gckpt_run_status st, const char *msg)
{
    rep->status = st;
    if (msg && *msg) snprintf(rep->message, sizeof rep->message, "%s", msg);
}

/* An entry's executor: a plan's one interpreter, or a VLM plan's step (exec_vlm.h) with the
 * text side's interpreter in x. */
typedef struct {
    gckpt_exec *x;
    gckpt_vexec *vx;
} runner;

static gckpt_xstatus r_setup(runner *r, gckpt_err *err)
{
    return r->vx ? gckpt_vexec_setup(r->vx, err) : gckpt_exec_setup(r->x, err);
}

static gckpt_xstatus r_step(runner *r, const gckpt_step_opts *so, gckpt_step_result *res, gckpt_err *err)
{
    return r->vx ? gckpt_vexec_step(r->vx, so, res, err) : gckpt_exec_step(r->x, so, res, err);
}

static void r_free(runner *r)
{
    if (r->vx) gckpt_vexec_free(r->vx);
    else gckpt_exec_free(r->x);
    r->x = NULL;
    r->vx = NULL;
}

/* The entry's executor and this build's walk of its schedule (a VLM's: gckpt_vlm_walk, the
 * plan's). */
static bool r_new(runner *r, gckpt_backend *be, const gckpt_plan_file *pf, const gckpt_setting *s,
                  const gckpt_exec_opts *xo, gckpt_result *walk, gckpt_err *err)
{
    memset(r, 0, sizeof *r);
    if (!pf->vlm) {
        if (!(r->x = gckpt_exec_new(be, &pf->model, &pf->dev, s, xo, err))) return false;
        const gckpt_ctx *xc = gckpt_exec_ctx(r->x);
        gckpt_walk(xc, gckpt_exec_schedule(r->x), walk);
        uint32_t cp = xc->set.layout.cp;
        if (cp > 1) { /* this CP rank's: the walk plus CP's buffers or a ring call (core/cp_walk.c) */
            unsigned es = xc->set.precision == GCKPT_FP32 ? 4 : 2;
            if (!gckpt_cp_peak(xc, xc->set.seq * cp, cp, (uint32_t)xo->rank % cp, GCKPT_CP_ALLGATHER, es, es, walk)) {
                gckpt_seterr(err, "out of memory walking the CP step");
                r_free(r);
                return false;
            }
        }
        return true;
    }
    gckpt_vlm *v = malloc(sizeof *v);
    gckpt_vlm_images im = {.images = pf->vlm_images, .tiles = pf->vlm_tiles, .tokens = pf->vlm_tokens,
                           .tower_trained = pf->vlm_tower_trained, .h = pf->vlm_h, .w = pf->vlm_w};
    gckpt_vlm_step_info info;
    bool ok = v && gckpt_vlm_parse(pf->file, pf->config_text, v, err) &&
              (r->vx = gckpt_vexec_new(be, v, &pf->dev, s, &im, xo, err)) != NULL &&
              gckpt_vlm_walk(v, &pf->dev, s, GCKPT_TARGET_CUDA, &im, walk, &info, err);
    if (!v) gckpt_seterr(err, "out of memory");
    free(v);
    if (ok) r->x = gckpt_vexec_side(r->vx, false);
    else r_free(r);
    return ok;
}

/* Run the steps; the executor's allocations are released by the caller. A stop request
 * is honoured between the executor's events (inside gckpt_exec_setup / gckpt_exec_step)
 * and between steps. */
static void run_steps(runner *x, gckpt_backend *be, const gckpt_run_opts *o, gckpt_entry_report *rep)
{
    gckpt_err err = {{0}};
    gckpt_xstatus rc = r_setup(x, &err);
    bool set_up = rc == GCKPT_XS_OK;
    int total = o->warmup + o->steps, s = 0;
    for (; rc == GCKPT_XS_OK && s < total; s++) {
        if (stopping(o)) {
            gckpt_seterr(&err, "interrupted before the step");
            rc = GCKPT_XS_INTERRUPTED;
            break;
        }
        bool last = s == total - 1;
        gckpt_step_opts so = {.update = true, .checksum = last};
        gckpt_step_result res;
        rc = r_step(x, &so, &res, &err);
        if (rc != GCKPT_XS_OK) break;
        if (s >= o->warmup) rep->step_times[rep->nsteps++] = res.seconds;
        if (o->on_step) o->on_step(o->on_step_ctx, s + 1, total);
        if (last) {
            rep->has_numbers = true;
            rep->loss = res.loss;
            rep->nmicro = res.nmicro;
            memcpy(rep->micro_loss, res.micro_loss, sizeof rep->micro_loss);
            rep->grad_hash = res.grad_hash;
            rep->grad_norm = res.grad_norm;
        }
    }
    if (rc == GCKPT_XS_OK && (rc = be->sync(be)) != GCKPT_XS_OK) snprintf(err.msg, sizeof err.msg, "%s", be->err.msg);
    if (rc == GCKPT_XS_INTERRUPTED) {
        rep->status = GCKPT_RS_INTERRUPTED;
        int sig = o->stop ? (int)*o->stop : 0;
        const char *by = sig ? gckpt_signal_name(sig) : "a stop request";
        if (!set_up) snprintf(rep->message, sizeof rep->message, "stopped by %s: ", by);
        else snprintf(rep->message, sizeof rep->message, "stopped by %s in step %d of %d (%d warm-up): ", by, s + 1, total, o->warmup);
        append(rep->message, sizeof rep->message, err.msg);
    } else if (rc == GCKPT_XS_OOM) {
        set_status(rep, GCKPT_RS_OOM, err.msg);
    } else if (rc != GCKPT_XS_OK) {
        set_status(rep, GCKPT_RS_ERROR, err.msg);
    }
}

/* peak: the allocated peak judged against (several ranks: this rank's own schedule's, since
 * the plan's is the busiest rank's, which busiest_rank judges the entry against) */
static void judge(gckpt_entry_report *rep, const gckpt_entry *e, uint64_t peak, const gckpt_memstat *ms,
                  const gckpt_run_opts *o)
{
    check(&rep->peak, peak, ms->allocated_peak, o->tolerance, true);
    check(&rep->pinned, e->r.host_pinned_bytes, ms->pinned_peak, o->tolerance, true);
    if (ms->has_device) {
        check(&rep->device_peak, e->r.device_peak_bytes, ms->device_used_peak, o->tolerance, true);
        rep->device_over_baseline = ms->device_used_peak > ms->device_baseline ? ms->device_used_peak - ms->device_baseline : 0;
        rep->context_bytes = ms->device_baseline;
    }
    if (rep->nsteps > 0) {
        rep->has_time = true;
        rep->step_s = median(rep->step_times, rep->nsteps);
        rep->step_rel = rep->pred_step_s > 0 ? (rep->step_s - rep->pred_step_s) / rep->pred_step_s : NAN;
        /* the plan's times are for its GPU: judged only on a GPU and when asked */
        rep->time_judged = ms->has_device && o->time_tolerance >= 0;
        rep->time_pass = !isnan(rep->step_rel) && fabs(rep->step_rel) <= o->time_tolerance;
    }
    bool pass = rep->peak.pass && rep->pinned.pass;
    if (rep->device_peak.measured) pass = pass && rep->device_peak.pass;
    if (rep->time_judged) pass = pass && rep->time_pass;
    rep->pass = pass;
    if (!pass && !rep->message[0])
        snprintf(rep->message, sizeof rep->message, "measured beyond the tolerance of %.3g", o->tolerance);
}

void gckpt_entry_report_free(gckpt_entry_report *rep)
{
    free(rep->step_times);
    rep->step_times = NULL;
    rep->nsteps = 0;
    free(rep->ranks);
    rep->ranks = NULL;
    rep->nranks = 0;
}

void gckpt_entry_begin(const gckpt_plan_file *pf, size_t i, gckpt_entry_report *rep)
{
    const gckpt_entry *e = &pf->entries[i];
    memset(rep, 0, sizeof *rep);
    rep->index = i;
    rep->every_n = e->every_n;
    rep->offload = e->offload;
    rep->micro_batch = e->micro_batch;
    rep->grad_accum = e->grad_accum;
    rep->fits = e->fits;
    rep->pass = -1;
    rep->pred_step_s = e->r.step_s;
    rep->peak.predicted = e->r.peak_bytes;
    rep->device_peak.predicted = e->r.device_peak_bytes;
    rep->pinned.predicted = e->r.host_pinned_bytes;
}

static int world_of(const gckpt_run_opts *o) { return o->comm ? o->comm->world : 1; }

/* Whether every rank says yes (one that says no makes all skip or stop together: a rank
 * left alone would wait in the next collective). */
static bool all_agree(const gckpt_run_opts *o, bool yes)
{
    if (world_of(o) == 1) return yes;
    float no = yes ? 0.0f : 1.0f, any = 0;
    gckpt_comm_label(o->comm, "the ranks' agreement to run the entry (host memory)");
    if (!o->comm->collective(o->comm, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_SUM, &no, &any, 1, GCKPT_DT_F32, 0)) return false;
    return any == 0;
}

static void run_one(gckpt_backend *be, const gckpt_plan_file *pf, size_t i, const gckpt_run_opts *o,
                    gckpt_entry_report *rep)
{
    double t0 = now();
    const gckpt_entry *e = &pf->entries[i];
    gckpt_entry_begin(pf, i, rep);
    if (!e->fits && !o->force) {
        snprintf(rep->message, sizeof rep->message,
                 "predicted not to fit (device peak %llu bytes > usable %llu); --force runs it",
                 (unsigned long long)e->r.device_peak_bytes, (unsigned long long)pf->usable_bytes);
        rep->status = GCKPT_RS_SKIPPED;
        return;
    }
    gckpt_err err = {{0}};
    gckpt_memstat ms;
    be->memstat(be, &ms);
    if (ms.allocated || ms.pinned) {
        snprintf(rep->message, sizeof rep->message, "the backend still holds %llu bytes from an earlier run",
                 (unsigned long long)(ms.allocated + ms.pinned));
        rep->status = GCKPT_RS_ERROR;
        rep->pass = 0;
        return;
    }
    gckpt_setting s = gckpt_plan_file_setting(pf, i);
    gckpt_exec_opts xo = {.seed = o->seed, .stop = o->stop, .rank = o->comm ? o->comm->rank : 0, .world = world_of(o),
                          .comm = o->comm};
    runner x;
    gckpt_result walk;
    if (!r_new(&x, be, pf, &s, &xo, &walk, &err)) {
        set_status(rep, GCKPT_RS_ERROR, err.msg);
        rep->pass = 0;
        return;
    }
    rep->pred_schedule_peak = walk.peak_bytes;
    /* the larger of the plan's counts and this build's */
    uint64_t peak = walk.peak_bytes > e->r.peak_bytes ? walk.peak_bytes : e->r.peak_bytes;
    uint64_t pinned = walk.host_pinned_bytes > e->r.host_pinned_bytes ? walk.host_pinned_bytes : e->r.host_pinned_bytes;
    /* (a VLM's: the text side's kernels' scratch, the larger by far in the planned configs) */
    bool admit = !o->host_guard || o->force ||
                 gckpt_host_admit(x.x, peak, pinned, o->memory_limit, rep->message, sizeof rep->message);
    if (!all_agree(o, admit)) {
        if (admit) snprintf(rep->message, sizeof rep->message, "another rank has not the host memory for this entry");
        rep->status = GCKPT_RS_SKIPPED_HOST_MEMORY;
        r_free(&x);
        rep->wall_s = now() - t0;
        return;
    }
    be->reset_peaks(be);
    rep->status = GCKPT_RS_OK;
    rep->step_times = malloc(sizeof *rep->step_times * (size_t)(o->steps > 0 ? o->steps : 1));
    if (rep->step_times) run_steps(&x, be, o, rep);
    else set_status(rep, GCKPT_RS_OOM, "out of host memory for the step times");
    be->memstat(be, &ms);
    r_free(&x);
    gckpt_memstat after;
    be->memstat(be, &after);
    bool leaked = after.allocated || after.pinned;
    if (leaked) {
        /* every path (ok, out of memory, error, interrupted) must leave the backend empty */
        size_t l = strlen(rep->message);
        snprintf(rep->message + l, sizeof rep->message - l, "%s%llu bytes still allocated after the run",
                 l ? "; " : "", (unsigned long long)(after.allocated + after.pinned));
        if (rep->status == GCKPT_RS_OK) rep->status = GCKPT_RS_ERROR;
    }
    if (rep->status == GCKPT_RS_OK) {
        judge(rep, e, world_of(o) > 1 ? walk.peak_bytes : e->r.peak_bytes, &ms, o);
        if (walk.peak_bytes != e->r.peak_bytes && !rep->message[0] && world_of(o) == 1) /* ranks: busiest_rank */
            snprintf(rep->message, sizeof rep->message,
                     "note: the plan's peak (%llu) differs from this build's schedule (%llu): the plan is from another planner version",
                     (unsigned long long)e->r.peak_bytes, (unsigned long long)walk.peak_bytes);
    } else if (rep->status == GCKPT_RS_OOM) {
        /* an out of memory agrees with a prediction that the entry does not fit */
        rep->pass = !e->fits;
    } else {
        rep->pass = 0; /* error, interrupted */
    }
    if (leaked) rep->pass = 0;
    rep->wall_s = now() - t0;
}

/* This rank's result, for rank 0's report. */
static void rank_result(const gckpt_entry_report *rep, int rank, gckpt_rank_result *r)
{
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->status = (int32_t)rep->status;
    r->pass = rep->pass;
    r->has_numbers = rep->has_numbers;
    r->nmicro = rep->nmicro;
    r->has_time = rep->has_time;
    r->pred_peak = rep->pred_schedule_peak;
    r->peak = rep->peak.value;
    r->pred_pinned = rep->pinned.predicted;
    r->pinned = rep->pinned.value;
    r->step_s = rep->step_s;
    r->loss = rep->loss;
    r->grad_norm = rep->grad_norm;
    r->grad_hash = rep->grad_hash;
    memcpy(r->micro_loss, rep->micro_loss, sizeof r->micro_loss);
    snprintf(r->message, sizeof r->message, "%.159s", rep->message);
}

/* Rank 0's entry from every rank's result: the loss of the global batch (every micro-step's
 * loss summed in the order of the global batch, as one process running them all sums its
 * own), failed when any rank failed, the first failing rank's status and message. */
static void merge_ranks(gckpt_entry_report *rep)
{
    double sum = 0;
    int n = 0;
    bool numbers = true;
    for (int r = 0; r < rep->nranks; r++) {
        const gckpt_rank_result *x = &rep->ranks[r];
        numbers = numbers && x->has_numbers;
        for (int k = 0; k < x->nmicro; k++, n++) sum += x->micro_loss[k];
        if (x->pass == 0 && rep->pass != 0) {
            rep->pass = 0;
            if (rep->status == GCKPT_RS_OK) rep->status = (gckpt_run_status)x->status;
            if (r) snprintf(rep->message, sizeof rep->message, "rank %d: %.159s", r, x->message[0] ? x->message : "failed");
        }
    }
    rep->has_numbers = numbers && n > 0;
    if (rep->has_numbers) rep->loss = sum / n;
}

/* The plan's memory is the busiest rank's (zero2: the last rank may peak above rank 0): the
 * entry's measured peak is the highest rank's, judged against the plan, and this build's
 * schedule agrees with the plan when its busiest rank's does. */
static void busiest_rank(gckpt_entry_report *rep, const gckpt_entry *e, const gckpt_run_opts *o)
{
    uint64_t meas = 0, pred = 0;
    for (int r = 0; r < rep->nranks; r++) {
        if (rep->ranks[r].peak > meas) meas = rep->ranks[r].peak;
        if (rep->ranks[r].pred_peak > pred) pred = rep->ranks[r].pred_peak;
    }
    if (rep->status != GCKPT_RS_OK || !rep->peak.measured) return;
    rep->pred_schedule_peak = pred;
    check(&rep->peak, e->r.peak_bytes, meas, o->tolerance, true);
    rep->pass = rep->pass && rep->peak.pass;
    if (pred != e->r.peak_bytes && !rep->message[0])
        snprintf(rep->message, sizeof rep->message,
                 "note: the plan's peak (%llu) differs from this build's schedule of the busiest rank (%llu): the plan is "
                 "from another planner version",
                 (unsigned long long)e->r.peak_bytes, (unsigned long long)pred);
}

void gckpt_run_entry(gckpt_backend *be, const gckpt_plan_file *pf, size_t i, const gckpt_run_opts *o,
                     gckpt_entry_report *rep)
{
    run_one(be, pf, i, o, rep);
    int world = world_of(o);
    if (world == 1) return;
    gckpt_rank_result mine;
    rank_result(rep, o->comm->rank, &mine);
    gckpt_rank_result *all = NULL;
    if (o->comm->rank == 0 && !(all = calloc((size_t)world, sizeof *all))) {
        /* a few KiB: the ranks would wait for rank 0 in the gather; end them all */
        fprintf(stderr, "gckpt-run: out of memory for the %d ranks' results\n", world);
        exit(GCKPT_EXIT_CHECK);
    }
    gckpt_comm_label(o->comm, "the ranks' results of the entry");
    if (!o->comm->gather(o->comm, &mine, all, sizeof mine)) {
        /* this rank's own error first (the one that put the ranks out of step, or the failed
         * collective's, which names them): the gather fails at once after a failed collective */
        char own[sizeof rep->message];
        snprintf(own, sizeof own, "%s", rep->message);
        if (own[0] && rep->status != GCKPT_RS_OK && o->comm->failed && strstr(own, o->comm->err.msg))
            snprintf(rep->message, sizeof rep->message, "%s", own);
        else if (own[0] && rep->status != GCKPT_RS_OK)
            snprintf(rep->message, sizeof rep->message, "%.180s; gathering the ranks' results: %.290s", own, o->comm->err.msg);
        else
            snprintf(rep->message, sizeof rep->message, "gathering the ranks' results: %.400s", o->comm->err.msg);
        rep->status = GCKPT_RS_ERROR;
        rep->pass = 0;
        free(all);
        return;
    }
    if (!all) return;
    rep->ranks = all;
    rep->nranks = world;
    merge_ranks(rep);
    busiest_rank(rep, &pf->entries[i], o);
}
