/* The interpreter's state (private to executor/): interp.c builds it, sets up the
 * persistent state and runs steps segment by segment; interp_events.c performs the
 * events. */
#ifndef GCKPT_INTERP_H
#define GCKPT_INTERP_H

#include <stdarg.h>

#include "gckpt/core/parallel.h"
#include "gckpt/executor/executor.h"
#include "host_num.h"

/* A buffer the schedule allocated (an ALLOC, ALLOC_SCRATCH or the optimizer's). */
typedef struct {
    void *p;
    uint64_t bytes, n;
    int16_t tensor;   /* recipe tensor, -1 for scratch */
    uint8_t dt;       /* as the ALLOC said */
    bool live;
    bool is_pgrad;    /* a parameter's .grad (freed by zero_grad only) */
} inst_t;

/* One instance of a parameter (a block parameter has one per layer): its buffers as its
 * entry in the parameter state table describes them. */
typedef struct {
    const gckpt_param *spec;
    int tensor, layer;  /* layer -1 for embedding / head parameters */
    void *w;
    void *st[GCKPT_MAX_STATES];
    gckpt_xquant q;     /* a quantized weight's statistics (QLoRA), else empty */
    uint64_t temp_off;  /* adamw-foreach: offset in the optimizer temporary */
    uint32_t grad;      /* instance of .grad, GCKPT_NOINST when none */
    bool fwd_only;      /* a VLM tower's layer after the feature layer (runs forward only, reaches
                           no loss): its weight only, never trained */
    bool flat;          /* several ranks: its buffers are not the parameter table's allocations but
                           views into the rank's rows (a replica's weight and states, FSDP2's
                           states) or the mode's (ZeRO's flat groups, a gathered weight):
                           interp_parallel.c */
} param_t;

typedef struct {
    void *p;
    uint64_t bytes;
    uint64_t wr, rd;    /* bytes copied out so far, bytes copied back so far */
} hostbuf_t;

/* Several ranks: the rank's parameter-state rows (gckpt_rank_rows) and a buffer per held row
 * (interp_parallel.c, exec_rank_buffers). Each mode's own state (interp_parallel.h; NULL in
 * the other modes). */
typedef struct exec_rows exec_rows;
typedef struct exec_zero exec_zero;
typedef struct exec_fsdp exec_fsdp;
typedef struct exec_z3 exec_z3;
typedef struct exec_tp exec_tp;
typedef struct exec_cp exec_cp;
typedef struct exec_aux exec_aux;
typedef struct exec_par_ops exec_par_ops;

/* The strided view (gckpt_xt.vW ...) that a tensor's gradient has inside the instance it
 * shares with a consumer's output gradient (recipe grad_alias, the schedule handing the
 * same instance on): recorded when the consumer's backward passes it through, read by
 * whoever reads that gradient next in the same micro-step (interp_events.c). */
typedef struct {
    uint32_t inst, gen;
    uint64_t vW, voff, vblk, vstride;
} exec_gview;

/* The parts of a step, each a range [begin, end) of the schedule's segments: its micro-steps
 * as the schedule has them (gckpt_micro_runs: the first, then one later micro-step, or the ones
 * between and the synchronising last), each run `repeat` times, then the optimizer. */
typedef struct {
    size_t begin, end;
    uint64_t repeat;
} exec_part;

struct gckpt_exec {
    gckpt_backend *be;
    gckpt_model m;
    gckpt_device dev;
    gckpt_setting set;
    gckpt_exec_opts o;
    gckpt_recipe *r;
    gckpt_ctx ctx;
    gckpt_schedule sched;
    exec_part micro[GCKPT_MAX_MICRO_RUNS]; /* the micro-steps (nmicro of them) ... */
    int nmicro;
    exec_part opt;                  /* ... and the optimizer */
    inst_t *inst;
    uint32_t ninst;
    int pidx[GCKPT_MAX_TENSORS];
    param_t *params;
    size_t nparams;
    int nslot;                      /* layers + 2: embedding, blocks, head */
    gckpt_fwd_args *bind;           /* [slot * nop + op]: operands of the latest forward */
    uint32_t *bind_gen;
    uint32_t gen;
    exec_gview *gview;              /* [slot * nt + tensor] */
    hostbuf_t *hb;                  /* per layer */
    int8_t *lpsec;                  /* per layer: the section of its parameters */
    uint32_t *lcopy;                /* per layer: its copy of that section's parameters */
    void *workspace, *opt_temp;
    uint64_t workspace_bytes, opt_temp_bytes;
    uint64_t step;                  /* optimizer steps done */
    int64_t *ids, *labels, *positions;
    bool setup_done, in_grads;
    /* several ranks: the parallel mode's hooks (chosen once from the layout: one GPU's
     * have none), the rank's rows with their buffers (the persistent state as the core
     * plans it, gckpt_rank_rows), and the mode's own state (only its files read it) */
    const exec_par_ops *mode;
    exec_rows *rows;
    exec_zero *zero;                /* ZeRO-1/2's flat groups and partitions (interp_zero1.c) */
    exec_fsdp *fsdp;                /* FSDP2's shards and units (interp_fsdp.c) */
    exec_z3 *z3;                    /* ZeRO-3's partitions (interp_zero3.c) */
    exec_tp *tp;                    /* tensor parallelism's shards (interp_tp.c) */
    exec_cp *cp;                    /* context parallelism's ring and buffers (interp_cp.c) */
    gckpt_model tp_full;            /* tensor parallelism: the whole model (m is the rank's local one) */
    exec_aux *aux;                  /* the load-balancing loss's routing of its gradients to the
                                     * layers (interp_aux.c), else NULL */
    /* one side of a VLM step (interp_vlm.c): the composed schedule's segments are each the
     * text model's, the tower's or the bridge's (gckpt_vseg); the exec performs and checks
     * those whose bit own_mask has. NULL: every segment is its own. */
    const uint8_t *seg_kind;
    uint8_t own_mask;
    /* its layers from live_layers on (the context's model has live_layers; m all of them) run
     * forward only: their parameters are instances fwd_base + (layer - live) * nfwd +
     * fwd_index[tensor] (the block's parameter tensors), weights only */
    gckpt_model ctx_model;
    uint64_t live_layers;
    size_t fwd_base;
    int nfwd, *fwd_index;
};

/* Whether segment si of the schedule is this exec's to perform. */
static inline bool exec_owns(const gckpt_exec *x, size_t si)
{
    return !x->seg_kind || (x->own_mask >> x->seg_kind[si] & 1u);
}
/* Context parallelism (interp_cp.c): the rank's pieces of the micro-step's batch made with `key`
 * (make_data's); after each event that is no allocation, the memory the ring's transients count from. */
void exec_cp_data(gckpt_exec *x, uint64_t key);
void exec_cp_after_event(gckpt_exec *x, const gckpt_event *e);

/* The global micro-step that this rank's micro-step `micro` trains (data, dropout). */
static inline uint64_t exec_global_micro(const gckpt_exec *x, uint64_t micro)
{
    /* a TP group's ranks see one batch (FINDINGS R-TP-1): the data-parallel rank's (TP alone: 0) */
    uint64_t dp_rank = x->set.layout.tp > 1 ? x->set.layout.rank : (uint64_t)x->o.rank;
    if (x->set.layout.cp > 1) dp_rank /= x->set.layout.cp; /* a CP group's ranks likewise (R-CP-1) */
    return dp_rank * x->set.grad_accum + micro;
}

/* Where an event runs: its segment, its index in the schedule, the micro-step. */
typedef struct {
    const gckpt_seg *seg;
    size_t index;
    uint64_t micro;
    bool update;       /* perform the optimizer's update */
    char at[160];      /* "event 123 (BWD of self_attn.q_proj, layer 2)" */
} exec_site;

gckpt_xstatus exec_fail(gckpt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
gckpt_xstatus exec_be_fail(gckpt_exec *x, gckpt_xstatus rc, const char *ctx, gckpt_err *err);
void exec_where(const gckpt_exec *x, const gckpt_seg *seg, size_t i, char *buf, size_t n);
param_t *exec_param(gckpt_exec *x, int tensor, int layer);
gckpt_xt exec_param_view(const param_t *p);
gckpt_xt exec_state_view(const param_t *p, int k);
gckpt_xt exec_inst_view(const gckpt_exec *x, uint32_t id);
bool exec_live(const gckpt_exec *x, uint32_t id);
void exec_inst_release(gckpt_exec *x, uint32_t id);
/* A parallel mode as the interpreter sees it: one table of hooks per mode (interp_ddp.c,
 * interp_zero1.c, interp_zero2.c, interp_zero3.c, interp_fsdp.c), chosen once from the
 * setting's layout by exec_par_ops_of; interp.c and interp_events.c call through it and test
 * no mode. A NULL hook does what one GPU does (nothing, the ordinary initialisation, step or
 * checksum); a NULL collective or step_buffer refuses the event. */
struct exec_par_ops {
    /* its wrapper allocates flat gradient buffers (ALLOC_SCRATCH of component GRADS: FSDP2's
     * sharded gradients, ZeRO-2's partition), which are no parameter's .grad */
    bool flat_grads;
    /* after the context, before the schedule is built (the parameter instances do not exist) */
    bool (*prepare)(gckpt_exec *x, gckpt_err *err);
    /* the persistent state: the rank's rows (exec_rank_buffers) and the mode's views into them,
     * before the parameter table's (a parameter whose buffers are views is marked flat) */
    gckpt_xstatus (*setup)(gckpt_exec *x, gckpt_err *err);
    /* parameter instance j's initial values where the mode holds them (a shard of what one
     * process makes: how, scale and key as one process initialises the whole tensor) */
    gckpt_xstatus (*init_param)(gckpt_exec *x, size_t j, gckpt_init how, float scale, uint64_t key, gckpt_err *err);
    /* a quantized parameter instance j the mode shards (no whole weight bound): its rank's piece
     * of the packed storage one process quantizes (packed: that whole weight, a scratch buffer) */
    gckpt_xstatus (*shard_packed)(gckpt_exec *x, size_t j, const void *packed, gckpt_err *err);
    /* after every weight is initialised */
    gckpt_xstatus (*init)(gckpt_exec *x, gckpt_err *err);
    /* after an ALLOC / ALLOC_SCRATCH the interpreter performed */
    gckpt_xstatus (*on_alloc)(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
    /* before a FREE: *done when the hook released the instance itself */
    gckpt_xstatus (*on_free)(gckpt_exec *x, const gckpt_event *e, const exec_site *w, bool *done, gckpt_err *err);
    /* an op's forward (backward false) or backward in place of the backend's: the mode computes
     * it (tensor parallelism: its sharded ops and the collectives inside them) */
    gckpt_xstatus (*run_op)(gckpt_exec *x, gckpt_xcall *c, bool backward, const exec_site *w, gckpt_err *err);
    /* a COLLECTIVE event (DDP's and ZeRO-1's reduction too: those opening the optimizer part) */
    gckpt_xstatus (*collective)(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
    /* a ZERO_GRAD marked GCKPT_PE_OUTSIDE_PARTITION: whether instance i keeps its .grad */
    bool (*keeps_grad)(const gckpt_exec *x, size_t i);
    /* at a ZERO_GRAD: the mode's own gradient buffers freed; their bytes */
    uint64_t (*zero_grad)(gckpt_exec *x);
    /* an OPT_TEMP_FREE / OPT_TEMP_ALLOC of component PARALLEL (ZeRO's ipg bucket in the step) */
    gckpt_xstatus (*step_buffer)(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
    /* the optimizer step */
    gckpt_xstatus (*step)(gckpt_exec *x, const exec_site *w, gckpt_err *err);
    /* the gradient checksum when the gradients are sharded (the ranks' pieces added up) */
    gckpt_xstatus (*checksum)(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err);
    /* an instance the mode keeps from one micro-step to the next besides the .grad */
    bool (*holds)(const gckpt_exec *x, uint32_t id);
    /* the persistent state released (setup may follow), then freed */
    void (*release)(gckpt_exec *x);
    void (*free)(gckpt_exec *x);
};

/* Several ranks (interp_parallel.c): whether the setting's mode is executed (err names it
 * when not) and the ranks agree with its layout; the mode's hooks; releasing its persistent
 * state and the rank's buffers. */
bool exec_parallel_check(const gckpt_setting *s, const gckpt_exec_opts *o, gckpt_err *err);
const exec_par_ops *exec_par_ops_of(const gckpt_layout *l);
void exec_parallel_release(gckpt_exec *x);
/* The mixture-of-experts load-balancing loss (interp_aux.c): its state (none without
 * output_router_logits), reset at each micro-step; the head's softmax over every layer's
 * held router logits; the view's gradient kept when freed and handed to the layers'
 * buffers as they are allocated; a layer's block added to its router logits' gradient
 * before the router linear's backward. */
bool exec_aux_prepare(gckpt_exec *x, gckpt_err *err);
void exec_aux_micro_begin(gckpt_exec *x);
void exec_aux_free(gckpt_exec *x);
gckpt_xstatus exec_aux_forward(gckpt_exec *x, const gckpt_xcall *c, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_aux_on_free(gckpt_exec *x, uint32_t id, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_aux_on_alloc(gckpt_exec *x, uint32_t id, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_aux_add(gckpt_exec *x, int layer, gckpt_xt gout, const exec_site *w, gckpt_err *err);
/* One side of a VLM step (interp_vlm.c): model m (its layers after live's run forward only:
 * live is the context's; NULL: m), recipe r and setting s as the core's step built them, the step's composed schedule copied with the instances of the side's own
 * segments renumbered from id_base down to 0 (0: as they are). */
gckpt_exec *exec_new_part(gckpt_backend *be, const gckpt_model *m, const gckpt_model *live, const gckpt_device *d,
                          const gckpt_setting *s, const gckpt_exec_opts *o, const gckpt_recipe *r,
                          const gckpt_schedule *sched, const uint8_t *seg_kind, uint8_t own_mask, uint32_t id_base,
                          gckpt_err *err);
/* A micro-step's batch (random ids, shifted labels, positions); after a micro-step or the
 * step, what may still be allocated (interp.c's run_part). */
void exec_make_data(gckpt_exec *x, uint64_t micro);
gckpt_xstatus exec_check_clean(gckpt_exec *x, bool grads_allowed, gckpt_err *err);
/* The gradients' checksum (gckpt_step_result.grad_hash) and their sum of squares. */
gckpt_xstatus exec_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err);
/* Perform one event (interp_events.c). */
gckpt_xstatus exec_event(gckpt_exec *x, const gckpt_event *e, exec_site *site, gckpt_err *err);
/* A segment's layer (-1 outside the layers) and its wrapper unit / binding slot (0 the
 * embedding, 1 + l layer l, L + 1 the head; -1 none). */
int exec_seg_layer(const gckpt_seg *g);
int exec_seg_slot(const gckpt_exec *x, const gckpt_seg *g);
/* The optimizer's call for one parameter's weights and gradient (the run's optimizer and
 * hyper-parameters; the caller adds states and temporaries). */
gckpt_optcall exec_optcall(const gckpt_exec *x, gckpt_xt param, gckpt_xt grad, uint64_t step);

static inline void exec_convert_to_f32(const gckpt_xt *t, float *out)
{
    for (uint64_t i = 0; i < t->n; i++) out[i] = ld(t, i);
}
static inline void exec_convert_from_f32(const gckpt_xt *t, const float *in)
{
    for (uint64_t i = 0; i < t->n; i++) st(t, i, in[i]);
}

#endif
