/* check_layers_cases: core includes the executor and writes JSON (violations). */
#include "gckpt/core/model.h"
#include "gckpt/executor/executor.h"
struct cJSON *gckpt_model_to_json(const gckpt_model *m);
