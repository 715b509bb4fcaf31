/* Calibrating a device profile from measured step times (gckpt-plan --calibrate-from,
 * docs/calibration.md): the time model's knobs (matmul_efficiency, hbm_efficiency, the
 * pinned copy bandwidths) fitted to the step times that real runs measured, written as a
 * profile (schema gckpt.device/1) with a "calibration" object saying where it came from. */
#ifndef GCKPT_CALIBRATE_H
#define GCKPT_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The knobs, in the order of gckpt_calibration_summary.knob. The pinned copy knob scales
 * h2d_bytes_per_s and d2h_bytes_per_s by one factor: checkpoint offload copies the same
 * bytes each way, so a step time cannot tell the two apart.
 * Which fields they set depends on the calibration (gckpt_calibration_summary.code_base):
 *  - a base profile with "code_bases" and runs planned for CUDA kernels: the time parameters
 *    of the runs' code base (code_bases.<cb>.matmul_factor, hbm_factor, attention_factor,
 *    op_overhead_s, step_overhead_s) and the copy rates; the chip's efficiencies are kept;
 *  - otherwise (CPU kernels, a profile without code_bases): matmul_efficiency, hbm_efficiency
 *    and the copy rates; ATTN, OP and STEP do not apply. */
enum { GCKPT_CAL_MATMUL, GCKPT_CAL_HBM, GCKPT_CAL_COPY, GCKPT_CAL_ATTN, GCKPT_CAL_OP, GCKPT_CAL_STEP, GCKPT_CAL_NKNOB };
extern const char *const gckpt_cal_knob_names[GCKPT_CAL_NKNOB]; /* "matmul_efficiency", ... (the efficiency mode's) */

typedef struct {
    char field[64];       /* the profile field it sets ("matmul_efficiency", "code_bases.fused.hbm_factor";
                           * copy: "h2d_bytes_per_s") */
    bool applies;         /* false: not a knob of this calibration (not fitted, not printed) */
    double before, after; /* the profile's value (copy: h2d_bytes_per_s) before and after */
    bool fitted;          /* identifiable from the runs and fitted; false: kept as it was */
    bool clamped;         /* the fit left the field's range and was held at its bound */
    char why[160];        /* why it was (not) fitted, one phrase */
} gckpt_cal_knob;

typedef struct {
    char file[256];    /* the report's file name (no directory) */
    long entry;        /* the plan entry */
    double measured_s; /* measured step time */
    double before_s;   /* predicted with the base profile */
    double after_s;    /* predicted with the calibrated profile */
} gckpt_cal_run;

typedef struct {
    char device[128];          /* the profile's name */
    char measured_on[160];     /* what the runs ran on (the report's device name, backend) */
    int code_base;             /* the code base whose parameters were fitted, -1: the efficiencies */
    gckpt_cal_knob knob[GCKPT_CAL_NKNOB];
    gckpt_cal_run *runs;       /* malloc'd; gckpt_calibration_summary_free */
    size_t n_runs;
    double rms_before, rms_after; /* RMS of the relative errors (predicted - measured) / measured */
    double med_before, med_after; /* median |relative error| */
    double max_before, max_after; /* largest |relative error| */
} gckpt_calibration_summary;

/* Fit the knobs of base_gpu_ref (a name in devices/ or a path; NULL: the profile the plans of
 * the reports were made with) to the measured step times in report_paths[0..n) (gckpt.report/2
 * JSON Lines of gckpt-run or gckpt.TrainerCallback; the plan each ran must be at its
 * plan.file; the fields read are in docs/calibration.md). On success *profile_json_out is the calibrated profile's text
 * (malloc'd, ends in a newline) and sum is filled (free it with
 * gckpt_calibration_summary_free). On bad input: false, err is one line naming the file and
 * the field, nothing allocated. */
bool gckpt_calibrate(const char *const *report_paths, size_t n, const char *base_gpu_ref, char **profile_json_out,
                     gckpt_calibration_summary *sum, gckpt_err *err);
void gckpt_calibration_summary_free(gckpt_calibration_summary *sum);
/* The summary as gckpt-plan --calibrate-from prints it: the knobs before and after, each
 * run's predicted and measured step time, the errors. */
void gckpt_calibration_print(const gckpt_calibration_summary *sum, FILE *f);

#ifdef __cplusplus
}
#endif

#endif
