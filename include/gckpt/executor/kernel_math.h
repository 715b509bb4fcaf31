/* The scalar math of the executor's kernels, compiled for the host backend (C) and the
 * CUDA kernels (__host__ __device__): activations and their gradients, the norms'
 * per-element formulas, rotary embeddings, broadcast indexing, the optimizers' update
 * rules and adamw-8bit's state codes. One formula per fact: a kernel on either backend
 * calls these instead of writing its own. (executor) */
#ifndef GCKPT_KERNEL_MATH_H
#define GCKPT_KERNEL_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/recipe.h"        /* gckpt_bcast */
#include "gckpt/executor/exec_rng.h" /* GCKPT_HD */

/* ---- activations ------------------------------------------------------------------- */

/* x ** e, exact products for the exponents the recipes use (2: RMSNorm, 3: gelu_new) */
GCKPT_HD float gckpt_powi(float x, float e)
{
    if (e == 2.0f) return x * x;
    if (e == 3.0f) return x * x * x;
    if (e == 1.0f) return x;
    return powf(x, e);
}
/* d/dx x ** e */
GCKPT_HD float gckpt_pow_grad(float x, float e) { return e * gckpt_powi(x, e - 1.0f); }

/* rsqrt's and tanh's gradients from their output y */
GCKPT_HD float gckpt_rsqrt_grad(float y) { return -0.5f * (y * y * y); }
GCKPT_HD float gckpt_tanh_grad(float y) { return 1.0f - y * y; }

GCKPT_HD float gckpt_silu(float x) { return x / (1.0f + expf(-x)); }
GCKPT_HD float gckpt_silu_grad(float x)
{
    float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
}

/* torch.clamp(x, lo, hi) (gpt_oss's SwiGLU; lo = -inf for clamp(max=)); its gradient
 * passes only strictly inside (lo, hi): torch 2.15's clamp backward gives 0 at x == lo
 * and x == hi (measured, FINDINGS 16) */
GCKPT_HD float gckpt_clamp(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }
GCKPT_HD float gckpt_clamp_grad(float x, float lo, float hi) { return x > lo && x < hi ? 1.0f : 0.0f; }

/* sigmoid, and its gradient from its output y (sigmoid_backward(grad, result)) */
GCKPT_HD float gckpt_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
GCKPT_HD float gckpt_sigmoid_grad(float y) { return y * (1.0f - y); }

/* erf GELU, or the tanh approximation (gelu_pytorch_tanh) */
GCKPT_HD float gckpt_gelu(float x, bool tanh_approx)
{
    if (tanh_approx) {
        float k = 0.7978845608028654f, u = k * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}
GCKPT_HD float gckpt_gelu_grad(float x, bool tanh_approx)
{
    if (tanh_approx) {
        float k = 0.7978845608028654f, x2 = x * x, u = k * (x + 0.044715f * x2 * x);
        float t = tanhf(u);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x2);
    }
    float cdf = 0.5f * (1.0f + erff(x * 0.7071067811865476f));
    float pdf = expf(-0.5f * x * x) * 0.3989422804014327f;
    return cdf + x * pdf;
}

/* ---- norms ------------------------------------------------------------------------- */
/* (RMSNorm is traced as pow, mean, rsqrt and muls: its math is the functions above.) */

/* LayerNorm's reciprocal standard deviation from a row's variance */
GCKPT_HD float gckpt_layernorm_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }
/* LayerNorm's input gradient of one element: dxh = dy * w, xh the normalised input,
 * mean_dxh and mean_dxh_xh the row means of dxh and dxh * xh */
GCKPT_HD float gckpt_layernorm_grad(float rstd, float dxh, float xh, float mean_dxh, float mean_dxh_xh)
{
    return rstd * (dxh - mean_dxh - xh * mean_dxh_xh);
}

/* nn.Embedding(padding_idx=pad) adds nothing to the padding row's gradient (its forward
 * still reads the row; a tied head's gradient still reaches it); pad < 0: none */
GCKPT_HD bool gckpt_embed_grad_skips(int64_t id, int64_t pad) { return pad >= 0 && id == pad; }

/* the padding index an op's lookup honours: the model's for the token embedding, none for
 * other row gathers */
static inline int64_t gckpt_embed_pad(const gckpt_model *m, bool token_embedding)
{
    return token_embedding && m->pad ? m->pad_id : -1;
}

/* ---- rotary embeddings -------------------------------------------------------------- */

/* HF's default rotary angle of position pos at column k of a head of width hd:
 * inv_freq = 1 / theta ** (2j / hd) in fp32, emb = cat(freqs, freqs) */
GCKPT_HD float gckpt_rope_angle(uint64_t pos, uint64_t k, uint64_t hd, float theta)
{
    uint64_t j = k % (hd / 2);
    float inv = 1.0f / powf(theta, (float)(2 * j) / (float)hd);
    return (float)pos * inv;
}

/* YaRN's rotary (transformers 5.24 _compute_yarn_parameters, gpt_oss): per frequency j of
 * dim / 2, inv_freq = interpolation (1 / (factor * theta^(2j/dim))) and extrapolation
 * (1 / theta^(2j/dim)) blended by a ramp over the correction range [low, low + range);
 * cos / sin times attention_factor. low and range are computed on the host in double, as
 * Python does; the rest in fp32 as torch does. factor 0: the default rope. */
typedef struct {
    float factor, low, range, attn;
    /* rope_type "llama3" (_compute_llama3_parameters): l3_factor 0: off; the wavelengths
     * and factors as torch compares them with its fp32 tensors */
    float l3_factor, l3_low_wl, l3_high_wl, l3_old, l3_low, l3_span;
} gckpt_yarn;

/* of a model's yarn fields for dim rotary dims (head_dim) and base theta (off: factor 0) */
static inline gckpt_yarn gckpt_yarn_of(const gckpt_model *m, uint64_t dim, double theta)
{
    gckpt_yarn y = {0, 0, 1, 1, 0, 0, 0, 0, 0, 1};
    if (m->llama3.on) {
        y.l3_factor = (float)m->llama3.factor;
        y.l3_low_wl = (float)(m->llama3.original_max / m->llama3.low_freq_factor);
        y.l3_high_wl = (float)(m->llama3.original_max / m->llama3.high_freq_factor);
        y.l3_old = (float)m->llama3.original_max;
        y.l3_low = (float)m->llama3.low_freq_factor;
        y.l3_span = (float)(m->llama3.high_freq_factor - m->llama3.low_freq_factor);
    }
    if (!m->yarn.on) return y;
    double orig_max = m->yarn.original_max, beta_fast = m->yarn.beta_fast, beta_slow = m->yarn.beta_slow;
    bool truncate = m->yarn.truncate;
    double factor = m->yarn.factor, attention_factor = m->yarn.attention_factor;
    const double pi = 3.14159265358979323846;
    double d = (double)dim;
    double low = d * log(orig_max / (beta_fast * 2 * pi)) / (2 * log(theta));
    double high = d * log(orig_max / (beta_slow * 2 * pi)) / (2 * log(theta));
    if (truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0) low = 0;
    if (high > d - 1) high = d - 1;
    if (low == high) high += 0.001; /* linear_ramp_factor's guard */
    y.factor = (float)factor;
    y.low = (float)low;
    y.range = (float)(high - low);
    y.attn = (float)attention_factor;
    return y;
}

/* the rotary angle of position pos at column k of a table for dim rotary dims: the default
 * rope's (gckpt_rope_angle), llama3's or YaRN's */
GCKPT_HD float gckpt_rope_angle_yarn(uint64_t pos, uint64_t k, uint64_t dim, float theta, gckpt_yarn y)
{
    if (y.l3_factor != 0.0f) { /* llama3: wavelengths beyond low_wl slowed by factor, a ramp to high_wl */
        uint64_t j = k % (dim / 2);
        float inv = 1.0f / powf(theta, (float)(2 * j) / (float)dim);
        float wl = (float)(2 * 3.14159265358979323846) / inv;
        float inv_l = wl > y.l3_low_wl ? inv / y.l3_factor : inv;
        float smooth = (y.l3_old / wl - y.l3_low) / y.l3_span;
        float smoothed = (1.0f - smooth) * inv_l / y.l3_factor + smooth * inv_l;
        bool medium = !(wl < y.l3_high_wl) && !(wl > y.l3_low_wl);
        return (float)pos * (medium ? smoothed : inv_l);
    }
    if (y.factor == 0.0f) return gckpt_rope_angle(pos, k, dim, theta);
    uint64_t j = k % (dim / 2);
    float p = powf(theta, (float)(2 * j) / (float)dim);
    float extra = 1.0f / p, inter = 1.0f / (y.factor * p);
    float ramp = ((float)j - y.low) / y.range;
    ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
    float ef = 1.0f - ramp; /* inv_freq_extrapolation_factor */
    float inv = inter * (1.0f - ef) + extra * ef;
    return (float)pos * inv;
}

/* rotate_half's pieces (recipe.h: NEG_HALF, CAT_HALF) and their gradients, per head of
 * width w in rows of C elements (the half-width tensors have rows of C / 2). */
enum {
    GCKPT_HALF_NEG,       /* -x[..., w/2:]                   from x */
    GCKPT_HALF_CAT,       /* cat(neg, x[..., :w/2])          from neg (1) or x (2) */
    GCKPT_HALF_NEG_GRAD,  /* x's gradient: 0, then -g        from g */
    GCKPT_HALF_CAT_GRAD0, /* neg's gradient: g's first halves */
    GCKPT_HALF_CAT_GRAD1, /* x's gradient: g's second halves, then 0 */
};
/* The element of the source that element i of the result takes; *which: 0 none (the
 * result is 0), 1 the first source, 2 the second. The NEG modes negate it. */
GCKPT_HD uint64_t gckpt_half_src(int mode, uint64_t i, uint64_t C, uint64_t w, int *which)
{
    uint64_t hw = w / 2, half = C / 2;
    if (mode == GCKPT_HALF_NEG || mode == GCKPT_HALF_CAT_GRAD0) { /* i in a half-width row */
        uint64_t row = i / half, col = i % half;
        *which = 1;
        return row * C + (col / hw) * w + (mode == GCKPT_HALF_NEG ? hw : 0) + col % hw;
    }
    uint64_t row = i / C, col = i % C, hd = col / w, j = col % w;
    switch (mode) {
    case GCKPT_HALF_CAT:
        *which = j < hw ? 1 : 2;
        return j < hw ? row * half + hd * hw + j : row * C + hd * w + j - hw;
    case GCKPT_HALF_NEG_GRAD:
        *which = j < hw ? 0 : 1;
        return row * half + hd * hw + j - hw;
    default: /* GCKPT_HALF_CAT_GRAD1 */
        *which = j < hw ? 1 : 0;
        return row * C + hd * w + hw + j;
    }
}
GCKPT_HD bool gckpt_half_negates(int mode) { return mode == GCKPT_HALF_NEG || mode == GCKPT_HALF_NEG_GRAD; }

/* The storage element of element i of a strided view with rows of `cols` elements: rows of
 * W in storage from column off; with blk > 0 the view's columns are the first blk of each
 * group of stride (each head's first columns) */
GCKPT_HD uint64_t gckpt_view_index(uint64_t i, uint64_t cols, uint64_t W, uint64_t off, uint64_t blk, uint64_t stride)
{
    uint64_t row = i / cols, col = i % cols;
    if (blk) col = (col / blk) * stride + col % blk;
    return row * W + off + col;
}

/* gckpt_view_index with the elements of a block `step` apart */
GCKPT_HD uint64_t gckpt_view_index_step(uint64_t i, uint64_t cols, uint64_t W, uint64_t off, uint64_t blk, uint64_t stride,
                                        uint64_t step)
{
    uint64_t row = i / cols, col = i % cols;
    col = blk ? (col / blk) * stride + (col % blk) * step : col * step;
    return row * W + off + col;
}

/* MLA's per-head cat (GCKPT_P_CAT_PASS with sa 1): element i of the result (rows of H
 * heads of width hd) is element *src of input 0 (which 1: rows of H heads of wa) or of
 * input 1 (which 2: rows of nb heads of hd - wa, nb 1 when one head is expanded to all) */
GCKPT_HD void gckpt_cat_heads_src(uint64_t i, uint64_t H, uint64_t hd, uint64_t wa, uint64_t nb, int *which,
                                  uint64_t *src)
{
    uint64_t row = i / (H * hd), col = i % (H * hd), h = col / hd, d = col % hd, wb = hd - wa;
    *which = d < wa ? 1 : 2;
    *src = d < wa ? row * H * wa + h * wa + d : row * nb * wb + (nb == 1 ? 0 : h) * wb + (d - wa);
}

/* Partial rotary's cat (recipe.h, GCKPT_P_CAT_PASS): element i of the result (rows of C,
 * heads of width hd) is element *src of the rotated part (which 1; rows of C / hd * rd,
 * heads of width rd) or of the input (which 2) */
GCKPT_HD void gckpt_cat_pass_src(uint64_t i, uint64_t C, uint64_t hd, uint64_t rd, int *which, uint64_t *src)
{
    uint64_t row = i / C, col = i % C, h = col / hd, d = col % hd;
    *which = d < rd ? 1 : 2;
    *src = d < rd ? row * (C / hd * rd) + h * rd + d : i;
}

/* The role of a SPLIT (recipe.h, GCKPT_P_SPLIT: gpt2's q / k / v, Phi-3's fused
 * projections' blocks, role -1 each head's first columns) as a view of the packed tensor
 * (gckpt_view_index): a role of nnarrow elements (rows of *cols) in a packed tensor of
 * nwide (rows of *W), from column `first` or per head of hd; an input as wide as the role
 * (already dense) is the role itself. */
GCKPT_HD void gckpt_split_view(uint64_t rows, uint64_t nwide, uint64_t nnarrow, int role, uint64_t first, uint64_t hd,
                               uint64_t *cols, uint64_t *W, uint64_t *off, uint64_t *blk)
{
    *W = rows ? nwide / rows : 0;
    *cols = rows ? nnarrow / rows : 0;
    *off = *W > *cols && role >= 0 ? first : 0;
    *blk = *W > *cols && role < 0 && hd && *W >= hd ? *cols / (*W / hd) : 0;
}
/* ... of an interleaved SPLIT (in_f > 0: out_f columns of every in_f, GPT-NeoX): its
 * block and stride (else those of gckpt_split_view, stride hd) */
GCKPT_HD void gckpt_split_stride(uint64_t in_f, uint64_t out_f, uint64_t hd, uint64_t *blk, uint64_t *stride)
{
    if (in_f) {
        *blk = out_f;
        *stride = in_f;
    } else {
        *stride = hd;
    }
}

/* The row width of a SOFTMAX: the op's (the router's experts), else its tensor's columns
 * (attention scores: s, or s + 1 with gpt_oss's sink column), s where no shape is given */
GCKPT_HD uint64_t gckpt_softmax_width(uint64_t width, uint64_t cols, uint64_t s) { return width ? width : cols ? cols : s; }

/* ---- broadcasting --------------------------------------------------------------------- */

/* The group width of a broadcast: the op's, or for a ROW broadcast without one a whole
 * row of x (gpt_oss's sink softmax: combined_logits - max over its s + 1 columns, a
 * width that depends on the sequence) */
GCKPT_HD uint64_t gckpt_bcast_width(int mode, uint64_t width, uint64_t xcols)
{
    return mode == GCKPT_BC_ROW && !width ? xcols : width;
}

/* The element of a broadcast operand y read for element i of x (recipe.h, gckpt_bcast):
 * width the group width, xcols x's row width, s the sequence, per x's elements per
 * sequence (masks). */
GCKPT_HD uint64_t gckpt_bcast_index(int mode, uint64_t width, uint64_t xcols, uint64_t s, uint64_t per, uint64_t i)
{
    switch (mode) {
    case GCKPT_BC_ROW: return i / width;
    case GCKPT_BC_COL: return i % width;
    case GCKPT_BC_TABLE: {
        uint64_t row = i / xcols, col = i % xcols;
        return (row % s) * width + col % width;
    }
    case GCKPT_BC_MASK: return (i / per) * s * s + i % (s * s);
    default: return i;
    }
}

/* The most negative finite value of a floating dtype (the masked positions' value) */
GCKPT_HD float gckpt_dtype_lowest(uint8_t dt)
{
    return dt == GCKPT_DT_BF16 ? -3.38953139e38f : dt == GCKPT_DT_F16 ? -65504.0f : -3.40282347e38f;
}

/* Gemma's embedding normalizer: torch.tensor(hidden ** 0.5), an fp32 0-d buffer that the
 * model casts to the embeddings' dtype (the caller's store rounds it). */
GCKPT_HD float gckpt_embed_normalizer(uint64_t hidden) { return (float)sqrt((double)hidden); }

/* Whether query i sees key j: causal (transformers 5.24 masking_utils'
 * causal_mask_function, kv_idx <= q_idx) and, with a sliding window w > 0, its
 * sliding_window_overlay kv_idx > q_idx - w (the last w keys up to i itself). */
GCKPT_HD bool gckpt_key_visible(uint64_t i, uint64_t j, uint64_t window)
{
    return j <= i && (window == 0 || j + window > i);
}
/* The first key query i sees (with gckpt_key_visible: keys first..i). */
GCKPT_HD uint64_t gckpt_first_key(uint64_t i, uint64_t window) { return window && i >= window ? i - window + 1 : 0; }

/* Element i of a [b, 1, s, s] mask (or of one [s, s]): eager's additive mask, 0 where the
 * key is visible and the dtype's most negative finite value lowest where it is not;
 * window 0: causal only. */
GCKPT_HD float gckpt_attn_mask(uint64_t i, uint64_t s, uint64_t window, float lowest)
{
    uint64_t r = (i / s) % s, col = i % s;
    return gckpt_key_visible(r, col, window) ? 0.0f : lowest;
}
/* SDPA's conversion of a boolean mask (true: attend) to the query's dtype: 0 where true,
 * -inf where false (torch's convert_boolean_attn_mask) */
GCKPT_HD float gckpt_bool_mask_bias(float attend) { return attend != 0.0f ? 0.0f : -INFINITY; }

/* ---- optimizers ------------------------------------------------------------------------ */

/* AdamW's bias corrections of step (1-based): 1 - b1^step and sqrt(1 - b2^step) */
GCKPT_HD void gckpt_adam_corrections(float b1, float b2, uint64_t step, float *bc1, float *bc2s)
{
    *bc1 = 1.0f - powf(b1, (float)step);
    *bc2s = sqrtf(1.0f - powf(b2, (float)step));
}

/* One element of torch.optim.AdamW (decoupled weight decay): updates p, m, v; returns
 * the denominator sqrt(v) / bc2s + eps (adamw-foreach writes it to its temporary). */
GCKPT_HD float gckpt_adamw_update(float *p, float g, float *m, float *v, float lr, float b1, float b2, float eps,
                                  float wd, float bc1, float bc2s)
{
    *p -= lr * wd * *p;
    *m = b1 * *m + (1.0f - b1) * g;
    *v = b2 * *v + (1.0f - b2) * g * g;
    float denom = sqrtf(*v) / bc2s + eps;
    *p -= lr / bc1 * *m / denom;
    return denom;
}

/* One element of torch.optim.SGD with momentum: updates the buffer, returns the new p */
GCKPT_HD float gckpt_sgd_update(float p, float g, float *buf, float lr, float momentum, float wd)
{
    g += wd * p;
    *buf = momentum * *buf + g;
    return p - lr * *buf;
}

/* adamw-8bit's state codes (an approximation of bitsandbytes, executor/README.md), per
 * block of GCKPT_OPT_8BIT_BLOCK elements with one fp32 absmax: exp_avg as a signed
 * linear code in [-127, 127] of value / absmax, stored with offset 128; exp_avg_sq as an
 * unsigned code in [0, 255] of sqrt(value / absmax). */
GCKPT_HD uint8_t gckpt_q8_signed(float v, float absmax)
{
    float x = absmax > 0 ? v / absmax * 127.0f : 0.0f;
    x = x > 127.0f ? 127.0f : x < -127.0f ? -127.0f : x;
    int q = (int)(x < 0 ? x - 0.5f : x + 0.5f);
    return (uint8_t)(q + 128);
}
GCKPT_HD float gckpt_dq8_signed(uint8_t q, float absmax) { return (float)((int)q - 128) / 127.0f * absmax; }
GCKPT_HD uint8_t gckpt_q8_sqrt(float v, float absmax)
{
    float x = absmax > 0 && v > 0 ? v / absmax : 0.0f;
    x = x > 1.0f ? 1.0f : x;
    float r = sqrtf(x) * 255.0f; /* correctly rounded on host and device */
    return (uint8_t)(int)(r + 0.5f);
}
GCKPT_HD float gckpt_dq8_sqrt(uint8_t q, float absmax)
{
    float r = (float)q / 255.0f;
    return r * r * absmax;
}


/* ---- mixture of experts ----------------------------------------------------------------- */

/* top-k's order: the larger value first; among equal values the lower index (torch.topk
 * leaves exact ties to its implementation: FINDINGS 15.6) */
GCKPT_HD bool gckpt_topk_before(float a, uint64_t ia, float b, uint64_t ib) { return a > b || (a == b && ia < ib); }
/* A sum over the middle dimension of an input viewed as [n_out / B, w, B] (recipe.h
 * GCKPT_P_SUM): the output element that input element i adds to. B = 1: contiguous groups
 * of w (the top-k values' sum); B = the row width: view(T, k, h).sum(1) of the experts'
 * pairs, and the load-balancing loss's column sums over all rows. */
GCKPT_HD uint64_t gckpt_sum_dst(uint64_t i, uint64_t w, uint64_t B) { return (i / (w * B)) * B + i % B; }
/* B of a SUM: the output's row width, or 1 where the op says its groups are contiguous
 * (sa 1: DeepSeek-V3's group scores, [T, groups] of the pairs' sums) */
GCKPT_HD uint64_t gckpt_sum_block(double sa, uint64_t out_cols) { return sa == 1 ? 1 : out_cols; }

#endif
