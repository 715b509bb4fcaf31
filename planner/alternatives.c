/* "What would fit instead" (gckpt-plan, when nothing fits): the request re-planned with other
 * choices, one line each, only those the planner accepts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/fused_loss.h"
#include "gckpt/core/parallel.h"
#include "gckpt/planner/cli_names.h"
#include "gckpt/planner/plan.h"

/* Where the lines go: the header once, before the first; per_rank: several GPUs (the step time
 * is said too: a TP or CP rank's step covers a part of its group's batch, so tok/s alone would
 * hide it); tp, cp: a TP / CP layout was said (its batch note follows the lines). */
typedef struct {
    FILE *f;
    bool header, per_rank, tp, cp;
} alt_out;

/* One alternative request re-planned: its line of "What would fit instead"; false when the
 * planner refuses it (nothing is said). */
static bool print_alternative(const gckpt_plan_request *r, const char *label, alt_out *o)
{
    FILE *f = o->f;
    gckpt_plan_request c = *r;
    if (r->every_n) {
        c.every_n = malloc(sizeof *c.every_n * (size_t)r->n_every);
        if (!c.every_n) return false;
        memcpy(c.every_n, r->every_n, sizeof *c.every_n * (size_t)r->n_every);
    }
    gckpt_plan p;
    gckpt_err err;
    bool ok = gckpt_plan_run(&c, &p, &err);
    free(c.every_n);
    if (!ok) return false;
    if (!o->header) {
        fprintf(f, "\nWhat would fit instead (same model, GPU, sequence and batch):\n");
        o->header = true;
    }
    fprintf(f, "  %-46s ", label);
    if (p.recommended >= 0) {
        const gckpt_entry *e = &p.entries[p.recommended];
        char en[16];
        if (e->every_n) snprintf(en, sizeof en, "%u", e->every_n);
        else snprintf(en, sizeof en, "off");
        if (o->per_rank)
            fprintf(f, "fits: every_n_layers=%s offload=%s mb %llu, %.2f GiB per rank, step %.3f s, %.0f tokens/s per GPU\n",
                    en, e->offload ? "on" : "off", (unsigned long long)e->micro_batch,
                    (double)e->r.device_peak_bytes / 1073741824.0, e->r.step_s, e->r.tokens_per_s);
        else
            fprintf(f, "fits: every_n_layers=%s offload=%s mb %llu, %.2f GiB, %.0f tokens/s\n", en,
                    e->offload ? "on" : "off", (unsigned long long)e->micro_batch,
                    (double)e->r.device_peak_bytes / 1073741824.0, e->r.tokens_per_s);
    } else {
        fprintf(f, "does not fit either (smallest %.2f GiB)\n",
                (double)p.entries[p.smallest].r.device_peak_bytes / 1073741824.0);
    }
    gckpt_plan_free(&p);
    return true;
}

/* Whether HF's loss dominates the smallest entry's peak: the peak is in the loss, or the
 * logits and their gradients are the largest of what the step adds to the persistent state. */
static bool loss_dominates(const gckpt_plan *p)
{
    if (p->smallest < 0) return false;
    const gckpt_result *r = &p->entries[p->smallest].r;
    if (r->peak_phase == GCKPT_PH_LOSS) return true;
    for (int k = GCKPT_C_ACTIVATIONS; k < GCKPT_NCOMP; k++)
        if (k != GCKPT_C_LOGITS && r->breakdown[k] >= r->breakdown[GCKPT_C_LOGITS]) return false;
    return true;
}

/* The fused losses (docs/fused-loss.md) where they are planned for the model: cut-cross-entropy
 * with bf16 hidden states (its backward's requirement). */
static void loss_alternatives(const gckpt_plan_request *req, const gckpt_plan *p, alt_out *o)
{
    if (req->loss != GCKPT_LOSS_HF || !loss_dominates(p)) return;
    for (int l = GCKPT_LOSS_LIGER; l < GCKPT_NLOSS; l++) {
        gckpt_plan_request r = *req;
        r.loss = (gckpt_loss)l;
        const char *why;
        if (!gckpt_fused_loss_supported(&p->model, r.precision, r.loss, &why)) r.precision = GCKPT_BF16;
        if (!gckpt_fused_loss_supported(&p->model, r.precision, r.loss, &why)) continue;
        char label[96];
        snprintf(label, sizeof label, "--loss %-5s%s%s", gckpt_loss_names[l], r.precision != req->precision ? " --precision " : "",
                 r.precision != req->precision ? gckpt_precision_names[r.precision] : "");
        print_alternative(&r, label, o);
    }
}

/* The processes of a request: --tp's T (x S under TP x FSDP), else the layout's GPUs x nodes. */
static uint32_t request_world(const gckpt_plan_request *q)
{
    return q->tp ? q->tp * (q->tp_dp_shard ? q->tp_dp_shard : 1) * (q->tp_dp_replicate ? q->tp_dp_replicate : 1)
                 : gckpt_layout_world(&q->layout);
}

/* The request's GPUs as a layout of one GPU count per node and nodes: a TP request's T x S GPUs
 * on its nodes (node_gpus each; 0: one node), else the request's layout. */
static gckpt_layout request_gpus(const gckpt_plan_request *q)
{
    uint32_t w = request_world(q);
    if (!q->tp) return q->layout;
    return q->node_gpus ? (gckpt_layout){.gpus = q->node_gpus, .nodes = w / q->node_gpus} : (gckpt_layout){.gpus = w};
}

/* GPUs per node of the request (one node: all of them). */
static uint32_t request_node_gpus(const gckpt_plan_request *q)
{
    gckpt_layout l = request_gpus(q);
    return l.gpus ? l.gpus : 1;
}

/* Several GPUs: the other modes on the same GPUs and nodes (a TP request's on its T x S GPUs). */
static void mode_alternatives(const gckpt_plan_request *req, alt_out *o)
{
    gckpt_layout base = request_gpus(req);
    char label[96];
    for (int m = GCKPT_PAR_DDP; m < GCKPT_NPAR; m++) {
        if (!req->tp && !req->cp && m == req->layout.mode) continue;
        gckpt_plan_request r = *req;
        r.tp = r.tp_dp_shard = r.tp_dp_replicate = r.cp = 0;
        r.layout = base;
        r.layout.mode = (uint8_t)m;
        snprintf(label, sizeof label, "--parallel %s", gckpt_parallel_names[m]);
        print_alternative(&r, label, o);
    }
    /* FSDP2's CPUOffloadPolicy (its shards, frozen ones too, the gradients and AdamW's states on
     * the host: FINDINGS R-OFFLOAD-6, R-DISTPEFT-12), when the request has no CPU offload */
    if (req->layout.offload) return;
    gckpt_plan_request r = *req;
    r.tp = r.tp_dp_shard = r.tp_dp_replicate = r.cp = 0;
    r.layout = base;
    r.layout.mode = GCKPT_PAR_FSDP;
    r.layout.offload = GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM; /* --fsdp-offload on */
    print_alternative(&r, "--parallel fsdp --fsdp-offload on", o);
}

/* One TP layout of the GPUs: --tp t with rep replicas (0: none) of s FSDP shards each (0: none). */
static void tp_layout(const gckpt_plan_request *req, uint32_t t, uint32_t rep, uint32_t s, alt_out *o)
{
    if (req->tp == t && req->tp_dp_shard == s && req->tp_dp_replicate == rep) return; /* the request itself */
    gckpt_plan_request r = *req;
    gckpt_layout gpus = request_gpus(req);
    r.node_gpus = gpus.nodes > 1 ? gpus.gpus : 0; /* several nodes: where the groups sit */
    r.layout = (gckpt_layout){0};
    r.cp = 0;
    r.tp = t;
    r.tp_dp_shard = s;
    r.tp_dp_replicate = rep;
    char label[96];
    int n = snprintf(label, sizeof label, "--tp %u", t);
    if (rep) n += snprintf(label + n, sizeof label - (size_t)n, " --dp-replicate %u", rep);
    if (s) snprintf(label + n, sizeof label - (size_t)n, " --dp-shard %u", s);
    o->tp |= print_alternative(&r, label, o);
}

/* Several GPUs: tensor parallelism over them, for every T > 1 dividing a node's GPUs (on one node
 * all of them; on several a TP group stays inside a node, the rest across nodes): --tp T alone
 * (T = the GPUs), TP x FSDP (--tp T --dp-shard S, T x S = the GPUs), TP x DDP (--tp T
 * --dp-replicate S) and HSDP x TP (--tp T --dp-replicate R --dp-shard S, T x R x S = the GPUs,
 * R, S > 1), each group timed at its placement's bandwidth (gckpt/core/mesh.h). Which T the model
 * takes (heads and key/value heads divisible, the measured structure), and which choices TP is
 * planned with, gckpt_plan_run decides (core/tp.c, tp_setup): a layout it refuses is not said. */
static void tp_alternatives(const gckpt_plan_request *req, alt_out *o)
{
    uint32_t w = request_world(req), g = request_node_gpus(req);
    for (uint32_t t = 2; t <= g; t++) {
        if (g % t) continue;
        uint32_t rest = w / t;
        if (rest == 1) {
            tp_layout(req, t, 0, 0, o);
            continue;
        }
        tp_layout(req, t, 0, rest, o); /* the rest of the GPUs sharded, */
        tp_layout(req, t, rest, 0, o); /* replicated, */
        for (uint32_t rep = 2; rep < rest; rep++) /* then both */
            if (!(rest % rep)) tp_layout(req, t, rep, rest / rep, o);
    }
}

/* Several GPUs: context parallelism over them, --cp C alone (C = the GPUs), CP x FSDP (--cp C
 * --dp-shard S, C x S = the GPUs) and CP x HSDP (--cp C --dp-replicate R --dp-shard S, R, S > 1),
 * for every C > 1 dividing them (across nodes too: the ring
 * timed at its placement's bandwidth, gckpt/core/mesh.h): FSDP2 over all of them, each rank at
 * seq / C tokens. Which C, models and choices CP is planned for, gckpt_plan_run decides
 * (plan_cp.c, gckpt_plan_cp_setup): a layout it refuses is not said. */
static void cp_layout(const gckpt_plan_request *req, uint32_t c, uint32_t rep, uint32_t s, alt_out *o)
{
    gckpt_plan_request r = *req;
    if (req->tp) { /* a TP request has no layout: its T x S GPUs on its nodes */
        r.layout = request_gpus(req);
        r.node_gpus = 0;
    }
    gckpt_plan_request_cp(&r, c, rep);
    char label[96];
    int n = snprintf(label, sizeof label, "--cp %u", c);
    if (rep) n += snprintf(label + n, sizeof label - (size_t)n, " --dp-replicate %u", rep);
    if (s > 1) snprintf(label + n, sizeof label - (size_t)n, " --dp-shard %u", s);
    o->cp |= print_alternative(&r, label, o);
}

static void cp_alternatives(const gckpt_plan_request *req, alt_out *o)
{
    uint32_t w = request_world(req);
    const uint32_t req_rep = req->layout.dp_replicate > 1 ? req->layout.dp_replicate : 0;
    for (uint32_t c = 2; c <= w; c++) {
        if (w % c) continue;
        uint32_t rest = w / c;
        if (req->cp != c || req_rep) cp_layout(req, c, 0, rest, o); /* the request's own: its C fixes S */
        /* under HSDP (R-CP-17, R-CP-27): R x S = the rest, S > 1 (accelerate refuses R x C alone) */
        for (uint32_t rep = 2; rep < rest; rep++)
            if (!(rest % rep) && !(req->cp == c && req_rep == rep)) cp_layout(req, c, rep, rest / rep, o);
    }
}

/* When nothing fits: on one GPU, re-plan with cheaper precision / optimizer choices and, for full
 * fine-tuning, with LoRA and QLoRA (the planner's defaults: r 16, all-linear; QLoRA nf4
 * with double quantization, bf16 compute), and say which would fit, so the user gets a
 * way forward, not only a "no"; on several, the other modes, the TP and the CP layouts. */
void gckpt_plan_print_alternatives(const gckpt_plan_request *req, const gckpt_plan *plan, FILE *f)
{
    const gckpt_model *model = &plan->model;
    /* several GPUs: the other modes and the TP layouts on the same GPUs (the precision / optimizer /
     * LoRA alternatives below are refused there: nothing else was measured per rank), then CP's */
    if (request_world(req) > 1) {
        alt_out o = {.f = f, .per_rank = true};
        mode_alternatives(req, &o);
        tp_alternatives(req, &o);
        cp_alternatives(req, &o);
        if (o.tp)
            fprintf(f, "  (--tp T: the T ranks of a TP group share one batch, so the global batch is micro-batch x "
                       "grad-accum x GPUs / T)\n");
        if (o.cp)
            fprintf(f, "  (--cp C: the C ranks of a CP group share one batch, each computing seq / C of its tokens, so "
                       "the global batch is micro-batch x grad-accum x GPUs / C)\n");
        return;
    }
    static const struct { int prec, opt; } alt[] = {
        {-1, GCKPT_ADAMW_8BIT}, {GCKPT_BF16, -1}, {GCKPT_BF16, GCKPT_ADAMW_8BIT}, {GCKPT_BF16, GCKPT_SGD},
    };
    alt_out o = {.f = f};
    loss_alternatives(req, plan, &o);
    char label[96];
    int tried[sizeof alt / sizeof alt[0] + 1][2] = {{(int)req->precision, (int)req->optimizer}};
    int ntried = 1;
    for (size_t i = 0; i < sizeof alt / sizeof alt[0]; i++) {
        gckpt_plan_request r = *req;
        if (alt[i].prec >= 0) r.precision = (gckpt_precision)alt[i].prec;
        if (alt[i].opt >= 0) r.optimizer = (gckpt_optimizer)alt[i].opt;
        /* an alternative that keeps one of the request's choices can equal the request
         * or an earlier one (bf16 + adamw-8bit from a bf16 request): say each once */
        bool seen = false;
        for (int k = 0; k < ntried; k++) seen |= tried[k][0] == (int)r.precision && tried[k][1] == (int)r.optimizer;
        if (seen) continue;
        tried[ntried][0] = (int)r.precision;
        tried[ntried][1] = (int)r.optimizer;
        ntried++;
        snprintf(label, sizeof label, "--precision %-8s --optimizer %-13s", gckpt_precision_names[r.precision],
                 gckpt_optimizer_names[r.optimizer]);
        print_alternative(&r, label, &o);
    }
    if (req->peft.method != GCKPT_METHOD_FULL) return;
    static const struct { int method, prec; } peft[] = {
        {GCKPT_METHOD_LORA, GCKPT_BF16}, {GCKPT_METHOD_LORA, GCKPT_AMP_BF16}, {GCKPT_METHOD_QLORA, GCKPT_AMP_BF16}};
    for (size_t i = 0; i < sizeof peft / sizeof peft[0]; i++) {
        gckpt_plan_request r = *req;
        gckpt_peft_default((gckpt_method)peft[i].method, &r.peft);
        r.precision = (gckpt_precision)peft[i].prec;
        /* where all-linear is refused (the mixture-of-experts families), the family's
         * modelled linears: the attention projections */
        gckpt_err err;
        const char *tg = "all-linear";
        if (!gckpt_peft_model_ok(model, &r.peft, &err)) {
            r.peft.targets = gckpt_lora_family_targets(model->family);
            tg = "q/k/v/o";
        }
        snprintf(label, sizeof label, "--method %-5s --precision %-8s (r 16, %s)", gckpt_method_names[peft[i].method],
                 gckpt_precision_names[r.precision], tg);
        print_alternative(&r, label, &o);
    }
}

