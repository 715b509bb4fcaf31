/* Memory timeline of one entry, and the gnuplot output of a plan. */
#include "gckpt/planner/plan.h"

#include "gckpt/core/eval.h"
#include "gckpt/core/step_walk.h"
#include "gckpt/planner/gnuplot_run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The timeline's buckets: each of max buckets of time keeps its highest point. */
typedef struct {
    double *t, *bytes;
    uint8_t *phase;
    size_t max;
    double now, total_t;
} timeline_buckets;

static void timeline_event(void *user, const gckpt_walk_state *w, const gckpt_event *e)
{
    timeline_buckets *tl = user;
    tl->now += e->seconds;
    size_t b = tl->total_t > 0 ? (size_t)(tl->now / tl->total_t * (double)(tl->max - 1)) : 0;
    if (b >= tl->max) b = tl->max - 1;
    if ((double)w->m.total > tl->bytes[b]) {
        tl->bytes[b] = (double)w->m.total;
        tl->t[b] = tl->now;
        tl->phase[b] = (uint8_t)gckpt_seg_phase(w->seg);
    }
}

static void add_seconds(void *user, const gckpt_walk_state *w, const gckpt_event *e)
{
    (void)w;
    *(double *)user += e->seconds;
}

/* The buckets' points in time order, the empty ones dropped. */
static size_t compact(double *t, double *bytes, uint8_t *phase, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < max; i++)
        if (t[i] >= 0) {
            t[n] = t[i];
            bytes[n] = bytes[i];
            phase[n] = phase[i];
            n++;
        }
    return n;
}

/* A VLM's step (plan_vlm.c): both towers' composed schedule, walked once for its length and
 * once into the buckets */
static size_t vlm_timeline(const gckpt_plan *p, const gckpt_entry *e, double *t, double *bytes, uint8_t *phase,
                           size_t max)
{
    timeline_buckets tl = {t, bytes, phase, max, 0, 0};
    for (size_t i = 0; i < max; i++) {
        t[i] = -1;
        bytes[i] = -1;
        phase[i] = 0;
    }
    if (!max || !gckpt_plan_vlm_events(p, e, add_seconds, &tl.total_t) ||
        !gckpt_plan_vlm_events(p, e, timeline_event, &tl))
        return 0;
    return compact(t, bytes, phase, max);
}

size_t gckpt_plan_timeline(const gckpt_plan *p, const gckpt_entry *e, double *t, double *bytes,
                           uint8_t *phase, size_t max)
{
    if (p->vlm) return vlm_timeline(p, e, t, bytes, phase, max);
    gckpt_setting s = gckpt_plan_setting(p, e->micro_batch, e->grad_accum);
    s.every_n = e->every_n;
    s.offload = e->offload;
    gckpt_ctx *c = malloc(sizeof *c);
    gckpt_err err;
    gckpt_schedule sc = {0};
    uint32_t rank = 0, tp_rank = 0;
    /* TP: the busiest TP rank's step is the entry's (gckpt_plan_tp_busiest): its own model and recipe */
    gckpt_model tpm;
    gckpt_recipe *tpr = NULL;
    bool ok = max > 0 && c && (!p->req.tp || gckpt_plan_tp_entry_rank(p, e, &tp_rank));
    if (ok && tp_rank) {
        s = gckpt_plan_setting_tp(p, e->micro_batch, e->grad_accum, tp_rank);
        s.every_n = e->every_n;
        s.offload = e->offload;
        ok = (tpr = malloc(sizeof *tpr)) && gckpt_plan_tp_rank_ctx(p, tp_rank, e->micro_batch, e->grad_accum, &tpm, tpr, c, &err);
    }
    const gckpt_model *m = tpr ? &tpm : &p->model;
    const gckpt_recipe *rc = tpr ? tpr : p->recipe;
    ok = ok && gckpt_ctx_init(c, m, &p->dev, rc, &s, &err) && gckpt_result_rank(c, &rank);
    if (ok && rank != s.layout.rank) { /* ZeRO-1/2: the busiest rank's step is the entry's */
        s.layout.rank = rank;
        ok = gckpt_ctx_init(c, m, &p->dev, rc, &s, &err);
    }
    if (!ok || !gckpt_schedule_build(c, &sc)) {
        gckpt_schedule_free(&sc);
        free(c);
        free(tpr);
        return 0;
    }
    timeline_buckets tl = {t, bytes, phase, max, 0, 0};
    for (size_t i = 0; i < sc.n; i++) tl.total_t += sc.ev[i].seconds;
    for (size_t i = 0; i < max; i++) {
        t[i] = -1;
        bytes[i] = -1;
        phase[i] = 0;
    }
    int64_t start[GCKPT_NCOMP];
    gckpt_step_start(c, s.every_n, start);
    gckpt_walk_state w;
    gckpt_walk_begin(&w, start, true);
    gckpt_walk_schedule(&w, &sc, timeline_event, &tl);
    gckpt_schedule_free(&sc);
    free(c);
    free(tpr);
    return compact(t, bytes, phase, max);
}

bool gckpt_plot_name_ok(const char *file, gckpt_err *err)
{
    size_t len = strlen(file);
    if (!(len > 4 && (!strcmp(file + len - 4, ".png") || !strcmp(file + len - 4, ".svg")))) {
        gckpt_seterr(err, "--plot %s: the file name must end in .png or .svg", file);
        return false;
    }
    if (len >= 4096) {
        gckpt_seterr(err, "--plot: the file name is too long");
        return false;
    }
    for (const char *c = file; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            gckpt_seterr(err, "--plot %s: the file name contains a control character", file);
            return false;
        }
    return true;
}

/* s as the inside of a gnuplot single-quoted string: a quote is doubled, control
 * characters (which would end the command) become '?'. Model and GPU names come from
 * files people download: without this a name could inject gnuplot commands (system()). */
static const char *gp_quote(const char *s, char *out, size_t n)
{
    size_t k = 0;
    for (; *s && k + 3 < n; s++) {
        if (*s == '\'') {
            out[k++] = '\'';
            out[k++] = '\'';
        } else {
            out[k++] = ((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s;
        }
    }
    out[k] = 0;
    return out;
}

/* The side files of FILE, in the order of GCKPT_PLOT_* after the image. */
static const char *const side_suffix[GCKPT_NPLOT] = {"", ".gp", ".entries.dat", ".timeline.dat"};

bool gckpt_plot_paths(const char *file, char *out[GCKPT_NPLOT])
{
    bool ok = true;
    for (int i = 0; i < GCKPT_NPLOT; i++) {
        size_t n = strlen(file) + strlen(side_suffix[i]) + 1;
        out[i] = malloc(n);
        if (out[i]) snprintf(out[i], n, "%s%s", file, side_suffix[i]);
        ok = ok && out[i];
    }
    return ok;
}

static void write_entries(const gckpt_plan *p, FILE *f)
{
    fprintf(f, "# device_peak_GiB step_s tokens_per_s fits recommended every_n offload micro_batch\n");
    for (size_t i = 0; i < p->n; i++) {
        const gckpt_entry *e = &p->entries[i];
        fprintf(f, "%.6f %.6f %.3f %d %d %u %d %llu\n", (double)e->r.device_peak_bytes / 1073741824.0,
                e->r.step_s, e->r.tokens_per_s, e->fits, (long)i == p->recommended, e->every_n,
                e->offload, (unsigned long long)e->micro_batch);
    }
}

/* The gnuplot script: the image goes to output (NULL: gnuplot's stdout), the data come
 * from the files dat and tl. */
static void write_script(const gckpt_plan *p, FILE *f, const char *file, const char *output, const char *dat,
                         const char *tl, long shown, const double *ts, const double *bs, size_t np)
{
    size_t len = strlen(file);
    const char *term = !strcmp(file + len - 4, ".png") ? "pngcairo size 1400,600 font 'Sans,10'"
                                                       : "svg size 1400,600 dynamic font 'Sans,10'";
    char q_file[8400], q_dat[8400], q_tl[8400], q_model[300], q_dev[300];
    double budget = (double)p->usable_bytes / 1073741824.0;
    char title[256] = "";
    if (shown >= 0) {
        const gckpt_entry *e = &p->entries[shown];
        char en[16];
        if (e->every_n) snprintf(en, sizeof en, "%u", e->every_n);
        else snprintf(en, sizeof en, "off");
        snprintf(title, sizeof title, "%s entry: every_n_layers=%s offload=%s micro-batch=%llu",
                 p->recommended >= 0 ? "recommended" : "nothing fits; smallest", en, e->offload ? "on" : "off",
                 (unsigned long long)e->micro_batch);
    }
    gp_quote(dat, q_dat, sizeof q_dat);
    gp_quote(tl, q_tl, sizeof q_tl);
    fprintf(f, "set terminal %s\n", term);
    if (output) fprintf(f, "set output '%s'\n", gp_quote(output, q_file, sizeof q_file));
    fprintf(f, "set multiplot layout 1,2 title '%s on %s, seq %llu, %s, %s'\n",
            gp_quote(p->model.name, q_model, sizeof q_model),
            gp_quote(p->dev.name, q_dev, sizeof q_dev), (unsigned long long)p->req.seq,
            gckpt_precision_names[p->req.precision], gckpt_optimizer_names[p->req.optimizer]);
    /* left: every entry; x always spans the usable budget */
    double lo = budget, hi = budget;
    uint32_t max_n = 1;
    for (size_t i = 0; i < p->n; i++) {
        double g = (double)p->entries[i].r.device_peak_bytes / 1073741824.0;
        lo = g < lo ? g : lo;
        hi = g > hi ? g : hi;
        max_n = p->entries[i].every_n > max_n ? p->entries[i].every_n : max_n;
    }
    double pad = (hi - lo) * 0.06 + 0.01 * hi;
    fprintf(f, "set termoption noenhanced\nset grid\nset xlabel 'device peak (GiB)'\nset ylabel 'tokens/s'\n"
               "set key outside bottom center horizontal\nset xrange [%.4f:%.4f]\n",
            lo - pad > 0 ? lo - pad : 0, hi + pad);
    fprintf(f, "set palette defined (0 '#440154', 0.5 '#21918c', 1 '#fde725')\nset cbrange [0:%u]\n"
               "set cblabel 'every_n_layers (0 = off)'\n", max_n);
    fprintf(f, "set arrow 1 from %.4f, graph 0 to %.4f, graph 1 nohead lw 2 dt 2 lc rgb '#cc0000'\n", budget, budget);
    fprintf(f, "set label 1 'usable budget %.2f GiB' at %.4f, graph 0.97 left offset 0.5,0 front tc rgb '#cc0000'\n",
            budget, budget);
    if (p->recommended < 0)
        fprintf(f, "set label 3 'nothing fits: every entry is right of the budget' at graph 0.35, graph 0.04 front "
                   "tc rgb '#cc0000'\n");
    fprintf(f, "plot '%s' using ($7==0?$1:1/0):3:6 with points pt 7 ps 1.1 lc palette title 'offload off (colour: every_n)', \\\n"
               "     '%s' using ($7==1?$1:1/0):3:6 with points pt 5 ps 0.9 lc palette title 'offload on'",
            q_dat, q_dat);
    if (p->recommended >= 0)
        fprintf(f, ", \\\n     '%s' using ($5==1?$1:1/0):3 with points pt 6 ps 3.5 lw 2 lc rgb '#d62728' "
                   "title 'recommended (fits)'", q_dat);
    fprintf(f, "\n");
    /* right: the shown entry's memory over the step, by phase, with its peak */
    fprintf(f, "unset arrow 1\nunset label 1\nunset label 3\nunset colorbox\nset autoscale x\n"
               "set xlabel 'time in step (s)'\nset ylabel 'allocated (GiB)'\nset title '%s'\n", title);
    double top = budget, tpk = 0, bpk = -1;
    for (size_t i = 0; i < np; i++) {
        double g = bs[i] / 1073741824.0;
        if (g > top) top = g;
        if (g > bpk) {
            bpk = g;
            tpk = ts[i];
        }
    }
    fprintf(f, "set yrange [0:%.4f]\n", top * 1.1);
    if (!np) fprintf(f, "set xrange [0:1]\n"); /* no timeline could be built: an empty panel */
    fprintf(f, "set arrow 2 from graph 0, first %.4f to graph 1, first %.4f nohead front lw 2 dt 2 lc rgb '#cc0000'\n", budget, budget);
    fprintf(f, "set label 2 'usable budget' at graph 0.02, first %.4f offset 0,0.7 front tc rgb '#cc0000'\n", budget);
    if (bpk >= 0)
        fprintf(f, "set label 4 'peak %.2f GiB' at %.6f, %.4f point pt 7 ps 1.5 lc rgb '#000000' offset 1,0.8\n", bpk,
                tpk, bpk);
    static const char *const colour[GCKPT_NPHASE] = {"#1f77b4", "#9467bd", "#ff7f0e", "#2ca02c"};
    fprintf(f, "plot ");
    for (int k = 0; k < GCKPT_NPHASE; k++)
        fprintf(f, "%s'%s' using 1:($3==%d?$2:1/0) with impulses lw 2 lc rgb '%s' title '%s'", k ? ", \\\n     " : "",
                q_tl, k, colour[k], gckpt_phase_names[k]);
    fprintf(f, ", \\\n     '%s' using 1:2 with lines lw 1 lc rgb '#333333' notitle\nunset multiplot\n", q_tl);
}

/* fclose with its result folded into ok (a stream from gckpt_afile_stream) */
static bool closed(FILE *f, bool ok, const char *path, gckpt_err *err)
{
    bool good = !ferror(f);
    good = (fclose(f) == 0) && good;
    if (!good && ok) gckpt_seterr(err, "%s: write error", path);
    return ok && good;
}

bool gckpt_plan_plot(const gckpt_plan *p, const char *file, gckpt_afile f[GCKPT_NPLOT], bool *drawn, char *note,
                     size_t note_n, gckpt_err *err)
{
    *drawn = false;
    if (note_n) note[0] = 0;
    if (!gckpt_plot_name_ok(file, err)) return false;
    char *names[GCKPT_NPLOT];
    bool ok = gckpt_plot_paths(file, names);
    FILE *s = ok ? gckpt_afile_stream(&f[GCKPT_PLOT_ENTRIES], err) : NULL;
    if (s) {
        write_entries(p, s);
        ok = closed(s, ok, names[GCKPT_PLOT_ENTRIES], err);
    } else {
        ok = false;
    }
    long shown = p->recommended >= 0 ? p->recommended : p->smallest;
    enum { MAXP = 2000 };
    double *ts = malloc(sizeof *ts * MAXP), *bs = malloc(sizeof *bs * MAXP);
    uint8_t *ph = malloc(MAXP);
    size_t np = (ts && bs && ph && shown >= 0) ? gckpt_plan_timeline(p, &p->entries[shown], ts, bs, ph, MAXP) : 0;
    if (ok && (s = gckpt_afile_stream(&f[GCKPT_PLOT_TIMELINE], err))) {
        fprintf(s, "# seconds allocated_GiB phase\n");
        for (size_t i = 0; i < np; i++) fprintf(s, "%.6f %.6f %d\n", ts[i], bs[i] / 1073741824.0, ph[i]);
        ok = closed(s, ok, names[GCKPT_PLOT_TIMELINE], err);
    } else {
        ok = false;
    }
    /* the script kept next to the image names the final files; the one gnuplot runs now
     * reads the temporaries and writes to its stdout, the image's temporary */
    if (ok && (s = gckpt_afile_stream(&f[GCKPT_PLOT_SCRIPT], err))) {
        write_script(p, s, file, file, names[GCKPT_PLOT_ENTRIES], names[GCKPT_PLOT_TIMELINE], shown, ts, bs, np);
        ok = closed(s, ok, names[GCKPT_PLOT_SCRIPT], err);
    } else {
        ok = false;
    }
    if (ok && gckpt_gnuplot_available()) {
        char *text = NULL;
        size_t len = 0;
        char dat[4200], tl[4200];
        FILE *m = open_memstream(&text, &len);
        if (m) {
            write_script(p, m, file, NULL, gckpt_afile_tmp_path(&f[GCKPT_PLOT_ENTRIES], dat, sizeof dat),
                         gckpt_afile_tmp_path(&f[GCKPT_PLOT_TIMELINE], tl, sizeof tl), shown, ts, bs, np);
            ok = fclose(m) == 0;
        }
        if (!m || !ok) {
            gckpt_seterr(err, "--plot %s: out of memory", file);
            ok = false;
        } else if (!gckpt_gnuplot_run(text, len, f[GCKPT_PLOT_IMAGE].fd, note, note_n, err)) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            gckpt_seterr(err, "--plot %s: %s", file, why);
            ok = false;
        } else {
            *drawn = true;
        }
        free(text);
    }
    free(ts);
    free(bs);
    free(ph);
    for (int i = 0; i < GCKPT_NPLOT; i++) free(names[i]);
    return ok;
}
