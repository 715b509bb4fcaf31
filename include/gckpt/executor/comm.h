/* The run's communicator: which rank this process is of how many, and the collectives
 * between them on host memory. gckpt-run runs a plan for N GPUs as N processes
 * (`mpirun -np N gckpt-run ...`, comm_mpi.c); an ordinary run is one rank (comm_single.c).
 * The backends build their `collective` operation (executor.h) on it: the host backend
 * calls it directly, the CUDA backend broadcasts NCCL's unique id with it. */
#ifndef GCKPT_COMM_H
#define GCKPT_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/collective.h"
#include "gckpt/core/dtype.h"
#include "gckpt/util/util.h"

/* How a reduction combines: the sum; the mean as torch's DDP takes it, each rank's value
 * divided by the ranks (fp32, rounded to the dtype) and then summed
 * (default_hooks._allreduce_fut: "Apply the division first to avoid overflow"); the mean as
 * DeepSpeed's ZeRO takes it, the sum multiplied by 1 / ranks afterwards (stage_1_and_2.py
 * gradient_reduction_w_predivide with its defaults postscale_gradients true,
 * gradient_predivide_factor 1). NCCL has ncclAvg for both (equal when the ranks are a power
 * of two). */
typedef enum { GCKPT_RED_SUM, GCKPT_RED_AVG, GCKPT_RED_AVG_POST } gckpt_redop;

/* The default bound on a collective that makes no progress (gckpt-run --collective-timeout). */
#define GCKPT_COLL_TIMEOUT_S 300.0

typedef struct gckpt_comm gckpt_comm;
struct gckpt_comm {
    const char *name;       /* "mpi", "single" */
    int rank, world;
    gckpt_err err;          /* the last error */
    /* Several ranks: every collective is announced to every rank first (its sequence number,
     * kind, reduction, dtype, size, root and label), and every wait is bounded: ranks that
     * announce different collectives, or a rank that does not come within timeout_s seconds,
     * fail the collective (err names the ranks, their labels and collectives) and set failed;
     * every later collective fails at once. */
    double timeout_s;
    bool failed;
    /* What the next collectives belong to (gckpt_comm_label), compared across the ranks
     * without a leading "event N " (each rank's schedule numbers its events itself). */
    char label[160];
    /* One collective on host buffers of dtype dt (root: BROADCAST only). Reductions add in
     * rank order, element by element in fp32 rounded to dt after each addition (as one
     * process accumulates its micro-steps' gradients), so a run's numbers do not depend on
     * the message sizes or the library's algorithm. false with err set. */
    bool (*collective)(gckpt_comm *c, gckpt_coll op, gckpt_redop red, const void *send, void *recv, uint64_t count,
                       gckpt_dtype dt, int root);
    /* Every rank's `bytes` bytes to rank 0's recv[world * bytes] (the report); recv is
     * ignored on the others. */
    bool (*gather)(gckpt_comm *c, const void *send, void *recv, uint64_t bytes);
    /* The group of this rank among c's: every rank calls it (a collective), those giving one
     * color form a communicator, numbered by key (HSDP's dp_shard and dp_replicate groups); the
     * one-rank communicator splits into itself. NULL with err set. Destroyed before c. */
    gckpt_comm *(*split)(gckpt_comm *c, int color, int key, gckpt_err *err);
    void (*destroy)(gckpt_comm *c);
};

/* Name what the next collectives belong to (an event of the schedule, the step, the report). */
void gckpt_comm_label(gckpt_comm *c, const char *label);

/* One process, no library: every collective is the identity (a mean over one rank). */
gckpt_comm *gckpt_comm_single(void);

/* Whether this process was started by an MPI launcher (mpirun / mpiexec set its rank in
 * the environment). Without one gckpt-run is one rank and never initialises MPI. */
bool gckpt_comm_launched(void);
/* This process's rank as the launcher set it (0 when none): known before MPI_Init, so that
 * only rank 0 prints a usage error. */
int gckpt_comm_launch_rank(void);
/* The number of ranks the launcher started (0 when it does not say): known before MPI_Init,
 * so that rank 0 can prepare its report before it (a signal may come while MPI_Init waits). */
int gckpt_comm_launch_world(void);
/* Its rank among the processes of its node (the GPU it takes), else its rank. */
int gckpt_comm_local_rank(void);
/* MPI_Init and MPI_COMM_WORLD; NULL with err set when this build has no MPI or it fails. */
gckpt_comm *gckpt_comm_mpi_new(int *argc, char ***argv, gckpt_err *err);

#endif
