/* Inside gckpt_hub: the environment (hub.c), the cache layout (hub_cache.c) and the
 * download (hub_http.c). Not installed: include/gckpt/planner/hub.h is the interface. */
#ifndef GCKPT_HUB_INTERNAL_H
#define GCKPT_HUB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "gckpt/planner/hub.h"

/* "ORG/NAME at revision REV", the subject of every message. */
typedef struct {
    const char *id, *revision;
} hub_ref;

/* Whether text (len bytes, NUL-terminated) is one JSON object; else why in why. */
bool hub_json_object(const char *text, size_t len, char *why, size_t n);

/* The cached config.json of ref: 1 found (path, commit), 0 not cached, -1 refused (err
 * names the file: a corrupt config.json or ref). */
int hub_cache_find(const char *cache, hub_ref ref, char *path, size_t n, char commit[41], gckpt_err *err);

/* Store text (validated by the caller) as snapshots/COMMIT/config.json, then
 * refs/REVISION (unless the revision is the commit), each written whole (temporary +
 * rename); path: the config's. */
bool hub_cache_store(const char *cache, hub_ref ref, const char *commit, const char *text, char *path, size_t n,
                     gckpt_err *err);

/* What the download needs: its URL, the token ("" none) and where it came from. */
typedef struct {
    const char *url;
    const char *token, *token_from;
    double timeout_s;
} hub_request;

/* GET the request into *body (malloc'd, NUL-terminated, *len bytes) and the X-Repo-Commit
 * header of the answer (commit, "" when absent). false with one line in err: the HTTP
 * status (401/403: a token; 404: the id and revision), a timeout, a body over
 * GCKPT_HUB_MAX_BYTES, a dropped connection, a TLS failure. */
bool hub_http_get(const hub_request *rq, hub_ref ref, char **body, size_t *len, char commit[41], gckpt_err *err);

#endif
