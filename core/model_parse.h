/* What the config readers of core/model.c (the first five model types) and
 * core/model_dense.c (issue 13's dense families) share: bounds, the activation names,
 * the layer-type list. Private to core/. */
#ifndef GCKPT_MODEL_PARSE_H
#define GCKPT_MODEL_PARSE_H

#include "gckpt/core/model.h"
#include "gckpt/util/jsonget.h"

/* Sanity bounds: far beyond any real model, small enough that every product of a
 * handful of them stays well inside 64 bits. */
#define MAX_LAYERS GCKPT_MAX_LAYERS
#define MAX_HIDDEN (1u << 20)
#define MAX_HEADS 4096u
#define MAX_HEAD_DIM 16384u
#define MAX_INTER (1u << 22)
#define MAX_VOCAB (1u << 24)
#define MAX_POS (1u << 24)
#define MAX_LIMIT ((uint64_t)1 << 40) /* sequence limits and windows: any value is only a bound */

bool gckpt_parse_act(const char *file, const char *field, const char *s, gckpt_act *out, gckpt_err *err);
/* Marks layer i sliding. */
void gckpt_set_sliding(gckpt_model *m, uint64_t i);
/* Marks layer i a NoPE layer (no rotary embedding; SmolLM3). */
void gckpt_set_nope(gckpt_model *m, uint64_t i);
/* `layer_types` (an array of num_hidden_layers strings, each "full_attention" or
 * "sliding_attention"): sets m->sliding; *present false when absent or null. Any other
 * type is an error naming the field (it would change the masks and the attention). */
bool gckpt_parse_layer_types(const char *file, const cJSON *j, gckpt_model *m, bool *present, gckpt_err *err);
/* Defaults of one model type's config class for keys a config.json may omit. */
typedef struct {
    uint64_t kv_heads;     /* 0: num_attention_heads */
    uint64_t head_dim;     /* 0: hidden / heads */
    bool tied;
    double eps;
    uint64_t positions;
    const char *act_key, *act;
    uint64_t inter, vocab; /* 0: the key is required */
    double theta;          /* rope_theta; 0: 10000 */
    /* GPTNeoXConfig's keys: layer_norm_eps and rotary_emb_base for rms_norm_eps and
     * rope_theta, no num_key_value_heads (multi-head) nor head_dim (hidden / heads) */
    bool neox_keys;
} gckpt_cfg_defaults;

/* Whether key is absent or null. */
bool gckpt_json_absent(const cJSON *j, const char *key);
/* A key that must be false (or absent) because its true value is not modelled. */
bool gckpt_refuse_true(const char *f, const cJSON *j, const gckpt_model *m, const char *key, gckpt_err *err);
/* The fields every llama-built family reads (layers, widths, heads, head_dim, vocab,
 * tying, eps, positions, activation, rope theta), with its class's defaults. */
bool gckpt_parse_common(const char *f, const cJSON *j, gckpt_model *m, const gckpt_cfg_defaults *d, gckpt_err *err);
/* The families' config readers (the hooks of core/families.c): m->model_type and
 * m->family are set. model.c: llama, mistral, qwen2, qwen3; gpt2. model_dense.c: the
 * llama-built dense families. model_moe.c: the mixture-of-experts families. */
/* gckpt_model_parse on a parsed config object (a VLM's text_config: core/vision.c). */
bool gckpt_model_read_config(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
/* The refusal of a vision-language config (gckpt_vlm_types) where a text model is read:
 * false with err set when model_type t is a VLM's or j has a vision_config. */
bool gckpt_refuse_vlm(const char *file, const cJSON *j, const char *t, gckpt_err *err);
bool gckpt_parse_llama(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_gpt2(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_gemma(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_phi3(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_gpt_neox(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_olmo2(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_granite(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_smollm3(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_glm4(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_moe(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
/* model_mla.c: DeepSeek-V3 */
bool gckpt_parse_deepseek(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err);
/* model_rope.c: the rope theta (rope_parameters', else the legacy key, else dflt); the
 * rope type of rope_parameters / rope_scaling (default, llama3; another: m->rope_other);
 * the embedding's padding row (m->pad, m->pad_id; the class's default: core/families.c).
 * m->family, vocab and max_positions set. */
bool gckpt_parse_rope_theta(const char *f, const cJSON *j, const char *legacy, double dflt, double *theta,
                            gckpt_err *err);
bool gckpt_parse_rope_type(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err);
bool gckpt_parse_pad(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err);

#endif
