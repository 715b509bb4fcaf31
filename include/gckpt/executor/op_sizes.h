/* What an op makes, checked from the op's side: before a kernel runs (host or CUDA),
 * the size of every buffer it writes is computed from its inputs' shapes and its own
 * attributes (widths, heads, in/out features, micro-batch and sequence), and the buffer
 * it is given must be exactly that size. A schedule that allocates a tensor one element
 * larger than the op makes it fails here, so the host backend's byte counts cannot agree
 * with the planner by construction alone. (executor: both backends call it) */
#ifndef GCKPT_OP_SIZES_H
#define GCKPT_OP_SIZES_H

#include "gckpt/executor/executor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A forward (also of a SOURCE op: its data's size from the run) or backward call. */
gckpt_xstatus gckpt_op_check_forward(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus gckpt_op_check_source(gckpt_source what, const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus gckpt_op_check_backward(const gckpt_xcall *c, gckpt_err *err);
/* An optimizer update: states and temporary as large as the parameter (8-bit absmax:
 * one per block), the gradient too. */
gckpt_xstatus gckpt_op_check_optim(const gckpt_optcall *c, gckpt_err *err);
/* A dequantization (QLoRA): w is the layout's packed / int8 weight, out its rows x cols
 * in f32 / bf16 / f16, every statistics piece present. */
gckpt_xstatus gckpt_op_check_dequant(const gckpt_xquant *q, gckpt_xt w, gckpt_xt out, gckpt_err *err);
/* A gradient sum or cast: every operand the same size. */
gckpt_xstatus gckpt_op_check_add(gckpt_xt dst, gckpt_xt a, gckpt_xt b, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
