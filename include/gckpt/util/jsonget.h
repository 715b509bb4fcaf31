/* Typed, range-checked reads of cJSON fields with one-line errors naming file and field. */
#ifndef GCKPT_JSONGET_H
#define GCKPT_JSONGET_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parse text; on failure err says "<file>: malformed JSON near ...". */
cJSON *gckpt_json_parse(const char *file, const char *text, gckpt_err *err);

/* Read the file at path (at most max bytes, gckpt_read_file's errors) and parse it
 * (gckpt_json_parse's); the caller deletes the tree. */
cJSON *gckpt_json_read(const char *path, size_t max, gckpt_err *err);

/* j as text ending in a newline: indented (pretty) or on one line; j is consumed. NULL when
 * out of memory (j is still freed). */
char *gckpt_json_text(cJSON *j, bool pretty);

/* "a string", "a number", "null", ... for messages ("nothing" for NULL). */
const char *gckpt_json_type_name(const cJSON *it);

/* Required integer field in [lo, hi]. */
bool gckpt_json_u64(const cJSON *obj, const char *file, const char *field, uint64_t lo,
                    uint64_t hi, uint64_t *out, gckpt_err *err);
/* Optional integer field: absent or null leaves *out = dflt. */
bool gckpt_json_u64_opt(const cJSON *obj, const char *file, const char *field, uint64_t lo,
                        uint64_t hi, uint64_t dflt, uint64_t *out, gckpt_err *err);
/* Required finite number in [lo, hi]. */
bool gckpt_json_num(const cJSON *obj, const char *file, const char *field, double lo, double hi,
                    double *out, gckpt_err *err);
bool gckpt_json_num_opt(const cJSON *obj, const char *file, const char *field, double lo,
                        double hi, double dflt, double *out, gckpt_err *err);
bool gckpt_json_bool_opt(const cJSON *obj, const char *file, const char *field, bool dflt,
                         bool *out, gckpt_err *err);
/* Required string; copied into out (size n). */
bool gckpt_json_str(const cJSON *obj, const char *file, const char *field, char *out, size_t n,
                    gckpt_err *err);
bool gckpt_json_str_opt(const cJSON *obj, const char *file, const char *field, const char *dflt,
                        char *out, size_t n, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
