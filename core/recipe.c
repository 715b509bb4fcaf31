/* The recipe tracer. Each primitive below mirrors one PyTorch op as Hugging Face's
 * modelling code calls it: the dtype of its output (type promotion, or torch.autocast's
 * lower-precision / fp32 op lists under AMP), and which inputs or outputs autograd saves
 * for backward (derivatives.yaml: mul saves the *other* operand of each input that
 * requires grad; pow and silu save their input; rsqrt, tanh and softmax their output;
 * add, cat, neg and casts save nothing). Views and no-op casts return the same tensor,
 * so saved tensors are de-duplicated by storage as autograd does. */
#include "gckpt/core/recipe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

enum { F32 = 4, BF16 = 2, I64 = 8, BOOL = 1 };

typedef struct {
    gckpt_recipe *r;
    const gckpt_model *m;
    int sec;
    bool amp;
    uint8_t C;        /* matmul / autocast compute dtype bytes */
    uint8_t D;        /* dtype of the residual stream */
    const char *pfx;  /* name prefix of the current module */
    double eps;       /* norm epsilon */
    bool cpu;         /* GCKPT_TARGET_CPU */
} B;

static int tnew(B *b, const char *name, int kind, uint8_t dtype, uint64_t c0, uint64_t cS,
                uint64_t cT, uint64_t cBSS, bool rg)
{
    gckpt_recipe *r = b->r;
    int i = r->nt++;
    gckpt_tensor *t = &r->t[i];
    memset(t, 0, sizeof *t);
    if (b->pfx && *b->pfx)
        snprintf(t->name, sizeof t->name, "%s.%s", b->pfx, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = (uint8_t)kind;
    t->section = (uint8_t)b->sec;
    t->dtype = dtype;
    t->c0 = c0;
    t->cS = cS;
    t->cT = cT;
    t->cBSS = cBSS;
    t->requires_grad = rg;
    t->hold_to = -1;
    return i;
}

/* A new activation shaped like x (same element count) with dtype dt. */
static int like(B *b, const char *name, int x, uint8_t dt, bool rg)
{
    const gckpt_tensor *t = &b->r->t[x];
    return tnew(b, name, GCKPT_T_ACT, dt, t->c0, t->cS, t->cT, t->cBSS, rg);
}

static bool rg(B *b, int x) { return b->r->t[x].requires_grad; }
static uint8_t dt(B *b, int x) { return b->r->t[x].dtype; }

static int opnew(B *b, const char *name, int kind, int nin, const int *in, int out, int out2,
                 int nsaved, const int *saved)
{
    gckpt_recipe *r = b->r;
    int i = r->nop++;
    gckpt_op *o = &r->op[i];
    memset(o, 0, sizeof *o);
    if (b->pfx && *b->pfx)
        snprintf(o->name, sizeof o->name, "%s.%s", b->pfx, name);
    else
        snprintf(o->name, sizeof o->name, "%s", name);
    o->kind = (uint8_t)kind;
    o->section = (uint8_t)b->sec;
    o->nin = (uint8_t)nin;
    for (int k = 0; k < nin; k++) o->in[k] = (int16_t)in[k];
    o->out[0] = (int16_t)out;
    o->out[1] = (int16_t)out2;
    o->nsaved = 0;
    for (int k = 0; k < nsaved; k++) {
        if (saved[k] < 0) continue;
        /* parameters cost nothing to save; dedup repeated storages */
        if (r->t[saved[k]].kind == GCKPT_T_PARAM) continue;
        bool dup = false;
        for (int q = 0; q < o->nsaved; q++) dup |= o->saved[q] == saved[k];
        if (!dup) o->saved[o->nsaved++] = (int16_t)saved[k];
    }
    o->bwd_mult = 1.0;
    return i;
}

static gckpt_op *last(B *b) { return &b->r->op[b->r->nop - 1]; }

/* Python references of HF's code: a variable (or an argument of a function still
 * running) keeps tensor t alive until op `until` has run; the latest reference wins.
 * HOLD_END: until the section's last op (the layer returns). Activations only. */
#define HOLD_END INT16_MAX
static void hold(B *b, int t, int until)
{
    if (t < 0) return;
    gckpt_tensor *tt = &b->r->t[t];
    if (tt->kind != GCKPT_T_ACT) return;
    if (tt->hold_to < until) tt->hold_to = (int16_t)until;
}

/* ... until the op just traced has run (the function holding it returns after it). */
static void hold_here(B *b, int t) { hold(b, t, b->r->nop - 1); }

static void setprim(B *b, int prim, int bcast, double sa, double sb, uint64_t width)
{
    gckpt_op *o = last(b);
    o->prim = (uint8_t)prim;
    o->bcast = (uint8_t)bcast;
    o->sa = sa;
    o->sb = sb;
    o->width = width;
}

/* Broadcast mode of y against x from their symbolic shapes. */
static int bcast_of(B *b, int x, int y, uint64_t *width)
{
    const gckpt_tensor *tx = &b->r->t[x], *ty = &b->r->t[y];
    *width = 0;
    if (tx->c0 == ty->c0 && tx->cS == ty->cS && tx->cT == ty->cT && tx->cBSS == ty->cBSS)
        return GCKPT_BC_NONE;
    if (ty->kind == GCKPT_T_PARAM) { *width = ty->c0; return GCKPT_BC_COL; }
    if (ty->cBSS) return GCKPT_BC_MASK;
    if (ty->cS) { *width = ty->cS; return GCKPT_BC_TABLE; }
    *width = tx->cT / ty->cT;
    return GCKPT_BC_ROW;
}

/* ---- primitives -------------------------------------------------------------------- */

/* x.to(dtype): same dtype is a no-op returning x (no copy, no op). */
static int to(B *b, int x, uint8_t dtype, const char *name)
{
    if (dt(b, x) == dtype) return x;
    int y = like(b, name, x, dtype, rg(b, x));
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, y, -1, 0, NULL);
    setprim(b, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    return y;
}

/* autocast's cast of an op input to the op's compute dtype (no-op without AMP). */
static int ac(B *b, int x, uint8_t dtype, const char *name)
{
    return b->amp ? to(b, x, dtype, name) : x;
}

static uint8_t promote(B *b, int x, int y)
{
    /* floating promotion between float32 and a 16-bit type: the wider wins */
    return dt(b, x) >= dt(b, y) ? dt(b, x) : dt(b, y);
}

/* The CPU target's mixed-dtype elementwise op x (op) y (recipe.h, fws_promote): the
 * narrower operand is copied to the result dtype for the forward, and for a mul the
 * backward's grad * other copies a narrower `other` the same way. */
static void cpu_promotion(B *b, int x, int y)
{
    if (!b->cpu || dt(b, x) == dt(b, y)) return;
    gckpt_op *op = last(b);
    int narrow = dt(b, x) < dt(b, y) ? 0 : 1;
    op->fws_promote = (uint8_t)(1u << narrow);
    if (op->prim == GCKPT_P_MUL && rg(b, narrow ? x : y)) op->bws_promote = (uint8_t)(1u << narrow);
}

/* x * y (broadcasting; the output is shaped like the larger operand x). A broadcast y
 * that needs a gradient gets grad * x at the output's size first; the autograd engine
 * then reduces it to y's shape (validate_outputs): one output-sized temporary. */
static int mul(B *b, int x, int y, const char *name)
{
    int o = like(b, name, x, promote(b, x, y), rg(b, x) || rg(b, y));
    int saved[2] = {rg(b, x) ? y : -1, rg(b, y) ? x : -1};
    opnew(b, name, GCKPT_OP_ELEM, 2, (int[]){x, y}, o, -1, 2, saved);
    uint64_t w;
    int bc = bcast_of(b, x, y, &w);
    setprim(b, GCKPT_P_MUL, bc, 0, 0, w);
    last(b)->bws_out = bc != GCKPT_BC_NONE && rg(b, y);
    cpu_promotion(b, x, y);
    return o;
}

/* x * sa + sb with python scalars: nothing saved. */
static int scal(B *b, int x, const char *name, double sa, double sb)
{
    int o = like(b, name, x, dt(b, x), rg(b, x));
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(b, GCKPT_P_AFFINE, GCKPT_BC_NONE, sa, sb, 0);
    return o;
}

/* x + y: nothing saved; the output grad flows to an input of the same dtype unchanged. */
static int add(B *b, int x, int y, const char *name)
{
    int o = like(b, name, x, promote(b, x, y), rg(b, x) || rg(b, y));
    int k = opnew(b, name, GCKPT_OP_ELEM, 2, (int[]){x, y}, o, -1, 0, NULL);
    gckpt_op *op = &b->r->op[k];
    uint64_t w;
    int bc = bcast_of(b, x, y, &w);
    setprim(b, GCKPT_P_ADD, bc, 0, 0, w);
    /* the grad is passed through only to an input of the same dtype and shape (a
     * broadcast input gets a reduced copy, another dtype a cast copy) */
    cpu_promotion(b, x, y);
    const gckpt_tensor *to_ = &b->r->t[o];
    for (int q = 0; q < 2; q++) {
        const gckpt_tensor *ti = &b->r->t[q ? y : x];
        op->grad_alias[q] = ti->dtype == to_->dtype && ti->c0 == to_->c0 && ti->cS == to_->cS &&
                            ti->cT == to_->cT && ti->cBSS == to_->cBSS;
    }
    return o;
}

/* unary op that saves its input (pow, silu, gelu) or its output (rsqrt, tanh). The
 * derivative formulas of pow (grad * (e * x.pow(e - 1))) and rsqrt (-0.5 * grad *
 * y.pow(3)) are composites: two input-sized temporaries live until the gradient is made
 * (C++ temporaries end with the full expression); silu, gelu and tanh have fused
 * backward kernels. */
static int unary(B *b, int x, const char *name, bool save_out, bool fp32_list, int prim, double sa)
{
    if (fp32_list) x = ac(b, x, F32, "to_f32");
    int o = like(b, name, x, dt(b, x), rg(b, x));
    int s = save_out ? o : x;
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 1, &s);
    setprim(b, prim, GCKPT_BC_NONE, sa, 0, 0);
    if (prim == GCKPT_P_POW || prim == GCKPT_P_RSQRT) last(b)->bws_in = 2;
    return o;
}

/* reduction over the last dimension (mean): output has per-token elements cT/width. */
static int reduce_last(B *b, int x, uint64_t width, const char *name)
{
    const gckpt_tensor *t = &b->r->t[x];
    int o = tnew(b, name, GCKPT_T_ACT, dt(b, x), 0, t->cS / width, t->cT / width,
                 t->cBSS / width, rg(b, x));
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(b, GCKPT_P_MEAN, GCKPT_BC_NONE, 0, 0, width);
    return o;
}

static int param(B *b, const char *name, uint64_t elems, uint8_t dtype)
{
    return tnew(b, name, GCKPT_T_PARAM, dtype, elems, 0, 0, 0, true);
}

/* autocast's cached cast of a weight; lives until the forward pass ends. */
static int wcast(B *b, int w, const char *name)
{
    if (!b->amp) return w;
    const gckpt_tensor *pw = &b->r->t[w];
    int c = tnew(b, name, GCKPT_T_WCAST, b->C, pw->c0, 0, 0, 0, true);
    b->r->t[c].fwd_end_free = true;
    b->r->t[c].param = (int16_t)w;
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){w}, c, -1, 0, NULL);
    setprim(b, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    return c;
}

/* Linear (F.linear / Conv1D addmm): saves its (autocast-cast) input and weight. The
 * gradient of the [b, s, in] input is mm's result viewed back to 3-D, and F.linear's
 * weight gradient is the transpose of mm's column-major result (TBackward): views, so
 * the autograd engine never accumulates into them in place (InputBuffer's
 * can_accumulate_inplace wants the storage's only reference). Conv1D (gpt2's blocks)
 * uses its weight untransposed in addmm: a fresh gradient. */
static int linear_op(B *b, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name,
                     bool conv1d)
{
    /* autocast casts the arguments in the order the compiler evaluates its wrapper's
     * call arguments, right to left with GCC: F.linear(x, w, bias) casts bias, w, x;
     * Conv1D's addmm(bias, x, w) casts w, x, bias. The later cast's ToCopyBackward runs
     * first (the engine takes the highest sequence number) */
    char nm[40];
    int xi = x, wc = w, bc = bias;
    for (int step = 0; step < 3; step++) {
        int what = conv1d ? (int[]){1, 0, 2}[step] : (int[]){2, 1, 0}[step]; /* 0 x, 1 w, 2 bias */
        if (what == 0) {
            snprintf(nm, sizeof nm, "%s.cast_in", name);
            xi = ac(b, x, b->C, nm);
        } else if (what == 1) {
            snprintf(nm, sizeof nm, "%s.weight_cast", name);
            wc = wcast(b, w, nm);
        } else if (bias >= 0) { /* autocast caches a low-precision copy of the bias too */
            snprintf(nm, sizeof nm, "%s.bias_cast", name);
            bc = wcast(b, bias, nm);
        }
    }
    bias = bc;
    const gckpt_tensor *tx = &b->r->t[x];
    int o = tnew(b, name, GCKPT_T_ACT, b->amp ? b->C : dt(b, x), 0, tx->cS / in_f * out_f,
                 tx->cT / in_f * out_f, 0, true);
    int ins[3] = {xi, wc, bias};
    int saved[2] = {xi, wc};
    int k = opnew(b, name, GCKPT_OP_MATMUL, bias >= 0 ? 3 : 2, ins, o, -1, 2, saved);
    setprim(b, GCKPT_P_LINEAR, GCKPT_BC_NONE, 0, 0, 0);
    b->r->op[k].in_f = in_f;
    b->r->op[k].out_f = out_f;
    b->r->op[k].fT = 2.0 * (double)in_f * (double)out_f;
    b->r->op[k].bwd_mult = 2.0;
    b->r->op[k].grad_view[0] = true;
    b->r->op[k].grad_view[1] = !conv1d;
    return o;
}

static int linear(B *b, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name)
{
    return linear_op(b, x, w, bias, in_f, out_f, name, false);
}

static int conv1d(B *b, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name)
{
    return linear_op(b, x, w, bias, in_f, out_f, name, true);
}

/* F.dropout / nn.Dropout with p > 0. CUDA: native_dropout, the output plus a bool mask
 * (1 byte per element) that its backward keeps. CPU target: at::dropout's composite
 * (native_dropout is CUDA-only there): noise = empty_like(x).bernoulli_(1-p).div_(1-p) in
 * x's dtype, then x * noise, which keeps the noise. */
static int mul(B *b, int x, int y, const char *name);
static int dropout(B *b, int x, double p, const char *name)
{
    if (p <= 0) return x;
    char nm[40];
    snprintf(nm, sizeof nm, "%s.mask", name);
    if (b->cpu) {
        int noise = like(b, nm, x, dt(b, x), false);
        opnew(b, nm, GCKPT_OP_ELEM, 1, (int[]){x}, noise, -1, 0, NULL);
        setprim(b, GCKPT_P_DROPOUT, GCKPT_BC_NONE, p, 0, 0);
        return mul(b, x, noise, name);
    }
    int o = like(b, name, x, dt(b, x), rg(b, x));
    int mask = like(b, nm, x, BOOL, false);
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, mask, 1, &mask);
    setprim(b, GCKPT_P_DROPOUT, GCKPT_BC_NONE, p, 0, 0);
    return o;
}

/* ---- modules ----------------------------------------------------------------------- */

/* HF LlamaRMSNorm: x.to(f32); pow(2).mean(-1); rsqrt(var+eps); x*r; .to(in dtype); w*y. */
static int rmsnorm(B *b, int x, uint64_t width, const char *name)
{
    const char *save = b->pfx;
    char pfx[40];
    snprintf(pfx, sizeof pfx, "%s%s%s", save && *save ? save : "", save && *save ? "." : "", name);
    b->pfx = pfx;
    int w = param(b, "weight", width, b->amp ? F32 : b->D);
    uint8_t in_dt = dt(b, x);
    int x32 = to(b, x, F32, "to_f32");
    int p = unary(b, x32, "pow", false, true, GCKPT_P_POW, 2.0);
    int var = reduce_last(b, p, width, "mean");
    int ve = scal(b, var, "add_eps", 1.0, b->eps);
    int r = unary(b, ve, "rsqrt", true, true, GCKPT_P_RSQRT, 0);
    int n = mul(b, x32, r, "mul_rsqrt");
    int y = to(b, n, in_dt, "to_in");
    int o = mul(b, y, w, "mul_weight");
    hold_here(b, var); /* `variance` and the normalised fp32 states until forward returns */
    hold_here(b, n);
    b->pfx = save;
    return o;
}

/* nn.LayerNorm (native_layer_norm): saves input, mean and rstd (fp32, per token). */
static int layernorm(B *b, int x, uint64_t width, const char *name)
{
    const char *save = b->pfx;
    char pfx[40];
    snprintf(pfx, sizeof pfx, "%s%s%s", save && *save ? save : "", save && *save ? "." : "", name);
    b->pfx = pfx;
    int w = param(b, "weight", width, b->amp ? F32 : b->D);
    int bias = param(b, "bias", width, b->amp ? F32 : b->D);
    int xi = ac(b, x, F32, "to_f32");
    const gckpt_tensor *t = &b->r->t[xi];
    int o = like(b, "out", xi, dt(b, xi), true);
    /* mean and rstd: two fp32 values per row, kept as one tensor here */
    int stats = tnew(b, "mean_rstd", GCKPT_T_ACT, b->cpu ? dt(b, xi) : F32, 0, 2 * t->cS / width,
                     2 * t->cT / width, 0, false);
    opnew(b, "layer_norm", GCKPT_OP_ELEM, 3, (int[]){xi, w, bias}, o, stats, 2,
          (int[]){xi, stats});
    setprim(b, GCKPT_P_LAYERNORM, GCKPT_BC_NONE, b->eps, 0, width);
    b->pfx = save;
    return o;
}

/* HF rotate_half + apply_rotary_pos_emb for one of q / k: x*cos + cat(-x2, x1)*sin. */
static int rope(B *b, int x, int cos, int sin, const char *name)
{
    char nm[40];
    snprintf(nm, sizeof nm, "%s.mul_cos", name);
    int xc = mul(b, x, cos, nm);
    const gckpt_tensor *t = &b->r->t[x];
    snprintf(nm, sizeof nm, "%s.neg", name);
    int ng = tnew(b, nm, GCKPT_T_ACT, dt(b, x), 0, t->cS / 2, t->cT / 2, 0, rg(b, x));
    opnew(b, nm, GCKPT_OP_ELEM, 1, (int[]){x}, ng, -1, 0, NULL);
    setprim(b, GCKPT_P_NEG_HALF, GCKPT_BC_NONE, 0, 0, b->m->head_dim);
    snprintf(nm, sizeof nm, "%s.cat", name);
    int rot = like(b, nm, x, dt(b, x), rg(b, x));
    opnew(b, nm, GCKPT_OP_ELEM, 2, (int[]){ng, x}, rot, -1, 0, NULL);
    setprim(b, GCKPT_P_CAT_HALF, GCKPT_BC_NONE, 0, 0, b->m->head_dim);
    snprintf(nm, sizeof nm, "%s.mul_sin", name);
    int rs = mul(b, rot, sin, nm);
    snprintf(nm, sizeof nm, "%s.add", name);
    return add(b, xc, rs, nm);
}

/* Fused SDPA (flash / memory-efficient on CUDA): saves q, k, v, out and logsumexp. The
 * backward allocates an fp32 dq accumulator. GQA via enable_gqa: no repeated k/v. */
static int sdpa(B *b, int q, int k, int v, double p)
{
    const gckpt_model *m = b->m;
    q = ac(b, q, b->C, "sdpa.cast_q");
    k = ac(b, k, b->C, "sdpa.cast_k");
    v = ac(b, v, b->C, "sdpa.cast_v");
    uint64_t qd = gckpt_q_dim(m);
    int o = tnew(b, "sdpa", GCKPT_T_ACT, dt(b, q), 0, 0, qd, 0, true);
    int lse = tnew(b, "sdpa.lse", GCKPT_T_ACT, F32, 0, 0, m->heads, 0, false);
    int op = opnew(b, "sdpa", GCKPT_OP_ATTN, 3, (int[]){q, k, v}, o, lse, 5,
                   (int[]){q, k, v, o, lse});
    /* causal: QK^T and PV over half the score matrix */
    setprim(b, GCKPT_P_SDPA, GCKPT_BC_NONE, p, 0, m->head_dim);
    b->r->op[op].fBSS = 2.0 * (double)m->heads * (double)m->head_dim;
    b->r->op[op].bwd_mult = 2.5;
    b->r->op[op].bws_cT = b->cpu ? 0 : qd;
    /* CUDA with dropout: the fused kernel (flash for 16-bit, memory-efficient for fp32;
     * cuDNN only takes p a multiple of 1/16) keeps no mask, only the Philox seed and
     * offset to regenerate it in the backward, as CPU scalar tensors outside CUDA-graph
     * capture: no device bytes. The CPU runs the math path instead (sdpa_math_cpu), so
     * this is not measured (gckpt_recipe_unverified) */
    return o;
}

/* k / v with every kv head repeated for its query heads ([rows, heads * hd]) in dtype. */
static int repeat_to(B *b, int x, uint8_t dtype, const char *name)
{
    const gckpt_model *m = b->m;
    int o = tnew(b, name, GCKPT_T_ACT, dtype, 0, 0, gckpt_q_dim(m), 0, rg(b, x));
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(b, GCKPT_P_REPEAT_KV, GCKPT_BC_NONE, 0, 0, m->head_dim);
    return o;
}

/* matmul's batch folding of a [b, heads, s, hd] operand that is not laid out that way
 * (q, k, v straight from projections or rope: [b, s, heads, hd]; an expanded kv head):
 * reshape to [b*heads, s, hd] copies when b > 1 and is a view when b = 1. The copy's
 * gradient is the output's, viewed. prim: CAST (a copy) or REPEAT_KV (an expand). */
static int fold(B *b, int x, int prim, const char *name)
{
    int o = like(b, name, x, dt(b, x), rg(b, x));
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(b, prim, GCKPT_BC_NONE, 0, 0, b->m->head_dim);
    gckpt_op *op = last(b);
    op->batched_copy = true;
    op->grad_alias[0] = true;
    op->grad_view[0] = true;
    return o;
}

/* One of q, k, v (role 0, 1, 2) of gpt2's packed c_attn output: HF's split, a view.
 * Autograd's SplitBackward waits for the three roles' gradients (the engine's input
 * buffer holds them) and cats them into one buffer: the first role's backward in the
 * planner's order allocates the packed gradient, the others write their block into it
 * (recipe.h, GCKPT_P_SPLIT). */
static int split_role(B *b, int x, int role, uint64_t width, const char *name)
{
    int o = tnew(b, name, GCKPT_T_ACT, dt(b, x), 0, 0, width, 0, rg(b, x));
    opnew(b, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(b, GCKPT_P_SPLIT, GCKPT_BC_NONE, role, 0, b->m->head_dim);
    last(b)->view_fwd = true;
    return o;
}

/* matmul's batch folding of a role view (a copy of its block when b > 1), or of a
 * tensor that autocast cast (dense) */
static int fold_role(B *b, int x, int view, int role, const char *name)
{
    if (x != view) return fold(b, x, GCKPT_P_CAST, name);
    int o = fold(b, x, GCKPT_P_SPLIT, name);
    b->r->op[b->r->nop - 1].sa = role;
    return o;
}

/* repeat_kv(k or v) at the start of HF's eager attention (expand + reshape): a copy
 * when 1 < kv heads < heads; the tensor itself when kv = heads; for one kv head a view
 * (the reshape only merges a size-1 dimension) whose gradient is still per query head
 * and is summed over them late in the backward (its autograd node comes first). */
static int repeat_kv(B *b, int x, const char *name)
{
    const gckpt_model *m = b->m;
    if (m->kv_heads == m->heads) return x;
    int o = repeat_to(b, x, dt(b, x), name);
    last(b)->view_fwd = m->kv_heads == 1;
    return o;
}

/* k or v as a matmul operand (x: repeat_kv's result): autocast's cast to the compute
 * dtype and matmul's batch folding. A repeated tensor is contiguous (the cast keeps
 * that, no folding); with kv = heads the cast keeps the [b, s, heads, hd] layout and
 * folding copies when b > 1; for one kv head (an expanded view) autocast's cast
 * materialises the expand, else folding does when b > 1. */
static int kv_operand(B *b, int x, const char *name)
{
    const gckpt_model *m = b->m;
    char nm[40];
    snprintf(nm, sizeof nm, "%s.fold", name);
    if (m->kv_heads > 1 && m->kv_heads < m->heads) return ac(b, x, b->C, name);
    if (m->kv_heads == m->heads) return fold(b, ac(b, x, b->C, name), GCKPT_P_CAST, nm);
    if (b->amp && dt(b, x) != b->C) return repeat_to(b, x, b->C, name); /* from the expanded view */
    return fold(b, x, GCKPT_P_REPEAT_KV, nm);
}

/* One role (q, k or v) of SDPA's inputs, [rows, heads * hd]: gpt2's q, k, v are views
 * of one packed [rows, 3 * hidden] tensor (a view op here: no allocation). */
static int sdpa_role(B *b, int x, int role, uint64_t width, const char *name)
{
    const gckpt_tensor *t = &b->r->t[x];
    if (t->cT == width) return x;
    return split_role(b, x, role, width, name);
}

/* CPU target, SDPA with dropout: the CPU flash kernel has no dropout, so PyTorch runs
 * _scaled_dot_product_attention_math, a composite (measured op by op with the allocator,
 * FINDINGS.md): 16-bit q, k, v upcast to fp32; q * sqrt(scale); a [s, s] fp32 causal
 * mask; GQA expands and clones k and v; k^T * sqrt(scale); matmul (batch folding);
 * the mask added in place; _safe_softmax (with bool isneginf / all temporaries);
 * dropout; matmul; the output (and the returned weights) cast back. Its locals live
 * until it returns. HF's transpose(1, 2).contiguous() then copies the output. */
static int sdpa_math_cpu(B *b, int q, int k, int v, double p)
{
    const gckpt_model *m = b->m;
    uint64_t nh = m->heads, kv = m->kv_heads, hd = m->head_dim, qd = gckpt_q_dim(m), kvd = gckpt_kv_dim(m);
    q = ac(b, q, b->C, "sdpa.cast_q");
    k = ac(b, k, b->C, "sdpa.cast_k");
    v = ac(b, v, b->C, "sdpa.cast_v");
    int ac_in[3] = {q, k, v};
    bool packed = q == k; /* gpt2: views of one tensor, laid out [b, s, 3h]: not dense */
    q = sdpa_role(b, q, 0, qd, "math.q");
    k = sdpa_role(b, k, 1, kvd, "math.k");
    v = sdpa_role(b, v, 2, kvd, "math.v");
    uint8_t odt = dt(b, q);
    int up[3] = {-1, -1, -1};
    if (odt != F32) {
        q = up[0] = to(b, q, F32, "math.q_f32");
        k = up[1] = to(b, k, F32, "math.k_f32");
        v = up[2] = to(b, v, F32, "math.v_f32");
    }
    double sf = sqrt(1.0 / sqrt((double)hd));
    int qs = scal(b, q, "math.scale_q", sf, 0);
    int mask = tnew(b, "math.mask", GCKPT_T_ACT, F32, 0, 0, 0, 0, false);
    b->r->t[mask].cSS = 1;
    opnew(b, "math.mask", GCKPT_OP_ELEM, 1, (int[]){q}, mask, -1, 0, NULL);
    setprim(b, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    int kr = k, vr = v;
    if (kv < nh) { /* expand + clone: contiguous */
        kr = repeat_to(b, k, F32, "math.repeat_k");
        vr = repeat_to(b, v, F32, "math.repeat_v");
    }
    int ks = scal(b, kr, "math.scale_k", sf, 0);
    /* q and k straight from rope keep the [b, s, heads, hd] layout through the casts and
     * scalings (folding copies them when b > 1); views of a packed tensor are not dense:
     * those results are contiguous, as are the GQA clones */
    bool lay = !packed;
    int qf = lay ? fold(b, qs, GCKPT_P_CAST, "math.fold_q") : qs;
    int kf = lay && kv == nh ? fold(b, ks, GCKPT_P_CAST, "math.fold_k") : ks;
    int sc = tnew(b, "math.scores", GCKPT_T_ACT, F32, 0, 0, 0, nh, true);
    opnew(b, "math.qk", GCKPT_OP_MATMUL, 2, (int[]){qf, kf}, sc, -1, 2, (int[]){qf, kf});
    setprim(b, GCKPT_P_QK, GCKPT_BC_NONE, 1.0, 0, hd);
    last(b)->grad_view[0] = last(b)->grad_view[1] = true;
    int pr = tnew(b, "math.softmax", GCKPT_T_ACT, F32, 0, 0, 0, nh, true);
    opnew(b, "math.softmax", GCKPT_OP_ELEM, 1, (int[]){sc}, pr, -1, 1, (int[]){pr});
    setprim(b, GCKPT_P_SOFTMAX, GCKPT_BC_NONE, 0, 0, 0);
    last(b)->fws_bBSS = nh;      /* isneginf: bool [b, heads, s, s] */
    last(b)->fws_bT = nh;        /* all: bool [b, heads, s] */
    int pd = dropout(b, pr, p, "math.dropout");
    int vf = (kv == nh && !packed) || (packed && kv == nh) ? fold(b, vr, GCKPT_P_CAST, "math.fold_v") : vr;
    int w = -1;
    if (odt != F32) { /* the returned attention weights, cast back: dropped with the tuple */
        w = tnew(b, "math.weights", GCKPT_T_ACT, odt, 0, 0, 0, nh, false);
        opnew(b, "math.weights", GCKPT_OP_ELEM, 1, (int[]){pd}, w, -1, 0, NULL);
        setprim(b, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    }
    int o = tnew(b, "math.pv", GCKPT_T_ACT, F32, 0, 0, qd, 0, true);
    opnew(b, "math.pv", GCKPT_OP_MATMUL, 2, (int[]){pd, vf}, o, -1, 2, (int[]){pd, vf});
    setprim(b, GCKPT_P_PV, GCKPT_BC_NONE, 0, 0, hd);
    last(b)->grad_view[0] = last(b)->grad_view[1] = true;
    o = to(b, o, odt, "math.out");
    /* the function's locals, and autocast's casts until SDPA returns */
    int held[] = {up[0], up[1], up[2], qs, kr, mask, w, ac_in[0], ac_in[1], ac_in[2]};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++) hold_here(b, held[i]);
    int oc = like(b, "math.transpose", o, odt, true);
    opnew(b, "math.transpose", GCKPT_OP_ELEM, 1, (int[]){o}, oc, -1, 0, NULL);
    setprim(b, GCKPT_P_TRANSPOSE, GCKPT_BC_NONE, 0, 0, hd);
    return oc;
}

/* Scaled-dot-product attention as the target runs it. */
static int attention_sdpa(B *b, int q, int k, int v, double p)
{
    return b->cpu && p > 0 ? sdpa_math_cpu(b, q, k, v, p) : sdpa(b, q, k, v, p);
}

/* Eager attention (HF's eager_attention_forward), llama family: QK^T, scale, mask,
 * softmax(dtype=float32) — a float32 copy of bf16 scores first (ATen's softmax converts
 * the input unless CUDA's fp16 half_to_float path applies) —, .to(query dtype), dropout,
 * P V, transpose(1, 2).contiguous(). Returns the output; *weights = the returned
 * attention weights (the decoder layer keeps them in `_` until it returns). */
static int eager(B *b, int q, int k, int v, int mask, double p, int *weights)
{
    const gckpt_model *m = b->m;
    uint64_t nh = m->heads, hd = m->head_dim;
    int krep = repeat_kv(b, k, "repeat_k"), vrep = repeat_kv(b, v, "repeat_v");
    int qf = fold(b, ac(b, q, b->C, "qk.cast_q"), GCKPT_P_CAST, "qk.fold_q");
    int kf = kv_operand(b, krep, "qk.cast_k");
    int sc = tnew(b, "scores", GCKPT_T_ACT, dt(b, qf), 0, 0, 0, nh, true);
    int op = opnew(b, "qk", GCKPT_OP_MATMUL, 2, (int[]){qf, kf}, sc, -1, 2, (int[]){qf, kf});
    setprim(b, GCKPT_P_QK, GCKPT_BC_NONE, 1.0, 0, hd);
    b->r->op[op].fBSS = 2.0 * (double)nh * (double)hd;
    b->r->op[op].bwd_mult = 2.0;
    b->r->op[op].grad_view[0] = b->r->op[op].grad_view[1] = true;
    int ss = scal(b, sc, "scale", 1.0 / sqrt((double)hd), 0);
    int sm = mask >= 0 ? add(b, ss, mask, "add_mask") : ss;
    /* (CUDA's half_to_float path would skip the copy for fp16 scores; they never get
     * here: under autocast the fp32 mask promotes the scores, and no precision runs a
     * pure fp16 model) */
    int s32 = to(b, sm, F32, "softmax.to_f32");
    int pr = tnew(b, "softmax", GCKPT_T_ACT, F32, 0, 0, 0, nh, true);
    opnew(b, "softmax", GCKPT_OP_ELEM, 1, (int[]){s32}, pr, -1, 1, (int[]){pr});
    setprim(b, GCKPT_P_SOFTMAX, GCKPT_BC_NONE, 0, 0, 0);
    pr = to(b, pr, dt(b, q), "softmax.to_q");
    hold_here(b, sm); /* attn_weights is rebound only when the whole statement is done */
    pr = dropout(b, pr, p, "attn_dropout");
    *weights = pr;
    int pc = ac(b, pr, b->C, "pv.cast_p");
    int vf = kv_operand(b, vrep, "pv.cast_v");
    int o = tnew(b, "pv", GCKPT_T_ACT, dt(b, pc), 0, 0, nh * hd, 0, true);
    op = opnew(b, "pv", GCKPT_OP_MATMUL, 2, (int[]){pc, vf}, o, -1, 2, (int[]){pc, vf});
    setprim(b, GCKPT_P_PV, GCKPT_BC_NONE, 0, 0, hd);
    b->r->op[op].fBSS = 2.0 * (double)nh * (double)hd;
    b->r->op[op].bwd_mult = 2.0;
    b->r->op[op].grad_view[0] = b->r->op[op].grad_view[1] = true;
    /* (b, nh, s, hd) -> (b, s, nh*hd): transpose + contiguous is a copy */
    int oc = like(b, "transpose", o, dt(b, o), true);
    opnew(b, "transpose", GCKPT_OP_ELEM, 1, (int[]){o}, oc, -1, 0, NULL);
    setprim(b, GCKPT_P_TRANSPOSE, GCKPT_BC_NONE, 0, 0, hd);
    hold_here(b, krep); /* key_states / value_states until the function returns */
    hold_here(b, vrep);
    return oc;
}

/* GPT-2's eager attention: q, k, v are views of c_attn's output (HF's split); matmul
 * folds each (a copy when b > 1); softmax in the scores' dtype (fp32 under autocast: the
 * fp32 mask promotes them), .type(value dtype), dropout, P V, transpose (HF's reshape +
 * contiguous copies). */
static int eager_gpt2(B *b, int qkv, int mask, double p, int *weights)
{
    const gckpt_model *m = b->m;
    uint64_t nh = m->heads, hd = m->head_dim;
    int q = split_role(b, qkv, 0, nh * hd, "q");
    int k = split_role(b, qkv, 1, nh * hd, "k");
    int v = split_role(b, qkv, 2, nh * hd, "v");
    int qc = ac(b, q, b->C, "qk.cast_q"), kc = ac(b, k, b->C, "qk.cast_k");
    int qf = fold_role(b, qc, q, 0, "qk.fold_q");
    int kf = fold_role(b, kc, k, 1, "qk.fold_k");
    int sc = tnew(b, "scores", GCKPT_T_ACT, dt(b, qf), 0, 0, 0, nh, true);
    int op = opnew(b, "qk", GCKPT_OP_MATMUL, 2, (int[]){qf, kf}, sc, -1, 2, (int[]){qf, kf});
    setprim(b, GCKPT_P_QK, GCKPT_BC_NONE, 1.0, 0, hd);
    b->r->op[op].fBSS = 2.0 * (double)nh * (double)hd;
    b->r->op[op].bwd_mult = 2.0;
    b->r->op[op].grad_view[0] = b->r->op[op].grad_view[1] = true;
    int ss = scal(b, sc, "scale", 1.0 / sqrt((double)hd), 0);
    int sm = mask >= 0 ? add(b, ss, mask, "add_mask") : ss;
    int si = ac(b, sm, F32, "softmax.cast_in");
    int pr = like(b, "softmax", si, dt(b, si), true);
    opnew(b, "softmax", GCKPT_OP_ELEM, 1, (int[]){si}, pr, -1, 1, (int[]){pr});
    setprim(b, GCKPT_P_SOFTMAX, GCKPT_BC_NONE, 0, 0, 0);
    pr = to(b, pr, dt(b, v), "softmax.to_v");
    pr = dropout(b, pr, p, "attn_dropout");
    *weights = pr;
    int pc = ac(b, pr, b->C, "pv.cast_p"), vc = ac(b, v, b->C, "pv.cast_v");
    int vf = fold_role(b, vc, v, 2, "pv.fold_v");
    int o = tnew(b, "pv", GCKPT_T_ACT, dt(b, pc), 0, 0, nh * hd, 0, true);
    op = opnew(b, "pv", GCKPT_OP_MATMUL, 2, (int[]){pc, vf}, o, -1, 2, (int[]){pc, vf});
    setprim(b, GCKPT_P_PV, GCKPT_BC_NONE, 0, 0, hd);
    b->r->op[op].fBSS = 2.0 * (double)nh * (double)hd;
    b->r->op[op].bwd_mult = 2.0;
    b->r->op[op].grad_view[0] = b->r->op[op].grad_view[1] = true;
    int oc = like(b, "transpose", o, dt(b, o), true);
    opnew(b, "transpose", GCKPT_OP_ELEM, 1, (int[]){o}, oc, -1, 0, NULL);
    setprim(b, GCKPT_P_TRANSPOSE, GCKPT_BC_NONE, 0, 0, hd);
    return oc;
}

static void section(B *b, int sec)
{
    b->sec = sec;
    b->r->sec_begin[sec] = b->r->nop;
}

/* A section ends: holds until "the layer returns" become holds until its last op. */
static void end_section(B *b)
{
    gckpt_recipe *r = b->r;
    r->sec_end[b->sec] = r->nop;
    for (int t = 0; t < r->nt; t++)
        if (r->t[t].hold_to == HOLD_END) r->t[t].hold_to = (int16_t)(r->nop - 1);
}

/* HF's ForCausalLMLoss on the logits: logits.float() (held by the loss function until the
 * loss is computed), cross_entropy over all b*s rows = log_softmax (fp32, saved) +
 * nll_loss against the shifted labels. Sets r->loss. */
static void causal_lm_loss(B *b, int logits)
{
    gckpt_recipe *r = b->r;
    r->t[logits].logits = true;
    r->t[logits].fwd_end_free = true; /* returned in the model output, dropped by the Trainer */
    int lf = to(b, logits, F32, "logits.float");
    r->t[lf].logits = true;
    int lbl = tnew(b, "shift_labels", GCKPT_T_CONST, I64, 0, 0, 1, 0, false);
    opnew(b, "shift_labels", GCKPT_OP_ELEM, 0, NULL, lbl, -1, 0, NULL);
    int ls = like(b, "log_softmax", lf, F32, true);
    r->t[ls].logits = true;
    opnew(b, "log_softmax", GCKPT_OP_ELEM, 1, (int[]){lf}, ls, -1, 1, (int[]){ls});
    setprim(b, GCKPT_P_LOG_SOFTMAX, GCKPT_BC_NONE, 0, 0, b->m->vocab);
    int loss = tnew(b, "loss", GCKPT_T_ACT, F32, 1, 0, 0, 0, true);
    int tw = tnew(b, "nll_loss.total_weight", GCKPT_T_ACT, F32, 1, 0, 0, 0, false);
    opnew(b, "nll_loss", GCKPT_OP_ELEM, 2, (int[]){ls, lbl}, loss, tw, 2, (int[]){lbl, tw});
    setprim(b, GCKPT_P_NLL, GCKPT_BC_NONE, 0, 0, b->m->vocab);
    hold_here(b, lf);
    r->loss = loss;
}

static void build_llama(B *b, gckpt_attention attn)
{
    gckpt_recipe *r = b->r;
    const gckpt_model *m = b->m;
    uint64_t h = m->hidden, qd = gckpt_q_dim(m), kvd = gckpt_kv_dim(m), I = m->intermediate;
    uint64_t hd = m->head_dim;
    uint8_t W = b->amp ? F32 : b->D; /* parameter dtype */

    /* embedding: ids (the batch) and labels; rotary cos/sin (1, s, head_dim) in the
     * dtype of the embeddings; the eager path's (b, 1, s, s) additive causal mask */
    section(b, GCKPT_SEC_EMBED);
    b->pfx = "";
    int ids = tnew(b, "input_ids", GCKPT_T_CONST, I64, 0, 0, 1, 0, false);
    r->t[ids].step_held = true;
    opnew(b, "input_ids", GCKPT_OP_ELEM, 0, NULL, ids, -1, 0, NULL);
    int emb_w = param(b, "embed_tokens.weight", m->vocab * h, W);
    int x = tnew(b, "embed_tokens", GCKPT_T_ACT, b->D, 0, 0, h, 0, true);
    opnew(b, "embed_tokens", GCKPT_OP_EMBED, 2, (int[]){emb_w, ids}, x, -1, 1, (int[]){ids});
    setprim(b, GCKPT_P_EMBED, GCKPT_BC_NONE, 0, 0, h);
    /* LlamaModel's position_ids, rotary cos/sin and (eager) causal mask: keyword
     * arguments of every layer, dropped when the base model returns unless saved or held
     * by checkpoints */
    int pos = tnew(b, "position_ids", GCKPT_T_CONST, I64, 0, 1, 0, 0, false);
    opnew(b, "position_ids", GCKPT_OP_ELEM, 0, NULL, pos, -1, 0, NULL);
    int cos = tnew(b, "rotary.cos", GCKPT_T_CONST, b->D, 0, hd, 0, 0, false);
    int sin = tnew(b, "rotary.sin", GCKPT_T_CONST, b->D, 0, hd, 0, 0, false);
    opnew(b, "rotary.cos", GCKPT_OP_ELEM, 0, NULL, cos, sin, 0, NULL);
    int mask = -1;
    if (attn == GCKPT_EAGER) {
        mask = tnew(b, "causal_mask", GCKPT_T_CONST, b->D, 0, 0, 0, 1, false);
        opnew(b, "causal_mask", GCKPT_OP_ELEM, 0, NULL, mask, -1, 0, NULL);
    }
    int kwargs[4] = {pos, cos, sin, mask};
    for (int k = 0; k < 4; k++) {
        if (kwargs[k] < 0) continue;
        r->t[kwargs[k]].fwd_end_free = r->t[kwargs[k]].base_end_free = true;
        r->t[kwargs[k]].ckpt_held = true;
    }
    r->mask = mask;
    r->embed_out = x;
    /* LlamaModel keeps `inputs_embeds` until it returns */
    r->t[x].fwd_end_free = true;
    r->t[x].base_end_free = true;
    end_section(b);

    /* one decoder layer (LlamaDecoderLayer): the caller holds its input, `residual`
     * the residual sums, until it returns */
    section(b, GCKPT_SEC_BLOCK);
    b->pfx = "";
    int xin = tnew(b, "hidden_states", GCKPT_T_ACT, b->D, 0, 0, h, 0, true);
    r->block_in = xin;
    hold(b, xin, HOLD_END);
    int n1 = rmsnorm(b, xin, h, "input_layernorm");
    b->pfx = "self_attn";
    int wq = param(b, "q_proj.weight", h * qd, W), wk = param(b, "k_proj.weight", h * kvd, W);
    int wv = param(b, "v_proj.weight", h * kvd, W), wo = param(b, "o_proj.weight", qd * h, W);
    int bq = m->qkv_bias ? param(b, "q_proj.bias", qd, W) : -1;
    int bk = m->qkv_bias ? param(b, "k_proj.bias", kvd, W) : -1;
    int bv = m->qkv_bias ? param(b, "v_proj.bias", kvd, W) : -1;
    int bo = m->o_bias ? param(b, "o_proj.bias", h, W) : -1;
    /* Qwen3: q_norm(q_proj(x)), then k_norm(k_proj(x)), then v_proj(x), one statement
     * each; a norm holds its argument until it returns */
    int q = linear(b, n1, wq, bq, h, qd, "q_proj");
    if (m->qk_norm) {
        int q0 = q;
        q = rmsnorm(b, q, hd, "q_norm");
        hold_here(b, q0);
        b->pfx = "self_attn";
    }
    int kk = linear(b, n1, wk, bk, h, kvd, "k_proj");
    if (m->qk_norm) {
        int k0 = kk;
        kk = rmsnorm(b, kk, hd, "k_norm");
        hold_here(b, k0);
        b->pfx = "self_attn";
    }
    int v = linear(b, n1, wv, bv, h, kvd, "v_proj");
    int qp = q, kp = kk;
    q = rope(b, q, cos, sin, "rope_q");
    kk = rope(b, kk, cos, sin, "rope_k");
    hold_here(b, qp); /* apply_rotary_pos_emb's arguments until it returns */
    hold_here(b, kp);
    int weights = -1;
    int a = attn == GCKPT_SDPA ? attention_sdpa(b, q, kk, v, m->attn_dropout)
                               : eager(b, q, kk, v, mask, m->attn_dropout, &weights);
    int ao = linear(b, a, wo, bo, qd, h, "o_proj");
    /* LlamaAttention.forward returns: its argument and query/key/value_states go; the
     * decoder layer keeps the returned attention weights (`_`) until it returns */
    hold_here(b, n1);
    hold_here(b, q);
    hold_here(b, kk);
    hold_here(b, v);
    hold(b, weights, HOLD_END);
    b->pfx = "";
    int h1 = add(b, xin, ao, "residual_attn");
    hold(b, h1, HOLD_END);
    int n2 = rmsnorm(b, h1, h, "post_attention_layernorm");
    b->pfx = "mlp";
    int wg = param(b, "gate_proj.weight", h * I, W), wu = param(b, "up_proj.weight", h * I, W);
    int wd = param(b, "down_proj.weight", I * h, W);
    int bg = m->mlp_bias ? param(b, "gate_proj.bias", I, W) : -1;
    int bu = m->mlp_bias ? param(b, "up_proj.bias", I, W) : -1;
    int bd = m->mlp_bias ? param(b, "down_proj.bias", h, W) : -1;
    int g = linear(b, n2, wg, bg, h, I, "gate_proj");
    int act = unary(b, g, "silu", false, false, GCKPT_P_SILU, 0);
    int u = linear(b, n2, wu, bu, h, I, "up_proj");
    int gu = mul(b, act, u, "mul");
    int dn = linear(b, gu, wd, bd, I, h, "down_proj");
    hold_here(b, n2); /* the MLP's argument until it returns */
    b->pfx = "";
    int out = add(b, h1, dn, "residual_mlp");
    r->block_out = out;
    end_section(b);

    /* head: final norm (its argument held until it returns), lm_head, the loss */
    section(b, GCKPT_SEC_HEAD);
    b->pfx = "";
    int hin = tnew(b, "final_hidden", GCKPT_T_ACT, b->D, 0, 0, h, 0, true);
    r->head_in = hin;
    int nf = rmsnorm(b, hin, h, "norm");
    hold_here(b, hin);
    r->t[nf].fwd_end_free = true; /* the base model's output, held until the forward returns */
    b->pfx = "";
    int wl = m->tied ? emb_w : param(b, "lm_head.weight", m->vocab * h, W);
    causal_lm_loss(b, linear(b, nf, wl, -1, h, m->vocab, "lm_head"));
    (void)ids;
    end_section(b);
}

static int gelu(B *b, int x)
{
    const gckpt_model *m = b->m;
    if (m->act != GCKPT_ACT_GELU_NEW)
        return unary(b, x, "gelu", false, false, GCKPT_P_GELU, m->act == GCKPT_ACT_GELU_TANH ? 1.0 : 0.0);
    /* NewGELUActivation: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*pow(x,3)))) in Python,
     * evaluated left to right: 0.5*x first, then the tanh chain */
    int t7 = scal(b, x, "act.half_x", 0.5, 0);
    int p3 = unary(b, x, "act.pow3", false, true, GCKPT_P_POW, 3.0);
    int t2 = scal(b, p3, "act.mul_c", 0.044715, 0);
    int t3 = add(b, x, t2, "act.add");
    int t4 = scal(b, t3, "act.mul_sqrt", sqrt(2.0 / M_PI), 0);
    int t5 = unary(b, t4, "act.tanh", true, false, GCKPT_P_TANH, 0);
    int t6 = scal(b, t5, "act.add_one", 1.0, 1.0);
    return mul(b, t7, t6, "act.mul");
}

static void build_gpt2(B *b, gckpt_attention attn)
{
    gckpt_recipe *r = b->r;
    const gckpt_model *m = b->m;
    uint64_t h = m->hidden, I = m->intermediate, V = m->vocab;
    uint8_t W = b->amp ? F32 : b->D;

    section(b, GCKPT_SEC_EMBED);
    b->pfx = "";
    int ids = tnew(b, "input_ids", GCKPT_T_CONST, I64, 0, 0, 1, 0, false);
    r->t[ids].step_held = true;
    opnew(b, "input_ids", GCKPT_OP_ELEM, 0, NULL, ids, -1, 0, NULL);
    int wte = param(b, "wte.weight", V * h, W);
    int wpe = param(b, "wpe.weight", m->positions * h, W);
    int te = tnew(b, "wte", GCKPT_T_ACT, b->D, 0, 0, h, 0, true);
    opnew(b, "wte", GCKPT_OP_EMBED, 2, (int[]){wte, ids}, te, -1, 1, (int[]){ids});
    setprim(b, GCKPT_P_EMBED, GCKPT_BC_NONE, 0, 0, h);
    int pos = tnew(b, "position_ids", GCKPT_T_CONST, I64, 0, 1, 0, 0, false);
    opnew(b, "position_ids", GCKPT_OP_ELEM, 0, NULL, pos, -1, 0, NULL);
    int pe = tnew(b, "wpe", GCKPT_T_ACT, b->D, 0, h, 0, 0, true);
    opnew(b, "wpe", GCKPT_OP_EMBED, 2, (int[]){wpe, pos}, pe, -1, 1, (int[]){pos});
    setprim(b, GCKPT_P_EMBED, GCKPT_BC_NONE, 0, 0, h);
    /* GPT2Model keeps `inputs_embeds` and `position_embeds` until it returns */
    r->t[te].fwd_end_free = r->t[te].base_end_free = true;
    r->t[pe].fwd_end_free = r->t[pe].base_end_free = true;
    int x = add(b, te, pe, "add_pos");
    x = dropout(b, x, m->embd_dropout, "drop");
    int mask = -1;
    if (attn == GCKPT_EAGER) {
        /* GPT2Block takes the mask positionally: the checkpoint saves it with the
         * hidden states, and offload copies it to the host for every checkpointed layer */
        mask = tnew(b, "causal_mask", GCKPT_T_CONST, b->D, 0, 0, 0, 1, false);
        r->t[mask].fwd_end_free = true;
        r->t[mask].base_end_free = true;
        r->t[mask].ckpt_held = true;
        opnew(b, "causal_mask", GCKPT_OP_ELEM, 0, NULL, mask, -1, 0, NULL);
        r->mask_positional = true;
    }
    r->mask = mask;
    r->embed_out = x;
    end_section(b);

    section(b, GCKPT_SEC_BLOCK);
    b->pfx = "";
    /* GPT2Block: the caller holds its input, `residual` the residual sums, `_` the
     * attention weights, until it returns */
    int xin = tnew(b, "hidden_states", GCKPT_T_ACT, b->D, 0, 0, h, 0, true);
    r->block_in = xin;
    hold(b, xin, HOLD_END);
    int n1 = layernorm(b, xin, h, "ln_1");
    b->pfx = "attn";
    int wa = param(b, "c_attn.weight", h * 3 * h, W), ba = param(b, "c_attn.bias", 3 * h, W);
    int wp = param(b, "c_proj.weight", h * h, W), bp = param(b, "c_proj.bias", h, W);
    int qkv = conv1d(b, n1, wa, ba, h, 3 * h, "c_attn");
    /* q, k, v are views of c_attn's output: one storage */
    int weights = -1;
    int a = attn == GCKPT_SDPA ? attention_sdpa(b, qkv, qkv, qkv, m->attn_dropout)
                               : eager_gpt2(b, qkv, mask, m->attn_dropout, &weights);
    int ao = conv1d(b, a, wp, bp, h, h, "c_proj");
    ao = dropout(b, ao, m->resid_dropout, "resid_dropout");
    hold_here(b, qkv); /* GPT2Attention returns: the q / k / v views go */
    /* the block's `attn_output` and `_` live until it returns; its `hidden_states`
     * (ln_1's output) until the residual sum rebinds it */
    hold(b, ao, HOLD_END);
    hold(b, weights, HOLD_END);
    b->pfx = "";
    int h1 = add(b, ao, xin, "residual_attn");
    hold_here(b, n1);
    hold(b, h1, HOLD_END);
    int n2 = layernorm(b, h1, h, "ln_2");
    b->pfx = "mlp";
    int wf = param(b, "c_fc.weight", h * I, W), bf = param(b, "c_fc.bias", I, W);
    int wp2 = param(b, "c_proj.weight", I * h, W), bp2 = param(b, "c_proj.bias", h, W);
    int f = conv1d(b, n2, wf, bf, h, I, "c_fc");
    int g = gelu(b, f);
    hold_here(b, f); /* the activation's argument until it returns */
    int d = conv1d(b, g, wp2, bp2, I, h, "c_proj");
    d = dropout(b, d, m->resid_dropout, "dropout");
    b->pfx = "";
    int out = add(b, h1, d, "residual_mlp");
    hold_here(b, n2); /* `hidden_states` (ln_2's output) until the residual sum rebinds it */
    r->block_out = out;
    end_section(b);

    section(b, GCKPT_SEC_HEAD);
    b->pfx = "";
    int hin = tnew(b, "final_hidden", GCKPT_T_ACT, b->D, 0, 0, h, 0, true);
    r->head_in = hin;
    int nf = layernorm(b, hin, h, "ln_f");
    r->t[nf].fwd_end_free = true; /* the base model's output, held until the forward returns */
    b->pfx = "";
    int wl = m->tied ? wte : param(b, "lm_head.weight", V * h, W);
    causal_lm_loss(b, linear(b, nf, wl, -1, h, V, "lm_head"));
    (void)ids;
    end_section(b);
}

void gckpt_recipe_build(const gckpt_model *m, gckpt_precision p, gckpt_attention a,
                        gckpt_recipe *r)
{
    gckpt_recipe_build_target(m, p, a, GCKPT_TARGET_CUDA, r);
}

bool gckpt_recipe_unverified(const gckpt_model *m, gckpt_attention a, const char **code,
                             const char **sentence)
{
    const char *c = NULL, *why = NULL;
    bool attn = m->attn_dropout > 0, other = m->resid_dropout > 0 || m->embd_dropout > 0;
    if (attn && a == GCKPT_SDPA) {
        c = "dropout_cuda_sdpa_unverified";
        why = "attention dropout with SDPA is modelled as CUDA's fused kernel, which keeps the RNG seed and "
              "offset instead of a mask (and native_dropout's 1-byte masks elsewhere); the CPU runs the math "
              "path there, so tools/hf_probe could not measure it";
    } else if (attn || other) {
        c = "dropout_cuda_mask_unverified";
        why = "dropout is modelled as CUDA's native_dropout, which keeps a 1-byte mask per element; the CPU "
              "keeps a noise tensor in the input dtype instead, so tools/hf_probe could not measure it";
    }
    if (code) *code = c;
    if (sentence) *sentence = why;
    return c != NULL;
}

void gckpt_recipe_build_target(const gckpt_model *m, gckpt_precision p, gckpt_attention a,
                               gckpt_target target, gckpt_recipe *r)
{
    memset(r, 0, sizeof *r);
    r->mask = -1;
    B b = {.r = r, .m = m, .eps = m->norm_eps, .cpu = target == GCKPT_TARGET_CPU};
    b.amp = p == GCKPT_AMP_BF16 || p == GCKPT_AMP_FP16;
    b.C = p == GCKPT_FP32 ? F32 : BF16;  /* fp16 and bf16 are both 2 bytes */
    b.D = p == GCKPT_BF16 ? BF16 : F32;   /* AMP keeps an fp32 residual stream */
    r->amp = b.amp;
    r->stream_dtype = b.D;
    r->compute_dtype = b.C;
    r->param_dtype = b.amp ? F32 : b.D;
    r->grad_dtype = r->param_dtype;
    r->hidden = m->hidden;
    if (m->family == GCKPT_FAMILY_GPT2)
        build_gpt2(&b, a);
    else
        build_llama(&b, a);
    /* each op lists the Python references that end after it (a full list would move
     * the release to the next op: never with the recipes here, 10 at most) */
    for (int t = 0; t < r->nt; t++) {
        int h = r->t[t].hold_to;
        if (h < 0 || h >= r->nop) continue;
        while (h < r->nop - 1 && r->op[h].nunhold == GCKPT_OP_MAX_UNHOLD) h++;
        gckpt_op *op = &r->op[h];
        if (op->nunhold < GCKPT_OP_MAX_UNHOLD) op->unhold[op->nunhold++] = (int16_t)t;
        r->t[t].hold_to = (int16_t)h;
    }
    /* a parameter's gradient is complete (AccumulateGrad runs) after all its uses */
    for (int i = 0; i < r->nop; i++)
        for (int k = 0; k < r->op[i].nin; k++) {
            int t = r->op[i].in[k];
            bool dup = false;
            for (int q = 0; q < k; q++) dup |= r->op[i].in[q] == t;
            if (!dup && r->t[t].kind == GCKPT_T_PARAM) r->t[t].uses++;
        }
}

bool gckpt_tensor_bytes(const gckpt_recipe *r, int i, uint64_t b, uint64_t s, uint64_t *bytes)
{
    const gckpt_tensor *t = &r->t[i];
    uint64_t T, BSS, e = t->c0, x;
    if (!gckpt_mul(b, s, &T) || !gckpt_mul(T, s, &BSS)) return false;
    if (t->cSS && (!gckpt_mul(s, s, &x) || !gckpt_mul(t->cSS, x, &x) || !gckpt_add(e, x, &e))) return false;
    if (!gckpt_mul(t->cS, s, &x) || !gckpt_add(e, x, &e)) return false;
    if (!gckpt_mul(t->cT, T, &x) || !gckpt_add(e, x, &e)) return false;
    if (!gckpt_mul(t->cBSS, BSS, &x) || !gckpt_add(e, x, &e)) return false;
    return gckpt_mul(e, t->dtype, bytes);
}

int gckpt_recipe_producer(const gckpt_recipe *r, int tensor)
{
    for (int i = 0; i < r->nop; i++)
        if (r->op[i].out[0] == tensor || r->op[i].out[1] == tensor) return i;
    return -1;
}
