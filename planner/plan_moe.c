/* Mixture of experts in a plan: the routing assumption (--moe-imbalance) checked against
 * the model, the header's line and the JSON's inputs.moe. transformers 5.24 trains the
 * experts with grouped_mm by default, whose every tensor is [S = tokens x top_k, ...] or
 * [E, ...]: the tokens each expert receives change neither what is saved, nor the live
 * peak, nor the FLOPs (measured: FINDINGS R-MOE-3, tests/data/hf-moe), so the worst-case
 * bound is the balanced plan; the assumption is recorded so that a reader sees it, and
 * so is the load-balancing loss when the config turns it on (FINDINGS R-MOE-4). */
#include <stdio.h>

#include "gckpt/planner/plan.h"

bool gckpt_plan_moe_check(const gckpt_plan_request *req, const gckpt_model *m, gckpt_err *err)
{
    double f = req->moe_imbalance;
    if (f == 0) return true;
    if (!m->experts) {
        gckpt_seterr(err, "--moe-imbalance: %s (model_type \"%s\") has no experts", m->name, m->model_type);
        return false;
    }
    /* the most-loaded expert receives at most every token once: T = S / top_k pairs,
     * F x S / E <= S / top_k */
    double most = (double)m->experts / (double)m->top_k;
    if (f < 1 || f > most) {
        gckpt_seterr(err, "--moe-imbalance: %g is outside [1, %g] (%llu experts, top-%llu: one expert receives at most "
                          "every token)", f, most, (unsigned long long)m->experts, (unsigned long long)m->top_k);
        return false;
    }
    return true;
}

static double imbalance(const gckpt_plan *p) { return p->req.moe_imbalance > 0 ? p->req.moe_imbalance : 1.0; }

void gckpt_plan_moe_header(const gckpt_plan *p, FILE *f)
{
    const gckpt_model *m = &p->model;
    if (!m->experts) return;
    double share = imbalance(p) * (double)m->top_k / (double)m->experts;
    fprintf(f, "mixture of experts: %llu experts, top-%llu, experts_implementation grouped_mm (transformers' "
               "default); routing %s: the most-loaded expert receives %.3g of the tokens (%.2f x the balanced "
               "share); under grouped_mm memory and FLOPs do not depend on it\n",
            (unsigned long long)m->experts, (unsigned long long)m->top_k,
            p->req.moe_imbalance > 0 ? "bounded by --moe-imbalance" : "balanced", share, imbalance(p));
    if (m->router_aux_loss)
        fprintf(f, "load-balancing loss (config output_router_logits): every layer's [tokens, %llu] router logits kept "
                   "to the head, loss += %g x aux_loss\n",
                (unsigned long long)m->experts, m->router_aux_coef);
}

void gckpt_plan_moe_json(const gckpt_plan *p, cJSON *inputs)
{
    const gckpt_model *m = &p->model;
    if (!m->experts) return;
    cJSON *o = cJSON_AddObjectToObject(inputs, "moe");
    cJSON_AddNumberToObject(o, "experts", (double)m->experts);
    cJSON_AddNumberToObject(o, "top_k", (double)m->top_k);
    cJSON_AddStringToObject(o, "experts_implementation", "grouped_mm");
    cJSON_AddStringToObject(o, "routing", p->req.moe_imbalance > 0 ? "imbalanced" : "balanced");
    cJSON_AddNumberToObject(o, "imbalance", imbalance(p));
    cJSON_AddStringToObject(o, "routing_effect",
                            "none under grouped_mm: every saved tensor is [tokens x top_k, ...] or [experts, ...]");
    if (m->router_aux_loss) cJSON_AddNumberToObject(o, "router_aux_loss_coef", m->router_aux_coef);
}
