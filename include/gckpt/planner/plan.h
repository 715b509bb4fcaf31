/* A plan: the sweep of every requested setting, what fits, the Pareto frontier and the
 * recommendation; plus its JSON form (schema gckpt.plan/2) and human outputs. */
#ifndef GCKPT_PLAN_H
#define GCKPT_PLAN_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "gckpt/util/atomic_file.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/plan_format.h"
#include "gckpt/core/vlm_step.h"
#include "gckpt/planner/hub.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Entries x layers of a sweep: its evaluation work and the size of its plan grow with
 * this product (every entry walks every layer and lists its checkpointed layers). The
 * limit is about 2 s of evaluation and a few hundred MB of JSON plan. */
#define GCKPT_MAX_LAYER_EVALS ((uint64_t)1 << 27)

typedef struct {
    /* what to plan */
    char model_ref[512], gpu_ref[512];
    uint64_t seq;
    uint64_t micro_batches[GCKPT_MAX_MB];
    int n_micro;
    uint64_t grad_accum;   /* used when global_batch == 0 */
    uint64_t global_batch; /* 0: not given */
    gckpt_precision precision;
    gckpt_optimizer optimizer;
    gckpt_attention attention;
    gckpt_code_base code_base; /* --code-base: whose time parameters (default hf) */
    gckpt_loss loss;       /* the head's loss (--loss; zeroed: HF's) */
    uint8_t liger_off;     /* --liger-kernels: the Liger kernels left out (gckpt_setting.liger_off) */
    uint32_t *every_n;     /* values to sweep (0 = off); NULL: off and 1..L */
    int n_every;
    gckpt_offload_sel offload;
    uint64_t budget_bytes; /* 0: the device's memory */
    double margin;         /* fraction of the budget kept free */
    bool allow_long_seq;   /* plan a seq beyond the model's max_position_embeddings (RoPE) */
    char attn_impl[24];    /* attn_implementation to print ("": the attention's name) */
    gckpt_peft peft;       /* fine-tuning method (zeroed: full; gckpt/core/peft.h) */
    gckpt_layout layout;   /* GPUs and the parallel mode (zeroed: one GPU; gckpt/core/parallel.h) */
    /* --tp T (or tp_size in --parallelism-config) alone: transformers' tensor parallelism over T GPUs
     * (from_pretrained(distributed_config=DistributedConfig(tp_size=T)), gckpt/core/tp.h). One TP
     * rank is planned: layout is then one GPU and model the rank's local model. 0: none. */
    uint32_t tp;
    /* --tp T --dp-shard S (or tp_size and dp_shard_size in --parallelism-config): TP x FSDP,
     * transformers' DistributedConfig(tp_size=T, fsdp_size=S), T x S = the GPUs (FINDINGS R-TP-8).
     * TP rank 0 of fsdp rank 0 is planned: its local model under FSDP2 over S ranks
     * (gckpt_tp_fsdp_layout, the runs' setting; layout stays one GPU). 0: none. */
    uint32_t tp_dp_shard;
    /* --tp T --dp-replicate R (no --dp-shard): TP x DDP, transformers' DistributedConfig(tp_size=T,
     * dp_replicate_size=R), T x R = the GPUs: FSDP2 over its (dp_replicate, fsdp) mesh of one shard rank
     * (gckpt_tp_hsdp_layout, FINDINGS R-TP-11). 0: none. */
    uint32_t tp_dp_replicate;
    /* Under --tp over several nodes (--nodes M > 1): the GPUs per node (--gpus), layout being one
     * TP rank's; it places the run's groups on nodes (gckpt_layout.node_gpus, gckpt/core/mesh.h).
     * 0: one node. */
    uint32_t node_gpus;
    /* --cp C (or cp_size in --parallelism-config), alone or with --dp-shard: accelerate's context
     * parallelism, FSDP2 over every GPU (dp_shard x cp), each rank at seq / C tokens (plan_cp.c,
     * gckpt/core/cp.h). seq stays the whole sequence. 0: none. */
    uint32_t cp;
    char deepspeed[512];   /* --deepspeed FILE as given ("": none; the snippet prints the Trainer's "auto" config) */
    bool target_given;     /* --target given: plan `target`, else the device profile's kind */
    gckpt_target target;
    double moe_imbalance;  /* --moe-imbalance F: the most-loaded expert receives F x the balanced
                            * share (0: not given, balanced routing; plan_moe.c) */
    gckpt_hub_source hub;  /* a Hub id's config.json (model_ref is then its cached path; id "": not
                            * from the Hub; gckpt/planner/hub.h) */
    /* a vision-language model (plan_vlm.c; refused for a text model when given): --images N per
     * sample (0: not given, 1); --image-size HxW (0: not given, the vision config's image_size);
     * --vision-tower (GCKPT_VISION_*); the batch's pixel_values dtype (gckpt_dtype, 0: the image
     * processor's float32; the API's only, for a collator that casts, as the probe's bf16 cases) */
    uint64_t images, image_h, image_w;
    uint8_t vision_tower, pixel_dtype;
    /* --checkpoint-towers: which towers every_n_layers covers (gckpt_ckpt_towers, gckpt/core/towers.h;
     * 0: all, transformers' own count over both); checkpoint_towers_given: the option was given */
    uint8_t checkpoint_towers;
    bool checkpoint_towers_given;
} gckpt_plan_request;

/* --vision-tower: not given (the model as loaded trains it), trained, frozen */
enum { GCKPT_VISION_DEFAULT, GCKPT_VISION_TRAINED, GCKPT_VISION_FROZEN };

/* The default sequence: min(4096, the model's limit); a request with seq 0 gets it. */
#define GCKPT_DEFAULT_SEQ 4096
typedef struct {
    gckpt_model model;
    gckpt_model tp_full; /* under req.tp: the whole model (model is then TP rank 0's local model) */
    gckpt_device dev;
    gckpt_target target;     /* whose kernels are planned: req.target if given, else dev.kind */
    char *model_config_text; /* config.json as read, embedded in the plan */
    gckpt_plan_request req;
    uint64_t budget_bytes, usable_bytes;
    gckpt_entry *entries;
    size_t n;
    long recommended; /* index or -1 */
    long fastest;     /* the fastest entry that fits (index or -1); recommended unless the
                       * ratio band ties it with one of more headroom (gckpt_plan_tied) */
    long smallest;    /* index of the smallest device peak */
    gckpt_recipe *recipe; /* of the request's precision and attention */
    gckpt_params *params; /* its parameter state table under the request's optimizer */
    gckpt_warning warnings[GCKPT_MAX_WARNINGS];
    size_t n_warnings;
    /* a vision-language model whose step is simulated (plan_vlm.c; NULL: a text model): model
     * is its text model; the images fed per sample; the recommended (else the smallest) entry's
     * step figures (both towers' checkpointed layers) */
    struct gckpt_vlm *vlm;
    gckpt_vlm_images *images;
    gckpt_vlm_step_info *vlm_info;
} gckpt_plan;

/* A VLM (plan_vlm.c): whether config text `text` is one whose step gckpt-plan simulates (its
 * gckpt_vlm_types row's `walked`); read it into p (p->vlm, p->model its text model, the images
 * of the request); refuse the image options for a text model; sweep one split's entries with
 * gckpt_vlm_walk; fill p->vlm_info for the chosen entry; the header's line; the JSON's inputs. */
bool gckpt_plan_is_vlm(const char *text);
bool gckpt_plan_vlm_load(gckpt_plan *p, const char *path, const char *text, gckpt_err *err);
bool gckpt_plan_vlm_options_ok(const gckpt_plan *p, gckpt_err *err);
bool gckpt_plan_vlm_evaluate(gckpt_plan *p, uint64_t micro_batch, uint64_t grad_accum, gckpt_err *err);
bool gckpt_plan_vlm_chosen(gckpt_plan *p, gckpt_err *err);
/* the VLM's parameters (text model, tower, projector); the layers every_n checkpoints in both towers */
uint64_t gckpt_plan_vlm_params(const gckpt_plan *p);
/* the table's ckpt cell: the layers every_n checkpoints in each tower, "vision+text" */
const char *gckpt_plan_vlm_checkpointed(const gckpt_plan *p, uint32_t every_n, char *buf, size_t n);
/* whether entry e's checkpointing is per-layer code (--checkpoint-towers text | vision), and
 * that code: gradient_checkpointing_enable, then each GradientCheckpointingLayer's flag */
bool gckpt_plan_vlm_per_layer(const gckpt_plan *p, const gckpt_entry *e);
void gckpt_plan_vlm_per_layer_code(const gckpt_plan *p, const gckpt_entry *e, FILE *f);
/* entry e's step walked again with fn at every event (its memory timeline); false: out of memory */
bool gckpt_plan_vlm_events(const gckpt_plan *p, const gckpt_entry *e, gckpt_walk_event_fn fn, void *user);
void gckpt_plan_vlm_header(const gckpt_plan *p, FILE *f);
void gckpt_plan_vlm_json(const gckpt_plan *p, cJSON *inputs);
/* entry e's checkpointed text layers into `text` (the module-order rule, not the text cursor)
 * and its vision_checkpointed_layers into entry */
void gckpt_plan_vlm_entry_json(const gckpt_plan *p, const gckpt_entry *e, cJSON *text, cJSON *entry);

/* The warnings of a plan (model + run settings, and the plan's entries where a figure is
 * said): fills p->warnings. Called by gckpt_plan_run. false: out of memory. */
bool gckpt_plan_warnings(gckpt_plan *p);
/* The warning rules, in the order a plan lists them: their number, rule i's code, and
 * the message rule i says for plan p (*msg malloc'd, NULL when the rule does not apply;
 * false: out of memory). */
size_t gckpt_warning_count(void);
const char *gckpt_warning_code(size_t i);
bool gckpt_warning_say(const gckpt_plan *p, size_t i, char **msg);

/* The run setting of plan p at one micro-batch split (checkpointing off: the caller sets
 * every_n and offload). */
gckpt_setting gckpt_plan_setting(const gckpt_plan *p, uint64_t micro_batch, uint64_t grad_accum);
/* The same for TP rank tp_rank (under --tp; its local model is gckpt_tp_local_model of tp_full). */
gckpt_setting gckpt_plan_setting_tp(const gckpt_plan *p, uint64_t micro_batch, uint64_t grad_accum, uint32_t tp_rank);
/* The setting a recipe is built from (gckpt_setting_recipe), of TP rank tp_rank. */
gckpt_setting gckpt_plan_recipe_setting(const gckpt_plan *p, uint32_t tp_rank);

/* Whether two entries of one plan with tokens/s ta and tb are within each other's ratio band
 * [p10, p90]: ta / tb and tb / ta both in it (the planned order could be the wrong way round). */
bool gckpt_time_tied(double ta, double tb, double p10, double p90);
/* The plan's ratio band (its code base's ratio_p10 / ratio_p90 on a CUDA target, else [1, 1]);
 * false when it is [1, 1] (no band: ties only at equal tokens/s). */
bool gckpt_plan_ratio_band(const gckpt_plan *p, double *p10, double *p90);
/* An entry's step-time range: step_s x the code base's step_ratio_p10 / p90 (the fit's held-out
 * spread across setups); false without one (no code_bases, a CPU target). */
bool gckpt_plan_step_range(const gckpt_plan *p, const gckpt_result *r, double *lo, double *hi);
/* Entry i fits, has the fastest fitting entry's offload and is within the ratio band of it (the
 * fastest too). */
bool gckpt_plan_tied(const gckpt_plan *p, size_t i);

/* Set p's fastest, recommended and smallest from its entries (fits, tokens/s, device peaks), the
 * device's ratio band and the target (gckpt_plan_run calls it). */
void gckpt_plan_choose(gckpt_plan *p);

/* Load model and device, sweep, recommend. false with err set on bad input. */
bool gckpt_plan_run(const gckpt_plan_request *req, gckpt_plan *p, gckpt_err *err);
void gckpt_plan_free(gckpt_plan *p);

/* "layer 31, backward: mlp.down_proj" */
void gckpt_peak_where(const gckpt_plan *p, const gckpt_result *r, char *buf, size_t n);

/* JSON plan (schema gckpt.plan/2). timeline: include the recommended entry's timeline. */
cJSON *gckpt_plan_to_json(const gckpt_plan *p, bool timeline);

/* The attn_implementation the snippets pass: the user's spelling (flash_attention_2), or
 * what transformers runs for the requested attention (gckpt_attention_run: Gemma 2's
 * eager when sdpa is asked for). */
const char *gckpt_plan_attn_impl(const gckpt_plan *p);
/* from_pretrained's first argument in the snippets: "..." (the user's checkpoint), or a
 * Hub id's "ORG/NAME" (with revision="REV" when not main), written into buf. */
const char *gckpt_plan_model_arg(const gckpt_plan *p, char *buf, size_t n);
/* The Auto class the snippet loads with: AutoModelForImageTextToText for a VLM, else
 * AutoModelForCausalLM. */
const char *gckpt_plan_model_class(const gckpt_plan *p);

/* Human outputs: the header (model, GPU, budget, warnings) comes first. */
void gckpt_plan_print_header(const gckpt_plan *p, FILE *f);
/* LoRA / QLoRA (plan_peft.c): the lines that load and wrap the model; the header's words
 * (", lora r 16 ...", "" for full fine-tuning); the plan JSON's inputs (method, lora, quant). */
void gckpt_plan_print_peft_model(const gckpt_plan *p, FILE *f);
void gckpt_plan_peft_header(const gckpt_plan *p, char *buf, size_t n);
void gckpt_plan_peft_json(const gckpt_plan *p, cJSON *inputs);
/* Mixture of experts (plan_moe.c; nothing for a dense model): the routing assumption
 * checked against the model, the header's line, the JSON's inputs.moe. */
bool gckpt_plan_moe_check(const gckpt_plan_request *req, const gckpt_model *m, gckpt_err *err);
void gckpt_plan_moe_header(const gckpt_plan *p, FILE *f);
void gckpt_plan_moe_json(const gckpt_plan *p, cJSON *inputs);
/* Several GPUs (plan_parallel.c; nothing for one GPU): the header's layout line, the
 * TrainingArguments lines of the mode, the launch lines, the JSON's inputs.layout and each
 * entry's global_batch and time.collective_exposed_s. */
/* Whether the planner can write mode d's (named name) header and snippet: a row for several GPUs
 * gives its title and Trainer arguments (gckpt_par_mode.title, trainer, zero_stage); else false
 * with one line naming the mode and the table. gckpt_plan_run asks it first. */
bool gckpt_plan_mode_ok(const gckpt_par_mode *d, const char *name, gckpt_err *err);
void gckpt_plan_parallel_header(const gckpt_plan *p, FILE *f);
/* Over several nodes: each collective group's size, placement and the bus bandwidth it is timed
 * at (gckpt/core/mesh.h); nothing on one node. */
void gckpt_plan_groups_header(const gckpt_plan *p, FILE *f);
void gckpt_plan_parallel_args(const gckpt_plan *p, cJSON *args);
void gckpt_plan_print_launch(const gckpt_plan *p, FILE *f);
/* LoRA / QLoRA on several GPUs: comment lines after the model's, what the wrapper does with the
 * frozen base and the adapters (FINDINGS R-DISTPEFT-1..8). */
void gckpt_plan_parallel_peft_notes(const gckpt_plan *p, FILE *f);
void gckpt_plan_parallel_json(const gckpt_plan *p, cJSON *inputs);
void gckpt_plan_parallel_entry_json(const gckpt_plan *p, const gckpt_entry *e, cJSON *entry, cJSON *time);
/* Tensor parallelism alone (--tp, plan_tp.c; nothing without it): the header line, the snippet's
 * model line (model_arg, attn: the from_pretrained arguments), its TrainingArguments line and launch
 * line, the JSON's inputs.tensor_parallel and each entry's tensor_parallel_collectives (the step's
 * TP collectives, FINDINGS R-TP-6). */
void gckpt_plan_tp_header(const gckpt_plan *p, FILE *f);
void gckpt_plan_tp_model_line(const gckpt_plan *p, const char *model_arg, const char *attn, FILE *f);
void gckpt_plan_tp_args(const gckpt_plan *p, cJSON *args);
void gckpt_plan_tp_launch(const gckpt_plan *p, FILE *f);
void gckpt_plan_tp_json(const gckpt_plan *p, cJSON *inputs);
void gckpt_plan_tp_entry_json(const gckpt_plan *p, const gckpt_entry *e, cJSON *entry);
/* The entries first..p->n - 1 of one micro-batch split (TP rank 0's, walked): every other TP rank's local
 * model walked at each, the busiest rank's memory kept (the time stays rank 0's: the largest chunks),
 * fits redone. Nothing without --tp. */
bool gckpt_plan_tp_busiest(gckpt_plan *p, size_t first, uint64_t micro_batch, uint64_t grad_accum, gckpt_err *err);
/* TP rank k's local model, recipe and context at one micro-batch split (m and rc live while c is used). */
bool gckpt_plan_tp_rank_ctx(const gckpt_plan *p, uint32_t k, uint64_t micro_batch, uint64_t grad_accum, gckpt_model *m,
                            gckpt_recipe *rc, gckpt_ctx *c, gckpt_err *err);
/* The TP rank whose step is entry e's memory (0 unless another's peak is the entry's); false: out of memory. */
bool gckpt_plan_tp_entry_rank(const gckpt_plan *p, const gckpt_entry *e, uint32_t *rank);

/* Context parallelism (--cp, plan_cp.c; nothing without it): what was measured (the request
 * refused otherwise, one line), the rank's peak and time beyond FSDP2's at S / C, the header
 * line, the snippet's parallelism_config and notes, the plan JSON's "context_parallel". */
/* The request of --cp C on its layout's GPUs (what the CLI's reader and "What would fit instead"
 * build): FSDP2 over all of them (dp_replicate 0), or HSDP over dp_replicate R groups of
 * GPUs / R (accelerate's (dp_replicate, dp_shard_cp) mesh, R-CP-17); no TP. Which C the planner
 * accepts is gckpt_plan_cp_setup's. */
void gckpt_plan_request_cp(gckpt_plan_request *r, uint32_t cp, uint32_t dp_replicate);
bool gckpt_plan_cp_setup(const gckpt_plan *p, gckpt_err *err);
bool gckpt_plan_cp_adjust(const gckpt_plan *p, const gckpt_entry *e, gckpt_result *r, gckpt_err *err);
void gckpt_plan_cp_header(const gckpt_plan *p, FILE *f);
void gckpt_plan_cp_args(const gckpt_plan *p, cJSON *args);
void gckpt_plan_cp_notes(const gckpt_plan *p, FILE *f);
void gckpt_plan_cp_json(const gckpt_plan *p, cJSON *inputs);
void gckpt_plan_print_table(const gckpt_plan *p, FILE *f, bool all);
/* "What would fit instead" (alternatives.c), when the plan of req fits nowhere: the request
 * re-planned with other choices (one GPU: the loss, precision, optimizer, LoRA / QLoRA; several:
 * the other modes, the TP and the CP layouts), one line each that the planner accepts. */
void gckpt_plan_print_alternatives(const gckpt_plan_request *req, const gckpt_plan *plan, FILE *f);
/* The TrainingArguments keyword arguments of an entry, in the snippet's order: the
 * entry's batch and accumulation (part 1), the plan's precision, optimizer and parallel
 * mode (common), the entry's checkpointing (part 2; part 0: both parts of the entry).
 * The snippet prints them; the JSON plan carries the common ones once and each entry's
 * own, which the Python package's Plan.training_arguments() joins. */
void gckpt_plan_training_args_common(const gckpt_plan *p, cJSON *o);
void gckpt_plan_training_args_entry(const gckpt_plan *p, const gckpt_entry *e, cJSON *o, int part);
cJSON *gckpt_plan_training_args(const gckpt_plan *p, const gckpt_entry *e);
/* The snippet to paste for an entry (model, TrainingArguments, Trainer, launch lines). */
void gckpt_plan_print_snippet(const gckpt_plan *p, const gckpt_entry *e, FILE *f);
void gckpt_plan_print_recommendation(const gckpt_plan *p, FILE *f);

/* Memory timeline of one entry: up to max points of (seconds, allocated bytes, phase), the
 * step's walk (gckpt/core/step_walk.h) of the rank whose peak is the entry's, each of max
 * buckets of time keeping its highest point; each segment drawn once (a later micro-step's
 * stands for its repeats). */
size_t gckpt_plan_timeline(const gckpt_plan *p, const gckpt_entry *e, double *t, double *bytes,
                           uint8_t *phase, size_t max);

/* A --plot file name: ends in .png or .svg, no control characters. */
bool gckpt_plot_name_ok(const char *file, gckpt_err *err);
/* The files of --plot FILE: the image FILE, the gnuplot script FILE.gp and the data
 * FILE.entries.dat and FILE.timeline.dat. */
enum { GCKPT_PLOT_IMAGE, GCKPT_PLOT_SCRIPT, GCKPT_PLOT_ENTRIES, GCKPT_PLOT_TIMELINE, GCKPT_NPLOT };
/* Their paths, malloc'd (false when out of memory; free them all either way). */
bool gckpt_plot_paths(const char *file, char *out[GCKPT_NPLOT]);
/* Write the script and the data into the open (uncommitted) files f[SCRIPT..TIMELINE]
 * and, when gnuplot is installed, run it with the image going to f[IMAGE] (*drawn);
 * note: the gist of gnuplot's warnings ("" when none). Commits nothing. */
bool gckpt_plan_plot(const gckpt_plan *p, const char *file, gckpt_afile f[GCKPT_NPLOT], bool *drawn, char *note,
                     size_t note_n, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
