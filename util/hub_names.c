/* The names of the Hub (include/gckpt/util/hub_names.h): model ids, revisions, commits.
 * (The plan reader checks inputs.model.hub with them, gckpt_hub resolves ids.) */
#include "gckpt/util/hub_names.h"

#include <ctype.h>
#include <string.h>

/* One part of an id: [A-Za-z0-9_.-]{1,96}, first and last a word character. */
static bool id_part(const char *s, size_t n)
{
    if (n < 1 || n > 96) return false;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-' || s[i] == '.')) return false;
    bool first = isalnum((unsigned char)s[0]) || s[0] == '_', last = isalnum((unsigned char)s[n - 1]) || s[n - 1] == '_';
    return first && last;
}

bool gckpt_hub_is_id(const char *ref)
{
    const char *slash = ref ? strchr(ref, '/') : NULL;
    size_t l = ref ? strlen(ref) : 0;
    if (!slash || strchr(slash + 1, '/') || strstr(ref, "--") || strstr(ref, "..")) return false;
    /* a config path that does not exist is a file error, not a Hub id */
    if ((l >= 4 && !strcmp(ref + l - 4, ".git")) || (l >= 5 && !strcmp(ref + l - 5, ".json"))) return false;
    return id_part(ref, (size_t)(slash - ref)) && id_part(slash + 1, strlen(slash + 1));
}

bool gckpt_hub_revision_ok(const char *s)
{
    size_t l = s ? strlen(s) : 0;
    if (l < 1 || l > 255) return false;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("._-/", *p))) return false;
    /* components become folders under refs/ */
    for (const char *p = s; p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (!n || (n == 1 && p[0] == '.') || (n == 2 && !strncmp(p, "..", 2))) return false;
        p = e ? e + 1 : NULL;
    }
    return true;
}

bool gckpt_hub_is_commit(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return i == 40;
}
