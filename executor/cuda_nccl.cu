// The CUDA backend's collectives: NCCL on the compute stream, one process per GPU. The
// communicator is created when the backend joins the run's communicator (comm.h): rank 0
// makes NCCL's unique id and broadcasts it over MPI, every rank then calls
// ncclCommInitRank. A process group (attach_group: HSDP's dp_shard / dp_replicate groups,
// TP x FSDP's TP group, split from the run's communicator by comm->split) gets an NCCL
// communicator of its own the same way within the group: its rank 0's unique id broadcast
// over the group's communicator (every rank joins the groups in the same order, so each
// ncclCommInitRank waits only for the ranks of its group). Reductions are NCCL's (ring /
// tree: their order of additions is not the host backend's rank order, so the results may
// differ from it in the last bits). Compiled here, never run: no GPU in the sessions that
// wrote it (unverified).
#include "cuda_common.cuh"

#ifdef GCKPT_HAVE_NCCL
#include <nccl.h>

namespace {

gckpt_xstatus nccl_fail(gckpt_backend *be, ncclResult_t r, const char *what)
{
    gckpt_seterr(&be->err, "NCCL: %s: %s", what, ncclGetErrorString(r));
    return GCKPT_XS_ERROR;
}

bool nccl_type(uint8_t dt, ncclDataType_t *out)
{
    switch (dt) {
    case GCKPT_DT_F32: *out = ncclFloat32; return true;
    case GCKPT_DT_BF16: *out = ncclBfloat16; return true;
    case GCKPT_DT_F16: *out = ncclFloat16; return true;
    case GCKPT_DT_U8: case GCKPT_DT_BOOL: *out = ncclUint8; return true;
    case GCKPT_DT_I8: *out = ncclInt8; return true;
    case GCKPT_DT_I64: *out = ncclInt64; return true;
    default: return false;
    }
}

// An NCCL communicator of comm's ranks (nullptr for one rank): its rank 0's unique id broadcast over comm.
gckpt_xstatus nccl_init(cuda_be *b, gckpt_comm *comm, ncclComm **out)
{
    gckpt_backend *be = &b->be;
    if (*out) {
        (void)ncclCommDestroy(*out);
        *out = nullptr;
    }
    if (!comm || comm->world == 1) return GCKPT_XS_OK;
    ncclUniqueId id;
    ncclResult_t r;
    if (comm->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) return nccl_fail(be, r, "ncclGetUniqueId");
    if (!comm->collective(comm, GCKPT_COLL_BROADCAST, GCKPT_RED_SUM, &id, &id, sizeof id, GCKPT_DT_U8, 0)) {
        gckpt_seterr(&be->err, "broadcasting NCCL's unique id: %s", comm->err.msg);
        return GCKPT_XS_ERROR;
    }
    CUDA_TRY(be, cudaSetDevice(b->device));
    if ((r = ncclCommInitRank(out, comm->world, id, comm->rank)) != ncclSuccess) return nccl_fail(be, r, "ncclCommInitRank");
    return GCKPT_XS_OK;
}

// One collective over nc's world ranks (nc nullptr: one rank, the value itself).
gckpt_xstatus nccl_run(cuda_be *b, ncclComm *nc, int world, gckpt_coll op, gckpt_redop red, gckpt_xt send, gckpt_xt recv,
                       int root)
{
    gckpt_backend *be = &b->be;
    uint64_t count;
    if (!gckpt_coll_count(op, &send, &recv, world, &count, &be->err)) return GCKPT_XS_ERROR;
    size_t bytes = count * gckpt_dtype_size(static_cast<gckpt_dtype>(send.dt));
    if (world == 1) { // one rank: the value itself
        if (send.p != recv.p) CUDA_TRY(be, cudaMemcpyAsync(recv.p, send.p, bytes, cudaMemcpyDeviceToDevice, b->stream));
        return GCKPT_XS_OK;
    }
    ncclDataType_t t;
    if (!nccl_type(send.dt, &t)) {
        gckpt_seterr(&be->err, "NCCL: no NCCL type for dtype %u", send.dt);
        return GCKPT_XS_ERROR;
    }
    ncclRedOp_t rop = red == GCKPT_RED_SUM ? ncclSum : ncclAvg; // both means: see comm.h
    ncclResult_t r;
    switch (op) {
    case GCKPT_COLL_ALL_REDUCE: r = ncclAllReduce(send.p, recv.p, count, t, rop, nc, b->stream); break;
    case GCKPT_COLL_ALL_GATHER: r = ncclAllGather(send.p, recv.p, count, t, nc, b->stream); break;
    case GCKPT_COLL_REDUCE_SCATTER: r = ncclReduceScatter(send.p, recv.p, count, t, rop, nc, b->stream); break;
    case GCKPT_COLL_BROADCAST: r = ncclBroadcast(send.p, recv.p, count, t, root, nc, b->stream); break;
    default: gckpt_seterr(&be->err, "collective %d is not known", static_cast<int>(op)); return GCKPT_XS_ERROR;
    }
    return r == ncclSuccess ? GCKPT_XS_OK : nccl_fail(be, r, gckpt_coll_names[op]);
}

} // namespace

gckpt_xstatus cuda_nccl_attach(cuda_be *b, gckpt_comm *comm)
{
    b->comm = comm;
    return nccl_init(b, comm, &b->nccl);
}

gckpt_xstatus cuda_nccl_collective(cuda_be *b, gckpt_coll op, gckpt_redop red, gckpt_xt send, gckpt_xt recv, int root)
{
    return nccl_run(b, b->nccl, b->comm ? b->comm->world : 1, op, red, send, recv, root);
}

gckpt_xstatus cuda_nccl_attach_group(cuda_be *b, gckpt_coll_group g, gckpt_comm *comm)
{
    if (g <= GCKPT_GROUP_WORLD || g >= GCKPT_NGROUP) {
        gckpt_seterr(&b->be.err, "process group %d is not one to join", static_cast<int>(g));
        return GCKPT_XS_ERROR;
    }
    b->group[g] = comm;
    return nccl_init(b, comm, &b->group_nccl[g]);
}

gckpt_xstatus cuda_nccl_collective_group(cuda_be *b, gckpt_coll_group g, gckpt_coll op, gckpt_redop red, gckpt_xt send,
                                         gckpt_xt recv)
{
    if (g == GCKPT_GROUP_WORLD) return cuda_nccl_collective(b, op, red, send, recv, 0);
    if (g >= GCKPT_NGROUP || !b->group[g]) {
        gckpt_seterr(&b->be.err, "a collective in the %s group, which this rank has not joined",
                     g < GCKPT_NGROUP ? gckpt_coll_group_names[g] : "?");
        return GCKPT_XS_ERROR;
    }
    return nccl_run(b, b->group_nccl[g], b->group[g]->world, op, red, send, recv, 0);
}

void cuda_nccl_destroy(cuda_be *b)
{
    for (int g = 0; g < GCKPT_NGROUP; g++) {
        if (b->group_nccl[g]) (void)ncclCommDestroy(b->group_nccl[g]);
        b->group_nccl[g] = nullptr;
        b->group[g] = nullptr;
    }
    if (b->nccl) (void)ncclCommDestroy(b->nccl);
    b->nccl = nullptr;
}

#else // built without NCCL: one rank only

gckpt_xstatus cuda_nccl_attach(cuda_be *b, gckpt_comm *comm)
{
    b->comm = comm;
    if (!comm || comm->world == 1) return GCKPT_XS_OK;
    gckpt_seterr(&b->be.err, "this gckpt-run's CUDA backend was built without NCCL (libnccl was not found)");
    return GCKPT_XS_ERROR;
}

gckpt_xstatus cuda_nccl_collective(cuda_be *b, gckpt_coll op, gckpt_redop red, gckpt_xt send, gckpt_xt recv, int root)
{
    (void)red;
    (void)root;
    uint64_t count;
    if (!gckpt_coll_count(op, &send, &recv, 1, &count, &b->be.err)) return GCKPT_XS_ERROR;
    if (b->comm && b->comm->world > 1) {
        gckpt_seterr(&b->be.err, "this gckpt-run's CUDA backend was built without NCCL (libnccl was not found)");
        return GCKPT_XS_ERROR;
    }
    size_t bytes = count * gckpt_dtype_size(static_cast<gckpt_dtype>(send.dt));
    if (send.p != recv.p) CUDA_TRY(&b->be, cudaMemcpyAsync(recv.p, send.p, bytes, cudaMemcpyDeviceToDevice, b->stream));
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_nccl_attach_group(cuda_be *b, gckpt_coll_group g, gckpt_comm *comm)
{
    if (g <= GCKPT_GROUP_WORLD || g >= GCKPT_NGROUP) {
        gckpt_seterr(&b->be.err, "process group %d is not one to join", static_cast<int>(g));
        return GCKPT_XS_ERROR;
    }
    b->group[g] = comm;
    if (!comm || comm->world == 1) return GCKPT_XS_OK;
    gckpt_seterr(&b->be.err, "this gckpt-run's CUDA backend was built without NCCL (libnccl was not found)");
    return GCKPT_XS_ERROR;
}

gckpt_xstatus cuda_nccl_collective_group(cuda_be *b, gckpt_coll_group g, gckpt_coll op, gckpt_redop red, gckpt_xt send,
                                         gckpt_xt recv)
{
    (void)g; // every group joined has one rank (cuda_nccl_attach_group)
    return cuda_nccl_collective(b, op, red, send, recv, 0);
}

void cuda_nccl_destroy(cuda_be *b) { (void)b; }

#endif
