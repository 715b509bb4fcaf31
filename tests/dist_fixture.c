#include "dist_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/parallel.h"
#include "gckpt/util/jsonget.h"
#include "hf_compare.h"

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

void dist_fixture_read(const char *path, dist_fixture *f)
{
    gckpt_err err;
    memset(f, 0, sizeof *f);
    char *text = gckpt_read_file(path, 256u << 20, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *root = gckpt_json_parse(path, text, &err);
    free(text);
    if (!root) fail_msg("%s", err.msg);
    const cJSON *set = item(root, "setting"), *par = item(root, "parallel"), *steps = item(root, "steps");
    char prec[32], pg[16];
    uint64_t world, rank, n, mb, seq, ga;
    double peak;
    char *cfg = cJSON_PrintUnformatted(item(root, "config"));
    bool ok = cfg && gckpt_model_parse(path, cfg, &f->m, &err) &&
              gckpt_json_str(par, path, "parallel.mode", f->mode, sizeof f->mode, &err) &&
              gckpt_json_str_opt(par, path, "parallel.variant", "", f->variant, sizeof f->variant, &err) &&
              gckpt_json_str(par, path, "parallel.process_group", pg, sizeof pg, &err) &&
              gckpt_json_u64(par, path, "parallel.world_size", 2, 1024, &world, &err) &&
              gckpt_json_u64(par, path, "parallel.rank", 0, world - 1, &rank, &err) &&
              gckpt_json_str(set, path, "setting.precision", prec, sizeof prec, &err) &&
              gckpt_json_u64_opt(set, path, "setting.every_n_layers", 0, 1024, 0, &n, &err) &&
              gckpt_json_u64(set, path, "setting.micro_batch", 1, 1024, &mb, &err) &&
              gckpt_json_u64(set, path, "setting.seq", 1, 1u << 20, &seq, &err) &&
              gckpt_json_u64(set, path, "setting.grad_accum", 1, 1024, &ga, &err);
    free(cfg);
    /* LoRA / QLoRA: method, lora, quant as the single-GPU fixtures have them */
    ok = ok && hf_peft_read(path, root, &f->s, &err);
    const cJSON *ld = item(set, "load_dtype");
    f->bf16_base = f->s.peft.method == GCKPT_METHOD_LORA && cJSON_IsString(ld) && !strcmp(ld->valuestring, "bfloat16");
    const cJSON *last = cJSON_GetArrayItem(steps, cJSON_GetArraySize(steps) - 1);
    ok = ok && gckpt_json_u64(last, path, "steps[-1].live_at_start_bytes", 0, UINT64_MAX, &f->start, &err) &&
         gckpt_json_u64(last, path, "steps[-1].live_at_end_bytes", 0, UINT64_MAX, &f->end, &err) &&
         gckpt_json_num(last, path, "steps[-1].live_peak_bytes", 0, 1e18, &peak, &err) &&
         gckpt_json_str(last, path, "steps[-1].peak_where", f->where, sizeof f->where, &err);
    f->s.offload = cJSON_IsTrue(item(set, "offload"));
    ok = ok && gckpt_json_u64_opt(root, path, "offload_bytes", 0, UINT64_MAX, 0, &f->offload_bytes, &err);
    const cJSON *kinds = item(item(item(root, "collectives"), "per_step"), "2"), *k;
    cJSON_ArrayForEach(k, kinds) { /* "kind/dtype/phase[/group<n>]" */
        double b = cJSON_GetNumberValue(item(k, "bytes"));
        char key[96];
        snprintf(key, sizeof key, "%s", k->string);
        char *grp = strstr(key, "/group");
        uint32_t gsize = grp ? (uint32_t)strtoul(grp + 6, NULL, 10) : 0;
        if (grp) *grp = 0; /* the key without its group */
        if (gsize && !strncmp(key, "all_reduce/", 11)) {
            f->replicate_group = gsize;
            f->replicate_all_reduce += b;
            f->replicate_all_reduce_calls += (int)cJSON_GetNumberValue(item(k, "calls"));
        } else if (gsize)
            f->shard_group = gsize;
        const char *phase = strrchr(key, '/');
        bool gather = !strncmp(key, "all_gather/", 11);
        if (gather && phase && !strcmp(phase, "/optimizer")) {
            f->gather_opt += b;
            f->gather_opt_calls += (int)cJSON_GetNumberValue(item(k, "calls"));
        }
        if (!phase || !strcmp(phase, "/optimizer")) continue;
        if (gather && !strcmp(phase, "/forward")) f->gather_fwd += b;
        else if (gather) f->gather_bwd += b;
        else f->reduce += b;
        if (!strcmp(phase, "/backward") &&
            (!strcmp(key, "all_reduce/float32/backward") || !strcmp(key, "all_reduce/bfloat16/backward"))) {
            f->grad_all_reduce += b;
            f->grad_all_reduce_calls += (int)cJSON_GetNumberValue(item(k, "calls"));
        }
    }
    /* HSDP: the Trainer's parallelism_config (accelerate's ParallelismConfig) */
    const cJSON *pc = item(item(par, "trainer_args"), "parallelism_config");
    uint32_t dp_replicate = cJSON_IsObject(pc) ? (uint32_t)cJSON_GetNumberValue(item(pc, "dp_replicate_size")) : 0;
    /* CP (tests/data/hf-cp-fsdp, hf-cp-peft): its cp_size (setting.seq stays the whole sequence) */
    uint32_t cp_size = cJSON_IsObject(pc) ? (uint32_t)cJSON_GetNumberValue(item(pc, "cp_size")) : 0;
    cJSON_Delete(root);
    if (!ok) fail_msg("%s", err.msg);
    f->fake = !strcmp(pg, "fake");
    f->rank = (uint32_t)rank;
    f->peak = peak;
    gckpt_setting *s = &f->s;
    s->seq = seq;
    s->micro_batch = mb;
    s->grad_accum = ga;
    s->optimizer = GCKPT_ADAMW;
    s->attention = GCKPT_SDPA;
    s->every_n = (uint32_t)n;
    /* every mode runs the Trainer's bf16=True (the probe names it by what the forward computes in) */
    s->precision = strcmp(prec, "fp32") ? GCKPT_AMP_BF16 : GCKPT_FP32;
    s->layout.gpus = (uint32_t)world;
    s->layout.nodes = 1;
    int pm = gckpt_parallel_from(strcmp(f->mode, "fsdp2") ? f->mode : "fsdp");
    if (pm <= 0) fail_msg("%s: parallel.mode '%s' not understood", path, f->mode);
    s->layout.mode = (uint8_t)pm;
    s->layout.fsdp_keep_gathered = !strcmp(f->variant, "nrf");
    s->layout.dp_replicate = dp_replicate;
    s->layout.cp = cp_size > 1 ? cp_size : 0;
    s->layout.rank = (uint32_t)rank;
    s->layout.ds.overlap_comm = !strcmp(f->variant, "overlap"); /* zero_optimization.overlap_comm true */
    if (!strcmp(f->variant, "tight")) { /* stage3_max_live_parameters (and reuse distance, prefetch) 0 */
        s->layout.ds.set |= GCKPT_DS_MAX_LIVE;
        s->layout.ds.max_live = 0;
    }
    if (!gckpt_layout_check(s, &err)) fail_msg("%s", err.msg);
}

