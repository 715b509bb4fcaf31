/* The vision towers as a recipe (transformers 5.24 modeling_clip.py, modeling_siglip.py):
 * CLIP's (llava, llava_next) and SigLIP's (gemma3) embedding (the pixels, the patch Conv2d,
 * CLIP's class token and pre_layrnorm, the learned positions), one encoder layer, and as the
 * head llava's (the tower's tail, post_layernorm, and the projector) or Gemma 3's
 * (post_layernorm and the pooled projector, R-VLM-13). Rows are images: the recipe is built at micro-batch = the
 * images (LLaVA-NeXT: tiles) of a micro-batch and sequence = the tower's positions per image
 * (gckpt_vision_positions). Attention is bidirectional: SDPA without a mask saves what the
 * causal kernel saves (q, k, v, out, lse: measured, CPU flash); its FLOPs are the whole score
 * matrix's. What needs a gradient follows the tower's mode (gckpt_tower_grad, FINDINGS
 * R-VLM-3); what each op saves is R-VLM-10. Qwen2.5-VL's tower (its Conv3d embedding, window
 * permutation and 2-D rotary, its block, the patch merger as the head) is a second table
 * row (R-VLM-20..22): rows its patches. mllama's tower (its tiled embedding, a local or a
 * gated global encoder layer, layernorm_post, the post-tile embedding and the projector) for
 * its saved bytes (gckpt_vision_layer_recipe_build, R-VLM-30) and in a step's order (tiled_trace,
 * R-VLM-62, R-VLM-63). */
#include "recipe_tracer.h"

#include "gckpt/core/vision.h"

#include <stdio.h>
#include <string.h>

/* The patch Conv2d (stride = kernel; SigLIP's with a bias) on the pixels cast to the weight's
 * dtype: ConvolutionBackward0 saves its input and its weight whenever it has a node (a conv's
 * backward formula takes both, unlike mm's), under autocast their compute-dtype copies.
 * Output: [images, D, N] (flatten(2).transpose(1, 2) views it as the patches' rows). */
static int patch_conv(tracer *tr, const gckpt_vision *vc, int pix, int w, int bias, bool hooked, uint64_t positions,
                      uint64_t tiles)
{
    uint64_t in_f = vc->channels * vc->patch * vc->patch, n = vc->image_size / vc->patch;
    int px = cast_to(tr, pix, tr->param_dt, "pixel_values.to");
    /* F.conv2d(input, weight, bias): autocast casts right to left (linear_op's comment) */
    int bc = bias >= 0 ? weight_cast(tr, bias, "patch_embedding.bias_cast") : -1;
    int wc = weight_cast(tr, w, "patch_embedding.weight_cast");
    int xi = autocast_to(tr, px, tr->compute_dt, "patch_embedding.cast_in");
    gckpt_shape sh = {GCKPT_ROWS_BATCH, 1, tiles * n * n * vc->hidden};
    bool wg = rg(tr, w) || (bias >= 0 && rg(tr, bias));
    int o = tnew(tr, "patch_embedding", GCKPT_T_ACT, tr->amp ? tr->compute_dt : dt(tr, px), sh, wg || hooked);
    opnew(tr, "patch_embedding", GCKPT_OP_MATMUL, bias >= 0 ? 3 : 2, (int[]){xi, wc, bc}, o, -1, 2, (int[]){xi, wc});
    setprim(tr, GCKPT_P_PATCH_CONV, GCKPT_BC_NONE, (double)vc->patch, 0, 0); /* sa: the kernel's patch side */
    gckpt_op *op = last_op(tr);
    op->in_f = in_f;
    op->out_f = vc->hidden;
    count_flops(tr);
    /* a GEMM over the n x n patches; fT counts per position of the tower's sequence (+ CLIP's
     * class token) */
    op->fT *= (double)(tiles * n * n) / (double)positions;
    op->bwd_mult = (double)rg(tr, w); /* the pixels need no gradient */
    return o;
}

/* The ViT towers traced: CLIP's class token and pre_layrnorm, SigLIP's patch-conv bias (their
 * encoder layers are alike; the MLP's activation is the config's). mllama's encoder layers
 * (FINDINGS R-VLM-30): no attention biases; an image's max_num_tiles tiles, each padded to a
 * multiple of 8 positions, are one sequence, and every layer's SDPA reads one float mask
 * (the aspect-ratio mask, built once per forward in the tower's dtype); `gated`: the global
 * layers' tanh gates. Its recipe is traced for saved bytes only, not in a step's order (the
 * global layers run between its head's layernorm_post and projector): `layers_only`. */
typedef struct {
    bool known, cls, pre_norm, conv_bias, attn_bias, tiled, gated, layers_only;
} vit_kind;
static const vit_kind vits[GCKPT_NTOWER] = {
    [GCKPT_TOWER_CLIP] = {.known = true, .cls = true, .pre_norm = true, .attn_bias = true},
    [GCKPT_TOWER_SIGLIP] = {.known = true, .conv_bias = true, .attn_bias = true},
    [GCKPT_TOWER_MLLAMA] = {.known = true, .cls = true, .pre_norm = true, .tiled = true, .gated = true,
                            .layers_only = true},
};

/* CLIPVisionEmbeddings + pre_layrnorm, SiglipVisionEmbeddings. */
static void vit_embedding(tracer *tr, const gckpt_vision *vc, const vit_kind *k, bool hooked, uint8_t pixel_dt)
{
    gckpt_recipe *r = tr->r;
    uint64_t D = vc->hidden, n = vc->image_size / vc->patch;
    section_begin(tr, GCKPT_SEC_EMBED);
    int pix = source(tr, "pixel_values", GCKPT_SRC_PIXELS, pixel_dt,
                     (gckpt_shape){GCKPT_ROWS_BATCH, 1, vc->channels * n * vc->patch * n * vc->patch}, NULL, NULL);
    r->t[pix].step_held = true; /* the Trainer's batch dict */
    int cls = k->cls ? param(tr, "embeddings.class_embedding", 1, D, GCKPT_ROLE_MATRIX) : -1;
    int w = param(tr, "embeddings.patch_embedding.weight", D, vc->channels * vc->patch * vc->patch,
                  GCKPT_ROLE_MATRIX);
    int bias = k->conv_bias ? param(tr, "embeddings.patch_embedding.bias", 1, D, GCKPT_ROLE_BIAS) : -1;
    int table = param(tr, "embeddings.position_embedding.weight", n * n + k->cls, D, GCKPT_ROLE_MATRIX);
    int x = patch_conv(tr, vc, pix, w, bias, hooked, n * n + k->cls, 1);
    /* a frozen tower's hooked patch output is a leaf that requires grad (enable_input_require_grads):
     * its AccumulateGrad node holds it until the graph goes with the micro-step */
    if (hooked && !rg(tr, w)) r->t[x].step_held = true;
    /* the sum with the positions is fp32 under autocast (the fp32 table, as CLIP's class token) */
    uint8_t sum_dt = tr->amp ? F32 : dt(tr, x);
    if (k->cls) {
        /* torch.cat([class_embeds, patch_embeds]): under autocast cat promotes to the widest
         * operand, the fp32 class embedding; it saves nothing */
        int c = tnew(tr, "embeddings.cat", GCKPT_T_ACT, sum_dt, per_token(D), rg(tr, x) || rg(tr, cls));
        opnew(tr, "embeddings.cat", GCKPT_OP_ELEM, 2, (int[]){cls, x}, c, -1, 0, NULL);
        setprim(tr, GCKPT_P_CAT_CLS, GCKPT_BC_NONE, 0, 0, D);
        x = c;
    }
    /* + position_embedding(position_ids): the ids a [1, positions] buffer, the lookup
     * [1, positions, D] broadcast over the images; the lookup saves the ids when the table trains */
    int ids = source(tr, "embeddings.position_ids", GCKPT_SRC_POSITIONS, I64, per_position(1), NULL, NULL);
    int pos = embedding(tr, "embeddings.position_embedding", table, ids);
    r->t[pos].requires_grad = rg(tr, table); /* (embedding() marks it for a leaf) */
    r->t[table].role = GCKPT_ROLE_EMBEDDING;
    int e = tnew(tr, "embeddings.add_pos", GCKPT_T_ACT, sum_dt, per_token(D), rg(tr, x) || rg(tr, pos));
    opnew(tr, "embeddings.add_pos", GCKPT_OP_ELEM, 2, (int[]){x, pos}, e, -1, 0, NULL);
    setprim(tr, GCKPT_P_ADD, GCKPT_BC_TABLE, 0, 0, D);
    r->embed_out = k->pre_norm ? layernorm(tr, e, D, "pre_layrnorm") : e;
    section_end(tr);
}

/* A linear of the tower: a trained or frozen weight and bias (tr->frozen_params; linear_node's
 * rule: a frozen weight keeps no input); without a bias when !bias. */
static int tlinear_b(tracer *tr, int x, uint64_t in_f, uint64_t out_f, const char *name, bool bias)
{
    char pfx[40];
    const char *outer = enter_module(tr, name, pfx, sizeof pfx);
    int w = linear_weight(tr, "weight", out_f, in_f, false); /* QLoRA: 4-bit (R-VLM-41) */
    int b = bias ? param(tr, "bias", 1, out_f, GCKPT_ROLE_BIAS) : -1;
    tr->pfx = outer;
    return base_linear(tr, x, w, b, in_f, out_f, name);
}

static int tlinear(tracer *tr, int x, uint64_t in_f, uint64_t out_f, const char *name)
{
    return tlinear_b(tr, x, in_f, out_f, name, true);
}

/* mllama's gate: x * gate.tanh() (a [1] parameter; tanh saves its output, the mul x when the
 * gate trains and the tanh when x needs a gradient: R-VLM-30). */
static int tanh_gate(tracer *tr, int x, const char *name)
{
    int g = param(tr, name, 1, 1, GCKPT_ROLE_BIAS);
    int t = unary(tr, g, "tanh", false, GCKPT_P_TANH, 0);
    return mul(tr, x, t, name);
}

/* CLIPEncoderLayer / SiglipEncoderLayer: x + out_proj(sdpa(q, k, v of layer_norm1(x))), then
 * + fc2(act(fc1(layer_norm2(.)))); CLIP's quick_gelu is x * sigmoid(1.702 x) (sigmoid saves
 * its output, the mul both operands, the Python-scalar product nothing), SigLIP's
 * gelu_pytorch_tanh F.gelu(approximate="tanh") (saves its input), mllama's F.gelu (erf; the
 * same saved input). MllamaVisionEncoderLayer is the same layer (its modules named
 * input_layernorm, o_proj, post_attention_layernorm; the names do not change what is
 * saved) without attention biases, its SDPA reading the tiled tower's mask (tr->float_mask:
 * a masked SDPA counts the whole score matrix itself), gated when `gated`. */
static void vit_layer(tracer *tr, const gckpt_vision *vc, const vit_kind *kind, bool in_grad, bool gated)
{
    uint64_t D = vc->hidden, I = vc->intermediate;
    block_begin(tr, gated ? GCKPT_BLOCK_GATED : GCKPT_BLOCK_DECODER);
    int xin = tnew(tr, "hidden_states", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
    hold(tr, xin, HOLD_END);
    int n1 = layernorm(tr, xin, D, "layer_norm1");
    tr->pfx = "self_attn";
    int q = tlinear_b(tr, n1, D, D, "q_proj", kind->attn_bias);
    int k = tlinear_b(tr, n1, D, D, "k_proj", kind->attn_bias);
    int v = tlinear_b(tr, n1, D, D, "v_proj", kind->attn_bias);
    int a = attention_sdpa(tr, q, k, v, vc->attn_dropout);
    /* (sdpa_fused marks its output as needing a gradient; a frozen tower without the hook's
     * has none: its q, k and v need none) */
    tr->r->t[a].requires_grad = rg(tr, q) || rg(tr, k) || rg(tr, v);
    /* no causal mask: QK^T and PV over the whole score matrix, twice the causal kernel's
     * (a masked SDPA's count, FINDINGS R-ATTN-8); the op is the causal primitive otherwise,
     * marked bidirectional (the host kernel's every key; CUDA's refuses it); mllama's masked
     * SDPA (tr->float_mask) counts the whole matrix itself and is planned only */
    if (tr->float_mask < 0) {
        tr->r->op[gckpt_recipe_producer(tr->r, a)].fBSS *= 2.0;
        tr->r->op[gckpt_recipe_producer(tr->r, a)].bidirectional = true;
    }
    /* the output's transpose + reshape is a view (CPU flash lays it out [b, S, H, hd]) */
    int ao = tlinear_b(tr, a, D, D, "out_proj", kind->attn_bias);
    hold_here(tr, q);
    hold_here(tr, k);
    hold_here(tr, v);
    tr->pfx = "";
    if (gated) ao = tanh_gate(tr, ao, "gate_attn");
    int h1 = add(tr, xin, ao, "residual_attn");
    hold(tr, h1, HOLD_END);
    int n2 = layernorm(tr, h1, D, "layer_norm2");
    tr->pfx = "mlp";
    int f = tlinear(tr, n2, D, I, "fc1");
    int g;
    if (vc->act == GCKPT_VACT_QUICK_GELU) {
        int sx = scal(tr, f, "activation_fn.scale", 1.702, 0);
        int sg = unary(tr, sx, "activation_fn.sigmoid", false, GCKPT_P_SIGMOID, 0);
        g = mul(tr, f, sg, "activation_fn.mul");
    } else {
        g = unary(tr, f, "activation_fn", false, GCKPT_P_GELU, vc->act == GCKPT_VACT_GELU_TANH ? 1.0 : 0.0);
    }
    int d = tlinear(tr, g, I, D, "fc2");
    tr->pfx = "";
    if (gated) d = tanh_gate(tr, d, "gate_ffn");
    int out = add(tr, h1, d, "residual_mlp");
    block_end(tr, xin, out);
}

/* Rows `first` .. of each image's (n of them, 0: to the end) of x: a view, or a copy (a
 * reshape of the non-contiguous slice for a matmul). */
static int rows_of(tracer *tr, int x, uint64_t first, uint64_t n, bool view, const char *name)
{
    uint64_t w = tr->r->t[x].shape.width;
    gckpt_shape sh = {n == 1 ? GCKPT_ROWS_BATCH : GCKPT_ROWS_PATCHES, 1, w};
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, x), sh, rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_ROWS_OF, GCKPT_BC_NONE, (double)first, (double)n, w);
    last_op(tr)->view_fwd = view;
    return o;
}

/* The tower's tail and llava's projector (the head section): CLIPVisionTransformer runs
 * post_layernorm on the last layer's CLS rows (pooled_output, which reaches no loss: R-VLM-9;
 * LayerNorm keeps the whole last hidden state, the rows being a view of it);
 * get_image_features takes hidden_states[vision_feature_layer][:, 1:] (the "default"
 * strategy) into LlavaMultiModalProjector: linear_1, the activation, linear_2, trained with
 * the tower frozen or not. Under autocast linear_1's cast copies the slice; without, matmul's
 * reshape does. LLaVA-NeXT runs the same on every anyres tile (gckpt_image_tiles); its
 * pack_image_features after the projector (the tiles unpadded, a newline per row: views and a
 * cat, which save nothing) is not traced. */
static void clip_tail_projector(tracer *tr, const gckpt_vlm *v, bool in_grad, bool proj_frozen, bool step)
{
    gckpt_recipe *r = tr->r;
    const gckpt_vision *vc = &v->vision;
    uint64_t D = vc->hidden, Dt = v->text.hidden;
    section_begin(tr, GCKPT_SEC_HEAD);
    int feat;
    if (step) {
        /* in a step the head reads the feature layer's output (the sim's live layers end
         * there); the tail, which reaches no loss, is left out (its LayerNorm keeps the last
         * hidden state, held until the forward returns anyway, and per image its mean and rstd) */
        feat = tnew(tr, "feature_hidden_state", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
        r->head_in = feat;
    } else {
        int last = tnew(tr, "last_hidden_state", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
        r->head_in = last;
        int cls = rows_of(tr, last, 0, 1, true, "last_hidden_state[:, 0]");
        layernorm(tr, cls, D, "post_layernorm");
        /* the feature layer's output: the input of the layer after it, the last one's own at -1 */
        feat = gckpt_vision_feature_depth(v) == vc->layers
                   ? last
                   : tnew(tr, "feature_hidden_state", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
    }
    int sel = rows_of(tr, feat, 1, 0, tr->amp, "selected_image_feature");
    tr->frozen_params = proj_frozen;
    tr->pfx = "multi_modal_projector";
    int w1 = linear_weight(tr, "linear_1.weight", Dt, D, false);
    int b1 = vc->projector_bias ? param(tr, "linear_1.bias", 1, Dt, GCKPT_ROLE_BIAS) : -1;
    int w2 = linear_weight(tr, "linear_2.weight", Dt, Dt, false);
    int b2 = vc->projector_bias ? param(tr, "linear_2.bias", 1, Dt, GCKPT_ROLE_BIAS) : -1;
    int h = base_linear(tr, sel, w1, b1, D, Dt, "linear_1");
    int a = unary(tr, h, "act", false, GCKPT_P_GELU, 0);
    int feats = base_linear(tr, a, w2, b2, Dt, Dt, "linear_2");
    /* image_features: llava's image_outputs.pooler_output keeps views of it until the forward
     * returns; llava_next's keeps pack_image_features' new tensors (core/vlm_step.c), and this
     * output goes once they are made */
    r->t[feats].fwd_end_free = !step || vc->projector == GCKPT_PROJ_LLAVA;
    if (step) r->grad_seed = feats;
    tr->pfx = "";
    /* LLaVA-NeXT's newline vector (its cat in pack_image_features saves nothing): its weight
     * and optimizer states, in both recipes (the step's live weights are the whole tower's less
     * the unused layers': FINDINGS R-VLM-90); no op here reads it: a step's bridge makes its
     * gradient (R-VLM-80) */
    if (vc->projector == GCKPT_PROJ_LLAVA_NEXT) r->bridge_param = param(tr, "image_newline", 1, Dt, GCKPT_ROLE_BIAS);
    section_end(tr);
}

/* Gemma 3's head (FINDINGS R-VLM-13): SiglipVisionTransformer's post_layernorm on the last
 * layer's output (last_hidden_state, on the loss's path), then Gemma3MultiModalProjector:
 * transpose + reshape + contiguous (a copy, [images, D, grid, grid]), AvgPool2d to the
 * mm_tokens_per_image grid (saves its input), flatten + transpose (views), mm_soft_emb_norm
 * (Gemma3RMSNorm: fp32, (1 + w), type_as), torch.matmul with mm_input_projection_weight
 * [D, text hidden] (autocast's cast keeps the normed value's transposed strides, so the
 * matmul's reshape clones it either way: the clone is what mm saves), .type_as(the last
 * hidden state) (under autocast a copy back to fp32). SigLIP's attention-pooling head
 * (vision_use_head) runs on last_hidden_state too, but its output is the pooler_output
 * that get_image_features overwrites with the projector's: its graph goes before the text
 * model runs and reaches no loss; only its parameters are traced (in a step: weights, no
 * gradient) and, under autocast, the casts autocast caches. */
static void gemma3_head(tracer *tr, const gckpt_vlm *v, bool in_grad, bool trained, bool proj_frozen, bool step)
{
    gckpt_recipe *r = tr->r;
    const gckpt_vision *vc = &v->vision;
    uint64_t D = vc->hidden, I = vc->intermediate, Dt = v->text.hidden;
    section_begin(tr, GCKPT_SEC_HEAD);
    int enc = tnew(tr, "encoder_output", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
    r->head_in = enc;
    int last = layernorm(tr, enc, D, "post_layernorm");
    /* image_outputs.last_hidden_state: kept with the model's outputs until its forward returns */
    r->t[last].fwd_end_free = step;
    if (vc->use_head) {
        /* the pooling head: in a step its parameters get no gradient (R-VLM-9); under autocast
         * a trained tower's leaf weights' casts (out_proj's, the MLP's; in_proj's are of split
         * views, not cached) stay in autocast's cache until the forward ends */
        bool cached = step && tr->amp && trained;
        if (step) tr->frozen_params = true;
        tr->pfx = "head";
        param(tr, "probe", 1, D, GCKPT_ROLE_BIAS);
        param(tr, "attention.in_proj_weight", 3 * D, D, GCKPT_ROLE_MATRIX);
        param(tr, "attention.in_proj_bias", 1, 3 * D, GCKPT_ROLE_BIAS);
        int leaf[6];
        leaf[0] = param(tr, "attention.out_proj.weight", D, D, GCKPT_ROLE_MATRIX);
        leaf[1] = param(tr, "attention.out_proj.bias", 1, D, GCKPT_ROLE_BIAS);
        param(tr, "layernorm.weight", 1, D, GCKPT_ROLE_NORM_WEIGHT);
        param(tr, "layernorm.bias", 1, D, GCKPT_ROLE_BIAS);
        /* QLoRA: the head's MLP linears 4-bit, its biases cast by their forward; the attention's
         * out_proj (nn.MultiheadAttention's NonDynamicallyQuantizableLinear) stays (R-VLM-94) */
        leaf[2] = linear_weight(tr, "mlp.fc1.weight", I, D, false);
        leaf[3] = param(tr, "mlp.fc1.bias", 1, I, GCKPT_ROLE_BIAS);
        leaf[4] = linear_weight(tr, "mlp.fc2.weight", D, I, false);
        leaf[5] = param(tr, "mlp.fc2.bias", 1, D, GCKPT_ROLE_BIAS);
        quant_bias(tr, last, leaf[2], leaf[3]);
        quant_bias(tr, last, leaf[4], leaf[5]);
        for (int k = 0; k < 6 && cached; k++) r->t[weight_cast(tr, leaf[k], "autocast_cache")].fwd_end_free = true;
        tr->pfx = "";
    }
    tr->frozen_params = proj_frozen;
    tr->pfx = "multi_modal_projector";
    int grid = tnew(tr, "contiguous", GCKPT_T_ACT, dt(tr, last), per_token(D), rg(tr, last));
    opnew(tr, "contiguous", GCKPT_OP_ELEM, 1, (int[]){last}, grid, -1, 0, NULL);
    setprim(tr, GCKPT_P_TRANSPOSE, GCKPT_BC_NONE, 0, 0, D);
    gckpt_shape pooled_sh = {GCKPT_ROWS_BATCH, vc->tokens_per_image, D};
    int pooled = tnew(tr, "avg_pool", GCKPT_T_ACT, dt(tr, grid), pooled_sh, rg(tr, grid));
    opnew(tr, "avg_pool", GCKPT_OP_ELEM, 1, (int[]){grid}, pooled, -1, rg(tr, grid), (int[]){grid});
    setprim(tr, GCKPT_P_AVG_POOL, GCKPT_BC_NONE, 0, (double)vc->tokens_per_image, D);
    int normed = rmsnorm(tr, pooled, D, "mm_soft_emb_norm");
    int w = param(tr, "mm_input_projection_weight", Dt, D, GCKPT_ROLE_MATRIX);
    int xc = autocast_to(tr, normed, tr->compute_dt, "matmul.cast_in");
    int sel = tnew(tr, "matmul.reshape", GCKPT_T_ACT, dt(tr, xc), pooled_sh, rg(tr, xc));
    opnew(tr, "matmul.reshape", GCKPT_OP_ELEM, 1, (int[]){xc}, sel, -1, 0, NULL);
    setprim(tr, GCKPT_P_TRANSPOSE, GCKPT_BC_NONE, 0, 0, D);
    int proj = linear(tr, sel, w, -1, D, Dt, "matmul");
    int feats = cast_to(tr, proj, dt(tr, last), "type_as");
    /* image_outputs.pooler_output keeps it until the model's forward returns */
    r->t[feats].fwd_end_free = true;
    if (step) r->grad_seed = feats;
    tr->pfx = "";
    section_end(tr);
}

/* ---- Qwen2.5-VL's ViT (FINDINGS R-VLM-20..22) ------------------------------------------
 * Rows are the micro-batch's patches (all its images; the recipe's sequence is an image's
 * patches, gckpt_vision_image_positions). Under autocast the residual stream is bf16: the
 * patch conv's output, which nothing promotes. */

/* An int64 index of one entry per merged token (window_index, its argsort): [N / merge^2]. */
static int merged_index(tracer *tr, const gckpt_vision *vc, const char *name)
{
    gckpt_shape sh = {GCKPT_ROWS_GROUPS, vc->merge * vc->merge, 1};
    return source(tr, name, GCKPT_SRC_POSITIONS, I64, sh, NULL, NULL);
}

/* x[index] over groups of merge^2 rows (permute_input_for_window_attn, the merger's
 * reverse_indices): a new tensor; IndexBackward0 keeps the index when x needs a gradient. */
static int gather_groups(tracer *tr, const gckpt_vision *vc, int x, int index, const char *name)
{
    const gckpt_tensor *t = &tr->r->t[x];
    uint64_t group = t->shape.rows == GCKPT_ROWS_GROUPS ? 1 : vc->merge * vc->merge;
    int o = tnew(tr, name, GCKPT_T_ACT, t->dtype, t->shape, rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 2, (int[]){x, index}, o, -1, rg(tr, x) ? 1 : 0, (int[]){index});
    setprim(tr, GCKPT_P_GATHER_ROWS, GCKPT_BC_NONE, 0, 0, group * tr->r->t[x].shape.width);
    return o;
}

/* Qwen2_5_VisionPatchEmbed (a bias-free Conv3d, stride = kernel: a GEMM of C T p^2 by D per
 * patch; ConvolutionBackward0 keeps its input and weight whenever it has a node), the window
 * permutation and the fp32 rotary cos / sin [N, head_dim] every block gets. */
static void qwen_embedding(tracer *tr, const gckpt_vision *vc, bool hooked, uint8_t pixel_dt)
{
    gckpt_recipe *r = tr->r;
    uint64_t D = vc->hidden, in_f = vc->channels * vc->temporal_patch * vc->patch * vc->patch;
    section_begin(tr, GCKPT_SEC_EMBED);
    int pix = source(tr, "pixel_values", GCKPT_SRC_PIXELS, pixel_dt, per_token(in_f), NULL, NULL);
    r->t[pix].step_held = true; /* the Trainer's batch dict */
    int w = param(tr, "patch_embed.proj.weight", D, in_f, GCKPT_ROLE_MATRIX);
    int px = cast_to(tr, pix, tr->param_dt, "pixel_values.to");
    int wc = weight_cast(tr, w, "patch_embed.weight_cast");
    int xi = autocast_to(tr, px, tr->compute_dt, "patch_embed.cast_in");
    int x = tnew(tr, "patch_embed", GCKPT_T_ACT, tr->amp ? tr->compute_dt : dt(tr, px), per_token(D),
                 rg(tr, w) || hooked);
    opnew(tr, "patch_embed", GCKPT_OP_MATMUL, 2, (int[]){xi, wc}, x, -1, 2, (int[]){xi, wc});
    setprim(tr, GCKPT_P_PATCH_CONV, GCKPT_BC_NONE, 0, 0, 0);
    last_op(tr)->in_f = in_f;
    last_op(tr)->out_f = D;
    count_flops(tr);
    last_op(tr)->bwd_mult = (double)rg(tr, w); /* the pixels need no gradient */
    /* a frozen tower's hooked output: a leaf held by its AccumulateGrad node (R-VLM-3) */
    if (hooked && !rg(tr, w)) r->t[x].step_held = true;
    int wi = merged_index(tr, vc, "window_index");
    x = gather_groups(tr, vc, x, wi, "window_permute");
    int sin;
    int cos = source(tr, "rotary.cos", GCKPT_SRC_ROTARY, F32, per_token(D / vc->heads), "rotary.sin", &sin);
    layer_kwarg(tr, cos);
    layer_kwarg(tr, sin);
    r->rope[0] = cos;
    r->rope[1] = sin;
    r->embed_out = x;
    section_end(tr);
}

/* apply_rotary_pos_emb_vision on q or k (a view of qkv's output): in fp32 (q.float(): a copy
 * unless fp32), the muls keeping cos and sin, cast back to the input dtype. */
static int qwen_rotary(tracer *tr, int x, const char *name)
{
    char nm[40];
    snprintf(nm, sizeof nm, "%s.float", name);
    int xf = cast_to(tr, x, F32, nm);
    int y = rope(tr, xf, tr->r->rope[0], tr->r->rope[1], name);
    snprintf(nm, sizeof nm, "%s.to_in", name);
    y = cast_to(tr, y, dt(tr, x), nm);
    hold_here(tr, xf);
    return y;
}

/* The MLP of a Qwen ViT block on norm2's output: Qwen2.5-VL's SwiGLU (gate_proj, silu,
 * up_proj, their product, down_proj), Qwen3-VL's linear_fc1, gelu_pytorch_tanh (saves its
 * input), linear_fc2; every linear with a bias. */
static int qwen_swiglu(tracer *tr, const gckpt_vision *vc, int n2)
{
    uint64_t D = vc->hidden, I = vc->intermediate;
    int g = tlinear(tr, n2, D, I, "gate_proj");
    int sg = unary(tr, g, "act_fn", false, GCKPT_P_SILU, 0);
    int u = tlinear(tr, n2, D, I, "up_proj");
    int p = mul(tr, sg, u, "mul");
    return tlinear(tr, p, I, D, "down_proj");
}

static int qwen3_mlp(tracer *tr, const gckpt_vision *vc, int n2)
{
    uint64_t D = vc->hidden, I = vc->intermediate;
    int f = tlinear(tr, n2, D, I, "linear_fc1");
    int g = unary(tr, f, "act_fn", false, GCKPT_P_GELU, 1.0);
    return tlinear(tr, g, I, D, "linear_fc2");
}

/* A Qwen ViT block's norms and MLP: Qwen2.5-VL's RMSNorms and SwiGLU, Qwen3-VL's LayerNorms
 * (eps 1e-6 both) and GELU MLP (FINDINGS R-VLM-21, R-VLM-51). */
typedef struct {
    int (*norm)(tracer *tr, int x, uint64_t width, const char *name);
    int (*mlp)(tracer *tr, const gckpt_vision *vc, int n2);
} qwen_block_kind;
static const qwen_block_kind qwen2_5_kind = {rmsnorm, qwen_swiglu}, qwen3_kind = {layernorm, qwen3_mlp};

/* Qwen2_5_VLVisionBlock / Qwen3VLVisionBlock: x + proj(cat(sdpa per chunk of q, k, v of
 * qkv(norm1(x)), rotated)), then + mlp(norm2(.)), every linear with a bias. The chunks
 * (Qwen2.5-VL's windows, or images in fullatt_block_indexes; Qwen3-VL's images) split q, k, v
 * as views and save, in all, one [N, D] output and [N, heads] logsumexp: one block serves
 * both kinds (their FLOPs differ: one chunk per image here, the step scales them to the
 * layers' mean, gckpt_vision_attention_share). */
static void qwen_block(tracer *tr, const gckpt_vision *vc, const qwen_block_kind *kind, bool in_grad)
{
    uint64_t D = vc->hidden;
    block_begin(tr, GCKPT_BLOCK_DECODER);
    int xin = tnew(tr, "hidden_states", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
    hold(tr, xin, HOLD_END);
    int n1 = kind->norm(tr, xin, D, "norm1");
    tr->pfx = "attn";
    int qkv = tlinear(tr, n1, D, 3 * D, "qkv");
    int q = slice_of(tr, qkv, 0, D, "q"), k = slice_of(tr, qkv, 1, D, "k"), v = slice_of(tr, qkv, 2, D, "v");
    int qr = qwen_rotary(tr, q, "rope_q"), kr = qwen_rotary(tr, k, "rope_k");
    int a = attention_sdpa(tr, qr, kr, v, vc->attn_dropout);
    tr->r->t[a].requires_grad = rg(tr, qr) || rg(tr, kr) || rg(tr, v);
    /* no causal mask: the whole score matrix, twice the causal kernel's (vit_layer's) */
    tr->r->op[gckpt_recipe_producer(tr->r, a)].fBSS *= 2.0;
    /* torch.cat of the chunks' outputs: a new [N, D], proj's saved input */
    int c = like(tr, "attn_output.cat", a, dt(tr, a), rg(tr, a));
    opnew(tr, "attn_output.cat", GCKPT_OP_ELEM, 1, (int[]){a}, c, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    int ao = tlinear(tr, c, D, D, "proj");
    int held[] = {n1, qkv, q, k, v, qr, kr};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++) hold_here(tr, held[i]);
    tr->pfx = "";
    int h1 = add(tr, xin, ao, "residual_attn");
    hold(tr, h1, HOLD_END);
    int n2 = kind->norm(tr, h1, D, "norm2");
    tr->pfx = "mlp";
    int d = kind->mlp(tr, vc, n2);
    hold_here(tr, n2);
    tr->pfx = "";
    int out = add(tr, h1, d, "residual_mlp");
    block_end(tr, xin, out);
}

/* Qwen2_5_VLPatchMerger on the last block's output, then the window order undone
 * (merged[argsort(window_index)]): ln_q, the merge^2 rows of a token viewed as one, Linear,
 * erf GELU, Linear to the text hidden. Part of the visual module but trained with the
 * projector (a frozen tower's merger trains). */
static void qwen_merger(tracer *tr, const gckpt_vlm *v, bool in_grad, bool step)
{
    gckpt_recipe *r = tr->r;
    const gckpt_vision *vc = &v->vision;
    uint64_t D = vc->hidden, m2 = vc->merge * vc->merge, M = m2 * D, out_f = vc->out_hidden;
    section_begin(tr, GCKPT_SEC_HEAD);
    int last = tnew(tr, "last_hidden_state", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
    r->head_in = last;
    /* BaseModelOutputWithPooling's last_hidden_state: image_outputs keeps it until the model's
     * forward returns */
    r->t[last].fwd_end_free = true;
    tr->frozen_params = false;
    tr->pfx = "merger";
    int n = rmsnorm(tr, last, D, "ln_q");
    gckpt_shape sh = {GCKPT_ROWS_GROUPS, m2, M};
    int nv = tnew(tr, "ln_q.view", GCKPT_T_ACT, dt(tr, n), sh, rg(tr, n));
    opnew(tr, "ln_q.view", GCKPT_OP_ELEM, 1, (int[]){n}, nv, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    last_op(tr)->view_fwd = true;
    int h = tlinear(tr, nv, M, M, "mlp.0");
    int a = unary(tr, h, "mlp.1", false, GCKPT_P_GELU, 0);
    int mo = tlinear(tr, a, M, out_f, "mlp.2");
    tr->pfx = "";
    int rev = merged_index(tr, vc, "reverse_indices");
    int feats = gather_groups(tr, vc, mo, rev, "merged[reverse_indices]");
    r->t[feats].fwd_end_free = true; /* pooler_output, until the forward returns */
    if (step) r->grad_seed = feats;
    section_end(tr);
}

/* ---- Qwen3-VL's ViT (FINDINGS R-VLM-50..53) -------------------------------------------
 * Qwen2.5-VL's rows (the micro-batch's patches) and rotary; no windows: every block attends
 * over each image (cu_seqlens). */

/* Qwen3VLVisionPatchEmbed (a Conv3d with a bias; ConvolutionBackward0 keeps its input and
 * weight whenever it has a node), then the learned positions: fast_pos_embed_interpolate's
 * bilinear resampling of the num_position_embeddings grid to each image's, as pos_embed
 * looked up at four int64 corner indices per patch ([N, 4]; EmbeddingBackward0 keeps them
 * when the table trains), times the fp32 corner weights [N, 4, 1] (MulBackward0 keeps them:
 * promoted to fp32), summed over the corners, cast to the conv output's dtype and added.
 * No input embedding to hook: a frozen tower's blocks never need a gradient (R-VLM-3). */
static void qwen3_embedding(tracer *tr, const gckpt_vision *vc, uint8_t pixel_dt)
{
    gckpt_recipe *r = tr->r;
    uint64_t D = vc->hidden, in_f = vc->channels * vc->temporal_patch * vc->patch * vc->patch;
    section_begin(tr, GCKPT_SEC_EMBED);
    int pix = source(tr, "pixel_values", GCKPT_SRC_PIXELS, pixel_dt, per_token(in_f), NULL, NULL);
    r->t[pix].step_held = true; /* the Trainer's batch dict */
    int w = param(tr, "patch_embed.proj.weight", D, in_f, GCKPT_ROLE_MATRIX);
    int b = param(tr, "patch_embed.proj.bias", 1, D, GCKPT_ROLE_BIAS);
    int px = cast_to(tr, pix, tr->param_dt, "pixel_values.to");
    /* F.conv3d(input, weight, bias): autocast casts right to left (patch_conv's) */
    int bc = weight_cast(tr, b, "patch_embed.bias_cast");
    int wc = weight_cast(tr, w, "patch_embed.weight_cast");
    int xi = autocast_to(tr, px, tr->compute_dt, "patch_embed.cast_in");
    int x = tnew(tr, "patch_embed", GCKPT_T_ACT, tr->amp ? tr->compute_dt : dt(tr, px), per_token(D),
                 rg(tr, w) || rg(tr, b));
    opnew(tr, "patch_embed", GCKPT_OP_MATMUL, 3, (int[]){xi, wc, bc}, x, -1, 2, (int[]){xi, wc});
    setprim(tr, GCKPT_P_PATCH_CONV, GCKPT_BC_NONE, 0, 0, 0);
    last_op(tr)->in_f = in_f;
    last_op(tr)->out_f = D;
    count_flops(tr);
    last_op(tr)->bwd_mult = (double)rg(tr, w); /* the pixels need no gradient */
    int table = param(tr, "pos_embed.weight", vc->positions, D, GCKPT_ROLE_EMBEDDING);
    int ids = source(tr, "pos_embed.interp_indices", GCKPT_SRC_POSITIONS, I64, per_token(4), NULL, NULL);
    int wts = source(tr, "pos_embed.interp_weights", GCKPT_SRC_POSITIONS, F32, per_token(4), NULL, NULL);
    int look = tnew(tr, "pos_embed", GCKPT_T_ACT, dt(tr, table), per_token(4 * D), rg(tr, table));
    opnew(tr, "pos_embed", GCKPT_OP_EMBED, 2, (int[]){table, ids}, look, -1, 1, (int[]){rg(tr, table) ? ids : -1});
    setprim(tr, GCKPT_P_EMBED, GCKPT_BC_NONE, 0, 0, 4 * D);
    int wl = tnew(tr, "pos_embed.weighted", GCKPT_T_ACT, F32, per_token(4 * D), rg(tr, look));
    opnew(tr, "pos_embed.weighted", GCKPT_OP_ELEM, 2, (int[]){look, wts}, wl, -1, 1,
          (int[]){rg(tr, look) ? wts : -1});
    setprim(tr, GCKPT_P_MUL, GCKPT_BC_NONE, 0, 0, 4 * D);
    int pe = tnew(tr, "pos_embed.sum", GCKPT_T_ACT, F32, per_token(D), rg(tr, wl));
    opnew(tr, "pos_embed.sum", GCKPT_OP_ELEM, 1, (int[]){wl}, pe, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    pe = cast_to(tr, pe, dt(tr, x), "pos_embed.to");
    x = add(tr, x, pe, "add_pos");
    int sin;
    int cos = source(tr, "rotary.cos", GCKPT_SRC_ROTARY, F32, per_token(D / vc->heads), "rotary.sin", &sin);
    layer_kwarg(tr, cos);
    layer_kwarg(tr, sin);
    r->rope[0] = cos;
    r->rope[1] = sin;
    r->embed_out = x;
    section_end(tr);
}

/* Qwen3VLVisionPatchMerger on x (a block's output, [N, D]): the LayerNorm over D, then the
 * merge^2 rows of a token viewed as one (the merger), or first the view and the LayerNorm
 * over the merged width (a deepstack merger, use_postshuffle_norm; its norm saves the block's
 * output itself outside autocast, R-VLM-52), linear_fc1, erf GELU, linear_fc2 to out_hidden. */
static int qwen3_merger(tracer *tr, const gckpt_vision *vc, int x, bool postshuffle)
{
    uint64_t D = vc->hidden, m2 = vc->merge * vc->merge, M = m2 * D;
    gckpt_shape sh = {GCKPT_ROWS_GROUPS, m2, M};
    int n = postshuffle ? x : layernorm(tr, x, D, "norm");
    int nv = tnew(tr, "view", GCKPT_T_ACT, dt(tr, n), sh, rg(tr, n));
    opnew(tr, "view", GCKPT_OP_ELEM, 1, (int[]){n}, nv, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    last_op(tr)->view_fwd = true;
    if (postshuffle) nv = layernorm(tr, nv, M, "norm");
    int h = tlinear(tr, nv, M, M, "linear_fc1");
    int a = unary(tr, h, "act_fn", false, GCKPT_P_GELU, 0);
    return tlinear(tr, a, M, vc->out_hidden, "linear_fc2");
}

/* Qwen3-VL's head: the merger on the last block's output (pooler_output), trained with the
 * projector; the deepstack mergers' parameters (trained with it too; each runs after its
 * block: gckpt_vision_deepstack_recipe_build traces one). With deepstack, the head is one
 * deepstack merger on a block's output instead. */
static void qwen3_head(tracer *tr, const gckpt_vlm *v, bool in_grad, bool step, bool deepstack)
{
    gckpt_recipe *r = tr->r;
    const gckpt_vision *vc = &v->vision;
    uint64_t D = vc->hidden, M = vc->merge * vc->merge * D, o = vc->out_hidden;
    section_begin(tr, GCKPT_SEC_HEAD);
    int last = tnew(tr, deepstack ? "block_output" : "last_hidden_state", GCKPT_T_ACT, tr->stream_dt, per_token(D),
                    in_grad);
    r->head_in = last;
    /* BaseModelOutputWithDeepstackFeatures' last_hidden_state: kept until the forward returns */
    r->t[last].fwd_end_free = !deepstack;
    tr->frozen_params = false;
    tr->pfx = deepstack ? "deepstack_merger_list.0" : "merger";
    int feats = qwen3_merger(tr, vc, last, deepstack);
    tr->pfx = "";
    r->t[feats].fwd_end_free = true; /* pooler_output / deepstack_features, until the forward returns */
    if (step) r->grad_seed = feats;
    for (unsigned k = 0; k < vc->ndeepstack && !deepstack; k++) {
        char nm[64];
        static const char *const names[] = {"norm.weight", "norm.bias", "linear_fc1.weight",
                                            "linear_fc1.bias", "linear_fc2.weight", "linear_fc2.bias"};
        const uint64_t rows[] = {1, 1, M, 1, o, 1}, cols[] = {M, M, M, M, M, o};
        const gckpt_param_role roles[] = {GCKPT_ROLE_NORM_WEIGHT, GCKPT_ROLE_BIAS, GCKPT_ROLE_MATRIX,
                                          GCKPT_ROLE_BIAS, GCKPT_ROLE_MATRIX, GCKPT_ROLE_BIAS};
        for (int i = 0; i < 6; i++) {
            snprintf(nm, sizeof nm, "deepstack_merger_list.%u.%s", k, names[i]);
            param(tr, nm, rows[i], cols[i], roles[i]);
        }
    }
    section_end(tr);
}

void gckpt_vision_tower_model(const gckpt_vlm *v, gckpt_model *m)
{
    const gckpt_vision *vc = &v->vision;
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s vision tower", v->model_type);
    m->layers = vc->layers;
    m->hidden = vc->hidden;
    m->heads = m->kv_heads = vc->heads;
    m->head_dim = vc->heads ? vc->hidden / vc->heads : 0;
    m->intermediate = vc->intermediate;
    m->norm_eps = vc->norm_eps;
    m->attn_dropout = vc->attn_dropout;
    /* Qwen2.5-VL's and Qwen3-VL's 2-D rotary turn the whole head (rotate_half over head_dim) */
    if (vc->tower == GCKPT_TOWER_QWEN2_5 || vc->tower == GCKPT_TOWER_QWEN3) m->rotary_dim = m->head_dim;
    /* mllama: the local encoder's layers, then the gated global encoder's (one walk, R-VLM-30) */
    if (vc->tower < GCKPT_NTOWER && vits[vc->tower].gated && vc->global_layers) {
        m->gated_from = vc->layers;
        m->layers = vc->layers + vc->global_layers;
    }
}

static uint64_t positions_of(const gckpt_vision *vc, bool padded)
{
    uint64_t n = vc->patch ? vc->image_size / vc->patch : 0;
    const vit_kind *k = vc->tower < GCKPT_NTOWER ? &vits[vc->tower] : NULL;
    uint64_t tile = n * n + (k && k->cls);
    /* mllama: every tile padded to a multiple of 8, the image's max_num_tiles tiles one sequence */
    return k && k->tiled ? vc->max_tiles * (padded ? (tile + 7) / 8 * 8 : tile) : tile;
}

uint64_t gckpt_vision_positions(const gckpt_vlm *v) { return positions_of(&v->vision, true); }

/* MllamaPrecomputedAspectRatioEmbedding: embedding(aspect_ratio_ids) [images, tiles x D]
 * (saves the ids when its table trains) * gate.tanh(), added to every patch of its tile. */
static int tile_embedding(tracer *tr, const gckpt_vision *vc, int x, int ids, const char *name)
{
    char pfx[48];
    const char *outer = enter_module(tr, name, pfx, sizeof pfx);
    int table = param(tr, "embedding.weight", vc->aspect_ratios + 1, vc->max_tiles * vc->hidden, GCKPT_ROLE_MATRIX);
    int e = embedding(tr, "embedding", table, ids);
    tr->r->t[e].requires_grad = rg(tr, table);
    int gated = tanh_gate(tr, e, "gate");
    tr->pfx = outer;
    return add(tr, x, gated, name);
}

/* The tiled tower's embedding (MllamaVisionModel.forward up to the local encoder): the patch
 * conv on every tile, the gated pre-tile embedding, a class token per tile, the gated
 * position embedding ((1 - gate.tanh()) * embedding: rsub saves nothing, the mul its
 * output; gate.tanh() * tile_embedding(ids)), layernorm_pre, F.pad to the padded rows (a copy
 * that saves nothing), and the aspect-ratio mask (_prepare_aspect_ratio_attention_mask:
 * [images, 1, S, S] in the weights' dtype, under autocast the bf16 of the matmul that builds
 * it), read by every encoder layer's SDPA. */
static void tiled_embedding(tracer *tr, const gckpt_vision *vc, bool hooked, uint8_t pixel_dt)
{
    gckpt_recipe *r = tr->r;
    uint64_t D = vc->hidden, n = vc->image_size / vc->patch, T = vc->max_tiles, P = n * n + 1;
    section_begin(tr, GCKPT_SEC_EMBED);
    int pix = source(tr, "pixel_values", GCKPT_SRC_PIXELS, pixel_dt,
                     (gckpt_shape){GCKPT_ROWS_BATCH, 1, T * vc->channels * vc->image_size * vc->image_size}, NULL, NULL);
    r->t[pix].step_held = true;
    int ids = source(tr, "aspect_ratio_ids", GCKPT_SRC_IDS, I64, (gckpt_shape){GCKPT_ROWS_BATCH, 1, 1}, NULL, NULL);
    int w = param(tr, "patch_embedding.weight", D, vc->channels * vc->patch * vc->patch, GCKPT_ROLE_MATRIX);
    int x = patch_conv(tr, vc, pix, w, -1, hooked, positions_of(vc, true), T);
    if (hooked && !rg(tr, w)) r->t[x].step_held = true; /* the hooked leaf (vit_embedding's) */
    x = tile_embedding(tr, vc, x, ids, "pre_tile_positional_embedding");
    int cls = param(tr, "class_embedding", 1, D, GCKPT_ROLE_MATRIX);
    int c = tnew(tr, "class_cat", GCKPT_T_ACT, dt(tr, x), (gckpt_shape){GCKPT_ROWS_BATCH, T * P, D},
                 rg(tr, x) || rg(tr, cls));
    opnew(tr, "class_cat", GCKPT_OP_ELEM, 2, (int[]){cls, x}, c, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAT_CLS, GCKPT_BC_NONE, 0, 0, D);
    tr->pfx = "gated_positional_embedding";
    int gate = param(tr, "gate", 1, 1, GCKPT_ROLE_BIAS);
    int pos = param(tr, "embedding", P, D, GCKPT_ROLE_MATRIX);
    int tile_table = param(tr, "tile_embedding.weight", vc->aspect_ratios + 1, T * P * D, GCKPT_ROLE_MATRIX);
    int t1 = unary(tr, gate, "tanh", false, GCKPT_P_TANH, 0);
    int one_minus = scal(tr, t1, "rsub", -1.0, 1.0);
    int gpos = mul(tr, pos, one_minus, "gated_position");
    x = add(tr, c, gpos, "add_position");
    int tp = embedding(tr, "tile_embedding", tile_table, ids);
    r->t[tp].requires_grad = rg(tr, tile_table);
    int t2 = unary(tr, gate, "tanh_tile", false, GCKPT_P_TANH, 0);
    x = add(tr, x, mul(tr, tp, t2, "gated_tile_position"), "add_tile_position");
    tr->pfx = "";
    int ln = layernorm(tr, x, D, "layernorm_pre");
    int padded = tnew(tr, "pad", GCKPT_T_ACT, dt(tr, ln), per_token(D), rg(tr, ln));
    opnew(tr, "pad", GCKPT_OP_ELEM, 1, (int[]){ln}, padded, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0); /* a copy into more rows (planned only) */
    r->embed_out = padded;
    tr->float_mask = source(tr, "aspect_ratio_attention_mask", GCKPT_SRC_MASK, tr->amp ? tr->compute_dt : tr->param_dt,
                            score_shape(1), NULL, NULL);
    /* every encoder layer's argument (what their SDPA saves), until the tower returns */
    layer_kwarg(tr, tr->float_mask);
    section_end(tr);
}

/* The tiled tower's head: layernorm_post on the local encoder's output and the gated
 * post-tile embedding (the global layers run after them: traced as the block), then the
 * intermediate local outputs torch.stack'ed, the padding rows sliced off and reshaped (copies)
 * and torch.cat with the global output: none saves anything; the projector (a Linear with a
 * bias, trained with the tower frozen or not) saves the cat's output. In a step the tower's
 * layers are one walk (local, then global), and layernorm_post and the post-tile embedding
 * are the head's lead (gckpt_recipe.lead_end): run before the first gated layer, on the last
 * local layer's output, making the first global layer's input, and differentiated right after
 * that layer's backward, as MllamaVisionModel.forward runs them (FINDINGS R-VLM-63). */
static void tiled_head(tracer *tr, const gckpt_vlm *v, bool in_grad, bool step)
{
    gckpt_recipe *r = tr->r;
    const gckpt_vision *vc = &v->vision;
    uint64_t D = vc->hidden, n = vc->image_size / vc->patch, T = vc->max_tiles, P = n * n + 1;
    section_begin(tr, GCKPT_SEC_HEAD);
    int local = tnew(tr, "local_output", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
    int ln = layernorm(tr, local, D, "layernorm_post");
    int ids = -1;
    for (int i = 0; i < r->nop && ids < 0; i++)
        if (r->op[i].prim == GCKPT_P_SOURCE && r->op[i].source == GCKPT_SRC_IDS) ids = r->op[i].out[0];
    int post_tile = tile_embedding(tr, vc, ln, ids, "post_tile_positional_embedding");
    int glob = tnew(tr, "global_output", GCKPT_T_ACT, tr->stream_dt, per_token(D), in_grad);
    /* alone (saved bytes) the head's input is the local output; in a step the global layers'
     * output, the lead having run between the encoders. The cat's copy of the intermediate
     * local outputs reads layers whose outputs the next layer's norm keeps anyway (R-VLM-30). */
    r->head_in = step ? glob : local;
    if (step) {
        r->lead_in = local;
        r->lead_out = post_tile;
        r->lead_end = r->nop;
        r->lead_block = GCKPT_BLOCK_GATED;
    }
    int feats = tnew(tr, "features_cat", GCKPT_T_ACT, tr->stream_dt, (gckpt_shape){GCKPT_ROWS_BATCH, T * P, vc->output_dim},
                     in_grad);
    opnew(tr, "features_cat", GCKPT_OP_ELEM, 1, (int[]){glob}, feats, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0); /* stack, slices and cat: copies (planned only) */
    /* the cat is the tower's last_hidden_state, which MllamaModel returns as image_outputs: held
     * until the forward returns (under autocast beside the projector's saved bf16 cast) */
    if (step) r->t[feats].fwd_end_free = true;
    tr->frozen_params = false;
    tr->pfx = "multi_modal_projector";
    int w = param(tr, "weight", v->text.hidden, vc->output_dim, GCKPT_ROLE_MATRIX);
    int b = param(tr, "bias", 1, v->text.hidden, GCKPT_ROLE_BIAS);
    int out = linear(tr, feats, w, b, vc->output_dim, v->text.hidden, "multi_modal_projector");
    /* cross_attention_states: the text recipe's source (GCKPT_SRC_FEATURES) stands for it from
     * the text's forward on; its gradient is the tower's seed */
    if (step) r->grad_seed = out;
    tr->pfx = "";
    section_end(tr);
}

/* The tower's image size a whole number of patches (one line in err when not). */
static bool patch_grid_ok(const gckpt_vlm *v, gckpt_err *err)
{
    const gckpt_vision *vc = &v->vision;
    if (vc->patch && vc->image_size % vc->patch == 0) return true;
    gckpt_seterr(err, "%s: vision_config.image_size %llu is not a multiple of patch_size %llu", v->model_type,
                 (unsigned long long)vc->image_size, (unsigned long long)vc->patch);
    return false;
}

/* CLIP's and SigLIP's tower (llava, llava_next, gemma3) traced on tr. */
static bool vit_trace(tracer *tr, const gckpt_vlm *v, gckpt_tower_grad g, bool step, bool deepstack, uint8_t pixel_dt,
                      gckpt_err *err)
{
    (void)deepstack;
    const gckpt_vision *vc = &v->vision;
    if (!patch_grid_ok(v, err)) return false;
    if (vc->act != GCKPT_VACT_QUICK_GELU && vc->act != GCKPT_VACT_GELU_TANH) {
        gckpt_seterr(err, "%s: vision_config.hidden_act: only quick_gelu (CLIP's) and gelu_pytorch_tanh (SigLIP's) "
                          "are traced", v->model_type);
        return false;
    }
    /* the head: llava's tail and projector as the fixtures measured them (one feature layer,
     * the CLS dropped, an erf GELU); Gemma 3's post_layernorm and pooled projector */
    bool llava = vc->projector == GCKPT_PROJ_LLAVA || vc->projector == GCKPT_PROJ_LLAVA_NEXT;
    if ((!llava && vc->projector != GCKPT_PROJ_GEMMA3) ||
        (llava && (vc->nfeature != 1 || vc->keep_cls || vc->projector_act != GCKPT_VACT_GELU))) {
        gckpt_seterr(err, "%s: only gemma3's projector and llava's and llava_next's on one vision_feature_layer with "
                          "the \"default\" vision_feature_select_strategy and projector_hidden_act \"gelu\" are traced",
                     v->model_type);
        return false;
    }
    bool hooked = g == GCKPT_TOWER_FROZEN_HOOKED || g == GCKPT_TOWER_ALL_FROZEN_HOOKED;
    bool in_grad = g != GCKPT_TOWER_FROZEN && g != GCKPT_TOWER_ALL_FROZEN;
    /* the projector trains unless get_peft_model froze it with the tower */
    bool proj_frozen = g == GCKPT_TOWER_ALL_FROZEN_HOOKED || g == GCKPT_TOWER_ALL_FROZEN;
    tr->eps = vc->norm_eps;
    vit_embedding(tr, vc, &vits[vc->tower], hooked, pixel_dt);
    vit_layer(tr, vc, &vits[vc->tower], in_grad, false);
    if (llava)
        clip_tail_projector(tr, v, in_grad, proj_frozen, step);
    else
        gemma3_head(tr, v, in_grad, g == GCKPT_TOWER_TRAINED, proj_frozen, step);
    return true;
}

/* Qwen2.5-VL's tower traced on tr: the embedding, one block (windowed and full-attention
 * blocks save alike) and the merger as the head. */
static bool qwen_trace(tracer *tr, const gckpt_vlm *v, gckpt_tower_grad g, bool step, bool deepstack,
                       uint8_t pixel_dt, gckpt_err *err)
{
    (void)deepstack;
    const gckpt_vision *vc = &v->vision;
    if (!vc->merge || vc->projector != GCKPT_PROJ_MERGER || vc->act != GCKPT_VACT_SILU) {
        gckpt_seterr(err, "%s: only Qwen2.5-VL's SiLU blocks with its patch merger are traced", v->model_type);
        return false;
    }
    tr->eps = 1e-6; /* Qwen2_5_VLRMSNorm(hidden, eps=1e-6) in the blocks and ln_q */
    if (tr->amp) tr->stream_dt = tr->compute_dt; /* the conv's autocast output */
    qwen_embedding(tr, vc, g == GCKPT_TOWER_FROZEN_HOOKED, pixel_dt);
    qwen_block(tr, vc, &qwen2_5_kind, g != GCKPT_TOWER_FROZEN);
    qwen_merger(tr, v, g != GCKPT_TOWER_FROZEN, step);
    return true;
}

/* Qwen3-VL's tower traced on tr: the embedding, one block (LayerNorms, the GELU MLP, full
 * attention per image) and the merger as the head, or (deepstack) one deepstack merger.
 * Its frozen tower is never hooked (R-VLM-3): its blocks need no gradient. */
static bool qwen3_trace(tracer *tr, const gckpt_vlm *v, gckpt_tower_grad g, bool step, bool deepstack,
                        uint8_t pixel_dt, gckpt_err *err)
{
    const gckpt_vision *vc = &v->vision;
    if (!vc->merge || vc->projector != GCKPT_PROJ_DEEPSTACK || vc->act != GCKPT_VACT_GELU_TANH) {
        gckpt_seterr(err, "%s: only Qwen3-VL's gelu_pytorch_tanh blocks with its patch and deepstack mergers are "
                          "traced", v->model_type);
        return false;
    }
    tr->eps = 1e-6; /* nn.LayerNorm(eps=1e-6) in the blocks and the mergers */
    if (tr->amp) tr->stream_dt = tr->compute_dt; /* the conv's autocast output */
    bool trained = g == GCKPT_TOWER_TRAINED;
    qwen3_embedding(tr, vc, pixel_dt);
    qwen_block(tr, vc, &qwen3_kind, trained);
    qwen3_head(tr, v, trained, step, deepstack);
    return true;
}

/* mllama's tiled tower traced on tr (R-VLM-30): the embedding, a local encoder layer, a gated
 * global one (its own block type, GCKPT_BLOCK_GATED: the tower model's layers from gated_from
 * on) and the head (layernorm_post, the post-tile embedding, the cat and the projector). Never
 * checkpointed (plain nn.Modules: gckpt_vlm_towers counts none). */
static bool tiled_trace(tracer *tr, const gckpt_vlm *v, gckpt_tower_grad g, bool step, bool deepstack,
                        uint8_t pixel_dt, gckpt_err *err)
{
    (void)deepstack;
    const gckpt_vision *vc = &v->vision;
    if (!patch_grid_ok(v, err)) return false;
    if (!vc->global_layers) {
        gckpt_seterr(err, "%s: vision_config.num_global_layers is 0: only a tower with gated global layers is traced",
                     v->model_type);
        return false;
    }
    const vit_kind *k = &vits[vc->tower];
    tr->eps = vc->norm_eps;
    tiled_embedding(tr, vc, g == GCKPT_TOWER_FROZEN_HOOKED, pixel_dt);
    vit_layer(tr, vc, k, g != GCKPT_TOWER_FROZEN, false);
    vit_layer(tr, vc, k, g != GCKPT_TOWER_FROZEN, true);
    tiled_head(tr, v, g != GCKPT_TOWER_FROZEN, step);
    return true;
}

/* The towers with a recipe, by kind. */
typedef bool (*tower_trace)(tracer *tr, const gckpt_vlm *v, gckpt_tower_grad g, bool step, bool deepstack,
                            uint8_t pixel_dt, gckpt_err *err);
static const tower_trace tower_traces[GCKPT_NTOWER] = {
    [GCKPT_TOWER_CLIP] = vit_trace,
    [GCKPT_TOWER_SIGLIP] = vit_trace,
    [GCKPT_TOWER_QWEN2_5] = qwen_trace,
    [GCKPT_TOWER_QWEN3] = qwen3_trace,
    [GCKPT_TOWER_MLLAMA] = tiled_trace,
};

/* The tower's buffers (transformers 5.24, every nn.Buffer): CLIP's and SigLIP's position_ids,
 * int64 [1, positions] (persistent=False; the lookup reads them, FINDINGS R-VLM-90); Qwen2.5-VL's
 * and Qwen3-VL's axial rotary inv_freq and original_inv_freq, arange(0, head_dim / 2, 2)
 * elements each in the floating dtype (VisionRotaryEmbedding.compute_axial_rope_parameters);
 * mllama's tower: not walked, none counted. */
static const struct {
    bool position_ids, axial_rotary;
} tower_buffers[GCKPT_NTOWER] = {
    [GCKPT_TOWER_CLIP] = {.position_ids = true},
    [GCKPT_TOWER_SIGLIP] = {.position_ids = true},
    [GCKPT_TOWER_QWEN2_5] = {.axial_rotary = true},
    [GCKPT_TOWER_QWEN3] = {.axial_rotary = true},
};

uint64_t gckpt_vision_buffer_bytes(const gckpt_vlm *v, gckpt_dtype float_dt, uint64_t round)
{
    const gckpt_vision *vc = &v->vision;
    if (vc->tower >= GCKPT_NTOWER) return 0;
    uint64_t out = 0;
    if (tower_buffers[vc->tower].position_ids) out += gckpt_round_up(8 * positions_of(vc, false), round);
    if (tower_buffers[vc->tower].axial_rotary && vc->heads) {
        uint64_t spatial = vc->hidden / vc->heads / 2;
        out += 2 * gckpt_round_up(gckpt_dtype_size(float_dt) * ((spatial + 1) / 2), round);
    }
    return out;
}

uint64_t gckpt_vision_image_positions(const gckpt_vlm *v, uint64_t h, uint64_t w)
{
    if (v->vision.tower != GCKPT_TOWER_QWEN2_5 && v->vision.tower != GCKPT_TOWER_QWEN3)
        return gckpt_vision_positions(v);
    uint64_t tokens;
    gckpt_err err;
    if (!gckpt_image_tokens(v, "image", h, w, &tokens, &err)) return 0;
    return tokens * v->vision.merge * v->vision.merge;
}

static bool build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p, gckpt_target target,
                  gckpt_tower_grad g, const gckpt_peft *pf, bool step, bool deepstack, uint8_t pixel_dt,
                  gckpt_recipe *r, gckpt_err *err)
{
    tower_trace trace = v->vision.tower < GCKPT_NTOWER ? tower_traces[v->vision.tower] : NULL;
    if (!trace) {
        gckpt_seterr(err, "%s: only a CLIP (llava, llava_next), SigLIP (gemma3), Qwen2.5-VL, Qwen3-VL or mllama "
                          "vision tower has a recipe yet", v->model_type);
        return false;
    }
    /* Gemma 3's mm_soft_emb_norm is Gemma's RMSNorm: (1 + w), fp32 */
    gckpt_model tm = *tower;
    if (v->vision.projector == GCKPT_PROJ_GEMMA3) tm.rms = GCKPT_RMS_GEMMA;
    bool quant = gckpt_peft_quantized(pf);
    if (quant && v->vision.projector != GCKPT_PROJ_LLAVA && v->vision.projector != GCKPT_PROJ_GEMMA3) {
        gckpt_seterr(err, "%s: QLoRA's 4-bit vision linears are traced for llava's and gemma3's towers only",
                     v->model_type);
        return false;
    }
    tracer tr;
    tracer_setup(&tr, &tm, p, GCKPT_SDPA, target, quant ? pf : NULL, gckpt_vision_positions(v), GCKPT_LOSS_HF, 0,
                 false, r);
    tr.frozen_params = g != GCKPT_TOWER_TRAINED;
    if (!trace(&tr, v, g, step, deepstack, pixel_dt, err)) return false;
    r->loss = -1;
    recipe_finish(r);
    return true;
}

bool gckpt_vision_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p, gckpt_target target,
                               gckpt_tower_grad g, gckpt_recipe *r, gckpt_err *err)
{
    return build(v, tower, p, target, g, NULL, false, false, F32, r, err);
}

bool gckpt_vision_recipe_build_quant(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                     gckpt_target target, gckpt_tower_grad g, const gckpt_peft *pf, gckpt_recipe *r,
                                     gckpt_err *err)
{
    return build(v, tower, p, target, g, pf, false, false, F32, r, err);
}

bool gckpt_vision_step_recipe_build_quant(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                          gckpt_target target, gckpt_tower_grad g, const gckpt_peft *pf,
                                          uint8_t pixel_dt, gckpt_recipe *r, gckpt_err *err)
{
    return build(v, tower, p, target, g, pf, true, false, pixel_dt, r, err);
}

bool gckpt_vision_step_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                    gckpt_target target, gckpt_tower_grad g, uint8_t pixel_dt, gckpt_recipe *r,
                                    gckpt_err *err)
{
    return build(v, tower, p, target, g, NULL, true, false, pixel_dt, r, err);
}

bool gckpt_vision_deepstack_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                         gckpt_target target, gckpt_tower_grad g, gckpt_recipe *r, gckpt_err *err)
{
    if (v->vision.tower != GCKPT_TOWER_QWEN3) {
        gckpt_seterr(err, "%s: only Qwen3-VL's tower has deepstack mergers", v->model_type);
        return false;
    }
    return build(v, tower, p, target, g, NULL, false, true, F32, r, err);
}

bool gckpt_vision_layer_recipe_build(const gckpt_vlm *v, const gckpt_model *tower, gckpt_precision p,
                                     gckpt_target target, gckpt_tower_grad g, bool global, gckpt_recipe *r,
                                     gckpt_err *err)
{
    const gckpt_vision *vc = &v->vision;
    const vit_kind *k = vc->tower < GCKPT_NTOWER ? &vits[vc->tower] : NULL;
    if (!k || !k->tiled) {
        gckpt_seterr(err, "%s: only mllama's vision encoder layers are traced alone", v->model_type);
        return false;
    }
    if (global && !vc->global_layers) {
        gckpt_seterr(err, "%s: vision_config.num_global_layers is 0: no global layer to trace", v->model_type);
        return false;
    }
    if (!vc->patch || vc->image_size % vc->patch) {
        gckpt_seterr(err, "%s: vision_config.image_size %llu is not a multiple of patch_size %llu", v->model_type,
                     (unsigned long long)vc->image_size, (unsigned long long)vc->patch);
        return false;
    }
    tracer tr;
    tracer_setup(&tr, tower, p, GCKPT_SDPA, target, NULL, gckpt_vision_positions(v), GCKPT_LOSS_HF, 0, false, r);
    tr.eps = vc->norm_eps;
    tr.frozen_params = g != GCKPT_TOWER_TRAINED;
    tiled_embedding(&tr, vc, g == GCKPT_TOWER_FROZEN_HOOKED, tr.param_dt);
    vit_layer(&tr, vc, k, g != GCKPT_TOWER_FROZEN, global && k->gated);
    tiled_head(&tr, v, g != GCKPT_TOWER_FROZEN, false);
    r->loss = -1;
    recipe_finish(r);
    return true;
}
