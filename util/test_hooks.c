/* The test hooks' pointers (include/gckpt/util/test_hooks.h): NULL unless a test build
 * sets them. */
#include "gckpt/util/test_hooks.h"

#include <stddef.h>

void (*gckpt_hook_before_rename)(void) = NULL;
void (*gckpt_hook_host_forward)(void) = NULL;
bool (*gckpt_hook_skip_collective)(int rank, unsigned long long seq) = NULL;
void (*gckpt_hook_before_mpi_init)(void) = NULL;
void (*gckpt_hook_grad_piece)(int tensor, int layer, unsigned long long lo, const float *v, unsigned long long n) = NULL;
