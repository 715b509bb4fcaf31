/* A plan request from options by name: the one reader of gckpt-plan's planning options,
 * shared by the command line (main_plan.c, through getopt) and the JSON API (plan_api.c,
 * which the Python package calls). Outputs (-o, --plot, --table, -q) are the CLI's own. */
#ifndef GCKPT_PLAN_ARGS_H
#define GCKPT_PLAN_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/planner/plan.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The planning options, in the order --help lists them. */
enum {
    GCKPT_OPT_MODEL = 256, GCKPT_OPT_GPU, GCKPT_OPT_SEQ, GCKPT_OPT_MB, GCKPT_OPT_GA, GCKPT_OPT_GB,
    GCKPT_OPT_PREC, GCKPT_OPT_OPT, GCKPT_OPT_ATTN, GCKPT_OPT_EVERY, GCKPT_OPT_OFF, GCKPT_OPT_BUDGET,
    GCKPT_OPT_MARGIN, GCKPT_OPT_LONG, GCKPT_OPT_METHOD, GCKPT_OPT_RANK, GCKPT_OPT_ALPHA, GCKPT_OPT_LDROP,
    GCKPT_OPT_TARGETS, GCKPT_OPT_MTS, GCKPT_OPT_QUANT, GCKPT_OPT_DQ, GCKPT_OPT_CDT, GCKPT_OPT_QSTORE, GCKPT_OPT_GPUS,
    GCKPT_OPT_NODES, GCKPT_OPT_PAR, GCKPT_OPT_DS, GCKPT_OPT_MOE, GCKPT_OPT_FSDP_OFF, GCKPT_OPT_TARGET,
    GCKPT_OPT_REVISION, GCKPT_OPT_CODE_BASE, GCKPT_OPT_LOSS, GCKPT_OPT_DP_REPLICATE, GCKPT_OPT_DP_SHARD,
    GCKPT_OPT_TP, GCKPT_OPT_CP, GCKPT_OPT_PC, GCKPT_OPT_LIGER_KERNELS, GCKPT_OPT_IMAGES,
    GCKPT_OPT_IMAGE_SIZE, GCKPT_OPT_VISION_TOWER, GCKPT_OPT_CKPT_TOWERS, GCKPT_OPT_END
};

typedef struct {
    const char *name; /* the long option without "--" */
    bool has_arg;     /* false: a flag */
    int code;         /* GCKPT_OPT_* */
} gckpt_plan_option;

/* Every planning option; ends with a {NULL} row. */
extern const gckpt_plan_option gckpt_plan_options[];
/* The row of a name ("lora-rank"), or NULL. */
const gckpt_plan_option *gckpt_plan_option_find(const char *name);

/* The options read so far, then the request they make. */
typedef struct {
    gckpt_plan_request req;
    bool ga_set, gb_set;
    bool liger_kernels_set; /* --liger-kernels given */
    char attn_note[320]; /* a sentence when --attention is planned as another one */
    uint32_t *every;     /* --every-n values (owned; req.every_n points here after finish) */
    int n_every;
    const char *peft_opt[GCKPT_OPT_QSTORE - GCKPT_OPT_METHOD + 1]; /* LoRA / QLoRA options as given */
    uint8_t modes[GCKPT_NPAR]; /* --parallel: the modes to plan, in the order given */
    int n_modes;
    bool modes_given; /* --parallel or --deepspeed named the mode (not a mesh's default) */
    const char *ds_path;      /* --deepspeed */
    const char *fsdp_offload; /* --fsdp-offload on|off */
    /* --dp-replicate, --dp-shard, --tp, --cp as given (NULL: not), --parallelism-config FILE */
    const char *mesh_opt[GCKPT_OPT_CP - GCKPT_OPT_DP_REPLICATE + 1];
    const char *pc_path;
    const char *revision;     /* --revision (NULL: not given; a Hub id's, gckpt/planner/hub.h) */
    bool wants_output;        /* the caller writes -o or --plot: a list of modes is refused */
    gckpt_err err;            /* the one-line message of the last refusal */
} gckpt_plan_args;

/* The CLI's defaults (llama-3.1-8b on h100-sxm-80gb, amp-bf16, adamw, sdpa, ...). */
void gckpt_plan_args_init(gckpt_plan_args *a);
/* One option (value NULL for a flag). The value is kept by pointer until finish: it must
 * live as long as a. GCKPT_EXIT_OK, or GCKPT_EXIT_INPUT with a->err set. */
int gckpt_plan_args_set(gckpt_plan_args *a, const gckpt_plan_option *o, const char *value);
/* The checks across options (method and LoRA options, GPUs and modes, DeepSpeed); then
 * a->req is ready (its layout.mode the first of a->modes). GCKPT_EXIT_OK or
 * GCKPT_EXIT_INPUT with a->err set. */
int gckpt_plan_args_finish(gckpt_plan_args *a);
void gckpt_plan_args_free(gckpt_plan_args *a);

#ifdef __cplusplus
}
#endif

#endif
