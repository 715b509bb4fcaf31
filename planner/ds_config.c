/* gckpt-plan --deepspeed FILE (include/gckpt/planner/ds_config.h). */
#include "gckpt/planner/ds_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/util/jsonget.h"

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* zero_optimization.<field>: an integer >= lo or "auto" / absent (unset). */
static bool limit(const char *path, const cJSON *zero, const char *field, double lo, uint8_t bit, uint64_t *value,
                  gckpt_ds_limits *l, gckpt_err *err)
{
    const cJSON *it = item(zero, field);
    if (!it || (cJSON_IsString(it) && !strcmp(it->valuestring, "auto"))) return true;
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < lo || it->valuedouble > 1e18 ||
        it->valuedouble != floor(it->valuedouble)) {
        gckpt_seterr(err, "%s: field 'zero_optimization.%s' must be an integer >= %.0f or \"auto\"", path, field, lo);
        return false;
    }
    *value = (uint64_t)it->valuedouble;
    l->set |= bit;
    return true;
}

/* offload_optimizer / offload_param: absent, null or device "none" only. */
static bool no_offload(const char *path, const cJSON *zero, const char *field, gckpt_err *err)
{
    const cJSON *it = item(zero, field);
    if (!it || cJSON_IsNull(it)) return true;
    const cJSON *dev = item(it, "device");
    if (cJSON_IsObject(it) && (!dev || (cJSON_IsString(dev) && !strcmp(dev->valuestring, "none")))) return true;
    gckpt_seterr(err, "%s: field 'zero_optimization.%s': offload to CPU/NVMe is not modelled (device \"none\" only)",
                 path, field);
    return false;
}

static bool read_root(const char *path, const cJSON *root, gckpt_ds_config *out, gckpt_err *err)
{
    if (!cJSON_IsObject(root)) {
        gckpt_seterr(err, "%s: a DeepSpeed config must be a JSON object", path);
        return false;
    }
    const cJSON *zero = item(root, "zero_optimization");
    if (!cJSON_IsObject(zero)) {
        gckpt_seterr(err, "%s: missing field 'zero_optimization' (object with 'stage' 1, 2 or 3)", path);
        return false;
    }
    uint64_t stage;
    if (!gckpt_json_u64(zero, path, "zero_optimization.stage", 1, 3, &stage, err)) return false;
    out->mode = GCKPT_PAR_ZERO1 + (int)stage - 1;
    gckpt_ds_limits *l = &out->limits;
    if (!limit(path, zero, "reduce_bucket_size", 1, GCKPT_DS_REDUCE_BUCKET, &l->reduce_bucket, l, err) ||
        !limit(path, zero, "stage3_param_persistence_threshold", 0, GCKPT_DS_PERSISTENCE, &l->persistence_threshold, l,
               err) ||
        !limit(path, zero, "stage3_max_live_parameters", 0, GCKPT_DS_MAX_LIVE, &l->max_live, l, err) ||
        !limit(path, zero, "sub_group_size", 1, GCKPT_DS_SUB_GROUP, &l->sub_group, l, err) ||
        !no_offload(path, zero, "offload_optimizer", err) || !no_offload(path, zero, "offload_param", err))
        return false;
    const cJSON *fp16 = item(item(root, "fp16"), "enabled");
    if (cJSON_IsTrue(fp16)) {
        gckpt_seterr(err, "%s: field 'fp16.enabled': fp16 is not modelled per rank (bf16 or fp32)", path);
        return false;
    }
    const cJSON *bf16 = item(item(root, "bf16"), "enabled");
    out->bf16 = cJSON_IsTrue(bf16) ? 1 : cJSON_IsFalse(bf16) ? 0 : -1;
    if (bf16 && !cJSON_IsBool(bf16) && !(cJSON_IsString(bf16) && !strcmp(bf16->valuestring, "auto"))) {
        gckpt_seterr(err, "%s: field 'bf16.enabled' must be true, false or \"auto\"", path);
        return false;
    }
    return true;
}

bool gckpt_ds_config_read(const char *path, gckpt_ds_config *out, gckpt_err *err)
{
    memset(out, 0, sizeof *out);
    char *text = gckpt_read_file(path, 1u << 20, err);
    if (!text) return false;
    cJSON *root = gckpt_json_parse(path, text, err);
    free(text);
    if (!root) return false;
    bool ok = read_root(path, root, out, err);
    cJSON_Delete(root);
    return ok;
}
