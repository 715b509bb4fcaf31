/* Context parallelism per rank (gckpt/core/cp.h): the rules of FINDINGS R-CP, measured by
 * tools/hf_probe/cp_ring_rerun.py in tests/data/hf-cp (test_parallel_cp checks them there). */
#include "gckpt/core/cp.h"

#include "gckpt/core/dtype.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/step.h"

bool gckpt_cp_balanced(uint64_t seq, uint32_t cp) { return cp > 1 && seq % (2ull * cp) == 0; }

double gckpt_cp_attention_units(uint64_t seq, uint32_t cp, uint32_t *calls)
{
    *calls = cp > 1 ? cp : 1;
    if (cp < 2) return 1.0;
    return gckpt_cp_balanced(seq, cp) ? (double)cp : 2.0 * cp - 1.0;
}

bool gckpt_cp_check(const gckpt_model *m, uint64_t seq, uint32_t cp, gckpt_attention attn, gckpt_err *err)
{
    if (cp < 2) {
        gckpt_seterr(err, "cp_size %u: context parallelism needs at least 2 ranks", cp);
        return false;
    }
    if (seq % cp) {
        gckpt_seterr(err, "cp_size %u: the sequence of %llu tokens does not divide by it (torch's context_parallel "
                          "splits it in unequal pieces and the ring attention's first all-gather fails; neither "
                          "accelerate nor the Trainer checks; FINDINGS R-CP-4)", cp, (unsigned long long)seq);
        return false;
    }
    if (attn != GCKPT_SDPA) {
        gckpt_seterr(err, "cp_size %u: context parallelism is supported only with SDPA attention (the Trainer's "
                          "_prepare_context_parallel_inputs raises; FINDINGS R-CP-2)", cp);
        return false;
    }
    if (m->sliding_window || m->sliding_layers) {
        gckpt_seterr(err, "cp_size %u: context parallelism does not support sliding-window attention layers "
                          "(accelerate's _attach_context_parallel_hooks raises; FINDINGS R-CP-3)", cp);
        return false;
    }
    /* the structure measured (R-CP-7: the tiny llama); anything else is another recipe under the ring */
    const char *what = m->tied ? "a tied lm_head (tie_word_embeddings)"
                     : (m->qkv_bias || m->o_bias || m->mlp_bias) ? "linear biases"
                     : m->experts ? "mixture-of-experts layers"
                     : m->mla ? "latent attention (MLA)"
                     : (m->fused_qkv || m->fused_gate_up) ? "fused projections"
                     : (m->sandwich_norms || m->post_norms_only || m->qk_norm || m->qk_norm_full || m->qk_norm_late)
                         ? "its norms' layout"
                     : m->learned_positions || m->parallel_residual || m->attn_sinks ? "its block structure"
                     : m->rope_tables != 1 || m->rotary_dim != m->head_dim ? "its rotary tables"
                     : NULL;
    if (what) {
        gckpt_seterr(err, "context parallelism is measured for llama-like models only (FINDINGS R-CP-7); this model "
                          "has %s", what);
        return false;
    }
    return true;
}

uint64_t gckpt_cp_positions(uint64_t seq, uint32_t cp, uint32_t r, uint64_t *out)
{
    const uint64_t n = seq / cp;
    if (!gckpt_cp_balanced(seq, cp)) { /* contiguous pieces (torch.chunk of a multiple of cp) */
        for (uint64_t i = 0; i < n; i++) out[i] = (uint64_t)r * n + i;
        return n;
    }
    /* _HeadTailLoadBalancer: k = S / 2C; rank r: [r k, (r + 1) k) then [S - (r + 1) k, S - r k) */
    const uint64_t k = seq / (2ull * cp);
    for (uint64_t i = 0; i < k; i++) {
        out[i] = (uint64_t)r * k + i;
        out[k + i] = seq - ((uint64_t)r + 1) * k + i;
    }
    return n;
}

static gckpt_dtype compute_dtype(const gckpt_setting *s)
{
    return s->precision == GCKPT_FP32 ? GCKPT_DT_F32 : s->precision == GCKPT_AMP_FP16 ? GCKPT_DT_F16 : GCKPT_DT_BF16;
}

bool gckpt_cp_oproj_input_saved(const gckpt_setting *s)
{
    /* full fine-tuning: o_proj's weight trains, F.linear saves its input. LoRA: the frozen base linear
     * saves none (recipe_lora.c); an o_proj adapter's lora_A saves what lora_dropout returns, a new
     * tensor unless the dropout is 0 (under CP x FSDP2 the adapters compute in the input's dtype, so
     * no cast comes between); q,v or dropout > 0: the copy dies with the attention (R-CP-23) */
    if (!gckpt_peft_on(&s->peft)) return true;
    return (s->peft.targets & (1u << GCKPT_LT_O)) && s->peft.dropout == 0;
}

uint64_t gckpt_cp_layer_extra(const gckpt_model *m, const gckpt_setting *s, uint32_t cp, uint32_t r, bool balanced)
{
    if (!balanced || r + 1 >= cp || !gckpt_cp_oproj_input_saved(s)) return 0;
    /* o_proj's input copied out of the merged output (_partial_update's cat leaves it standard-laid) */
    return s->micro_batch * s->seq * gckpt_q_dim(m) * (uint64_t)gckpt_dtype_size(compute_dtype(s));
}

uint64_t gckpt_cp_rope_extra(const gckpt_model *m, const gckpt_setting *s)
{
    /* cos and sin follow the hidden states: bf16 for a bf16 model, fp32 otherwise (autocast's fp32
     * residual; not measured under autocast) */
    const uint64_t e = s->precision == GCKPT_BF16 ? 2 : 4;
    return 2 * (s->micro_batch - 1) * s->seq * m->rotary_dim * e;
}

uint64_t gckpt_cp_ids_extra(const gckpt_setting *s, uint32_t cp)
{
    return s->micro_batch * s->seq * (uint64_t)(cp - 1) * 8;
}

uint64_t gckpt_cp_extra_at(const gckpt_model *m, const gckpt_setting *s, uint64_t seq, uint32_t cp, uint32_t r,
                           unsigned hidden_size, unsigned compute_size, uint64_t copies)
{
    const uint64_t B = s->micro_batch, n = s->seq;
    /* the Trainer's buffers, split in place (their storages stay whole): input_ids beyond its local
     * [B, S / C], labels and shift_labels [B, S], position_ids' arange(S); five local [B, S / C] int64
     * copies (context_parallel's shard clones) */
    uint64_t x = B * seq / cp * (cp - 1) * 8 + 2 * B * seq * 8 + seq * 8 + 5 * B * n * 8;
    /* the rotary tables per batch row (position_ids expanded), in the hidden states' dtype */
    x += 2 * (B - 1) * n * m->rotary_dim * hidden_size;
    /* the partial-merge ranks' copies of o_proj's input */
    if (gckpt_cp_balanced(seq, cp) && r + 1 < cp && gckpt_cp_oproj_input_saved(s))
        x += copies * B * n * gckpt_q_dim(m) * compute_size;
    return x;
}

uint64_t gckpt_cp_step_extra(const gckpt_model *m, const gckpt_setting *s, uint64_t seq, uint32_t cp, uint32_t r,
                             unsigned hidden_size, unsigned compute_size)
{
    /* at a backward peak: every plain layer's copy, and the recomputed layer's */
    const uint64_t L = m->layers, ck = gckpt_checkpointed_count(s->every_n, L);
    return gckpt_cp_extra_at(m, s, seq, cp, r, hidden_size, compute_size, (L - ck) + (ck ? 1 : 0));
}

static void add(gckpt_cp_coll *o, size_t *n, int kind, gckpt_dtype dt, int phase, uint64_t calls, double bytes)
{
    if (!calls) return;
    o[(*n)++] = (gckpt_cp_coll){(uint8_t)kind, (uint8_t)dt, (uint8_t)phase, calls, bytes};
}

size_t gckpt_cp_collectives(const gckpt_model *m, const gckpt_setting *s, uint32_t cp, gckpt_cp_comm comm,
                            gckpt_cp_coll out[GCKPT_CP_MAX_COLL])
{
    size_t n = 0;
    const uint64_t L = m->layers, ck = gckpt_checkpointed_count(s->every_n, L);
    const gckpt_dtype cd = compute_dtype(s);
    /* cat(K, V) of the local piece: 2 B Hkv (S / C) D elements */
    const double kv = 2.0 * (double)s->micro_batch * (double)s->seq * (double)gckpt_kv_dim(m);
    const double kvb = kv * gckpt_dtype_size(cd);
    /* K/V forward: one all-gather, or C - 1 sends to the next rank; again for each recomputed layer and
     * in the ring's backward */
    const int kk = comm == GCKPT_CP_ALLGATHER ? GCKPT_CP_ALL_GATHER : GCKPT_CP_PERMUTE;
    const uint64_t per = comm == GCKPT_CP_ALLGATHER ? 1 : cp - 1;
    add(out, &n, kk, cd, GCKPT_CP_FWD, per * L, kvb);
    add(out, &n, kk, cd, GCKPT_CP_BWD, per * (L + ck), kvb);
    /* dK/dV: C sends per layer, always all-to-all, accumulated in fp32 (convert_to_f32) */
    add(out, &n, GCKPT_CP_PERMUTE, GCKPT_DT_F32, GCKPT_CP_BWD, (uint64_t)cp * L, kv * 4);
    return n;
}
