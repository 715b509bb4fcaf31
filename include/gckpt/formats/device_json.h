/* A device profile as JSON (schema gckpt.device/1), as core's reader (gckpt_device_parse)
 * reads it back: the plan's inputs.device (planner/plan_json.c), the profile of
 * gckpt-plan --calibrate-from (planner/calibrate.c) and of gckpt-run --calibrate
 * (executor/cuda_calibrate.cu). */
#ifndef GCKPT_FORMATS_DEVICE_JSON_H
#define GCKPT_FORMATS_DEVICE_JSON_H

#include <cjson/cJSON.h>

#include "gckpt/core/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The profile as a JSON object (sources not included). The caller owns it. */
cJSON *gckpt_device_to_json(const gckpt_device *d);

#ifdef __cplusplus
}
#endif

#endif
