/* What each primitive is, one row per gckpt_prim (core/prim.c): its name, how many
 * operands it takes and makes, which operands its backward reads, the size of its
 * outputs and the workspace its backward takes. The tracer (core/recipe_*.c), the
 * executor's size checks (executor/op_sizes.c), its dispatch (executor/interp_events.c)
 * and the backends' kernels read these rows instead of keeping their own lists.
 * (core: read by the planner and the executor) */
#ifndef GCKPT_PRIM_H
#define GCKPT_PRIM_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Operands, as bits of gckpt_prim_info.bwd_reads: inputs 0..3, outputs 0..1. */
enum {
    GCKPT_PR_IN0 = 1u << 0, GCKPT_PR_IN1 = 1u << 1, GCKPT_PR_IN2 = 1u << 2, GCKPT_PR_IN3 = 1u << 3,
    GCKPT_PR_OUT0 = 1u << 4, GCKPT_PR_OUT1 = 1u << 5,
};

/* How input k's gradient lies in the output gradient when the op passes it through
 * (gckpt_op.grad_alias): the whole of it, or a column view of it. */
typedef enum {
    GCKPT_GP_WHOLE,      /* the output gradient itself (add, sub, a view of the same shape) */
    GCKPT_GP_FIRST_COLS, /* the first columns of every row (cat(scores, sink): W of W + 1) */
    GCKPT_GP_HALVES,     /* input k's half of every head of op->width (cat of two halves) */
} gckpt_grad_pass;

/* The sizes an op's output follows from: its operands' shapes [rows, cols] and the op's
 * attributes (gckpt_op). */
typedef struct {
    uint64_t rows, cols;
    bool present;        /* the operand is there (grouped linear's offsets) */
} gckpt_prim_dim;

typedef struct {
    const gckpt_op *op;
    uint64_t b, s;                    /* micro-batch and sequence length */
    gckpt_prim_dim in[GCKPT_OP_MAX_IN];
    uint64_t out_cols;                /* output 0's columns (a SPLIT's block) */
} gckpt_prim_sizes;

typedef struct {
    const char *name;       /* the primitive's name in messages ("linear") */
    uint8_t nin_min, nin_max; /* inputs it takes */
    uint8_t nout;           /* outputs it can make (1 or 2) */
    uint8_t bwd_reads;      /* the operands its backward formula reads (GCKPT_PR_ bits):
                             * derivatives.yaml's saved tensors when its inputs need grad */
    bool no_grad;           /* it has no backward: a source, integer outputs, a mask */
    bool planned_only;      /* no backend executes it: gckpt-run refuses a plan that has it
                             * (the fused losses) */
    bool needs_width;       /* gckpt_op.width must be > 0 (the group, head or row width) */
    bool even_width;        /* ... and even (per-head halves) */
    uint8_t bws_in;         /* backward temporaries shaped like input 0 (recipe.h bws_in):
                             * a composite derivative's intermediates */
    bool bws_dq;            /* its backward takes an fp32 accumulator shaped like q (input 0
                             * with every query head: recipe.h bws_cT) where the kernel keeps one */
    bool windowed;          /* applies a layer's sliding window (gckpt_xcall.window) */
    bool identity;          /* output 0 holds input 0's values in its layout (a dtype copy): a
                             * batch-folding copy of it is input 0 itself at micro-batch 1 */
    bool col_view;          /* with view_fwd: output 0 is a column view of input 0 */
    uint8_t grad_pass;      /* gckpt_grad_pass of a gradient it passes through */
    bool reads_offsets;     /* takes the experts' int32 group offsets (grouped_mm's offs) */
    bool makes_offsets;     /* with an int32 output, makes those offsets */
    /* The elements of output k of its forward from the operands (NULL: a source, whose
     * size is its kind's: gckpt_op_check_source); false when the operands do not fit. */
    bool (*out_numel)(const gckpt_prim_sizes *z, int k, uint64_t *n);
    /* Its forward FLOPs from the op's attributes, per token (*fT) and per b x s x s
     * (*fBSS) (recipe.h's time model); NULL: none, a bandwidth-bound op, timed by its bytes. */
    void (*flops)(const gckpt_op *op, double *fT, double *fBSS);
} gckpt_prim_info;

/* Row `prim` of the table; NULL for a value that is no primitive. */
const gckpt_prim_info *gckpt_prim_of(int prim);
/* Its name, or "unknown" for a value that is no primitive. */
const char *gckpt_prim_name(int prim);

#ifdef __cplusplus
}
#endif

#endif
