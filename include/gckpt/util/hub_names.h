/* The names of the Hugging Face Hub (model ids, revisions, commits) and where a model's
 * config.json came from. No network here: the plan reader (gckpt/core/plan_read.h) checks
 * inputs.model.hub with these, gckpt_hub (gckpt/planner/hub.h) resolves ids with them. */
#ifndef GCKPT_HUB_NAMES_H
#define GCKPT_HUB_NAMES_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a model's config.json came from; id "" when not from the Hub. */
typedef struct {
    char id[200];       /* ORG/NAME */
    char revision[256]; /* as asked: a branch, a tag or a commit */
    char commit[41];    /* the commit sha the file belongs to */
    bool downloaded;    /* fetched now (false: found in the cache) */
} gckpt_hub_source;

/* Whether ref has the form of a Hub model id ORG/NAME (huggingface_hub's
 * validate_repo_id with a namespace: [A-Za-z0-9_.-]{1,96} each, starting and ending with
 * a letter, digit or '_', no "--" nor "..", not ending in ".git"). */
bool gckpt_hub_is_id(const char *ref);

/* Whether s is a revision gckpt accepts: a branch, tag or commit name of letters, digits
 * and "._-/" (no empty or "."/".." component), up to 255 characters. */
bool gckpt_hub_revision_ok(const char *s);

/* Whether s is 40 lowercase hex digits (huggingface_hub's REGEX_COMMIT_HASH). */
bool gckpt_hub_is_commit(const char *s);

#ifdef __cplusplus
}
#endif

#endif
