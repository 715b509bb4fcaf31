/* The toy parallel mode and the toy primitive that docs/architecture.md ("Where to add ...")
 * walks through, built for real: this test links core and the executor compiled with
 * GCKPT_TOY (tests/toy/CMakeLists.txt), where GCKPT_PAR_TOY (replicas that never communicate)
 * and GCKPT_P_TOY (x.clone(), traced on every model's head) have one row in each table. It
 * checks what each row promises: the mode's name, checks and per-rank rows (against a closed
 * form); the fast evaluator against the walk under the mode; the primitive's row, its place
 * in the recipe and its host kernels; and two ranks of the mode run on the host backend with
 * the measured peak equal to the walk's and rank 0's gradients equal to one GPU's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "exec_fixture.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/prim.h"
#include "host_ops.h"

#ifndef GCKPT_TOY
#error "test_toy is built with GCKPT_TOY (tests/toy/CMakeLists.txt)"
#endif

static const gckpt_layout toy2 = {.gpus = 2, .nodes = 1, .mode = GCKPT_PAR_TOY};

/* The mode's name and what it refuses (its row's min_world and masks). */
static void mode_row(void **state)
{
    (void)state;
    assert_int_equal(gckpt_parallel_from("toy"), GCKPT_PAR_TOY);
    assert_string_equal(gckpt_parallel_names[GCKPT_PAR_TOY], "toy");
    const gckpt_par_mode *d = gckpt_par_mode_of(GCKPT_PAR_TOY);
    assert_true(d->multi && d->rows && d->apply && !d->sim && !d->sync_events && !d->step_gather_events);
    gckpt_err err = {{0}};
    gckpt_setting s = {.precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW, .layout = toy2};
    assert_true(gckpt_layout_check(&s, &err));
    s.optimizer = GCKPT_SGD; /* not in the row's optimizers */
    assert_false(gckpt_layout_check(&s, &err));
}

/* Its rows on one rank: one GPU's weights and AdamW states, AdamW's 4-byte step per tensor, the
 * model's buffers; no gradient buffer, no collective. */
static void mode_rows(void **state)
{
    (void)state;
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 2, .precision = GCKPT_AMP_BF16,
                       .optimizer = GCKPT_ADAMW, .layout = toy2};
    static gckpt_recipe r;
    gckpt_setting_recipe(&m, &s, GCKPT_TARGET_CUDA, &r);
    gckpt_ctx c;
    gckpt_err err = {{0}};
    if (!gckpt_ctx_init(&c, &m, &d, &r, &s, &err)) fail_msg("%s", err.msg);
    uint64_t weights = 0, states = 0, tensors = 0, round = d.alloc_round_bytes;
    for (int i = 0; i < c.params.n; i++) {
        const gckpt_param *p = &c.params.p[i];
        weights += p->copies * p->weight.bytes;
        states += p->copies * (p->state[0].bytes + p->state[1].bytes);
        tensors += p->copies;
    }
    /* tiny-llama's rotary inv_freq and original_inv_freq, fp32, rotary_dim / 2 each */
    uint64_t buffers = 2 * m.rope_tables * gckpt_round_up(4 * (m.rotary_dim / 2), round);
    gckpt_rank_bytes rb;
    gckpt_rank_persistent(&c.params, &m, &s, 1, round, &rb);
    assert_int_equal(rb.weights, weights);
    assert_int_equal(rb.states, states);
    assert_int_equal(rb.scalars, 4 * tensors);
    assert_int_equal(rb.grads, 0);
    assert_int_equal(rb.master, 0);
    assert_int_equal(rb.buffers, buffers);
    assert_int_equal(c.parallel, 4 * tensors + buffers); /* what the mode keeps beyond one GPU's state */
}

/* The walk and the fast evaluator agree on every every_n and offload under the mode. */
static void mode_plans(void **state)
{
    (void)state;
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    static gckpt_recipe r;
    static gckpt_profile prof;
    for (int prec = GCKPT_FP32; prec <= GCKPT_AMP_BF16; prec += GCKPT_AMP_BF16 - GCKPT_FP32) {
        gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 3, .precision = (gckpt_precision)prec,
                           .optimizer = GCKPT_ADAMW, .layout = toy2};
        gckpt_setting_recipe(&m, &s, GCKPT_TARGET_CUDA, &r);
        gckpt_ctx c;
        gckpt_err err = {{0}};
        if (!gckpt_ctx_init(&c, &m, &d, &r, &s, &err)) fail_msg("%s", err.msg);
        assert_true(gckpt_profile_build(&c, &prof));
        for (uint32_t n = 0; n <= m.layers; n++)
            for (int off = 0; off < (n ? 2 : 1); off++) {
                c.set.every_n = n;
                c.set.offload = off;
                gckpt_schedule ev;
                assert_true(gckpt_schedule_build(&c, &ev));
                gckpt_result a, b;
                gckpt_walk(&c, &ev, &a);
                gckpt_schedule_free(&ev);
                gckpt_fast_eval(&c, &prof, n, off, 3, &b);
                assert_int_equal(a.peak_bytes, b.peak_bytes);
                gckpt_comm_volume v; /* replicas that never communicate: no collective event */
                gckpt_parallel_volume(&a, &v);
                assert_true(v.gather_fwd == 0 && v.gather_bwd == 0 && v.gather_opt == 0 && v.reduce == 0 &&
                            v.all_reduce == 0);
                for (int k = 0; k < GCKPT_NCOMP; k++) assert_int_equal(a.breakdown[k], b.breakdown[k]);
            }
    }
}

/* The primitive's row, its one op in the head, and its host kernels: a copy forward and
 * backward. */
static void prim_row_and_kernels(void **state)
{
    (void)state;
    const gckpt_prim_info *info = gckpt_prim_of(GCKPT_P_TOY);
    assert_non_null(info);
    assert_string_equal(info->name, "toy");
    assert_int_equal(info->bwd_reads, 0);
    gckpt_model m = fx_model("tiny-llama");
    static gckpt_recipe r;
    gckpt_recipe_build(&m, GCKPT_AMP_BF16, GCKPT_SDPA, &r);
    int found = 0;
    for (int i = 0; i < r.nop; i++)
        if (r.op[i].prim == GCKPT_P_TOY) {
            found++;
            assert_int_equal(r.op[i].section, GCKPT_SEC_HEAD);
            assert_int_equal(r.op[i].in[0], r.head_in);
            assert_int_equal(r.op[i].nsaved, 0);
        }
    assert_int_equal(found, 1);

    const host_kernel *k = host_kernel_of(GCKPT_P_TOY);
    assert_true(k && k->fwd && k->bwd);
    float x[5] = {1.5f, -2, 0.25f, 3, -0.125f}, y[5] = {0}, g[5] = {0};
    gckpt_op op = {.prim = GCKPT_P_TOY, .nin = 1, .name = "toy"};
    gckpt_xcall c = {.op = &op, .b = 1, .s = 5};
    c.in[0] = (gckpt_xt){x, 5, GCKPT_DT_F32, 0};
    c.out[0] = (gckpt_xt){y, 5, GCKPT_DT_F32, 0};
    gckpt_err err = {{0}};
    assert_int_equal(k->fwd(&c, &err), GCKPT_XS_OK);
    assert_memory_equal(x, y, sizeof x);
    c.gout = (gckpt_xt){x, 5, GCKPT_DT_F32, 0};
    c.gin[0] = (gckpt_xt){g, 5, GCKPT_DT_F32, 0};
    assert_int_equal(k->bwd(&c, &err), GCKPT_XS_OK);
    assert_memory_equal(x, g, sizeof x);
}

/* One step of setting s as rank `rank` of `world` on the host backend (no communicator: the
 * toy mode has no collective). */
static void run_rank(const gckpt_model *m, const gckpt_device *d, const gckpt_setting *s, int rank, int world,
                     fx_run *out)
{
    memset(out, 0, sizeof *out);
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_non_null(be);
    gckpt_err err = {{0}};
    gckpt_exec_opts o = {.seed = 7, .init_std = 0.05, .rank = rank, .world = world};
    gckpt_exec *x = gckpt_exec_new(be, m, d, s, &o, &err);
    if (!x) fail_msg("rank %d: %s", rank, err.msg);
    gckpt_walk(gckpt_exec_ctx(x), gckpt_exec_schedule(x), &out->pred);
    be->reset_peaks(be);
    out->rc = gckpt_exec_setup(x, &err);
    out->grads[0].r = gckpt_exec_ctx(x)->recipe;
    out->grads[0].layers = m->layers;
    gckpt_step_opts so = {.update = true, .checksum = true, .on_grads = fx_collect, .user = &out->grads[0]};
    gckpt_step_result res;
    if (out->rc == GCKPT_XS_OK) out->rc = gckpt_exec_step(x, &so, &res, &err);
    if (out->rc != GCKPT_XS_OK) fail_msg("rank %d: %s", rank, err.msg);
    out->loss[0] = res.loss;
    out->hash[0] = res.grad_hash;
    gckpt_memstat ms;
    be->memstat(be, &ms);
    out->peak = ms.allocated_peak;
    gckpt_exec_free(x);
    be->memstat(be, &ms);
    out->left = ms.allocated + ms.pinned;
    be->destroy(be);
}

/* Two ranks of the mode on the host backend, checkpointed and not: each rank's measured peak is
 * the walk's (the mode's rows allocated by exec_rank_buffers, the toy op's output sized by its
 * row); rank 0 trains the global batch's first micro-steps, as one GPU does, with nothing
 * averaged: its loss and gradients are one GPU's bit for bit; rank 1's data differ. */
static void mode_runs(void **state)
{
    (void)state;
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    for (uint32_t n = 0; n <= 1; n++) {
        gckpt_setting one = {.seq = 16, .micro_batch = 2, .grad_accum = 2, .precision = GCKPT_AMP_BF16,
                             .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = n};
        gckpt_setting toy = one;
        toy.layout = toy2;
        fx_run ref, r[2];
        run_rank(&m, &d, &one, 0, 1, &ref);
        for (int k = 0; k < 2; k++) {
            run_rank(&m, &d, &toy, k, 2, &r[k]);
            printf("toy rank %d every_n %u: predicted %llu measured %llu, one GPU %llu\n", k, n,
                   (unsigned long long)r[k].pred.peak_bytes, (unsigned long long)r[k].peak,
                   (unsigned long long)ref.peak);
            assert_int_equal(r[k].peak, r[k].pred.peak_bytes);
            assert_int_equal(r[k].left, 0);
        }
        assert_int_equal(ref.peak, ref.pred.peak_bytes);
        assert_memory_equal(&r[0].loss[0], &ref.loss[0], sizeof(double));
        assert_int_equal(r[0].grads[0].n, ref.grads[0].n);
        assert_memory_equal(r[0].grads[0].bytes, ref.grads[0].bytes, ref.grads[0].n);
        assert_int_equal(r[0].hash[0], ref.hash[0]);
        assert_true(r[1].hash[0] != ref.hash[0]);
        /* the rank keeps its scalars and buffers beyond one GPU's state */
        assert_true(r[0].peak > ref.peak);
        fx_run_free(&ref);
        fx_run_free(&r[0]);
        fx_run_free(&r[1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mode_row),   cmocka_unit_test(mode_rows),           cmocka_unit_test(mode_plans),
        cmocka_unit_test(mode_runs), cmocka_unit_test(prim_row_and_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
