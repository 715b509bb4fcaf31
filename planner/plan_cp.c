/* A plan of one context-parallel rank (--cp C, alone or with --dp-shard S and --dp-replicate R:
 * accelerate's ParallelismConfig(dp_replicate_size=R, dp_shard_size=S, cp_size=C) with FSDP2 over
 * the dp_shard x cp ranks, HSDP across the R replicas,
 * gckpt/core/cp.h): what was measured, the rank's peak and time beyond FSDP2's at S / C, the
 * header line, the snippet's parallelism_config and notes, the plan JSON's "context_parallel".
 * Nothing here runs without --cp. */
#include "gckpt/planner/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/cp.h"
#include "gckpt/core/dtype.h"
#include "gckpt/core/mesh.h"

/* The CP x FSDP2 mesh's dp_shard size: a dp_shard_cp group's GPUs (all of them, or a replica's
 * under HSDP, R-CP-17) over C. */
static uint32_t cp_shard(const gckpt_plan *p) { return gckpt_layout_shard_world(&p->req.layout) / p->req.cp; }

/* The HSDP replicas (accelerate's dp_replicate_size), 1 without. */
static uint32_t cp_replicas(const gckpt_plan *p) { return p->req.layout.dp_replicate > 1 ? p->req.layout.dp_replicate : 1; }

/* The hidden states' and attention output's element size: fp32, or FSDP2's MixedPrecisionPolicy
 * under bf16 / fp16 (the measured bf16=True runs compute in bf16, R-CP-11). */
static unsigned elem(const gckpt_plan *p) { return p->req.precision == GCKPT_FP32 ? 4 : 2; }

void gckpt_plan_request_cp(gckpt_plan_request *r, uint32_t cp, uint32_t dp_replicate)
{
    r->cp = cp;
    r->tp = r->tp_dp_shard = r->tp_dp_replicate = 0;
    r->layout.mode = GCKPT_PAR_FSDP;
    r->layout.dp_replicate = dp_replicate > 1 ? dp_replicate : 0;
}

bool gckpt_plan_cp_setup(const gckpt_plan *p, gckpt_err *err)
{
    const gckpt_plan_request *q = &p->req;
    if (!q->cp) return true;
    if (q->layout.mode != GCKPT_PAR_FSDP) { /* a request built in code (plan_args.c routes --cp to fsdp) */
        gckpt_seterr(err, "--cp %u with --parallel %s: accelerate's context parallelism shards through FSDP2 over "
                          "dp_shard x cp (FINDINGS R-CP-1)", q->cp, gckpt_parallel_names[q->layout.mode]);
        return false;
    }
    if (!gckpt_cp_check(&p->model, q->seq, q->cp, q->attention, err)) return false; /* names cp_size */
    /* LoRA, QLoRA and activation offload: measured (R-CP-23..26) */
    const char *what = (q->precision != GCKPT_FP32 && q->precision != GCKPT_AMP_BF16) ? "--precision other than fp32 and amp-bf16"
                     : q->optimizer != GCKPT_ADAMW ? "--optimizer other than adamw"
                     : q->loss != GCKPT_LOSS_HF ? "--loss other than hf"
                     : q->code_base != GCKPT_CB_HF ? "--code-base fused"
                     : q->layout.offload ? "--fsdp-offload"
                     : NULL; /* with HSDP's replicas too: LoRA, QLoRA and activation offload (R-CP-27) */
    if (what) {
        gckpt_seterr(err, "--cp %u with %s: context parallelism is measured for full fine-tuning, LoRA and QLoRA "
                          "with AdamW under fp32 or bf16 (FSDP2's mixed precision), HF's loss, without FSDP's CPU "
                          "offload, with or without HSDP's replicas (FINDINGS R-CP-11, R-CP-17, "
                          "R-CP-23..27)", q->cp, what);
        return false;
    }
    gckpt_setting s0 = gckpt_plan_setting(p, 1, 1);
    gckpt_mesh mesh = gckpt_layout_mesh(&s0.layout);
    const char *field;
    if (!(gckpt_mesh_group_bus(&p->dev, &mesh, GCKPT_GROUP_CP, &field) > 0)) {
        gckpt_seterr(err, "--cp %u on %s: the GPU profile has no %s (nccl-tests' busbw), which "
                          "times the ring attention's K/V exchanges", q->cp, p->dev.name, field);
        return false;
    }
    return true;
}

bool gckpt_plan_cp_adjust(const gckpt_plan *p, const gckpt_entry *e, gckpt_result *r, gckpt_err *err)
{
    gckpt_setting s = gckpt_plan_setting(p, e->micro_batch, e->grad_accum);
    s.every_n = e->every_n;
    s.offload = e->offload;
    /* the busiest CP rank: each rank's walked step plus CP's buffers, or a ring attention call
     * (gckpt_cp_peak). The ranks differ: balanced, every rank but the last keeps o_proj's input
     * per plain layer (R-CP-7); contiguous, rank r's ring runs r + 1 of the C blocks */
    gckpt_ctx *c = malloc(sizeof *c);
    bool ok = c && gckpt_ctx_init(c, &p->model, &p->dev, p->recipe, &s, err);
    gckpt_result base = *r, one;
    /* a rank's walk depends on its rank only through its ring calls' replayed peaks and whether it is
     * the last (gckpt_cp_peak): a rank with an earlier rank's three is that rank's result, not walked
     * again (a balanced CP 64 plan walks a few ranks, not 64) */
    const bool balanced = gckpt_cp_balanced(p->req.seq, p->req.cp);
    uint64_t (*seen)[3] = ok ? malloc(sizeof *seen * p->req.cp) : NULL;
    uint32_t nseen = 0;
    const bool no_mem = !c || (ok && !seen);
    ok = ok && seen;
    for (uint32_t k = 0; ok && k < p->req.cp; k++) {
        const uint64_t key[3] = {k + 1 == p->req.cp,
                                 gckpt_cp_ring_peak(&p->model, &c->set, p->req.cp, k, balanced, GCKPT_CP_ALLGATHER, false),
                                 gckpt_cp_ring_peak(&p->model, &c->set, p->req.cp, k, balanced, GCKPT_CP_ALLGATHER, true)};
        bool dup = false;
        for (uint32_t j = 0; j < nseen && !dup; j++) dup = !memcmp(seen[j], key, sizeof key);
        if (dup) continue;
        memcpy(seen[nseen++], key, sizeof key);
        one = base;
        if (!(ok = gckpt_cp_peak(c, p->req.seq, p->req.cp, k, GCKPT_CP_ALLGATHER, elem(p), elem(p), &one)))
            gckpt_seterr(err, "out of memory walking the CP step");
        else if (!k || one.peak_bytes > r->peak_bytes)
            *r = one;
    }
    if (no_mem) gckpt_seterr(err, "out of memory");
    free(seen);
    free(c);
    if (!ok) return false;
    r->device_peak_bytes = gckpt_round_up(r->peak_bytes, p->dev.segment_round_bytes) + p->dev.context_bytes;
    /* the ring's K/V and dK/dV exchanges in the CP group at its placement's bus bandwidth
     * (gckpt_mesh_group_bus: inter-node when the group spans nodes), none hidden */
    gckpt_mesh mesh = gckpt_layout_mesh(&s.layout);
    double bus = gckpt_mesh_group_bus(&p->dev, &mesh, GCKPT_GROUP_CP, NULL);
    gckpt_cp_coll k[GCKPT_CP_MAX_COLL];
    size_t n = gckpt_cp_collectives(&p->model, &s, p->req.cp, GCKPT_CP_ALLGATHER, k);
    double t = 0;
    for (size_t j = 0; j < n; j++) /* all-gather: C - 1 pieces arrive; permute: one */
        t += (double)k[j].calls * k[j].bytes_per_call * (k[j].kind == GCKPT_CP_ALL_GATHER ? p->req.cp - 1 : 1) *
             (double)s.grad_accum / bus;
    double scale = r->step_s / (r->step_s + t);
    r->comm_s += t;
    r->step_s += t;
    r->tokens_per_s *= scale;
    r->mfu *= scale;
    r->hfu *= scale;
    return true;
}

void gckpt_plan_cp_header(const gckpt_plan *p, FILE *f)
{
    if (!p->req.cp) return;
    const uint64_t S = p->req.seq, C = p->req.cp;
    uint32_t calls;
    char units[64]; /* the busiest rank's SDPA work (core/cp.h) */
    snprintf(units, sizeof units, "%g times", gckpt_cp_attention_units(S, p->req.cp, &calls));
    char mesh[160], pc[96];
    if (cp_replicas(p) > 1) {
        snprintf(mesh, sizeof mesh, " x dp_replicate %u", cp_replicas(p));
        snprintf(pc, sizeof pc, "dp_replicate_size=%u, ", cp_replicas(p));
    } else
        mesh[0] = pc[0] = 0;
    fprintf(f, "context parallelism %llu x dp_shard %u%s over %u GPUs (accelerate's ParallelismConfig(%sdp_shard_size=%u, "
               "cp_size=%llu), FSDP2 over %s): every rank of a CP group sees the same batch and computes %llu "
               "of its %llu tokens (%s split), K/V exchanged by torch's ring attention (allgather); memory is the "
               "busiest CP rank's: FSDP2's at seq %llu plus CP's buffers (the Trainer's split inputs, per-row rotary tables, %s); time "
               "the busiest rank's: FSDP2's at that seq with its attention %s one GPU's (one SDPA call per K/V block), "
               "the ring's exchanges none hidden; tok/s per GPU (FINDINGS R-CP-1..12, R-CP-17, R-CP-23..27)\n",
            (unsigned long long)C, cp_shard(p), mesh, gckpt_layout_world(&p->req.layout), pc, cp_shard(p),
            (unsigned long long)C,
            cp_replicas(p) > 1 ? "the dp_shard x cp ranks of each replica, HSDP across the replicas" : "all of them",
            (unsigned long long)(S / C), (unsigned long long)S,
            gckpt_cp_balanced(S, p->req.cp) ? "head-tail, load-balanced" : "contiguous, not load-balanced",
            (unsigned long long)(S / C),
            !gckpt_cp_balanced(S, p->req.cp) ? "no partial-merge copies"
            : gckpt_cp_oproj_input_saved(&(gckpt_setting){.peft = p->req.peft})
                ? "a copy of o_proj's input per layer on the partial-merge ranks"
                : "no copies of o_proj's input, which nothing saves under LoRA",
            units);
}

void gckpt_plan_cp_args(const gckpt_plan *p, cJSON *args)
{
    if (!p->req.cp) return;
    cJSON *pc = cJSON_AddObjectToObject(args, "parallelism_config"); /* printed as ParallelismConfig(...) */
    if (cp_replicas(p) > 1) cJSON_AddNumberToObject(pc, "dp_replicate_size", cp_replicas(p));
    cJSON_AddNumberToObject(pc, "dp_shard_size", cp_shard(p));
    cJSON_AddNumberToObject(pc, "cp_size", p->req.cp);
}

void gckpt_plan_cp_notes(const gckpt_plan *p, FILE *f)
{
    if (!p->req.cp) return;
    fprintf(f, "# context parallelism (accelerate 1.15, torch >= 2.6): SDPA attention only (attn_implementation=\"sdpa\";\n"
               "# the Trainer refuses others), no sliding-window layers (accelerate refuses them), the sequence a\n"
               "# multiple of cp_size (%u; torch's ring fails otherwise and nothing checks it), load-balanced when a\n"
               "# multiple of 2 x cp_size; on a GPU accelerate requires the FSDP2 plugin above; the Trainer makes\n"
               "# shift_labels and position_ids on the whole sequence and splits the batch; pad to a fixed length\n",
            p->req.cp);
}

void gckpt_plan_cp_json(const gckpt_plan *p, cJSON *inputs)
{
    if (!p->req.cp) return;
    cJSON *o = cJSON_AddObjectToObject(inputs, "context_parallel");
    cJSON_AddNumberToObject(o, "cp_size", p->req.cp);
    cJSON_AddNumberToObject(o, "dp_shard_size", cp_shard(p));
    cJSON_AddNumberToObject(o, "dp_replicate_size", cp_replicas(p));
    cJSON_AddNumberToObject(o, "local_seq", (double)(p->req.seq / p->req.cp));
    cJSON_AddBoolToObject(o, "load_balanced", gckpt_cp_balanced(p->req.seq, p->req.cp));
    cJSON_AddStringToObject(o, "cp_comm_strategy", "allgather");
    cJSON_AddStringToObject(o, "planned", "the busiest CP rank: FSDP2 over dp_shard x cp at seq / cp (HSDP across "
                                          "dp_replicate, R-CP-17), plus the CP buffers of "
                                          "gckpt_cp_step_extra (FINDINGS R-CP-11); time: the busiest rank's, its "
                                          "attention gckpt_cp_attention_units times one GPU's at seq / cp (R-CP-12); "
                                          "the ring's K/V and dK/dV exchanges at the CP group's bus bandwidth "
                                          "(intra_node_bus_bytes_per_s, inter_node_bus_bytes_per_s where the group "
                                          "spans nodes), none hidden");
}
