/* A CP rank's step peak (gckpt/core/cp.h, FINDINGS R-CP-11, R-CP-10): FSDP2's walked step at S / C
 * plus CP's buffers, or a ring attention call, whichever is higher. At each SDPA op of the walk
 * (forward, recompute, backward) the memory before the plain kernel's own outputs, plus the ring's
 * replayed peak above its inputs (gckpt_cp_ring_peak), plus CP's buffers live then (the o_proj
 * copies of the plain layers before it). */
#include "gckpt/core/cp.h"

#include <string.h>

#include "gckpt/core/eval.h"
#include "gckpt/core/prim.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/step.h"
#include "gckpt/core/step_walk.h"

typedef struct {
    const gckpt_ctx *c;
    uint64_t seq, fwd, bwd;
    uint32_t cp, rank;
    unsigned hs, cs;
    int64_t base, base_comp[GCKPT_NCOMP]; /* before the current op's allocations */
    int64_t best, best_comp[GCKPT_NCOMP], best_add;
    gckpt_seg best_seg;
    bool found;
} cp_walk;

static uint64_t plain_before(const gckpt_setting *s, int32_t k)
{
    uint64_t n = 0;
    for (int32_t j = 0; j < k; j++) n += gckpt_layer_mode_of(s->every_n, false, (uint64_t)j) == GCKPT_LAYER_PLAIN;
    return n;
}

uint64_t gckpt_cp_extra_before(const gckpt_model *m, const gckpt_setting *s, uint64_t seq, uint32_t cp, uint32_t r,
                               unsigned hidden_size, unsigned compute_size, int32_t layer)
{
    return gckpt_cp_extra_at(m, s, seq, cp, r, hidden_size, compute_size, plain_before(s, layer));
}

static void on_event(void *user, const gckpt_walk_state *w, const gckpt_event *e)
{
    cp_walk *cw = user;
    const gckpt_ctx *c = cw->c;
    bool sdpa = (e->kind == GCKPT_EV_FWD || e->kind == GCKPT_EV_RECOMPUTE || e->kind == GCKPT_EV_BWD) && e->op >= 0 &&
                c->recipe->op[e->op].prim == GCKPT_P_SDPA;
    if (sdpa && w->seg && w->seg->part == GCKPT_PART_LAYER) {
        const uint64_t ring = e->kind == GCKPT_EV_BWD ? cw->bwd : cw->fwd;
        const uint64_t x = gckpt_cp_extra_before(c->model, &c->set, cw->seq, cw->cp, cw->rank, cw->hs, cw->cs,
                                                 w->seg->layer);
        const int64_t cand = cw->base + (int64_t)(ring + x);
        if (cand > cw->best) {
            cw->best = cand;
            memcpy(cw->best_comp, cw->base_comp, sizeof cw->best_comp);
            cw->best_add = (int64_t)(ring + x);
            cw->best_seg = *w->seg;
            cw->found = true;
        }
    }
    if (e->kind != GCKPT_EV_ALLOC && e->kind != GCKPT_EV_ALLOC_SCRATCH) {
        cw->base = w->m.total;
        memcpy(cw->base_comp, w->m.cur, sizeof cw->base_comp);
    }
}

bool gckpt_cp_peak(const gckpt_ctx *c, uint64_t seq, uint32_t cp, uint32_t rank, gckpt_cp_comm comm, unsigned hidden_size,
                   unsigned compute_size, gckpt_result *r)
{
    const gckpt_setting *s = &c->set;
    const bool balanced = gckpt_cp_balanced(seq, cp);
    const uint64_t x = gckpt_cp_step_extra(c->model, s, seq, cp, rank, hidden_size, compute_size);
    cp_walk cw = {.c = c, .seq = seq, .cp = cp, .rank = rank, .hs = hidden_size, .cs = compute_size,
                  .fwd = gckpt_cp_ring_peak(c->model, s, cp, rank, balanced, comm, false),
                  .bwd = gckpt_cp_ring_peak(c->model, s, cp, rank, balanced, comm, true),
                  .best = (int64_t)(r->peak_bytes + x)};
    gckpt_schedule sc;
    if (!gckpt_schedule_build(c, &sc)) {
        gckpt_schedule_free(&sc);
        return false;
    }
    int64_t start[GCKPT_NCOMP];
    gckpt_step_start(c, s->every_n, start);
    gckpt_walk_state w;
    gckpt_walk_begin(&w, start, true);
    memcpy(cw.base_comp, start, sizeof cw.base_comp);
    cw.base = 0;
    for (int k = 0; k < GCKPT_NCOMP; k++) cw.base += start[k];
    gckpt_walk_schedule(&w, &sc, on_event, &cw);
    gckpt_schedule_free(&sc);
    if (!cw.found) { /* the walked peak plus CP's buffers */
        r->peak_bytes += x;
        r->breakdown[GCKPT_C_ACTIVATIONS] += (int64_t)x;
        return true;
    }
    /* a ring call: the memory then, its transients and CP's buffers as activations */
    r->peak_bytes = (uint64_t)cw.best;
    memcpy(r->breakdown, cw.best_comp, sizeof r->breakdown);
    r->breakdown[GCKPT_C_ACTIVATIONS] += cw.best_add;
    r->peak_phase = (uint8_t)gckpt_seg_phase(&cw.best_seg);
    r->peak_micro = cw.best_seg.micro;
    r->peak_layer = cw.best_seg.layer;
    r->peak_tensor = -1;
    r->peak_grad = false;
    return true;
}
