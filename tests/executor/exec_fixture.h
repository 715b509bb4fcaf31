/* Shared helpers of the executor tests: tiny models, one step with all gradients
 * captured. */
#ifndef GCKPT_TEST_EXEC_FIXTURE_H
#define GCKPT_TEST_EXEC_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/eval.h"
#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/executor.h"

#ifndef GCKPT_TEST_DATA
#define GCKPT_TEST_DATA "tests/executor/data"
#endif

/* The model of fixture NAME (tests/executor/data/NAME.json); aborts on failure. */
static inline gckpt_model fx_model(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", GCKPT_TEST_DATA, name);
    gckpt_model m;
    gckpt_err err = {{0}};
    if (!gckpt_model_load(path, &m, &err)) {
        fprintf(stderr, "fixture %s: %s\n", name, err.msg);
        abort();
    }
    return m;
}

static inline gckpt_device fx_device(void)
{
    gckpt_device d;
    gckpt_err err = {{0}};
    if (!gckpt_device_load("h100-sxm-80gb", &d, &err)) {
        fprintf(stderr, "device: %s\n", err.msg);
        abort();
    }
    return d;
}

/* All parameter gradients of a step, raw bytes in parameter order. */
typedef struct {
    unsigned char *bytes;
    size_t n, cap;
    bool failed;
    const gckpt_recipe *r;
    uint64_t layers;
} fx_grads;

static inline void fx_collect(gckpt_exec *x, void *user)
{
    fx_grads *g = user;
    const gckpt_recipe *r = g->r;
    gckpt_err err = {{0}};
    for (int t = 0; t < r->nt; t++) {
        if (r->t[t].kind != GCKPT_T_PARAM || !r->t[t].requires_grad) continue; /* frozen: no .grad */
        uint64_t nl = gckpt_sec_is_block(r->t[t].section) ? g->layers : 1;
        for (uint64_t l = 0; l < nl; l++) {
            if (!gckpt_exec_param_in_layer(x, t, (int)l)) continue; /* another block type's */
            uint64_t bytes = gckpt_param_numel(r, t) * gckpt_dtype_size((gckpt_dtype)r->t[t].dtype);
            if (g->n + bytes > g->cap) {
                size_t nc = (g->cap + bytes) * 2;
                unsigned char *nb = realloc(g->bytes, nc);
                if (!nb) {
                    g->failed = true;
                    return;
                }
                g->bytes = nb;
                g->cap = nc;
            }
            if (gckpt_exec_read_grad_raw(x, (int)l, t, g->bytes + g->n, bytes, &err) != GCKPT_XS_OK) {
                fprintf(stderr, "read grad: %s\n", err.msg);
                g->failed = true;
                return;
            }
            g->n += bytes;
        }
    }
}

/* The outcome of running steps of one setting. */
typedef struct {
    gckpt_xstatus rc;
    char msg[512];
    double loss[2];
    uint64_t hash[2];
    fx_grads grads[2];          /* gradients of each step */
    uint64_t peak, pinned;      /* measured */
    gckpt_result pred;          /* the event walk */
    uint64_t left;              /* bytes still allocated after the executor is freed */
    uint64_t scratch;           /* host backend: measured kernel scratch peak */
    gckpt_host_need need;       /* host backend: what the memory guard would ask for */
} fx_run;

static inline void fx_run_free(fx_run *r)
{
    free(r->grads[0].bytes);
    free(r->grads[1].bytes);
}

/* Run `steps` (1 or 2) steps of setting s on backend be with all gradients captured. */
/* ... with biases initialised uniform of std bias_std instead of 0 */
static inline void fx_steps_bias(gckpt_backend *be, const gckpt_model *m, const gckpt_device *d, const gckpt_setting *s,
                                 int steps, double bias_std, fx_run *out)
{
    memset(out, 0, sizeof *out);
    gckpt_err err = {{0}};
    gckpt_exec_opts o = {.seed = 7, .init_std = 0.05, .bias_std = bias_std};
    gckpt_exec *x = gckpt_exec_new(be, m, d, s, &o, &err);
    if (!x) {
        out->rc = GCKPT_XS_ERROR;
        snprintf(out->msg, sizeof out->msg, "%s", err.msg);
        return;
    }
    gckpt_walk(gckpt_exec_ctx(x), gckpt_exec_schedule(x), &out->pred);
    gckpt_host_need_of(x, out->pred.peak_bytes, out->pred.host_pinned_bytes, 0, &out->need);
    be->reset_peaks(be);
    out->rc = gckpt_exec_setup(x, &err);
    for (int i = 0; i < steps && out->rc == GCKPT_XS_OK; i++) {
        out->grads[i].r = gckpt_exec_ctx(x)->recipe;
        out->grads[i].layers = m->layers;
        gckpt_step_opts so = {.update = true, .checksum = true, .on_grads = fx_collect, .user = &out->grads[i]};
        gckpt_step_result res;
        out->rc = gckpt_exec_step(x, &so, &res, &err);
        out->loss[i] = res.loss;
        out->hash[i] = res.grad_hash;
        if (out->grads[i].failed) out->rc = GCKPT_XS_ERROR;
    }
    if (out->rc != GCKPT_XS_OK) snprintf(out->msg, sizeof out->msg, "%s", err.msg);
    gckpt_memstat ms;
    be->memstat(be, &ms);
    out->peak = ms.allocated_peak;
    out->pinned = ms.pinned_peak;
    out->scratch = gckpt_host_scratch_peak();
    gckpt_exec_free(x);
    be->memstat(be, &ms);
    out->left = ms.allocated + ms.pinned;
}

static inline void fx_steps(gckpt_backend *be, const gckpt_model *m, const gckpt_device *d, const gckpt_setting *s,
                            int steps, fx_run *out)
{
    fx_steps_bias(be, m, d, s, steps, 0, out);
}

#ifdef CMOCKA_H_
/* Two runs of the same steps on one backend: losses, every gradient and their hashes
 * bitwise equal (the executor's claim across every_n_layers / offload). */
static inline void fx_assert_same_steps(const fx_run *r, const fx_run *ref)
{
    for (int i = 0; i < 2; i++) {
        assert_memory_equal(&r->loss[i], &ref->loss[i], sizeof(double));
        assert_int_equal(r->grads[i].n, ref->grads[i].n);
        assert_memory_equal(r->grads[i].bytes, ref->grads[i].bytes, r->grads[i].n);
        assert_int_equal(r->hash[i], ref->hash[i]);
    }
}

/* One run of a sweep over settings: the measured peak and pinned bytes equal the event
 * walk's, nothing is left allocated, the loss is positive; the first run becomes *ref
 * (kept: the caller frees it), every later one must equal it (and is freed here). */
static inline void fx_sweep_check(fx_run *r, fx_run *ref, bool *have_ref)
{
    assert_int_equal(r->peak, r->pred.peak_bytes);
    assert_int_equal(r->pinned, r->pred.host_pinned_bytes);
    assert_int_equal(r->left, 0);
    assert_true(r->loss[0] > 0);
    if (!*have_ref) {
        *ref = *r;
        *have_ref = true;
        return;
    }
    fx_assert_same_steps(r, ref);
    fx_run_free(r);
}
#endif

#endif
