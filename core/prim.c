/* The primitives' table (gckpt/core/prim.h): one row per gckpt_prim. A row's output size
 * rule is the size of what PyTorch's op returns for the operands HF's code hands it
 * (recipe.h says what each primitive computes). */
#include "gckpt/core/prim.h"

#include <stddef.h>

/* elements of an operand */
static uint64_t dim_n(const gckpt_prim_dim *d) { return d->rows * d->cols; }

/* ---- output size rules ---------------------------------------------------------------- */

/* shaped like input 0 (dropout's mask, topk-free sorts and permutations too) */
static bool like_in0(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = dim_n(&z->in[0]);
    return true;
}

/* shaped like x; y one value per row of x (the sink softmax's row max) or like x */
static bool sub_size(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    const gckpt_prim_dim *x = &z->in[0];
    (void)k;
    *n = dim_n(x);
    /* a ROW broadcast without a width groups whole rows (kernel_math.h gckpt_bcast_width) */
    return op->bcast == GCKPT_BC_ROW ? dim_n(&z->in[1]) * (op->width ? op->width : x->cols) == *n
                                     : op->bcast != GCKPT_BC_NONE || dim_n(&z->in[1]) == *n;
}

static bool neg_half(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = dim_n(&z->in[0]) / 2;
    return dim_n(&z->in[0]) % 2 == 0;
}

static bool cat_half(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = dim_n(&z->in[1]);
    return dim_n(&z->in[0]) * 2 == *n;
}

/* shaped like the input whose rotated part it replaces; MLA's per-head cat (sa 1): heads
 * of width, in0's part narrower than a head, in1's one head or one per head */
static bool cat_pass(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    if (z->op->sa == 1) {
        uint64_t H = z->op->heads, w = z->op->width, rows = z->in[0].rows;
        *n = rows * H * w;
        if (!H || !w || z->in[1].rows != rows || z->in[0].cols % H || z->in[0].cols / H >= w) return false;
        uint64_t wb = w - z->in[0].cols / H;
        return z->in[1].cols == wb || z->in[1].cols == H * wb;
    }
    *n = dim_n(&z->in[1]);
    return dim_n(&z->in[0]) <= *n;
}

static bool mean(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width, x = dim_n(&z->in[0]);
    (void)k;
    *n = w ? x / w : 0;
    return w && x % w == 0;
}

static bool linear(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t x = dim_n(&z->in[0]);
    (void)k;
    *n = op->in_f ? x / op->in_f * op->out_f : 0;
    return op->in_f && x % op->in_f == 0 && dim_n(&z->in[1]) == op->in_f * op->out_f &&
           (op->nin < 3 || dim_n(&z->in[2]) == op->out_f);
}

/* out[1]: mean and rstd per row */
static bool layernorm(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width, x = dim_n(&z->in[0]);
    *n = k == 0 ? x : w ? 2 * (x / w) : 0;
    return w && x % w == 0;
}

/* out[0] every query head, out[1] the logsumexp per head; an additive mask [b, 1, s, s] */
static bool sdpa(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    *n = z->in[0].rows * (k == 0 ? (uint64_t)z->op->heads * z->op->v_dim : z->op->heads);
    return z->op->nin < 4 || dim_n(&z->in[3]) == z->in[0].rows * z->s;
}

/* every query head */
static bool repeat_kv(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = z->in[0].rows * z->op->heads * z->op->qk_dim;
    return true;
}

/* the block's columns */
static bool split(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = z->in[0].rows * z->out_cols;
    return z->out_cols > 0;
}

/* [b, heads, s, s] */
static bool qk(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = z->in[0].rows * z->op->heads * z->s;
    return true;
}

/* the probabilities' rows of one head's width */
static bool pv(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = z->in[0].rows * z->op->v_dim;
    return true;
}

/* rows of in0's width picked by in1 */
static bool gather(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width;
    (void)k;
    if (z->op->sa == 1) { /* gather(1, idx): idx's shape, rows of `experts` */
        *n = dim_n(&z->in[1]);
        return w && z->op->experts && z->in[1].rows == z->in[0].rows && z->in[1].cols == w &&
               z->in[0].cols == z->op->experts;
    }
    *n = dim_n(&z->in[1]) * w;
    return w && dim_n(&z->in[0]) % w == 0;
}

/* the grouped router's mask: sa 0 and 1 rows of `width`, else in0's shape */
static bool route_mask(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    uint64_t w = z->op->width, c = z->in[0].cols;
    if (z->op->sa == 0 || z->op->sa == 1) {
        *n = z->in[0].rows * w;
        return w && c && (z->op->sa == 0 ? c <= w : w % c == 0);
    }
    *n = dim_n(&z->in[0]);
    return z->op->sa == 2 || (z->op->sa == 3 && dim_n(&z->in[1]) == *n);
}

/* the loss and the total weight */
static bool nll(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width;
    (void)k;
    *n = 1;
    return w && dim_n(&z->in[1]) * w == dim_n(&z->in[0]);
}

/* the fused losses (recipe.h): a scalar loss; CCE's lse per row of in0 and the [width]
 * (vocab) logit averages */
static bool fused_lce(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = 1;
    return z->op->width && z->in[1].rows == z->op->width;
}

static bool cce_lse(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    *n = k == 0 ? z->in[0].rows : z->op->width;
    return z->op->width && z->in[1].rows == z->op->width;
}

/* Liger's SwiGLU: the gate and up outputs alike, the output like them */
static bool swiglu(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = dim_n(&z->in[0]);
    return dim_n(&z->in[1]) == *n;
}

/* Liger's RMSNorm: y like x, one rstd per row of width */
static bool liger_rms(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width, x = dim_n(&z->in[0]);
    *n = k == 0 ? x : w ? x / w : 0;
    return w && x % w == 0;
}

/* the patch conv: in0's pixels in patches of in_f (C p p) elements, out_f per patch */
static bool patch_conv(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t x = dim_n(&z->in[0]);
    (void)k;
    *n = op->in_f ? x / op->in_f * op->out_f : 0;
    return op->in_f && x % op->in_f == 0 && dim_n(&z->in[1]) == op->in_f * op->out_f &&
           (!z->in[2].present || dim_n(&z->in[2]) == op->out_f);
}

/* the CLS row before each sample's patches: b x (N + 1) rows of width */
static bool cat_cls(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width;
    (void)k;
    *n = dim_n(&z->in[1]) + z->b * w;
    return w && dim_n(&z->in[0]) == w && dim_n(&z->in[1]) % w == 0;
}

/* rows sa .. of each of the b samples of s rows */
static bool rows_of(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t w = op->width, first = (uint64_t)op->sa, rows = op->sb > 0 ? (uint64_t)op->sb : z->s - first;
    (void)k;
    *n = z->b * rows * w;
    return w && first + rows <= z->s && dim_n(&z->in[0]) == z->b * z->s * w;
}

/* the pooled grid: sb tokens of each sample's s patches */
static bool avg_pool(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t w = op->width, tokens = (uint64_t)op->sb;
    (void)k;
    *n = z->b * tokens * w;
    return w && tokens && tokens <= z->s && dim_n(&z->in[0]) == z->b * z->s * w;
}

/* Liger's routing metadata: three int32 per (token, expert) pair; expert_start_idx [E + 1]
 * and the two M-tile arrays (E tiles) */
static bool liger_moe_route(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t x = dim_n(&z->in[0]);
    *n = k == 0 ? 3 * x : 3 * (uint64_t)op->experts + 1;
    return op->top_k && op->experts && x % op->top_k == 0;
}

/* Liger's fused experts: out[0] like x [T, in_f], out[1] pre_act [T, top_k x 2 out_f] */
static bool liger_moe(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t x = dim_n(&z->in[0]), e = op->experts, f = op->in_f * op->out_f;
    *n = op->in_f == 0 ? 0 : k == 0 ? x : x / op->in_f * op->top_k * 2 * op->out_f;
    return op->in_f && x % op->in_f == 0 && dim_n(&z->in[1]) == e * 2 * f && dim_n(&z->in[2]) == e * f &&
           dim_n(&z->in[3]) == x / op->in_f * op->top_k;
}

/* values, indices: width of each row of the experts' probabilities */
static bool topk(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width, x = dim_n(&z->in[0]), e = z->op->experts;
    (void)k;
    *n = e ? x / e * w : 0;
    return w && w <= e && x % e == 0;
}

/* groups of width, or (sb: the load-balancing loss's sums) width column sums */
static bool sum(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t w = op->width, x = dim_n(&z->in[0]);
    (void)k;
    *n = op->sb > 0 ? w : w ? x / w : 0;
    return w && x % w == 0;
}

/* one per expert */
static bool histc(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = z->op->width;
    return z->op->width > 0;
}

/* [S, in_f] by [E x out_f, in_f] in E groups (in[2]: the offsets) */
static bool grouped_linear(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_op *op = z->op;
    uint64_t x = dim_n(&z->in[0]), e = z->op->experts;
    (void)k;
    *n = op->in_f ? x / op->in_f * op->out_f : 0;
    return op->in_f && x % op->in_f == 0 && z->in[2].present && dim_n(&z->in[2]) == e &&
           dim_n(&z->in[1]) == e * op->in_f * op->out_f;
}

/* one sink per head, one more column */
static bool cat_sink(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_prim_dim *x = &z->in[0];
    (void)k;
    *n = x->cols ? dim_n(x) / x->cols * (x->cols + 1) : 0;
    return x->cols && z->s && dim_n(&z->in[1]) > 0 && x->rows % z->s == 0;
}

/* values, indices: one per row */
static bool max_last(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_prim_dim *x = &z->in[0];
    (void)k;
    *n = x->cols ? dim_n(x) / x->cols : 0;
    return x->cols > 0;
}

/* the first s of s + 1 columns */
static bool drop_sink(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    const gckpt_prim_dim *x = &z->in[0];
    (void)k;
    *n = x->cols ? dim_n(x) / x->cols * (x->cols - 1) : 0;
    return x->cols > 1;
}

/* two halves of each head of width */
static bool cat_halves(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    uint64_t w = z->op->width, x = dim_n(&z->in[0]);
    (void)k;
    *n = 2 * x;
    return w && w % 2 == 0 && dim_n(&z->in[1]) == x && x % (w / 2) == 0;
}

/* [s, s] (or a VLM's per-sample [b, 1, s, s]) -> [b, 1, s, s] */
static bool bool_mask(const gckpt_prim_sizes *z, int k, uint64_t *n)
{
    (void)k;
    *n = z->b * z->s * z->s;
    return dim_n(&z->in[0]) == z->s * z->s || dim_n(&z->in[0]) == z->b * z->s * z->s;
}

/* ---- FLOPs ---------------------------------------------------------------------------------- */

/* a GEMM per token: [in_f] by [in_f, out_f] */
static void linear_flops(const gckpt_op *op, double *fT, double *fBSS)
{
    *fT = 2.0 * (double)op->in_f * (double)op->out_f;
    *fBSS = 0;
}

/* the fused losses: sa GEMMs of [in_f] x [in_f, out_f] per token (Liger's forward: 3, the
 * logits, the input's and the weight's gradients; CCE's lse pass 1; CCE's loss: the target
 * row's dot, out_f 1) */
static void fused_lce_flops(const gckpt_op *op, double *fT, double *fBSS)
{
    *fT = 2.0 * op->sa * (double)op->in_f * (double)op->out_f;
    *fBSS = 0;
}

/* ... for each of the top_k pairs of a token */
static void grouped_flops(const gckpt_op *op, double *fT, double *fBSS)
{
    *fT = 2.0 * (double)op->in_f * (double)op->out_f * (double)op->top_k;
    *fBSS = 0;
}

/* Liger's fused experts: gate_up (2 out_f x in_f) and down (in_f x out_f) per pair */
static void liger_moe_flops(const gckpt_op *op, double *fT, double *fBSS)
{
    *fT = 6.0 * (double)op->in_f * (double)op->out_f * (double)op->top_k;
    *fBSS = 0;
}

/* scores q k^T per head: s x s dot products of qk_dim */
static void qk_flops(const gckpt_op *op, double *fT, double *fBSS)
{
    *fT = 0;
    *fBSS = 2.0 * (double)op->heads * (double)op->qk_dim;
}

/* probabilities times v per head */
static void pv_flops(const gckpt_op *op, double *fT, double *fBSS)
{
    *fT = 0;
    *fBSS = 2.0 * (double)op->heads * (double)op->v_dim;
}

/* causal: QK^T and PV over half the score matrix; with an additive mask (input 3) no block
 * is skipped, the whole matrix: twice the work (FINDINGS R-ATTN-8) */
static void sdpa_flops(const gckpt_op *op, double *fT, double *fBSS)
{
    *fT = 0;
    *fBSS = 2.0 * (double)op->heads * (double)op->qk_dim;
    if (op->nin > 3) *fBSS *= 2.0;
}

/* ---- the table -------------------------------------------------------------------------- */

enum { I0 = GCKPT_PR_IN0, I1 = GCKPT_PR_IN1, I2 = GCKPT_PR_IN2, I3 = GCKPT_PR_IN3, O0 = GCKPT_PR_OUT0, O1 = GCKPT_PR_OUT1 };

static const gckpt_prim_info prims[GCKPT_NPRIM] = {
    [GCKPT_P_SOURCE] = {.name = "source", .nin_min = 0, .nin_max = 0, .nout = 2, .no_grad = true},
    [GCKPT_P_CAST] = {.name = "cast", 1, 1, 1, .identity = true, .out_numel = like_in0},
    [GCKPT_P_MUL] = {.name = "mul", 2, 2, 1, .bwd_reads = I0 | I1, .out_numel = like_in0},
    [GCKPT_P_ADD] = {.name = "add", 2, 2, 1, .out_numel = like_in0},
    [GCKPT_P_AFFINE] = {.name = "affine", 1, 1, 1, .out_numel = like_in0},
    [GCKPT_P_NEG_HALF] = {.name = "neg_half", 1, 1, 1, .needs_width = true, .even_width = true, .out_numel = neg_half},
    [GCKPT_P_CAT_HALF] = {.name = "cat_half", 2, 2, 1, .needs_width = true, .even_width = true, .out_numel = cat_half},
    /* pow's grad * (e * x.pow(e - 1)) and rsqrt's -0.5 * grad * y.pow(3): two temporaries */
    [GCKPT_P_POW] = {.name = "pow", 1, 1, 1, .bwd_reads = I0, .bws_in = 2, .out_numel = like_in0},
    [GCKPT_P_RSQRT] = {.name = "rsqrt", 1, 1, 1, .bwd_reads = O0, .bws_in = 2, .out_numel = like_in0},
    [GCKPT_P_TANH] = {.name = "tanh", 1, 1, 1, .bwd_reads = O0, .out_numel = like_in0},
    [GCKPT_P_SILU] = {.name = "silu", 1, 1, 1, .bwd_reads = I0, .out_numel = like_in0},
    [GCKPT_P_GELU] = {.name = "gelu", 1, 1, 1, .bwd_reads = I0, .out_numel = like_in0},
    [GCKPT_P_MEAN] = {.name = "mean", 1, 1, 1, .needs_width = true, .out_numel = mean},
    [GCKPT_P_LINEAR] = {.name = "linear", 2, 3, 1, .bwd_reads = I0 | I1, .out_numel = linear,
                        .flops = linear_flops},
    [GCKPT_P_LAYERNORM] = {.name = "layer_norm", 3, 3, 2, .bwd_reads = I0 | I1 | O1, .needs_width = true,
                           .out_numel = layernorm},
    [GCKPT_P_DROPOUT] = {.name = "dropout", 1, 1, 2, .bwd_reads = O1, .out_numel = like_in0},
    [GCKPT_P_SDPA] = {.name = "sdpa", 3, 4, 2, .bwd_reads = I0 | I1 | I2 | I3 | O0 | O1, .bws_dq = true,
                      .windowed = true, .out_numel = sdpa, .flops = sdpa_flops},
    [GCKPT_P_REPEAT_KV] = {.name = "repeat_kv", 1, 1, 1, .needs_width = true, .out_numel = repeat_kv},
    [GCKPT_P_QK] = {.name = "qk", 2, 2, 1, .bwd_reads = I0 | I1, .out_numel = qk, .flops = qk_flops},
    [GCKPT_P_SOFTMAX] = {.name = "softmax", 1, 1, 1, .bwd_reads = O0, .out_numel = like_in0},
    [GCKPT_P_PV] = {.name = "pv", 2, 2, 1, .bwd_reads = I0 | I1, .out_numel = pv, .flops = pv_flops},
    [GCKPT_P_TRANSPOSE] = {.name = "transpose", 1, 1, 1, .needs_width = true, .out_numel = like_in0},
    [GCKPT_P_EMBED] = {.name = "embedding", 2, 2, 1, .bwd_reads = I1, .needs_width = true, .out_numel = gather},
    [GCKPT_P_LOG_SOFTMAX] = {.name = "log_softmax", 1, 1, 1, .bwd_reads = O0, .needs_width = true,
                             .out_numel = like_in0},
    [GCKPT_P_NLL] = {.name = "nll_loss", 2, 2, 2, .bwd_reads = I1 | O1, .needs_width = true, .out_numel = nll},
    [GCKPT_P_SPLIT] = {.name = "split", 1, 1, 1, .col_view = true, .out_numel = split},
    [GCKPT_P_CAT_PASS] = {.name = "cat_pass", 2, 2, 1, .out_numel = cat_pass},
    [GCKPT_P_TOPK] = {.name = "topk", 1, 1, 2, .bwd_reads = O1, .out_numel = topk},
    [GCKPT_P_SUM] = {.name = "sum", 1, 1, 1, .out_numel = sum},
    [GCKPT_P_DIV] = {.name = "div", 2, 2, 1, .bwd_reads = I1 | O0, .out_numel = like_in0},
    [GCKPT_P_SORT] = {.name = "sort", 1, 1, 2, .no_grad = true, .out_numel = like_in0},
    [GCKPT_P_FLOORDIV] = {.name = "floordiv", 1, 1, 1, .no_grad = true, .out_numel = like_in0},
    [GCKPT_P_GATHER_ROWS] = {.name = "gather_rows", 2, 2, 1, .bwd_reads = I1, .out_numel = gather},
    [GCKPT_P_HISTC] = {.name = "histc", 1, 1, 1, .no_grad = true, .makes_offsets = true, .out_numel = histc},
    [GCKPT_P_INVERT_PERM] = {.name = "invert_perm", 1, 1, 1, .no_grad = true, .out_numel = like_in0},
    [GCKPT_P_GROUPED_LINEAR] = {.name = "grouped_linear", 2, 3, 1, .bwd_reads = I0 | I1, .reads_offsets = true,
                                .out_numel = grouped_linear, .flops = grouped_flops},
    [GCKPT_P_SUB] = {.name = "sub", 2, 2, 1, .out_numel = sub_size},
    [GCKPT_P_CLAMP] = {.name = "clamp", 1, 1, 1, .bwd_reads = I0, .out_numel = like_in0},
    [GCKPT_P_SIGMOID] = {.name = "sigmoid", 1, 1, 1, .bwd_reads = O0, .out_numel = like_in0},
    [GCKPT_P_CAT_SINK] = {.name = "cat_sink", 2, 2, 1, .grad_pass = GCKPT_GP_FIRST_COLS, .out_numel = cat_sink},
    [GCKPT_P_MAX_LAST] = {.name = "max_last", 1, 1, 2, .bwd_reads = O1, .out_numel = max_last},
    [GCKPT_P_DROP_SINK] = {.name = "drop_sink", 1, 1, 1, .col_view = true, .out_numel = drop_sink},
    [GCKPT_P_CAT_HALVES] = {.name = "cat_halves", 2, 2, 1, .grad_pass = GCKPT_GP_HALVES, .out_numel = cat_halves},
    [GCKPT_P_BOOL_MASK] = {.name = "bool_mask", 1, 1, 1, .no_grad = true, .out_numel = bool_mask},
    [GCKPT_P_FUSED_LCE] = {.name = "fused_linear_ce", 3, 4, 1, .needs_width = true, .planned_only = true,
                           .out_numel = fused_lce, .flops = fused_lce_flops},
    [GCKPT_P_CCE_LSE] = {.name = "cce_lse", 2, 2, 2, .no_grad = true, .needs_width = true, .planned_only = true,
                         .out_numel = cce_lse, .flops = fused_lce_flops},
    [GCKPT_P_SWIGLU] = {.name = "liger_swiglu", 2, 2, 1, .bwd_reads = I0 | I1, .planned_only = true,
                        .out_numel = swiglu},
    [GCKPT_P_ROUTE_MASK] = {.name = "route_mask", 1, 2, 1, .no_grad = true, .out_numel = route_mask},
    [GCKPT_P_LIGER_RMS_NORM] = {.name = "liger_rms_norm", 2, 2, 2, .bwd_reads = I0 | I1 | O1, .needs_width = true,
                                .planned_only = true, .out_numel = liger_rms},
    [GCKPT_P_LIGER_ROPE] = {.name = "liger_rope", 3, 3, 1, .needs_width = true, .even_width = true, .bwd_reads = I1 | I2,
                            .planned_only = true, .out_numel = like_in0},
    /* a ViT tower's: host kernels (executor/host_vision.c), none on CUDA; planned only while
     * gckpt-run refuses VLM plans (gckpt_plan_executable) */
    [GCKPT_P_PATCH_CONV] = {.name = "patch_conv", 2, 3, 1, .bwd_reads = I0 | I1, .planned_only = true,
                            .out_numel = patch_conv, .flops = linear_flops},
    [GCKPT_P_CAT_CLS] = {.name = "cat_cls", 2, 2, 1, .needs_width = true, .planned_only = true,
                         .out_numel = cat_cls},
    [GCKPT_P_ROWS_OF] = {.name = "rows_of", 1, 1, 1, .needs_width = true, .planned_only = true,
                         .out_numel = rows_of},
    [GCKPT_P_AVG_POOL] = {.name = "avg_pool", 1, 1, 1, .bwd_reads = I0, .needs_width = true, .planned_only = true,
                          .out_numel = avg_pool},
    [GCKPT_P_LIGER_MOE_ROUTE] = {.name = "liger_moe_route", 1, 1, 2, .no_grad = true, .planned_only = true,
                                 .out_numel = liger_moe_route},
    [GCKPT_P_LIGER_MOE] = {.name = "liger_moe", 4, 4, 2, .bwd_reads = I0 | I1 | I2 | I3 | O1, .planned_only = true,
                           .out_numel = liger_moe, .flops = liger_moe_flops},
#ifdef GCKPT_TOY /* x.clone(): CloneBackward0 saves nothing (docs/architecture.md, "A primitive") */
    [GCKPT_P_TOY] = {.name = "toy", 1, 1, 1, .out_numel = like_in0},
#endif
};

const gckpt_prim_info *gckpt_prim_of(int prim)
{
    return prim >= 0 && prim < GCKPT_NPRIM && prims[prim].name ? &prims[prim] : NULL;
}

const char *gckpt_prim_name(int prim)
{
    const gckpt_prim_info *p = gckpt_prim_of(prim);
    return p ? p->name : "unknown";
}
