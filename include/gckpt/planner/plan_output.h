/* What gckpt-plan writes: the JSON plan (-o), the dashboard (--html) and the plot's image,
 * script and data (--plot). All of them are checked before any work (gckpt_plan_output_check), then
 * written to temporaries and renamed into place together once every one of them has
 * been produced, gnuplot's image included: a failure anywhere leaves no new file and
 * every existing one untouched. */
#ifndef GCKPT_PLAN_OUTPUT_H
#define GCKPT_PLAN_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "gckpt/planner/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *json;                /* -o: NULL none, "-" stdout */
    const char *plot;                /* --plot FILE or NULL */
    const char *html;                /* --html FILE (the dashboard, dash_html.h) or NULL */
    char *plot_paths[GCKPT_NPLOT];   /* FILE and its side files (filled by the check) */
} gckpt_plan_output;

/* Check every output path (gckpt_outpath_check) against the inputs named by model_ref and
 * gpu_ref (names or paths, as --model and --gpu take them). */
bool gckpt_plan_output_check(gckpt_plan_output *o, const char *model_ref, const char *gpu_ref, gckpt_err *err);
/* Produce everything into temporaries, the JSON for "-" onto stdout (flushed and
 * checked), then rename the files into place. msg gets "plan written to ..." (unless
 * quiet) and the plot's lines. */
bool gckpt_plan_output_write(gckpt_plan_output *o, const gckpt_plan *p, FILE *msg, bool quiet, gckpt_err *err);
void gckpt_plan_output_free(gckpt_plan_output *o);

#ifdef __cplusplus
}
#endif

#endif
