/* The toy parallel mode's and the toy primitive's core functions, compiled only into the test
 * build's libraries (GCKPT_TOY, tests/toy/CMakeLists.txt): docs/architecture.md walks through
 * adding them. A real mode's functions go in core/parallel.c, a real primitive's tracer
 * function in core/recipe_ops.c or core/recipe_attention.c. */
#include <stdlib.h>

#include "parallel_modes.h"
#include "recipe_tracer.h"

static void add_row(gckpt_rank_state *st, gckpt_state_row r)
{
    if (st->n >= GCKPT_MAX_STATE_ROWS) abort();
    st->row[st->n++] = r;
}

/* The toy mode: every rank a full replica that never communicates (one GPU's training on
 * each rank). Its rows: the weights and AdamW's states as on one GPU, and torch AdamW's fp32
 * `step` per parameter tensor (4 B each, summed unrounded like every scalar row). */
void gckpt_rows_toy(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                    uint64_t round, gckpt_rank_state *st)
{
    (void)m, (void)s, (void)rank, (void)round;
    uint64_t tensors = 0;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        add_row(st, (gckpt_state_row){"weight", GCKPT_ROW_WEIGHTS, (int16_t)i, 0, p->weight.dtype, GCKPT_PLACE_DEVICE,
                                      GCKPT_SHARD_NONE, p->copies, p->weight.numel, p->copies * p->weight.bytes});
        for (int k = 0; k < 2; k++)
            add_row(st, (gckpt_state_row){k ? "exp_avg_sq" : "exp_avg", GCKPT_ROW_STATES, (int16_t)i, 0,
                                          p->state[k].dtype, GCKPT_PLACE_DEVICE, GCKPT_SHARD_NONE, p->copies,
                                          p->state[k].numel, p->copies * p->state[k].bytes});
        tensors += p->copies;
    }
    add_row(st, (gckpt_state_row){"AdamW step", GCKPT_ROW_SCALARS, -1, 0, GCKPT_DT_U8, GCKPT_PLACE_DEVICE,
                                  GCKPT_SHARD_NONE, tensors, 4, tensors * 4});
}

/* What the toy mode keeps besides one GPU's state: its scalars and the model's buffers. */
void gckpt_apply_toy(gckpt_ctx *c, const gckpt_rank_state *st, const gckpt_rank_bytes *rb)
{
    (void)st;
    c->parallel = rb->scalars + rb->buffers;
}

/* Its collectives: none (no sim hooks, no sync_events, no step_gather_events: the schedule
 * has no COLLECTIVE event, so gckpt_parallel_volume reads zero). */

/* The toy primitive, x.clone(): a new tensor like x; CloneBackward0 saves nothing. */
int toy_clone(tracer *tr, int x, const char *name)
{
    int o = like(tr, name, x, dt(tr, x), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_TOY, GCKPT_BC_NONE, 0, 0, 0);
    return o;
}
