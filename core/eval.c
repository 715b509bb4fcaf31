/* Evaluating a setting: the event walk over a schedule, segment summaries, and the fast
 * evaluator that composes them in the step's order (gckpt_micro_order). */
#include "gckpt/core/eval.h"

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/parallel.h"
#include "gckpt/core/step_walk.h"
#include "sim.h"
#include "sim_parallel.h"

static double peak_rate(const gckpt_ctx *c)
{
    const gckpt_device *d = c->dev;
    switch (c->set.precision) {
    case GCKPT_FP32: return d->tflops_fp32 * 1e12;
    case GCKPT_AMP_FP16: return d->tflops_fp16 * 1e12;
    default: return d->tflops_bf16 * 1e12;
    }
}

uint64_t gckpt_rng_state_bytes(const gckpt_ctx *c, uint32_t every_n)
{
    uint64_t n = 0;
    for (uint64_t i = 0; every_n && i < c->model->layers; i++)
        n += gckpt_layer_mode_of(every_n, false, i) != GCKPT_LAYER_PLAIN;
    return gckpt_rng_states_bytes_n(c, n);
}

uint64_t gckpt_rng_states_bytes_n(const gckpt_ctx *c, uint64_t n)
{
    if (!n) return 0;
    uint64_t per = GCKPT_CPU_RNG_STATE_BYTES;
    if (c->recipe->target == GCKPT_TARGET_CUDA) per += GCKPT_CUDA_RNG_STATE_BYTES * (1u + c->recipe->mask_positional);
    return (n + 1) * per;
}

double gckpt_palm_flops_per_token(const gckpt_model *m, uint64_t seq)
{
    return gckpt_palm_flops_per_token_n(m, gckpt_param_count(m), seq);
}

double gckpt_palm_flops_per_token_n(const gckpt_model *m, uint64_t params, uint64_t seq)
{
    double p = (double)params;
    double embed = (double)m->vocab * (double)m->hidden;
    if (m->family == GCKPT_FAMILY_GPT2) embed += (double)m->max_positions * (double)m->hidden;
    if (m->experts > m->top_k) /* the experts a token is not routed to: SwiGLU gate, up, down (MoE layers only) */
        p -= (double)(m->layers - m->dense_layers) * (double)(m->experts - m->top_k) * 3.0 * (double)m->hidden *
             (double)m->expert_inter;
    if (m->mla) /* QK^T over the q/k head dim, PV over v's */
        return 6.0 * (p - embed) + 6.0 * (double)m->layers * (double)m->heads *
                                       (double)(gckpt_qk_head_dim(m) + gckpt_v_head_dim(m)) * (double)seq;
    return 6.0 * (p - embed) + 12.0 * (double)m->layers * (double)m->heads * (double)m->head_dim * (double)seq;
}

void gckpt_result_finish(const gckpt_ctx *c, uint32_t every_n, uint64_t grad_accum, gckpt_result *res)
{
    res->host_rng_bytes = gckpt_rng_state_bytes(c, every_n);
    uint64_t seg = c->dev->segment_round_bytes;
    res->device_peak_bytes = gckpt_round_up(res->peak_bytes, seg) + c->dev->context_bytes;
    if (gckpt_layout_multi(&c->set.layout)) gckpt_parallel_comm(c, grad_accum, res);
    double tokens = (double)c->tokens * (double)grad_accum;
    res->tokens_per_s = res->step_s > 0 ? tokens / res->step_s : 0;
    double busy = res->step_s * peak_rate(c);
    /* PaLM's attention term counts the token's context: under CP the whole sequence, not the rank's piece */
    uint64_t context = c->set.seq * (c->set.layout.cp > 1 ? c->set.layout.cp : 1);
    res->mfu = busy > 0 ? gckpt_palm_flops_per_token_n(c->model, c->model_params, context) * tokens / busy : 0;
    res->hfu = busy > 0 ? res->hw_flops / busy : 0;
}

/* ---- event walk -------------------------------------------------------------------- */

/* The figures a walked step decides: its breakdown at the peak, the peak's place (its
 * segment placed among `layers` layers), the phases' seconds, FLOPs, collectives, the
 * device and pinned host peaks (the context and a mode's host bytes are the caller's). */
void gckpt_result_of_walk(const gckpt_walk_state *w, uint64_t layers, gckpt_result *res)
{
    memcpy(res->breakdown, w->at_peak, sizeof w->at_peak);
    res->peak_phase = GCKPT_PH_FORWARD;
    res->peak_layer = -1;
    res->peak_tensor = -1;
    if (w->has_peak) {
        res->peak_phase = (uint8_t)gckpt_seg_phase(&w->peak_seg);
        res->peak_micro = w->peak_seg.micro;
        res->peak_layer = gckpt_seg_place(&w->peak_seg, layers);
        res->peak_tensor = w->peak_tensor;
        res->peak_grad = w->peak_grad;
    }
    if (w->after_forward_seen) res->after_forward_bytes = (uint64_t)w->after_forward;
    res->step_s = w->seconds;
    res->model_flops = w->flops;
    res->hw_flops = w->hw_flops;
    res->forward_s = w->fwd_s;
    res->backward_s = w->bwd_s;
    res->recompute_s = w->recompute_s;
    res->copy_s = w->copy_s;
    res->optimizer_s = w->opt_s;
    res->coll_seen = w->coll_seen;
    res->coll_reduce = w->coll_reduce;
    res->coll_all_reduce = w->coll_all_reduce;
    res->coll_gather_fwd = w->coll_gather_fwd;
    res->coll_gather_bwd = w->coll_gather_bwd;
    res->coll_gather_opt = w->coll_gather_opt;
    memcpy(res->coll_gather_part, w->coll_gather_part, sizeof res->coll_gather_part);
    res->peak_bytes = (uint64_t)w->peak;
    res->host_pinned_bytes = (uint64_t)w->host_peak;
}

void gckpt_walk(const gckpt_ctx *c, const gckpt_schedule *sc, gckpt_result *res)
{
    memset(res, 0, sizeof *res);
    int64_t start[GCKPT_NCOMP];
    gckpt_step_start(c, c->set.every_n, start);
    gckpt_walk_state w;
    gckpt_walk_begin(&w, start, true);
    gckpt_walk_schedule(&w, sc, NULL, NULL);
    gckpt_result_of_walk(&w, c->model->layers, res);
    res->host_pinned_bytes += c->par.host_pinned;
    res->host_pageable_bytes = c->par.host_pageable;
    gckpt_result_finish(c, c->set.every_n, c->set.grad_accum, res);
}

/* ---- segment profiles --------------------------------------------------------------- */

/* A segment's events [from, to) of a proxy schedule, walked from nothing, as a summary. */
static void summarize(const gckpt_schedule *ev, const gckpt_seg *g, size_t from, size_t to, gckpt_seg_summary *s)
{
    gckpt_walk_state w;
    gckpt_walk_begin(&w, NULL, false);
    gckpt_walk_segment(&w, g, 1, to > from ? ev->ev + from : NULL, to - from, NULL, NULL);
    memcpy(s->net, w.m.cur, sizeof w.m.cur);
    s->net_total = w.m.total;
    s->peak_rel = w.peak;
    memcpy(s->at_peak, w.at_peak, sizeof w.at_peak);
    s->host_net = w.m.host;
    s->host_peak_rel = w.host_peak;
    s->has_peak = w.has_peak;
    s->peak_tensor = w.peak_tensor;
    s->peak_grad = w.peak_grad;
    s->seconds = w.seconds;
    s->flops = w.flops;
    s->hw_flops = w.hw_flops;
    s->recompute_s = w.recompute_s;
    s->copy_s = w.copy_s;
    s->fwd_s = w.fwd_s;
    s->bwd_s = w.bwd_s;
    s->coll_seen = w.coll_seen;
    s->coll_reduce = w.coll_reduce;
    s->coll_all_reduce = w.coll_all_reduce;
    s->coll_gather_fwd = w.coll_gather_fwd;
    s->coll_gather_bwd = w.coll_gather_bwd;
    s->coll_gather_opt = w.coll_gather_opt;
    memcpy(s->coll_gather_part, w.coll_gather_part, sizeof s->coll_gather_part);
}

struct gckpt_profiler {
    gckpt_sim *sim;
    gckpt_schedule sched;
};

gckpt_profiler *gckpt_profiler_new(void) { return calloc(1, sizeof(gckpt_profiler)); }

void gckpt_profiler_free(gckpt_profiler *pr)
{
    if (!pr) return;
    gckpt_sim_free(pr->sim);
    gckpt_schedule_free(&pr->sched);
    free(pr);
}

/* One micro-step of a proxy step whose layer 0 (of its block type) runs in mode m0,
 * followed (full) by three layers of each block type the recipe traced, one of each mode,
 * summarised segment by segment into first (the once-rows and layer 0) and p->later;
 * types: the attention types checkpointed. */
static bool profile_micro(gckpt_profiler *pr, const gckpt_ctx *c, int micro, int m0, bool full, uint8_t types,
                          gckpt_seg_summary first[GCKPT_NLAYERMODE][2][GCKPT_MICRO_ROWS], gckpt_profile *p)
{
    const gckpt_recipe *r = c->recipe;
    uint8_t modes[1 + GCKPT_NBLOCK * GCKPT_NLAYERMODE], blocks[1 + GCKPT_NBLOCK * GCKPT_NLAYERMODE];
    modes[0] = (uint8_t)m0;
    blocks[0] = p->block0;
    uint64_t n = 1;
    for (int b = 0; b < GCKPT_NBLOCK; b++)
        for (int m = 0; r->block_sec[b] >= 0 && m < GCKPT_NLAYERMODE; m++, n++) {
            modes[n] = (uint8_t)m;
            blocks[n] = (uint8_t)b;
        }
    gckpt_step st = {.layers = full ? n : 1, .modes = modes, .blocks = blocks, .ckpt_types = types,
                     .micro_steps = 1, .optimizer = false};
    gckpt_schedule *ev = &pr->sched;
    ev->n = ev->nseg = 0;
    ev->oom = false;
    if (!pr->sim && !(pr->sim = gckpt_sim_new())) return false;
    if (!gckpt_sim_begin(pr->sim, c, &st, micro == 1, micro == 1 || c->set.grad_accum <= 1, 0)) return false;
    gckpt_step_iter it;
    gckpt_seg g;
    gckpt_step_begin(&it, &st);
    while (gckpt_step_next(&it, &g)) {
        size_t mark = ev->n;
        gckpt_sim_segment(pr->sim, &g, ev);
        summarize(ev, &g, mark, ev->n, g.layer > 0 ? &p->later[micro][g.row][g.block][g.mode] : &first[m0][micro][g.row]);
    }
    return !ev->oom;
}

bool gckpt_profile_build_with(gckpt_profiler *pr, const gckpt_ctx *c, gckpt_profile *p)
{
    /* first_both (the struct's tail) only for two attention types: sweeps build a
     * profile per micro-batch and sequence, and clearing it for nothing costs time */
    memset(p, 0, offsetof(gckpt_profile, first_both));
    /* the later layers' summaries come with the plain first layer; a first layer that is
     * checkpointed needs only itself and the once-rows */
    p->later_micro = c->set.grad_accum > 1;
    const gckpt_model *m = c->model;
    int ntypes = 0;
    for (int b = 0; b < GCKPT_NBLOCK; b++) ntypes += c->recipe->block_sec[b] >= 0;
    p->typed = ntypes > 1;
    p->block0 = (uint8_t)gckpt_layer_block(m, c->set.attention, c->recipe->seq, 0);
    p->two_types = m->sliding_layers && m->sliding_layers < m->layers;
    if (p->two_types) memset(p->first_both, 0, sizeof p->first_both);
    const uint8_t type0 = (uint8_t)(1u << ((gckpt_layer_sliding(m, 0) ? GCKPT_LT_SLIDING : GCKPT_LT_FULL) - 1));
    for (int m0 = 0; m0 < GCKPT_NLAYERMODE; m0++)
        for (int mi = 0; mi < (p->later_micro ? 2 : 1); mi++) {
            uint8_t types = m0 == GCKPT_LAYER_PLAIN ? 0 : type0;
            if (!profile_micro(pr, c, mi, m0, m0 == GCKPT_LAYER_PLAIN, types, p->first, p)) return false;
            if (p->two_types && m0 != GCKPT_LAYER_PLAIN &&
                !profile_micro(pr, c, mi, m0, false, (uint8_t)(types | 3u), p->first_both, p))
                return false;
        }
    pr->sched.n = 0;
    gckpt_sim_optimizer(c, &pr->sched);
    const gckpt_seg opt = {.row = GCKPT_MICRO_ROWS, .part = GCKPT_PART_OPTIMIZER, .stage = GCKPT_STAGE_ONCE,
                           .micro = GCKPT_MICRO_NONE, .layer = -1};
    summarize(&pr->sched, &opt, 0, pr->sched.n, &p->optimizer);
    return !pr->sched.oom;
}

bool gckpt_profile_build(const gckpt_ctx *c, gckpt_profile *p)
{
    gckpt_profiler *pr = gckpt_profiler_new();
    if (!pr) return false;
    bool ok = gckpt_profile_build_with(pr, c, p);
    gckpt_profiler_free(pr);
    return ok;
}

/* ---- composition -------------------------------------------------------------------- */

/* The running state of a composition: the memory walk over the step's segments, or
 * (replay) the component vector up to the segment of the peak. */
typedef struct {
    int64_t total, peak, host, host_peak, after_fwd;
    const gckpt_seg_summary *peak_seg;
    int64_t peak_seq, seq;
    int32_t peak_layer;
    uint8_t peak_micro, peak_phase;
    uint64_t checkpointed_later[GCKPT_NBLOCK]; /* checkpointed layers among 1 .. L-1, per block type */
    uint64_t later_layers[GCKPT_NBLOCK];       /* layers among 1 .. L-1, per block type */
    int64_t *vec;                /* replay: the components at the peak */
} comp_state;

/* always inlined: the two passes are specialised and the state kept in registers */
#define HOT static inline __attribute__((always_inline))

HOT void visit(comp_state *st, const gckpt_seg_summary *s, int32_t place, uint8_t micro, uint8_t phase,
                         const bool replay)
{
    if (replay) {
        const int64_t *d = st->seq < st->peak_seq ? s->net : s->at_peak;
        if (st->seq <= st->peak_seq)
            for (int k = 0; k < GCKPT_NCOMP; k++) st->vec[k] += d[k];
        st->seq++;
        return;
    }
    if (s->has_peak && st->total + s->peak_rel > st->peak) {
        st->peak = st->total + s->peak_rel;
        st->peak_seg = s;
        st->peak_seq = st->seq;
        st->peak_layer = place;
        st->peak_micro = micro;
        st->peak_phase = phase;
    }
    if (st->host + s->host_peak_rel > st->host_peak) st->host_peak = st->host + s->host_peak_rel;
    st->total += s->net_total;
    st->host += s->host_net;
    st->seq++;
}

/* Layer i's block type: the profile's only one, or (typed) gckpt_layer_block's. */
HOT int block_of(const gckpt_ctx *c, const gckpt_profile *p, uint64_t i, const bool typed)
{
    return typed ? (int)gckpt_layer_block(c->model, c->set.attention, c->recipe->seq, i) : p->block0;
}

/* The step's segments in order (gckpt_micro_order per micro-step, then the optimizer),
 * each layer's summary by the layer-mode rule and (typed) its block type. Written once for
 * all passes. */
HOT void compose(const gckpt_ctx *c, const gckpt_profile *p, const gckpt_seg_summary (*firsts)[2][GCKPT_MICRO_ROWS],
                 uint32_t every_n, bool offload, int nmicro, comp_state *st, const bool replay, const bool typed)
{
    const uint64_t L = c->model->layers;
    const int m0 = gckpt_layer_mode_of(every_n, offload, 0);
    const int ck = offload ? GCKPT_LAYER_CKPT_OFFLOAD : GCKPT_LAYER_CKPT; /* a checkpointed layer's mode */
    for (int mi = 0; mi < nmicro; mi++) {
        const gckpt_seg_summary *first = firsts[m0][mi];
        for (int row = 0; row < GCKPT_MICRO_ROWS; row++) {
            if (replay && st->seq > st->peak_seq) return;
            const gckpt_micro_row *r = &gckpt_micro_order[row];
            gckpt_seg sg = {.row = (uint8_t)row, .part = r->part, .stage = r->stage, .micro = (uint8_t)mi, .layer = 0};
            uint8_t phase = (uint8_t)gckpt_seg_phase(&sg), mu = (uint8_t)mi;
            if (gckpt_seg_starts_backward(&sg)) st->after_fwd = st->total;
            if (r->order == GCKPT_ORDER_ONCE) {
                visit(st, &first[row], gckpt_seg_place(&sg, L), mu, phase, replay);
                continue;
            }
            const gckpt_seg_summary(*later)[GCKPT_NLAYERMODE] = p->later[mi][row];
            bool count = mi == 0 && r->stage == GCKPT_STAGE_FORWARD;
            const gckpt_seg_summary *plain = &later[p->block0][GCKPT_LAYER_PLAIN], *ckpt = &later[p->block0][ck];
            if (r->order == GCKPT_ORDER_LAYERS_UP) {
                visit(st, &first[row], 0, mu, phase, replay);
                gckpt_mode_cursor cur = gckpt_mode_cursor_at(every_n, offload, 1);
                uint64_t n = 0, nt[GCKPT_NBLOCK] = {0}, nl[GCKPT_NBLOCK] = {0};
                for (uint64_t i = 1; i < L; i++, gckpt_mode_cursor_up(&cur)) {
                    bool is_ckpt = gckpt_mode_cursor_mode(&cur) != GCKPT_LAYER_PLAIN;
                    if (typed) {
                        int b = block_of(c, p, i, typed);
                        plain = &later[b][GCKPT_LAYER_PLAIN];
                        ckpt = &later[b][ck];
                        nt[b] += is_ckpt;
                        nl[b]++;
                    }
                    n += is_ckpt;
                    visit(st, is_ckpt ? ckpt : plain, (int32_t)i, mu, phase, replay);
                }
                if (count && typed) {
                    memcpy(st->checkpointed_later, nt, sizeof nt);
                    memcpy(st->later_layers, nl, sizeof nl);
                } else if (count) { /* one type: every later layer's */
                    st->checkpointed_later[p->block0] = n;
                    st->later_layers[p->block0] = L - 1;
                }
            } else {
                gckpt_mode_cursor cur = gckpt_mode_cursor_at(every_n, offload, L - 1);
                for (uint64_t i = L - 1; i >= 1; i--, gckpt_mode_cursor_down(&cur)) {
                    if (typed) {
                        int b = block_of(c, p, i, typed);
                        plain = &later[b][GCKPT_LAYER_PLAIN];
                        ckpt = &later[b][ck];
                    }
                    visit(st, gckpt_mode_cursor_mode(&cur) != GCKPT_LAYER_PLAIN ? ckpt : plain, (int32_t)i, mu, phase,
                          replay);
                }
                visit(st, &first[row], 0, mu, phase, replay);
            }
        }
    }
    visit(st, &p->optimizer, (int32_t)L + 1, GCKPT_MICRO_NONE, GCKPT_PH_OPTIMIZER, replay);
}

/* The replay pass, out of the evaluator's hot path (only plans ask for a breakdown). */
static __attribute__((noinline)) void compose_replay(const gckpt_ctx *c, const gckpt_profile *p,
                                                     const gckpt_seg_summary (*firsts)[2][GCKPT_MICRO_ROWS],
                                                     uint32_t every_n, bool offload, int nmicro, comp_state *st)
{
    if (p->typed) compose(c, p, firsts, every_n, offload, nmicro, st, true, true);
    else compose(c, p, firsts, every_n, offload, nmicro, st, true, false);
}

static inline void time_add(gckpt_result *r, const gckpt_seg_summary *s, double mult)
{
    r->step_s += s->seconds * mult;
    r->model_flops += s->flops * mult;
    r->hw_flops += s->hw_flops * mult;
    r->recompute_s += s->recompute_s * mult;
    r->copy_s += s->copy_s * mult;
    r->forward_s += s->fwd_s * mult;
    r->backward_s += s->bwd_s * mult;
    if (s->coll_seen) { /* the collectives (DDP's buckets: the optimizer segment's) */
        r->coll_seen = true;
        r->coll_reduce += s->coll_reduce * mult;
        r->coll_all_reduce += s->coll_all_reduce * mult;
        r->coll_gather_fwd += s->coll_gather_fwd * mult;
        r->coll_gather_bwd += s->coll_gather_bwd * mult;
        r->coll_gather_opt += s->coll_gather_opt * mult;
        for (int k = 0; k < GCKPT_NSEC; k++) r->coll_gather_part[k] += s->coll_gather_part[k] * mult;
    }
}

/* Time and FLOPs are sums, so they come from segment counts: per micro-step the
 * once-rows, layer 0's rows, then the later layers' rows by block type and mode (of the
 * layers among 1 .. L-1, n_layers[b] of type b, n_ckpt[b] of them checkpointed). */
static void compose_time(const gckpt_profile *p, int m0, int ck, int nmicro, uint64_t grad_accum,
                         const uint64_t n_layers[GCKPT_NBLOCK], const uint64_t n_ckpt[GCKPT_NBLOCK], gckpt_result *res)
{
    gckpt_micro_run runs[GCKPT_MAX_MICRO_RUNS];
    gckpt_micro_runs(grad_accum, false, runs); /* a composed mode's last micro-step is not apart */
    for (int mi = 0; mi < nmicro; mi++) {
        double mult = (double)runs[mi].repeat;
        for (int once = 1; once >= 0; once--)
            for (int row = 0; row < GCKPT_MICRO_ROWS; row++)
                if ((gckpt_micro_order[row].order == GCKPT_ORDER_ONCE) == (once == 1)) time_add(res, &p->first[m0][mi][row], mult);
        for (int b = 0; b < GCKPT_NBLOCK; b++)
            for (int pass = 0; pass < 2; pass++) {
                double n = pass ? (double)n_ckpt[b] : (double)n_layers[b] - (double)n_ckpt[b];
                int m = pass ? ck : GCKPT_LAYER_PLAIN;
                for (int row = 0; n > 0 && row < GCKPT_MICRO_ROWS; row++)
                    if (gckpt_micro_order[row].order != GCKPT_ORDER_ONCE) time_add(res, &p->later[mi][row][b][m], mult * n);
            }
    }
    time_add(res, &p->optimizer, 1.0);
    res->optimizer_s = p->optimizer.seconds;
}

/* A setting whose layers are not alike (a wrapper's per-unit events: the top layer's
 * backward frees the tail's reduce-scatter input, the first the next layer's) is walked:
 * its schedule built and its events applied. false when out of memory. */
static bool walk_one(gckpt_ctx *w, uint32_t every_n, bool offload, uint64_t grad_accum, gckpt_result *res)
{
    gckpt_schedule sc;
    w->set.every_n = every_n;
    w->set.offload = offload;
    w->set.grad_accum = grad_accum;
    bool ok = gckpt_schedule_build(w, &sc);
    if (ok) gckpt_walk(w, &sc, res);
    gckpt_schedule_free(&sc);
    return ok;
}

/* ... and under ZeRO-1 and ZeRO-2 every other rank too: each reduces into its own buffer of
 * the flat gradients it keeps (ZeRO-2: made at the bucket flush that first holds one of them, the
 * last rank's early in the backward; ZeRO-1: at the boundary's reduction, after the .grad of the
 * parameters before its partition in the flat order are freed), so the ranks' peaks differ (a
 * middle rank can be the busiest, as test_run_mpi measured at 4 ranks): the busiest is the
 * entry's (FINDINGS R-DIST-19, R-DIST-25). */
static bool every_rank(const gckpt_ctx *c)
{
    return gckpt_par_mode_of(c->set.layout.mode)->walk_every_rank;
}

/* The walk of the setting on the ranks it stands for (ZeRO-1/2 at rank 0: every rank; else
 * c's own): the busiest rank's result (the first of equals) and that rank. false when out
 * of memory. */
static bool walk_ranks(const gckpt_ctx *c, uint32_t every_n, bool offload, uint64_t grad_accum, gckpt_result *res,
                       uint32_t *rank)
{
    gckpt_ctx *w = malloc(sizeof *w);
    gckpt_result last;
    bool ok = w != NULL;
    if (ok) *w = *c;
    ok = ok && walk_one(w, every_n, offload, grad_accum, res);
    *rank = c->set.layout.rank;
    uint32_t n = gckpt_layout_world(&c->set.layout);
    for (uint32_t r = 1; ok && every_rank(c) && c->set.layout.rank == 0 && r < n; r++) {
        gckpt_setting s = c->set;
        gckpt_err err;
        s.layout.rank = r;
        ok = gckpt_ctx_init(w, c->model, c->dev, c->recipe, &s, &err) && walk_one(w, every_n, offload, grad_accum, &last);
        if (ok && last.peak_bytes > res->peak_bytes) {
            *res = last;
            *rank = r;
        }
    }
    free(w);
    return ok;
}

static void walk_setting(const gckpt_ctx *c, uint32_t every_n, bool offload, uint64_t grad_accum, gckpt_result *res)
{
    uint32_t rank;
    if (walk_ranks(c, every_n, offload, grad_accum, res, &rank)) return;
    /* out of memory: as a setting that cannot be planned */
    memset(res, 0, sizeof *res);
    res->peak_bytes = res->device_peak_bytes = UINT64_MAX;
}

bool gckpt_result_rank(const gckpt_ctx *c, uint32_t *rank)
{
    *rank = c->set.layout.rank;
    if (!every_rank(c) || c->set.layout.rank != 0 || gckpt_layout_world(&c->set.layout) < 2) return true;
    gckpt_result res;
    return walk_ranks(c, c->set.every_n, c->set.offload, c->set.grad_accum, &res, rank);
}

void gckpt_fast_eval_ex(const gckpt_ctx *c, const gckpt_profile *p, uint32_t every_n, bool offload,
                        uint64_t grad_accum, bool breakdown, gckpt_result *res)
{
    memset(res, 0, sizeof *res);
    if (grad_accum > 1 && !p->later_micro) {
        res->peak_bytes = res->device_peak_bytes = UINT64_MAX;
        return;
    }
    /* a mode whose synchronising micro-step is apart has three micro-steps: walked too */
    if (gckpt_wrap_active(c) || every_rank(c) || gckpt_par_mode_of(c->set.layout.mode)->sync_apart) {
        walk_setting(c, every_n, offload, grad_accum, res);
        return;
    }
    const int nmicro = grad_accum > 1 ? 2 : 1;
    int64_t base[GCKPT_NCOMP], base_total = 0;
    gckpt_step_start(c, every_n, base);
    for (int k = 0; k < GCKPT_NCOMP; k++) base_total += base[k];
    comp_state st;
    memset(&st, 0, sizeof st);
    st.total = st.peak = base_total;
    st.peak_layer = -1;
    const int m0 = gckpt_layer_mode_of(every_n, offload, 0);
    /* two attention types: both checkpointed, or only layer 0's (gckpt_ckpt_types) */
    const gckpt_seg_summary(*firsts)[2][GCKPT_MICRO_ROWS] =
        p->two_types && m0 != GCKPT_LAYER_PLAIN && gckpt_ckpt_types(c->model, every_n) == 3 ? p->first_both : p->first;
    if (p->typed) compose(c, p, firsts, every_n, offload, nmicro, &st, false, true);
    else compose(c, p, firsts, every_n, offload, nmicro, &st, false, false);
    const int ck = offload ? GCKPT_LAYER_CKPT_OFFLOAD : GCKPT_LAYER_CKPT;
    compose_time(p, m0, ck, nmicro, grad_accum, st.later_layers, st.checkpointed_later, res);
    res->peak_bytes = (uint64_t)st.peak;
    res->host_pinned_bytes = (uint64_t)st.host_peak + c->par.host_pinned;
    res->host_pageable_bytes = c->par.host_pageable;
    res->after_forward_bytes = (uint64_t)st.after_fwd;
    res->peak_layer = st.peak_layer;
    res->peak_micro = st.peak_micro;
    res->peak_phase = st.peak_seg ? st.peak_phase : GCKPT_PH_FORWARD;
    res->peak_tensor = st.peak_seg ? st.peak_seg->peak_tensor : -1;
    res->peak_grad = st.peak_seg ? st.peak_seg->peak_grad : false;
    memcpy(res->breakdown, base, sizeof base);
    if (breakdown && st.peak_seg) {
        /* replay the order up to the peak segment, now with component vectors */
        comp_state rp = {.peak_seq = st.peak_seq, .vec = res->breakdown};
        compose_replay(c, p, firsts, every_n, offload, nmicro, &rp);
    }
    gckpt_result_finish(c, every_n, grad_accum, res);
}

void gckpt_fast_eval(const gckpt_ctx *c, const gckpt_profile *p, uint32_t every_n, bool offload,
                     uint64_t grad_accum, gckpt_result *res)
{
    gckpt_fast_eval_ex(c, p, every_n, offload, grad_accum, true, res);
}
