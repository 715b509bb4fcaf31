/* The checkpointed layers of each tower (gckpt/core/towers.h) against every fixture of
 * tools/hf_probe/vlm_cases.py (tests/data/hf-vlm): the layers transformers 5.24 enabled
 * checkpointing on, by tower, as the probe read them off the modules; and two closed
 * forms of the rule (a tower's parity follows the towers before it). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include "gckpt/core/towers.h"
#include "gckpt/util/util.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif
#ifndef GCKPT_HF_VLM_FIXTURES
#error GCKPT_HF_VLM_FIXTURES must be the count of tests/data/hf-vlm
#endif

static const char *const tower_names[] = {"vision", "text"};

/* Qwen2.5-VL-7B's 32 vision blocks before 28 text layers, and a 31-block tower: every_n
 * 2 checkpoints the even text layers after 32 blocks, the odd ones after 31. */
static void closed_forms(void **state)
{
    (void)state;
    uint64_t out[64];
    uint64_t qwen[] = {32, 28}, odd[] = {31, 28};
    assert_int_equal(gckpt_tower_checkpointed(2, GCKPT_CKPT_TOWERS_ALL, qwen, 0, out, 64), 16);
    assert_int_equal(gckpt_tower_checkpointed(2, GCKPT_CKPT_TOWERS_ALL, qwen, 1, out, 64), 14);
    for (int i = 0; i < 14; i++) assert_int_equal(out[i], 2 * i);
    assert_int_equal(gckpt_tower_checkpointed(2, GCKPT_CKPT_TOWERS_ALL, odd, 1, out, 64), 14);
    for (int i = 0; i < 14; i++) assert_int_equal(out[i], 2 * i + 1);
    /* every_n 3 after 32 blocks: module indices 33, 36, ... are text layers 1, 4, ..., 25 */
    assert_int_equal(gckpt_tower_checkpointed(3, GCKPT_CKPT_TOWERS_ALL, qwen, 1, out, 64), 9);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[8], 25);
    assert_int_equal(gckpt_tower_module_index(qwen, 1, 5), 37);
    /* off, and a tower of no checkpointing layers (mllama's vision encoder) before the text */
    uint64_t mllama[] = {0, 40};
    assert_int_equal(gckpt_tower_checkpointed(0, GCKPT_CKPT_TOWERS_ALL, qwen, 1, out, 64), 0);
    assert_int_equal(gckpt_tower_checkpointed(1, GCKPT_CKPT_TOWERS_ALL, mllama, 0, out, 64), 0);
    assert_int_equal(gckpt_tower_checkpointed(4, GCKPT_CKPT_TOWERS_ALL, mllama, 1, out, 1), 10); /* counted beyond max */
    assert_int_equal(out[0], 0);
}

/* --checkpoint-towers text | vision: every_n from the chosen tower's layer 0 whatever the
 * other tower's depth, the other's layers plain; the layers the sweep counts */
static void chosen_tower(void **state)
{
    (void)state;
    uint64_t out[64];
    uint64_t qwen[] = {32, 28}, odd[] = {31, 28};
    assert_int_equal(gckpt_tower_checkpointed(2, GCKPT_CKPT_TOWERS_TEXT, odd, 1, out, 64), 14);
    for (int i = 0; i < 14; i++) assert_int_equal(out[i], 2 * i); /* the even ones, not the odd ones */
    assert_int_equal(gckpt_tower_checkpointed(3, GCKPT_CKPT_TOWERS_TEXT, qwen, 1, out, 64), 10); /* 0, 3, ..., 27 */
    assert_int_equal(out[9], 27);
    assert_int_equal(gckpt_tower_checkpointed(1, GCKPT_CKPT_TOWERS_TEXT, qwen, 0, out, 64), 0);
    assert_int_equal(gckpt_tower_checkpointed(3, GCKPT_CKPT_TOWERS_VISION, odd, 0, out, 64), 11); /* 0, 3, ..., 30 */
    assert_int_equal(out[10], 30);
    assert_int_equal(gckpt_tower_checkpointed(1, GCKPT_CKPT_TOWERS_VISION, qwen, 1, out, 64), 0);
    assert_int_equal(gckpt_tower_checkpointed(0, GCKPT_CKPT_TOWERS_VISION, qwen, 0, out, 64), 0);
    assert_int_equal(gckpt_towers_counted(GCKPT_CKPT_TOWERS_ALL, qwen), 60);
    assert_int_equal(gckpt_towers_counted(GCKPT_CKPT_TOWERS_TEXT, qwen), 28);
    assert_int_equal(gckpt_towers_counted(GCKPT_CKPT_TOWERS_VISION, qwen), 32);
    assert_int_equal(gckpt_ckpt_towers_from("vision"), GCKPT_CKPT_TOWERS_VISION);
    assert_int_equal(gckpt_ckpt_towers_from("Text"), -1);
}

static void fail_in(const char *path, const char *what)
{
    fail_msg("%s: %s", path, what);
}

static size_t check_fixture(const char *path)
{
    gckpt_err err;
    char *text = gckpt_read_file(path, 1u << 26, &err);
    if (!text) fail_in(path, err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_in(path, "not JSON");
    const cJSON *setting = cJSON_GetObjectItemCaseSensitive(j, "setting");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(setting, "every_n_layers");
    const cJSON *tw = cJSON_GetObjectItemCaseSensitive(j, "towers");
    const cJSON *global = cJSON_GetObjectItemCaseSensitive(j, "checkpointed_layers");
    if (!cJSON_IsNumber(en) || !cJSON_IsObject(tw) || !cJSON_IsArray(global)) fail_in(path, "no towers");
    uint64_t towers[2];
    for (size_t t = 0; t < 2; t++) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tw, tower_names[t]),
                                                          "layers");
        if (!cJSON_IsNumber(n)) fail_in(path, "a tower without its layer count");
        towers[t] = (uint64_t)n->valuedouble;
    }
    size_t g = 0, checked = 0;
    for (size_t t = 0; t < 2; t++) {
        uint64_t want[256];
        size_t n = gckpt_tower_checkpointed((uint32_t)en->valuedouble, GCKPT_CKPT_TOWERS_ALL, towers, t, want, 256);
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tw, tower_names[t]),
                                                            "checkpointed");
        if ((size_t)cJSON_GetArraySize(got) != n)
            fail_msg("%s: tower %s: %d checkpointed measured, %zu planned", path, tower_names[t],
                     cJSON_GetArraySize(got), n);
        for (size_t i = 0; i < n; i++) {
            const cJSON *v = cJSON_GetArrayItem(got, (int)i);
            if ((uint64_t)v->valuedouble != want[i])
                fail_msg("%s: tower %s: checkpointed layer %llu measured, %llu planned", path, tower_names[t],
                         (unsigned long long)v->valuedouble, (unsigned long long)want[i]);
            /* the same layer among the module-order indices the probe recorded */
            const cJSON *gv = cJSON_GetArrayItem(global, (int)g++);
            if (!gv || (uint64_t)gv->valuedouble != gckpt_tower_module_index(towers, t, want[i]))
                fail_msg("%s: module-order index of %s layer %llu", path, tower_names[t],
                         (unsigned long long)want[i]);
            checked++;
        }
    }
    if ((size_t)cJSON_GetArraySize(global) != g) fail_in(path, "checkpointed layers outside the towers");
    cJSON_Delete(j);
    return checked;
}

static void fixtures(void **state)
{
    (void)state;
    const char *dir = GCKPT_TEST_DATA "/hf-vlm";
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    struct dirent *e;
    size_t files = 0, layers = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        layers += check_fixture(path);
        files++;
    }
    closedir(d);
    assert_int_equal(files, GCKPT_HF_VLM_FIXTURES); /* a lost or stray fixture */
    assert_true(layers > files);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(closed_forms), cmocka_unit_test(chosen_tower),
        cmocka_unit_test(fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
