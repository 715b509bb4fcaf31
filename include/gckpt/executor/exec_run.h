/* Running plan entries on a backend and judging the measurements against the plan's
 * predictions; the report (schema gckpt.report/1, reports/schema/report.schema.json). */
#ifndef GCKPT_EXEC_RUN_H
#define GCKPT_EXEC_RUN_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "gckpt/executor/executor.h"
#include "gckpt/core/plan_read.h"

#include "gckpt/core/report_read.h" /* GCKPT_REPORT_SCHEMA */
#include "gckpt/formats/report_doc.h" /* run statuses, the summary */
#define GCKPT_MAX_STEPS 1000


typedef struct {
    int steps, warmup;        /* measured steps after warm-up steps */
    double tolerance;         /* relative, for memory */
    double time_tolerance;    /* relative, for the step time; < 0: reported, not judged */
    bool force;               /* run entries predicted not to fit (the GPU, or this host) */
    bool host_guard;          /* host backend: skip entries this machine cannot hold */
    uint64_t seed;
    uint64_t memory_limit;    /* host backend's simulated memory (0: none), for the report */
    /* NULL, or a flag a signal handler sets to the signal's number: the entry stops at the
     * next event or step boundary, frees everything and gets status interrupted */
    const volatile sig_atomic_t *stop;
    /* NULL, or called after every step (step 1..total, warm-up included) */
    void (*on_step)(void *ctx, int step, int total);
    void *on_step_ctx;
    /* the run's ranks (NULL: one); the backend has joined it (gckpt_backend.attach) */
    gckpt_comm *comm;
} gckpt_run_opts;

/* One rank's result of an entry, gathered by rank 0 for the report (plain data: it
 * travels as bytes over the communicator). */
typedef struct {
    int32_t rank, status, pass;           /* gckpt_run_status; pass -1 / 0 / 1 */
    int32_t has_numbers, nmicro, has_time;
    uint64_t pred_peak, peak;             /* allocated bytes: the rank's prediction, measured */
    uint64_t pred_pinned, pinned;
    double step_s, loss, grad_norm;
    uint64_t grad_hash;
    float micro_loss[GCKPT_MAX_RECORDS];  /* the last step's micro-steps, in order */
    char message[160];
} gckpt_rank_result;

/* A measured value against its prediction. */
typedef struct {
    bool measured;            /* false: not measured on this backend (JSON null) */
    bool judged;              /* counts towards pass */
    uint64_t predicted, value;
    double rel;               /* (value - predicted) / predicted; NAN when predicted is 0 and value is not */
    bool pass;
} gckpt_check;

typedef struct {
    size_t index;
    uint32_t every_n;
    bool offload;
    uint64_t micro_batch, grad_accum;
    bool fits;                        /* the plan's prediction */
    gckpt_run_status status;
    int pass;                         /* -1: not judged (skipped), 0, 1 */
    char message[512];
    /* predictions */
    uint64_t pred_schedule_peak;      /* this build's event walk of the entry's schedule */
    double pred_step_s;
    /* measurements */
    gckpt_check peak, device_peak, pinned;
    uint64_t device_over_baseline, context_bytes;
    bool has_time;
    double step_s, step_rel;
    bool time_judged, time_pass;
    double *step_times;               /* the measured steps' times (malloc'd; gckpt_entry_report_free) */
    int nsteps;
    bool has_numbers;
    double loss, grad_norm;           /* several ranks: the loss of the global batch (rank 0's report) */
    uint64_t grad_hash;
    float micro_loss[GCKPT_MAX_RECORDS]; /* the last step's micro-steps' losses */
    int nmicro;
    double wall_s;                    /* the entry's whole run, setup included */
    int nranks;                       /* several ranks: ranks[] holds each one's (rank 0), else 0 */
    gckpt_rank_result *ranks;
} gckpt_entry_report;

/* Free what an entry report holds (its step times, the ranks' results). */
void gckpt_entry_report_free(gckpt_entry_report *rep);
/* The entry's identity and predictions, before it runs (what gckpt_run_entry starts from). */
void gckpt_entry_begin(const gckpt_plan_file *pf, size_t i, gckpt_entry_report *rep);
/* Run entry i of the plan. Never fails as a whole: problems are the entry's status. */
void gckpt_run_entry(gckpt_backend *be, const gckpt_plan_file *pf, size_t i, const gckpt_run_opts *o,
                     gckpt_entry_report *rep);

typedef struct {
    const gckpt_plan_file *plan;
    const char *backend;
    gckpt_devinfo dev;
    gckpt_run_opts opts;
    gckpt_entry_report *entries;
    size_t n;                 /* entries done so far */
    size_t planned;           /* entries selected */
} gckpt_report;

/* The records of the report (one JSON object per line, include/gckpt/executor/report_file.h):
 * the header (what ran where, with which options; "selected" entries), one record per
 * finished entry, and the summary once the run has ended. */
cJSON *gckpt_report_header_json(const gckpt_report *r);
cJSON *gckpt_report_entry_json(const gckpt_entry_report *e);

/* "SIGINT", "SIGTERM", ... ("signal N" for others); static storage. */
const char *gckpt_signal_name(int sig);
/* One line per entry for people. */
void gckpt_report_print_table(const gckpt_report *r, FILE *f);
void gckpt_entry_progress(const gckpt_entry_report *e, size_t k, size_t n, FILE *f);

#endif
