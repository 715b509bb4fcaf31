#include "gckpt/core/eval.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static double peak_rate(const gckpt_ctx *c)
{
    const gckpt_device *d = c->dev;
    switch (c->set.precision) {
    case GCKPT_FP32: return d->tflops_fp32 * 1e12;
    case GCKPT_AMP_FP16: return d->tflops_fp16 * 1e12;
    default: return d->tflops_bf16 * 1e12;
    }
}

static void finish(const gckpt_ctx *c, uint64_t grad_accum, gckpt_result *res)
{
    uint64_t seg = c->dev->segment_round_bytes;
    res->device_peak_bytes = gckpt_round_up(res->peak_bytes, seg) + c->dev->context_bytes;
    double tokens = (double)c->tokens * (double)grad_accum;
    res->tokens_per_s = res->step_s > 0 ? tokens / res->step_s : 0;
    res->mfu = res->step_s > 0 ? res->model_flops / (res->step_s * peak_rate(c)) : 0;
}

/* ---- event walk -------------------------------------------------------------------- */

typedef struct {
    int64_t cur[GCKPT_NCOMP];
    int64_t total, peak, host, host_peak;
    int64_t at_peak[GCKPT_NCOMP];
    uint8_t peak_phase, peak_micro;
    int32_t peak_layer;
    int16_t peak_tensor;
    bool peak_grad;
} acct;

static void on_event(acct *a, const gckpt_event *e)
{
    switch (e->kind) {
    case GCKPT_EV_ALLOC:
        a->cur[e->comp] += (int64_t)e->bytes;
        a->total += (int64_t)e->bytes;
        if (a->total > a->peak) {
            a->peak = a->total;
            memcpy(a->at_peak, a->cur, sizeof a->cur);
            a->peak_phase = e->phase;
            a->peak_micro = e->micro;
            a->peak_layer = e->layer;
            a->peak_tensor = e->op;
            a->peak_grad = e->grad;
        }
        break;
    case GCKPT_EV_FREE:
        a->cur[e->comp] -= (int64_t)e->bytes;
        a->total -= (int64_t)e->bytes;
        break;
    case GCKPT_EV_RETAG:
        a->cur[e->comp] -= (int64_t)e->bytes;
        a->cur[e->comp2] += (int64_t)e->bytes;
        break;
    case GCKPT_EV_HOST_ALLOC:
        a->host += (int64_t)e->bytes;
        if (a->host > a->host_peak) a->host_peak = a->host;
        break;
    case GCKPT_EV_HOST_FREE:
        a->host -= (int64_t)e->bytes;
        break;
    default: break;
    }
}

void gckpt_walk(const gckpt_ctx *c, const gckpt_events *ev, gckpt_result *res)
{
    memset(res, 0, sizeof *res);
    acct a;
    memset(&a, 0, sizeof a);
    gckpt_persistent(c, a.cur);
    for (int i = 0; i < GCKPT_NCOMP; i++) a.total += a.cur[i];
    a.peak = a.total;
    memcpy(a.at_peak, a.cur, sizeof a.cur);
    a.peak_phase = GCKPT_PH_FORWARD;
    a.peak_layer = -1;
    a.peak_tensor = -1;
    double k = (double)c->set.grad_accum;
    bool after_fwd_done = false;
    for (size_t i = 0; i < ev->n; i++) {
        const gckpt_event *e = &ev->ev[i];
        if (!after_fwd_done && e->micro == 0 && e->phase == GCKPT_PH_BACKWARD &&
            e->kind == GCKPT_EV_ALLOC && e->op == c->recipe->loss && e->comp == GCKPT_C_BACKWARD) {
            /* the seed gradient of the loss: the forward is over */
            res->after_forward_bytes = (uint64_t)a.total;
            after_fwd_done = true;
        }
        on_event(&a, e);
        double mult = e->micro == 1 ? k - 1 : 1;
        double t = e->seconds * mult;
        res->step_s += t;
        res->model_flops += (e->kind == GCKPT_EV_RECOMPUTE ? 0 : e->flops) * mult;
        switch (e->kind) {
        case GCKPT_EV_FWD: res->forward_s += t; break;
        case GCKPT_EV_BWD: res->backward_s += t; break;
        case GCKPT_EV_RECOMPUTE: res->recompute_s += t; break;
        case GCKPT_EV_D2H: case GCKPT_EV_H2D: res->copy_s += t; break;
        case GCKPT_EV_OPT: res->optimizer_s += t; break;
        default: break;
        }
    }
    res->peak_bytes = (uint64_t)a.peak;
    memcpy(res->breakdown, a.at_peak, sizeof a.at_peak);
    res->host_pinned_bytes = (uint64_t)a.host_peak;
    res->peak_phase = a.peak_phase;
    res->peak_micro = a.peak_micro;
    res->peak_layer = a.peak_layer;
    res->peak_tensor = a.peak_tensor;
    res->peak_grad = a.peak_grad;
    finish(c, c->set.grad_accum, res);
}

/* ---- segment profiles --------------------------------------------------------------- */

static void summarize(const gckpt_events *ev, size_t from, size_t to, gckpt_segment *s)
{
    memset(s, 0, sizeof *s);
    s->peak_rel = INT64_MIN;
    s->peak_tensor = -1;
    int64_t cur[GCKPT_NCOMP] = {0}, total = 0, host = 0;
    for (size_t i = from; i < to; i++) {
        const gckpt_event *e = &ev->ev[i];
        switch (e->kind) {
        case GCKPT_EV_ALLOC:
            cur[e->comp] += (int64_t)e->bytes;
            total += (int64_t)e->bytes;
            if (!s->has_peak || total > s->peak_rel) {
                s->has_peak = true;
                s->peak_rel = total;
                memcpy(s->at_peak, cur, sizeof cur);
                s->peak_phase = e->phase;
                s->peak_tensor = e->op;
                s->peak_grad = e->grad;
            }
            break;
        case GCKPT_EV_FREE:
            cur[e->comp] -= (int64_t)e->bytes;
            total -= (int64_t)e->bytes;
            break;
        case GCKPT_EV_RETAG:
            cur[e->comp] -= (int64_t)e->bytes;
            cur[e->comp2] += (int64_t)e->bytes;
            break;
        case GCKPT_EV_HOST_ALLOC:
            host += (int64_t)e->bytes;
            if (host > s->host_peak_rel) s->host_peak_rel = host;
            break;
        case GCKPT_EV_HOST_FREE: host -= (int64_t)e->bytes; break;
        default: break;
        }
        s->seconds += e->seconds;
        if (e->kind != GCKPT_EV_RECOMPUTE) s->flops += e->flops;
        if (e->kind == GCKPT_EV_RECOMPUTE) s->recompute_s += e->seconds;
        if (e->kind == GCKPT_EV_D2H || e->kind == GCKPT_EV_H2D) s->copy_s += e->seconds;
        if (e->kind == GCKPT_EV_FWD) s->fwd_s += e->seconds;
        if (e->kind == GCKPT_EV_BWD) s->bwd_s += e->seconds;
    }
    memcpy(s->net, cur, sizeof cur);
    s->net_total = total;
    s->host_net = host;
}

struct gckpt_profiler {
    gckpt_sim *sim;
    gckpt_events ev;
};

gckpt_profiler *gckpt_profiler_new(void) { return calloc(1, sizeof(gckpt_profiler)); }

void gckpt_profiler_free(gckpt_profiler *pr)
{
    if (!pr) return;
    gckpt_sim_free(pr->sim);
    gckpt_events_free(&pr->ev);
    free(pr);
}

/* One micro-step cut into segments: the first layer in mode m0, then (full) three more
 * layers, one of each mode. */
static bool profile_micro(gckpt_profiler *pr, const gckpt_ctx *c, bool grads_exist, int micro, int m0, bool full,
                          gckpt_profile *p)
{
    gckpt_events *ev = &pr->ev;
    ev->n = 0;
    ev->oom = false;
    uint64_t nl = full ? 1 + GCKPT_NLAYERMODE : 1;
    if (!pr->sim) pr->sim = gckpt_sim_new(c, grads_exist, (uint8_t)micro, nl);
    else if (!gckpt_sim_reset(pr->sim, c, grads_exist, (uint8_t)micro, nl)) return false;
    gckpt_sim *s = pr->sim;
    if (!s) return false;
    gckpt_sim_set_checkpointing(s, m0 != GCKPT_LAYER_PLAIN, m0 == GCKPT_LAYER_CKPT_OFFLOAD);
    gckpt_segment *fx = p->fixed[m0][micro];
    size_t mark;
#define SEG(dst, call)                    \
    do {                                  \
        mark = ev->n;                     \
        call;                             \
        summarize(ev, mark, ev->n, dst);  \
    } while (0)
    SEG(&fx[GCKPT_SEG_EMBED_FWD], gckpt_sim_embed_fwd(s, ev));
    SEG(&p->first_fwd[m0][micro], gckpt_sim_layer_fwd(s, 0, (gckpt_layer_mode)m0, ev));
    for (int m = 0; full && m < GCKPT_NLAYERMODE; m++)
        SEG(&p->layer_fwd[micro][m], gckpt_sim_layer_fwd(s, m + 1, (gckpt_layer_mode)m, ev));
    SEG(&fx[GCKPT_SEG_HEAD_FWD], gckpt_sim_head_fwd(s, ev));
    SEG(&p->first_fwd_end[m0][micro], gckpt_sim_fwd_end_layer(s, 0, ev));
    for (int m = 0; full && m < GCKPT_NLAYERMODE; m++)
        SEG(&p->layer_fwd_end[micro][m], gckpt_sim_fwd_end_layer(s, m + 1, ev));
    SEG(&fx[GCKPT_SEG_FWD_END_HEAD], gckpt_sim_fwd_end_head(s, ev));
    SEG(&fx[GCKPT_SEG_HEAD_BWD], gckpt_sim_head_bwd(s, ev));
    for (int m = GCKPT_NLAYERMODE - 1; full && m >= 0; m--)
        SEG(&p->layer_bwd[micro][m], gckpt_sim_layer_bwd(s, m + 1, ev));
    SEG(&p->first_bwd[m0][micro], gckpt_sim_layer_bwd(s, 0, ev));
    SEG(&fx[GCKPT_SEG_EMBED_BWD], gckpt_sim_embed_bwd(s, ev));
    SEG(&fx[GCKPT_SEG_STEP_END], gckpt_sim_step_end(s, ev));
#undef SEG
    return !ev->oom;
}

bool gckpt_profile_build_with(gckpt_profiler *pr, const gckpt_ctx *c, gckpt_profile *p)
{
    memset(p, 0, sizeof *p);
    /* the later layers' segments come with the plain first layer; a first layer that is
     * checkpointed needs only itself and the fixed segments */
    p->later_micro = c->set.grad_accum > 1;
    for (int m0 = 0; m0 < GCKPT_NLAYERMODE; m0++)
        for (int mi = 0; mi < (p->later_micro ? 2 : 1); mi++)
            if (!profile_micro(pr, c, mi == 1, mi, m0, m0 == GCKPT_LAYER_PLAIN, p)) return false;
    pr->ev.n = 0;
    gckpt_sim_optimizer(c, &pr->ev);
    summarize(&pr->ev, 0, pr->ev.n, &p->optimizer);
    return !pr->ev.oom;
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

/* Segments of a step in order: per micro-step embed fwd, L layer fwds, head fwd, L
 * fwd-ends, head fwd-end, head bwd, L layer bwds (reversed), embed bwd, step end;
 * then the optimizer. Time and FLOPs are sums, so they come from segment counts; the
 * memory walk needs the order. */
typedef struct {
    int64_t total, peak, host, host_peak;
    const gckpt_segment *peak_seg;
    int64_t peak_seq, seq;
    int32_t peak_layer;
    uint8_t peak_micro;
} comp_state;

static inline void mem_apply(comp_state *st, const gckpt_segment *s, int32_t layer, uint8_t micro)
{
    if (s->has_peak && st->total + s->peak_rel > st->peak) {
        st->peak = st->total + s->peak_rel;
        st->peak_seg = s;
        st->peak_seq = st->seq;
        st->peak_layer = layer;
        st->peak_micro = micro;
    }
    if (st->host + s->host_peak_rel > st->host_peak) st->host_peak = st->host + s->host_peak_rel;
    st->total += s->net_total;
    st->host += s->host_net;
    st->seq++;
}

static inline void time_add(gckpt_result *r, const gckpt_segment *s, double mult)
{
    r->step_s += s->seconds * mult;
    r->model_flops += s->flops * mult;
    r->recompute_s += s->recompute_s * mult;
    r->copy_s += s->copy_s * mult;
    r->forward_s += s->fwd_s * mult;
    r->backward_s += s->bwd_s * mult;
}

void gckpt_fast_eval_ex(const gckpt_ctx *c, const gckpt_profile *p, uint32_t every_n, bool offload,
                        uint64_t grad_accum, bool breakdown, gckpt_result *res)
{
    memset(res, 0, sizeof *res);
    if (grad_accum > 1 && !p->later_micro) {
        res->peak_bytes = res->device_peak_bytes = UINT64_MAX;
        return;
    }
    const uint64_t L = c->model->layers;
    const int ck = offload ? GCKPT_LAYER_CKPT_OFFLOAD : GCKPT_LAYER_CKPT;
    const uint64_t nck = every_n ? (L + every_n - 1) / every_n : 0, npl = L - nck;
    const int m0 = every_n ? ck : GCKPT_LAYER_PLAIN; /* layer 0 is checkpointed whenever any is */
    int64_t base[GCKPT_NCOMP];
    gckpt_persistent(c, base);
    comp_state st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < GCKPT_NCOMP; i++) st.total += base[i];
    st.peak = st.total;
    st.peak_layer = -1;
    int64_t after_fwd = 0;
    const int nmicro = grad_accum > 1 ? 2 : 1;
#define MODE(i) ((every_n && (i) % every_n == 0) ? ck : GCKPT_LAYER_PLAIN)
    /* layers 1..L-1 in order (or reversed) with their segment by mode, the mode by a
     * running position in the every_n period (no division per layer) */
#define LAYERS(segs, reversed)                                                             do {                                                                                       const gckpt_segment *plain_ = &(segs)[GCKPT_LAYER_PLAIN], *ck_ = &(segs)[ck];          uint64_t ph_ = every_n ? ((reversed) ? (L - 1) % every_n : 1 % every_n) : 1;           for (uint64_t j_ = 1; j_ < L; j_++) {                                                      uint64_t i_ = (reversed) ? L - j_ : j_;                                                mem_apply(&st, every_n && ph_ == 0 ? ck_ : plain_, (int32_t)i_, mu);                   if (!every_n) continue;                                                                if (reversed) ph_ = ph_ ? ph_ - 1 : every_n - 1;                                       else if (++ph_ == every_n) ph_ = 0;                                                }                                                                                  } while (0)
    for (int mi = 0; mi < nmicro; mi++) {
        const gckpt_segment *fx = p->fixed[m0][mi];
        const uint8_t mu = (uint8_t)mi;
        mem_apply(&st, &fx[GCKPT_SEG_EMBED_FWD], -1, mu);
        mem_apply(&st, &p->first_fwd[m0][mi], 0, mu);
        LAYERS(p->layer_fwd[mi], false);
        mem_apply(&st, &fx[GCKPT_SEG_HEAD_FWD], (int32_t)L, mu);
        mem_apply(&st, &p->first_fwd_end[m0][mi], 0, mu);
        LAYERS(p->layer_fwd_end[mi], false);
        mem_apply(&st, &fx[GCKPT_SEG_FWD_END_HEAD], (int32_t)L, mu);
        if (mi == 0) after_fwd = st.total;
        mem_apply(&st, &fx[GCKPT_SEG_HEAD_BWD], (int32_t)L, mu);
        LAYERS(p->layer_bwd[mi], true);
        mem_apply(&st, &p->first_bwd[m0][mi], 0, mu);
        mem_apply(&st, &fx[GCKPT_SEG_EMBED_BWD], -1, mu);
        mem_apply(&st, &fx[GCKPT_SEG_STEP_END], -1, mu);
        double mult = mi == 1 ? (double)(grad_accum - 1) : 1.0;
        for (int k = 0; k < GCKPT_NSEG_FIXED; k++) time_add(res, &fx[k], mult);
        time_add(res, &p->first_fwd[m0][mi], mult);
        time_add(res, &p->first_fwd_end[m0][mi], mult);
        time_add(res, &p->first_bwd[m0][mi], mult);
        /* the later layers: layer 0 is the plain one when every_n is off, else a checkpointed one */
        double npl1 = (double)npl - (every_n ? 0.0 : 1.0), nck1 = (double)nck - (every_n ? 1.0 : 0.0);
        if (npl1 > 0) {
            time_add(res, &p->layer_fwd[mi][GCKPT_LAYER_PLAIN], mult * npl1);
            time_add(res, &p->layer_fwd_end[mi][GCKPT_LAYER_PLAIN], mult * npl1);
            time_add(res, &p->layer_bwd[mi][GCKPT_LAYER_PLAIN], mult * npl1);
        }
        if (nck1 > 0) {
            time_add(res, &p->layer_fwd[mi][ck], mult * nck1);
            time_add(res, &p->layer_fwd_end[mi][ck], mult * nck1);
            time_add(res, &p->layer_bwd[mi][ck], mult * nck1);
        }
    }
    mem_apply(&st, &p->optimizer, (int32_t)L + 1, 2);
    time_add(res, &p->optimizer, 1.0);
    res->optimizer_s = p->optimizer.seconds;
    res->peak_bytes = (uint64_t)st.peak;
    res->host_pinned_bytes = (uint64_t)st.host_peak;
    res->after_forward_bytes = (uint64_t)after_fwd;
    res->peak_layer = st.peak_layer;
    res->peak_micro = st.peak_micro;
    res->peak_phase = st.peak_seg ? st.peak_seg->peak_phase : GCKPT_PH_FORWARD;
    res->peak_tensor = st.peak_seg ? st.peak_seg->peak_tensor : -1;
    res->peak_grad = st.peak_seg ? st.peak_seg->peak_grad : false;
    memcpy(res->breakdown, base, sizeof base);
    if (breakdown && st.peak_seg) {
        /* replay the order up to the peak segment, now with component vectors */
        int64_t seq = 0;
        int64_t *v = res->breakdown;
#define VEC(segp)                                                                   \
    do {                                                                            \
        const gckpt_segment *sg_ = (segp);                                          \
        if (seq < st.peak_seq)                                                      \
            for (int k_ = 0; k_ < GCKPT_NCOMP; k_++) v[k_] += sg_->net[k_];         \
        else if (seq == st.peak_seq)                                                \
            for (int k_ = 0; k_ < GCKPT_NCOMP; k_++) v[k_] += sg_->at_peak[k_];     \
        seq++;                                                                      \
    } while (0)
        for (int mi = 0; mi < nmicro && seq <= st.peak_seq; mi++) {
            const gckpt_segment *fx = p->fixed[m0][mi];
            VEC(&fx[GCKPT_SEG_EMBED_FWD]);
            VEC(&p->first_fwd[m0][mi]);
            for (uint64_t i = 1; i < L; i++) VEC(&p->layer_fwd[mi][MODE(i)]);
            VEC(&fx[GCKPT_SEG_HEAD_FWD]);
            VEC(&p->first_fwd_end[m0][mi]);
            for (uint64_t i = 1; i < L; i++) VEC(&p->layer_fwd_end[mi][MODE(i)]);
            VEC(&fx[GCKPT_SEG_FWD_END_HEAD]);
            VEC(&fx[GCKPT_SEG_HEAD_BWD]);
            for (uint64_t i = L; i-- > 1;) VEC(&p->layer_bwd[mi][MODE(i)]);
            VEC(&p->first_bwd[m0][mi]);
            VEC(&fx[GCKPT_SEG_EMBED_BWD]);
            VEC(&fx[GCKPT_SEG_STEP_END]);
        }
        if (seq <= st.peak_seq) VEC(&p->optimizer);
#undef VEC
    }
#undef LAYERS
#undef MODE
    finish(c, grad_accum, res);
}

void gckpt_fast_eval(const gckpt_ctx *c, const gckpt_profile *p, uint32_t every_n, bool offload,
                     uint64_t grad_accum, gckpt_result *res)
{
    gckpt_fast_eval_ex(c, p, every_n, offload, grad_accum, true, res);
}
