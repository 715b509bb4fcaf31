/* The parallel modes as data (gckpt/core/parallel.h: the descriptor table, the per-rank
 * parameter-state rows). test_parallel holds the rows' sums to the measured fixtures; here:
 *   - the table: one descriptor per mode, complete where it spreads the step;
 *   - the rows describe their bytes: at a 1-byte granularity every row's bytes are its count x
 *     elements x its dtype's size, at 512 B each allocation is rounded (the scalars, measured
 *     as byte counts, summed as they are), so an executor can allocate from a row's fields;
 *   - the persistent bytes are the sum of the rows kept between steps, nothing else
 *     (gckpt_rank_persistent), for every mode, shipped model, world size and precision, and
 *     under amp-bf16 with LoRA and QLoRA (4-bit weights stored as uint8 and as bf16);
 *   - the step-lived rows against closed forms: ZeRO-1/2's ipg bucket (the Trainer's "auto"
 *     reduce_bucket_size, hidden^2 elements of the model dtype, two with overlap_comm) and
 *     FSDP2's fp32 sharded gradients (one per sharded parameter: as many bytes as the fp32
 *     shards). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/recipe.h"

static gckpt_recipe g_r;
static gckpt_params g_ps;
static gckpt_rank_state g_st;

static const char *const models[] = {"gpt2", "llama-3.2-1b", "qwen2.5-0.5b", "gemma-3-1b", "phi-3-mini-4k",
                                     "pythia-1.4b", "olmo-2-7b", "mixtral-8x7b", "gpt-oss-20b"};

/* The rows of rank `rank` of model m under s, allocations rounded to round. */
static void rows(const gckpt_model *m, const gckpt_setting *s, uint32_t rank, uint64_t round)
{
    gckpt_err err;
    bool overflow = false;
    gckpt_setting_recipe(m, s, GCKPT_TARGET_CUDA, &g_r);
    if (!gckpt_params_build(&g_r, m->layers, s->optimizer, round, &g_ps, &overflow, &err)) fail_msg("%s", err.msg);
    assert_false(overflow);
    gckpt_params_shard(&g_ps, m, &s->layout);
    gckpt_rank_rows(&g_ps, m, s, rank, round, &g_st);
}

static gckpt_setting setting(unsigned mode, uint32_t n, gckpt_precision prec, uint32_t every_n)
{
    gckpt_setting s = {0};
    s.seq = s.micro_batch = s.grad_accum = 1;
    s.every_n = every_n;
    s.optimizer = GCKPT_ADAMW;
    s.precision = prec;
    s.layout = (gckpt_layout){n, 1, (uint8_t)mode};
    return s;
}

static void test_table(void **state)
{
    (void)state;
    for (unsigned k = 0; k < GCKPT_NPAR; k++) {
        const gckpt_par_mode *d = gckpt_par_mode_of(k);
        gckpt_layout l = {.gpus = 2, .nodes = 1, .mode = (uint8_t)k};
        assert_int_equal(gckpt_layout_multi(&l), d->multi);
        /* a mode that spreads the step says its rows, what it does to a context and its
         * collectives (as events: its wrapper's in the micro-steps, or the reduction after them) */
        if (d->multi) {
            assert_non_null(d->rows);
            assert_non_null(d->apply);
#ifdef GCKPT_TOY /* the toy's replicas never communicate (tests/toy) */
            if (k != GCKPT_PAR_TOY)
#endif
                assert_true(d->sim != NULL || d->sync_events != NULL);
            assert_true(d->min_world >= 2);
        } else {
            assert_null(d->rows);
            assert_null(d->sim);
        }
    }
    assert_ptr_equal(gckpt_par_mode_of(GCKPT_NPAR), gckpt_par_mode_of(0)); /* out of range: one GPU */
}

/* Bytes of one allocation of a row as its fields describe it. */
static uint64_t described(const gckpt_state_row *r, uint64_t round)
{
    bool scalar = r->kind == GCKPT_ROW_SCALARS || r->kind == GCKPT_ROW_IPG_FLAG;
    uint64_t raw = r->elements * gckpt_dtype_size((gckpt_dtype)r->dtype);
    return scalar ? raw : gckpt_round_up(raw, round);
}

static void test_rows_describe_bytes(void **state)
{
    (void)state;
    static const uint64_t rounds[] = {1, 512};
    static const uint32_t worlds[] = {2, 3, 8};
    static const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_AMP_BF16};
    int checked = 0, multi = 0; /* the modes that spread the step: five, and a test build's toy */
    for (unsigned mode = 0; mode < GCKPT_NPAR; mode++) multi += gckpt_par_mode_of(mode)->multi;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(models[i], &m, &err)) fail_msg("%s", err.msg);
        for (unsigned mode = 0; mode < GCKPT_NPAR; mode++) {
            if (!gckpt_par_mode_of(mode)->multi) continue;
            for (size_t w = 0; w < 3; w++)
                for (size_t p = 0; p < 2; p++)
                    for (uint32_t every_n = 0; every_n < 2; every_n++)
                        for (size_t k = 0; k < 2; k++)
                            for (int v = 0; v < (precs[p] == GCKPT_AMP_BF16 ? 4 : 1); v++) {
                                gckpt_setting s = setting(mode, worlds[w], precs[p], every_n);
                                /* full fine-tuning, LoRA, QLoRA with uint8 and with bf16 storage */
                                gckpt_peft_default(v == 0 ? GCKPT_METHOD_FULL : v == 1 ? GCKPT_METHOD_LORA : GCKPT_METHOD_QLORA,
                                                   &s.peft);
                                if (v == 3) s.peft.quant_storage = GCKPT_DT_BF16;
                                uint32_t rank = worlds[w] - 1; /* the last rank: FSDP2's local rows shrink there */
                                rows(&m, &s, rank, rounds[k]);
                                uint64_t kept = 0;
                                for (int j = 0; j < g_st.n; j++) {
                                    const gckpt_state_row *r = &g_st.row[j];
                                    if (r->bytes != r->count * described(r, rounds[k]))
                                        fail_msg("%s %s N=%u round %llu: row '%s' (entry %d) has %llu bytes, its fields "
                                                 "say %llu x %llu",
                                                 models[i], gckpt_parallel_names[mode], worlds[w],
                                                 (unsigned long long)rounds[k], r->what, r->param,
                                                 (unsigned long long)r->bytes, (unsigned long long)r->count,
                                                 (unsigned long long)described(r, rounds[k]));
                                    assert_true(r->param < g_ps.n);
                                    assert_int_equal(r->place, GCKPT_PLACE_DEVICE);
                                    if (r->kind < GCKPT_NROW_KEPT) kept += r->bytes;
                                }
                                gckpt_rank_bytes b;
                                gckpt_rank_persistent(&g_ps, &m, &s, rank, rounds[k], &b);
                                assert_int_equal(b.total, kept);
                                checked++;
                            }
        }
    }
    assert_int_equal(checked, (int)(sizeof models / sizeof *models) * multi * 3 * 2 * 2 * (1 + 4));
}

static void test_step_rows(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(models[i], &m, &err)) fail_msg("%s", err.msg);
        for (int overlap = 0; overlap < 2; overlap++)
            for (unsigned mode = 0; mode < GCKPT_NPAR; mode++) {
                const gckpt_par_mode *d = gckpt_par_mode_of(mode);
                if (!d->flat_groups) continue;
                gckpt_setting s = setting(mode, 8, GCKPT_AMP_BF16, 1);
                s.layout.ds.overlap_comm = overlap;
                rows(&m, &s, 0, 1);
                /* bf16 (2 B) x hidden^2, one bucket or overlap_comm's two, and the 4 B beside */
                assert_int_equal(gckpt_rank_rows_bytes(&g_st, GCKPT_ROW_IPG), (overlap ? 2 : 1) * 2 * m.hidden * m.hidden);
                assert_int_equal(gckpt_rank_rows_bytes(&g_st, GCKPT_ROW_IPG_FLAG), 4);
            }
        for (unsigned mode = 0; mode < GCKPT_NPAR; mode++) {
            const gckpt_par_mode *d = gckpt_par_mode_of(mode);
            if (d->shard_how != GCKPT_SHARD_DIM0) {
                continue;
            }
            gckpt_setting s = setting(mode, 8, GCKPT_AMP_BF16, 1);
            rows(&m, &s, 0, 1);
            gckpt_rank_bytes b;
            gckpt_rank_rows_sum(&g_st, &b);
            /* an fp32 sharded gradient per fp32 sharded parameter, padding included */
            assert_int_equal(gckpt_rank_rows_bytes(&g_st, GCKPT_ROW_STEP_GRADS), b.weights);
            assert_int_equal(gckpt_rank_rows_bytes(&g_st, GCKPT_ROW_IPG), 0);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_rows_describe_bytes),
        cmocka_unit_test(test_step_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
