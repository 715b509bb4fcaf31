#include "gckpt/util/util.h"

#include "gckpt/util/safe_text.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void gckpt_seterr(gckpt_err *err, const char *fmt, ...)
{
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    /* One line: a value echoed from a file or the command line may hold a newline or
     * a terminal escape; show those as '?'. */
    gckpt_text_sanitize(err->msg);
}

bool gckpt_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

bool gckpt_add(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

bool gckpt_mul_n(uint64_t *out, int n, const uint64_t *f)
{
    uint64_t r = 1;
    for (int i = 0; i < n; i++)
        if (!gckpt_mul(r, f[i], &r)) return false;
    *out = r;
    return true;
}

uint64_t gckpt_round_up(uint64_t x, uint64_t to)
{
    if (to <= 1) return x;
    uint64_t r = x % to;
    return r ? x + (to - r) : x;
}

bool gckpt_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (!s || !*s || !isdigit((unsigned char)*s)) return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    if (v < lo || v > hi) return false;
    *out = (uint64_t)v;
    return true;
}

bool gckpt_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.')) return false;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0) return false;
    while (*end == ' ') end++;
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1}, {"B", 1},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            double b = v * units[i].mult;
            if (b >= 1.8e19 || b < 1) return false;
            *out = (uint64_t)(b + 0.5); /* b < 1.8e19 < 2^64; llround stops at 2^63 */
            return true;
        }
    }
    return false;
}

int gckpt_parse_list(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, int max)
{
    if (!s || !*s) return -1;
    int n = 0;
    const char *p = s;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char tmp[32];
        if (len == 0 || len >= sizeof tmp || n >= max) return -1;
        memcpy(tmp, p, len);
        tmp[len] = 0;
        if (!gckpt_parse_u64(tmp, lo, hi, &out[n])) return -1;
        n++;
        if (!comma) break;
        p = comma + 1;
        if (!*p) return -1;
    }
    return n;
}

const char *gckpt_fmt_bytes(uint64_t b, char *buf, size_t n)
{
    const double gib = 1073741824.0, mib = 1048576.0;
    if (b >= (uint64_t)gib) snprintf(buf, n, "%.2f GiB", (double)b / gib);
    else if (b >= (uint64_t)mib) snprintf(buf, n, "%.1f MiB", (double)b / mib);
    else if (b >= 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else snprintf(buf, n, "%llu B", (unsigned long long)b);
    return buf;
}

char *gckpt_read_file(const char *path, size_t max_bytes, gckpt_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        gckpt_seterr(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        gckpt_seterr(err, "%s: is a directory, expected a JSON file", path);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        gckpt_seterr(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); gckpt_seterr(err, "%s: out of memory", path); return NULL; }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > max_bytes) {
                free(buf); fclose(f);
                gckpt_seterr(err, "%s: file larger than %zu bytes, refusing to read it", path, max_bytes);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); fclose(f); gckpt_seterr(err, "%s: out of memory", path); return NULL; }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        gckpt_seterr(err, "%s: read error", path);
        return NULL;
    }
    if (len > max_bytes) {
        free(buf);
        gckpt_seterr(err, "%s: file larger than %zu bytes, refusing to read it", path, max_bytes);
        return NULL;
    }
    buf[len] = 0;
    if (strlen(buf) != len) {
        free(buf);
        gckpt_seterr(err, "%s: contains a NUL byte, expected JSON text", path);
        return NULL;
    }
    return buf;
}

#ifndef GCKPT_DEFAULT_DATA_DIR
#define GCKPT_DEFAULT_DATA_DIR "."
#endif

static char data_dir_set[4096];

void gckpt_data_dir_set(const char *dir)
{
    snprintf(data_dir_set, sizeof data_dir_set, "%s", dir ? dir : "");
}

const char *gckpt_data_dir(void)
{
    if (data_dir_set[0]) return data_dir_set;
    const char *e = getenv("GCKPT_DATA_DIR");
    return (e && *e) ? e : GCKPT_DEFAULT_DATA_DIR;
}

bool gckpt_resolve_data(const char *sub, const char *name_or_path, char *out, size_t n,
                        gckpt_err *err)
{
    if (!name_or_path || !*name_or_path) {
        gckpt_seterr(err, "empty %s name", sub);
        return false;
    }
    /* Anything with a slash or a .json suffix is a path. */
    size_t l = strlen(name_or_path);
    if (strchr(name_or_path, '/') || (l > 5 && strcmp(name_or_path + l - 5, ".json") == 0)) {
        if ((size_t)snprintf(out, n, "%s", name_or_path) >= n) {
            gckpt_seterr(err, "%s: path too long", name_or_path);
            return false;
        }
        return true;
    }
    for (const char *p = name_or_path; *p; p++) {
        if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.')) {
            gckpt_seterr(err, "%s: not a known %s name (letters, digits, '-', '_', '.') nor a path", name_or_path, sub);
            return false;
        }
    }
    if ((size_t)snprintf(out, n, "%s/%s/%s.json", gckpt_data_dir(), sub, name_or_path) >= n) {
        gckpt_seterr(err, "%s: name too long", name_or_path);
        return false;
    }
    struct stat st;
    if (stat(out, &st) != 0) {
        gckpt_seterr(err, "%s: unknown %s (no file %s; list them with --list)", name_or_path, sub, out);
        return false;
    }
    return true;
}
