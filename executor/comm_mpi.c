/* The communicator over MPI (include/gckpt/executor/comm.h): gckpt-run started by mpirun,
 * one process per rank of the plan. Reductions go along the ranks in order (rank 0 sends
 * its buffer to rank 1, which adds its own and sends the sum on; the last rank has the
 * result and broadcasts it; one rank: its own values): the sum is the one a single process accumulating the ranks'
 * gradients one after the other computes, bit for bit, whatever MPI_Allreduce's algorithm
 * for the message size would have done. Data moves in pieces of at most CHUNK bytes.
 *
 * Ranks out of step never hang: before its data moves, every collective is announced to
 * every other rank (a message of its own tag: sequence number, kind, reduction, dtype, count,
 * root, label), and every rank compares all announcements, so all of them see the same
 * difference at the same collective and fail it alike (MPI stays usable: MPI_Finalize
 * follows). Every wait polls a non-blocking request against comm->timeout_s: a rank that does
 * not come (dead, hung, or in a long computation) fails the collective on the others with the
 * ranks they wait for; the requests stay pending, so MPI is not finalized then. Errors are
 * returned, not fatal (MPI_ERRORS_RETURN). */
#define _GNU_SOURCE /* nanosleep, clock_gettime */
#include "gckpt/executor/comm.h"

#include <stdlib.h>
#include <string.h>

#ifdef GCKPT_HAVE_MPI
#include <mpi.h>
#include <stdio.h>
#include <time.h>

#include "gckpt/util/test_hooks.h"
#include "host_num.h"

#define CHUNK ((uint64_t)1 << 24)
#define TAG_DATA 0
#define TAG_ANNOUNCE 0x6c7
#define OP_GATHER 100 /* the result gather, beside gckpt_coll */

/* One rank's announcement of its next collective. */
typedef struct {
    uint64_t seq, count;
    int32_t op, red, dt, root;
    char label[160];
} announce_t;

typedef struct {
    gckpt_comm c;
    void *tmp;            /* CHUNK bytes: the partial sum received from the previous rank */
    uint64_t seq;         /* collectives announced */
    bool pending;         /* a request was left pending by a timeout: no MPI_Finalize */
    announce_t mine, *theirs;
    MPI_Request *req;     /* 2 x world */
    int *peer;            /* the rank of each request */
    MPI_Comm comm;        /* MPI_COMM_WORLD, or a group of it (gckpt_comm.split: HSDP's shard and
                           * replicate groups), its ranks numbered in it */
    bool sub;             /* a split's: freed with MPI_Comm_free, MPI finalized by the world's */
} mpi_comm;

static bool mpi_fail(gckpt_comm *c, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    gckpt_seterr(&c->err, "MPI rank %d of %d: %s: %s", c->rank, c->world, what, msg);
    c->failed = true;
    return false;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *op_name(int32_t op)
{
    return op == OP_GATHER ? "gather" : op >= 0 && op < GCKPT_NCOLL ? gckpt_coll_names[op] : "?";
}

/* The label without a leading "event N " (the ranks number their schedules' events apart). */
static const char *label_key(const char *l)
{
    if (strncmp(l, "event ", 6)) return l;
    const char *p = l + 6;
    while (*p >= '0' && *p <= '9') p++;
    return *p == ' ' ? p + 1 : l;
}

/* Wait for n requests, each with its peer rank, polling (a rank waiting here leaves its core
 * to the others) until they complete or timeout_s passes without one completing. */
static bool wait_all(mpi_comm *m, MPI_Request *r, const int *peer, int n, const char *waiting_for)
{
    gckpt_comm *c = &m->c;
    double last = now();
    int left = n, idx[64], spins = 0;
    long nap_ns = 1000;
    while (left > 0) {
        int got = 0;
        int rc = MPI_Testsome(n, r, &got, idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(c, rc, waiting_for);
        if (got == MPI_UNDEFINED) break;
        if (got > 0) {
            left -= got;
            last = now();
            nap_ns = 1000;
            continue;
        }
        if (now() - last > c->timeout_s) {
            char who[256] = "";
            size_t l = 0;
            for (int i = 0; i < n && l + 16 < sizeof who; i++)
                if (r[i] != MPI_REQUEST_NULL) {
                    bool dup = false;
                    for (int k = 0; k < i; k++) dup = dup || (r[k] != MPI_REQUEST_NULL && peer[k] == peer[i]);
                    if (!dup) l += (size_t)snprintf(who + l, sizeof who - l, "%s%d", l ? ", " : "", peer[i]);
                }
            gckpt_seterr(&c->err,
                         "rank %d of %d: collective #%llu (%s of %llu x %s; %s) made no progress for %g s waiting for %s "
                         "from rank %s (ended, hung, or not calling collectives: see --collective-timeout)",
                         c->rank, c->world, (unsigned long long)m->seq, op_name(m->mine.op),
                         (unsigned long long)m->mine.count, gckpt_dtype_names[m->mine.dt], m->mine.label[0] ? m->mine.label : "no label",
                         c->timeout_s, waiting_for, who);
            c->failed = true;
            m->pending = true;
            return false;
        }
        if (++spins > 64) { /* then sleep, doubling up to 1 ms */
            struct timespec t = {0, nap_ns};
            nanosleep(&t, NULL);
            if (nap_ns < 1000000) nap_ns *= 2;
        }
    }
    return true;
}

/* Announce this rank's next collective and compare every rank's: false when they differ
 * (every rank says so alike), or on a timeout. *skip: a test hook leaves this one out. */
static bool announce(mpi_comm *m, int32_t op, gckpt_redop red, uint64_t count, gckpt_dtype dt, int root, bool *skip)
{
    gckpt_comm *c = &m->c;
    *skip = false;
    if (c->failed) return false; /* err keeps the first failure */
    uint64_t seq = m->seq + 1;
    if (gckpt_hook_skip_collective && gckpt_hook_skip_collective(c->rank, (unsigned long long)seq)) {
        *skip = true;
        return true;
    }
    m->seq = seq;
    announce_t *a = &m->mine;
    memset(a, 0, sizeof *a);
    *a = (announce_t){.seq = seq, .count = count, .op = op, .red = (int32_t)red, .dt = (int32_t)dt, .root = root};
    snprintf(a->label, sizeof a->label, "%s", c->label);
    int n = 0, rc;
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank) continue;
        m->peer[n] = p;
        if ((rc = MPI_Irecv(&m->theirs[p], (int)sizeof *a, MPI_BYTE, p, TAG_ANNOUNCE, m->comm, &m->req[n++])) != MPI_SUCCESS)
            return mpi_fail(c, rc, "announcing a collective");
        m->peer[n] = p;
        if ((rc = MPI_Isend(a, (int)sizeof *a, MPI_BYTE, p, TAG_ANNOUNCE, m->comm, &m->req[n++])) != MPI_SUCCESS)
            return mpi_fail(c, rc, "announcing a collective");
    }
    if (!wait_all(m, m->req, m->peer, n, "its announcement")) return false;
    m->theirs[c->rank] = *a;
    bool same = true;
    for (int p = 0; p < c->world; p++) {
        const announce_t *b = &m->theirs[p], *z = &m->theirs[0];
        same = same && b->seq == z->seq && b->op == z->op && b->red == z->red && b->dt == z->dt && b->count == z->count &&
               b->root == z->root && !strcmp(label_key(b->label), label_key(z->label));
    }
    if (same) return true;
    /* the same text on every rank: each rank's collective, rank by rank */
    char text[sizeof c->err.msg];
    size_t l = (size_t)snprintf(text, sizeof text, "the ranks' collectives differ:");
    for (int p = 0; p < c->world && l < sizeof text; p++) {
        const announce_t *b = &m->theirs[p];
        l += (size_t)snprintf(text + l, sizeof text - l, " rank %d #%llu %s of %llu x %s at %.*s%s", p,
                              (unsigned long long)b->seq, op_name(b->op), (unsigned long long)b->count,
                              b->dt >= 0 && b->dt < GCKPT_NDT ? gckpt_dtype_names[b->dt] : "?",
                              c->world > 2 ? 70 : 150, b->label[0] ? b->label : "no label", p + 1 < c->world ? ";" : "");
    }
    gckpt_seterr(&c->err, "%s", text);
    c->failed = true;
    return false;
}

static bool wait_one(mpi_comm *m, MPI_Request *r, int peer, const char *what)
{
    return wait_all(m, r, &peer, 1, what);
}

/* recv = the rank-ordered sum of every rank's send (each divided by the ranks first for a
 * mean), on every rank */
static bool all_reduce(mpi_comm *m, gckpt_redop red, const void *send, void *recv, uint64_t count, gckpt_dtype dt)
{
    gckpt_comm *c = &m->c;
    unsigned sz = gckpt_dtype_size(dt);
    uint64_t per = CHUNK / sz;
    int rc, last = c->world - 1;
    MPI_Request r;
    for (uint64_t off = 0; off < count; off += per) {
        uint64_t n = count - off < per ? count - off : per;
        gckpt_xt mine = {(char *)send + off * sz, n, (uint8_t)dt}, acc = {m->tmp, n, (uint8_t)dt};
        gckpt_xt out = {(char *)recv + off * sz, n, (uint8_t)dt};
        if (c->rank > 0) {
            if ((rc = MPI_Irecv(m->tmp, (int)(n * sz), MPI_BYTE, c->rank - 1, TAG_DATA, m->comm, &r)) != MPI_SUCCESS)
                return mpi_fail(c, rc, "receiving a partial sum");
            if (!wait_one(m, &r, c->rank - 1, "a partial sum")) return false;
        }
        gckpt_xt *dst = c->rank == last ? &out : &acc;
        float post = red == GCKPT_RED_AVG_POST && c->rank == last ? 1.0f / (float)c->world : 1.0f;
        for (uint64_t i = 0; i < n; i++) { /* a mean: each term divided first (DDP), or the sum scaled (ZeRO) */
            float v = red == GCKPT_RED_AVG ? rnd(dt, ld(&mine, i) / (float)c->world) : ld(&mine, i);
            v = c->rank > 0 ? ld(&acc, i) + v : v;
            st(dst, i, post != 1.0f ? rnd(dt, v) * post : v);
        }
        if (c->rank < last) {
            if ((rc = MPI_Isend(m->tmp, (int)(n * sz), MPI_BYTE, c->rank + 1, TAG_DATA, m->comm, &r)) != MPI_SUCCESS)
                return mpi_fail(c, rc, "sending a partial sum");
            if (!wait_one(m, &r, c->rank + 1, "the partial sum to be taken")) return false;
        }
        if ((rc = MPI_Ibcast(out.p, (int)(n * sz), MPI_BYTE, last, m->comm, &r)) != MPI_SUCCESS)
            return mpi_fail(c, rc, "broadcasting the sum");
        if (!wait_one(m, &r, last, "the sum")) return false;
    }
    return true;
}

static bool bcast(mpi_comm *m, void *p, uint64_t n, int root, const char *what)
{
    MPI_Request r;
    int rc = MPI_Ibcast(p, (int)n, MPI_BYTE, root, m->comm, &r);
    if (rc != MPI_SUCCESS) return mpi_fail(&m->c, rc, what);
    return wait_one(m, &r, root, what);
}

static bool mpi_collective(gckpt_comm *c, gckpt_coll op, gckpt_redop red, const void *send, void *recv, uint64_t count,
                           gckpt_dtype dt, int root)
{
    mpi_comm *m = (mpi_comm *)c;
    uint64_t sz = gckpt_dtype_size(dt), w = (uint64_t)c->world;
    if (op >= GCKPT_NCOLL) return gckpt_seterr(&c->err, "collective %d is not known", (int)op), false;
    if (op == GCKPT_COLL_BROADCAST && (root < 0 || root >= c->world))
        return gckpt_seterr(&c->err, "broadcast from rank %d of %d", root, c->world), false;
    bool skip;
    if (!announce(m, (int32_t)op, red, count, dt, root, &skip)) return false;
    if (skip) return true;
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
                if (!bcast(m, dst, n, (int)r, "all-gather")) return false;
            }
        }
        return true;
    case GCKPT_COLL_BROADCAST:
        if (c->rank == root && send != recv) memmove(recv, send, count * sz);
        for (uint64_t off = 0; off < count * sz; off += CHUNK) {
            uint64_t n = count * sz - off < CHUNK ? count * sz - off : CHUNK;
            if (!bcast(m, (char *)recv + off, n, root, "broadcast")) return false;
        }
        return true;
    default: return gckpt_seterr(&c->err, "collective %d is not known", (int)op), false;
    }
}

static bool mpi_gather(gckpt_comm *c, const void *send, void *recv, uint64_t bytes)
{
    mpi_comm *m = (mpi_comm *)c;
    if (bytes > CHUNK) return gckpt_seterr(&c->err, "gather of %llu bytes per rank", (unsigned long long)bytes), false;
    bool skip;
    if (!announce(m, OP_GATHER, GCKPT_RED_SUM, bytes, GCKPT_DT_U8, 0, &skip)) return false;
    if (skip) return true;
    MPI_Request r;
    int rc = MPI_Igather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, 0, m->comm, &r);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "gathering the ranks' results");
    return wait_one(m, &r, 0, "the ranks' results");
}

static void mpi_free(mpi_comm *m)
{
    free(m->tmp);
    free(m->theirs);
    free(m->req);
    free(m->peer);
    free(m);
}

static void mpi_destroy(gckpt_comm *c)
{
    mpi_comm *m = (mpi_comm *)c;
    bool pending = m->pending, sub = m->sub;
    MPI_Comm comm = m->comm;
    mpi_free(m);
    /* a request left pending (a rank that never came) would hold MPI_Finalize forever: the
     * process ends without it, and mpirun ends the others */
    if (sub && !pending) MPI_Comm_free(&comm);
    else if (!sub && !pending) MPI_Finalize();
}

static gckpt_comm *mpi_split(gckpt_comm *c, int color, int key, gckpt_err *err);

/* A communicator over comm (its rank and size), or NULL with err set. */
static mpi_comm *mpi_make(MPI_Comm comm, bool sub, double timeout_s, gckpt_err *err)
{
    mpi_comm *m = calloc(1, sizeof *m);
    int world = 1;
    MPI_Comm_size(comm, &world);
    if (m) {
        m->tmp = malloc(CHUNK);
        m->theirs = calloc((size_t)world, sizeof *m->theirs);
        m->req = calloc(2 * (size_t)world, sizeof *m->req);
        m->peer = calloc(2 * (size_t)world, sizeof *m->peer);
    }
    if (!m || !m->tmp || !m->theirs || !m->req || !m->peer || world > 32) {
        if (m) mpi_free(m);
        gckpt_seterr(err, world > 32 ? "more than 32 ranks" : "out of memory");
        return NULL;
    }
    m->c.name = "mpi";
    MPI_Comm_rank(comm, &m->c.rank);
    m->c.world = world;
    m->c.timeout_s = timeout_s;
    m->c.collective = mpi_collective;
    m->c.gather = mpi_gather;
    m->c.destroy = mpi_destroy;
    m->c.split = mpi_split;
    m->comm = comm;
    m->sub = sub;
    return m;
}

/* MPI_Comm_split: every rank calls it (a collective of c's ranks), those of one color form a
 * group, ordered by key. */
static gckpt_comm *mpi_split(gckpt_comm *c, int color, int key, gckpt_err *err)
{
    mpi_comm *m = (mpi_comm *)c;
    MPI_Comm nc;
    int rc = MPI_Comm_split(m->comm, color, key, &nc);
    if (rc != MPI_SUCCESS) {
        mpi_fail(c, rc, "splitting the ranks into groups");
        gckpt_seterr(err, "%s", c->err.msg);
        return NULL;
    }
    MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
    mpi_comm *g = mpi_make(nc, true, c->timeout_s, err);
    if (!g) MPI_Comm_free(&nc);
    return g ? &g->c : NULL;
}

gckpt_comm *gckpt_comm_mpi_new(int *argc, char ***argv, gckpt_err *err)
{
    if (gckpt_hook_before_mpi_init) gckpt_hook_before_mpi_init(); /* tests only (test_hooks.h) */
    int rc = MPI_Init(argc, argv);
    if (rc != MPI_SUCCESS) {
        gckpt_seterr(err, "MPI_Init failed (error %d)", rc);
        return NULL;
    }
    /* errors come back as codes (the message names the rank), not as an abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpi_comm *m = mpi_make(MPI_COMM_WORLD, false, GCKPT_COLL_TIMEOUT_S, err);
    if (!m) {
        MPI_Finalize();
        return NULL;
    }
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
