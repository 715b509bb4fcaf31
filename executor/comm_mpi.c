/* The communicator over MPI (include/gckpt/executor/comm.h): gckpt-run started by mpirun,
 * one process per rank of the plan. Reductions go along the ranks in order (rank 0 sends
 * its buffer to rank 1, which adds its own and sends the sum on; the last rank has the
 * result and broadcasts it; one rank: its own values): the sum is the one a single process accumulating the ranks'
 * gradients one after the other computes, bit for bit, whatever MPI_Allreduce's algorithm
 * for the message size would have done. Data moves in pieces of at most CHUNK bytes. */
#include "gckpt/executor/comm.h"

#include <stdlib.h>
#include <string.h>

#ifdef GCKPT_HAVE_MPI
#include <mpi.h>

#include "host_num.h"

#define CHUNK ((uint64_t)1 << 24)

typedef struct {
    gckpt_comm c;
    void *tmp; /* CHUNK bytes: the partial sum received from the previous rank */
} mpi_comm;

static bool mpi_fail(gckpt_comm *c, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    gckpt_seterr(&c->err, "MPI rank %d of %d: %s: %s", c->rank, c->world, what, msg);
    return false;
}

/* recv = the rank-ordered sum of every rank's send (each divided by the ranks first for a
 * mean), on every rank */
static bool all_reduce(mpi_comm *m, gckpt_redop red, const void *send, void *recv, uint64_t count, gckpt_dtype dt)
{
    gckpt_comm *c = &m->c;
    unsigned sz = gckpt_dtype_size(dt);
    uint64_t per = CHUNK / sz;
    int rc, last = c->world - 1;
    for (uint64_t off = 0; off < count; off += per) {
        uint64_t n = count - off < per ? count - off : per;
        gckpt_xt mine = {(char *)send + off * sz, n, (uint8_t)dt}, acc = {m->tmp, n, (uint8_t)dt};
        gckpt_xt out = {(char *)recv + off * sz, n, (uint8_t)dt};
        if (c->rank > 0 &&
            (rc = MPI_Recv(m->tmp, (int)(n * sz), MPI_BYTE, c->rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return mpi_fail(c, rc, "receiving a partial sum");
        gckpt_xt *dst = c->rank == last ? &out : &acc;
        float post = red == GCKPT_RED_AVG_POST && c->rank == last ? 1.0f / (float)c->world : 1.0f;
        for (uint64_t i = 0; i < n; i++) { /* a mean: each term divided first (DDP), or the sum scaled (ZeRO) */
            float v = red == GCKPT_RED_AVG ? rnd(dt, ld(&mine, i) / (float)c->world) : ld(&mine, i);
            v = c->rank > 0 ? ld(&acc, i) + v : v;
            st(dst, i, post != 1.0f ? rnd(dt, v) * post : v);
        }
        if (c->rank < last && (rc = MPI_Send(m->tmp, (int)(n * sz), MPI_BYTE, c->rank + 1, 0, MPI_COMM_WORLD)) != MPI_SUCCESS)
            return mpi_fail(c, rc, "sending a partial sum");
        if ((rc = MPI_Bcast(out.p, (int)(n * sz), MPI_BYTE, last, MPI_COMM_WORLD)) != MPI_SUCCESS)
            return mpi_fail(c, rc, "broadcasting the sum");
    }
    return true;
}

static bool mpi_collective(gckpt_comm *c, gckpt_coll op, gckpt_redop red, const void *send, void *recv, uint64_t count,
                           gckpt_dtype dt, int root)
{
    mpi_comm *m = (mpi_comm *)c;
    uint64_t sz = gckpt_dtype_size(dt), w = (uint64_t)c->world;
    int rc;
    switch (op) {
    case GCKPT_COLL_ALL_REDUCE: return all_reduce(m, red, send, recv, count, dt);
    case GCKPT_COLL_REDUCE_SCATTER: {
        /* the whole sum, then this rank's piece (a reference, not a bandwidth-optimal one) */
        void *full = malloc(count * w * sz + 1);
        if (!full) return gckpt_seterr(&c->err, "out of host memory for a reduce-scatter"), false;
        bool ok = all_reduce(m, red, send, full, count * w, dt);
        if (ok) memcpy(recv, (char *)full + (uint64_t)c->rank * count * sz, count * sz);
        free(full);
        return ok;
    }
    case GCKPT_COLL_ALL_GATHER:
        for (uint64_t off = 0; off < count * sz; off += CHUNK / w) {
            uint64_t n = count * sz - off < CHUNK / w ? count * sz - off : CHUNK / w;
            for (uint64_t r = 0; r < w; r++) {
                const void *src = r == (uint64_t)c->rank ? (const char *)send + off : NULL;
                char *dst = (char *)recv + r * count * sz + off;
                if (src && src != dst) memmove(dst, src, n);
                if ((rc = MPI_Bcast(dst, (int)n, MPI_BYTE, (int)r, MPI_COMM_WORLD)) != MPI_SUCCESS)
                    return mpi_fail(c, rc, "all-gather");
            }
        }
        return true;
    case GCKPT_COLL_BROADCAST:
        if (root < 0 || root >= c->world) return gckpt_seterr(&c->err, "broadcast from rank %d of %d", root, c->world), false;
        if (c->rank == root && send != recv) memmove(recv, send, count * sz);
        for (uint64_t off = 0; off < count * sz; off += CHUNK) {
            uint64_t n = count * sz - off < CHUNK ? count * sz - off : CHUNK;
            if ((rc = MPI_Bcast((char *)recv + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD)) != MPI_SUCCESS)
                return mpi_fail(c, rc, "broadcast");
        }
        return true;
    default: return gckpt_seterr(&c->err, "collective %d is not known", (int)op), false;
    }
}

static bool mpi_gather(gckpt_comm *c, const void *send, void *recv, uint64_t bytes)
{
    if (bytes > CHUNK) return gckpt_seterr(&c->err, "gather of %llu bytes per rank", (unsigned long long)bytes), false;
    int rc = MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS || mpi_fail(c, rc, "gathering the ranks' results");
}

static void mpi_destroy(gckpt_comm *c)
{
    mpi_comm *m = (mpi_comm *)c;
    free(m->tmp);
    free(m);
    MPI_Finalize();
}

gckpt_comm *gckpt_comm_mpi_new(int *argc, char ***argv, gckpt_err *err)
{
    int rc = MPI_Init(argc, argv);
    if (rc != MPI_SUCCESS) {
        gckpt_seterr(err, "MPI_Init failed (error %d)", rc);
        return NULL;
    }
    /* errors come back as codes (the message names the rank), not as an abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpi_comm *m = calloc(1, sizeof *m);
    if (m) m->tmp = malloc(CHUNK);
    if (!m || !m->tmp) {
        if (m) free(m);
        MPI_Finalize();
        gckpt_seterr(err, "out of memory");
        return NULL;
    }
    m->c.name = "mpi";
    MPI_Comm_rank(MPI_COMM_WORLD, &m->c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->c.world);
    m->c.collective = mpi_collective;
    m->c.gather = mpi_gather;
    m->c.destroy = mpi_destroy;
    return &m->c;
}

#else /* built without MPI */

gckpt_comm *gckpt_comm_mpi_new(int *argc, char ***argv, gckpt_err *err)
{
    (void)argc;
    (void)argv;
    gckpt_seterr(err, "this gckpt-run was built without MPI (install libopenmpi-dev: tools/install-deps.sh)");
    return NULL;
}

#endif
