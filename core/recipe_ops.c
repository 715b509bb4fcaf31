/* The tracer's primitives. Each mirrors one PyTorch op as Hugging Face's modelling code
 * calls it: the dtype of its output (type promotion, or torch.autocast's lower-precision
 * / fp32 op lists under AMP), and which inputs or outputs autograd saves for backward
 * (derivatives.yaml: mul saves the *other* operand of each input that requires grad; pow
 * and silu save their input; rsqrt, tanh and softmax their output; add, cat, neg and
 * casts save nothing). Views and no-op casts return the same tensor, so saved tensors
 * are de-duplicated by storage as autograd does. */
#include "recipe_tracer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next parameter of the first block section of the parameter group when a later one
 * is traced: the same
 * module's (its name and shape; a family traces every block type's parameters in the same
 * order; the dtype is the first's: QLoRA sets the quantized one after creating it), else
 * -1. */
static int replayed(tracer *tr, const char *name, gckpt_shape shape)
{
    gckpt_recipe *r = tr->r;
    char full[40];
    snprintf(full, sizeof full, "%s%s%s", tr->pfx && *tr->pfx ? tr->pfx : "", tr->pfx && *tr->pfx ? "." : "", name);
    for (int i = tr->replay; i < r->nt; i++) {
        const gckpt_tensor *t = &r->t[i];
        if (t->kind != GCKPT_T_PARAM || t->section != r->sec_params[tr->sec]) continue;
        tr->replay = i + 1;
        bool same = !strcmp(t->name, full) && t->shape.rows == shape.rows &&
                    t->shape.mult == shape.mult && t->shape.width == shape.width;
        return same ? i : -1;
    }
    return -1;
}

/* The tables are sized for the largest recipe any model and option make (test_consistency
 * recipe_limits); a recipe past them is a bug in a recipe, not an input to refuse: stop with
 * its name rather than write past the table. */
static void table_room(int n, int max, const char *what, const char *name)
{
    if (n < max) return;
    fprintf(stderr, "gckpt: internal error: the recipe has more than %d %s (at %s): raise GCKPT_MAX_%s\n", max,
            what, name, what[0] == 't' ? "TENSORS" : "OPS");
    abort();
}

int tnew(tracer *tr, const char *name, int kind, uint8_t dtype, gckpt_shape shape, bool requires_grad)
{
    gckpt_recipe *r = tr->r;
    if (kind == GCKPT_T_PARAM && tr->replay >= 0) {
        int p = replayed(tr, name, shape);
        if (p >= 0) return p;
        tr->replay = r->nt; /* block types of one group that differ in parameters: new ones,
                             * which the parameter table refuses (gckpt_params_build) */
    }
    table_room(r->nt, GCKPT_MAX_TENSORS, "tensors", name);
    int i = r->nt++;
    gckpt_tensor *t = &r->t[i];
    memset(t, 0, sizeof *t);
    if (tr->pfx && *tr->pfx)
        snprintf(t->name, sizeof t->name, "%s.%s", tr->pfx, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = (uint8_t)kind;
    t->section = (uint8_t)tr->sec;
    t->dtype = dtype;
    t->shape = shape;
    t->requires_grad = requires_grad;
    t->hold_to = -1;
    return i;
}

int like(tracer *tr, const char *name, int x, uint8_t dtype, bool requires_grad)
{
    return tnew(tr, name, GCKPT_T_ACT, dtype, tr->r->t[x].shape, requires_grad);
}

int opnew(tracer *tr, const char *name, int kind, int nin, const int *in, int out, int out2, int nsaved,
          const int *saved)
{
    gckpt_recipe *r = tr->r;
    table_room(r->nop, GCKPT_MAX_OPS, "ops", name);
    int i = r->nop++;
    gckpt_op *o = &r->op[i];
    memset(o, 0, sizeof *o);
    if (tr->pfx && *tr->pfx)
        snprintf(o->name, sizeof o->name, "%s.%s", tr->pfx, name);
    else
        snprintf(o->name, sizeof o->name, "%s", name);
    o->kind = (uint8_t)kind;
    o->section = (uint8_t)tr->sec;
    o->nin = (uint8_t)nin;
    for (int k = 0; k < nin; k++) o->in[k] = (int16_t)in[k];
    o->out[0] = (int16_t)out;
    o->out[1] = (int16_t)out2;
    o->nsaved = 0;
    /* autograd builds no node, so saves nothing, when no input needs a gradient */
    bool any = false;
    for (int k = 0; k < nin; k++) any |= r->t[in[k]].requires_grad;
    if (!any) nsaved = 0;
    for (int k = 0; k < nsaved; k++) {
        if (saved[k] < 0) continue;
        /* parameters cost nothing to save; dedup repeated storages */
        if (r->t[saved[k]].kind == GCKPT_T_PARAM) {
            o->saves_param = true;
            continue;
        }
        bool dup = false;
        for (int q = 0; q < o->nsaved; q++) dup |= o->saved[q] == saved[k];
        if (!dup) o->saved[o->nsaved++] = (int16_t)saved[k];
    }
    o->bwd_mult = 1.0;
    return i;
}

gckpt_op *last_op(tracer *tr) { return &tr->r->op[tr->r->nop - 1]; }

void setprim(tracer *tr, int prim, int bcast, double sa, double sb, uint64_t width)
{
    gckpt_op *o = last_op(tr);
    o->prim = (uint8_t)prim;
    o->bcast = (uint8_t)bcast;
    o->sa = sa;
    o->sb = sb;
    o->width = width;
}

void attn_dims(tracer *tr, uint64_t kv_heads)
{
    gckpt_op *o = last_op(tr);
    o->heads = (uint32_t)tr->m->heads;
    o->kv_heads = (uint32_t)kv_heads;
    o->qk_dim = (uint32_t)gckpt_qk_head_dim(tr->m); /* head_dim, or MLA's qk and v head dims */
    o->v_dim = (uint32_t)gckpt_v_head_dim(tr->m);
}

void expert_dims(tracer *tr)
{
    gckpt_op *o = last_op(tr);
    o->experts = (uint32_t)tr->m->experts;
    o->top_k = (uint32_t)tr->m->top_k;
}

void count_flops(tracer *tr)
{
    gckpt_op *o = last_op(tr);
    gckpt_prim_of(o->prim)->flops(o, &o->fT, &o->fBSS);
}

void section_begin(tracer *tr, int sec)
{
    tr->sec = sec;
    tr->r->sec_begin[sec] = tr->r->nop;
    tr->pfx = "";
}

void section_end(tracer *tr)
{
    gckpt_recipe *r = tr->r;
    r->sec_end[tr->sec] = r->nop;
    for (int t = 0; t < r->nt; t++)
        if (r->t[t].hold_to == HOLD_END) r->t[t].hold_to = (int16_t)(r->nop - 1);
}

int block_types(const tracer *tr, uint8_t order[GCKPT_NBLOCK])
{
    bool seen[GCKPT_NBLOCK] = {false};
    int n = 0;
    bool one = !gckpt_sliding_masked(tr->m, tr->attn, tr->seq) && !(tr->m->experts && tr->m->dense_layers) &&
               !tr->m->nope_layers && !tr->m->cross_layers && !tr->m->gated_from;
    for (uint64_t i = 0; i < tr->m->layers && n < GCKPT_NBLOCK; i++) {
        gckpt_block_type b = gckpt_layer_block(tr->m, tr->attn, tr->seq, i);
        if (!seen[b]) order[n++] = (uint8_t)b;
        seen[b] = true;
        if (one) break; /* one type: every layer's */
    }
    return n;
}

/* The layers whose block type is of parameter group g. */
static uint64_t group_layers(const tracer *tr, int g)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < tr->m->layers; i++)
        n += gckpt_block_params_group(gckpt_layer_block(tr->m, tr->attn, tr->seq, i)) == g;
    return n;
}

void block_begin(tracer *tr, int type)
{
    gckpt_recipe *r = tr->r;
    int n = 0; /* block sections traced so far */
    for (int b = 0; b < GCKPT_NBLOCK; b++) n += r->block_sec[b] >= 0;
    int sec = n ? GCKPT_SEC_BLOCK_MORE + n - 1 : GCKPT_SEC_BLOCK;
    /* the parameters: those of the group's first section traced, or new ones */
    int g = gckpt_block_params_group((gckpt_block_type)type), owner = sec;
    for (int b = 0; b < GCKPT_NBLOCK; b++)
        if (r->block_sec[b] >= 0 && gckpt_block_params_group((gckpt_block_type)b) == g &&
            r->sec_params[r->block_sec[b]] == r->block_sec[b])
            owner = r->block_sec[b];
    r->block_sec[type] = (int8_t)sec;
    r->sec_params[sec] = (int8_t)owner;
    tr->replay = owner == sec ? -1 : 0;
    if (owner == sec && n) { /* a second group: each group's parameters are copied over its own layers */
        r->sec_layers[sec] = group_layers(tr, g);
        r->sec_layers[GCKPT_SEC_BLOCK] = group_layers(tr, gckpt_block_params_group((gckpt_block_type)gckpt_layer_block(
                                                              tr->m, tr->attn, tr->seq, 0)));
    }
    /* a VLM's token_type_ids masks: the full layers' SDPA reads their own bool mask too */
    tr->sdpa_masked = type == GCKPT_BLOCK_SLIDING_SDPA || (type == GCKPT_BLOCK_DECODER && tr->full_mask >= 0);
    tr->sdpa_mask = type == GCKPT_BLOCK_SLIDING_SDPA ? tr->bool_mask : tr->full_mask;
    tr->no_rope = type == GCKPT_BLOCK_NOPE;
    section_begin(tr, sec);
}

void block_end(tracer *tr, int x, int y)
{
    gckpt_recipe *r = tr->r;
    r->sec_in[tr->sec] = x;
    r->sec_out[tr->sec] = y;
    if (tr->sec == GCKPT_SEC_BLOCK) {
        r->block_in = x;
        r->block_out = y;
    }
    section_end(tr);
    tr->replay = -1;
    tr->sdpa_masked = false;
}

const char *enter_module(tracer *tr, const char *name, char *buf, size_t n)
{
    const char *prev = tr->pfx;
    snprintf(buf, n, "%s%s%s", prev && *prev ? prev : "", prev && *prev ? "." : "", name);
    tr->pfx = buf;
    return prev;
}

void hold(tracer *tr, int t, int until)
{
    if (t < 0) return;
    gckpt_tensor *tt = &tr->r->t[t];
    if (tt->kind != GCKPT_T_ACT) return;
    if (tt->hold_to < until) tt->hold_to = (int16_t)until;
}

void hold_here(tracer *tr, int t) { hold(tr, t, tr->r->nop - 1); }

static bool same_shape(const gckpt_shape *a, const gckpt_shape *b)
{
    return a->rows == b->rows && a->mult == b->mult && a->width == b->width && a->plus == b->plus;
}

/* Broadcast mode of y against x from their shapes. */
static int bcast_of(tracer *tr, int x, int y, uint64_t *width)
{
    const gckpt_tensor *tx = &tr->r->t[x], *ty = &tr->r->t[y];
    *width = 0;
    if (same_shape(&tx->shape, &ty->shape)) return GCKPT_BC_NONE;
    if (ty->kind == GCKPT_T_PARAM) {
        *width = gckpt_param_numel(tr->r, y);
        return GCKPT_BC_COL;
    }
    if (!ty->shape.width) return GCKPT_BC_MASK;
    if (ty->shape.rows == GCKPT_ROWS_FIXED && ty->shape.mult == 1) {
        /* a vector or a 0-d tensor that is not a parameter (Gemma's fp32 1 + weight, its
         * embedding normalizer): repeated over rows */
        *width = ty->shape.width;
        return GCKPT_BC_COL;
    }
    if (ty->shape.rows == GCKPT_ROWS_SEQ) {
        *width = ty->shape.width;
        return GCKPT_BC_TABLE;
    }
    *width = tx->shape.width / ty->shape.width;
    return GCKPT_BC_ROW;
}

/* ---- parameters, sources, casts ---------------------------------------------------- */

/* Under LoRA / QLoRA every parameter of the model is frozen (peft; prepare_model_for_
 * kbit_training): adapters and modules_to_save copies are made by recipe_lora.c. */
int param(tracer *tr, const char *name, uint64_t rows, uint64_t cols, gckpt_param_role role)
{
    int t = tnew(tr, name, GCKPT_T_PARAM, tr->param_dt, fixed_shape(rows, cols),
                 !gckpt_peft_on(tr->peft) && !tr->frozen_params);
    tr->r->t[t].role = (uint8_t)role;
    return t;
}

/* A SOURCE op (no inputs) making `what`; with second_name also a second output of the
 * same shape and dtype (rotary sin next to cos) in *second. */
int source(tracer *tr, const char *name, gckpt_source what, uint8_t dtype, gckpt_shape shape, const char *second_name,
           int *second)
{
    int t = tnew(tr, name, GCKPT_T_CONST, dtype, shape, false);
    int t2 = second_name ? (*second = tnew(tr, second_name, GCKPT_T_CONST, dtype, shape, false)) : -1;
    opnew(tr, name, GCKPT_OP_ELEM, 0, NULL, t, t2, 0, NULL);
    last_op(tr)->source = (uint8_t)what;
    return t;
}

void layer_kwarg(tracer *tr, int t)
{
    if (t < 0) return;
    tr->r->t[t].fwd_end_free = tr->r->t[t].base_end_free = true;
    tr->r->t[t].ckpt_held = true;
}

/* x.to(dtype): same dtype is a no-op returning x (no copy, no op). */
int cast_to(tracer *tr, int x, uint8_t dtype, const char *name)
{
    if (dt(tr, x) == dtype) return x;
    int y = like(tr, name, x, dtype, rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, y, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    return y;
}

/* autocast's cast of an op input to the op's compute dtype (no-op without AMP). */
int autocast_to(tracer *tr, int x, uint8_t dtype, const char *name)
{
    return tr->amp ? cast_to(tr, x, dtype, name) : x;
}

/* autocast's cast of an input of an op on its fp32 list (pow, rsqrt, exp, softmax, ...):
 * CUDA's lists only. CPU autocast leaves those ops in their 16-bit input's dtype
 * (measured, FINDINGS R-AMP-3: GPT-2's gelu_new pow(x, 3) stays bf16 on the CPU). */
int autocast_fp32(tracer *tr, int x, const char *name)
{
    return tr->cuda_lists ? autocast_to(tr, x, F32, name) : x;
}

/* floating promotion between fp32 and a 16-bit type: the wider wins */
static uint8_t promote(const tracer *tr, int x, int y)
{
    return gckpt_dtype_bits(dt(tr, x)) >= gckpt_dtype_bits(dt(tr, y)) ? dt(tr, x) : dt(tr, y);
}

/* The CPU target's mixed-dtype elementwise op x (op) y (recipe.h, fws_promote): the
 * narrower operand is copied to the result dtype for the forward, and for a mul the
 * backward's grad * other copies a narrower `other` the same way. */
static void cpu_promotion(tracer *tr, int x, int y)
{
    if (!tr->cpu || dt(tr, x) == dt(tr, y)) return;
    gckpt_op *op = last_op(tr);
    int narrow = gckpt_dtype_bits(dt(tr, x)) < gckpt_dtype_bits(dt(tr, y)) ? 0 : 1;
    op->fws_promote = (uint8_t)(1u << narrow);
    if (op->prim == GCKPT_P_MUL && rg(tr, narrow ? x : y)) op->bws_promote = (uint8_t)(1u << narrow);
}

/* ---- elementwise --------------------------------------------------------------------- */

/* x * y (broadcasting; the output is shaped like the larger operand x). A broadcast y
 * that needs a gradient gets grad * x at the output's size first; the autograd engine
 * then reduces it to y's shape (validate_outputs): one output-sized temporary. */
int mul(tracer *tr, int x, int y, const char *name)
{
    int o = like(tr, name, x, promote(tr, x, y), rg(tr, x) || rg(tr, y));
    int saved[2] = {rg(tr, x) ? y : -1, rg(tr, y) ? x : -1};
    opnew(tr, name, GCKPT_OP_ELEM, 2, (int[]){x, y}, o, -1, 2, saved);
    uint64_t w;
    int bc = bcast_of(tr, x, y, &w);
    setprim(tr, GCKPT_P_MUL, bc, 0, 0, w);
    last_op(tr)->bws_out = bc != GCKPT_BC_NONE && rg(tr, y);
    cpu_promotion(tr, x, y);
    return o;
}

/* x * sa + sb with python scalars: nothing saved. */
int scal(tracer *tr, int x, const char *name, double sa, double sb)
{
    int o = like(tr, name, x, dt(tr, x), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_AFFINE, GCKPT_BC_NONE, sa, sb, 0);
    return o;
}

/* x + y: nothing saved; the output grad flows to an input of the same dtype unchanged. */
int add(tracer *tr, int x, int y, const char *name)
{
    int o = like(tr, name, x, promote(tr, x, y), rg(tr, x) || rg(tr, y));
    int k = opnew(tr, name, GCKPT_OP_ELEM, 2, (int[]){x, y}, o, -1, 0, NULL);
    gckpt_op *op = &tr->r->op[k];
    uint64_t w;
    int bc = bcast_of(tr, x, y, &w);
    setprim(tr, GCKPT_P_ADD, bc, 0, 0, w);
    /* the grad is passed through only to an input of the same dtype and shape (a
     * broadcast input gets a reduced copy, another dtype a cast copy) */
    cpu_promotion(tr, x, y);
    const gckpt_tensor *out = &tr->r->t[o];
    for (int q = 0; q < 2; q++) {
        const gckpt_tensor *ti = &tr->r->t[q ? y : x];
        op->grad_alias[q] = ti->dtype == out->dtype && same_shape(&ti->shape, &out->shape);
    }
    return o;
}

/* unary op that saves its input (pow, silu, gelu, clamp) or its output (rsqrt, tanh,
 * sigmoid), as its row of the primitives' table says (bwd_reads); the composite
 * derivatives' temporaries are the table's too (bws_in: pow's and rsqrt's). */
int unary(tracer *tr, int x, const char *name, bool fp32_list, int prim, double sa)
{
    const gckpt_prim_info *info = gckpt_prim_of(prim);
    if (fp32_list) x = autocast_fp32(tr, x, "to_f32");
    int o = like(tr, name, x, dt(tr, x), rg(tr, x));
    int s = info->bwd_reads & GCKPT_PR_OUT0 ? o : x;
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 1, &s);
    setprim(tr, prim, GCKPT_BC_NONE, sa, 0, 0);
    last_op(tr)->bws_in = info->bws_in;
    return o;
}

/* reduction over the last dimension (mean): width / group elements per row. */
static int reduce_last(tracer *tr, int x, uint64_t group, const char *name)
{
    gckpt_shape sh = tr->r->t[x].shape;
    sh.width /= group;
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, x), sh, rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_MEAN, GCKPT_BC_NONE, 0, 0, group);
    return o;
}

/* F.dropout / nn.Dropout with p > 0. CUDA: native_dropout, the output plus a bool mask
 * (1 byte per element) that its backward keeps. CPU target: at::dropout's composite
 * (native_dropout is CUDA-only there): noise = empty_like(x).bernoulli_(1-p).div_(1-p) in
 * x's dtype, then x * noise, which keeps the noise. */
int dropout(tracer *tr, int x, double p, const char *name)
{
    if (p <= 0) return x;
    char nm[40];
    snprintf(nm, sizeof nm, "%s.mask", name);
    if (tr->cpu) {
        int noise = like(tr, nm, x, dt(tr, x), false);
        opnew(tr, nm, GCKPT_OP_ELEM, 1, (int[]){x}, noise, -1, 0, NULL);
        setprim(tr, GCKPT_P_DROPOUT, GCKPT_BC_NONE, p, 0, 0);
        return mul(tr, x, noise, name);
    }
    int o = like(tr, name, x, dt(tr, x), rg(tr, x));
    int mask = like(tr, nm, x, BOOL, false);
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, mask, 1, &mask);
    setprim(tr, GCKPT_P_DROPOUT, GCKPT_BC_NONE, p, 0, 0);
    return o;
}

/* ---- embedding, linear ------------------------------------------------------------ */

/* nn.Embedding: rows of `table` picked by `ids`; saves the ids. The table is an
 * embedding (role) because it is the table of a lookup. */
int embedding(tracer *tr, const char *name, int table, int ids)
{
    gckpt_shape sh = tr->r->t[ids].shape;
    sh.width = tr->r->t[table].shape.width;
    /* a frozen table saves nothing; its output still requires grad: with checkpointing
     * enable_input_require_grads makes it a leaf that does (FINDINGS R-PEFT-4, R-PEFT-13) */
    int o = tnew(tr, name, GCKPT_T_ACT, tr->stream_dt, sh, true);
    opnew(tr, name, GCKPT_OP_EMBED, 2, (int[]){table, ids}, o, -1, 1, (int[]){rg(tr, table) ? ids : -1});
    setprim(tr, GCKPT_P_EMBED, GCKPT_BC_NONE, 0, 0, sh.width);
    tr->r->t[table].role = GCKPT_ROLE_EMBEDDING;
    return o;
}

/* autocast's cached cast of a weight; lives until the forward pass ends. autocast caches
 * only leaves that require grad: a frozen weight's cast is a plain activation, kept by
 * the linear that saves it (FINDINGS R-PEFT-8), else freed after the op. */
int weight_cast(tracer *tr, int w, const char *name)
{
    if (!tr->amp) return w;
    if (!rg(tr, w)) {
        int c = tnew(tr, name, GCKPT_T_ACT, tr->compute_dt, tr->r->t[w].shape, false);
        opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){w}, c, -1, 0, NULL);
        setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
        return c;
    }
    int c = tnew(tr, name, GCKPT_T_WCAST, tr->compute_dt, tr->r->t[w].shape, true);
    tr->r->t[c].fwd_end_free = true;
    tr->r->t[c].param = (int16_t)w;
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){w}, c, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    return c;
}

int linear_node(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name, uint8_t out_dt,
                const int saved[2])
{
    gckpt_shape sh = tr->r->t[x].shape;
    sh.width = sh.width / in_f * out_f;
    bool wg = rg(tr, w), xg = rg(tr, x);
    int o = tnew(tr, name, GCKPT_T_ACT, out_dt, sh, wg || xg || (bias >= 0 && rg(tr, bias)));
    int ins[3] = {x, w, bias};
    int k = opnew(tr, name, GCKPT_OP_MATMUL, bias >= 0 ? 3 : 2, ins, o, -1, 2, saved);
    setprim(tr, GCKPT_P_LINEAR, GCKPT_BC_NONE, 0, 0, 0);
    gckpt_op *op = &tr->r->op[k];
    op->in_f = in_f;
    op->out_f = out_f;
    count_flops(tr);
    op->bwd_mult = (double)(wg + xg); /* a GEMM per gradient: input's, weight's (12.9) */
    op->grad_view[0] = true;
    return o;
}

/* Linear (F.linear / Conv1D addmm): saves its (autocast-cast) input and weight. The
 * gradient of the [b, s, in] input is mm's result viewed back to 3-D, and F.linear's
 * weight gradient is the transpose of mm's column-major result (TBackward): views, so
 * the autograd engine never accumulates into them in place (InputBuffer's
 * can_accumulate_inplace wants the storage's only reference). Conv1D (gpt2's blocks)
 * uses its weight untransposed in addmm: a fresh gradient. */
static int linear_op(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name,
                     bool is_conv1d)
{
    /* autocast casts the arguments in the order the compiler evaluates its wrapper's
     * call arguments, right to left with GCC: F.linear(x, w, bias) casts bias, w, x;
     * Conv1D's addmm(bias, x, w) casts w, x, bias. The later cast's ToCopyBackward runs
     * first (the engine takes the highest sequence number) */
    char nm[40];
    int xi = x, wc = w, bc = bias;
    for (int step = 0; step < 3; step++) {
        int what = is_conv1d ? (int[]){1, 0, 2}[step] : (int[]){2, 1, 0}[step]; /* 0 x, 1 w, 2 bias */
        if (what == 0) {
            snprintf(nm, sizeof nm, "%s.cast_in", name);
            xi = autocast_to(tr, x, tr->compute_dt, nm);
        } else if (what == 1) {
            snprintf(nm, sizeof nm, "%s.weight_cast", name);
            wc = weight_cast(tr, w, nm);
        } else if (bias >= 0) { /* autocast caches a low-precision copy of the bias too */
            snprintf(nm, sizeof nm, "%s.bias_cast", name);
            bc = weight_cast(tr, bias, nm);
        }
    }
    bias = bc;
    bool wg = rg(tr, w), xg = rg(tr, xi);
    /* mm saves an operand only for the other operand's gradient (a frozen weight: not
     * the input; an input that needs no gradient: not the weight's cast); ZeRO-3's
     * LinearFunctionForZeroStage3 saves the input whenever it has a node */
    bool keep_in = wg || (xg && tr->peft && tr->peft->linear_saves_input);
    int saved[2] = {keep_in ? xi : -1, xg ? wc : -1};
    int o = linear_node(tr, xi, wc, bias, in_f, out_f, name, tr->amp ? tr->compute_dt : dt(tr, x), saved);
    gckpt_op *op = last_op(tr);
    op->grad_view[1] = !is_conv1d;
    /* F.linear under ZeRO-3 is LinearFunctionForZeroStage3 (Conv1D's addmm is not) */
    op->out_before_save = !is_conv1d && tr->peft && tr->peft->linear_saves_input;
    return o;
}

int linear(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name)
{
    return linear_op(tr, x, w, bias, in_f, out_f, name, false);
}

int conv1d(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name)
{
    return linear_op(tr, x, w, bias, in_f, out_f, name, true);
}

/* ---- norms, rotary ----------------------------------------------------------------- */

/* The model's RMSNorm (gckpt_rms_kind). LlamaRMSNorm: x.to(f32); pow(2).mean(-1);
 * rsqrt(var+eps); x*r; .to(in dtype); w*y. Gemma's: (x*r) * (1 + w.float()), then
 * .type_as(x): the fp32 (1 + w) [width] is a new tensor per call, and the product saves
 * it and the fp32 normalised value. OLMo 2's: (w * (x*r)).to(in dtype): the product is
 * fp32 and saves the normalised value. The module's forward holds its argument,
 * `variance` and the normalised fp32 states until it returns. */
int rmsnorm(tracer *tr, int x, uint64_t width, const char *name)
{
    char pfx[40];
    const char *outer = enter_module(tr, name, pfx, sizeof pfx);
    int w = param(tr, "weight", 1, width, GCKPT_ROLE_NORM_WEIGHT);
    int liger = liger_rms_in_place(tr, name);
    if (liger >= 0) { /* LigerRMSNorm's forward in the module's */
        int y = liger_rms_norm(tr, x, w, width, liger == 1);
        hold_here(tr, x);
        tr->pfx = outer;
        return y;
    }
    uint8_t in_dt = dt(tr, x);
    int x32 = cast_to(tr, x, F32, "to_f32");
    int p = unary(tr, x32, "pow", true, GCKPT_P_POW, 2.0);
    int var = reduce_last(tr, p, width, "mean");
    int ve = scal(tr, var, "add_eps", 1.0, tr->eps);
    int r = unary(tr, ve, "rsqrt", true, GCKPT_P_RSQRT, 0);
    int n = mul(tr, x32, r, "mul_rsqrt");
    int o;
    if (tr->m->rms == GCKPT_RMS_GEMMA) {
        int w1 = scal(tr, cast_to(tr, w, F32, "weight_f32"), "one_plus_weight", 1.0, 1.0);
        o = cast_to(tr, mul(tr, n, w1, "mul_weight"), in_dt, "to_in");
    } else if (tr->m->rms == GCKPT_RMS_F32_OUT) {
        o = cast_to(tr, mul(tr, n, w, "mul_weight"), in_dt, "to_in");
    } else {
        o = mul(tr, cast_to(tr, n, in_dt, "to_in"), w, "mul_weight");
    }
    if (tr->m->rms != GCKPT_RMS_GEMMA) hold_here(tr, var); /* Gemma's _norm has no `variance` local */
    hold_here(tr, n);
    hold_here(tr, x);
    tr->pfx = outer;
    return o;
}

/* nn.LayerNorm (native_layer_norm): saves input, mean and rstd (fp32, per token). */
int layernorm(tracer *tr, int x, uint64_t width, const char *name)
{
    char pfx[40];
    const char *outer = enter_module(tr, name, pfx, sizeof pfx);
    int w = param(tr, "weight", 1, width, GCKPT_ROLE_NORM_WEIGHT);
    int bias = param(tr, "bias", 1, width, GCKPT_ROLE_BIAS);
    int xi = autocast_to(tr, x, F32, "to_f32");
    int o = like(tr, "out", xi, dt(tr, xi), rg(tr, xi) || rg(tr, w) || rg(tr, bias));
    /* mean and rstd: two fp32 values per row, kept as one tensor here */
    gckpt_shape sh = tr->r->t[xi].shape;
    sh.width = 2 * sh.width / width;
    int stats = tnew(tr, "mean_rstd", GCKPT_T_ACT, tr->cpu ? dt(tr, xi) : F32, sh, false);
    opnew(tr, "layer_norm", GCKPT_OP_ELEM, 3, (int[]){xi, w, bias}, o, stats, 2, (int[]){xi, stats});
    setprim(tr, GCKPT_P_LAYERNORM, GCKPT_BC_NONE, tr->eps, 0, width);
    tr->pfx = outer;
    return o;
}

/* The first half of a rotary table (cos[..., : d // 2]): a view. */
int table_half(tracer *tr, int t, const char *name)
{
    gckpt_shape sh = tr->r->t[t].shape;
    sh.width /= 2;
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, t), sh, false);
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){t}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_SPLIT, GCKPT_BC_NONE, -1, 0, 2 * sh.width); /* the first columns of one head */
    last_op(tr)->view_fwd = true;
    return o;
}

/* GLM's apply_rotary_pos_emb: cos[..., : d // 2].repeat_interleave(2, dim=-1), and sin's: a
 * new pair per call (per layer), each entry of the first half twice; kept by the products
 * that read them (CAT_HALVES with sa 1: the two inputs' columns interleaved). */
void rope_table_pairs(tracer *tr, int *cos, int *sin)
{
    for (int k = 0; k < 2; k++) {
        int *t = k ? sin : cos;
        int h = table_half(tr, *t, k ? "rope.sin_half" : "rope.cos_half");
        const char *nm = k ? "rope.sin_pairs" : "rope.cos_pairs";
        int o = like(tr, nm, *t, dt(tr, *t), false);
        opnew(tr, nm, GCKPT_OP_ELEM, 2, (int[]){h, h}, o, -1, 0, NULL);
        setprim(tr, GCKPT_P_CAT_HALVES, GCKPT_BC_NONE, 1, 0, tr->m->rotary_dim);
        *t = o;
    }
}

/* HF rotate_half + apply_rotary_pos_emb for one of q / k: x*cos + cat(-x2, x1)*sin (GLM,
 * rope_interleave: x*cos + stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)*sin, the
 * same tensors: NEG_HALF and CAT_HALF with sa 1). */
int rope(tracer *tr, int x, int cos, int sin, const char *name)
{
    char nm[40];
    snprintf(nm, sizeof nm, "%s.mul_cos", name);
    int xc = mul(tr, x, cos, nm);
    gckpt_shape half = tr->r->t[x].shape;
    half.width /= 2;
    snprintf(nm, sizeof nm, "%s.neg", name);
    int ng = tnew(tr, nm, GCKPT_T_ACT, dt(tr, x), half, rg(tr, x));
    opnew(tr, nm, GCKPT_OP_ELEM, 1, (int[]){x}, ng, -1, 0, NULL);
    double pairs = tr->m->rope_interleave ? 1 : 0;
    setprim(tr, GCKPT_P_NEG_HALF, GCKPT_BC_NONE, pairs, 0, tr->m->rotary_dim); /* per rotated head */
    snprintf(nm, sizeof nm, "%s.cat", name);
    int rot = like(tr, nm, x, dt(tr, x), rg(tr, x));
    opnew(tr, nm, GCKPT_OP_ELEM, 2, (int[]){ng, x}, rot, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAT_HALF, GCKPT_BC_NONE, pairs, 0, tr->m->rotary_dim);
    snprintf(nm, sizeof nm, "%s.mul_sin", name);
    int rs = mul(tr, rot, sin, nm);
    snprintf(nm, sizeof nm, "%s.add", name);
    return add(tr, xc, rs, nm);
}

/* Partial rotary (Phi-3, GPT-NeoX): cat([rope(x[..., :rotary_dim]), x[..., rotary_dim:]])
 * per head, a new tensor also when the pass-through part is empty. */
int rope_partial(tracer *tr, int x, int cos, int sin, const char *name)
{
    const gckpt_model *m = tr->m;
    char nm[40];
    uint64_t heads = tr->r->t[x].shape.width / m->head_dim;
    snprintf(nm, sizeof nm, "%s.rot", name);
    int xr = m->rotary_dim == m->head_dim ? x : slice_view(tr, x, heads * m->rotary_dim, nm);
    int y = rope(tr, xr, cos, sin, name);
    snprintf(nm, sizeof nm, "%s.cat_pass", name);
    return cat_copy(tr, y, x, nm);
}
