/* A vision-language model as its config.json describes it: the text model (a gckpt_model
 * read by the text families' readers from text_config), the vision tower (vision_config),
 * the projector between them and how an image becomes placeholder tokens in the text
 * sequence (FINDINGS R-VLM-*). The reader of each VLM model_type is a hook of its row in
 * gckpt_vlm_types (core/families.c); what one tower kind computes is a row of the tower
 * table in core/vision.c. Read here; the recipe of the vision side is not built yet, so
 * gckpt_model_parse still refuses every VLM config. */
#ifndef GCKPT_VISION_H
#define GCKPT_VISION_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/recipe.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The vision towers read (vision_config.model_type). */
typedef enum {
    GCKPT_TOWER_CLIP,     /* clip_vision_model: CLIPVisionModel (llava) */
    GCKPT_TOWER_QWEN2_5,  /* qwen2_5_vl_vision: Qwen2.5-VL's ViT (windowed and full-attention
                           * blocks, the 2x2 patch merger) */
    GCKPT_TOWER_SIGLIP,   /* siglip_vision_model: SiglipVisionModel (gemma3) */
    GCKPT_TOWER_QWEN3,    /* qwen3_vl_vision: Qwen3-VL's ViT (learned positions, the merger and
                           * the deepstack mergers) */
    GCKPT_TOWER_MLLAMA,   /* mllama_vision_model: the tiled encoder (local and gated global layers,
                           * not GradientCheckpointingLayer: never checkpointed) */
    GCKPT_NTOWER
} gckpt_tower_kind;

/* What maps the tower's features to the text model's width, and with it the family's rule
 * for an image's tokens. */
typedef enum {
    GCKPT_PROJ_LLAVA,  /* LlavaMultiModalProjector: linear_1, activation, linear_2 */
    GCKPT_PROJ_LLAVA_NEXT, /* the same and image_newline; anyres tiles (image_grid_pinpoints) */
    GCKPT_PROJ_MERGER, /* Qwen2_5_VLPatchMerger: RMSNorm, merge x merge patches concatenated,
                        * Linear, GELU, Linear (a part of model.visual, trained with the
                        * projector, not the tower) */
    GCKPT_PROJ_DEEPSTACK, /* Qwen3-VL's merger (LayerNorm, Linear, GELU, Linear) and a deepstack
                           * merger per deepstack_visual_indexes entry, whose outputs are added to
                           * the first text layers' outputs (parts of model.visual, trained with
                           * the projector) */
    GCKPT_PROJ_MLLAMA, /* one Linear (vision_output_dim -> text hidden, with a bias); an image
                        * is one <|image|> token, its tiles reach the text through the
                        * cross-attention layers */
    GCKPT_PROJ_GEMMA3, /* Gemma3MultiModalProjector: average pool to mm_tokens_per_image, RMSNorm,
                        * a matmul with mm_input_projection_weight [vision hidden, text hidden] */
} gckpt_projector_kind;

/* Activations of the vision side that the text models' gckpt_act does not name. */
typedef enum {
    GCKPT_VACT_QUICK_GELU, /* x * sigmoid(1.702 x): CLIP's MLP */
    GCKPT_VACT_GELU,       /* erf GELU: llava's projector_hidden_act "gelu", Qwen's merger */
    GCKPT_VACT_SILU,       /* Qwen2.5-VL's SwiGLU blocks */
    GCKPT_VACT_GELU_TANH,  /* SigLIP's gelu_pytorch_tanh */
} gckpt_vision_act;

#define GCKPT_MAX_FEATURE_LAYERS 8
#define GCKPT_MAX_PINPOINTS 64

typedef struct {
    uint8_t tower;           /* gckpt_tower_kind */
    uint64_t layers, hidden, heads, intermediate, channels, image_size, patch;
    uint8_t act;             /* gckpt_vision_act of the tower's MLP */
    double norm_eps, attn_dropout;
    /* vision_feature_layer: the hidden states (index into the tower's layers + 1 outputs,
     * negative from the end) the projector reads, concatenated when several */
    int64_t feature_layer[GCKPT_MAX_FEATURE_LAYERS];
    unsigned nfeature;
    bool keep_cls;           /* vision_feature_select_strategy "full" (default: the CLS dropped) */
    uint8_t projector;       /* gckpt_projector_kind */
    uint8_t projector_act;   /* gckpt_vision_act */
    bool projector_bias;     /* multimodal_projector_bias */
    int64_t image_token;     /* image_token_index: the placeholder id */
    /* SigLIP: vision_use_head, the attention-pooling head (it runs; Gemma 3 reads the last
     * hidden state, so it gets no gradient); Gemma 3: image tokens per image */
    bool use_head;
    uint64_t tokens_per_image;
    /* LLaVA-NeXT: image_grid_pinpoints (height, width), each a multiple of image_size */
    uint64_t pinpoints[GCKPT_MAX_PINPOINTS][2];
    unsigned npinpoints;
    /* Qwen2.5-VL and Qwen3-VL (0 elsewhere) */
    uint64_t temporal_patch, merge, out_hidden, window_size;
    uint64_t positions;      /* Qwen3-VL: num_position_embeddings */
    /* mllama: num_global_layers (gated, after the `layers` local ones), max_num_tiles, the
     * aspect ratios (supported_aspect_ratios' count), vision_output_dim (the final and the
     * intermediate_layers_indices hidden states concatenated) */
    uint64_t global_layers, max_tiles, aspect_ratios, output_dim;
    uint64_t deepstack[GCKPT_MAX_FEATURE_LAYERS]; /* Qwen3-VL: deepstack_visual_indexes */
    unsigned ndeepstack;
    uint8_t full_attention[GCKPT_MAX_LAYERS / 8]; /* bit i: block i attends over the whole image
                                                    * (fullatt_block_indexes), else per window */
} gckpt_vision;

typedef struct gckpt_vlm {
    char model_type[32];     /* the VLM's (config.json model_type) */
    gckpt_model text;        /* text_config, read by its family's reader; its `tied` is the
                              * top-level tie_word_embeddings (the ForConditionalGeneration's
                              * lm_head), which the config class sets from text_config's */
    gckpt_vision vision;
    /* M-RoPE (Qwen2.5-VL): the rotary dims of the temporal, height and width positions
     * (rope_parameters' mrope_section; the text model's rope type becomes "default", as
     * Qwen2_5_VLTextConfig converts it); nmrope 0 elsewhere */
    uint64_t mrope_section[4];
    unsigned nmrope;
    /* mllama: the text layers that are cross-attention layers (cross_attention_layers), which
     * the text model's llama reading counts as self-attention layers */
    uint8_t cross[GCKPT_MAX_LAYERS / 8];
    uint64_t ncross;
} gckpt_vlm;

/* Read a VLM's config.json text (file only in messages). A model_type that is no VLM, or
 * a VLM whose vision side is not read yet, is refused as gckpt_model_parse refuses it. */
bool gckpt_vlm_parse(const char *file, const char *text, gckpt_vlm *v, gckpt_err *err);

/* The llava reader (the hook of llava's gckpt_vlm_types row): LlavaConfig's keys and
 * defaults, a CLIP vision_config, text_config read by the text families. */
struct cJSON;
struct gckpt_vlm_type;
bool gckpt_vlm_read_llava(const char *file, const struct cJSON *j, const struct gckpt_vlm_type *row, gckpt_vlm *v,
                          gckpt_err *err);
/* The llava_next reader: llava's keys and image_grid_pinpoints (LlavaNextConfig's
 * default when absent); the "default" strategy only. */
bool gckpt_vlm_read_llava_next(const char *file, const struct cJSON *j, const struct gckpt_vlm_type *row,
                               gckpt_vlm *v, gckpt_err *err);
/* The mllama reader: MllamaConfig's keys and defaults (text_config read as llama with
 * MllamaTextConfig's defaults, its cross_attention_layers). */
bool gckpt_vlm_read_mllama(const char *file, const struct cJSON *j, const struct gckpt_vlm_type *row, gckpt_vlm *v,
                           gckpt_err *err);
/* The qwen3_vl reader: Qwen3VLConfig's keys and defaults (text_config required). */
bool gckpt_vlm_read_qwen3_vl(const char *file, const struct cJSON *j, const struct gckpt_vlm_type *row,
                             gckpt_vlm *v, gckpt_err *err);
/* The qwen2_5_vl reader: Qwen2_5_VLConfig's keys and defaults (text keys at the top level
 * when there is no text_config, the Hub's older layout). */
bool gckpt_vlm_read_qwen2_5_vl(const char *file, const struct cJSON *j, const struct gckpt_vlm_type *row,
                               gckpt_vlm *v, gckpt_err *err);

/* The gemma3 reader: Gemma3Config's keys and defaults (a SigLIP vision_config, a
 * gemma3_text text_config, mm_tokens_per_image 256, tie_word_embeddings true). */
bool gckpt_vlm_read_gemma3(const char *file, const struct cJSON *j, const struct gckpt_vlm_type *row, gckpt_vlm *v,
                           gckpt_err *err);

/* Parameter elements and tensors. */
typedef struct {
    uint64_t params, tensors;
} gckpt_param_tally;
/* The vision tower's and the projector's parameters (the text model's and lm_head's are
 * the text model's count). */
gckpt_param_tally gckpt_vision_tower_params(const gckpt_vlm *v);
gckpt_param_tally gckpt_vision_projector_params(const gckpt_vlm *v);
/* What the VLM's text model has beyond its text family's reading of text_config (mllama:
 * the embedding's 8 extra rows, each cross-attention layer's q / k norms and two gates);
 * zero elsewhere. */
gckpt_param_tally gckpt_vlm_text_extra(const gckpt_vlm *v);
/* MllamaTextModel's embed_tokens rows beyond vocab_size (nn.Embedding(vocab_size + 8, ...)) */
#define GCKPT_MLLAMA_EMBED_EXTRA_ROWS 8
/* How many of the tower's layers make the features the projector reads (the deepest
 * vision_feature_layer as an index into the layers + 1 hidden states). */
uint64_t gckpt_vision_feature_depth(const gckpt_vlm *v);
/* The tower's parameters that get a gradient when it is trained: those layers and the
 * embeddings before them; the layers after them and the tail (post_layernorm) run but
 * reach no loss, so they keep no .grad and AdamW no state for them (FINDINGS R-VLM-9). */
gckpt_param_tally gckpt_vision_tower_grads(const gckpt_vlm *v);

/* GradientCheckpointingLayer counts of the towers in module order ({vision, text}), what
 * gckpt_tower_checkpointed (gckpt/core/towers.h) reads. */
void gckpt_vlm_towers(const gckpt_vlm *v, uint64_t towers[2]);

/* Image tokens (placeholders in the text sequence) of one h x w image as the family's
 * processor prepares it (R-VLM-4); false with err naming `what` (an option or field) when
 * the processor would reject the size. */
bool gckpt_image_tokens(const gckpt_vlm *v, const char *what, uint64_t h, uint64_t w, uint64_t *tokens,
                        gckpt_err *err);

/* What of the tower needs a gradient (FINDINGS R-VLM-3): a trained tower everything; a
 * frozen one under gradient checkpointing what enable_input_require_grads' hook on its patch
 * embedding's output makes need one (its activations, for the input gradient: no input of a
 * frozen linear is kept); a frozen one without checkpointing nothing. */
typedef enum {
    GCKPT_TOWER_TRAINED,
    GCKPT_TOWER_FROZEN_HOOKED,
    GCKPT_TOWER_FROZEN,
    /* LoRA / QLoRA with adapters on the text model only: get_peft_model freezes the projector
     * too (FINDINGS R-VLM-42), hooked under checkpointing or not */
    GCKPT_TOWER_ALL_FROZEN_HOOKED,
    GCKPT_TOWER_ALL_FROZEN
} gckpt_tower_grad;

/* The tower as a gckpt_model (its layers and widths), what its recipe is traced from and a
 * context (gckpt_ctx_init) sizes it with. */
void gckpt_vision_tower_model(const gckpt_vlm *v, gckpt_model *m);
/* The tower's positions per image (CLIP: the patches and the CLS row; mllama: its
 * max_num_tiles tiles of patches and a class row, each padded to a multiple of 8), the
 * sequence its recipe is sized at; its micro-batch is the images of a micro-batch. */
uint64_t gckpt_vision_positions(const gckpt_vlm *v);
/* ... for one h x w image: Qwen2.5-VL's patches after its processor's smart_resize (the
 * image's tokens x merge^2; 0 for a size the processor refuses), the other towers'
 * gckpt_vision_positions. */
uint64_t gckpt_vision_image_positions(const gckpt_vlm *v, uint64_t h, uint64_t w);
/* The tower's buffers kept with its weights (CLIP's and SigLIP's position_ids, the Qwen
 * towers' rotary inv_freq pair in float_dt), each allocation rounded to round (R-VLM-90). */
uint64_t gckpt_vision_buffer_bytes(const gckpt_vlm *v, gckpt_dtype float_dt, uint64_t round);
/* The tower's recipe (core/recipe_vision.c): GCKPT_SEC_EMBED its embedding (the pixels, the
 * patch conv, CLIP's class token and pre_layrnorm, the positions), GCKPT_SEC_BLOCK one encoder
 * layer, GCKPT_SEC_HEAD llava's and llava_next's tail (post_layernorm, which reaches no loss)
 * and projector, or Gemma 3's post_layernorm and pooled projector (the attention-pooling
 * head's parameters only: its graph goes before the text model runs), for the tower model `tower`
 * (gckpt_vision_tower_model) at precision p on target. CLIP and SigLIP towers, and Qwen2.5-VL's
 * (its Conv3d embedding with the window permutation and the rotary tables, one block, the
 * patch merger as the head; rows its patches) and Qwen3-VL's (its Conv3d embedding with the
 * interpolated learned positions, one LayerNorm / GELU block, the merger as the head); false
 * with err for another. */
bool gckpt_vision_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p, gckpt_target target,
                               gckpt_tower_grad g, gckpt_recipe *r, gckpt_err *err);
/* The same recipe as one step simulates it (core/vlm_step.c): its head is the projector on
 * the feature layer's output (the tail, which reaches no loss, left out), whose output's
 * gradient is seeded from outside (gckpt_recipe.grad_seed); the batch's pixel_values are pixel_dt (gckpt_dtype; the image processor's float32, cast to the
 * weights' dtype in the embedding). llava, llava_next and gemma3. mllama's: its local and
 * gated global layers one walk, layernorm_post and the post-tile embedding the head's lead,
 * run between them (gckpt_recipe.lead_end, FINDINGS R-VLM-63). */
bool gckpt_vision_step_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                    gckpt_target target, gckpt_tower_grad g, uint8_t pixel_dt, gckpt_recipe *r,
                                    gckpt_err *err);
/* Both recipes under QLoRA (pf quantized): bitsandbytes loads the tower's and the
 * projector's linears in 4 bits too, prepare_model_for_kbit_training the rest in fp32
 * (FINDINGS R-VLM-41); no adapters in the tower. pf NULL or not quantized: as above. */
bool gckpt_vision_recipe_build_quant(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                     gckpt_target target, gckpt_tower_grad g, const gckpt_peft *pf, gckpt_recipe *r,
                                     gckpt_err *err);
bool gckpt_vision_step_recipe_build_quant(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                          gckpt_target target, gckpt_tower_grad g, const gckpt_peft *pf,
                                          uint8_t pixel_dt, gckpt_recipe *r, gckpt_err *err);

/* Qwen3-VL: the tower's recipe with one deepstack merger (Qwen3VLVisionPatchMerger with
 * use_postshuffle_norm, on a block's output) as its head, in place of the merger. */
bool gckpt_vision_deepstack_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                         gckpt_target target, gckpt_tower_grad g, gckpt_recipe *r, gckpt_err *err);

/* The tower's attention score work (QK^T, PV) over its layers for one image of h x w pixels,
 * as a share of every layer attending over the whole image: Qwen2.5-VL's windowed blocks
 * attend within their windows (FINDINGS R-VLM-20); 1 for the other towers, or when h or w
 * is 0 (unknown). */
double gckpt_vision_attention_share(const gckpt_vlm *v, uint64_t h, uint64_t w);

/* mllama's vision tower for its saved bytes (FINDINGS R-VLM-30): GCKPT_SEC_EMBED its tiled
 * embedding (the patch conv on every tile, the gated tile and position embeddings, the class
 * tokens, layernorm_pre, the padding) and the aspect-ratio mask every layer's SDPA reads,
 * GCKPT_SEC_BLOCK one local encoder layer, or with `global` one gated global layer,
 * GCKPT_SEC_HEAD layernorm_post, the post-tile embedding (which run between the local and the
 * global layers) and the projector. Not yet a step's order.
 * Sized at micro-batch = the images of a micro-batch, sequence = gckpt_vision_positions (an
 * image's max_num_tiles tiles, each padded to a multiple of 8). False with err for another
 * tower. */
bool gckpt_vision_layer_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                     gckpt_target target, gckpt_tower_grad g, bool global, gckpt_recipe *r,
                                     gckpt_err *err);

/* mllama's cross-attention keys per sample for `images` images (each max_num_tiles tiles of
 * (image_size / patch)^2 patches and a class token: the padding tiles kept, the encoder's
 * padding rows dropped; FINDINGS R-VLM-31). */
uint64_t gckpt_mllama_cross_keys(const gckpt_vlm *v, uint64_t images);
/* mllama's text cross-attention layer alone (core/recipe_mllama.c, R-VLM-31), the text model
 * fully trained: GCKPT_SEC_EMBED holds its inputs from outside (cross_attention_states, the
 * cross-attention mask, full_text_row_masked_out_mask: one storage each for every
 * cross-attention layer), GCKPT_SEC_BLOCK the layer; sized at sequence seq with `images`
 * images per sample. False with err when the config has no cross-attention layer. */
/* mllama's text model with its cross-attention layers in place (gckpt_model.cross, block type
 * GCKPT_BLOCK_CROSS; their keys for `images` images per sample): what the text recipe traces
 * (core/recipe_llama.c, core/recipe_mllama.c). */
void gckpt_mllama_text_model(const gckpt_vlm *v, uint64_t images, gckpt_model *m);
bool gckpt_mllama_cross_recipe_build(const gckpt_vlm *v, gckpt_precision p, gckpt_target target, uint64_t seq,
                                     uint64_t images, gckpt_recipe *r, gckpt_err *err);

/* The images the tower runs per image of h x w pixels (positive): LLaVA-NeXT's anyres tiles
 * (the best pinpoint's and the base tile), one for the other families. */
uint64_t gckpt_image_tiles(const gckpt_vlm *v, uint64_t h, uint64_t w);

/* LLaVA-NeXT's pack_image_features for one image of h x w pixels as a row map: src[r] is
 * the tower's feature row (tile t, patch p: t x (image_size / patch)^2 + p, tile 0 the base
 * one) packed row r copies, -1 for image_newline; *n rows (gckpt_image_tokens' count). false
 * for another projector, h or w 0, or more than cap rows. */
bool gckpt_anyres_pack(const gckpt_vlm *v, uint64_t h, uint64_t w, int64_t *src, uint64_t cap, uint64_t *n);

/* An image size "HxW" (positive integers) given as option `what`. */
bool gckpt_parse_image_size(const char *what, const char *s, uint64_t *h, uint64_t *w, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
