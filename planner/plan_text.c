/* Human outputs: the aligned table and the recommendation with the lines to paste. */
#include "gckpt/planner/plan.h"

#include <string.h>

#include "gckpt/core/families.h"

static const char *gib(uint64_t b, char *buf, size_t n)
{
    snprintf(buf, n, "%.2f", (double)b / 1073741824.0);
    return buf;
}

static bool notable(const gckpt_plan *p, size_t i)
{
    const gckpt_entry *e = &p->entries[i];
    return e->pareto || (long)i == p->recommended || (long)i == p->smallest || e->every_n <= 1 ||
           e->every_n == 2 || e->every_n == 4;
}

void gckpt_plan_print_table(const gckpt_plan *p, FILE *f, bool all)
{
    char a[32], b[32], c[32], where[256], rg[48];
    double lo, hi;
    gckpt_result none = {0};
    bool ranged = gckpt_plan_step_range(p, &none, &lo, &hi); /* a column of step-time ranges */
    fprintf(f, "%-3s %-7s %-7s %4s %4s %5s %10s %11s %9s %8s%s%s %9s %5s %-4s  %s\n", "", "every_n",
            "offload", "mb", "ga", p->vlm ? "V+T" : "ckpt", "alloc GiB", "device GiB", "host GiB", "step s", ranged ? " " : "",
            ranged ? "    p10-p90 s" : "", "tok/s", "MFU", "fits", "peak at");
    size_t shown = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!all && !notable(p, i)) continue;
        const gckpt_entry *e = &p->entries[i];
        const gckpt_result *r = &e->r;
        char en[16];
        if (e->every_n) snprintf(en, sizeof en, "%u", e->every_n);
        else snprintf(en, sizeof en, "off");
        gckpt_peak_where(p, r, where, sizeof where);
        const char *mark = (long)i == p->recommended ? "=> " : e->pareto ? " * " : "   ";
        rg[0] = 0;
        if (ranged && gckpt_plan_step_range(p, r, &lo, &hi)) {
            char x[24];
            snprintf(x, sizeof x, "%.3f-%.3f", lo, hi);
            snprintf(rg, sizeof rg, " %13s", x);
        }
        char ck[32];
        if (p->vlm) gckpt_plan_vlm_checkpointed(p, e->every_n, ck, sizeof ck);
        else snprintf(ck, sizeof ck, "%llu", (unsigned long long)gckpt_checkpointed_count(e->every_n, p->model.layers));
        fprintf(f, "%-3s %-7s %-7s %4llu %4llu %5s %10s %11s %9s %8.3f%s %9.0f %5.2f %-4s  %s\n", mark,
                en, e->every_n ? (e->offload ? "on" : "off") : "-", (unsigned long long)e->micro_batch,
                (unsigned long long)e->grad_accum, ck,
                gib(r->peak_bytes, a, sizeof a), gib(r->device_peak_bytes, b, sizeof b),
                gib(r->host_pinned_bytes, c, sizeof c), r->step_s, rg, r->tokens_per_s, r->mfu,
                e->fits ? "yes" : "no", where);
        shown++;
    }
    if (!all && shown < p->n)
        fprintf(f, "(%zu of %zu entries shown: => recommended, * Pareto frontier of memory vs tokens/s; --table all shows every entry)\n",
                shown, p->n);
    if (ranged)
        fprintf(f, "(p10-p90 s: the step time x the p10 and p90 of published / predicted over the fit's held-out points)\n");
}

static const char *hf_optim(gckpt_optimizer o)
{
    switch (o) {
    case GCKPT_ADAMW_8BIT: return "adamw_bnb_8bit";
    case GCKPT_PAGED_ADAMW_8BIT: return "paged_adamw_8bit";
    case GCKPT_PAGED_ADAMW_32BIT: return "paged_adamw_32bit";
    case GCKPT_ADAMW_FOREACH: return "adamw_torch";
    default: return "adamw_torch_fused";
    }
}

const char *gckpt_plan_model_class(const gckpt_plan *p)
{
    return p->vlm ? "AutoModelForImageTextToText" : "AutoModelForCausalLM";
}

/* The dtype the weights must be loaded in, and why (transformers v5's from_pretrained
 * defaults to dtype="auto": the checkpoint's dtype, bf16 for most published models). */
static void print_model_line(const gckpt_plan *p, FILE *f)
{
    const char *attn = gckpt_plan_attn_impl(p);
    char ma[512];
    switch (p->req.precision) {
    case GCKPT_BF16:
        fprintf(f, "# pure bf16: weights, gradients and optimizer states in bf16\n");
        break;
    case GCKPT_FP32:
        fprintf(f, "# fp32 weights: transformers v5 would load the checkpoint's dtype (dtype=\"auto\")\n");
        break;
    default:
        fprintf(f, "# fp32 master weights under autocast: transformers v5 would load the checkpoint's dtype (dtype=\"auto\")\n");
        break;
    }
    const char *dtype = p->req.precision == GCKPT_BF16 ? "bfloat16" : "float32";
    if (p->req.tp) {
        gckpt_plan_tp_model_line(p, gckpt_plan_model_arg(p, ma, sizeof ma), attn, f);
        return;
    }
    if (p->model.mxfp4_checkpoint) { /* FINDINGS R-QUANT-17 */
        fprintf(f, "# the MXFP4 experts dequantized to that dtype: kept quantized they cannot be trained\n"
                   "model = AutoModelForCausalLM.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.%s,\n"
                   "                                             quantization_config=Mxfp4Config(dequantize=True))\n",
                gckpt_plan_model_arg(p, ma, sizeof ma), attn, dtype);
        return;
    }
    /* a VLM: the ForConditionalGeneration class AutoModelForImageTextToText maps its model_type to */
    fprintf(f, "model = %s.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.%s)\n", gckpt_plan_model_class(p),
            gckpt_plan_model_arg(p, ma, sizeof ma), attn, dtype);
    if (p->vlm && !p->images->tower_trained) {
        const gckpt_vlm_type *row = gckpt_vlm_type_of(p->vlm->model_type);
        const char *tower = row && row->tower_module ? row->tower_module : "vision_tower";
        fprintf(f, "model.model.%s.requires_grad_(False)  # --vision-tower frozen: the projector trains\n", tower);
        for (int k = 0; row && k < 2 && row->tower_trained_part[k]; k++)
            fprintf(f, "model.model.%s.%s.requires_grad_(True)  # (the projector)\n", tower, row->tower_trained_part[k]);
    }
}

const char *gckpt_plan_model_arg(const gckpt_plan *p, char *buf, size_t n)
{
    const gckpt_hub_source *h = &p->req.hub;
    if (!h->id[0]) snprintf(buf, n, "...");
    else if (!strcmp(h->revision, GCKPT_HUB_DEFAULT_REVISION)) snprintf(buf, n, "\"%s\"", h->id);
    else snprintf(buf, n, "\"%s\", revision=\"%s\"", h->id, h->revision);
    return buf;
}

void gckpt_plan_training_args_common(const gckpt_plan *p, cJSON *o)
{
    if (p->req.precision == GCKPT_AMP_BF16) cJSON_AddBoolToObject(o, "bf16", true);
    if (p->req.precision == GCKPT_AMP_FP16) cJSON_AddBoolToObject(o, "fp16", true);
    if (p->req.optimizer != GCKPT_SGD) cJSON_AddStringToObject(o, "optim", hf_optim(p->req.optimizer));
    gckpt_plan_parallel_args(p, o);
    gckpt_plan_tp_args(p, o);
    gckpt_plan_cp_args(p, o);
}

void gckpt_plan_training_args_entry(const gckpt_plan *p, const gckpt_entry *e, cJSON *o, int part)
{
    if (part != 2) {
        cJSON_AddNumberToObject(o, "per_device_train_batch_size", (double)e->micro_batch);
        cJSON_AddNumberToObject(o, "gradient_accumulation_steps", (double)e->grad_accum);
    }
    if (part == 1) return;
    /* per-layer code enables checkpointing on the model: the Trainer's would redo every_n
     * over both towers (FINDINGS R-VLM-71) */
    bool per_layer = gckpt_plan_vlm_per_layer(p, e);
    cJSON_AddBoolToObject(o, "gradient_checkpointing", e->every_n != 0 && !per_layer);
    if (e->every_n && !per_layer) {
        cJSON *k = cJSON_AddObjectToObject(o, "gradient_checkpointing_kwargs");
        cJSON_AddNumberToObject(k, "every_n_layers", e->every_n);
        cJSON_AddBoolToObject(k, "offload", e->offload);
    }
}

cJSON *gckpt_plan_training_args(const gckpt_plan *p, const gckpt_entry *e)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    gckpt_plan_training_args_entry(p, e, o, 1);
    gckpt_plan_training_args_common(p, o);
    gckpt_plan_training_args_entry(p, e, o, 2);
    return o;
}

/* A JSON value as a Python literal: on one line when it fits in 100 columns from col,
 * else a dict with one key per line, indented by 4 x depth. */
static size_t literal_width(const cJSON *v)
{
    if (cJSON_IsString(v)) return strlen(v->valuestring) + 2;
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? 4 : 5;
    if (cJSON_IsNumber(v)) {
        char b[32];
        return (size_t)snprintf(b, sizeof b, "%.17g", v->valuedouble);
    }
    size_t w = 2;
    for (const cJSON *c = v->child; c; c = c->next) w += strlen(c->string) + 4 + literal_width(c) + 2;
    return w;
}

static void print_literal(const cJSON *v, size_t col, int depth, FILE *f)
{
    if (cJSON_IsString(v)) {
        fputc('"', f);
        for (const char *c = v->valuestring; *c; c++) fprintf(f, "%s%c", *c == '"' || *c == '\\' ? "\\" : "", *c);
        fputc('"', f);
    } else if (cJSON_IsBool(v)) {
        fputs(cJSON_IsTrue(v) ? "True" : "False", f);
    } else if (cJSON_IsNumber(v)) {
        if (v->valuedouble == (double)(long long)v->valuedouble) fprintf(f, "%lld", (long long)v->valuedouble);
        else fprintf(f, "%.17g", v->valuedouble);
    } else if (cJSON_IsObject(v)) {
        bool one_line = col + literal_width(v) <= 100;
        fputc('{', f);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (one_line) fprintf(f, "%s\"%s\": ", c == v->child ? "" : ", ", c->string);
            else fprintf(f, "\n%*s\"%s\": ", 4 * (depth + 1), "", c->string);
            print_literal(c, one_line ? col : (size_t)(4 * (depth + 1)) + strlen(c->string) + 4, depth + 1, f);
            if (!one_line) fputc(',', f);
        }
        if (!one_line) fprintf(f, "\n%*s", 4 * depth, "");
        fputc('}', f);
    } else {
        fputs("None", f);
    }
}

/* The lines to paste: model, TrainingArguments, Trainer. Every line is what the plan
 * counts; tools/hf_probe/trainer_check.py runs them (with "..." filled in) on CPU. */
void gckpt_plan_print_snippet(const gckpt_plan *p, const gckpt_entry *e, FILE *f)
{
    bool peft = gckpt_peft_on(&p->req.peft), qlora = p->req.peft.method == GCKPT_METHOD_QLORA;
    fprintf(f, "\nimport torch\n");
    if (peft)
        fprintf(f, "from peft import LoraConfig, get_peft_model%s\n", qlora ? ", prepare_model_for_kbit_training" : "");
    if (p->req.layout.dp_replicate || p->req.tp || p->req.cp) /* TrainingArguments(parallelism_config=...): accelerate >= 1.12 with transformers 5 */
        fprintf(f, "from accelerate import ParallelismConfig\n");
    if (p->req.tp) fprintf(f, "from transformers.distributed import DistributedConfig\n");
    fprintf(f, "from transformers import %s, %s%sTrainer, TrainingArguments\n", gckpt_plan_model_class(p),
            qlora ? "BitsAndBytesConfig, " : "", p->model.mxfp4_checkpoint && !peft ? "Mxfp4Config, " : "");
    if (gckpt_plan_vlm_per_layer(p, e)) fprintf(f, "from transformers.modeling_layers import GradientCheckpointingLayer\n");
    fprintf(f, "\n");
    if (peft) {
        gckpt_plan_print_peft_model(p, f);
        gckpt_plan_parallel_peft_notes(p, f);
    } else
        print_model_line(p, f);
    gckpt_plan_vlm_per_layer_code(p, e, f);
    fprintf(f, "args = TrainingArguments(\n    ...,\n");
    cJSON *args = gckpt_plan_training_args(p, e);
    for (const cJSON *a = args ? args->child : NULL; a; a = a->next) {
        if (cJSON_IsObject(a) && !strcmp(a->string, "deepspeed"))
            fprintf(f, "    # the Trainer's \"auto\" DeepSpeed config (or the same as a ds_config.json file)\n");
        fprintf(f, "    %s=", a->string);
        if (cJSON_IsObject(a) && !strcmp(a->string, "parallelism_config")) { /* the object, not a dict */
            fprintf(f, "ParallelismConfig(");
            for (const cJSON *k = a->child; k; k = k->next)
                fprintf(f, "%s%s=%lld", k == a->child ? "" : ", ", k->string, (long long)k->valuedouble);
            fprintf(f, "),\n");
            continue;
        }
        print_literal(a, 4 + strlen(a->string) + 1, 1, f);
        fprintf(f, ",\n");
    }
    cJSON_Delete(args);
    fprintf(f, ")\n");
    gckpt_plan_cp_notes(p, f);
    if (p->req.optimizer == GCKPT_SGD)
        fprintf(f, "# SGD with momentum 0.9 (the planned momentum buffer): optim=\"sgd\" reads optim_args only since\n"
                   "# transformers PR #44203; an optimizer passed to the Trainer has momentum in every version\n"
                   "sgd = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)\n"
                   "trainer = Trainer(model=model, args=args, optimizers=(sgd, None), ...)\n");
    else
        fprintf(f, "trainer = Trainer(model=model, args=args, ...)\n");
    if (e->every_n && !gckpt_plan_vlm_per_layer(p, e))
        fprintf(f, "# transformers >= 5.24 also calls these activation_checkpointing(_kwargs); the\n"
                   "# gradient_checkpointing names keep working until v6\n"
                   "# or, without the Trainer (keyword arguments, not gradient_checkpointing_kwargs):\n"
                   "# model.gradient_checkpointing_enable(every_n_layers=%u, offload=%s)\n",
                e->every_n, e->offload ? "True" : "False");
    gckpt_plan_print_launch(p, f);
    gckpt_plan_tp_launch(p, f);
}

void gckpt_plan_print_header(const gckpt_plan *p, FILE *f)
{
    char a[32], b[32], peft[320];
    gckpt_plan_peft_header(p, peft, sizeof peft);
    fprintf(f, "%s (%llu parameters) on %s (%s kernels), seq %llu%s, %s, %s, %s attention%s%s%s\n", p->model.name,
            (unsigned long long)(p->vlm ? gckpt_plan_vlm_params(p) : p->req.tp ? gckpt_param_count(&p->tp_full)
                                 : gckpt_peft_on(&p->req.peft) ? gckpt_param_count(&p->model) : p->params->numel),
            p->dev.name, p->target == GCKPT_TARGET_CPU ? "PyTorch CPU" : "CUDA", (unsigned long long)p->req.seq,
            p->req.seq > p->model.max_positions ? " (beyond max_position_embeddings: --allow-long-seq)" : "",
            gckpt_precision_names[p->req.precision], gckpt_optimizer_names[p->req.optimizer],
            gckpt_attention_names[p->req.attention], peft, p->req.loss ? ", loss " : "",
            p->req.loss ? gckpt_loss_names[p->req.loss] : "");
    if (p->req.hub.id[0])
        fprintf(f, "config.json: Hugging Face Hub %s, revision %s, commit %s (%s %s)\n", p->req.hub.id,
                p->req.hub.revision, p->req.hub.commit, p->req.hub.downloaded ? "downloaded to" : "from the cache,",
                p->req.model_ref);
    gckpt_plan_parallel_header(p, f);
    gckpt_plan_tp_header(p, f);
    gckpt_plan_cp_header(p, f);
    gckpt_plan_groups_header(p, f);
    gckpt_plan_moe_header(p, f);
    gckpt_plan_vlm_header(p, f);
    fprintf(f, "budget %s GiB, usable %s GiB after the %.0f%% margin; steady state (step 2 onwards)\n",
            gib(p->budget_bytes, a, sizeof a), gib(p->usable_bytes, b, sizeof b), p->req.margin * 100);
    for (size_t i = 0; i < p->n_warnings; i++)
        fprintf(f, "warning [%s]: %s\n", p->warnings[i].code, p->warnings[i].message);
    fprintf(f, "\n");
}

static void print_breakdown(const gckpt_plan *p, const gckpt_result *r, FILE *f)
{
    char a[32], note[512];
    fprintf(f, "  Breakdown at the peak:");
    for (int k = 0; k < GCKPT_NCOMP; k++)
        if (r->breakdown[k]) fprintf(f, " %s %s", gckpt_component_names[k], gib((uint64_t)r->breakdown[k], a, sizeof a));
    fprintf(f, " (GiB)\n");
    gckpt_opt_fp32_note(p->params, p->req.optimizer, note, sizeof note);
    if (note[0]) fprintf(f, "  %s\n", note);
    if (p->params->paged_bytes)
        fprintf(f, "  paged_optimizer_states: %s GiB in CUDA managed memory, outside PyTorch's allocator\n"
                   "  (torch.cuda.max_memory_allocated shows the peak without them); counted in the device peak,\n"
                   "  which is the GPU's use unless memory runs short and the driver evicts them to the host\n",
                gib(p->params->paged_bytes, a, sizeof a));
}

static void print_setting(const gckpt_entry *e, FILE *f)
{
    if (e->every_n) fprintf(f, "every_n_layers=%u, offload=%s", e->every_n, e->offload ? "on" : "off");
    else fprintf(f, "no gradient checkpointing");
    fprintf(f, ", micro-batch %llu x grad-accum %llu", (unsigned long long)e->micro_batch,
            (unsigned long long)e->grad_accum);
}

/* Why the recommended entry and not the fastest: the ratio band tied them. */
static void print_tie(const gckpt_plan *p, FILE *f)
{
    double lo, hi;
    if (p->fastest < 0 || !gckpt_plan_ratio_band(p, &lo, &hi)) return;
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) n += gckpt_plan_tied(p, i) && (long)i != p->recommended;
    if (p->recommended == p->fastest) {
        if (n)
            fprintf(f, "  the fastest that fits; %zu other entr%s within its ratio band (%.3f-%.3f) %s less memory "
                       "headroom\n", n, n == 1 ? "y" : "ies", lo, hi, n == 1 ? "has" : "have");
        return;
    }
    const gckpt_entry *fa = &p->entries[p->fastest], *e = &p->entries[p->recommended];
    char a[32], b[32];
    fprintf(f, "  chosen over the fastest that fits (entry %ld: ", p->fastest);
    print_setting(fa, f);
    fprintf(f, ", %.0f tokens/s, %.1f%% faster as planned):\n", fa->r.tokens_per_s,
            100 * (fa->r.tokens_per_s / e->r.tokens_per_s - 1));
    fprintf(f, "  within the ratio band %.3f-%.3f of it (p10-p90 of measured / planned ratio of two settings'\n"
               "  tokens/s on one setup): the order could be the wrong way round; %s GiB headroom instead of %s GiB\n",
            lo, hi, gib(p->usable_bytes - e->r.device_peak_bytes, a, sizeof a),
            gib(p->usable_bytes - fa->r.device_peak_bytes, b, sizeof b));
}

void gckpt_plan_print_recommendation(const gckpt_plan *p, FILE *f)
{
    char a[32], b[32], where[256];
    if (p->recommended < 0) {
        const gckpt_entry *s = &p->entries[p->smallest];
        gckpt_peak_where(p, &s->r, where, sizeof where);
        char en[16];
        if (s->every_n) snprintf(en, sizeof en, "%u", s->every_n);
        else snprintf(en, sizeof en, "off");
        fprintf(f, "\nNothing fits. The smallest footprint is every_n_layers=%s, offload=%s, micro-batch %llu:\n",
                en, s->offload ? "on" : "off", (unsigned long long)s->micro_batch);
        fprintf(f, "  device peak %s GiB, %s GiB over the usable budget; peak at %s.\n",
                gib(s->r.device_peak_bytes, a, sizeof a),
                gib(s->r.device_peak_bytes - p->usable_bytes, b, sizeof b), where);
        print_breakdown(p, &s->r, f);
        return;
    }
    const gckpt_entry *e = &p->entries[p->recommended];
    gckpt_peak_where(p, &e->r, where, sizeof where);
    fprintf(f, "\nRecommended: ");
    if (e->every_n) fprintf(f, "every_n_layers=%u, offload=%s", e->every_n, e->offload ? "on" : "off");
    else fprintf(f, "no gradient checkpointing");
    fprintf(f, ", micro-batch %llu x grad-accum %llu\n", (unsigned long long)e->micro_batch,
            (unsigned long long)e->grad_accum);
    fprintf(f, "  device peak %s GiB (allocated %s GiB), peak at %s\n",
            gib(e->r.device_peak_bytes, a, sizeof a), gib(e->r.peak_bytes, b, sizeof b), where);
    double lo, hi;
    fprintf(f, "  step %.3f s", e->r.step_s);
    if (gckpt_plan_step_range(p, &e->r, &lo, &hi)) fprintf(f, " (p10-p90 %.3g-%.3g s)", lo, hi);
    fprintf(f, ", %.0f tokens/s, MFU %.2f", e->r.tokens_per_s, e->r.mfu);
    if (e->r.recompute_s > 0) fprintf(f, ", recompute %.3f s", e->r.recompute_s);
    if (e->r.copy_s > 0) fprintf(f, ", offload copies %.3f s, %s GiB pinned host", e->r.copy_s,
                                 gib(e->r.host_pinned_bytes, a, sizeof a));
    fprintf(f, "\n");
    print_tie(p, f);
    print_breakdown(p, &e->r, f);
    gckpt_plan_print_snippet(p, e, f);
}
