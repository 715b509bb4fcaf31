/* The runs a calibration fits (planner/calibrate.c), as its readers (calibrate_read.c) find
 * them in gckpt-run reports and the Trainer callback's records: each one a plan entry that
 * ran (its model, setting and the profile it was planned with) and its measured step time. */
#ifndef GCKPT_CALIBRATE_RUNS_H
#define GCKPT_CALIBRATE_RUNS_H

#include <stdbool.h>
#include <stddef.h>

#include "gckpt/core/device.h"
#include "gckpt/core/model.h"
#include "gckpt/core/setting.h"
#include "gckpt/util/util.h"

/* One input file. */
typedef struct {
    char name[256];      /* file name without its directory */
    char sha256[65];
    char generator[64];  /* "gckpt-run 0.1.0", "hf-trainer" */
    char backend[16];    /* host, cuda, hf-trainer */
    char measured_on[128]; /* the report's device name */
    char kind[8];        /* what that device is: "cpu" or "gpu" */
    char planned_for[128]; /* the profile name the plans used */
} cal_source;

/* One measured entry. */
typedef struct {
    size_t src;           /* index into cal_input.src */
    long entry;           /* plan entry index (gckpt-run) or line number (Trainer) */
    double measured_s;
    double planned_s;     /* the plan's predicted step time (as the plan was written) */
    gckpt_model model;
    gckpt_device plan_dev;  /* the profile the plan embeds */
    gckpt_target target;
    gckpt_setting set;
} cal_run;

typedef struct {
    cal_source *src;
    size_t nsrc;
    cal_run *run;
    size_t nrun, cap;
} cal_input;

/* Read one file (a gckpt-run report or a Trainer callback JSON Lines file) into in:
 * a source and its measured runs. Errors name the file and the field. */
bool gckpt_cal_read(const char *path, cal_input *in, gckpt_err *err);
void gckpt_cal_input_free(cal_input *in);

#endif
