/* A test's JSON file read whole (a fixture, a config): the test fails naming the file when it
 * cannot be read or parsed. Header-only; the including file has CMocka and cJSON included. */
#ifndef GCKPT_TESTS_JSON_FILE_H
#define GCKPT_TESTS_JSON_FILE_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/util/util.h"

static inline cJSON *read_json(const char *path)
{
    gckpt_err err;
    char *text = gckpt_read_file(path, 1u << 26, &err);
    if (!text) fail_msg("%s: %s", path, err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s: not JSON", path);
    return j;
}

/* an object's member (NULL when absent) */
static inline const cJSON *at(const cJSON *j, const char *k) { return cJSON_GetObjectItemCaseSensitive(j, k); }

/* each(path, file name, user) for every dir/PREFIX*.json (readdir order); the test fails when the
 * folder cannot be opened */
static inline void each_json_file(const char *dir, const char *prefix,
                                  void (*each)(const char *path, const char *name, void *user), void *user)
{
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) || l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        each(path, e->d_name, user);
    }
    closedir(d);
}

/* A probe fixture's tensor list: the measured bytes of the non-parameter tensors in `list`
 * whose module starts with prefix (a module path: "vision_tower.encoder.layers.1" takes
 * neither layers.10 nor post_layernorm). */
static inline uint64_t measured(const cJSON *list, const char *prefix)
{
    uint64_t sum = 0;
    size_t n = strlen(prefix);
    const cJSON *t;
    cJSON_ArrayForEach(t, list)
    {
        const cJSON *mod = at(t, "module");
        if (cJSON_IsTrue(at(t, "param")) || !cJSON_IsString(mod)) continue;
        const char *m = mod->valuestring;
        if (n && (strncmp(m, prefix, n) || (m[n] && m[n] != '.'))) continue; /* "": every module */
        sum += (uint64_t)at(t, "bytes")->valuedouble;
    }
    return sum;
}

#endif
