/* The communicator's common parts (include/gckpt/executor/comm.h): the element
 * counts a collective moves, whether an MPI launcher started this process, and
 * the one-rank communicator of an ordinary run (every collective copies its input: a sum
 * or mean over one rank is the value itself). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/executor.h"


void gckpt_comm_label(gckpt_comm *c, const char *label)
{
    if (c && c->world > 1) snprintf(c->label, sizeof c->label, "%s", label ? label : "");
}

static bool single_collective(gckpt_comm *c, gckpt_coll op, gckpt_redop red, const void *send, void *recv,
                              uint64_t count, gckpt_dtype dt, int root)
{
    (void)red;
    if (op >= GCKPT_NCOLL || root != 0) {
        gckpt_seterr(&c->err, "collective %d with root %d on one rank", (int)op, root);
        return false;
    }
    if (send != recv) memmove(recv, send, count * gckpt_dtype_size(dt));
    return true;
}

static bool single_gather(gckpt_comm *c, const void *send, void *recv, uint64_t bytes)
{
    (void)c;
    if (send != recv) memmove(recv, send, bytes);
    return true;
}

static void single_destroy(gckpt_comm *c) { (void)c; }

static gckpt_comm *single_split(gckpt_comm *c, int color, int key, gckpt_err *err)
{
    (void)color, (void)key, (void)err;
    return c;
}

gckpt_comm *gckpt_comm_single(void)
{
    static gckpt_comm one = {.name = "single", .rank = 0, .world = 1, .collective = single_collective,
                             .gather = single_gather, .split = single_split, .destroy = single_destroy};
    return &one;
}

/* A launcher's variable as a rank number, or -1. */
static int env_rank(const char *const *vars, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < 1 << 30) return (int)r;
    }
    return -1;
}

int gckpt_comm_launch_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    int r = env_rank(vars, 3);
    return r < 0 ? 0 : r;
}

int gckpt_comm_launch_world(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    int n = env_rank(vars, 2);
    return n > 0 ? n : 0;
}

int gckpt_comm_local_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};
    int r = env_rank(vars, 2);
    return r < 0 ? gckpt_comm_launch_rank() : r;
}

bool gckpt_comm_launched(void)
{
    /* OpenMPI's mpirun, MPICH's hydra, a PMIx launcher */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return true;
    return false;
}

bool gckpt_coll_count(gckpt_coll op, const gckpt_xt *send, const gckpt_xt *recv, int world, uint64_t *count, gckpt_err *err)
{
    uint64_t w = world > 0 ? (uint64_t)world : 1, in = send->n, out = recv->n;
    bool ok;
    switch (op) {
    case GCKPT_COLL_ALL_REDUCE: case GCKPT_COLL_BROADCAST: ok = in == out; *count = out; break;
    case GCKPT_COLL_ALL_GATHER: ok = in * w == out; *count = in; break;
    case GCKPT_COLL_REDUCE_SCATTER: ok = out * w == in; *count = out; break;
    default: gckpt_seterr(err, "collective %d is not known", (int)op); return false;
    }
    if (!ok) {
        gckpt_seterr(err, "%s over %llu ranks: %llu elements in, %llu out", gckpt_coll_names[op], (unsigned long long)w,
                     (unsigned long long)in, (unsigned long long)out);
        return false;
    }
    if (send->dt != recv->dt || !send->p || !recv->p) {
        gckpt_seterr(err, "%s: buffers of different dtypes, or absent", gckpt_coll_names[op]);
        return false;
    }
    return true;
}
