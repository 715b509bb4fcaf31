/* A plan request from options by name (include/gckpt/planner/plan_args.h): every check of
 * a planning option, for the command line and the JSON API alike. */
#include "gckpt/planner/plan_args.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/towers.h"
#include "gckpt/planner/cli_names.h"
#include "gckpt/planner/ds_config.h"
#include "gckpt/planner/hub.h"
#include "gckpt/planner/pc_config.h"
#include "gckpt/util/safe_text.h"

const gckpt_plan_option gckpt_plan_options[] = {
    {"model", true, GCKPT_OPT_MODEL}, {"revision", true, GCKPT_OPT_REVISION}, {"gpu", true, GCKPT_OPT_GPU},
    {"target", true, GCKPT_OPT_TARGET},
    {"seq", true, GCKPT_OPT_SEQ}, {"allow-long-seq", false, GCKPT_OPT_LONG},
    {"micro-batch", true, GCKPT_OPT_MB}, {"grad-accum", true, GCKPT_OPT_GA},
    {"global-batch", true, GCKPT_OPT_GB}, {"precision", true, GCKPT_OPT_PREC},
    {"optimizer", true, GCKPT_OPT_OPT}, {"attention", true, GCKPT_OPT_ATTN},
    {"code-base", true, GCKPT_OPT_CODE_BASE}, {"loss", true, GCKPT_OPT_LOSS},
    {"method", true, GCKPT_OPT_METHOD}, {"lora-rank", true, GCKPT_OPT_RANK},
    {"lora-alpha", true, GCKPT_OPT_ALPHA}, {"lora-dropout", true, GCKPT_OPT_LDROP},
    {"lora-targets", true, GCKPT_OPT_TARGETS}, {"modules-to-save", true, GCKPT_OPT_MTS},
    {"quant", true, GCKPT_OPT_QUANT}, {"double-quant", true, GCKPT_OPT_DQ},
    {"compute-dtype", true, GCKPT_OPT_CDT}, {"quant-storage", true, GCKPT_OPT_QSTORE}, {"gpus", true, GCKPT_OPT_GPUS}, {"nodes", true, GCKPT_OPT_NODES},
    {"parallel", true, GCKPT_OPT_PAR}, {"moe-imbalance", true, GCKPT_OPT_MOE},
    {"deepspeed", true, GCKPT_OPT_DS}, {"fsdp-offload", true, GCKPT_OPT_FSDP_OFF},
    {"every-n", true, GCKPT_OPT_EVERY}, {"offload", true, GCKPT_OPT_OFF}, {"budget", true, GCKPT_OPT_BUDGET},
    {"margin", true, GCKPT_OPT_MARGIN}, {"dp-replicate", true, GCKPT_OPT_DP_REPLICATE},
    {"dp-shard", true, GCKPT_OPT_DP_SHARD}, {"tp", true, GCKPT_OPT_TP}, {"cp", true, GCKPT_OPT_CP},
    {"parallelism-config", true, GCKPT_OPT_PC}, {"liger-kernels", true, GCKPT_OPT_LIGER_KERNELS},
    {"images", true, GCKPT_OPT_IMAGES}, {"image-size", true, GCKPT_OPT_IMAGE_SIZE},
    {"vision-tower", true, GCKPT_OPT_VISION_TOWER}, {"checkpoint-towers", true, GCKPT_OPT_CKPT_TOWERS},
    {NULL, false, 0}};

const gckpt_plan_option *gckpt_plan_option_find(const char *name)
{
    for (const gckpt_plan_option *o = gckpt_plan_options; name && o->name; o++)
        if (!strcmp(o->name, name)) return o;
    return NULL;
}

/* A refusal: the one-line message (arguments sanitised) into a->err. */
static int bad(gckpt_plan_args *a, const char *fmt, const char *x, const char *y)
{
    gckpt_seterr(&a->err, fmt, x, y);
    return GCKPT_EXIT_INPUT;
}

/* a finite number, the whole string */
static bool parse_real(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool parse_margin(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v)) return false;
    if (*end == '%') {
        v /= 100.0;
        end++;
    }
    if (*end || v < 0 || v >= 1) return false;
    *out = v;
    return true;
}

static int parse_every(const char *s, uint32_t **out, int *n)
{
    if (!strcmp(s, "all")) {
        *out = NULL;
        *n = 0;
        return 0;
    }
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    if (cap > 4096) return -1; /* no model has that many layers */
    uint32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    int k = 0;
    char *dup = strdup(s), *save = NULL;
    if (!dup) {
        free(v);
        return -1;
    }
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint64_t x;
        if (!strcmp(tok, "off")) x = 0;
        else if (!gckpt_parse_u64(tok, 0, 100000, &x)) {
            free(dup);
            free(v);
            return -1;
        }
        bool dupl = false;
        for (int i = 0; i < k; i++) dupl |= v[i] == x;
        if (!dupl) v[k++] = (uint32_t)x;
    }
    free(dup);
    if (!k || s[strlen(s) - 1] == ',' || s[0] == ',') {
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

/* --deepspeed FILE: its stage decides the mode (or must agree with --parallel), its limits go
 * into the layout; 0 or the exit status of a bad file or combination. */
static int apply_deepspeed(gckpt_plan_args *a)
{
    if (!a->ds_path) return 0;
    if (strlen(a->ds_path) >= sizeof a->req.deepspeed) return bad(a, "--deepspeed: path too long%s%s", "", "");
    gckpt_ds_config ds;
    if (!gckpt_ds_config_read(a->ds_path, &ds, &a->err)) return GCKPT_EXIT_INPUT;
    if (a->n_modes > 1 || (a->n_modes == 1 && a->modes[0] != ds.mode))
        return bad(a, "--parallel %s contradicts --deepspeed (zero_optimization.stage: %s)",
                   gckpt_parallel_names[a->modes[0]], gckpt_parallel_names[ds.mode]);
    if (ds.bf16 == 1 && a->req.precision != GCKPT_AMP_BF16)
        return bad(a, "--deepspeed: bf16.enabled is true; plan it with --precision amp-bf16 (the Trainer's bf16=True)%s%s", "", "");
    if (ds.bf16 == 0 && a->req.precision != GCKPT_FP32)
        return bad(a, "--deepspeed: bf16.enabled is false; plan it with --precision fp32%s%s", "", "");
    a->modes[0] = (uint8_t)ds.mode;
    a->n_modes = 1;
    a->req.layout.ds = ds.limits;
    a->req.layout.offload = ds.offload;
    snprintf(a->req.deepspeed, sizeof a->req.deepspeed, "%s", a->ds_path);
    return 0;
}

/* --parallel LIST into a->modes; 0 or the exit status of a bad value. */
static int parse_parallel(const char *arg, gckpt_plan_args *a)
{
    char buf[128];
    if (strlen(arg) >= sizeof buf) return bad(a, "--parallel: '%s' is too long%s", arg, "");
    snprintf(buf, sizeof buf, "%s", arg);
    a->n_modes = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int v = gckpt_parallel_from(tok);
        if (v < 0) return bad(a, "--parallel: unknown '%s' (none, ddp, fsdp, zero1, zero2, zero3 or a list)%s", tok, "");
        bool seen = false;
        for (int i = 0; i < a->n_modes; i++) seen |= a->modes[i] == v;
        if (!seen) a->modes[a->n_modes++] = (uint8_t)v;
    }
    if (!a->n_modes || arg[0] == ',' || arg[strlen(arg) - 1] == ',')
        return bad(a, "--parallel: '%s' is not a mode or a list like ddp,fsdp,zero3%s", arg, "");
    return 0;
}

/* --fsdp-offload on|off: FSDP2's CPUOffloadPolicy (fsdp_config's "cpu_offload"), --parallel
 * fsdp alone; 0 or the exit status of a bad value. */
static int apply_fsdp_offload(gckpt_plan_args *a)
{
    const char *v = a->fsdp_offload;
    if (!v) return 0;
    if (strcmp(v, "on") && strcmp(v, "off")) return bad(a, "--fsdp-offload: '%s' is not on or off%s", v, "");
    if (a->n_modes != 1 || a->modes[0] != GCKPT_PAR_FSDP)
        return bad(a, "--fsdp-offload needs --parallel fsdp alone (ZeRO's offload is read from --deepspeed FILE)%s%s", "", "");
    if (!strcmp(v, "on")) a->req.layout.offload = GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM;
    return 0;
}

/* --tp T --dp-replicate R [--dp-shard S]: TP x DDP (S 1) or HSDP x TP as transformers builds them from
 * DistributedConfig(tp_size=T, fsdp_size=S, dp_replicate_size=R): FSDP2 over its (dp_replicate, fsdp) mesh
 * (FINDINGS R-TP-11). accelerate refuses TP x DDP's sizes in a user's ParallelismConfig ("pure data
 * parallelism"), and the Trainer overwrites a user's dp_shard_size with R x S; it gives accelerate
 * ParallelismConfig(tp_size=T, dp_shard_size=R x S) itself, which it takes. A --parallelism-config FILE is
 * accelerate's, so it keeps accelerate's refusals. */
static int apply_tp_ddp(gckpt_plan_args *a, const gckpt_pc_sizes *pc)
{
    uint32_t world = gckpt_layout_world(&a->req.layout);
    uint64_t s = pc->dp_shard > 1 ? pc->dp_shard : 1;
    if (pc->tp * pc->dp_replicate * s != world)
        return bad(a, "--tp %s --dp-replicate %s (x --dp-shard): their product is not the processes of --gpus x --nodes "
                      "(transformers' mesh (pp, dp_replicate, fsdp, tp) must equal the world size)", a->mesh_opt[2],
                   a->mesh_opt[0]);
    if (a->modes_given)
        return bad(a, "--tp with --dp-replicate: transformers applies FSDP2 itself (DistributedConfig(dp_replicate_size)), "
                      "the Trainer wraps nothing: no --parallel%s%s", "", "");
    /* several nodes: the mesh's groups placed on them (gckpt_layout_mesh, FINDINGS R-TP-26) */
    a->req.node_gpus = a->req.layout.nodes > 1 ? a->req.layout.gpus : 0;
    a->req.tp = (uint32_t)pc->tp;
    a->req.tp_dp_replicate = (uint32_t)pc->dp_replicate;
    a->req.tp_dp_shard = s > 1 ? (uint32_t)s : 0;
    a->req.layout = (gckpt_layout){0};
    a->modes[0] = GCKPT_PAR_NONE;
    a->n_modes = 1;
    return 0;
}

/* The mesh options (accelerate's ParallelismConfig: --dp-replicate, --dp-shard, --tp, --cp or
 * --parallelism-config FILE) into the layout's dp_replicate; FSDP2 is the mode that takes a mesh
 * (no --parallel: fsdp). 0 or the exit status of a bad value. */
static int apply_mesh(gckpt_plan_args *a)
{
    static const char *const names[] = {"dp-replicate", "dp-shard", "tp", "cp"};
    bool flags = false;
    gckpt_pc_sizes pc = {0};
    uint64_t *dst[] = {&pc.dp_replicate, &pc.dp_shard, &pc.tp, &pc.cp};
    for (int k = 0; k < 4; k++) {
        if (!a->mesh_opt[k]) continue;
        flags = true;
        if (!gckpt_parse_u64(a->mesh_opt[k], 1, 1u << 20, dst[k]))
            return bad(a, "--%s: '%s' is not an integer in [1, 1048576]", names[k], a->mesh_opt[k]);
    }
    if (!flags && !a->pc_path) return 0;
    if (flags && a->pc_path)
        return bad(a, "--parallelism-config FILE excludes --dp-replicate, --dp-shard, --tp and --cp%s%s", "", "");
    if (a->pc_path && !gckpt_pc_config_read(a->pc_path, &pc, &a->err)) return GCKPT_EXIT_INPUT;
    if (!a->pc_path && pc.tp > 1 && pc.dp_replicate > 1 && pc.cp <= 1) return apply_tp_ddp(a, &pc);
    /* TP alone or TP x dp_shard: transformers' own (from_pretrained shards the model, FSDP2 included) */
    bool tp_alone = pc.tp > 1 && pc.dp_replicate <= 1 && pc.cp <= 1 && pc.sp <= 1;
    if (tp_alone && a->modes_given)
        return bad(a, "%s: tensor parallelism is transformers' own (from_pretrained shards the model, with "
                      "dp_shard it applies FSDP2 itself; the Trainer wraps nothing): no --parallel%s",
                   a->pc_path ? "--parallelism-config" : "--tp", "");
    if (!a->n_modes) {
        a->modes[0] = GCKPT_PAR_FSDP;
        a->n_modes = 1;
    }
    if (!tp_alone && (a->n_modes != 1 || !gckpt_par_mode_of(a->modes[0])->replicate_dim))
        return bad(a, "%s: accelerate's ParallelismConfig shards through FSDP2: use --parallel fsdp alone%s",
                   a->pc_path ? "--parallelism-config" : "--dp-replicate / --dp-shard", "");
    uint32_t r = 0, tp = 0, cp = 0;
    if (!gckpt_pc_cp(&pc, gckpt_layout_world(&a->req.layout), &cp, &r, &a->err)) {
        if (a->pc_path) {
            char msg[sizeof a->err.msg];
            snprintf(msg, sizeof msg, "%s", a->err.msg);
            return bad(a, "%s: %s", a->pc_path, msg);
        }
        return GCKPT_EXIT_INPUT;
    }
    if (cp) { /* CP: FSDP2 over dp_shard x cp, HSDP across r replicas, each rank at S / C (gckpt_plan_run, core/cp.h) */
        /* several nodes: the ring and FSDP2's groups timed at their placement (FINDINGS R-CP-15) */
        gckpt_plan_request_cp(&a->req, cp, r);
        return 0;
    }
    if (!gckpt_pc_check(&pc, gckpt_layout_world(&a->req.layout), &r, &tp, &a->err)) {
        if (a->pc_path) { /* the file named first */
            char msg[sizeof a->err.msg];
            snprintf(msg, sizeof msg, "%s", a->err.msg);
            return bad(a, "%s: %s", a->pc_path, msg);
        }
        return GCKPT_EXIT_INPUT;
    }
    a->req.layout.dp_replicate = r;
    if (tp) { /* one TP rank planned as one GPU of its local model (gckpt_plan_run, core/tp.h) */
        /* several nodes: each group's collectives at its placement's bandwidth (FINDINGS R-TP-26, R-TP-27) */
        a->req.node_gpus = a->req.layout.nodes > 1 ? a->req.layout.gpus : 0;
        a->req.tp = tp;
        a->req.tp_dp_shard = r ? gckpt_layout_world(&a->req.layout) / tp : 0; /* TP x FSDP */
        a->req.layout = (gckpt_layout){0};
        a->modes[0] = GCKPT_PAR_NONE;
    }
    return 0;
}

/* The layout against the number of GPUs; 0 or the exit status of a bad combination. */
static int check_layout(gckpt_plan_args *a)
{
    uint32_t world = gckpt_layout_world(&a->req.layout);
    if (world == 1 && (a->pc_path || a->mesh_opt[0] || a->mesh_opt[1] || a->mesh_opt[2] || a->mesh_opt[3]))
        return bad(a, "a ParallelismConfig mesh needs more than one GPU (--gpus N, --nodes M)%s%s", "", "");
    if (world == 1 && a->ds_path) return bad(a, "--deepspeed needs more than one GPU (--gpus N, --nodes M)%s%s", "", "");
    int rc = apply_deepspeed(a);
    if (rc) return rc;
    if (world == 1) {
        if (a->n_modes > 1 || (a->n_modes == 1 && a->modes[0] != GCKPT_PAR_NONE))
            return bad(a, "--parallel %s needs more than one GPU (--gpus N, --nodes M)%s",
                       gckpt_parallel_names[a->modes[a->n_modes - 1]], "");
        a->n_modes = 0;
        return a->fsdp_offload ? apply_fsdp_offload(a) : 0; /* refused: no fsdp on one GPU */
    }
    a->modes_given = a->n_modes > 0;
    if (!a->n_modes && (a->pc_path || a->mesh_opt[0] || a->mesh_opt[1] || a->mesh_opt[2] || a->mesh_opt[3])) {
        a->modes[0] = GCKPT_PAR_FSDP; /* a mesh is FSDP2's (apply_mesh) */
        a->n_modes = 1;
    }
    if (!a->n_modes) {
        char w[16];
        snprintf(w, sizeof w, "%u", world);
        return bad(a, "%s GPUs: choose --parallel ddp, fsdp, zero1, zero2, zero3 or a list to compare%s", w, "");
    }
    for (int i = 0; i < a->n_modes; i++)
        if (a->modes[i] == GCKPT_PAR_NONE) return bad(a, "--parallel none with several GPUs: choose ddp, fsdp, zero1, zero2 or zero3%s%s", "", "");
    if (a->n_modes > 1 && a->wants_output)
        return bad(a, "--parallel with a list compares modes; -o, --plot and --html need one mode%s%s", "", "");
    int mrc = apply_mesh(a);
    if (mrc) return mrc;
    a->req.layout.mode = a->modes[0];
    return apply_fsdp_offload(a);
}

/* The LoRA / QLoRA options over the defaults of --method (gckpt_peft_default); 0 or the
 * exit status of a bad value. Options other than --method need lora or qlora, the
 * quantization ones qlora. */
static int apply_peft_options(gckpt_plan_args *a)
{
    const char *const *o = a->peft_opt;
    static const char *const names[] = {"method", "lora-rank", "lora-alpha", "lora-dropout", "lora-targets",
                                        "modules-to-save", "quant", "double-quant", "compute-dtype", "quant-storage"};
    int method = o[0] ? gckpt_method_from(o[0]) : GCKPT_METHOD_FULL;
    if (method < 0) return bad(a, "--method: unknown '%s' (full, lora, qlora)%s", o[0], "");
    gckpt_peft *pf = &a->req.peft;
    gckpt_peft_default((gckpt_method)method, pf);
    for (int i = 1; i <= GCKPT_OPT_QSTORE - GCKPT_OPT_METHOD; i++) {
        if (!o[i]) continue;
        if (method == GCKPT_METHOD_FULL) return bad(a, "--%s needs --method lora or qlora%s", names[i], "");
        if (i >= GCKPT_OPT_QUANT - GCKPT_OPT_METHOD && method != GCKPT_METHOD_QLORA) return bad(a, "--%s needs --method qlora%s", names[i], "");
    }
    uint64_t rank = pf->rank;
    char badname[64];
    if (o[1] && !gckpt_parse_u64(o[1], 1, 65536, &rank)) return bad(a, "--lora-rank: '%s' is not an integer in [1, 65536]%s", o[1], "");
    pf->rank = (uint32_t)rank;
    pf->alpha = 2.0 * (double)rank;
    if (o[2] && (!parse_real(o[2], &pf->alpha) || pf->alpha <= 0 || pf->alpha > 1e6))
        return bad(a, "--lora-alpha: '%s' is not a number in (0, 1e6]%s", o[2], "");
    if (o[3] && (!parse_real(o[3], &pf->dropout) || pf->dropout < 0 || pf->dropout >= 1))
        return bad(a, "--lora-dropout: '%s' is not a probability in [0, 1)%s", o[3], "");
    if (o[4] && !gckpt_lora_targets_parse(o[4], &pf->targets, badname, sizeof badname)) {
        char all[256];
        gckpt_lora_all_names(all, sizeof all);
        return bad(a, "--lora-targets: '%s' is not all-linear or a linear's name (%s)", badname, all);
    }
    if (o[5] && !gckpt_mts_parse(o[5], &pf->modules_to_save, badname, sizeof badname))
        return bad(a, "--modules-to-save: '%s' is not lm_head, embed_tokens, wte or embed_in%s", badname, "");
    if (o[6]) {
        int q = -1;
        for (int k = 1; k < GCKPT_NQUANT; k++)
            if (!strcmp(o[6], gckpt_quant_names[k])) q = k;
        if (q < 0) return bad(a, "--quant: unknown '%s' (nf4, fp4, int8)%s", o[6], "");
        pf->quant = (uint8_t)q;
    }
    if (o[7] && strcmp(o[7], "on") && strcmp(o[7], "off")) return bad(a, "--double-quant: '%s' is not on or off%s", o[7], "");
    if (o[7]) pf->double_quant = !strcmp(o[7], "on");
    if (o[8]) {
        static const struct { const char *name; uint8_t dt; } cd[] = {
            {"bf16", GCKPT_DT_BF16}, {"fp16", GCKPT_DT_F16}, {"fp32", GCKPT_DT_F32}};
        int k = 0;
        while (k < 3 && strcmp(o[8], cd[k].name)) k++;
        if (k == 3) return bad(a, "--compute-dtype: unknown '%s' (bf16, fp16, fp32)%s", o[8], "");
        pf->compute_dtype = cd[k].dt;
    }
    if (o[9]) { /* bnb_4bit_quant_storage: what FSDP2 shards (bf16) or keeps whole (uint8), R-DISTPEFT-7 */
        if (strcmp(o[9], "uint8") && strcmp(o[9], "bf16")) return bad(a, "--quant-storage: unknown '%s' (uint8, bf16)%s", o[9], "");
        pf->quant_storage = !strcmp(o[9], "bf16") ? GCKPT_DT_BF16 : GCKPT_DT_U8;
    }
    if (pf->quant == GCKPT_QUANT_INT8 && (o[7] || o[8] || o[9]))
        return bad(a, "--%s applies to 4-bit quantization (nf4, fp4), not --quant int8%s",
                   o[7] ? "double-quant" : o[8] ? "compute-dtype" : "quant-storage", "");
    return 0;
}

/* Sizes, counts and lists; 0, or the exit status of a bad value. */
static int parse_number_option(int c, const char *arg, gckpt_plan_args *a)
{
    gckpt_plan_request *req = &a->req;
    switch (c) {
    case GCKPT_OPT_SEQ:
        if (!gckpt_parse_u64(arg, 1, 1u << 24, &req->seq)) return bad(a, "--seq: '%s' is not an integer in [1, 16777216]%s", arg, "");
        return 0;
    case GCKPT_OPT_MB: {
        int n = gckpt_parse_list(arg, 1, 1u << 16, req->micro_batches, GCKPT_MAX_MB);
        if (n <= 0) return bad(a, "--micro-batch: '%s' is not a list of integers in [1, 65536] (at most 64 values)%s", arg, "");
        req->n_micro = n;
        return 0;
    }
    case GCKPT_OPT_GA:
        if (!gckpt_parse_u64(arg, 1, 1u << 20, &req->grad_accum)) return bad(a, "--grad-accum: '%s' is not an integer in [1, 1048576]%s", arg, "");
        a->ga_set = true;
        return 0;
    case GCKPT_OPT_GB:
        if (!gckpt_parse_u64(arg, 1, 1u << 26, &req->global_batch)) return bad(a, "--global-batch: '%s' is not an integer in [1, 67108864]%s", arg, "");
        a->gb_set = true;
        return 0;
    case GCKPT_OPT_EVERY:
        free(a->every);
        a->every = NULL;
        if (parse_every(arg, &a->every, &a->n_every) != 0) return bad(a, "--every-n: '%s' is not 'all' or a list like off,1,2,4%s", arg, "");
        return 0;
    case GCKPT_OPT_BUDGET:
        if (!gckpt_parse_size(arg, &req->budget_bytes) || req->budget_bytes < (1u << 20))
            return bad(a, "--budget: '%s' is not a size such as 80GiB, 79GB or 512MiB (at least 1 MiB)%s", arg, "");
        return 0;
    case GCKPT_OPT_GPUS: case GCKPT_OPT_NODES: {
        uint64_t v;
        const char *name = c == GCKPT_OPT_GPUS ? "gpus" : "nodes";
        if (!gckpt_parse_u64(arg, 1, 1024, &v)) return bad(a, "--%s: '%s' is not an integer in [1, 1024]", name, arg);
        if (c == GCKPT_OPT_GPUS) req->layout.gpus = (uint32_t)v;
        else req->layout.nodes = (uint32_t)v;
        return 0;
    }
    case GCKPT_OPT_MOE: { /* checked against the model's experts by gckpt_plan_moe_check */
        char *end;
        double f = strtod(arg, &end);
        if (end == arg || *end || !(f >= 1 && f <= 65536))
            return bad(a, "--moe-imbalance: '%s' is not a factor >= 1 such as 2%s", arg, "");
        req->moe_imbalance = f;
        return 0;
    }
    default: /* GCKPT_OPT_MARGIN */
        if (!parse_margin(arg, &req->margin)) return bad(a, "--margin: '%s' is not a fraction in [0, 1) such as 5%% or 0.05%s", arg, "");
        return 0;
    }
}

/* Names and choices; 0, or the exit status of a bad value. */
static int parse_name_option(int c, const char *arg, gckpt_plan_args *a)
{
    gckpt_plan_request *req = &a->req;
    int v;
    switch (c) {
    case GCKPT_OPT_MODEL: case GCKPT_OPT_GPU:
        if (strlen(arg) >= sizeof req->model_ref) return bad(a, "--%s: name too long%s", c == GCKPT_OPT_MODEL ? "model" : "gpu", "");
        strcpy(c == GCKPT_OPT_MODEL ? req->model_ref : req->gpu_ref, arg);
        return 0;
    case GCKPT_OPT_PREC:
        if ((v = gckpt_precision_from_user(arg)) < 0) return bad(a, "--precision: unknown '%s' (%s)", arg, gckpt_precision_spellings);
        req->precision = (gckpt_precision)v;
        return 0;
    case GCKPT_OPT_OPT:
        if ((v = gckpt_optimizer_from_user(arg)) < 0) {
            char list[512];
            gckpt_optimizer_spellings(list, sizeof list, false);
            return bad(a, "--optimizer: unknown '%s' (%s)", arg, list);
        }
        req->optimizer = (gckpt_optimizer)v;
        return 0;
    case GCKPT_OPT_ATTN:
        if ((v = gckpt_attention_from_user(arg, a->attn_note, sizeof a->attn_note)) < 0)
            return bad(a, "--attention: unknown '%s' (%s)", arg, gckpt_attention_spellings);
        req->attention = (gckpt_attention)v;
        snprintf(req->attn_impl, sizeof req->attn_impl, "%s", a->attn_note[0] ? arg : "");
        return 0;
    case GCKPT_OPT_CODE_BASE:
        if ((v = gckpt_code_base_from(arg)) < 0) return bad(a, "--code-base: unknown '%s' (hf, fused)%s", arg, "");
        req->code_base = (gckpt_code_base)v;
        return 0;
    case GCKPT_OPT_OFF:
        if (!strcmp(arg, "off")) req->offload = GCKPT_OFFLOAD_OFF;
        else if (!strcmp(arg, "on")) req->offload = GCKPT_OFFLOAD_ON;
        else if (!strcmp(arg, "both")) req->offload = GCKPT_OFFLOAD_BOTH;
        else return bad(a, "--offload: unknown '%s' (off, on, both)%s", arg, "");
        return 0;
    default: /* GCKPT_OPT_TARGET */
        if ((v = gckpt_target_from(arg)) < 0) return bad(a, "--target: unknown '%s' (cpu, cuda)%s", arg, "");
        req->target = (gckpt_target)v;
        req->target_given = true;
        return 0;
    }
}

/* A vision-language model's images (checked against the model by gckpt_plan_run, plan_vlm.c);
 * 0, or the exit status of a bad value. */
static int parse_image_option(int c, const char *arg, gckpt_plan_args *a)
{
    gckpt_plan_request *req = &a->req;
    if (c == GCKPT_OPT_IMAGES) {
        if (!gckpt_parse_u64(arg, 1, 4096, &req->images)) return bad(a, "--images: '%s' is not an integer in [1, 4096]%s", arg, "");
    } else if (c == GCKPT_OPT_IMAGE_SIZE) {
        gckpt_err e;
        if (!gckpt_parse_image_size("--image-size", arg, &req->image_h, &req->image_w, &e)) return bad(a, "%s%s", e.msg, "");
    } else if (c == GCKPT_OPT_CKPT_TOWERS) {
        int v = gckpt_ckpt_towers_from(arg);
        if (v < 0) return bad(a, "--checkpoint-towers: unknown '%s' (all, text, vision)%s", arg, "");
        req->checkpoint_towers = (uint8_t)v;
        req->checkpoint_towers_given = true;
    } else if (!strcmp(arg, "trained")) {
        req->vision_tower = GCKPT_VISION_TRAINED;
    } else if (!strcmp(arg, "frozen")) {
        req->vision_tower = GCKPT_VISION_FROZEN;
    } else {
        return bad(a, "--vision-tower: unknown '%s' (trained, frozen)%s", arg, "");
    }
    return 0;
}

void gckpt_plan_args_init(gckpt_plan_args *a)
{
    *a = (gckpt_plan_args){.req = {.seq = 0 /* the model's default */, .micro_batches = {1}, .n_micro = 1,
                                   .grad_accum = 1, .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW,
                                   .attention = GCKPT_SDPA, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05}};
    snprintf(a->req.model_ref, sizeof a->req.model_ref, "llama-3.1-8b");
    snprintf(a->req.gpu_ref, sizeof a->req.gpu_ref, "h100-sxm-80gb");
}

int gckpt_plan_args_set(gckpt_plan_args *a, const gckpt_plan_option *o, const char *arg)
{
    if (o->has_arg && !arg) return bad(a, "option '--%s' needs a value%s", o->name, "");
    switch (o->code) {
    case GCKPT_OPT_SEQ: case GCKPT_OPT_MB: case GCKPT_OPT_GA: case GCKPT_OPT_GB: case GCKPT_OPT_EVERY:
    case GCKPT_OPT_BUDGET: case GCKPT_OPT_MARGIN: case GCKPT_OPT_GPUS: case GCKPT_OPT_NODES: case GCKPT_OPT_MOE:
        return parse_number_option(o->code, arg, a);
    case GCKPT_OPT_MODEL: case GCKPT_OPT_GPU: case GCKPT_OPT_PREC: case GCKPT_OPT_OPT: case GCKPT_OPT_ATTN:
    case GCKPT_OPT_CODE_BASE:
    case GCKPT_OPT_OFF: case GCKPT_OPT_TARGET:
        return parse_name_option(o->code, arg, a);
    case GCKPT_OPT_LONG: a->req.allow_long_seq = true; return 0;
    case GCKPT_OPT_LOSS: {
        int v = gckpt_loss_from(arg);
        if (v < 0) return bad(a, "--loss: unknown '%s' (hf, liger, cce)%s", arg, "");
        a->req.loss = (gckpt_loss)v;
        return 0;
    }
    case GCKPT_OPT_LIGER_KERNELS: {
        char badk[64];
        if (!gckpt_liger_kernels_parse(arg, &a->req.liger_off, badk, sizeof badk))
            return bad(a, "--liger-kernels: '%s' is not a Liger kernel (a comma list of rope, rms_norm, swiglu, "
                          "fused_linear_cross_entropy: liger_kernel_config's keys)%s", badk, "");
        a->liger_kernels_set = true;
        return 0;
    }
    case GCKPT_OPT_PAR: return parse_parallel(arg, a);
    case GCKPT_OPT_DS: a->ds_path = arg; return 0;
    case GCKPT_OPT_FSDP_OFF: a->fsdp_offload = arg; return 0;
    case GCKPT_OPT_REVISION: a->revision = arg; return 0;
    case GCKPT_OPT_DP_REPLICATE: case GCKPT_OPT_DP_SHARD: case GCKPT_OPT_TP: case GCKPT_OPT_CP:
        a->mesh_opt[o->code - GCKPT_OPT_DP_REPLICATE] = arg;
        return 0;
    case GCKPT_OPT_PC: a->pc_path = arg; return 0;
    case GCKPT_OPT_IMAGES: case GCKPT_OPT_IMAGE_SIZE: case GCKPT_OPT_VISION_TOWER: case GCKPT_OPT_CKPT_TOWERS:
        return parse_image_option(o->code, arg, a);
    default: /* GCKPT_OPT_METHOD .. GCKPT_OPT_QSTORE */
        a->peft_opt[o->code - GCKPT_OPT_METHOD] = arg;
        return 0;
    }
}

int gckpt_plan_args_finish(gckpt_plan_args *a)
{
    int rc;
    if (a->ga_set && a->gb_set) return bad(a, "--grad-accum and --global-batch exclude each other%s%s", "", "");
    if (a->liger_kernels_set && a->req.loss != GCKPT_LOSS_LIGER)
        return bad(a, "--liger-kernels needs --loss liger%s%s", "", "");
    if ((rc = apply_peft_options(a))) return rc;
    if ((rc = check_layout(a))) return rc;
    a->req.every_n = a->every;
    a->req.n_every = a->n_every;
    /* a Hub id: its config.json from the Hugging Face cache or the Hub (docs/hub.md) */
    gckpt_plan_request *q = &a->req;
    gckpt_err herr;
    if (!gckpt_model_ref_resolve(q->model_ref, a->revision, q->model_ref, sizeof q->model_ref, &q->hub, &herr))
        return bad(a, "%s%s", herr.msg, "");
    return GCKPT_EXIT_OK;
}

void gckpt_plan_args_free(gckpt_plan_args *a)
{
    free(a->every);
    a->every = NULL;
    a->req.every_n = NULL;
}
