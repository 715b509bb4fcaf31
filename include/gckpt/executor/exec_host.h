/* The host (CPU reference) backend of the executor. */
#ifndef GCKPT_EXEC_HOST_H
#define GCKPT_EXEC_HOST_H

#include <stddef.h>

#include "gckpt/executor/executor.h"

/* memory_limit: bytes of "device" memory before allocations fail as out of memory (0: no
 * limit). NULL when out of memory. */
gckpt_backend *gckpt_host_backend_new(uint64_t memory_limit);

/* The peak bytes of the host kernels' scratch (fp32 copies around CBLAS, attention rows)
 * since the backend's last reset_peaks: memory beyond the predicted peak. */
uint64_t gckpt_host_scratch_peak(void);
void gckpt_host_scratch_reset_peak(void);

/* What an entry needs of this machine's memory on the host backend, beyond nothing: its
 * own allocations (the predicted allocated peak and pinned bytes, exactly what the
 * backend will allocate) and the backend's overhead, each part bounded from the
 * schedule and checked against measurements (tests/executor/test_exec_host,
 * tools/bench_host_memory.c). */
typedef struct {
    uint64_t predicted;   /* allocated peak + pinned peak */
    uint64_t scratch;     /* the kernels' fp32 scratch at its largest (one op's operands) */
    uint64_t rounding;    /* page and alignment rounding of every allocation */
    uint64_t blas;        /* OpenBLAS's buffer and code while it is not loaded yet */
    uint64_t fixed;       /* the rest, measured: interpreter tables, allocator, stack */
    uint64_t total;
} gckpt_host_need;
/* For the entry of x; peak and pinned are the predictions (the larger of the plan's and
 * this build's walk), limit the simulated memory limit (0: none) that caps the peak. */
void gckpt_host_need_of(const gckpt_exec *x, uint64_t peak, uint64_t pinned, uint64_t limit, gckpt_host_need *n);

/* The host memory guard: whether this machine has the memory the entry of x needs now
 * (gckpt_host_need_of against gckpt_host_memory). When not, msg says what it needs, what
 * is available and which limit binds. */
bool gckpt_host_admit(const gckpt_exec *x, uint64_t peak, uint64_t pinned, uint64_t limit, char *msg, size_t n);

/* CPU model, RAM and logical cores from /proc (best effort). */
void gckpt_host_describe(gckpt_devinfo *d);

#endif
