/* The fused losses' temporaries and what is planned (gckpt/core/fused_loss.h), each rule
 * with the source line it follows. liger-kernel 0.8.5, ops/fused_linear_cross_entropy.py,
 * fused_linear_cross_entropy_forward (reduction "sum" / "mean": the gradients are made in
 * the forward); cut-cross-entropy 25.1.1, cce.py / utils.py / cce_backward.py. */
#include "gckpt/core/fused_loss.h"

#include "gckpt/core/dtype.h"
#include "gckpt/core/families.h"
#include "gckpt/util/util.h"

static uint64_t next_pow2(uint64_t x)
{
    uint64_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

uint64_t gckpt_liger_chunk_rows(uint64_t bt, uint64_t vocab, uint64_t hidden, uint64_t mem_const)
{
    if (!bt || !hidden) return 0;
    /* inc_factor = triton.cdiv(V, chunk_mem_const * H);
     * chunk_size = min(triton.next_power_of_2(triton.cdiv(BT, inc_factor)), BT) */
    uint64_t inc = cdiv(vocab, hidden * (mem_const ? mem_const : 1));
    if (!inc) inc = 1;
    uint64_t c = next_pow2(cdiv(bt, inc));
    return c < bt ? c : bt;
}

/* one allocation of n elements of `size` bytes, rounded, added to *sum */
static bool piece(uint64_t n, uint64_t size, uint64_t round, uint64_t *sum)
{
    uint64_t b;
    return gckpt_mul(n, size, &b) && gckpt_add(*sum, gckpt_round_up(b, round), sum);
}

bool gckpt_fused_loss_ws(const gckpt_op *op, bool bwd, uint64_t tokens, uint8_t x_dtype, uint8_t compute_dtype,
                         bool amp, uint64_t round, uint64_t *bytes)
{
    uint64_t V = op->width, H = op->in_f, s = 0;
    *bytes = 0;
    if (op->prim == GCKPT_P_FUSED_LCE && op->fused_loss == GCKPT_LOSS_LIGER) {
        if (bwd) return true; /* backward: the element_mul_kernel scales the kept gradients in place */
        uint64_t c = gckpt_liger_chunk_rows(tokens, V, H, op->chunk_mem_const);
        /* loss_1d = torch.zeros(BT, fp32); target_mask = target != ignore_index (bool, a local
         * until the function returns) */
        if (!piece(tokens, 4, round, &s) || !piece(tokens, 1, round, &s)) return false;
        if (!amp) {
            /* _can_use_mm_out (grad mode is off in an autograd.Function's forward, no
             * autocast, operands of one dtype): logits_storage = torch.empty((chunk_size, V),
             * _input.dtype), reused by every chunk */
            if (!piece(c, V * gckpt_dtype_size((gckpt_dtype)x_dtype), round, &s)) return false;
        } else {
            /* under autocast (an fp32 input, not the autocast dtype): logits_chunk =
             * _input_chunk @ weight.t() in the autocast dtype on casts of the chunk and of
             * weight.t() (a view made with grad mode off: never in autocast's cache, cast by
             * every chunk's GEMM), while chunk 0's input-gradient GEMM (grad_logits @ weight)
             * left the weight's cached cast [V, H] (kept to autocast's exit, the forward's end):
             * from the second chunk on two copies of the weight live at the logits GEMM (one
             * with a single chunk). Measured with the CPU's autocast, which caches alike. */
            uint64_t cs = gckpt_dtype_size((gckpt_dtype)compute_dtype), copies = c && cdiv(tokens, c) > 1 ? 2 : 1;
            for (uint64_t k = 0; k < copies; k++)
                if (!piece(V, H * cs, round, &s)) return false;
            if (!piece(c, V * cs, round, &s) || !piece(c, H * cs, round, &s))
                return false;
        }
    } else if (op->prim == GCKPT_P_FUSED_LCE && op->fused_loss == GCKPT_LOSS_CCE) {
        if (!bwd) {
            /* neg_dot = indexed_neg_dot_forward_kernel(...): e.new_zeros((B,), fp32), then
             * nll = neg_dot.add_(lse); loss = nll.mean(): gone when the function returns */
            if (!piece(tokens, 4, round, &s)) return false;
        } else {
            /* at the kernel: vocab_ordering = sort_logit_avg(logit_avg), int32 [V] (its int64
             * argsort is gone before de and dc are made, a smaller moment); cce_backward_kernel:
             * nd_locks = cdiv(H, 64), de_locks int32 [cdiv(n, nd_locks), nd_locks], dc_locks
             * int32 [cdiv(V, nd_locks), nd_locks]. Measured by tools/hf_probe/cce_rerun.py with
             * sort_logit_avg eager (what the torch.compile'd one allocates is unverified). */
            uint64_t nd = cdiv(H, 64);
            if (!nd) nd = 1;
            if (!piece(V, 4, round, &s) || !piece(cdiv(tokens, nd) * nd, 4, round, &s) ||
                !piece(cdiv(V, nd) * nd, 4, round, &s))
                return false;
        }
    } else if (op->prim == GCKPT_P_CCE_LSE && !bwd) {
        /* The forward's peak up to the lse kernel, in excess of what the op is planned to
         * hold there (the valids, made with the labels; lse fp32 [n]; logit_avg fp32 [V]).
         * _build_flat_valids (shift): (targets[..., 1:] != ignore_index).nonzero() int64
         * [n, 2] and its .to(torch.int32) [n, 2] alive at once (the bool mask gone by then;
         * the valids, lse and logit_avg not made yet); at the launch, valids, lse, logit_avg
         * and locks = new_full((cdiv(n, 128),), uint32). Measured: cce_rerun.py. */
        uint64_t pairs = 0, held = 0, locks = 0;
        if (!piece(tokens, 16, round, &pairs) || !piece(tokens, 8, round, &pairs) || !piece(tokens, 8, round, &held) ||
            !piece(tokens, 4, round, &held) || !piece(V, 4, round, &held) || !piece(cdiv(tokens, 128), 4, round, &locks))
            return false;
        s = pairs > held + locks ? pairs - held : locks;
    }
    *bytes = s;
    return true;
}

bool gckpt_fused_loss_supported(const gckpt_model *m, gckpt_precision p, gckpt_loss loss, const char **why)
{
    const gckpt_model_type_info *ty = NULL;
    *why = NULL;
    if (loss == GCKPT_LOSS_HF) return true;
    (void)gckpt_family_by_type(m->model_type, &ty);
    if (loss == GCKPT_LOSS_LIGER && (!ty || ty->liger == GCKPT_LIGER_NONE)) {
        *why = "liger-kernel 0.8.5 has no apply_liger_kernel_to_ function for this model_type "
               "(use_liger_kernel=True leaves it unpatched)";
        return false;
    }
    if (loss == GCKPT_LOSS_LIGER && ty->liger == GCKPT_LIGER_NO_FLCE) {
        *why = "liger-kernel 0.8.5's apply_liger_kernel_to_ function for this model_type has no fused linear "
               "cross-entropy (fused_linear_cross_entropy=True raises NotImplementedError; use_liger_kernel=True "
               "keeps the full logits, with Liger's cross_entropy)";
        return false;
    }
    if (m->multipliers) { /* Granite's logits / logits_scaling: not read from the fused kernels */
        *why = "the logits_scaling of this model_type is not modelled with a fused loss";
        return false;
    }
    if (loss == GCKPT_LOSS_CCE && p != GCKPT_BF16) {
        *why = "cut-cross-entropy's backward asserts bf16 or fp16 hidden states (cce_backward.py); plan it with "
               "--precision bf16";
        return false;
    }
    if (loss == GCKPT_LOSS_LIGER && p == GCKPT_AMP_FP16) {
        *why = "liger under amp-fp16 is not modelled (GradScaler's scaled loss); plan it with --precision bf16, "
               "amp-bf16 or fp32";
        return false;
    }
    return true;
}
