/* Hugging Face Hub model ids ("ORG/NAME") as --model: the model's config.json from the
 * local Hugging Face cache, or downloaded into it (docs/hub.md).
 *
 * The cache is the one huggingface_hub 2.4.0 reads and writes (constants.py,
 * file_download.py: repo_folder_name, _hf_hub_download_to_cache_dir,
 * _cache_commit_hash_for_specific_revision; FINDINGS 19):
 *   CACHE/models--ORG--NAME/refs/REVISION          the commit sha (40 hex, no newline)
 *   CACHE/models--ORG--NAME/snapshots/SHA/config.json
 * CACHE: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, HF_HOME being
 * $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
 *
 * A library of its own, gckpt_hub (-> gckpt_util), the only one that links libcurl;
 * gckpt_planner links it (the CLI resolves --model with it). The names it checks (ids,
 * revisions, commits) and gckpt_hub_source are gckpt/util/hub_names.h's: the plan reader
 * (core) checks inputs.model.hub with them. */
#ifndef GCKPT_HUB_H
#define GCKPT_HUB_H

#include <stdbool.h>
#include <stddef.h>

#include "gckpt/util/hub_names.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCKPT_HUB_DEFAULT_REVISION "main"
/* Longest body accepted for a config.json (the largest shipped one is a few KiB). */
#define GCKPT_HUB_MAX_BYTES (4u << 20)
/* Seconds for the whole download (GCKPT_HUB_TIMEOUT overrides) and for the connection. */
#define GCKPT_HUB_TIMEOUT_S 30.0
#define GCKPT_HUB_CONNECT_TIMEOUT_S 10.0
#define GCKPT_HUB_MAX_REDIRECTS 10

/* The config.json of Hub model id at revision (NULL: "main"): from the cache, else
 * (unless offline) downloaded into the cache. path_out: the cached file; src filled.
 * false with one line in err (the id, and what to do). */
bool gckpt_hub_resolve(const char *id, const char *revision, char *path_out, size_t n, gckpt_hub_source *src,
                       gckpt_err *err);

/* --model's value: a name in models/ or an existing path is kept (path_out = ref, src->id
 * ""); an ORG/NAME id goes to the Hub (gckpt_hub_resolve). revision: --revision as given
 * (NULL: not given; refused for a model that is not a Hub id). path_out may be ref. */
bool gckpt_model_ref_resolve(const char *ref, const char *revision, char *path_out, size_t n, gckpt_hub_source *src,
                             gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
