/* LoRA / QLoRA names, defaults and target matching (gckpt/core/peft.h). Target matching
 * follows peft's check_target_module_exists for a list: a module is targeted when its name
 * ends with ".<entry>" (tuners_utils.py, read in the probe venv). */
#include "gckpt/core/peft.h"

#include "gckpt/core/families.h"

#include <stdio.h>
#include <string.h>

const char *const gckpt_method_names[GCKPT_NMETHOD] = {"full", "lora", "qlora"};

const char *const gckpt_lora_target_modules[GCKPT_NLT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",    "attn.c_attn",
    "attn.c_proj",      "mlp.c_fc",         "mlp.c_proj",       "self_attn.qkv_proj",
    "mlp.gate_up_proj", "attention.query_key_value", "attention.dense", "mlp.dense_h_to_4h",
    "mlp.dense_4h_to_h", "self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
    "self_attn.kv_b_proj"};

const char *gckpt_lora_target_bare(gckpt_lora_target t) { return strchr(gckpt_lora_target_modules[t], '.') + 1; }

int gckpt_method_from(const char *s)
{
    for (int i = 0; i < GCKPT_NMETHOD; i++)
        if (s && !strcmp(s, gckpt_method_names[i])) return i;
    return -1;
}

void gckpt_peft_default(gckpt_method method, gckpt_peft *p)
{
    memset(p, 0, sizeof *p);
    p->method = (uint8_t)method;
    if (method == GCKPT_METHOD_FULL) return;
    p->rank = 16;
    p->alpha = 32;
    p->dropout = 0.05;
    p->targets = GCKPT_LT_ALL;
    p->quant_storage = GCKPT_DT_U8;
    p->compute_dtype = GCKPT_DT_BF16;
    if (method == GCKPT_METHOD_QLORA) {
        p->quant = GCKPT_QUANT_NF4;
        p->double_quant = true;
    }
}

uint32_t gckpt_lora_family_targets(gckpt_family f)
{
    const gckpt_family_info *fam = gckpt_family_of(f);
    return fam ? fam->lora_targets : 0;
}

/* the next comma-separated entry of *s into buf; false at the end */
static bool next_entry(const char **s, char *buf, size_t n)
{
    if (!**s) return false;
    const char *c = strchr(*s, ',');
    size_t len = c ? (size_t)(c - *s) : strlen(*s);
    snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), *s);
    *s += len + (c != NULL);
    return true;
}

/* whether module name ends with "." entry, or is it */
static bool suffix_match(const char *module, const char *entry)
{
    size_t lm = strlen(module), le = strlen(entry);
    if (!le || le > lm) return false;
    return !strcmp(module + lm - le, entry) && (le == lm || module[lm - le - 1] == '.');
}

bool gckpt_lora_targets_parse(const char *s, uint32_t *targets, char *bad, size_t n)
{
    if (!strcmp(s, "all-linear")) {
        *targets = GCKPT_LT_ALL;
        return true;
    }
    uint32_t bits = 0;
    char e[64];
    const char *p = s;
    if (!*s) {
        snprintf(bad, n, "%s", "");
        return false;
    }
    while (next_entry(&p, e, sizeof e)) {
        uint32_t hit = 0;
        for (int t = 0; t < GCKPT_NLT; t++)
            if (suffix_match(gckpt_lora_target_modules[t], e)) hit |= 1u << t;
        if (!hit) {
            snprintf(bad, n, "%s", e);
            return false;
        }
        bits |= hit;
    }
    *targets = bits;
    return true;
}

/* whether e is a family's input embedding name (any family's: the model is not known yet) */
static bool embed_name(const char *e)
{
    for (int f = 0; f < GCKPT_NFAMILY; f++) {
        const gckpt_family_info *fi = gckpt_family_of((gckpt_family)f);
        if (fi && !strcmp(e, fi->embed_name)) return true;
    }
    return false;
}

bool gckpt_mts_parse(const char *s, uint8_t *mts, char *bad, size_t n)
{
    uint8_t bits = 0;
    char e[64];
    const char *p = s;
    while (next_entry(&p, e, sizeof e)) {
        if (!strcmp(e, "lm_head"))
            bits |= GCKPT_MTS_LM_HEAD;
        else if (embed_name(e))
            bits |= GCKPT_MTS_EMBED;
        else {
            snprintf(bad, n, "%s", e);
            return false;
        }
    }
    *mts = bits;
    return true;
}

static void append(char *buf, size_t n, const char *name)
{
    size_t k = strlen(buf);
    if (k < n) snprintf(buf + k, n - k, "%s%s", k ? "," : "", name);
}

void gckpt_lora_targets_name(uint32_t targets, gckpt_family f, char *buf, size_t n)
{
    const gckpt_family_info *fi = gckpt_family_of(f);
    uint32_t fam = fi ? fi->lora_targets : 0;
    if (n) buf[0] = 0;
    /* where peft's all-linear means more than the family's targets (the MoE families),
     * it is named only where the user wrote it (gpt_oss: gckpt_peft_model_ok) */
    if ((targets & fam) == fam && (!(fi && fi->lora_beyond_targets) || targets == GCKPT_LT_ALL)) {
        snprintf(buf, n, "all-linear");
        return;
    }
    for (int t = 0; t < GCKPT_NLT; t++) {
        if (!(targets & fam & (1u << t))) continue;
        /* the bare name when it is unambiguous in the family; a name two of the family's
         * linears share (gpt2's attn.c_proj and mlp.c_proj): bare once when both are
         * targeted, else the qualified one */
        const char *bare = gckpt_lora_target_bare((gckpt_lora_target)t);
        int other = -1;
        for (int u = 0; u < GCKPT_NLT && other < 0; u++)
            if (u != t && (fam & (1u << u)) && !strcmp(gckpt_lora_target_bare((gckpt_lora_target)u), bare)) other = u;
        if (other < 0) {
            append(buf, n, bare);
            continue;
        }
        bool both = targets & (1u << other);
        if (both && other < t) continue;
        append(buf, n, both ? bare : gckpt_lora_target_modules[t]);
    }
}

/* the distinct names (without their parent) of the targets in mask, in table order */
static void target_names(uint32_t fam, char *buf, size_t n)
{
    if (n) buf[0] = 0;
    for (int t = 0; t < GCKPT_NLT; t++) {
        if (!(fam & (1u << t))) continue;
        const char *bare = gckpt_lora_target_bare((gckpt_lora_target)t);
        bool listed = false; /* gpt2's c_proj: attn.c_proj and mlp.c_proj, one name */
        for (int u = 0; u < t && !listed; u++)
            listed = (fam & (1u << u)) && !strcmp(gckpt_lora_target_bare((gckpt_lora_target)u), bare);
        if (!listed) append(buf, n, bare);
    }
}

void gckpt_lora_family_names(gckpt_family f, char *buf, size_t n) { target_names(gckpt_lora_family_targets(f), buf, n); }

void gckpt_lora_all_names(char *buf, size_t n) { target_names(GCKPT_LT_ALL, buf, n); }

void gckpt_mts_name(uint8_t mts, gckpt_family f, char *buf, size_t n)
{
    if (n) buf[0] = 0;
    if (mts & GCKPT_MTS_LM_HEAD) append(buf, n, "lm_head");
    const gckpt_family_info *fi = gckpt_family_of(f);
    if (mts & GCKPT_MTS_EMBED) append(buf, n, fi ? fi->embed_name : "embed_tokens");
}

/* mixtral, qwen3_moe, olmoe, deepseek_v3: peft 0.21.2's all-linear also wraps the router and
 * the experts' fused parameters with its ParamWrapper; gpt_oss's (sinks) only its q/k/v/o
 * (FINDINGS R-PEFT-28, R-PEFT-29, peft_family_facts.py). */
static bool all_linear_wraps_experts(const gckpt_model *m)
{
    return gckpt_family_of(m->family)->lora_beyond_targets && !m->attn_sinks;
}

/* The family's linears that model m has: under MLA q_proj, or q_a_proj and q_b_proj with a
 * q_lora_rank (peft ignores a listed name no module has, and refuses a list none matches) */
static uint32_t model_targets(const gckpt_model *m)
{
    uint32_t t = gckpt_lora_family_targets(m->family);
    if (m->mla) t &= m->q_lora_rank ? ~(1u << GCKPT_LT_Q) : ~((1u << GCKPT_LT_Q_A) | (1u << GCKPT_LT_Q_B));
    return t;
}

bool gckpt_peft_model_ok(const gckpt_model *m, const gckpt_peft *pf, gckpt_err *err)
{
    if (!gckpt_peft_on(pf)) return true;
    uint32_t fam = gckpt_lora_family_targets(m->family);
    char names[160];
    gckpt_lora_family_names(m->family, names, sizeof names);
    if (pf->targets == GCKPT_LT_ALL && all_linear_wraps_experts(m)) {
        gckpt_seterr(err, "--lora-targets all-linear on model_type \"%s\": peft's all-linear also wraps the router and "
                          "the experts' fused gate_up_proj / down_proj parameters (ParamWrapper, run by grouped_mm), "
                          "which is not modelled; attention adapters are: --lora-targets %s (or a subset)",
                     m->model_type, names);
        return false;
    }
    if (gckpt_family_of(m->family)->lora_beyond_targets && pf->targets != GCKPT_LT_ALL && (pf->targets & ~fam)) {
        gckpt_seterr(err, "--lora-targets: on model_type \"%s\" only the attention projections %s are modelled (peft "
                          "matches MLP names to the router or the experts' fused parameters there)",
                     m->model_type, names);
        return false;
    }
    if (!(pf->targets & model_targets(m))) {
        target_names(model_targets(m), names, sizeof names);
        gckpt_seterr(err, "--lora-targets: no linear of %s matches (its linears: %s)", m->name, names);
        return false;
    }
    /* QLoRA on mixtral, qwen3_moe, olmoe: bitsandbytes quantizes q/k/v/o only, the experts
     * and the router stay and prepare makes them fp32 (planned as such, FINDINGS R-QUANT-15) */
    if (pf->method == GCKPT_METHOD_QLORA && m->attn_sinks) {
        gckpt_seterr(err, "--method qlora on model_type \"%s\" is not modelled: its checkpoint is MXFP4-quantized "
                          "(quantization_config mxfp4) and loading it with a BitsAndBytesConfig is not measured; use "
                          "--method lora",
                     m->model_type);
        return false;
    }
    return true;
}
