/* JSON in, JSON out: the planner for other languages (the Python package's extension
 * calls only this). A request is one JSON object:
 *   {"op": "plan" | "snippet" | "text" | "options" | "calibrate" | "resolve",
 *    "data_dir": "folder holding models/ and devices/" (optional),
 *    "args": [["model", "llama-3.2-1b"], ["seq", "2048"], ["allow-long-seq", null], ...],
 *    "entry": 3 (op snippet: the entry's index; default the recommended one)}
 * args are gckpt-plan's planning options by long name with their values as the command
 * line spells them, read by the same code (plan_args.c), so a plan is byte for byte the
 * CLI's. The answer is {"ok": true, "plan": {...gckpt.plan/2...}} (plan), {"ok": true,
 * "text": "..."} (snippet; text: what gckpt-plan prints), {"ok": true, "options":
 * [{"name", "has_arg"}...]} (options), {"ok": true, "profile": {...}, "text": "..."}
 * (calibrate: {"reports": [paths], "gpu": base profile or absent}, gckpt-plan
 * --calibrate-from's profile and summary), {"ok": true, "path": "...", "hub": {"id",
 * "revision", "commit"} or null} (resolve: {"model": ref, "revision": rev or absent}, where
 * --model ref's config.json is: a Hub id's from the cache, downloaded when not there), or
 * {"ok": false, "error": "one line"}. */
#ifndef GCKPT_PLAN_API_H
#define GCKPT_PLAN_API_H

#ifdef __cplusplus
extern "C" {
#endif

/* The answer, malloc'd (free with gckpt_api_free); NULL only when out of memory. */
char *gckpt_api_call(const char *request);
void gckpt_api_free(char *answer);

#ifdef __cplusplus
}
#endif

#endif
