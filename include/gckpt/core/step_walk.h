/* The step walked once: a schedule's segments in order, each run `repeat` times (a later
 * micro-step's segments stand for several of the step's micro-steps: gckpt_micro_runs), their
 * events applied to the memory accounting (gckpt_mem_apply) and tallied: the peak and what
 * held it, the pinned host peak, seconds and FLOPs by kind (times the repeat count), the
 * collectives' bytes. One visitor, read by the memory walk and the segment summaries
 * (eval.c), the timeline (plot and dashboard) and gckpt-run's host time estimate; a
 * reader that needs each event (the timeline) passes a callback.
 * (core: read by the planner and the executor) */
#ifndef GCKPT_STEP_WALK_H
#define GCKPT_STEP_WALK_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The state of a walk: memory now and what the events so far add up to. */
typedef struct gckpt_walk_state {
    gckpt_mem m;                  /* device bytes per component and pinned host bytes now */
    /* the highest m.total right after an allocation (from the floor gckpt_walk_begin set),
     * the components there, and the allocation: its tensor, whether a gradient, its segment */
    int64_t peak;
    int64_t at_peak[GCKPT_NCOMP];
    bool has_peak;                /* an allocation raised the peak */
    int16_t peak_tensor;
    bool peak_grad;
    gckpt_seg peak_seg;
    int64_t host_peak;            /* the highest m.host right after a host allocation */
    /* m.total when the first micro-step's backward begins (gckpt_seg_starts_backward) */
    int64_t after_forward;
    bool after_forward_seen;
    /* seconds and FLOPs, each event's times its segment's repeat count: every event's
     * seconds; forward, backward and recompute; offload copies; the optimizer's update;
     * the forward and backward FLOPs (a recompute's excluded), and with the recomputes' */
    double seconds, fwd_s, bwd_s, recompute_s, copy_s, opt_s, flops, hw_flops;
    /* bytes of the COLLECTIVE events (times repeat): reductions (of them all-reduces), the
     * forward's, the backward's and the optimizer step's all-gathers; coll_seen when there was one */
    double coll_reduce, coll_all_reduce, coll_gather_fwd, coll_gather_bwd, coll_gather_opt;
    /* the all-gathers' pieces (one rank's elements, the event's numel) per recipe section: FSDP2's
     * CPU offload copies each gathered unit's shards to the device (gckpt_offload_fsdp) */
    double coll_gather_part[GCKPT_NSEC];
    bool coll_seen;
    /* the segment being walked and its repeat count (for the event callback) */
    const gckpt_seg *seg;
    uint64_t repeat;
} gckpt_walk_state;

/* Called after each event is applied and tallied (w->m is the memory after it). */
typedef void (*gckpt_walk_event_fn)(void *user, const gckpt_walk_state *w, const gckpt_event *e);

/* A walk starting from start's components (NULL: none). floor: the peak starts at the
 * start's total, an allocation must exceed it (a step); else the first allocation is the
 * first peak whatever its height (a segment's summary, relative to its start). */
void gckpt_walk_begin(gckpt_walk_state *w, const int64_t start[GCKPT_NCOMP], bool floor);

/* The events ev[0 .. n) of segment seg, run repeat times, walked; on_event (NULL: none)
 * after each. */
void gckpt_walk_segment(gckpt_walk_state *w, const gckpt_seg *seg, uint64_t repeat, const gckpt_event *ev, size_t n,
                        gckpt_walk_event_fn on_event, void *user);

/* Every segment of a schedule in order (gckpt_walk_segment with its repeat count). */
void gckpt_walk_schedule(gckpt_walk_state *w, const gckpt_schedule *sc, gckpt_walk_event_fn on_event, void *user);

/* The memory at the start of a steady-state step of c at every_n: the persistent state
 * (gckpt_persistent) and, under DDP with every_n off, find_unused_parameters' maps
 * (c->par.ddp_used_map, in PARALLEL). */
void gckpt_step_start(const gckpt_ctx *c, uint32_t every_n, int64_t start[GCKPT_NCOMP]);

#ifdef __cplusplus
}
#endif

#endif
