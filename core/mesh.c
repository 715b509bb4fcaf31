/* The device mesh over global ranks and the bandwidth of each group (gckpt/core/mesh.h). */
#include "gckpt/core/mesh.h"

#include "gckpt/core/parallel.h"

static uint32_t at_least_1(uint32_t v) { return v > 1 ? v : 1; }

gckpt_mesh gckpt_layout_mesh(const gckpt_layout *l)
{
    gckpt_mesh m = {.dp_replicate = gckpt_layout_replicate(l), .cp = at_least_1(l->cp), .tp = at_least_1(l->tp)};
    uint32_t data = gckpt_layout_world(l);
    m.dp_shard = at_least_1(data / m.dp_replicate / m.cp);
    m.node_gpus = l->node_gpus ? l->node_gpus : m.tp > 1 ? data * m.tp : at_least_1(l->gpus);
    return m;
}

uint32_t gckpt_mesh_world(const gckpt_mesh *m) { return m->dp_replicate * m->dp_shard * m->cp * m->tp; }

void gckpt_mesh_group_shape(const gckpt_mesh *m, gckpt_group g, uint32_t *stride, uint32_t *size)
{
    /* row-major over (dp_replicate, dp_shard, cp, tp): a dimension's stride is the product of
     * those inside it; dp_shard_cp is dp_shard and cp flattened (contiguous, stride T) */
    switch (g) {
    case GCKPT_GROUP_TP: *stride = 1, *size = m->tp; break;
    case GCKPT_GROUP_CP: *stride = m->tp, *size = m->cp; break;
    case GCKPT_GROUP_SHARD: *stride = m->tp, *size = m->dp_shard * m->cp; break;
    case GCKPT_GROUP_REPLICATE: *stride = m->dp_shard * m->cp * m->tp, *size = m->dp_replicate; break;
    default: *stride = 1, *size = gckpt_mesh_world(m); break;
    }
}

uint32_t gckpt_mesh_group_ranks(const gckpt_mesh *m, gckpt_group g, uint32_t rank, uint32_t *out)
{
    uint32_t stride, size;
    gckpt_mesh_group_shape(m, g, &stride, &size);
    uint32_t span = stride * size, base = rank / span * span + rank % stride;
    for (uint32_t i = 0; i < size; i++) out[i] = base + i * stride;
    return size;
}

bool gckpt_mesh_group_inter_node(const gckpt_mesh *m, gckpt_group g)
{
    uint32_t stride, size;
    gckpt_mesh_group_shape(m, g, &stride, &size);
    /* the groups tile blocks of stride x size consecutive ranks; a block not dividing the node
     * crosses a node's edge somewhere, and a block crossing it holds a group with ranks on both
     * sides (the first group's first rank and the last group's last) */
    return size > 1 && m->node_gpus % (stride * size) != 0;
}

bool gckpt_mesh_multi_node(const gckpt_mesh *m) { return gckpt_mesh_world(m) > m->node_gpus; }

double gckpt_mesh_group_bus(const gckpt_device *d, const gckpt_mesh *m, gckpt_group g, const char **field)
{
    bool inter = gckpt_mesh_group_inter_node(m, g);
    if (field) *field = inter ? "inter_node_bus_bytes_per_s" : "intra_node_bus_bytes_per_s";
    return inter ? d->inter_node_bus_bytes_per_s : d->intra_node_bus_bytes_per_s;
}
