/* Test hooks: the places where a test build of gckpt-run (gckpt-run-testhooks, built only
 * for the tests) makes the program wait, so that a test can act while a report's temporary
 * exists or a backend call hangs. They are function pointers that are NULL in every program
 * users run: nothing reads the environment for them there. (util) */
#ifndef GCKPT_TEST_HOOKS_H
#define GCKPT_TEST_HOOKS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Before the atomic writer renames a temporary into place (util/atomic_file.c). */
extern void (*gckpt_hook_before_rename)(void);
/* Before the host backend runs a forward kernel (executor/host_backend.c). */
extern void (*gckpt_hook_host_forward)(void);

/* Whether this rank leaves out its collective number seq (1, 2, ...) as if its code had not
 * called it (executor/comm_mpi.c): the ranks' collectives then differ. */
extern bool (*gckpt_hook_skip_collective)(int rank, unsigned long long seq);
/* Right before MPI_Init (executor/comm_mpi.c): the ranks are starting. */
extern void (*gckpt_hook_before_mpi_init)(void);
/* Each piece of a parameter's gradient the step's checksum hashes (executor/interp.c: one
 * process's whole .grad; interp_parallel.c exec_piece_hash: a rank's piece), as fp32: n
 * elements from element lo of the whole tensor of recipe tensor `tensor` in layer `layer`
 * (-1: outside the blocks). The ranks' pieces cover every element once. */
extern void (*gckpt_hook_grad_piece)(int tensor, int layer, unsigned long long lo, const float *v, unsigned long long n);

#ifdef __cplusplus
}
#endif

#endif
