/* The collectives data moves by between ranks (NCCL's and MPI's names), named once for the
 * schedule's COLLECTIVE events (gckpt/core/schedule.h) and for the executor's communicator.
 * count is always the elements of one rank's piece:
 *  ALL_REDUCE:     recv[count] = the sum (or the mean) over ranks of send[count]; send may be recv
 *  ALL_GATHER:     recv[world * count] = every rank's send[count], in rank order
 *  REDUCE_SCATTER: recv[count] = the sum (mean) over ranks of rank r's piece of send[world * count]
 *  BROADCAST:      recv[count] = root's send[count] (send read on the root only; may be recv)
 * (core: read by the planner and the executor) */
#ifndef GCKPT_COLLECTIVE_H
#define GCKPT_COLLECTIVE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GCKPT_COLL_ALL_REDUCE, GCKPT_COLL_ALL_GATHER, GCKPT_COLL_REDUCE_SCATTER, GCKPT_COLL_BROADCAST, GCKPT_NCOLL } gckpt_coll;

extern const char *const gckpt_coll_names[GCKPT_NCOLL]; /* "all_reduce", ... */

/* The process group a collective runs on: every rank, or one of HSDP's (accelerate's 2-D mesh,
 * dp_replicate outer, dp_shard inner): the dp_shard ranks of one replica (consecutive ranks),
 * or the dp_replicate ranks holding the same shard (dp_shard apart); under TP x FSDP (the dense
 * mesh (dp_replicate, fsdp, tp), FINDINGS R-TP-1) those among the ranks of one TP rank, and the
 * TP group (tp consecutive ranks). */
typedef enum { GCKPT_GROUP_WORLD, GCKPT_GROUP_SHARD, GCKPT_GROUP_REPLICATE, GCKPT_GROUP_TP, GCKPT_GROUP_CP, GCKPT_NGROUP } gckpt_coll_group;
extern const char *const gckpt_coll_group_names[GCKPT_NGROUP]; /* "world", "dp_shard", "dp_replicate", "tp", "cp" */

#ifdef __cplusplus
}
#endif

#endif
