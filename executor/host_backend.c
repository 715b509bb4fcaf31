/* The host (CPU reference) backend. "Device" memory is ordinary heap memory counted
 * exactly: every allocation adds the requested bytes to the current total and the peak
 * follows it, so the peak equals the schedule's prediction when the interpreter performs
 * the same allocations. An optional limit makes allocations fail as a GPU out of memory
 * would. Kernel scratch (fp32 copies around CBLAS, attention rows) is not counted: on a GPU
 * it corresponds to registers and shared memory. */
#include "gckpt/executor/exec_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_num.h"
#include "host_blas.h"
#include "host_ops.h"
#include "host_scratch.h"
#include "gckpt/executor/op_sizes.h"
#include "gckpt/executor/quant4.h"
#include "gckpt/executor/quant8.h"
#include "gckpt/util/test_hooks.h"

typedef struct {
    gckpt_backend be;     /* first: the interface */
    uint64_t limit;       /* 0: none */
    gckpt_memstat ms;
    float records[GCKPT_MAX_RECORDS];
    struct timespec t0;
    bool timing;
    gckpt_comm *comm;     /* NULL: one rank */
    gckpt_comm *group[GCKPT_NGROUP]; /* HSDP's shard and replicate groups (NULL: not joined) */
} host_be;

static host_be *H(gckpt_backend *be) { return (host_be *)be; }

static gckpt_xstatus h_alloc(gckpt_backend *be, gckpt_mem_kind k, uint64_t bytes, void **out)
{
    host_be *h = H(be);
    *out = NULL;
    if (k == GCKPT_MEM_DEVICE && h->limit && (bytes > h->limit || h->ms.allocated > h->limit - bytes)) {
        gckpt_seterr(&be->err, "out of memory: %llu bytes requested with %llu of the %llu-byte limit in use",
                     (unsigned long long)bytes, (unsigned long long)h->ms.allocated, (unsigned long long)h->limit);
        return GCKPT_XS_OOM;
    }
    /* 64-byte aligned, at least one line (a zero-byte tensor still gets an address) */
    uint64_t sz = gckpt_round_up(bytes ? bytes : 1, 64);
    void *p = sz <= SIZE_MAX ? aligned_alloc(64, (size_t)sz) : NULL;
    if (!p) {
        gckpt_seterr(&be->err, "out of host memory allocating %llu bytes", (unsigned long long)bytes);
        return GCKPT_XS_OOM;
    }
    if (k == GCKPT_MEM_DEVICE) {
        h->ms.allocated += bytes;
        if (h->ms.allocated > h->ms.allocated_peak) h->ms.allocated_peak = h->ms.allocated;
    } else {
        h->ms.pinned += bytes;
        if (h->ms.pinned > h->ms.pinned_peak) h->ms.pinned_peak = h->ms.pinned;
    }
    *out = p;
    return GCKPT_XS_OK;
}

static void h_release(gckpt_backend *be, gckpt_mem_kind k, void *p, uint64_t bytes)
{
    host_be *h = H(be);
    if (!p) return;
    free(p);
    if (k == GCKPT_MEM_DEVICE) h->ms.allocated -= bytes;
    else h->ms.pinned -= bytes;
}

static gckpt_xstatus h_copy(gckpt_backend *be, void *dst, const void *src, uint64_t bytes, bool to_host)
{
    (void)be;
    (void)to_host;
    memcpy(dst, src, (size_t)bytes);
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_updown(gckpt_backend *be, void *dst, const void *src, uint64_t bytes)
{
    (void)be;
    memcpy(dst, src, (size_t)bytes);
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_init(gckpt_backend *be, gckpt_xt t, gckpt_init how, float scale, uint64_t key)
{
    (void)be;
    for (uint64_t i = 0; i < t.n; i++)
        st(&t, i, how == GCKPT_INIT_CONST ? scale : gckpt_rng_uniform(key, i, scale));
    return GCKPT_XS_OK;
}

/* Every kernel below runs after the op's own size checks (op_sizes.h). */
static gckpt_xstatus h_source(gckpt_backend *be, gckpt_source what, const gckpt_xcall *c, const int64_t *host)
{
    if (gckpt_op_check_source(what, c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    return host_source(what, c, host, &be->err);
}

/* A kernel that could not get its scratch memory is an out of memory, not an error. */
static gckpt_xstatus oom_if_scratch_failed(gckpt_xstatus rc) { return hs_take_failure() && rc == GCKPT_XS_ERROR ? GCKPT_XS_OOM : rc; }

static gckpt_xstatus h_forward(gckpt_backend *be, const gckpt_xcall *c)
{
    if (gckpt_hook_host_forward) gckpt_hook_host_forward(); /* tests only (test_hooks.h) */
    if (gckpt_op_check_forward(c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    if (!host_blas_ready(&be->err)) return GCKPT_XS_OOM;
    hs_take_failure();
    return oom_if_scratch_failed(host_op_forward(c, &be->err));
}

static gckpt_xstatus h_backward(gckpt_backend *be, const gckpt_xcall *c)
{
    if (gckpt_op_check_backward(c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    if (!host_blas_ready(&be->err)) return GCKPT_XS_OOM;
    hs_take_failure();
    return oom_if_scratch_failed(host_op_backward(c, &be->err));
}

static gckpt_xstatus h_dequant(gckpt_backend *be, const gckpt_xquant *q, gckpt_xt w, gckpt_xt out)
{
    if (gckpt_op_check_dequant(q, w, out, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    const gckpt_quant_layout *l = q->layout;
    bool ok;
    if (l->scheme == GCKPT_QUANT_INT8) {
        ok = gckpt_q8_dequantize(w.p, q->stat[GCKPT_QS_SCB], out.rows, out.cols, (gckpt_dtype)out.dt, out.p, &be->err);
    } else {
        gckpt_q4_store st = gckpt_q4_store_of(l, w.p, q->stat);
        ok = gckpt_q4_dequantize((gckpt_quant_scheme)l->scheme, &st, out.n, (gckpt_dtype)out.dt, out.p, &be->err);
    }
    return ok ? GCKPT_XS_OK : GCKPT_XS_ERROR;
}

static gckpt_xstatus h_add(gckpt_backend *be, gckpt_xt dst, gckpt_xt a, gckpt_xt b)
{
    if (gckpt_op_check_add(dst, a, b, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    if (!a.p)
        for (uint64_t i = 0; i < dst.n; i++) st(&dst, i, ld(&b, i));
    else
        for (uint64_t i = 0; i < dst.n; i++) st(&dst, i, ld(&a, i) + ld(&b, i));
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_set_scalar(gckpt_backend *be, gckpt_xt dst, float v)
{
    (void)be;
    for (uint64_t i = 0; i < dst.n; i++) st(&dst, i, v);
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_optim(gckpt_backend *be, const gckpt_optcall *c)
{
    if (gckpt_op_check_optim(c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    return host_optim(c, &be->err);
}

static gckpt_xstatus h_checksum(gckpt_backend *be, gckpt_xt t, uint64_t salt, uint64_t *hash, double *sumsq)
{
    (void)be;
    uint64_t hsum = 0;
    double ss = 0;
    unsigned sz = gckpt_dtype_size((gckpt_dtype)t.dt);
    for (uint64_t i = 0; i < t.n; i++) {
        uint64_t bits = 0;
        memcpy(&bits, (const char *)t.p + i * sz, sz);
        hsum += gckpt_hash_term(salt, bits, i);
        double v = ld(&t, i);
        ss += v * v;
    }
    *hash = hsum;
    *sumsq = ss;
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_record(gckpt_backend *be, gckpt_xt s, int slot)
{
    if (slot < 0 || slot >= GCKPT_MAX_RECORDS || !s.p || s.n < 1) {
        gckpt_seterr(&be->err, "record: bad slot %d", slot);
        return GCKPT_XS_ERROR;
    }
    H(be)->records[slot] = ld(&s, 0);
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_read_records(gckpt_backend *be, float *out, int n)
{
    if (n < 0 || n > GCKPT_MAX_RECORDS) return GCKPT_XS_ERROR;
    memcpy(out, H(be)->records, sizeof *out * (size_t)n);
    return GCKPT_XS_OK;
}

static void h_memstat(gckpt_backend *be, gckpt_memstat *m) { *m = H(be)->ms; }

static void h_reset_peaks(gckpt_backend *be)
{
    host_be *h = H(be);
    gckpt_host_scratch_reset_peak();
    h->ms.allocated_peak = h->ms.allocated;
    h->ms.pinned_peak = h->ms.pinned;
}

static gckpt_xstatus h_timer_start(gckpt_backend *be)
{
    clock_gettime(CLOCK_MONOTONIC, &H(be)->t0);
    H(be)->timing = true;
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_timer_stop(gckpt_backend *be, double *s)
{
    host_be *h = H(be);
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!h->timing) {
        gckpt_seterr(&be->err, "timer stopped before it was started");
        return GCKPT_XS_ERROR;
    }
    h->timing = false;
    *s = (double)(t1.tv_sec - h->t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - h->t0.tv_nsec);
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_sync(gckpt_backend *be)
{
    (void)be;
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_set_workspace(gckpt_backend *be, void *p, uint64_t bytes)
{
    (void)be;
    (void)p;
    (void)bytes;
    return GCKPT_XS_OK; /* CBLAS needs no workspace */
}

static void h_describe(gckpt_backend *be, gckpt_devinfo *d)
{
    (void)be;
    gckpt_host_describe(d);
}

static gckpt_xstatus h_attach(gckpt_backend *be, gckpt_comm *comm)
{
    H(be)->comm = comm;
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_attach_group(gckpt_backend *be, gckpt_coll_group g, gckpt_comm *comm)
{
    if (g >= GCKPT_NGROUP) return GCKPT_XS_ERROR;
    H(be)->group[g] = comm;
    return GCKPT_XS_OK;
}

static gckpt_xstatus in_comm(gckpt_backend *be, gckpt_comm *c, gckpt_coll op, gckpt_redop red, gckpt_xt send,
                             gckpt_xt recv, int root);

/* "Device" memory is host memory: the communicator moves it as it is. */
static gckpt_xstatus h_collective(gckpt_backend *be, gckpt_coll op, gckpt_redop red, gckpt_xt send, gckpt_xt recv, int root)
{
    return in_comm(be, H(be)->comm ? H(be)->comm : gckpt_comm_single(), op, red, send, recv, root);
}

static gckpt_xstatus h_collective_group(gckpt_backend *be, gckpt_coll_group g, gckpt_coll op, gckpt_redop red,
                                        gckpt_xt send, gckpt_xt recv)
{
    if (g == GCKPT_GROUP_WORLD) return h_collective(be, op, red, send, recv, 0);
    if (g >= GCKPT_NGROUP || !H(be)->group[g]) {
        gckpt_seterr(&be->err, "a collective in the %s group, which this rank has not joined",
                     g < GCKPT_NGROUP ? gckpt_coll_group_names[g] : "?");
        return GCKPT_XS_ERROR;
    }
    return in_comm(be, H(be)->group[g], op, red, send, recv, 0);
}

static gckpt_xstatus in_comm(gckpt_backend *be, gckpt_comm *c, gckpt_coll op, gckpt_redop red, gckpt_xt send,
                             gckpt_xt recv, int root)
{
    uint64_t count;
    if (!gckpt_coll_count(op, &send, &recv, c->world, &count, &be->err)) return GCKPT_XS_ERROR;
    if (!c->collective(c, op, red, send.p, recv.p, count, (gckpt_dtype)send.dt, root)) {
        gckpt_seterr(&be->err, "%s", c->err.msg);
        return GCKPT_XS_ERROR;
    }
    return GCKPT_XS_OK;
}

static void h_destroy(gckpt_backend *be) { free(be); }

gckpt_backend *gckpt_host_backend_new(uint64_t memory_limit)
{
    host_be *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->limit = memory_limit;
    gckpt_backend *be = &h->be;
    be->name = "host";
    be->alloc = h_alloc;
    be->release = h_release;
    be->copy = h_copy;
    be->upload = h_updown;
    be->download = h_updown;
    be->init = h_init;
    be->source = h_source;
    be->forward = h_forward;
    be->backward = h_backward;
    be->dequant = h_dequant;
    be->add = h_add;
    be->set_scalar = h_set_scalar;
    be->optim = h_optim;
    be->checksum = h_checksum;
    be->record = h_record;
    be->read_records = h_read_records;
    be->memstat = h_memstat;
    be->reset_peaks = h_reset_peaks;
    be->timer_start = h_timer_start;
    be->timer_stop = h_timer_stop;
    be->sync = h_sync;
    be->set_workspace = h_set_workspace;
    be->describe = h_describe;
    be->attach = h_attach;
    be->collective = h_collective;
    be->attach_group = h_attach_group;
    be->collective_group = h_collective_group;
    host_tp_ops(be);
    host_cp_ops(be);
    be->destroy = h_destroy;
    return be;
}
