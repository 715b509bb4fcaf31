/* A test's JSON file read whole (a fixture, a config): the test fails naming the file when it
 * cannot be read or parsed. Header-only; the including file has CMocka and cJSON included. */
#ifndef GCKPT_TESTS_JSON_FILE_H
#define GCKPT_TESTS_JSON_FILE_H

#include <stdlib.h>

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

#endif
