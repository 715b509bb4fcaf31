/* The model families: one table (core/families.c) that says, per family, which
 * config.json model_type values it reads, its config reader and recipe tracer, what peft
 * targets in it, its modules_to_save names and which backend of gckpt-run executes it.
 * Everything else that differs between families is a flag of gckpt_model, set by the
 * family's reader (sandwich_norms, fused_qkv, learned_positions, ...), so that no other
 * file asks which family a model is. */
#ifndef GCKPT_FAMILIES_H
#define GCKPT_FAMILIES_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;
struct gckpt_tracer;

/* One model_type of a family and what its config class defaults differently from the
 * others of the family where a shared reader reads it. */
typedef struct {
    const char *name;      /* config.json model_type */
    bool pad_default;      /* the class's pad_token_id default is an index (pad_id), else None */
    int64_t pad_id;
    bool own_rope_type;    /* the reader reads rope_parameters' type itself (gpt_oss: yarn) */
    uint8_t liger;         /* gckpt_liger_kind: what use_liger_kernel=True's call of liger-kernel
                            * 0.8.5's apply_liger_kernel_to_<type> (MODEL_TYPE_TO_APPLY_LIGER_FN)
                            * does to the loss */
    uint8_t liger_chunk_mem_const; /* the chunk_mem_const its lce_forward passes to the fused
                                    * linear cross-entropy (gckpt_liger_chunk_rows) */
    bool liger_swiglu;     /* its apply function's swiglu=True puts LigerSwiGLUMLP (LigerSiLUMulFunction
                            * on the gate and up outputs) in the dense LlamaMLP's place: planned
                            * as GCKPT_P_SWIGLU under --loss liger */
    uint8_t liger_rms;     /* gckpt_liger_rms bits: the RMSNorms its apply function's rms_norm=True
                            * patches on the model instance (_patch_rms_norm_module: LigerRMSNorm's
                            * forward, with the type's offset / casting, which change no buffer)
                            * and those with in_place=False: planned as GCKPT_P_LIGER_RMS_NORM
                            * (FINDINGS R-LOSS-6) */
    bool liger_rope;       /* ... and rope=True liger_rotary_pos_emb in apply_rotary_pos_emb's
                            * place: planned as GCKPT_P_LIGER_ROPE (R-LOSS-7) */
    bool liger_experts;    /* ... and swiglu=True LigerExperts (LigerFusedMoEFunction) in the routed
                            * experts' class's place (transformers 5): planned as
                            * GCKPT_P_LIGER_MOE_ROUTE + GCKPT_P_LIGER_MOE (R-LOSS-9) */
} gckpt_model_type_info;

/* Which RMSNorms use_liger_kernel=True patches (the Trainer patches the built model: an apply
 * function's class swaps reach no existing module) */
typedef enum {
    GCKPT_LRMS_FINAL = 1,       /* the final norm */
    GCKPT_LRMS_LAYER = 2,       /* the decoder layers' norms (input / post-attention / feed-forward) */
    GCKPT_LRMS_QK = 4,          /* the attention's q_norm / k_norm */
    GCKPT_LRMS_FINAL_COPY = 8,  /* ... the final norm with in_place=False (dX a new buffer) */
    GCKPT_LRMS_LAYER_COPY = 16, /* ... the layers' and q / k norms with in_place=False */
} gckpt_liger_rms;

typedef enum {
    GCKPT_LIGER_NONE,    /* no apply_liger_kernel_to_ function: the model is left unpatched */
    GCKPT_LIGER_FLCE,    /* fused_linear_cross_entropy defaults to True */
    GCKPT_LIGER_NO_FLCE, /* defaults to False (cross_entropy on the full logits) and raises
                          * NotImplementedError when set */
} gckpt_liger_kind;

#define GCKPT_FAMILY_MAX_TYPES 4

typedef struct {
    gckpt_family family;
    gckpt_model_type_info types[GCKPT_FAMILY_MAX_TYPES]; /* name NULL: no more */
    /* the config reader (core/model*.c): m->model_type and m->family set; the keys and
     * defaults of the family's configuration_*.py */
    bool (*parse)(const char *file, const struct cJSON *j, gckpt_model *m, gckpt_err *err);
    /* the recipe tracer (core/recipe_<family>.c): the embedding, the block, then trace_head */
    void (*trace)(struct gckpt_tracer *tr, gckpt_attention attn);
    /* the linears peft's LoRA targets (bits of gckpt_lora_target): all-linear's, where it
     * means these */
    uint32_t lora_targets;
    /* peft's all-linear wraps more than lora_targets (the mixture-of-experts families'
     * router and fused experts, not modelled): only these, named, are modelled */
    bool lora_beyond_targets;
    /* the input embedding's name for modules_to_save (lm_head is every family's) */
    const char *embed_name;
    /* the class passes config.pad_token_id to nn.Embedding (padding_idx) */
    bool padding_idx;
    /* gckpt-run executes it on the host and on the CUDA backend */
    bool host, cuda;
    /* the executor's attention kernels read q, k, v packed in the fused projection's
     * output; no SPLIT view is made a strided operand (gpt2's c_attn) */
    bool packed_qkv_kernels;
} gckpt_family_info;

/* The row of a family (every gckpt_family has one). */
const gckpt_family_info *gckpt_family_of(gckpt_family f);
/* The row reading a model_type and, in *type (may be NULL), its type entry; NULL when
 * no family reads it. */
const gckpt_family_info *gckpt_family_by_type(const char *model_type, const gckpt_model_type_info **type);
/* Every model_type read (executed: only those gckpt-run executes on a backend), in table
 * order, each joined by sep and the last by last_sep ("a, b, c" with ", " twice; "a, b
 * and c" with ", " and " and "). */
void gckpt_model_types_list(bool executed, const char *sep, const char *last_sep, char *buf, size_t n);
/* Mixture-of-experts model types transformers trains that no family reads: refused by
 * name with what is not planned; terminated by a NULL name. */
typedef struct {
    const char *name;
    const char *missing; /* what its modelling does that no family plans */
} gckpt_unmodelled_type;
extern const gckpt_unmodelled_type gckpt_unmodelled_moe_types[];
/* dense decoders read by no family, with what their modelling does that none plans */
extern const gckpt_unmodelled_type gckpt_unmodelled_dense_types[];

/* Vision-language model types transformers trains (<Family>ForConditionalGeneration: a
 * vision tower, a projector and a text model; tools/hf_probe/vlm_cases.py measures them,
 * tests/data/hf-vlm): refused by name, naming what is not planned. A config of one without
 * its vision_config object is not a whole VLM config (transformers would build the
 * class's default tower in its place): refused too. Terminated by a NULL name. */
struct gckpt_vlm;
typedef struct gckpt_vlm_type {
    const char *name;    /* config.json model_type */
    const char *family;  /* what users call it */
    const char *missing; /* what its vision side does that nothing plans */
    /* its config reader (gckpt/core/vision.h: the tower, projector and text model), NULL:
     * not read yet; the model_type its config class gives a vision_config / text_config
     * that names none */
    bool (*read)(const char *file, const struct cJSON *j, const struct gckpt_vlm_type *row, struct gckpt_vlm *v,
                 gckpt_err *err);
    const char *vision_type, *text_type;
    /* text_type's config class defaults (a JSON object) for the keys its reader requires,
     * which a VLM's text_config of that type may omit (LLaVA-1.5's omits its widths) */
    const char *text_defaults;
    /* the text family's model_type whose reader reads text_type (NULL: text_type's own) */
    const char *text_read_as;
    /* without a text_config the text keys are the config's own (Qwen2.5-VL's older layout);
     * false: text_config is required */
    bool text_at_top;
    /* num_key_value_heads defaults to num_attention_heads (the text config class's
     * __post_init__), not to text_read_as's reader default */
    bool text_kv_is_heads;
    /* its forward passes no use_cache down, so the text model reads text_config.use_cache (the
     * Trainer sets only the top-level config's) and, without checkpointing, fills a
     * DynamicCache while training (FINDINGS R-VLM-11) */
    bool text_cache_in_training;
    /* its training step is simulated (gckpt_vlm_walk, core/vlm_step.c): gckpt-plan plans it;
     * `missing` then says what other tools still lack */
    bool walked;
    /* what its forward does between the towers (core/vlm_step.c, FINDINGS R-VLM-11, R-VLM-14):
     * features_cat, torch.cat of the projected features (a copy alive until the forward
     * returns; Gemma 3's pooler_output is the projector's output itself); packed_tiles,
     * LLaVA-NeXT's tiles' pixel copy and pack_image_features' tensors; image_masks,
     * token_type_ids' int64 block ids and the full and sliding bool masks on every text
     * layer (gckpt_model.image_masks), with which its text model's sliding layers are planned */
    bool features_cat, packed_tiles, image_masks;
    /* the features reach the text model as cross-attention states (mllama, FINDINGS R-VLM-34):
     * the tower runs before the text embedding, no masked_scatter; the text model's
     * cross-attention layers read them (gckpt_mllama_text_model) and their gradient goes to
     * the projector after the text embedding's backward */
    bool cross_attention;
    /* the vision tower's module under model.model (NULL: "vision_tower") and a part of it that
     * trains with the projector when the tower is frozen, up to two (NULL: none): what gckpt-plan's
     * snippet freezes for --vision-tower frozen (FINDINGS R-VLM-12, R-VLM-22) */
    const char *tower_module, *tower_trained_part[2];
    /* gckpt-run executes the walked step on the host backend (executor/interp_vlm.c) */
    bool host;
    /* LoRA with adapters on its text model is measured (tests/data/hf-vlm-peft, FINDINGS
     * R-VLM-43): gckpt_vlm_walk plans --method lora on it */
    bool lora;
} gckpt_vlm_type;
extern const gckpt_vlm_type gckpt_vlm_types[];
/* The row of model_type t in gckpt_vlm_types, NULL when it is none. */
const gckpt_vlm_type *gckpt_vlm_type_of(const char *t);

#ifdef __cplusplus
}
#endif

#endif
