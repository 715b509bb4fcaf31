/* A LLaVA or LLaVA-NeXT step on a backend (gckpt/executor/exec_vlm.h): the core's composed step
 * (gckpt_vlm_step_new decides the order, the walk reads the same schedule) performed by two
 * interpreters, the text model's and the tower's, each segment by its side's; the bridge
 * segments' buffers by the tower's (they are in its numbering). What LlavaModel.forward
 * computes itself (transformers 5.24 modeling_llava.py) is done here on the data:
 *  - before the text layers' first segment, masked_scatter: the projector's output rows
 *    (image_features, the tower's grad_seed) into the rows of the text embeddings' output
 *    where input_ids is the image token, in order (the embeddings' buffer stands for
 *    masked_scatter's result, as the simulator counts it);
 *  - when the tower's seed gradient is allocated (its head backward), MaskedScatterBackward:
 *    those rows of the text embeddings' gradient become the projector's output gradient
 *    (masked_select) and are zeroed for the text embedding's backward (masked_fill).
 * LLaVA-NeXT's pack_image_features (modeling_llava_next.py) sits between the projector and
 * masked_scatter: its rows are the map gckpt_anyres_pack gives for the plan's image size
 * (each image's tile features unpadded, image_newline closing each row; host_anyres.c), its
 * backward scatters the packed rows' gradient back (zero where unpadded away) and sums the
 * newline rows into image_newline's .grad, which the step allocates in the bridge's
 * backward of the first micro-step (core/vlm_step.c) and this file zeroes there.
 * The data go through the backend's download / upload (the host backend's memcpy). */
#include "gckpt/executor/exec_vlm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/families.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/vision.h"
#include "host_anyres.h"
#include "interp.h"

struct gckpt_vexec {
    gckpt_backend *be;
    gckpt_vlm v;
    gckpt_vlm_step *st;
    gckpt_vlm_step_info info;
    gckpt_vlm_images im;
    gckpt_exec *t, *x;          /* the text side, the tower's */
    void *dead;                 /* the weights of the tower's tail (post_layernorm), the buffers and step
                                 * counters: no op reads them */
    uint64_t dead_bytes;
    bool keep_pixels;
    float *pixels;
    uint64_t npixels;
    int emb_op, feat_op, pix_op; /* the text embedding's op, the projector's last, the pixels' source */
    int64_t *ids;               /* the micro-step's ids, labels (the text side's) */
    /* LLaVA-NeXT: each image's packed rows (gckpt_anyres_pack: a tower feature row, -1 the
     * newline), their count, the tower's feature rows per image (tiles x patches) */
    int64_t *src;
    uint64_t nsrc, stride;
    float *pk;                  /* the micro-step's packed rows (fp32), made before the
                                 * projector's output goes (it goes once the pack is made) */
    uint64_t npk;
    bool packed;
};

bool gckpt_vexec_supported(const gckpt_backend *be, const gckpt_vlm *v, const gckpt_setting *s, gckpt_err *err)
{
    const gckpt_vlm_type *row = gckpt_vlm_type_of(v->model_type);
    /* the table's word; the bridge is llava's and llava_next's */
    if (!row || !row->host || (v->vision.projector != GCKPT_PROJ_LLAVA && v->vision.projector != GCKPT_PROJ_LLAVA_NEXT)) {
        gckpt_seterr(err, "model_type \"%s\" (%s) is planned, not executed by gckpt-run (not yet: %s)", v->model_type,
                     row ? row->family : v->model_type, row ? row->missing : "its step");
        return false;
    }
    const char *why = be && strcmp(be->name, "host") ? "its step runs on the host backend only (--backend host): the "
                                                       "tower's kernels on CUDA are unverified"
                      : s->precision != GCKPT_FP32 && s->precision != GCKPT_AMP_BF16
                          ? "its step is executed in fp32 and amp-bf16 only (pure bf16 and fp16 unverified)"
                      : gckpt_layout_multi(&s->layout) ? "its step is executed on one GPU only"
                      /* the bridge runs the text embedding's backward, which a frozen one has not */
                      : gckpt_peft_on(&s->peft) ? "its LoRA and QLoRA steps are planned, not executed by gckpt-run"
                                                : NULL;
    if (!why && !gckpt_exec_model_ok(&v->text, err)) return false;
    if (why) gckpt_seterr(err, "model_type \"%s\": %s", v->model_type, why);
    return !why;
}

static int producer_of(const gckpt_recipe *r, int t) { return t >= 0 ? gckpt_recipe_producer(r, t) : -1; }

/* LLaVA-NeXT: the packed rows of an image of the plan's size, which must be the plan's
 * tiles and tokens (the image processor's: one base tile and the best pinpoint's). */
static bool pack_map(gckpt_vexec *vx, gckpt_err *err)
{
    const gckpt_vlm *v = &vx->v;
    uint64_t h = vx->im.h, w = vx->im.w, side = v->vision.image_size / v->vision.patch, n = 0;
    if (!h || !w) {
        gckpt_seterr(err, "model_type \"%s\": its step needs the images' size (anyres tiles)", v->model_type);
        return false;
    }
    uint64_t tiles = gckpt_image_tiles(v, h, w), cap = tiles * side * side + side * side + 1;
    if (tiles != vx->im.tiles) {
        gckpt_seterr(err, "%llu tiles per image planned, an image of %llux%llu has %llu", (unsigned long long)vx->im.tiles,
                     (unsigned long long)h, (unsigned long long)w, (unsigned long long)tiles);
        return false;
    }
    if (!(vx->src = malloc(sizeof *vx->src * cap))) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    if (!gckpt_anyres_pack(v, h, w, vx->src, cap, &n) || n != vx->im.tokens) {
        gckpt_seterr(err, "%llu tokens per image planned, pack_image_features makes %llu of an image of %llux%llu",
                     (unsigned long long)vx->im.tokens, (unsigned long long)n, (unsigned long long)h,
                     (unsigned long long)w);
        return false;
    }
    vx->nsrc = n;
    vx->stride = tiles * side * side;
    return true;
}

gckpt_vexec *gckpt_vexec_new(gckpt_backend *be, const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s,
                             const gckpt_vlm_images *im, const gckpt_exec_opts *o, gckpt_err *err)
{
    if (!gckpt_vexec_supported(be, v, s, err)) return NULL;
    if (s->offload && !s->every_n) {
        gckpt_seterr(err, "offload needs gradient checkpointing (every_n_layers > 0)");
        return NULL;
    }
    gckpt_vexec *vx = calloc(1, sizeof *vx);
    if (!vx) {
        gckpt_seterr(err, "out of memory");
        return NULL;
    }
    vx->be = be;
    vx->v = *v;
    vx->im = *im;
    vx->st = gckpt_vlm_step_new(v, d, s, GCKPT_TARGET_CUDA, im, &vx->info, err);
    if (!vx->st) goto fail;
    gckpt_vlm_step *st = vx->st;
    if (st->image_rows * s->micro_batch == 0 || st->image_rows > s->seq) {
        gckpt_seterr(err, "%llu image tokens per sample do not fit a sequence of %llu",
                     (unsigned long long)st->image_rows, (unsigned long long)s->seq);
        goto fail;
    }
    gckpt_exec_opts vo = o ? *o : (gckpt_exec_opts){0};
    vo.seed ^= 0x715105ULL; /* the tower's weights and pixels from a stream of their own */
    vx->t = exec_new_part(be, &st->text, NULL, d, s, o, &st->tr, &st->sched, st->seg_kind, 1u << GCKPT_VSEG_TEXT, 0,
                          err);
    if (!vx->t) goto fail;
    /* the tower: every layer runs, those after the feature layer forward only */
    vx->x = exec_new_part(be, &st->tower, &st->tower_live, d, &st->vset, &vo, &st->vr, &st->sched, st->seg_kind,
                          1u << GCKPT_VSEG_VISION | 1u << GCKPT_VSEG_BRIDGE, st->vision_ids, err);
    if (!vx->x) goto fail;
    vx->emb_op = producer_of(&st->tr, st->tr.embed_out);
    vx->feat_op = producer_of(&st->vr, st->vr.grad_seed);
    vx->pix_op = -1;
    for (int i = 0; i < st->vr.nop && vx->pix_op < 0; i++)
        if (st->vr.op[i].nin == 0 && st->vr.op[i].source == GCKPT_SRC_PIXELS) vx->pix_op = i;
    if (vx->emb_op < 0 || vx->feat_op < 0 || vx->pix_op < 0) {
        gckpt_seterr(err, "the VLM step's recipes have no text embedding, image features or pixels");
        goto fail;
    }
    if (v->vision.projector == GCKPT_PROJ_LLAVA_NEXT && !pack_map(vx, err)) goto fail;
    return vx;
fail:
    gckpt_vexec_free(vx);
    return NULL;
}

const gckpt_vlm_step *gckpt_vexec_plan(const gckpt_vexec *vx) { return vx->st; }
gckpt_exec *gckpt_vexec_side(gckpt_vexec *vx, bool vision) { return vision ? vx->x : vx->t; }
void gckpt_vexec_keep_pixels(gckpt_vexec *vx, bool keep) { vx->keep_pixels = keep; }

void gckpt_vexec_batch(const gckpt_vexec *vx, const int64_t **ids, const int64_t **labels, const float **pixels,
                       uint64_t *npixels)
{
    gckpt_exec_batch(vx->t, ids, labels);
    *pixels = vx->pixels;
    *npixels = vx->npixels;
}

gckpt_xstatus gckpt_vexec_setup(gckpt_vexec *vx, gckpt_err *err)
{
    gckpt_xstatus rc = gckpt_exec_setup(vx->t, err);
    if (rc == GCKPT_XS_OK) rc = gckpt_exec_setup(vx->x, err);
    /* the whole tower's weights less the live layers' (the core's count): the forward-only
     * layers' the tower's side holds, the rest (post_layernorm) one buffer standing for them */
    int64_t rest = vx->st->dead_weights;
    for (size_t i = 0; i < vx->x->nparams; i++)
        if (vx->x->params[i].fwd_only) rest -= (int64_t)vx->x->params[i].spec->weight.bytes;
    if (rest < 0) return exec_fail(err, "setup: the tower's forward-only layers take more than its unused weights");
    /* + the model's buffers and AdamW's step counters the core's start holds: held, never read */
    rest += vx->st->kept_buffers + vx->st->kept_steps;
    vx->dead_bytes = (uint64_t)rest;
    if (rc == GCKPT_XS_OK && rest > 0) {
        rc = vx->be->alloc(vx->be, GCKPT_MEM_DEVICE, vx->dead_bytes, &vx->dead);
        if (rc != GCKPT_XS_OK) return exec_be_fail(vx->x, rc, "the weights of the tower's tail", err);
    }
    return rc;
}

/* ---- the bridge ----------------------------------------------------------------------- */

/* The instance an event of op `op` of side x names in the part's segments of that side:
 * a forward's output 0 or a backward's output gradient. */
static uint32_t part_inst(const gckpt_exec *x, const exec_part *part, int op, uint8_t kind)
{
    for (size_t si = part->begin; si < part->end; si++) {
        if (!exec_owns(x, si)) continue;
        const gckpt_sched_seg *g = &x->sched.seg[si];
        for (size_t i = g->begin; i < g->end; i++) {
            const gckpt_event *e = &x->sched.ev[i];
            if (e->kind == kind && e->op == op) return kind == GCKPT_EV_BWD ? e->arg.bwd.grad_out : e->arg.fwd.out[0];
        }
    }
    return GCKPT_NOINST;
}

/* An instance's values in fp32 on the host (down) or back (up). */
static gckpt_xstatus move(gckpt_exec *x, uint32_t id, float *host, bool down, gckpt_err *err)
{
    if (!exec_live(x, id)) return exec_fail(err, "the VLM bridge: instance %u is not allocated", id);
    gckpt_xt t = exec_inst_view(x, id);
    unsigned sz = gckpt_dtype_size((gckpt_dtype)t.dt);
    void *raw = malloc(t.n * sz + 1);
    if (!raw) return exec_fail(err, "out of memory");
    gckpt_xt h = {raw, t.n, t.dt};
    gckpt_xstatus rc;
    if (down) {
        rc = x->be->download(x->be, raw, t.p, t.n * sz);
        if (rc == GCKPT_XS_OK) exec_convert_to_f32(&h, host);
    } else {
        exec_convert_from_f32(&h, host);
        rc = x->be->upload(x->be, t.p, raw, t.n * sz);
    }
    free(raw);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "the VLM bridge", err);
}

/* v rounded to t's dtype (t.n elements; t.p unused) and back to fp32 */
static gckpt_xstatus round_through(const gckpt_xt *t, float *v, gckpt_err *err)
{
    if (t->dt == GCKPT_DT_F32) return GCKPT_XS_OK;
    void *raw = malloc(t->n * gckpt_dtype_size((gckpt_dtype)t->dt) + 1);
    if (!raw) return exec_fail(err, "out of memory");
    gckpt_xt h = {raw, t->n, t->dt};
    exec_convert_from_f32(&h, v);
    exec_convert_to_f32(&h, v);
    free(raw);
    return GCKPT_XS_OK;
}

/* The pack's backward: g (the packed rows' gradient) into gfeat, the newline rows summed
 * (fp32, as ToCopyBackward casts them before the expand's sum) into image_newline's .grad. */
static gckpt_xstatus newline_grad(gckpt_vexec *vx, const float *g, float *gfeat, uint64_t images, float *sum,
                                  gckpt_err *err)
{
    gckpt_exec *x = vx->x;
    uint64_t W = vx->v.text.hidden;
    memset(sum, 0, sizeof *sum * W);
    host_anyres_unpack(g, images, vx->stride, vx->src, vx->nsrc, W, gfeat, sum);
    param_t *p = exec_param(x, vx->st->vr.bridge_param, 0);
    if (!p || !p->spec->trainable) return GCKPT_XS_OK; /* frozen (LoRA on the text model): no gradient */
    if (!exec_live(x, p->grad) || x->inst[p->grad].n != W)
        return exec_fail(err, "the VLM bridge: image_newline's .grad is not allocated as the step says");
    float *acc = malloc(sizeof *acc * W + 1);
    if (!acc) return exec_fail(err, "out of memory");
    gckpt_xstatus rc = move(x, p->grad, acc, true, err);
    for (uint64_t c = 0; rc == GCKPT_XS_OK && c < W; c++) acc[c] += sum[c];
    if (rc == GCKPT_XS_OK) rc = move(x, p->grad, acc, false, err);
    free(acc);
    return rc;
}

/* pack_image_features on the micro-step's projector output `feat` (LLaVA-NeXT): the
 * packed rows, image_newline cast to the features' dtype (.to in the cat), into vx->pk */
static gckpt_xstatus pack(gckpt_vexec *vx, uint32_t feat, gckpt_err *err)
{
    gckpt_exec *x = vx->x;
    uint64_t W = vx->v.text.hidden;
    if (!exec_live(x, feat) || x->inst[feat].n % (vx->stride * W))
        return exec_fail(err, "the VLM bridge: the image features are not allocated as the step says");
    uint64_t images = x->inst[feat].n / (vx->stride * W), n = images * vx->nsrc * W;
    float *ff = malloc(sizeof *ff * x->inst[feat].n + 1), *nl = malloc(sizeof *nl * W + 1);
    if (n != vx->npk) {
        free(vx->pk);
        vx->npk = 0;
        if ((vx->pk = malloc(sizeof *vx->pk * n + 1))) vx->npk = n;
    }
    gckpt_xstatus rc = ff && nl && vx->pk ? move(x, feat, ff, true, err) : exec_fail(err, "out of memory");
    if (rc == GCKPT_XS_OK) rc = gckpt_exec_read_param(x, 0, vx->st->vr.bridge_param, nl, err);
    if (rc == GCKPT_XS_OK) {
        gckpt_xt f = {NULL, W, x->inst[feat].dt};
        rc = round_through(&f, nl, err);
        if (rc == GCKPT_XS_OK) host_anyres_pack(ff, images, vx->stride, nl, vx->src, vx->nsrc, W, vx->pk);
        vx->packed = rc == GCKPT_XS_OK;
    }
    free(ff);
    free(nl);
    return rc;
}

/* masked_scatter (forward) or its backward: the rows of the text side's instance `text`
 * ([b s, width]) at the image tokens, in order, and the tower's `feat` ([image rows, width]) */
static gckpt_xstatus bridge(gckpt_vexec *vx, uint32_t text, uint32_t feat, bool backward, gckpt_err *err)
{
    gckpt_exec *t = vx->t, *x = vx->x;
    uint64_t W = vx->v.text.hidden, BS = t->set.micro_batch * t->set.seq;
    if (!backward && vx->src && !vx->packed) { /* the projector's output is still there: pack it now */
        gckpt_xstatus prc = pack(vx, feat, err);
        if (prc != GCKPT_XS_OK) return prc;
    }
    if (!exec_live(t, text) || (!exec_live(x, feat) && (backward || !vx->src)) || t->inst[text].n != BS * W ||
        (exec_live(x, feat) && x->inst[feat].n % W))
        return exec_fail(err, "the VLM bridge: the text embeddings or the image features are not allocated as the "
                              "step says");
    uint64_t frows = vx->src && !backward ? vx->npk / W / vx->nsrc * vx->stride : x->inst[feat].n / W;
    uint64_t images = vx->src ? frows / vx->stride : 0;
    if (vx->src && frows != images * vx->stride)
        return exec_fail(err, "the VLM bridge: %llu feature rows are not whole images' tiles", (unsigned long long)frows);
    /* the rows masked_scatter moves: the features, or LLaVA-NeXT's packed rows */
    uint64_t rows = vx->src ? images * vx->nsrc : frows, k = 0;
    float *te = malloc(sizeof *te * BS * W + 1), *fe = malloc(sizeof *fe * rows * W + 1);
    float *ff = vx->src ? malloc(sizeof *ff * frows * W + 1) : fe, *nl = vx->src ? malloc(sizeof *nl * W + 1) : NULL;
    gckpt_xstatus rc = te && fe && ff && (nl || !vx->src) ? GCKPT_XS_OK : exec_fail(err, "out of memory");
    if (rc == GCKPT_XS_OK) rc = move(t, text, te, true, err);
    if (rc == GCKPT_XS_OK && !backward && !vx->src) rc = move(x, feat, fe, true, err);
    if (rc == GCKPT_XS_OK && !backward && vx->src) {
        if (!vx->packed || vx->npk != rows * W)
            rc = exec_fail(err, "the VLM bridge: pack_image_features' rows were not made");
        else
            memcpy(fe, vx->pk, sizeof *fe * rows * W);
    }
    for (uint64_t p = 0; rc == GCKPT_XS_OK && p < BS; p++) {
        if (t->ids[p] != vx->v.vision.image_token) continue;
        if (k == rows) {
            rc = exec_fail(err, "the VLM bridge: more image tokens than the %llu image features",
                           (unsigned long long)rows);
            break;
        }
        if (backward) { /* masked_select into the features' gradient, masked_fill for the text's */
            memcpy(fe + k * W, te + p * W, sizeof *fe * W);
            memset(te + p * W, 0, sizeof *te * W);
        } else {
            memcpy(te + p * W, fe + k * W, sizeof *te * W);
        }
        k++;
    }
    if (rc == GCKPT_XS_OK && k != rows)
        rc = exec_fail(err, "the VLM bridge: %llu image tokens and %llu image features", (unsigned long long)k,
                       (unsigned long long)rows);
    if (rc == GCKPT_XS_OK) rc = move(t, text, te, false, err);
    if (rc == GCKPT_XS_OK && backward && vx->src) { /* the pack's backward, in the features' dtype */
        gckpt_xt f = {NULL, rows * W, x->inst[feat].dt};
        rc = round_through(&f, fe, err);
        if (rc == GCKPT_XS_OK) rc = newline_grad(vx, fe, ff, images, nl, err);
    }
    if (rc == GCKPT_XS_OK && backward) rc = move(x, feat, ff, false, err);
    free(te);
    free(fe);
    if (vx->src) free(ff);
    free(nl);
    return rc;
}

/* The batch: the text side's random ids with each sample's images' placeholder runs (image k
 * at 2 + k (tokens + 3), as the probe's make_batch places them), no image token elsewhere;
 * labels the next id, -100 on a placeholder (the collators' masking). */
static void vlm_data(gckpt_vexec *vx, uint64_t micro)
{
    gckpt_exec *t = vx->t;
    exec_make_data(t, micro);
    exec_make_data(vx->x, micro);
    uint64_t B = t->set.micro_batch, S = t->set.seq, V = vx->v.text.vocab, images = vx->im.images, per = vx->im.tokens;
    int64_t img = vx->v.vision.image_token;
    for (uint64_t i = 0; i < B * S; i++)
        if (t->ids[i] == img) t->ids[i] = (int64_t)(((uint64_t)img + 1) % V);
    for (uint64_t b = 0; b < B; b++)
        for (uint64_t k = 0; k < images; k++)
            for (uint64_t j = 0; j < per; j++) {
                uint64_t at = 2 + k * (per + 3) + j;
                if (at < S) t->ids[b * S + at] = img;
            }
    for (uint64_t b = 0; b < B; b++)
        for (uint64_t i = 0; i < S; i++) {
            int64_t next = i + 1 < S ? t->ids[b * S + i + 1] : -100;
            t->labels[b * S + i] = next == img ? -100 : next;
        }
}

static gckpt_xstatus zero_inst(gckpt_exec *x, uint32_t id, gckpt_err *err)
{
    float *z = calloc(x->inst[id].n + 1, sizeof *z);
    if (!z) return exec_fail(err, "out of memory");
    gckpt_xstatus rc = move(x, id, z, false, err);
    free(z);
    return rc;
}

/* the pixels of the micro-step, kept for gckpt_vexec_batch */
static gckpt_xstatus keep_pixels(gckpt_vexec *vx, uint32_t id, gckpt_err *err)
{
    uint64_t n = vx->x->inst[id].n;
    if (n != vx->npixels) {
        free(vx->pixels);
        vx->npixels = 0;
        if (!(vx->pixels = malloc(sizeof *vx->pixels * n + 1))) return exec_fail(err, "out of memory");
        vx->npixels = n;
    }
    return move(vx->x, id, vx->pixels, true, err);
}

/* One micro-step (or the optimizer part: part == &t->opt): every segment by its side, the
 * bridge at its places. */
static gckpt_xstatus run_part(gckpt_vexec *vx, const exec_part *part, uint64_t micro, bool update, size_t *count,
                              gckpt_err *err)
{
    gckpt_exec *t = vx->t, *x = vx->x;
    bool in_micro = part != &t->opt;
    t->gen++;
    x->gen++;
    uint32_t emb = GCKPT_NOINST, gemb = GCKPT_NOINST, feat = GCKPT_NOINST, pix = GCKPT_NOINST;
    if (in_micro) {
        vlm_data(vx, micro);
        emb = part_inst(t, part, vx->emb_op, GCKPT_EV_FWD);
        gemb = part_inst(t, part, vx->emb_op, GCKPT_EV_BWD);
        feat = part_inst(x, part, vx->feat_op, GCKPT_EV_FWD);
        pix = part_inst(x, part, vx->pix_op, GCKPT_EV_FWD);
        vx->packed = false;
        if (emb == GCKPT_NOINST || gemb == GCKPT_NOINST || feat == GCKPT_NOINST)
            return exec_fail(err, "the VLM step's micro-step has no text embedding or image features");
    }
    bool scattered = !in_micro;
    exec_site w = {.micro = micro, .update = update};
    for (size_t si = part->begin; si < part->end; si++) {
        uint8_t kind = vx->st->seg_kind[si];
        gckpt_exec *X = kind == GCKPT_VSEG_TEXT ? t : x;
        const gckpt_sched_seg *g = &X->sched.seg[si];
        w.seg = &g->seg;
        gckpt_xstatus rc;
        if (!scattered && kind == GCKPT_VSEG_TEXT && g->seg.part == GCKPT_PART_LAYER) {
            if ((rc = bridge(vx, emb, feat, false, err)) != GCKPT_XS_OK) return rc;
            scattered = true;
        }
        for (size_t i = g->begin; i < g->end; i++) {
            if (X->o.stop && *X->o.stop) {
                exec_where(X, w.seg, i, w.at, sizeof w.at);
                gckpt_seterr(err, "interrupted before %s", w.at);
                return GCKPT_XS_INTERRUPTED;
            }
            const gckpt_event *e = &X->sched.ev[i];
            w.index = i;
            /* LLaVA-NeXT: the projector's output goes once the pack is made (core/vlm_step.c) */
            if (vx->src && in_micro && X == x && e->kind == GCKPT_EV_FREE && e->inst == feat && !vx->packed &&
                (rc = pack(vx, feat, err)) != GCKPT_XS_OK)
                return rc;
            if ((rc = exec_event(X, e, &w, err)) != GCKPT_XS_OK) return rc;
            (*count)++;
            if (X != x || !in_micro) continue;
            if (vx->keep_pixels && e->kind == GCKPT_EV_FWD && e->op == vx->pix_op &&
                (rc = keep_pixels(vx, pix, err)) != GCKPT_XS_OK)
                return rc;
            /* image_newline's .grad, made by the pack's backward (the bridge's below adds to it) */
            if (vx->src && e->kind == GCKPT_EV_ALLOC && e->comp == GCKPT_C_GRADS && e->tensor == vx->st->vr.bridge_param &&
                (rc = zero_inst(x, e->inst, err)) != GCKPT_XS_OK)
                return rc;
            /* the tower's seed gradient: the projector output's, from masked_scatter's backward */
            if (e->kind == GCKPT_EV_ALLOC && e->tensor == vx->st->vr.grad_seed && e->comp == GCKPT_C_BACKWARD &&
                (rc = bridge(vx, gemb, e->inst, true, err)) != GCKPT_XS_OK)
                return rc;
        }
    }
    gckpt_xstatus rc = exec_check_clean(t, in_micro, err);
    return rc == GCKPT_XS_OK ? exec_check_clean(x, in_micro, err) : rc;
}

gckpt_xstatus gckpt_vexec_step(gckpt_vexec *vx, const gckpt_step_opts *o, gckpt_step_result *res, gckpt_err *err)
{
    gckpt_step_opts dflt = {.update = true};
    if (!o) o = &dflt;
    memset(res, 0, sizeof *res);
    gckpt_exec *t = vx->t, *x = vx->x;
    if (!t->setup_done || !x->setup_done) return exec_fail(err, "step: the persistent state is not set up");
    gckpt_backend *be = vx->be;
    gckpt_xstatus rc;
    double t1 = 0, t2 = 0;
    if ((rc = be->timer_start(be)) != GCKPT_XS_OK) return exec_be_fail(t, rc, "timer", err);
    uint64_t k = 0;
    for (int p = 0; p < t->nmicro; p++)
        for (uint64_t r = 0; r < t->micro[p].repeat; r++, k++)
            if ((rc = run_part(vx, &t->micro[p], k, o->update, &res->events, err)) != GCKPT_XS_OK) return rc;
    if ((rc = be->timer_stop(be, &t1)) != GCKPT_XS_OK) return exec_be_fail(t, rc, "timer", err);
    if (o->checksum) {
        uint64_t h[2];
        double ss[2];
        if ((rc = exec_checksum(t, &h[0], &ss[0], err)) != GCKPT_XS_OK ||
            (rc = exec_checksum(x, &h[1], &ss[1], err)) != GCKPT_XS_OK)
            return rc;
        res->grad_hash = h[0] + h[1];
        res->grad_norm = sqrt(ss[0] + ss[1]);
    }
    if (o->on_grads) {
        t->in_grads = x->in_grads = true;
        o->on_grads(t, o->user);
        t->in_grads = x->in_grads = false;
    }
    if ((rc = be->timer_start(be)) != GCKPT_XS_OK) return exec_be_fail(t, rc, "timer", err);
    if ((rc = run_part(vx, &t->opt, 0, o->update, &res->events, err)) != GCKPT_XS_OK) return rc;
    if ((rc = be->timer_stop(be, &t2)) != GCKPT_XS_OK) return exec_be_fail(t, rc, "timer", err);
    res->seconds = t1 + t2;
    int nrec = t->set.grad_accum < GCKPT_MAX_RECORDS ? (int)t->set.grad_accum : GCKPT_MAX_RECORDS;
    float rec[GCKPT_MAX_RECORDS];
    if ((rc = be->read_records(be, rec, nrec)) != GCKPT_XS_OK) return exec_be_fail(t, rc, "reading the loss", err);
    double s = 0;
    for (int i = 0; i < nrec; i++) s += res->micro_loss[i] = rec[i];
    res->nmicro = nrec;
    res->loss = s / nrec;
    if (o->update) {
        t->step++;
        x->step++;
    }
    return GCKPT_XS_OK;
}

void gckpt_vexec_release_all(gckpt_vexec *vx)
{
    if (!vx) return;
    gckpt_exec_release_all(vx->t);
    gckpt_exec_release_all(vx->x);
    if (vx->dead) vx->be->release(vx->be, GCKPT_MEM_DEVICE, vx->dead, vx->dead_bytes);
    vx->dead = NULL;
}

void gckpt_vexec_free(gckpt_vexec *vx)
{
    if (!vx) return;
    gckpt_vexec_release_all(vx);
    gckpt_exec_free(vx->t);
    gckpt_exec_free(vx->x);
    gckpt_vlm_step_free(vx->st);
    free(vx->pixels);
    free(vx->src);
    free(vx->pk);
    free(vx);
}
