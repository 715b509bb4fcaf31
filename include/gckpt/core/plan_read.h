/* Reading a plan file (schema gckpt.plan/2, written by gckpt-plan; gckpt.plan/1, which
 * planned CUDA only and had no inputs.target nor host_rng_state_bytes, is read too) back, with every field
 * checked: the model is rebuilt from the embedded HF config (inputs.model.config), the
 * device from the embedded profile (inputs.device), and each entry is checked against the
 * inputs and against itself (checkpointed layers vs every_n_layers, offload vs every_n,
 * micro_batch x grad_accum vs the batch, the memory breakdown vs the peak, ...).
 * Errors are one line naming the file and the field. */
#ifndef GCKPT_PLAN_READ_H
#define GCKPT_PLAN_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gckpt/core/device.h"
#include "gckpt/core/model.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/plan_format.h"
#include "gckpt/core/setting.h"
#include "gckpt/util/hub_names.h"
#include "gckpt/util/util.h"

/* Largest plan file accepted (a full 80-layer sweep with a timeline is a few MiB). */
#define GCKPT_PLAN_MAX_BYTES (256u << 20)

typedef struct {
    char file[512];           /* the path as given (for messages and the report) */
    char generator_version[32];
    int version;              /* the schema's: 1 or 2 */
    gckpt_target target;      /* inputs.target (version 1: cuda) */
    gckpt_model model;
    gckpt_hub_source hub;     /* inputs.model.hub (absent: id "", a shipped name or a path) */
    gckpt_device dev;
    char *config_text;        /* inputs.model.config printed back as JSON */
    uint64_t seq;
    uint64_t micro_batches[GCKPT_MAX_MB];
    int n_micro;
    uint64_t global_batch;    /* 0: not given (grad_accum fixed) */
    uint64_t grad_accum;      /* 0 when global_batch is given */
    gckpt_precision precision;
    gckpt_optimizer optimizer;
    gckpt_attention attention;
    uint8_t code_base; /* gckpt_code_base: inputs.code_base (absent: hf) */
    gckpt_loss loss;           /* inputs.loss (optional; absent: hf) */
    uint8_t liger_off;         /* inputs.liger_kernels (optional; absent: all on): the kernels off */
    gckpt_offload_sel offload;
    uint64_t budget_bytes, usable_bytes;
    double margin;
    gckpt_entry *entries;     /* r: peak_bytes, device_peak_bytes, host_pinned_bytes, host_rng_bytes,
                                 after_forward_bytes, breakdown, step_s and its parts,
                                 tokens_per_s, mfu as written */
    size_t n;
    long recommended;         /* -1: none */
    long smallest;            /* -1: none */
    bool allow_long_seq;      /* inputs.allow_long_seq (absent: false) */
    gckpt_peft peft;          /* inputs.method / lora / quant (absent: full fine-tuning) */
    gckpt_layout layout;      /* inputs.layout (absent: zeroed, one GPU); its offload: inputs.layout.offload */
    /* The plan's kind where gckpt-plan plans more than gckpt-run executes (checked like every
     * field; gckpt_plan_executable refuses them): */
    bool vlm;                 /* inputs.vision: a vision-language model (model: its text model) */
    uint64_t towers[2];       /* vlm: the GradientCheckpointingLayer counts {vision, text} */
    /* vlm: inputs.vision's images per sample, tiles per image, tokens per image and whether
     * the tower trains (gckpt_vlm_images of the walk) */
    uint64_t vlm_images, vlm_tiles, vlm_tokens;
    uint64_t vlm_h, vlm_w; /* inputs.vision.image_size (LLaVA-NeXT's anyres pack follows it) */
    bool vlm_tower_trained;
    uint8_t ckpt_towers;      /* vlm: inputs.vision.checkpoint_towers (gckpt_ckpt_towers; absent: all) */
    uint32_t tp_fsdp;         /* inputs.tensor_parallel.fsdp_size (0: none) */
    uint32_t tp_replicate;    /* inputs.tensor_parallel.dp_replicate_size (0: none) */
    uint32_t cp;              /* inputs.context_parallel.cp_size (0: none) */
    gckpt_warning warnings[GCKPT_MAX_WARNINGS];
    size_t n_warnings;
} gckpt_plan_file;

/* Parse plan text; file names the source in messages. */
bool gckpt_plan_parse(const char *file, const char *text, gckpt_plan_file *pf, gckpt_err *err);
/* Whether gckpt-run executes the plan (a VLM, TP x FSDP, TP with replicas, context
 * parallelism and CPU offload on several GPUs are planned, not executed): false with one
 * line naming the file and the field. The reader accepts those plans (gckpt-dash draws
 * them); gckpt-run and the calibration (which re-evaluates entries as gckpt-run's) ask this. */
bool gckpt_plan_executable(const gckpt_plan_file *pf, gckpt_err *err);
/* The processes gckpt-run runs the plan on: one per rank of its mesh (a TP plan's tp x fsdp_size x
 * dp_replicate_size), of its layout's world, or 1. */
uint32_t gckpt_plan_file_ranks(const gckpt_plan_file *pf);
/* Read and parse a plan file. */
bool gckpt_plan_read(const char *path, gckpt_plan_file *pf, gckpt_err *err);
void gckpt_plan_file_free(gckpt_plan_file *pf);

/* The run setting of entry i (TP x FSDP, TP with replicas: world rank 0's layout, gckpt_tp_hsdp_layout). */
gckpt_setting gckpt_plan_file_setting(const gckpt_plan_file *pf, size_t i);

#endif
