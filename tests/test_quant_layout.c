/* The stored layout of quantized weights (gckpt/core/quant_layout.h) against what
 * bitsandbytes stored: every quantized tensor of the LoRA/QLoRA fixtures
 * (tests/data/hf-peft: quant.tensors[].weight and .stats, measured from the loaded
 * Params4bit / Int8Params and their quant states) and every variant of the quantizer
 * reference (tests/data/quant/nf4_fp4.json: stored_bytes); and against the closed form of
 * FINDINGS R-QUANT-4 (ceil(n/2) + 4 nb + 64, or ceil(n/2) + nb + 4 ceil(nb/256) + 1,092 with double
 * quantization; int8: n + 4 out) for every linear of every shipped model. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "gckpt/core/model.h"
#include "gckpt/core/quant_layout.h"
#include "gckpt/util/jsonget.h"

static cJSON *load(const char *path)
{
    gckpt_err err = {{0}};
    char *t = gckpt_read_file(path, 1u << 30, &err);
    if (!t) fail_msg("%s", err.msg);
    cJSON *j = gckpt_json_parse(path, t, &err);
    free(t);
    if (!j) fail_msg("%s", err.msg);
    return j;
}

static uint64_t num(const cJSON *o, const char *k, const char *ctx)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("%s: %s missing", ctx, k);
    return (uint64_t)v->valuedouble;
}

static gckpt_dtype dtype_named(const char *s)
{
    static const struct { const char *name; gckpt_dtype dt; } names[] = {
        {"uint8", GCKPT_DT_U8},     {"int8", GCKPT_DT_I8},      {"bfloat16", GCKPT_DT_BF16},
        {"bf16", GCKPT_DT_BF16},    {"float16", GCKPT_DT_F16},  {"fp16", GCKPT_DT_F16},
        {"float32", GCKPT_DT_F32},  {"fp32", GCKPT_DT_F32}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) return names[i].dt;
    fail_msg("unknown dtype %s", s);
    return GCKPT_NDT;
}

static gckpt_quant_scheme scheme_named(const char *s)
{
    for (int i = 1; i < GCKPT_NQUANT; i++)
        if (!strcmp(s, gckpt_quant_names[i])) return (gckpt_quant_scheme)i;
    fail_msg("unknown quant type %s", s);
    return GCKPT_QUANT_NONE;
}

/* a stored piece {dtype, shape, bytes} of a fixture against the layout's */
static void check_piece(const cJSON *fx, const gckpt_quant_piece *p, const char *ctx)
{
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(fx, "shape");
    uint64_t numel = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) numel *= (uint64_t)d->valuedouble;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(fx, "dtype");
    if (!cJSON_IsString(dt)) fail_msg("%s: dtype missing", ctx);
    if (p->dtype != dtype_named(dt->valuestring) || p->numel != numel ||
        p->bytes != num(fx, "bytes", ctx))
        fail_msg("%s: stored %s x %llu = %llu B, layout %s x %llu = %llu B", ctx, dt->valuestring,
                 (unsigned long long)numel, (unsigned long long)num(fx, "bytes", ctx),
                 gckpt_dtype_names[p->dtype], (unsigned long long)p->numel,
                 (unsigned long long)p->bytes);
}

static int check_fixture(const char *path)
{
    cJSON *j = load(path);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "quant");
    int tensors = 0;
    if (cJSON_IsObject(q)) {
        const char *type = cJSON_GetObjectItemCaseSensitive(q, "type")->valuestring;
        gckpt_quant_scheme sc = scheme_named(type);
        const cJSON *dq = cJSON_GetObjectItemCaseSensitive(q, "double_quant");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(q, "storage");
        gckpt_dtype storage = cJSON_IsString(st) ? dtype_named(st->valuestring) : GCKPT_DT_U8;
        uint64_t wsum = 0, ssum = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(q, "tensors")) {
            char ctx[1400]; /* the fixture path (up to 1024) and a tensor name */
            snprintf(ctx, sizeof ctx, "%s: %.300s", path,
                     cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring);
            const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
            uint64_t rows = (uint64_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
            uint64_t cols = (uint64_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
            gckpt_quant_layout l;
            assert_int_equal(gckpt_quant_layout_of(sc, rows, cols, cJSON_IsTrue(dq), storage, &l), 0);
            check_piece(cJSON_GetObjectItemCaseSensitive(t, "weight"), &l.weight, ctx);
            const cJSON *stats = cJSON_GetObjectItemCaseSensitive(t, "stats");
            for (int k = 0; k < GCKPT_NQS; k++) {
                const cJSON *fx = cJSON_GetObjectItemCaseSensitive(stats, gckpt_quant_stat_names[k]);
                if (fx) check_piece(fx, &l.stat[k], ctx);
                else if (l.stat[k].numel)
                    fail_msg("%s: layout has %s, bitsandbytes stored none", ctx,
                             gckpt_quant_stat_names[k]);
            }
            assert_int_equal(cJSON_GetArraySize(stats) > 0, 1);
            if (l.stats_bytes != num(t, "stats_bytes", ctx)) fail_msg("%s: stats_bytes", ctx);
            if (t->child && cJSON_GetObjectItemCaseSensitive(t, "blocksize") &&
                cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(t, "blocksize")))
                assert_int_equal(l.block, num(t, "blocksize", ctx));
            wsum += l.weight.bytes;
            ssum += l.stats_bytes;
            tensors++;
        }
        assert_int_equal(wsum, num(q, "weight_bytes", path));
        assert_int_equal(ssum, num(q, "stats_bytes", path));
    }
    cJSON_Delete(j);
    return tensors;
}

static void hf_peft_fixtures(void **state)
{
    (void)state;
    const char *dir = GCKPT_TEST_DATA "/hf-peft";
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int files = 0, quantized = 0, tensors = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int t = check_fixture(path);
        files++;
        quantized += t > 0;
        tensors += t;
    }
    closedir(d);
    print_message("hf-peft: %d fixtures, %d quantized, %d quantized tensors match\n", files,
                  quantized, tensors);
    assert_int_equal(files, GCKPT_HF_PEFT_FIXTURES);
    assert_true(quantized > 0 && tensors >= 16 * quantized);
}

/* tests/data/quant/nf4_fp4.json: stored_bytes of each tensor and variant */
static void quantizer_reference(void **state)
{
    (void)state;
    cJSON *j = load(GCKPT_TEST_DATA "/quant/nf4_fp4.json");
    int variants = 0;
    const cJSON *t, *v;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(j, "tensors")) {
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        uint64_t rows = (uint64_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
        uint64_t cols = (uint64_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(t, "variants")) {
            const char *ctx = cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring;
            gckpt_quant_layout l;
            int dq = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "double_quant"));
            gckpt_quant_scheme sc =
                scheme_named(cJSON_GetObjectItemCaseSensitive(v, "quant_type")->valuestring);
            assert_int_equal(gckpt_quant_layout_of(sc, rows, cols, dq, GCKPT_DT_U8, &l), 0);
            const cJSON *sb = cJSON_GetObjectItemCaseSensitive(v, "stored_bytes");
            assert_int_equal(l.weight.bytes, num(sb, "packed", ctx));
            assert_int_equal(l.weight.bytes, num(v, "packed_bytes", ctx));
            assert_int_equal(l.blocks, num(v, "blocks", ctx));
            if (dq) assert_int_equal(l.nested_blocks, num(v, "nested_blocks", ctx));
            int pieces = 1;
            for (int k = 0; k < GCKPT_NQS; k++) {
                const cJSON *b = cJSON_GetObjectItemCaseSensitive(sb, gckpt_quant_stat_names[k]);
                if (b) {
                    assert_int_equal(l.stat[k].bytes, (uint64_t)b->valuedouble);
                    pieces++;
                } else
                    assert_int_equal(l.stat[k].numel, 0);
            }
            assert_int_equal(pieces, cJSON_GetArraySize(sb));
            variants++;
        }
    }
    cJSON_Delete(j);
    assert_int_equal(variants, 16); /* w130x128 and w2x40_tie: two variants each */
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* FINDINGS R-QUANT-4's closed form of one weight */
static uint64_t closed_4bit(uint64_t n, int dq)
{
    uint64_t nb = cdiv(n, 64);
    return cdiv(n, 2) + (dq ? nb + 4 * cdiv(nb, 256) + 1092 : 4 * nb + 64);
}

static void check_linear(uint64_t out, uint64_t in, uint64_t *packed, uint64_t *stats_dq,
                         uint64_t *stats)
{
    gckpt_quant_layout l;
    for (int sc = GCKPT_QUANT_NF4; sc <= GCKPT_QUANT_FP4; sc++)
        for (int dq = 0; dq < 2; dq++) {
            assert_int_equal(gckpt_quant_layout_of((gckpt_quant_scheme)sc, out, in, dq,
                                                   GCKPT_DT_U8, &l), 0);
            assert_int_equal(l.weight.bytes + l.stats_bytes, closed_4bit(out * in, dq));
            assert_int_equal(l.weight.bytes, cdiv(out * in, 2));
        }
    *packed += l.weight.bytes;
    *stats_dq += l.stats_bytes;
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, out, in, 0, GCKPT_DT_U8, &l), 0);
    *stats += l.stats_bytes;
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_INT8, out, in, 1, GCKPT_DT_U8, &l), 0);
    assert_int_equal(l.weight.bytes + l.stats_bytes, out * in + 4 * out);
}

/* every linear of every shipped model (lm_head stays unquantized, FINDINGS R-QUANT-1) */
static void shipped_models(void **state)
{
    (void)state;
    static const char *const models[] = {
        "gpt2", "gpt2-medium", "gpt2-xl", "llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b",
        "llama-3.2-3b", "mistral-7b-v0.3", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-8b"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(models[i], &m, &err)) fail_msg("%s", err.msg);
        uint64_t h = m.hidden, q = gckpt_q_dim(&m), kv = gckpt_kv_dim(&m), I = m.intermediate;
        uint64_t packed = 0, sdq = 0, s = 0;
        if (m.family == GCKPT_FAMILY_GPT2) {
            check_linear(3 * h, h, &packed, &sdq, &s);
            check_linear(h, h, &packed, &sdq, &s);
            check_linear(I, h, &packed, &sdq, &s);
            check_linear(h, I, &packed, &sdq, &s);
        } else {
            check_linear(q, h, &packed, &sdq, &s);
            check_linear(kv, h, &packed, &sdq, &s);
            check_linear(kv, h, &packed, &sdq, &s);
            check_linear(h, q, &packed, &sdq, &s);
            check_linear(I, h, &packed, &sdq, &s);
            check_linear(I, h, &packed, &sdq, &s);
            check_linear(h, I, &packed, &sdq, &s);
        }
        if (!strcmp(models[i], "llama-3.1-8b")) { /* FINDINGS R-QUANT-4's worked figures */
            assert_int_equal(packed * m.layers, 3489660928ULL);
            assert_int_equal(sdq * m.layers, 111000448ULL);
            assert_int_equal(s * m.layers, 436221952ULL);
            gckpt_quant_layout l;
            assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, q, h, 1, GCKPT_DT_U8, &l), 0);
            assert_int_equal(l.weight.bytes, 8388608);
            assert_int_equal(l.stats_bytes, 267332);
        }
    }
}

/* sizes at the edges: odd counts, partial blocks, wider storage dtypes, bad arguments */
static void edges(void **state)
{
    (void)state;
    gckpt_quant_layout l;
    memset(&l, 0x5a, sizeof l);
    gckpt_quant_layout keep = l;
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, 0, 64, 1, GCKPT_DT_U8, &l), -1);
    assert_int_equal(gckpt_quant_layout_of(GCKPT_NQUANT, 1, 64, 1, GCKPT_DT_U8, &l), -1);
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, 1, 64, 1, GCKPT_DT_NF4, &l), -1);
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_FP4, 1, 64, 1, GCKPT_DT_I64, &l), -1);
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_INT8, UINT64_MAX, 2, 0, GCKPT_DT_U8, &l), -2);
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NONE, UINT64_MAX / 2, 2, 0, GCKPT_DT_F32, &l), -2);
    /* 38 elements = 19 packed bytes: no whole number of bf16 (CPU: view fails) */
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, 2, 19, 1, GCKPT_DT_BF16, &l), -1);
    assert_memory_equal(&l, &keep, sizeof l); /* untouched on failure */
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, 2, 18, 1, GCKPT_DT_BF16, &l), 0);
    assert_int_equal(l.weight.numel, 9); /* measured: shape (9, 1), 18 bytes */
    assert_int_equal(l.weight.bytes, 18);
    /* 5 x 7 = 35: 18 packed bytes (the last low nibble padded), one block */
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, 5, 7, 0, GCKPT_DT_U8, &l), 0);
    assert_int_equal(l.weight.bytes, 18);
    assert_int_equal(l.blocks, 1);
    assert_int_equal(l.stats_bytes, 4 + 64);
    /* 257 blocks: two nested blocks */
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, 257, 64, 1, GCKPT_DT_U8, &l), 0);
    assert_int_equal(l.nested_blocks, 2);
    assert_int_equal(l.stats_bytes, 257 + 4 + 8 + 1024 + 64);
    /* fp32 storage: (n + 1) / 8 elements of 4 bytes */
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, 64, 64, 1, GCKPT_DT_F32, &l), 0);
    assert_int_equal(l.weight.numel, 512);
    assert_int_equal(l.weight.bytes, 2048);
    assert_int_equal(l.weight.dtype, GCKPT_DT_F32);
    /* the largest packed count: (UINT64_MAX + 1) / 2 without wrapping */
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NF4, UINT64_MAX, 1, 0, GCKPT_DT_U8, &l), 0);
    assert_int_equal(l.weight.numel, UINT64_MAX / 2 + 1);
    /* no quantization: the plain weight, no statistics */
    assert_int_equal(gckpt_quant_layout_of(GCKPT_QUANT_NONE, 3, 5, 1, GCKPT_DT_BF16, &l), 0);
    assert_int_equal(l.weight.bytes, 30);
    assert_int_equal(l.stats_bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hf_peft_fixtures),
        cmocka_unit_test(quantizer_reference),
        cmocka_unit_test(shipped_models),
        cmocka_unit_test(edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
