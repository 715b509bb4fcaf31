/* check_layers_cases: core includes the executor and builds JSON (violations). */
#include "gckpt/core/model.h"
#include "gckpt/executor/executor.h"
static void *out(void) { return cJSON_CreateObject(); }
