/* The ring attention's transient bytes (gckpt/core/cp.h, FINDINGS R-CP-10): torch 2.15's
 * _templated_ring_attention and _templated_ring_attention_backward replayed buffer by buffer.
 * Every tensor the Python code makes is a buffer with a reference count (the variables and the
 * collectives that hold it); one dropped by Python is gone at the next aten op, one a collective
 * releases inside its wait at that op. The peak is the most live bytes after an op's outputs,
 * above the call's inputs. Views (chunk, slice, reshape, flatten, unsqueeze, a same-dtype .to)
 * allocate nothing and count as ops (they apply what Python dropped before them). */
#include "gckpt/core/cp.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/core/dtype.h"

enum { MAXBUF = 64 };

typedef struct {
    uint64_t size[MAXBUF];
    int refs[MAXBUF];
    bool used[MAXBUF], pending[MAXBUF];
    uint64_t live, peak;
} ring_sim;

/* the Python variables of the two functions (and the merger's and step()'s locals) */
enum {
    V_NEXT_KV, V_KEY, V_ROT, V_OUT, V_LSE, V_S_OUT, V_M_OUT, V_M_LSE, V_T1, V_T2, V_T3, V_T4, V_NO, V_T5, V_T6,
    V_NL, V_BUFFER, V_LSEC, V_GQ, V_GK, V_GV, V_GQ_, V_GK_, V_GV_, V_DROT, V_NEXT_GKV, NVARS
};

typedef struct {
    ring_sim s;
    int var[NVARS];
} ring;

static void inc(ring *r, int b)
{
    if (b >= 0) r->s.refs[b]++;
}

/* one reference gone: at the next op, or now (a collective's own reference, released in its wait) */
static void dec(ring *r, int b, bool now)
{
    if (b < 0 || --r->s.refs[b]) return;
    if (now) {
        r->s.live -= r->s.size[b];
        r->s.used[b] = false;
    } else
        r->s.pending[b] = true;
}

static void set(ring *r, int v, int b)
{
    int old = r->var[v];
    inc(r, b);
    r->var[v] = b;
    dec(r, old, false);
}

static void drop(ring *r, int v) { set(r, v, -1); }

/* an aten op: what Python dropped before it is freed, then its outputs (size 0: none) allocated */
static void opn(ring *r, const uint64_t *sz, int n, int *out)
{
    for (int i = 0; i < MAXBUF; i++)
        if (r->s.pending[i]) {
            r->s.pending[i] = r->s.used[i] = false;
            r->s.live -= r->s.size[i];
        }
    for (int k = 0; k < n; k++) {
        out[k] = -1;
        if (!sz[k]) continue;
        int i = 0;
        while (i < MAXBUF && r->s.used[i]) i++;
        if (i == MAXBUF) abort(); /* the ring never holds this many: a bug here */
        r->s.used[i] = true;
        r->s.refs[i] = 0;
        r->s.size[i] = sz[k];
        r->s.live += sz[k];
        out[k] = i;
    }
    if (r->s.live > r->s.peak) r->s.peak = r->s.live;
}

static int op(ring *r, uint64_t a)
{
    int b;
    opn(r, &a, 1, &b);
    return b;
}

static void init(ring *r)
{
    memset(r, 0, sizeof *r);
    for (int v = 0; v < NVARS; v++) r->var[v] = -1;
}

typedef struct {
    uint64_t kv, q32, kv32, lse; /* one of K / V in the compute dtype; q, one of K / V in fp32; lse */
    uint64_t b, h, s, d, e;      /* batch, heads, local length, head_dim, compute element size */
    uint32_t cp, rank;
    bool balanced, alltoall;
} ring_shape;

/* _RotateMethod: the K/V exchange of step i < C - 1 (the cat is made; allgather gathers once) */
static void exchange(ring *r, const ring_shape *g, int *gathered, int *hold)
{
    int c = op(r, 2 * g->kv); /* torch.cat([key.flatten(), value.flatten()]) */
    set(r, V_NEXT_KV, c);
    if (!g->alltoall) {
        if (*gathered < 0) { /* all_gather_single: a C-times buffer; it holds its input until the wait */
            *gathered = op(r, (uint64_t)g->cp * 2 * g->kv);
            inc(r, *gathered);
            *hold = c;
            inc(r, c);
        }
    } else { /* permute_tensor to the next rank */
        set(r, V_ROT, op(r, 2 * g->kv));
        *hold = c;
        inc(r, c);
    }
}

/* next_buffer() at step i > 0: the wait (allgather: once) and the K/V views into what arrived */
static void receive(ring *r, const ring_shape *g, int gathered, int *hold, int i, int into)
{
    if (g->alltoall || i == 1) {
        op(r, 0); /* wait_tensor: the collective lets its input go */
        dec(r, *hold, true);
        *hold = -1;
    }
    int b = g->alltoall ? r->var[V_ROT] : gathered;
    set(r, into, b); /* forward: next_kv; backward: buffer (next_kv keeps its cat) */
    set(r, V_KEY, b);
    op(r, 0); /* the reshape views */
}

/* _is_causal_behavior: a block is skipped only without load balancing, above the diagonal */
static bool skipped(const ring_shape *g, uint32_t i) { return !g->balanced && i > g->rank; }

static uint64_t forward(const ring_shape *g)
{
    ring r;
    init(&r);
    int gathered = -1, hold = -1;
    for (uint32_t i = 0; i < g->cp; i++) {
        if (i > 0) receive(&r, g, gathered, &hold, (int)i, V_NEXT_KV);
        if (i + 1 < g->cp) {
            exchange(&r, g, &gathered, &hold);
            drop(&r, V_NEXT_KV); /* exchange_buffers returns None */
        }
        if (skipped(g, i)) continue;
        const bool partial = g->balanced && i > g->rank; /* the second half of q against the block */
        const uint64_t qs = partial ? g->s / 2 : g->s;
        const uint64_t ob = g->b * g->h * qs * g->d, lb = g->b * g->h * qs * 4;
        const uint64_t sz[2] = {ob * g->e, lb};
        int o[2];
        opn(&r, sz, 2, o); /* the per-block kernel: out, lse (fp32) */
        set(&r, V_OUT, o[0]);
        set(&r, V_LSE, o[1]);
        const int o32 = g->e != 4 ? op(&r, ob * 4) : (op(&r, 0), o[0]); /* _SDPAMerger.step: .to(float32) */
        set(&r, V_S_OUT, o32);
        op(&r, 0);
        op(&r, 0); /* lse .to, unsqueeze */
        if (r.var[V_M_LSE] < 0) {
            set(&r, V_M_LSE, o[1]);
            set(&r, V_M_OUT, o32);
        } else { /* _merge_one: out - sigmoid(block_lse - lse) * (out - block_out); lse - logsigmoid(..) */
            if (partial) {
                op(&r, 0);
                op(&r, 0); /* the merged lse's and out's second halves (chunk views) */
            }
            set(&r, V_T1, op(&r, lb));
            set(&r, V_T2, op(&r, lb));
            drop(&r, V_T1);
            set(&r, V_T3, op(&r, ob * 4));
            set(&r, V_T4, op(&r, ob * 4));
            drop(&r, V_T2);
            drop(&r, V_T3);
            set(&r, V_NO, op(&r, ob * 4));
            drop(&r, V_T4);
            set(&r, V_T5, op(&r, lb));
            set(&r, V_T6, op(&r, lb));
            drop(&r, V_T5);
            set(&r, V_NL, op(&r, lb));
            drop(&r, V_T6);
            if (partial) { /* _partial_update: the whole merged lse and out again, by torch.cat */
                op(&r, 0);
                set(&r, V_M_LSE, op(&r, g->lse));
                op(&r, 0);
                set(&r, V_M_OUT, op(&r, g->b * g->h * g->s * g->d * 4));
            } else {
                set(&r, V_M_LSE, r.var[V_NL]);
                set(&r, V_M_OUT, r.var[V_NO]);
            }
            drop(&r, V_NL);
            drop(&r, V_NO);
        }
        drop(&r, V_S_OUT);
    }
    op(&r, g->e != 4 ? g->b * g->h * g->s * g->d * g->e : 0); /* results(): out.to(the compute dtype) */
    return r.s.peak;
}

static uint64_t backward(const ring_shape *g)
{
    ring r;
    init(&r);
    set(&r, V_GQ, op(&r, g->q32)); /* the accumulators: zeros_like in fp32 (convert_to_f32) */
    set(&r, V_GK, op(&r, g->kv32));
    set(&r, V_GV, op(&r, g->kv32));
    int gathered = -1, hold = -1, dhold = -1;
    for (uint32_t i = 0; i < g->cp; i++) {
        if (i > 0) receive(&r, g, gathered, &hold, (int)i, V_BUFFER);
        if (i + 1 < g->cp) exchange(&r, g, &gathered, &hold); /* next_kv keeps its cat */
        const bool partial = g->balanced && i > g->rank, half_kv = g->balanced && i > 0 && i <= g->rank;
        if (!skipped(g, i)) {
            if (partial) set(&r, V_LSEC, op(&r, g->lse / 2)); /* logsumexp.chunk(2)[1].contiguous() */
            else drop(&r, V_LSEC);                             /* lse rebound to logsumexp */
            const uint64_t kb = half_kv ? g->kv / 2 : g->kv;
            /* the per-block backward: dq, dk, dv in the compute dtype */
            const uint64_t sz[3] = {(partial ? g->q32 / 2 : g->q32) / 4 * g->e, kb, kb};
            int o[3];
            opn(&r, sz, 3, o);
            set(&r, V_GQ_, o[0]);
            set(&r, V_GK_, o[1]);
            set(&r, V_GV_, o[2]);
        } else { /* three zeros_like, each rebinding its variable */
            set(&r, V_GQ_, op(&r, g->q32));
            set(&r, V_GK_, op(&r, g->kv32));
            set(&r, V_GV_, op(&r, g->kv32));
        }
        if (i == 0) {
            op(&r, 0);
            op(&r, 0); /* grad_key += grad_key_, grad_value += */
        } else { /* dK/dV from the previous rank: the wait, the views */
            op(&r, 0);
            dec(&r, dhold, true);
            dhold = -1;
            const int arrived = r.var[V_DROT];
            set(&r, V_NEXT_GKV, arrived);
            set(&r, V_GK, arrived);
            op(&r, 0);
            set(&r, V_GV, arrived);
            op(&r, 0);
            if (half_kv) { /* _partial_update(..., add=True): torch.cat makes them whole again */
                op(&r, 0);
                set(&r, V_GK, op(&r, g->kv32));
                op(&r, 0);
                set(&r, V_GV, op(&r, g->kv32));
            } else {
                op(&r, 0);
                op(&r, 0);
            }
        }
        /* cat(grad_key, grad_value) in fp32, sent to the next rank (always permute_tensor) */
        const int c = op(&r, 2 * g->kv32);
        set(&r, V_NEXT_GKV, c);
        set(&r, V_DROT, op(&r, 2 * g->kv32));
        dhold = c;
        inc(&r, c);
        if (!partial) op(&r, 0); /* grad_query += grad_query_ */
        else {
            op(&r, 0);
            set(&r, V_GQ, op(&r, g->q32));
        }
    }
    if (g->e != 4) set(&r, V_GQ, op(&r, g->q32 / 4 * g->e)); /* grad_query.to(query.dtype) */
    else op(&r, 0);
    op(&r, 0); /* the last dK/dV's wait */
    dec(&r, dhold, true);
    op(&r, g->e != 4 ? 2 * g->kv : 0); /* .to(key.dtype) */
    return r.s.peak;
}

uint64_t gckpt_cp_ring_peak(const gckpt_model *m, const gckpt_setting *s, uint32_t cp, uint32_t rank, bool balanced,
                            gckpt_cp_comm comm, bool backward_pass)
{
    const gckpt_dtype cd = s->precision == GCKPT_FP32 ? GCKPT_DT_F32
                           : s->precision == GCKPT_AMP_FP16 ? GCKPT_DT_F16 : GCKPT_DT_BF16;
    ring_shape g = {0};
    g.b = s->micro_batch;
    g.h = m->heads;
    g.s = s->seq;
    g.d = m->head_dim;
    g.e = gckpt_dtype_size(cd);
    g.kv = g.b * m->kv_heads * g.s * g.d * g.e;
    g.kv32 = g.kv / g.e * 4;
    g.q32 = g.b * g.h * g.s * g.d * 4;
    g.lse = g.b * g.h * g.s * 4;
    g.cp = cp;
    g.rank = rank;
    g.balanced = balanced;
    g.alltoall = comm == GCKPT_CP_ALLTOALL;
    return backward_pass ? backward(&g) : forward(&g);
}
