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

/* offload_optimizer / offload_param: absent, null, device "none", or device "cpu" with
 * pin_memory true or absent (sets bit); NVMe and unpinned host memory are not modelled. */
static bool offload(const char *path, const cJSON *zero, const char *field, uint8_t bit, uint8_t *bits, gckpt_err *err)
{
    const cJSON *it = item(zero, field);
    if (!it || cJSON_IsNull(it)) return true;
    const cJSON *dev = item(it, "device"), *pin = item(it, "pin_memory");
    bool none = !dev || (cJSON_IsString(dev) && !strcmp(dev->valuestring, "none"));
    bool cpu = cJSON_IsString(dev) && !strcmp(dev->valuestring, "cpu");
    if (!cJSON_IsObject(it) || !(none || cpu)) {
        gckpt_seterr(err, "%s: field 'zero_optimization.%s.device' must be \"none\" or \"cpu\" (NVMe is not modelled)",
                     path, field);
        return false;
    }
    if (cpu && pin && !cJSON_IsTrue(pin)) {
        gckpt_seterr(err, "%s: field 'zero_optimization.%s.pin_memory' must be true or absent (unpinned host memory "
                          "is not modelled)", path, field);
        return false;
    }
    if (cpu) *bits |= bit;
    return true;
}

/* What DeepSpeed accepts with an offload (FINDINGS R-OFFLOAD-5): offload_param only under ZeRO-3
 * (stages 1 and 2 never read it), and offload_optimizer (every stage) with a DeepSpeed optimizer: the
 * Trainer hands its torch AdamW over when the config has no "optimizer" section, and
 * deepspeed.initialize then refuses it unless zero_force_ds_cpu_optimizer is false. */
static bool offload_ok(const char *path, const cJSON *root, const gckpt_ds_config *out, gckpt_err *err)
{
    if ((out->offload & GCKPT_OFFLOAD_PARAM) && out->mode != GCKPT_PAR_ZERO3) {
        gckpt_seterr(err, "%s: field 'zero_optimization.offload_param': ZeRO-3 only (stage 1 and 2 ignore it)", path);
        return false;
    }
    const cJSON *opt = item(root, "optimizer"), *force = item(root, "zero_force_ds_cpu_optimizer");
    if ((out->offload & GCKPT_OFFLOAD_OPTIMIZER) && !opt && !cJSON_IsFalse(force)) {
        gckpt_seterr(err, "%s: field 'optimizer' is missing: with offload_optimizer DeepSpeed refuses the Trainer's "
                          "torch AdamW (add \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\"}})", path);
        return false;
    }
    return true;
}

/* zero_optimization.overlap_comm: true / false, or absent / null / "auto" (DeepSpeed's default:
 * true under stage 3, false below, runtime/zero/config.py overlap_comm_valid). Read for stages 1
 * and 2 (a second ipg bucket); stage 3's was measured at its default. */
static bool overlap(const char *path, const cJSON *zero, gckpt_ds_config *out, gckpt_err *err)
{
    const cJSON *it = item(zero, "overlap_comm");
    if (!it || cJSON_IsNull(it) || (cJSON_IsString(it) && !strcmp(it->valuestring, "auto"))) return true;
    if (!cJSON_IsBool(it)) {
        gckpt_seterr(err, "%s: field 'zero_optimization.overlap_comm' must be true, false or \"auto\"", path);
        return false;
    }
    out->limits.overlap_comm = cJSON_IsTrue(it) && out->mode != GCKPT_PAR_ZERO3;
    return true;
}

/* Settings that change a rank's memory in ways not planned (read in deepspeed 0.19.8's
 * runtime/zero/config.py, offload_config.py and runtime/config.py): only their DeepSpeed
 * default is accepted; anything else is refused naming the field. */
typedef struct {
    const char *section, *field; /* the field in section (NULL: zero_optimization) */
    int want;                    /* accepted: absent, or this JSON boolean (0/1); -1 absent or 1
                                  * (a number); -2 absent or null */
    const char *what;
} ds_unplanned;

static bool unplanned_ok(const char *path, const cJSON *root, const cJSON *zero, gckpt_err *err)
{
    static const ds_unplanned rules[] = {
        {NULL, "zero_hpz_partition_size", -1, "ZeRO++'s hierarchical partitioning keeps a secondary copy"},
        {NULL, "zero_quantized_weights", 0, "ZeRO++'s quantized weights"},
        {NULL, "zero_quantized_nontrainable_weights", 0, "ZeRO++'s quantized weights"},
        {NULL, "zero_quantized_gradients", 0, "ZeRO++'s quantized gradients"},
        {NULL, "contiguous_gradients", 1, "the gradients' buffers were measured contiguous"},
        {NULL, "round_robin_gradients", 0, "the flat groups were measured in module order"},
        {NULL, "memory_efficient_linear", 1, "ZeRO-3's linear, which keeps a frozen weight's input, was measured"},
        {"data_types", "grad_accum_dtype", -2, "gradients accumulate in the model dtype here"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++) {
        const ds_unplanned *u = &rules[i];
        const cJSON *sec = u->section ? item(root, u->section) : zero, *it = cJSON_IsObject(sec) ? item(sec, u->field) : NULL;
        bool ok = !it || (u->want >= 0 && cJSON_IsBool(it) && cJSON_IsTrue(it) == (u->want == 1)) ||
                  (u->want == -1 && cJSON_IsNumber(it) && it->valuedouble == 1) || (u->want == -2 && cJSON_IsNull(it));
        if (ok) continue;
        gckpt_seterr(err, "%s: field '%s.%s' is not planned (%s); %s", path, u->section ? u->section : "zero_optimization",
                     u->field, u->what,
                     u->want == -1 ? "leave it absent or 1" : u->want == -2 ? "leave it absent" :
                     u->want ? "leave it absent or true" : "leave it absent or false");
        return false;
    }
    const cJSON *ratio = item(item(zero, "offload_optimizer"), "ratio");
    if (ratio && !(cJSON_IsNumber(ratio) && ratio->valuedouble == 1)) {
        gckpt_seterr(err, "%s: field 'zero_optimization.offload_optimizer.ratio' is not planned (partial offload); "
                          "leave it absent or 1", path);
        return false;
    }
    return true;
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
        !offload(path, zero, "offload_optimizer", GCKPT_OFFLOAD_OPTIMIZER, &out->offload, err) ||
        !offload(path, zero, "offload_param", GCKPT_OFFLOAD_PARAM, &out->offload, err) ||
        !offload_ok(path, root, out, err) || !overlap(path, zero, out, err) || !unplanned_ok(path, root, zero, err))
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
    cJSON *root = gckpt_json_read(path, 1u << 20, err);
    if (!root) return false;
    bool ok = read_root(path, root, out, err);
    cJSON_Delete(root);
    return ok;
}
