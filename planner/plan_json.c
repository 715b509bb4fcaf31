/* The plan as JSON (schema gckpt.plan/2, described by reports/schema/plan.schema.json). */
#include "gckpt/planner/plan.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/formats/device_json.h"

static cJSON *num(cJSON *o, const char *k, double v) { return cJSON_AddNumberToObject(o, k, v); }

static cJSON *entry_json(const gckpt_plan *p, size_t idx, bool timeline)
{
    const gckpt_entry *e = &p->entries[idx];
    const gckpt_result *r = &e->r;
    cJSON *o = cJSON_CreateObject();
    num(o, "index", (double)idx);
    num(o, "every_n_layers", e->every_n);
    cJSON_AddBoolToObject(o, "offload", e->offload);
    num(o, "micro_batch", (double)e->micro_batch);
    num(o, "grad_accum", (double)e->grad_accum);
    cJSON *cl = cJSON_AddArrayToObject(o, "checkpointed_layers");
    gckpt_mode_cursor cur = gckpt_mode_cursor_at(e->every_n, e->offload, 0);
    if (p->vlm) gckpt_plan_vlm_entry_json(p, e, cl, o);
    for (uint64_t i = 0; !p->vlm && e->every_n && i < p->model.layers; i++, gckpt_mode_cursor_up(&cur))
        if (gckpt_mode_cursor_mode(&cur) != GCKPT_LAYER_PLAIN) cJSON_AddItemToArray(cl, cJSON_CreateNumber((double)i));
    cJSON *m = cJSON_AddObjectToObject(o, "memory");
    num(m, "peak_bytes", (double)r->peak_bytes);
    num(m, "device_peak_bytes", (double)r->device_peak_bytes);
    num(m, "host_pinned_bytes", (double)r->host_pinned_bytes);
    num(m, "host_rng_state_bytes", (double)r->host_rng_bytes);
    num(m, "after_forward_bytes", (double)r->after_forward_bytes);
    cJSON_AddStringToObject(m, "peak_phase", gckpt_phase_names[r->peak_phase]);
    if (!r->peak_vision && r->peak_layer >= 0 && (uint64_t)r->peak_layer < p->model.layers)
        num(m, "peak_layer", r->peak_layer);
    else
        cJSON_AddNullToObject(m, "peak_layer");
    cJSON_AddStringToObject(m, "peak_micro_step", r->peak_micro == GCKPT_MICRO_FIRST   ? "first"
                                                         : r->peak_micro == GCKPT_MICRO_LATER ? "later"
                                                                                                : "optimizer");
    char where[256];
    gckpt_peak_where(p, r, where, sizeof where);
    cJSON_AddStringToObject(m, "peak_where", where);
    cJSON *bd = cJSON_AddObjectToObject(m, "breakdown");
    for (int k = 0; k < GCKPT_NCOMP; k++)
        if (!gckpt_component_optional(k) ||
            (k == GCKPT_C_PAGED_STATES   ? p->params->paged_bytes != 0
             : k == GCKPT_C_PARALLEL     ? gckpt_layout_multi(&p->req.layout) || p->req.tp
                                         : p->params->quant_bytes != 0))
            num(bd, gckpt_component_names[k], (double)r->breakdown[k]);
    num(m, "context_bytes", (double)p->dev.context_bytes);
    cJSON *t = cJSON_AddObjectToObject(o, "time");
    num(t, "step_s", r->step_s);
    num(t, "forward_s", r->forward_s);
    num(t, "backward_s", r->backward_s);
    num(t, "recompute_s", r->recompute_s);
    num(t, "offload_copy_s", r->copy_s);
    num(t, "optimizer_s", r->optimizer_s);
    num(t, "tokens_per_s", r->tokens_per_s);
    num(t, "mfu", r->mfu);
    num(t, "hfu", r->hfu);
    double lo, hi;
    if (gckpt_plan_step_range(p, r, &lo, &hi)) { /* the fit's held-out spread */
        cJSON *rg = cJSON_AddArrayToObject(t, "step_s_range");
        cJSON_AddItemToArray(rg, cJSON_CreateNumber(lo));
        cJSON_AddItemToArray(rg, cJSON_CreateNumber(hi));
    }
    gckpt_plan_parallel_entry_json(p, e, o, t);
    gckpt_plan_tp_entry_json(p, e, o);
    if (gckpt_peft_on(&p->req.peft)) num(o, "trainable_params", (double)p->params->trainable);
    cJSON_AddBoolToObject(o, "fits", e->fits);
    num(o, "headroom_bytes", (double)p->usable_bytes - (double)r->device_peak_bytes);
    cJSON_AddBoolToObject(o, "pareto", e->pareto);
    gckpt_plan_training_args_entry(p, e, cJSON_AddObjectToObject(o, "training_arguments"), 0);
    if (timeline) {
        enum { MAXP = 1000 };
        double *ts = malloc(sizeof *ts * MAXP), *bs = malloc(sizeof *bs * MAXP);
        uint8_t *ph = malloc(MAXP);
        if (ts && bs && ph) {
            size_t np = gckpt_plan_timeline(p, e, ts, bs, ph, MAXP);
            cJSON *tl = cJSON_AddObjectToObject(o, "timeline");
            cJSON *a = cJSON_AddArrayToObject(tl, "seconds");
            cJSON *b = cJSON_AddArrayToObject(tl, "allocated_bytes");
            cJSON *c = cJSON_AddArrayToObject(tl, "phase");
            for (size_t i = 0; i < np; i++) {
                cJSON_AddItemToArray(a, cJSON_CreateNumber(ts[i]));
                cJSON_AddItemToArray(b, cJSON_CreateNumber(bs[i]));
                cJSON_AddItemToArray(c, cJSON_CreateString(gckpt_phase_names[ph[i]]));
            }
        }
        free(ts);
        free(bs);
        free(ph);
    }
    return o;
}

cJSON *gckpt_plan_to_json(const gckpt_plan *p, bool timeline)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", GCKPT_PLAN_SCHEMA);
    cJSON *g = cJSON_AddObjectToObject(root, "generator");
    cJSON_AddStringToObject(g, "name", "gckpt-plan");
    cJSON_AddStringToObject(g, "version", GCKPT_VERSION);

    cJSON *in = cJSON_AddObjectToObject(root, "inputs");
    cJSON *m = cJSON_AddObjectToObject(in, "model");
    const gckpt_model *mm = p->req.tp ? &p->tp_full : &p->model; /* --tp: the whole model (a rank's: tensor_parallel) */
    cJSON_AddStringToObject(m, "name", mm->name);
    cJSON_AddStringToObject(m, "model_type", mm->model_type);
    num(m, "layers", (double)mm->layers);
    num(m, "hidden", (double)mm->hidden);
    num(m, "heads", (double)mm->heads);
    num(m, "kv_heads", (double)mm->kv_heads);
    num(m, "head_dim", (double)mm->head_dim);
    num(m, "intermediate", (double)mm->intermediate);
    num(m, "vocab", (double)mm->vocab);
    cJSON_AddBoolToObject(m, "tied_embeddings", p->model.tied);
    /* the model's own parameters (LoRA adapters and copies: entries' trainable_params) */
    num(m, "parameters", (double)(p->vlm ? gckpt_plan_vlm_params(p) : p->req.tp ? gckpt_param_count(&p->tp_full) /* the whole model, not a rank's */
                                   : gckpt_peft_on(&p->req.peft) ? gckpt_param_count(&p->model) : p->params->numel));
    cJSON *cfg = cJSON_Parse(p->model_config_text);
    if (cfg) cJSON_AddItemToObject(m, "config", cfg);
    if (p->req.hub.id[0]) { /* where the config came from (absent: a shipped name or a path) */
        cJSON *hub = cJSON_AddObjectToObject(m, "hub");
        cJSON_AddStringToObject(hub, "id", p->req.hub.id);
        cJSON_AddStringToObject(hub, "revision", p->req.hub.revision);
        cJSON_AddStringToObject(hub, "commit", p->req.hub.commit);
    }
    gckpt_plan_vlm_json(p, in);
    cJSON_AddItemToObject(in, "device", gckpt_device_to_json(&p->dev));
    cJSON_AddStringToObject(in, "target", gckpt_target_label(p->target));
    num(in, "seq", (double)p->req.seq);
    cJSON *mb = cJSON_AddArrayToObject(in, "micro_batches");
    for (int i = 0; i < p->req.n_micro; i++)
        cJSON_AddItemToArray(mb, cJSON_CreateNumber((double)p->req.micro_batches[i]));
    if (p->req.global_batch) {
        num(in, "global_batch", (double)p->req.global_batch);
        cJSON_AddNullToObject(in, "grad_accum");
    } else {
        cJSON_AddNullToObject(in, "global_batch");
        num(in, "grad_accum", (double)p->req.grad_accum);
    }
    cJSON_AddStringToObject(in, "precision", gckpt_precision_names[p->req.precision]);
    cJSON_AddStringToObject(in, "optimizer", gckpt_optimizer_names[p->req.optimizer]);
    cJSON_AddStringToObject(in, "attention", gckpt_attention_names[p->req.attention]);
    cJSON_AddStringToObject(in, "code_base", gckpt_code_base_names[p->req.code_base]);
    if (p->req.loss != GCKPT_LOSS_HF) cJSON_AddStringToObject(in, "loss", gckpt_loss_names[p->req.loss]);
    if (p->req.loss == GCKPT_LOSS_LIGER) { /* the kernels on (--liger-kernels; all by default) */
        cJSON *lk = cJSON_AddArrayToObject(in, "liger_kernels");
        for (int k = 0; k < GCKPT_NLK; k++)
            if (!((p->req.liger_off >> k) & 1)) cJSON_AddItemToArray(lk, cJSON_CreateString(gckpt_liger_kernel_names[k]));
    }
    cJSON *en = cJSON_AddArrayToObject(in, "every_n_layers");
    for (int i = 0; i < p->req.n_every; i++)
        cJSON_AddItemToArray(en, cJSON_CreateNumber(p->req.every_n[i]));
    static const char *const offs[] = {"off", "on", "both"};
    cJSON_AddStringToObject(in, "offload", offs[p->req.offload]);
    num(in, "budget_bytes", (double)p->budget_bytes);
    num(in, "margin", p->req.margin);
    num(in, "usable_bytes", (double)p->usable_bytes);
    if (p->req.allow_long_seq) cJSON_AddBoolToObject(in, "allow_long_seq", true);
    if (gckpt_peft_on(&p->req.peft)) gckpt_plan_peft_json(p, in);
    gckpt_plan_moe_json(p, in);
    gckpt_plan_parallel_json(p, in);
    gckpt_plan_tp_json(p, in);
    gckpt_plan_cp_json(p, in);
    /* the TrainingArguments every entry shares (each entry has its own batch and checkpointing) */
    gckpt_plan_training_args_common(p, cJSON_AddObjectToObject(in, "training_arguments"));

    cJSON_AddStringToObject(root, "steady_state",
                            "figures are for step 2 onwards: optimizer states exist; with grad_accum > 1 "
                            "the micro-steps after the first run with all gradients allocated");
    cJSON *es = cJSON_AddArrayToObject(root, "entries");
    for (size_t i = 0; i < p->n; i++)
        cJSON_AddItemToArray(es, entry_json(p, i, timeline && (long)i == p->recommended));
    if (p->recommended >= 0) num(root, "recommended", (double)p->recommended);
    else cJSON_AddNullToObject(root, "recommended");
    double lo, hi;
    if (p->fastest >= 0 && gckpt_plan_ratio_band(p, &lo, &hi)) { /* why the recommended one */
        cJSON *rc = cJSON_AddObjectToObject(root, "recommendation");
        num(rc, "fastest", (double)p->fastest);
        cJSON *tied = cJSON_AddArrayToObject(rc, "tied");
        for (size_t i = 0; i < p->n; i++)
            if (gckpt_plan_tied(p, i)) cJSON_AddItemToArray(tied, cJSON_CreateNumber((double)i));
        cJSON *band = cJSON_AddArrayToObject(rc, "ratio_band");
        cJSON_AddItemToArray(band, cJSON_CreateNumber(lo));
        cJSON_AddItemToArray(band, cJSON_CreateNumber(hi));
        cJSON_AddStringToObject(rc, "rule",
                                p->recommended == p->fastest
                                    ? "the fastest entry that fits; it has the most memory headroom of the entries within "
                                      "the ratio band of it"
                                    : "within the ratio band of the fastest entry that fits (the planned order could be "
                                      "the wrong way round); of those, the most memory headroom");
    }
    if (p->smallest >= 0) num(root, "smallest", (double)p->smallest);
    else cJSON_AddNullToObject(root, "smallest");
    cJSON *ws = cJSON_AddArrayToObject(root, "warnings");
    for (size_t i = 0; i < p->n_warnings; i++) {
        cJSON *w = cJSON_CreateObject();
        cJSON_AddItemToArray(ws, w);
        cJSON_AddStringToObject(w, "code", p->warnings[i].code);
        cJSON_AddStringToObject(w, "message", p->warnings[i].message);
    }
    return root;
}
