/* Calibration: the time model's knobs fitted to measured step times (docs/calibration.md).
 *
 * The planner times every op as max(FLOPs / (peak x matmul_efficiency), bytes / (HBM x
 * hbm_efficiency)), offload copies at the pinned h2d / d2h rates and the optimizer as an HBM
 * pass (core/ctx.c, core/sim.c). With s_k the slowdown of knob k against the base profile
 * (matmul_efficiency / s_0, hbm_efficiency / s_1, both copy rates / s_2), a run's predicted
 * step is piecewise linear in s: linear as long as no op changes side of its max. The fit
 * re-evaluates each run's plan entry with the planner's own evaluator, takes the linear piece
 * at the current s (derivatives by differences, exact within a piece) and solves it by least
 * squares on the relative errors, until s stays put. A knob is fitted only where the runs can
 * tell it apart from the others: its share of the predicted step, less what the knobs chosen
 * before it explain (column-pivoted Gram-Schmidt), must be at least CAL_MIN_SHARE. With one
 * such knob the fit is the median over the runs of the value each alone asks for. */
#include "gckpt/planner/calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calibrate_runs.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/schedule.h"
#include "gckpt/formats/device_json.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/safe_text.h"
#include "gckpt/util/sha256.h"

const char *const gckpt_cal_knob_names[GCKPT_CAL_NKNOB] = {"matmul_efficiency", "hbm_efficiency", "h2d_bytes_per_s",
                                                           "attention_factor",  "op_overhead_s",  "step_overhead_s"};

/* What a calibration fits (gckpt/planner/calibrate.h): the base profile and, cb >= 0, the code
 * base whose time parameters are the knobs (else the efficiencies). Knob k is the slowdown s_k:
 * a rate knob divides its field by s_k; an overhead knob adds (s_k - 1) x its unit to the base
 * value, so s = 1 is the base profile and a step is linear in s within a piece either way. */
typedef struct {
    const gckpt_device *base;
    int cb;
    bool applies[GCKPT_CAL_NKNOB];
} cal_space;

/* The overheads' units: a kernel launch and an optimizer step's fixed cost, the size of the
 * shipped fit's values; a share of the step is what an overhead of one unit would take. */
#define CAL_OP_UNIT 5e-6
#define CAL_STEP_UNIT 0.05
static const char *const cb_fields[GCKPT_CAL_NKNOB] = {"matmul_factor", "hbm_factor", "h2d_bytes_per_s",
                                                        "attention_factor", "op_overhead_s", "step_overhead_s"};

static bool is_overhead(int k) { return k == GCKPT_CAL_OP || k == GCKPT_CAL_STEP; }
static double unit_of(int k) { return k == GCKPT_CAL_OP ? CAL_OP_UNIT : CAL_STEP_UNIT; }

/* The field knob k sets, in device d. */
static double *knob_ptr(gckpt_device *d, const cal_space *sp, int k)
{
    if (k == GCKPT_CAL_COPY) return &d->h2d_bytes_per_s;
    if (sp->cb < 0) return k == GCKPT_CAL_MATMUL ? &d->matmul_efficiency : k == GCKPT_CAL_HBM ? &d->hbm_efficiency : NULL;
    gckpt_code_base_eff *e = &d->code_base[sp->cb];
    switch (k) {
    case GCKPT_CAL_MATMUL: return &e->matmul_factor;
    case GCKPT_CAL_HBM: return &e->hbm_factor;
    case GCKPT_CAL_ATTN: return &e->attention_factor;
    case GCKPT_CAL_OP: return &e->op_overhead_s;
    default: return &e->step_overhead_s;
    }
}

static double knob_get(const gckpt_device *d, const cal_space *sp, int k)
{
    double *v = knob_ptr((gckpt_device *)d, sp, k);
    return v ? *v : 0;
}

/* The field's value at slowdown x. */
static double knob_value(const cal_space *sp, int k, double x)
{
    double b = knob_get(sp->base, sp, k);
    return is_overhead(k) ? b + (x - 1) * unit_of(k) : b / x;
}

static void knob_name(const cal_space *sp, int k, char *buf, size_t n)
{
    if (sp->cb < 0 || k == GCKPT_CAL_COPY) snprintf(buf, n, "%s", gckpt_cal_knob_names[k]);
    else snprintf(buf, n, "code_bases.%s.%s", gckpt_code_base_names[sp->cb], cb_fields[k]);
}

/* A knob is identifiable when its RMS share of the runs' predicted steps that the knobs
 * fitted before it do not explain is at least this. */
#define CAL_MIN_SHARE 0.05
/* Relative step of the difference quotients (exact within a linear piece). */
#define CAL_H 1e-6
#define CAL_MAX_ITER 60
/* A knob determined only within this relative standard error is not fitted. */
#define CAL_MAX_REL_SE 0.25
/* Fitted values are written with this many significant digits: measured step times do not
 * carry more, and the predictions after calibration are made with the values as written. */
#define CAL_DIGITS 6

/* ---- predicting a run with a profile ------------------------------------------------------ */

typedef struct {
    gckpt_ctx *ctx;
    gckpt_profile *prof;
    gckpt_profiler *pr;
    gckpt_recipe **recipe; /* per run */
} predictor;

static void predictor_free(predictor *p, size_t n)
{
    for (size_t i = 0; p->recipe && i < n; i++) free(p->recipe[i]);
    free(p->recipe);
    free(p->ctx);
    free(p->prof);
    gckpt_profiler_free(p->pr);
}

static bool predictor_init(predictor *p, const cal_input *in, gckpt_err *err)
{
    memset(p, 0, sizeof *p);
    p->ctx = malloc(sizeof *p->ctx);
    p->prof = malloc(sizeof *p->prof);
    p->pr = gckpt_profiler_new();
    p->recipe = calloc(in->nrun, sizeof *p->recipe);
    bool ok = p->ctx && p->prof && p->pr && p->recipe;
    for (size_t i = 0; ok && i < in->nrun; i++) {
        const cal_run *r = &in->run[i];
        ok = (p->recipe[i] = malloc(sizeof *p->recipe[i])) != NULL;
        if (ok) gckpt_setting_recipe(&r->model, &r->set, r->target, p->recipe[i]);
    }
    if (!ok) {
        predictor_free(p, in->nrun);
        gckpt_seterr(err, "out of memory");
    }
    return ok;
}

/* Run i's step time with profile d, as gckpt-plan computes an entry (its fast evaluator). */
static bool predict(predictor *p, const cal_input *in, size_t i, const gckpt_device *d, double *step_s, gckpt_err *err)
{
    const cal_run *r = &in->run[i];
    gckpt_result res;
    /* as gckpt-plan's sweep: the context of the micro-batch split, every_n and offload given
     * to the evaluator only (gckpt_plan_setting) */
    gckpt_setting set = r->set;
    set.every_n = 0;
    set.offload = false;
    if (!gckpt_ctx_init(p->ctx, &r->model, d, p->recipe[i], &set, err)) return false;
    if (!gckpt_profile_build_with(p->pr, p->ctx, p->prof)) {
        gckpt_seterr(err, "out of memory while profiling");
        return false;
    }
    gckpt_fast_eval(p->ctx, p->prof, r->set.every_n, r->set.offload, r->set.grad_accum, &res);
    *step_s = res.step_s;
    return true;
}

/* The base profile slowed down by s (see cal_space). */
static gckpt_device device_at(const cal_space *sp, const double s[GCKPT_CAL_NKNOB])
{
    gckpt_device d = *sp->base;
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++)
        if (sp->applies[k]) *knob_ptr(&d, sp, k) = knob_value(sp, k, s[k]);
    d.d2h_bytes_per_s = sp->base->d2h_bytes_per_s / s[GCKPT_CAL_COPY];
    return d;
}

/* Every run's step T[i] at s and its derivatives J[i][k] by s_k. */
static bool linearize(predictor *p, const cal_input *in, const cal_space *sp, const double s[GCKPT_CAL_NKNOB],
                      double *T, double (*J)[GCKPT_CAL_NKNOB], gckpt_err *err)
{
    gckpt_device d = device_at(sp, s);
    for (size_t i = 0; i < in->nrun; i++) {
        if (!predict(p, in, i, &d, &T[i], err)) return false;
        for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
            J[i][k] = 0;
            if (!sp->applies[k]) continue;
            double sk[GCKPT_CAL_NKNOB];
            memcpy(sk, s, sizeof sk);
            double h = fmax(fabs(s[k]), 1) * CAL_H, t;
            sk[k] += h;
            gckpt_device dk = device_at(sp, sk);
            if (!predict(p, in, i, &dk, &t, err)) return false;
            J[i][k] = (t - T[i]) / h;
        }
    }
    return true;
}

/* ---- the fit ------------------------------------------------------------------------------- */

/* Which knobs the runs identify: column-pivoted Gram-Schmidt over the shares
 * a[i][k] = J[i][k] s_k / T[i] (at s = 1), each column's RMS over the runs; order[k]: when
 * knob k was chosen (0 first: the best determined). */
static void identify(const cal_input *in, const double *T, double (*J)[GCKPT_CAL_NKNOB],
                     gckpt_cal_knob knob[GCKPT_CAL_NKNOB], int order[GCKPT_CAL_NKNOB])
{
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) order[k] = GCKPT_CAL_NKNOB; /* not chosen */
    size_t n = in->nrun;
    double *a = malloc(sizeof *a * n * GCKPT_CAL_NKNOB), share[GCKPT_CAL_NKNOB];
    if (!a) return; /* none fitted: the caller says so */
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            a[k * n + i] = T[i] > 0 ? J[i][k] / T[i] : 0;
            sum += a[k * n + i];
        }
        share[k] = sum / (double)n;
    }
    bool chosen[GCKPT_CAL_NKNOB] = {false};
    int first = -1;
    for (int step = 0; step < GCKPT_CAL_NKNOB; step++) {
        int best = -1;
        double bn = 0;
        for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
            if (chosen[k] || !knob[k].applies) continue;
            double nn = 0;
            for (size_t i = 0; i < n; i++) nn += a[k * n + i] * a[k * n + i];
            nn = sqrt(nn / (double)n);
            if (best < 0 || nn > bn) best = k, bn = nn;
        }
        if (bn < CAL_MIN_SHARE) {
            for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
                if (chosen[k] || !knob[k].applies) continue;
                if (share[k] < CAL_MIN_SHARE)
                    snprintf(knob[k].why, sizeof knob[k].why, "not fitted: %.1f%% of the predicted step time (under %.0f%%)",
                             100 * share[k], 100 * CAL_MIN_SHARE);
                else
                    snprintf(knob[k].why, sizeof knob[k].why,
                             "not fitted: the runs vary it together with %s (%.1f%% of the predicted step time)",
                             first >= 0 ? knob[first].field : "the others", 100 * share[k]);
            }
            break;
        }
        chosen[best] = true;
        order[best] = step;
        knob[best].fitted = true;
        if (first < 0) first = best;
        snprintf(knob[best].why, sizeof knob[best].why, "fitted: %.1f%% of the predicted step time", 100 * share[best]);
        /* remove the chosen column's direction from the others */
        double nb = 0;
        for (size_t i = 0; i < n; i++) nb += a[best * n + i] * a[best * n + i];
        for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
            if (chosen[k]) continue;
            double dot = 0;
            for (size_t i = 0; i < n; i++) dot += a[k * n + i] * a[best * n + i];
            for (size_t i = 0; i < n; i++) a[k * n + i] -= dot / nb * a[best * n + i];
        }
    }
    free(a);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Solve the m x m system A x = b (Gaussian elimination, partial pivoting); false if singular. */
static bool solve(int m, double A[GCKPT_CAL_NKNOB][GCKPT_CAL_NKNOB], double b[GCKPT_CAL_NKNOB], double x[GCKPT_CAL_NKNOB])
{
    for (int c = 0; c < m; c++) {
        int p = c;
        for (int r = c + 1; r < m; r++)
            if (fabs(A[r][c]) > fabs(A[p][c])) p = r;
        if (!(fabs(A[p][c]) > 0)) return false;
        for (int k = 0; k < m; k++) {
            double t = A[c][k];
            A[c][k] = A[p][k];
            A[p][k] = t;
        }
        double t = b[c];
        b[c] = b[p];
        b[p] = t;
        for (int r = c + 1; r < m; r++) {
            double f = A[r][c] / A[c][c];
            for (int k = c; k < m; k++) A[r][k] -= f * A[c][k];
            b[r] -= f * b[c];
        }
    }
    for (int c = m - 1; c >= 0; c--) {
        double v = b[c];
        for (int k = c + 1; k < m; k++) v -= A[c][k] * x[k];
        x[c] = v / A[c][c];
    }
    return true;
}

/* The next s from the linear piece at s: the free knobs solved, the others kept. */
static bool step_fit(const cal_input *in, const double *T, double (*J)[GCKPT_CAL_NKNOB], const bool freek[GCKPT_CAL_NKNOB],
                     const double s[GCKPT_CAL_NKNOB], double next[GCKPT_CAL_NKNOB])
{
    size_t n = in->nrun;
    int idx[GCKPT_CAL_NKNOB], m = 0;
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
        next[k] = s[k];
        if (freek[k]) idx[m++] = k;
    }
    if (!m) return true;
    if (m == 1) { /* one knob: the median of what each run asks for */
        int k = idx[0];
        double *v = malloc(sizeof *v * n);
        size_t nv = 0;
        if (!v) return false;
        for (size_t i = 0; i < n; i++)
            if (J[i][k] > 0) v[nv++] = s[k] + (in->run[i].measured_s - T[i]) / J[i][k];
        if (nv) {
            qsort(v, nv, sizeof *v, cmp_double);
            next[k] = nv % 2 ? v[nv / 2] : 0.5 * (v[nv / 2 - 1] + v[nv / 2]);
        }
        free(v);
        return true;
    }
    /* least squares on relative errors: rows J[i][F] / m_i, right side (m_i - T_i + J[i][F] s_F) / m_i */
    double A[GCKPT_CAL_NKNOB][GCKPT_CAL_NKNOB] = {{0}}, b[GCKPT_CAL_NKNOB] = {0}, x[GCKPT_CAL_NKNOB];
    for (size_t i = 0; i < n; i++) {
        double w = 1.0 / in->run[i].measured_s, rhs = in->run[i].measured_s - T[i];
        for (int u = 0; u < m; u++) rhs += J[i][idx[u]] * s[idx[u]];
        for (int u = 0; u < m; u++) {
            for (int v = 0; v < m; v++) A[u][v] += J[i][idx[u]] * w * J[i][idx[v]] * w;
            b[u] += J[i][idx[u]] * w * rhs * w;
        }
    }
    if (!solve(m, A, b, x)) return true; /* keep s: the caller stops */
    for (int u = 0; u < m; u++) next[idx[u]] = x[u];
    return true;
}

/* The range of s_k that keeps the written field in the device reader's range. */
static void knob_bounds(const cal_space *sp, int k, double *lo, double *hi)
{
    const gckpt_device *b = sp->base;
    if (sp->cb >= 0 && k != GCKPT_CAL_COPY) {
        double v = knob_get(b, sp, k);
        if (is_overhead(k)) { /* op_overhead_s in [0, 1], step_overhead_s in [0, 1e3] */
            *lo = 1 - v / unit_of(k);
            *hi = 1 + ((k == GCKPT_CAL_OP ? 1 : 1e3) - v) / unit_of(k);
        } else { /* factors in [0.01, 10] */
            *lo = v / 10;
            *hi = v / 0.01;
        }
        return;
    }
    if (k == GCKPT_CAL_MATMUL || k == GCKPT_CAL_HBM) { /* efficiency in [0.01, 1] */
        double e = k == GCKPT_CAL_MATMUL ? b->matmul_efficiency : b->hbm_efficiency;
        *lo = e;
        *hi = e / 0.01;
    } else { /* both copy rates in [1e6, 1e15] bytes/s */
        *lo = fmax(b->h2d_bytes_per_s, b->d2h_bytes_per_s) / 1e15;
        *hi = fmin(b->h2d_bytes_per_s, b->d2h_bytes_per_s) / 1e6;
    }
}

static double rms_rel(const cal_input *in, const double *T)
{
    double s = 0;
    for (size_t i = 0; i < in->nrun; i++) {
        double e = (T[i] - in->run[i].measured_s) / in->run[i].measured_s;
        s += e * e;
    }
    return sqrt(s / (double)in->nrun);
}

/* Round to CAL_DIGITS significant digits. */
static double round_sig(double v)
{
    if (!(v > 0)) return v;
    char buf[64];
    snprintf(buf, sizeof buf, "%.*g", CAL_DIGITS, v);
    return strtod(buf, NULL);
}

/* The relative standard error of each free knob at s: the linear piece's least-squares
 * covariance sigma^2 (A^T A)^-1 with sigma^2 from the relative residuals (n - p degrees of
 * freedom); 0 when n = p (an exact fit says nothing about the noise). */
static void rel_errors(const cal_input *in, const cal_space *sp, const double *T, double (*J)[GCKPT_CAL_NKNOB],
                       const bool freek[GCKPT_CAL_NKNOB], const double s[GCKPT_CAL_NKNOB], double se[GCKPT_CAL_NKNOB])
{
    size_t n = in->nrun;
    int idx[GCKPT_CAL_NKNOB], m = 0;
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
        se[k] = 0;
        if (freek[k]) idx[m++] = k;
    }
    if (!m || n <= (size_t)m) return;
    double AtA[GCKPT_CAL_NKNOB][GCKPT_CAL_NKNOB] = {{0}}, rss = 0;
    for (size_t i = 0; i < n; i++) {
        double w = 1.0 / in->run[i].measured_s, r = (T[i] - in->run[i].measured_s) * w;
        rss += r * r;
        for (int u = 0; u < m; u++)
            for (int v = 0; v < m; v++) AtA[u][v] += J[i][idx[u]] * w * J[i][idx[v]] * w;
    }
    double sigma2 = rss / (double)(n - (size_t)m);
    for (int u = 0; u < m; u++) { /* column u of the inverse */
        double A[GCKPT_CAL_NKNOB][GCKPT_CAL_NKNOB], e[GCKPT_CAL_NKNOB] = {0}, x[GCKPT_CAL_NKNOB];
        memcpy(A, AtA, sizeof A);
        e[u] = 1;
        int k = idx[u];
        /* relative to the field: an overhead's s is in its unit from the base value */
        double scale = is_overhead(k) ? knob_value(sp, k, s[k]) / unit_of(k) : s[k];
        se[k] = solve(m, A, e, x) && x[u] > 0 && scale > 0 ? sqrt(sigma2 * x[u]) / scale : INFINITY;
    }
}

/* Knob k no longer fitted: kept at the base profile's value. */
static void drop(gckpt_cal_knob *k, bool freek[], int i, double s[], const char *why)
{
    k->fitted = false;
    freek[i] = false;
    s[i] = 1;
    snprintf(k->why, sizeof k->why, "%s", why);
}

/* Fit s; the knobs' flags and reasons into knob. When the linear piece puts a knob at a
 * negative time the least determined free knob is dropped (kept at the base profile's value)
 * and the rest fitted again, as is a knob the runs determine only within +-CAL_MAX_REL_SE
 * while others are left (the last is fitted whatever its error, which its why says); one
 * beyond its field's range is held at the bound. */
static bool fit(predictor *p, const cal_input *in, const cal_space *sp, double s[GCKPT_CAL_NKNOB],
                gckpt_cal_knob knob[GCKPT_CAL_NKNOB], gckpt_err *err)
{
    size_t n = in->nrun;
    double *T = malloc(sizeof *T * n);
    double (*J)[GCKPT_CAL_NKNOB] = malloc(sizeof *J * n);
    bool ok = T && J;
    if (!ok) gckpt_seterr(err, "out of memory");
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) s[k] = 1;
    ok = ok && linearize(p, in, sp, s, T, J, err);
    int order[GCKPT_CAL_NKNOB];
    if (ok) identify(in, T, J, knob, order);
    bool freek[GCKPT_CAL_NKNOB], any = false;
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) any |= freek[k] = knob[k].fitted;
    if (ok && !any) {
        gckpt_seterr(err, "%s: no knob is identifiable from these runs (each under %.0f%% of the predicted step time)",
                     in->src[0].name, 100 * CAL_MIN_SHARE);
        ok = false;
    }
    for (bool again = ok; again;) {
        again = false;
        double best[GCKPT_CAL_NKNOB], best_rms = rms_rel(in, T);
        memcpy(best, s, sizeof best);
        for (int it = 0; ok && it < CAL_MAX_ITER; it++) {
            double next[GCKPT_CAL_NKNOB];
            if (!(ok = step_fit(in, T, J, freek, s, next))) {
                gckpt_seterr(err, "out of memory");
                break;
            }
            bool changed = false;
            int neg = -1, weakest = -1;
            for (int k = 0; k < GCKPT_CAL_NKNOB; k++)
                if (freek[k]) {
                    if (!is_overhead(k) && !(next[k] > 0)) neg = k; /* an overhead's bound is 0 s */
                    if (weakest < 0 || order[k] > order[weakest]) weakest = k;
                }
            if (neg >= 0) { /* ill-conditioned: the least determined knob goes, the fit starts again */
                char why[160];
                if (neg == weakest)
                    snprintf(why, sizeof why, "not fitted: the fit gave it a negative time (the runs cannot tell it from "
                                              "the other knobs)");
                else
                    snprintf(why, sizeof why, "not fitted: with it the fit gave %s a negative time (the runs cannot tell "
                                              "them apart)", knob[neg].field);
                drop(&knob[weakest], freek, weakest, next, why);
                for (int k = 0; k < GCKPT_CAL_NKNOB; k++)
                    if (freek[k]) next[k] = 1;
                changed = true;
            }
            for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
                double lo, hi;
                knob_bounds(sp, k, &lo, &hi);
                if (freek[k] && (next[k] < lo || next[k] > hi)) {
                    size_t l = strlen(knob[k].why);
                    if (is_overhead(k))
                        snprintf(knob[k].why + l, sizeof knob[k].why - l, "; held at its bound (the fit asked for %.3g s)",
                                 knob_value(sp, k, next[k]));
                    else
                        snprintf(knob[k].why + l, sizeof knob[k].why - l, "; held at its bound (the fit asked for %.3g x "
                                 "the base profile's)", 1.0 / next[k]);
                    next[k] = next[k] < lo ? lo : hi;
                    freek[k] = false;
                    knob[k].clamped = changed = true;
                }
            }
            double change = 0;
            for (int k = 0; k < GCKPT_CAL_NKNOB; k++) change = fmax(change, fabs(next[k] - s[k]) / s[k]);
            memcpy(s, next, sizeof next);
            if (!(ok = linearize(p, in, sp, s, T, J, err))) break;
            double r = rms_rel(in, T);
            int nfree = 0;
            for (int k = 0; k < GCKPT_CAL_NKNOB; k++) nfree += freek[k];
            /* a dropped or held knob restarts the search for the best; one knob is the median's
             * (robust), not the RMS's, whose relative errors weigh a step predicted too long more
             * than one predicted too short */
            if (changed || r < best_rms || nfree == 1) {
                best_rms = r;
                memcpy(best, s, sizeof best);
            }
            if (changed) it = -1; /* and its iterations: each change frees one knob less, so this ends */
            if (change < 1e-12 && !changed) break;
        }
        if (!ok) break;
        memcpy(s, best, sizeof best);
        if (!(ok = linearize(p, in, sp, s, T, J, err))) break;
        double se[GCKPT_CAL_NKNOB];
        rel_errors(in, sp, T, J, freek, s, se);
        int worst = -1, nfree = 0;
        for (int k = 0; k < GCKPT_CAL_NKNOB; k++) nfree += freek[k];
        for (int k = 0; nfree > 1 && k < GCKPT_CAL_NKNOB; k++) /* the last one stays: the robust ratio */
            if (freek[k] && se[k] > CAL_MAX_REL_SE && (worst < 0 || se[k] > se[worst])) worst = k;
        if (worst >= 0) {
            char why[160];
            if (se[worst] < 1)
                snprintf(why, sizeof why, "not fitted: the runs determine it only within +-%.0f%% (the other knobs "
                                          "explain the same steps)", 100 * se[worst]);
            else
                snprintf(why, sizeof why, "not fitted: the runs do not determine it (the other knobs explain the same "
                                          "steps)");
            drop(&knob[worst], freek, worst, s, why);
            ok = linearize(p, in, sp, s, T, J, err);
            again = ok;
            continue;
        }
        for (int k = 0; k < GCKPT_CAL_NKNOB; k++)
            if (freek[k] && se[k] > 0) {
                size_t l = strlen(knob[k].why);
                snprintf(knob[k].why + l, sizeof knob[k].why - l, " (+-%.1f%%)", 100 * se[k]);
            }
    }
    bool left = false;
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) left |= knob[k].fitted;
    if (ok && !left) {
        gckpt_seterr(err, "%s: no knob could be fitted: the runs cannot tell the knobs apart", in->src[0].name);
        ok = false;
    }
    free(T);
    free(J);
    return ok;
}

/* ---- inputs checked against each other and the base profile ------------------------------ */

static bool check_inputs(const cal_input *in, const gckpt_device *base, const char *base_what, gckpt_err *err)
{
    const cal_source *s0 = &in->src[0];
    for (size_t i = 0; i < in->nsrc; i++) {
        const cal_source *s = &in->src[i];
        if (strcmp(s->planned_for, base->name)) {
            gckpt_seterr(err, "%s: planned for \"%s\", the base profile %s is \"%s\": reports from another device", s->name,
                         s->planned_for, base_what, base->name);
            return false;
        }
        if (strcmp(s->measured_on, s0->measured_on) || strcmp(s->kind, s0->kind)) {
            gckpt_seterr(err, "%s: measured on \"%s\" (%s), %s on \"%s\" (%s): mixed devices", s->name, s->measured_on,
                         s->kind, s0->name, s0->measured_on, s0->kind);
            return false;
        }
        bool cpu = !strcmp(s->kind, "cpu");
        if (cpu != (base->kind == GCKPT_TARGET_CPU)) {
            gckpt_seterr(err, "%s: measured on %s \"%s\", the base profile \"%s\" is %s (kind %s): its times do not "
                              "describe that device", s->name, cpu ? "the CPU" : "the GPU", s->measured_on, base->name,
                         base->kind == GCKPT_TARGET_CPU ? "a CPU profile" : "a GPU profile", gckpt_target_names[base->kind]);
            return false;
        }
    }
    return true;
}

/* Every run's prediction with the profile its plan embeds must be the plan's: the time model
 * that is fitted is the one that made the plans. */
static bool check_reproduced(predictor *p, const cal_input *in, gckpt_err *err)
{
    for (size_t i = 0; i < in->nrun; i++) {
        const cal_run *r = &in->run[i];
        double t;
        if (!predict(p, in, i, &r->plan_dev, &t, err)) return false;
        if (fabs(t - r->planned_s) > 1e-9 * r->planned_s) {
            gckpt_seterr(err, "%s: entry %ld: this gckpt-plan predicts %.9g s for it with the plan's own profile, the plan "
                              "says %.9g s (a plan from another version of the time model): re-plan and re-run it",
                         in->src[r->src].name, r->entry, t, r->planned_s);
            return false;
        }
    }
    return true;
}

/* What this calibration fits: on a GPU profile, from runs planned for CUDA kernels (where the
 * code bases apply, core/ctx.c), the time parameters of the runs' code base: the chip's
 * efficiencies are the datasheet's or gckpt-run --calibrate's microbenchmarks, the code base
 * is what a whole step adds to them. A profile without code_bases gets them (both neutral
 * before the fit: the same plans). Else (a CPU profile or CPU kernels) the efficiencies. The
 * runs must share one code base. */
static bool space_of(const cal_input *in, gckpt_device *base, cal_space *sp, gckpt_calibration_summary *sum,
                     gckpt_err *err)
{
    const cal_run *r0 = &in->run[0];
    sp->base = base;
    sp->cb = base->kind == GCKPT_TARGET_CUDA && r0->target == GCKPT_TARGET_CUDA ? r0->set.code_base : -1;
    if (sp->cb >= 0) base->has_code_bases = true; /* neutral when it had none */
    for (size_t i = 1; sp->cb >= 0 && i < in->nrun; i++) {
        const cal_run *r = &in->run[i];
        if (r->target != r0->target || r->set.code_base != r0->set.code_base) {
            gckpt_seterr(err, "%s: entry %ld was planned for %s kernels with --code-base %s, %s's entry %ld for %s kernels "
                              "with --code-base %s: calibrate each code base from its own runs",
                         in->src[r->src].name, r->entry, gckpt_target_names[r->target], gckpt_code_base_names[r->set.code_base],
                         in->src[r0->src].name, r0->entry, gckpt_target_names[r0->target],
                         gckpt_code_base_names[r0->set.code_base]);
            return false;
        }
    }
    sum->code_base = sp->cb;
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
        sp->applies[k] = sum->knob[k].applies = sp->cb >= 0 || k <= GCKPT_CAL_COPY;
        knob_name(sp, k, sum->knob[k].field, sizeof sum->knob[k].field);
    }
    return true;
}

/* ---- the written profile ------------------------------------------------------------------- */

static void utc_now(char *buf, size_t n)
{
    const char *sde = getenv("SOURCE_DATE_EPOCH"); /* reproducible output (docs examples) */
    time_t t = sde && *sde ? (time_t)strtoll(sde, NULL, 10) : time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void set_num(cJSON *o, const char *k, double v)
{
    if (cJSON_GetObjectItemCaseSensitive(o, k)) cJSON_ReplaceItemInObjectCaseSensitive(o, k, cJSON_CreateNumber(v));
    else cJSON_AddNumberToObject(o, k, v);
}

static void add_knob_json(cJSON *knobs, const char *field, double before, double after, const gckpt_cal_knob *k)
{
    cJSON *o = cJSON_AddObjectToObject(knobs, field);
    cJSON_AddNumberToObject(o, "before", before);
    cJSON_AddNumberToObject(o, "after", after);
    cJSON_AddBoolToObject(o, "fitted", k->fitted);
    cJSON_AddBoolToObject(o, "clamped", k->clamped);
    cJSON_AddStringToObject(o, "why", k->why);
}

static cJSON *calibration_json(const cal_input *in, const gckpt_device *base, const char *base_file, const char *base_sha,
                               const gckpt_device *cal, const gckpt_calibration_summary *sum)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *g = cJSON_AddObjectToObject(c, "generator");
    cJSON_AddStringToObject(g, "name", "gckpt-plan");
    cJSON_AddStringToObject(g, "version", GCKPT_VERSION);
    char date[32];
    utc_now(date, sizeof date);
    cJSON_AddStringToObject(c, "date", date);
    cJSON *b = cJSON_AddObjectToObject(c, "base");
    cJSON_AddStringToObject(b, "name", base->name);
    if (base_file) {
        cJSON_AddStringToObject(b, "file", base_file);
        cJSON_AddStringToObject(b, "sha256", base_sha);
    } else cJSON_AddStringToObject(b, "file", "(the profile embedded in the plans)");
    cJSON *mo = cJSON_AddObjectToObject(c, "measured_on");
    cJSON_AddStringToObject(mo, "name", in->src[0].measured_on);
    cJSON_AddStringToObject(mo, "kind", in->src[0].kind);
    cJSON_AddStringToObject(mo, "backend", in->src[0].backend);
    cJSON *from = cJSON_AddArrayToObject(c, "from");
    for (size_t i = 0; i < in->nsrc; i++) {
        cJSON *f = cJSON_CreateObject();
        size_t runs = 0;
        for (size_t r = 0; r < in->nrun; r++) runs += in->run[r].src == i;
        cJSON_AddStringToObject(f, "file", in->src[i].name);
        cJSON_AddStringToObject(f, "sha256", in->src[i].sha256);
        cJSON_AddStringToObject(f, "generator", in->src[i].generator);
        cJSON_AddNumberToObject(f, "runs", (double)runs);
        cJSON_AddItemToArray(from, f);
    }
    cJSON_AddNumberToObject(c, "n_runs", (double)in->nrun);
    if (sum->code_base >= 0) cJSON_AddStringToObject(c, "code_base", gckpt_code_base_names[sum->code_base]);
    cJSON *knobs = cJSON_AddObjectToObject(c, "knobs");
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++)
        if (sum->knob[k].applies)
            add_knob_json(knobs, sum->knob[k].field, sum->knob[k].before, sum->knob[k].after, &sum->knob[k]);
    add_knob_json(knobs, "d2h_bytes_per_s", base->d2h_bytes_per_s, cal->d2h_bytes_per_s, &sum->knob[GCKPT_CAL_COPY]);
    cJSON *runs = cJSON_AddArrayToObject(c, "runs");
    for (size_t i = 0; i < sum->n_runs; i++) {
        const gckpt_cal_run *r = &sum->runs[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", r->file);
        cJSON_AddNumberToObject(o, "entry", (double)r->entry);
        cJSON_AddNumberToObject(o, "measured_s", r->measured_s);
        cJSON_AddNumberToObject(o, "predicted_before_s", r->before_s);
        cJSON_AddNumberToObject(o, "predicted_after_s", r->after_s);
        cJSON_AddItemToArray(runs, o);
    }
    cJSON_AddNumberToObject(c, "rms_error_before", sum->rms_before);
    cJSON_AddNumberToObject(c, "rms_error_after", sum->rms_after);
    cJSON_AddNumberToObject(c, "median_error_before", sum->med_before);
    cJSON_AddNumberToObject(c, "median_error_after", sum->med_after);
    return c;
}

/* The calibrated profile: the base profile's JSON with the fitted fields replaced, their
 * sources saying so, and the calibration object. */
static char *profile_text(const char *base_text, const gckpt_device *base, const gckpt_device *cal, cJSON *calib,
                          const gckpt_calibration_summary *sum, size_t n_runs)
{
    cJSON *j = base_text ? cJSON_Parse(base_text) : gckpt_device_to_json(base);
    if (!j) {
        cJSON_Delete(calib);
        return NULL;
    }
    if (!base_text) { /* the plans' profile: its bus bandwidths came from inputs.layout (plan_read.c) */
        if (base->intra_node_bus_bytes_per_s > 0) set_num(j, "intra_node_bus_bytes_per_s", base->intra_node_bus_bytes_per_s);
        if (base->inter_node_bus_bytes_per_s > 0) set_num(j, "inter_node_bus_bytes_per_s", base->inter_node_bus_bytes_per_s);
    }
    set_num(j, "matmul_efficiency", cal->matmul_efficiency);
    set_num(j, "hbm_efficiency", cal->hbm_efficiency);
    set_num(j, "h2d_bytes_per_s", cal->h2d_bytes_per_s);
    set_num(j, "d2h_bytes_per_s", cal->d2h_bytes_per_s);
    if (sum->code_base >= 0) { /* the code base's parameters, and a line in code_bases.fit */
        cJSON *cbs = cJSON_GetObjectItemCaseSensitive(j, "code_bases");
        if (!cbs) { /* a profile without them: both code bases, the other one neutral */
            cbs = cJSON_AddObjectToObject(j, "code_bases");
            for (int k = 0; k < GCKPT_NCODEBASE; k++) {
                cJSON *o = cJSON_AddObjectToObject(cbs, gckpt_code_base_names[k]);
                cJSON_AddNumberToObject(o, "matmul_factor", 1);
                cJSON_AddNumberToObject(o, "attention_factor", 1);
                cJSON_AddNumberToObject(o, "attention_seq_half", 0);
                cJSON_AddNumberToObject(o, "hbm_factor", 1);
                cJSON_AddNumberToObject(o, "op_overhead_s", 0);
                cJSON_AddNumberToObject(o, "step_overhead_s", 0);
            }
        }
        cJSON *e = cJSON_GetObjectItemCaseSensitive(cbs, gckpt_code_base_names[sum->code_base]);
        const gckpt_code_base_eff *v = &cal->code_base[sum->code_base];
        if (!cJSON_IsObject(e)) { /* the reader took the object: never */
            cJSON_Delete(j);
            cJSON_Delete(calib);
            return NULL;
        }
        set_num(e, "matmul_factor", v->matmul_factor);
        set_num(e, "attention_factor", v->attention_factor);
        set_num(e, "hbm_factor", v->hbm_factor);
        set_num(e, "op_overhead_s", v->op_overhead_s);
        set_num(e, "step_overhead_s", v->step_overhead_s);
        cJSON *fit = cJSON_GetObjectItemCaseSensitive(cbs, "fit");
        if (!cJSON_IsObject(fit)) {
            cJSON_DeleteItemFromObjectCaseSensitive(cbs, "fit");
            fit = cJSON_AddObjectToObject(cbs, "fit");
        }
        cJSON_DeleteItemFromObjectCaseSensitive(fit, "calibrated");
        cJSON *cf = cJSON_AddObjectToObject(fit, "calibrated");
        cJSON_AddStringToObject(cf, "code_base", gckpt_code_base_names[sum->code_base]);
        cJSON_AddStringToObject(cf, "by", "gckpt-plan --calibrate-from");
        cJSON_AddItemToObject(cf, "date", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(calib, "date"), true));
        cJSON_AddNumberToObject(cf, "n_runs", (double)n_runs);
        cJSON_AddNumberToObject(cf, "rms_error_before", sum->rms_before);
        cJSON_AddNumberToObject(cf, "rms_error_after", sum->rms_after);
        cJSON_AddStringToObject(cf, "note", "the fields this calibration fitted replace the published fit's; which ones, "
                                            "the files and each run's residual: the calibration object");
    }
    cJSON *src = cJSON_GetObjectItemCaseSensitive(j, "sources");
    if (!cJSON_IsObject(src)) {
        cJSON_DeleteItemFromObjectCaseSensitive(j, "sources");
        src = cJSON_AddObjectToObject(j, "sources");
    }
    typedef struct { const char *field; int knob; } field_knob;
    field_knob f[GCKPT_CAL_NKNOB + 1];
    size_t nf = 0;
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++)
        if (sum->knob[k].applies) f[nf++] = (field_knob){sum->knob[k].field, k};
    f[nf++] = (field_knob){"d2h_bytes_per_s", GCKPT_CAL_COPY};
    for (size_t i = 0; i < nf; i++) {
        const gckpt_cal_knob *k = &sum->knob[f[i].knob];
        if (!k->fitted) continue;
        char s[512];
        snprintf(s, sizeof s, "calibrated: fitted to %zu measured step times on %s%s (gckpt-plan --calibrate-from; "
                              "see the calibration object)", n_runs, sum->measured_on,
                 k->clamped ? ", held at the field's bound" : "");
        cJSON_DeleteItemFromObjectCaseSensitive(src, f[i].field);
        cJSON_AddStringToObject(src, f[i].field, s);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(j, "calibration");
    cJSON_AddItemToObject(j, "calibration", calib);
    return gckpt_json_text(j, true);
}

/* ---- the whole ------------------------------------------------------------------------------ */

/* The base profile: a name or path (its text kept for the output), or the plans' own. */
static bool load_base(const char *ref, const cal_input *in, gckpt_device *base, char **text, char *file, size_t nf,
                      char *sha, gckpt_err *err)
{
    *text = NULL;
    if (!ref) {
        *base = in->run[0].plan_dev;
        for (size_t i = 1; i < in->nrun; i++) {
            const gckpt_device *d = &in->run[i].plan_dev;
            if (strcmp(d->name, base->name) || d->matmul_efficiency != base->matmul_efficiency ||
                d->hbm_efficiency != base->hbm_efficiency || d->h2d_bytes_per_s != base->h2d_bytes_per_s ||
                d->d2h_bytes_per_s != base->d2h_bytes_per_s || d->tflops_bf16 != base->tflops_bf16 ||
                d->hbm_bytes_per_s != base->hbm_bytes_per_s) {
                gckpt_seterr(err, "%s: its plan's profile \"%s\" differs from %s's \"%s\": name the base profile with --gpu",
                             in->src[in->run[i].src].name, d->name, in->src[in->run[0].src].name, base->name);
                return false;
            }
        }
        return true;
    }
    char path[4096];
    if (!gckpt_resolve_data("devices", ref, path, sizeof path, err)) return false;
    if (!(*text = gckpt_read_file(path, 1u << 20, err))) return false;
    if (!gckpt_device_parse(path, *text, base, err)) {
        free(*text);
        *text = NULL;
        return false;
    }
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    size_t len = strlen(name) < nf ? strlen(name) : nf - 1;
    memcpy(file, name, len);
    file[len] = 0;
    gckpt_text_sanitize(file);
    gckpt_sha256_hex(*text, strlen(*text), sha);
    return true;
}

void gckpt_calibration_summary_free(gckpt_calibration_summary *sum)
{
    if (!sum) return;
    free(sum->runs);
    sum->runs = NULL;
    sum->n_runs = 0;
}

bool gckpt_calibrate(const char *const *report_paths, size_t n, const char *base_gpu_ref, char **profile_json_out,
                     gckpt_calibration_summary *sum, gckpt_err *err)
{
    *profile_json_out = NULL;
    memset(sum, 0, sizeof *sum);
    sum->code_base = -1;
    if (!n) {
        gckpt_seterr(err, "no report to calibrate from");
        return false;
    }
    cal_input in = {0};
    predictor p = {0};
    char *base_text = NULL, base_file[256] = "", base_sha[65] = "";
    gckpt_device base = {0}; /* read by the copy below even when an earlier step failed */
    bool ok = true, have_p = false;
    for (size_t i = 0; ok && i < n; i++) ok = gckpt_cal_read(report_paths[i], &in, err);
    ok = ok && load_base(base_gpu_ref, &in, &base, &base_text, base_file, sizeof base_file, base_sha, err);
    ok = ok && check_inputs(&in, &base, base_gpu_ref ? base_file : "of the plans", err);
    ok = ok && (have_p = predictor_init(&p, &in, err)) && check_reproduced(&p, &in, err);
    double s[GCKPT_CAL_NKNOB];
    cal_space sp;
    ok = ok && space_of(&in, &base, &sp, sum, err) && fit(&p, &in, &sp, s, sum->knob, err);
    if (ok && !(sum->runs = calloc(in.nrun, sizeof *sum->runs))) {
        gckpt_seterr(err, "out of memory");
        ok = false;
    }
    gckpt_device cal = base;
    if (ok) {
        gckpt_device fitted = device_at(&sp, s);
        /* as written: CAL_DIGITS significant digits; kept fields bit for bit */
        for (int k = 0; k < GCKPT_CAL_NKNOB; k++) {
            if (!sp.applies[k]) continue;
            if (sum->knob[k].fitted) *knob_ptr(&cal, &sp, k) = round_sig(knob_get(&fitted, &sp, k));
            sum->knob[k].before = knob_get(&base, &sp, k);
            sum->knob[k].after = knob_get(&cal, &sp, k);
        }
        if (sum->knob[GCKPT_CAL_COPY].fitted) cal.d2h_bytes_per_s = round_sig(fitted.d2h_bytes_per_s);
        snprintf(sum->device, sizeof sum->device, "%s", base.name);
        snprintf(sum->measured_on, sizeof sum->measured_on, "%s (%s)", in.src[0].measured_on, in.src[0].backend);
        sum->n_runs = in.nrun;
        double sb = 0, sa = 0;
        for (size_t i = 0; ok && i < in.nrun; i++) {
            gckpt_cal_run *r = &sum->runs[i];
            snprintf(r->file, sizeof r->file, "%s", in.src[in.run[i].src].name);
            r->entry = in.run[i].entry;
            r->measured_s = in.run[i].measured_s;
            ok = predict(&p, &in, i, &base, &r->before_s, err) && predict(&p, &in, i, &cal, &r->after_s, err);
            double eb = (r->before_s - r->measured_s) / r->measured_s, ea = (r->after_s - r->measured_s) / r->measured_s;
            sb += eb * eb;
            sa += ea * ea;
            sum->max_before = fmax(sum->max_before, fabs(eb));
            sum->max_after = fmax(sum->max_after, fabs(ea));
        }
        sum->rms_before = sqrt(sb / (double)in.nrun);
        sum->rms_after = sqrt(sa / (double)in.nrun);
        double *e = ok ? malloc(sizeof *e * 2 * in.nrun) : NULL;
        if (ok && !e) {
            gckpt_seterr(err, "out of memory");
            ok = false;
        }
        for (size_t i = 0; ok && i < in.nrun; i++) {
            const gckpt_cal_run *r = &sum->runs[i];
            e[i] = fabs(r->before_s - r->measured_s) / r->measured_s;
            e[in.nrun + i] = fabs(r->after_s - r->measured_s) / r->measured_s;
        }
        if (ok) {
            size_t m = in.nrun;
            qsort(e, m, sizeof *e, cmp_double);
            qsort(e + m, m, sizeof *e, cmp_double);
            sum->med_before = 0.5 * (e[(m - 1) / 2] + e[m / 2]);
            sum->med_after = 0.5 * (e[m + (m - 1) / 2] + e[m + m / 2]);
        }
        free(e);
    }
    if (ok) {
        cJSON *calib = calibration_json(&in, &base, base_gpu_ref ? base_file : NULL, base_sha, &cal, sum);
        *profile_json_out = calib ? profile_text(base_text, &base, &cal, calib, sum, in.nrun) : NULL;
        gckpt_device check;
        gckpt_err cerr;
        if (!*profile_json_out) {
            gckpt_seterr(err, "out of memory");
            ok = false;
        } else if (!gckpt_device_parse("the calibrated profile", *profile_json_out, &check, &cerr)) {
            gckpt_seterr(err, "internal error: %s", cerr.msg); /* never: the reader checks what this writes */
            ok = false;
        }
    }
    if (!ok) {
        free(*profile_json_out);
        *profile_json_out = NULL;
        gckpt_calibration_summary_free(sum);
    }
    if (have_p) predictor_free(&p, in.nrun);
    gckpt_cal_input_free(&in);
    free(base_text);
    return ok;
}

void gckpt_calibration_print(const gckpt_calibration_summary *sum, FILE *f)
{
    fprintf(f, "calibrated \"%s\" from %zu measured step time%s on %s\n", sum->device, sum->n_runs,
            sum->n_runs == 1 ? "" : "s", sum->measured_on);
    int w = sum->code_base >= 0 ? 32 : 20;
    if (sum->code_base >= 0)
        fprintf(f, "the time parameters of code base %s (the profile's code_bases.%s)\n",
                gckpt_code_base_names[sum->code_base], gckpt_code_base_names[sum->code_base]);
    fprintf(f, "%-*s %12s %12s\n", w, "knob", "before", "after");
    for (int k = 0; k < GCKPT_CAL_NKNOB; k++)
        if (sum->knob[k].applies)
            fprintf(f, "%-*s %12.6g %12.6g  %s\n", w, k == GCKPT_CAL_COPY ? "h2d/d2h bytes/s" : sum->knob[k].field,
                    sum->knob[k].before, sum->knob[k].after, sum->knob[k].why);
    fprintf(f, "%-24s %5s %12s %12s %8s %12s %8s\n", "report", "entry", "measured s", "before s", "err", "after s", "err");
    for (size_t i = 0; i < sum->n_runs; i++) {
        const gckpt_cal_run *r = &sum->runs[i];
        fprintf(f, "%-24.24s %5ld %12.6g %12.6g %+7.1f%% %12.6g %+7.1f%%\n", r->file, r->entry, r->measured_s, r->before_s,
                100 * (r->before_s - r->measured_s) / r->measured_s, r->after_s,
                100 * (r->after_s - r->measured_s) / r->measured_s);
    }
    fprintf(f, "relative error of the predicted step time: RMS %.1f%% -> %.1f%%, median %.1f%% -> %.1f%%, largest %.1f%% -> "
               "%.1f%%\n", 100 * sum->rms_before, 100 * sum->rms_after, 100 * sum->med_before, 100 * sum->med_after,
            100 * sum->max_before, 100 * sum->max_after);
}
