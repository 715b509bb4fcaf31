/* gckpt-dash: one self-contained HTML page over a plan and reports of it, gckpt-run's or
 * gckpt.TrainerCallback's (docs/dashboard.md; the page: planner/dash_html.c). The plan is
 * checked by the plan reader (every field; a plan gckpt-run does not execute, such as a
 * VLM, CP or TP x FSDP, is drawn too), each report read by gckpt_report_load and checked against
 * the plan; any failure is one line naming the file, exit 2, and no page is written. Each
 * report is a file named on the command line: a callback run under torchrun writes one
 * per rank and each is read as given (its rank from its records), none looked for. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gckpt/formats/report_doc.h"
#include "gckpt/planner/dash_html.h"
#include "gckpt/core/plan_read.h"
#include "gckpt/util/atomic_file.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/outpath.h"
#include "gckpt/util/stdio_check.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: gckpt-dash -o PAGE.html PLAN.json [REPORT.jsonl ...]\n"
"\n"
"Write one self-contained HTML page (inline SVG, style and script; no network access)\n"
"over a plan written by gckpt-plan and, optionally, reports of it written by gckpt-run\n"
"or by gckpt.TrainerCallback: the sweep (device peak against tokens/s, budget, Pareto\n"
"frontier, recommended entry, filters), the selected entry (breakdown at the peak, memory\n"
"timeline, TrainingArguments), and predicted against measured per entry and rank, with\n"
"several reports as a trend over their dates (each report's file modification time); a\n"
"callback report adds every optimizer step against the plan and its warnings. Under\n"
"torchrun the callback writes one file per rank (NAME.rankR.EXT): give each one wanted.\n"
"\n"
"  -o, --output FILE      the page to write (replaced atomically)\n"
"  -h, --help             this help\n"
"  -V, --version          version\n"
"\n"
"Exit status: 0 page written, 2 bad usage or input: a plan or report that fails its\n"
"checks, a report of another plan (model, device, settings or predictions differ), an\n"
"output that cannot be written; then no page is written.\n");
}

static int fail(const gckpt_err *e)
{
    fprintf(stderr, "gckpt-dash: %s\n", e->msg);
    return GCKPT_EXIT_INPUT;
}

int main(int argc, char **argv)
{
    gckpt_stdio_guard();
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
    const char *out = NULL;
    gckpt_err err = {{0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'h': usage(stdout); return gckpt_stdout_check(&err) ? GCKPT_EXIT_OK : fail(&err);
        case 'V': printf("gckpt-dash %s\n", GCKPT_VERSION); return gckpt_stdout_check(&err) ? GCKPT_EXIT_OK : fail(&err);
        case ':': gckpt_seterr(&err, "option '%s' needs a value (see --help)", argv[optind - 1]); return fail(&err);
        default: gckpt_seterr(&err, "unknown option '%s' (see --help)", argv[optind - 1]); return fail(&err);
        }
    }
    if (!out || optind >= argc) {
        gckpt_seterr(&err, "usage: gckpt-dash -o PAGE.html PLAN.json [REPORT.jsonl ...] (see --help)");
        return fail(&err);
    }
    const char *plan_path = argv[optind];
    size_t nrep = (size_t)(argc - optind - 1);
    /* the page must not replace an input, and its folder must take it: checked first */
    const char *outs[] = {out};
    if (!strcmp(out, "-")) {
        gckpt_seterr(&err, "-o: the page goes to a file, not stdout");
        return fail(&err);
    }
    if (!gckpt_outpath_check(outs, 1, (const char *const *)argv + optind, (int)(nrep + 1), &err)) return fail(&err);
    /* the plan: every field checked by the plan reader, then read as JSON for the page */
    char *text = gckpt_read_file(plan_path, GCKPT_PLAN_MAX_BYTES, &err);
    gckpt_plan_file pf;
    bool ok = text && gckpt_plan_parse(plan_path, text, &pf, &err);
    if (ok) gckpt_plan_file_free(&pf);
    cJSON *plan = ok ? gckpt_json_parse(plan_path, text, &err) : NULL;
    free(text);
    if (!plan) return fail(&err);
    gckpt_dash_report *reps = calloc(nrep ? nrep : 1, sizeof *reps);
    cJSON **docs = calloc(nrep ? nrep : 1, sizeof *docs);
    ok = reps && docs;
    if (!ok) gckpt_seterr(&err, "out of memory");
    for (size_t i = 0; ok && i < nrep; i++) {
        const char *path = argv[optind + 1 + i];
        struct stat st;
        docs[i] = gckpt_report_load(path, &err);
        ok = docs[i] != NULL;
        reps[i] = (gckpt_dash_report){path, docs[i], ok && stat(path, &st) == 0 ? (long long)st.st_mtime : 0};
        ok = ok && gckpt_dash_report_check(plan, &reps[i], &err);
    }
    char *page = ok ? gckpt_dash_page(plan, plan_path, reps, nrep, &err) : NULL;
    ok = page && gckpt_write_file_atomic(out, page, &err);
    free(page);
    for (size_t i = 0; docs && i < nrep; i++) cJSON_Delete(docs[i]);
    free(docs);
    free(reps);
    cJSON_Delete(plan);
    if (!ok) return fail(&err);
    return GCKPT_EXIT_OK;
}
