/* A plan of one tensor-parallel rank (--tp T alone, or with --dp-shard S: TP x FSDP, gckpt/core/tp.h):
 * the header line, the snippet's model line, Trainer argument and launch line, and the plan JSON's
 * "tensor_parallel" sections. Nothing here runs without --tp. */
#include "gckpt/planner/plan.h"

#include "gckpt/core/collective.h"
#include "gckpt/core/dtype.h"
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
    if (p->req.tp_dp_replicate && p->req.tp_dp_shard) {
        fprintf(f, "tensor parallelism %u x HSDP %u x %u over %u GPUs (transformers: from_pretrained(distributed_config="
                   "DistributedConfig(tp_size=%u, fsdp_size=%u, dp_replicate_size=%u)) shards by tp_plan, then fully_shard "
                   "over its (dp_replicate, fsdp) mesh): memory and time are rank 0's, TP rank 0, which computes %llu "
                   "attention and %llu key/value heads and %llu of the MLP's %llu columns; its TP shards are sharded again "
                   "over %u ranks, gathered and reduce-scattered in fp32 (no MixedPrecisionPolicy), every micro-step "
                   "reduce-scattering into FSDP2's partial output and the last all-reducing it across the %u replicas; "
                   "every rank of a TP group sees the same batch (tok/s is per GPU: a TP group's over %u); the step time "
                   "is that local model's FSDP2 step plus the TP all-reduces' and all-gathers' bus time, none hidden "
                   "(unverified)\n",
                p->req.tp, p->req.tp_dp_replicate, p->req.tp_dp_shard, tp_world(p), p->req.tp, p->req.tp_dp_shard,
                p->req.tp_dp_replicate, (unsigned long long)p->model.heads, (unsigned long long)p->model.kv_heads,
                (unsigned long long)p->model.intermediate, (unsigned long long)p->tp_full.intermediate,
                p->req.tp_dp_shard, p->req.tp_dp_replicate, p->req.tp);
        return;
    }
    if (p->req.tp_dp_replicate) {
        fprintf(f, "tensor parallelism %u x DDP %u over %u GPUs (transformers: from_pretrained(distributed_config="
                   "DistributedConfig(tp_size=%u, dp_replicate_size=%u)) shards by tp_plan, then fully_shard over its "
                   "(dp_replicate, fsdp) mesh of one shard rank: each replica keeps its TP shard whole): memory and time "
                   "are rank 0's, TP rank 0, which computes %llu attention and %llu key/value heads and %llu of the MLP's "
                   "%llu columns; every micro-step reduces its gradients into FSDP2's partial output (fp32), the last "
                   "all-reduces it across the %u replicas; every rank of a TP group sees the same batch (tok/s is per "
                   "GPU: a TP group's over %u); the step time is that local model's FSDP2 step plus the TP all-reduces' "
                   "and all-gathers' bus time, none hidden (unverified)\n",
                p->req.tp, p->req.tp_dp_replicate, tp_world(p), p->req.tp, p->req.tp_dp_replicate,
                (unsigned long long)p->model.heads, (unsigned long long)p->model.kv_heads,
                (unsigned long long)p->model.intermediate, (unsigned long long)p->tp_full.intermediate,
                p->req.tp_dp_replicate, p->req.tp);
        return;
    }
    if (p->req.tp_dp_shard) {
        fprintf(f, "tensor parallelism %u x FSDP %u over %u GPUs (transformers: from_pretrained(distributed_config="
                   "DistributedConfig(tp_size=%u, fsdp_size=%u)) shards by tp_plan, then fully_shard over the fsdp "
                   "dimension): memory and time are rank 0's, TP rank 0, which computes %llu attention and %llu "
                   "key/value heads and %llu of the MLP's %llu columns; its TP shards (the embedding and lm_head by "
                   "vocabulary) are sharded again over %u ranks, gathered and reduce-scattered in fp32 (no "
                   "MixedPrecisionPolicy); the embedding's unsharded gradient is whole; every rank of a TP group sees "
                   "the same batch (tok/s is per GPU: a TP group's over %u); the step time is that local model's FSDP2 step plus the TP all-reduces' and "
                   "all-gathers' bus time, none hidden (unverified)\n",
                p->req.tp, p->req.tp_dp_shard, tp_world(p), p->req.tp, p->req.tp_dp_shard,
                (unsigned long long)p->model.heads, (unsigned long long)p->model.kv_heads,
                (unsigned long long)p->model.intermediate, (unsigned long long)p->tp_full.intermediate,
                p->req.tp_dp_shard, p->req.tp);
        return;
    }
    fprintf(f, "tensor parallelism over %u GPUs (transformers' tp_plan: from_pretrained(distributed_config="
               "DistributedConfig(tp_size=%u))): memory and time are TP rank 0's, which computes %llu attention and "
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
    if (p->req.tp_dp_replicate) { /* not ParallelismConfig(dp_replicate_size=R): the Trainer overwrites its dp_shard */
        char fs[32] = "";
        if (p->req.tp_dp_shard) snprintf(fs, sizeof fs, "fsdp_size=%u, ", p->req.tp_dp_shard);
        fprintf(f, "# TP x %s: every process (torchrun) loads its shard; transformers applies FSDP2 itself over its\n"
                   "# (dp_replicate, fsdp) mesh%s (FINDINGS R-TP-11)\n"
                   "model = AutoModelForCausalLM.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.float32,\n"
                   "                                             distributed_config=DistributedConfig(tp_size=%u, "
                   "%sdp_replicate_size=%u))\n",
                p->req.tp_dp_shard ? "HSDP" : "DDP", p->req.tp_dp_shard ? "" : " of one shard rank", model_arg, attn,
                p->req.tp, fs, p->req.tp_dp_replicate);
        return;
    }
    if (p->req.tp_dp_shard) { /* the deprecated tp_plan / tp_size spelling has no fsdp_size */
        fprintf(f, "# TP x FSDP: every process (torchrun) loads its shard; transformers applies FSDP2 itself\n"
                   "# (fsdp_mixed_precision=False, the default: fp32 all-gathers, the Trainer's bf16 is autocast)\n"
                   "model = AutoModelForCausalLM.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.float32,\n"
                   "                                             distributed_config=DistributedConfig(tp_size=%u, "
                   "fsdp_size=%u))\n",
                model_arg, attn, p->req.tp, p->req.tp_dp_shard);
        return;
    }
    fprintf(f, "# tensor parallelism: every process (torchrun) loads its shard; transformers 5.24 still takes the\n"
               "# older spelling from_pretrained(..., tp_plan=\"auto\", tp_size=%u) (deprecated)\n"
               "model = AutoModelForCausalLM.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.float32,\n"
               "                                             distributed_config=DistributedConfig(tp_size=%u))\n",
            p->req.tp, model_arg, attn, p->req.tp);
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
        cJSON_AddStringToObject(o, "planned", "rank 0, TP rank 0 (transformers' tp_plan and fully_shard over its "
                                              "(dp_replicate, fsdp) mesh, FINDINGS R-TP-11): its local model's FSDP2 "
                                              "step");
    } else if (p->req.tp_dp_shard) {
        cJSON_AddNumberToObject(o, "fsdp_size", p->req.tp_dp_shard);
        cJSON_AddStringToObject(o, "planned", "rank 0, TP rank 0 (transformers' tp_plan and fully_shard over fsdp, "
                                              "FINDINGS R-TP-8): its local model's FSDP2 step over the fsdp group");
    } else
        cJSON_AddStringToObject(o, "planned", "TP rank 0 (transformers' tp_plan, FINDINGS R-TP): its local model's step");
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
