/* The Hugging Face cache layout of one model's config.json, as huggingface_hub 2.4.0
 * reads and writes it (file_download.py; FINDINGS R-HUB-3):
 *   models--ORG--NAME/refs/REVISION         commit sha, written without a newline
 *   models--ORG--NAME/snapshots/SHA/config.json
 * huggingface_hub keeps the file in blobs/ETAG with a relative symlink in snapshots/;
 * where symlinks are not supported it puts the file itself in snapshots/SHA
 * (_create_symlink), which every reader of the cache accepts (hf_hub_download,
 * try_to_load_from_cache, scan_cache_dir): gckpt writes that form. */
#include "hub_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gckpt/util/atomic_file.h"

bool hub_json_object(const char *text, size_t len, char *why, size_t n)
{
    if (strlen(text) != len) {
        snprintf(why, n, "a NUL byte at offset %zu", strlen(text));
        return false;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, true);
    bool obj = cJSON_IsObject(j);
    if (!j) snprintf(why, n, "not valid JSON (at byte %zu)", end ? (size_t)(end - text) : 0);
    else if (!obj) snprintf(why, n, "JSON but not an object");
    cJSON_Delete(j);
    return obj;
}

/* CACHE/models--ORG--NAME + rest into out. */
static bool repo_path(const char *cache, const char *id, const char *rest, char *out, size_t n, gckpt_err *err)
{
    const char *slash = strchr(id, '/');
    int w = snprintf(out, n, "%s/models--%.*s--%s%s", cache, (int)(slash - id), id, slash + 1, rest);
    if (w < 0 || (size_t)w >= n) {
        gckpt_seterr(err, "%s: the Hugging Face cache path (%s) is too long", id, cache);
        return false;
    }
    return true;
}

int hub_cache_find(const char *cache, hub_ref ref, char *path, size_t n, char commit[41], gckpt_err *err)
{
    char p[4096], rest[512];
    if (gckpt_hub_is_commit(ref.revision)) {
        snprintf(commit, 41, "%s", ref.revision);
    } else {
        snprintf(rest, sizeof rest, "/refs/%s", ref.revision);
        if (!repo_path(cache, ref.id, rest, p, sizeof p, err)) return -1;
        struct stat st;
        if (stat(p, &st) != 0) return 0; /* not cached (or unreadable: the download says more) */
        gckpt_err rerr;
        char *sha = gckpt_read_file(p, 256, &rerr);
        if (!sha) {
            gckpt_seterr(err, "%s", rerr.msg);
            return -1;
        }
        size_t l = strlen(sha);
        while (l && (sha[l - 1] == '\n' || sha[l - 1] == '\r' || sha[l - 1] == ' ')) sha[--l] = 0;
        bool ok = gckpt_hub_is_commit(sha);
        if (ok) snprintf(commit, 41, "%s", sha);
        free(sha);
        if (!ok) {
            gckpt_seterr(err, "%s: the cached ref of %s at revision %s is not a commit sha (40 hex digits); delete it "
                              "to download again", p, ref.id, ref.revision);
            return -1;
        }
    }
    snprintf(rest, sizeof rest, "/snapshots/%s/config.json", commit);
    if (!repo_path(cache, ref.id, rest, path, n, err)) return -1;
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    gckpt_err rerr;
    char *text = gckpt_read_file(path, GCKPT_HUB_MAX_BYTES, &rerr);
    if (!text) {
        gckpt_seterr(err, "%s", rerr.msg);
        return -1;
    }
    char why[128];
    bool ok = hub_json_object(text, strlen(text), why, sizeof why);
    free(text);
    if (!ok) {
        gckpt_seterr(err, "%s: the cached config.json of %s at revision %s is %s; delete it to download again", path,
                     ref.id, ref.revision, why);
        return -1;
    }
    return 1;
}

/* mkdir -p of the directories above path's last component, from below base (which the
 * caller made or found). */
static bool make_parents(const char *path, size_t from, gckpt_err *err)
{
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    for (size_t i = from ? from : 1; d[i]; i++) {
        if (d[i] != '/') continue;
        d[i] = 0;
        if (mkdir(d, 0777) != 0 && errno != EEXIST) {
            gckpt_seterr(err, "%s: cannot create the Hugging Face cache folder: %s", d, strerror(errno));
            return false;
        }
        d[i] = '/';
    }
    return true;
}

bool hub_cache_store(const char *cache, hub_ref ref, const char *commit, const char *text, char *path, size_t n,
                     gckpt_err *err)
{
    char rest[512], refp[4096];
    snprintf(rest, sizeof rest, "/snapshots/%s/config.json", commit);
    if (!repo_path(cache, ref.id, rest, path, n, err) || !make_parents(path, 0, err) ||
        !gckpt_write_file_atomic(path, text, err))
        return false;
    if (!strcmp(ref.revision, commit)) return true; /* a commit needs no ref */
    snprintf(rest, sizeof rest, "/refs/%s", ref.revision);
    return repo_path(cache, ref.id, rest, refp, sizeof refp, err) && make_parents(refp, strlen(cache), err) &&
           gckpt_write_file_atomic(refp, commit, err);
}
