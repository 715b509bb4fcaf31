/* Per-rank persistent memory of DDP, FSDP2 and DeepSpeed ZeRO (include/gckpt/core/parallel.h
 * says the rules and where they were measured). */
#include "gckpt/core/parallel.h"

#include <string.h>

#define ADAMW_STEP 4     /* torch AdamW's `step`: an fp32 scalar per parameter (group) */
#define MESH_BYTES 24    /* FSDP2's DeviceMesh: three int64 per rank */
#define ZERO12_NORM 4    /* ZeRO-1/2: the fp32 gradient-norm scalar kept between steps */
#define ZERO3_SCALARS 9  /* ZeRO-3: inf_or_nan_tracker (bool) + 8 B of scalars */
#define DDP_USED_MAP 8   /* DDP find_unused_parameters: local_used_map + its device copy, int32 each */

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint32_t gckpt_layout_world(const gckpt_layout *l)
{
    return (l->gpus ? l->gpus : 1) * (l->nodes ? l->nodes : 1);
}

uint64_t gckpt_ds_reduce_bucket(const gckpt_model *m) { return m->hidden * m->hidden; }
uint64_t gckpt_ds_prefetch_bucket(const gckpt_model *m) { return m->hidden * m->hidden * 9 / 10; }
uint64_t gckpt_ds_persistence_threshold(const gckpt_model *m) { return 10 * m->hidden; }

bool gckpt_layout_check(const gckpt_setting *s, gckpt_err *err)
{
    const char *mode = gckpt_parallel_names[s->layout.mode];
    if (s->layout.mode == GCKPT_PAR_NONE) return true;
    if (gckpt_layout_world(&s->layout) < 2) {
        gckpt_seterr(err, "--parallel %s needs more than one GPU (--gpus, --nodes)", mode);
        return false;
    }
    if (s->peft.method != GCKPT_METHOD_FULL) {
        gckpt_seterr(err, "--parallel %s: only full fine-tuning is planned per rank (LoRA/QLoRA on several GPUs "
                          "is not measured)", mode);
        return false;
    }
    if (s->optimizer != GCKPT_ADAMW) {
        gckpt_seterr(err, "--parallel %s: only --optimizer adamw is planned per rank (FINDINGS 13 measured "
                          "the Trainer's adamw_torch_fused)", mode);
        return false;
    }
    if (s->precision != GCKPT_FP32 && s->precision != GCKPT_AMP_BF16) {
        gckpt_seterr(err, "--parallel %s: only --precision amp-bf16 (the Trainer's bf16=True) or fp32 are "
                          "planned per rank", mode);
        return false;
    }
    return true;
}

/* A parameter's dim 0 and the elements of one row (a 1-D tensor is stored as one row). */
static uint64_t dim0(const gckpt_param *p) { return p->rows == 1 ? p->cols : p->rows; }
static uint64_t row_numel(const gckpt_param *p) { return p->rows == 1 ? 1 : p->cols; }

void gckpt_params_shard(gckpt_params *ps, const gckpt_model *m, const gckpt_layout *l)
{
    uint32_t n = l->mode == GCKPT_PAR_NONE ? 1 : gckpt_layout_world(l);
    for (int i = 0; i < ps->n; i++) {
        gckpt_param *p = &ps->p[i];
        /* transformers Trainer.get_decay_parameter_names: norms and biases get no decay */
        p->shard.group = p->role == GCKPT_ROLE_NORM_WEIGHT || p->role == GCKPT_ROLE_BIAS;
        p->shard.ways = n;
        p->shard.dim = 0;
        p->shard.whole = false;
        p->shard.part = 0;
        switch ((gckpt_parallel)l->mode) {
        case GCKPT_PAR_FSDP:
            p->shard.how = GCKPT_SHARD_DIM0;
            p->shard.buffers = GCKPT_SHARD_WEIGHT | GCKPT_SHARD_GRAD | GCKPT_SHARD_STATES;
            p->shard.part = cdiv(dim0(p), n) * row_numel(p);
            break;
        case GCKPT_PAR_ZERO1:
        case GCKPT_PAR_ZERO2:
            p->shard.how = GCKPT_SHARD_FLAT;
            p->shard.buffers = GCKPT_SHARD_STATES | (l->mode == GCKPT_PAR_ZERO2 ? GCKPT_SHARD_GRAD : 0);
            break;
        case GCKPT_PAR_ZERO3:
            p->shard.how = GCKPT_SHARD_FLAT;
            p->shard.buffers = GCKPT_SHARD_WEIGHT | GCKPT_SHARD_GRAD | GCKPT_SHARD_STATES;
            p->shard.part = cdiv(p->numel, n);
            p->shard.whole = p->numel < gckpt_ds_persistence_threshold(m);
            break;
        default:
            p->shard.how = GCKPT_SHARD_NONE;
            p->shard.buffers = 0;
            p->shard.ways = 1;
            break;
        }
    }
}

/* Rows of FSDP2's unpadded local shard on rank r (torch.chunk: the last ranks may get fewer
 * or none), times the elements of a row. */
static uint64_t fsdp_local(const gckpt_param *p, uint32_t n, uint32_t r)
{
    uint64_t c = cdiv(dim0(p), n), lo = (uint64_t)r * c, d = dim0(p);
    uint64_t rows = lo >= d ? 0 : (d - lo < c ? d - lo : c);
    return rows * row_numel(p);
}

/* The model's buffers: rotary inv_freq and original_inv_freq, fp32 [head_dim / 2] each
 * (GPT-2 has none that the Trainer keeps on the device: unverified, FINDINGS 13 measured llama
 * and qwen3). */
static uint64_t model_buffers(const gckpt_model *m, uint64_t round)
{
    return m->family == GCKPT_FAMILY_LLAMA ? 2 * gckpt_round_up(4 * (m->head_dim / 2), round) : 0;
}

void gckpt_rank_persistent(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                           uint64_t round, gckpt_rank_bytes *out)
{
    memset(out, 0, sizeof *out);
    uint32_t n = gckpt_layout_world(&s->layout);
    /* ZeRO's model dtype: bf16 under the Trainer's bf16=True, else fp32 */
    uint64_t zs = s->precision == GCKPT_FP32 ? 4 : 2;
    uint64_t tensors = 0, group_numel[2] = {0, 0}, q = 0;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        tensors += p->copies;
        group_numel[p->shard.group] += p->copies * p->numel;
        q += p->copies * p->shard.part;
        switch ((gckpt_parallel)s->layout.mode) {
        case GCKPT_PAR_DDP:
            out->weights += p->copies * p->weight.bytes;
            out->states += p->copies * (p->state[0].bytes + p->state[1].bytes);
            break;
        case GCKPT_PAR_FSDP: /* fp32 sharded parameters, whatever the MixedPrecisionPolicy computes in */
            out->weights += p->copies * gckpt_round_up(4 * p->shard.part, round);
            out->states += p->copies * 2 * gckpt_round_up(4 * fsdp_local(p, n, rank), round);
            break;
        case GCKPT_PAR_ZERO3:
            out->weights += p->copies * gckpt_round_up(zs * p->shard.part, round);
            if (p->shard.whole) out->weights += p->copies * gckpt_round_up(zs * p->numel, round);
            break;
        default: break;
        }
    }
    int ngroups = (group_numel[0] > 0) + (group_numel[1] > 0);
    switch ((gckpt_parallel)s->layout.mode) {
    case GCKPT_PAR_DDP:
        out->grads = gckpt_round_up(ps->grad_bytes, round); /* the buckets: a flat copy of every gradient */
        out->scalars = ADAMW_STEP * tensors + (s->every_n ? 0 : DDP_USED_MAP * tensors);
        break;
    case GCKPT_PAR_FSDP:
        out->scalars = ADAMW_STEP * tensors + MESH_BYTES * (uint64_t)n;
        break;
    case GCKPT_PAR_ZERO1:
    case GCKPT_PAR_ZERO2:
        for (int g = 0; g < 2; g++) {
            if (!group_numel[g]) continue;
            uint64_t a = cdiv(group_numel[g], 2 * (uint64_t)n) * 2 * n; /* padded flat group */
            out->weights += gckpt_round_up(a * zs, round);
            out->master += gckpt_round_up(a / n * 4, round);
            out->states += 2 * gckpt_round_up(a / n * 4, round);
        }
        out->scalars = ADAMW_STEP * (uint64_t)ngroups + ZERO12_NORM;
        break;
    case GCKPT_PAR_ZERO3:
        out->master = gckpt_round_up(4 * q, round);
        out->states = 2 * gckpt_round_up(4 * q, round);
        out->grads = gckpt_round_up(zs * q, round) + gckpt_round_up(zs * gckpt_ds_reduce_bucket(m), round);
        out->scalars = ADAMW_STEP * (uint64_t)ngroups + ZERO3_SCALARS;
        break;
    default: break;
    }
    out->buffers = model_buffers(m, round);
    out->total = out->weights + out->grads + out->master + out->states + out->scalars + out->buffers;
}
