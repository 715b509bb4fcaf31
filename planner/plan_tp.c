/* A plan of one tensor-parallel rank (--tp T alone, or with --dp-shard S: TP x FSDP, gckpt/core/tp.h):
 * the header line, the snippet's model line, Trainer argument and launch line, and the plan JSON's
 * "tensor_parallel" sections. Nothing here runs without --tp. */
#include "gckpt/planner/plan.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/core/collective.h"
#include "gckpt/core/dtype.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/tp.h"

/* The processes: T, T x S under TP x FSDP, T x R under TP x DDP. */
static uint32_t tp_world(const gckpt_plan *p)
{
    return p->req.tp * (p->req.tp_dp_shard ? p->req.tp_dp_shard : 1) * (p->req.tp_dp_replicate ? p->req.tp_dp_replicate : 1);
}

void gckpt_plan_tp_header(const gckpt_plan *p, FILE *f)
{
    if (!p->req.tp) return;
    /* FSDP2's collectives in the loaded dtype: no MixedPrecisionPolicy (R-TP-8, R-TP-30) */
    gckpt_setting s0 = gckpt_plan_setting_tp(p, 1, 1, 0);
    const char *wire = gckpt_fsdp_wire_dtype(&s0) == GCKPT_DT_BF16 ? "bf16" : "fp32";
    if (p->req.tp_dp_replicate && p->req.tp_dp_shard) {
        fprintf(f, "tensor parallelism %u x HSDP %u x %u over %u GPUs (transformers: from_pretrained(distributed_config="
                   "DistributedConfig(tp_size=%u, fsdp_size=%u, dp_replicate_size=%u)) shards by tp_plan, then fully_shard "
                   "over its (dp_replicate, fsdp) mesh): memory is the busiest TP rank's (each walked), time rank 0's, TP rank 0, which computes %llu "
                   "attention and %llu key/value heads and %llu of the MLP's %llu columns; its TP shards are sharded again "
                   "over %u ranks, gathered and reduce-scattered in %s (no MixedPrecisionPolicy), every micro-step "
                   "reduce-scattering into FSDP2's partial output and the last all-reducing it across the %u replicas; "
                   "every rank of a TP group sees the same batch (tok/s is per GPU: a TP group's over %u); the step time "
                   "is that local model's FSDP2 step plus the TP all-reduces' and all-gathers' bus time, none hidden "
                   "(unverified)\n",
                p->req.tp, p->req.tp_dp_replicate, p->req.tp_dp_shard, tp_world(p), p->req.tp, p->req.tp_dp_shard,
                p->req.tp_dp_replicate, (unsigned long long)p->model.heads, (unsigned long long)p->model.kv_heads,
                (unsigned long long)p->model.intermediate, (unsigned long long)p->tp_full.intermediate,
                p->req.tp_dp_shard, wire, p->req.tp_dp_replicate, p->req.tp);
        return;
    }
    if (p->req.tp_dp_replicate) {
        fprintf(f, "tensor parallelism %u x DDP %u over %u GPUs (transformers: from_pretrained(distributed_config="
                   "DistributedConfig(tp_size=%u, dp_replicate_size=%u)) shards by tp_plan, then fully_shard over its "
                   "(dp_replicate, fsdp) mesh of one shard rank: each replica keeps its TP shard whole): memory is the "
                   "busiest TP rank's (each walked), time rank 0's, TP rank 0, which computes %llu attention and %llu key/value heads and %llu of the MLP's "
                   "%llu columns; every micro-step reduces its gradients into FSDP2's partial output (%s), the last "
                   "all-reduces it across the %u replicas; every rank of a TP group sees the same batch (tok/s is per "
                   "GPU: a TP group's over %u); the step time is that local model's FSDP2 step plus the TP all-reduces' "
                   "and all-gathers' bus time, none hidden (unverified)\n",
                p->req.tp, p->req.tp_dp_replicate, tp_world(p), p->req.tp, p->req.tp_dp_replicate,
                (unsigned long long)p->model.heads, (unsigned long long)p->model.kv_heads,
                (unsigned long long)p->model.intermediate, (unsigned long long)p->tp_full.intermediate,
                wire, p->req.tp_dp_replicate, p->req.tp);
        return;
    }
    if (p->req.tp_dp_shard) {
        fprintf(f, "tensor parallelism %u x FSDP %u over %u GPUs (transformers: from_pretrained(distributed_config="
                   "DistributedConfig(tp_size=%u, fsdp_size=%u)) shards by tp_plan, then fully_shard over the fsdp "
                   "dimension): memory is the busiest TP rank's (each walked), time rank 0's, TP rank 0, which computes %llu attention and %llu "
                   "key/value heads and %llu of the MLP's %llu columns; its TP shards (the embedding and lm_head by "
                   "vocabulary) are sharded again over %u ranks, gathered and reduce-scattered in %s (no "
                   "MixedPrecisionPolicy); the embedding's unsharded gradient is whole; every rank of a TP group sees "
                   "the same batch (tok/s is per GPU: a TP group's over %u); the step time is that local model's FSDP2 step plus the TP all-reduces' and "
                   "all-gathers' bus time, none hidden (unverified)\n",
                p->req.tp, p->req.tp_dp_shard, tp_world(p), p->req.tp, p->req.tp_dp_shard,
                (unsigned long long)p->model.heads, (unsigned long long)p->model.kv_heads,
                (unsigned long long)p->model.intermediate, (unsigned long long)p->tp_full.intermediate,
                p->req.tp_dp_shard, wire, p->req.tp);
        return;
    }
    fprintf(f, "tensor parallelism over %u GPUs (transformers' tp_plan: from_pretrained(distributed_config="
               "DistributedConfig(tp_size=%u))): memory is the busiest TP rank's (each walked), time TP rank 0's, which computes %llu attention and "
               "%llu key/value heads and %llu of the MLP's %llu columns; the embedding and lm_head are sharded by "
               "vocabulary (%s); every rank of the group sees the same batch (tok/s is per GPU: the group's over %u); the step "
               "time is that local model's on one GPU (its lm_head over the whole vocabulary) plus the TP all-reduces' "
               "and all-gathers' bus time, none hidden (unverified)\n",
            p->req.tp, p->req.tp, (unsigned long long)p->model.heads, (unsigned long long)p->model.kv_heads,
            (unsigned long long)p->model.intermediate, (unsigned long long)p->tp_full.intermediate,
            gckpt_peft_on(&p->req.peft) ? "frozen; each colwise adapter's lora_B sharded, lora_A replicated: FINDINGS "
                                          "R-TP-12"
                                        : "the embedding's gradient is whole",
            p->req.tp);
}

void gckpt_plan_tp_model_line(const gckpt_plan *p, const char *model_arg, const char *attn, FILE *f)
{
    /* pure bf16: the shards loaded in bf16, the Trainer's bf16 off (R-TP-22) */
    const char *dt = p->req.precision == GCKPT_BF16 ? "bfloat16" : "float32";
    if (p->req.tp_dp_replicate) { /* not ParallelismConfig(dp_replicate_size=R): the Trainer overwrites its dp_shard */
        char fs[32] = "";
        if (p->req.tp_dp_shard) snprintf(fs, sizeof fs, "fsdp_size=%u, ", p->req.tp_dp_shard);
        fprintf(f, "# TP x %s: every process (torchrun) loads its shard; transformers applies FSDP2 itself over its\n"
                   "# (dp_replicate, fsdp) mesh%s (FINDINGS R-TP-11)\n"
                   "model = AutoModelForCausalLM.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.%s,\n"
                   "                                             distributed_config=DistributedConfig(tp_size=%u, "
                   "%sdp_replicate_size=%u))\n",
                p->req.tp_dp_shard ? "HSDP" : "DDP", p->req.tp_dp_shard ? "" : " of one shard rank", model_arg, attn, dt,
                p->req.tp, fs, p->req.tp_dp_replicate);
        return;
    }
    if (p->req.tp_dp_shard) { /* the deprecated tp_plan / tp_size spelling has no fsdp_size */
        fprintf(f, "# TP x FSDP: every process (torchrun) loads its shard; transformers applies FSDP2 itself\n"
                   "# (fsdp_mixed_precision=False, the default: fp32 all-gathers, the Trainer's bf16 is autocast)\n"
                   "model = AutoModelForCausalLM.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.%s,\n"
                   "                                             distributed_config=DistributedConfig(tp_size=%u, "
                   "fsdp_size=%u))\n",
                model_arg, attn, dt, p->req.tp, p->req.tp_dp_shard);
        return;
    }
    fprintf(f, "# tensor parallelism: every process (torchrun) loads its shard; transformers 5.24 still takes the\n"
               "# older spelling from_pretrained(..., tp_plan=\"auto\", tp_size=%u) (deprecated)\n"
               "model = AutoModelForCausalLM.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.%s,\n"
               "                                             distributed_config=DistributedConfig(tp_size=%u))\n",
            p->req.tp, model_arg, attn, dt, p->req.tp);
}

void gckpt_plan_tp_args(const gckpt_plan *p, cJSON *args)
{
    if (!p->req.tp) return;
    /* the Trainer builds the same from the model when it is not given (FINDINGS R-TP-1) */
    cJSON *pc = cJSON_AddObjectToObject(args, "parallelism_config");
    /* what the Trainer builds: dp_shard_size = DistributedConfig.dp_size, the replicas included */
    if (p->req.tp_dp_shard || p->req.tp_dp_replicate)
        cJSON_AddNumberToObject(pc, "dp_shard_size", (p->req.tp_dp_shard ? p->req.tp_dp_shard : 1) *
                                                         (p->req.tp_dp_replicate ? p->req.tp_dp_replicate : 1));
    cJSON_AddNumberToObject(pc, "tp_size", p->req.tp);
}

void gckpt_plan_tp_launch(const gckpt_plan *p, FILE *f)
{
    if (!p->req.tp) return;
    if (!p->req.node_gpus) fprintf(f, "# launch: torchrun --nproc_per_node %u train.py\n", tp_world(p));
    else /* several nodes: ranks node_rank x nproc_per_node + local_rank, a TP group's T consecutive ones */
        fprintf(f, "# launch: torchrun --nnodes %u --nproc_per_node %u --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
                   "--master_port 29500 train.py\n", tp_world(p) / p->req.node_gpus, p->req.node_gpus);
}

void gckpt_plan_tp_json(const gckpt_plan *p, cJSON *inputs)
{
    if (!p->req.tp) return;
    cJSON *o = cJSON_AddObjectToObject(inputs, "tensor_parallel");
    cJSON_AddNumberToObject(o, "tp_size", p->req.tp);
    cJSON_AddNumberToObject(o, "world_size", tp_world(p));
    if (p->req.tp_dp_replicate) {
        cJSON_AddNumberToObject(o, "dp_replicate_size", p->req.tp_dp_replicate);
        cJSON_AddNumberToObject(o, "fsdp_size", p->req.tp_dp_shard ? p->req.tp_dp_shard : 1);
        cJSON_AddStringToObject(o, "planned", "the busiest TP rank's memory (world ranks 0..T - 1 walked), rank 0's "
                                              "time, TP rank 0 (transformers' tp_plan and fully_shard over its "
                                              "(dp_replicate, fsdp) mesh, FINDINGS R-TP-11): its local model's FSDP2 "
                                              "step");
    } else if (p->req.tp_dp_shard) {
        cJSON_AddNumberToObject(o, "fsdp_size", p->req.tp_dp_shard);
        cJSON_AddStringToObject(o, "planned", "the busiest TP rank's memory (world ranks 0..T - 1 walked), rank 0's "
                                              "time, TP rank 0 (transformers' tp_plan and fully_shard over fsdp, "
                                              "FINDINGS R-TP-8): its local model's FSDP2 step over the fsdp group");
    } else
        cJSON_AddStringToObject(o, "planned", "the busiest TP rank's memory (every TP rank walked), TP rank 0's time "
                                              "(transformers' tp_plan, FINDINGS R-TP): its local model's step");
    cJSON *lm = cJSON_AddObjectToObject(o, "rank_model");
    cJSON_AddNumberToObject(lm, "num_attention_heads", (double)p->model.heads);
    cJSON_AddNumberToObject(lm, "num_key_value_heads", (double)p->model.kv_heads);
    cJSON_AddNumberToObject(lm, "intermediate_size", (double)p->model.intermediate);
    cJSON_AddStringToObject(o, "time", p->req.tp_dp_shard || p->req.tp_dp_replicate
                                           ? "the rank's local model's FSDP2 step (its lm_head over the whole "
                                             "vocabulary) plus the TP collectives at the TP group's bus bandwidth "
                                             "(intra_node_bus_bytes_per_s, inter_node_bus_bytes_per_s where a group "
                                             "spans nodes, as FSDP2's), none hidden (time.collective_exposed_s: both; "
                                             "unverified)"
                                           : "the rank's local model's one-GPU step (its lm_head over the whole vocabulary) "
                                             "plus the TP collectives at the TP group's bus bandwidth "
                                             "(intra_node_bus_bytes_per_s, inter_node_bus_bytes_per_s where the group "
                                             "spans nodes), none hidden (time.collective_exposed_s; unverified)");
}

void gckpt_plan_tp_entry_json(const gckpt_plan *p, const gckpt_entry *e, cJSON *entry)
{
    if (!p->req.tp) return;
    gckpt_setting s = gckpt_plan_setting(p, e->micro_batch, e->grad_accum);
    s.every_n = e->every_n;
    s.offload = e->offload;
    gckpt_tp_coll c[GCKPT_TP_MAX_COLL];
    size_t n = gckpt_tp_collectives(&p->tp_full, &s, p->req.tp, c);
    cJSON *time = cJSON_GetObjectItemCaseSensitive(entry, "time");
    if (time) cJSON_AddNumberToObject(time, "collective_exposed_s", e->r.comm_s);
    cJSON *arr = cJSON_AddArrayToObject(entry, "tensor_parallel_collectives");
    for (size_t j = 0; arr && j < n; j++) {
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "kind", gckpt_coll_names[c[j].kind]);
        cJSON_AddStringToObject(k, "dtype", gckpt_dtype_names[c[j].dtype]);
        cJSON_AddStringToObject(k, "phase", c[j].phase == GCKPT_TP_FWD ? "forward" : "backward");
        cJSON_AddNumberToObject(k, "calls", (double)c[j].calls);
        cJSON_AddNumberToObject(k, "bytes", c[j].bytes);
        cJSON_AddItemToArray(arr, k);
    }
}

/* Rank k's memory where it holds more than the entry's (the walk's figures of memory; the time's stay). */
static void keep_busier(gckpt_result *r, const gckpt_result *k)
{
    if (k->peak_bytes <= r->peak_bytes) return;
    r->peak_bytes = k->peak_bytes;
    r->device_peak_bytes = k->device_peak_bytes;
    r->host_pinned_bytes = k->host_pinned_bytes;
    r->host_pageable_bytes = k->host_pageable_bytes;
    r->host_rng_bytes = k->host_rng_bytes;
    r->after_forward_bytes = k->after_forward_bytes;
    memcpy(r->breakdown, k->breakdown, sizeof r->breakdown);
    r->peak_phase = k->peak_phase;
    r->peak_micro = k->peak_micro;
    r->peak_layer = k->peak_layer;
    r->peak_tensor = k->peak_tensor;
    r->peak_grad = k->peak_grad;
}

/* Whether an earlier TP rank holds the same chunks of the intermediate size and the vocabulary (heads
 * divide by T, gckpt_tp_model_ok): its walk is rank k's (torch.chunk: only the last ranks differ). */
static bool tp_walked(const gckpt_plan *p, uint32_t k)
{
    const gckpt_model *m = &p->tp_full;
    const uint32_t T = p->req.tp;
    for (uint32_t j = 0; j < k; j++)
        if (gckpt_tp_chunk(m->intermediate, T, j) == gckpt_tp_chunk(m->intermediate, T, k) &&
            gckpt_tp_chunk(m->vocab, T, j) == gckpt_tp_chunk(m->vocab, T, k))
            return true;
    return false;
}

bool gckpt_plan_tp_rank_ctx(const gckpt_plan *p, uint32_t k, uint64_t micro_batch, uint64_t grad_accum, gckpt_model *m,
                            gckpt_recipe *rc, gckpt_ctx *c, gckpt_err *err)
{
    gckpt_tp_local_model(&p->tp_full, p->req.tp, k, m);
    gckpt_setting lay = gckpt_plan_recipe_setting(p, k), s = gckpt_plan_setting_tp(p, micro_batch, grad_accum, k);
    gckpt_setting_recipe(m, &lay, p->target, rc);
    return gckpt_ctx_init(c, m, &p->dev, rc, &s, err);
}

bool gckpt_plan_tp_entry_rank(const gckpt_plan *p, const gckpt_entry *e, uint32_t *rank)
{
    *rank = 0;
    gckpt_recipe *rc = malloc(sizeof *rc);
    gckpt_ctx *c = malloc(sizeof *c);
    gckpt_profile *prof = malloc(sizeof *prof);
    bool ok = rc && c && prof;
    for (uint32_t k = 1; ok && k < p->req.tp; k++) {
        gckpt_model m;
        gckpt_err err;
        gckpt_result r;
        if (tp_walked(p, k)) continue;
        ok = gckpt_plan_tp_rank_ctx(p, k, e->micro_batch, e->grad_accum, &m, rc, c, &err) && gckpt_profile_build(c, prof);
        if (!ok) break;
        gckpt_fast_eval(c, prof, e->every_n, e->offload, e->grad_accum, &r);
        if (r.peak_bytes == e->r.peak_bytes && r.peak_bytes > 0) { /* (rank 0's otherwise, gckpt_plan_tp_busiest) */
            *rank = k;
            break;
        }
    }
    free(prof);
    free(c);
    free(rc);
    return ok;
}

bool gckpt_plan_tp_busiest(gckpt_plan *p, size_t first, uint64_t micro_batch, uint64_t grad_accum, gckpt_err *err)
{
    if (p->req.tp < 2) return true;
    /* every TP rank walked, the highest kept (as gckpt_plan_cp_adjust does over the CP ranks): the ranks
     * differ by their chunks of the intermediate size and of the vocabulary (torch.chunk: the first ranks
     * the larger), and the short rank of an uneven vocabulary pads its logits for the gather (R-TP-15) */
    gckpt_recipe *rc = malloc(sizeof *rc);
    gckpt_ctx *c = malloc(sizeof *c);
    gckpt_profile *prof = malloc(sizeof *prof);
    gckpt_profiler *pr = gckpt_profiler_new();
    bool ok = rc && c && prof && pr;
    if (!ok) gckpt_seterr(err, "out of memory");
    for (uint32_t k = 1; ok && k < p->req.tp; k++) {
        if (tp_walked(p, k)) continue;
        gckpt_model m; /* lives while c points at it */
        ok = gckpt_plan_tp_rank_ctx(p, k, micro_batch, grad_accum, &m, rc, c, err);
        if (ok && !(ok = gckpt_profile_build_with(pr, c, prof))) gckpt_seterr(err, "out of memory while profiling");
        for (size_t i = first; ok && i < p->n; i++) {
            gckpt_entry *e = &p->entries[i];
            gckpt_result one;
            gckpt_fast_eval(c, prof, e->every_n, e->offload, e->grad_accum, &one);
            keep_busier(&e->r, &one);
            e->fits = e->r.device_peak_bytes <= p->usable_bytes;
        }
    }
    gckpt_profiler_free(pr);
    free(prof);
    free(c);
    free(rc);
    return ok;
}
