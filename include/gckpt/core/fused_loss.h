/* The fused losses' rules, read from their source (docs/fused-loss.md): Liger's fused
 * linear cross-entropy (liger-kernel 0.8.5, ops/fused_linear_cross_entropy.py) and
 * cut-cross-entropy (25.1.1, cce.py). What a loss keeps and when is the recipe's
 * (core/recipe.c, fused_loss_head); the sizes of their temporaries are here, for the
 * planner and the tests. (core: read by the planner and the executor) */
#ifndef GCKPT_FUSED_LOSS_H
#define GCKPT_FUSED_LOSS_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Liger's chunk: the rows of [tokens, vocab] logits it makes at once,
 * min(next_power_of_2(ceil(BT / ceil(V / (mem_const * H)))), BT) (mem_const: the
 * chunk_mem_const the model's lce_forward passes, 0 taken as 1); 0 for bt 0. */
uint64_t gckpt_liger_chunk_rows(uint64_t bt, uint64_t vocab, uint64_t hidden, uint64_t mem_const);

/* The bytes of a fused-loss op's forward (bwd false) or backward temporaries at `tokens`
 * rows, each allocation rounded up to `round` (recipe.h: gckpt_op.fused_loss; x_dtype the
 * dtype of its input 0, compute_dtype autocast's, amp whether under autocast); false on
 * overflow. 0 for an op that is no fused loss's. */
bool gckpt_fused_loss_ws(const gckpt_op *op, bool bwd, uint64_t tokens, uint8_t x_dtype, uint8_t compute_dtype,
                         bool amp, uint64_t round, uint64_t *bytes);

/* Whether `loss` is planned for this model and precision; if not, *why is one sentence
 * naming the family or the precision (gckpt-plan exits 2 with it). */
bool gckpt_fused_loss_supported(const gckpt_model *m, gckpt_precision p, gckpt_loss loss, const char **why);

#ifdef __cplusplus
}
#endif

#endif
