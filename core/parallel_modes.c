/* The parallel modes' descriptor table (gckpt/core/parallel.h, gckpt_par_mode): the one core
 * file that names a mode (besides the enum). A new mode is a row here, its rows / apply
 * functions (core/parallel.c) and, if it has working-set events, its simulator hooks
 * (core/sim_parallel.c). The rules behind each field: include/gckpt/core/parallel.h and
 * tools/hf_probe/FINDINGS.md R-DIST-*. */
#include "parallel_modes.h"

#include "sim_parallel.h"

#define BIT(x) (1u << (x))
#define EVERY (~0u)
/* what the modes on several GPUs plan (FINDINGS R-DIST-13..15 measured full fine-tuning with the
 * Trainer's adamw_torch_fused under fp32 and bf16=True; R-DISTPEFT-1..8 LoRA and QLoRA under
 * bf16=True, which gckpt_layout_check asks of them) */
#define MEASURED .min_world = 2, .optimizers = BIT(GCKPT_ADAMW), .precisions = BIT(GCKPT_FP32) | BIT(GCKPT_AMP_BF16), \
                 .methods = BIT(GCKPT_METHOD_FULL) | BIT(GCKPT_METHOD_LORA) | BIT(GCKPT_METHOD_QLORA)

static const gckpt_par_mode modes[GCKPT_NPAR] = {
    [GCKPT_PAR_NONE] = {.min_world = 1, .methods = EVERY, .optimizers = EVERY, .precisions = EVERY,
                        .shard_how = GCKPT_SHARD_NONE},
    [GCKPT_PAR_DDP] = {.multi = true, MEASURED, .shard_how = GCKPT_SHARD_NONE,
                       .title = "DDP (the Trainer's default under torchrun)", .trainer = GCKPT_TRAINER_DDP,
                       .sink_clones_logits = true,
                       .rows = gckpt_rows_ddp, .apply = gckpt_apply_ddp,
                       .sync_events = gckpt_sync_ddp},
    [GCKPT_PAR_FSDP] = {.multi = true, MEASURED, .shard_how = GCKPT_SHARD_DIM0,
                        .title = "FSDP2 (fully_shard per decoder layer, the embedding and the tail)",
                        .trainer = GCKPT_TRAINER_FSDP2,
                        .sharded = GCKPT_SHARD_WEIGHT | GCKPT_SHARD_GRAD | GCKPT_SHARD_STATES, .bf16_compute = true,
                        .sync_apart = true, .replicate_dim = true,
                        .rows = gckpt_rows_fsdp, .apply = gckpt_apply_fsdp,
                        .offload_copies = gckpt_offload_fsdp, .sim = &gckpt_wrap_fsdp},
    [GCKPT_PAR_ZERO1] = {.multi = true, MEASURED, .shard_how = GCKPT_SHARD_FLAT,
                         .title = "DeepSpeed ZeRO-1", .trainer = GCKPT_TRAINER_DEEPSPEED, .zero_stage = 1,
                         .sharded = GCKPT_SHARD_STATES, .deepspeed = true, .flat_groups = true, .bf16_compute = true,
                         .walk_every_rank = true, .ipg_bucket_event = true,
                         .rows = gckpt_rows_zero12, .apply = gckpt_apply_zero12, .step_gather_events = gckpt_gather_zero12,
                         .offload_copies = gckpt_offload_zero12, .sync_events = gckpt_sync_zero1},
    [GCKPT_PAR_ZERO2] = {.multi = true, MEASURED, .shard_how = GCKPT_SHARD_FLAT,
                         .title = "DeepSpeed ZeRO-2", .trainer = GCKPT_TRAINER_DEEPSPEED, .zero_stage = 2,
                         .sharded = GCKPT_SHARD_STATES | GCKPT_SHARD_GRAD, .deepspeed = true, .flat_groups = true,
                         .bf16_compute = true, .reduce_hooks = true, .walk_every_rank = true,
                         .rows = gckpt_rows_zero12, .apply = gckpt_apply_zero12, .step_gather_events = gckpt_gather_zero12,
                         .offload_copies = gckpt_offload_zero12, .sim = &gckpt_wrap_zero2},
    [GCKPT_PAR_ZERO3] = {.multi = true, MEASURED, .shard_how = GCKPT_SHARD_FLAT,
                         .title = "DeepSpeed ZeRO-3", .trainer = GCKPT_TRAINER_DEEPSPEED, .zero_stage = 3,
                         .sharded = GCKPT_SHARD_WEIGHT | GCKPT_SHARD_GRAD | GCKPT_SHARD_STATES, .persistence = true,
                         .deepspeed = true, .bf16_compute = true, .reduce_hooks = true, .linear_saves_input = true,
                         .rows = gckpt_rows_zero3, .apply = gckpt_apply_zero3, .step_gather_events = gckpt_gather_zero3,
                         .offload_copies = gckpt_offload_zero3, .sim = &gckpt_wrap_zero3},
#ifdef GCKPT_TOY /* replicas that never communicate (docs/architecture.md, "A parallel mode") */
    [GCKPT_PAR_TOY] = {.multi = true, MEASURED, .shard_how = GCKPT_SHARD_NONE,
                       .rows = gckpt_rows_toy, .apply = gckpt_apply_toy},
#endif
};

const gckpt_par_mode *gckpt_par_mode_of(unsigned mode) { return &modes[mode < GCKPT_NPAR ? mode : GCKPT_PAR_NONE]; }
