/* The recipe tracer (private to core/): the state of one recipe being traced and the
 * primitives that mirror PyTorch ops as Hugging Face's modelling code calls them. A model
 * family (recipe_llama.c, recipe_gpt2.c) strings them together; recipe.c finishes the
 * recipe (Python references, parameter uses) and holds what every family shares (the
 * head and the loss). */
#ifndef GCKPT_RECIPE_TRACER_H
#define GCKPT_RECIPE_TRACER_H

#include "gckpt/core/peft.h"
#include "gckpt/core/prim.h"
#include "gckpt/core/recipe.h"

enum { F32 = GCKPT_DT_F32, BF16 = GCKPT_DT_BF16, F16 = GCKPT_DT_F16, I64 = GCKPT_DT_I64, BOOL = GCKPT_DT_BOOL };

typedef struct gckpt_tracer {
    gckpt_recipe *r;
    const gckpt_model *m;
    int sec;             /* the section being traced (gckpt_section) */
    bool amp;            /* under torch.autocast */
    uint8_t compute_dt;  /* matmul / autocast compute dtype */
    uint8_t stream_dt;   /* dtype of the residual stream */
    uint8_t param_dt;    /* dtype of the parameters */
    const char *pfx;     /* name prefix of the current module */
    double eps;          /* norm epsilon */
    bool cpu;            /* the CPU's kernels (GCKPT_TARGET_CPU, _CPU_CUDA_LISTS) */
    bool cuda_lists;     /* CUDA's autocast op lists and is_autocast_enabled() answer (not _CPU) */
    const gckpt_peft *peft; /* LoRA / QLoRA (NULL or method full: full fine-tuning) */
    bool block_in_frozen;   /* trace the block with an input that needs no gradient */
    gckpt_attention attn;   /* the attention that runs (gckpt_attention_run) */
    uint64_t seq;           /* the sequence the recipe is built for (gckpt_recipe.seq) */
    bool sdpa_masked;       /* the block being traced runs SDPA with the sliding-window mask
                             * (block type GCKPT_BLOCK_SLIDING_SDPA) */
    bool no_rope;           /* ... applies no rotary embedding (GCKPT_BLOCK_NOPE) */
    int replay;             /* tracing a later block section: parameters are the first
                             * section's, handed out again in creation order from this tensor
                             * index on; -1: parameters are new */
    int bool_mask;          /* masking_utils' shared bool mask (sdpa_masked), else -1 */
    int full_mask;          /* a VLM's token_type_ids masks (gckpt_model.image_masks): the full
                             * layers' bool mask, else -1 */
    int sdpa_mask;          /* the mask the block being traced reads (bool_mask or full_mask) */
    int float_mask;         /* a float mask every SDPA reads as it is (mllama's vision encoders'
                             * aspect-ratio mask, FINDINGS R-VLM-30), else -1 */
    int cross_in[3];        /* mllama's cross-attention inputs (cross_attention_states, the cross
                             * mask, the row mask: embedding sources), else -1 */
    uint8_t loss;           /* gckpt_loss of the head */
    uint8_t liger_off;      /* --loss liger: the Liger kernels switched off (gckpt_setting.liger_off) */
    bool frozen_params;     /* param() makes frozen parameters (a frozen vision tower's) */
} tracer;

/* --loss liger with Liger's kernel k on (gckpt_liger_kernel; the family table says where the
 * type's apply function uses it) */
static inline bool liger_kernel_on(const tracer *tr, int k)
{
    return tr->loss == GCKPT_LOSS_LIGER && !((tr->liger_off >> k) & 1);
}

/* Shapes (recipe.h, gckpt_shape). */
static inline gckpt_shape per_token(uint64_t width) { return (gckpt_shape){GCKPT_ROWS_TOKENS, 1, width}; }
static inline gckpt_shape per_position(uint64_t width) { return (gckpt_shape){GCKPT_ROWS_SEQ, 1, width}; }
/* [b, heads, s, s] (a mask: heads 1) */
static inline gckpt_shape score_shape(uint64_t heads) { return (gckpt_shape){GCKPT_ROWS_TOKENS, heads, 0}; }
static inline gckpt_shape fixed_shape(uint64_t rows, uint64_t width) { return (gckpt_shape){GCKPT_ROWS_FIXED, rows, width}; }

/* ---- tensors and ops ---- */
int tnew(tracer *tr, const char *name, int kind, uint8_t dtype, gckpt_shape shape, bool requires_grad);
/* A new activation shaped like x with dtype dt. */
int like(tracer *tr, const char *name, int x, uint8_t dt, bool requires_grad);
int opnew(tracer *tr, const char *name, int kind, int nin, const int *in, int out, int out2, int nsaved,
          const int *saved);
gckpt_op *last_op(tracer *tr);
void setprim(tracer *tr, int prim, int bcast, double sa, double sb, uint64_t width);
/* The op just traced works per attention head (gckpt_op.heads ...): the model's query
 * heads and head widths, kv_heads key / value heads in its operands. */
void attn_dims(tracer *tr, uint64_t kv_heads);
/* ... picks among the model's experts, top_k per token. */
void expert_dims(tracer *tr);
/* Its forward FLOPs, by its primitive's rule (gckpt/core/prim.h flops). */
void count_flops(tracer *tr);
static inline bool rg(const tracer *tr, int x) { return tr->r->t[x].requires_grad; }
static inline uint8_t dt(const tracer *tr, int x) { return tr->r->t[x].dtype; }
/* Sections: ops from here belong to sec; its end turns holds "until the layer returns"
 * into holds until its last op. */
void section_begin(tracer *tr, int sec);
void section_end(tracer *tr);
/* The block types the model's layers have at the recipe's attention and sequence
 * (gckpt_layer_block), in order of their first layer (layer 0's first); returns how many. */
int block_types(const tracer *tr, uint8_t order[GCKPT_NBLOCK]);
/* A block type's section: the first one traced is GCKPT_SEC_BLOCK and makes the block's
 * parameters, a later one reuses them (replay); block_end records its input x and output
 * y (the first section's are r->block_in / block_out). */
void block_begin(tracer *tr, int type);
void block_end(tracer *tr, int x, int y);
/* The module prefix of names: "self_attn" -> "self_attn.q_proj"; returns the previous. */
const char *enter_module(tracer *tr, const char *name, char *buf, size_t n);

/* Python references of HF's code: a variable (or an argument of a function still
 * running) keeps tensor t alive until op `until` has run; the latest reference wins.
 * HOLD_END: until the section's last op (the layer returns). Activations only. */
#define HOLD_END INT16_MAX
void hold(tracer *tr, int t, int until);
/* ... until the op just traced has run (the function holding it returns after it). */
void hold_here(tracer *tr, int t);

/* ---- primitives (recipe_ops.c) ---- */
int param(tracer *tr, const char *name, uint64_t rows, uint64_t cols, gckpt_param_role role);
int cast_to(tracer *tr, int x, uint8_t dtype, const char *name);
int autocast_to(tracer *tr, int x, uint8_t dtype, const char *name);
int autocast_fp32(tracer *tr, int x, const char *name);
int mul(tracer *tr, int x, int y, const char *name);
int add(tracer *tr, int x, int y, const char *name);
/* x - y (recipe_gpt_oss.c): nothing saved; y's gradient a negated copy. */
int sub(tracer *tr, int x, int y, const char *name);
int scal(tracer *tr, int x, const char *name, double sa, double sb);
/* A unary primitive on x (fp32_list: on autocast's fp32 list); what it saves is its row's
 * (gckpt/core/prim.h bwd_reads). */
int unary(tracer *tr, int x, const char *name, bool fp32_list, int prim, double sa);
#ifdef GCKPT_TOY
int toy_clone(tracer *tr, int x, const char *name); /* the toy primitive's (tests/toy/toy_core.c) */
#endif
int source(tracer *tr, const char *name, gckpt_source what, uint8_t dtype, gckpt_shape shape, const char *second_name,
           int *second);
int embedding(tracer *tr, const char *name, int table, int ids);
/* A keyword argument the base model hands every layer (position ids, rotary tables,
 * masks): dropped when the base model returns, held by checkpointed layers' closures
 * until their recompute. t < 0: nothing. */
void layer_kwarg(tracer *tr, int t);
int linear(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name);
/* autocast's copy of weight w in the compute dtype (w itself without autocast): cached until
 * the forward ends for a weight that requires grad, else a plain activation. */
int weight_cast(tracer *tr, int w, const char *name);
/* The LINEAR op itself on operands already cast: output [rows, out_f] in out_dt, saved[2]
 * (-1: none), a GEMM per gradient needed (frozen weights: none for the weight). */
int linear_node(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name, uint8_t out_dt,
                const int saved[2]);
int conv1d(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name);

/* ---- LoRA / QLoRA (recipe_lora.c) ---- */
/* The weight of a linear of a layer that LoRA may target (gckpt_lora_target): frozen
 * under LoRA, quantized under QLoRA (dtype NF4 or I8, [out, in] as bitsandbytes stores
 * it, also for GPT-2's Conv1D); else as param(). conv1d: GPT-2's [in, out] layout. */
int linear_weight(tracer *tr, const char *name, uint64_t out_f, uint64_t in_f, bool is_conv1d);
/* The linear of target t (named as the module: gckpt_lora_target_bare) with its adapter
 * when targeted: the base (frozen, quantized or trainable) and lora_B(lora_A(dropout(x)))
 * * alpha / r added to it (a fused projection's whole output: FINDINGS R-PEFT-22). */
/* A linear without an adapter: plain, or a 4-bit / 8-bit base's (weight from linear_weight). */
/* A quantized linear's bias as its first forward (on input x) leaves it (weight w from
 * linear_weight; a plain weight's: untouched), for a linear whose forward is not traced. */
void quant_bias(tracer *tr, int x, int w, int bias);
int base_linear(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name);
int lora_linear(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, gckpt_lora_target t,
                bool is_conv1d);
/* The parameter the head / the embedding uses: a trainable modules_to_save copy (the
 * frozen original stays resident) or the original. */
int mts_param(tracer *tr, int original, gckpt_mts which, const char *name);
int dropout(tracer *tr, int x, double p, const char *name);
int rmsnorm(tracer *tr, int x, uint64_t width, const char *name);
int layernorm(tracer *tr, int x, uint64_t width, const char *name);
int rope(tracer *tr, int x, int cos, int sin, const char *name);
int rope_partial(tracer *tr, int x, int cos, int sin, const char *name);
/* The first half of a rotary table (cos[..., : d // 2]): a view. */
int table_half(tracer *tr, int t, const char *name);
/* GLM's per-call tables: each of cos / sin's first half repeat_interleave(2) */
void rope_table_pairs(tracer *tr, int *cos, int *sin);
/* Liger's RMSNorm and RoPE (core/recipe_liger.c): whether planned here, and their ops */
/* the RMSNorm `name` of the section being traced: -1 not Liger's, else its in_place */
int liger_rms_in_place(const tracer *tr, const char *name);
bool liger_rope_planned(const tracer *tr);
int liger_rms_norm(tracer *tr, int x, int w, uint64_t width, bool in_place);
int liger_rope(tracer *tr, int x, int cos, int sin, const char *name);
/* ... its fused MoE experts (LigerExperts) on x with the router's int64 index and weights and the
 * experts' gate_up / down parameters; returns the experts' output */
bool liger_experts_planned(const tracer *tr);
int liger_fused_moe(tracer *tr, int x, int index, int weights, int wgu, int wd);

/* ---- attention (recipe_attention.c) ---- */
/* Scaled-dot-product attention as the target runs it (q, k, v may be one packed tensor). */
int attention_sdpa(tracer *tr, int q, int k, int v, double p);
/* HF's eager attention, llama family; *weights = the returned attention weights. */
int attention_eager(tracer *tr, int q, int k, int v, int mask, double p, int *weights);
/* Column block `role` (0, 1, 2) of `width` of a packed projection output: a view
 * (GPT-2's c_attn split, Phi-3's qkv_proj / gate_up_proj slices). */
int slice_of(tracer *tr, int x, int role, uint64_t width, const char *name);
/* The first `width` columns of x, a view (partial rotary's rotated part). */
int slice_view(tracer *tr, int x, uint64_t width, const char *name);
/* cat([y, rest of x]) shaped like x: a copy (partial rotary). */
int cat_copy(tracer *tr, int y, int x, const char *name);
/* (b, heads, s, hd) -> (b, s, heads * hd): transpose + contiguous, a copy. */
int transpose_copy(tracer *tr, int o, const char *name);
/* GPT-2's eager attention over c_attn's packed output. */
int attention_eager_gpt2(tracer *tr, int qkv, int mask, double p, int *weights);

/* ---- what every family shares (recipe.c) ---- */
typedef enum { NORM_RMS, NORM_LAYER } norm_kind;
/* The head: the final norm (its output held until the forward returns), lm_head (tied:
 * the embedding's table) and HF's causal-LM loss. */
void trace_head(tracer *tr, norm_kind norm, const char *norm_name, int embedding_table);

/* A tracer for model m's recipe r at the setting's precision, attention and target (recipe.h
 * gckpt_recipe_build_loss: r cleared, its dtypes set); recipe_finish derives, once the
 * sections are traced, the Python references each op ends and each parameter's uses. */
void tracer_setup(tracer *tr, const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                  const gckpt_peft *peft, uint64_t seq, uint8_t loss, uint8_t liger_off, bool block_in_frozen,
                  gckpt_recipe *r);
void recipe_finish(gckpt_recipe *r);

/* ---- the families ---- */
void trace_llama(tracer *tr, gckpt_attention attn);
/* DynamicLayer.update's copy of k or v (gckpt_model.kv_cache), held until the forward returns */
int kv_cache_copy(tracer *tr, int x, const char *name);
/* mllama's cross-attention inputs as embedding sources (tr->cross_in), and its
 * cross-attention layer as block type GCKPT_BLOCK_CROSS (core/recipe_mllama.c) */
void mllama_cross_sources(tracer *tr);
void mllama_cross_block(tracer *tr);
void trace_gpt2(tracer *tr, gckpt_attention attn);
void trace_gpt_neox(tracer *tr, gckpt_attention attn);
/* The mixture-of-experts block (router + grouped_mm experts) on the post-attention norm's
 * output x (recipe_moe.c); returns its output in x's dtype. */
int moe_block(tracer *tr, int x);
/* DeepSeek-V3's multi-head latent attention on the input norm's output n1 (recipe_mla.c);
 * returns o_proj's output. */
int mla_attention(tracer *tr, gckpt_attention attn, int n1, int cos, int sin);
/* LlamaMLP (down_proj(silu(gate_proj(x)) * up_proj(x))) of width inter under module pfx
 * (recipe_llama.c: the dense MLP, DeepSeek's shared experts). */
int swiglu_mlp(tracer *tr, int x, const char *pfx, uint64_t inter);
/* gpt_oss (recipe_gpt_oss.c): the rotary embedding over two halves; the sink softmax of
 * the masked scores (returns the [b, heads, s, s] probabilities, a view; *combined = the
 * max-subtracted logits, a local of the attention until it returns); an expert bias's
 * in-place add_ of its gathered rows; the clamped SwiGLU of the gate / up views. */
int rope_halves(tracer *tr, int x, int cos, int sin, const char *name);
int sink_softmax(tracer *tr, int sm, int *combined);
int expert_bias_add(tracer *tr, int out, int bias_rows, const char *name);
int clamped_swiglu(tracer *tr, int g, int u);
/* With output_router_logits: the load-balancing loss over every layer's router logits,
 * added to r->loss (recipe_moe.c). */
void moe_aux_loss(tracer *tr);

#endif
