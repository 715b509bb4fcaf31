/* Several nodes (gckpt/core/mesh.h): where each group of a run's device mesh sits and the bus
 * bandwidth its collectives are timed at (FINDINGS R-TP-26, R-TP-27, R-CP-15):
 *   - every group's ranks (TP, CP, FSDP2's dp_shard_cp / transformers' fsdp, dp_replicate), for
 *     every rank, against tests/data/mesh-groups (tools/hf_probe/mesh_groups.py: accelerate's
 *     ParallelismConfig.build_device_mesh and transformers' dense mesh built on PyTorch's fake
 *     process group, 8 and 16 ranks, each group read back with get_process_group_ranks);
 *   - whether a group spans nodes, for every GPU count per node that divides the world, against
 *     the fixture's groups (a group spans iff two of its ranks have different rank / G);
 *   - a TP plan whose TP group spans nodes times its TP collectives at inter_node_bus_bytes_per_s:
 *     its collective seconds x inter = the one-node plan's x intra (bytes / bandwidth, the closed form);
 *   - a CP plan whose CP group spans nodes against one whose CP group stays inside a node (FSDP2's
 *     across in both): the step grows by the ring's bytes x (1 / inter - 1 / intra). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "gckpt/core/cp.h"
#include "gckpt/core/mesh.h"
#include "gckpt/core/parallel.h"
#include "gckpt/planner/plan.h"
#include "gckpt/planner/plan_args.h"
#include "json_file.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

/* the fixture's dimension names per group kind (accelerate's, then transformers') */
static const struct {
    const char *name;
    gckpt_group g;
} k_dims[] = {{"tp", GCKPT_GROUP_TP}, {"cp", GCKPT_GROUP_CP}, {"dp_shard_cp", GCKPT_GROUP_SHARD},
              {"fsdp", GCKPT_GROUP_SHARD}, {"dp_replicate", GCKPT_GROUP_REPLICATE}};

static uint32_t num(const cJSON *o, const char *k)
{
    const cJSON *v = at(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("mesh-groups: '%s' is not a number", k);
    return (uint32_t)v->valuedouble;
}

/* The fixture group of dimension d holding rank, as ranks into out; its size (0: none). */
static uint32_t fixture_group(const cJSON *groups, uint32_t rank, uint32_t *out)
{
    const cJSON *g;
    cJSON_ArrayForEach(g, groups)
    {
        uint32_t n = 0;
        bool has = false;
        const cJSON *r;
        cJSON_ArrayForEach(r, g)
        {
            out[n] = (uint32_t)r->valuedouble;
            has |= out[n++] == rank;
        }
        if (has) return n;
    }
    return 0;
}

static void test_groups_against_fixture(void **state)
{
    (void)state;
    cJSON *doc = read_json(GCKPT_TEST_DATA "/mesh-groups/groups.json");
    const cJSON *c;
    int checked = 0, spans_checked = 0;
    cJSON_ArrayForEach(c, at(doc, "cases"))
    {
        const cJSON *sz = at(c, "sizes"), *groups = at(c, "groups");
        uint32_t world = num(c, "world");
        gckpt_mesh m = {num(sz, "dp_replicate"), num(sz, "dp_shard"), num(sz, "cp"), num(sz, "tp"), world};
        assert_int_equal(gckpt_mesh_world(&m), world);
        for (size_t k = 0; k < sizeof k_dims / sizeof k_dims[0]; k++) {
            const cJSON *dim = at(groups, k_dims[k].name);
            if (!dim) continue;
            for (uint32_t rank = 0; rank < world; rank++) {
                uint32_t want[64], got[64];
                uint32_t nw = fixture_group(dim, rank, want), ng = gckpt_mesh_group_ranks(&m, k_dims[k].g, rank, got);
                if (nw != ng || memcmp(want, got, ng * sizeof *got))
                    fail_msg("%s %s case %u/%u/%u/%u: rank %u's %s group has %u ranks, planned %u",
                             at(c, "builder")->valuestring, k_dims[k].name, m.dp_replicate, m.dp_shard, m.cp, m.tp, rank,
                             k_dims[k].name, nw, ng);
                checked++;
            }
            /* placed on nodes of G GPUs: spans iff a fixture group has ranks on two nodes */
            for (uint32_t G = 1; G <= world; G++) {
                if (world % G) continue;
                m.node_gpus = G;
                bool spans = false;
                const cJSON *g;
                cJSON_ArrayForEach(g, dim)
                {
                    const cJSON *r;
                    int node = -1;
                    cJSON_ArrayForEach(r, g)
                    {
                        int nd = (int)r->valuedouble / (int)G;
                        if (node >= 0 && nd != node) spans = true;
                        node = nd;
                    }
                }
                if (gckpt_mesh_group_inter_node(&m, k_dims[k].g) != spans)
                    fail_msg("%s %s on nodes of %u: spans %d, planned %d", at(c, "builder")->valuestring,
                             k_dims[k].name, G, spans, !spans);
                spans_checked++;
            }
            m.node_gpus = world;
        }
    }
    cJSON_Delete(doc);
    assert_true(checked >= 500);
    assert_true(spans_checked >= 100);
}

/* A layout's groups as the planner lays them: HSDP over 2 nodes of 6 with dp_shard 4 (a block of 4
 * straddles the first node's edge: ranks 4..7), the TP x FSDP layout of one TP rank over nodes. */
static void test_layout_mesh(void **state)
{
    (void)state;
    gckpt_layout hsdp = {.gpus = 6, .nodes = 2, .mode = GCKPT_PAR_FSDP, .dp_replicate = 3};
    assert_true(gckpt_layout_shard_inter_node(&hsdp));
    assert_true(gckpt_layout_replicate_inter_node(&hsdp));
    hsdp.dp_replicate = 6; /* dp_shard 2 divides 6: inside a node */
    assert_false(gckpt_layout_shard_inter_node(&hsdp));
    /* TP 8 x FSDP 4 on 4 nodes of 8: the fsdp group (ranks 8 apart) spans them, the TP group does not */
    gckpt_layout l = {.gpus = 4, .nodes = 1, .mode = GCKPT_PAR_FSDP, .tp = 8, .node_gpus = 8};
    gckpt_mesh m = gckpt_layout_mesh(&l);
    assert_int_equal(gckpt_mesh_world(&m), 32);
    assert_true(gckpt_mesh_group_inter_node(&m, GCKPT_GROUP_SHARD));
    assert_false(gckpt_mesh_group_inter_node(&m, GCKPT_GROUP_TP));
    assert_true(gckpt_layout_shard_inter_node(&l));
    l.node_gpus = 0; /* one node of 32 */
    assert_false(gckpt_layout_shard_inter_node(&l));
    /* CP 4 x dp_shard 2 on 2 nodes of 4: the CP group inside a node, FSDP2's across */
    gckpt_layout cp = {.gpus = 4, .nodes = 2, .mode = GCKPT_PAR_FSDP, .cp = 4};
    m = gckpt_layout_mesh(&cp);
    assert_false(gckpt_mesh_group_inter_node(&m, GCKPT_GROUP_CP));
    assert_true(gckpt_mesh_group_inter_node(&m, GCKPT_GROUP_SHARD));
}

static void plan_of(const char *const *argv, gckpt_plan *p)
{
    gckpt_plan_args a;
    gckpt_plan_args_init(&a);
    for (int i = 0; argv[i]; i++) {
        const gckpt_plan_option *o = gckpt_plan_option_find(argv[i] + 2);
        if (!o) fail_msg("unknown option %s", argv[i]);
        const char *v = o->has_arg ? argv[++i] : NULL;
        if (gckpt_plan_args_set(&a, o, v)) fail_msg("%s: %s", argv[i], a.err.msg);
    }
    if (gckpt_plan_args_finish(&a)) fail_msg("%s", a.err.msg);
    gckpt_err err;
    if (!gckpt_plan_run(&a.req, p, &err)) fail_msg("%s", err.msg);
    gckpt_plan_args_free(&a);
}

/* TP 4 alone: on one node of 4 and over 2 nodes of 2 (the TP group spans them). TP alone's
 * collective time is the TP collectives' bus bytes over the TP group's bandwidth, so the two plans'
 * collective seconds stand as the bandwidths do, entry by entry; memory is the same. */
static void test_tp_spanning_nodes(void **state)
{
    (void)state;
    const char *one[] = {"--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--seq", "4096", "--gpus", "4", "--tp", "4", NULL};
    const char *two[] = {"--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--seq", "4096", "--gpus", "2", "--nodes", "2",
                         "--tp", "4", NULL};
    gckpt_plan a, b;
    plan_of(one, &a);
    plan_of(two, &b);
    assert_int_equal(a.n, b.n);
    assert_true(a.n > 0);
    double intra = a.dev.intra_node_bus_bytes_per_s, inter = a.dev.inter_node_bus_bytes_per_s;
    assert_true(inter > 0 && intra > inter);
    for (size_t i = 0; i < a.n; i++) {
        const gckpt_result *x = &a.entries[i].r, *y = &b.entries[i].r;
        assert_true(x->comm_s > 0);
        double ratio = y->comm_s * inter / (x->comm_s * intra);
        if (ratio < 1 - 1e-12 || ratio > 1 + 1e-12) fail_msg("entry %zu: %g s x inter vs %g s x intra", i, y->comm_s, x->comm_s);
        assert_int_equal(x->device_peak_bytes, y->device_peak_bytes);
        double dt = (y->step_s - x->step_s) - (y->comm_s - x->comm_s);
        if (dt < -1e-9 || dt > 1e-9) fail_msg("entry %zu: the step grew by %g s beyond the collectives'", i, dt);
    }
    gckpt_plan_free(&a);
    gckpt_plan_free(&b);
}

/* CP 2 x dp_shard 2 over 4 ranks: on 2 nodes of 2 the CP group (consecutive ranks) stays inside a
 * node, on 4 nodes of 1 it spans them; FSDP2's dp_shard_cp group spans the nodes in both, so the two
 * plans differ only in the ring's K/V exchanges (never hidden): by their bytes R (the CP collectives:
 * an all-gather brings C - 1 pieces, per micro-step) x (1 / inter - 1 / intra). Memory is the same. */
static void test_cp_spanning_nodes(void **state)
{
    (void)state;
    const char *in[] = {"--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--seq", "16384", "--gpus", "2", "--nodes",
                        "2", "--cp", "2", "--dp-shard", "2", "--every-n", "1", NULL};
    const char *across[] = {"--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--seq", "16384", "--gpus", "1",
                            "--nodes", "4", "--cp", "2", "--dp-shard", "2", "--every-n", "1", NULL};
    gckpt_plan a, b;
    plan_of(in, &a);
    plan_of(across, &b);
    double intra = a.dev.intra_node_bus_bytes_per_s, inter = a.dev.inter_node_bus_bytes_per_s;
    const uint32_t C = 2;
    assert_int_equal(a.n, b.n);
    assert_true(a.n > 0);
    for (size_t i = 0; i < a.n; i++) {
        const gckpt_entry *e = &a.entries[i];
        const gckpt_result *x = &e->r, *y = &b.entries[i].r;
        assert_int_equal(x->device_peak_bytes, y->device_peak_bytes);
        gckpt_setting s = gckpt_plan_setting(&a, e->micro_batch, e->grad_accum);
        s.every_n = e->every_n;
        gckpt_cp_coll k[GCKPT_CP_MAX_COLL];
        size_t n = gckpt_cp_collectives(&a.model, &s, C, GCKPT_CP_ALLGATHER, k);
        double ring = 0;
        for (size_t j = 0; j < n; j++)
            ring += (double)k[j].calls * k[j].bytes_per_call * (k[j].kind == GCKPT_CP_ALL_GATHER ? C - 1 : 1) *
                    (double)e->grad_accum;
        assert_true(ring > 0);
        double want = ring * (1 / inter - 1 / intra), got = y->comm_s - x->comm_s;
        if (got < want * (1 - 1e-9) || got > want * (1 + 1e-9))
            fail_msg("entry %zu: the ring across nodes adds %g s, bytes / bandwidth %g s", i, got, want);
        double dt = (y->step_s - x->step_s) - got;
        if (dt < -1e-9 || dt > 1e-9) fail_msg("entry %zu: the step grew by %g s beyond the ring's", i, dt);
    }
    gckpt_plan_free(&a);
    gckpt_plan_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_against_fixture),
        cmocka_unit_test(test_layout_mesh),
        cmocka_unit_test(test_tp_spanning_nodes),
        cmocka_unit_test(test_cp_spanning_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
