/* A LLaVA, LLaVA-NeXT or Gemma 3 training step: the text model's step and the vision tower's,
 * simulated as two schedules walked in the order transformers 5.24 runs them
 * (core/vlm_step.c). The text
 * embedding, the tower (its embedding, layers, the forward-only layers after the feature
 * layer) and the projector, masked_scatter into the text embeddings, the text layers, head
 * and loss; the forward returns (the tower's hidden states, held in image_outputs, go); the
 * text backward, masked_scatter's, the projector's and the tower's, the text embedding's;
 * the optimizer over both parameter tables. Which layers of each tower are checkpointed is
 * gckpt_tower_checkpointed's (FINDINGS R-VLM-1). */
#ifndef GCKPT_VLM_STEP_H
#define GCKPT_VLM_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/device.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/setting.h"
#include "gckpt/core/step_walk.h"
#include "gckpt/core/vision.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a step feeds the tower: images per sample, the tower runs `tiles` per image
 * (gckpt_image_tiles), each image `tokens` placeholders (gckpt_image_tokens); whether the
 * tower trains (false: requires_grad_(False) on vision_tower, the projector trains); the
 * batch's pixel_values dtype (gckpt_dtype: 0 is the image processor's float32; the probe's
 * pure-bf16 cases feed bf16). */
typedef struct {
    uint64_t images, tiles, tokens;
    bool tower_trained;
    uint8_t pixel_dtype;
    uint64_t h, w; /* the images' size in pixels (0: unknown; Qwen2.5-VL's windows follow it) */
} gckpt_vlm_images;

/* The step's figures beside the walk's result. */
typedef struct {
    uint64_t text_layers, vision_layers, vision_live; /* vision_live: up to the feature layer */
    uint64_t vision_ckpt[GCKPT_MAX_LAYERS], text_ckpt[GCKPT_MAX_LAYERS];
    size_t nvision_ckpt, ntext_ckpt;
    uint64_t image_tokens;       /* per sample */
    bool peak_in_vision;         /* the peak falls in a segment of the tower's */
    /* what one plain layer saves for the backward (its shared tensors, such as the rotary
     * pair, not counted): a text layer past layer 0, a vision block */
    uint64_t text_layer_saved, vision_layer_saved;
} gckpt_vlm_step_info;

/* Walk the steady-state step of setting s (its micro-batch, sequence: text and image tokens
 * per sample, precision, every_n, offload, accumulation; one device; LoRA on the text model) for VLM v on
 * device d and target; res as gckpt_walk fills it (peak, after the forward, breakdown, the
 * step's seconds from the same per-op model for both towers). false with err when a part
 * is not simulated (gckpt_vlm_types' walked rows only; one GPU, full fine-tuning or LoRA, HF's loss;
 * Gemma 3 under sdpa). */
bool gckpt_vlm_walk(const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s, gckpt_target target,
                    const gckpt_vlm_images *im, gckpt_result *res, gckpt_vlm_step_info *info, gckpt_err *err);
/* The same walk with on_event (NULL: none) called at every event of the composed schedule, in
 * order, as gckpt_walk_schedule calls it (a plan's memory timeline). */
bool gckpt_vlm_walk_events(const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s, gckpt_target target,
                           const gckpt_vlm_images *im, gckpt_result *res, gckpt_vlm_step_info *info,
                           gckpt_walk_event_fn on_event, void *user, gckpt_err *err);

/* The step itself, as the walk builds it and gckpt-run performs it (executor/interp_vlm.c):
 * both towers' recipes, contexts and models, the composed schedule and which side each of
 * its segments belongs to. The tower's instances are numbered from vision_ids on. */
typedef enum {
    GCKPT_VSEG_TEXT,   /* the text model's recipe and simulator */
    GCKPT_VSEG_VISION, /* the tower's (and the projector's) */
    GCKPT_VSEG_BRIDGE, /* LlavaModel.forward's own events (a buffer of the tower's numbering):
                        * the forward's cat, mask and masked_scatter, or masked_scatter's backward */
} gckpt_vseg;

typedef struct {
    gckpt_recipe tr, vr, vfull;
    gckpt_ctx tc, vc, vfc; /* the text model, the tower's live layers, the whole tower */
    gckpt_model text, tower, tower_live;
    gckpt_setting vset;    /* the tower's setting: its images as the micro-batch, its positions */
    uint8_t tmodes[GCKPT_MAX_LAYERS], vmodes[GCKPT_MAX_LAYERS];
    /* each layer's block type where a tower has two (mllama's cross-attention text layers,
     * its gated global vision layers) */
    uint8_t tblocks[GCKPT_MAX_LAYERS], vblocks[GCKPT_MAX_LAYERS];
    gckpt_schedule sched;
    uint8_t *seg_kind;     /* per segment of sched: gckpt_vseg */
    uint32_t vision_ids;
    int64_t start[GCKPT_NCOMP]; /* the bytes held when the step starts (both towers', and the
                                 * weights of the tower's layers after the feature layer) */
    int64_t dead_weights;  /* ... of which those weights */
    int64_t kept_buffers;  /* ... the model's buffers (in weights) */
    int64_t kept_steps;    /* ... the optimizer's step counters (in the optimizer's states) */
    uint64_t image_rows;   /* image tokens per sample */
} gckpt_vlm_step;

/* Build the step of gckpt_vlm_walk's arguments (NULL with err when it is not simulated);
 * gckpt_vlm_step_free releases it. */
gckpt_vlm_step *gckpt_vlm_step_new(const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s,
                                   gckpt_target target, const gckpt_vlm_images *im, gckpt_vlm_step_info *info,
                                   gckpt_err *err);
void gckpt_vlm_step_free(gckpt_vlm_step *st);

#ifdef __cplusplus
}
#endif

#endif
