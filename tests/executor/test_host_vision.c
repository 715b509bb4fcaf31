/* The host backend's ViT embedding kernels (executor/host_vision.c) against transformers'
 * CLIPVisionEmbeddings (tests/executor/data/hf-vision-kernels.json, written by
 * tools/hf_probe/vision_kernels.py; FINDINGS R-EXEC-5): the recipe's own ops of a tiny
 * llava's tower (gckpt_vision_recipe_build) run forward and backward on the inputs the probe
 * drew from the same counter-based generator, fp32; and the pixel source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/prim.h"
#include "gckpt/core/vision.h"
#include "gckpt/executor/exec_rng.h"
#include "gckpt/util/util.h"
#include "host_anyres.h"
#include "host_blas.h"
#include "host_ops.h"

#define IMAGES 2

typedef struct {
    gckpt_vlm v;
    gckpt_model tower;
    gckpt_recipe r;
    cJSON *hf;
    uint64_t positions;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    gckpt_err err = {0};
    char *cfg = gckpt_read_file(GCKPT_TEST_DATA "/tiny-llava-p4.json", 1u << 20, &err);
    char *hf = gckpt_read_file(GCKPT_TEST_DATA "/hf-vision-kernels.json", 1u << 22, &err);
    if (!f || !cfg || !hf || !gckpt_vlm_parse("tiny-llava-p4.json", cfg, &f->v, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    gckpt_vision_tower_model(&f->v, &f->tower);
    if (!gckpt_vision_recipe_build(&f->v, &f->tower, GCKPT_FP32, GCKPT_TARGET_CUDA, GCKPT_TOWER_TRAINED, &f->r, &err) ||
        !host_blas_ready(&err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    f->hf = cJSON_Parse(hf);
    f->positions = gckpt_vision_positions(&f->v);
    free(cfg);
    free(hf);
    *state = f;
    return f->hf ? 0 : -1;
}

static int teardown(void **state)
{
    fx *f = *state;
    cJSON_Delete(f->hf);
    free(f);
    return 0;
}

static const gckpt_op *op_named(const gckpt_recipe *r, const char *name, int prim)
{
    for (int i = 0; i < r->nop; i++)
        if (!strcmp(r->op[i].name, name) && r->op[i].prim == prim) return &r->op[i];
    fail_msg("the recipe has no %s op %s", gckpt_prim_name(prim), name);
    return NULL;
}

/* an fp32 buffer of rows x cols */
static gckpt_xt buf(float *p, uint64_t rows, uint64_t cols)
{
    return (gckpt_xt){p, rows * cols, GCKPT_DT_F32, cols, rows};
}

static float *drawn(const fx *f, const char *name, uint64_t n)
{
    const cJSON *keys = cJSON_GetObjectItem(f->hf, "keys"), *scales = cJSON_GetObjectItem(f->hf, "scales");
    uint64_t key = (uint64_t)cJSON_GetObjectItem(keys, name)->valuedouble;
    float scale = (float)cJSON_GetObjectItem(scales, name)->valuedouble;
    float *v = malloc(sizeof *v * n);
    for (uint64_t i = 0; i < n; i++) v[i] = gckpt_rng_uniform(key, i, scale);
    return v;
}

/* max |ours - theirs| relative to max |theirs| over the fixture's array `name` (of group) */
static double rel_diff(const fx *f, const char *group, const char *name, const float *ours, uint64_t n)
{
    const cJSON *g = group ? cJSON_GetObjectItem(cJSON_GetObjectItem(f->hf, "grad"), name)
                           : cJSON_GetObjectItem(f->hf, name);
    assert_non_null(g);
    assert_int_equal((uint64_t)cJSON_GetArraySize(g), n);
    double worst = 0, scale = 0;
    uint64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, g) {
        worst = fmax(worst, fabs(ours[i++] - e->valuedouble));
        scale = fmax(scale, fabs(e->valuedouble));
    }
    double rel = scale > 0 ? worst / scale : worst;
    printf("  %-20s %4llu values, max |diff| / max |ref| = %.3g\n", name, (unsigned long long)n, rel);
    return rel;
}

static gckpt_xcall call_of(const fx *f, const gckpt_op *op)
{
    return (gckpt_xcall){.r = &f->r, .op = op, .m = &f->tower, .b = IMAGES, .s = f->positions};
}

static void run(const host_kernel_fn fn, const gckpt_xcall *c)
{
    assert_non_null(fn);
    gckpt_err err = {0};
    if (fn(c, &err) != GCKPT_XS_OK) fail_msg("%s", err.msg);
}

/* patch conv -> class-token cat -> + positions -> rows 1.. (llava's selection), forward and
 * backward, next to CLIPVisionEmbeddings and autograd */
static void clip_embeddings_match_transformers(void **state)
{
    fx *f = *state;
    const gckpt_vision *vc = &f->v.vision;
    uint64_t D = vc->hidden, C = vc->channels, P = vc->patch, H = vc->image_size, N = (H / P) * (H / P);
    uint64_t S = f->positions, K = C * P * P, npix = IMAGES * C * H * H;
    assert_int_equal(S, N + 1);
    const gckpt_op *conv = op_named(&f->r, "patch_embedding", GCKPT_P_PATCH_CONV);
    const gckpt_op *cat = op_named(&f->r, "embeddings.cat", GCKPT_P_CAT_CLS);
    const gckpt_op *add = op_named(&f->r, "embeddings.add_pos", GCKPT_P_ADD);
    const gckpt_op *sel = op_named(&f->r, "selected_image_feature", GCKPT_P_ROWS_OF);
    float *pix = drawn(f, "pixels", npix), *w = drawn(f, "weight", D * K), *cls = drawn(f, "cls", D);
    float *pos = drawn(f, "pos", S * D), *g_emb = drawn(f, "g_emb", IMAGES * S * D);
    float *g_sel = drawn(f, "g_sel", IMAGES * N * D);
    float *patches = calloc(IMAGES * N * D, sizeof(float)), *cat_out = calloc(IMAGES * S * D, sizeof(float));
    float *emb = calloc(IMAGES * S * D, sizeof(float)), *sel_out = calloc(IMAGES * N * D, sizeof(float));
    float *g_rows = calloc(IMAGES * S * D, sizeof(float)), *g_cat = calloc(IMAGES * S * D, sizeof(float));
    float *g_pos = calloc(S * D, sizeof(float)), *g_cls = calloc(D, sizeof(float));
    float *g_patches = calloc(IMAGES * N * D, sizeof(float)), *g_w = calloc(D * K, sizeof(float));
    float *g_pix = calloc(npix, sizeof(float));

    gckpt_xcall c = call_of(f, conv);
    c.in[0] = buf(pix, IMAGES, C * H * H);
    c.in[1] = buf(w, D, K);
    c.out[0] = buf(patches, IMAGES * N, D);
    run(host_kernel_of(GCKPT_P_PATCH_CONV)->fwd, &c);
    gckpt_xcall k = call_of(f, cat);
    k.in[0] = buf(cls, 1, D);
    k.in[1] = buf(patches, IMAGES * N, D);
    k.out[0] = buf(cat_out, IMAGES * S, D);
    run(host_kernel_of(GCKPT_P_CAT_CLS)->fwd, &k);
    gckpt_xcall a = call_of(f, add); /* position_embedding(arange): the table's rows in order */
    a.in[0] = buf(cat_out, IMAGES * S, D);
    a.in[1] = buf(pos, S, D);
    a.out[0] = buf(emb, IMAGES * S, D);
    run(host_kernel_of(GCKPT_P_ADD)->fwd, &a);
    gckpt_xcall s = call_of(f, sel);
    s.in[0] = buf(emb, IMAGES * S, D);
    s.out[0] = buf(sel_out, IMAGES * N, D);
    run(host_kernel_of(GCKPT_P_ROWS_OF)->fwd, &s);

    /* backward: the selection's gradient into its rows, the embeddings' added */
    s.gout = buf(g_sel, IMAGES * N, D);
    s.gin[0] = buf(g_rows, IMAGES * S, D);
    run(host_kernel_of(GCKPT_P_ROWS_OF)->bwd, &s);
    for (uint64_t i = 0; i < IMAGES * S * D; i++) g_emb[i] += g_rows[i];
    a.gout = buf(g_emb, IMAGES * S, D);
    a.gin[0] = buf(g_cat, IMAGES * S, D);
    a.gin[1] = buf(g_pos, S, D);
    run(host_kernel_of(GCKPT_P_ADD)->bwd, &a);
    k.gout = buf(g_cat, IMAGES * S, D);
    k.gin[0] = buf(g_cls, 1, D);
    k.gin[1] = buf(g_patches, IMAGES * N, D);
    run(host_kernel_of(GCKPT_P_CAT_CLS)->bwd, &k);
    c.gout = buf(g_patches, IMAGES * N, D);
    c.gin[0] = buf(g_pix, IMAGES, C * H * H);
    c.gin[1] = buf(g_w, D, K);
    run(host_kernel_of(GCKPT_P_PATCH_CONV)->bwd, &c);

    double worst = 0;
    worst = fmax(worst, rel_diff(f, NULL, "embeddings", emb, IMAGES * S * D));
    worst = fmax(worst, rel_diff(f, NULL, "selected", sel_out, IMAGES * N * D));
    worst = fmax(worst, rel_diff(f, "grad", "patch_weight", g_w, D * K));
    worst = fmax(worst, rel_diff(f, "grad", "class_embedding", g_cls, D));
    worst = fmax(worst, rel_diff(f, "grad", "position_embedding", g_pos, S * D));
    worst = fmax(worst, rel_diff(f, "grad", "pixel_values", g_pix, npix));
    if (worst > 1e-6) fail_msg("the kernels differ from transformers' CLIPVisionEmbeddings by %.3g (relative)", worst);
    float *all[] = {pix, w, cls, pos, g_emb, g_sel, patches, cat_out, emb, sel_out, g_rows, g_cat, g_pos, g_cls,
                    g_patches, g_w, g_pix};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

/* A pixel count that is no batch of square images of the conv's patches is refused by name. */
static void patch_conv_refuses_a_wrong_geometry(void **state)
{
    fx *f = *state;
    const gckpt_op *conv = op_named(&f->r, "patch_embedding", GCKPT_P_PATCH_CONV);
    uint64_t D = conv->out_f, K = conv->in_f;
    float *pix = calloc(IMAGES * K * 4 + 3, sizeof(float)), *w = calloc(D * K, sizeof(float));
    float *out = calloc(IMAGES * 4 * D, sizeof(float));
    gckpt_xcall c = call_of(f, conv);
    c.in[0] = buf(pix, 1, IMAGES * K * 4 + 3);
    c.in[1] = buf(w, D, K);
    c.out[0] = buf(out, IMAGES * 4, D);
    gckpt_err err = {0};
    assert_non_null(host_kernel_of(GCKPT_P_PATCH_CONV)->fwd);
    assert_int_equal(host_kernel_of(GCKPT_P_PATCH_CONV)->fwd(&c, &err), GCKPT_XS_ERROR);
    assert_non_null(strstr(err.msg, "patch_embedding"));
    free(pix);
    free(w);
    free(out);
}

/* The pixel source: uniform in [-1, 1) from the call's stream, another stream other pixels. */
static void pixel_source_draws_from_the_stream(void **state)
{
    fx *f = *state;
    const gckpt_op *src = NULL;
    for (int i = 0; i < f->r.nop && !src; i++)
        if (f->r.op[i].nin == 0 && f->r.op[i].source == GCKPT_SRC_PIXELS) src = &f->r.op[i];
    assert_non_null(src);
    enum { n = 384 };
    float a[n], b[n];
    gckpt_xcall c = call_of(f, src);
    gckpt_err err = {0};
    c.rng = 77;
    c.out[0] = buf(a, 1, n);
    if (host_source(GCKPT_SRC_PIXELS, &c, NULL, &err) != GCKPT_XS_OK) fail_msg("%s", err.msg);
    c.rng = 78;
    c.out[0] = buf(b, 1, n);
    if (host_source(GCKPT_SRC_PIXELS, &c, NULL, &err) != GCKPT_XS_OK) fail_msg("%s", err.msg);
    int same = 0;
    for (int i = 0; i < n; i++) {
        assert_true(a[i] >= -1.0f && a[i] < 1.0f);
        assert_true(a[i] == gckpt_rng_uniform(77, (uint64_t)i, 1.0f));
        same += a[i] == b[i];
    }
    assert_true(same < n / 16);
}

static float *floats_of(const cJSON *c, const char *name, uint64_t n)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, name);
    if ((uint64_t)cJSON_GetArraySize(a) != n)
        fail_msg("%s: %d values, not %llu", name, cJSON_GetArraySize(a), (unsigned long long)n);
    float *v = malloc(sizeof *v * n + 1);
    uint64_t i = 0;
    for (const cJSON *it = a->child; it; it = it->next) v[i++] = (float)it->valuedouble;
    return v;
}

static uint64_t u64_of(const cJSON *c, const char *name)
{
    return (uint64_t)cJSON_GetObjectItemCaseSensitive(c, name)->valuedouble;
}

/* LLaVA-NeXT's pack_image_features and its backward (host_anyres.c over gckpt_anyres_pack's
 * map) against transformers' own under autograd (hf-anyres-pack.json,
 * tools/hf_probe/anyres_pack.py, R-VLM-37): two images per case, the packed rows and the
 * features' gradient copies (equal), the newline's gradient a sum (within 1e-6) */
static void anyres_pack_matches_transformers(void **state)
{
    (void)state;
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/hf-anyres-pack.json", 1u << 22, &err);
    assert_non_null(text);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    int ncase = 0;
    for (const cJSON *c = cJSON_GetObjectItemCaseSensitive(doc, "cases")->child; c; c = c->next, ncase++) {
        char cfg[1024];
        char *pins = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "image_grid_pinpoints"));
        snprintf(cfg, sizeof cfg,
                 "{\"model_type\": \"llava_next\", \"vision_config\": {\"image_size\": %llu, \"patch_size\": %llu}, "
                 "\"image_grid_pinpoints\": %s, \"text_config\": {\"hidden_size\": 64, \"intermediate_size\": 96, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 211}}",
                 (unsigned long long)u64_of(c, "image_size"), (unsigned long long)u64_of(c, "patch_size"), pins);
        free(pins);
        gckpt_vlm v;
        if (!gckpt_vlm_parse("hf-anyres-pack.json", cfg, &v, &err)) fail_msg("%s", err.msg);
        uint64_t images = u64_of(c, "images"), W = u64_of(c, "width"),
                 side = u64_of(c, "image_size") / u64_of(c, "patch_size");
        uint64_t stride = u64_of(c, "tiles") * side * side, n = 0;
        int64_t src[256];
        assert_true(gckpt_anyres_pack(&v, u64_of(c, "h"), u64_of(c, "w"), src, 256, &n));
        float *feat = floats_of(c, "feat", images * stride * W), *nl = floats_of(c, "newline", W),
              *g = floats_of(c, "g", images * n * W), *want = floats_of(c, "packed", images * n * W),
              *gfw = floats_of(c, "feat_grad", images * stride * W), *gnw = floats_of(c, "newline_grad", W);
        float *out = malloc(sizeof *out * images * n * W), *gf = malloc(sizeof *gf * images * stride * W), gn[64] = {0};
        host_anyres_pack(feat, images, stride, nl, src, n, W, out);
        host_anyres_unpack(g, images, stride, src, n, W, gf, gn);
        assert_memory_equal(out, want, sizeof *out * images * n * W);
        assert_memory_equal(gf, gfw, sizeof *gf * images * stride * W);
        double big = 0, diff = 0;
        for (uint64_t k = 0; k < W; k++) {
            big = fmax(big, fabs(gnw[k]));
            diff = fmax(diff, fabs((double)gn[k] - gnw[k]));
        }
        printf("%llux%llu: %llu packed rows per image; the newline's gradient within %.2g of its largest %.3g\n",
               (unsigned long long)u64_of(c, "h"), (unsigned long long)u64_of(c, "w"), (unsigned long long)n, diff,
               big);
        assert_true(big > 0 && diff <= 1e-6 * big);
        free(feat), free(nl), free(g), free(want), free(gfw), free(gnw), free(out), free(gf);
    }
    assert_int_equal(ncase, 3);
    cJSON_Delete(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(clip_embeddings_match_transformers),
        cmocka_unit_test(patch_conv_refuses_a_wrong_geometry),
        cmocka_unit_test(pixel_source_draws_from_the_stream),
        cmocka_unit_test(anyres_pack_matches_transformers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
