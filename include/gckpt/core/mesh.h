/* The device mesh of a run laid over the global ranks, and which of its groups span nodes: one
 * place that decides the bus bandwidth a group's collectives run at, read by every mode (FSDP2,
 * HSDP, DDP, ZeRO over the world, TP, CP's ring, the replicas' all-reduce).
 * accelerate 1.15's ParallelismConfig._get_mesh and transformers 5.24's
 * initialize_distributed_mesh order the dimensions outer to inner dp_replicate, dp_shard
 * (transformers' fsdp), cp, tp, and torch's init_device_mesh lays them row-major over the ranks:
 * rank = ((r x S + s) x C + c) x T + t; FSDP2 shards over the flattened dp_shard_cp dimension
 * (S x C ranks T apart). With G GPUs per node rank k is on node k / G (torchrun's node_rank x
 * nproc_per_node + local_rank). A group stays inside a node iff every rank of it does, i.e. iff its
 * span (stride x size) divides G; else it runs at the inter-node bandwidth (FINDINGS R-TP-26,
 * tests/data/mesh-groups).
 * (core: read by the planner) */
#ifndef GCKPT_MESH_H
#define GCKPT_MESH_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/collective.h"
#include "gckpt/core/device.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t dp_replicate, dp_shard, cp, tp; /* each at least 1 */
    uint32_t node_gpus;                       /* GPUs per node (ranks node_gpus apart are on the next node) */
} gckpt_mesh;

/* The groups (gckpt_coll_group, gckpt/core/collective.h) as laid on the mesh:
 *  WORLD      every rank (DDP, ZeRO, FSDP2 without a mesh)
 *  SHARD      dp_shard x cp (accelerate's dp_shard_cp; transformers' fsdp), S x C ranks T apart:
 *             FSDP2's all-gathers and reduce-scatters
 *  REPLICATE  R ranks S x C x T apart: HSDP's all-reduce of the reduced shards
 *  TP         T consecutive ranks: TP's all-reduces and all-gathers
 *  CP         C ranks T apart: the ring's K/V exchanges */
typedef gckpt_coll_group gckpt_group;

/* The mesh of layout l: l's own gpus x nodes are the data ranks (dp_replicate x dp_shard x cp),
 * times l->tp under TP (whose layout is the fsdp mesh of one TP rank, gckpt_tp_hsdp_layout);
 * GPUs per node l->node_gpus when set, else l->gpus (TP: every rank on one node). */
gckpt_mesh gckpt_layout_mesh(const gckpt_layout *l);
uint32_t gckpt_mesh_world(const gckpt_mesh *m);
/* Group g's stride (distance between its consecutive ranks) and size. */
void gckpt_mesh_group_shape(const gckpt_mesh *m, gckpt_group g, uint32_t *stride, uint32_t *size);
/* The ranks of rank's group g, ascending, into out (room for the group's size); their number. */
uint32_t gckpt_mesh_group_ranks(const gckpt_mesh *m, gckpt_group g, uint32_t rank, uint32_t *out);
/* Whether some group g of the mesh has ranks on two nodes (all of them run at once: the step
 * waits for the slowest). */
bool gckpt_mesh_group_inter_node(const gckpt_mesh *m, gckpt_group g);
/* Whether the mesh's ranks sit on more than one node. */
bool gckpt_mesh_multi_node(const gckpt_mesh *m);
/* The bus bandwidth (nccl-tests' busbw) group g's collectives run at: the profile's
 * inter_node_bus_bytes_per_s when the group spans nodes, else intra_node_bus_bytes_per_s (0 when
 * that field is absent); *field (may be NULL) the field's name. */
double gckpt_mesh_group_bus(const gckpt_device *d, const gckpt_mesh *m, gckpt_group g, const char **field);

#ifdef __cplusplus
}
#endif

#endif
