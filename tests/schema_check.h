/* A small JSON Schema (draft 2020-12 subset) validator for the tests: type, const,
 * enum, required, properties, additionalProperties: false, items, minItems,
 * minimum, maximum and local $ref ("#/$defs/NAME"). Enough for reports/schema. */
#ifndef GCKPT_SCHEMA_CHECK_H
#define GCKPT_SCHEMA_CHECK_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* true if doc validates; otherwise why (a path and a reason) is written to err. */
bool schema_check(const cJSON *schema, const cJSON *doc, char *err, size_t n);
/* The same against the schema's $defs/def (a record of a JSON Lines report). */
bool schema_check_def(const cJSON *schema, const char *def, const cJSON *doc, char *err, size_t n);

#endif
