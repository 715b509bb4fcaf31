/* The host (CPU reference) backend of the executor. */
#ifndef GCKPT_EXEC_HOST_H
#define GCKPT_EXEC_HOST_H

#include "gckpt/executor.h"

/* memory_limit: bytes of "device" memory before allocations fail as out of memory (0: no
 * limit). NULL when out of memory. */
gckpt_backend *gckpt_host_backend_new(uint64_t memory_limit);

/* CPU model, RAM and logical cores from /proc (best effort). */
void gckpt_host_describe(gckpt_devinfo *d);

#endif
