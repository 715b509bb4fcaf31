/* What a plan file holds, shared by the planner that writes it (gckpt/planner/plan.h,
 * plan_json.c) and the plan reader that checks it (gckpt/core/plan_read.h): the schema's
 * name, the limits both sides hold it to, an entry (one setting and its result) and a
 * warning. */
#ifndef GCKPT_PLAN_FORMAT_H
#define GCKPT_PLAN_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gckpt/core/eval.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCKPT_PLAN_SCHEMA "gckpt.plan/2"
#define GCKPT_MAX_MB 64
#define GCKPT_MAX_ENTRIES 1000000

/* Largest time (seconds) a plan may hold: gckpt-run's plan reader refuses more. */
#define GCKPT_MAX_SECONDS 1e12

typedef enum { GCKPT_OFFLOAD_OFF, GCKPT_OFFLOAD_ON, GCKPT_OFFLOAD_BOTH } gckpt_offload_sel;

/* A documented limit of the model that the planned setting hits (the rules: planner/warnings.c; each code
 * is explained in docs/warnings.md). message: one or two sentences ending with a full
 * stop, malloc'd as long as its text and owned by the plan or plan file that holds it. */
typedef struct {
    char code[40];
    char *message;
} gckpt_warning;
#define GCKPT_MAX_WARNINGS 24

/* Frees the messages of w[0..*n) and sets *n to 0. */
void gckpt_warnings_free(gckpt_warning *w, size_t *n);

/* One setting of the sweep and its result. */
typedef struct {
    uint32_t every_n;
    bool offload;
    uint64_t micro_batch, grad_accum;
    gckpt_result r;
    bool fits, pareto;
} gckpt_entry;

#ifdef __cplusplus
}
#endif

#endif
