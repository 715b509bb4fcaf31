/* What the llama-built families' config.json says about the rotary tables' values and the
 * embedding's padding row, read as transformers 5.24 reads them (PreTrainedConfig's
 * standardize_rope_params, modeling_rope_utils.py; each modeling file's nn.Embedding).
 * Numerics only: neither changes a tensor's shape, so the planner's bytes do not move. */
#include <stdio.h>
#include <string.h>

#include "gckpt/util/safe_text.h"
#include "gckpt/core/families.h"
#include "model_parse.h"

/* rope_parameters.rope_theta (5.24), else the legacy top-level key (GPTNeoXConfig:
 * rotary_emb_base; a top-level rope_theta is not read there: measured, 5.24), else the
 * class's */
bool gckpt_parse_rope_theta(const char *f, const cJSON *j, const char *legacy, double dflt, double *theta,
                            gckpt_err *err)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (cJSON_IsObject(rp) && !gckpt_json_absent(rp, "rope_theta"))
        return gckpt_json_num(rp, f, "rope_parameters.rope_theta", 1, 1e12, theta, err);
    return gckpt_json_num_opt(j, f, legacy, 1, 1e12, dflt, theta, err);
}

/* one rope dict's type ("type" in older files); default / llama3 read, another (or llama3
 * in one layer type's dict: one model-wide setting here) kept by name */
static bool rope_entry(const char *f, const cJSON *rp, const char *key, bool per_layer, gckpt_model *m, gckpt_err *err)
{
    char type[32], field[96];
    const char *tkey = gckpt_json_absent(rp, "rope_type") && !gckpt_json_absent(rp, "type") ? "type" : "rope_type";
    snprintf(field, sizeof field, "%s.%s", key, tkey);
    if (!gckpt_json_str_opt(rp, f, field, "default", type, sizeof type, err)) return false;
    if (!strcmp(type, "default")) return true;
    if (strcmp(type, "llama3") || per_layer) {
        gckpt_text_sanitize(type);
        snprintf(m->rope_other, sizeof m->rope_other, "%s", type);
        return true;
    }
    /* _compute_llama3_parameters reads factor, low_freq_factor, high_freq_factor (KeyError
     * when absent) and original_max_position_embeddings (standardize_rope_params: default
     * max_position_embeddings); high == low divides by zero there */
    m->llama3.on = true;
    snprintf(field, sizeof field, "%s.factor", key);
    if (!gckpt_json_num(rp, f, field, 1e-9, 1e9, &m->llama3.factor, err)) return false;
    snprintf(field, sizeof field, "%s.low_freq_factor", key);
    if (!gckpt_json_num(rp, f, field, 1e-9, 1e9, &m->llama3.low_freq_factor, err)) return false;
    snprintf(field, sizeof field, "%s.high_freq_factor", key);
    if (!gckpt_json_num(rp, f, field, 1e-9, 1e9, &m->llama3.high_freq_factor, err)) return false;
    if (m->llama3.high_freq_factor <= m->llama3.low_freq_factor) {
        gckpt_seterr(err, "%s: field '%s' must exceed low_freq_factor", f, field);
        return false;
    }
    snprintf(field, sizeof field, "%s.original_max_position_embeddings", key);
    return gckpt_json_num_opt(rp, f, field, 1, 1e12, (double)m->max_positions, &m->llama3.original_max, err);
}

bool gckpt_parse_rope_type(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    const char *key = "rope_parameters";
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsObject(rp)) {
        key = "rope_scaling";
        rp = cJSON_GetObjectItemCaseSensitive(j, key);
    }
    if (!cJSON_IsObject(rp)) return true;
    /* Gemma 3's rope_parameters: one dict per layer type */
    static const char *const nested[] = {"full_attention", "sliding_attention"};
    bool any = false;
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(rp, nested[i]);
        if (!cJSON_IsObject(e)) continue;
        char field[64];
        snprintf(field, sizeof field, "%s.%s", key, nested[i]);
        if (!rope_entry(f, e, field, true, m, err)) return false;
        any = true;
    }
    return any || rope_entry(f, rp, key, false, m, err);
}

/* The classes that pass config.pad_token_id to nn.Embedding and their default
 * (AutoConfig.for_model, 5.24): the family table's padding_idx and pad_default
 * (core/families.c). A negative index counts from the end, as nn.Embedding takes it. */
bool gckpt_parse_pad(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    const gckpt_model_type_info *type = NULL;
    const gckpt_family_info *fam = gckpt_family_by_type(m->model_type, &type);
    m->pad = false;
    m->pad_id = -1;
    if (!fam || !fam->padding_idx) return true;
    double dflt = type->pad_default ? (double)type->pad_id : -1e30;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "pad_token_id");
    if (cJSON_IsNull(v) || (!v && dflt == -1e30)) return true;
    double id = dflt;
    if (v && !gckpt_json_num(j, f, "pad_token_id", -1e15, 1e15, &id, err)) return false;
    if (id != (double)(int64_t)id) {
        gckpt_seterr(err, "%s: field 'pad_token_id' must be an integer", f);
        return false;
    }
    m->pad = true;
    m->pad_id = (int64_t)id;
    if (m->pad_id < 0 && m->pad_id >= -(int64_t)m->vocab) m->pad_id += (int64_t)m->vocab;
    return true;
}
