/* A device profile written as JSON (include/gckpt/formats/device_json.h): the inverse of
 * gckpt_device_parse (core/device.c) for the fields a profile must have. */
#include "gckpt/formats/device_json.h"

cJSON *gckpt_device_to_json(const gckpt_device *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schema", "gckpt.device/1");
    cJSON_AddStringToObject(o, "name", d->name);
    cJSON_AddStringToObject(o, "kind", gckpt_target_names[d->kind]);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)d->memory_bytes);
    cJSON *tf = cJSON_AddObjectToObject(o, "peak_tflops");
    cJSON_AddNumberToObject(tf, "fp32", d->tflops_fp32);
    cJSON_AddNumberToObject(tf, "tf32", d->tflops_tf32);
    cJSON_AddNumberToObject(tf, "bf16", d->tflops_bf16);
    cJSON_AddNumberToObject(tf, "fp16", d->tflops_fp16);
    cJSON_AddNumberToObject(o, "matmul_efficiency", d->matmul_efficiency);
    cJSON_AddNumberToObject(o, "hbm_bytes_per_s", d->hbm_bytes_per_s);
    cJSON_AddNumberToObject(o, "hbm_efficiency", d->hbm_efficiency);
    cJSON_AddNumberToObject(o, "h2d_bytes_per_s", d->h2d_bytes_per_s);
    cJSON_AddNumberToObject(o, "d2h_bytes_per_s", d->d2h_bytes_per_s);
    cJSON_AddNumberToObject(o, "context_bytes", (double)d->context_bytes);
    cJSON_AddNumberToObject(o, "workspace_bytes", (double)d->workspace_bytes);
    cJSON_AddNumberToObject(o, "alloc_round_bytes", (double)d->alloc_round_bytes);
    cJSON_AddNumberToObject(o, "segment_round_bytes", (double)d->segment_round_bytes);
    if (d->has_code_bases) {
        cJSON *cb = cJSON_AddObjectToObject(o, "code_bases");
        for (int k = 0; k < GCKPT_NCODEBASE; k++) {
            const gckpt_code_base_eff *e = &d->code_base[k];
            cJSON *x = cJSON_AddObjectToObject(cb, gckpt_code_base_names[k]);
            cJSON_AddNumberToObject(x, "matmul_factor", e->matmul_factor);
            cJSON_AddNumberToObject(x, "attention_factor", e->attention_factor);
            cJSON_AddNumberToObject(x, "attention_seq_half", e->attention_seq_half);
            cJSON_AddNumberToObject(x, "hbm_factor", e->hbm_factor);
            cJSON_AddNumberToObject(x, "op_overhead_s", e->op_overhead_s);
            cJSON_AddNumberToObject(x, "step_overhead_s", e->step_overhead_s);
            cJSON_AddNumberToObject(x, "step_ratio_p10", e->step_ratio_p10);
            cJSON_AddNumberToObject(x, "step_ratio_p90", e->step_ratio_p90);
            cJSON_AddNumberToObject(x, "ratio_p10", e->ratio_p10);
            cJSON_AddNumberToObject(x, "ratio_p90", e->ratio_p90);
        }
        cJSON *fit = d->code_base_fit[0] ? cJSON_Parse(d->code_base_fit) : NULL;
        if (fit) cJSON_AddItemToObject(cb, "fit", fit);
    }
    return o;
}
