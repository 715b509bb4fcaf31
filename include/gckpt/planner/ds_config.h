/* A user's DeepSpeed config (gckpt-plan --deepspeed FILE): the ZeRO stage and the limits the
 * per-rank plan reads. "auto" (and an absent field) stays unset, so the planner resolves it
 * as the Trainer does (gckpt/core/parallel.h: gckpt_ds_*). What the planner does not model is
 * refused: NVMe or unpinned offload, offload under ZeRO-1/2, fp16. */
#ifndef GCKPT_DS_CONFIG_H
#define GCKPT_DS_CONFIG_H

#include <stdbool.h>

#include "gckpt/core/setting.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int mode;             /* GCKPT_PAR_ZERO1..3 from zero_optimization.stage */
    int bf16;             /* bf16.enabled: 1 true, 0 false, -1 "auto" or absent */
    gckpt_ds_limits limits;
    uint8_t offload;      /* GCKPT_OFFLOAD_* from offload_optimizer / offload_param device "cpu" */
} gckpt_ds_config;

/* Read path; false with one line in err naming the file and the field. */
bool gckpt_ds_config_read(const char *path, gckpt_ds_config *out, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
