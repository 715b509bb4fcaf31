/* Recipe: the op list of one training forward, split into three sections (embedding,
 * one transformer block, head = final norm + LM head + loss), with every tensor's size
 * and dtype and which tensors autograd saves for backward. It is the single source of
 * truth for "what exists in memory"; the schedule derives lifetimes from it.
 *
 * A recipe is built by tracing primitive ops (mul, linear, sdpa, ...) whose save rules
 * follow PyTorch's derivatives.yaml and whose dtypes follow type promotion and
 * torch.autocast's op lists. Shapes are symbolic in the micro-batch b and sequence s
 * (gckpt_shape). (core: read by the planner and the executor) */
#ifndef GCKPT_RECIPE_H
#define GCKPT_RECIPE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/device.h"
#include "gckpt/core/dtype.h"
#include "gckpt/core/model.h"
#include "gckpt/core/setting.h"
#include "gckpt/core/step.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCKPT_MAX_TENSORS 544 /* the largest recipe: 488 (test_consistency recipe_limits: deepseek_v3 with its two layer kinds, every bias, dropout, LoRA on all linears under autocast, both modules_to_save copies, sdpa; its attention-only LoRA, the one planned: 406) */
#define GCKPT_MAX_OPS 448     /* ... 409 ops */
#define GCKPT_OP_MAX_IN 4
#define GCKPT_OP_MAX_SAVED 6
#define GCKPT_OP_MAX_UNHOLD 16

/* Sections: the embedding, a block section per block type present (gckpt_block_type),
 * the head. The first block section (layer 0's type) is GCKPT_SEC_BLOCK and owns the
 * block's parameters; another type's section (GCKPT_SEC_BLOCK_MORE on) is traced from the
 * same input shape and reuses the parameters of the first section of its parameter group
 * (gckpt_block_params_group), or makes its own when it is that group's first
 * (gckpt_recipe.block_sec says which type is where, sec_params whose parameters a section
 * uses). The three first values are what the parameter table, the parallel wrappers and
 * the executor read. */
typedef enum {
    GCKPT_SEC_EMBED,
    GCKPT_SEC_BLOCK,
    GCKPT_SEC_HEAD,
    GCKPT_SEC_BLOCK_MORE,
    GCKPT_NSEC = GCKPT_SEC_BLOCK_MORE + GCKPT_NBLOCK - 1
} gckpt_section;
/* Whether section sec is a layer's (a block type's). */
static inline bool gckpt_sec_is_block(int sec) { return sec == GCKPT_SEC_BLOCK || sec >= GCKPT_SEC_BLOCK_MORE; }

typedef enum {
    GCKPT_T_ACT,    /* activation: lifetime from producer to last use / last backward */
    GCKPT_T_PARAM,  /* a parameter: no allocation here (weights are persistent) */
    GCKPT_T_CONST,  /* shared, no grad (token ids, labels, rotary cos/sin, masks): lives all step */
    GCKPT_T_WCAST,  /* autocast's cached low-precision copy of a weight */
} gckpt_tensor_kind;

typedef enum {
    GCKPT_OP_MATMUL, /* FLOPs-bound: linear, batched matmul */
    GCKPT_OP_ATTN,   /* fused attention (SDPA) */
    GCKPT_OP_ELEM,   /* bandwidth-bound elementwise / reduction / copy */
    GCKPT_OP_EMBED,  /* gather */
} gckpt_op_kind;

/* A tensor's shape, row-major [rows, width]: rows = mult x (1 | s | b*s) and width
 * elements per row, or s elements when width is 0 (the last dimension of attention scores
 * [b, heads, s, s]: TOKENS rows x heads, and of masks). Parameters are FIXED [out, in] as
 * the module stores them (Conv1D: [in, out]); scalars FIXED [1, 1]. */
typedef enum {
    GCKPT_ROWS_FIXED,  /* mult rows */
    GCKPT_ROWS_SEQ,    /* mult x s rows: rotary tables, position ids and embeddings */
    GCKPT_ROWS_TOKENS, /* mult x b x s rows: activations */
    GCKPT_ROWS_BATCH,  /* mult x b rows: one row per sample (a vision tower's pixels, b its images) */
    GCKPT_ROWS_PATCHES, /* mult x b x (s - 1) rows: every position but the first (a vision tower's
                         * patches without the CLS row) */
    GCKPT_ROWS_GROUPS, /* b x s / mult rows: groups of mult consecutive positions (Qwen2.5-VL's
                        * merge x merge patches, one merged token each) */
} gckpt_rows;

typedef struct {
    uint8_t rows;     /* gckpt_rows */
    uint64_t mult;
    uint64_t width;   /* 0: s (+ plus) */
    uint8_t plus;     /* with width 0: s + plus elements per row (gpt_oss's sink column: [b, heads, s, s + 1]) */
} gckpt_shape;

/* What a parameter is to the model: how it is initialised and which optimizer rules
 * apply (an embedding table's states stay 32-bit under 8-bit AdamW, gckpt/core/params.h). */
typedef enum {
    GCKPT_ROLE_MATRIX,      /* a projection weight */
    GCKPT_ROLE_EMBEDDING,   /* the table of an embedding lookup (an nn.Embedding weight) */
    GCKPT_ROLE_NORM_WEIGHT, /* a norm's scale (initialised to 1) */
    GCKPT_ROLE_BIAS,        /* (initialised to 0) */
} gckpt_param_role;

typedef struct {
    char name[40];
    uint8_t kind;        /* gckpt_tensor_kind */
    uint8_t section;     /* gckpt_section */
    uint8_t dtype;       /* gckpt_dtype */
    uint8_t role;        /* PARAM: gckpt_param_role */
    bool requires_grad;
    bool rg0;            /* requires_grad in layer 0 when its input needs no gradient (frozen0) */
    bool fwd_end_free;   /* held until the forward pass ends (autocast cache, returned logits) */
    bool base_end_free;  /* with fwd_end_free: released already when the base model (the
                          * layer stack) returns, before the LM head (attention masks) */
    bool logits;         /* accounted as logits/loss memory */
    bool ckpt_held;      /* a layer argument (keyword arguments: mask, position ids, rotary
                          * tables; gpt2's positional mask) that every checkpointed layer's
                          * frame holds by reference until its backward; an offloaded
                          * positional mask is copied instead */
    bool step_held;      /* the Trainer's batch dict holds it until the micro-step ends (the
                          * input ids); other sources live as their uses and saves say
                          * (the loss's shifted labels go with nll_loss's backward) */
    uint8_t layer_type;  /* an argument of one layer type's layers only (Gemma 2/3's masks,
                          * Gemma 3's rotary pairs): a checkpoint holds it only when a layer
                          * of that type is checkpointed; the other type than layer 0's is
                          * held until layer 0's backward begins (core/sim.c, held_to_layer0) */
    gckpt_shape shape;
    int16_t hold_to;      /* a Python variable of HF's code holds it until this op of its
                           * section ran (also through a recompute that stops earlier), or -1 */
    int16_t param;        /* WCAST: the parameter it copies */
    uint8_t uses;         /* PARAM: ops that take it (2 for a tied embedding / lm_head) */
} gckpt_tensor;

/* What an op computes, for executors (the planner needs only sizes and FLOPs). Tensors
 * are row-major [rows, width]: activations have b*s rows, rotary tables s rows,
 * attention scores and masks are [b, n, s, s]. */
typedef enum {
    GCKPT_P_SOURCE,      /* produces a CONST: input ids, position ids, labels, rotary cos/sin, mask */
    GCKPT_P_CAST,        /* dtype conversion (also autocast's weight casts) */
    GCKPT_P_MUL,         /* x * y with broadcast `bcast` */
    GCKPT_P_ADD,         /* x + y with broadcast `bcast` */
    GCKPT_P_AFFINE,      /* x * sa + sb (python scalars) */
    GCKPT_P_NEG_HALF,    /* per head of width `width`: -x[..., width/2:] */
    GCKPT_P_CAT_HALF,    /* per head: cat(in0 (negated second halves), first halves of in1) */
    GCKPT_P_POW,         /* x ** sa */
    GCKPT_P_RSQRT,
    GCKPT_P_TANH,
    GCKPT_P_SILU,
    GCKPT_P_GELU,        /* erf GELU; sa = 1: tanh approximation */
    GCKPT_P_MEAN,        /* mean over groups of `width` elements */
    GCKPT_P_LINEAR,      /* in0 [rows, in_f] @ W^T (W = in1 [out_f, in_f]) + in2 bias */
    GCKPT_P_LAYERNORM,   /* over `width`; out[1] = (mean, rstd) per row */
    GCKPT_P_DROPOUT,     /* p = sa; out[1] = bool mask */
    GCKPT_P_SDPA,        /* causal attention, out[1] = logsumexp; q, k, v may be one packed tensor;
                          * an in3 is an additive [b, 1, s, s] mask (the sliding window's) */
    GCKPT_P_REPEAT_KV,   /* [rows, kv*hd] -> [rows, heads*hd] */
    GCKPT_P_QK,          /* scores [b, heads, s, s] = q k^T per head */
    GCKPT_P_SOFTMAX,     /* over the last dim (output dtype = out tensor's) */
    GCKPT_P_PV,          /* [b, heads, s, hd] = P @ V */
    GCKPT_P_TRANSPOSE,   /* [b, heads, s, hd] -> [b, s, heads*hd] */
    GCKPT_P_EMBED,       /* rows of in0 (table) picked by in1 (ids) */
    GCKPT_P_LOG_SOFTMAX,
    GCKPT_P_NLL,         /* mean negative log-likelihood of in1 labels */
    GCKPT_P_SPLIT,       /* column block sa (0 q, 1 k, 2 v) from column sb of a packed output
                          * (gpt2's c_attn [rows, 3 x width]; Phi-3's qkv_proj, gate_up_proj; the
                          * experts' gate_up [S, 2 x width] chunk(2));
                          * sa = -1: each head's (of `width`) first columns (partial rotary);
                          * in_f > 0: interleaved, out_f columns of every in_f from column sb
                          * (GPT-NeoX's per-head q, k, v)
                          * c_attn output: a view (view_fwd), or with batched_copy a dense copy
                          * when the micro-batch is > 1 (matmul's batch folding). The view's
                          * backward writes its gradient into that block of the packed
                          * tensor's gradient: autograd's SplitBackward cats the roles'
                          * gradients into one buffer once all three arrived */
    GCKPT_P_CAT_PASS,    /* partial rotary: cat(in0 rotated part, the rest of in1's heads);
                          * sa 1 (MLA's query / key states): per head of `width` in0's head
                          * then in1's, of `heads` heads, in1 maybe one head expanded to all
                          * (gckpt_cat_heads_src) */
    /* mixture of experts (recipe_moe.c; executed on the host, CUDA kernels unverified) */
    GCKPT_P_TOPK,        /* the `width` largest of each row of `experts`: out[0] values, out[1] int64
                          * indices */
    GCKPT_P_SUM,         /* sum over the middle of the input viewed as [n_out / B, n_in / n_out, B],
                          * B the output's row width (kernel_math.h gckpt_sum_dst): groups of
                          * `width` (B 1), the experts' pairs per token (B = hidden); sb > 0: the
                          * load-balancing loss's sums of `width` columns over all rows, divided by
                          * n_in / sb (its / total_rows) */
    GCKPT_P_DIV,         /* x / y with broadcast `bcast` */
    GCKPT_P_SORT,        /* sort of a vector: out[0] sorted values, out[1] the permutation */
    GCKPT_P_FLOORDIV,    /* integer x // sa */
    GCKPT_P_GATHER_ROWS, /* rows of in0 picked by the int64 vector in1; sa 1: per row of
                          * `experts` columns, the columns in1 [rows, width] picks (gather(1)) */
    GCKPT_P_HISTC,       /* histogram of in0 over `width` bins of one id: an integer output takes its
                          * cumsum (the groups' end offsets), a float one the counts (sb as SUM's) */
    GCKPT_P_INVERT_PERM, /* inv[perm] = arange */
    GCKPT_P_GROUPED_LINEAR, /* torch._grouped_mm: row groups of in0 times their expert's slice of in1,
                          * the groups from the int32 offsets it saves; in1 is [E, out_f, in_f],
                          * or with sa 1 [E, in_f, out_f] (gpt_oss: is_transposed) */
    /* gpt_oss (recipe_gpt_oss.c; planned only: gckpt-run refuses it) */
    GCKPT_P_SUB,         /* x - y with broadcast `bcast` */
    GCKPT_P_CLAMP,       /* clamp(x, min sa, max sb) */
    GCKPT_P_SIGMOID,
    GCKPT_P_CAT_SINK,    /* [b, heads, s, s + 1] = cat(scores in0, the per-head sink logit in1 [heads]) */
    GCKPT_P_MAX_LAST,    /* max over the last dim: out[0] values, out[1] int64 indices, one per row */
    GCKPT_P_DROP_SINK,   /* the [b, heads, s, s] view of a [b, heads, s, s + 1] tensor (probs[..., :-1]) */
    GCKPT_P_CAT_HALVES,  /* per head of width `width`: cat(in0, in1), each head's two halves */
    GCKPT_P_BOOL_MASK,   /* SDPA's use of masking_utils' bool [s, s] mask (broadcast to [b, 1, s, s]):
                          * sa = 0: converted to the output's dtype, 0 where true and -inf
                          * where false; sa = 1: its logical_not (bool) */
    /* the fused losses (core/fused_loss.c, docs/fused-loss.md; planned only: gckpt-run refuses
     * a plan with one): the final norm's output in0 and lm_head's weight in1 to the scalar loss
     * against the labels in2 without the [tokens, vocab] logits (Liger's fused linear
     * cross-entropy, which makes its input gradients in the forward: grads_in_fwd; CCE's
     * loss with its log-sum-exp in3); CCE's log-sum-exp pass: out[0] the fp32 lse per token,
     * out[1] the fp32 [vocab] logit averages of its gradient filter */
    GCKPT_P_FUSED_LCE,
    GCKPT_P_CCE_LSE,
    /* Liger's SwiGLU (LigerSiLUMulFunction, liger-kernel 0.8.5; planned only): silu(in0) * in1
     * in one kernel, saving in0 and in1 (not silu(in0)); its backward writes the inputs'
     * gradients into their own storage (gckpt_op.grad_into_in) */
    GCKPT_P_SWIGLU,
    /* DeepSeek-V3's grouped router's mask (recipe_moe.c router_grouped; the branch has no
     * gradient): sa 0: zeros [rows, width] with ones at in0's int64 indices (scatter_);
     * sa 1: each column of in0 repeated to `width` columns (unsqueeze, expand, reshape);
     * sa 2: logical_not; sa 3: in0 where in1 (bool) is false, else -inf (masked_fill) */
    GCKPT_P_ROUTE_MASK,
    /* Liger's RMSNorm (LigerRMSNormFunction, casting 'llama', in_place=True): out0 like in0,
     * out1 the fp32 rstd per row of width; saves in0, in1, out1; input 0's gradient is written
     * into the output gradient's storage (gckpt_op.grad_in_gout) */
    GCKPT_P_LIGER_RMS_NORM,
    /* Liger's RoPE (LigerRopeFunction) on q or k: in0 rotated in place by the cos / sin tables
     * in1, in2 (a view_fwd, in_place op), saving them; its gradient a new buffer (the copy
     * rope_backward's .contiguous() makes) */
    GCKPT_P_LIGER_ROPE,
    /* a vision tower's embedding (core/recipe_vision.c; planned only): PATCH_CONV is the patch
     * Conv2d with stride = kernel (in0 the [b, C, H, W] pixels, in1 the [out_f, C, p, p]
     * weight, in2 an [out_f] bias or none, in_f = C p p, sa = p: [b, out_f, N] with
     * N = H W / (p p), a GEMM over the patches (the host backend lays its output out as the
     * [b, N, out_f] rows flatten(2).transpose(1, 2) views); ConvolutionBackward0 saves input and weight whenever it has a
     * node); CAT_CLS is cat([class_embedding expanded to [b, 1, width], in1's patches
     * [b, N, width]]) -> [b, N + 1, width] (in0 the [width] parameter; saves nothing) */
    GCKPT_P_PATCH_CONV,
    GCKPT_P_CAT_CLS,
    /* rows sa .. sa + n - 1 of each sample's s rows (n = sb, or 0: to the end), [b, n, width]:
     * x[:, 0, :] a view (view_fwd: its storage is in0's), x[:, 1:].reshape(-1, width) for a
     * matmul a copy (planned only) */
    GCKPT_P_ROWS_OF,
    /* Gemma 3's projector pool (nn.AvgPool2d with stride = kernel over each image's patch grid,
     * planned only): in0 [b, s, width] (the grid's s patches, a contiguous copy) -> [b, sb,
     * width] (sb: the pooled grid's tokens); AvgPool2DBackward0 saves its input */
    GCKPT_P_AVG_POOL,
    /* Liger's fused MoE experts (LigerExperts' LigerFusedMoEFunction, liger-kernel 0.8.5; planned
     * only). LIGER_MOE_ROUTE: compute_routing_metadata of the int32 top-k indices in0 [T, k]:
     * out[0] int32 [T, 3 k] (x_gather_idx, s_scatter_idx, s_reverse_scatter_idx, one per pair),
     * out[1] int32 [3 E + 1] (expert_start_idx and the two M-tile arrays, E tiles each: exact
     * while every expert gets 1 to 64 pairs); no gradient. LIGER_MOE: the experts of in0 (x
     * [T, H]) by in1 (gate_up [E x 2 out_f, in_f]) and in2 (down [E x in_f, out_f]) weighted by
     * in3 (the routing weights [T, k]): out[0] like x, out[1] pre_act [T, 2 k out_f] (saved) */
    GCKPT_P_LIGER_MOE_ROUTE,
    GCKPT_P_LIGER_MOE,
#ifdef GCKPT_TOY
    GCKPT_P_TOY,         /* the test build's toy primitive: x.clone() (docs/architecture.md, tests/toy) */
#endif
    GCKPT_NPRIM          /* the number of primitives: a new one goes above, with its row in
                          * core/prim.c and an entry (or a refusal) in each backend's kernel
                          * table (tests/executor/test_prim_coverage.c lists them) */
} gckpt_prim;

/* The data a SOURCE op makes (GCKPT_P_SOURCE). */
typedef enum {
    GCKPT_SRC_IDS, GCKPT_SRC_POSITIONS, GCKPT_SRC_ROTARY, GCKPT_SRC_MASK, GCKPT_SRC_LABELS,
    GCKPT_SRC_SCALE, /* a 0-d constant (Gemma's embedding normalizer sqrt(hidden)) */
    GCKPT_SRC_ROUTER_LOGITS, /* the head's view of every MoE layer's router logits: 0 bytes
                              * here, they are counted (held) where their layer made them */
    GCKPT_SRC_PIXELS,  /* a vision tower's pixel_values (the processor's float32 [b, C, H, W]) */
    GCKPT_SRC_FEATURES, /* a VLM's projected image features made outside the recipe (mllama's
                         * cross_attention_states, read by its cross-attention layers) */
} gckpt_source;

typedef enum {
    GCKPT_BC_NONE,  /* same shape */
    GCKPT_BC_ROW,   /* y has one value per group of `width` elements of x (norm scales) */
    GCKPT_BC_COL,   /* y is a vector of `width` repeated over rows (norm weights) */
    GCKPT_BC_TABLE, /* y is [s, width] repeated over batch and over heads of width `width` */
    GCKPT_BC_MASK,  /* y is [b, 1, s, s] repeated over heads */
} gckpt_bcast;

typedef struct {
    char name[40];
    uint8_t kind;        /* gckpt_op_kind */
    uint8_t prim;        /* gckpt_prim */
    uint8_t bcast;       /* gckpt_bcast */
    uint8_t source;      /* SOURCE: gckpt_source */
    double sa, sb;       /* scalars of AFFINE / POW / DROPOUT / GELU */
    uint64_t width;      /* group width (norms, means, rope heads, bcast) */
    uint64_t in_f, out_f;/* LINEAR */
    /* The op's own dimensions, which the executor's size checks and kernels read instead of
     * the model's: attention's query heads, the key / value heads of its operands and the
     * per-head widths of q and k, and of v (SDPA, REPEAT_KV, QK, PV, TRANSPOSE and the
     * batch foldings of their operands); the experts a router picks among and the pairs
     * per token (TOPK, GROUPED_LINEAR). 0 elsewhere. */
    uint32_t heads, kv_heads, qk_dim, v_dim;
    uint32_t experts, top_k;
    uint8_t section;
    uint8_t nin, nout, nsaved;
    int16_t in[GCKPT_OP_MAX_IN];
    int16_t out[2];               /* out[1] = -1 unless the op has a second output */
    int16_t saved[GCKPT_OP_MAX_SAVED];
    bool saves_param;    /* its node saves a parameter (not in saved[]: it costs nothing), which
                          * unpacked in the backward starts a recompute like any saved tensor */
    uint8_t ndead;       /* tensors its node packs although the node never reaches the loss (a
                          * branch whose results are indices: DeepSeek's router, FINDINGS R-MOE-9):
                          * a saved-tensor hook sees them (gckpt_section_saved_bytes counts
                          * them), but they go with the Python references that keep the node
                          * (their hold_to), never kept for a backward */
    int16_t dead[2];
    uint8_t nsaved0;     /* what it saves in layer 0 when its input needs no gradient (frozen0) */
    int16_t saved0[GCKPT_OP_MAX_SAVED];
    bool grad_alias[GCKPT_OP_MAX_IN]; /* input's grad is the output grad itself (add, view) */
    bool grad_view[GCKPT_OP_MAX_IN];  /* input's grad is a view of a larger result (F.linear's
                                       * reshape / weight transpose): the autograd engine sums
                                       * a later contribution into a new buffer, not in place */
    /* Python references that end after this op: the tensors whose hold_to it is */
    int16_t unhold[GCKPT_OP_MAX_UNHOLD];
    uint8_t nunhold;
    bool batched_copy;   /* matmul's batch folding ([b, n, ...] as [b*n, ...]): a copy when
                          * the micro-batch is > 1, a view of input 0 when it is 1 */
    bool view_fwd;       /* the forward is a view of input 0 (an expand): no allocation,
                          * the output is input 0's storage; its gradient still has the
                          * output's size (repeat_kv of one kv head) */
    bool bidirectional;  /* SDPA without a mask or causality (a ViT tower's): every query sees
                          * every key of its image */
    bool in_place;       /* with view_fwd: computed into input 0's storage (x.add_(y)),
                          * not a view that computes nothing */
    /* Time: forward FLOPs = fT*(b*s) + fBSS*(b*s*s); backward = bwd_mult * forward. */
    double fT, fBSS, bwd_mult;
    /* Elementwise traffic (bytes read + written) is derived from tensor sizes. */
    /* Backward workspace, allocated and freed inside the op's backward: bws_cT fp32
     * elements per token (SDPA's dq accumulator), plus bws_in temporaries shaped like
     * input 0 and bws_out shaped like output 0, in their dtypes (the tensors a
     * derivative formula makes on the way: pow's x.pow(e-1) and e*that; a broadcast
     * operand's grad*other before the engine reduces it to the operand's shape). */
    uint64_t bws_cT;
    uint64_t bws_bT;     /* ... and bytes per token of temporaries in the output's dtype (Liger's
                          * fused MoE: d_pre_act, weighted_act, dx_expanded) */
    uint8_t bws_in, bws_out;
    /* CPU target only: PyTorch's CPU kernels compute a mixed-dtype elementwise op on
     * copies of the narrower operands in the result dtype (CUDA casts on the fly).
     * fws_promote: inputs copied for the forward (bitmask); bws_promote: inputs copied
     * for the backward's grad * other (bitmask of the `other`s). */
    uint8_t fws_promote, bws_promote;
    /* Forward temporaries (bytes per b*s*s and per b*s token), allocated with the op's
     * output and freed when it returns (CPU _safe_softmax's isneginf / all masks). */
    uint64_t fws_bBSS, fws_bT;
    /* Fixed-size temporaries (bytes) of a quantized linear (QLoRA): its dequantized weight
     * (with the fp32 absmax of double quantization), made in the forward and every
     * recompute and again in the backward, freed when the op returns (FINDINGS 12.7). */
    uint64_t fws_fixed, bws_fixed;
    uint8_t dequant;     /* gckpt_quant_scheme of the weight it dequantizes (0: none) */
    uint8_t fused_loss;  /* GCKPT_P_FUSED_LCE / CCE_LSE: the gckpt_loss whose workspaces it has
                          * (gckpt_fused_loss_ws) */
    uint8_t chunk_mem_const; /* Liger's: the model type's chunk_mem_const (families.h) */
    uint8_t grad_in_gout; /* bit k: input k's gradient is written into output 0's gradient's
                           * storage (Liger's RMSNorm, in_place=True): that buffer, no new one */
    uint8_t grad_into_in; /* bit k: input k's gradient is written into input k's own storage
                           * (Liger's SwiGLU): no buffer, the input's becomes its gradient */
    bool grads_in_fwd;   /* its input gradients are made by its forward and kept until its
                          * backward hands them on (Liger's fused linear cross-entropy) */
    bool ctx_keep;       /* its saved tensors are kept as ctx attributes, which saved-tensor
                          * hooks do not see: also in a checkpointed layer's forward, not
                          * offloaded, and not released after its backward but with its graph
                          * (core/sim.c free_graph_kept; bitsandbytes' int8 ctx.A, FINDINGS 12.6) */
    bool out_before_save; /* a custom autograd.Function (ZeRO-3's LinearFunctionForZeroStage3):
                           * setup_context saves its inputs after forward computed the output, so
                           * a non-reentrant recompute stopping at it makes the output, then drops
                           * it as the stop unwinds (FINDINGS R-DISTPEFT-20) */
} gckpt_op;

typedef struct {
    gckpt_tensor t[GCKPT_MAX_TENSORS];
    int nt;
    gckpt_op op[GCKPT_MAX_OPS];
    int nop;
    int sec_begin[GCKPT_NSEC], sec_end[GCKPT_NSEC]; /* op index ranges per section */
    int embed_out;   /* tensor: output of the embedding section = block input of layer 0 */
    int embed_leaf;  /* tensor: a frozen input embedding's output, or -1. With checkpointing
                      * transformers' enable_input_require_grads makes it a leaf that requires
                      * grad, held by its AccumulateGrad node until the backward ends
                      * (FINDINGS 12.1, 12.6: offloading llama's layer 0 frees nothing) */
    bool frozen0;    /* without checkpointing (no hook) layer 0's input, the frozen
                      * embedding's output, needs no gradient: the block ops' saved0 and
                      * the tensors' rg0 say what layer 0 then saves and differentiates
                      * (FINDINGS 12.5, "Layer 0 without checkpointing") */
    int block_in;    /* tensor: the block's input (hidden_states) (GCKPT_SEC_BLOCK's) */
    int block_out;   /* tensor: the block's output (GCKPT_SEC_BLOCK's) */
    int8_t block_sec[GCKPT_NBLOCK]; /* the section of each block type, -1: no layer is of it */
    int sec_in[GCKPT_NSEC], sec_out[GCKPT_NSEC]; /* a block section's input / output tensor */
    int8_t sec_params[GCKPT_NSEC]; /* a block section: the section whose parameter tensors it
                                    * uses (itself when it makes them) */
    uint64_t sec_layers[GCKPT_NSEC]; /* a block section that makes parameters, when the block
                                      * types have more than one parameter group: the layers
                                      * whose parameters they are (their copies); else 0 (every
                                      * layer's) */
    uint64_t seq;    /* the sequence it was built for (gckpt_recipe_build_seq; 0: unknown):
                      * the layers' block types are gckpt_layer_block's at it */
    int head_in;     /* tensor: the head's input */
    /* a head whose first ops run between the layers (mllama's tower in a step: layernorm_post
     * and the post-tile embedding, between the local and the gated global encoder layers,
     * FINDINGS R-VLM-63): the head's ops before lead_end run before the first layer of block
     * type lead_block, from lead_in (the stream there) to lead_out (that layer's input), and
     * their backward right after that layer's (core/sim.c lead_fwd, lead_bwd); -1: none */
    int lead_end, lead_in, lead_out;
    int8_t lead_block;
    int loss;        /* tensor: the scalar loss */
    int grad_seed;   /* a recipe without a loss (a VLM's vision side in a step): the head's
                      * output whose gradient arrives from outside (the projector's, from
                      * masked_scatter's backward), seeded where a loss's would be; else -1 */
    int bridge_param; /* a parameter no op of this recipe reads, whose gradient a VLM step's
                       * bridge makes (core/vlm_step.c: LLaVA-NeXT's image_newline, read by
                       * pack_image_features' cat); else -1 */
    int mask;        /* tensor: eager attention's causal mask, or -1 */
    int rope[2];     /* tensors: the rotary (cos, sin) the block's rope reads, or -1 */
    int rope_local[2]; /* Gemma 3 with two layer types: the sliding layers' pair, which a
                        * sliding layer reads where the traced block reads rope[] (the
                        * schedule's events name it there: core/sim.c layer_arg), or -1 */
    int router_logits[2]; /* MoE with the load-balancing loss: [0] the block's router logits,
                           * [1] the head's (0-byte) view of every layer's; else -1 */
    bool mask_positional; /* the mask is a positional block input: checkpointed (and offloaded) with it */
    uint8_t stream_dtype, compute_dtype, param_dtype, grad_dtype; /* gckpt_dtype */
    bool amp;
    /* QLoRA: how the NF4 / I8 parameters are stored (gckpt/core/quant_layout.h) */
    uint8_t quant;         /* gckpt_quant_scheme */
    bool double_quant;
    uint8_t quant_storage; /* gckpt_dtype */
    /* For the closed form: elements of the checkpointed input per token (= hidden). */
    uint64_t hidden;
    uint8_t target;  /* gckpt_target it was built for */
    uint8_t loss_kind; /* gckpt_loss of its head (gckpt_recipe_build_loss) */
} gckpt_recipe;

/* Where the step runs (gckpt_target, gckpt/core/device.h). The planner models CUDA unless
 * asked for the CPU (gckpt-plan --target cpu, or a profile of kind "cpu"); the CPU target
 * follows PyTorch's CPU kernels as the probe measures them (tests/data/hf, tools/hf_probe), whose kernels
 * differ in documented ways (tools/hf_probe/FINDINGS.md): no fp32 dq accumulator in the
 * SDPA backward; LayerNorm's saved mean/rstd in the input dtype; mixed-dtype elementwise
 * ops on promoted copies; dropout as a noise tensor in the input dtype (CUDA:
 * native_dropout's bool mask); SDPA with dropout on the math path (CUDA: a fused kernel
 * that keeps the RNG seed and offset). */

/* Whether the CUDA plan of model m with attention a rests on a rule the CPU probe
 * cannot measure, because the CPU runs other kernels there: dropout > 0 (CUDA's
 * native_dropout and its bool mask; with SDPA, a fused kernel that regenerates the mask
 * from the saved RNG seed and offset). false: every rule of the setting was measured.
 * true: *code (a short stable identifier) and *sentence (one sentence for a plan's
 * warnings) say which; either pointer may be NULL. */
bool gckpt_recipe_unverified(const gckpt_model *m, gckpt_attention a, const char **code,
                             const char **sentence);

/* Build the recipe of model m for the setting's precision and attention. Never fails
 * for a validated model. */
void gckpt_recipe_build(const gckpt_model *m, gckpt_precision p, gckpt_attention a,
                        gckpt_recipe *r);
void gckpt_recipe_build_target(const gckpt_model *m, gckpt_precision p, gckpt_attention a,
                               gckpt_target target, gckpt_recipe *r);
/* ... under a fine-tuning method (NULL: full fine-tuning; gckpt/core/peft.h). QLoRA:
 * prepare_model_for_kbit_training's fp32 parameters and residual stream whatever p. */
void gckpt_recipe_build_peft(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                             const gckpt_peft *peft, gckpt_recipe *r);
/* ... at sequence length seq (0: unknown, planned as if shorter than any sliding window):
 * under SDPA the sliding-window layers take the masked form when seq >= window
 * (gckpt_sliding_masked). The attention built is gckpt_attention_run's. */
void gckpt_recipe_build_seq(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                            const gckpt_peft *peft, uint64_t seq, gckpt_recipe *r);
/* ... with the head's loss `loss` (gckpt_loss; gckpt_fused_loss_supported says where a fused
 * one is planned: the caller checks it) */
void gckpt_recipe_build_loss(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                             const gckpt_peft *peft, uint64_t seq, uint8_t loss, uint8_t liger_off, gckpt_recipe *r);

/* The attention transformers 5.24 runs when `requested` is asked for: Gemma 2 (soft-capping)
 * and gpt_oss (attention sinks) refuse SDPA (_supports_sdpa = False: a ValueError when
 * asked for explicitly, eager when nothing is asked, from_pretrained's default): eager. */
gckpt_attention gckpt_attention_run(const gckpt_model *m, gckpt_attention requested);
/* The keyword arguments of one attention type (gckpt_tensor.layer_type). */
enum { GCKPT_LT_ANY, GCKPT_LT_FULL, GCKPT_LT_SLIDING };
/* Whether some layer of type lt (GCKPT_LT_FULL / _SLIDING) is checkpointed under
 * every_n (HF's i % every_n == 0); GCKPT_LT_ANY: whether any is. */
bool gckpt_layer_type_checkpointed(const gckpt_model *m, uint32_t every_n, int lt);
/* The attention types checkpointed under every_n as bits (1 << (lt - 1)). */
uint8_t gckpt_ckpt_types(const gckpt_model *m, uint32_t every_n);
/* Whether the sliding-window layers run SDPA with a materialised mask at sequence seq:
 * masking_utils builds one when kv_length >= sliding_window (no mask, is_causal, below);
 * the layer then repeats k/v to every head and SDPA saves the mask converted to q's
 * dtype, [b, 1, s, s] per layer (FINDINGS 14.3). */
bool gckpt_sliding_masked(const gckpt_model *m, gckpt_attention a, uint64_t seq);
/* Layer `layer`'s block type at attention a and sequence seq: SLIDING_SDPA for a sliding
 * layer when gckpt_sliding_masked, else DECODER (Gemma 3 and Qwen2/3 with
 * max_window_layers then have two). The one rule the recipe, the step and the fast
 * evaluator read. */
gckpt_block_type gckpt_layer_block(const gckpt_model *m, gckpt_attention a, uint64_t seq, uint64_t layer);
/* The parameter group of a block type: types of one group are the same layer computed
 * differently and share parameters (DECODER, SLIDING_SDPA); another group's layers have
 * parameters of their own (DENSE_MLP). */
int gckpt_block_params_group(gckpt_block_type b);
/* Whether the recipe's block sections have parameters of more than one group (each
 * section's parameters are copied over its own layers: gckpt_recipe.sec_layers). */
static inline bool gckpt_recipe_typed_params(const gckpt_recipe *r)
{
    for (int s = 0; s < GCKPT_NSEC; s++)
        if (r->sec_layers[s]) return true;
    return false;
}
/* The section of layer `layer` in recipe r (of model m, attention a). */
int gckpt_layer_section(const gckpt_recipe *r, const gckpt_model *m, gckpt_attention a, uint64_t layer);

/* Elements / bytes of tensor i for micro-batch b and sequence s; false on overflow (also
 * when b x s x s overflows, whatever the tensor: attention grows with it). */
bool gckpt_tensor_numel(const gckpt_recipe *r, int i, uint64_t b, uint64_t s, uint64_t *numel);
bool gckpt_tensor_bytes(const gckpt_recipe *r, int i, uint64_t b, uint64_t s, uint64_t *bytes);
/* Elements per row of tensor i at sequence length s (gckpt_shape). */
static inline uint64_t gckpt_tensor_width(const gckpt_recipe *r, int i, uint64_t s)
{
    return r->t[i].shape.width ? r->t[i].shape.width : s + r->t[i].shape.plus;
}
/* Elements of a parameter (its FIXED shape). */
static inline uint64_t gckpt_param_numel(const gckpt_recipe *r, int i)
{
    return r->t[i].shape.mult * r->t[i].shape.width;
}

/* Static op facts derived from the table. */
int gckpt_recipe_producer(const gckpt_recipe *r, int tensor); /* op index or -1 */

#ifdef __cplusplus
}
#endif

#endif
