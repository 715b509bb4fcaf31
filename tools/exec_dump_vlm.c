/* gckpt-exec-dump-vlm: one LLaVA training step on the host backend (gckpt_vexec), written as
 * JSON for transformers to repeat (tools/hf_probe/exec_vlm.py): both sides' weights before the
 * step, the batch (ids, labels, pixel values), the loss, every trained parameter's gradient,
 * and the allocator's peak next to the walk's. Developer tool, not a test.
 *   gckpt-exec-dump-vlm CONFIG.json [--seq N] [--micro-batch N] [--images N] [--grad-accum N]
 *                       [--every-n N] [--offload] [--frozen] [--seed N] [--bias-std X] [--precision P]
 *                       [--image-size HxW] -o OUT.json
 * --image-size: the images' size in pixels (default the tower's square; LLaVA-NeXT's anyres
 * tiles and packed rows follow it, as its image processor's).
 * Exit 0: written; 1: the step failed; 2: bad usage or input. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/step_walk.h"
#include "gckpt/core/vision.h"
#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/exec_vlm.h"
#include "gckpt/util/atomic_file.h"

typedef struct {
    cJSON *params[2];
    int failed;
    gckpt_vexec *vx;
} dump_ctx;

static cJSON *floats(const float *v, uint64_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (uint64_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

/* every parameter of side x (the recipe's order, each layer's): the weights as new entries
 * of arr, or the trained ones' gradients into those entries */
static int each_param(gckpt_exec *x, cJSON *arr, bool grad)
{
    const gckpt_ctx *c = gckpt_exec_ctx(x);
    const gckpt_recipe *r = c->recipe;
    cJSON *e = arr->child;
    gckpt_err err = {{0}};
    for (int t = 0; t < r->nt; t++) {
        if (r->t[t].kind != GCKPT_T_PARAM) continue;
        uint64_t n = gckpt_exec_param_numel(x, t), layers = gckpt_sec_is_block(r->t[t].section) ? c->model->layers : 1;
        float *v = malloc(sizeof *v * (n ? n : 1));
        if (!v) return 1;
        for (uint64_t l = 0; l < layers; l++) {
            if (!gckpt_exec_param_in_layer(x, t, (int)l)) continue;
            if (grad) {
                if (r->t[t].requires_grad) {
                    if (gckpt_exec_read_grad(x, (int)l, t, v, &err) != GCKPT_XS_OK) goto fail;
                    cJSON_AddItemToObject(e, "grad", floats(v, n));
                }
                e = e->next;
                continue;
            }
            if (gckpt_exec_read_param(x, (int)l, t, v, &err) != GCKPT_XS_OK) goto fail;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, o);
            cJSON_AddStringToObject(o, "name", r->t[t].name);
            cJSON_AddStringToObject(o, "section", gckpt_sec_is_block(r->t[t].section) ? "layer" : "model");
            cJSON_AddNumberToObject(o, "layer", (double)l);
            cJSON_AddItemToObject(o, "data", floats(v, n));
        }
        free(v);
        continue;
    fail:
        fprintf(stderr, "gckpt-exec-dump-vlm: %s\n", err.msg);
        free(v);
        return 1;
    }
    return 0;
}

static void on_grads(gckpt_exec *x, void *user)
{
    dump_ctx *d = user;
    (void)x;
    d->failed |= each_param(gckpt_vexec_side(d->vx, false), d->params[0], true);
    d->failed |= each_param(gckpt_vexec_side(d->vx, true), d->params[1], true);
}

static int usage(void)
{
    fprintf(stderr, "usage: gckpt-exec-dump-vlm CONFIG.json [--seq N] [--micro-batch N] [--images N] [--grad-accum N] "
                    "[--every-n N] [--offload] [--frozen] [--seed N] [--bias-std X] [--precision P] [--image-size HxW] "
                    "-o OUT.json\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    const char *cfg = argv[1], *out = NULL, *size = NULL;
    gckpt_setting s = {.seq = 32, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32,
                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA};
    gckpt_exec_opts o = {.seed = 7, .init_std = 0.05};
    gckpt_vlm_images im = {.images = 1, .tiles = 1, .tower_trained = true};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--offload") || !strcmp(a, "--frozen")) {
            if (a[2] == 'o') s.offload = true;
            else im.tower_trained = false;
            continue;
        }
        if (!v) return usage();
        int k;
        if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--image-size")) size = v;
        else if (!strcmp(a, "--every-n") && (s.every_n = (uint32_t)strtoul(v, NULL, 10)) <= 64) {}
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--precision") && (k = gckpt_precision_from(v)) >= 0) s.precision = (gckpt_precision)k;
        else if (!strcmp(a, "--bias-std") && (o.bias_std = strtod(v, NULL)) >= 0 && o.bias_std < 10) {}
        else if (!strcmp(a, "--seq") && (s.seq = strtoull(v, NULL, 10)) > 0 && s.seq <= 4096) {}
        else if (!strcmp(a, "--micro-batch") && (s.micro_batch = strtoull(v, NULL, 10)) > 0 && s.micro_batch <= 64) {}
        else if (!strcmp(a, "--grad-accum") && (s.grad_accum = strtoull(v, NULL, 10)) > 0 && s.grad_accum <= 64) {}
        else if (!strcmp(a, "--images") && (im.images = strtoull(v, NULL, 10)) > 0 && im.images <= 8) {}
        else return usage();
        i++;
    }
    if (!out) return usage();
    gckpt_err err = {{0}};
    gckpt_vlm v;
    gckpt_device dev;
    char *text = gckpt_read_file(cfg, 1u << 22, &err);
    bool ok = text && gckpt_vlm_parse(cfg, text, &v, &err) && gckpt_device_load("h100-sxm-80gb", &dev, &err);
    im.h = im.w = ok ? v.vision.image_size : 0;
    ok = ok && (!size || gckpt_parse_image_size("--image-size", size, &im.h, &im.w, &err)) &&
         gckpt_image_tokens(&v, "--image-size", im.h, im.w, &im.tokens, &err);
    if (ok) im.tiles = gckpt_image_tiles(&v, im.h, im.w);
    if (!ok) {
        fprintf(stderr, "gckpt-exec-dump-vlm: %s\n", err.msg);
        free(text);
        return 2;
    }
    free(text);
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_vexec *vx = be ? gckpt_vexec_new(be, &v, &dev, &s, &im, &o, &err) : NULL;
    if (!vx) {
        fprintf(stderr, "gckpt-exec-dump-vlm: %s\n", be ? err.msg : "no host backend");
        if (be) be->destroy(be);
        return 2;
    }
    gckpt_vlm_step_info info;
    gckpt_result pred;
    gckpt_err werr = {{0}};
    bool walked = gckpt_vlm_walk(&v, &dev, &s, GCKPT_TARGET_CUDA, &im, &pred, &info, &werr);
    cJSON *root = cJSON_CreateObject();
    dump_ctx d = {{cJSON_CreateArray(), cJSON_CreateArray()}, 0, vx};
    cJSON_AddItemToObject(root, "text_params", d.params[0]);
    cJSON_AddItemToObject(root, "vision_params", d.params[1]);
    int rc = 1;
    gckpt_step_result res;
    gckpt_step_opts so = {.update = true, .on_grads = on_grads, .user = &d};
    gckpt_vexec_keep_pixels(vx, true);
    be->reset_peaks(be);
    if (gckpt_vexec_setup(vx, &err) != GCKPT_XS_OK || each_param(gckpt_vexec_side(vx, false), d.params[0], false) ||
        each_param(gckpt_vexec_side(vx, true), d.params[1], false) ||
        gckpt_vexec_step(vx, &so, &res, &err) != GCKPT_XS_OK || d.failed) {
        fprintf(stderr, "gckpt-exec-dump-vlm: %s\n", err.msg);
        goto done;
    }
    gckpt_memstat ms;
    be->memstat(be, &ms);
    const int64_t *ids, *labels;
    const float *px;
    uint64_t npx;
    gckpt_vexec_batch(vx, &ids, &labels, &px, &npx);
    cJSON *ja = cJSON_CreateArray(), *la = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "input_ids", ja);
    cJSON_AddItemToObject(root, "labels", la);
    for (uint64_t i = 0; i < s.micro_batch * s.seq; i++) {
        cJSON_AddItemToArray(ja, cJSON_CreateNumber((double)ids[i]));
        cJSON_AddItemToArray(la, cJSON_CreateNumber((double)labels[i]));
    }
    cJSON_AddItemToObject(root, "pixel_values", floats(px, npx));
    cJSON_AddNumberToObject(root, "micro_batch", (double)s.micro_batch);
    cJSON_AddNumberToObject(root, "seq", (double)s.seq);
    cJSON_AddNumberToObject(root, "images", (double)im.images);
    cJSON *hw = cJSON_CreateArray();
    cJSON_AddItemToArray(hw, cJSON_CreateNumber((double)im.h));
    cJSON_AddItemToArray(hw, cJSON_CreateNumber((double)im.w));
    cJSON_AddItemToObject(root, "image_size", hw);
    cJSON_AddNumberToObject(root, "tiles", (double)im.tiles);
    cJSON_AddNumberToObject(root, "tokens_per_image", (double)im.tokens);
    cJSON_AddBoolToObject(root, "tower_trained", im.tower_trained);
    cJSON_AddNumberToObject(root, "every_n", (double)s.every_n);
    cJSON_AddStringToObject(root, "precision", gckpt_precision_names[s.precision]);
    cJSON_AddBoolToObject(root, "offload", s.offload);
    cJSON_AddNumberToObject(root, "loss", res.loss);
    cJSON_AddNumberToObject(root, "allocated_peak", (double)ms.allocated_peak);
    cJSON_AddNumberToObject(root, "pinned_peak", (double)ms.pinned_peak);
    if (walked) {
        cJSON_AddNumberToObject(root, "predicted_peak", (double)pred.peak_bytes);
        cJSON_AddNumberToObject(root, "predicted_pinned", (double)pred.host_pinned_bytes);
    }
    printf("loss %.9g  allocated peak %llu  predicted %llu\n", res.loss, (unsigned long long)ms.allocated_peak,
           walked ? (unsigned long long)pred.peak_bytes : 0ULL);
    char *json = cJSON_PrintUnformatted(root);
    rc = json && gckpt_write_file_atomic(out, json, &err) ? 0 : 2;
    if (rc) fprintf(stderr, "gckpt-exec-dump-vlm: %s\n", json ? err.msg : "out of memory");
    free(json);
done:
    cJSON_Delete(root);
    gckpt_vexec_free(vx);
    be->destroy(be);
    return rc;
}
