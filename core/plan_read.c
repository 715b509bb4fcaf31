/* Reading a plan (schema gckpt.plan/2) back with every field checked. Every message is
 * "<file>: field '<path>' ..." so a user can find what to fix. */
#include "gckpt/core/plan_read.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/families.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/tp.h"
#include "gckpt/core/vision.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/safe_text.h"

/* Byte counts are written as JSON numbers: exact up to 2^53. */
#define MAXB ((uint64_t)1 << 53)

/* The file being read and where its error goes. */
typedef struct {
    const char *f;
    gckpt_err *err;
} plan_reader;


static bool fail(plan_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(plan_reader *r, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gckpt_seterr(r->err, "%s: %s", r->f, msg);
    return false;
}

static const cJSON *child(const cJSON *o, const char *path)
{
    const char *d = strrchr(path, '.');
    return cJSON_GetObjectItemCaseSensitive(o, d ? d + 1 : path);
}

static const cJSON *obj(plan_reader *r, const cJSON *o, const char *path)
{
    const cJSON *it = child(o, path);
    if (!cJSON_IsObject(it)) {
        fail(r, it ? "field '%s' must be an object, got %s" : "missing field '%s' (object)", path, gckpt_json_type_name(it));
        return NULL;
    }
    return it;
}

static const cJSON *arr(plan_reader *r, const cJSON *o, const char *path)
{
    const cJSON *it = child(o, path);
    if (!cJSON_IsArray(it)) {
        fail(r, it ? "field '%s' must be an array, got %s" : "missing field '%s' (array)", path, gckpt_json_type_name(it));
        return NULL;
    }
    return it;
}

static bool u64(plan_reader *r, const cJSON *o, const char *path, uint64_t lo, uint64_t hi, uint64_t *out)
{
    return gckpt_json_u64(o, r->f, path, lo, hi, out, r->err);
}

/* An integer element of an array (or any item) in [lo, hi]. */
static bool item_u64(plan_reader *r, const cJSON *it, const char *path, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble != floor(it->valuedouble))
        return fail(r, "field '%s' must be an integer, got %s", path, gckpt_json_type_name(it));
    if (it->valuedouble < (double)lo || it->valuedouble > (double)hi)
        return fail(r, "field '%s' = %.0f is out of range [%llu, %llu]", path, it->valuedouble,
                    (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint64_t)it->valuedouble;
    return true;
}

static bool num(plan_reader *r, const cJSON *o, const char *path, double lo, double hi, double *out)
{
    return gckpt_json_num(o, r->f, path, lo, hi, out, r->err);
}

static bool boolean(plan_reader *r, const cJSON *o, const char *path, bool *out)
{
    const cJSON *it = child(o, path);
    if (!cJSON_IsBool(it))
        return fail(r, it ? "field '%s' must be true or false, got %s" : "missing field '%s' (boolean)", path,
                    gckpt_json_type_name(it));
    *out = cJSON_IsTrue(it);
    return true;
}

static bool str(plan_reader *r, const cJSON *o, const char *path, char *out, size_t n)
{
    return gckpt_json_str(o, r->f, path, out, n, r->err);
}

/* A string naming one of names[0..n); index in *out. */
static bool choice(plan_reader *r, const cJSON *o, const char *path, const char *const *names, int n, int *out)
{
    char s[64];
    if (!str(r, o, path, s, sizeof s)) return false;
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return true;
        }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return fail(r, "field '%s' = \"%s\" is not one of: %s", path, s, list);
}

/* Integer or null: null -> *out = 0, *is_null = true. */
static bool u64_or_null(plan_reader *r, const cJSON *o, const char *path, uint64_t lo, uint64_t hi, uint64_t *out,
                        bool *is_null)
{
    const cJSON *it = child(o, path);
    if (!it) return fail(r, "missing field '%s' (integer or null)", path);
    *is_null = cJSON_IsNull(it);
    *out = 0;
    if (*is_null) return true;
    return item_u64(r, it, path, lo, hi, out);
}

/* ---- inputs ------------------------------------------------------------------------- */

/* The GradientCheckpointingLayers every_n_layers counts: a VLM's both towers, or the one
 * inputs.vision.checkpoint_towers names (core/towers.h). */
static uint64_t ckpt_layers(const gckpt_plan_file *pf)
{
    return pf->vlm ? gckpt_towers_counted(pf->ckpt_towers, pf->towers) : pf->model.layers;
}

/* The first number in o (depth first) that is not finite (1e999 parses as infinity), or
 * NULL. The embedded config and profile are printed back to text for their own readers,
 * and cJSON prints a non-finite number as null, which those readers take as "absent" for
 * an optional field: the plan's value would be replaced by a default instead of refused.
 * Depth is bounded by cJSON's nesting limit. */
static const cJSON *nonfinite(const cJSON *o)
{
    if (cJSON_IsNumber(o)) return isfinite(o->valuedouble) ? NULL : o;
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next) {
        const cJSON *bad = nonfinite(c);
        if (bad) return bad;
    }
    return NULL;
}

static bool all_finite(plan_reader *r, const cJSON *o, const char *path)
{
    const cJSON *bad = nonfinite(o);
    if (!bad) return true;
    if (bad->string) return fail(r, "field '%s' holds a number beyond the range of a double (key '%s')", path, bad->string);
    return fail(r, "field '%s' holds a number beyond the range of a double (in an array)", path);
}

static bool eq_u64(plan_reader *r, const cJSON *m, const char *path, uint64_t want, const char *what)
{
    uint64_t v;
    if (!u64(r, m, path, 0, MAXB, &v)) return false;
    if (v != want)
        return fail(r, "field '%s' = %llu contradicts %s (%llu)", path, (unsigned long long)v, what,
                    (unsigned long long)want);
    return true;
}

/* inputs.model.hub (absent: a shipped name or a path): the Hub id, revision and commit
 * the config came from. */
static bool read_hub(plan_reader *r, const cJSON *m, gckpt_plan_file *pf)
{
    gckpt_hub_source *h = &pf->hub;
    memset(h, 0, sizeof *h);
    if (!child(m, "inputs.model.hub")) return true;
    const cJSON *o = obj(r, m, "inputs.model.hub");
    char commit[64];
    if (!o || !str(r, o, "inputs.model.hub.id", h->id, sizeof h->id) ||
        !str(r, o, "inputs.model.hub.revision", h->revision, sizeof h->revision) ||
        !str(r, o, "inputs.model.hub.commit", commit, sizeof commit))
        return false;
    if (!gckpt_hub_is_id(h->id)) return fail(r, "field 'inputs.model.hub.id' = \"%s\" is not a Hub model id (ORG/NAME)", h->id);
    if (!gckpt_hub_revision_ok(h->revision))
        return fail(r, "field 'inputs.model.hub.revision' = \"%s\" is not a branch, tag or commit name", h->revision);
    if (!gckpt_hub_is_commit(commit))
        return fail(r, "field 'inputs.model.hub.commit' = \"%s\" is not a commit sha (40 lowercase hex digits)", commit);
    memcpy(h->commit, commit, sizeof h->commit); /* 40 digits and the NUL */
    return true;
}

/* inputs.vision (planner/plan_vlm.c): the VLM it names and the images each sample carries. */
static bool read_vision(plan_reader *r, const cJSON *in, const gckpt_vlm *v, gckpt_plan_file *pf)
{
    const cJSON *o = obj(r, in, "inputs.vision");
    char type[32];
    int tower;
    uint64_t x;
    static const char *const towers[] = {"trained", "frozen"};
    if (!o || !str(r, o, "inputs.vision.model_type", type, sizeof type) ||
        !u64(r, o, "inputs.vision.images", 1, 1u << 16, &pf->vlm_images) ||
        !u64(r, o, "inputs.vision.tiles_per_image", 1, 1u << 16, &pf->vlm_tiles) ||
        !u64(r, o, "inputs.vision.tokens_per_image", 1, 1u << 24, &pf->vlm_tokens) ||
        !u64(r, o, "inputs.vision.vision_layers", 0, GCKPT_MAX_LAYERS, &x) ||
        !choice(r, o, "inputs.vision.vision_tower", towers, 2, &tower))
        return false;
    pf->vlm_tower_trained = tower == 0;
    /* which towers every_n covers (absent: all, the plans written before the option) */
    if (child(o, "inputs.vision.checkpoint_towers")) {
        if (!choice(r, o, "inputs.vision.checkpoint_towers", gckpt_ckpt_towers_names, GCKPT_NCKPT_TOWERS, &tower))
            return false;
        pf->ckpt_towers = (uint8_t)tower;
    }
    if (strcmp(type, v->model_type))
        return fail(r, "field 'inputs.vision.model_type' = \"%s\" contradicts inputs.model.config (\"%s\")", type,
                    v->model_type);
    const cJSON *sz = arr(r, o, "inputs.vision.image_size");
    if (!sz) return false;
    if (cJSON_GetArraySize(sz) != 2) return fail(r, "field 'inputs.vision.image_size' must hold 2 sizes (height, width)");
    for (int i = 0; i < 2; i++) {
        char p[48];
        snprintf(p, sizeof p, "inputs.vision.image_size[%d]", i);
        if (!item_u64(r, cJSON_GetArrayItem(sz, i), p, 1, 1u << 20, i ? &pf->vlm_w : &pf->vlm_h)) return false;
    }
    /* the tiles and tokens follow the image size (planner/plan_vlm.c; LLaVA-NeXT's packed rows
     * too, which gckpt-run lays out from it) */
    uint64_t tiles = gckpt_image_tiles(v, pf->vlm_h, pf->vlm_w), tokens = 0;
    gckpt_err e = {{0}};
    if (!gckpt_image_tokens(v, "inputs.vision.image_size", pf->vlm_h, pf->vlm_w, &tokens, &e))
        return fail(r, "%s", e.msg);
    if (tiles != pf->vlm_tiles || tokens != pf->vlm_tokens)
        return fail(r, "fields 'inputs.vision.tiles_per_image' = %llu and 'tokens_per_image' = %llu contradict "
                       "'inputs.vision.image_size' (%llux%llu: %llu tiles, %llu tokens)",
                    (unsigned long long)pf->vlm_tiles, (unsigned long long)pf->vlm_tokens,
                    (unsigned long long)pf->vlm_h, (unsigned long long)pf->vlm_w, (unsigned long long)tiles,
                    (unsigned long long)tokens);
    return true;
}

static bool read_model(plan_reader *r, const cJSON *in, gckpt_plan_file *pf)
{
    const cJSON *m = obj(r, in, "inputs.model");
    if (!m) return false;
    const cJSON *cfg = obj(r, m, "inputs.model.config");
    if (!cfg || !all_finite(r, cfg, "inputs.model.config")) return false;
    pf->config_text = cJSON_Print(cfg);
    if (!pf->config_text) return fail(r, "out of memory printing 'inputs.model.config'");
    char label[600];
    snprintf(label, sizeof label, "%s: inputs.model.config", r->f);
    /* a VLM's plan (inputs.vision): the config is the VLM's, inputs.model its text model and
     * the parameters of both towers and the projector (planner/plan_vlm.c) */
    uint64_t params;
    if ((pf->vlm = child(in, "inputs.vision") != NULL)) {
        gckpt_vlm *v = malloc(sizeof *v);
        if (!v) return fail(r, "out of memory");
        bool ok = gckpt_vlm_parse(label, pf->config_text, v, r->err);
        if (ok) {
            pf->model = v->text;
            gckpt_vlm_towers(v, pf->towers);
            params = gckpt_param_count(&v->text) + gckpt_vision_tower_params(v).params +
                     gckpt_vision_projector_params(v).params + gckpt_vlm_text_extra(v).params;
            ok = read_vision(r, in, v, pf);
        }
        free(v);
        if (!ok) return false;
    } else {
        if (!gckpt_model_parse(label, pf->config_text, &pf->model, r->err)) return false;
        params = gckpt_param_count(&pf->model);
    }
    char name[128], type[32];
    if (!str(r, m, "inputs.model.name", name, sizeof name) ||
        !str(r, m, "inputs.model.model_type", type, sizeof type))
        return false;
    if (!*name) return fail(r, "field 'inputs.model.name' is empty");
    if (strcmp(type, pf->model.model_type))
        return fail(r, "field 'inputs.model.model_type' = \"%s\" contradicts inputs.model.config (\"%s\")", type,
                    pf->model.model_type);
    snprintf(pf->model.name, sizeof pf->model.name, "%s", name);
    gckpt_text_sanitize(pf->model.name); /* shown on terminals and in tables */
    const gckpt_model *md = &pf->model;
    const char *cf = "inputs.model.config";
    bool tied;
    if (!eq_u64(r, m, "inputs.model.layers", md->layers, cf) ||
        !eq_u64(r, m, "inputs.model.hidden", md->hidden, cf) ||
        !eq_u64(r, m, "inputs.model.heads", md->heads, cf) ||
        !eq_u64(r, m, "inputs.model.kv_heads", md->kv_heads, cf) ||
        !eq_u64(r, m, "inputs.model.head_dim", md->head_dim, cf) ||
        !eq_u64(r, m, "inputs.model.intermediate", md->intermediate, cf) ||
        !eq_u64(r, m, "inputs.model.vocab", md->vocab, cf) ||
        !eq_u64(r, m, "inputs.model.parameters", params, "the parameter count of inputs.model.config") ||
        !boolean(r, m, "inputs.model.tied_embeddings", &tied))
        return false;
    if (tied != md->tied)
        return fail(r, "field 'inputs.model.tied_embeddings' = %s contradicts inputs.model.config", tied ? "true" : "false");
    return read_hub(r, m, pf);
}

static bool read_device(plan_reader *r, const cJSON *in, gckpt_plan_file *pf)
{
    const cJSON *d = obj(r, in, "inputs.device");
    if (!d || !all_finite(r, d, "inputs.device")) return false;
    char *text = cJSON_Print(d);
    if (!text) return fail(r, "out of memory printing 'inputs.device'");
    char label[600];
    snprintf(label, sizeof label, "%s: inputs.device", r->f);
    bool ok = gckpt_device_parse(label, text, &pf->dev, r->err);
    free(text);
    return ok;
}

/* Optional "warnings": [{code, message}] (GCKPT_MAX_WARNINGS at most). */
static bool read_warnings(plan_reader *r, const cJSON *root, gckpt_plan_file *pf)
{
    pf->n_warnings = 0;
    if (!child(root, "warnings")) return true;
    const cJSON *ws = arr(r, root, "warnings");
    if (!ws) return false;
    if (cJSON_GetArraySize(ws) > GCKPT_MAX_WARNINGS)
        return fail(r, "field 'warnings' holds more than %d warnings", GCKPT_MAX_WARNINGS);
    const cJSON *w;
    cJSON_ArrayForEach(w, ws) {
        char p[64];
        gckpt_warning *x = &pf->warnings[pf->n_warnings];
        snprintf(p, sizeof p, "warnings[%zu]", pf->n_warnings);
        if (!cJSON_IsObject(w)) return fail(r, "field '%s' must be an object, got %s", p, gckpt_json_type_name(w));
        snprintf(p, sizeof p, "warnings[%zu].code", pf->n_warnings);
        if (!str(r, w, p, x->code, sizeof x->code)) return false;
        snprintf(p, sizeof p, "warnings[%zu].message", pf->n_warnings);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(w, "message");
        if (!m) return fail(r, "missing field '%s' (string)", p);
        if (!cJSON_IsString(m) || !m->valuestring)
            return fail(r, "field '%s' must be a string, got %s", p, gckpt_json_type_name(m));
        /* as long as the planner wrote it (the file's size bounds it) */
        if (!(x->message = strdup(m->valuestring))) return fail(r, "out of memory");
        pf->n_warnings++;
    }
    return true;
}

/* inputs.layout (issue 14; absent: one GPU): the ranks and the mode, and for ZeRO the
 * DeepSpeed limits the plan was made with ("auto" already resolved: read back as set). */
static bool read_layout(plan_reader *r, const cJSON *in, gckpt_plan_file *pf)
{
    memset(&pf->layout, 0, sizeof pf->layout);
    if (!child(in, "inputs.layout")) return true;
    const cJSON *l = obj(r, in, "inputs.layout");
    int mode;
    uint64_t world, gpus, nodes;
    if (!l || !choice(r, l, "inputs.layout.parallel", gckpt_parallel_names, GCKPT_NPAR, &mode) ||
        !u64(r, l, "inputs.layout.world_size", 1, GCKPT_MAX_RANKS, &world) ||
        !u64(r, l, "inputs.layout.gpus", 1, GCKPT_MAX_RANKS, &gpus) ||
        !u64(r, l, "inputs.layout.nodes", 1, GCKPT_MAX_RANKS, &nodes))
        return false;
    if (gpus * nodes != world)
        return fail(r, "field 'inputs.layout.world_size': %llu is not gpus x nodes (%llu x %llu)",
                    (unsigned long long)world, (unsigned long long)gpus, (unsigned long long)nodes);
    if (!gckpt_par_mode_of((unsigned)mode)->multi != (world == 1))
        return fail(r, "field 'inputs.layout.parallel': \"%s\" with %llu GPUs", gckpt_parallel_names[mode],
                    (unsigned long long)world);
    pf->layout = (gckpt_layout){.gpus = (uint32_t)gpus, .nodes = (uint32_t)nodes, .mode = (uint8_t)mode};
    /* the collectives' bus bandwidth the plan timed them with: inputs.device (a profile without
     * the optional bus fields) does not carry it */
    double bus = 0;
    if (world > 1 && !gckpt_json_num_opt(l, r->f, "inputs.layout.bus_bytes_per_s", 1e6, 1e15, 0, &bus, r->err)) return false;
    if (bus > 0 && nodes > 1) pf->dev.inter_node_bus_bytes_per_s = bus;
    else if (bus > 0) pf->dev.intra_node_bus_bytes_per_s = bus;
    /* HSDP: accelerate's ParallelismConfig(dp_replicate_size, dp_shard_size) (FINDINGS R-DIST-27) */
    uint64_t rep = 0;
    if (!gckpt_json_u64_opt(l, r->f, "inputs.layout.dp_replicate", 1, world, 0, &rep, r->err)) return false;
    if (rep && (world % rep || world / rep < 2 || !gckpt_par_mode_of((unsigned)mode)->replicate_dim))
        return fail(r, "field 'inputs.layout.dp_replicate': %llu with %llu GPUs under \"%s\" (needs FSDP2 and a "
                       "dp_shard of at least 2 that divides the world)", (unsigned long long)rep,
                    (unsigned long long)world, gckpt_parallel_names[mode]);
    pf->layout.dp_replicate = (uint32_t)rep;
    if (child(l, "inputs.layout.offload")) { /* planned from the source only (FINDINGS R-OFFLOAD-5) */
        const cJSON *o = obj(r, l, "inputs.layout.offload");
        bool opt = false, par = false;
        if (!o || !boolean(r, o, "inputs.layout.offload.optimizer", &opt) || !boolean(r, o, "inputs.layout.offload.param", &par))
            return false;
        if (!opt && !par) return fail(r, "field 'inputs.layout.offload': neither optimizer nor param is true");
        pf->layout.offload = (uint8_t)((opt ? GCKPT_OFFLOAD_OPTIMIZER : 0) | (par ? GCKPT_OFFLOAD_PARAM : 0));
    }
    if (!gckpt_par_mode_of((unsigned)mode)->deepspeed) return true;
    const cJSON *ds = obj(r, l, "inputs.layout.deepspeed");
    gckpt_ds_limits *d = &pf->layout.ds;
    if (!ds || !u64(r, ds, "inputs.layout.deepspeed.reduce_bucket_size", 1, UINT64_MAX >> 12, &d->reduce_bucket) ||
        !u64(r, ds, "inputs.layout.deepspeed.stage3_param_persistence_threshold", 0, UINT64_MAX >> 12,
             &d->persistence_threshold) ||
        !u64(r, ds, "inputs.layout.deepspeed.stage3_max_live_parameters", 0, UINT64_MAX >> 12, &d->max_live) ||
        !u64(r, ds, "inputs.layout.deepspeed.sub_group_size", 1, UINT64_MAX >> 12, &d->sub_group) ||
        (child(ds, "inputs.layout.deepspeed.overlap_comm") &&
         !boolean(r, ds, "inputs.layout.deepspeed.overlap_comm", &d->overlap_comm)))
        return false;
    d->set = GCKPT_DS_REDUCE_BUCKET | GCKPT_DS_PERSISTENCE | GCKPT_DS_MAX_LIVE | GCKPT_DS_SUB_GROUP;
    return true;
}

/* inputs.method, inputs.lora and inputs.quant (issue 12; absent: full fine-tuning) */
static bool read_peft(plan_reader *r, const cJSON *in, gckpt_plan_file *pf)
{
    int method = GCKPT_METHOD_FULL;
    if (child(in, "inputs.method") && !choice(r, in, "inputs.method", gckpt_method_names, GCKPT_NMETHOD, &method))
        return false;
    gckpt_peft *p = &pf->peft;
    gckpt_peft_default((gckpt_method)method, p);
    if (method == GCKPT_METHOD_FULL) return true;
    const cJSON *l = obj(r, in, "inputs.lora");
    uint64_t rank;
    char targets[200], mts[64], bad[64];
    if (!l || !u64(r, l, "inputs.lora.rank", 1, 65536, &rank) || !num(r, l, "inputs.lora.alpha", 1e-9, 1e6, &p->alpha) ||
        !num(r, l, "inputs.lora.dropout", 0, 0.999999, &p->dropout) ||
        !str(r, l, "inputs.lora.targets", targets, sizeof targets) ||
        !str(r, l, "inputs.lora.modules_to_save", mts, sizeof mts))
        return false;
    p->rank = (uint32_t)rank;
    if (!gckpt_lora_targets_parse(targets, &p->targets, bad, sizeof bad))
        return fail(r, "field 'inputs.lora.targets': '%s' is not a linear module", bad);
    if (!gckpt_mts_parse(mts, &p->modules_to_save, bad, sizeof bad))
        return fail(r, "field 'inputs.lora.modules_to_save': '%s' is not lm_head, embed_tokens or wte", bad);
    if (method != GCKPT_METHOD_QLORA) return true;
    const cJSON *q = obj(r, in, "inputs.quant");
    int type, cdt = GCKPT_DT_BF16, st = GCKPT_DT_U8;
    if (!q || !choice(r, q, "inputs.quant.type", gckpt_quant_names, GCKPT_NQUANT, &type)) return false;
    if (type == GCKPT_QUANT_NONE) return fail(r, "field 'inputs.quant.type' is \"none\" with method qlora");
    p->quant = (uint8_t)type;
    if (type == GCKPT_QUANT_INT8) return true;
    bool dq = true;
    if ((child(q, "inputs.quant.double_quant") && !boolean(r, q, "inputs.quant.double_quant", &dq)) ||
        (child(q, "inputs.quant.compute_dtype") &&
         !choice(r, q, "inputs.quant.compute_dtype", gckpt_dtype_names, GCKPT_NDT, &cdt)) ||
        (child(q, "inputs.quant.storage") && !choice(r, q, "inputs.quant.storage", gckpt_dtype_names, GCKPT_NDT, &st)))
        return false;
    if (!gckpt_dtype_is_float((gckpt_dtype)cdt)) return fail(r, "field 'inputs.quant.compute_dtype' is not bf16, fp16 or fp32");
    p->double_quant = dq;
    p->compute_dtype = (uint8_t)cdt;
    p->quant_storage = (uint8_t)st;
    return true;
}

/* inputs.tensor_parallel (gckpt-plan --tp, FINDINGS R-TP; absent: none): its size in the layout's
 * tp (inputs.model is the whole model; each rank executes its local model), over fsdp_size x
 * dp_replicate_size copies of it (TP x FSDP, TP with replicas: planned, not executed). */
static bool read_tp(plan_reader *r, const cJSON *in, gckpt_plan_file *pf)
{
    if (!child(in, "inputs.tensor_parallel")) return true;
    const cJSON *t = obj(r, in, "inputs.tensor_parallel");
    uint64_t tp, world;
    if (!t || !u64(r, t, "inputs.tensor_parallel.tp_size", 2, GCKPT_MAX_RANKS, &tp) ||
        !u64(r, t, "inputs.tensor_parallel.world_size", 2, GCKPT_MAX_RANKS, &world))
        return false;
    uint64_t rep = 0, fsdp = 0;
    if (!gckpt_json_u64_opt(t, r->f, "inputs.tensor_parallel.dp_replicate_size", 1, GCKPT_MAX_RANKS, 0, &rep, r->err) ||
        !gckpt_json_u64_opt(t, r->f, "inputs.tensor_parallel.fsdp_size", 1, GCKPT_MAX_RANKS, 0, &fsdp, r->err))
        return false;
    pf->tp_replicate = (uint32_t)rep;
    pf->tp_fsdp = (uint32_t)fsdp;
    if (!rep && !fsdp && world != tp)
        return fail(r, "field 'inputs.tensor_parallel.world_size': %llu is not tp_size %llu", (unsigned long long)world,
                    (unsigned long long)tp);
    if (world != tp * (rep ? rep : 1) * (fsdp ? fsdp : 1))
        return fail(r, "field 'inputs.tensor_parallel.world_size': %llu is not tp_size x fsdp_size x dp_replicate_size "
                       "(%llu x %llu x %llu)", (unsigned long long)world, (unsigned long long)tp,
                    (unsigned long long)(fsdp ? fsdp : 1), (unsigned long long)(rep ? rep : 1));
    if (child(in, "inputs.layout"))
        return fail(r, "field 'inputs.layout': tensor parallelism with a parallel mode (gckpt-plan plans neither)");
    gckpt_err why = {{0}};
    if (!gckpt_tp_model_ok(&pf->model, (uint32_t)tp, &why)) return fail(r, "field 'inputs.tensor_parallel.tp_size': %s", why.msg);
    pf->layout.tp = (uint32_t)tp;
    return true;
}

/* LoRA under TP: executed where gckpt-plan plans it (TP alone, colwise targets; executor/interp_tp_lora.c),
 * refused with the planner's line elsewhere (QLoRA, rowwise targets, TP x FSDP / DDP). */
static bool tp_peft_executed(const gckpt_plan_file *pf, gckpt_err *err)
{
    gckpt_err why = {{0}};
    if (gckpt_tp_peft_ok(&pf->peft, &pf->model, pf->layout.tp, pf->tp_fsdp > 1 ? pf->tp_fsdp : 0,
                         pf->tp_replicate > 1 ? pf->tp_replicate : 0, &why))
        return true;
    gckpt_seterr(err, "%s: field 'inputs.method': %s; not executed by gckpt-run", pf->file, why.msg);
    return false;
}

/* inputs.context_parallel (gckpt-plan --cp, planner/plan_cp.c; absent: none): cp_size x
 * dp_shard_size x dp_replicate_size (absent: 1; the layout's HSDP replicas, R-CP-17) ranks of the layout. */
static bool read_cp(plan_reader *r, const cJSON *in, gckpt_plan_file *pf)
{
    if (!child(in, "inputs.context_parallel")) return true;
    const cJSON *c = obj(r, in, "inputs.context_parallel");
    uint64_t cp, shard, local, rep = 1;
    bool balanced;
    if (!c || !u64(r, c, "inputs.context_parallel.cp_size", 2, GCKPT_MAX_RANKS, &cp) ||
        !u64(r, c, "inputs.context_parallel.dp_shard_size", 1, GCKPT_MAX_RANKS, &shard) ||
        !gckpt_json_u64_opt(c, r->f, "inputs.context_parallel.dp_replicate_size", 1, GCKPT_MAX_RANKS, 1, &rep, r->err) ||
        !u64(r, c, "inputs.context_parallel.local_seq", 1, pf->seq, &local) ||
        !boolean(r, c, "inputs.context_parallel.load_balanced", &balanced))
        return false;
    uint64_t world = (uint64_t)pf->layout.gpus * pf->layout.nodes;
    if (!child(in, "inputs.layout") || cp * shard * rep != world)
        return fail(r, "field 'inputs.context_parallel.cp_size': %llu x dp_shard_size %llu x dp_replicate_size %llu is "
                       "not inputs.layout's world_size (%llu)", (unsigned long long)cp, (unsigned long long)shard,
                    (unsigned long long)rep, (unsigned long long)world);
    if (rep != (pf->layout.dp_replicate > 1 ? pf->layout.dp_replicate : 1))
        return fail(r, "field 'inputs.context_parallel.dp_replicate_size' = %llu contradicts inputs.layout.dp_replicate "
                       "(%u)", (unsigned long long)rep, pf->layout.dp_replicate);
    if (local != pf->seq / cp)
        return fail(r, "field 'inputs.context_parallel.local_seq' = %llu contradicts inputs.seq / cp_size (%llu)",
                    (unsigned long long)local, (unsigned long long)(pf->seq / cp));
    pf->cp = (uint32_t)cp;
    return true;
}

static bool read_inputs(plan_reader *r, const cJSON *root, gckpt_plan_file *pf, uint32_t *every, int *n_every)
{
    const cJSON *in = obj(r, root, "inputs");
    if (!in || !read_model(r, in, pf) || !read_device(r, in, pf)) return false;
    /* version 1 planned CUDA's kernels only */
    int tg = GCKPT_TARGET_CUDA;
    if (pf->version >= 2 && !choice(r, in, "inputs.target", gckpt_target_names, GCKPT_NTARGET, &tg)) return false;
    pf->target = (gckpt_target)tg;
    if (!u64(r, in, "inputs.seq", 1, (uint64_t)1 << 24, &pf->seq)) return false;
    if (pf->model.learned_positions && pf->seq > pf->model.positions)
        return fail(r, "field 'inputs.seq' = %llu exceeds the model's n_positions (%llu)",
                    (unsigned long long)pf->seq, (unsigned long long)pf->model.positions);
    pf->allow_long_seq = false;
    if (child(in, "inputs.allow_long_seq") && !boolean(r, in, "inputs.allow_long_seq", &pf->allow_long_seq))
        return false;
    if (pf->seq > pf->model.max_positions && !pf->allow_long_seq)
        return fail(r, "field 'inputs.seq' = %llu exceeds the model's max_position_embeddings (%llu) and "
                       "'inputs.allow_long_seq' is not true",
                    (unsigned long long)pf->seq, (unsigned long long)pf->model.max_positions);
    if (!read_peft(r, in, pf) || !read_layout(r, in, pf) || !read_tp(r, in, pf) || !read_cp(r, in, pf)) return false;
    gckpt_err why = {{0}};
    if (!gckpt_peft_model_ok(&pf->model, &pf->peft, &why)) return fail(r, "field 'inputs.lora': %s", why.msg);
    const cJSON *mb = arr(r, in, "inputs.micro_batches");
    if (!mb) return false;
    int nmb = cJSON_GetArraySize(mb);
    if (nmb < 1 || nmb > GCKPT_MAX_MB)
        return fail(r, "field 'inputs.micro_batches' must hold 1 to %d sizes, has %d", GCKPT_MAX_MB, nmb);
    for (int i = 0; i < nmb; i++) {
        char p[64];
        snprintf(p, sizeof p, "inputs.micro_batches[%d]", i);
        if (!item_u64(r, cJSON_GetArrayItem(mb, i), p, 1, 1u << 20, &pf->micro_batches[i])) return false;
    }
    pf->n_micro = nmb;
    bool gb_null, ga_null;
    if (!u64_or_null(r, in, "inputs.global_batch", 1, (uint64_t)1 << 32, &pf->global_batch, &gb_null) ||
        !u64_or_null(r, in, "inputs.grad_accum", 1, (uint64_t)1 << 32, &pf->grad_accum, &ga_null))
        return false;
    if (gb_null == ga_null)
        return fail(r, "fields 'inputs.global_batch' and 'inputs.grad_accum': exactly one must be null");
    int prec = 0, opt = 0, attn = 0, off = 0;
    static const char *const offs[] = {"off", "on", "both"};
    if (!choice(r, in, "inputs.precision", gckpt_precision_names, GCKPT_NPREC, &prec) ||
        !choice(r, in, "inputs.optimizer", gckpt_optimizer_names, GCKPT_NOPT, &opt) ||
        !choice(r, in, "inputs.attention", gckpt_attention_names, GCKPT_NATTN, &attn) ||
        !choice(r, in, "inputs.offload", offs, 3, &off))
        return false;
    /* optional (absent in plans before --code-base: hf) */
    int cb = GCKPT_CB_HF;
    if (cJSON_GetObjectItemCaseSensitive(in, "code_base") &&
        !choice(r, in, "inputs.code_base", gckpt_code_base_names, GCKPT_NCODEBASE, &cb))
        return false;
    pf->code_base = (uint8_t)cb;
    pf->precision = (gckpt_precision)prec;
    pf->optimizer = (gckpt_optimizer)opt;
    pf->attention = (gckpt_attention)attn;
    pf->offload = (gckpt_offload_sel)off;
    int loss = GCKPT_LOSS_HF; /* an optional field (plans before --loss have none) */
    if (cJSON_GetObjectItemCaseSensitive(in, "loss") && !choice(r, in, "inputs.loss", gckpt_loss_names, GCKPT_NLOSS, &loss))
        return false;
    pf->loss = (gckpt_loss)loss;
    const cJSON *lk = cJSON_GetObjectItemCaseSensitive(in, "liger_kernels"), *ke;
    if (lk) { /* (plans before --liger-kernels have none: all on) */
        if (!cJSON_IsArray(lk) || loss != GCKPT_LOSS_LIGER)
            return fail(r, "field 'inputs.liger_kernels' must be an array of Liger kernel names, with inputs.loss "
                           "\"liger\"%s", "");
        char list[160] = "", badk[64];
        cJSON_ArrayForEach(ke, lk) {
            if (!cJSON_IsString(ke)) return fail(r, "field 'inputs.liger_kernels' holds a non-string%s", "");
            size_t k = strlen(list);
            snprintf(list + k, sizeof list - k, "%s%s", k ? "," : "", ke->valuestring);
        }
        if (!gckpt_liger_kernels_parse(list, &pf->liger_off, badk, sizeof badk))
            return fail(r, "field 'inputs.liger_kernels': '%s' is not a Liger kernel", badk);
    }
    const cJSON *en = arr(r, in, "inputs.every_n_layers");
    if (!en) return false;
    int ne = cJSON_GetArraySize(en);
    const uint64_t L = ckpt_layers(pf);
    if (ne < 1 || (uint64_t)ne > L + 1)
        return fail(r, "field 'inputs.every_n_layers' must hold 1 to %llu values, has %d", (unsigned long long)L + 1, ne);
    for (int i = 0; i < ne; i++) {
        char p[64];
        uint64_t v;
        snprintf(p, sizeof p, "inputs.every_n_layers[%d]", i);
        if (!item_u64(r, cJSON_GetArrayItem(en, i), p, 0, L, &v)) return false;
        every[i] = (uint32_t)v;
    }
    *n_every = ne;
    if (!u64(r, in, "inputs.budget_bytes", 1, MAXB, &pf->budget_bytes) ||
        !num(r, in, "inputs.margin", 0, 0.99, &pf->margin) ||
        !u64(r, in, "inputs.usable_bytes", 0, MAXB, &pf->usable_bytes))
        return false;
    uint64_t want = (uint64_t)((double)pf->budget_bytes * (1.0 - pf->margin));
    uint64_t diff = want > pf->usable_bytes ? want - pf->usable_bytes : pf->usable_bytes - want;
    if (diff > 1)
        return fail(r, "field 'inputs.usable_bytes' = %llu contradicts budget_bytes x (1 - margin) = %llu",
                    (unsigned long long)pf->usable_bytes, (unsigned long long)want);
    return true;
}

/* ---- entries ------------------------------------------------------------------------ */

static bool read_memory(plan_reader *r, const cJSON *e, const char *pre, gckpt_plan_file *pf, gckpt_entry *en)
{
    char p[128];
    snprintf(p, sizeof p, "%s.memory", pre);
    const cJSON *m = obj(r, e, p);
    if (!m) return false;
    gckpt_result *res = &en->r;
    uint64_t v, ctx;
#define U(field, dst)                                                                              \
    do {                                                                                           \
        snprintf(p, sizeof p, "%s.memory.%s", pre, field);                                         \
        if (!u64(r, m, p, 0, MAXB, &v)) return false;                                              \
        dst = v;                                                                                   \
    } while (0)
    U("peak_bytes", res->peak_bytes);
    U("device_peak_bytes", res->device_peak_bytes);
    U("host_pinned_bytes", res->host_pinned_bytes);
    U("after_forward_bytes", res->after_forward_bytes);
    U("context_bytes", ctx);
    if (pf->version >= 2) U("host_rng_state_bytes", res->host_rng_bytes);
#undef U
    if (pf->version >= 2 && !en->every_n != !res->host_rng_bytes)
        return fail(r, "field '%s.memory.host_rng_state_bytes' = %llu contradicts every_n_layers %u (checkpointing keeps "
                       "RNG states exactly when it is on)", pre, (unsigned long long)res->host_rng_bytes, en->every_n);
    if (ctx != pf->dev.context_bytes)
        return fail(r, "field '%s.memory.context_bytes' = %llu contradicts inputs.device.context_bytes (%llu)", pre,
                    (unsigned long long)ctx, (unsigned long long)pf->dev.context_bytes);
    uint64_t dp = gckpt_round_up(res->peak_bytes, pf->dev.segment_round_bytes) + pf->dev.context_bytes;
    if (res->device_peak_bytes != dp)
        return fail(r, "field '%s.memory.device_peak_bytes' = %llu contradicts peak_bytes rounded to the device's segments plus its context (%llu)",
                    pre, (unsigned long long)res->device_peak_bytes, (unsigned long long)dp);
    if (res->after_forward_bytes > res->peak_bytes)
        return fail(r, "field '%s.memory.after_forward_bytes' exceeds peak_bytes", pre);
    /* CPU offload on several GPUs (inputs.layout.offload) pins host memory of its own */
    if (!en->offload && !pf->layout.offload && res->host_pinned_bytes)
        return fail(r, "field '%s.memory.host_pinned_bytes' = %llu but the entry does not offload", pre,
                    (unsigned long long)res->host_pinned_bytes);
    if (en->offload && !res->host_pinned_bytes)
        return fail(r, "field '%s.memory.host_pinned_bytes' is 0 but the entry offloads", pre);
    int ph = 0;
    snprintf(p, sizeof p, "%s.memory.peak_phase", pre);
    if (!choice(r, m, p, gckpt_phase_names, GCKPT_NPHASE, &ph)) return false;
    res->peak_phase = (uint8_t)ph;
    bool null_layer;
    snprintf(p, sizeof p, "%s.memory.peak_layer", pre);
    if (!u64_or_null(r, m, p, 0, ckpt_layers(pf) - 1, &v, &null_layer)) return false;
    res->peak_layer = null_layer ? -1 : (int32_t)v;
    static const char *const micro[] = {"first", "later", "optimizer"};
    int mi;
    snprintf(p, sizeof p, "%s.memory.peak_micro_step", pre);
    if (!choice(r, m, p, micro, 3, &mi)) return false;
    if (mi == 1 && en->grad_accum < 2)
        return fail(r, "field '%s.memory.peak_micro_step' = \"later\" but grad_accum is 1", pre);
    res->peak_micro = (uint8_t)mi;
    char where[256];
    snprintf(p, sizeof p, "%s.memory.peak_where", pre);
    if (!str(r, m, p, where, sizeof where)) return false;
    snprintf(p, sizeof p, "%s.memory.breakdown", pre);
    const cJSON *bd = obj(r, m, p);
    if (!bd) return false;
    int64_t sum = 0;
    for (int k = 0; k < GCKPT_NCOMP; k++) {
        snprintf(p, sizeof p, "%s.memory.breakdown.%s", pre, gckpt_component_names[k]);
        /* bytes held by a component at the peak: >= 0 (the schema's minimum); QLoRA's
         * components only when present */
        v = 0;
        if ((!gckpt_component_optional(k) || cJSON_GetObjectItemCaseSensitive(bd, gckpt_component_names[k])) &&
            !u64(r, bd, p, 0, MAXB, &v))
            return false;
        res->breakdown[k] = (int64_t)v;
        sum += res->breakdown[k];
    }
    if (sum != (int64_t)res->peak_bytes)
        return fail(r, "field '%s.memory.breakdown' sums to %lld, not peak_bytes (%llu)", pre, (long long)sum,
                    (unsigned long long)res->peak_bytes);
    return true;
}

static bool read_time(plan_reader *r, const cJSON *e, const char *pre, const gckpt_plan_file *pf, gckpt_entry *en)
{
    char p[128];
    snprintf(p, sizeof p, "%s.time", pre);
    const cJSON *t = obj(r, e, p);
    if (!t) return false;
    gckpt_result *res = &en->r;
    struct {
        const char *k;
        double *dst;
    } f[] = {{"step_s", &res->step_s},         {"forward_s", &res->forward_s},
             {"backward_s", &res->backward_s}, {"recompute_s", &res->recompute_s},
             {"offload_copy_s", &res->copy_s}, {"optimizer_s", &res->optimizer_s},
             {"tokens_per_s", &res->tokens_per_s}, {"mfu", &res->mfu}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        snprintf(p, sizeof p, "%s.time.%s", pre, f[i].k);
        if (!num(r, t, p, 0, GCKPT_MAX_SECONDS, f[i].dst)) return false;
    }
    if (!(res->step_s > 0)) return fail(r, "field '%s.time.step_s' must be positive", pre);
    if (en->every_n == 0 && res->recompute_s != 0)
        return fail(r, "field '%s.time.recompute_s' is not 0 but gradient checkpointing is off", pre);
    if (!en->offload && !pf->layout.offload && res->copy_s != 0)
        return fail(r, "field '%s.time.offload_copy_s' is not 0 but the entry does not offload", pre);
    return true;
}

static bool read_timeline(plan_reader *r, const cJSON *e, const char *pre)
{
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(e, "timeline");
    if (!tl) return true;
    char p[128];
    snprintf(p, sizeof p, "%s.timeline", pre);
    if (!cJSON_IsObject(tl)) return fail(r, "field '%s' must be an object, got %s", p, gckpt_json_type_name(tl));
    static const char *const k[] = {"seconds", "allocated_bytes", "phase"};
    int n = -1;
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s.timeline.%s", pre, k[i]);
        const cJSON *a = arr(r, tl, p);
        if (!a) return false;
        int c = cJSON_GetArraySize(a);
        if (n >= 0 && c != n) return fail(r, "field '%s' has %d items, the other timeline arrays %d", p, c, n);
        n = c;
        const cJSON *it;
        int j = 0;
        cJSON_ArrayForEach(it, a) {
            bool ok = cJSON_IsNumber(it) && isfinite(it->valuedouble) && it->valuedouble >= 0;
            if (i == 2) {
                ok = false;
                for (int ph = 0; ph < GCKPT_NPHASE && cJSON_IsString(it); ph++)
                    ok |= !strcmp(it->valuestring, gckpt_phase_names[ph]);
            }
            if (!ok)
                return fail(r, "field '%s[%d]' must be %s, got %s", p, j,
                            i == 2 ? "a phase name (forward, loss, backward, optimizer)" : "a number >= 0", gckpt_json_type_name(it));
            j++;
        }
    }
    return true;
}

/* An entry's checkpointed layers (field path p) against every_n: the model's (tower -1) or
 * tower `tower` of a VLM's, as transformers numbers them. */
static bool read_layers(plan_reader *r, const cJSON *e, const char *p, const gckpt_plan_file *pf, int tower,
                        uint32_t every_n)
{
    const cJSON *cl = arr(r, e, p);
    if (!cl) return false;
    const uint64_t L = tower < 0 ? pf->model.layers : pf->towers[tower];
    uint64_t want = tower < 0 ? gckpt_checkpointed_count(every_n, L)
                              : gckpt_tower_checkpointed(every_n, pf->ckpt_towers, pf->towers, (size_t)tower, NULL, 0);
    if ((uint64_t)cJSON_GetArraySize(cl) != want)
        return fail(r, "field '%s' has %d layers, every_n_layers = %u checkpoints %llu of %llu", p,
                    cJSON_GetArraySize(cl), every_n, (unsigned long long)want, (unsigned long long)L);
    uint64_t *layers = malloc(sizeof *layers * (want ? want : 1)), v = 0;
    if (!layers) return fail(r, "out of memory");
    if (tower < 0) gckpt_checkpointed_layers(every_n, L, layers, want);
    else gckpt_tower_checkpointed(every_n, pf->ckpt_towers, pf->towers, (size_t)tower, layers, want);
    const cJSON *it;
    uint64_t k = 0;
    bool ok = true;
    cJSON_ArrayForEach(it, cl) {
        char q[160];
        snprintf(q, sizeof q, "%s[%llu]", p, (unsigned long long)k);
        if (!(ok = item_u64(r, it, q, 0, L - 1, &v))) break;
        if (v != layers[k]) {
            ok = fail(r, "field '%s' = %llu contradicts every_n_layers = %u (expected layer %llu)", q,
                      (unsigned long long)v, every_n, (unsigned long long)layers[k]);
            break;
        }
        k++;
    }
    free(layers);
    return ok;
}

static bool read_entry(plan_reader *r, const cJSON *e, size_t i, gckpt_plan_file *pf, const uint32_t *every, int ne)
{
    char pre[48], p[128];
    snprintf(pre, sizeof pre, "entries[%zu]", i);
    if (!cJSON_IsObject(e)) return fail(r, "field '%s' must be an object, got %s", pre, gckpt_json_type_name(e));
    gckpt_entry *en = &pf->entries[i];
    const uint64_t L = ckpt_layers(pf);
    uint64_t v;
    snprintf(p, sizeof p, "%s.index", pre);
    if (!u64(r, e, p, 0, MAXB, &v)) return false;
    if (v != i) return fail(r, "field '%s' = %llu, expected %zu (entries are numbered in order)", p, (unsigned long long)v, i);
    snprintf(p, sizeof p, "%s.every_n_layers", pre);
    if (!u64(r, e, p, 0, L, &v)) return false;
    en->every_n = (uint32_t)v;
    bool listed = false;
    for (int k = 0; k < ne; k++) listed |= every[k] == en->every_n;
    if (!listed) return fail(r, "field '%s' = %u is not among inputs.every_n_layers", p, en->every_n);
    snprintf(p, sizeof p, "%s.offload", pre);
    if (!boolean(r, e, p, &en->offload)) return false;
    if (en->offload && !en->every_n)
        return fail(r, "field '%s' is true but every_n_layers is 0 (offload needs gradient checkpointing)", p);
    if (en->offload && pf->offload == GCKPT_OFFLOAD_OFF)
        return fail(r, "field '%s' is true but inputs.offload is \"off\"", p);
    if (!en->offload && en->every_n && pf->offload == GCKPT_OFFLOAD_ON)
        return fail(r, "field '%s' is false but inputs.offload is \"on\"", p);
    snprintf(p, sizeof p, "%s.micro_batch", pre);
    if (!u64(r, e, p, 1, 1u << 20, &en->micro_batch)) return false;
    listed = false;
    for (int k = 0; k < pf->n_micro; k++) listed |= pf->micro_batches[k] == en->micro_batch;
    if (!listed) return fail(r, "field '%s' = %llu is not among inputs.micro_batches", p, (unsigned long long)en->micro_batch);
    snprintf(p, sizeof p, "%s.grad_accum", pre);
    if (!u64(r, e, p, 1, (uint64_t)1 << 32, &en->grad_accum)) return false;
    if (pf->global_batch && en->micro_batch * en->grad_accum != pf->global_batch)
        return fail(r, "fields '%s.micro_batch' x '%s.grad_accum' = %llu contradict inputs.global_batch (%llu)", pre, pre,
                    (unsigned long long)(en->micro_batch * en->grad_accum), (unsigned long long)pf->global_batch);
    if (!pf->global_batch && en->grad_accum != pf->grad_accum)
        return fail(r, "field '%s' = %llu contradicts inputs.grad_accum (%llu)", p, (unsigned long long)en->grad_accum,
                    (unsigned long long)pf->grad_accum);
    uint64_t tok;
    if (!gckpt_mul(en->micro_batch, pf->seq, &tok) || tok > ((uint64_t)1 << 40))
        return fail(r, "fields '%s.micro_batch' x inputs.seq = %llu tokens per micro-batch, more than 2^40", pre,
                    (unsigned long long)tok);
    /* a VLM's: the text model's layers, then the vision tower's (core/towers.h) */
    snprintf(p, sizeof p, "%s.checkpointed_layers", pre);
    if (!read_layers(r, e, p, pf, pf->vlm ? 1 : -1, en->every_n)) return false;
    snprintf(p, sizeof p, "%s.vision_checkpointed_layers", pre);
    if (pf->vlm && !read_layers(r, e, p, pf, 0, en->every_n)) return false;
    if (!read_memory(r, e, pre, pf, en) || !read_time(r, e, pre, pf, en) || !read_timeline(r, e, pre)) return false;
    snprintf(p, sizeof p, "%s.fits", pre);
    if (!boolean(r, e, p, &en->fits)) return false;
    if (en->fits != (en->r.device_peak_bytes <= pf->usable_bytes))
        return fail(r, "field '%s' = %s contradicts device_peak_bytes %s usable_bytes", p, en->fits ? "true" : "false",
                    en->fits ? ">" : "<=");
    double head;
    snprintf(p, sizeof p, "%s.headroom_bytes", pre);
    if (!num(r, e, p, -(double)MAXB, (double)MAXB, &head)) return false;
    double want_head = (double)pf->usable_bytes - (double)en->r.device_peak_bytes;
    if (fabs(head - want_head) > 0.5 + 1e-12 * fabs(want_head))
        return fail(r, "field '%s' contradicts usable_bytes - device_peak_bytes", p);
    snprintf(p, sizeof p, "%s.pareto", pre);
    return boolean(r, e, p, &en->pareto);
}

static bool read_index(plan_reader *r, const cJSON *root, const char *k, const gckpt_plan_file *pf, long *out)
{
    uint64_t v;
    bool is_null;
    if (!u64_or_null(r, root, k, 0, MAXB, &v, &is_null)) return false;
    *out = -1;
    if (is_null) return true;
    if (v >= pf->n) return fail(r, "field '%s' = %llu is not an entry index (the plan has %zu)", k, (unsigned long long)v, pf->n);
    *out = (long)v;
    return true;
}

bool gckpt_plan_parse(const char *file, const char *text, gckpt_plan_file *pf, gckpt_err *err)
{
    memset(pf, 0, sizeof *pf);
    pf->recommended = pf->smallest = -1;
    snprintf(pf->file, sizeof pf->file, "%s", file);
    plan_reader r = {.f = file, .err = err};
    cJSON *root = gckpt_json_parse(file, text, err);
    if (!root) return false;
    uint32_t *every = NULL;
    bool ok = false;
    char schema[64], gname[64];
    if (!str(&r, root, "schema", schema, sizeof schema)) goto done;
    pf->version = !strcmp(schema, GCKPT_PLAN_SCHEMA) ? 2 : !strcmp(schema, "gckpt.plan/1") ? 1 : 0;
    if (!pf->version) {
        fail(&r, "field 'schema' = \"%s\", expected \"%s\" (or the older \"gckpt.plan/1\")", schema,
             GCKPT_PLAN_SCHEMA);
        goto done;
    }
    const cJSON *gen = obj(&r, root, "generator");
    if (!gen || !str(&r, gen, "generator.name", gname, sizeof gname) ||
        !str(&r, gen, "generator.version", pf->generator_version, sizeof pf->generator_version))
        goto done;
    if (strcmp(gname, "gckpt-plan")) {
        fail(&r, "field 'generator.name' = \"%s\", expected \"gckpt-plan\"", gname);
        goto done;
    }
    /* every_n values: at most layers + 1 (checked against the model below) */
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    const cJSON *enl = cJSON_IsObject(in) ? cJSON_GetObjectItemCaseSensitive(in, "every_n_layers") : NULL;
    int cap = cJSON_IsArray(enl) ? cJSON_GetArraySize(enl) : 0;
    every = malloc(sizeof *every * (size_t)(cap > 0 ? cap : 1));
    if (!every) {
        fail(&r, "out of memory");
        goto done;
    }
    int ne = 0;
    if (!read_inputs(&r, root, pf, every, &ne)) goto done;
    char ss[512];
    if (!str(&r, root, "steady_state", ss, sizeof ss)) goto done;
    const cJSON *es = arr(&r, root, "entries");
    if (!es) goto done;
    int n = cJSON_GetArraySize(es);
    if (n < 1 || n > GCKPT_MAX_ENTRIES) {
        fail(&r, "field 'entries' must hold 1 to %d entries, has %d", GCKPT_MAX_ENTRIES, n);
        goto done;
    }
    pf->entries = calloc((size_t)n, sizeof *pf->entries);
    if (!pf->entries) {
        fail(&r, "out of memory for %d entries", n);
        goto done;
    }
    pf->n = (size_t)n;
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, es) {
        if (!read_entry(&r, e, i, pf, every, ne)) goto done;
        i++;
    }
    if (!read_index(&r, root, "recommended", pf, &pf->recommended) ||
        !read_index(&r, root, "smallest", pf, &pf->smallest))
        goto done;
    if (pf->recommended >= 0 && !pf->entries[pf->recommended].fits) {
        fail(&r, "field 'recommended' = %ld names an entry that does not fit", pf->recommended);
        goto done;
    }
    if (!read_warnings(&r, root, pf)) goto done;
    for (size_t k = 0; pf->smallest >= 0 && k < pf->n; k++)
        if (pf->entries[k].r.device_peak_bytes < pf->entries[pf->smallest].r.device_peak_bytes) {
            fail(&r, "field 'smallest' = %ld contradicts the entries: entries[%zu] has a smaller device peak (%llu < %llu)",
                 pf->smallest, k, (unsigned long long)pf->entries[k].r.device_peak_bytes,
                 (unsigned long long)pf->entries[pf->smallest].r.device_peak_bytes);
            goto done;
        }
    ok = true;
done:
    free(every);
    cJSON_Delete(root);
    if (!ok) {
        char keep[sizeof pf->file];
        memcpy(keep, pf->file, sizeof keep);
        gckpt_plan_file_free(pf);
        memcpy(pf->file, keep, sizeof keep);
    }
    return ok;
}

bool gckpt_plan_executable(const gckpt_plan_file *pf, gckpt_err *err)
{
    const char *f = pf->file;
    if (pf->vlm) { /* the VLM table's word (gckpt_vlm_type.host): llava's step runs on the host backend */
        gckpt_vlm *v = malloc(sizeof *v);
        char label[600];
        snprintf(label, sizeof label, "%s: inputs.model.config", f);
        bool ok = v && gckpt_vlm_parse(label, pf->config_text, v, err);
        const gckpt_vlm_type *row = ok ? gckpt_vlm_type_of(v->model_type) : NULL;
        if (ok && !(row && row->host))
            gckpt_seterr(err, "%s: field 'inputs.vision': model_type \"%s\" (%s) is planned, not executed by gckpt-run "
                              "(not yet: %s)", f, v->model_type, row ? row->family : v->model_type,
                         row ? row->missing : "its step");
        /* LoRA on a VLM is planned (R-VLM-43); the executor's VLM step has no adapters */
        bool peft = ok && row && row->host && gckpt_peft_on(&pf->peft);
        if (peft)
            gckpt_seterr(err, "%s: field 'inputs.method': %s on a vision-language model is planned, not executed by "
                              "gckpt-run", f, gckpt_method_names[pf->peft.method]);
        if (!v) gckpt_seterr(err, "out of memory");
        free(v);
        if (!ok || !(row && row->host) || peft) return false;
    }
    if (pf->layout.offload)
        gckpt_seterr(err, "%s: field 'inputs.layout.offload': CPU offload on several GPUs is planned from the source, "
                          "not executed by gckpt-run", f);
    else if (pf->layout.tp > 1 && gckpt_peft_on(&pf->peft) && !tp_peft_executed(pf, err))
        ; /* what gckpt-plan refuses under TP (R-TP-13, -14, -16, -17): err names the rule */
    else if (pf->layout.tp > 1 && (pf->tp_fsdp > 1 || pf->tp_replicate > 1) && pf->precision == GCKPT_BF16)
        gckpt_seterr(err, "%s: field 'inputs.precision' = \"bf16\": gckpt-run executes TP x FSDP / DDP in fp32 and "
                          "amp-bf16 only (its FSDP2 keeps fp32 shards; pure bf16 keeps them bf16, FINDINGS R-TP-30); "
                          "this plan is planned, not executed", f);
    else if (pf->cp && pf->precision != GCKPT_FP32 && pf->precision != GCKPT_AMP_BF16)
        gckpt_seterr(err, "%s: field 'inputs.precision' = \"%s\": gckpt-run executes context parallelism in fp32 and "
                          "amp-bf16 only; "
                          "this plan (cp_size %u) is planned, not executed", f, gckpt_precision_names[pf->precision], pf->cp);
    else
        return true;
    return false;
}

bool gckpt_plan_read(const char *path, gckpt_plan_file *pf, gckpt_err *err)
{
    memset(pf, 0, sizeof *pf);
    pf->recommended = pf->smallest = -1;
    char *text = gckpt_read_file(path, GCKPT_PLAN_MAX_BYTES, err);
    if (!text) return false;
    bool ok = gckpt_plan_parse(path, text, pf, err);
    free(text);
    return ok;
}

void gckpt_plan_file_free(gckpt_plan_file *pf)
{
    gckpt_warnings_free(pf->warnings, &pf->n_warnings);
    free(pf->entries);
    free(pf->config_text);
    memset(pf, 0, sizeof *pf);
    pf->recommended = pf->smallest = -1;
}

gckpt_setting gckpt_plan_file_setting(const gckpt_plan_file *pf, size_t i)
{
    const gckpt_entry *e = &pf->entries[i];
    gckpt_setting s = {.seq = pf->seq,
                       .micro_batch = e->micro_batch,
                       .grad_accum = e->grad_accum,
                       .precision = pf->precision,
                       .optimizer = pf->optimizer,
                       .attention = pf->attention,
                       .code_base = pf->code_base,
                       .loss = (uint8_t)pf->loss,
                       .liger_off = pf->liger_off,
                       .every_n = e->every_n,
                       .offload = e->offload,
                       .ckpt_towers = pf->ckpt_towers,
                       .peft = pf->peft,
                       .layout = pf->layout};
    if (pf->cp) { /* CP: the rank's S / C tokens (planner/plan.c gckpt_plan_setting) */
        s.seq = pf->seq / pf->cp;
        s.layout.cp = pf->cp;
    }
    if (pf->tp_fsdp || pf->tp_replicate) /* TP x FSDP, TP with replicas: world rank 0's, as gckpt_plan_setting */
        gckpt_tp_hsdp_layout(pf->layout.tp, pf->tp_replicate ? pf->tp_replicate : 1, pf->tp_fsdp ? pf->tp_fsdp : 1, 0,
                             &s.layout);
    return s;
}

uint32_t gckpt_plan_file_ranks(const gckpt_plan_file *pf)
{
    if (pf->layout.tp > 1) /* one process per rank of the mesh (dp_replicate, fsdp, tp) */
        return pf->layout.tp * (pf->tp_replicate ? pf->tp_replicate : 1) * (pf->tp_fsdp ? pf->tp_fsdp : 1);
    return gckpt_layout_multi(&pf->layout) ? gckpt_layout_world(&pf->layout) : 1;
}
