/* gckpt-plan's outputs, checked up front and committed together
 * (include/gckpt/planner/plan_output.h). */
#include "gckpt/planner/plan_output.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/planner/dash_html.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/outpath.h"
#include "gckpt/util/stdio_check.h"

bool gckpt_plan_output_check(gckpt_plan_output *o, const char *model_ref, const char *gpu_ref, gckpt_err *err)
{
    if (o->plot) {
        if (!gckpt_plot_name_ok(o->plot, err)) return false;
        if (!gckpt_plot_paths(o->plot, o->plot_paths)) {
            gckpt_seterr(err, "out of memory");
            return false;
        }
    }
    /* the inputs, resolved as the planner will resolve them */
    char model[4096], gpu[4096];
    if (!gckpt_resolve_data("models", model_ref, model, sizeof model, err) ||
        !gckpt_resolve_data("devices", gpu_ref, gpu, sizeof gpu, err))
        return false;
    const char *ins[] = {model, gpu};
    const char *outs[2 + GCKPT_NPLOT] = {o->json, o->html};
    for (int i = 0; i < GCKPT_NPLOT; i++) outs[2 + i] = o->plot_paths[i];
    return gckpt_outpath_check(outs, 2 + GCKPT_NPLOT, ins, 2, err);
}

bool gckpt_plan_output_write(gckpt_plan_output *o, const gckpt_plan *p, FILE *msg, bool quiet, gckpt_err *err)
{
    gckpt_afile json, html, plot[GCKPT_NPLOT];
    gckpt_afile_init(&json);
    gckpt_afile_init(&html);
    for (int i = 0; i < GCKPT_NPLOT; i++) gckpt_afile_init(&plot[i]);
    bool to_file = o->json && strcmp(o->json, "-");
    char *text = NULL, *page = NULL, note[600] = "";
    bool ok = true, drawn = false;
    cJSON *doc = o->json || o->html ? gckpt_plan_to_json(p, true) : NULL;
    /* the dashboard over the plan (named by its file when it is written to one) */
    if (o->html && doc) ok = (page = gckpt_dash_page(doc, to_file ? o->json : NULL, NULL, 0, err)) != NULL;
    if (o->json && !(text = gckpt_json_text(doc, true))) { /* doc consumed */
        gckpt_seterr(err, "out of memory while writing the plan");
        ok = false;
    } else if (!o->json) {
        cJSON_Delete(doc);
    }
    if ((o->json || o->html) && !doc) {
        gckpt_seterr(err, "out of memory while writing the plan");
        ok = false;
    }
    /* 1. everything into temporaries */
    ok = ok && (!to_file || (gckpt_afile_open(&json, o->json, err) && gckpt_afile_write(&json, text, strlen(text), err)));
    ok = ok && (!o->html || (gckpt_afile_open(&html, o->html, err) && gckpt_afile_write(&html, page, strlen(page), err)));
    for (int i = 0; ok && o->plot && i < GCKPT_NPLOT; i++) ok = gckpt_afile_open(&plot[i], o->plot_paths[i], err);
    ok = ok && (!o->plot || gckpt_plan_plot(p, o->plot, plot, &drawn, note, sizeof note, err));
    /* 2. stdout, which cannot be taken back, only once the files are ready */
    if (ok && o->json && !to_file) ok = gckpt_write_file_atomic("-", text, err);
    ok = ok && gckpt_stdout_check(err);
    /* 3. the renames */
    ok = ok && (!to_file || gckpt_afile_commit(&json, false, err));
    ok = ok && (!o->html || gckpt_afile_commit(&html, false, err));
    if (o->plot && !drawn) gckpt_afile_abort(&plot[GCKPT_PLOT_IMAGE]);
    for (int i = drawn ? 0 : 1; ok && o->plot && i < GCKPT_NPLOT; i++) ok = gckpt_afile_commit(&plot[i], false, err);
    gckpt_afile_abort(&json); /* no-ops after a commit */
    gckpt_afile_abort(&html);
    for (int i = 0; i < GCKPT_NPLOT; i++) gckpt_afile_abort(&plot[i]);
    free(text);
    free(page);
    if (!ok) return false;
    if (to_file && !quiet) fprintf(msg, "\nplan written to %s\n", o->json);
    if (o->html && !quiet) fprintf(msg, "%sdashboard written to %s\n", to_file ? "" : "\n", o->html);
    if (o->plot && drawn)
        fprintf(msg, "plot written to %s (gnuplot script %s)%s%s\n", o->plot, o->plot_paths[GCKPT_PLOT_SCRIPT],
                note[0] ? "; gnuplot warned: " : "", note);
    else if (o->plot)
        fprintf(msg, "gnuplot is not installed: wrote %s, %s and %s; run 'gnuplot %s' where it is (Debian: apt-get install gnuplot-nox)\n",
                o->plot_paths[GCKPT_PLOT_SCRIPT], o->plot_paths[GCKPT_PLOT_ENTRIES], o->plot_paths[GCKPT_PLOT_TIMELINE],
                o->plot_paths[GCKPT_PLOT_SCRIPT]);
    return true;
}

void gckpt_plan_output_free(gckpt_plan_output *o)
{
    for (int i = 0; i < GCKPT_NPLOT; i++) {
        free(o->plot_paths[i]);
        o->plot_paths[i] = NULL;
    }
}
