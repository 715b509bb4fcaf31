/* The executor's persistent state on several ranks is the core's parameter-state rows
 * (gckpt_rank_rows): gckpt_exec_setup allocates every held row (gckpt_row_held) as one buffer of
 * its bytes and nothing else but the cuBLAS workspace, so a row the core adds is allocated with
 * no executor change and the rank's persistent bytes are the rows' sum. Every mode, both
 * precisions the modes plan, both ranks of two, on the host backend (setup only: no collective). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exec_fixture.h"
#include "gckpt/core/parallel.h"

/* The host backend's alloc, recording each device allocation's bytes. */
enum { MAX_ALLOCS = 4096 };
static struct {
    gckpt_xstatus (*alloc)(gckpt_backend *be, gckpt_mem_kind k, uint64_t bytes, void **out);
    uint64_t bytes[MAX_ALLOCS];
    size_t n;
} rec;

static gckpt_xstatus recording_alloc(gckpt_backend *be, gckpt_mem_kind k, uint64_t bytes, void **out)
{
    if (k == GCKPT_MEM_DEVICE) {
        assert_true(rec.n < MAX_ALLOCS);
        rec.bytes[rec.n++] = bytes;
    }
    return rec.alloc(be, k, bytes, out);
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void setup_is_rows(void **state)
{
    (void)state;
    static const gckpt_parallel modes[] = {GCKPT_PAR_DDP, GCKPT_PAR_FSDP, GCKPT_PAR_ZERO1, GCKPT_PAR_ZERO2,
                                           GCKPT_PAR_ZERO3};
    static const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_AMP_BF16};
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    static gckpt_rank_state st;
    static uint64_t want[MAX_ALLOCS];
    for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++)
        for (size_t pi = 0; pi < 2; pi++)
            for (int rank = 0; rank < 2; rank++) {
                gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 2, .precision = precs[pi],
                                   .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = 1,
                                   .layout = {.gpus = 2, .nodes = 1, .mode = modes[mi]}};
                gckpt_backend *be = gckpt_host_backend_new(0);
                assert_non_null(be);
                gckpt_err err = {{0}};
                gckpt_exec_opts o = {.seed = 7, .init_std = 0.05, .rank = rank, .world = 2};
                gckpt_exec *x = gckpt_exec_new(be, &m, &d, &s, &o, &err);
                if (!x) fail_msg("%s rank %d: %s", gckpt_parallel_names[modes[mi]], rank, err.msg);
                rec.alloc = be->alloc;
                rec.n = 0;
                be->alloc = recording_alloc;
                if (gckpt_exec_setup(x, &err) != GCKPT_XS_OK)
                    fail_msg("%s rank %d: %s", gckpt_parallel_names[modes[mi]], rank, err.msg);
                be->alloc = rec.alloc;
                const gckpt_ctx *c = gckpt_exec_ctx(x);
                gckpt_rank_rows(&c->params, &m, &c->set, (uint32_t)rank, d.alloc_round_bytes, &st);
                size_t n = 0;
                for (int k = 0; k < st.n; k++)
                    if (gckpt_row_held(&st.row[k]) && st.row[k].bytes) want[n++] = st.row[k].bytes;
                if (c->workspace) want[n++] = c->workspace;
                qsort(want, n, sizeof *want, by_value);
                qsort(rec.bytes, rec.n, sizeof *rec.bytes, by_value);
                print_message("%s %s rank %d: %zu allocations, %zu held rows (and the workspace)\n",
                              gckpt_parallel_names[modes[mi]], precs[pi] == GCKPT_FP32 ? "fp32" : "amp-bf16", rank,
                              rec.n, n);
                assert_int_equal(rec.n, n);
                assert_memory_equal(rec.bytes, want, n * sizeof *want);
                gckpt_exec_free(x);
                be->destroy(be);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(setup_is_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
