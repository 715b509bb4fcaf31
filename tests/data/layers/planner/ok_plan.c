/* check_layers_cases: the planner includes core, formats and util (allowed). */
#include "gckpt/core/model.h"
#include "gckpt/formats/device_json.h"
#include "gckpt/util/util.h"
