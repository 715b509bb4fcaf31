/* What the host backend runs on: the CPU model, logical cores and RAM, from /proc. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gckpt/executor/exec_host.h"
#include "gckpt/util/safe_text.h"

void gckpt_host_describe(gckpt_devinfo *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->kind, sizeof d->kind, "cpu");
    snprintf(d->name, sizeof d->name, "unknown CPU");
    char line[512];
    int cores = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        bool named = false;
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "processor", 9)) cores++;
            const char *colon = strchr(line, ':');
            if (!named && colon && !strncmp(line, "model name", 10)) {
                colon++;
                while (*colon == ' ' || *colon == '\t') colon++;
                snprintf(d->name, sizeof d->name, "%s", colon);
                d->name[strcspn(d->name, "\n")] = 0;
                gckpt_text_sanitize(d->name);
                named = true;
            }
        }
        fclose(f);
    }
    if (cores) snprintf(d->arch, sizeof d->arch, "%d logical cores", cores);
    f = fopen("/proc/meminfo", "r");
    if (f) {
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
                d->memory_bytes = (uint64_t)kb * 1024;
                break;
            }
        fclose(f);
    }
}
