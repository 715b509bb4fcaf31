/* How long a host-backend run will take, roughly: the schedule's matrix FLOPs of every
 * selected entry over a GEMM rate measured here with the CBLAS the backend uses, plus
 * the bytes its other ops move (elementwise, reductions, the optimizer pass) over a rate
 * measured here with the backend's own bf16 load/store. */
#include "host_estimate.h"

#include "gckpt/core/tp.h"
#include "gckpt/core/vlm_step.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gckpt/core/step_walk.h"
#include "host_blas.h"
#include "host_num.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* FLOP/s of an N x N x N sgemm with the backend's own OpenBLAS (single-threaded); 0 when
 * it cannot be loaded. */
static double measure_gemm(void)
{
    enum { N = 384 };
    float *a = calloc((size_t)N * N, sizeof *a), *b = calloc((size_t)N * N, sizeof *b),
          *c = calloc((size_t)N * N, sizeof *c);
    double rate = 0;
    gckpt_err err = {{0}};
    if (a && b && c && host_blas_ready(&err)) {
        for (size_t i = 0; i < (size_t)N * N; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
        host_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N); /* warm-up */
        int reps = 0;
        double t0 = now_s(), t;
        do {
            host_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
            reps++;
        } while ((t = now_s() - t0) < 0.15 && reps < 1000);
        rate = 2.0 * N * N * (double)N * reps / t;
    }
    free(a);
    free(b);
    free(c);
    return rate;
}

/* Measured in a child process: loading OpenBLAS maps its buffer and code (host_blas.h),
 * memory the host memory guard counts on for the entries, so the estimate must not leave
 * it in this process. Called before any thread exists. */
double gckpt_host_gemm_rate(void)
{
    int fd[2];
    if (pipe(fd)) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return 0;
    }
    if (pid == 0) {
        close(fd[0]);
        double r = measure_gemm();
        _exit(write(fd[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    double rate = 0;
    ssize_t got;
    while ((got = read(fd[0], &rate, sizeof rate)) < 0 && errno == EINTR) {}
    if (got != (ssize_t)sizeof rate) rate = 0;
    close(fd[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    return rate;
}

double gckpt_host_elem_rate(void)
{
    enum { N = 1 << 22 };
    float *a = malloc(N * sizeof *a);
    uint16_t *b = malloc(N * sizeof *b);
    double rate = 0;
    if (a && b) {
        for (size_t i = 0; i < N; i++) a[i] = (float)(i % 13) * 0.25f;
        int reps = 0;
        double t0 = now_s(), t;
        do {
            for (size_t i = 0; i < N; i++) b[i] = f32_to_bf16(a[i] * 1.0001f);
            for (size_t i = 0; i < N; i++) a[i] = bf16_to_f32(b[i]) + 1.0f;
            reps++;
        } while ((t = now_s() - t0) < 0.1 && reps < 100);
        rate = (double)N * 12.0 * reps / t; /* bytes read + written */
    }
    free(a);
    free(b);
    return rate;
}

/* The work of one event, times its segment's repeat count: its matrix FLOPs, or the bytes
 * an op without moves. The planner times such an op as its traffic at the profile's HBM
 * rate (x the code base's hbm_factor) plus the code base's op_overhead_s, and the optimizer
 * step as its traffic plus step_overhead_s (core/ctx.c op_seconds): the overheads are the
 * GPU's launch and dispatch, no bytes, and taken for bytes they made a tiny model's step tens
 * of GB (0.033 s of step overhead alone is 100 GB at an H100's rate). */
typedef struct {
    double hbm;                    /* the profile's HBM rate x hbm_efficiency */
    const gckpt_code_base_eff *cb; /* the entry's code base on the profile (CUDA recipes) */
    double flops, bytes;
} step_work;

/* The bytes behind `seconds` that carry `overhead` seconds besides, at `rate` */
static double traffic_of(double seconds, double overhead, double rate)
{
    return seconds > overhead ? (seconds - overhead) * rate : 0;
}

static void work_event(void *user, const gckpt_walk_state *w, const gckpt_event *e)
{
    step_work *sw = user;
    double times = (double)w->repeat, b;
    switch (e->kind) {
    case GCKPT_EV_D2H: case GCKPT_EV_H2D: return;
    case GCKPT_EV_FWD: case GCKPT_EV_RECOMPUTE: case GCKPT_EV_BWD:
        if (e->flops > 0) {
            sw->flops += e->flops * times;
            return;
        }
        b = traffic_of(e->seconds, sw->cb->op_overhead_s, sw->hbm * sw->cb->hbm_factor);
        break;
    case GCKPT_EV_OPT_STEP: b = traffic_of(e->seconds, sw->cb->step_overhead_s, sw->hbm); break;
    default: b = e->seconds * sw->hbm; /* the gradient sums: 3 x bytes at the HBM rate, no overhead */
    }
    sw->bytes += b * times;
}

/* A VLM plan's entry: the composed step's events (both towers and the bridge, core/vlm_step.c). */
static bool vlm_step_work(const gckpt_plan_file *pf, const gckpt_setting *s, step_work *sw)
{
    gckpt_vlm *v = malloc(sizeof *v);
    gckpt_vlm_images im = {.images = pf->vlm_images, .tiles = pf->vlm_tiles, .tokens = pf->vlm_tokens,
                           .tower_trained = pf->vlm_tower_trained, .h = pf->vlm_h, .w = pf->vlm_w};
    gckpt_result res;
    gckpt_vlm_step_info info;
    gckpt_err err = {{0}};
    bool ok = v && gckpt_vlm_parse(pf->file, pf->config_text, v, &err) &&
              gckpt_vlm_walk_events(v, &pf->dev, s, GCKPT_TARGET_CUDA, &im, &res, &info, work_event, sw, &err);
    free(v);
    return ok;
}

bool gckpt_entry_step_work(const gckpt_plan_file *pf, size_t i, double *flops, double *bytes)
{
    gckpt_setting s = gckpt_plan_file_setting(pf, i);
    if (pf->vlm) {
        step_work sw = {pf->dev.hbm_bytes_per_s * pf->dev.hbm_efficiency,
                        gckpt_code_base_of(&pf->dev, GCKPT_TARGET_CUDA, s.code_base), 0, 0};
        bool ok = vlm_step_work(pf, &s, &sw);
        *flops = sw.flops;
        *bytes = sw.bytes;
        return ok;
    }
    gckpt_model m = pf->model;
    if (s.layout.tp > 1) gckpt_tp_local_model(&pf->model, s.layout.tp, 0, &m); /* TP rank 0's (interp.c) */
    gckpt_recipe *r = malloc(sizeof *r);
    *flops = *bytes = 0;
    if (!r) return false;
    gckpt_exec_recipe(&m, &s, r);
    gckpt_ctx *c = malloc(sizeof *c);
    gckpt_err err;
    gckpt_schedule ev = {0};
    bool ok = c && gckpt_ctx_init(c, &m, &pf->dev, r, &s, &err) && gckpt_schedule_build(c, &ev);
    if (ok) {
        step_work sw = {pf->dev.hbm_bytes_per_s * pf->dev.hbm_efficiency,
                        gckpt_code_base_of(&pf->dev, (gckpt_target)r->target, s.code_base), 0, 0};
        gckpt_walk_state w;
        gckpt_walk_begin(&w, NULL, false);
        gckpt_walk_schedule(&w, &ev, work_event, &sw);
        *flops = sw.flops;
        *bytes = sw.bytes;
    }
    gckpt_schedule_free(&ev);
    free(c);
    free(r);
    return ok;
}
