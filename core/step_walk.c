/* The step walked once (gckpt/core/step_walk.h): memory, peak, time and collectives of a
 * schedule's events, for every reader of a walk. */
#include "gckpt/core/step_walk.h"

#include <string.h>

void gckpt_step_start(const gckpt_ctx *c, uint32_t every_n, int64_t start[GCKPT_NCOMP])
{
    gckpt_persistent(c, start);
    if (!every_n) start[GCKPT_C_PARALLEL] += (int64_t)c->par.ddp_used_map;
}

void gckpt_walk_begin(gckpt_walk_state *w, const int64_t start[GCKPT_NCOMP], bool floor)
{
    memset(w, 0, sizeof *w);
    if (start)
        for (int k = 0; k < GCKPT_NCOMP; k++) {
            w->m.cur[k] = start[k];
            w->m.total += start[k];
        }
    memcpy(w->at_peak, w->m.cur, sizeof w->m.cur);
    w->peak = floor ? w->m.total : INT64_MIN;
    w->peak_tensor = -1;
    w->peak_seg = (gckpt_seg){.micro = GCKPT_MICRO_FIRST, .layer = -1};
    w->repeat = 1;
}

/* Running tallies in locals (events are doubles too: through w they would be reloaded
 * after every event), written back to w before a callback and at the end. */
typedef struct {
    double seconds, fwd_s, bwd_s, recompute_s, copy_s, opt_s, flops, hw_flops;
} tallies;

static inline void tallies_load(tallies *t, const gckpt_walk_state *w)
{
    *t = (tallies){w->seconds, w->fwd_s, w->bwd_s, w->recompute_s, w->copy_s, w->opt_s, w->flops, w->hw_flops};
}

static inline void tallies_store(const tallies *t, gckpt_walk_state *w)
{
    w->seconds = t->seconds;
    w->fwd_s = t->fwd_s;
    w->bwd_s = t->bwd_s;
    w->recompute_s = t->recompute_s;
    w->copy_s = t->copy_s;
    w->opt_s = t->opt_s;
    w->flops = t->flops;
    w->hw_flops = t->hw_flops;
}

/* A collective's bytes into the step's volumes (gckpt_parallel_comm times them). */
static void tally_coll(gckpt_walk_state *w, const gckpt_event *e, gckpt_phase phase, double mult)
{
    double b = (double)e->bytes * mult;
    w->coll_seen = true;
    if (e->arg.coll.kind != GCKPT_COLL_ALL_GATHER) {
        w->coll_reduce += b;
        if (e->arg.coll.kind == GCKPT_COLL_ALL_REDUCE) w->coll_all_reduce += b;
    } else {
        if (e->arg.coll.unit < GCKPT_NSEC) w->coll_gather_part[e->arg.coll.unit] += (double)e->numel * mult;
        if (phase == GCKPT_PH_BACKWARD) w->coll_gather_bwd += b;
        else if (phase == GCKPT_PH_OPTIMIZER) w->coll_gather_opt += b;
        else w->coll_gather_fwd += b;
    }
}

/* The loop, specialised: with and without a callback, and for a segment run once (the
 * segment summaries of a sweep's profiles run it that way, and often; x 1.0 is exact, so
 * skipping it changes no number). */
static inline __attribute__((always_inline)) void walk_events(gckpt_walk_state *w, const gckpt_seg *seg, double mult,
                                                              const gckpt_event *ev, size_t n,
                                                              gckpt_walk_event_fn on_event, void *user,
                                                              const bool call, const bool once)
{
    const gckpt_phase phase = gckpt_seg_phase(seg);
    tallies t;
    tallies_load(&t, w);
    for (size_t i = 0; i < n; i++) {
        const gckpt_event *e = &ev[i];
        int up = gckpt_mem_apply(&w->m, e);
        if ((up & GCKPT_MEM_DEVICE_UP) && w->m.total > w->peak) {
            w->peak = w->m.total;
            memcpy(w->at_peak, w->m.cur, sizeof w->m.cur);
            w->has_peak = true;
            w->peak_tensor = e->tensor;
            w->peak_grad = e->grad;
            w->peak_seg = *seg;
        }
        if ((up & GCKPT_MEM_HOST_UP) && w->m.host > w->host_peak) w->host_peak = w->m.host;
        /* seconds and FLOPs (a recompute's FLOPs are not the model's) */
        double s = once ? e->seconds : e->seconds * mult;
        t.seconds += s;
        switch (e->kind) {
        case GCKPT_EV_FWD: t.fwd_s += s; break;
        case GCKPT_EV_BWD: t.bwd_s += s; break;
        case GCKPT_EV_RECOMPUTE: t.recompute_s += s; break;
        case GCKPT_EV_D2H: case GCKPT_EV_H2D: t.copy_s += s; break;
        case GCKPT_EV_OPT_STEP: t.opt_s += s; break;
        case GCKPT_EV_COLLECTIVE: tally_coll(w, e, phase, mult); break;
        default: break;
        }
        double fl = once ? e->flops : e->flops * mult;
        if (e->kind != GCKPT_EV_RECOMPUTE) t.flops += fl;
        t.hw_flops += fl;
        if (call) {
            tallies_store(&t, w);
            on_event(user, w, e);
        }
    }
    tallies_store(&t, w);
}

void gckpt_walk_segment(gckpt_walk_state *w, const gckpt_seg *seg, uint64_t repeat, const gckpt_event *ev, size_t n,
                        gckpt_walk_event_fn on_event, void *user)
{
    if (!w->after_forward_seen && gckpt_seg_starts_backward(seg)) {
        w->after_forward = w->m.total;
        w->after_forward_seen = true;
    }
    w->seg = seg;
    w->repeat = repeat;
    double mult = (double)repeat;
    if (on_event) walk_events(w, seg, mult, ev, n, on_event, user, true, false);
    else if (repeat == 1) walk_events(w, seg, mult, ev, n, NULL, NULL, false, true);
    else walk_events(w, seg, mult, ev, n, NULL, NULL, false, false);
}

void gckpt_walk_schedule(gckpt_walk_state *w, const gckpt_schedule *sc, gckpt_walk_event_fn on_event, void *user)
{
    for (size_t si = 0; si < sc->nseg; si++) {
        const gckpt_sched_seg *g = &sc->seg[si];
        size_t n = g->end - g->begin;
        gckpt_walk_segment(w, &g->seg, g->repeat, n ? sc->ev + g->begin : NULL, n, on_event, user);
    }
}
