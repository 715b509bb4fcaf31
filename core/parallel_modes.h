/* Each parallel mode's own rules, the functions the descriptor table (core/parallel_modes.c)
 * points at (private to core): rows (core/parallel.c, the per-rank parameter-state table),
 * apply (what the mode does to a context), offload
 * (CPU offload's copies) and the simulator's hooks (core/sim_parallel.c). gckpt/core/parallel.h
 * documents the fields. */
#ifndef GCKPT_PARALLEL_MODES_H
#define GCKPT_PARALLEL_MODES_H

#include "gckpt/core/parallel.h"

#define GCKPT_MODE_ROWS(name)                                                                                       \
    void gckpt_rows_##name(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank, \
                           uint64_t round, gckpt_rank_state *st)
#define GCKPT_MODE_APPLY(name) \
    void gckpt_apply_##name(gckpt_ctx *c, const gckpt_rank_state *st, const gckpt_rank_bytes *rb)
#define GCKPT_MODE_OFFLOAD(name)                                                                            \
    void gckpt_offload_##name(const gckpt_ctx *c, uint64_t grad_accum, const gckpt_comm_volume *v, double *d2h, \
                              double *h2d)

GCKPT_MODE_ROWS(ddp);
GCKPT_MODE_ROWS(fsdp);
GCKPT_MODE_ROWS(zero12);
GCKPT_MODE_ROWS(zero3);
GCKPT_MODE_APPLY(ddp);
GCKPT_MODE_APPLY(fsdp);
GCKPT_MODE_APPLY(zero12);
GCKPT_MODE_APPLY(zero3);
GCKPT_MODE_OFFLOAD(fsdp);
GCKPT_MODE_OFFLOAD(zero12);
GCKPT_MODE_OFFLOAD(zero3);
#ifdef GCKPT_TOY /* the toy mode's (tests/toy/toy_core.c) */
GCKPT_MODE_ROWS(toy);
GCKPT_MODE_APPLY(toy);
#endif

#endif
