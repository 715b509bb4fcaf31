/* Counting allocator of the host kernels' scratch (executor/host_scratch.h). */
#define _GNU_SOURCE /* malloc_usable_size */
#include "host_scratch.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "gckpt/executor/exec_host.h"

/* the host kernels run on one thread */
static uint64_t cur, peak;
static bool failed;

static void *counted(void *p)
{
    if (p) {
        cur += malloc_usable_size(p);
        if (cur > peak) peak = cur;
    } else {
        failed = true;
    }
    return p;
}

bool hs_take_failure(void)
{
    bool f = failed;
    failed = false;
    return f;
}

void *hs_malloc(size_t n) { return counted(malloc(n)); }
void *hs_calloc(size_t n, size_t size) { return counted(calloc(n, size)); }

void hs_free(void *p)
{
    if (!p) return;
    cur -= malloc_usable_size(p);
    free(p);
}

uint64_t gckpt_host_scratch_peak(void) { return peak; }
void gckpt_host_scratch_reset_peak(void) { peak = cur; }
