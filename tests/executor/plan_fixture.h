/* Plans of the tiny fixture models, made with the planner library, as JSON text. */
#ifndef GCKPT_TEST_PLAN_FIXTURE_H
#define GCKPT_TEST_PLAN_FIXTURE_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/planner/plan.h"

#ifndef GCKPT_TEST_DATA
#define GCKPT_TEST_DATA "tests/executor/data"
#endif

/* every: values of every_n_layers (0 = off); global_batch 0: grad_accum is fixed; peft:
 * LoRA / QLoRA (NULL: full fine-tuning); layout: several GPUs (NULL: one). */
/* tp, dp_replicate, dp_shard: gckpt-plan --tp tp [--dp-replicate dp_replicate] [--dp-shard dp_shard] (0: none) */
/* pf_optimizer: the optimizer the next plans are made with (adamw unless a test sets it) */
static gckpt_optimizer pf_optimizer = GCKPT_ADAMW;
static inline char *pf_plan_text_mesh(const char *fixture, gckpt_precision p, gckpt_attention a, const uint32_t *every,
                                      int n_every, uint64_t mb, uint64_t grad_accum, uint64_t global_batch,
                                      const gckpt_peft *peft, const gckpt_layout *layout, uint32_t tp,
                                      uint32_t dp_replicate, uint32_t dp_shard)
{
    gckpt_plan_request req = {.seq = 16, .micro_batches = {mb}, .n_micro = 1, .grad_accum = grad_accum,
                              .global_batch = global_batch, .precision = p, .optimizer = pf_optimizer,
                              .attention = a, .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05,
                              .tp = tp, .tp_dp_shard = dp_shard, .tp_dp_replicate = dp_replicate};
    if (peft) req.peft = *peft;
    if (layout) req.layout = *layout;
    if (global_batch && global_batch % mb == 0 && mb > 1) {
        req.micro_batches[1] = 1;
        req.n_micro = 2;
    }
    snprintf(req.model_ref, sizeof req.model_ref, "%s/%s.json", GCKPT_TEST_DATA, fixture);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[64];
    memcpy(ev, every, sizeof *ev * (size_t)n_every);
    req.every_n = ev;
    req.n_every = n_every;
    gckpt_plan plan;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&req, &plan, &err)) {
        fprintf(stderr, "plan: %s\n", err.msg);
        return NULL;
    }
    cJSON *j = gckpt_plan_to_json(&plan, true);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    gckpt_plan_free(&plan);
    return text;
}

/* gckpt-plan --seq seq [--cp cp --dp-replicate R --gpus cp x dp_shard x R] (cp 0: one GPU; R 0 or 1: no
 * replicas): context parallelism and the one process it is compared with; peft: LoRA / QLoRA (NULL: full
 * fine-tuning); offload: --offload off / on. */
static inline char *pf_plan_text_cp_peft(const char *fixture, gckpt_precision p, const uint32_t *every, int n_every,
                                         uint64_t mb, uint64_t grad_accum, uint64_t seq, uint32_t cp, uint32_t dp_shard,
                                         uint32_t dp_replicate, const gckpt_peft *peft, gckpt_offload_sel offload)
{
    gckpt_plan_request req = {.seq = seq, .micro_batches = {mb}, .n_micro = 1, .grad_accum = grad_accum,
                              .precision = p, .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA,
                              .offload = offload, .margin = 0.05};
    if (peft) req.peft = *peft;
    if (cp) {
        req.layout = (gckpt_layout){.gpus = cp * (dp_shard ? dp_shard : 1) * (dp_replicate ? dp_replicate : 1), .nodes = 1};
        gckpt_plan_request_cp(&req, cp, dp_replicate);
    }
    snprintf(req.model_ref, sizeof req.model_ref, "%s/%s.json", GCKPT_TEST_DATA, fixture);
    snprintf(req.gpu_ref, sizeof req.gpu_ref, "h100-sxm-80gb");
    uint32_t ev[64];
    memcpy(ev, every, sizeof *ev * (size_t)n_every);
    req.every_n = ev;
    req.n_every = n_every;
    gckpt_plan plan;
    gckpt_err err = {{0}};
    if (!gckpt_plan_run(&req, &plan, &err)) {
        fprintf(stderr, "plan: %s\n", err.msg);
        return NULL;
    }
    cJSON *j = gckpt_plan_to_json(&plan, true);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    gckpt_plan_free(&plan);
    return text;
}

static inline char *pf_plan_text_cp(const char *fixture, gckpt_precision p, const uint32_t *every, int n_every,
                                    uint64_t mb, uint64_t grad_accum, uint64_t seq, uint32_t cp, uint32_t dp_shard,
                                    uint32_t dp_replicate)
{
    return pf_plan_text_cp_peft(fixture, p, every, n_every, mb, grad_accum, seq, cp, dp_shard, dp_replicate, NULL,
                                GCKPT_OFFLOAD_OFF);
}

static inline char *pf_plan_text_tp(const char *fixture, gckpt_precision p, gckpt_attention a, const uint32_t *every,
                                    int n_every, uint64_t mb, uint64_t grad_accum, uint64_t global_batch,
                                    const gckpt_peft *peft, const gckpt_layout *layout, uint32_t tp, uint32_t dp_shard)
{
    return pf_plan_text_mesh(fixture, p, a, every, n_every, mb, grad_accum, global_batch, peft, layout, tp, 0, dp_shard);
}

static inline char *pf_plan_text_full(const char *fixture, gckpt_precision p, gckpt_attention a, const uint32_t *every,
                                      int n_every, uint64_t mb, uint64_t grad_accum, uint64_t global_batch,
                                      const gckpt_peft *peft, const gckpt_layout *layout)
{
    return pf_plan_text_tp(fixture, p, a, every, n_every, mb, grad_accum, global_batch, peft, layout, 0, 0);
}

static inline char *pf_plan_text_peft(const char *fixture, gckpt_precision p, gckpt_attention a, const uint32_t *every,
                                      int n_every, uint64_t mb, uint64_t grad_accum, uint64_t global_batch,
                                      const gckpt_peft *peft)
{
    return pf_plan_text_full(fixture, p, a, every, n_every, mb, grad_accum, global_batch, peft, NULL);
}

static inline char *pf_plan_text(const char *fixture, gckpt_precision p, gckpt_attention a, const uint32_t *every,
                                 int n_every, uint64_t mb, uint64_t grad_accum, uint64_t global_batch)
{
    return pf_plan_text_peft(fixture, p, a, every, n_every, mb, grad_accum, global_batch, NULL);
}

/* The item at a path such as "entries[2].memory.peak_bytes" (NULL if absent). */
static inline cJSON *pf_at(cJSON *root, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    cJSON *cur = root;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, ".")) {
        char *br = strchr(tok, '[');
        if (br) *br = 0;
        if (*tok) cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        while (br && cur) {
            int idx = atoi(br + 1);
            cur = cJSON_GetArrayItem(cur, idx);
            br = strchr(br + 1, '[');
        }
    }
    return cur;
}

/* Replace (or with repl NULL, delete) the item at path; false if the path is absent. */
static inline bool pf_set(cJSON *root, const char *path, cJSON *repl)
{
    char parent[256];
    snprintf(parent, sizeof parent, "%s", path);
    char *dot = strrchr(parent, '.');
    char *br = strrchr(parent, '[');
    cJSON *par;
    if (br && (!dot || br > dot)) { /* array element */
        int idx = atoi(br + 1);
        *br = 0;
        par = pf_at(root, parent);
        if (!par || !cJSON_GetArrayItem(par, idx)) return false;
        if (repl) cJSON_ReplaceItemInArray(par, idx, repl);
        else cJSON_DeleteItemFromArray(par, idx);
        return true;
    }
    const char *key = dot ? dot + 1 : parent;
    if (dot) {
        *dot = 0;
        par = pf_at(root, parent);
    } else {
        par = root;
    }
    if (!par || !cJSON_GetObjectItemCaseSensitive(par, key)) return false;
    if (repl) cJSON_ReplaceItemInObjectCaseSensitive(par, key, repl);
    else cJSON_DeleteItemFromObjectCaseSensitive(par, key);
    return true;
}

#endif
