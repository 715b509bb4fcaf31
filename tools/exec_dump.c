/* gckpt-exec-dump: one training step of a model on the host backend, written as JSON for
 * another implementation to repeat (tools/hf_probe/exec_loss.py runs transformers' own
 * forward and backward on it): the weights before the step, the batch, the loss and every
 * parameter's gradient. Developer tool, not a test.
 *   gckpt-exec-dump CONFIG.json [--precision P] [--attention A] [--seq N] [--micro-batch N]
 *                   [--every-n N] [--offload] [--seed N] [--init-std X] [--bias-std X] [--zero NAME]...
 *                   -o OUT.json
 * (defaults: seed 7, init std 0.05, biases 0, as test_exec_host's fx_steps)
 * --zero sets a parameter (a recipe name such as mlp.experts.down_proj, every layer) to 0
 * before the step: a part of the model left out on both sides, to find where two
 * implementations differ.
 * Exit 0: written; 1: the step failed; 2: bad usage or input. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/executor.h"
#include "gckpt/util/atomic_file.h"

typedef struct {
    cJSON *params; /* the array the weights went into, in the same order */
    int failed;
} dump_ctx;

/* n floats as a JSON array */
static cJSON *floats(const float *v, uint64_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (uint64_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static uint64_t layers_of(const gckpt_exec *x, int t)
{
    return gckpt_sec_is_block(gckpt_exec_ctx(x)->recipe->t[t].section) ? gckpt_exec_ctx(x)->model->layers : 1;
}

/* each trainable parameter of every layer (the recipe's order, flat, fp32): the weights
 * before the step as new entries of arr (grad false), or their gradients into those
 * entries */
static int each_param(gckpt_exec *x, cJSON *arr, bool grad)
{
    const gckpt_recipe *r = gckpt_exec_ctx(x)->recipe;
    cJSON *e = arr->child;
    gckpt_err err = {{0}};
    for (int t = 0; t < r->nt; t++) {
        if (r->t[t].kind != GCKPT_T_PARAM || !r->t[t].requires_grad) continue;
        uint64_t n = gckpt_exec_param_numel(x, t);
        float *v = malloc(sizeof *v * (n ? n : 1));
        if (!v) return 1;
        for (uint64_t l = 0; l < layers_of(x, t); l++) {
            if (!gckpt_exec_param_in_layer(x, t, (int)l)) continue; /* another block type's */
            gckpt_xstatus rc = grad ? gckpt_exec_read_grad(x, (int)l, t, v, &err) : gckpt_exec_read_param(x, (int)l, t, v, &err);
            if (rc != GCKPT_XS_OK) {
                fprintf(stderr, "gckpt-exec-dump: %s\n", err.msg);
                free(v);
                return 1;
            }
            if (grad) {
                cJSON_AddItemToObject(e, "grad", floats(v, n));
                e = e->next;
                continue;
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, o);
            cJSON_AddStringToObject(o, "name", r->t[t].name);
            cJSON_AddStringToObject(o, "section", gckpt_sec_is_block(r->t[t].section) ? "layer" : "model");
            cJSON_AddNumberToObject(o, "layer", (double)l);
            cJSON_AddItemToObject(o, "data", floats(v, n));
        }
        free(v);
    }
    return 0;
}

/* the parameters named in zero[] set to 0 in every layer (every block type's tensor of the
 * name); 1 when one is not a parameter */
static int zero_params(gckpt_exec *x, const char *const *zero, int nzero, gckpt_err *err)
{
    const gckpt_recipe *r = gckpt_exec_ctx(x)->recipe;
    for (int z = 0; z < nzero; z++) {
        bool found = false;
        for (int t = 0; t < r->nt; t++) {
            if (r->t[t].kind != GCKPT_T_PARAM || strcmp(r->t[t].name, zero[z])) continue;
            found = true;
            float *v = calloc(gckpt_exec_param_numel(x, t) + 1, sizeof *v);
            for (uint64_t l = 0; v && l < layers_of(x, t); l++)
                if (gckpt_exec_param_in_layer(x, t, (int)l) && gckpt_exec_write_param(x, (int)l, t, v, err) != GCKPT_XS_OK)
                    break;
            free(v);
            if (!v || err->msg[0]) return 1;
        }
        if (!found) {
            gckpt_seterr(err, "--zero %s: no such parameter", zero[z]);
            return 1;
        }
    }
    return 0;
}

static void on_grads(gckpt_exec *x, void *user)
{
    dump_ctx *d = user;
    d->failed |= each_param(x, d->params, true);
}

static int usage(void)
{
    fprintf(stderr, "usage: gckpt-exec-dump CONFIG.json [--precision P] [--attention A] [--seq N] [--micro-batch N] "
                    "[--every-n N] [--offload] [--seed N] [--init-std X] [--bias-std X] [--zero NAME]... -o OUT.json\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    const char *cfg = argv[1], *out = NULL, *zero[16];
    int nzero = 0;
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32,
                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_EAGER};
    gckpt_exec_opts o = {.seed = 7, .init_std = 0.05};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--offload")) {
            s.offload = true;
            continue;
        }
        if (!v) return usage();
        int k;
        if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--zero") && nzero < 16) zero[nzero++] = v;
        else if (!strcmp(a, "--precision") && (k = gckpt_precision_from(v)) >= 0) s.precision = (gckpt_precision)k;
        else if (!strcmp(a, "--attention") && (k = gckpt_attention_from(v)) >= 0) s.attention = (gckpt_attention)k;
        else if (!strcmp(a, "--every-n") && (s.every_n = (uint32_t)strtoul(v, NULL, 10)) <= 64) {}
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--init-std") && (o.init_std = strtod(v, NULL)) > 0 && o.init_std < 10) {}
        else if (!strcmp(a, "--bias-std") && (o.bias_std = strtod(v, NULL)) >= 0 && o.bias_std < 10) {}
        else if (!strcmp(a, "--seq") && (s.seq = strtoull(v, NULL, 10)) > 0 && s.seq <= 4096) {}
        else if (!strcmp(a, "--micro-batch") && (s.micro_batch = strtoull(v, NULL, 10)) > 0 && s.micro_batch <= 64) {}
        else return usage();
        i++;
    }
    if (!out) return usage();
    gckpt_err err = {{0}};
    gckpt_model m;
    gckpt_device dev;
    if (!gckpt_model_load(cfg, &m, &err) || !gckpt_device_load("h100-sxm-80gb", &dev, &err)) {
        fprintf(stderr, "gckpt-exec-dump: %s\n", err.msg);
        return 2;
    }
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_exec *x = be ? gckpt_exec_new(be, &m, &dev, &s, &o, &err) : NULL;
    if (!x) {
        fprintf(stderr, "gckpt-exec-dump: %s\n", be ? err.msg : "no host backend");
        if (be) be->destroy(be);
        return 2;
    }
    cJSON *root = cJSON_CreateObject();
    dump_ctx d = {cJSON_CreateArray(), 0};
    cJSON_AddItemToObject(root, "params", d.params);
    int rc = 1;
    gckpt_step_result res;
    gckpt_step_opts so = {.update = false, .on_grads = on_grads, .user = &d};
    if (gckpt_exec_setup(x, &err) != GCKPT_XS_OK || zero_params(x, zero, nzero, &err) || each_param(x, d.params, false) ||
        gckpt_exec_step(x, &so, &res, &err) != GCKPT_XS_OK || d.failed) {
        fprintf(stderr, "gckpt-exec-dump: %s\n", err.msg);
        goto done;
    }
    const int64_t *ids, *labels;
    gckpt_exec_batch(x, &ids, &labels);
    cJSON *ja = cJSON_CreateArray(), *la = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "input_ids", ja);
    cJSON_AddItemToObject(root, "labels", la);
    for (uint64_t i = 0; i < s.micro_batch * s.seq; i++) {
        cJSON_AddItemToArray(ja, cJSON_CreateNumber((double)ids[i]));
        cJSON_AddItemToArray(la, cJSON_CreateNumber((double)labels[i]));
    }
    cJSON_AddNumberToObject(root, "micro_batch", (double)s.micro_batch);
    cJSON_AddNumberToObject(root, "seq", (double)s.seq);
    cJSON_AddStringToObject(root, "precision", gckpt_precision_names[s.precision]);
    cJSON_AddNumberToObject(root, "loss", res.loss);
    char *text = cJSON_PrintUnformatted(root);
    rc = text && gckpt_write_file_atomic(out, text, &err) ? 0 : 2;
    if (rc) fprintf(stderr, "gckpt-exec-dump: %s\n", text ? err.msg : "out of memory");
    free(text);
done:
    cJSON_Delete(root);
    gckpt_exec_free(x);
    be->destroy(be);
    return rc;
}
