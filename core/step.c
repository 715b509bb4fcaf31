/* The segments of a step in order (include/gckpt/core/step.h). */
#include "gckpt/core/step.h"

#include <stdio.h>

#include "gckpt/core/parallel.h"
#include "gckpt/core/recipe.h"

const char *const gckpt_phase_names[GCKPT_NPHASE] = {"forward", "loss", "backward", "optimizer"};

const gckpt_micro_row gckpt_micro_order[GCKPT_MICRO_ROWS] = {
    {GCKPT_PART_EMBEDDING, GCKPT_STAGE_FORWARD, GCKPT_ORDER_ONCE},
    {GCKPT_PART_LAYER, GCKPT_STAGE_FORWARD, GCKPT_ORDER_LAYERS_UP},
    {GCKPT_PART_HEAD, GCKPT_STAGE_FORWARD, GCKPT_ORDER_ONCE},
    {GCKPT_PART_LAYER, GCKPT_STAGE_FORWARD_END, GCKPT_ORDER_LAYERS_UP},
    {GCKPT_PART_HEAD, GCKPT_STAGE_FORWARD_END, GCKPT_ORDER_ONCE},
    {GCKPT_PART_HEAD, GCKPT_STAGE_BACKWARD, GCKPT_ORDER_ONCE},
    {GCKPT_PART_LAYER, GCKPT_STAGE_BACKWARD, GCKPT_ORDER_LAYERS_DOWN},
    {GCKPT_PART_EMBEDDING, GCKPT_STAGE_BACKWARD, GCKPT_ORDER_ONCE},
    {GCKPT_PART_LAYER, GCKPT_STAGE_GRAPH_FREED, GCKPT_ORDER_LAYERS_DOWN},
    {GCKPT_PART_MICRO_END, GCKPT_STAGE_ONCE, GCKPT_ORDER_ONCE},
};

size_t gckpt_checkpointed_layers(uint32_t every_n, uint64_t layers, uint64_t *out, size_t max)
{
    size_t n = 0;
    gckpt_mode_cursor c = gckpt_mode_cursor_at(every_n, false, 0);
    for (uint64_t i = 0; every_n && i < layers; i++, gckpt_mode_cursor_up(&c)) {
        if (gckpt_mode_cursor_mode(&c) == GCKPT_LAYER_PLAIN) continue;
        if (n < max) out[n] = i;
        n++;
    }
    return n;
}

uint64_t gckpt_checkpointed_count(uint32_t every_n, uint64_t layers)
{
    return gckpt_checkpointed_layers(every_n, layers, NULL, 0);
}

void gckpt_seg_name(const gckpt_seg *s, char *buf, size_t n)
{
    static const char *const parts[GCKPT_NPART] = {"embedding", "layer", "head", "micro-step end", "optimizer"};
    if (s->part == GCKPT_PART_LAYER) snprintf(buf, n, "layer %d", s->layer);
    else snprintf(buf, n, "%s", s->part < GCKPT_NPART ? parts[s->part] : "?");
}

int gckpt_micro_runs(uint64_t grad_accum, bool apart, gckpt_micro_run out[GCKPT_MAX_MICRO_RUNS])
{
    int n = 0;
    out[n++] = (gckpt_micro_run){GCKPT_MICRO_FIRST, grad_accum <= 1, 1};
    if (grad_accum <= 1) return n;
    if (!apart) {
        out[n++] = (gckpt_micro_run){GCKPT_MICRO_LATER, true, grad_accum - 1};
        return n;
    }
    if (grad_accum > 2) out[n++] = (gckpt_micro_run){GCKPT_MICRO_LATER, false, grad_accum - 2};
    out[n++] = (gckpt_micro_run){GCKPT_MICRO_LATER, true, 1};
    return n;
}

gckpt_step gckpt_step_of(const gckpt_setting *s, uint64_t layers)
{
    gckpt_step st = {.layers = layers, .every_n = s->every_n, .offload = s->offload, .modes = NULL, .optimizer = true};
    st.micro_steps = gckpt_micro_runs(s->grad_accum, gckpt_par_mode_of(s->layout.mode)->sync_apart, st.micro);
    return st;
}

gckpt_layer_mode gckpt_step_mode(const gckpt_step *st, uint64_t layer)
{
    return st->modes ? (gckpt_layer_mode)st->modes[layer] : gckpt_layer_mode_of(st->every_n, st->offload, layer);
}

uint8_t gckpt_step_block(const gckpt_step *st, uint64_t layer)
{
    if (st->modes) return st->blocks ? st->blocks[layer] : GCKPT_BLOCK_DECODER;
    return st->model ? (uint8_t)gckpt_layer_block(st->model, (gckpt_attention)st->attention, st->seq, layer)
                     : GCKPT_BLOCK_DECODER;
}

void gckpt_step_checkpointing(const gckpt_step *st, bool *any, bool *offload)
{
    gckpt_layer_mode m0 = st->layers ? gckpt_step_mode(st, 0) : GCKPT_LAYER_PLAIN;
    *any = m0 != GCKPT_LAYER_PLAIN || st->ckpt_on;
    *offload = m0 == GCKPT_LAYER_CKPT_OFFLOAD || (st->ckpt_on && st->offload);
}

void gckpt_step_begin(gckpt_step_iter *it, const gckpt_step *st)
{
    it->st = st;
    it->micro = 0;
    it->row = 0;
    it->done = 0;
}

/* The layer a per-layer row is at, and its mode. */
static void at_layer(gckpt_step_iter *it, const gckpt_micro_row *r, gckpt_seg *out)
{
    const gckpt_step *st = it->st;
    bool up = r->order == GCKPT_ORDER_LAYERS_UP;
    uint64_t layer = up ? it->done : st->layers - 1 - it->done;
    if (st->modes) {
        out->mode = st->modes[layer];
    } else {
        if (it->done == 0) it->cur = gckpt_mode_cursor_at(st->every_n, st->offload, layer);
        out->mode = (uint8_t)gckpt_mode_cursor_mode(&it->cur);
        if (up) gckpt_mode_cursor_up(&it->cur);
        else gckpt_mode_cursor_down(&it->cur);
    }
    out->layer = (int32_t)layer;
    out->block = gckpt_step_block(st, layer);
}

bool gckpt_step_next(gckpt_step_iter *it, gckpt_seg *out)
{
    const gckpt_step *st = it->st;
    while (it->micro < st->micro_steps) {
        if (it->row == GCKPT_MICRO_ROWS) {
            it->row = 0;
            it->micro++;
            continue;
        }
        const gckpt_micro_row *r = &gckpt_micro_order[it->row];
        bool per_layer = r->order != GCKPT_ORDER_ONCE;
        if (per_layer && it->done == st->layers) {
            it->row++;
            it->done = 0;
            continue;
        }
        const gckpt_micro_run *mr = &st->micro[it->micro];
        *out = (gckpt_seg){.row = (uint8_t)it->row, .part = r->part, .stage = r->stage, .mode = GCKPT_LAYER_PLAIN,
                           .block = GCKPT_BLOCK_DECODER, .micro = mr->micro, .sync = mr->sync, .layer = -1};
        if (per_layer) {
            at_layer(it, r, out);
            it->done++;
        } else {
            it->row++;
        }
        return true;
    }
    if (it->micro == st->micro_steps && st->optimizer) {
        it->micro++;
        *out = (gckpt_seg){.row = GCKPT_MICRO_ROWS, .part = GCKPT_PART_OPTIMIZER, .stage = GCKPT_STAGE_ONCE,
                           .mode = GCKPT_LAYER_PLAIN, .block = GCKPT_BLOCK_DECODER, .micro = GCKPT_MICRO_NONE, .layer = -1};
        return true;
    }
    return false;
}
