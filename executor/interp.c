/* The interpreter: performs a schedule's segments on a backend. Memory events become
 * backend allocations keyed by instance id; compute events become the primitive's forward
 * or backward with operands resolved from the bindings (parameters by (layer, tensor),
 * saved tensors from the latest forward or recompute of the op in that layer); offload
 * copies go through one pinned host buffer per layer; the optimizer updates every
 * parameter and zero_grad releases every .grad. Persistent state is what the parameter
 * state table says. The events themselves: interp_events.c. */
#include "interp.h"

#include "gckpt/core/families.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/prim.h"
#include "gckpt/core/tp.h"
#include "gckpt/util/test_hooks.h"
#include "gckpt/executor/exec_quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gckpt_xstatus exec_fail(gckpt_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return GCKPT_XS_ERROR;
}

gckpt_xstatus exec_be_fail(gckpt_exec *x, gckpt_xstatus rc, const char *ctx, gckpt_err *err)
{
    gckpt_seterr(err, "%s: %s", ctx, x->be->err.msg);
    return rc;
}

/* "event 123 (BWD of self_attn.q_proj, layer 2)" */
void exec_where(const gckpt_exec *x, const gckpt_seg *seg, size_t i, char *buf, size_t n)
{
    const gckpt_event *e = &x->sched.ev[i];
    const char *what = "";
    if (e->op >= 0 && e->op < x->r->nop) what = x->r->op[e->op].name;
    else if (e->tensor >= 0 && e->tensor < x->r->nt) what = x->r->t[e->tensor].name;
    char place[48];
    gckpt_seg_name(seg, place, sizeof place);
    snprintf(buf, n, "event %zu (%s%s%s, %s)", i, e->kind < GCKPT_NEVENT ? gckpt_event_names[e->kind] : "?",
             *what ? " of " : "", what, place);
}

/* A stop request (a signal handler's flag): checked between events and between the
 * persistent allocations only, so every event ran completely or not at all and the
 * instance table says exactly what is allocated (gckpt_exec_release_all frees it). */
static bool stop_requested(const gckpt_exec *x) { return x->o.stop && *x->o.stop; }

static gckpt_xstatus interrupted(gckpt_exec *x, const gckpt_seg *seg, size_t i, gckpt_err *err)
{
    char at[160];
    if (seg) {
        exec_where(x, seg, i, at, sizeof at);
        gckpt_seterr(err, "interrupted before %s", at);
    } else {
        gckpt_seterr(err, "interrupted while setting up the weights and optimizer states");
    }
    return GCKPT_XS_INTERRUPTED;
}

/* ---- parameters and instances ------------------------------------------------------------ */

param_t *exec_param(gckpt_exec *x, int tensor, int layer)
{
    if (tensor < 0 || tensor >= x->r->nt || x->pidx[tensor] < 0) return NULL;
    const gckpt_tensor *t = &x->r->t[tensor];
    if (gckpt_sec_is_block(t->section)) { /* typed parameter groups: the layer's copy */
        if (layer < 0 || (uint64_t)layer >= x->m.layers || x->lpsec[layer] != t->section) return NULL;
        if ((uint64_t)layer >= x->live_layers) /* a forward-only layer's */
            return x->fwd_index[tensor] < 0 ? NULL
                                            : &x->params[x->fwd_base + (size_t)((uint64_t)layer - x->live_layers) *
                                                                           (size_t)x->nfwd + (size_t)x->fwd_index[tensor]];
        return &x->params[x->pidx[tensor] + (int)x->lcopy[layer]];
    }
    return &x->params[x->pidx[tensor]];
}

gckpt_xt exec_param_view(const param_t *p)
{
    /* the buffer's elements: a quantized weight's packed / int8 storage */
    return (gckpt_xt){p->w, p->spec->weight.numel, p->spec->weight.dtype, p->spec->cols, p->spec->rows};
}

gckpt_xt exec_state_view(const param_t *p, int k)
{
    const gckpt_buffer *b = &p->spec->state[k];
    return (gckpt_xt){p->st[k], b->numel, b->dtype, 0};
}

gckpt_xt exec_inst_view(const gckpt_exec *x, uint32_t id)
{
    const inst_t *in = &x->inst[id];
    return (gckpt_xt){in->live ? in->p : NULL, in->n, in->dt, 0};
}

bool exec_live(const gckpt_exec *x, uint32_t id) { return id != GCKPT_NOINST && id < x->ninst && x->inst[id].live; }

void exec_inst_release(gckpt_exec *x, uint32_t id)
{
    inst_t *in = &x->inst[id];
    x->be->release(x->be, GCKPT_MEM_DEVICE, in->p, in->bytes);
    in->live = false;
    in->p = NULL;
}

/* ---- construction ------------------------------------------------------------------------- */

/* How a parameter is initialised (its role in the recipe): norm weights 1 (Gemma's (1 + w)
 * norms 0, as GemmaRMSNorm's torch.zeros: a scale of 1 either way), biases 0 (or uniform:
 * opts.bias_std, *val its bound), the rest uniform. */
static gckpt_init init_of(const gckpt_exec *x, int t, float *val)
{
    switch (x->r->t[t].role) {
    case GCKPT_ROLE_NORM_WEIGHT: *val = x->m.rms == GCKPT_RMS_GEMMA ? 0.0f : 1.0f; return GCKPT_INIT_CONST;
    case GCKPT_ROLE_BIAS:
        *val = (float)(x->o.bias_std * sqrt(3.0));
        return x->o.bias_std > 0 ? GCKPT_INIT_UNIFORM : GCKPT_INIT_CONST;
    default: *val = 0; return GCKPT_INIT_UNIFORM;
    }
}

static bool check_recipe(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_recipe *r = x->r;
    for (int i = 0; i < r->nop; i++) {
        const gckpt_op *op = &r->op[i];
        const gckpt_prim_info *info = gckpt_prim_of(op->prim);
        bool source = info && info->nin_max == 0; /* a source makes data: no inputs */
        if (op->nin == 0) {
            if (!source || op->source > GCKPT_SRC_PIXELS) {
                gckpt_seterr(err, "recipe op %s: an op without inputs that is not a known source", op->name);
                return false;
            }
        } else if (source) {
            gckpt_seterr(err, "recipe op %s: has inputs but no primitive", op->name);
            return false;
        }
        if (!info || op->nin < info->nin_min || op->nin > info->nin_max || (op->out[1] >= 0 && info->nout < 2)) {
            gckpt_seterr(err, "recipe op %s: primitive %s does not take %d inputs and %d outputs", op->name,
                         gckpt_prim_name(op->prim), op->nin, op->out[1] >= 0 ? 2 : 1);
            return false;
        }
        if (info->even_width && (op->width == 0 || op->width % 2)) {
            gckpt_seterr(err, "recipe op %s: rotary head width %llu must be even", op->name, (unsigned long long)op->width);
            return false;
        }
        /* host_attn.c takes q/k heads of qk_dim and v heads of v_dim; cuda_attn.cu one width */
        if (op->qk_dim != op->v_dim && x->be && !strcmp(x->be->name, "cuda")) {
            gckpt_seterr(err, "recipe op %s: q/k heads of width %u and v heads of width %u are not executed by the "
                         "cuda backend", op->name,
                         op->qk_dim, op->v_dim);
            return false;
        }
        if (op->bidirectional && x->be && !strcmp(x->be->name, "cuda")) { /* a ViT's attention */
            gckpt_seterr(err, "recipe op %s: a bidirectional SDPA is not executed by the cuda backend (unverified)",
                         op->name);
            return false;
        }
        if (info->needs_width && op->width == 0) {
            gckpt_seterr(err, "recipe op %s: group width is 0", op->name);
            return false;
        }
    }
    return true;
}

/* Which parts of a step an event kind may appear in. */
static bool kind_fits(uint8_t kind, uint8_t part)
{
    switch (kind) {
    case GCKPT_EV_OPT_TEMP_ALLOC: case GCKPT_EV_OPT_STEP: case GCKPT_EV_OPT_TEMP_FREE: case GCKPT_EV_ZERO_GRAD:
        return part == GCKPT_PART_OPTIMIZER;
    case GCKPT_EV_HOST_ALLOC: case GCKPT_EV_HOST_FREE: case GCKPT_EV_D2H: case GCKPT_EV_H2D:
        return part == GCKPT_PART_LAYER;
    case GCKPT_EV_FWD: case GCKPT_EV_RECOMPUTE: case GCKPT_EV_BWD:
        return part == GCKPT_PART_EMBEDDING || part == GCKPT_PART_LAYER || part == GCKPT_PART_HEAD;
    case GCKPT_EV_COLLECTIVE: return true; /* the optimizer's: DDP's and ZeRO-1's reduction */
    default: return kind < GCKPT_NEVENT && part != GCKPT_PART_OPTIMIZER;
    }
}

/* A segment's events checked for what the interpreter relies on; *maxid raised past every
 * instance they allocate. */
static bool check_segment(gckpt_exec *x, size_t si, uint32_t *maxid, gckpt_err *err)
{
    const gckpt_schedule *sc = &x->sched;
    const gckpt_sched_seg *g = &sc->seg[si];
    if (!exec_owns(x, si)) return true; /* the other side's of a VLM step */
    if (g->seg.part == GCKPT_PART_LAYER && (g->seg.layer < 0 || (uint64_t)g->seg.layer >= x->m.layers)) {
        gckpt_seterr(err, "schedule segment %zu: layer %d out of range", si, g->seg.layer);
        return false;
    }
    for (size_t i = g->begin; i < g->end; i++) {
        const gckpt_event *e = &sc->ev[i];
        if (!kind_fits(e->kind, g->seg.part)) {
            gckpt_seterr(err, "schedule event %zu: kind %u in a segment of part %u", i, e->kind, g->seg.part);
            return false;
        }
        if ((e->kind == GCKPT_EV_ALLOC || e->kind == GCKPT_EV_ALLOC_SCRATCH) && e->inst != GCKPT_NOINST &&
            e->inst + 1 > *maxid)
            *maxid = e->inst + 1;
        bool compute = e->kind == GCKPT_EV_FWD || e->kind == GCKPT_EV_RECOMPUTE || e->kind == GCKPT_EV_BWD;
        if (compute && (e->op < 0 || e->op >= x->r->nop)) {
            gckpt_seterr(err, "schedule event %zu: op %d out of range", i, e->op);
            return false;
        }
    }
    return true;
}

/* The schedule's parts: its micro-steps (a new one wherever the segments' micro-step or sync
 * changes: gckpt_micro_runs made them), each with the repeat count its segments carry, then the
 * optimizer; the first micro-step once, the repeats summing to grad_accum (the walk's step is
 * the one executed); every event checked; the instance table sized. */
static bool check_schedule(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_schedule *sc = &x->sched;
    size_t si = 0;
    uint32_t maxid = 0;
    uint64_t micro_steps = 0;
    x->nmicro = 0;
    while (si < sc->nseg && sc->seg[si].seg.micro != GCKPT_MICRO_NONE) {
        const gckpt_seg *first = &sc->seg[si].seg;
        bool expect_first = x->nmicro == 0;
        if (x->nmicro == GCKPT_MAX_MICRO_RUNS || (first->micro == GCKPT_MICRO_FIRST) != expect_first) {
            gckpt_seterr(err, "schedule segment %zu: micro-step %u out of order", si, first->micro);
            return false;
        }
        exec_part *p = &x->micro[x->nmicro++];
        p->begin = si;
        p->repeat = sc->seg[si].repeat;
        for (; si < sc->nseg && sc->seg[si].seg.micro == first->micro && sc->seg[si].seg.sync == first->sync; si++) {
            if (sc->seg[si].repeat != p->repeat) {
                gckpt_seterr(err, "schedule segment %zu: runs %llu times, its micro-step's first segment %llu", si,
                             (unsigned long long)sc->seg[si].repeat, (unsigned long long)p->repeat);
                return false;
            }
            if (!check_segment(x, si, &maxid, err)) return false;
        }
        p->end = si;
        if (p->repeat < 1 || (expect_first && p->repeat != 1)) {
            gckpt_seterr(err, "schedule segment %zu: a micro-step run %llu times", p->begin,
                         (unsigned long long)p->repeat);
            return false;
        }
        micro_steps += p->repeat;
    }
    x->opt.begin = si;
    x->opt.repeat = 1;
    for (; si < sc->nseg && sc->seg[si].seg.micro == GCKPT_MICRO_NONE; si++)
        if (!check_segment(x, si, &maxid, err)) return false;
    x->opt.end = si;
    if (si != sc->nseg) {
        gckpt_seterr(err, "schedule segment %zu: micro-step %u out of order", si, sc->seg[si].seg.micro);
        return false;
    }
    if (!x->nmicro || x->opt.end == x->opt.begin) {
        gckpt_seterr(err, "schedule: no first micro-step or no optimizer step");
        return false;
    }
    if (micro_steps != x->set.grad_accum) {
        gckpt_seterr(err, "schedule: its micro-steps run %llu times but grad_accum is %llu",
                     (unsigned long long)micro_steps, (unsigned long long)x->set.grad_accum);
        return false;
    }
    x->ninst = maxid;
    x->inst = calloc(maxid ? maxid : 1, sizeof *x->inst);
    return x->inst != NULL || (gckpt_seterr(err, "out of memory for %u instances", maxid), false);
}

/* The families whose primitives have kernels on both backends: issue 13's OLMo 2 (q/k norms
 * over the whole projection, post-norms), Granite (multipliers, its attention scale),
 * Gemma 1 ((1 + w) norms, the embedding normalizer, GELU-tanh), Gemma 2 (soft-capping,
 * sandwich norms, query_pre_attn_scalar; eager), Gemma 3 (per-head q/k norms, a rotary
 * pair per layer type: the schedule names the one each layer reads), Phi-3 and GPT-NeoX (their fused
 * projections' blocks, per head interleaved for GPT-NeoX, and partial rotary's heads read
 * as strided views: strided_view). The
 * mixture-of-experts families (mixtral, qwen3_moe, olmoe: router, grouped_mm experts, the
 * load-balancing loss; the experts' gate and up halves read as strided views) run, and
 * gpt_oss (sinks, the half-split rotary: gradients passed through as strided views of a
 * wider one, interp_events.c pass_grad). */
static bool family_executed(const gckpt_model *m)
{
    const gckpt_family_info *fi = gckpt_family_of(m->family);
    return fi && (fi->host || fi->cuda);
}

/* The family table's word for this backend (NULL: the executor's own checks, no backend). */
static bool backend_executes(const gckpt_backend *be, const gckpt_model *m, gckpt_err *err)
{
    const gckpt_family_info *fi = gckpt_family_of(m->family);
    if (!be || (strcmp(be->name, "cuda") ? fi->host : fi->cuda)) return true;
    gckpt_seterr(err, "model_type \"%s\" is planned but not executed by the %s backend yet", m->model_type, be->name);
    return false;
}

bool gckpt_exec_model_ok(const gckpt_model *m, gckpt_err *err)
{
    if (m->rope_other[0]) { /* the tables' values: default, llama3 and YaRN only (kernel_math.h) */
        gckpt_seterr(err, "rope_parameters.rope_type \"%s\" is planned but not executed (gckpt-run computes default, "
                          "llama3 and yarn (gpt_oss) rotary tables)", m->rope_other);
        return false;
    }
    if (m->pad && (m->pad_id < 0 || (uint64_t)m->pad_id >= m->vocab)) { /* nn.Embedding asserts */
        gckpt_seterr(err, "pad_token_id = %lld is outside the vocabulary (%llu tokens): transformers cannot build this "
                          "model's embedding (padding_idx)", (long long)m->pad_id, (unsigned long long)m->vocab);
        return false;
    }
    if (!family_executed(m)) {
        char types[256];
        gckpt_model_types_list(true, ", ", " and ", types, sizeof types);
        gckpt_seterr(err, "model_type \"%s\" is planned but not executed yet (gckpt-run runs %s)", m->model_type, types);
        return false;
    }
    /* sliding windows run: the masks' sources and the SDPA kernels apply the window
     * (op_window), and a model whose layers are of two block types runs each layer's block
     * section as the schedule (the simulator's) places it (recipe.h GCKPT_SEC_BLOCK_MORE) */
    return true;
}

static bool setting_ok(const gckpt_model *m, const gckpt_setting *s, gckpt_err *err)
{
    if (!gckpt_exec_model_ok(m, err) || !gckpt_peft_model_ok(m, &s->peft, err)) return false;
    if (s->offload && !s->every_n) {
        gckpt_seterr(err, "offload needs gradient checkpointing (every_n_layers > 0)");
        return false;
    }
    if (s->every_n > m->layers) {
        gckpt_seterr(err, "every_n_layers %u exceeds the model's %llu layers", s->every_n, (unsigned long long)m->layers);
        return false;
    }
    if (s->micro_batch < 1 || s->seq < 1 || s->grad_accum < 1) {
        gckpt_seterr(err, "micro_batch, seq and grad_accum must be at least 1");
        return false;
    }
    if (m->learned_positions && s->seq > m->positions) {
        gckpt_seterr(err, "seq %llu exceeds the model's %llu positions", (unsigned long long)s->seq,
                     (unsigned long long)m->positions);
        return false;
    }
    return true;
}

/* One instance per parameter tensor and layer, as the parameter state table says. */
static bool param_instances(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_params *ps = &x->ctx.params;
    size_t np = 0;
    for (int t = 0; t < x->r->nt; t++) {
        const gckpt_param *spec = gckpt_params_of(ps, t);
        x->pidx[t] = spec ? (int)np : -1;
        np += spec ? spec->copies : 0;
    }
    /* the forward-only layers' weights: one instance per block parameter tensor and layer */
    x->fwd_index = malloc(sizeof *x->fwd_index * (size_t)(x->r->nt ? x->r->nt : 1));
    if (!x->fwd_index) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    x->nfwd = 0;
    for (int t = 0; t < x->r->nt; t++)
        x->fwd_index[t] = gckpt_params_of(ps, t) && gckpt_sec_is_block(x->r->t[t].section) ? x->nfwd++ : -1;
    x->fwd_base = np;
    np += (size_t)(x->m.layers - x->live_layers) * (size_t)x->nfwd;
    x->params = calloc(np ? np : 1, sizeof *x->params);
    if (!x->params) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    x->nparams = np;
    for (uint64_t l = x->live_layers; l < x->m.layers; l++)
        for (int t = 0; t < x->r->nt; t++) {
            if (x->fwd_index[t] < 0) continue;
            param_t *p = &x->params[x->fwd_base + (size_t)(l - x->live_layers) * (size_t)x->nfwd + (size_t)x->fwd_index[t]];
            p->spec = gckpt_params_of(ps, t);
            p->tensor = t;
            p->layer = (int)l;
            p->grad = GCKPT_NOINST;
            p->fwd_only = true;
        }
    /* each layer's parameter section and its copy of that section's tensors (one section
     * owns them all but where block types have parameters of their own: DeepSeek-V3's
     * dense layers) */
    uint64_t seen[GCKPT_NSEC] = {0};
    for (uint64_t l = 0; l < x->m.layers; l++) { /* (a forward-only layer's copy is unused) */
        int sec = x->r->sec_params[gckpt_layer_section(x->r, &x->m, x->set.attention, l)];
        x->lpsec[l] = (int8_t)sec;
        x->lcopy[l] = sec >= 0 ? (uint32_t)seen[sec]++ : 0;
    }
    for (int t = 0; t < x->r->nt; t++) {
        const gckpt_param *spec = gckpt_params_of(ps, t);
        for (uint64_t l = 0; spec && l < spec->copies; l++) {
            param_t *p = &x->params[x->pidx[t] + (int)l];
            p->spec = spec;
            p->tensor = t;
            p->layer = -1;
            p->grad = GCKPT_NOINST;
        }
        if (!spec || !gckpt_sec_is_block(x->r->t[t].section)) continue;
        for (uint64_t l = 0; l < x->live_layers; l++)
            if (x->lpsec[l] == x->r->t[t].section) {
                if (x->lcopy[l] >= spec->copies) {
                    gckpt_seterr(err, "recipe: %s has %llu copies, layer %llu needs more", x->r->t[t].name,
                                 (unsigned long long)spec->copies, (unsigned long long)l);
                    return false;
                }
                x->params[x->pidx[t] + (int)x->lcopy[l]].layer = (int)l;
            }
    }
    return true;
}

static bool exec_finish(gckpt_exec *x, gckpt_err *err);

gckpt_exec *gckpt_exec_new(gckpt_backend *be, const gckpt_model *m, const gckpt_device *d, const gckpt_setting *s,
                           const gckpt_exec_opts *o, gckpt_err *err)
{
    if (!setting_ok(m, s, err) || !backend_executes(be, m, err) || !exec_parallel_check(s, o, err)) return NULL;
    gckpt_exec *x = calloc(1, sizeof *x);
    if (!x) {
        gckpt_seterr(err, "out of memory");
        return NULL;
    }
    x->be = be;
    x->m = *m;
    x->dev = *d;
    x->set = *s;
    x->mode = exec_par_ops_of(&s->layout); /* exec_parallel_check: a mode of the table */
    if (o) x->o = *o;
    if (gckpt_layout_multi(&x->set.layout)) x->set.layout.rank = (uint32_t)x->o.rank; /* the context is this rank's */
    if (x->set.layout.tp > 1) { /* TP: this rank's local model and shards (gckpt/core/tp.h) */
        /* TP x FSDP: TP rank r % tp of data-parallel rank r / tp (gckpt_tp_hsdp_layout, R-TP-1) */
        x->set.layout.tp_rank = (uint32_t)x->o.rank % x->set.layout.tp;
        if (gckpt_layout_multi(&x->set.layout)) x->set.layout.rank = (uint32_t)x->o.rank / x->set.layout.tp;
        x->tp_full = *m;
        gckpt_tp_local_model(m, x->set.layout.tp, x->set.layout.tp_rank, &x->m);
    }
    if (x->o.lr <= 0) x->o.lr = 1e-4;
    if (x->o.init_std <= 0) x->o.init_std = 0.02;
    if (x->o.world < 1) x->o.world = 1;
    x->r = malloc(sizeof *x->r);
    if (!x->r) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    gckpt_exec_recipe(&x->m, s, x->r);
    x->live_layers = x->m.layers;
    if (!gckpt_ctx_init(&x->ctx, &x->m, &x->dev, x->r, &x->set, err) || (x->mode->prepare && !x->mode->prepare(x, err)))
        goto fail;
    if (!gckpt_schedule_build(&x->ctx, &x->sched)) {
        gckpt_seterr(err, "out of memory building the schedule");
        goto fail;
    }
    if (!exec_finish(x, err)) goto fail;
    return x;
fail:
    gckpt_exec_free(x);
    return NULL;
}

/* The instance ids of an event that are at or past base, less base (GCKPT_NOINST kept). */
static void renumber(gckpt_event *e, uint32_t base)
{
#define RN(v) ((v) = (v) != GCKPT_NOINST && (v) >= base ? (v) - base : (v))
    RN(e->inst);
    switch (e->kind) {
    case GCKPT_EV_FWD: case GCKPT_EV_RECOMPUTE:
        for (int k = 0; k < GCKPT_OP_MAX_IN; k++) RN(e->arg.fwd.in[k]);
        RN(e->arg.fwd.out[0]);
        RN(e->arg.fwd.out[1]);
        RN(e->arg.fwd.workspace);
        break;
    case GCKPT_EV_BWD:
        for (int k = 0; k < GCKPT_OP_MAX_IN; k++) RN(e->arg.bwd.grad_in[k]);
        RN(e->arg.bwd.grad_out);
        RN(e->arg.bwd.workspace);
        break;
    case GCKPT_EV_GRAD_SUM: case GCKPT_EV_GRAD_CAST: case GCKPT_EV_GRAD_ACCUMULATE:
        RN(e->arg.sum.dst);
        RN(e->arg.sum.a);
        RN(e->arg.sum.b);
        break;
    default: break;
    }
#undef RN
}

gckpt_exec *exec_new_part(gckpt_backend *be, const gckpt_model *m, const gckpt_model *live, const gckpt_device *d,
                          const gckpt_setting *s, const gckpt_exec_opts *o, const gckpt_recipe *r,
                          const gckpt_schedule *sched, const uint8_t *seg_kind, uint8_t own_mask, uint32_t id_base,
                          gckpt_err *err)
{
    gckpt_exec *x = calloc(1, sizeof *x);
    if (!x) {
        gckpt_seterr(err, "out of memory");
        return NULL;
    }
    x->be = be;
    x->m = *m;
    x->dev = *d;
    x->set = *s;
    x->mode = exec_par_ops_of(&s->layout);
    if (o) x->o = *o;
    if (x->o.lr <= 0) x->o.lr = 1e-4;
    if (x->o.init_std <= 0) x->o.init_std = 0.02;
    if (x->o.world < 1) x->o.world = 1;
    x->seg_kind = seg_kind;
    x->own_mask = own_mask;
    x->r = malloc(sizeof *x->r);
    x->sched.ev = malloc(sizeof *x->sched.ev * (sched->n ? sched->n : 1));
    x->sched.seg = malloc(sizeof *x->sched.seg * (sched->nseg ? sched->nseg : 1));
    if (!x->r || !x->sched.ev || !x->sched.seg) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    *x->r = *r;
    memcpy(x->sched.ev, sched->ev, sizeof *x->sched.ev * sched->n);
    memcpy(x->sched.seg, sched->seg, sizeof *x->sched.seg * sched->nseg);
    x->sched.n = x->sched.cap = sched->n;
    x->sched.nseg = x->sched.seg_cap = sched->nseg;
    for (size_t si = 0; id_base && si < sched->nseg; si++)
        if (exec_owns(x, si))
            for (size_t i = sched->seg[si].begin; i < sched->seg[si].end; i++) renumber(&x->sched.ev[i], id_base);
    x->ctx_model = live ? *live : *m;
    x->live_layers = x->ctx_model.layers;
    if (x->live_layers > x->m.layers) {
        gckpt_seterr(err, "a model part of %llu live layers of %llu", (unsigned long long)x->live_layers,
                     (unsigned long long)x->m.layers);
        goto fail;
    }
    if (!gckpt_ctx_init(&x->ctx, &x->ctx_model, &x->dev, x->r, &x->set, err) || !exec_finish(x, err)) goto fail;
    return x;
fail:
    gckpt_exec_free(x);
    return NULL;
}

/* The checks of the recipe and schedule, and the interpreter's tables. */
static bool exec_finish(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_model *m = &x->m;
    const gckpt_setting *s = &x->set;
    if (!check_recipe(x, err) || !check_schedule(x, err) || !exec_aux_prepare(x, err)) goto fail;
    /* the parallel modes address a layer's parameters by copy = layer (interp_ddp.c, zero*) */
    if (gckpt_recipe_typed_params(x->r) && gckpt_layout_multi(&x->set.layout)) {
        gckpt_seterr(err, "model_type \"%s\": layers with parameters of their own per block type (dense and MoE "
                          "layers) are executed on one GPU only", m->model_type);
        goto fail;
    }
    size_t L = (size_t)m->layers;
    x->nslot = (int)L + 2;
    x->bind = calloc((size_t)x->nslot * (size_t)x->r->nop, sizeof *x->bind);
    x->bind_gen = calloc((size_t)x->nslot * (size_t)x->r->nop, sizeof *x->bind_gen);
    x->gview = calloc((size_t)x->nslot * (size_t)x->r->nt, sizeof *x->gview);
    x->hb = calloc(L, sizeof *x->hb);
    x->lpsec = calloc(L ? L : 1, sizeof *x->lpsec);
    x->lcopy = calloc(L ? L : 1, sizeof *x->lcopy);
    uint64_t T = x->ctx.tokens;
    x->ids = malloc(sizeof *x->ids * T);
    x->labels = malloc(sizeof *x->labels * T);
    x->positions = malloc(sizeof *x->positions * s->seq);
    if (!x->bind || !x->bind_gen || !x->gview || !x->hb || !x->lpsec || !x->lcopy || !x->ids || !x->labels || !x->positions) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    return param_instances(x, err);
fail:
    return false;
}

void gckpt_exec_recipe(const gckpt_model *m, const gckpt_setting *s, gckpt_recipe *r)
{
    gckpt_setting_recipe(m, s, GCKPT_TARGET_CUDA, r); /* as the planner builds it */
}

const gckpt_ctx *gckpt_exec_ctx(const gckpt_exec *x) { return &x->ctx; }
const gckpt_schedule *gckpt_exec_schedule(const gckpt_exec *x) { return &x->sched; }

/* ---- persistent state -------------------------------------------------------------------- */

static gckpt_xstatus palloc(gckpt_exec *x, uint64_t bytes, void **out, gckpt_err *err)
{
    gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, bytes, out);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "allocating the persistent state", err);
    return GCKPT_XS_OK;
}

/* A quantized weight's statistics, each piece its own allocation as bitsandbytes makes
 * them (rounded to the device's granule: together the table's quant.stats.bytes). */
static gckpt_xstatus alloc_quant_stats(gckpt_exec *x, param_t *p, gckpt_err *err)
{
    const gckpt_quant_layout *l = &p->spec->quant.layout;
    p->q.layout = l;
    uint64_t sum = 0;
    for (int k = 0; k < GCKPT_NQS; k++) {
        if (!l->stat[k].numel) continue;
        uint64_t bytes = gckpt_round_up(l->stat[k].bytes, x->dev.alloc_round_bytes);
        gckpt_xstatus rc = palloc(x, bytes, &p->q.stat[k], err);
        if (rc != GCKPT_XS_OK) return rc;
        sum += bytes;
    }
    if (sum != p->spec->quant.stats.bytes)
        return exec_fail(err, "setup: %s's statistics take %llu bytes, the parameter table says %llu",
                         p->spec->name, (unsigned long long)sum, (unsigned long long)p->spec->quant.stats.bytes);
    return GCKPT_XS_OK;
}

/* The buffers of every parameter instance (parameter state table), and the offsets of
 * their slices of the optimizer's step temporary. */
static gckpt_xstatus alloc_params(gckpt_exec *x, gckpt_err *err)
{
    uint64_t temp_off = 0;
    gckpt_xstatus rc;
    for (size_t i = 0; i < x->nparams; i++) {
        if (stop_requested(x)) return interrupted(x, NULL, 0, err);
        param_t *p = &x->params[i];
        p->temp_off = temp_off;
        temp_off += p->spec->opt_temp.bytes;
        if (p->flat) continue; /* several ranks: views into the rank's rows or the mode's buffers */
        if ((rc = palloc(x, p->spec->weight.bytes, &p->w, err)) != GCKPT_XS_OK) return rc;
        if (p->spec->quant.scheme && (rc = alloc_quant_stats(x, p, err)) != GCKPT_XS_OK) return rc;
        for (int k = 0; k < p->spec->nstates && !p->fwd_only; k++)
            if ((rc = palloc(x, p->spec->state[k].bytes, &p->st[k], err)) != GCKPT_XS_OK) return rc;
    }
    return GCKPT_XS_OK;
}

/* Initial values: weights from the seed by their role, states zero. */
static gckpt_xstatus init_params(gckpt_exec *x, gckpt_err *err)
{
    float a = (float)(x->o.init_std * sqrt(3.0));
    for (size_t i = 0; i < x->nparams; i++) {
        if (stop_requested(x)) return interrupted(x, NULL, 0, err);
        param_t *p = &x->params[i];
        float val;
        gckpt_init how = init_of(x, p->tensor, &val);
        float bound = x->r->t[p->tensor].role == GCKPT_ROLE_BIAS ? val : a; /* a uniform's */
        uint64_t key = gckpt_key(x->o.seed, 0x5eedULL, (uint64_t)p->tensor, (uint64_t)(p->layer + 1));
        gckpt_xstatus rc;
        if (p->spec->quant.scheme) { /* loaded in the compute dtype, then quantized (exec_quant.h) */
            /* sharded by the mode (FSDP2's bf16 storage): the whole packed weight in a scratch
             * buffer (setup, before the peak is reset), the rank's piece taken from it */
            bool sharded = !p->w && x->mode->shard_packed;
            uint64_t wb = p->spec->weight.numel * gckpt_dtype_size((gckpt_dtype)p->spec->weight.dtype);
            void *tmp = NULL;
            if (sharded && (rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, wb > p->spec->weight.bytes ? wb : p->spec->weight.bytes, &tmp)) != GCKPT_XS_OK)
                return exec_be_fail(x, rc, "quantizing a sharded weight", err);
            gckpt_qbufs b = {sharded ? tmp : p->w, {0}};
            memcpy(b.stat, p->q.stat, sizeof b.stat);
            rc = gckpt_quant_fill(x->be, p->q.layout, p->spec->rows, p->spec->cols, key, a,
                                  (gckpt_dtype)x->set.peft.compute_dtype, &b, NULL, err);
            if (rc == GCKPT_XS_OK && sharded) rc = x->mode->shard_packed(x, i, tmp, err);
            if (sharded) x->be->release(x->be, GCKPT_MEM_DEVICE, tmp, wb > p->spec->weight.bytes ? wb : p->spec->weight.bytes);
            if (rc != GCKPT_XS_OK) return rc;
            continue; /* frozen: no states */
        }
        if (x->mode->init_param) { /* the parallel mode holds it: the rank's shard of what one process makes */
            rc = x->mode->init_param(x, i, how, how == GCKPT_INIT_CONST ? val : bound, key, err);
            if (rc != GCKPT_XS_OK) return rc;
            continue;
        }
        rc = x->be->init(x->be, exec_param_view(p), how, how == GCKPT_INIT_CONST ? val : bound, key);
        for (int k = 0; rc == GCKPT_XS_OK && k < p->spec->nstates && p->st[k]; k++)
            rc = x->be->init(x->be, exec_state_view(p, k), GCKPT_INIT_CONST, 0.0f, 0);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "initialising the weights", err);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_exec_setup(gckpt_exec *x, gckpt_err *err)
{
    if (x->setup_done) return exec_fail(err, "setup: already done");
    gckpt_xstatus rc = GCKPT_XS_OK;
    if (x->mode->setup) rc = x->mode->setup(x, err); /* first: the rank's rows hold the weights */
    if (rc != GCKPT_XS_OK || (rc = alloc_params(x, err)) != GCKPT_XS_OK) return rc;
    if (x->ctx.workspace) {
        if ((rc = palloc(x, x->ctx.workspace, &x->workspace, err)) != GCKPT_XS_OK) return rc;
        x->workspace_bytes = x->ctx.workspace;
        rc = x->be->set_workspace(x->be, x->workspace, x->workspace_bytes);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "setting the workspace", err);
    }
    x->setup_done = true;
    if ((rc = init_params(x, err)) != GCKPT_XS_OK) return rc;
    return x->mode->init ? x->mode->init(x, err) : GCKPT_XS_OK;
}

/* ---- steps -------------------------------------------------------------------------------- */

/* The micro-step's batch: random token ids, labels shifted by one as HF's loss does. */
void exec_make_data(gckpt_exec *x, uint64_t micro)
{
    uint64_t B = x->set.micro_batch, S = x->set.seq, V = x->m.vocab;
    uint64_t key = gckpt_key(x->o.seed, x->step, exec_global_micro(x, micro), 0xda7aULL);
    if (x->cp) { /* the rank's pieces of its CP group's batch */
        exec_cp_data(x, key);
        return;
    }
    for (uint64_t i = 0; i < B * S; i++) x->ids[i] = V ? (int64_t)(gckpt_rng(key, i) % V) : 0; /* (a tower: none) */
    for (uint64_t b = 0; b < B; b++)
        for (uint64_t i = 0; i < S; i++)
            x->labels[b * S + i] = i + 1 < S ? x->ids[b * S + i + 1] : -100; /* HF shift, ignore_index */
    for (uint64_t i = 0; i < S; i++) x->positions[i] = (int64_t)i;
}

/* After a micro-step only the parameters' .grad (and what the parallel mode holds: ZeRO-1's ipg
 * bucket) may be allocated. */
gckpt_xstatus exec_check_clean(gckpt_exec *x, bool grads_allowed, gckpt_err *err)
{
    for (uint32_t id = 0; id < x->ninst; id++)
        if (x->inst[id].live && !(grads_allowed && (x->inst[id].is_pgrad || (x->mode->holds && x->mode->holds(x, id))))) {
            int t = x->inst[id].tensor;
            return exec_fail(err, "schedule leak: instance %u (%s) is still allocated at the end of the %s", id,
                             t >= 0 ? x->r->t[t].name : "workspace", grads_allowed ? "micro-step" : "step");
        }
    for (uint64_t l = 0; l < x->m.layers; l++)
        if (x->hb[l].p)
            return exec_fail(err, "schedule leak: layer %llu's pinned host buffer is still allocated", (unsigned long long)l);
    return GCKPT_XS_OK;
}

/* One part of the step (a micro-step, micro-th of the step; or the optimizer): its
 * segments in order, each segment's events. */
/* Which events of a part run_part runs: all; the COLLECTIVE events that open it (the optimizer
 * part's: DDP's and ZeRO-1's reduction of the gradients, after which they are complete); the rest. */
enum { RUN_ALL, RUN_LEADING_COLLECTIVES, RUN_REST };

static gckpt_xstatus run_part(gckpt_exec *x, const exec_part *part, uint64_t micro, bool update, int which,
                              size_t *count, gckpt_err *err)
{
    bool in_micro = part != &x->opt;
    if (which != RUN_REST) {
        x->gen++;
        exec_aux_micro_begin(x);
        if (in_micro) exec_make_data(x, micro);
    }
    exec_site w = {.micro = micro, .update = update};
    bool leading = true;
    for (size_t si = part->begin; si < part->end; si++) {
        const gckpt_sched_seg *g = &x->sched.seg[si];
        w.seg = &g->seg;
        for (size_t i = g->begin; i < g->end; i++) {
            leading = leading && x->sched.ev[i].kind == GCKPT_EV_COLLECTIVE;
            if (which == RUN_LEADING_COLLECTIVES && !leading) return GCKPT_XS_OK;
            if (which == RUN_REST && leading) continue;
            if (stop_requested(x)) return interrupted(x, w.seg, i, err);
            w.index = i;
            gckpt_xstatus rc = exec_event(x, &x->sched.ev[i], &w, err);
            if (rc != GCKPT_XS_OK) return rc;
            (*count)++;
        }
    }
    return which == RUN_LEADING_COLLECTIVES ? GCKPT_XS_OK : exec_check_clean(x, in_micro, err);
}

/* A parameter's whole .grad as fp32 to the test hook. */
static gckpt_xstatus dump_grad(gckpt_exec *x, const param_t *p)
{
    gckpt_xt g = exec_inst_view(x, p->grad);
    unsigned sz = gckpt_dtype_size((gckpt_dtype)g.dt);
    void *raw = malloc(sz * (g.n ? g.n : 1));
    float *f = malloc(sizeof *f * (g.n ? g.n : 1));
    gckpt_xstatus rc = raw && f ? x->be->download(x->be, raw, g.p, g.n * sz) : GCKPT_XS_OOM;
    gckpt_xt v = {raw, g.n, g.dt, 0};
    for (uint64_t i = 0; rc == GCKPT_XS_OK && i < g.n; i++) f[i] = ld(&v, i);
    if (rc == GCKPT_XS_OK) gckpt_hook_grad_piece(p->tensor, p->layer, 0, f, g.n);
    free(raw);
    free(f);
    return rc;
}

static gckpt_xstatus checksum(gckpt_exec *x, gckpt_step_result *res, gckpt_err *err)
{
    double ss = 0;
    gckpt_xstatus rc = exec_checksum(x, &res->grad_hash, &ss, err);
    res->grad_norm = sqrt(ss);
    return rc;
}

gckpt_xstatus exec_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err)
{
    uint64_t h = 0;
    double ss = 0;
    if (x->mode->checksum) return x->mode->checksum(x, hash, sumsq, err); /* sharded: every rank's pieces */
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (!p->spec->trainable || p->fwd_only) continue; /* frozen (LoRA's base): no .grad */
        if (!exec_live(x, p->grad)) return exec_fail(err, "checksum: parameter %s has no gradient", x->r->t[p->tensor].name);
        uint64_t hh;
        double s;
        gckpt_xstatus rc = x->be->checksum(x->be, exec_inst_view(x, p->grad),
                                           gckpt_key((uint64_t)p->tensor, (uint64_t)(p->layer + 1), 0x9ad, 0), &hh, &s);
        if (rc == GCKPT_XS_OK && gckpt_hook_grad_piece) rc = dump_grad(x, p); /* tests only (test_hooks.h) */
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "checksum", err);
        h += hh;
        ss += s;
    }
    *hash = h;
    *sumsq = ss;
    return GCKPT_XS_OK;
}

/* With every gradient complete: the checksum and the caller's look at them, outside
 * the step's timing. */
static gckpt_xstatus at_grads(gckpt_exec *x, const gckpt_step_opts *o, gckpt_step_result *res, double *t1, gckpt_err *err)
{
    gckpt_backend *be = x->be;
    gckpt_xstatus rc;
    if ((rc = be->timer_stop(be, t1)) != GCKPT_XS_OK) return exec_be_fail(x, rc, "timer", err);
    if (o->checksum && (rc = checksum(x, res, err)) != GCKPT_XS_OK) return rc;
    if (o->on_grads) {
        x->in_grads = true;
        o->on_grads(x, o->user);
        x->in_grads = false;
    }
    if ((rc = be->timer_start(be)) != GCKPT_XS_OK) return exec_be_fail(x, rc, "timer", err);
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_exec_step(gckpt_exec *x, const gckpt_step_opts *o, gckpt_step_result *res, gckpt_err *err)
{
    gckpt_step_opts dflt = {.update = true};
    if (!o) o = &dflt;
    memset(res, 0, sizeof *res);
    if (!x->setup_done) return exec_fail(err, "step: the persistent state is not set up");
    gckpt_backend *be = x->be;
    gckpt_xstatus rc;
    double t1 = 0, t2 = 0;
    if ((rc = be->timer_start(be)) != GCKPT_XS_OK) return exec_be_fail(x, rc, "timer", err);
    /* the micro-steps as the schedule's segments say (each part run its repeat count: the first
     * once, the later ones grad_accum - 1 times in all), k the micro-step's index in the step */
    uint64_t k = 0;
    for (int p = 0; p < x->nmicro; p++)
        for (uint64_t r = 0; r < x->micro[p].repeat; r++, k++)
            if ((rc = run_part(x, &x->micro[p], k, o->update, RUN_ALL, &res->events, err)) != GCKPT_XS_OK) return rc;
    /* DDP, ZeRO-1: the gradients' reduction opens the optimizer part; they are complete after it */
    if ((rc = run_part(x, &x->opt, 0, o->update, RUN_LEADING_COLLECTIVES, &res->events, err)) != GCKPT_XS_OK)
        return rc;
    if ((o->checksum || o->on_grads) && (rc = at_grads(x, o, res, &t1, err)) != GCKPT_XS_OK) return rc;
    if ((rc = run_part(x, &x->opt, 0, o->update, RUN_REST, &res->events, err)) != GCKPT_XS_OK) return rc;
    if ((rc = be->timer_stop(be, &t2)) != GCKPT_XS_OK) return exec_be_fail(x, rc, "timer", err);
    res->seconds = t1 + t2;
    int nrec = x->set.grad_accum < GCKPT_MAX_RECORDS ? (int)x->set.grad_accum : GCKPT_MAX_RECORDS;
    float rec[GCKPT_MAX_RECORDS];
    if ((rc = be->read_records(be, rec, nrec)) != GCKPT_XS_OK) return exec_be_fail(x, rc, "reading the loss", err);
    double s = 0;
    for (int i = 0; i < nrec; i++) s += res->micro_loss[i] = rec[i];
    res->nmicro = nrec;
    res->loss = s / nrec;
    if (o->update) x->step++;
    return GCKPT_XS_OK;
}

/* ---- parameter access -------------------------------------------------------------------- */

uint64_t gckpt_exec_param_numel(const gckpt_exec *x, int tensor)
{
    if (tensor < 0 || tensor >= x->r->nt || x->pidx[tensor] < 0) return 0;
    return gckpt_param_numel(x->r, tensor);
}

static gckpt_xstatus xfer(gckpt_exec *x, gckpt_xt t, float *host, bool down, gckpt_err *err)
{
    unsigned sz = gckpt_dtype_size((gckpt_dtype)t.dt);
    void *raw = malloc(t.n * sz + 1);
    if (!raw) return exec_fail(err, "out of memory");
    gckpt_xstatus rc = GCKPT_XS_OK;
    if (down) {
        rc = x->be->download(x->be, raw, t.p, t.n * sz);
        gckpt_xt h = {raw, t.n, t.dt};
        if (rc == GCKPT_XS_OK) exec_convert_to_f32(&h, host);
    } else {
        gckpt_xt h = {raw, t.n, t.dt};
        exec_convert_from_f32(&h, host);
        rc = x->be->upload(x->be, t.p, raw, t.n * sz);
    }
    free(raw);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, down ? "download" : "upload", err);
}

/* A parameter whose values read and write as numbers: not a quantized weight (its
 * buffer holds codes; its values exist only dequantized) */
static param_t *plain_param(gckpt_exec *x, int tensor, int layer, gckpt_err *err)
{
    param_t *p = exec_param(x, tensor, layer);
    if (!p || !p->w) {
        exec_fail(err, "no parameter %d in layer %d", tensor, layer);
        return NULL;
    }
    if (p->spec->quant.scheme) {
        exec_fail(err, "parameter %s is quantized (%s): it has no values to read or write", p->spec->name,
                  gckpt_quant_names[p->spec->quant.scheme]);
        return NULL;
    }
    return p;
}

gckpt_xstatus gckpt_exec_read_param(gckpt_exec *x, int layer, int tensor, float *out, gckpt_err *err)
{
    param_t *p = plain_param(x, tensor, layer, err);
    return p ? xfer(x, exec_param_view(p), out, true, err) : GCKPT_XS_ERROR;
}

void gckpt_exec_batch(const gckpt_exec *x, const int64_t **ids, const int64_t **labels)
{
    *ids = x->ids;
    *labels = x->labels;
}

gckpt_xstatus gckpt_exec_write_param(gckpt_exec *x, int layer, int tensor, const float *in, gckpt_err *err)
{
    param_t *p = plain_param(x, tensor, layer, err);
    return p ? xfer(x, exec_param_view(p), (float *)in, false, err) : GCKPT_XS_ERROR;
}

gckpt_xstatus gckpt_exec_read_grad_raw(gckpt_exec *x, int layer, int tensor, void *out, uint64_t bytes, gckpt_err *err)
{
    param_t *p = exec_param(x, tensor, layer);
    if (!p || !x->in_grads || !exec_live(x, p->grad)) return exec_fail(err, "no gradient of parameter %d in layer %d here", tensor, layer);
    if (bytes != p->spec->numel * gckpt_dtype_size((gckpt_dtype)p->spec->grad.dtype))
        return exec_fail(err, "gradient read of the wrong size");
    gckpt_xstatus rc = x->be->download(x->be, out, x->inst[p->grad].p, bytes);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "download", err);
}

bool gckpt_exec_param_in_layer(const gckpt_exec *x, int tensor, int layer)
{
    if (tensor < 0 || tensor >= x->r->nt || x->pidx[tensor] < 0) return false;
    if (!gckpt_sec_is_block(x->r->t[tensor].section)) return layer == 0;
    return layer >= 0 && (uint64_t)layer < x->m.layers && x->lpsec[layer] == x->r->t[tensor].section;
}

gckpt_xstatus gckpt_exec_read_grad(gckpt_exec *x, int layer, int tensor, float *out, gckpt_err *err)
{
    param_t *p = exec_param(x, tensor, layer);
    if (!p || !x->in_grads || !exec_live(x, p->grad)) return exec_fail(err, "no gradient of parameter %d in layer %d here", tensor, layer);
    return xfer(x, exec_inst_view(x, p->grad), out, true, err);
}

/* ---- teardown ------------------------------------------------------------------------------- */

void gckpt_exec_release_all(gckpt_exec *x)
{
    if (!x) return;
    gckpt_backend *be = x->be;
    if (x->inst)
        for (uint32_t id = 0; id < x->ninst; id++)
            if (x->inst[id].live) exec_inst_release(x, id);
    if (x->hb)
        for (uint64_t l = 0; l < x->m.layers; l++)
            if (x->hb[l].p) {
                be->release(be, GCKPT_MEM_PINNED, x->hb[l].p, x->hb[l].bytes);
                x->hb[l].p = NULL;
            }
    if (x->opt_temp) be->release(be, GCKPT_MEM_DEVICE, x->opt_temp, x->opt_temp_bytes);
    x->opt_temp = NULL;
    exec_parallel_release(x);
    if (x->params)
        for (size_t i = 0; i < x->nparams; i++) {
            param_t *p = &x->params[i];
            if (p->w && !p->flat) be->release(be, GCKPT_MEM_DEVICE, p->w, p->spec->weight.bytes);
            p->w = NULL;
            for (int k = 0; k < GCKPT_MAX_STATES; k++) {
                if (p->st[k] && !p->flat) be->release(be, GCKPT_MEM_DEVICE, p->st[k], p->spec->state[k].bytes);
                p->st[k] = NULL;
            }
            for (int k = 0; k < GCKPT_NQS; k++) {
                if (p->q.stat[k] && !p->flat)
                    be->release(be, GCKPT_MEM_DEVICE, p->q.stat[k],
                                gckpt_round_up(p->q.layout->stat[k].bytes, x->dev.alloc_round_bytes));
                p->q.stat[k] = NULL;
            }
            p->grad = GCKPT_NOINST;
        }
    if (x->workspace) {
        be->set_workspace(be, NULL, 0);
        be->release(be, GCKPT_MEM_DEVICE, x->workspace, x->workspace_bytes);
    }
    x->workspace = NULL;
    x->setup_done = false;
}

void gckpt_exec_free(gckpt_exec *x)
{
    if (!x) return;
    gckpt_exec_release_all(x);
    if (x->mode && x->mode->free) x->mode->free(x);
    exec_aux_free(x);
    gckpt_schedule_free(&x->sched);
    free(x->r);
    free(x->inst);
    free(x->params);
    free(x->bind);
    free(x->bind_gen);
    free(x->gview);
    free(x->hb);
    free(x->lpsec);
    free(x->lcopy);
    free(x->fwd_index);
    free(x->ids);
    free(x->labels);
    free(x->positions);
    free(x);
}
