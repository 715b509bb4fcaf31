/* LoRA under tensor parallelism alone (gckpt-plan --tp T --method lora; FINDINGS R-TP-12, R-TP-19): peft
 * 0.21.2 hooks a colwise base layer's adapter as transformers hooks the layer (peft tuners/lora/model.py
 * add_lora_tp_hooks_dtensor): lora_B [out / T, r] its rows, a Shard(0) DTensor under ColwiseParallel
 * (input Replicate: the input's gradient all-reduced in the backward; output Shard(-1) kept local),
 * lora_A [r, in] replicated (a plain parameter, the same on every rank). The adapter's local output adds
 * to the base layer's local output; nothing is all-reduced in the forward. lora_A's gradient is whole and
 * the same on every rank once lora_B's input gradient is summed; the Trainer's all-reduce (AVG) of it
 * on the synchronising micro-step (transformers trainer.py _sync_replicated_trainable_parameters) averages
 * T equal values (at T = 2 exactly the value; else at most the running sum's rounding) and is not run, as
 * the norms' under full fine-tuning (interp_tp.c; FINDINGS R-TP-19). What
 * gckpt-plan refuses (gckpt_tp_peft_ok: QLoRA, rowwise targets, TP x FSDP / DDP, q / k norms,
 * modules_to_save) gckpt-run refuses with the same line. */
#include "interp_parallel.h"

#include <string.h>

#include "gckpt/core/peft.h"
#include "gckpt/core/tp.h"

/* The adapters of the colwise layers peft hooks (R-TP-12), by parameter name; `inter`: the layer's
 * output is the intermediate size (torch.chunk: uneven), else heads x head_dim. */
static const struct {
    const char *suffix;
    bool sharded, inter;
} TP_LORA[] = {
    {"q_proj.lora_B.weight", true, false},    {"k_proj.lora_B.weight", true, false},
    {"v_proj.lora_B.weight", true, false},    {"gate_proj.lora_B.weight", true, true},
    {"up_proj.lora_B.weight", true, true},    {"lora_A.weight", false, false},
};

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int exec_tp_lora_role(const char *name, bool *inter)
{
    for (size_t j = 0; j < sizeof TP_LORA / sizeof TP_LORA[0]; j++)
        if (ends_with(name, TP_LORA[j].suffix)) {
            *inter = TP_LORA[j].inter;
            return TP_LORA[j].sharded ? 1 : 0;
        }
    return -1;
}

bool exec_tp_lora_ok(const gckpt_exec *x, gckpt_err *err)
{
    const gckpt_setting *s = &x->set;
    if (!gckpt_peft_on(&s->peft)) return true;
    /* TP x FSDP / DDP: the mesh's data-parallel sizes (gckpt_tp_hsdp_layout) */
    uint32_t R = s->layout.dp_replicate > 1 ? s->layout.dp_replicate : 1;
    uint32_t S = gckpt_layout_multi(&s->layout) ? gckpt_layout_world(&s->layout) / R : 1;
    gckpt_err why = {{0}};
    if (!gckpt_tp_peft_ok(&s->peft, &x->tp_full, s->layout.tp, S > 1 ? S : 0, R > 1 ? R : 0, &why)) {
        gckpt_seterr(err, "%s", why.msg);
        return false;
    }
    return true;
}
