/* Hub model ids: the environment huggingface_hub 2.4.0 reads (constants.py,
 * utils/_auth.py; FINDINGS R-HUB-7), and the order: a shipped name or a path, the
 * cache, then (unless offline) a download stored into the cache. */
#include "hub_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* getenv, "" as unset. */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* v with a leading "~" as $HOME (os.path.expanduser) into out. */
static bool expand_user(const char *v, char *out, size_t n)
{
    const char *home = env("HOME");
    int w = v[0] == '~' && (v[1] == '/' || !v[1]) && home ? snprintf(out, n, "%s%s", home, v + 1)
                                                         : snprintf(out, n, "%s", v);
    return w >= 0 && (size_t)w < n;
}

/* HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface. */
static bool hf_home(char *out, size_t n)
{
    char base[4096];
    if (env("HF_HOME")) return expand_user(env("HF_HOME"), out, n);
    if (env("XDG_CACHE_HOME")) snprintf(base, sizeof base, "%s/huggingface", env("XDG_CACHE_HOME"));
    else snprintf(base, sizeof base, "~/.cache/huggingface");
    return expand_user(base, out, n);
}

/* HF_HUB_CACHE, else the legacy HUGGINGFACE_HUB_CACHE, else HF_HOME/hub. */
static bool hub_cache(char *out, size_t n, gckpt_err *err)
{
    char home[4096];
    const char *v = env("HF_HUB_CACHE") ? env("HF_HUB_CACHE") : env("HUGGINGFACE_HUB_CACHE");
    bool ok = v ? expand_user(v, out, n) : hf_home(home, sizeof home) && snprintf(out, n, "%s/hub", home) < (int)n;
    if (!ok) gckpt_seterr(err, "the Hugging Face cache folder's path is too long (HF_HUB_CACHE, HF_HOME)");
    return ok;
}

/* huggingface_hub's HF_HUB_OFFLINE: _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE),
 * true being 1, ON, YES, TRUE in any case (ENV_VARS_TRUE_VALUES). */
static bool offline(const char **which)
{
    *which = env("HF_HUB_OFFLINE") ? "HF_HUB_OFFLINE" : "TRANSFORMERS_OFFLINE";
    const char *v = env(*which);
    static const char *const yes[] = {"1", "ON", "YES", "TRUE"};
    for (size_t i = 0; v && i < sizeof yes / sizeof yes[0]; i++)
        if (!strcasecmp(v, yes[i])) return true;
    return false;
}

/* huggingface_hub's _clean_token: \r and \n removed, surrounding spaces stripped. */
static void clean_token(const char *in, char *out, size_t n)
{
    size_t k = 0;
    for (const char *p = in; *p && k + 1 < n; p++)
        if (*p != '\r' && *p != '\n') out[k++] = *p;
    out[k] = 0;
    size_t s = strspn(out, " \t");
    memmove(out, out + s, strlen(out + s) + 1);
    for (k = strlen(out); k && (out[k - 1] == ' ' || out[k - 1] == '\t');) out[--k] = 0;
}

/* The token huggingface_hub's get_token finds without OIDC or Colab: HF_TOKEN (or the
 * older HUGGING_FACE_HUB_TOKEN), else the file HF_TOKEN_PATH (default HF_HOME/token).
 * "" when none. from: where it came from, for messages (never the token). */
static bool find_token(char *tok, size_t n, char *from, size_t fn, gckpt_err *err)
{
    tok[0] = 0;
    const char *v = env("HF_TOKEN") ? "HF_TOKEN" : env("HUGGING_FACE_HUB_TOKEN") ? "HUGGING_FACE_HUB_TOKEN" : NULL;
    if (v) {
        clean_token(env(v), tok, n);
        snprintf(from, fn, "%s", v);
    } else {
        char home[4096], path[4096];
        bool ok = env("HF_TOKEN_PATH") ? expand_user(env("HF_TOKEN_PATH"), path, sizeof path)
                                       : hf_home(home, sizeof home) &&
                                             snprintf(path, sizeof path, "%s/token", home) < (int)sizeof path;
        struct stat st;
        if (!ok || stat(path, &st) != 0) return true; /* no stored token */
        gckpt_err rerr;
        char *text = gckpt_read_file(path, 4096, &rerr);
        if (!text) {
            gckpt_seterr(err, "the stored Hugging Face token: %s", rerr.msg);
            return false;
        }
        clean_token(text, tok, n);
        free(text);
        snprintf(from, fn, "%s", path);
    }
    for (const char *p = tok; *p; p++)
        if (*p <= ' ' || *p > '~') {
            gckpt_seterr(err, "the Hugging Face token from %s holds a character that cannot go in an HTTP header", from);
            return false;
        }
    return true;
}

/* GCKPT_HUB_TIMEOUT: seconds, > 0. */
static bool hub_timeout(double *s, gckpt_err *err)
{
    const char *v = env("GCKPT_HUB_TIMEOUT");
    *s = GCKPT_HUB_TIMEOUT_S;
    if (!v) return true;
    char *end;
    double t = strtod(v, &end);
    if (end == v || *end || !(t > 0 && t <= 86400)) {
        gckpt_seterr(err, "GCKPT_HUB_TIMEOUT: '%s' is not a number of seconds in (0, 86400]", v);
        return false;
    }
    *s = t;
    return true;
}

/* ENDPOINT/ID/resolve/REVISION/config.json (hf_hub_url: the revision quoted with no safe
 * character, so a '/' in it is %2F; ENDPOINT is HF_ENDPOINT without trailing slashes). */
static bool config_url(hub_ref ref, char *out, size_t n, gckpt_err *err)
{
    char ep[2048], rev[1024];
    snprintf(ep, sizeof ep, "%s", env("HF_ENDPOINT") ? env("HF_ENDPOINT") : "https://huggingface.co");
    for (size_t l = strlen(ep); l && ep[l - 1] == '/';) ep[--l] = 0;
    size_t k = 0;
    for (const char *p = ref.revision; *p; p++) k += (size_t)snprintf(rev + k, sizeof rev - k, *p == '/' ? "%%2F" : "%c", *p);
    int w = snprintf(out, n, "%s/%s/resolve/%s/config.json", ep, ref.id, rev);
    if (w < 0 || (size_t)w >= n) {
        gckpt_seterr(err, "HF_ENDPOINT: too long");
        return false;
    }
    return true;
}

/* Download, check, store. */
static bool download(const char *cache, hub_ref ref, char *path, size_t n, char commit[41], gckpt_err *err)
{
    char url[4096], tok[1024], from[4096] = "";
    hub_request rq = {.url = url, .token = tok, .token_from = from};
    if (!config_url(ref, url, sizeof url, err) || !find_token(tok, sizeof tok, from, sizeof from, err) ||
        !hub_timeout(&rq.timeout_s, err))
        return false;
    char *body;
    size_t len;
    bool ok = hub_http_get(&rq, ref, &body, &len, commit, err);
    memset(tok, 0, sizeof tok);
    if (!ok) return false;
    char why[128];
    if (!hub_json_object(body, len, why, sizeof why)) {
        gckpt_seterr(err, "%s at revision %s: the config.json from %s is %s; nothing was stored", ref.id, ref.revision,
                     url, why);
        free(body);
        return false;
    }
    if (!commit[0] && gckpt_hub_is_commit(ref.revision)) snprintf(commit, 41, "%s", ref.revision);
    if (!commit[0]) {
        /* huggingface_hub refuses the same (FileMetadataError in _get_metadata_or_catch_error) */
        gckpt_seterr(err, "%s: the answer from %s has no X-Repo-Commit header, so it does not come from a Hugging Face "
                          "Hub endpoint (check HF_ENDPOINT, a proxy or a firewall); nothing was stored",
                     ref.id, url);
        free(body);
        return false;
    }
    ok = hub_cache_store(cache, ref, commit, body, path, n, err);
    free(body);
    return ok;
}

bool gckpt_hub_resolve(const char *id, const char *revision, char *path_out, size_t n, gckpt_hub_source *src,
                       gckpt_err *err)
{
    hub_ref ref = {id, revision ? revision : GCKPT_HUB_DEFAULT_REVISION};
    memset(src, 0, sizeof *src);
    if (!gckpt_hub_is_id(id)) {
        gckpt_seterr(err, "'%s' is not a Hugging Face model id such as Qwen/Qwen2.5-7B", id);
        return false;
    }
    if (!gckpt_hub_revision_ok(ref.revision)) {
        gckpt_seterr(err, "--revision '%s': not a branch, tag or commit name (letters, digits, '.', '_', '-', '/')",
                     ref.revision);
        return false;
    }
    char cache[4096], path[4096], commit[41] = "";
    const char *which;
    if (!hub_cache(cache, sizeof cache, err)) return false;
    int found = hub_cache_find(cache, ref, path, sizeof path, commit, err);
    if (found < 0) return false;
    if (!found && offline(&which)) {
        bool main_rev = !strcmp(ref.revision, GCKPT_HUB_DEFAULT_REVISION);
        gckpt_seterr(err, "%s at revision %s is not in the Hugging Face cache (%s) and %s is set: download it once "
                          "online (or with `hf download %s config.json%s%s`)", id, ref.revision, cache, which, id,
                     main_rev ? "" : " --revision ", main_rev ? "" : ref.revision);
        return false;
    }
    if (!found && !download(cache, ref, path, sizeof path, commit, err)) return false;
    if ((size_t)snprintf(path_out, n, "%s", path) >= n) {
        gckpt_seterr(err, "%s: the cached config.json's path is too long (%s)", id, path);
        return false;
    }
    snprintf(src->id, sizeof src->id, "%s", id);
    snprintf(src->revision, sizeof src->revision, "%s", ref.revision);
    snprintf(src->commit, sizeof src->commit, "%s", commit);
    src->downloaded = !found;
    return true;
}

bool gckpt_model_ref_resolve(const char *ref, const char *revision, char *path_out, size_t n, gckpt_hub_source *src,
                             gckpt_err *err)
{
    char r[4096], shipped[4096];
    gckpt_err ignore;
    struct stat st;
    memset(src, 0, sizeof *src);
    snprintf(r, sizeof r, "%s", ref);
    /* a shipped name or an existing path wins over the Hub */
    bool local = stat(r, &st) == 0 ||
                 (!strchr(r, '/') && gckpt_resolve_data("models", r, shipped, sizeof shipped, &ignore));
    if (local || !gckpt_hub_is_id(r)) {
        if (revision) {
            gckpt_seterr(err, "--revision applies to a Hugging Face model id (ORG/NAME), not to --model %s", r);
            return false;
        }
        /* a folder (what `hf download ORG/NAME --local-dir DIR` makes): its config.json */
        bool dir = stat(r, &st) == 0 && S_ISDIR(st.st_mode);
        if ((size_t)snprintf(path_out, n, dir ? "%s/config.json" : "%s", r) >= n) {
            gckpt_seterr(err, "--model: name too long");
            return false;
        }
        if (dir && stat(path_out, &st) != 0) {
            gckpt_seterr(err, "--model %s is a directory without a config.json", r);
            return false;
        }
        return true;
    }
    return gckpt_hub_resolve(r, revision, path_out, n, src, err);
}
