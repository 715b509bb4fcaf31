/* Run settings: everything about a training step that is not the model or the GPU. */
#ifndef GCKPT_SETTING_H
#define GCKPT_SETTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GCKPT_FP32,     /* fp32 weights, fp32 compute */
    GCKPT_BF16,     /* pure bf16: weights, grads, optimizer states in bf16 */
    GCKPT_AMP_BF16, /* fp32 weights under torch.autocast(bf16): HF Trainer bf16=True */
    GCKPT_AMP_FP16, /* fp32 weights under torch.autocast(fp16): HF Trainer fp16=True */
    GCKPT_NPREC
} gckpt_precision;

/* adamw: torch.optim.AdamW(fused=True), HF's default optim "adamw_torch_fused" (torch >= 2.8);
 * adamw-foreach: "adamw_torch" (foreach implementation, one state-sized temporary);
 * sgd: SGD with momentum; adamw-8bit: bitsandbytes "adamw_bnb_8bit"; paged-adamw-8bit /
 * paged-adamw-32bit: bitsandbytes "paged_adamw_8bit" / "paged_adamw_32bit", whose states
 * of parameters with at least 1e5 elements live in CUDA managed memory (params.h). */
typedef enum {
    GCKPT_ADAMW, GCKPT_ADAMW_FOREACH, GCKPT_SGD, GCKPT_ADAMW_8BIT, GCKPT_PAGED_ADAMW_8BIT, GCKPT_PAGED_ADAMW_32BIT,
    GCKPT_NOPT
} gckpt_optimizer;
typedef enum { GCKPT_SDPA, GCKPT_EAGER, GCKPT_NATTN } gckpt_attention;
/* The head's loss (gckpt-plan --loss; core/fused_loss.c, docs/fused-loss.md): HF's
 * ForCausalLMLoss on the full logits; Liger's fused linear cross-entropy (the Trainer's
 * use_liger_kernel=True, liger-kernel 0.8.5); cut-cross-entropy (25.1.1) */
typedef enum { GCKPT_LOSS_HF, GCKPT_LOSS_LIGER, GCKPT_LOSS_CCE, GCKPT_NLOSS } gckpt_loss;
/* Liger's kernels under --loss liger, named as liger_kernel_config's keys (the keyword
 * arguments of apply_liger_kernel_to_<type>); gckpt_setting.liger_off has bit k set when
 * kernel k is switched off (gckpt-plan --liger-kernels). Off, fused_linear_cross_entropy
 * leaves transformers' loss on the full logits (cross_entropy stays False). */
typedef enum {
    GCKPT_LK_ROPE, GCKPT_LK_RMS_NORM, GCKPT_LK_SWIGLU, GCKPT_LK_FLCE, GCKPT_NLK
} gckpt_liger_kernel;

/* The training stack's efficiency class (gckpt-plan --code-base, docs/step-time.md): hf,
 * Hugging Face modules run eagerly (the Trainer, TRL, accelerate: the default); fused, a stack
 * with its own fused modules (torchtitan, llm-foundry, IBM FMS, ...), compiled or not. Each
 * GPU profile's "code_bases" object holds the fitted time parameters of each. */
typedef enum { GCKPT_CB_HF, GCKPT_CB_FUSED, GCKPT_NCODEBASE } gckpt_code_base;

/* The fine-tuning method (gckpt/core/peft.h has its rules and names). full: every
 * parameter trains. lora: peft LoraConfig on the model as loaded; qlora: the linears
 * quantized by bitsandbytes (BitsAndBytesConfig), prepare_model_for_kbit_training, then
 * LoRA. A zeroed gckpt_peft is full fine-tuning. */
typedef enum { GCKPT_METHOD_FULL, GCKPT_METHOD_LORA, GCKPT_METHOD_QLORA, GCKPT_NMETHOD } gckpt_method;

typedef struct {
    uint8_t method;          /* gckpt_method */
    uint32_t rank;           /* LoraConfig r */
    double alpha;            /* lora_alpha (scaling = alpha / r) */
    double dropout;          /* lora_dropout */
    uint32_t targets;        /* target modules: bits of gckpt_lora_target (peft.h) */
    uint8_t modules_to_save; /* bits of gckpt_mts (peft.h) */
    uint8_t quant;           /* qlora: gckpt_quant_scheme (quant_layout.h) */
    bool double_quant;       /* bnb_4bit_use_double_quant */
    uint8_t quant_storage;   /* bnb_4bit_quant_storage: gckpt_dtype (gckpt_peft_default: uint8) */
    uint8_t compute_dtype;   /* bnb_4bit_compute_dtype: gckpt_dtype */
    /* derived, not an option: set by gckpt_setting_recipe when a parallel wrapper casts every
     * floating parameter to the compute dtype before the forward (FSDP2's MixedPrecisionPolicy,
     * DeepSpeed's bf16: FINDINGS R-DISTPEFT-4, -5, -7): the adapters and QLoRA's fp32 parameters
     * (prepare_model_for_kbit_training's) compute in bf16, not fp32 */
    bool wrapper_cast;
    /* derived likewise: a frozen weight's F.linear saves its input (ZeRO-3's linear, gckpt_par_mode) */
    bool linear_saves_input;
} gckpt_peft;

/* How the step is spread over GPUs (gckpt/core/parallel.h has the per-rank rules). A zeroed
 * layout is one GPU: gpus and nodes 0 read as 1, mode GCKPT_PAR_NONE. */
typedef enum {
    GCKPT_PAR_NONE, GCKPT_PAR_DDP, GCKPT_PAR_FSDP, GCKPT_PAR_ZERO1, GCKPT_PAR_ZERO2, GCKPT_PAR_ZERO3,
#ifdef GCKPT_TOY /* the test build's toy mode (docs/architecture.md, "A parallel mode"; tests/toy) */
    GCKPT_PAR_TOY,
#endif
    GCKPT_NPAR /* a new mode goes above: its name in core/setting.c, its rows in core/parallel_modes.c
                * and executor/interp_parallel.c */
} gckpt_parallel;

/* DeepSpeed ZeRO limits from a user's ds_config.json (gckpt-plan --deepspeed), in elements;
 * a value whose bit in `set` is 0 is "auto" or absent: the Trainer's / DeepSpeed's default
 * (gckpt/core/parallel.h). */
enum { GCKPT_DS_REDUCE_BUCKET = 1, GCKPT_DS_PERSISTENCE = 2, GCKPT_DS_MAX_LIVE = 4, GCKPT_DS_SUB_GROUP = 8 };
typedef struct {
    uint8_t set;
    uint64_t reduce_bucket, persistence_threshold, max_live, sub_group;
    /* zero_optimization.overlap_comm true under stage 1 or 2 (DeepSpeed's default there is
     * false): a second ipg bucket (stage_1_and_2.py setup_buckets) */
    bool overlap_comm;
} gckpt_ds_limits;

/* CPU offload on several GPUs (FINDINGS 13.10, read in the source, not measured): ZeRO's
 * offload_optimizer (fp32 master, states and gradient partitions to host memory, the step on
 * the CPU) and ZeRO-3's offload_param (the parameter partitions); FSDP2's CPUOffloadPolicy
 * (gckpt-plan --fsdp-offload on) sets both. */
enum { GCKPT_OFFLOAD_OPTIMIZER = 1, GCKPT_OFFLOAD_PARAM = 2 };

typedef struct {
    uint32_t gpus;  /* per node */
    uint32_t nodes;
    uint8_t mode;   /* gckpt_parallel */
    gckpt_ds_limits ds;
    uint8_t offload; /* GCKPT_OFFLOAD_* bits; 0: everything on the device */
    /* FSDP2 with reshard_after_forward=False (fsdp_config's key; the fixtures' nrf variant):
     * every unit stays gathered from its forward to its backward */
    bool fsdp_keep_gathered;
    /* HSDP: FSDP2 over accelerate's 2-D mesh (ParallelismConfig(dp_replicate_size, dp_shard_size),
     * mesh order dp_replicate outer, dp_shard inner: rank = r x dp_shard + s): the parameters
     * sharded over the dp_shard ranks, replicated across dp_replicate groups, the gradients
     * reduce-scattered in the shard group then all-reduced across the replicate group (FINDINGS
     * R-DIST-27). 0: no ParallelismConfig (fully_shard builds its own 1-D mesh per unit); 1: a
     * ParallelismConfig with dp_shard_size = the world (one mesh, FSDP2 over every rank). Only a
     * mode whose descriptor has replicate_dim takes it (gckpt_layout_check). */
    uint32_t dp_replicate;
    /* Tensor parallelism alone (mode none, tp > 1: transformers' DistributedConfig(tp_size), FINDINGS
     * R-TP-4, R-TP-7): the parameters are TP rank tp_rank's of tp (as below), the context's parallel
     * bytes AdamW's steps, the rotary buffers and the device meshes (gckpt_tp_rank_bytes); gckpt-run
     * runs it on tp ranks (executor/interp_tp.c).
     * TP x FSDP (transformers' DistributedConfig(tp_size, fsdp_size), FINDINGS R-TP-8): the
     * parameters are TP rank tp_rank's of tp (gckpt_tp_params_local: the embedding's and lm_head's
     * chunk(V) rows; the model given is the rank's local model, gckpt_tp_local_model), sharded by
     * FSDP2 over the fsdp ranks (gpus x nodes); fsdp_as_loaded: no MixedPrecisionPolicy
     * (fsdp_mixed_precision False) and no accelerate upcast: the shards, their AdamW states, the
     * sharded gradients, the all-gathers and reduce-scatters all in the loaded dtype (fp32; bf16
     * under pure bf16, FINDINGS R-TP-30; gckpt_fsdp_shard_dtype). 0 / false: none of this. */
    uint32_t tp, tp_rank;
    bool fsdp_as_loaded;
    /* context parallelism (accelerate's ParallelismConfig(cp_size), FINDINGS R-CP-11): the CP size
     * of a CP x FSDP2 mesh, FSDP2 over every rank (dp_shard x cp); the setting's seq is then the
     * rank's piece, S / cp. 0: none. */
    uint32_t cp;
    uint32_t rank; /* the rank planned: 0 (a plan; under zero2 it also walks the last rank and
                    * shows the busier), others to compare their fixtures */
    /* GPUs per node of the whole run where gpus is not that: under TP the layout's gpus x nodes
     * are one TP rank's fsdp mesh (gckpt_tp_hsdp_layout), the run tp times it over several nodes.
     * Only which collectives cross nodes reads it (gckpt_layout_mesh). 0: gpus (TP: one node). */
    uint32_t node_gpus;
} gckpt_layout;

typedef struct {
    uint64_t seq, micro_batch, grad_accum;
    gckpt_precision precision;
    gckpt_optimizer optimizer;
    gckpt_attention attention;
    uint8_t code_base; /* gckpt_code_base (zeroed: hf) */
    uint32_t every_n; /* 0: gradient checkpointing off */
    bool offload;     /* checkpointed inputs to pinned host memory (needs every_n > 0) */
    /* torch's reentrant checkpoint (use_reentrant=True: prepare_model_for_kbit_training's
     * own call, FINDINGS 12.1); a plan prints and plans the non-reentrant call, the
     * fixtures of prepare's call set it */
    bool reentrant;
    uint8_t ckpt_towers; /* a VLM's: gckpt_ckpt_towers (gckpt/core/towers.h; zeroed: all) */
    uint8_t loss;     /* gckpt_loss (zeroed: HF's) */
    uint8_t liger_off; /* --loss liger: bit gckpt_liger_kernel set = that kernel off (zeroed: all on) */
    gckpt_peft peft;  /* zeroed: full fine-tuning */
    gckpt_layout layout; /* zeroed: one GPU */
} gckpt_setting;

extern const char *const gckpt_precision_names[GCKPT_NPREC];
extern const char *const gckpt_optimizer_names[GCKPT_NOPT];
extern const char *const gckpt_attention_names[GCKPT_NATTN];
extern const char *const gckpt_code_base_names[GCKPT_NCODEBASE]; /* "hf", "fused" */
extern const char *const gckpt_loss_names[GCKPT_NLOSS];
extern const char *const gckpt_liger_kernel_names[GCKPT_NLK]; /* "rope", "rms_norm", "swiglu", ... */
extern const char *const gckpt_parallel_names[GCKPT_NPAR]; /* "none", "ddp", "fsdp", "zero1", ... */

/* Name -> enum; -1 if unknown. */
int gckpt_precision_from(const char *s);
int gckpt_optimizer_from(const char *s);
int gckpt_attention_from(const char *s);
int gckpt_code_base_from(const char *s);
int gckpt_loss_from(const char *s);
/* "rope,rms_norm,..." (the kernels on, gckpt_liger_kernel_names) -> the bits off; false with the
 * first name not understood in bad */
bool gckpt_liger_kernels_parse(const char *list, uint8_t *off, char *bad, size_t nbad);
int gckpt_parallel_from(const char *s);

#ifdef __cplusplus
}
#endif

#endif
