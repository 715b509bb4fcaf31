/* A vision-language model in the plan (gckpt/planner/plan.h): the families whose training
 * step gckpt_vlm_walk simulates across the vision tower and the text model (gckpt_vlm_types'
 * walked rows: LLaVA, LLaVA-NeXT, Gemma 3, Qwen2.5-VL, Qwen3-VL, Llama 3.2 Vision; core/vlm_step.c,
 * FINDINGS R-VLM-11, R-VLM-14, R-VLM-24, R-VLM-53, R-VLM-62). Each entry of the sweep is one walk; the images a sample carries come
 * from --images, --image-size and --vision-tower. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gckpt/core/families.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/vision.h"
#include "gckpt/planner/plan.h"

bool gckpt_plan_is_vlm(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "model_type") : NULL;
    const gckpt_vlm_type *row = cJSON_IsString(t) ? gckpt_vlm_type_of(t->valuestring) : NULL;
    cJSON_Delete(j);
    return row && row->walked;
}

static bool oom(gckpt_err *err)
{
    gckpt_seterr(err, "out of memory");
    return false;
}

bool gckpt_plan_vlm_options_ok(const gckpt_plan *p, gckpt_err *err)
{
    const gckpt_plan_request *q = &p->req;
    if (p->vlm || !(q->images || q->image_h || q->vision_tower || q->checkpoint_towers_given)) return true;
    char planned[160] = "";
    for (const gckpt_vlm_type *t = gckpt_vlm_types; t->name; t++)
        if (t->walked)
            snprintf(planned + strlen(planned), sizeof planned - strlen(planned), "%s%s", planned[0] ? ", " : "",
                     t->family);
    gckpt_seterr(err, "--%s: model_type \"%s\" (%s) is no vision-language model (%s)",
                 q->images ? "images" : q->image_h ? "image-size" : q->vision_tower ? "vision-tower" : "checkpoint-towers",
                 p->model.model_type,
                 p->model.name, planned);
    return false;
}

bool gckpt_plan_vlm_load(gckpt_plan *p, const char *path, const char *text, gckpt_err *err)
{
    const gckpt_plan_request *q = &p->req;
    if (!(p->vlm = malloc(sizeof *p->vlm)) || !(p->images = calloc(1, sizeof *p->images)) ||
        !(p->vlm_info = calloc(1, sizeof *p->vlm_info)))
        return oom(err);
    if (!gckpt_vlm_parse(path, text, p->vlm, err)) return false;
    p->model = p->vlm->text;
    gckpt_model_name_from(q->model_ref, &p->model);
    /* the tensor parallel and context parallel plans rewrite the text model alone */
    if (q->tp || q->cp) {
        gckpt_seterr(err, "--%s on model_type \"%s\": a vision-language model is planned on one GPU only",
                     q->tp ? "tp" : "cp", p->vlm->model_type);
        return false;
    }
    /* CLIPImageProcessor resizes and crops any size (FINDINGS R-VLM-11), Gemma3ImageProcessor
     * resizes any size (R-VLM-15): the config's square image unless --image-size says
     * otherwise (LLaVA-NeXT's tiles follow it, R-VLM-4) */
    if (!q->image_h && !p->vlm->vision.image_size) { /* Qwen2.5-VL: tokens follow the image's size */
        gckpt_seterr(err, "--image-size: model_type \"%s\" (%s) needs the images' size HxW: its processor's tokens "
                          "per image follow it", p->vlm->model_type, p->model.name);
        return false;
    }
    uint64_t h = q->image_h ? q->image_h : p->vlm->vision.image_size;
    uint64_t w = q->image_h ? q->image_w : p->vlm->vision.image_size;
    gckpt_vlm_images *im = p->images;
    im->images = q->images ? q->images : 1;
    im->tiles = gckpt_image_tiles(p->vlm, h, w);
    /* the model as from_pretrained loads it trains every parameter; the Trainer leaves it so;
     * get_peft_model freezes all but the adapters (FINDINGS R-VLM-42) */
    bool peft = gckpt_peft_on(&q->peft);
    if (peft && q->vision_tower == GCKPT_VISION_TRAINED) {
        gckpt_seterr(err, "--vision-tower trained with --method %s: get_peft_model freezes the vision tower (adapters "
                          "on the text model only are planned)", gckpt_method_names[q->peft.method]);
        return false;
    }
    im->tower_trained = !peft && q->vision_tower != GCKPT_VISION_FROZEN;
    /* per-layer flags under LoRA (a PeftModel's modules) are not measured; a tower without
     * GradientCheckpointingLayer blocks has nothing to checkpoint */
    uint64_t towers[2];
    gckpt_vlm_towers(p->vlm, towers);
    if (q->checkpoint_towers != GCKPT_CKPT_TOWERS_ALL && peft) {
        gckpt_seterr(err, "--checkpoint-towers %s with --method %s: per-layer checkpointing under peft is not measured "
                          "(all is)", gckpt_ckpt_towers_names[q->checkpoint_towers], gckpt_method_names[q->peft.method]);
        return false;
    }
    if (!gckpt_towers_counted(q->checkpoint_towers, towers)) {
        gckpt_seterr(err, "--checkpoint-towers %s: model_type \"%s\" has no GradientCheckpointingLayer in that tower",
                     gckpt_ckpt_towers_names[q->checkpoint_towers], p->vlm->model_type);
        return false;
    }
    im->pixel_dtype = q->pixel_dtype;
    im->h = h;
    im->w = w;
    p->req.image_h = h;
    p->req.image_w = w;
    return gckpt_image_tokens(p->vlm, "--image-size", h, w, &im->tokens, err);
}

/* --seq is the whole sequence: the text tokens and every image's placeholders */
static bool seq_ok(const gckpt_plan *p, gckpt_err *err)
{
    uint64_t img = p->images->images * p->images->tokens;
    if (p->req.seq > img) return true;
    gckpt_seterr(err, "--seq %llu: a sample's %llu image(s) take %llu tokens of it (%llu each), leaving no text "
                      "tokens; raise --seq or lower --images",
                 (unsigned long long)p->req.seq, (unsigned long long)p->images->images, (unsigned long long)img,
                 (unsigned long long)p->images->tokens);
    return false;
}

static bool walk_events(const gckpt_plan *p, const gckpt_entry *e, gckpt_result *r, gckpt_vlm_step_info *info,
                        gckpt_walk_event_fn fn, void *user, gckpt_err *err)
{
    gckpt_setting s = gckpt_plan_setting(p, e->micro_batch, e->grad_accum);
    s.every_n = e->every_n;
    s.offload = e->offload;
    return gckpt_vlm_walk_events(p->vlm, &p->dev, &s, p->target, p->images, r, info, fn, user, err);
}

static bool walk(const gckpt_plan *p, const gckpt_entry *e, gckpt_result *r, gckpt_vlm_step_info *info,
                 gckpt_err *err)
{
    return walk_events(p, e, r, info, NULL, NULL, err);
}

bool gckpt_plan_vlm_events(const gckpt_plan *p, const gckpt_entry *e, gckpt_walk_event_fn fn, void *user)
{
    gckpt_result r;
    gckpt_err err;
    gckpt_vlm_step_info *info = malloc(sizeof *info);
    bool ok = info && walk_events(p, e, &r, info, fn, user, &err);
    free(info);
    return ok;
}

bool gckpt_plan_vlm_evaluate(gckpt_plan *p, uint64_t micro_batch, uint64_t grad_accum, gckpt_err *err)
{
    if (!seq_ok(p, err)) return false;
    for (int i = 0; i < p->req.n_every; i++) {
        uint32_t n = p->req.every_n[i];
        int choices = n && p->req.offload == GCKPT_OFFLOAD_BOTH ? 2 : 1;
        for (int o = 0; o < choices; o++) {
            gckpt_entry *e = &p->entries[p->n++];
            e->every_n = n;
            e->offload = n && (p->req.offload == GCKPT_OFFLOAD_ON || (p->req.offload == GCKPT_OFFLOAD_BOTH && o == 1));
            e->micro_batch = micro_batch;
            e->grad_accum = grad_accum;
            if (!walk(p, e, &e->r, p->vlm_info, err)) return false;
            e->fits = e->r.device_peak_bytes <= p->usable_bytes;
        }
    }
    return true;
}

bool gckpt_plan_vlm_chosen(gckpt_plan *p, gckpt_err *err)
{
    long i = p->recommended >= 0 ? p->recommended : p->smallest;
    gckpt_result r;
    return i < 0 || walk(p, &p->entries[i], &r, p->vlm_info, err);
}

static void print_layers(const uint64_t *l, size_t n, FILE *f)
{
    if (!n) fprintf(f, "none");
    for (size_t i = 0; i < n && i < 12; i++) fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)l[i]);
    if (n > 12) fprintf(f, ",... (%zu layers)", n);
}

void gckpt_plan_vlm_header(const gckpt_plan *p, FILE *f)
{
    if (!p->vlm) return;
    const gckpt_vlm_images *im = p->images;
    const gckpt_vlm_step_info *in = p->vlm_info;
    uint64_t img = im->images * im->tokens;
    /* a tiled tower runs every image's max_num_tiles tiles, padding tiles too (mllama, R-VLM-33) */
    uint64_t tiles = p->vlm->vision.max_tiles ? p->vlm->vision.max_tiles : im->tiles;
    fprintf(f, "%s: %llu image(s) of %llux%llu per sample, %llu tile(s) each, %llu image tokens + %llu text tokens "
               "per sample; vision tower %s (%llu layers, %llu reach the projector), text model %llu layers; %llu "
               "tokens per image%s\n",
            p->vlm->model_type, (unsigned long long)im->images, (unsigned long long)p->req.image_h,
            (unsigned long long)p->req.image_w, (unsigned long long)tiles, (unsigned long long)img,
            (unsigned long long)(p->req.seq - img), im->tower_trained ? "trained" : "frozen",
            (unsigned long long)in->vision_layers, (unsigned long long)in->vision_live,
            (unsigned long long)in->text_layers, (unsigned long long)im->tokens,
            /* the config's count (Gemma 3's), else the processor's rule (R-VLM-4) */
            p->vlm->vision.tokens_per_image ? " (mm_tokens_per_image)" : "");
    long i = p->recommended >= 0 ? p->recommended : p->smallest;
    if (i < 0) return;
    fprintf(f, "%s entry (every_n %u): checkpointed vision layers ", p->recommended >= 0 ? "recommended" : "smallest",
            p->entries[i].every_n);
    print_layers(in->vision_ckpt, in->nvision_ckpt, f);
    fprintf(f, "; text layers ");
    print_layers(in->text_ckpt, in->ntext_ckpt, f);
    if (p->req.checkpoint_towers == GCKPT_CKPT_TOWERS_ALL) {
        uint64_t towers[2];
        gckpt_vlm_towers(p->vlm, towers);
        fprintf(f, towers[0] ? " (every_n_layers counts the vision blocks first)\n"
                             : " (no vision layer is a checkpointing layer: every_n_layers counts the text layers)\n");
    } else {
        fprintf(f, " (--checkpoint-towers %s: every_n counted from the %s's layer 0, the other's layers plain%s)\n",
                gckpt_ckpt_towers_names[p->req.checkpoint_towers],
                p->req.checkpoint_towers == GCKPT_CKPT_TOWERS_TEXT ? "text model" : "vision tower",
                gckpt_plan_vlm_per_layer(p, &p->entries[i]) ? "; per-layer code below" : "");
    }
}

void gckpt_plan_vlm_json(const gckpt_plan *p, cJSON *inputs)
{
    if (!p->vlm) return;
    cJSON *o = cJSON_AddObjectToObject(inputs, "vision");
    cJSON_AddStringToObject(o, "model_type", p->vlm->model_type);
    cJSON_AddNumberToObject(o, "images", (double)p->images->images);
    cJSON *sz = cJSON_AddArrayToObject(o, "image_size");
    cJSON_AddItemToArray(sz, cJSON_CreateNumber((double)p->req.image_h));
    cJSON_AddItemToArray(sz, cJSON_CreateNumber((double)p->req.image_w));
    cJSON_AddNumberToObject(o, "tiles_per_image", (double)p->images->tiles);
    cJSON_AddNumberToObject(o, "tokens_per_image", (double)p->images->tokens);
    cJSON_AddStringToObject(o, "vision_tower", p->images->tower_trained ? "trained" : "frozen");
    cJSON_AddNumberToObject(o, "vision_layers", (double)p->vlm_info->vision_layers);
    cJSON_AddStringToObject(o, "checkpoint_towers", gckpt_ckpt_towers_names[p->req.checkpoint_towers]);
}

void gckpt_plan_vlm_entry_json(const gckpt_plan *p, const gckpt_entry *e, cJSON *text, cJSON *entry)
{
    uint64_t towers[2], *l = malloc(sizeof *l * GCKPT_MAX_LAYERS);
    gckpt_vlm_towers(p->vlm, towers);
    cJSON *vision = cJSON_AddArrayToObject(entry, "vision_checkpointed_layers");
    for (size_t t = 0; t < 2; t++) {
        size_t n = l ? gckpt_tower_checkpointed(e->every_n, p->req.checkpoint_towers, towers, t, l, GCKPT_MAX_LAYERS)
                     : 0;
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(t ? text : vision, cJSON_CreateNumber((double)l[i]));
    }
    free(l);
}

uint64_t gckpt_plan_vlm_params(const gckpt_plan *p)
{
    /* the model's own parameters, as the plan reader counts them from the config: LoRA's
     * adapters (in p->params) are not the model's */
    return gckpt_param_count(&p->vlm->text) + gckpt_vision_tower_params(p->vlm).params +
           gckpt_vision_projector_params(p->vlm).params + gckpt_vlm_text_extra(p->vlm).params;
}

const char *gckpt_plan_vlm_checkpointed(const gckpt_plan *p, uint32_t every_n, char *buf, size_t n)
{
    uint64_t towers[2];
    gckpt_vlm_towers(p->vlm, towers);
    snprintf(buf, n, "%zu+%zu", gckpt_tower_checkpointed(every_n, p->req.checkpoint_towers, towers, 0, NULL, 0),
             gckpt_tower_checkpointed(every_n, p->req.checkpoint_towers, towers, 1, NULL, 0));
    return buf;
}

bool gckpt_plan_vlm_per_layer(const gckpt_plan *p, const gckpt_entry *e)
{
    if (!p->vlm || !e->every_n || p->req.checkpoint_towers == GCKPT_CKPT_TOWERS_ALL) return false;
    /* per-layer code only where every_n_layers alone checkpoints other layers */
    uint64_t towers[2], *a = malloc(2 * sizeof *a * GCKPT_MAX_LAYERS), *b = a ? a + GCKPT_MAX_LAYERS : NULL;
    bool differ = !a;
    gckpt_vlm_towers(p->vlm, towers);
    for (size_t t = 0; t < 2 && !differ; t++) {
        size_t n = gckpt_tower_checkpointed(e->every_n, p->req.checkpoint_towers, towers, t, a, GCKPT_MAX_LAYERS);
        differ = n != gckpt_tower_checkpointed(e->every_n, GCKPT_CKPT_TOWERS_ALL, towers, t, b, GCKPT_MAX_LAYERS) ||
                 memcmp(a, b, sizeof *a * (n < GCKPT_MAX_LAYERS ? n : GCKPT_MAX_LAYERS)) != 0;
    }
    free(a);
    return differ;
}

void gckpt_plan_vlm_per_layer_code(const gckpt_plan *p, const gckpt_entry *e, FILE *f)
{
    if (!gckpt_plan_vlm_per_layer(p, e)) return;
    const gckpt_vlm_type *row = gckpt_vlm_type_of(p->vlm->model_type);
    const char *tower = row && row->tower_module ? row->tower_module : "vision_tower";
    static const char *const names[2] = {"vision", "text"};
    size_t chosen = p->req.checkpoint_towers == GCKPT_CKPT_TOWERS_TEXT ? 1 : 0;
    /* tools/hf_probe/vlm_cases.py per_layer_code runs these lines as printed (FINDINGS R-VLM-70..72) */
    fprintf(f, "# --checkpoint-towers %s: every_n_layers=%u counted from the %s's layer 0, the other tower's\n"
               "# layers plain (every_n_layers alone counts the vision blocks first). Enabled here, once,\n"
               "# before the Trainer; its gradient_checkpointing stays False (True re-runs every_n_layers\n"
               "# over both towers, resetting these flags)\n"
               "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False}, "
               "offload=%s)\n"
               "layers = [(name, m) for name, m in model.named_modules() if isinstance(m, GradientCheckpointingLayer)]\n"
               "vision = [m for name, m in layers if \"%s\" in name.split(\".\")]\n"
               "text = [m for name, m in layers if \"%s\" not in name.split(\".\")]\n",
            gckpt_ckpt_towers_names[p->req.checkpoint_towers], e->every_n,
            chosen ? "text model" : "vision tower", e->offload ? "True" : "False", tower, tower);
    for (size_t t = 0; t < 2; t++) {
        fprintf(f, "for i, m in enumerate(%s):\n    m.gradient_checkpointing = ", names[t]);
        if (t == chosen) fprintf(f, "i %% %u == 0\n", e->every_n);
        else fprintf(f, "False\n");
    }
}
