/* Tensor parallelism alone (gckpt-plan --tp T; transformers' tp_plan, FINDINGS R-TP-2, R-TP-5, R-TP-6):
 * every rank runs the schedule of its local model (gckpt_tp_local_model: heads / T, key/value heads / T,
 * chunk(intermediate); the embedding's and lm_head's chunk(V) rows, gckpt_tp_params_local) on the batch
 * every rank of the group shares, with the collectives inside the ops as the tp_plan's styles put them:
 * - colwise (q, k, v, gate, up): the weight's chunk of output rows; the input's gradient all-reduced;
 * - rowwise (o, down): the weight's chunk of input columns; the output all-reduced (also in a recompute);
 * - embedding_rowwise: the rank's rows looked up (other ids give zeros), the output all-reduced; its
 *   gradient whole [V, h] on every rank (Replicate, R-TP-5), the rank's rows stepped;
 * - colwise_gather_output (lm_head): the rank's logits columns, all-gathered into the whole logits (the
 *   loss on the whole vocabulary on every rank); the input's gradient all-reduced.
 * The norms are replicated: their gradients are the same on every rank (the Trainer's norm-gradient
 * all-reduce is not run); qwen3's q_norm / k_norm (replicated_with_grad_allreduce) see only the rank's
 * heads: their gradient contributions are all-reduced. Under amp-bf16 the rowwise outputs and the logits
 * are bf16, and a colwise input's gradient is all-reduced in fp32 after autocast's cast of it (the module's
 * input is the fp32 one, R-TP-6). Reductions add in rank order (comm.h). fp32, amp-bf16 or pure bf16 (the
 * weights, the residual stream and every collective bf16, as torch's DTensors of a bf16-loaded model:
 * R-TP-22). Everything runs through the backend (the vocabulary-parallel ops with its scratch, copy2d and
 * embed_rows, executor.h): the host backend, and the CUDA backend with NCCL (compiled, never run: unverified).
 * LoRA (TP alone, colwise targets): interp_tp_lora.c styles each lora_B as its layer (colwise: its input's
 * gradient all-reduced) and lora_A replicated; the frozen base is neither stepped nor hashed.
 * TP x FSDP (TP x DDP, HSDP x TP: interp_fsdp.c's exec_tp_fsdp_ops) runs these ops on FSDP2's unsharded
 * local weights, its collectives in the TP group (tp_coll); FSDP2 shards, steps and hashes the local
 * tensors (exec_tp_index: their elements' places in the whole tensor). */
#include "interp_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/core/dtype.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/tp.h"

/* TP_REPL_AR: replicated_with_grad_allreduce (qwen3's q_norm / k_norm: each rank's heads give a part of
 * their gradient, all-reduced after every backward, R-TP-2, R-TP-6) */
typedef enum { TP_REPL, TP_COL, TP_ROW, TP_VOCAB, TP_REPL_AR } tp_style;

/* The tp_plan of the llama-like models measured (R-TP-2), by parameter name; `inter`: the sharded
 * dimension is the intermediate size (uneven: torch.chunk), else heads x head_dim (divisible). */
static const struct {
    const char *suffix;
    uint8_t style;
    bool inter;
} tp_plan[] = {
    {"q_proj.weight", TP_COL, false},      {"k_proj.weight", TP_COL, false},   {"v_proj.weight", TP_COL, false},
    {"o_proj.weight", TP_ROW, false},      {"gate_proj.weight", TP_COL, true}, {"up_proj.weight", TP_COL, true},
    {"down_proj.weight", TP_ROW, true},    {"embed_tokens.weight", TP_VOCAB, false},
    {"lm_head.weight", TP_VOCAB, false},   {"q_norm.weight", TP_REPL_AR, false}, {"k_norm.weight", TP_REPL_AR, false},
};

struct exec_tp {
    uint32_t T, r;
    void *mesh;          /* the kept scalars, buffers and device meshes (R-TP-4): held, never read */
    uint64_t mesh_bytes;
    int8_t *style;       /* per recipe tensor: tp_style of a parameter (and of its autocast cast) */
    bool *inter;
    bool *cin;           /* per recipe tensor: autocast's cast of a colwise module's (or the head's) input */
};

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

bool exec_tp_prepare(gckpt_exec *x, gckpt_err *err)
{
    if (x->set.precision != GCKPT_FP32 && x->set.precision != GCKPT_AMP_BF16 && x->set.precision != GCKPT_BF16) {
        gckpt_seterr(err, "tensor parallelism is executed in fp32, bf16 and amp-bf16 only (this plan: %s)",
                     gckpt_precision_names[x->set.precision]);
        return false;
    }
    if (x->set.optimizer != GCKPT_ADAMW && x->set.optimizer != GCKPT_SGD) {
        gckpt_seterr(err, "tensor parallelism is executed with adamw or sgd only");
        return false;
    }
    if (!exec_tp_lora_ok(x, err)) return false; /* LoRA: what gckpt-plan plans (interp_tp_lora.c) */
    exec_tp *t = x->tp = calloc(1, sizeof *x->tp);
    if (!t || !(t->style = calloc((size_t)x->r->nt, 1)) || !(t->inter = calloc((size_t)x->r->nt, sizeof *t->inter)) ||
        !(t->cin = calloc((size_t)x->r->nt, sizeof *t->cin))) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    t->T = x->set.layout.tp;
    t->r = x->set.layout.tp_rank;
    for (int k = 0; k < x->r->nt; k++) {
        if (x->r->t[k].kind != GCKPT_T_PARAM) continue;
        for (size_t j = 0; j < sizeof tp_plan / sizeof tp_plan[0]; j++)
            if (ends_with(x->r->t[k].name, tp_plan[j].suffix)) {
                t->style[k] = (int8_t)tp_plan[j].style;
                t->inter[k] = tp_plan[j].inter;
            }
        bool inter; /* LoRA: lora_B sharded like its colwise layer, lora_A replicated (interp_tp_lora.c) */
        int lora = exec_tp_lora_role(x->r->t[k].name, &inter);
        if (lora >= 0) {
            t->style[k] = (int8_t)(lora ? TP_COL : TP_REPL);
            t->inter[k] = inter;
        }
    }
    /* amp-bf16: autocast's cast of a styled weight is styled as it; the cast of a colwise (or the head's)
     * input is where its fp32 input gradient is all-reduced (R-TP-6: the module's input is the fp32 one) */
    for (int o = 0; o < x->r->nop; o++) {
        const gckpt_op *op = &x->r->op[o];
        if (op->prim == GCKPT_P_CAST && x->r->t[op->in[0]].kind == GCKPT_T_PARAM) t->style[op->out[0]] = t->style[op->in[0]];
    }
    for (int o = 0; o < x->r->nop; o++) {
        const gckpt_op *op = &x->r->op[o];
        if (op->prim != GCKPT_P_LINEAR || (t->style[op->in[1]] != TP_COL && t->style[op->in[1]] != TP_VOCAB)) continue;
        for (int c = 0; c < x->r->nop; c++)
            if (x->r->op[c].prim == GCKPT_P_CAST && x->r->op[c].out[0] == op->in[0]) t->cin[op->in[0]] = true;
    }
    return true;
}

static gckpt_xstatus tp_setup(gckpt_exec *x, gckpt_err *err)
{
    exec_tp *t = x->tp;
    /* AdamW's step counters, the rotary buffers and the device meshes (core/ctx.c: the context's parallel
     * bytes, R-TP-4): held as one buffer, never read */
    t->mesh_bytes = x->ctx.parallel;
    gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, t->mesh_bytes, &t->mesh);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "allocating the kept scalars", err);
}

/* The whole tensor's length of a sharded dimension, and the rank's first index in it (torch.chunk). */
static uint64_t full_dim(const gckpt_exec *x, int tensor, uint64_t local)
{
    const exec_tp *t = x->tp;
    if (t->style[tensor] == TP_VOCAB) return x->tp_full.vocab;
    return t->inter[tensor] ? x->tp_full.intermediate : local * t->T;
}
static uint64_t chunk_start(const exec_tp *t, uint64_t full) { return (uint64_t)t->r * ((full + t->T - 1) / t->T); }

/* The index in the whole tensor of the local element (i, j) of an instance of rows x cols. */
static uint64_t global_index(const gckpt_exec *x, int tensor, uint64_t rows, uint64_t cols, uint64_t i, uint64_t j)
{
    switch (x->tp->style[tensor]) {
    case TP_COL: case TP_VOCAB: return (chunk_start(x->tp, full_dim(x, tensor, rows)) + i) * cols + j;
    case TP_ROW: {
        uint64_t full = full_dim(x, tensor, cols);
        return i * full + chunk_start(x->tp, full) + j;
    }
    default: return i * cols + j;
    }
}

/* The rank's elements of what one process initialises (interp.c init_params), states zero. */
static gckpt_xstatus tp_init_param(gckpt_exec *x, size_t j, gckpt_init how, float scale, uint64_t key, gckpt_err *err)
{
    param_t *p = &x->params[j];
    uint64_t rows = p->spec->rows, cols = p->spec->cols, n = rows * cols;
    gckpt_dtype dt = (gckpt_dtype)p->spec->weight.dtype; /* fp32, or bf16 under pure bf16 */
    if (n != p->spec->weight.numel || (dt != GCKPT_DT_F32 && dt != GCKPT_DT_BF16))
        return exec_fail(err, "tensor parallelism: %s is not an fp32 or bf16 %llu x %llu weight", p->spec->name,
                         (unsigned long long)rows, (unsigned long long)cols);
    void *v = malloc(gckpt_dtype_size(dt) * (n ? n : 1));
    if (!v) return exec_fail(err, "out of memory");
    gckpt_xt vt = {v, n, (uint8_t)dt, 0, 0, 0, 0, 0, 0}; /* rounded as one process's init (host_backend.c) */
    for (uint64_t i = 0; i < rows; i++)
        for (uint64_t k = 0; k < cols; k++)
            st(&vt, i * cols + k, how == GCKPT_INIT_CONST ? scale
                                                          : gckpt_rng_uniform(key, global_index(x, p->tensor, rows, cols, i, k), scale));
    gckpt_xstatus rc = x->be->upload(x->be, p->w, v, n * gckpt_dtype_size(dt));
    free(v);
    for (int k = 0; rc == GCKPT_XS_OK && k < p->spec->nstates && p->st[k]; k++)
        rc = x->be->init(x->be, exec_state_view(p, k), GCKPT_INIT_CONST, 0.0f, 0);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "initialising a TP shard", err);
}

/* A collective in the TP group: the world under TP alone, its own group (tp consecutive ranks) under
 * TP x FSDP (main_run.c joins it). */
static gckpt_xstatus tp_coll(gckpt_exec *x, gckpt_coll op, gckpt_xt send, gckpt_xt recv)
{
    if (!gckpt_layout_multi(&x->set.layout)) return x->be->collective(x->be, op, GCKPT_RED_SUM, send, recv, 0);
    if (!x->be->collective_group) {
        gckpt_seterr(&x->be->err, "the %s backend has no process groups (TP x FSDP)", x->be->name);
        return GCKPT_XS_ERROR;
    }
    return x->be->collective_group(x->be, GCKPT_GROUP_TP, op, GCKPT_RED_SUM, send, recv);
}

/* An all-reduce (sum, rank order, in fp32 rounded to v's dtype after each addition) of v in place over
 * the TP group. */
static gckpt_xstatus all_reduce(gckpt_exec *x, gckpt_xt v, const exec_site *w, gckpt_err *err)
{
    if (v.vW) return exec_fail(err, "%s: tensor parallelism: an all-reduce of a strided view", w->at);
    gckpt_xstatus rc = tp_coll(x, GCKPT_COLL_ALL_REDUCE, v, v);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

/* The weight input of an op (a parameter, or autocast's cast of one), -1 when none. */
static int weight_of(const gckpt_exec *x, const gckpt_op *op, int *k)
{
    for (int j = 0; j < op->nin; j++)
        if (x->r->t[op->in[j]].kind == GCKPT_T_PARAM || x->tp->style[op->in[j]] != TP_REPL) {
            *k = j;
            return op->in[j];
        }
    return -1;
}

static bool dense(const gckpt_xt *v) { return v->p && !v->vW; }

/* embedding_rowwise's forward: the rank's rows of the ids it holds, zeros for the others, all-reduced. */
static gckpt_xstatus embed_fwd(gckpt_exec *x, gckpt_xcall *c, const exec_site *w, gckpt_err *err)
{
    const exec_tp *t = x->tp;
    const gckpt_xt *tab = &c->in[0], *ids = &c->in[1], *o = &c->out[0];
    uint64_t W = c->op->width, V = x->tp_full.vocab, lo = chunk_start(t, V), rows = gckpt_tp_chunk(V, t->T, t->r);
    /* the table's dtype: fp32, or bf16 under pure bf16 (the all-reduce in it, R-TP-22) */
    if (!dense(tab) || !dense(o) || tab->dt != o->dt || !ids->p || tab->n != rows * W || o->n != ids->n * W)
        return exec_fail(err, "%s: tensor parallelism: the embedding is not a table of the rank's %llu rows", w->at,
                         (unsigned long long)rows);
    gckpt_xstatus rc = x->be->embed_rows(x->be, *o, *tab, *ids, lo, V);
    return rc == GCKPT_XS_OK ? all_reduce(x, *o, w, err) : exec_be_fail(x, rc, w->at, err);
}

/* A dense rows x cols matrix of dtype dt at p. */
static gckpt_xt mat(void *p, uint8_t dt, uint64_t rows, uint64_t cols)
{
    return (gckpt_xt){.p = p, .n = rows * cols, .dt = dt, .cols = cols, .rows = rows};
}

/* lm_head's linear on the rank's rows only (rows x K of the weight, its first rows x K elements: the
 * parameter, or autocast's cast of it at its buffer's start): the call c with out_f = rows. */
static gckpt_xcall rank_linear(const gckpt_xcall *c, gckpt_op *op, uint64_t rows)
{
    *op = *c->op;
    op->out_f = rows;
    gckpt_xcall l = *c;
    l.op = op;
    l.in[1] = mat(c->in[1].p, c->in[1].dt, rows, op->in_f);
    if (l.gin[1].p) l.gin[1] = mat(c->gin[1].p, c->gin[1].dt, rows, op->in_f);
    return l;
}

/* colwise_gather_output's forward: the rank's logits columns (in the compute dtype: the backend's
 * linear on its rows), then every rank's gathered into the whole logits [tokens, V] (the pieces padded
 * to ceil(V / T) columns, as DTensor pads them). The temporaries are the backend's scratch. */
static gckpt_xstatus head_fwd(gckpt_exec *x, gckpt_xcall *c, const exec_site *w, gckpt_err *err)
{
    const exec_tp *t = x->tp;
    gckpt_backend *be = x->be;
    const gckpt_xt *in = &c->in[0], *wt = &c->in[1], *o = &c->out[0];
    uint64_t K = c->op->in_f, V = x->tp_full.vocab, part = (V + t->T - 1) / t->T, M = in->n / K,
             rows = gckpt_tp_chunk(V, t->T, t->r), sz = gckpt_dtype_size((gckpt_dtype)o->dt);
    if (!dense(in) || !dense(wt) || !dense(o) || c->op->out_f != V || o->n != M * V || wt->n < rows * K || c->op->nin > 2)
        return exec_fail(err, "%s: tensor parallelism: lm_head is not a linear onto the vocabulary", w->at);
    void *pk = NULL, *all = NULL, *mine = NULL;
    gckpt_xstatus rc = be->scratch(be, M * part * sz, &pk);
    if (rc == GCKPT_XS_OK) rc = be->scratch(be, M * part * t->T * sz, &all);
    if (rc == GCKPT_XS_OK && rows < part) rc = be->scratch(be, M * rows * sz, &mine);
    gckpt_xt piece = mat(pk, o->dt, M, part);
    if (rc == GCKPT_XS_OK && rows < part) rc = be->init(be, piece, GCKPT_INIT_CONST, 0.0f, 0); /* the padding */
    if (rc == GCKPT_XS_OK && rows) { /* rounded as one process's linear */
        gckpt_op op;
        gckpt_xcall l = rank_linear(c, &op, rows);
        l.out[0] = mat(rows < part ? mine : pk, o->dt, M, rows);
        l.out[1] = (gckpt_xt){0};
        rc = be->forward(be, &l);
        if (rc == GCKPT_XS_OK && rows < part) rc = be->copy2d(be, pk, part * sz, mine, rows * sz, rows * sz, M);
    }
    if (rc == GCKPT_XS_OK) rc = tp_coll(x, GCKPT_COLL_ALL_GATHER, piece, mat(all, o->dt, M * t->T, part));
    for (uint32_t r = 0; rc == GCKPT_XS_OK && r < t->T; r++) /* rank r's block [M, part] into its columns */
        rc = be->copy2d(be, (char *)o->p + (uint64_t)r * part * sz, V * sz, (char *)all + (uint64_t)r * M * part * sz,
                        part * sz, gckpt_tp_chunk(V, t->T, r) * sz, M);
    be->scratch_free(be, pk);
    be->scratch_free(be, all);
    be->scratch_free(be, mine);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

/* Its backward from the whole logits' gradient: the rank's columns (copied out) give its rows'
 * gradient and its partial input gradient (all-reduced by the caller), the backend's linear backward on
 * its rows. */
static gckpt_xstatus head_bwd(gckpt_exec *x, gckpt_xcall *c, const exec_site *w, gckpt_err *err)
{
    const exec_tp *t = x->tp;
    gckpt_backend *be = x->be;
    uint64_t K = c->op->in_f, V = x->tp_full.vocab, M = c->gout.n / V, lo = chunk_start(t, V),
             rows = gckpt_tp_chunk(V, t->T, t->r), sz = gckpt_dtype_size((gckpt_dtype)c->gout.dt);
    if (!dense(&c->gout) || (c->gin[0].p && (!dense(&c->gin[0]) || !dense(&c->in[1]))) ||
        (c->gin[1].p && (!dense(&c->gin[1]) || !dense(&c->in[0]) || c->gin[1].n < rows * K)))
        return exec_fail(err, "%s: tensor parallelism: lm_head's gradients", w->at);
    if (!rows) { /* no rows here: no part of the input's gradient */
        gckpt_xstatus rc = c->gin[0].p ? be->init(be, c->gin[0], GCKPT_INIT_CONST, 0.0f, 0) : GCKPT_XS_OK;
        return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
    }
    void *g = NULL;
    gckpt_xstatus rc = be->scratch(be, M * rows * sz, &g);
    if (rc == GCKPT_XS_OK) rc = be->copy2d(be, g, rows * sz, (char *)c->gout.p + lo * sz, V * sz, rows * sz, M);
    if (rc == GCKPT_XS_OK) {
        gckpt_op op;
        gckpt_xcall l = rank_linear(c, &op, rows);
        l.gout = mat(g, c->gout.dt, M, rows);
        rc = be->backward(be, &l);
    }
    be->scratch_free(be, g);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

gckpt_xstatus exec_tp_run_op(gckpt_exec *x, gckpt_xcall *c, bool backward, const exec_site *w, gckpt_err *err)
{
    const exec_tp *t = x->tp;
    int k = -1, wt = weight_of(x, c->op, &k);
    int style = wt >= 0 ? t->style[wt] : TP_REPL;
    bool vocab = style == TP_VOCAB, embed = vocab && c->op->prim == GCKPT_P_EMBED, cast = c->op->prim == GCKPT_P_CAST;
    /* the cast's input (the colwise module's, the head's) takes the all-reduce of its fp32 gradient */
    bool in_cast = c->op->nin > 0 && t->cin[c->op->in[0]];
    gckpt_xstatus rc;
    if (vocab && !embed && !cast && c->op->prim != GCKPT_P_LINEAR)
        return exec_fail(err, "%s: tensor parallelism: %s is not an embedding or a linear", w->at, c->op->name);
    if (!backward) {
        if (embed) return embed_fwd(x, c, w, err);
        if (vocab && cast) { /* autocast's cast of lm_head's weight: the rank's rows, at the buffer's start */
            if (!dense(&c->in[0]) || !dense(&c->out[0]) || c->out[0].n < c->in[0].n)
                return exec_fail(err, "%s: tensor parallelism: the cast of lm_head's rows", w->at);
            rc = x->be->add(x->be, mat(c->out[0].p, c->out[0].dt, 1, c->in[0].n), (gckpt_xt){0}, c->in[0]);
            return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
        }
        if (vocab) return head_fwd(x, c, w, err);
        if ((rc = x->be->forward(x->be, c)) != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
        /* rowwise: the partial output summed over the ranks (a recompute too: R-TP-6) */
        return style == TP_ROW && !cast ? all_reduce(x, c->out[0], w, err) : GCKPT_XS_OK;
    }
    if (vocab && cast) { /* the cast of lm_head's rows: their gradient, at the buffer's start, into the weight's */
        if (c->gin[0].p && (!dense(&c->gin[0]) || !dense(&c->gout) || c->gout.n < c->gin[0].n))
            return exec_fail(err, "%s: tensor parallelism: the gradient of lm_head's rows", w->at);
        rc = c->gin[0].p ? x->be->add(x->be, c->gin[0], (gckpt_xt){0}, mat(c->gout.p, c->gout.dt, 1, c->gin[0].n))
                         : GCKPT_XS_OK;
        return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
    }
    if (vocab && !embed) rc = head_bwd(x, c, w, err);
    else if ((rc = x->be->backward(x->be, c)) != GCKPT_XS_OK) /* the embedding's: its whole [V, h] gradient */
        return exec_be_fail(x, rc, w->at, err);
    if (rc != GCKPT_XS_OK) return rc;
    /* replicated_with_grad_allreduce: the weight's partial gradient (this op's contribution) summed */
    if (style == TP_REPL_AR && c->gin[k].p && (rc = all_reduce(x, c->gin[k], w, err)) != GCKPT_XS_OK) return rc;
    /* autocast's cast of a colwise (or the head's) input: its fp32 gradient summed, each module's own */
    if (cast && c->op->out[0] >= 0 && t->cin[c->op->out[0]] && c->gin[0].p) return all_reduce(x, c->gin[0], w, err);
    /* colwise and the head, their input not cast (fp32): the input's partial gradient summed (R-TP-6) */
    bool col = !cast && (style == TP_COL || (vocab && !embed)) && k != 0;
    return col && !in_cast && c->gin[0].p ? all_reduce(x, c->gin[0], w, err) : GCKPT_XS_OK;
}

/* AdamW or SGD on the rank's weights; the embedding's gradient is whole: its rows of the rank (R-TP-5), and
 * so is SGD's momentum buffer, a clone of it (R-TP-23): its rows stepped, as they are all the rank's
 * parameter reads. */
static gckpt_xstatus tp_step(gckpt_exec *x, const exec_site *w, gckpt_err *err)
{
    uint64_t step = x->step + 1;
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (!p->spec->trainable || p->fwd_only) continue; /* frozen (LoRA's base): no .grad */
        if (!exec_live(x, p->grad))
            return exec_fail(err, "%s: parameter %s (layer %d) has no gradient", w->at, x->r->t[p->tensor].name, p->layer);
        gckpt_xt g = exec_inst_view(x, p->grad), pw = exec_param_view(p);
        if (g.n != pw.n) { /* the embedding: the rank's rows of its whole gradient */
            uint64_t lo = chunk_start(x->tp, x->tp_full.vocab) * p->spec->cols;
            if (g.vW || lo + pw.n > g.n) return exec_fail(err, "%s: %s: its gradient does not hold its rows", w->at, p->spec->name);
            g.p = (char *)g.p + lo * gckpt_dtype_size((gckpt_dtype)g.dt);
            g.n = pw.n;
            g.rows = p->spec->rows;
        }
        gckpt_optcall c = exec_optcall(x, pw, g, step);
        c.s1 = exec_state_view(p, 0);
        if (p->spec->nstates >= 2) c.s2 = exec_state_view(p, 1);
        if (c.s1.n != pw.n) { /* SGD's whole momentum of the embedding: the rank's rows, as its gradient's */
            uint64_t lo = chunk_start(x->tp, x->tp_full.vocab) * p->spec->cols;
            if (c.s1.vW || lo + pw.n > c.s1.n)
                return exec_fail(err, "%s: %s: its optimizer state does not hold its rows", w->at, p->spec->name);
            c.s1.p = (char *)c.s1.p + lo * gckpt_dtype_size((gckpt_dtype)c.s1.dt);
            c.s1.n = pw.n;
        }
        gckpt_xstatus rc = x->be->optim(x->be, &c);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    }
    return GCKPT_XS_OK;
}

/* The gradient checksum of the whole model: each rank hashes its shards' elements at their indices in the
 * whole tensor, the replicated ones (the norms, the embedding's whole gradient) rank 0 only; the sums added. */
static gckpt_xstatus tp_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err)
{
    *hash = 0;
    *sumsq = 0;
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (!p->spec->trainable || p->fwd_only) continue; /* frozen (LoRA's base): no .grad */
        if (!exec_live(x, p->grad)) return exec_fail(err, "checksum: parameter %s has no gradient", x->r->t[p->tensor].name);
        gckpt_xt g = exec_inst_view(x, p->grad);
        int style = x->tp->style[p->tensor];
        bool whole = style == TP_REPL || style == TP_REPL_AR || g.n != p->spec->rows * p->spec->cols; /* or the embedding's */
        if (whole && x->tp->r) continue;
        uint64_t rows = whole ? g.n / p->spec->cols : p->spec->rows, cols = p->spec->cols;
        for (uint64_t r = 0; r < rows; r++) { /* row by row: a rowwise shard's rows are not contiguous */
            gckpt_xt row = {(char *)g.p + r * cols * gckpt_dtype_size((gckpt_dtype)g.dt), cols, g.dt, 0, 0, 0, 0, 0, 0};
            uint64_t at = whole ? r * cols : global_index(x, p->tensor, rows, cols, r, 0);
            gckpt_xstatus rc = exec_piece_hash(x, p, row, at, hash, sumsq, err);
            if (rc != GCKPT_XS_OK) return rc;
        }
    }
    return exec_ranks_hash(x, hash, sumsq, err);
}

uint64_t exec_tp_index(const gckpt_exec *x, const param_t *p, uint64_t e)
{
    uint64_t cols = p->spec->cols ? p->spec->cols : 1;
    return x->tp ? global_index(x, p->tensor, p->spec->rows, cols, e / cols, e % cols) : e;
}

uint64_t exec_tp_grad_lo(const gckpt_exec *x, const param_t *p, uint64_t n)
{
    if (!x->tp || x->tp->style[p->tensor] != TP_VOCAB || n == p->spec->numel) return 0;
    return chunk_start(x->tp, x->tp_full.vocab) * p->spec->cols; /* the embedding's whole gradient */
}

gckpt_xstatus exec_tp_piece_hash(gckpt_exec *x, const param_t *p, gckpt_xt src, uint64_t lo, uint64_t *h, double *ss,
                                 gckpt_err *err)
{
    int style = x->tp->style[p->tensor];
    if ((style == TP_REPL || style == TP_REPL_AR) && x->tp->r) return GCKPT_XS_OK; /* the same on every TP rank */
    uint64_t cols = p->spec->cols ? p->spec->cols : 1, sz = gckpt_dtype_size((gckpt_dtype)src.dt);
    for (uint64_t e = lo; e < lo + src.n;) { /* by local rows: a rowwise shard's rows are not contiguous */
        uint64_t n = cols - e % cols < lo + src.n - e ? cols - e % cols : lo + src.n - e;
        gckpt_xt run = {(char *)src.p + (e - lo) * sz, n, src.dt, 0, 0, 0, 0, 0, 0};
        gckpt_xstatus rc = exec_piece_hash(x, p, run, exec_tp_index(x, p, e), h, ss, err);
        if (rc != GCKPT_XS_OK) return rc;
        e += n;
    }
    return GCKPT_XS_OK;
}

static void tp_release(gckpt_exec *x)
{
    exec_tp *t = x->tp;
    if (t && t->mesh) x->be->release(x->be, GCKPT_MEM_DEVICE, t->mesh, t->mesh_bytes);
    if (t) t->mesh = NULL;
}

void exec_tp_free(gckpt_exec *x)
{
    exec_tp *t = x->tp;
    if (!t) return;
    free(t->style);
    free(t->inter);
    free(t->cin);
    free(t);
    x->tp = NULL;
}

const exec_par_ops exec_tp_ops = {.prepare = exec_tp_prepare,
                                  .setup = tp_setup,
                                  .init_param = tp_init_param,
                                  .run_op = exec_tp_run_op,
                                  .step = tp_step,
                                  .checksum = tp_checksum,
                                  .release = tp_release,
                                  .free = exec_tp_free};
