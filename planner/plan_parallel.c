/* A plan on several GPUs (gckpt/core/parallel.h): the header's layout line, the Trainer
 * arguments and launch lines of the snippet, and the plan JSON's layout. Nothing here runs for
 * one GPU, whose outputs stay as they were. */
#include "gckpt/planner/plan.h"

#include "gckpt/core/mesh.h"

#include "gckpt/core/parallel.h"

#include <string.h>

#include "gckpt/util/safe_text.h"

bool gckpt_plan_mode_ok(const gckpt_par_mode *d, const char *name, gckpt_err *err)
{
    if (!d->multi || (d->title && d->trainer != GCKPT_TRAINER_NONE &&
                      (d->trainer != GCKPT_TRAINER_DEEPSPEED || (d->zero_stage >= 1 && d->zero_stage <= 3))))
        return true;
    gckpt_seterr(err, "--parallel %s: its row in the mode table (core/parallel_modes.c) gives no title or Trainer "
                      "arguments (title, trainer, zero_stage), so no snippet can be written for it", name);
    return false;
}

void gckpt_plan_parallel_header(const gckpt_plan *p, FILE *f)
{
    const gckpt_layout *l = &p->req.layout;
    if (!gckpt_layout_multi(l)) return;
    uint32_t w = gckpt_layout_world(l);
    if (l->dp_replicate > 1) /* CP: FSDP2's shard dim is accelerate's flattened dp_shard_cp (R-CP-17) */
        fprintf(f, "HSDP mesh (accelerate ParallelismConfig): dp_replicate %u x %s %u; parameters sharded over "
                   "the %u ranks of a %s group (consecutive ranks), gradients reduce-scattered there and "
                   "all-reduced across the %u dp_replicate groups\n",
                l->dp_replicate, p->req.cp ? "dp_shard_cp" : "dp_shard", gckpt_layout_shard_world(l),
                gckpt_layout_shard_world(l), p->req.cp ? "dp_shard_cp" : "dp_shard", l->dp_replicate);
    else if (l->dp_replicate == 1)
        fprintf(f, "mesh (accelerate ParallelismConfig): dp_shard %u\n", w);
    /* CP: the C ranks of a CP group share their sequences (plan_cp.c) */
    const uint32_t data = p->req.cp ? w / p->req.cp : w;
    fprintf(f, "%u GPUs (%u node%s x %u), %s: memory is the busiest rank's (rank 0; zero1, zero2: the busiest of all ranks), tok/s per GPU (x %u for the job); "
               "global batch = micro-batch x grad-accum x %u\n",
            w, l->nodes ? l->nodes : 1, l->nodes > 1 ? "s" : "", l->gpus ? l->gpus : 1, gckpt_par_mode_of(l->mode)->title,
            w, data);
}

void gckpt_plan_groups_header(const gckpt_plan *p, FILE *f)
{
    gckpt_setting s = gckpt_plan_setting(p, 1, 1);
    gckpt_mesh m = gckpt_layout_mesh(&s.layout);
    if (!gckpt_mesh_multi_node(&m) || (!gckpt_layout_multi(&s.layout) && !p->req.tp)) return;
    fprintf(f, "groups over %u nodes of %u GPUs (mesh dp_replicate %u x dp_shard %u x cp %u x tp %u, tp innermost):",
            gckpt_mesh_world(&m) / m.node_gpus, m.node_gpus, m.dp_replicate, m.dp_shard, m.cp, m.tp);
    bool first = true;
    for (int g = GCKPT_GROUP_SHARD; g < GCKPT_NGROUP; g++) {
        uint32_t stride, size;
        gckpt_mesh_group_shape(&m, (gckpt_group)g, &stride, &size);
        if (size < 2) continue;
        const char *field;
        double bw = gckpt_mesh_group_bus(&p->dev, &m, (gckpt_group)g, &field);
        fprintf(f, "%s %s %u (ranks %u apart) %s at %s %.0f GB/s", first ? "" : ";",
                g == GCKPT_GROUP_SHARD && m.cp > 1 ? "dp_shard_cp" : gckpt_coll_group_names[g], size, stride,
                gckpt_mesh_group_inter_node(&m, (gckpt_group)g) ? "across nodes" : "inside a node", field, bw / 1e9);
        first = false;
    }
    fprintf(f, " (several nodes: unverified on real hardware)\n");
}

/* The TrainingArguments lines of the mode (inside TrainingArguments(...)), as its row's trainer
 * says (gckpt_plan_run refused a row without one: gckpt_plan_mode_ok). */
void gckpt_plan_parallel_args(const gckpt_plan *p, cJSON *args)
{
    const gckpt_par_mode *d = gckpt_par_mode_of(p->req.layout.mode);
    if (!d->multi) return;
    switch ((gckpt_trainer_args)d->trainer) {
    case GCKPT_TRAINER_FSDP2: {
        cJSON_AddBoolToObject(args, "fsdp", true);
        cJSON *fc = cJSON_AddObjectToObject(args, "fsdp_config");
        cJSON_AddNumberToObject(fc, "version", 2);
        cJSON_AddBoolToObject(fc, "reshard_after_forward", true);
        if (p->req.layout.offload) cJSON_AddBoolToObject(fc, "cpu_offload", true);
        /* printed as ParallelismConfig(...) (gckpt_plan_print_snippet); CP's is plan_cp.c's */
        if (p->req.layout.dp_replicate && !p->req.cp) {
            cJSON *pc = cJSON_AddObjectToObject(args, "parallelism_config");
            cJSON_AddNumberToObject(pc, "dp_replicate_size", p->req.layout.dp_replicate);
            cJSON_AddNumberToObject(pc, "dp_shard_size", gckpt_layout_shard_world(&p->req.layout));
        }
        break;
    }
    case GCKPT_TRAINER_DEEPSPEED: {
        int stage = d->zero_stage;
        if (p->req.deepspeed[0]) {
            char path[512];
            snprintf(path, sizeof path, "%s", p->req.deepspeed);
            gckpt_text_sanitize(path);
            cJSON_AddStringToObject(args, "deepspeed", path);
            break;
        }
        /* the Trainer's "auto" config: the same as a ds_config.json file */
        cJSON *ds = cJSON_AddObjectToObject(args, "deepspeed");
        static const char *const autos[] = {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                            "train_batch_size", "gradient_clipping"};
        for (size_t i = 0; i < sizeof autos / sizeof autos[0]; i++) cJSON_AddStringToObject(ds, autos[i], "auto");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(ds, "bf16"), "enabled", "auto");
        cJSON *z = cJSON_AddObjectToObject(ds, "zero_optimization");
        cJSON_AddNumberToObject(z, "stage", stage);
        cJSON_AddStringToObject(z, "reduce_bucket_size", "auto");
        if (stage == 3) {
            cJSON_AddStringToObject(z, "stage3_prefetch_bucket_size", "auto");
            cJSON_AddStringToObject(z, "stage3_param_persistence_threshold", "auto");
        }
        break;
    }
    case GCKPT_TRAINER_DDP: break; /* torchrun's default: nothing to add */
    case GCKPT_TRAINER_NONE: break;
    }
}

void gckpt_plan_parallel_peft_notes(const gckpt_plan *p, FILE *f)
{
    const gckpt_layout *l = &p->req.layout;
    const gckpt_peft *pf = &p->req.peft;
    if (!gckpt_layout_multi(l) || !gckpt_peft_on(pf)) return;
    switch ((gckpt_parallel)l->mode) {
    case GCKPT_PAR_DDP:
        fprintf(f, "# DDP: the Trainer passes find_unused_parameters=True for a PeftModel, checkpointing or not\n"
                   "# (planned: two int32 maps per adapter tensor, buckets over the adapters only; FINDINGS R-DISTPEFT-1, -2)\n");
        break;
    case GCKPT_PAR_FSDP:
        fprintf(f, "# FSDP2 (accelerate 1.15): each decoder layer one unit, its frozen base and adapters together, every\n"
                   "# parameter sharded; use_orig_params is obsolete (FSDP2 keeps the original parameters); only the\n"
                   "# adapters' gradients are reduce-scattered (FINDINGS R-DISTPEFT-3, -4)\n");
        if (gckpt_layout_replicate(l) > 1)
            fprintf(f, "# HSDP: a unit without adapters reduces nothing; only the adapters' reduced shards are\n"
                       "# all-reduced across the dp_replicate groups (FINDINGS R-DISTPEFT-11)\n");
        if (gckpt_peft_quantized(pf))
            fprintf(f, pf->quant_storage == GCKPT_DT_BF16
                           ? "# bnb_4bit_quant_storage=torch.bfloat16: fully_shard shards the 4-bit weights as bf16 tensors\n"
                             "# (FINDINGS R-DISTPEFT-7)\n"
                           : "# bnb_4bit_quant_storage=torch.uint8: accelerate keeps every 4-bit weight whole on every rank\n"
                             "# (ignored_params); --quant-storage bf16 plans them sharded (FINDINGS R-DISTPEFT-7)\n");
        if (l->offload)
            fprintf(f, "# cpu_offload: every shard, frozen ones too, the adapters' gradients and AdamW's states on the\n"
                       "# host; each unit's shards copied to the GPU before every all-gather (FINDINGS R-DISTPEFT-12)\n%s",
                    gckpt_peft_quantized(pf) ? "# from_pretrained still puts the whole quantized model on each GPU before fully_shard\n"
                                               "# shards it: that load is not planned\n"
                                             : "");
        break;
    case GCKPT_PAR_ZERO1:
    case GCKPT_PAR_ZERO2:
        fprintf(f, "# DeepSpeed: the frozen base cast to bf16 and kept whole on every rank (4-bit weights as stored);\n"
                   "# only the adapters are flattened and partitioned (FINDINGS R-DISTPEFT-5, -8)\n");
        break;
    case GCKPT_PAR_ZERO3:
        fprintf(f, "# DeepSpeed ZeRO-3: the model is built before TrainingArguments(deepspeed=...), so it loads whole and\n"
                   "# deepspeed.initialize partitions every parameter, frozen too, as measured (zero.Init at load is\n"
                   "# not measured with adapters; FINDINGS R-DISTPEFT-6, -8)\n");
        break;
    default: break;
    }
}

/* The launch lines, after the snippet. */
void gckpt_plan_print_launch(const gckpt_plan *p, FILE *f)
{
    const gckpt_layout *l = &p->req.layout;
    if (!gckpt_layout_multi(l)) return;
    uint32_t g = l->gpus ? l->gpus : 1, n = l->nodes ? l->nodes : 1;
    fprintf(f, "# launch (train.py holds the lines above):\n");
    if (n == 1) {
        fprintf(f, "torchrun --nproc_per_node %u train.py\n", g);
        fprintf(f, "# or: accelerate launch --num_processes %u train.py\n", g);
    } else {
        fprintf(f, "torchrun --nnodes %u --nproc_per_node %u --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
                   "--master_port 29500 train.py\n", n, g);
        fprintf(f, "# or: accelerate launch --num_machines %u --num_processes %u --machine_rank $NODE_RANK "
                   "--main_process_ip $MASTER_ADDR --main_process_port 29500 train.py\n", n, n * g);
    }
}

void gckpt_plan_parallel_json(const gckpt_plan *p, cJSON *inputs)
{
    const gckpt_layout *l = &p->req.layout;
    if (!gckpt_layout_multi(l)) return;
    cJSON *o = cJSON_AddObjectToObject(inputs, "layout");
    cJSON_AddNumberToObject(o, "gpus", l->gpus ? l->gpus : 1);
    cJSON_AddNumberToObject(o, "nodes", l->nodes ? l->nodes : 1);
    cJSON_AddNumberToObject(o, "world_size", gckpt_layout_world(l));
    cJSON_AddStringToObject(o, "parallel", gckpt_parallel_names[l->mode]);
    if (l->dp_replicate) { /* accelerate's ParallelismConfig mesh (FINDINGS R-DIST-27) */
        cJSON_AddNumberToObject(o, "dp_replicate", l->dp_replicate);
        cJSON_AddNumberToObject(o, "dp_shard", gckpt_layout_shard_world(l));
        cJSON_AddStringToObject(o, "mesh", p->req.cp ? "dp_replicate x dp_shard_cp (accelerate ParallelismConfig; "
                                                       "dp_shard the flattened dp_shard x cp, cp inner)"
                                                     : "dp_replicate x dp_shard (accelerate ParallelismConfig; "
                                                       "dp_shard inner)");
    }
    cJSON_AddStringToObject(o, "memory", "the busiest rank: rank 0; zero1, zero2: the busiest of every rank");
    cJSON_AddNumberToObject(o, "bus_bytes_per_s", l->nodes > 1 ? p->dev.inter_node_bus_bytes_per_s
                                                                : p->dev.intra_node_bus_bytes_per_s);
    if (l->offload) { /* CPU offload (FINDINGS R-OFFLOAD-5): planned from the source, gckpt-run does not execute it */
        cJSON *off = cJSON_AddObjectToObject(o, "offload");
        cJSON_AddBoolToObject(off, "optimizer", (l->offload & GCKPT_OFFLOAD_OPTIMIZER) != 0);
        cJSON_AddBoolToObject(off, "param", (l->offload & GCKPT_OFFLOAD_PARAM) != 0);
    }
    if (gckpt_par_mode_of(l->mode)->trainer != GCKPT_TRAINER_DEEPSPEED) return;
    /* the DeepSpeed limits planned with, "auto" resolved */
    cJSON *ds = cJSON_AddObjectToObject(o, "deepspeed");
    if (p->req.deepspeed[0]) cJSON_AddStringToObject(ds, "file", p->req.deepspeed);
    else cJSON_AddNullToObject(ds, "file");
    cJSON_AddNumberToObject(ds, "reduce_bucket_size", (double)gckpt_ds_reduce_bucket(&p->model, l));
    cJSON_AddNumberToObject(ds, "stage3_param_persistence_threshold", (double)gckpt_ds_persistence_threshold(&p->model, l));
    cJSON_AddNumberToObject(ds, "stage3_max_live_parameters", (double)gckpt_ds_max_live(l));
    cJSON_AddNumberToObject(ds, "sub_group_size", (double)gckpt_ds_sub_group(l));
    if (l->ds.overlap_comm) cJSON_AddTrueToObject(ds, "overlap_comm"); /* stages 1/2: a second ipg bucket */
}

void gckpt_plan_parallel_entry_json(const gckpt_plan *p, const gckpt_entry *e, cJSON *entry, cJSON *time)
{
    if (!gckpt_layout_multi(&p->req.layout)) return;
    cJSON_AddNumberToObject(entry, "global_batch", /* CP: a CP group's ranks share their sequences */
                            (double)(e->micro_batch * e->grad_accum * gckpt_layout_world(&p->req.layout) /
                                     (p->req.cp ? p->req.cp : 1)));
    cJSON_AddNumberToObject(time, "collective_exposed_s", e->r.comm_s);
    if (p->req.layout.offload) { /* the CPU optimizer's fp32 master and states: host, not pinned */
        cJSON *mem = cJSON_GetObjectItemCaseSensitive(entry, "memory");
        if (mem) cJSON_AddNumberToObject(mem, "host_pageable_bytes", (double)e->r.host_pageable_bytes);
    }
}
