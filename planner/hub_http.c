/* One GET of a config.json from the Hub with libcurl: TLS verified (libcurl's default,
 * set again here; an http:// endpoint is plain HTTP only because the user's HF_ENDPOINT
 * says so), a connect and a total timeout, a cap on the body, redirects followed up to a
 * limit over http(s) only (an https endpoint: https only). The token goes in an
 * Authorization header, which libcurl sends to the endpoint's host only, never to the
 * host a redirect names (CURLOPT_UNRESTRICTED_AUTH stays 0), as huggingface_hub keeps
 * its header on the Hub (_httpx2_follow_hub_redirects_with_backoff). */
#include "hub_internal.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    char *buf;
    size_t len, cap;
    bool too_big;
    char commit[41];   /* X-Repo-Commit of any answer on the way (a redirect off the Hub carries it) */
    char code[48];     /* X-Error-Code of the last answer (huggingface_hub's hf_raise_for_status) */
} sink;

static size_t on_body(char *p, size_t sz, size_t nm, void *u)
{
    sink *s = u;
    size_t n = sz * nm;
    if (s->len + n > GCKPT_HUB_MAX_BYTES) {
        s->too_big = true;
        return 0; /* ends the transfer: CURLE_WRITE_ERROR */
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 16384;
        while (cap < s->len + n + 1) cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) return 0;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = 0;
    return n;
}

/* The value of header line p (n bytes) when it is `name: value`, trimmed, into out. */
static bool header_value(const char *p, size_t n, const char *name, char *out, size_t on)
{
    size_t l = strlen(name);
    if (n <= l || strncasecmp(p, name, l) || p[l] != ':') return false;
    p += l + 1;
    n -= l + 1;
    while (n && (*p == ' ' || *p == '\t')) p++, n--;
    while (n && (p[n - 1] == '\r' || p[n - 1] == '\n' || p[n - 1] == ' ')) n--;
    snprintf(out, on, "%.*s", (int)(n < on ? n : on - 1), p);
    return true;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u)
{
    sink *s = u;
    size_t n = sz * nm;
    char v[64];
    if (n >= 5 && !strncmp(p, "HTTP/", 5)) s->code[0] = 0; /* a new answer */
    if (header_value(p, n, "X-Repo-Commit", v, sizeof v) && gckpt_hub_is_commit(v)) memcpy(s->commit, v, 41);
    header_value(p, n, "X-Error-Code", s->code, sizeof s->code);
    return n;
}

/* The one line for an HTTP status other than 200. */
static void status_error(long st, const sink *s, const hub_request *rq, hub_ref ref, gckpt_err *err)
{
    const char *tok = rq->token[0] ? rq->token_from : NULL;
    if (!strcmp(s->code, "RevisionNotFound"))
        gckpt_seterr(err, "%s: the Hub has no revision '%s' (HTTP %ld for %s)", ref.id, ref.revision, st, rq->url);
    else if (!strcmp(s->code, "EntryNotFound"))
        gckpt_seterr(err, "%s at revision %s has no config.json on the Hub (HTTP %ld for %s)", ref.id, ref.revision,
                     st, rq->url);
    else if ((st == 401 || st == 403) && tok)
        gckpt_seterr(err, "%s at revision %s: the Hub refused the token from %s (HTTP %ld%s): check that it is valid "
                          "and has access to the model (a gated model: accept its terms on its page)",
                     ref.id, ref.revision, tok, st, !strcmp(s->code, "GatedRepo") ? ", gated model" : "");
    else if (st == 401 || st == 403) /* the Hub says 401 for a missing repo too (hf_raise_for_status) */
        gckpt_seterr(err, "%s at revision %s: the Hub answered HTTP %ld%s: a gated or private model (or no such model) "
                          "needs a token: set HF_TOKEN or run `hf auth login`",
                     ref.id, ref.revision, st, !strcmp(s->code, "GatedRepo") ? " (gated model)" : "");
    else if (st == 404)
        gckpt_seterr(err, "%s at revision %s: not found on the Hub (HTTP 404 for %s): check the model id and "
                          "--revision", ref.id, ref.revision, rq->url);
    else
        gckpt_seterr(err, "%s at revision %s: the Hub answered HTTP %ld for %s", ref.id, ref.revision, st, rq->url);
}

/* The one line for a transfer that did not complete. */
static void transfer_error(CURLcode rc, const sink *s, const hub_request *rq, hub_ref ref, const char *detail,
                           gckpt_err *err)
{
    const char *what = ref.id;
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        gckpt_seterr(err, "%s: no complete answer from %s within %g s (set GCKPT_HUB_TIMEOUT to wait longer)", what,
                     rq->url, rq->timeout_s);
        return;
    case CURLE_FILESIZE_EXCEEDED:
        gckpt_seterr(err, "%s: the config.json at %s is larger than %u bytes; refusing it", what, rq->url,
                     GCKPT_HUB_MAX_BYTES);
        return;
    case CURLE_PARTIAL_FILE: case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING: case CURLE_SEND_ERROR:
        gckpt_seterr(err, "%s: the connection to %s was dropped before the whole config.json arrived (%s)", what,
                     rq->url, detail);
        return;
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_PROXY:
        gckpt_seterr(err, "%s: cannot reach %s (%s); not in the Hugging Face cache either", what, rq->url, detail);
        return;
    case CURLE_TOO_MANY_REDIRECTS:
        gckpt_seterr(err, "%s: more than %d redirects from %s", what, GCKPT_HUB_MAX_REDIRECTS, rq->url);
        return;
    case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CONNECT_ERROR: case CURLE_SSL_CACERT_BADFILE:
        gckpt_seterr(err, "%s: the TLS connection to %s failed (%s); the certificate is always verified", what,
                     rq->url, detail);
        return;
    default:
        if (rc == CURLE_WRITE_ERROR && s->too_big)
            gckpt_seterr(err, "%s: the config.json at %s is larger than %u bytes; refusing it", what, rq->url,
                         GCKPT_HUB_MAX_BYTES);
        else
            gckpt_seterr(err, "%s: downloading %s failed: %s", what, rq->url, detail);
    }
}

bool hub_http_get(const hub_request *rq, hub_ref ref, char **body, size_t *len, char commit[41], gckpt_err *err)
{
    *body = NULL;
    *len = 0;
    commit[0] = 0;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        gckpt_seterr(err, "%s: cannot start libcurl", ref.id);
        return false;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        gckpt_seterr(err, "%s: cannot start libcurl", ref.id);
        return false;
    }
    struct curl_slist *hdr = NULL;
    char auth[1200];
    sink s = {0};
    bool ok = false;
    if (rq->token[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", rq->token);
        hdr = curl_slist_append(hdr, auth);
    }
    hdr = curl_slist_append(hdr, "Accept-Encoding: identity"); /* the size cap counts what is stored */
    char errbuf[CURL_ERROR_SIZE] = "";
    bool https = !strncasecmp(rq->url, "https:", 6);
    long ms = (long)(rq->timeout_s * 1000.0);
    double cs = rq->timeout_s < GCKPT_HUB_CONNECT_TIMEOUT_S ? rq->timeout_s : GCKPT_HUB_CONNECT_TIMEOUT_S;
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, https ? "https" : "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)GCKPT_HUB_MAX_REDIRECTS);
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(cs * 1000.0) > 0 ? (long)(cs * 1000.0) : 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)GCKPT_HUB_MAX_BYTES);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "gckpt/" GCKPT_VERSION);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    /* a server that closes while we send must not kill us with SIGPIPE (CURLOPT_NOSIGNAL,
     * for threaded callers, stops libcurl from ignoring it itself) */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe);
    CURLcode rc = curl_easy_perform(c);
    sigaction(SIGPIPE, &old_pipe, NULL);
    long st = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    if (st >= 300 && !(st >= 300 && st < 400 && rc == CURLE_TOO_MANY_REDIRECTS)) {
        status_error(st, &s, rq, ref, err); /* an error answer, whatever became of its body */
    } else if (rc != CURLE_OK) {
        transfer_error(rc, &s, rq, ref, errbuf[0] ? errbuf : curl_easy_strerror(rc), err);
    } else if (st != 200) {
        gckpt_seterr(err, "%s at revision %s: the Hub answered HTTP %ld for %s", ref.id, ref.revision, st, rq->url);
    } else {
        ok = true;
        *body = s.buf ? s.buf : calloc(1, 1);
        *len = s.len;
        s.buf = NULL;
        snprintf(commit, 41, "%s", s.commit);
        if (!*body) {
            gckpt_seterr(err, "%s: out of memory", ref.id);
            ok = false;
        }
    }
    free(s.buf);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    memset(auth, 0, sizeof auth);
    return ok;
}
