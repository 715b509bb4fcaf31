/* What a LoRA / QLoRA plan adds to the outputs: the lines that build the planned model
 * (FINDINGS R-QUANT-2: BitsAndBytesConfig with every field, since its defaults are fp4, no
 * double quantization and fp32 compute; prepare_model_for_kbit_training without its own
 * reentrant all-layer checkpointing; LoraConfig; get_peft_model), the method's words in
 * the header, and its inputs in the plan JSON. */
#include "gckpt/planner/plan.h"

#include <string.h>

static const char *torch_dtype(uint8_t dt)
{
    return dt == GCKPT_DT_BF16 ? "bfloat16" : dt == GCKPT_DT_F16 ? "float16" : dt == GCKPT_DT_F32 ? "float32" : "uint8";
}

/* A VLM's target_modules: the regex that keeps the adapters on the text model (a name list
 * or all-linear reaches the vision tower too: FINDINGS R-VLM-40) */
static void vlm_target_regex(const gckpt_plan *p, char *buf, size_t n)
{
    uint32_t on = gckpt_lora_family_targets(p->model.family) & p->req.peft.targets;
    size_t k = (size_t)snprintf(buf, n, "model\\.language_model.*\\.(");
    bool first = true;
    for (int t = 0; t < GCKPT_NLT && k < n; t++)
        if (on & (1u << t)) {
            k += (size_t)snprintf(buf + k, n - k, "%s%s", first ? "" : "|", gckpt_lora_target_bare((gckpt_lora_target)t));
            first = false;
        }
    if (k < n) snprintf(buf + k, n - k, ")");
}

/* "[\"q_proj\", \"v_proj\"]" or "\"all-linear\""; on a VLM r"<the regex>" */
static void targets_python(const gckpt_plan *p, char *buf, size_t n)
{
    char names[200];
    gckpt_lora_targets_name(p->req.peft.targets, p->model.family, names, sizeof names);
    if (p->vlm) {
        char re[200];
        vlm_target_regex(p, re, sizeof re);
        snprintf(buf, n, "r\"%s\"", re);
        return;
    }
    if (!strcmp(names, "all-linear")) {
        snprintf(buf, n, "\"all-linear\"");
        return;
    }
    size_t k = (size_t)snprintf(buf, n, "[");
    for (char *tok = names, *end; tok && *tok && k < n; tok = end ? end + 1 : NULL) {
        end = strchr(tok, ',');
        k += (size_t)snprintf(buf + k, n - k, "%s\"%.*s\"", k > 1 ? ", " : "", end ? (int)(end - tok) : (int)strlen(tok), tok);
    }
    if (k < n) snprintf(buf + k, n - k, "]");
}

void gckpt_plan_print_peft_model(const gckpt_plan *p, FILE *f)
{
    const gckpt_peft *pf = &p->req.peft;
    const char *attn = gckpt_plan_attn_impl(p);
    char ma[512];
    if (pf->method == GCKPT_METHOD_QLORA) {
        if (pf->quant == GCKPT_QUANT_INT8)
            fprintf(f, "bnb = BitsAndBytesConfig(load_in_8bit=True)\n");
        else
            fprintf(f, "# every field explicit: BitsAndBytesConfig's defaults are fp4, no double quantization, fp32 compute\n"
                       "bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"%s\", bnb_4bit_use_double_quant=%s,\n"
                       "                         bnb_4bit_compute_dtype=torch.%s, bnb_4bit_quant_storage=torch.%s)\n",
                    gckpt_quant_names[pf->quant], pf->double_quant ? "True" : "False", torch_dtype(pf->compute_dtype),
                    torch_dtype(pf->quant_storage));
        const char *cls = gckpt_plan_model_class(p);
        /* the continuation under from_pretrained's first argument, whatever the class */
        int indent = (int)(strlen("model = .from_pretrained(") + strlen(cls));
        fprintf(f, "model = %s.from_pretrained(%s, attn_implementation=\"%s\", quantization_config=bnb,\n"
                   "%*sdtype=torch.bfloat16)\n"
                   "# fp32 non-quantized parameters; not its own checkpointing (reentrant, every layer: FINDINGS R-PEFT-1)\n"
                   "model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)\n",
                cls, gckpt_plan_model_arg(p, ma, sizeof ma), attn, indent, "");
    } else if (p->req.tp) { /* peft wraps the tp_plan's sharded model (FINDINGS R-TP-12) */
        gckpt_plan_tp_model_line(p, gckpt_plan_model_arg(p, ma, sizeof ma), attn, f);
        fprintf(f, "# peft hooks each colwise layer's adapter: lora_B sharded like the layer, lora_A replicated\n"
                   "# (its gradient all-reduced by the Trainer); o_proj / down_proj adapters fail (FINDINGS R-TP-12, -13)\n");
    } else {
        fprintf(f, "model = %s.from_pretrained(%s, attn_implementation=\"%s\", dtype=torch.%s)\n",
                gckpt_plan_model_class(p), gckpt_plan_model_arg(p, ma, sizeof ma), attn, p->req.precision == GCKPT_BF16 ? "bfloat16" : "float32");
    }
    char targets[256], mts[160] = "";
    targets_python(p, targets, sizeof targets);
    if (pf->modules_to_save) {
        char names[64];
        gckpt_mts_name(pf->modules_to_save, p->model.family, names, sizeof names);
        char *comma = strchr(names, ',');
        if (comma) *comma = 0;
        snprintf(mts, sizeof mts, ", modules_to_save=[\"%s\"%s%s%s]", names, comma ? ", \"" : "", comma ? comma + 1 : "",
                 comma ? "\"" : "");
    }
    fprintf(f, "lora = LoraConfig(r=%u, lora_alpha=%g, lora_dropout=%g, target_modules=%s%s,\n"
               "                  bias=\"none\", task_type=\"CAUSAL_LM\")\n"
               "model = get_peft_model(model, lora)\n",
            pf->rank, pf->alpha, pf->dropout, targets, mts);
}

void gckpt_plan_peft_header(const gckpt_plan *p, char *buf, size_t n)
{
    const gckpt_peft *pf = &p->req.peft;
    if (n) buf[0] = 0;
    if (!gckpt_peft_on(pf)) return;
    char targets[160];
    gckpt_lora_targets_name(pf->targets, p->model.family, targets, sizeof targets);
    /* a VLM's adapters are on its text model only (the snippet's regex, FINDINGS R-VLM-40) */
    size_t k = (size_t)snprintf(buf, n, ", %s r %u alpha %g dropout %g %s%s, %llu trainable",
                                gckpt_method_names[pf->method], pf->rank, pf->alpha, pf->dropout, targets,
                                p->vlm ? " of the text model" : "",
                                (unsigned long long)p->params->trainable);
    if (pf->method == GCKPT_METHOD_QLORA && k < n)
        snprintf(buf + k, n - k, ", %s%s", gckpt_quant_names[pf->quant],
                 pf->quant != GCKPT_QUANT_INT8 && pf->double_quant ? " double-quant" : "");
}

void gckpt_plan_peft_json(const gckpt_plan *p, cJSON *inputs)
{
    const gckpt_peft *pf = &p->req.peft;
    cJSON_AddStringToObject(inputs, "method", gckpt_method_names[pf->method]);
    if (!gckpt_peft_on(pf)) return;
    cJSON *l = cJSON_AddObjectToObject(inputs, "lora");
    char names[200];
    cJSON_AddNumberToObject(l, "rank", pf->rank);
    cJSON_AddNumberToObject(l, "alpha", pf->alpha);
    cJSON_AddNumberToObject(l, "dropout", pf->dropout);
    gckpt_lora_targets_name(pf->targets, p->model.family, names, sizeof names);
    cJSON_AddStringToObject(l, "targets", names);
    if (p->vlm) { /* what LoraConfig gets: the text model's linears only */
        vlm_target_regex(p, names, sizeof names);
        cJSON_AddStringToObject(l, "target_modules", names);
    }
    gckpt_mts_name(pf->modules_to_save, p->model.family, names, sizeof names);
    cJSON_AddStringToObject(l, "modules_to_save", names);
    if (pf->method != GCKPT_METHOD_QLORA) return;
    cJSON *q = cJSON_AddObjectToObject(inputs, "quant");
    cJSON_AddStringToObject(q, "type", gckpt_quant_names[pf->quant]);
    if (pf->quant == GCKPT_QUANT_INT8) return;
    cJSON_AddBoolToObject(q, "double_quant", pf->double_quant);
    cJSON_AddStringToObject(q, "compute_dtype", gckpt_dtype_names[pf->compute_dtype]);
    cJSON_AddStringToObject(q, "storage", gckpt_dtype_names[pf->quant_storage]);
}
