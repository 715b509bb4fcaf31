/* The communicator (include/gckpt/executor/comm.h) and the host backend's collective.
 * In one process: the one-rank communicator, gckpt_coll_count's sizes, the host backend's
 * checks. Then the same program under `mpirun -np 2` and `-np 3` (it finds itself launched
 * and checks every collective over MPI against closed forms): all-reduce sums in rank
 * order (1e8, 1, -1e8 from ranks 0, 1, 2 sum to 0 in fp32, where another order gives 1),
 * the mean divides each rank's value first, all-gather, reduce-scatter, broadcast from
 * rank 1 and the gather to rank 0; in chunks (more elements than one 16 MiB piece). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/exec_host.h"
#include "host_num.h"

/* ---- under mpirun: each rank checks, exit status 0 when all hold ------------------------ */

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank check failed: " __VA_ARGS__);                                    \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void ranks_check(gckpt_comm *c)
{
    int r = c->rank, w = c->world;
    /* all-reduce, sum, f32, chunked: 5M elements (20 MB, two pieces) */
    uint64_t n = 5u << 20;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (uint64_t i = 0; i < n; i++) a[i] = (float)(r + 1) * (float)(i % 1000);
    CHECK(c->collective(c, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_SUM, a, b, n, GCKPT_DT_F32, 0), "all-reduce: %s", c->err.msg);
    for (uint64_t i = 0; i < n; i++)
        if (b[i] != (float)(w * (w + 1) / 2) * (float)(i % 1000)) {
            CHECK(0, "all-reduce sum element %llu: %g", (unsigned long long)i, b[i]);
            break;
        }
    /* rank order: ((1e8 + 1) + -1e8) is 0 in fp32 (in place) */
    if (w == 3) {
        float v = r == 0 ? 1e8f : r == 1 ? 1.0f : -1e8f;
        CHECK(c->collective(c, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_SUM, &v, &v, 1, GCKPT_DT_F32, 0), "%s", c->err.msg);
        CHECK(v == 0.0f, "rank-ordered sum: %g, expected 0", v);
    }
    /* mean, bf16: (r + 1) * w * i divided by w first is exact, the sum i * w (w + 1) / 2 */
    uint16_t h[16], hm[16];
    for (int i = 0; i < 16; i++) h[i] = f32_to_bf16((float)((r + 1) * w * i));
    CHECK(c->collective(c, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG, h, hm, 16, GCKPT_DT_BF16, 0), "%s", c->err.msg);
    for (int i = 0; i < 16; i++) CHECK(bf16_to_f32(hm[i]) == (float)(i * w * (w + 1) / 2), "mean element %d", i);
    /* all-gather: recv[k * 7 + i] = 100 k + i */
    float g[7], all[7 * 3];
    for (int i = 0; i < 7; i++) g[i] = (float)(100 * r + i);
    CHECK(c->collective(c, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, g, all, 7, GCKPT_DT_F32, 0), "%s", c->err.msg);
    for (int k = 0; k < w; k++)
        for (int i = 0; i < 7; i++) CHECK(all[k * 7 + i] == (float)(100 * k + i), "all-gather [%d][%d]", k, i);
    /* reduce-scatter: send[j] = j + r; rank q gets sum over ranks of (q * 5 + i + r) */
    float s[5 * 3], piece[5];
    for (int j = 0; j < 5 * w; j++) s[j] = (float)(j + r);
    CHECK(c->collective(c, GCKPT_COLL_REDUCE_SCATTER, GCKPT_RED_SUM, s, piece, 5, GCKPT_DT_F32, 0), "%s", c->err.msg);
    for (int i = 0; i < 5; i++)
        CHECK(piece[i] == (float)(w * (r * 5 + i) + w * (w - 1) / 2), "reduce-scatter element %d: %g", i, piece[i]);
    /* broadcast from rank 1 */
    int64_t id[3] = {r, r, r};
    CHECK(c->collective(c, GCKPT_COLL_BROADCAST, GCKPT_RED_SUM, id, id, 3, GCKPT_DT_I64, 1), "%s", c->err.msg);
    for (int i = 0; i < 3; i++) CHECK(id[i] == 1, "broadcast element %d: %lld", i, (long long)id[i]);
    CHECK(!c->collective(c, GCKPT_COLL_BROADCAST, GCKPT_RED_SUM, id, id, 3, GCKPT_DT_I64, w), "root %d accepted", w);
    /* gather to rank 0 */
    int32_t mine = 10 + r, got[3] = {0, 0, 0};
    CHECK(c->gather(c, &mine, got, sizeof mine), "gather: %s", c->err.msg);
    for (int k = 0; r == 0 && k < w; k++) CHECK(got[k] == 10 + k, "gather [%d]: %d", k, got[k]);
    /* the host backend's collective on its buffers */
    gckpt_backend *be = gckpt_host_backend_new(0);
    CHECK(be->attach(be, c) == GCKPT_XS_OK, "attach");
    float x[4] = {1, 2, 3, 4}, y[4 * 3];
    gckpt_xt xs = {x, 4, GCKPT_DT_F32}, ys = {y, (uint64_t)(4 * w), GCKPT_DT_F32};
    CHECK(be->collective(be, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, xs, ys, 0) == GCKPT_XS_OK, "%s", be->err.msg);
    CHECK(y[4 * (w - 1) + 3] == 4, "backend all-gather");
    be->destroy(be);
    free(a);
    free(b);
}

/* ---- in one process -------------------------------------------------------------------- */

static void one_rank(void **st)
{
    (void)st;
    gckpt_comm *c = gckpt_comm_single();
    assert_int_equal(c->world, 1);
    float a[3] = {1, 2, 3}, b[3] = {0};
    assert_true(c->collective(c, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG, a, b, 3, GCKPT_DT_F32, 0));
    assert_memory_equal(a, b, sizeof a);
    assert_false(c->collective(c, GCKPT_COLL_BROADCAST, GCKPT_RED_SUM, a, b, 3, GCKPT_DT_F32, 1));
}

static void counts(void **st)
{
    (void)st;
    float p[12];
    uint16_t q[12];
    gckpt_err err = {{0}};
    uint64_t n;
    gckpt_xt four = {p, 4, GCKPT_DT_F32}, twelve = {p, 12, GCKPT_DT_F32}, h = {q, 4, GCKPT_DT_BF16}, none = {NULL, 4, GCKPT_DT_F32};
    assert_true(gckpt_coll_count(GCKPT_COLL_ALL_GATHER, &four, &twelve, 3, &n, &err));
    assert_int_equal(n, 4);
    assert_true(gckpt_coll_count(GCKPT_COLL_REDUCE_SCATTER, &twelve, &four, 3, &n, &err));
    assert_int_equal(n, 4);
    assert_true(gckpt_coll_count(GCKPT_COLL_ALL_REDUCE, &four, &four, 3, &n, &err));
    assert_false(gckpt_coll_count(GCKPT_COLL_ALL_GATHER, &four, &twelve, 2, &n, &err));
    assert_non_null(strstr(err.msg, "all_gather over 2 ranks: 4 elements in, 12 out"));
    assert_false(gckpt_coll_count(GCKPT_COLL_ALL_REDUCE, &four, &h, 1, &n, &err));
    assert_false(gckpt_coll_count(GCKPT_COLL_ALL_REDUCE, &four, &none, 1, &n, &err));
    assert_false(gckpt_coll_count(GCKPT_NCOLL, &four, &four, 1, &n, &err));
    /* the host backend refuses what gckpt_coll_count refuses, one rank without a communicator */
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_int_equal(be->collective(be, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, four, twelve, 0), GCKPT_XS_ERROR);
    assert_int_equal(be->collective(be, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_SUM, four, four, 0), GCKPT_XS_OK);
    be->destroy(be);
}

#ifdef GCKPT_HAVE_MPI
static const char *self;

static void under_mpirun(void **st)
{
    (void)st;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1", 1); /* as test_run_mpi.c says why */
    for (int np = 2; np <= 3; np++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "'%s' --oversubscribe -np %d '%s'", GCKPT_MPIEXEC, np, self);
        int rc = system(cmd);
        if (rc != 0) fail_msg("%s: status %d", cmd, rc);
    }
}
#endif

int main(int argc, char **argv)
{
    (void)argc;
#ifdef GCKPT_HAVE_MPI
    if (gckpt_comm_launched()) {
        gckpt_err err = {{0}};
        gckpt_comm *c = gckpt_comm_mpi_new(&argc, &argv, &err);
        if (!c) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        ranks_check(c);
        c->destroy(c);
        return failures ? 1 : 0;
    }
    self = argv[0];
    const struct CMUnitTest tests[] = {cmocka_unit_test(one_rank), cmocka_unit_test(counts),
                                       cmocka_unit_test(under_mpirun)};
#else
    (void)argv;
    const struct CMUnitTest tests[] = {cmocka_unit_test(one_rank), cmocka_unit_test(counts)};
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
