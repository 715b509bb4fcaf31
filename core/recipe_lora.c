/* LoRA and QLoRA in the recipe (tools/hf_probe/FINDINGS.md R-PEFT-8 to R-PEFT-17; peft 0.21.2
 * tuners/lora/layer.py Linear.forward and tuners/lora/bnb.py; bitsandbytes 0.50.2
 * autograd/_functions.py MatMul4Bit and backends' gemm_4bit fallback):
 *  - the base linear is frozen: it saves no input for a weight gradient (recipe_ops.c);
 *  - a 4-bit base dequantizes its whole weight in the compute dtype for each use
 *    (forward, every recompute, backward) and frees it when the op returns; it saves
 *    nothing but the packed weight; its output is cast back to the input's dtype;
 *  - the adapter branch: x.to(fp32) (lora.Linear always when x is not fp32; the
 *    bitsandbytes LoRA layers only without autocast on CUDA, always on the CPU target:
 *    12.10 C2), dropout
 *    (CUDA native_dropout's bool mask, the CPU target's composite: dropout()), lora_A
 *    [r, in], lora_B [out, r] (fp32, trainable), * alpha / r, added to the base output
 *    and cast back to its dtype. */
#include "recipe_tracer.h"

#include <stdio.h>
#include <string.h>

static bool targeted(const tracer *tr, gckpt_lora_target t)
{
    return gckpt_peft_on(tr->peft) && (tr->peft->targets & (1u << t));
}

int linear_weight(tracer *tr, const char *name, uint64_t out_f, uint64_t in_f, bool is_conv1d)
{
    if (!gckpt_peft_quantized(tr->peft))
        return is_conv1d ? param(tr, name, in_f, out_f, GCKPT_ROLE_MATRIX) : param(tr, name, out_f, in_f, GCKPT_ROLE_MATRIX);
    /* bitsandbytes replaces Conv1D too, its weight transposed to [out, in] (12.1) */
    int w = param(tr, name, out_f, in_f, GCKPT_ROLE_MATRIX);
    tr->r->t[w].dtype = tr->peft->quant == GCKPT_QUANT_INT8 ? GCKPT_DT_I8 : GCKPT_DT_NF4;
    return w;
}

void quant_bias(tracer *tr, int x, int w, int bias)
{
    /* the first forward casts the bias for good (FINDINGS R-QUANT-3): Linear4bit to the compute
     * dtype, Linear8bitLt to its input's dtype */
    bool quant = dt(tr, w) == GCKPT_DT_NF4 || dt(tr, w) == GCKPT_DT_I8;
    if (quant && bias >= 0) tr->r->t[bias].dtype = dt(tr, w) == GCKPT_DT_I8 ? dt(tr, x) : tr->peft->compute_dtype;
}

/* Linear4bit / Linear8bitLt's forward on a frozen quantized weight: x.to(compute) (4-bit),
 * the dequantized weight as a forward temporary of the op and again in its backward
 * (fws_fixed / bws_fixed), F.linear, .to(x's dtype) (4-bit). Nothing saved. */
static int quant_linear(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name)
{
    bool int8 = dt(tr, w) == GCKPT_DT_I8;
    quant_bias(tr, x, w, bias);
    char nm[48];
    snprintf(nm, sizeof nm, "%s.cast_in", name);
    uint64_t n = out_f * in_f, deq;
    int xc, o;
    if (int8) {
        /* MatMul8bitFp (CPU): the int8 weight dequantized to the input's dtype, F.linear
         * (under autocast on its bf16 casts of input and weight: output bf16); ctx.A keeps
         * the input until the graph is freed, also in a checkpointed layer (FINDINGS R-QUANT-9,
         * R-QUANT-16) */
        uint8_t xdt = dt(tr, x);
        xc = autocast_to(tr, x, tr->compute_dt, nm);
        o = linear_node(tr, xc, w, bias, in_f, out_f, name, dt(tr, xc), (int[]){x, -1});
        last_op(tr)->ctx_keep = true;
        deq = n * gckpt_dtype_size((gckpt_dtype)xdt) + (tr->amp ? n * gckpt_dtype_size((gckpt_dtype)tr->compute_dt) : 0);
    } else {
        xc = cast_to(tr, x, tr->peft->compute_dtype, nm);
        o = linear_node(tr, xc, w, bias, in_f, out_f, name, tr->peft->compute_dtype, (int[]){-1, -1});
        /* the fp32 absmax and its offset copy with double quantization: 2 x 4 nb, one
         * of them at a time */
        deq = n * gckpt_dtype_size((gckpt_dtype)tr->peft->compute_dtype) +
              (tr->peft->double_quant ? 4 * ((n + GCKPT_QUANT_BLOCK - 1) / GCKPT_QUANT_BLOCK) : 0);
    }
    gckpt_op *op = last_op(tr);
    op->fws_fixed = deq; /* the dequantized weight [out, in] */
    op->bws_fixed = op->fws_fixed;
    op->dequant = int8 ? GCKPT_QUANT_INT8 : tr->peft->quant;
    if (int8) return o;
    snprintf(nm, sizeof nm, "%s.to_in", name);
    return cast_to(tr, o, dt(tr, x), nm);
}

int base_linear(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, const char *name)
{
    bool quant = dt(tr, w) == GCKPT_DT_NF4 || dt(tr, w) == GCKPT_DT_I8;
    return quant ? quant_linear(tr, x, w, bias, in_f, out_f, name) : linear(tr, x, w, bias, in_f, out_f, name);
}

int lora_linear(tracer *tr, int x, int w, int bias, uint64_t in_f, uint64_t out_f, gckpt_lora_target t,
                bool is_conv1d)
{
    const char *name = gckpt_lora_target_bare(t);
    bool quant = dt(tr, w) == GCKPT_DT_NF4 || dt(tr, w) == GCKPT_DT_I8;
    int result = quant ? quant_linear(tr, x, w, bias, in_f, out_f, name)
                       : is_conv1d ? conv1d(tr, x, w, bias, in_f, out_f, name) : linear(tr, x, w, bias, in_f, out_f, name);
    if (!targeted(tr, t)) return result;
    const gckpt_peft *pf = tr->peft;
    char pfx[48];
    const char *outer = enter_module(tr, name, pfx, sizeof pfx);
    /* bnb.py's layers cast only when torch.is_autocast_enabled() (CUDA's) is False: on
     * CUDA under autocast no cast; a CPU run answers False (12.10 C2) */
    bool convert = !quant || !tr->amp || !tr->cuda_lists; /* bnb.py's requires_conversion (lora.Linear: always) */
    /* the adapters' dtype: fp32 (peft's autocast_adapter_dtype), or the compute dtype a parallel
     * wrapper casts them to (FSDP2's all-gather, DeepSpeed's bf16: no cast of x then) */
    uint8_t adt = pf->wrapper_cast ? tr->compute_dt : F32;
    int xa = convert ? cast_to(tr, x, adt, "to_f32") : x;
    int d = dropout(tr, xa, pf->dropout, "lora_dropout");
    int a = tnew(tr, "lora_A.weight", GCKPT_T_PARAM, adt, fixed_shape(pf->rank, in_f), true);
    int b = tnew(tr, "lora_B.weight", GCKPT_T_PARAM, adt, fixed_shape(out_f, pf->rank), true);
    int ya = linear(tr, d, a, -1, in_f, pf->rank, "lora_A");
    hold_here(tr, d); /* lora_A's argument until it returns, past autocast's cast of it */
    int yb = linear(tr, ya, b, -1, pf->rank, out_f, "lora_B");
    int sc = scal(tr, yb, "scaling", pf->alpha / (double)pf->rank, 0);
    /* bnb.py: where it cast x (requires_conversion) it casts the adapter's output to the
     * base output's dtype before the sum, the scaled output freed by the rebinding */
    if (quant && convert) sc = cast_to(tr, sc, dt(tr, result), "to_expected");
    int sum = add(tr, result, sc, "add");
    hold_here(tr, result); /* forward's `result` until the sum rebinds it */
    int o = cast_to(tr, sum, dt(tr, result), "to_result");
    hold_here(tr, x); /* the module's argument and its cast (`x` rebound) until it returns */
    hold_here(tr, xa);
    tr->pfx = outer;
    return o;
}

int mts_param(tracer *tr, int original, gckpt_mts which, const char *name)
{
    if (!gckpt_peft_on(tr->peft) || !(tr->peft->modules_to_save & which)) return original;
    const gckpt_tensor *o = &tr->r->t[original];
    int c = tnew(tr, name, GCKPT_T_PARAM, o->dtype, o->shape, true);
    tr->r->t[c].role = o->role;
    return c;
}
