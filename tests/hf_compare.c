#include "hf_compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/eval.h"
#include "gckpt/core/peft.h"
#include "gckpt/util/jsonget.h"

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static bool need(const cJSON *it, const char *path, const char *field, int type, gckpt_err *err)
{
    bool ok = type == cJSON_Number ? cJSON_IsNumber(it) : type == cJSON_String ? cJSON_IsString(it) :
              type == cJSON_Object ? cJSON_IsObject(it) : cJSON_IsArray(it);
    if (!ok) gckpt_seterr(err, "%s: field '%s' is missing or %s", path, field, gckpt_json_type_name(it));
    return ok;
}

/* field: "a.b.key" names the key (after the last dot) of object o in messages */
static bool num(const cJSON *o, const char *path, const char *field, double *out, gckpt_err *err)
{
    const char *key = strrchr(field, '.') ? strrchr(field, '.') + 1 : field;
    const cJSON *it = item(o, key);
    if (!need(it, path, field, cJSON_Number, err)) return false;
    *out = it->valuedouble;
    return true;
}

static bool str(const cJSON *o, const char *path, const char *field, char *out, size_t n, gckpt_err *err)
{
    const char *key = strrchr(field, '.') ? strrchr(field, '.') + 1 : field;
    const cJSON *it = item(o, key);
    if (!need(it, path, field, cJSON_String, err)) return false;
    snprintf(out, n, "%s", it->valuestring);
    return true;
}

static int dtype_named(const char *s)
{
    return !strcmp(s, "uint8") ? GCKPT_DT_U8 : !strcmp(s, "int8") ? GCKPT_DT_I8 : !strcmp(s, "bf16") || !strcmp(s, "bfloat16") ? GCKPT_DT_BF16 :
           !strcmp(s, "fp16") || !strcmp(s, "float16") ? GCKPT_DT_F16 : !strcmp(s, "fp32") || !strcmp(s, "float32") ? GCKPT_DT_F32 : -1;
}

/* LoRA / QLoRA fixtures (tests/data/hf-peft): method, lora {r, alpha, dropout, targets,
 * modules_to_save}, quant {type, double_quant, storage, compute_dtype}, trainable_params,
 * the optimizer */
static bool read_peft(const char *path, const cJSON *root, hf_fixture *f, gckpt_err *err)
{
    snprintf(f->method, sizeof f->method, "full");
    const cJSON *set = item(root, "setting");
    snprintf(f->optimizer, sizeof f->optimizer, "%s",
             cJSON_IsString(item(set, "optimizer")) ? item(set, "optimizer")->valuestring : "adamw_torch_fused");
    /* the probe's optim names; on the CPU paged states are plain tensors (FINDINGS R-OPT-6, R-CPU-3 C7),
     * which the CPU target's exact-bytes device counts in the peak like any state */
    if (!strcmp(f->optimizer, "adamw_bnb_8bit")) f->s.optimizer = GCKPT_ADAMW_8BIT;
    if (!strcmp(f->optimizer, "paged_adamw_8bit")) f->s.optimizer = GCKPT_PAGED_ADAMW_8BIT;
    if (!strcmp(f->optimizer, "paged_adamw_32bit")) f->s.optimizer = GCKPT_PAGED_ADAMW_32BIT;
    if (!cJSON_IsString(item(root, "method"))) return true;
    if (!str(root, path, "method", f->method, sizeof f->method, err)) return false;
    int method = gckpt_method_from(f->method);
    if (method < 0) {
        gckpt_seterr(err, "%s: method '%s' not understood", path, f->method);
        return false;
    }
    gckpt_peft *pf = &f->s.peft;
    gckpt_peft_default((gckpt_method)method, pf);
    if (method == GCKPT_METHOD_FULL) return true;
    const cJSON *lora = item(root, "lora"), *q = item(root, "quant");
    double r, alpha, d, tp;
    if (!need(lora, path, "lora", cJSON_Object, err) || !num(lora, path, "lora.r", &r, err) ||
        !num(lora, path, "lora.alpha", &alpha, err) || !num(lora, path, "lora.dropout", &d, err) ||
        !num(root, path, "trainable_params", &tp, err))
        return false;
    pf->rank = (uint32_t)r;
    pf->alpha = alpha;
    pf->dropout = d;
    f->trainable = (uint64_t)tp;
    const cJSON *tg = item(lora, "targets"), *e;
    char list[256] = "", bad[64];
    if (cJSON_IsString(tg)) snprintf(list, sizeof list, "%s", tg->valuestring);
    cJSON_ArrayForEach(e, tg) if (cJSON_IsString(e)) {
        size_t k = strlen(list);
        snprintf(list + k, sizeof list - k, "%s%s", k ? "," : "", e->valuestring);
    }
    if (!gckpt_lora_targets_parse(list, &pf->targets, bad, sizeof bad)) {
        gckpt_seterr(err, "%s: field 'lora.targets': '%s' is not a linear module", path, bad);
        return false;
    }
    list[0] = 0;
    cJSON_ArrayForEach(e, item(lora, "modules_to_save")) if (cJSON_IsString(e)) {
        size_t k = strlen(list);
        snprintf(list + k, sizeof list - k, "%s%s", k ? "," : "", e->valuestring);
    }
    if (!gckpt_mts_parse(list, &pf->modules_to_save, bad, sizeof bad)) {
        gckpt_seterr(err, "%s: field 'lora.modules_to_save': '%s' not understood", path, bad);
        return false;
    }
    if (method != GCKPT_METHOD_QLORA) return true;
    char type[16], storage[16] = "uint8", cdt[16] = "bf16";
    if (!need(q, path, "quant", cJSON_Object, err) || !str(q, path, "quant.type", type, sizeof type, err)) return false;
    if (cJSON_IsString(item(q, "storage"))) snprintf(storage, sizeof storage, "%s", item(q, "storage")->valuestring);
    if (cJSON_IsString(item(q, "compute_dtype"))) snprintf(cdt, sizeof cdt, "%s", item(q, "compute_dtype")->valuestring);
    pf->quant = GCKPT_QUANT_NONE;
    for (int i = 1; i < GCKPT_NQUANT; i++)
        if (!strcmp(type, gckpt_quant_names[i])) pf->quant = (uint8_t)i;
    int sd = dtype_named(storage), cd = dtype_named(cdt);
    if (!pf->quant || sd < 0 || cd < 0) {
        gckpt_seterr(err, "%s: field 'quant': type '%s', storage '%s', compute dtype '%s' not understood", path, type,
                     storage, cdt);
        return false;
    }
    pf->double_quant = cJSON_IsTrue(item(q, "double_quant"));
    pf->quant_storage = (uint8_t)sd;
    pf->compute_dtype = (uint8_t)cd;
    return true;
}

bool hf_peft_read(const char *path, const cJSON *root, gckpt_setting *s, gckpt_err *err)
{
    hf_fixture *f = calloc(1, sizeof *f);
    if (!f) {
        gckpt_seterr(err, "%s: out of memory", path);
        return false;
    }
    f->s = *s;
    bool ok = read_peft(path, root, f, err);
    s->peft = f->s.peft;
    free(f);
    return ok;
}

/* The load-balancing loss's saved tensors as the probe records them (FINDINGS R-MOE-4):
 * its storage tracker lists each layer's topk indices (TopkBackward drops them: a
 * saved-tensor hook sees none), and its storage-key de-duplication can merge a layer's
 * softmax output with a storage freed before. The head's bytes are taken without the
 * former and with the latter re-added at the size recorded for the other layers: one
 * softmax output per MoE layer (load_balancing_loss_func's loop). */
static void aux_loss_saved(const cJSON *tensors, hf_fixture *f)
{
    const cJSON *t;
    uint64_t softmaxes = 0, size = 0;
    cJSON_ArrayForEach(t, tensors)
    {
        const cJSON *op = item(t, "op"), *mod = item(t, "module"), *b = item(t, "bytes");
        /* the loss's module: "base_model.model" under peft (the wrapped model's forward) */
        if (!cJSON_IsString(op) || !cJSON_IsString(mod) || !cJSON_IsNumber(b) ||
            (strcmp(mod->valuestring, "loss") && strcmp(mod->valuestring, "base_model.model")))
            continue;
        if (!strcmp(op->valuestring, "aten.topk")) f->head_saved -= (uint64_t)b->valuedouble;
        if (!strcmp(op->valuestring, "aten.softmax")) {
            softmaxes++;
            size = (uint64_t)b->valuedouble;
        }
    }
    if (softmaxes < f->m.layers) f->head_saved += (f->m.layers - softmaxes) * size;
}

static bool read_root(const char *path, const cJSON *root, hf_fixture *f, gckpt_err *err)
{
    const cJSON *set = item(root, "setting"), *saved = item(root, "saved"), *steps = item(root, "steps");
    if (!need(set, path, "setting", cJSON_Object, err) || !need(saved, path, "saved", cJSON_Object, err) ||
        !need(steps, path, "steps", cJSON_Array, err) || !need(item(root, "config"), path, "config", cJSON_Object, err))
        return false;
    if (!str(set, path, "family", f->family, sizeof f->family, err) ||
        !str(set, path, "precision", f->precision, sizeof f->precision, err) ||
        !str(set, path, "attention", f->attention, sizeof f->attention, err))
        return false;
    char *cfg = cJSON_PrintUnformatted(item(root, "config"));
    bool ok = cfg && gckpt_model_parse(path, cfg, &f->m, err);
    free(cfg);
    if (!ok) return false;
    double b, s, ga, n, d;
    if (!num(set, path, "micro_batch", &b, err) || !num(set, path, "seq", &s, err) ||
        !num(set, path, "grad_accum", &ga, err) || !num(set, path, "every_n_layers", &n, err))
        return false;
    f->dropout = num(set, path, "dropout", &d, err) ? d : 0;
    gckpt_setting *st = &f->s;
    memset(st, 0, sizeof *st);
    int prec = hf_precision_from(f->precision);
    int attn = gckpt_attention_from(f->attention);
    if (prec < 0 || attn < 0 || b < 1 || s < 1 || ga < 1 || n < 0) {
        gckpt_seterr(err, "%s: setting '%s' / '%s' / sizes not understood", path, f->precision, f->attention);
        return false;
    }
    st->precision = (gckpt_precision)prec;
    st->attention = (gckpt_attention)attn;
    st->micro_batch = (uint64_t)b;
    st->seq = (uint64_t)s;
    st->grad_accum = (uint64_t)ga;
    st->every_n = (uint32_t)n;
    st->offload = cJSON_IsTrue(item(set, "offload"));
    st->reentrant = cJSON_IsTrue(item(set, "use_reentrant")); /* prepare's own checkpointing */
    st->optimizer = GCKPT_ADAMW;
    /* Liger's layer kernels (tools/hf_probe/liger_layers_rerun.py): --loss liger with the
     * kernels listed on, the others (its loss among them) off */
    const cJSON *lk = item(set, "liger_kernels"), *ke;
    if (lk) {
        char list[128] = "", bad[64];
        cJSON_ArrayForEach(ke, lk) if (cJSON_IsString(ke)) {
            size_t k = strlen(list);
            snprintf(list + k, sizeof list - k, "%s%s", k ? "," : "", ke->valuestring);
        }
        if (!gckpt_liger_kernels_parse(list, &st->liger_off, bad, sizeof bad)) {
            gckpt_seterr(err, "%s: field 'setting.liger_kernels': '%s' is not a Liger kernel", path, bad);
            return false;
        }
        st->loss = GCKPT_LOSS_LIGER;
    }
    f->comparable = true;

    double p;
    if (!num(item(root, "parameters"), path, "parameters.count", &p, err)) return false;
    f->params = f->trainable = (uint64_t)p;
    if (!read_peft(path, root, f, err)) return false;
    const cJSON *layers = item(saved, "layers");
    if (!need(layers, path, "saved.layers", cJSON_Array, err)) return false;
    f->nlayers = cJSON_GetArraySize(layers);
    if (f->nlayers > HF_MAX_LAYERS) {
        gckpt_seterr(err, "%s: more than %d layers", path, HF_MAX_LAYERS);
        return false;
    }
    for (int i = 0; i < f->nlayers; i++) {
        const cJSON *ly = cJSON_GetArrayItem(layers, i);
        if (!num(ly, path, "saved.layers[].bytes", &p, err)) return false;
        f->layer_saved[i] = (uint64_t)p;
        f->ckpt[i] = cJSON_IsTrue(item(ly, "checkpointed"));
    }
    if (!num(item(saved, "head"), path, "saved.head.bytes", &p, err)) return false;
    f->head_saved = (uint64_t)p;
    if (f->m.router_aux_loss) aux_loss_saved(item(item(saved, "head"), "tensors"), f);
    if (!num(item(saved, "embedding"), path, "saved.embedding.bytes", &p, err)) return false;
    f->embed_saved = (uint64_t)p;
    if (!num(root, path, "offload_bytes", &p, err)) return false;
    f->offload = (uint64_t)p;
    /* the steady-state step is the last one recorded */
    const cJSON *last = cJSON_GetArrayItem(steps, cJSON_GetArraySize(steps) - 1);
    if (!last || !num(last, path, "steps[].live_peak_bytes", &f->peak, err) ||
        !num(last, path, "steps[].after_forward_bytes", &f->after, err) ||
        !str(last, path, "steps[].peak_phase", f->peak_phase, sizeof f->peak_phase, err) ||
        !str(last, path, "steps[].peak_where", f->peak_where, sizeof f->peak_where, err))
        return false;
    f->virtual_states = cJSON_IsTrue(item(last, "optimizer_states_virtual"));
    const cJSON *hp = item(last, "host_peak_bytes");
    f->host_peak = cJSON_IsNumber(hp) ? hp->valuedouble : -1;
    const cJSON *rp = item(last, "region_peaks"), *e;
    cJSON_ArrayForEach(e, rp)
    {
        if (f->nregion == 16) break;
        if (!cJSON_IsNumber(e)) continue;
        snprintf(f->region_key[f->nregion], sizeof f->region_key[0], "%s", e->string);
        f->region_peak[f->nregion++] = e->valuedouble;
    }
    return true;
}

/* moe_routing: the tokens each expert received per layer in every forward. */
static void read_routing(const cJSON *root, hf_fixture *f)
{
    const cJSON *mr = item(root, "moe_routing"), *fw;
    if (!mr) return;
    if (cJSON_IsString(item(mr, "experts_implementation")))
        snprintf(f->moe_impl, sizeof f->moe_impl, "%s", item(mr, "experts_implementation")->valuestring);
    uint64_t S = f->s.micro_batch * f->s.seq * f->m.top_k;
    f->moe_counts_ok = f->m.experts > 0;
    cJSON_ArrayForEach(fw, item(mr, "forwards"))
    {
        const cJSON *layer;
        int nl = 0;
        f->moe_forwards++;
        cJSON_ArrayForEach(layer, item(fw, "tokens_per_expert"))
        {
            uint64_t sum = 0, most = 0;
            const cJSON *n;
            nl++;
            f->moe_counts_ok &= (uint64_t)cJSON_GetArraySize(layer) == f->m.experts;
            cJSON_ArrayForEach(n, layer)
            {
                uint64_t v = cJSON_IsNumber(n) && n->valuedouble >= 0 ? (uint64_t)n->valuedouble : UINT64_MAX / 2;
                sum += v;
                if (v > most) most = v;
            }
            f->moe_counts_ok &= sum == S;
            double share = f->m.experts ? (double)most * (double)f->m.experts / (double)S : 0;
            if (share > f->moe_imbalance) f->moe_imbalance = share;
        }
        f->moe_counts_ok &= (uint64_t)nl == f->m.layers - f->m.dense_layers; /* the MoE layers' */
    }
}

double hf_vlm_step_peak(const cJSON *last)
{
    double peak = cJSON_GetObjectItemCaseSensitive(last, "live_peak_bytes")->valuedouble;
    const cJSON *phase = cJSON_GetObjectItemCaseSensitive(last, "peak_phase");
    const cJSON *regions = cJSON_GetObjectItemCaseSensitive(last, "region_peaks"), *r;
    if (!cJSON_IsString(phase) || strncmp(phase->valuestring, "idle", 4) || !regions) return peak;
    peak = 0;
    cJSON_ArrayForEach(r, regions) if (strncmp(r->string, "idle", 4) && r->valuedouble > peak) peak = r->valuedouble;
    return peak;
}

int hf_precision_from(const char *name)
{
    return !strncmp(name, "amp-bf16", 8) ? GCKPT_AMP_BF16 : gckpt_precision_from(name);
}

gckpt_target hf_target(const hf_fixture *f)
{
    return strstr(f->precision, "cudalists") ? GCKPT_TARGET_CPU_CUDA_LISTS : GCKPT_TARGET_CPU;
}

bool hf_fixture_read(const char *path, hf_fixture *f, gckpt_err *err)
{
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    char *text = gckpt_read_file(path, 256u << 20, err);
    if (!text) return false;
    cJSON *root = gckpt_json_parse(path, text, err);
    free(text);
    if (!root) return false;
    bool ok = read_root(path, root, f, err);
    if (ok && f->comparable) read_routing(root, f);
    cJSON_Delete(root);
    return ok;
}

/* the tensor whose storage t is, through forward views */
static int view_base(const gckpt_recipe *r, int t)
{
    for (int i = r->nop - 1; i >= 0; i--)
        if (r->op[i].out[0] == t && r->op[i].view_fwd && r->op[i].nin > 0) t = r->op[i].in[0];
    return t;
}

bool hf_compare(const hf_fixture *f, const gckpt_device *exact, hf_cmp *c, gckpt_err *err)
{
    memset(c, 0, sizeof *c);
    static gckpt_recipe r;
    gckpt_recipe_build_loss(&f->m, f->s.precision, f->s.attention, hf_target(f), &f->s.peft, f->s.seq, f->s.loss,
                            f->s.liger_off, &r);
    gckpt_ctx ctx;
    if (!gckpt_ctx_init(&ctx, &f->m, exact, &r, &f->s, err)) return false;
    /* a quantized weight counts its stored elements (a Params4bit: n / 2 as uint8) */
    for (int i = 0; i < ctx.params.n; i++) c->params += ctx.params.p[i].copies * ctx.params.p[i].weight.numel;
    c->trainable = ctx.params.trainable;
    c->params_ok = c->params == f->params && c->trainable == f->trainable;

    /* saved bytes, with the documented charging of shared tensors */
    uint64_t rope = 0, rope2 = 0;
    for (int t = 0; t < r.nt; t++) {
        if (!strcmp(r.t[t].name, "rotary.cos") || !strcmp(r.t[t].name, "rotary.sin")) rope += ctx.raw[t];
        if (!strcmp(r.t[t].name, "rotary_local.cos") || !strcmp(r.t[t].name, "rotary_local.sin")) rope2 += ctx.raw[t];
    }
    /* the pair is charged only where a layer's op saves it or a view of it (GLM-4's layers
     * save per-layer copies of its halves instead: FINDINGS R-FAM-17) */
    bool pair_saved = false;
    for (int i = 0; i < r.nop; i++)
        for (int k = 0; k < r.op[i].nsaved; k++) pair_saved |= r.op[i].saved[k] >= 0 && !strcmp(r.t[view_base(&r, r.op[i].saved[k])].name, "rotary.cos");
    if (!pair_saved) rope = 0;
    uint64_t mask = r.mask >= 0 ? ctx.raw[r.mask] : 0;
    bool first_plain = true, first_ckpt = true, first_sliding = false, second_rope = rope2 == 0;
    bool rope_charged = false; /* the rotary pair: saved by the first plain layer that rotates (not NoPE) */
    c->saved_ok = (uint64_t)f->nlayers == f->m.layers;
    c->first_bad_layer = c->saved_ok ? -1 : 0;
    for (int i = 0; i < f->nlayers && (uint64_t)i < f->m.layers; i++) {
        uint64_t want;
        bool ck = gckpt_layer_mode_of(f->s.every_n, false, (uint64_t)i) != GCKPT_LAYER_PLAIN;
        if (!ck) {
            /* layer 0 of a frozen embedding without checkpointing: its input needs no gradient */
            /* the layer's block type's section (gckpt_layer_block) */
            uint64_t plain = gckpt_section_saved_bytes(&ctx, gckpt_layer_section(&r, &f->m, f->s.attention, (uint64_t)i));
            bool rotates = !gckpt_layer_nope(&f->m, (uint64_t)i);
            want = (i == 0 && r.frozen0 ? gckpt_layer0_frozen_saved_bytes(&ctx) : plain) +
                   (rotates && !rope_charged ? rope : 0);
            rope_charged |= rotates;
            /* Gemma 3: the other layer type's rotary pair, charged to its first plain layer */
            bool sl = gckpt_layer_sliding(&f->m, (uint64_t)i);
            if (!first_plain && !second_rope && sl != first_sliding) {
                want += rope2;
                second_rope = true;
            }
            if (first_plain) first_sliding = sl;
            first_plain = false;
        } else {
            want = f->s.offload ? 0 : ctx.raw[r.block_in];
            if (r.mask_positional && first_ckpt && !f->s.offload) want += mask;
            first_ckpt = false;
        }
        c->layer_saved[i] = want;
        if ((want != f->layer_saved[i] || ck != f->ckpt[i]) && c->first_bad_layer < 0) {
            c->saved_ok = false;
            c->first_bad_layer = i;
        }
    }
    int L = (int)f->m.layers;
    c->head_saved = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD) + (f->s.micro_batch == 1 ? 8 : 0);
    c->embed_saved = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_EMBED);
    if (c->head_saved != f->head_saved && c->first_bad_layer < 0) c->first_bad_layer = L;
    if (c->embed_saved != f->embed_saved && c->first_bad_layer < 0) c->first_bad_layer = L + 1;
    c->saved_ok = c->first_bad_layer < 0;

    gckpt_schedule ev;
    if (!gckpt_schedule_build(&ctx, &ev)) {
        gckpt_schedule_free(&ev);
        gckpt_seterr(err, "%s: out of memory building the schedule", f->path);
        return false;
    }
    gckpt_result res;
    gckpt_walk(&ctx, &ev, &res);
    gckpt_schedule_free(&ev);
    c->offload = res.host_pinned_bytes;
    c->offload_ok = c->offload == f->offload;
    c->host = res.host_pinned_bytes + res.host_rng_bytes;
    c->host_ok = f->host_peak < 0 || (double)c->host == f->host_peak;
    c->peak = res.peak_bytes;
    c->after = res.after_forward_bytes;
    c->peak_phase = gckpt_phase_names[res.peak_phase];
    c->peak_layer = res.peak_layer;
    snprintf(c->peak_what, sizeof c->peak_what, "%s%s", res.peak_grad ? "gradient of " : "",
             res.peak_tensor >= 0 ? r.t[res.peak_tensor].name : "-");
    for (int i = 0; i < r.nop && !res.peak_grad && res.peak_tensor >= 0; i++)
        c->peak_at_linear |= r.op[i].out[0] == res.peak_tensor && r.op[i].prim == GCKPT_P_LINEAR;
    c->e_peak = ((double)c->peak - f->peak) / f->peak;
    c->e_after = ((double)c->after - f->after) / f->after;
    bool head_region = strstr(f->peak_where, "/head/") != NULL;
    c->same_phase = !strcmp(f->peak_phase, c->peak_phase) && head_region == (c->peak_layer == L);
    if (res.peak_phase == GCKPT_PH_OPTIMIZER) snprintf(c->peak_key, sizeof c->peak_key, "optimizer/-");
    else if (res.peak_layer < 0) snprintf(c->peak_key, sizeof c->peak_key, "%s/embedding", c->peak_phase);
    else if (res.peak_layer >= L) snprintf(c->peak_key, sizeof c->peak_key, "%s/head", c->peak_phase);
    else snprintf(c->peak_key, sizeof c->peak_key, "%s/layer.%d", c->peak_phase, res.peak_layer);
    c->measured_there = -1;
    for (int i = 0; i < f->nregion; i++)
        if (!strcmp(f->region_key[i], c->peak_key)) c->measured_there = f->region_peak[i];
    if (!c->same_phase && c->measured_there >= f->peak * (1 - hf_tolerance(f))) c->same_phase = true;
    return true;
}

double hf_tolerance(const hf_fixture *f) { return f->s.precision == GCKPT_BF16 ? 0.005 : 0.001; }

bool hf_pass(const hf_fixture *f, const hf_cmp *c)
{
    double tol = hf_tolerance(f);
    return c->params_ok && c->saved_ok && c->offload_ok && c->host_ok && c->same_phase && fabs(c->e_peak) <= tol &&
           fabs(c->e_after) <= tol;
}

void hf_print(FILE *out, const hf_fixture *f, const hf_cmp *c)
{
    const gckpt_setting *s = &f->s;
    char n[16];
    snprintf(n, sizeof n, "%u", s->every_n);
    fprintf(out, "%s\n  %s, %s, %s attention, every_n %s, offload %s, batch %llu x seq %llu, grad_accum %llu%s%s\n",
            f->path, f->m.model_type, f->precision, f->attention, s->every_n ? n : "off", s->offload ? "on" : "off",
            (unsigned long long)s->micro_batch, (unsigned long long)s->seq, (unsigned long long)s->grad_accum,
            f->dropout > 0 ? ", dropout" : "", f->virtual_states ? ", AdamW states counted, not allocated" : "");
    if (!f->comparable) {
        fprintf(out, "  not compared: %s\n", f->why_not);
        return;
    }
    fprintf(out, "  %-34s %16s %16s %9s\n", "", "measured", "planned", "error");
    fprintf(out, "  %-34s %16llu %16llu %9s\n", "parameters", (unsigned long long)f->params,
            (unsigned long long)c->params, c->params == f->params ? "exact" : "DIFFERS");
    fprintf(out, "  %-34s %16llu %16llu %9s\n", "trainable parameters", (unsigned long long)f->trainable,
            (unsigned long long)c->trainable, c->trainable == f->trainable ? "exact" : "DIFFERS");
    int L = (int)f->m.layers;
    int shown_plain = 0, shown_ckpt = 0;
    for (int i = 0; i < f->nlayers && i < L; i++) {
        /* the first two plain layers (the first holds the rotary tables), the first
         * checkpointed one, and every layer that differs */
        bool differs = f->layer_saved[i] != c->layer_saved[i];
        int *shown = f->ckpt[i] ? &shown_ckpt : &shown_plain;
        if (!differs && *shown >= (f->ckpt[i] ? 1 : 2)) continue;
        (*shown)++;
        char what[48];
        snprintf(what, sizeof what, "saved, layer %d%s", i, f->ckpt[i] ? " (checkpointed)" : "");
        fprintf(out, "  %-34s %16llu %16llu %9s\n", what, (unsigned long long)f->layer_saved[i],
                (unsigned long long)c->layer_saved[i], differs ? "DIFFERS" : "exact");
    }
    fprintf(out, "  %-34s %16llu %16llu %9s\n", "saved, head (norm, lm_head, loss)", (unsigned long long)f->head_saved,
            (unsigned long long)c->head_saved, f->head_saved == c->head_saved ? "exact" : "DIFFERS");
    fprintf(out, "  %-34s %16llu %16llu %9s\n", "saved, embedding", (unsigned long long)f->embed_saved,
            (unsigned long long)c->embed_saved, f->embed_saved == c->embed_saved ? "exact" : "DIFFERS");
    fprintf(out, "  %-34s %16llu %16llu %9s\n", "offloaded to host", (unsigned long long)f->offload,
            (unsigned long long)c->offload, c->offload_ok ? "exact" : "DIFFERS");
    if (f->host_peak >= 0)
        fprintf(out, "  %-34s %16.0f %16llu %9s\n", "host peak (offload, RNG states)", f->host_peak,
                (unsigned long long)c->host, c->host_ok ? "exact" : "DIFFERS");
    fprintf(out, "  %-34s %16.0f %16llu %+8.3f%%\n", "live bytes after the forward", f->after,
            (unsigned long long)c->after, c->e_after * 100);
    fprintf(out, "  %-34s %16.0f %16llu %+8.3f%%\n", "live peak (steady-state step)", f->peak,
            (unsigned long long)c->peak, c->e_peak * 100);
    char layer[32];
    if (c->peak_layer == L) snprintf(layer, sizeof layer, "head");
    else if (c->peak_layer == L + 1) snprintf(layer, sizeof layer, "optimizer");
    else if (c->peak_layer < 0) snprintf(layer, sizeof layer, "embedding");
    else snprintf(layer, sizeof layer, "layer %d", c->peak_layer);
    fprintf(out, "  peak measured at %s\n  peak planned at  %s, %s: allocating %s\n", f->peak_where, c->peak_phase,
            layer, c->peak_what);
    if (strncmp(f->peak_where + strcspn(f->peak_where, "/") + 1, c->peak_key, strlen(c->peak_key))) {
        if (c->measured_there >= 0)
            fprintf(out, "  measured in %s: %.0f (%.3f%% below the peak)\n", c->peak_key, c->measured_there,
                    (f->peak - c->measured_there) / f->peak * 100);
        else if (f->nregion)
            fprintf(out, "  measured in %s: not within 2%% of the peak\n", c->peak_key);
    }
    fprintf(out, "  %s (tolerance %.1f%%; saved, offloaded and host bytes exact)\n",
            hf_pass(f, c) ? "PASS" : "FAIL", hf_tolerance(f) * 100);
}

bool hf_events(FILE *out, const hf_fixture *f, const gckpt_device *exact, gckpt_err *err)
{
    static gckpt_recipe r;
    gckpt_recipe_build_loss(&f->m, f->s.precision, f->s.attention, hf_target(f), &f->s.peft, f->s.seq, f->s.loss,
                            f->s.liger_off, &r);
    gckpt_ctx ctx;
    gckpt_schedule ev;
    if (!gckpt_ctx_init(&ctx, &f->m, exact, &r, &f->s, err)) return false;
    if (!gckpt_schedule_build(&ctx, &ev)) {
        gckpt_schedule_free(&ev);
        gckpt_seterr(err, "%s: out of memory building the schedule", f->path);
        return false;
    }
    gckpt_mem m = {{0}};
    gckpt_persistent(&ctx, m.cur);
    for (int i = 0; i < GCKPT_NCOMP; i++) m.total += m.cur[i];
    for (size_t si = 0; si < ev.nseg; si++) {
        const gckpt_sched_seg *g = &ev.seg[si];
        for (size_t i = g->begin; i < g->end; i++) {
            const gckpt_event *e = &ev.ev[i];
            gckpt_mem_apply(&m, e);
            const char *what = e->op >= 0 ? r.op[e->op].name : e->tensor >= 0 ? r.t[e->tensor].name : "-";
            fprintf(out, "%zu micro%u %s L%d %s %s%s %llu %lld\n", i, g->seg.micro + 1,
                    gckpt_phase_names[gckpt_seg_phase(&g->seg)], gckpt_seg_place(&g->seg, f->m.layers),
                    gckpt_event_names[e->kind], e->grad ? "grad:" : "", what, (unsigned long long)e->bytes,
                    (long long)m.total);
        }
    }
    gckpt_schedule_free(&ev);
    return true;
}
