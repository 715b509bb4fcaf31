/* Context parallelism (gckpt-plan --cp C; accelerate's ParallelismConfig(cp_size=C) with FSDP2 over
 * the cp ranks, FINDINGS R-CP-1, R-EXEC-6): every rank runs FSDP2's schedule at S / C on its pieces of
 * the batch its CP group shares, and its attention over torch's ring:
 * - the data: the whole batch made as one process makes it, the rank's positions taken as
 *   context_parallel's load balancer splits them (gckpt_cp_positions): input_ids, the Trainer's
 *   shift_labels (made on the whole sequence: the last token of a piece keeps its true target) and
 *   position_ids (the rotary tables follow them);
 * - SDPA: ring_fwd / ring_bwd below over the backend's ring_* ops (one all-gather of cat(K, V) per
 *   call, the per-block merge in fp32, the backward's dK / dV summed onto the rank that holds K / V);
 * - the loss: the Trainer's under CP (R-EXEC-6): each rank's sum over its tokens divided by
 *   num_items_in_batch / cp and multiplied by the world size, FSDP2 averaging the gradients over the
 *   world; here the rank's mean loss rescaled to sum / (whole batch's items / C) (the 1 / grad_accum
 *   and 1 / world of the other modes stay): the ranks' mean of it is the whole sequence's mean;
 * - the memory: CP's buffers (gckpt_cp_extra_at: the Trainer's split buffers' storages, the clones,
 *   the per-row rotary tables) held from the first step to the end, the partial-merge ranks' o_proj
 *   copy per layer from its forward (or recompute) ring call to its backward's, and during each ring
 *   call the replayed transients (gckpt_cp_ring_peak) above what the op's own allocations hold (one
 *   allocation; the ring's K/V exchange buffers and dK / dV sums are taken from it), as
 *   core/cp_walk.c plans them (gckpt_cp_extra_before).
 * Any backend with the ring_* ops (host; CUDA, unverified: no GPU when it was written); fp32 and
 * amp-bf16. CP x dp_shard: FSDP2 over all the ranks, the ring in the CP
 * group (cp consecutive ranks: cp innermost in accelerate's mesh), each CP group's batch that of its
 * data-parallel rank (rank / cp). */
#include "interp_parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/cp.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/step.h"
#include "host_num.h"

struct exec_cp {
    uint32_t C, r;
    uint64_t S;       /* the whole sequence (x->set.seq is the rank's S / C) */
    bool balanced;
    uint64_t *pos;    /* [C][S / C]: every rank's positions */
    uint64_t n_whole; /* the micro-batch's labels other than -100, over the whole sequence */
    void *bufs;       /* CP's buffers (the Trainer's, the clones, the rotary tables) */
    uint64_t bufs_bytes, copy_bytes, held;
    void **copy;      /* per layer: its o_proj-input copy on a partial-merge rank */
    uint64_t base;    /* the backend's bytes after the last event that is no allocation, less `held` */
};

static unsigned elem(const gckpt_exec *x) { return x->set.precision == GCKPT_FP32 ? 4 : 2; }

bool exec_cp_prepare(gckpt_exec *x, gckpt_err *err)
{
    if (!x->be->ring_pack || !x->be->scratch) {
        gckpt_seterr(err, "context parallelism: the %s backend has no ring attention ops (--backend host)", x->be->name);
        return false;
    }
    if (x->set.precision != GCKPT_FP32 && x->set.precision != GCKPT_AMP_BF16) {
        gckpt_seterr(err, "context parallelism is executed in fp32 and amp-bf16 only");
        return false;
    }
    exec_cp *c = x->cp = calloc(1, sizeof *x->cp);
    if (!c) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    c->C = x->set.layout.cp;
    c->r = (uint32_t)x->o.rank % c->C; /* cp innermost in accelerate's mesh (R-CP-1) */
    c->S = x->set.seq * c->C;
    c->balanced = gckpt_cp_balanced(c->S, c->C);
    c->pos = malloc(sizeof *c->pos * c->S);
    c->copy = calloc(x->m.layers ? x->m.layers : 1, sizeof *c->copy);
    if (!c->pos || !c->copy) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    for (uint32_t k = 0; k < c->C; k++) gckpt_cp_positions(c->S, c->C, k, c->pos + (uint64_t)k * x->set.seq);
    c->bufs_bytes = gckpt_cp_extra_at(&x->m, &x->set, c->S, c->C, c->r, elem(x), elem(x), 0);
    c->copy_bytes = gckpt_cp_layer_extra(&x->m, &x->set, c->C, c->r, c->balanced);
    return true;
}

static gckpt_xstatus take(gckpt_exec *x, uint64_t bytes, void **p, const char *what, gckpt_err *err)
{
    gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, bytes, p);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, what, err);
}

gckpt_xstatus exec_cp_init(gckpt_exec *x, gckpt_err *err)
{
    exec_cp *c = x->cp;
    gckpt_xstatus rc = take(x, c->bufs_bytes, &c->bufs, "allocating CP's buffers", err);
    if (rc == GCKPT_XS_OK) c->held += c->bufs_bytes;
    return rc;
}

void exec_cp_data(gckpt_exec *x, uint64_t key)
{
    const exec_cp *c = x->cp;
    uint64_t B = x->set.micro_batch, S = c->S, n = x->set.seq, V = x->m.vocab;
    const uint64_t *pos = c->pos + (uint64_t)c->r * n;
    /* the whole batch as one process makes it (interp.c make_data), then the rank's positions */
    for (uint64_t b = 0; b < B; b++)
        for (uint64_t i = 0; i < n; i++) {
            uint64_t p = b * S + pos[i];
            x->ids[b * n + i] = (int64_t)(gckpt_rng(key, p) % V);
            x->labels[b * n + i] = pos[i] + 1 < S ? (int64_t)(gckpt_rng(key, p + 1) % V) : -100;
        }
    for (uint64_t i = 0; i < n; i++) x->positions[i] = (int64_t)pos[i];
    x->cp->n_whole = B * (S - 1); /* every position but the last has a target */
}

void exec_cp_after_event(gckpt_exec *x, const gckpt_event *e)
{
    if (!x->cp || e->kind == GCKPT_EV_ALLOC || e->kind == GCKPT_EV_ALLOC_SCRATCH) return;
    gckpt_memstat ms;
    x->be->memstat(x->be, &ms);
    x->cp->base = ms.allocated - x->cp->held;
}

/* A collective in the CP group: the world under CP alone, its own group (cp consecutive ranks) under
 * CP x dp_shard (main_run.c joins it). */
static gckpt_xstatus cp_coll(gckpt_exec *x, gckpt_coll op, gckpt_xt send, gckpt_xt recv)
{
    if (gckpt_layout_world(&x->set.layout) == x->cp->C) return x->be->collective(x->be, op, GCKPT_RED_SUM, send, recv, 0);
    if (!x->be->collective_group) {
        gckpt_seterr(&x->be->err, "the %s backend has no process groups (CP x dp_shard)", x->be->name);
        return GCKPT_XS_ERROR;
    }
    return x->be->collective_group(x->be, GCKPT_GROUP_CP, op, GCKPT_RED_SUM, send, recv);
}

/* The ring's float buffers: from the call's transients (the arena) while they last (*own false),
 * else the backend's scratch; zero: set to 0. */
typedef struct {
    char *p;
    uint64_t bytes, used;
} arena;

static gckpt_xstatus ring_take(gckpt_exec *x, arena *a, uint64_t count, bool zero, float **p, bool *own)
{
    uint64_t b = count * sizeof(float);
    gckpt_xstatus rc = GCKPT_XS_OK;
    *own = !(a->p && a->used + b <= a->bytes);
    if (!*own) {
        *p = (float *)(a->p + a->used);
        a->used += b;
    } else if ((rc = x->be->scratch(x->be, b, (void **)p)) != GCKPT_XS_OK) {
        *p = NULL;
        return rc;
    }
    gckpt_xt t = {*p, count, GCKPT_DT_F32, 0, 0, 0, 0, 0, 0};
    return zero && count ? x->be->init(x->be, t, GCKPT_INIT_CONST, 0.0f, 0) : rc;
}

static void ring_drop(gckpt_exec *x, float *p, bool own)
{
    if (p && own) x->be->scratch_free(x->be, p);
}

static gckpt_xstatus gather(gckpt_exec *x, const float *send, float *recv, uint64_t n, gckpt_err *err)
{
    gckpt_xt s = {(void *)send, n, GCKPT_DT_F32, 0, 0, 0, 0, 0, 0}, r = {recv, n * x->cp->C, GCKPT_DT_F32, 0, 0, 0, 0, 0, 0};
    gckpt_xstatus rc = cp_coll(x, GCKPT_COLL_ALL_GATHER, s, r);
    if (rc != GCKPT_XS_OK) gckpt_seterr(err, "the ring's K/V all-gather: %s", x->be->err.msg);
    return rc;
}

static gckpt_xstatus scatter(gckpt_exec *x, const float *send, float *recv, uint64_t n, gckpt_err *err)
{
    gckpt_xt s = {(void *)send, n * x->cp->C, GCKPT_DT_F32, 0, 0, 0, 0, 0, 0}, r = {recv, n, GCKPT_DT_F32, 0, 0, 0, 0, 0, 0};
    gckpt_xstatus rc = cp_coll(x, GCKPT_COLL_REDUCE_SCATTER, s, r);
    if (rc != GCKPT_XS_OK) gckpt_seterr(err, "the ring's dK/dV reduction: %s", x->be->err.msg);
    return rc;
}

#define RING_TRY(e)                                                                                \
    do {                                                                                           \
        if ((rc = (e)) != GCKPT_XS_OK) {                                                           \
            exec_be_fail(x, rc, at, err);                                                          \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* SDPA over every rank's K / V: one all-gather of cat(K, V) (the allgather rotation), block by
 * block from rank (r - t) mod C, each block's out and logsumexp merged in fp32 (torch's
 * _SDPAMerger). The exchange buffers from the arena, the block's and the merge's from scratch. */
static gckpt_xstatus ring_fwd(gckpt_exec *x, const gckpt_xcall *call, const gckpt_ring *g, arena *a, const char *at,
                              gckpt_err *err)
{
    gckpt_backend *be = x->be;
    const gckpt_op *op = call->op;
    uint64_t n = 0, no = call->b * call->s * op->heads * op->v_dim, nl = call->b * op->heads * call->s;
    float *mine = NULL, *all = NULL, *o = NULL, *l = NULL, *acc = NULL, *al = NULL;
    bool own_m = false, own_a = false;
    gckpt_xstatus rc;
    RING_TRY(be->ring_pack(be, call, NULL, &n));
    RING_TRY(ring_take(x, a, n, false, &mine, &own_m));
    RING_TRY(ring_take(x, a, n * g->cp, false, &all, &own_a));
    RING_TRY(be->scratch(be, (2 * no + 2 * nl) * sizeof(float), (void **)&o));
    acc = o + no;
    l = acc + no;
    al = l + nl;
    gckpt_xt tl = {al, nl, GCKPT_DT_F32, 0, 0, 0, 0, 0, 0};
    RING_TRY(be->init(be, tl, GCKPT_INIT_CONST, -INFINITY, 0)); /* no block merged yet */
    RING_TRY(be->ring_pack(be, call, mine, &n));
    if ((rc = gather(x, mine, all, n, err)) != GCKPT_XS_OK) goto out;
    for (uint32_t t = 0; t < g->cp; t++) {
        uint32_t src = (g->rank + g->cp - t) % g->cp;
        RING_TRY(be->ring_block_fwd(be, call, g, src, all + src * n, o, l));
        RING_TRY(be->ring_merge(be, call, acc, al, o, l));
    }
    RING_TRY(be->ring_store(be, call, acc, al));
out:
    if (o) be->scratch_free(be, o);
    ring_drop(x, all, own_a);
    ring_drop(x, mine, own_m);
    return rc;
}

/* The backward: K / V gathered again, each block's backward with the merged out and lse, dK / dV
 * summed per source rank and reduce-scattered onto the rank that holds K / V (fp32). */
static gckpt_xstatus ring_bwd(gckpt_exec *x, const gckpt_xcall *call, const gckpt_ring *g, arena *a, const char *at,
                              gckpt_err *err)
{
    gckpt_backend *be = x->be;
    const gckpt_op *op = call->op;
    uint64_t n = 0, nq = call->b * call->s * op->heads * op->qk_dim;
    float *mine = NULL, *all = NULL, *dall = NULL, *dq = NULL;
    bool own_m = false, own_a = false, own_d = false, own_q = false;
    gckpt_xstatus rc;
    if (!call->out[0].p || !call->out[1].p)
        return exec_fail(err, "%s: op %s: the saved output or logsumexp is not available (freed before use)", at, op->name);
    RING_TRY(be->ring_pack(be, call, NULL, &n));
    RING_TRY(ring_take(x, a, n, false, &mine, &own_m));
    RING_TRY(ring_take(x, a, n * g->cp, false, &all, &own_a));
    RING_TRY(ring_take(x, a, n * g->cp, true, &dall, &own_d));
    arena none = {0};
    RING_TRY(ring_take(x, &none, nq, true, &dq, &own_q));
    RING_TRY(be->ring_pack(be, call, mine, &n));
    if ((rc = gather(x, mine, all, n, err)) != GCKPT_XS_OK) goto out; /* the backward's K/V again */
    for (uint32_t t = 0; t < g->cp; t++) {
        uint32_t src = (g->rank + g->cp - t) % g->cp;
        RING_TRY(be->ring_block_bwd(be, call, g, src, all + src * n, dq, dall + src * n));
    }
    if ((rc = scatter(x, dall, mine, n, err)) != GCKPT_XS_OK) goto out;
    RING_TRY(be->ring_grad(be, call, dq, mine));
out:
    ring_drop(x, dq, own_q);
    ring_drop(x, dall, own_d);
    ring_drop(x, all, own_a);
    ring_drop(x, mine, own_m);
    return rc;
}

static gckpt_xstatus ring(gckpt_exec *x, gckpt_xcall *call, bool backward, const exec_site *w, gckpt_err *err)
{
    exec_cp *c = x->cp;
    int32_t layer = exec_seg_layer(w->seg);
    uint8_t kind = x->sched.ev[w->index].kind;
    gckpt_xstatus rc;
    if (layer < 0 || (uint64_t)layer >= x->m.layers) return exec_fail(err, "%s: context parallelism: SDPA outside a layer", w->at);
    if (backward && c->copy[layer]) { /* the layer's o_proj-input copy goes at its backward */
        x->be->release(x->be, GCKPT_MEM_DEVICE, c->copy[layer], c->copy_bytes);
        c->copy[layer] = NULL;
        c->held -= c->copy_bytes;
    }
    /* the ring's transients: the schedule's memory before the op, its replayed peak and CP's buffers
     * then (core/cp_walk.c), above what the op's own allocations and CP's buffers hold now */
    uint64_t target = c->base + gckpt_cp_ring_peak(&x->m, &x->set, c->C, c->r, c->balanced, GCKPT_CP_ALLGATHER, backward) +
                      gckpt_cp_extra_before(&x->m, &x->set, c->S, c->C, c->r, elem(x), elem(x), layer);
    gckpt_memstat ms;
    x->be->memstat(x->be, &ms);
    void *tr = NULL;
    uint64_t trb = target > ms.allocated ? target - ms.allocated : 0;
    if (trb && (rc = take(x, trb, &tr, w->at, err)) != GCKPT_XS_OK) return rc;
    gckpt_ring g = {.cp = c->C, .rank = c->r, .s = x->set.seq, .pos = c->pos};
    arena a = {tr, trb, 0};
    rc = backward ? ring_bwd(x, call, &g, &a, w->at, err) : ring_fwd(x, call, &g, &a, w->at, err);
    if (tr) x->be->release(x->be, GCKPT_MEM_DEVICE, tr, trb);
    if (rc != GCKPT_XS_OK) return rc;
    bool keep = !backward && c->copy_bytes &&
                (kind == GCKPT_EV_RECOMPUTE || gckpt_layer_mode_of(x->set.every_n, false, (uint64_t)layer) == GCKPT_LAYER_PLAIN);
    if (keep && !c->copy[layer]) {
        if ((rc = take(x, c->copy_bytes, &c->copy[layer], w->at, err)) != GCKPT_XS_OK) return rc;
        c->held += c->copy_bytes;
    }
    return GCKPT_XS_OK;
}

/* The loss's factor: the rank's mean over its n_local targets becomes its sum over n_whole / C.
 * n_local is counted on the micro-batch's labels the executor made on the host (exec_cp_data),
 * the ones the loss's labels input was uploaded from. */
static float loss_factor(const gckpt_exec *x, const gckpt_xcall *call)
{
    uint64_t n = 0, T = x->set.micro_batch * x->set.seq, m = call->in[1].n < T ? call->in[1].n : T;
    for (uint64_t i = 0; i < m; i++) n += x->labels[i] != -100;
    return (float)((double)n * x->cp->C / (double)x->cp->n_whole);
}

/* A scalar on the backend times f, in its dtype (read back, then set). */
static gckpt_xstatus scale_scalar(gckpt_exec *x, gckpt_xt t, float f, const char *at, gckpt_err *err)
{
    unsigned char buf[8] = {0};
    unsigned size = gckpt_dtype_size((gckpt_dtype)t.dt);
    if (!size || size > sizeof buf) return exec_fail(err, "%s: context parallelism: the loss's dtype has no scalar", at);
    gckpt_xt h = {buf, 1, t.dt, 0, 0, 0, 0, 0, 0};
    gckpt_xstatus rc = x->be->download(x->be, buf, t.p, size);
    gckpt_xt one = t;
    one.n = 1;
    if (rc == GCKPT_XS_OK) rc = x->be->set_scalar(x->be, one, ld(&h, 0) * f);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, at, err);
}

gckpt_xstatus exec_cp_run_op(gckpt_exec *x, gckpt_xcall *call, bool backward, const exec_site *w, gckpt_err *err)
{
    const gckpt_op *op = call->op;
    if (op->prim == GCKPT_P_SDPA) return ring(x, call, backward, w, err);
    bool loss = op->prim == GCKPT_P_NLL && op->out[0] == x->r->loss;
    gckpt_xstatus rc;
    if (loss && !call->in[1].p) return exec_fail(err, "%s: context parallelism: the loss's labels are not bound", w->at);
    if (loss && backward && (rc = scale_scalar(x, call->gout, loss_factor(x, call), w->at, err)) != GCKPT_XS_OK) return rc;
    rc = backward ? x->be->backward(x->be, call) : x->be->forward(x->be, call);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    if (loss && !backward) return scale_scalar(x, call->out[0], loss_factor(x, call), w->at, err);
    return GCKPT_XS_OK;
}

void exec_cp_release(gckpt_exec *x)
{
    exec_cp *c = x->cp;
    if (!c) return;
    for (uint64_t l = 0; l < x->m.layers; l++)
        if (c->copy[l]) {
            x->be->release(x->be, GCKPT_MEM_DEVICE, c->copy[l], c->copy_bytes);
            c->copy[l] = NULL;
        }
    if (c->bufs) x->be->release(x->be, GCKPT_MEM_DEVICE, c->bufs, c->bufs_bytes);
    c->bufs = NULL;
    c->held = 0;
}

void exec_cp_free(gckpt_exec *x)
{
    exec_cp *c = x->cp;
    if (!c) return;
    free(c->pos);
    free(c->copy);
    free(c);
    x->cp = NULL;
}
