/* The sweep: every every_n_layers x offload x micro-batch split, evaluated with the
 * fast evaluator (one segment profile per micro-batch), then fits / Pareto / choice. */
#include "gckpt/planner/plan.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/core/fused_loss.h"
#include "gckpt/core/mesh.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/tp.h"
#include "gckpt/util/safe_text.h"

void gckpt_plan_free(gckpt_plan *p)
{
    free(p->entries);
    free(p->recipe);
    free(p->params);
    free(p->model_config_text);
    free(p->req.every_n);
    free(p->vlm);
    free(p->images);
    free(p->vlm_info);
    gckpt_warnings_free(p->warnings, &p->n_warnings);
    memset(p, 0, sizeof *p);
}

static bool better(const gckpt_entry *a, const gckpt_entry *b)
{
    /* faster wins; on a tie the smaller footprint */
    if (a->r.tokens_per_s != b->r.tokens_per_s) return a->r.tokens_per_s > b->r.tokens_per_s;
    return a->r.device_peak_bytes < b->r.device_peak_bytes;
}

/* seq 0 is the default, min(4096, the model's limit). Beyond the limit: GPT-2's learned
 * position table has no row for it (the model cannot run); RoPE models run but were not
 * trained for it, so the user says so (--allow-long-seq, recorded in the plan). */
static bool resolve_seq(gckpt_plan *p, gckpt_err *err)
{
    uint64_t lim = p->model.max_positions;
    if (!p->req.seq) p->req.seq = lim && lim < GCKPT_DEFAULT_SEQ ? lim : GCKPT_DEFAULT_SEQ;
    if (!lim || p->req.seq <= lim) return true;
    if (p->model.learned_positions) {
        gckpt_seterr(err, "--seq %llu: %s has n_positions = %llu (a learned position table); longer sequences cannot run",
                     (unsigned long long)p->req.seq, p->model.name, (unsigned long long)lim);
        return false;
    }
    if (!p->req.allow_long_seq) {
        gckpt_seterr(err, "--seq %llu exceeds %s's max_position_embeddings = %llu; pass --allow-long-seq to plan it anyway",
                     (unsigned long long)p->req.seq, p->model.name, (unsigned long long)lim);
        return false;
    }
    return true;
}

/* Every figure of the plan stays within what gckpt-run's plan reader accepts. */
static bool times_in_range(const gckpt_plan *p, gckpt_err *err)
{
    for (size_t i = 0; i < p->n; i++) {
        const gckpt_result *r = &p->entries[i].r;
        if (!(r->step_s <= GCKPT_MAX_SECONDS) || !(r->tokens_per_s <= GCKPT_MAX_SECONDS)) {
            gckpt_seterr(err, "%s: the profile's rates make a step of %s take %.3g s (limit %.0e s); check its "
                              "peak_tflops, hbm_bytes_per_s and efficiencies",
                         p->dev.name, p->model.name, r->step_s, GCKPT_MAX_SECONDS);
            return false;
        }
    }
    return true;
}

/* The model (and its config.json as read, for the plan), the GPU, the sequence length. */
static bool load_inputs(const gckpt_plan_request *req, gckpt_plan *p, gckpt_err *err)
{
    char path[4096];
    if (!gckpt_resolve_data("models", req->model_ref, path, sizeof path, err) ||
        !(p->model_config_text = gckpt_read_file(path, 16u << 20, err)))
        return false;
    if (gckpt_plan_is_vlm(p->model_config_text)) { /* LLaVA: its text model and tower (plan_vlm.c) */
        if (!gckpt_plan_vlm_load(p, path, p->model_config_text, err)) return false;
    } else if (!gckpt_model_load(req->model_ref, &p->model, err)) {
        return false;
    }
    if (!gckpt_plan_vlm_options_ok(p, err)) return false;
    if (req->hub.id[0]) { /* a Hub id is the model's name, not its cached file's "config" */
        snprintf(p->model.name, sizeof p->model.name, "%.127s", req->hub.id); /* ids reach 193 */
        gckpt_text_sanitize(p->model.name);
    }
    /* flash_attention_2 is planned as SDPA's fused kernel: not with soft-capping, sinks or
     * a window, which the flash kernel takes as arguments (no mask) and SDPA cannot
     * (gpt_oss: transformers swaps in a kernels-hub flash build with sinks, FINDINGS R-ATTN-10) */
    if (!p->model_config_text || !gckpt_device_load(req->gpu_ref, &p->dev, err) || !resolve_seq(p, err)) return false;
    p->target = req->target_given ? req->target : p->dev.kind;
    if (p->target == GCKPT_TARGET_CPU && !strcmp(req->attn_impl, "flash_attention_2")) {
        /* transformers' _flash_attn_can_dispatch: "FlashAttention2 is not available on CPU" */
        gckpt_seterr(err, "--attention flash_attention_2 on the CPU target (--target cpu, or a profile of kind cpu): "
                          "transformers refuses FlashAttention2 there (\"not available on CPU\"); plan sdpa or eager");
        return false;
    }
    const gckpt_model *m = &p->model;
    bool window = m->sliding_layers && p->req.seq >= m->sliding_window;
    if (!strcmp(req->attn_impl, "flash_attention_2") && (m->attn_softcap > 0 || m->attn_sinks || window)) {
        gckpt_seterr(err, "--attention flash_attention_2 is not modelled for %s (%s in the flash kernel): plan sdpa or "
                          "eager", m->model_type,
                     m->attn_softcap > 0 ? "soft-capping" : m->attn_sinks ? "attention sinks" : "a sliding window");
        return false;
    }
    return true;
}

const char *gckpt_plan_attn_impl(const gckpt_plan *p)
{
    return p->req.attn_impl[0] ? p->req.attn_impl
                               : gckpt_attention_names[gckpt_attention_run(&p->model, p->req.attention)];
}

/* The layers every_n_layers counts: a VLM's vision blocks and text layers (R-VLM-1), or the
 * tower --checkpoint-towers chooses. */
static uint64_t sweep_layers(const gckpt_plan *p)
{
    uint64_t t[2] = {0, p->model.layers};
    if (p->vlm) gckpt_vlm_towers(p->vlm, t);
    return gckpt_towers_counted(p->req.checkpoint_towers, t);
}

/* The every_n values to sweep (default: off and 1..L) into p->req.every_n. */
static bool every_n_values(const gckpt_plan_request *req, gckpt_plan *p, gckpt_err *err)
{
    const uint64_t L = sweep_layers(p);
    int ne = req->every_n ? req->n_every : (int)L + 1;
    uint32_t *ev = malloc(sizeof *ev * (size_t)(ne ? ne : 1));
    if (!ev) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    for (int i = 0; i < ne; i++) {
        ev[i] = req->every_n ? req->every_n[i] : (uint32_t)i;
        if (ev[i] > L) {
            uint32_t bad = ev[i];
            free(ev);
            gckpt_seterr(err, "--every-n: %u exceeds the model's %llu layers", bad, (unsigned long long)L);
            return false;
        }
    }
    p->req.every_n = ev;
    p->req.n_every = ne;
    return true;
}

/* A fused loss is planned where gckpt_fused_loss_supported says so, on one GPU (the
 * gradients it makes in the forward are not modelled against a wrapper's hooks). */
static bool loss_check(const gckpt_plan_request *req, const gckpt_plan *p, gckpt_err *err)
{
    const char *why;
    if (req->loss == GCKPT_LOSS_HF) return true;
    if (!gckpt_fused_loss_supported(&p->model, req->precision, req->loss, &why)) {
        gckpt_seterr(err, "--loss %s: %s (model_type %s)", gckpt_loss_names[req->loss], why, p->model.model_type);
        return false;
    }
    if (p->target != GCKPT_TARGET_CUDA) {
        gckpt_seterr(err, "--loss %s: its kernels are Triton's, on CUDA only; plan it with --target cuda",
                     gckpt_loss_names[req->loss]);
        return false;
    }
    if (gckpt_par_mode_of(req->layout.mode)->multi) {
        gckpt_seterr(err, "--loss %s: planned on one GPU only (--parallel %s is not modelled with it)",
                     gckpt_loss_names[req->loss], gckpt_parallel_names[req->layout.mode]);
        return false;
    }
    return true;
}

gckpt_setting gckpt_plan_setting(const gckpt_plan *p, uint64_t micro_batch, uint64_t grad_accum)
{
    return gckpt_plan_setting_tp(p, micro_batch, grad_accum, 0);
}

gckpt_setting gckpt_plan_setting_tp(const gckpt_plan *p, uint64_t micro_batch, uint64_t grad_accum, uint32_t tp_rank)
{
    gckpt_layout l = p->req.layout;
    if (p->req.tp_dp_shard || p->req.tp_dp_replicate) /* TP x FSDP or TP x DDP: world rank tp_rank (fsdp rank 0) */
        gckpt_tp_hsdp_layout(p->req.tp, p->req.tp_dp_replicate ? p->req.tp_dp_replicate : 1,
                             p->req.tp_dp_shard ? p->req.tp_dp_shard : 1, tp_rank, &l);
    else if (p->req.tp) { /* TP alone: the TP rank's parameters (gckpt_tp_params_local) and kept scalars */
        l.tp = p->req.tp;
        l.tp_rank = tp_rank;
    }
    if (p->req.tp) l.node_gpus = p->req.node_gpus; /* where the run's groups sit (gckpt_layout_mesh) */
    l.cp = p->req.cp; /* CP: the rank's piece of the sequence (plan_cp.c) */
    return (gckpt_setting){.seq = p->req.cp ? p->req.seq / p->req.cp : p->req.seq, .micro_batch = micro_batch, .grad_accum = grad_accum,
                           .precision = p->req.precision, .optimizer = p->req.optimizer,
                           .attention = p->req.attention, .code_base = (uint8_t)p->req.code_base, .loss = (uint8_t)p->req.loss,
                           .liger_off = p->req.liger_off, .peft = p->req.peft, .layout = l,
                           .ckpt_towers = p->req.checkpoint_towers};
}

/* A micro-batch with its accumulation steps. */
typedef struct {
    uint64_t micro_batch, grad_accum;
} batch_split;

/* The micro-batch x grad-accum splits of the request; 0 (err set) when none. */
static int batch_splits(const gckpt_plan_request *req, batch_split out[GCKPT_MAX_MB], gckpt_err *err)
{
    int n = 0;
    for (int i = 0; i < req->n_micro; i++) {
        uint64_t b = req->micro_batches[i], k = req->grad_accum;
        if (req->global_batch) {
            if (req->global_batch % b) continue;
            k = req->global_batch / b;
        }
        out[n++] = (batch_split){b, k};
    }
    if (!n)
        gckpt_seterr(err, "--global-batch %llu: no micro-batch size given divides it",
                     (unsigned long long)req->global_batch);
    return n;
}

static int offload_choices(const gckpt_plan *p) { return p->req.offload == GCKPT_OFFLOAD_BOTH ? 2 : 1; }

/* The sweep's entries, refused when it is too large to plan. */
static bool sweep_size(const gckpt_plan *p, int nsplit, size_t *total, gckpt_err *err)
{
    const uint64_t L = sweep_layers(p);
    size_t n = 0;
    for (int i = 0; i < p->req.n_every; i++) n += p->req.every_n[i] ? (size_t)offload_choices(p) : 1;
    n *= (size_t)nsplit;
    if (n > GCKPT_MAX_ENTRIES) {
        gckpt_seterr(err, "the sweep has %zu entries, more than the limit of %d; narrow --every-n or --micro-batch",
                     n, GCKPT_MAX_ENTRIES);
        return false;
    }
    if ((uint64_t)n * L > GCKPT_MAX_LAYER_EVALS) {
        gckpt_seterr(err, "the sweep has %zu entries of %llu layers each (%llu layer evaluations), more than the limit of %llu; narrow --every-n or --micro-batch",
                     n, (unsigned long long)L, (unsigned long long)n * L, (unsigned long long)GCKPT_MAX_LAYER_EVALS);
        return false;
    }
    *total = n;
    return true;
}

/* Under --tp: a TP rank's peak is the walk of its local model (FINDINGS R-TP-7) holding the rank's
 * parameters (gckpt_plan_setting_tp's layout: gckpt_tp_params_local, the kept scalars, autocast's cast of
 * its lm_head rows; the same walk gckpt-run executes), the busiest rank's kept (gckpt_plan_tp_busiest);
 * the time TP rank 0's (the largest chunks); the step's TP collectives (R-TP-6) at the TP group's bus
 * bandwidth (intra-node unless the group spans nodes, gckpt_mesh_group_bus), none hidden: DTensor's
 * redistributions wait for their result before the next op (unverified on GPUs). */
static void tp_adjust(const gckpt_plan *p, const gckpt_entry *e, gckpt_result *r)
{
    gckpt_setting s = gckpt_plan_setting(p, e->micro_batch, e->grad_accum);
    s.every_n = e->every_n;
    s.offload = e->offload;
    /* TP x FSDP: FSDP2's collectives are the walk's (its overlap), the TP ones added to them */
    gckpt_mesh mesh = gckpt_layout_mesh(&s.layout);
    double tp_s = gckpt_tp_comm_seconds(&p->tp_full, &s, p->req.tp, gckpt_mesh_group_bus(&p->dev, &mesh, GCKPT_GROUP_TP, NULL));
    r->comm_s = p->req.tp_dp_shard || p->req.tp_dp_replicate ? r->comm_s + tp_s : tp_s;
    double scale = r->step_s / (r->step_s + tp_s);
    r->step_s += tp_s;
    /* the T ranks of a TP group work on one batch: tok/s per GPU is the group's over T (MFU is
     * already per GPU: the local model's FLOPs) */
    r->tokens_per_s *= scale / p->req.tp;
    r->mfu *= scale;
    r->hfu *= scale;
}

/* Every entry of one split from its segment profile. */
static bool evaluate_split(gckpt_plan *p, const gckpt_ctx *c, const gckpt_profile *prof, batch_split sp, gckpt_err *err)
{
    for (int i = 0; i < p->req.n_every; i++) {
        uint32_t n = p->req.every_n[i];
        for (int o = 0; o < (n ? offload_choices(p) : 1); o++) {
            bool off = p->req.offload == GCKPT_OFFLOAD_ON || (p->req.offload == GCKPT_OFFLOAD_BOTH && o == 1);
            if (!n) off = false;
            gckpt_entry *e = &p->entries[p->n++];
            e->every_n = n;
            e->offload = off;
            e->micro_batch = sp.micro_batch;
            e->grad_accum = sp.grad_accum;
            gckpt_fast_eval(c, prof, n, off, sp.grad_accum, &e->r);
            if (p->req.tp) tp_adjust(p, e, &e->r);
            if (p->req.cp && !gckpt_plan_cp_adjust(p, e, &e->r, err)) return false;
            e->fits = e->r.device_peak_bytes <= p->usable_bytes;
        }
    }
    return true;
}

/* A LoRA / QLoRA request against the model: its target list must match a linear of the
 * model's family (peft raises "Target modules ... not found in the base model"
 * otherwise); QLoRA's prepare_model_for_kbit_training casts the parameters to fp32, so a
 * pure-bf16 model does not exist there. */
static bool peft_check(const gckpt_plan_request *req, const gckpt_plan *p, gckpt_err *err)
{
    const gckpt_peft *pf = &req->peft;
    if (!gckpt_peft_on(pf)) return true;
    if (!gckpt_peft_model_ok(&p->model, pf, err)) return false;
    if (pf->method == GCKPT_METHOD_QLORA && req->precision == GCKPT_BF16) {
        gckpt_seterr(err, "--precision bf16 with --method qlora: prepare_model_for_kbit_training casts the model to "
                          "fp32; use amp-bf16 (TrainingArguments bf16=True) or fp32");
        return false;
    }
    return true;
}

/* The sweep: one segment profile per split, every setting composed from it. */
static bool sweep(gckpt_plan *p, const batch_split *sp, int nsplit, gckpt_err *err)
{
    gckpt_profile *prof = malloc(sizeof *prof);
    gckpt_profiler *prr = gckpt_profiler_new();
    gckpt_ctx *c = malloc(sizeof *c);
    bool ok = prof && prr && c;
    if (!ok) gckpt_seterr(err, "out of memory");
    for (int mi = 0; ok && mi < nsplit; mi++) {
        if (p->vlm) { /* one walk per entry across both towers (plan_vlm.c) */
            ok = gckpt_plan_vlm_evaluate(p, sp[mi].micro_batch, sp[mi].grad_accum, err);
            continue;
        }
        gckpt_setting s = gckpt_plan_setting(p, sp[mi].micro_batch, sp[mi].grad_accum);
        ok = gckpt_ctx_init(c, &p->model, &p->dev, p->recipe, &s, err);
        if (ok && !(ok = gckpt_profile_build_with(prr, c, prof))) gckpt_seterr(err, "out of memory while profiling");
        const size_t first = p->n;
        if (ok) ok = evaluate_split(p, c, prof, sp[mi], err);
        /* TP: the busiest TP rank's memory (plan_tp.c) */
        if (ok && p->req.tp) ok = gckpt_plan_tp_busiest(p, first, sp[mi].micro_batch, sp[mi].grad_accum, err);
    }
    free(c);
    free(prof);
    gckpt_profiler_free(prr);
    return ok;
}

bool gckpt_time_tied(double ta, double tb, double p10, double p90)
{
    if (!(ta > 0 && tb > 0)) return ta == tb;
    double r = ta / tb;
    return r >= p10 && r <= p90 && 1 / r >= p10 && 1 / r <= p90;
}

bool gckpt_plan_ratio_band(const gckpt_plan *p, double *p10, double *p90)
{
    const gckpt_code_base_eff *cb = p->target == GCKPT_TARGET_CUDA && p->req.code_base < GCKPT_NCODEBASE
                                        ? &p->dev.code_base[p->req.code_base]
                                        : &gckpt_code_base_neutral;
    *p10 = cb->ratio_p10;
    *p90 = cb->ratio_p90;
    return *p10 < 1 || *p90 > 1;
}

bool gckpt_plan_step_range(const gckpt_plan *p, const gckpt_result *r, double *lo, double *hi)
{
    if (!p->dev.has_code_bases || p->target != GCKPT_TARGET_CUDA || p->req.code_base >= GCKPT_NCODEBASE) return false;
    const gckpt_code_base_eff *cb = &p->dev.code_base[p->req.code_base];
    if (!(cb->step_ratio_p10 < cb->step_ratio_p90)) return false; /* none given (a calibrated profile's) */
    *lo = r->step_s * cb->step_ratio_p10;
    *hi = r->step_s * cb->step_ratio_p90;
    return true;
}

bool gckpt_plan_tied(const gckpt_plan *p, size_t i)
{
    double lo, hi;
    /* the band comes from published pairs without CPU offload: an offload entry's copies are
     * outside what it measured, so it ties only with an entry of the same offload */
    if (p->fastest < 0 || !p->entries[i].fits || p->entries[i].offload != p->entries[p->fastest].offload) return false;
    gckpt_plan_ratio_band(p, &lo, &hi);
    return gckpt_time_tied(p->entries[i].r.tokens_per_s, p->entries[p->fastest].r.tokens_per_s, lo, hi);
}

/* The recommendation and the smallest footprint. The fastest entry that fits, unless another
 * that fits (of the same offload) is within the code base's ratio band of it (the error of a ratio of two planned
 * step times on one setup could swap them): then the one of those with the most memory
 * headroom (on equal peaks the faster). Without a band the band is [1, 1]: the fastest. */
void gckpt_plan_choose(gckpt_plan *p)
{
    p->recommended = p->smallest = p->fastest = -1;
    for (size_t i = 0; i < p->n; i++) {
        gckpt_entry *e = &p->entries[i];
        if (p->smallest < 0 || e->r.device_peak_bytes < p->entries[p->smallest].r.device_peak_bytes)
            p->smallest = (long)i;
        if (e->fits && (p->fastest < 0 || better(e, &p->entries[p->fastest]))) p->fastest = (long)i;
    }
    p->recommended = p->fastest;
    for (size_t i = 0; p->fastest >= 0 && i < p->n; i++) {
        const gckpt_entry *e = &p->entries[i], *r = &p->entries[p->recommended];
        if (!gckpt_plan_tied(p, i)) continue;
        if (e->r.device_peak_bytes < r->r.device_peak_bytes ||
            (e->r.device_peak_bytes == r->r.device_peak_bytes && better(e, r)))
            p->recommended = (long)i;
    }
}

/* An entry's place in the memory order of the Pareto frontier. */
typedef struct {
    uint64_t mem;
    double tps;
    size_t i;
} pareto_key;

static int cmp_mem(const void *x, const void *y)
{
    const pareto_key *a = x, *b = y;
    if (a->mem != b->mem) return a->mem < b->mem ? -1 : 1;
    if (a->tps != b->tps) return a->tps > b->tps ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}

/* The Pareto frontier of device memory vs tokens/s. */
static bool mark_pareto(gckpt_plan *p, gckpt_err *err)
{
    pareto_key *ord = malloc((p->n ? p->n : 1) * sizeof *ord);
    if (!ord) {
        gckpt_seterr(err, "out of memory");
        return false;
    }
    for (size_t i = 0; i < p->n; i++) ord[i] = (pareto_key){p->entries[i].r.device_peak_bytes, p->entries[i].r.tokens_per_s, i};
    qsort(ord, p->n, sizeof *ord, cmp_mem);
    double best = -1;
    for (size_t i = 0; i < p->n; i++) {
        gckpt_entry *e = &p->entries[ord[i].i];
        if (e->r.tokens_per_s > best) {
            e->pareto = true;
            best = e->r.tokens_per_s;
        }
    }
    free(ord);
    return true;
}

/* --tp T: what was measured (FINDINGS R-TP), then the model planned becomes TP rank 0's local model
 * (torch.chunk gives the first ranks the larger pieces: the slowest); the other ranks' memory is
 * walked too (gckpt_plan_tp_busiest: an uneven vocabulary's short rank pads its logits, R-TP-15). */
static bool tp_setup(gckpt_plan *p, gckpt_err *err)
{
    const gckpt_plan_request *q = &p->req;
    if (!q->tp) return true;
    if (!gckpt_tp_model_ok(&p->model, q->tp, err)) return false;
    gckpt_setting s0 = gckpt_plan_setting(p, 1, 1);
    gckpt_mesh mesh = gckpt_layout_mesh(&s0.layout);
    const char *field;
    if (!(gckpt_mesh_group_bus(&p->dev, &mesh, GCKPT_GROUP_TP, &field) > 0)) {
        gckpt_seterr(err, "--tp %u on %s: the GPU profile has no %s (nccl-tests' busbw), "
                          "which times the TP all-reduces and all-gathers", q->tp, p->dev.name, field);
        return false;
    }
    if (!gckpt_parallel_device_ok(&p->dev, &s0.layout, err)) return false; /* FSDP2's groups under TP x FSDP */
    if (!gckpt_tp_peft_ok(&q->peft, &p->model, q->tp, q->tp_dp_shard, q->tp_dp_replicate, err) ||
        !gckpt_tp_optimizer_ok(q->optimizer, q->tp, q->tp_dp_shard || q->tp_dp_replicate, err))
        return false;
    /* pure bf16: the model loaded in bf16 (R-TP-22) */
    const char *what = (q->precision != GCKPT_FP32 && q->precision != GCKPT_AMP_BF16 && q->precision != GCKPT_BF16)
                           ? "--precision other than fp32, bf16 and amp-bf16"
                     : q->loss != GCKPT_LOSS_HF ? "--loss other than hf"
                     : q->code_base != GCKPT_CB_HF ? "--code-base fused"
                     : NULL;
    if (what) {
        gckpt_seterr(err, "--tp %u with %s: tensor parallelism is measured for full fine-tuning with AdamW under fp32, "
                          "bf16 or amp-bf16 and HF's loss only (FINDINGS R-TP-10, R-TP-22)", q->tp, what);
        return false;
    }
    if (q->tp_dp_shard && q->tp_dp_replicate && q->precision == GCKPT_BF16) {
        gckpt_seterr(err, "--tp %u --dp-replicate %u --dp-shard %u --precision bf16: HSDP x TP under pure bf16 is not "
                          "measured (TP x FSDP and TP x DDP are: FINDINGS R-TP-30)", q->tp, q->tp_dp_replicate,
                     q->tp_dp_shard);
        return false;
    }
    if ((q->tp_dp_shard || q->tp_dp_replicate) && p->model.qk_norm) { /* ReplicatedWithGradAllReduce under FSDP2 */
        gckpt_seterr(err, "--tp %u --%s %u: TP x FSDP / DDP is measured on llama-like models without q / k norms "
                          "(qwen3's replicated_with_grad_allreduce q_norm / k_norm under FSDP2 is not; FINDINGS "
                          "R-TP-8, R-TP-10)", q->tp, q->tp_dp_shard ? "dp-shard" : "dp-replicate",
                     q->tp_dp_shard ? q->tp_dp_shard : q->tp_dp_replicate);
        return false;
    }
    p->tp_full = p->model;
    gckpt_tp_local_model(&p->tp_full, q->tp, 0, &p->model);
    return true;
}

gckpt_setting gckpt_plan_recipe_setting(const gckpt_plan *p, uint32_t tp_rank)
{
    const gckpt_plan_request *req = &p->req;
    const gckpt_setting s = gckpt_plan_setting_tp(p, 1, 1, tp_rank);
    return (gckpt_setting){.precision = req->precision, .optimizer = req->optimizer, .peft = req->peft,
                           .layout = s.layout, .attention = req->attention, .seq = s.seq,
                           .loss = (uint8_t)req->loss, .liger_off = req->liger_off};
}

bool gckpt_plan_run(const gckpt_plan_request *req, gckpt_plan *p, gckpt_err *err)
{
    memset(p, 0, sizeof *p);
    p->req = *req;
    p->req.every_n = NULL;
    p->recommended = p->smallest = p->fastest = -1;
    batch_split sp[GCKPT_MAX_MB];
    int nsplit = 0;
    size_t total = 0;
    bool overflow = false;
    if (!load_inputs(req, p, err) || !every_n_values(req, p, err) || !(nsplit = batch_splits(req, sp, err)) ||
        !sweep_size(p, nsplit, &total, err))
        goto fail;
    p->entries = calloc(total, sizeof *p->entries);
    p->recipe = malloc(sizeof *p->recipe);
    p->params = malloc(sizeof *p->params);
    if (!p->entries || !p->recipe || !p->params) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    if (!peft_check(req, p, err) || !gckpt_plan_moe_check(req, &p->model, err) || !loss_check(req, p, err) ||
        !tp_setup(p, err) || !gckpt_plan_cp_setup(p, err))
        goto fail;
    gckpt_setting lay = gckpt_plan_recipe_setting(p, 0);
    if (!gckpt_layout_check(&lay, err) ||
        !gckpt_plan_mode_ok(gckpt_par_mode_of(lay.layout.mode), gckpt_parallel_names[lay.layout.mode], err) ||
        !gckpt_parallel_device_ok(&p->dev, &lay.layout, err))
        goto fail;
    gckpt_setting_recipe(&p->model, &lay, p->target, p->recipe);
    if (!gckpt_params_build(p->recipe, p->model.layers, req->optimizer, p->dev.alloc_round_bytes, p->params, &overflow,
                            err))
        goto fail;
    p->budget_bytes = req->budget_bytes ? req->budget_bytes : p->dev.memory_bytes;
    p->usable_bytes = (uint64_t)((double)p->budget_bytes * (1.0 - req->margin));
    if (!sweep(p, sp, nsplit, err)) goto fail;
    gckpt_plan_choose(p);
    if (!mark_pareto(p, err) || !times_in_range(p, err) || (p->vlm && !gckpt_plan_vlm_chosen(p, err))) goto fail;
    if (!gckpt_plan_warnings(p)) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    return true;
fail:
    gckpt_plan_free(p);
    return false;
}

/* bf16 / fp16 / fp32 ... in a user's words */
static const char *dtype_word(uint8_t dtype)
{
    switch (dtype) {
    case GCKPT_DT_BOOL: case GCKPT_DT_U8: case GCKPT_DT_I8: return "8-bit";
    case GCKPT_DT_NF4: return "4-bit";
    case GCKPT_DT_BF16: return "bf16";
    case GCKPT_DT_F16: return "fp16";
    case GCKPT_DT_F32: return "fp32";
    default: return "int64";
    }
}

/* The tensor allocated at the peak, in words a user knows: "fp32 logits gradient",
 * "fp32 gradient of embed_tokens.weight", "bf16 autocast copy of lm_head.weight",
 * "bf16 gradient of the mlp.up_proj output"; for a small allocation (a scalar of the
 * loss) the op being computed, since the tensor itself is not what fills the memory. */
static void tensor_role(const gckpt_plan *p, const gckpt_result *r, char *buf, size_t n)
{
    const gckpt_tensor *t = &p->recipe->t[r->peak_tensor];
    const char *dt = dtype_word(t->dtype);
    int prod = gckpt_recipe_producer(p->recipe, r->peak_tensor);
    const gckpt_op *op = prod >= 0 ? &p->recipe->op[prod] : NULL;
    uint64_t bytes = 0;
    if (!gckpt_tensor_bytes(p->recipe, r->peak_tensor, p->req.micro_batches[0], gckpt_plan_setting(p, 1, 1).seq, &bytes))
        bytes = 0;
    if (t->kind == GCKPT_T_PARAM) {
        snprintf(buf, n, "%s gradient of %s", dtype_word(p->recipe->grad_dtype), t->name);
    } else if (t->kind == GCKPT_T_WCAST) {
        snprintf(buf, n, "%s autocast copy of %s", dt, p->recipe->t[t->param].name);
    } else if (!r->peak_grad && bytes < 65536 && op) {
        if (op->prim == GCKPT_P_NLL) snprintf(buf, n, "computing the loss (%s)", op->name);
        else snprintf(buf, n, "computing %s", op->name);
    } else if (t->logits && op) {
        const char *what = op->prim == GCKPT_P_LOG_SOFTMAX ? "log-softmax of the logits" : "logits";
        snprintf(buf, n, "%s %s%s", dt, what, r->peak_grad ? " gradient" : "");
    } else if (r->peak_grad) {
        snprintf(buf, n, "%s gradient of the %s output", dt, op ? op->name : t->name);
    } else {
        snprintf(buf, n, "%s %s output", dt, op ? op->name : t->name);
    }
}

void gckpt_peak_where(const gckpt_plan *p, const gckpt_result *r, char *buf, size_t n)
{
    long L = (long)p->model.layers;
    char loc[64], role[160];
    uint64_t towers[2] = {0, 0};
    if (p->vlm) gckpt_vlm_towers(p->vlm, towers);
    if (r->peak_vision && r->peak_layer < 0) snprintf(loc, sizeof loc, "vision tower's embedding");
    else if (r->peak_vision && (uint64_t)r->peak_layer < towers[0]) snprintf(loc, sizeof loc, "vision layer %d", r->peak_layer);
    else if (r->peak_vision) snprintf(loc, sizeof loc, "projector");
    else if (r->peak_layer < 0) snprintf(loc, sizeof loc, "embedding");
    else if (r->peak_layer < L) snprintf(loc, sizeof loc, "layer %d", r->peak_layer);
    else snprintf(loc, sizeof loc, "lm_head/loss");
    const char *micro = r->peak_micro == GCKPT_MICRO_LATER ? ", later micro-step (gradients exist)" : "";
    if (r->peak_phase == GCKPT_PH_OPTIMIZER)
        snprintf(buf, n, "optimizer step (states + gradients + step temporaries)");
    else if (r->peak_phase == GCKPT_PH_LOSS && r->peak_tensor < 0 && p->req.layout.mode == GCKPT_PAR_DDP)
        snprintf(buf, n, "%s, %s%s: DDP's _DDPSink clones the fp32 logits (find_unused_parameters)",
                 gckpt_phase_names[r->peak_phase], loc, micro);
    else if (r->peak_tensor >= 0) {
        tensor_role(p, r, role, sizeof role);
        snprintf(buf, n, "%s, %s%s: %s", gckpt_phase_names[r->peak_phase], loc, micro, role);
    } else
        snprintf(buf, n, "%s, %s%s", gckpt_phase_names[r->peak_phase], loc, micro);
}
