/* Several ranks: what every parallel mode shares (gckpt/core/parallel.h has the rules, FINDINGS
 * R-DIST-* the measurements) and the table that picks a mode's hooks. Every rank runs the
 * schedule of its own micro-steps; the rank's persistent state is allocated row by row from
 * the core's parameter-state rows (gckpt_rank_rows), each mode taking its views; a sharded gradient's
 * checksum is every rank's pieces added up. The modes: DDP in interp_ddp.c, ZeRO-1 (and
 * ZeRO-2's flat groups) in interp_zero1.c, ZeRO-2 in interp_zero2.c, ZeRO-3 in
 * interp_zero3.c, FSDP2 in interp_fsdp.c. DDP's step counters, ZeRO's scalars and the model's
 * buffers are rows allocated as their bytes (nothing reads them here). */
#include "interp_parallel.h"

#include <stdlib.h>

#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/util/test_hooks.h"

bool exec_parallel_check(const gckpt_setting *s, const gckpt_exec_opts *o, gckpt_err *err)
{
    int world = o && o->world > 1 ? o->world : 1, rank = o ? o->rank : 0;
    if (!exec_par_ops_of(&s->layout)) {
        gckpt_seterr(err, "parallel mode %u is not one gckpt-run knows", s->layout.mode);
        return false;
    }
    if (rank < 0 || rank >= world) {
        gckpt_seterr(err, "rank %d of %d ranks", rank, world);
        return false;
    }
    if (s->layout.tp > 1 && gckpt_layout_multi(&s->layout)) { /* TP x FSDP: one rank per rank of the mesh */
        if (!gckpt_layout_check(s, err)) return false;
        uint32_t want = s->layout.tp * gckpt_layout_world(&s->layout);
        if ((uint32_t)world == want) return true;
        gckpt_seterr(err, "tensor parallelism (tp %u) x %s planned for %u ranks, run on %d", s->layout.tp,
                     gckpt_parallel_names[s->layout.mode], want, world);
        return false;
    }
    if (s->layout.tp > 1) { /* TP alone: one rank per TP rank (interp_tp.c) */
        if ((uint32_t)world == s->layout.tp) return true;
        gckpt_seterr(err, "tensor parallelism planned for %u ranks, run on %d", s->layout.tp, world);
        return false;
    }
    if (!gckpt_layout_multi(&s->layout)) {
        if (world == 1) return true;
        gckpt_seterr(err, "a one-GPU setting run on %d ranks", world);
        return false;
    }
    const char *mode = gckpt_parallel_names[s->layout.mode];
    /* every mode executes what the core plans per rank (a hand-written plan may hold more) */
    if (!gckpt_layout_check(s, err)) return false;
    if ((uint32_t)world != gckpt_layout_world(&s->layout)) {
        gckpt_seterr(err, "parallel mode %s planned for %u ranks, run on %d", mode, gckpt_layout_world(&s->layout), world);
        return false;
    }
    return true;
}

const exec_par_ops *exec_par_ops_of(const gckpt_layout *l)
{
    static const exec_par_ops single = {0}; /* one GPU: no hook */
    static const exec_par_ops *const modes[GCKPT_NPAR] = {
        [GCKPT_PAR_NONE] = &single,          [GCKPT_PAR_DDP] = &exec_ddp_ops,     [GCKPT_PAR_FSDP] = &exec_fsdp_ops,
        [GCKPT_PAR_ZERO1] = &exec_zero1_ops, [GCKPT_PAR_ZERO2] = &exec_zero2_ops, [GCKPT_PAR_ZERO3] = &exec_zero3_ops,
#ifdef GCKPT_TOY
        [GCKPT_PAR_TOY] = &exec_toy_ops,
#endif
    };
    if (l->cp > 1) return l->mode == GCKPT_PAR_FSDP ? &exec_cp_fsdp_ops : NULL; /* CP: FSDP2 over dp_shard x cp */
    if (l->tp > 1) /* TP alone; TP x FSDP (gckpt_tp_hsdp_layout) */
        return l->mode == GCKPT_PAR_NONE ? &exec_tp_ops : l->mode == GCKPT_PAR_FSDP ? &exec_tp_fsdp_ops : NULL;
    return l->mode < GCKPT_NPAR ? modes[l->mode] : NULL;
}

/* Instance `copy` of row k: its buffer, and its bytes in *each. */
static void *row_instance(const gckpt_exec *x, int k, uint64_t copy, uint64_t *each)
{
    const gckpt_state_row *r = &x->rows->st.row[k];
    uint64_t one = r->count ? r->bytes / r->count : 0;
    if (each) *each = one;
    return x->rows->buf[k] && copy < r->count ? (char *)x->rows->buf[k] + copy * one : NULL;
}

void *exec_row(const gckpt_exec *x, gckpt_row_kind kind, int param, int group, int nth, uint64_t copy, uint64_t *bytes)
{
    if (bytes) *bytes = 0;
    for (int k = 0; x->rows && k < x->rows->st.n; k++) {
        const gckpt_state_row *r = &x->rows->st.row[k];
        if (r->kind == kind && r->param == param && r->group == group && nth-- == 0) return row_instance(x, k, copy, bytes);
    }
    return NULL;
}

/* A parameter entry's unsharded weight and state rows: its instances' buffers. */
static gckpt_xstatus bind_replicas(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_params *ps = &x->ctx.params;
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        int i = (int)(p->spec - ps->p), nstate = 0;
        uint64_t copy = p->layer < 0 ? 0 : (uint64_t)p->layer, each;
        for (int k = 0; k < x->rows->st.n; k++) {
            const gckpt_state_row *r = &x->rows->st.row[k];
            if (r->param != i || r->sharding != GCKPT_SHARD_NONE || !x->rows->buf[k]) continue;
            if (r->kind == GCKPT_ROW_STATES && nstate >= p->spec->nstates)
                return exec_fail(err, "setup: %s has more state rows than its %d states", p->spec->name, p->spec->nstates);
            /* a quantized weight's statistics piece: its own allocation, as bitsandbytes makes it */
            const gckpt_quant_piece *qs = r->qstat ? &p->spec->quant.layout.stat[r->qstat - 1] : NULL;
            const gckpt_buffer *want = r->kind == GCKPT_ROW_WEIGHTS ? &p->spec->weight
                                    : r->kind == GCKPT_ROW_STATES ? &p->spec->state[nstate] : NULL;
            if (!want) continue;
            uint64_t bytes = qs ? gckpt_round_up(qs->bytes, x->dev.alloc_round_bytes) : want->bytes;
            void *b = row_instance(x, k, copy, &each);
            if (!b || each != bytes)
                return exec_fail(err, "setup: the %s row of %s (layer %d) holds %llu bytes, its buffer takes %llu",
                                 r->what, p->spec->name, p->layer, (unsigned long long)each,
                                 (unsigned long long)bytes);
            if (qs) {
                p->q.layout = &p->spec->quant.layout;
                p->q.stat[r->qstat - 1] = b;
            } else if (r->kind == GCKPT_ROW_WEIGHTS)
                p->w = b;
            else
                p->st[nstate++] = b;
            p->flat = true;
        }
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus exec_rank_buffers(gckpt_exec *x, gckpt_err *err)
{
    if (!x->rows && !(x->rows = calloc(1, sizeof *x->rows))) return exec_fail(err, "out of memory");
    gckpt_rank_state *st = &x->rows->st;
    gckpt_rank_rows(&x->ctx.params, &x->m, &x->set, exec_dp_rank(x), x->dev.alloc_round_bytes, st);
    uint64_t sum = 0;
    for (int k = 0; k < st->n; k++) {
        x->rows->buf[k] = NULL;
        if (!gckpt_row_held(&st->row[k]) || !st->row[k].bytes) continue;
        gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, st->row[k].bytes, &x->rows->buf[k]);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "allocating the rank's parameter state", err);
        sum += st->row[k].bytes;
    }
    /* DDP's find_unused_parameters maps are counted apart (they follow every_n) */
    const gckpt_ctx *c = &x->ctx;
    uint64_t planned = c->weights + c->quant_weights + c->quant_stats + c->opt_states + c->parallel +
                       (x->set.every_n ? 0 : c->par.ddp_used_map);
    if (sum != planned)
        return exec_fail(err, "setup: rank %d's %s rows take %llu bytes, the schedule counts %llu", x->o.rank,
                         gckpt_parallel_names[x->set.layout.mode], (unsigned long long)sum,
                         (unsigned long long)planned);
    return bind_replicas(x, err);
}

/* The held rows made within the step. */
static bool step_row(const gckpt_state_row *r) { return r->kind >= GCKPT_NROW_KEPT && gckpt_row_held(r); }

void exec_step_rows_release(gckpt_exec *x, uint64_t *bytes)
{
    *bytes = 0;
    for (int k = 0; x->rows && k < x->rows->st.n; k++) {
        if (!step_row(&x->rows->st.row[k]) || !x->rows->buf[k]) continue;
        x->be->release(x->be, GCKPT_MEM_DEVICE, x->rows->buf[k], x->rows->st.row[k].bytes);
        x->rows->buf[k] = NULL;
        *bytes += x->rows->st.row[k].bytes;
    }
}

gckpt_xstatus exec_step_rows_take(gckpt_exec *x, uint64_t *bytes, gckpt_err *err)
{
    *bytes = 0;
    for (int k = 0; x->rows && k < x->rows->st.n; k++) {
        const gckpt_state_row *r = &x->rows->st.row[k];
        if (!step_row(r) || !r->bytes) continue;
        if (x->rows->buf[k]) return exec_fail(err, "the rank's %s exists already", r->what);
        gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, r->bytes, &x->rows->buf[k]);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, r->what, err);
        *bytes += r->bytes;
    }
    return GCKPT_XS_OK;
}

void exec_parallel_release(gckpt_exec *x)
{
    if (x->mode && x->mode->release) x->mode->release(x);
    for (int k = 0; x->rows && k < x->rows->st.n; k++)
        if (x->rows->buf[k]) x->be->release(x->be, GCKPT_MEM_DEVICE, x->rows->buf[k], x->rows->st.row[k].bytes);
    free(x->rows);
    x->rows = NULL;
}

gckpt_xstatus exec_piece_hash(gckpt_exec *x, const param_t *p, gckpt_xt src, uint64_t lo, uint64_t *h, double *ss,
                              gckpt_err *err)
{
    uint64_t n = src.n;
    unsigned sz = gckpt_dtype_size((gckpt_dtype)src.dt);
    void *raw = malloc(sz * (n ? n : 1));
    if (!raw) return exec_fail(err, "out of memory");
    gckpt_xstatus rc = x->be->download(x->be, raw, src.p, n * sz);
    gckpt_xt v = {raw, n, src.dt, 0};
    uint64_t salt = gckpt_key((uint64_t)p->tensor, (uint64_t)(p->layer + 1), 0x9ad, 0); /* as interp.c's checksum */
    /* hashed in the dtype of the parameter's .grad, as one process's checksum hashes it (FSDP2
     * under amp-bf16: the fp32 sharded gradient is the bf16 reduce-scatter's output cast up, so
     * the bf16 bits lose nothing) */
    gckpt_dtype dt = (gckpt_dtype)p->spec->grad.dtype;
    float *dump = gckpt_hook_grad_piece && rc == GCKPT_XS_OK ? malloc(sizeof *dump * (n ? n : 1)) : NULL;
    for (uint64_t i = 0; dump && i < n; i++) dump[i] = ld(&v, i);
    if (dump) gckpt_hook_grad_piece(p->tensor, p->layer, lo, dump, n); /* tests only (test_hooks.h) */
    free(dump);
    for (uint64_t i = 0; i < n && rc == GCKPT_XS_OK; i++) {
        uint64_t bits = 0; /* its low bytes, as the host backend's checksum reads a buffer */
        float f = ld(&v, i);
        st(&(gckpt_xt){&bits, 1, (uint8_t)dt, 0}, 0, f);
        *h += gckpt_hash_term(salt, bits, lo + i);
        *ss += (double)f * f;
    }
    free(raw);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "checksum", err);
}

gckpt_xstatus exec_ranks_hash(gckpt_exec *x, uint64_t *h, double *ss, gckpt_err *err)
{
    gckpt_comm *c = x->o.comm;
    struct {
        uint64_t h;
        double ss;
    } mine = {*h, *ss}, *all = calloc((size_t)x->o.world, sizeof *all);
    if (!all) return exec_fail(err, "out of memory");
    gckpt_comm_label(c, "the gradient checksum's sums");
    if (!c || !c->collective(c, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, &mine, all, sizeof mine, GCKPT_DT_U8, 0)) {
        free(all);
        return exec_fail(err, "checksum: gathering the ranks' sums: %s", c ? c->err.msg : "no communicator");
    }
    *h = 0;
    *ss = 0;
    for (int r = 0; r < x->o.world; r++) { /* in rank order */
        *h += all[r].h;
        *ss += all[r].ss;
    }
    free(all);
    return GCKPT_XS_OK;
}

uint32_t exec_dp_rank(const gckpt_exec *x)
{
    return x->set.layout.tp > 1 ? x->set.layout.rank : (uint32_t)x->o.rank; /* gckpt_exec_new sets it */
}

uint32_t exec_shard_rank(const gckpt_exec *x) { return gckpt_layout_shard_rank(&x->set.layout, exec_dp_rank(x)); }

gckpt_xstatus exec_shard_init(gckpt_exec *x, const param_t *p, void *dst, gckpt_init how, float scale, uint64_t key,
                              gckpt_err *err)
{
    uint64_t part = p->spec->shard.part, local = gckpt_shard_local(p->spec, exec_shard_rank(x));
    uint64_t lo = (uint64_t)exec_shard_rank(x) * part;
    float *v = malloc(sizeof *v * (part ? part : 1));
    if (!v) return exec_fail(err, "out of memory");
    for (uint64_t i = 0; i < part; i++) /* the values one process's init gives these elements */
        v[i] = i >= local ? 0.0f : how == GCKPT_INIT_CONST ? scale : gckpt_rng_uniform(key, exec_tp_index(x, p, lo + i), scale);
    gckpt_xstatus rc = x->be->upload(x->be, dst, v, part * 4);
    free(v);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "initialising a shard", err);
}
