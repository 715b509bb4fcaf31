/* The simulator (private to core/): it emits the events of one segment of a step at a
 * time, deciding every tensor's lifetime. The schedule builder runs it over a whole step,
 * the fast evaluator's profiler over a few proxy layers; both iterate the same segments
 * (gckpt/core/step.h). */
#ifndef GCKPT_SIM_H
#define GCKPT_SIM_H

#include "gckpt/core/schedule.h"

typedef struct gckpt_sim gckpt_sim;

gckpt_sim *gckpt_sim_new(void);
void gckpt_sim_free(gckpt_sim *s);
/* Start a micro-step of step st (its layers and modes; checkpoints hold the layers'
 * arguments when layer 0 is checkpointed): grads_exist for a later micro-step; sync when it
 * reduces the gradients (gckpt_micro_run.sync: the step's last, or a micro-step standing for
 * it); instance ids from first_id. false when out of memory. */
bool gckpt_sim_begin(gckpt_sim *s, const gckpt_ctx *c, const gckpt_step *st, bool grads_exist, bool sync,
                     uint32_t first_id);
/* The id the next instance would get (a later micro-step continues the numbering). */
uint32_t gckpt_sim_next_id(const gckpt_sim *s);
/* Emit the events of segment g (the optimizer's need no micro-step). */
void gckpt_sim_segment(gckpt_sim *s, const gckpt_seg *g, gckpt_schedule *out);
void gckpt_sim_optimizer(const gckpt_ctx *c, gckpt_schedule *out);

/* ---- buffers outside the recipe (a parallel wrapper's, sim_parallel.c) ---- */
/* A buffer of numel elements of dtype in comp (its allocation rounded as the device rounds):
 * of parameter tensor `tensor` (ALLOC), or (tensor -1) a flat buffer (ALLOC_SCRATCH).
 * Returns its instance. */
int gckpt_sim_buffer(gckpt_sim *s, gckpt_schedule *o, int16_t tensor, uint8_t comp, uint8_t dtype, uint64_t numel);
/* The same, its ALLOC marked with what the buffer is to the parallel mode (gckpt_par_event). */
int gckpt_sim_buffer_as(gckpt_sim *s, gckpt_schedule *o, int16_t tensor, uint8_t comp, uint8_t dtype, uint64_t numel,
                        uint8_t par);
void gckpt_sim_release(gckpt_sim *s, gckpt_schedule *o, int id);
/* The schedule's id of instance id. */
uint32_t gckpt_sim_gid(const gckpt_sim *s, int id);

/* ---- writing a schedule (schedule.c) ---- */
/* A new zeroed event (no operands, op and tensor -1); NULL once out of memory. */
gckpt_event *gckpt_schedule_push(gckpt_schedule *s);
/* Segments: the events pushed between open and close are g's, run repeat times in the step. */
void gckpt_schedule_open(gckpt_schedule *s, const gckpt_seg *g, uint64_t repeat);
void gckpt_schedule_close(gckpt_schedule *s);

#endif
