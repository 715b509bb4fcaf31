/* A LLaVA, LLaVA-NeXT or Gemma 3 step as two simulators' schedules walked in transformers 5.24's order
 * (gckpt/core/vlm_step.h, FINDINGS R-VLM-11; modeling_llava.py LlavaModel.forward,
 * get_image_features, get_placeholder_mask; modeling_llava_next.py's, pack_image_features). The text model is its family's recipe at the whole sequence (text
 * and image tokens); the tower is gckpt_vision_step_recipe_build's, sized at the
 * micro-batch's images (tiles) and the tower's positions. Between them, what LlavaModel.forward
 * does itself (the bridge): torch.cat of the projected features (a copy, .to(the text
 * embeddings' dtype) another under autocast), the placeholder mask (bool [b, s, 1], which
 * masked_scatter saves), masked_scatter's new embeddings (the old ones go), and in the
 * backward masked_scatter's two gradients (masked_fill for the text embedding's, masked_select
 * for the projector's, cast back to its dtype under autocast). LLaVA-NeXT's bridge adds the
 * tiles' pixel copy (the tower's batch) and pack_image_features' tensors; Gemma 3's
 * (Gemma3Model.forward, FINDINGS R-VLM-14) has no cat copy, holds token_type_ids' block ids
 * and gives every text layer its type's materialised mask. What each family does is its
 * gckpt_vlm_types row's (features_cat, packed_tiles, image_masks). LoRA on the text model
 * (the row's lora; FINDINGS R-VLM-42, R-VLM-43): the tower and projector frozen, hooked
 * under checkpointing, the hooked text embedding held beside the new embeddings; QLoRA (llava,
 * gemma3: R-VLM-92, R-VLM-94) the tower's linears 4-bit too (llava's projector's). Qwen3-VL's
 * deepstack mergers (the tower's deepstack_visual_indexes) add their events around both
 * towers' layer segments (deepstack_hook, FINDINGS R-VLM-53). Llama 3.2 Vision's features
 * reach the text model as cross-attention states instead (the row's cross_attention,
 * build_cross, FINDINGS R-VLM-60 to R-VLM-62): its tiled tower walked whole (local, then gated
 * global layers), the text model with its cross-attention layers. Every step holds the batch's
 * labels (and Gemma 3's token_type_ids) through each micro-step and, from its start, the
 * model's buffers and AdamW's step counters (R-VLM-90, R-VLM-91). */
#include "gckpt/core/vlm_step.h"

#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "gckpt/core/families.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/step.h"
#include "gckpt/core/step_walk.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/vision.h"

/* the vision simulator numbers its instances apart from the text's */
#define VISION_IDS ((uint32_t)1 << 30)

/* One tower's layer modes from the module-order rule (R-VLM-1), offload on checkpointed ones. */
static size_t tower_modes(const gckpt_setting *s, const uint64_t towers[2], size_t t, uint8_t *modes, uint64_t *ckpt)
{
    size_t n = gckpt_tower_checkpointed(s->every_n, s->ckpt_towers, towers, t, ckpt, GCKPT_MAX_LAYERS);
    memset(modes, GCKPT_LAYER_PLAIN, towers[t]);
    for (size_t i = 0; i < n && i < GCKPT_MAX_LAYERS; i++)
        modes[ckpt[i]] = (uint8_t)(s->offload ? GCKPT_LAYER_CKPT_OFFLOAD : GCKPT_LAYER_CKPT);
    return n;
}

/* Segments of one step, in order, with the micro-step each is in. */
typedef struct {
    gckpt_seg *seg;
    int *micro;
    size_t n;
} seglist;

static bool collect(const gckpt_step *st, seglist *l)
{
    size_t cap = 16 + (size_t)st->micro_steps * (6 + 4 * (size_t)st->layers);
    l->seg = malloc(cap * sizeof *l->seg);
    l->micro = malloc(cap * sizeof *l->micro);
    l->n = 0;
    if (!l->seg || !l->micro) return false;
    gckpt_step_iter it;
    gckpt_step_begin(&it, st);
    gckpt_seg g;
    while (l->n < cap && gckpt_step_next(&it, &g)) {
        l->seg[l->n] = g;
        l->micro[l->n++] = it.micro;
    }
    return true;
}

typedef struct {
    gckpt_schedule *out;
    gckpt_sim *ts, *vs;
    const gckpt_ctx *tc, *vc;
    const gckpt_step *tst, *vst;
    seglist tl, vl;
    uint8_t *seg_kind; /* per schedule segment: gckpt_vseg */
    size_t nseg_kind;
    bool ok;
} builder;

static void mark(builder *b, uint8_t kind)
{
    size_t n = b->out->nseg;
    if (n > b->nseg_kind) {
        uint8_t *nk = realloc(b->seg_kind, n * 2 * sizeof *nk);
        if (!nk) {
            b->ok = false;
            return;
        }
        b->seg_kind = nk;
        b->nseg_kind = n * 2;
    }
    b->seg_kind[n - 1] = kind;
}

struct bridge_sizes;
/* called before (after = false) and after each layer segment of a row (Qwen3-VL's deepstack) */
typedef void (*seg_hook)(builder *b, const struct bridge_sizes *z, int m, bool vision, const gckpt_seg *g, bool after);

/* The segments of micro-step m (-1: the optimizer) at row `row` of one tower, in order. */
static void rows_hooked(builder *b, bool vision, int m, int row, seg_hook hook, const struct bridge_sizes *z)
{
    const seglist *l = vision ? &b->vl : &b->tl;
    const gckpt_step *st = vision ? b->vst : b->tst;
    for (size_t i = 0; i < l->n && b->ok; i++) {
        bool opt = l->seg[i].micro == GCKPT_MICRO_NONE;
        if (opt != (m < 0) || (!opt && (l->micro[i] != m || l->seg[i].row != row))) continue;
        if (hook && l->seg[i].layer >= 0) hook(b, z, m, vision, &l->seg[i], false);
        gckpt_schedule_open(b->out, &l->seg[i], opt ? 1 : st->micro[m].repeat);
        gckpt_sim_segment(vision ? b->vs : b->ts, &l->seg[i], b->out);
        gckpt_schedule_close(b->out);
        mark(b, vision ? GCKPT_VSEG_VISION : GCKPT_VSEG_TEXT);
        b->ok = b->ok && !b->out->oom;
        if (hook && l->seg[i].layer >= 0) hook(b, z, m, vision, &l->seg[i], true);
    }
}

static void rows(builder *b, bool vision, int m, int row) { rows_hooked(b, vision, m, row, NULL, NULL); }

/* A bridge segment: LlavaModel.forward's own events, labelled as the text embedding's
 * forward or backward in micro-step m. */
static void bridge_open(builder *b, int m, uint8_t stage)
{
    gckpt_seg g = {.row = stage == GCKPT_STAGE_FORWARD ? 0 : 7, .part = GCKPT_PART_EMBEDDING, .stage = stage,
                   .mode = GCKPT_LAYER_PLAIN, .block = GCKPT_BLOCK_DECODER, .micro = b->tst->micro[m].micro,
                   .sync = b->tst->micro[m].sync, .layer = -1};
    gckpt_schedule_open(b->out, &g, b->tst->micro[m].repeat);
}

static void bridge_close(builder *b)
{
    gckpt_schedule_close(b->out);
    mark(b, GCKPT_VSEG_BRIDGE);
    b->ok = b->ok && !b->out->oom;
}

typedef struct bridge_sizes {
    const gckpt_vlm_type *kind; /* the family's row: what its forward does between the towers */
    uint64_t bs, img, width;           /* text positions (b x s), image tokens, text width */
    uint8_t feat_dt, text_dt;          /* the projector's output, the text embeddings (and their gradients) */
    /* LLaVA-NeXT: pixel_values [b, tiles, ...] concatenated to the tower's batch (a copy of
     * `pixels` elements of pixel_dt, which the patch conv keeps when it needs no cast), and
     * pack_image_features' tensors, kept as image_outputs.pooler_output */
    bool packed;
    uint64_t pixels;
    uint8_t pixel_dt;
    bool conv_keeps_pixels;
    /* the tower recipe's bridge parameter (LLaVA-NeXT's image_newline: no op of the recipe
     * reads it; pack_image_features' cat does): its .grad, made in the first micro-step's
     * backward of the pack (after masked_scatter's, before the projector's) and freed by
     * zero_grad with the others; bridge_grad 0: none (frozen, or no such parameter) */
    int16_t bridge_param;
    uint8_t bridge_grad_dt;
    uint64_t bridge_grad;
    /* whether anything before the text layers needs a gradient: not with LoRA on the text
     * model without checkpointing (no hooked embedding, the tower and projector frozen:
     * masked_scatter has no node and keeps no mask, R-VLM-42) */
    bool grad;
    /* the text embedding's output hooked into a leaf (LoRA under checkpointing): its
     * AccumulateGrad node keeps it while masked_scatter's new embeddings go on as the
     * text layers' input (R-VLM-43) */
    bool leaf_held;
    /* Qwen3-VL's deepstack mergers (FINDINGS R-VLM-52, R-VLM-53): after vision block
     * ds_block[k] merger k keeps ds_saved bytes beyond what the next block holds anyway and
     * makes its output (feat_dt, img x width, kept in image_outputs), whose copy the text
     * model adds after its layer k; its gradient waits from text layer k's backward until
     * the merger's, after vision block ds_block[k] + 1's; in the first micro-step the
     * merger's backward makes its parameters' gradients (ds_params elements of grad_dt) */
    unsigned nds;
    uint64_t ds_block[GCKPT_MAX_FEATURE_LAYERS], ds_saved[GCKPT_MAX_FEATURE_LAYERS], ds_params;
    uint8_t grad_dt;
    uint64_t batch_masks; /* mllama: the batch's int64 cross-attention and aspect-ratio masks' elements */
    int ds_held[GCKPT_MAX_FEATURE_LAYERS], ds_out[GCKPT_MAX_FEATURE_LAYERS], ds_copy[GCKPT_MAX_FEATURE_LAYERS],
        ds_grad[GCKPT_MAX_FEATURE_LAYERS];
} bridge_sizes;

/* A flat buffer of the bridge (in the vision simulator's numbering). */
static int buf(builder *b, uint8_t comp, uint8_t dt, uint64_t numel)
{
    return gckpt_sim_buffer(b->vs, b->out, -1, comp, dt, numel);
}

static void drop(builder *b, int id) { gckpt_sim_release(b->vs, b->out, id); }

/* Qwen3-VL's deepstack events around the towers' layer segments. */
static void deepstack_hook(builder *b, const bridge_sizes *zc, int m, bool vision, const gckpt_seg *g, bool after)
{
    bridge_sizes *z = (bridge_sizes *)zc;
    bool fwd = g->stage == GCKPT_STAGE_FORWARD, bwd = g->stage == GCKPT_STAGE_BACKWARD;
    for (unsigned k = 0; k < z->nds; k++) {
        if (vision && fwd && after && (uint64_t)g->layer == z->ds_block[k]) {
            bridge_open(b, m, GCKPT_STAGE_FORWARD);
            z->ds_held[k] = buf(b, GCKPT_C_ACTIVATIONS, GCKPT_DT_BOOL, z->ds_saved[k]);
            z->ds_out[k] = buf(b, GCKPT_C_ACTIVATIONS, z->feat_dt, z->img * z->width);
            bridge_close(b);
        } else if (!vision && bwd && after && (uint64_t)g->layer == k) {
            bridge_open(b, m, GCKPT_STAGE_BACKWARD);
            z->ds_grad[k] = buf(b, GCKPT_C_BACKWARD, z->feat_dt, z->img * z->width);
            bridge_close(b);
        } else if (vision && bwd && !after && (uint64_t)g->layer == z->ds_block[k]) {
            bridge_open(b, m, GCKPT_STAGE_BACKWARD);
            if (b->tst->micro[m].micro == GCKPT_MICRO_FIRST) buf(b, GCKPT_C_GRADS, z->grad_dt, z->ds_params);
            if (z->ds_grad[k] >= 0) drop(b, z->ds_grad[k]);
            if (z->ds_held[k] >= 0) drop(b, z->ds_held[k]);
            z->ds_grad[k] = z->ds_held[k] = -1;
            bridge_close(b);
        }
    }
}

/* Micro-step m begins in both towers' simulators (the tower's ids after the text's). */
static bool begin_micro(builder *b, int m)
{
    bool later = b->tst->micro[m].micro == GCKPT_MICRO_LATER, sync = b->tst->micro[m].sync;
    return gckpt_sim_begin(b->ts, b->tc, b->tst, later, sync, m ? gckpt_sim_next_id(b->ts) : 0) &&
           gckpt_sim_begin(b->vs, b->vc, b->vst, later, sync, m ? gckpt_sim_next_id(b->vs) : VISION_IDS);
}

static bool build(builder *b, const bridge_sizes *z)
{
    for (int m = 0; m < b->tst->micro_steps && b->ok; m++) {
        if (!begin_micro(b, m)) return false;
        /* the batch's labels: the VLM collators' own tensor (input_ids cloned, the image
         * tokens -100), held by the batch dict until the micro-step's backward ends (R-VLM-91);
         * with them Gemma 3's token_type_ids, the processor's, which its forward reads */
        bridge_open(b, m, GCKPT_STAGE_FORWARD);
        int labels = buf(b, GCKPT_C_ACTIVATIONS, GCKPT_DT_I64, z->bs);
        int types = z->kind->image_masks ? buf(b, GCKPT_C_ACTIVATIONS, GCKPT_DT_I64, z->bs) : -1;
        bridge_close(b);
        rows(b, false, m, 0); /* inputs_embeds = embed_tokens(input_ids) */
        int pix = -1, packed = -1;
        if (z->packed) { /* get_image_features: torch.cat of each sample's tiles */
            bridge_open(b, m, GCKPT_STAGE_FORWARD);
            pix = buf(b, GCKPT_C_ACTIVATIONS, z->pixel_dt, z->pixels);
            bridge_close(b);
        }
        seg_hook hook = z->nds ? deepstack_hook : NULL;
        for (int r = 0; r < 3; r++) rows_hooked(b, true, m, r, hook, z); /* get_image_features: the tower, the projector */
        bridge_open(b, m, GCKPT_STAGE_FORWARD);
        if (z->packed) { /* pack_image_features' result; the concatenated pixels go unless the conv keeps them */
            packed = buf(b, GCKPT_C_ACTIVATIONS, z->feat_dt, z->img * z->width);
            if (!z->conv_keeps_pixels) drop(b, pix);
        }
        /* torch.cat(image_features) (and .to(inputs_embeds.dtype): the cat's copy then goes) */
        int feats = z->kind->features_cat ? buf(b, GCKPT_C_ACTIVATIONS, z->feat_dt, z->img * z->width) : -1;
        if (feats >= 0 && z->feat_dt != z->text_dt) {
            int cast = buf(b, GCKPT_C_ACTIVATIONS, z->text_dt, z->img * z->width);
            drop(b, feats);
            feats = cast;
        }
        int mask = buf(b, GCKPT_C_ACTIVATIONS, GCKPT_DT_BOOL, z->bs); /* saved by masked_scatter */
        /* masked_scatter's new embeddings while the old are alive: the old then go (the text's
         * embed_out stands for the new ones from here on), unless hooked into a leaf that
         * the backward's AccumulateGrad keeps (leaf_held) */
        int leaf = buf(b, GCKPT_C_ACTIVATIONS, z->text_dt, z->bs * z->width);
        if (!z->leaf_held) drop(b, leaf);
        int ids = z->kind->image_masks ? buf(b, GCKPT_C_ACTIVATIONS, GCKPT_DT_I64, z->bs) : -1;
        /* deepstack_visual_embeds: torch.cat of each merger's per-image split (a copy) */
        int *copies = ((bridge_sizes *)z)->ds_copy;
        for (unsigned k = 0; k < z->nds; k++) copies[k] = buf(b, GCKPT_C_ACTIVATIONS, z->feat_dt, z->img * z->width);
        bridge_close(b);
        rows(b, false, m, 1); /* the text layers */
        bridge_open(b, m, GCKPT_STAGE_FORWARD);
        if (feats >= 0) drop(b, feats); /* LlavaModel.forward returns: its image_features */
        if (!z->grad) drop(b, mask);    /* and its placeholder mask, which nothing saved */
        if (ids >= 0) drop(b, ids);     /* Gemma3Model.forward's block_sequence_ids */
        for (unsigned k = 0; k < z->nds; k++) drop(b, copies[k]);
        bridge_close(b);
        for (int r = 2; r < 5; r++) rows(b, false, m, r); /* the head and loss; the forward returns */
        for (int r = 3; r < 5; r++) rows(b, true, m, r); /* image_outputs goes with the outputs */
        if (packed >= 0 || z->nds) {
            bridge_open(b, m, GCKPT_STAGE_FORWARD);
            if (packed >= 0) drop(b, packed);
            for (unsigned k = 0; k < z->nds; k++) drop(b, z->ds_out[k]); /* image_outputs' deepstack_features */
            bridge_close(b);
        }
        for (int r = 5; r < 7; r++) rows_hooked(b, false, m, r, hook, z); /* the text backward */
        /* MaskedScatterBackward: masked_fill for the text embeddings (stood for by the text's
         * gradient stream from here on) and masked_select for the features, which under
         * autocast ToCopyBackward casts to the projector's dtype (the tower's seed gradient) */
        if (z->grad) {
            bridge_open(b, m, GCKPT_STAGE_BACKWARD);
            drop(b, buf(b, GCKPT_C_BACKWARD, z->text_dt, z->bs * z->width));
            if (z->feat_dt != z->text_dt) drop(b, buf(b, GCKPT_C_BACKWARD, z->text_dt, z->img * z->width));
            drop(b, mask);
            if (z->bridge_grad && b->tst->micro[m].micro == GCKPT_MICRO_FIRST)
                gckpt_sim_buffer(b->vs, b->out, z->bridge_param, GCKPT_C_GRADS, z->bridge_grad_dt, z->bridge_grad);
            bridge_close(b);
        }
        for (int r = 5; r < 8; r++) rows_hooked(b, true, m, r, hook, z); /* the projector's and the tower's backward */
        if (z->packed && z->conv_keeps_pixels) {
            bridge_open(b, m, GCKPT_STAGE_BACKWARD);
            drop(b, pix); /* the patch conv's saved input */
            bridge_close(b);
        }
        if (z->leaf_held) {
            bridge_open(b, m, GCKPT_STAGE_BACKWARD);
            drop(b, leaf);
            bridge_close(b);
        }
        for (int r = 7; r < 9; r++) rows(b, false, m, r); /* the text embedding's; graphs freed */
        for (int r = 8; r < 10; r++) rows(b, true, m, r);
        rows(b, false, m, 9);
        bridge_open(b, m, GCKPT_STAGE_BACKWARD);
        drop(b, labels);
        if (types >= 0) drop(b, types);
        bridge_close(b);
    }
    rows(b, false, -1, 0);
    rows(b, true, -1, 0);
    return b->ok;
}

/* mllama's step (FINDINGS R-VLM-34): the tower and the projector run first; the text model's
 * embedding makes cross_attention_states (its source, standing for the projector's output
 * from here on) and the two masks, which the cross-attention layers read (held until the
 * lowest cross-attention layer's backward when saved or checkpointed, the masks otherwise
 * until the text model returns: the text recipe's layer arguments); no masked_scatter. The
 * backward: the text layers, the text embedding, then the projector (its seed gradient is
 * the cross-attention states' accumulated one) and the tower, global layers before local. */
static bool build_cross(builder *b, const bridge_sizes *z)
{
    for (int m = 0; m < b->tst->micro_steps && b->ok; m++) {
        if (!begin_micro(b, m)) return false;
        /* the batch's cross_attention_mask [b, s, images, max_num_tiles] and aspect_ratio_mask
         * [b, images, max_num_tiles] (int64, the processor's): the Trainer's dict holds them */
        bridge_open(b, m, GCKPT_STAGE_FORWARD);
        int batch = buf(b, GCKPT_C_ACTIVATIONS, GCKPT_DT_I64, z->batch_masks);
        bridge_close(b);
        for (int r = 0; r < 3; r++) rows(b, true, m, r);  /* the tower, the projector */
        for (int r = 0; r < 5; r++) rows(b, false, m, r); /* the text model, the head and loss; it returns */
        for (int r = 3; r < 5; r++) rows(b, true, m, r);
        for (int r = 5; r < 8; r++) rows(b, false, m, r); /* the text backward, its embedding's */
        for (int r = 5; r < 8; r++) rows(b, true, m, r);  /* the projector's, the tower's */
        for (int r = 8; r < 10; r++) rows(b, false, m, r);
        for (int r = 8; r < 10; r++) rows(b, true, m, r);
        bridge_open(b, m, GCKPT_STAGE_BACKWARD); /* the micro-step ends: its batch goes */
        drop(b, batch);
        bridge_close(b);
    }
    rows(b, false, -1, 0);
    rows(b, true, -1, 0);
    return b->ok;
}

/* The tower's one block stands for all of them: its attention's FLOPs are the layers' mean
 * (Qwen2.5-VL's windowed and full-attention blocks, gckpt_vision_attention_share). */
static bool scale_attention(const gckpt_vlm *v, const gckpt_vlm_images *im, gckpt_recipe *r)
{
    double share = gckpt_vision_attention_share(v, im->h, im->w);
    for (int i = r->sec_begin[GCKPT_SEC_BLOCK]; i < r->sec_end[GCKPT_SEC_BLOCK]; i++)
        if (r->op[i].prim == GCKPT_P_SDPA) r->op[i].fBSS *= share;
    return true;
}

/* Whether a plain text layer keeps its input for the backward (fp32's RMSNorm saves it;
 * pure bf16's saves its fp32 cast instead, the residual add nothing). */
static bool layer_saves_input(const gckpt_recipe *r)
{
    int in = r->sec_in[GCKPT_SEC_BLOCK];
    for (int i = r->sec_begin[GCKPT_SEC_BLOCK]; i < r->sec_end[GCKPT_SEC_BLOCK]; i++)
        for (int k = 0; k < r->op[i].nsaved; k++)
            if (r->op[i].saved[k] == in) return true;
    return false;
}

/* A frozen tower that nothing hooks (Qwen3-VL's: no input embedding, R-VLM-3) builds no graph
 * in its blocks: torch.utils.checkpoint then keeps neither their inputs (nor offloads them)
 * nor their RNG states, and the blocks run as plain ones that save nothing (R-VLM-53). */
static bool graphless_tower(gckpt_vlm_step *p, uint64_t layers)
{
    if (!p->vr.t[p->vr.embed_out].requires_grad) memset(p->vmodes, GCKPT_LAYER_PLAIN, layers);
    return true;
}

static bool fail_oom(gckpt_err *err)
{
    gckpt_seterr(err, "out of memory building a VLM step");
    return false;
}

void gckpt_vlm_step_free(gckpt_vlm_step *st)
{
    if (!st) return;
    gckpt_schedule_free(&st->sched);
    free(st->seg_kind);
    free(st);
}

/* Whether an op of section sec of c's recipe saves tensor t's storage. */
static bool section_saves(const gckpt_ctx *c, int sec, int t)
{
    const gckpt_recipe *r = c->recipe;
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++)
        for (int k = 0; k < r->op[i].nsaved; k++)
            if (c->storage[r->op[i].saved[k]] == c->storage[t]) return true;
    return false;
}

/* Qwen3-VL's deepstack mergers in the step: one merger's recipe (its head section) at the
 * tower's setting; what it keeps beyond the block output the next block holds anyway (its
 * input, kept by a plain block's norm or an unoffloaded checkpoint), its parameters. */
static bool deepstack_sizes(const gckpt_vlm *v, const gckpt_device *d, const gckpt_vlm_step *p,
                            const gckpt_setting *vs, gckpt_target target, gckpt_tower_grad g, bridge_sizes *z,
                            gckpt_err *err)
{
    gckpt_recipe *dr = malloc(sizeof *dr);
    gckpt_ctx *dc = malloc(sizeof *dc);
    bool ok = dr && dc && gckpt_vision_deepstack_recipe_build(v, &p->tower_live, vs->precision, target, g, dr, err) &&
              gckpt_ctx_init(dc, &p->tower_live, d, dr, vs, err);
    if (!dr || !dc) fail_oom(err);
    if (ok) {
        uint64_t saved = gckpt_section_saved_bytes(dc, GCKPT_SEC_HEAD), out = dc->raw[dr->head_in];
        bool keeps_out = section_saves(dc, GCKPT_SEC_HEAD, dr->head_in);
        bool plain_keeps_in = section_saves(&p->vc, GCKPT_SEC_BLOCK, p->vr.block_in);
        uint64_t m = v->vision.hidden * v->vision.merge * v->vision.merge, o = v->vision.out_hidden;
        z->nds = v->vision.ndeepstack;
        z->ds_params = 2 * m + m * m + m + m * o + o;
        z->grad_dt = p->vr.grad_dtype;
        for (unsigned k = 0; k < z->nds; k++) {
            uint64_t i = v->vision.deepstack[k];
            uint8_t next = i + 1 < p->tower_live.layers ? p->vmodes[i + 1] : GCKPT_LAYER_PLAIN;
            bool held = i + 1 < p->tower_live.layers &&
                        (next == GCKPT_LAYER_CKPT || (next == GCKPT_LAYER_PLAIN && plain_keeps_in));
            z->ds_block[k] = i;
            z->ds_saved[k] = saved - (keeps_out && held ? out : 0);
            z->ds_held[k] = z->ds_out[k] = z->ds_copy[k] = z->ds_grad[k] = -1;
        }
    }
    free(dr);
    free(dc);
    return ok;
}

gckpt_vlm_step *gckpt_vlm_step_new(const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s,
                                   gckpt_target target, const gckpt_vlm_images *im, gckpt_vlm_step_info *info,
                                   gckpt_err *err)
{
    memset(info, 0, sizeof *info);
    /* what this step does not simulate, refused by name */
    bool sliding = false;
    for (uint64_t l = 0; l < v->text.layers; l++) sliding |= gckpt_layer_sliding(&v->text, l);
    const gckpt_vlm_type *kind = gckpt_vlm_type_of(v->model_type);
    const char *why = !kind || !kind->walked              ? "its step is not simulated (gckpt_vlm_types' walked rows only)"
                      : gckpt_peft_on(&s->peft) && !kind->lora
                          ? "LoRA on it is not measured (llava's and gemma3's are: FINDINGS R-VLM-43, R-VLM-93)"
                      : gckpt_peft_quantized(&s->peft) &&
                              (s->peft.quant != GCKPT_QUANT_NF4 || s->precision != GCKPT_AMP_BF16)
                          ? "QLoRA on a VLM is measured with nf4 under amp-bf16 only (FINDINGS R-VLM-92): plan --quant "
                            "nf4 --precision amp-bf16"
                      : gckpt_peft_on(&s->peft) && s->peft.modules_to_save ? "modules_to_save on a VLM is not planned"
                      : gckpt_peft_on(&s->peft) && im->tower_trained ? "LoRA trains the adapters only: the vision tower "
                                                                       "is frozen (get_peft_model)"
                      : gckpt_layout_multi(&s->layout)   ? "a VLM is planned on one GPU only"
                      : s->loss != GCKPT_LOSS_HF         ? "a fused loss on a VLM is not planned"
                      : (sliding && !kind->image_masks) || v->text.experts ? "a text model with sliding-window or expert layers is not planned "
                                                           "in a VLM step"
                      : kind->image_masks && s->attention != GCKPT_SDPA
                          ? "its token_type_ids masks are measured under sdpa only: plan --attention sdpa"
                      : s->reentrant                      ? "reentrant checkpointing on a VLM is not planned"
                      /* attn_implementation reaches every sub-model: the tower would run eager too */
                      : s->attention != GCKPT_SDPA        ? "attention other than sdpa on a VLM is not planned (the "
                                                            "vision tower runs it too; its recipe is SDPA's)"
                                                          : NULL;
    if (why) {
        gckpt_seterr(err, "%s: %s", v->model_type, why);
        return NULL;
    }
    gckpt_vlm_step *p = calloc(1, sizeof *p);
    if (!p) {
        fail_oom(err);
        return NULL;
    }
    bool ok = false;
    uint64_t towers[2];
    gckpt_vlm_towers(v, towers);
    gckpt_vision_tower_model(v, &p->tower);
    /* a tower with no checkpointable layer (mllama's plain modules) is walked whole */
    uint64_t vwalk = towers[0] ? towers[0] : p->tower.layers;
    info->vision_layers = vwalk;
    info->text_layers = towers[1];
    info->vision_live = towers[0] ? gckpt_vision_feature_depth(v) : vwalk;
    info->image_tokens = im->images * im->tokens;
    info->nvision_ckpt = tower_modes(s, towers, 0, p->vmodes, info->vision_ckpt);
    info->ntext_ckpt = tower_modes(s, towers, 1, p->tmodes, info->text_ckpt);
    p->image_rows = info->image_tokens;
    p->vision_ids = VISION_IDS;

    /* the tower: live layers in the parameter table (the later ones and the tail get no
     * gradient, R-VLM-9: their weights are the full tower's less the live ones') */
    bool peft = gckpt_peft_on(&s->peft); /* adapters on the text model: the projector frozen too (R-VLM-42) */
    gckpt_tower_grad g = im->tower_trained ? GCKPT_TOWER_TRAINED
                         : s->every_n      ? (peft ? GCKPT_TOWER_ALL_FROZEN_HOOKED : GCKPT_TOWER_FROZEN_HOOKED)
                         : peft            ? GCKPT_TOWER_ALL_FROZEN
                                           : GCKPT_TOWER_FROZEN;
    p->tower_live = p->tower;
    p->tower_live.layers = info->vision_live;
    gckpt_setting *vs = &p->vset;
    *vs = *s;
    vs->micro_batch = s->micro_batch * im->images * im->tiles;
    /* Qwen2.5-VL: an image's patches, merge x merge per token */
    vs->seq = v->vision.merge ? im->tokens * v->vision.merge * v->vision.merge : gckpt_vision_positions(v);
    vs->attention = GCKPT_SDPA;
    /* QLoRA: the tower's and the projector's linears 4-bit too (R-VLM-41) */
    if (!gckpt_vision_step_recipe_build_quant(v, &p->tower_live, s->precision, target, g, &s->peft,
                                              im->pixel_dtype ? im->pixel_dtype : GCKPT_DT_F32, &p->vr, err) ||
        !gckpt_vision_recipe_build_quant(v, &p->tower, s->precision, target, g, &s->peft, &p->vfull, err) ||
        !scale_attention(v, im, &p->vr) || !scale_attention(v, im, &p->vfull) || !graphless_tower(p, towers[0]) ||
        !gckpt_ctx_init(&p->vc, &p->tower_live, d, &p->vr, vs, err) ||
        !gckpt_ctx_init(&p->vfc, &p->tower, d, &p->vfull, vs, err))
        goto out;
    /* the text model at the whole sequence; without checkpointing (which forces use_cache off)
     * a family that passes no use_cache fills text_config's DynamicCache */
    if (kind->cross_attention)
        gckpt_mllama_text_model(v, im->images, &p->text);
    else
        p->text = v->text;
    p->text.kv_cache = kind->text_cache_in_training && v->text.use_cache && !s->every_n;
    p->text.image_masks = kind->image_masks;
    gckpt_recipe_build_loss(&p->text, s->precision, s->attention, target, &s->peft, s->seq, s->loss, s->liger_off,
                            &p->tr);
    if (!gckpt_ctx_init(&p->tc, &p->text, d, &p->tr, s, err)) goto out;

    info->text_layer_saved = gckpt_layer_saved_bytes(&p->tc);
    info->vision_layer_saved = gckpt_layer_saved_bytes(&p->vc);
    gckpt_step tst = gckpt_step_of(s, towers[1]), vst = gckpt_step_of(vs, vwalk);
    tst.model = &p->text;
    tst.modes = p->tmodes;
    if (p->text.cross_layers) { /* mllama's cross-attention layers: their own block type */
        for (uint64_t l = 0; l < towers[1]; l++)
            p->tblocks[l] = (uint8_t)gckpt_layer_block(&p->text, s->attention, s->seq, l);
        tst.blocks = p->tblocks;
    }
    if (p->tower.gated_from) { /* its gated global layers after the local ones */
        for (uint64_t l = 0; l < vwalk; l++)
            p->vblocks[l] = (uint8_t)gckpt_layer_block(&p->tower, GCKPT_SDPA, vs->seq, l);
        vst.blocks = p->vblocks;
    }
    tst.ckpt_on = s->every_n != 0; /* text layer 0 may be plain (R-VLM-43) */
    /* the attention types of the checkpointed text layers (R-VLM-1's indices, not every_n's
     * from text layer 0): which layer type's masks and rotary pair their frames hold */
    for (size_t i = 0; i < info->ntext_ckpt; i++)
        tst.ckpt_types |= (uint8_t)(1u << ((gckpt_layer_sliding(&p->text, info->text_ckpt[i]) ? GCKPT_LT_SLIDING
                                                                                                : GCKPT_LT_FULL) -
                                           1));
    vst.modes = p->vmodes;
    vst.live_layers = info->vision_live;
    builder b = {.tc = &p->tc, .vc = &p->vc, .tst = &tst, .vst = &vst, .ok = true};
    b.out = &p->sched;
    b.ts = gckpt_sim_new();
    b.vs = gckpt_sim_new();
    uint8_t pixel_dt = im->pixel_dtype ? im->pixel_dtype : GCKPT_DT_F32;
    bridge_sizes z = {.kind = kind, .bs = s->micro_batch * s->seq, .img = s->micro_batch * info->image_tokens,
                      .width = v->text.hidden, .feat_dt = p->vr.t[p->vr.grad_seed].dtype,
                      .text_dt = p->tr.t[p->tr.embed_out].dtype,
                      .packed = kind->packed_tiles,
                      .pixels = vs->micro_batch * v->vision.channels * v->vision.image_size * v->vision.image_size,
                      .pixel_dt = pixel_dt,
                      /* the patch conv has a node (its weight trains) and no cast between */
                      .conv_keeps_pixels = im->tower_trained && pixel_dt == p->vr.param_dtype &&
                                           s->precision != GCKPT_AMP_BF16 && s->precision != GCKPT_AMP_FP16,
                      .grad = g != GCKPT_TOWER_ALL_FROZEN,
                      /* while text layer 0 keeps the new embeddings: its checkpoint on the device,
                       * or, plain, its ops (offloaded or unsaved they go, and the held leaf is the
                       * only copy, as the text step has it) */
                      .leaf_held = peft && s->every_n && p->tr.embed_leaf >= 0 &&
                                   (p->tmodes[0] == GCKPT_LAYER_CKPT ||
                                    (p->tmodes[0] == GCKPT_LAYER_PLAIN && layer_saves_input(&p->tr)))};
    const gckpt_param *bp = gckpt_params_of(&p->vc.params, p->vr.bridge_param);
    if (bp && bp->trainable) {
        z.bridge_param = (int16_t)p->vr.bridge_param;
        z.bridge_grad_dt = bp->grad.dtype;
        z.bridge_grad = bp->grad.numel;
    }
    if (kind->cross_attention)
        z.batch_masks = s->micro_batch * im->images * v->vision.max_tiles * (s->seq + 1);
    if (v->vision.ndeepstack && !deepstack_sizes(v, d, p, vs, target, g, &z, err)) goto free_sims;
    bool built = b.ts && b.vs && collect(&tst, &b.tl) && collect(&vst, &b.vl) &&
                 (kind->cross_attention ? build_cross(&b, &z) : build(&b, &z));
    if (built) {
        int64_t vstart[GCKPT_NCOMP], full[GCKPT_NCOMP], live[GCKPT_NCOMP];
        gckpt_step_start(&p->tc, s->every_n, p->start);
        gckpt_step_start(&p->vc, s->every_n, vstart);
        gckpt_persistent(&p->vfc, full);
        gckpt_persistent(&p->vc, live);
        for (int k = 0; k < GCKPT_NCOMP; k++) p->start[k] += vstart[k];
        p->dead_weights = full[GCKPT_C_WEIGHTS] - live[GCKPT_C_WEIGHTS];
        p->start[GCKPT_C_WEIGHTS] += p->dead_weights;
        /* QLoRA: the later layers' 4-bit weights and their statistics too */
        p->start[GCKPT_C_QUANT_WEIGHTS] += full[GCKPT_C_QUANT_WEIGHTS] - live[GCKPT_C_QUANT_WEIGHTS];
        p->start[GCKPT_C_QUANT_STATS] += full[GCKPT_C_QUANT_STATS] - live[GCKPT_C_QUANT_STATS];
        /* the buffers, with the weights (the text model's and the tower's; the rotary tables in
         * the weights' dtype, embed_scale in the load dtype: QLoRA's from_pretrained loads bf16),
         * and the optimizer's step counters of every tensor it steps, with its states (the live
         * layers' and the text model's: the rest get no gradient), R-VLM-90 */
        uint64_t round = d->alloc_round_bytes;
        gckpt_dtype fdt = (gckpt_dtype)p->tr.param_dtype;
        gckpt_dtype sdt = gckpt_peft_quantized(&s->peft) ? GCKPT_DT_BF16 : fdt;
        p->kept_buffers = (int64_t)(gckpt_model_buffer_bytes(&p->text, fdt, sdt, round) +
                                    gckpt_vision_buffer_bytes(v, fdt, round));
        p->kept_steps = (int64_t)(gckpt_step_counter_bytes(&p->tc.params, s->optimizer) +
                                  gckpt_step_counter_bytes(&p->vc.params, s->optimizer));
        p->start[GCKPT_C_WEIGHTS] += p->kept_buffers;
        p->start[GCKPT_C_OPTIMIZER] += p->kept_steps;
        p->seg_kind = b.seg_kind;
        b.seg_kind = NULL;
        ok = true;
    } else {
        fail_oom(err);
    }
free_sims:
    gckpt_sim_free(b.ts);
    gckpt_sim_free(b.vs);
    free(b.tl.seg);
    free(b.tl.micro);
    free(b.vl.seg);
    free(b.vl.micro);
    free(b.seg_kind);
out:
    if (!ok) {
        gckpt_vlm_step_free(p);
        return NULL;
    }
    return p;
}

bool gckpt_vlm_walk(const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s, gckpt_target target,
                    const gckpt_vlm_images *im, gckpt_result *res, gckpt_vlm_step_info *info, gckpt_err *err)
{
    return gckpt_vlm_walk_events(v, d, s, target, im, res, info, NULL, NULL, err);
}

bool gckpt_vlm_walk_events(const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s, gckpt_target target,
                           const gckpt_vlm_images *im, gckpt_result *res, gckpt_vlm_step_info *info,
                           gckpt_walk_event_fn on_event, void *user, gckpt_err *err)
{
    memset(res, 0, sizeof *res);
    gckpt_vlm_step *p = gckpt_vlm_step_new(v, d, s, target, im, info, err);
    if (!p) return false;
    const gckpt_schedule *sc = &p->sched;
    gckpt_walk_state w;
    gckpt_walk_begin(&w, p->start, true);
    size_t peak_seg = 0; /* the segment the peak falls in: the text's or the tower's */
    for (size_t i = 0; i < sc->nseg; i++) {
        const gckpt_sched_seg *sg = &sc->seg[i];
        int64_t before = w.peak;
        gckpt_walk_segment(&w, &sg->seg, sg->repeat, sg->end > sg->begin ? sc->ev + sg->begin : NULL,
                           sg->end - sg->begin, on_event, user);
        if (w.peak > before) peak_seg = i;
    }
    gckpt_result_of_walk(&w, 0, res);
    res->peak_layer = -1;
    res->peak_tensor = -1; /* a tensor of one of two recipes: not named */
    res->peak_grad = false;
    if (w.has_peak) {
        info->peak_in_vision = res->peak_vision = p->seg_kind[peak_seg] == GCKPT_VSEG_VISION;
        res->peak_layer = gckpt_seg_place(&w.peak_seg, res->peak_vision ? info->vision_layers : info->text_layers);
    }
    /* the device peak, tokens/s and utilisation as a text step's (MFU counts the text
     * model's FLOPs per token, PaLM's; HFU every op's, the tower's too); the RNG states of
     * the checkpointed layers live together at the first recompute: both towers' but the
     * forward-only ones', whose graph is gone (FINDINGS R-VLM-11) */
    gckpt_result_finish(&p->tc, s->every_n, s->grad_accum, res);
    uint64_t live_ckpt = info->ntext_ckpt;
    for (size_t i = 0; i < info->nvision_ckpt; i++)
        live_ckpt += info->vision_ckpt[i] < info->vision_live && p->vmodes[info->vision_ckpt[i]] != GCKPT_LAYER_PLAIN;
    res->host_rng_bytes = gckpt_rng_states_bytes_n(&p->tc, live_ckpt);
    gckpt_vlm_step_free(p);
    return true;
}
