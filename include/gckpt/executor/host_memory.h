/* How much more memory this process can take now, from every limit that applies:
 * the kernel's MemAvailable, the memory cgroup (v2 memory.max - memory.current, v1
 * memory.limit_in_bytes - memory.usage_in_bytes, over the process's cgroup and all its
 * ancestors), RLIMIT_AS (minus VmSize) and RLIMIT_DATA (minus VmData). The host backend's
 * guard (gckpt_host_admit) compares an entry's needs with it. */
#ifndef GCKPT_HOST_MEMORY_H
#define GCKPT_HOST_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#define GCKPT_NO_LIMIT UINT64_MAX

typedef struct {
    uint64_t mem_available;   /* /proc/meminfo MemAvailable */
    uint64_t cgroup_left;     /* the tightest cgroup level's limit minus its usage */
    uint64_t as_left;         /* RLIMIT_AS minus VmSize */
    uint64_t data_left;       /* RLIMIT_DATA minus VmData */
    uint64_t left;            /* the smallest of them (GCKPT_NO_LIMIT: none known) */
    const char *which;        /* its name: "MemAvailable", "cgroup memory.max", ... */
} gckpt_host_mem;

/* A "Key: N kB" field of /proc/self/status (VmSize, VmRSS, VmHWM, VmPeak, VmData) in
 * bytes; GCKPT_NO_LIMIT when it cannot be read. */
uint64_t gckpt_self_status_bytes(const char *key);

/* This process, now. */
void gckpt_host_memory(gckpt_host_mem *m);
/* The same with /proc and /sys read under root (tests: a directory of fixture files;
 * "" is the real system) and the rlimits given (GCKPT_NO_LIMIT: unlimited). */
void gckpt_host_memory_at(const char *root, uint64_t rlimit_as, uint64_t rlimit_data, gckpt_host_mem *m);

#endif
