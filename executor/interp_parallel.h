/* What the parallel modes' files share (private to them: interp_parallel.c, interp_ddp.c,
 * interp_zero1.c, interp_zero2.c, interp_zero3.c, interp_fsdp.c; the rest of the interpreter
 * sees the table of hooks in interp.h only): each mode's table, the rank's buffers, the
 * checksum of sharded gradients, a shard's initial values, ZeRO-1/2's flat groups. */
#ifndef GCKPT_INTERP_PARALLEL_H
#define GCKPT_INTERP_PARALLEL_H

#include "interp.h"

/* Each mode's hooks (exec_par_ops_of picks one). */
extern const exec_par_ops exec_ddp_ops, exec_zero1_ops, exec_zero2_ops, exec_zero3_ops, exec_fsdp_ops;
extern const exec_par_ops exec_tp_ops; /* tensor parallelism alone (interp_tp.c) */
/* TP x FSDP (gckpt_tp_hsdp_layout: TP x DDP, TP x FSDP, HSDP x TP): interp_tp.c's sharded ops in the
 * TP group, FSDP2 (interp_fsdp.c) over the ranks of one TP rank */
extern const exec_par_ops exec_tp_fsdp_ops;
/* CP x FSDP (gckpt-plan --cp C): FSDP2 over the cp ranks, interp_cp.c's ring attention, data and loss */
extern const exec_par_ops exec_cp_fsdp_ops;
bool exec_cp_prepare(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_cp_init(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_cp_run_op(gckpt_exec *x, gckpt_xcall *c, bool backward, const exec_site *w, gckpt_err *err);
void exec_cp_release(gckpt_exec *x);
void exec_cp_free(gckpt_exec *x);
#ifdef GCKPT_TOY
extern const exec_par_ops exec_toy_ops; /* the toy mode's (tests/toy/toy_exec.c) */
#endif

/* The rank's parameter-state rows (gckpt_rank_rows: the one source of its persistent state)
 * and a buffer per held row (gckpt_row_held: one allocation of the row's bytes, its instances
 * back to back); a row the core adds is allocated here with no mode's code. */
struct exec_rows {
    gckpt_rank_state st;
    void *buf[GCKPT_MAX_STATE_ROWS];
};
/* Every held row of the rank allocated (x->rows), the total checked against the schedule's
 * persistent bytes (weights, optimizer states, the mode's parallel bytes); a parameter entry's
 * unsharded rows are its instances' buffers (the weight row its weights, its state rows their
 * states in order: a replica's, ZeRO-3's persistent whole copies), the parameter marked flat.
 * Each mode's setup calls it first and takes its other views from exec_row. */
gckpt_xstatus exec_rank_buffers(gckpt_exec *x, gckpt_err *err);
/* Instance `copy` of the nth row (from 0) of kind `kind` for parameter entry `param` (-1: the
 * rank's) and optimizer group `group` (ZeRO-1/2's flat groups; 0 otherwise): its buffer
 * (NULL when the row is not held or has no bytes) and, in *bytes (may be NULL), the
 * instance's bytes. */
void *exec_row(const gckpt_exec *x, gckpt_row_kind kind, int param, int group, int nth, uint64_t copy, uint64_t *bytes);
/* The held rows of the kinds made within the step (ZeRO-1/2's flag beside the ipg bucket):
 * released at the optimizer step's start, taken again at its end; their bytes in *bytes. */
void exec_step_rows_release(gckpt_exec *x, uint64_t *bytes);
gckpt_xstatus exec_step_rows_take(gckpt_exec *x, uint64_t *bytes, gckpt_err *err);
/* A sharded gradient's checksum (the ranks' pieces add up to one process's checksum of the
 * whole tensors: the hash is a sum of per-element terms, gckpt_hash_term): parameter p's
 * piece src (a device buffer, any dtype), element lo of the tensor, added to *h and
 * *ss; then every rank's sums added in rank order. */
gckpt_xstatus exec_piece_hash(gckpt_exec *x, const param_t *p, gckpt_xt src, uint64_t lo, uint64_t *h, double *ss,
                              gckpt_err *err);
gckpt_xstatus exec_ranks_hash(gckpt_exec *x, uint64_t *h, double *ss, gckpt_err *err);
/* TP (interp_tp.c) for the modes that shard its local tensors (TP x FSDP): its prepare, ops and free;
 * the whole tensor's index of element e of parameter p's local tensor (e itself without TP); the
 * offset of the rank's rows in a .grad of n elements (the embedding's whole [V, h] gradient, R-TP-5;
 * 0 otherwise); a piece of p's local gradient (elements [lo, lo + src.n)) hashed at its whole-tensor
 * indices, a replicated tensor's on TP rank 0 only (as exec_piece_hash). */
bool exec_tp_prepare(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_tp_run_op(gckpt_exec *x, gckpt_xcall *c, bool backward, const exec_site *w, gckpt_err *err);
void exec_tp_free(gckpt_exec *x);
uint64_t exec_tp_index(const gckpt_exec *x, const param_t *p, uint64_t e);
uint64_t exec_tp_grad_lo(const gckpt_exec *x, const param_t *p, uint64_t n);
gckpt_xstatus exec_tp_piece_hash(gckpt_exec *x, const param_t *p, gckpt_xt src, uint64_t lo, uint64_t *h, double *ss,
                                 gckpt_err *err);
/* LoRA under TP (interp_tp_lora.c): a parameter's role by name (1: a colwise layer's lora_B, sharded
 * like it, *inter when its rows are the intermediate size; 0: lora_A, replicated; -1: no adapter), and
 * whether the plan's adapters are what gckpt-plan plans under TP (gckpt_tp_peft_ok's line otherwise). */
int exec_tp_lora_role(const char *name, bool *inter);
bool exec_tp_lora_ok(const gckpt_exec *x, gckpt_err *err);
/* This rank's data-parallel rank: its rank, or under TP x FSDP its rank / tp (the dense mesh's tp
 * innermost, R-TP-1) */
uint32_t exec_dp_rank(const gckpt_exec *x);
/* This rank's place in its shard group (HSDP: rank mod dp_shard, gckpt_layout_shard_rank; else
 * its rank): which piece of each sharded tensor it holds. */
uint32_t exec_shard_rank(const gckpt_exec *x);
/* A sharded parameter's fp32 padded shard on this rank (shard.part elements at dst) from its
 * initialisation (how, scale, key as one process makes the whole tensor): elements
 * [r x part, r x part + gckpt_shard_local) of the tensor, then 0. */
gckpt_xstatus exec_shard_init(gckpt_exec *x, const param_t *p, void *dst, gckpt_init how, float scale, uint64_t key,
                              gckpt_err *err);

/* ZeRO-1/2's flat groups and the rank's partitions (interp_zero1.c; ZeRO-2's reductions in
 * interp_zero2.c). */
struct exec_zero {
    gckpt_zero_group g[2];
    uint8_t dt;                 /* the model dtype (bf16 under amp-bf16, else fp32) */
    uint64_t bucket;            /* the ipg bucket's elements (reduce_bucket_size) */
    void *flat[2];              /* each group's flat weights (padded elements) */
    void *master[2], *st[2][2]; /* the rank's fp32 partitions: master, exp_avg, exp_avg_sq */
    gckpt_flat_place *place;    /* per parameter instance (x->params order) */
    size_t *flat_j;             /* per flat place (gckpt_zero12_flat's order): its instance */
    bool *keep;                 /* per instance: it overlaps the rank's partition */
    /* ZeRO-2: the rank's reduced gradients, every kept instance whole in the flat order
     * (pbuf_off: its offset there), in the first micro-step's buffer (part0, to zero_grad) and
     * a later micro-step's (part1, added into part0 when freed) */
    uint64_t *pbuf_off;
    uint32_t part0, part1;
    /* ZeRO-2: the ipg bucket as DeepSpeed fills it (fill: its elements in use; bucket_inst: the
     * live bucket) and the kept instances reduced into it before the flush that makes the
     * partition buffer (pend: instance, offset in the bucket; copied in at that buffer's alloc) */
    uint64_t fill;
    uint32_t bucket_inst;
    bool pmade; /* this backward's partition buffer is made */
    size_t npend, *pend_j;
    uint64_t *pend_off;
    /* ZeRO-1: the ipg bucket(s) the schedule allocates at the first backward's first gradient
     * hook (an ALLOC_SCRATCH marked GCKPT_PE_IPG_BUCKET), freed with the step's release */
    uint32_t z1_bucket[2];
};
/* The hooks ZeRO-1 and ZeRO-2 share (interp_zero1.c): the groups; the flat weights, master
 * and states allocated (every parameter instance a view into its group); the master from the
 * weights; which instances overlap the rank's partition; the step on the partition, reading
 * instance j's gradient from grad_of; the step's release and re-allocation of the ipg bucket;
 * releasing and freeing. */
/* The all-gather after the step (a COLLECTIVE event of the optimizer segment): the rank's slice
 * of optimizer group e->arg.coll.index's flat weights to every rank (nothing without update). */
gckpt_xstatus exec_zero_gather(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
bool exec_zero_prepare(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_zero_setup(gckpt_exec *x, gckpt_err *err);
gckpt_xstatus exec_zero_init(gckpt_exec *x, gckpt_err *err);
bool exec_zero_keeps_grad(const gckpt_exec *x, size_t i);
gckpt_xstatus exec_zero_step(gckpt_exec *x, const exec_site *w, gckpt_xt (*grad_of)(const gckpt_exec *x, size_t j),
                             gckpt_err *err);
gckpt_xstatus exec_zero_step_buffer(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err);
void exec_zero_release(gckpt_exec *x);
void exec_zero_free(gckpt_exec *x);

#endif
