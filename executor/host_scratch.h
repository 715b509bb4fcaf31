/* The host kernels' scratch (fp32 copies around CBLAS, attention rows): allocated through
 * these counting wrappers, so that its peak is known (gckpt_host_scratch_peak) and the
 * host memory guard's estimate of it can be checked (tests/executor/test_exec_host). */
#ifndef GCKPT_HOST_SCRATCH_H
#define GCKPT_HOST_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>

void *hs_malloc(size_t n);
void *hs_calloc(size_t n, size_t size);
void hs_free(void *p);
/* Whether an allocation failed since the last call (and clear the note): the backend
 * turns a kernel's error into an out of memory with it. */
bool hs_take_failure(void);

#endif
