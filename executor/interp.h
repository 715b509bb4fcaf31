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
    bool flat;          /* ZeRO-1: w is a view into its group's flat buffer, the states are the
                           rank's partitions (interp_parallel.c) */
} param_t;

typedef struct {
    void *p;
    uint64_t bytes;
    uint64_t wr, rd;    /* bytes copied out so far, bytes copied back so far */
} hostbuf_t;

/* A parallel mode's own persistent buffers (interp_parallel.c): DDP's buckets; ZeRO's ipg
 * bucket with its flag (released during the optimizer step); step counters and the like;
 * the model's buffers. */
enum { EXEC_PAR_GRADS, EXEC_PAR_STEP, EXEC_PAR_SCALARS, EXEC_PAR_BUFFERS, EXEC_NPAR };
typedef struct exec_zero exec_zero;
/* ZeRO-1/2's flat groups and the rank's partitions (interp_parallel.c; ZeRO-2's reductions in
 * interp_zero2.c). */
struct exec_zero {
    gckpt_zero_group g[2];
    uint8_t dt;                 /* the model dtype (bf16 under amp-bf16, else fp32) */
    uint64_t bucket;            /* the ipg bucket's elements (reduce_bucket_size) */
    void *flat[2];              /* each group's flat weights (padded elements) */
    void *master[2], *st[2][2]; /* the rank's fp32 partitions: master, exp_avg, exp_avg_sq */
    gckpt_flat_place *place;    /* per parameter instance (x->params order) */
    bool *keep;                 /* per instance: it overlaps the rank's partition */
    /* ZeRO-2: the rank's reduced gradients, every kept instance whole in the flat order
     * (pbuf_off: its offset there), in the first micro-step's buffer (part0, to zero_grad) and
     * a later micro-step's (part1, added into part0 when freed) */
    uint64_t *pbuf_off;
    uint32_t part0, part1;
    /* ZeRO-1: the ipg bucket(s) the schedule allocates at the first backward's first gradient
     * hook (ALLOC_SCRATCH, the bucket's elements), freed with the step's release */
    uint32_t z1_bucket[2];
};
typedef struct exec_fsdp exec_fsdp;
typedef struct exec_aux exec_aux;
typedef struct exec_z3 exec_z3;

/* The strided view (gckpt_xt.vW ...) that a tensor's gradient has inside the instance it
 * shares with a consumer's output gradient (recipe grad_alias, the schedule handing the
 * same instance on): recorded when the consumer's backward passes it through, read by
 * whoever reads that gradient next in the same micro-step (interp_events.c). */
typedef struct {
    uint32_t inst, gen;
    uint64_t vW, voff, vblk, vstride;
} exec_gview;

/* The parts of a step: the first micro-step, the later one (run grad_accum - 1 times),
 * the optimizer; each a range of the schedule's segments. */
enum { PART_FIRST, PART_LATER, PART_OPTIMIZER, NPARTS };

struct gckpt_exec {
    gckpt_backend *be;
    gckpt_model m;
    gckpt_device dev;
    gckpt_setting set;
    gckpt_exec_opts o;
    gckpt_recipe *r;
    gckpt_ctx ctx;
    gckpt_schedule sched;
    size_t part[NPARTS][2];         /* [begin, end) of the schedule's segments */
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
    void *workspace, *opt_temp;
    uint64_t workspace_bytes, opt_temp_bytes;
    uint64_t step;                  /* optimizer steps done */
    int64_t *ids, *labels, *positions;
    bool setup_done, in_grads;
    /* several ranks (interp_parallel.c): the mode's persistent buffers beyond the
     * parameter state table, as gckpt_rank_persistent sizes them */
    void *par[EXEC_NPAR];
    uint64_t par_bytes[EXEC_NPAR];
    exec_zero *zero;                /* ZeRO-1's flat groups and partitions, else NULL */
    exec_fsdp *fsdp;                /* FSDP2's shards and units (interp_fsdp.c), else NULL */
    exec_z3 *z3;                    /* ZeRO-3's partitions (interp_zero3.c), else NULL */
    exec_aux *aux;                  /* the load-balancing loss's routing of its gradients to the
                                     * layers (interp_aux.c), else NULL */
};

/* The global micro-step that this rank's micro-step `micro` trains (data, dropout). */
static inline uint64_t exec_global_micro(const gckpt_exec *x, uint64_t micro)
{
    return (uint64_t)x->o.rank * x->set.grad_accum + micro;
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
/* Several ranks (interp_parallel.c): whether the setting's mode is executed (err names it
 * when not) and the ranks agree with its layout; the mode's persistent buffers; the
 * gradients' reduction after the last micro-step; freeing the buffers. */
bool exec_parallel_check(const gckpt_setting *s, const gckpt_exec_opts *o, gckpt_err *err);
bool exec_parallel_prepare(gckpt_exec *x, gckpt_err *err); /* before the schedule: the rank's share */
gckpt_xstatus exec_parallel_setup(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_parallel_init(gckpt_exec *x, gckpt_err *err); /* after the weights' initialisation */
gckpt_xstatus exec_parallel_sync(gckpt_exec *x, gckpt_err *err);
/* ZeRO: whether parameter instance i keeps its .grad past the step's first zero_grad (it
 * overlaps the rank's partition); the optimizer step on the partition; the step's release
 * and re-allocation of the ipg bucket (an OPT_TEMP event of component parallel). */
bool exec_parallel_keeps_grad(const gckpt_exec *x, size_t i);
gckpt_xstatus exec_parallel_step(gckpt_exec *x, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_parallel_step_buffer(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
/* ZeRO-1: an ALLOC_SCRATCH of the bucket's elements while fewer buckets than planned are live is
 * one (kept for the reduction at the boundary and the step's release). */
gckpt_xstatus exec_z1_on_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
bool exec_z1_is_bucket(const gckpt_exec *x, uint32_t id);
/* A sharded gradient's checksum (the ranks' pieces add up to one process's checksum of the
 * whole tensors: the hash is a sum of per-element terms, gckpt_hash_term): parameter p's
 * piece src (a device buffer, any dtype), element lo of the tensor, added to *h and
 * *ss; then every rank's sums added in rank order. */
gckpt_xstatus exec_piece_hash(gckpt_exec *x, const param_t *p, gckpt_xt src, uint64_t lo, uint64_t *h, double *ss,
                              gckpt_err *err);
gckpt_xstatus exec_ranks_hash(gckpt_exec *x, uint64_t *h, double *ss, gckpt_err *err);
/* A sharded parameter's fp32 padded shard on this rank (shard.part elements at dst) from its
 * initialisation (how, scale, key as one process makes the whole tensor): elements
 * [r x part, r x part + gckpt_shard_local) of the tensor, then 0. */
gckpt_xstatus exec_shard_init(gckpt_exec *x, const param_t *p, void *dst, gckpt_init how, float scale, uint64_t key,
                              gckpt_err *err);
void exec_parallel_release(gckpt_exec *x);
void exec_parallel_free(gckpt_exec *x);
/* FSDP2 (interp_fsdp.c): its per-instance places, shards and states, a shard's initial
 * values; the events it performs (a collective; after an ALLOC of the unit's buffers; a FREE
 * that is a reshard or an unsharded .grad going into the reduce-scatter input: *done when it
 * released the buffer itself); the step on the shards, zero_grad of the sharded gradients
 * (their bytes), the gradient checksum over every rank. */
bool exec_fsdp_prepare(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_fsdp_setup(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_fsdp_init_param(gckpt_exec *x, size_t j, gckpt_init how, float scale, uint64_t key, gckpt_err *err);
gckpt_xstatus exec_fsdp_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_fsdp_on_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_fsdp_on_free(gckpt_exec *x, const gckpt_event *e, const exec_site *w, bool *done, gckpt_err *err);
gckpt_xstatus exec_fsdp_step(gckpt_exec *x, const exec_site *w, gckpt_err *err);
uint64_t exec_fsdp_zero_grad(gckpt_exec *x);
gckpt_xstatus exec_fsdp_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err);
void exec_fsdp_release(gckpt_exec *x);
void exec_fsdp_free(gckpt_exec *x);
/* ZeRO-3 (interp_zero3.c), the same hooks as FSDP2's (its setup after the parallel mode's
 * buffers: the gradient partitions and the ipg bucket are EXEC_PAR_GRADS). */
gckpt_xstatus exec_z3_setup(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_z3_init_param(gckpt_exec *x, size_t j, gckpt_init how, float scale, uint64_t key, gckpt_err *err);
gckpt_xstatus exec_z3_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_z3_on_free(gckpt_exec *x, const gckpt_event *e, const exec_site *w, bool *done, gckpt_err *err);
gckpt_xstatus exec_z3_step(gckpt_exec *x, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_z3_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err);
void exec_z3_release(gckpt_exec *x);
void exec_z3_free(gckpt_exec *x);
/* ZeRO-2 (interp_zero2.c): the kept instances' places in the partition buffer (after ZeRO-1's
 * flat setup), the events it performs (an ALLOC of a partition buffer, an ALL_REDUCE of one
 * parameter through the ipg bucket, a FREE of a reduced .grad or of a later micro-step's
 * buffer), zero_grad's buffer (its bytes), a kept instance's reduced gradient, the checksum
 * of the rank's partition over every rank. */
gckpt_xstatus exec_z2_setup(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_z2_on_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_z2_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
gckpt_xstatus exec_z2_on_free(gckpt_exec *x, const gckpt_event *e, const exec_site *w, bool *done, gckpt_err *err);
uint64_t exec_z2_zero_grad(gckpt_exec *x);
gckpt_xt exec_z2_grad(const gckpt_exec *x, size_t j);
gckpt_xstatus exec_z2_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err);
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
