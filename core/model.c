#include "gckpt/core/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/families.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/safe_text.h"
#include "model_parse.h"

bool gckpt_parse_act(const char *file, const char *field, const char *s, gckpt_act *out, gckpt_err *err)
{
    if (!strcmp(s, "silu") || !strcmp(s, "swish")) *out = GCKPT_ACT_SILU;
    else if (!strcmp(s, "gelu_new")) *out = GCKPT_ACT_GELU_NEW;
    else if (!strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_tanh")) *out = GCKPT_ACT_GELU_TANH;
    else if (!strcmp(s, "gelu")) *out = GCKPT_ACT_GELU;
    else {
        gckpt_seterr(err, "%s: field '%s' = \"%s\" is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh, gelu_tanh)",
                     file, field, s);
        return false;
    }
    return true;
}

void gckpt_set_sliding(gckpt_model *m, uint64_t i)
{
    if (i < GCKPT_MAX_LAYERS && !gckpt_layer_sliding(m, i)) {
        m->sliding[i / 8] |= (uint8_t)(1u << (i % 8));
        m->sliding_layers++;
    }
}

void gckpt_set_nope(gckpt_model *m, uint64_t i)
{
    if (i < GCKPT_MAX_LAYERS && !gckpt_layer_nope(m, i)) {
        m->nope[i / 8] |= (uint8_t)(1u << (i % 8));
        m->nope_layers++;
    }
}

bool gckpt_parse_layer_types(const char *f, const cJSON *j, gckpt_model *m, bool *present, gckpt_err *err)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    *present = lt && !cJSON_IsNull(lt);
    if (!*present) return true;
    if (!cJSON_IsArray(lt)) {
        gckpt_seterr(err, "%s: field 'layer_types' must be an array of strings, got %s", f, gckpt_json_type_name(lt));
        return false;
    }
    if ((uint64_t)cJSON_GetArraySize(lt) != m->layers) {
        gckpt_seterr(err, "%s: field 'layer_types' has %d entries, 'num_hidden_layers' is %llu", f,
                     cJSON_GetArraySize(lt), (unsigned long long)m->layers);
        return false;
    }
    uint64_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, lt) {
        if (!cJSON_IsString(x)) {
            gckpt_seterr(err, "%s: field 'layer_types' must be an array of strings", f);
            return false;
        }
        if (!strcmp(x->valuestring, "sliding_attention")) gckpt_set_sliding(m, i);
        else if (strcmp(x->valuestring, "full_attention")) {
            char v[48];
            snprintf(v, sizeof v, "%s", x->valuestring);
            gckpt_text_sanitize(v);
            gckpt_seterr(err, "%s: field 'layer_types'[%llu] = \"%s\" is not modelled (full_attention, sliding_attention)",
                         f, (unsigned long long)i, v);
            return false;
        }
        i++;
    }
    return true;
}

/* Sliding-window attention as transformers 5.24 configures it: Mistral applies
 * `sliding_window` (default 4096, null = none) to every layer; Qwen2/Qwen3 only with
 * use_sliding_window (default false), to the layers `layer_types` marks
 * "sliding_attention", by default those with index >= max_window_layers (default 28). */
static bool parse_sliding(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    const char *t = m->model_type;
    bool mistral = !strcmp(t, "mistral"), qwen = !strcmp(t, "qwen2") || !strcmp(t, "qwen3");
    if (!mistral && !qwen) return true;
    bool use = mistral;
    if (qwen && !gckpt_json_bool_opt(j, f, "use_sliding_window", false, &use, err)) return false;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "sliding_window");
    uint64_t window = 0;
    if (!cJSON_IsNull(w) && !gckpt_json_u64_opt(j, f, "sliding_window", 1, MAX_LIMIT, 4096, &window, err))
        return false;
    if (!use || !window) return true;
    bool listed = false;
    if (qwen && !gckpt_parse_layer_types(f, j, m, &listed, err)) return false;
    if (!listed) {
        uint64_t first = 0;
        if (qwen && !gckpt_json_u64_opt(j, f, "max_window_layers", 0, MAX_LAYERS, 28, &first, err)) return false;
        for (uint64_t i = first; i < m->layers; i++) gckpt_set_sliding(m, i);
    }
    m->sliding_window = m->sliding_layers ? window : 0;
    return true;
}

/* HF's max_position_embeddings defaults per model type (configuration_*.py, 5.24). */
static uint64_t default_positions(const char *t)
{
    if (!strcmp(t, "llama")) return 2048;
    if (!strcmp(t, "mistral")) return 4096 * 32;
    return 32768; /* qwen2, qwen3 */
}

bool gckpt_parse_llama(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    char act[32];
    /* defaults of the config classes (transformers 5.24) for keys a config.json omits:
     * num_key_value_heads = heads (Llama), 8 (Mistral), 32 (Qwen2, Qwen3) */
    const char *t = m->model_type;
    bool qwen = !strcmp(t, "qwen2") || !strcmp(t, "qwen3");
    if (!gckpt_json_u64(j, f, "num_hidden_layers", 1, MAX_LAYERS, &m->layers, err) ||
        !gckpt_json_u64(j, f, "hidden_size", 1, MAX_HIDDEN, &m->hidden, err) ||
        !gckpt_json_u64(j, f, "num_attention_heads", 1, MAX_HEADS, &m->heads, err) ||
        !gckpt_json_u64_opt(j, f, "num_key_value_heads", 1, MAX_HEADS,
                            !strcmp(t, "mistral") ? 8 : qwen ? 32 : m->heads, &m->kv_heads, err) ||
        !gckpt_json_u64(j, f, "intermediate_size", 1, MAX_INTER, &m->intermediate, err) ||
        !gckpt_json_u64(j, f, "vocab_size", 1, MAX_VOCAB, &m->vocab, err) ||
        !gckpt_json_bool_opt(j, f, "tie_word_embeddings", false, &m->tied, err) ||
        !gckpt_json_num_opt(j, f, "attention_dropout", 0, 1, 0, &m->attn_dropout, err) ||
        !gckpt_json_num_opt(j, f, "rms_norm_eps", 1e-30, 1, 1e-6, &m->norm_eps, err) ||
        !gckpt_parse_rope_theta(f, j, "rope_theta", 10000, &m->rope_theta, err) ||
        !gckpt_json_str_opt(j, f, "hidden_act", "silu", act, sizeof act, err) ||
        !gckpt_parse_act(f, "hidden_act", act, &m->act, err))
        return false;
    if (m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act' = \"%s\": llama-style models are modelled with silu (SwiGLU) only", f, act);
        return false;
    }
    if (m->attn_dropout >= 1) {
        gckpt_seterr(err, "%s: field 'attention_dropout' must be below 1", f);
        return false;
    }
    /* head_dim: Qwen3Config's default is 128, the others derive hidden / heads */
    bool qwen3 = !strcmp(t, "qwen3");
    uint64_t dflt_hd = qwen3 ? 128 : m->hidden / m->heads;
    if (!gckpt_json_u64_opt(j, f, "head_dim", 1, MAX_HEAD_DIM, dflt_hd, &m->head_dim, err))
        return false;
    if (!qwen3 && (!cJSON_GetObjectItemCaseSensitive(j, "head_dim") ||
                   cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "head_dim")))) {
        if (m->hidden % m->heads) {
            gckpt_seterr(err, "%s: field 'hidden_size' = %llu is not divisible by 'num_attention_heads' = %llu (and no 'head_dim' is given)",
                         f, (unsigned long long)m->hidden, (unsigned long long)m->heads);
            return false;
        }
    }
    bool attn_bias = false, mlp_bias = false;
    if (!gckpt_json_bool_opt(j, f, "attention_bias", false, &attn_bias, err) ||
        !gckpt_json_bool_opt(j, f, "mlp_bias", false, &mlp_bias, err))
        return false;
    /* which config keys each modelling file reads (transformers 5.24): llama both,
     * qwen3 attention_bias only; mistral none; qwen2 has q/k/v biases, no o bias */
    bool llama = !strcmp(t, "llama"), qwen2 = !strcmp(t, "qwen2");
    m->qkv_bias = qwen2 || ((llama || qwen3) && attn_bias);
    m->o_bias = (llama || qwen3) && attn_bias;
    m->mlp_bias = llama && mlp_bias;
    m->qk_norm = qwen3;
    return gckpt_json_u64_opt(j, f, "max_position_embeddings", 1, MAX_LIMIT, default_positions(m->model_type),
                              &m->max_positions, err) &&
           parse_sliding(f, j, m, err);
}

bool gckpt_parse_gpt2(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    char act[32];
    if (!gckpt_json_u64(j, f, "n_layer", 1, MAX_LAYERS, &m->layers, err) ||
        !gckpt_json_u64(j, f, "n_embd", 1, MAX_HIDDEN, &m->hidden, err) ||
        !gckpt_json_u64(j, f, "n_head", 1, MAX_HEADS, &m->heads, err) ||
        !gckpt_json_u64(j, f, "vocab_size", 1, MAX_VOCAB, &m->vocab, err) ||
        !gckpt_json_u64_opt(j, f, "n_positions", 1, MAX_POS, 1024, &m->positions, err) ||
        !gckpt_json_u64_opt(j, f, "n_inner", 1, MAX_INTER, 0, &m->intermediate, err) ||
        !gckpt_json_bool_opt(j, f, "tie_word_embeddings", true, &m->tied, err) ||
        !gckpt_json_num_opt(j, f, "attn_pdrop", 0, 0.999999, 0.1, &m->attn_dropout, err) ||
        !gckpt_json_num_opt(j, f, "resid_pdrop", 0, 0.999999, 0.1, &m->resid_dropout, err) ||
        !gckpt_json_num_opt(j, f, "embd_pdrop", 0, 0.999999, 0.1, &m->embd_dropout, err) ||
        !gckpt_json_num_opt(j, f, "layer_norm_epsilon", 1e-30, 1, 1e-5, &m->norm_eps, err) ||
        !gckpt_json_str_opt(j, f, "activation_function", "gelu_new", act, sizeof act, err) ||
        !gckpt_parse_act(f, "activation_function", act, &m->act, err))
        return false;
    if (m->act == GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'activation_function' = \"silu\" is not supported for gpt2", f);
        return false;
    }
    if (m->hidden % m->heads) {
        gckpt_seterr(err, "%s: field 'n_embd' = %llu is not divisible by 'n_head' = %llu", f,
                     (unsigned long long)m->hidden, (unsigned long long)m->heads);
        return false;
    }
    if (m->intermediate == 0) m->intermediate = 4 * m->hidden;
    m->kv_heads = m->heads;
    m->head_dim = m->hidden / m->heads;
    m->qkv_bias = m->o_bias = m->mlp_bias = true;
    m->qk_norm = false;
    m->max_positions = m->positions;
    m->learned_positions = true;
    return true;
}

/* A vision-language config (gckpt_vlm_types, or any with a vision_config): refused in
 * one line; false then. */
bool gckpt_refuse_vlm(const char *file, const cJSON *j, const char *t, gckpt_err *err)
{
    const gckpt_vlm_type *v = gckpt_vlm_type_of(t);
    const cJSON *vision = cJSON_GetObjectItemCaseSensitive(j, "vision_config");
    if (v && !cJSON_IsObject(vision)) {
        gckpt_seterr(err, "%s: field 'vision_config' %s: model_type \"%s\" (%s) is a vision-language model whose "
                          "vision tower it configures", file, vision ? "is not an object" : "is missing", t, v->family);
        return false;
    }
    if (v && v->walked) { /* gckpt-plan reads it through gckpt_vlm_parse */
        gckpt_seterr(err, "%s: field 'model_type' = \"%s\": a vision-language model (%s) is planned by gckpt-plan "
                          "only (not yet: %s)", file, t, v->family, v->missing);
        return false;
    }
    if (v) {
        gckpt_seterr(err, "%s: field 'model_type' = \"%s\": vision-language models are not supported yet (%s: vision "
                          "tower not yet planned: %s)", file, t, v->family, v->missing);
        return false;
    }
    if (vision) {
        gckpt_seterr(err, "%s: field 'vision_config': vision-language models are not supported yet (model_type \"%s\": "
                          "vision tower not yet planned)", file, t);
        return false;
    }
    return true;
}

bool gckpt_model_parse(const char *file, const char *text, gckpt_model *m, gckpt_err *err)
{
    cJSON *j = gckpt_json_parse(file, text, err);
    if (!j) {
        memset(m, 0, sizeof *m);
        snprintf(m->name, sizeof m->name, "%s", file);
        gckpt_text_sanitize(m->name);
        return false;
    }
    bool ok = gckpt_model_read_config(file, j, m, err);
    cJSON_Delete(j);
    return ok;
}

bool gckpt_model_read_config(const char *file, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", file);
    gckpt_text_sanitize(m->name);
    bool ok = gckpt_json_str(j, file, "model_type", m->model_type, sizeof m->model_type, err);
    const gckpt_model_type_info *type = NULL;
    if (ok) ok = gckpt_refuse_vlm(file, j, m->model_type, err);
    if (ok) {
        const char *t = m->model_type;
        const gckpt_family_info *fam = gckpt_family_by_type(t, &type);
        if (fam) {
            m->family = fam->family;
            ok = fam->parse(file, j, m, err);
        } else {
            const gckpt_unmodelled_type *moe = NULL, *dense = NULL;
            for (const gckpt_unmodelled_type *u = gckpt_unmodelled_moe_types; u->name && !moe; u++)
                if (!strcmp(t, u->name)) moe = u;
            for (const gckpt_unmodelled_type *u = gckpt_unmodelled_dense_types; u->name && !dense; u++)
                if (!strcmp(t, u->name)) dense = u;
            char types[256];
            gckpt_model_types_list(false, ", ", ", ", types, sizeof types);
            if (moe)
                gckpt_seterr(err, "%s: field 'model_type' = \"%s\": mixture-of-experts models are not supported yet "
                                  "(not planned: %s; supported: %s)", file, t, moe->missing, types);
            else if (dense)
                gckpt_seterr(err, "%s: field 'model_type' = \"%s\" is not supported yet (not planned: %s; supported: "
                                  "%s)", file, t, dense->missing, types);
            else
                gckpt_seterr(err, "%s: field 'model_type' = \"%s\" is not supported (supported: %s)", file, t,
                         types);
            ok = false;
        }
    }
    if (ok && !type->own_rope_type) ok = gckpt_parse_rope_type(file, j, m, err);
    if (ok) ok = gckpt_parse_pad(file, j, m, err);
    if (ok && !m->rotary_dim) m->rotary_dim = m->head_dim;
    if (ok && !m->rope_tables) m->rope_tables = 1;
    if (ok) ok = gckpt_json_bool_opt(j, file, "use_cache", true, &m->use_cache, err);
    if (ok && m->heads % m->kv_heads) {
        gckpt_seterr(err, "%s: field 'num_key_value_heads' = %llu does not divide 'num_attention_heads' = %llu",
                     file, (unsigned long long)m->kv_heads, (unsigned long long)m->heads);
        ok = false;
    }
    return ok;
}

bool gckpt_model_load(const char *name_or_path, gckpt_model *m, gckpt_err *err)
{
    char path[4096];
    if (!gckpt_resolve_data("models", name_or_path, path, sizeof path, err)) return false;
    char *text = gckpt_read_file(path, 16u << 20, err);
    if (!text) return false;
    bool ok = gckpt_model_parse(path, text, m, err);
    free(text);
    if (ok) gckpt_model_name_from(name_or_path, m);
    return ok;
}

void gckpt_model_name_from(const char *name_or_path, gckpt_model *m)
{
    /* Name shown in reports: the stem of the file. */
    const char *base = strrchr(name_or_path, '/');
    base = base ? base + 1 : name_or_path;
    snprintf(m->name, sizeof m->name, "%s", base);
    size_t l = strlen(m->name);
    if (l > 5 && !strcmp(m->name + l - 5, ".json")) m->name[l - 5] = 0;
    gckpt_text_sanitize(m->name); /* shown on terminals, in tables and plots */
}
