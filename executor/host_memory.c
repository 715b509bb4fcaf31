/* Memory this process can still take: MemAvailable, cgroups v1 and v2, RLIMIT_AS and
 * RLIMIT_DATA (include/gckpt/executor/host_memory.h). */
#include "gckpt/executor/host_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* v1 reports "no limit" as a huge page-rounded number (PAGE_COUNTER_MAX pages) */
#define HUGE_LIMIT ((uint64_t)1 << 62)

static bool read_value(const char *path, uint64_t *v)
{
    FILE *f = fopen(path, "r");
    char buf[64] = "";
    bool ok = f && fgets(buf, sizeof buf, f);
    if (f) fclose(f);
    if (!ok) return false;
    if (!strncmp(buf, "max", 3)) {
        *v = GCKPT_NO_LIMIT;
        return true;
    }
    char *end;
    unsigned long long x = strtoull(buf, &end, 10);
    if (end == buf) return false;
    *v = x >= HUGE_LIMIT ? GCKPT_NO_LIMIT : (uint64_t)x;
    return true;
}

/* "Key:   123 kB" of a /proc file, in bytes; NO_LIMIT when absent */
static uint64_t kb_field(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[256];
    size_t n = strlen(key);
    uint64_t v = GCKPT_NO_LIMIT;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            unsigned long long kb;
            if (sscanf(line + n + 1, "%llu", &kb) == 1) v = (uint64_t)kb * 1024;
            break;
        }
    if (f) fclose(f);
    return v;
}

static uint64_t minu(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The process's cgroup path in the hierarchy that has the memory controller (v1) or in
 * the unified one (v2). */
static bool cgroup_path(const char *root, bool v2, char *out, size_t n)
{
    char p[4096], line[4096];
    snprintf(p, sizeof p, "%s/proc/self/cgroup", root);
    FILE *f = fopen(p, "r");
    bool found = false;
    while (!found && f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0; /* line: the hierarchy ID; c1 + 1: its controllers */
        const char *ctl = c1 + 1;
        bool memory = false;
        for (const char *t = ctl; *t;) {
            size_t l = strcspn(t, ",");
            memory |= l == 6 && !strncmp(t, "memory", 6);
            t += l + (t[l] == ',');
        }
        if ((v2 && !strcmp(line, "0") && !*ctl) || (!v2 && memory)) {
            snprintf(out, n, "%s", c2 + 1);
            found = true;
        }
    }
    if (f) fclose(f);
    return found;
}

/* Where that hierarchy is mounted and which of its directories the mount shows. */
static bool cgroup_mount(const char *root, bool v2, char *mnt, char *mroot, size_t n)
{
    char p[4096], line[4096];
    snprintf(p, sizeof p, "%s/proc/self/mountinfo", root);
    FILE *f = fopen(p, "r");
    bool found = false;
    while (!found && f && fgets(line, sizeof line, f)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS */
        char *tok[64], *save = NULL;
        int k = 0, dash = -1;
        for (char *t = strtok_r(line, " \n", &save); t && k < 64; t = strtok_r(NULL, " \n", &save)) {
            if (!strcmp(t, "-") && dash < 0) dash = k;
            tok[k++] = t;
        }
        if (dash < 5 || dash + 3 >= k) continue;
        const char *fstype = tok[dash + 1], *opts = tok[dash + 3];
        bool memory = false;
        for (const char *t = opts; *t;) {
            size_t l = strcspn(t, ",");
            memory |= l == 6 && !strncmp(t, "memory", 6);
            t += l + (t[l] == ',');
        }
        if ((v2 && !strcmp(fstype, "cgroup2")) || (!v2 && !strcmp(fstype, "cgroup") && memory)) {
            snprintf(mnt, n, "%s", tok[4]);
            snprintf(mroot, n, "%s", tok[3]);
            found = true;
        }
    }
    if (f) fclose(f);
    return found;
}

/* The least (limit - usage) over the process's cgroup and its ancestors in one hierarchy. */
static uint64_t cgroup_left(const char *root, bool v2)
{
    char path[4096], mnt[4096], mroot[4096];
    if (!cgroup_path(root, v2, path, sizeof path) || !cgroup_mount(root, v2, mnt, mroot, sizeof mnt)) return GCKPT_NO_LIMIT;
    size_t rl = strlen(mroot);
    const char *rel = path;
    if (strcmp(mroot, "/")) {
        if (strncmp(path, mroot, rl) || (path[rl] && path[rl] != '/')) return GCKPT_NO_LIMIT; /* not visible here */
        rel = path + rl;
    }
    char dir[8192];
    snprintf(dir, sizeof dir, "%s%s%s", root, mnt, rel);
    size_t base = strlen(root) + strlen(mnt);
    uint64_t left = GCKPT_NO_LIMIT;
    for (;;) {
        char fl[8300], fu[8300];
        snprintf(fl, sizeof fl, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        snprintf(fu, sizeof fu, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
        uint64_t lim, use;
        if (read_value(fl, &lim) && lim != GCKPT_NO_LIMIT && read_value(fu, &use)) left = minu(left, lim > use ? lim - use : 0);
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < base) break;
        *slash = 0;
    }
    return left;
}

void gckpt_host_memory_at(const char *root, uint64_t rlimit_as, uint64_t rlimit_data, gckpt_host_mem *m)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/proc/meminfo", root);
    m->mem_available = kb_field(p, "MemAvailable");
    m->cgroup_left = minu(cgroup_left(root, true), cgroup_left(root, false));
    snprintf(p, sizeof p, "%s/proc/self/status", root);
    uint64_t vm = kb_field(p, "VmSize"), data = kb_field(p, "VmData");
    m->as_left = rlimit_as == GCKPT_NO_LIMIT ? GCKPT_NO_LIMIT : vm == GCKPT_NO_LIMIT || vm >= rlimit_as ? 0 : rlimit_as - vm;
    m->data_left = rlimit_data == GCKPT_NO_LIMIT ? GCKPT_NO_LIMIT
                   : data == GCKPT_NO_LIMIT || data >= rlimit_data ? 0
                                                                   : rlimit_data - data;
    const struct {
        uint64_t v;
        const char *name;
    } all[] = {{m->mem_available, "MemAvailable"},
               {m->cgroup_left, "the cgroup's memory limit"},
               {m->as_left, "RLIMIT_AS (ulimit -v)"},
               {m->data_left, "RLIMIT_DATA (ulimit -d)"}};
    m->left = GCKPT_NO_LIMIT;
    m->which = "no limit";
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i].v < m->left) {
            m->left = all[i].v;
            m->which = all[i].name;
        }
}

static uint64_t rlimit(int which)
{
    struct rlimit r;
    if (getrlimit(which, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return GCKPT_NO_LIMIT;
    return (uint64_t)r.rlim_cur;
}

uint64_t gckpt_self_status_bytes(const char *key) { return kb_field("/proc/self/status", key); }

void gckpt_host_memory(gckpt_host_mem *m) { gckpt_host_memory_at("", rlimit(RLIMIT_AS), rlimit(RLIMIT_DATA), m); }
