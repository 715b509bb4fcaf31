/* The step as data: the ordered segments of a training step that the schedule builder,
 * the fast evaluator, the timeline and the executor all iterate, and the one rule that
 * says how each layer is checkpointed. (core: read by the planner and the executor)
 *
 * A micro-step is the rows of gckpt_micro_order in turn: the embedding's forward, each
 * layer's forward (0 .. L-1), the head's (final norm, lm_head, loss), what each layer and
 * the head held until the forward returned, the head's backward, each layer's backward
 * (L-1 .. 0), the embedding's, what each layer's graph kept until the micro-step's graph
 * is freed (L-1 .. 0), and the micro-step's end (the batch, masks and loss go).
 * A step is the first micro-step (no gradients yet), one later micro-step when gradients
 * accumulate (it runs grad_accum - 1 times), and the optimizer. Under a parallel mode whose
 * synchronising micro-step (the step's last, which reduces the gradients) differs from the others
 * (gckpt_par_mode.sync_apart: FSDP2's reduce-scatters, the Trainer's no_sync elsewhere), the later
 * micro-steps are two: the ones between (grad_accum - 2 times, when any) and the last (once).
 * gckpt_micro_runs decides this, once. */
#ifndef GCKPT_STEP_H
#define GCKPT_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a layer runs: keeping what autograd saves, checkpointed (only its input kept, its
 * forward re-run in backward), or checkpointed with the input offloaded to pinned host
 * memory. */
typedef enum { GCKPT_LAYER_PLAIN, GCKPT_LAYER_CKPT, GCKPT_LAYER_CKPT_OFFLOAD, GCKPT_NLAYERMODE } gckpt_layer_mode;
/* The layers of the evaluator's proxy step (eval.c): layer 0, then one of each mode. */
#define GCKPT_PROXY_LAYERS (1 + GCKPT_NLAYERMODE)

/* What a layer is: one block type per layer, whose ops the recipe traces in a section of
 * their own (one per type present, gckpt_recipe.block_sec). The rule that gives a layer's
 * type is gckpt_layer_block (gckpt/core/recipe.h). DECODER: the model's decoder layer as
 * its attention runs it (causal SDPA, eager); SLIDING_SDPA: a sliding-window layer under
 * SDPA at seq >= window, which runs a masked SDPA (gckpt_sliding_masked); DENSE_MLP: a
 * mixture-of-experts model's dense layer (DeepSeek's first_k_dense_replace), whose
 * parameters are its own (gckpt_block_params_group); NOPE: SmolLM3's NoPE layer, the decoder
 * layer without the rotary embedding (its parameters the decoder's); CROSS: mllama's
 * cross-attention layer (its parameters its own, FINDINGS R-VLM-31); GATED: mllama's vision
 * tower's gated global encoder layer (two tanh gates; its parameters its own, R-VLM-30). */
typedef enum {
    GCKPT_BLOCK_DECODER,
    GCKPT_BLOCK_SLIDING_SDPA,
    GCKPT_BLOCK_DENSE_MLP,
    GCKPT_BLOCK_NOPE,
    GCKPT_BLOCK_CROSS,
    GCKPT_BLOCK_GATED,
    GCKPT_NBLOCK
} gckpt_block_type;

typedef enum {
    GCKPT_PH_FORWARD,
    GCKPT_PH_LOSS,
    GCKPT_PH_BACKWARD,
    GCKPT_PH_OPTIMIZER,
    GCKPT_NPHASE
} gckpt_phase;

extern const char *const gckpt_phase_names[GCKPT_NPHASE];

/* ---- the layer-mode rule ------------------------------------------------------------
 * HF's every_n_layers: layer i (0-based) is checkpointed when every_n > 0 and
 * i % every_n == 0, its input offloaded when offload is on. A cursor walks the rule layer
 * by layer (up or down) without a division per layer. */
typedef struct {
    uint32_t every_n;
    uint32_t pos;  /* the layer's index modulo every_n */
    uint8_t ckpt;  /* the mode of a checkpointed layer */
} gckpt_mode_cursor;

static inline gckpt_mode_cursor gckpt_mode_cursor_at(uint32_t every_n, bool offload, uint64_t layer)
{
    gckpt_mode_cursor c = {every_n, every_n ? (uint32_t)(layer % every_n) : 0,
                           (uint8_t)(offload ? GCKPT_LAYER_CKPT_OFFLOAD : GCKPT_LAYER_CKPT)};
    return c;
}
static inline gckpt_layer_mode gckpt_mode_cursor_mode(const gckpt_mode_cursor *c)
{
    return c->every_n && c->pos == 0 ? (gckpt_layer_mode)c->ckpt : GCKPT_LAYER_PLAIN;
}
static inline void gckpt_mode_cursor_up(gckpt_mode_cursor *c)
{
    if (c->every_n && ++c->pos == c->every_n) c->pos = 0;
}
static inline void gckpt_mode_cursor_down(gckpt_mode_cursor *c)
{
    if (c->every_n) c->pos = c->pos ? c->pos - 1 : c->every_n - 1;
}
static inline gckpt_layer_mode gckpt_layer_mode_of(uint32_t every_n, bool offload, uint64_t layer)
{
    gckpt_mode_cursor c = gckpt_mode_cursor_at(every_n, offload, layer);
    return gckpt_mode_cursor_mode(&c);
}

/* The checkpointed layers among `layers` (0-based, ascending), up to max of them into
 * out; returns how many there are. */
size_t gckpt_checkpointed_layers(uint32_t every_n, uint64_t layers, uint64_t *out, size_t max);
/* How many of `layers` are checkpointed. */
uint64_t gckpt_checkpointed_count(uint32_t every_n, uint64_t layers);

/* ---- segments -------------------------------------------------------------------------- */

typedef enum {
    GCKPT_PART_EMBEDDING, /* the token (and position) lookups and the layers' arguments */
    GCKPT_PART_LAYER,     /* one layer */
    GCKPT_PART_HEAD,      /* final norm, lm_head and the loss */
    GCKPT_PART_MICRO_END, /* a micro-step's end: its batch, masks and loss released */
    GCKPT_PART_OPTIMIZER, /* the optimizer step and zero_grad */
    GCKPT_NPART
} gckpt_part;

typedef enum {
    GCKPT_STAGE_FORWARD,
    GCKPT_STAGE_FORWARD_END, /* the forward has returned: what was held until then goes */
    GCKPT_STAGE_BACKWARD,
    GCKPT_STAGE_ONCE,        /* the micro-step's end; the optimizer */
    GCKPT_STAGE_GRAPH_FREED, /* the backward is over and the loss goes with its graph: what
                              * the graph's nodes kept outside their saved tensors goes */
} gckpt_stage;

typedef enum {
    GCKPT_ORDER_ONCE,        /* one segment */
    GCKPT_ORDER_LAYERS_UP,   /* one per layer, 0 .. L-1 */
    GCKPT_ORDER_LAYERS_DOWN, /* one per layer, L-1 .. 0 */
} gckpt_row_order;

/* Which micro-step a segment is in: the first (no gradients yet), a later one (gradients exist;
 * run grad_accum - 1 times, or as gckpt_micro_runs says), or none (the optimizer). */
typedef enum { GCKPT_MICRO_FIRST, GCKPT_MICRO_LATER, GCKPT_MICRO_NONE } gckpt_micro;

/* One micro-step of the walk and how many of the step's micro-steps it stands for. sync: it
 * reduces the gradients (it is, or stands for, the step's last micro-step). */
typedef struct {
    uint8_t micro; /* gckpt_micro */
    bool sync;
    uint64_t repeat;
} gckpt_micro_run;

#define GCKPT_MAX_MICRO_RUNS 3
/* The micro-steps of a step of grad_accum (>= 1) micro-steps, in order, into out; returns how
 * many (1 .. 3). The first (sync when it is the only one); then, without apart, one later
 * micro-step standing for the other grad_accum - 1, the last among them (sync); with apart (the
 * mode's synchronising micro-step differs from the others: gckpt_par_mode.sync_apart), the ones
 * between (grad_accum - 2 of them, no sync; none at grad_accum 2) and the last (once, sync).
 * The one place that says how often each micro-step runs: the schedule's segments carry it
 * (gckpt_sched_seg.repeat), the fast evaluator's composition and the executor read it. */
int gckpt_micro_runs(uint64_t grad_accum, bool apart, gckpt_micro_run out[GCKPT_MAX_MICRO_RUNS]);

typedef struct {
    uint8_t part, stage, order;
} gckpt_micro_row;

#define GCKPT_MICRO_ROWS 10
/* The order of a micro-step. */
extern const gckpt_micro_row gckpt_micro_order[GCKPT_MICRO_ROWS];

typedef struct {
    uint8_t row;    /* its row of gckpt_micro_order (GCKPT_MICRO_ROWS: the optimizer) */
    uint8_t part;   /* gckpt_part */
    uint8_t stage;  /* gckpt_stage */
    uint8_t mode;   /* LAYER: gckpt_layer_mode */
    uint8_t block;  /* LAYER: gckpt_block_type */
    uint8_t micro;  /* gckpt_micro */
    uint8_t sync;   /* the micro-step reduces the gradients (gckpt_micro_run.sync); 0 for the optimizer */
    int32_t layer;  /* LAYER: 0 .. L-1; -1 otherwise */
} gckpt_seg;

/* The segment after which the forward is over (the loss's backward starts next): the
 * first micro-step's HEAD BACKWARD begins it. */
static inline bool gckpt_seg_starts_backward(const gckpt_seg *s)
{
    return s->micro == GCKPT_MICRO_FIRST && s->part == GCKPT_PART_HEAD && s->stage == GCKPT_STAGE_BACKWARD;
}
static inline gckpt_phase gckpt_seg_phase(const gckpt_seg *s)
{
    if (s->part == GCKPT_PART_OPTIMIZER) return GCKPT_PH_OPTIMIZER;
    if (s->part == GCKPT_PART_MICRO_END || s->stage == GCKPT_STAGE_BACKWARD || s->stage == GCKPT_STAGE_GRAPH_FREED)
        return GCKPT_PH_BACKWARD;
    if (s->stage == GCKPT_STAGE_FORWARD_END || s->part == GCKPT_PART_HEAD) return GCKPT_PH_LOSS;
    return GCKPT_PH_FORWARD;
}
/* Where a segment is, as results and plans say it: -1 the embedding (and a micro-step's
 * end), 0 .. L-1 a layer, L the head, L + 1 the optimizer. */
static inline int32_t gckpt_seg_place(const gckpt_seg *s, uint64_t layers)
{
    switch (s->part) {
    case GCKPT_PART_LAYER: return s->layer;
    case GCKPT_PART_HEAD: return (int32_t)layers;
    case GCKPT_PART_OPTIMIZER: return (int32_t)layers + 1;
    default: return -1;
    }
}
/* "layer 3", "embedding", "head", "micro-step end", "optimizer" */
void gckpt_seg_name(const gckpt_seg *s, char *buf, size_t n);

/* ---- a step ----------------------------------------------------------------------------- */

typedef struct {
    uint64_t layers;
    uint32_t every_n;     /* the rule's inputs ... */
    bool offload;
    const uint8_t *modes; /* ... or, when not NULL, each layer's mode (segment profiles) */
    uint8_t ckpt_types;   /* with modes: the attention types the profiled setting checkpoints
                           * (gckpt_ckpt_types; 0 with modes NULL: from every_n) */
    const uint8_t *blocks; /* with modes: each layer's block type (gckpt_block_type) */
    const gckpt_model *model; /* without: the model whose layers' types gckpt_layer_block
                               * gives at attention and seq (the recipe's: gckpt_recipe.seq);
                               * NULL: every layer a DECODER */
    uint8_t attention;    /* gckpt_attention */
    uint64_t seq;
    int micro_steps;      /* how many micro-steps the walk runs (1 .. GCKPT_MAX_MICRO_RUNS) ... */
    gckpt_micro_run micro[GCKPT_MAX_MICRO_RUNS]; /* ... each (gckpt_micro_runs); a step written as a
                                                  * literal with micro_steps 1 and this zero: the first */
    bool optimizer;       /* the optimizer ends the step */
    uint64_t live_layers; /* 0: every layer's output reaches the loss; else the layers from
                           * live_layers on run forward only (a VLM's vision layers after the
                           * feature layer, FINDINGS R-VLM-9): the head reads layer
                           * live_layers - 1's output, and the later layers get no backward,
                           * their graph going when the forward returns (their FORWARD_END) */
    bool ckpt_on;         /* with modes: checkpointing is on though layer 0 may be plain (a VLM's
                           * text layers after the vision blocks, R-VLM-1): the embedding
                           * hooked, the checkpointed layers' arguments held (R-VLM-43) */
} gckpt_step;

/* The step of setting s on a model of `layers` layers (its micro-steps: gckpt_micro_runs at the
 * setting's grad_accum, apart under a mode whose synchronising micro-step differs). */
gckpt_step gckpt_step_of(const gckpt_setting *s, uint64_t layers);
gckpt_layer_mode gckpt_step_mode(const gckpt_step *st, uint64_t layer);
/* A layer's block type in step st. */
uint8_t gckpt_step_block(const gckpt_step *st, uint64_t layer);
/* Whether layers are checkpointed and offloaded (layer 0's mode: it is checkpointed
 * whenever any is, but for st->ckpt_on): checkpoints then hold the layers' arguments
 * (recipe.h, ckpt_held). */
void gckpt_step_checkpointing(const gckpt_step *st, bool *any, bool *offload);

typedef struct {
    const gckpt_step *st;
    int micro, row;         /* micro: the index into st->micro of the micro-step being walked */
    uint64_t done;          /* segments of the current per-layer row done */
    gckpt_mode_cursor cur;
} gckpt_step_iter;

void gckpt_step_begin(gckpt_step_iter *it, const gckpt_step *st);
/* The next segment in order; false after the last. */
bool gckpt_step_next(gckpt_step_iter *it, gckpt_seg *out);

#ifdef __cplusplus
}
#endif

#endif
