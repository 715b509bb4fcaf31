/* libFuzzer target: the plan reader of gckpt-run (gckpt_plan_parse, schema gckpt.plan/1)
 * on arbitrary bytes. A plan is either
 *  - refused with one printable line naming the file, and nothing kept: the result is
 *    cleared but for its file name (a leak is reported by LeakSanitizer), or
 *  - accepted, and then:
 *    - the model rebuilt from inputs.model.config has consistent, non-zero dimensions,
 *      a parameter count that fits 64 bits (checked in 128), and is the model its own
 *      printed config (config_text) parses to again; the embedded config and device
 *      profile hold no infinite number (printed back as null, it became a default);
 *    - the device's figures are finite, positive and in range;
 *    - the inputs are in their documented ranges: seq, micro-batches, exactly one of
 *      global_batch / grad_accum, usable = budget x (1 - margin);
 *    - every entry agrees with the inputs and with itself: every_n and micro-batch among
 *      the swept values, offload only with every_n > 0 and as inputs.offload allows,
 *      micro-batch x grad-accum = global batch (or grad_accum as given), host pinned
 *      memory iff offload, no recompute time without checkpointing, no copy time
 *      without offload, device peak = peak rounded to segments + context, breakdown
 *      sums to the peak with no component below 0, fits iff device peak <= usable, peak
 *      layer / phase / micro-step in range; and, read again from the raw JSON here, its
 *      checkpointed layers are exactly 0, n, 2n, ... below the layer count (none when
 *      n = 0), its timeline (if any) three arrays of one length with known phases;
 *    - recommended / smallest are -1 or entry indices, the recommended entry fits, no
 *      entry has a smaller device peak than the smallest;
 *    - gckpt_plan_file_setting gives each entry's run setting. */
#include <math.h>

#include "fuzz_common.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/core/plan_read.h"
#include "gckpt/core/vision.h"

#define FILE_NAME "fuzz.json"
#define MAXB ((uint64_t)1 << 53)

static void check_model(const gckpt_plan_file *pf)
{
    const gckpt_model *m = &pf->model;
    FUZZ_CHECK(m->layers >= 1 && m->hidden >= 1 && m->heads >= 1 && m->kv_heads >= 1 &&
                   m->head_dim >= 1 && m->intermediate >= 1 && m->vocab >= 1,
               "a zero dimension was accepted");
    FUZZ_CHECK(m->heads % m->kv_heads == 0, "kv heads %llu do not divide heads %llu",
               (unsigned long long)m->kv_heads, (unsigned long long)m->heads);
    FUZZ_CHECK(m->family < GCKPT_NFAMILY, "family %d", (int)m->family);
    FUZZ_CHECK(memchr(m->name, 0, sizeof m->name) && m->name[0], "model name empty or unterminated");
    FUZZ_CHECK(memchr(m->model_type, 0, sizeof m->model_type), "model_type unterminated");
    unsigned __int128 p = closed_form_params128(m);
    FUZZ_CHECK(p <= UINT64_MAX && (uint64_t)p == gckpt_param_count(m), "parameter count");

    /* the embedded config, printed back, is the same model */
    FUZZ_CHECK(pf->config_text, "no config_text");
    gckpt_model again;
    gckpt_err err = {{0}};
    if (pf->vlm) { /* the VLM's config: its text model is the plan's model */
        static gckpt_vlm v;
        FUZZ_CHECK(gckpt_vlm_parse("config_text", pf->config_text, &v, &err), "config_text of an accepted VLM plan refused: %s",
                   err.msg);
        again = v.text;
    } else {
        FUZZ_CHECK(gckpt_model_parse("config_text", pf->config_text, &again, &err),
                   "config_text of an accepted plan refused: %s", err.msg);
    }
    FUZZ_CHECK(again.family == m->family && again.layers == m->layers && again.hidden == m->hidden &&
                   again.heads == m->heads && again.kv_heads == m->kv_heads &&
                   again.head_dim == m->head_dim && again.intermediate == m->intermediate &&
                   again.vocab == m->vocab && again.positions == m->positions &&
                   again.tied == m->tied && again.qkv_bias == m->qkv_bias &&
                   again.o_bias == m->o_bias && again.mlp_bias == m->mlp_bias &&
                   again.qk_norm == m->qk_norm && again.act == m->act &&
                   !strcmp(again.model_type, m->model_type),
               "config_text parses to another model");
}

static void check_device(const gckpt_device *d)
{
    FUZZ_CHECK(memchr(d->name, 0, sizeof d->name) != NULL, "device name unterminated");
    FUZZ_CHECK(d->memory_bytes >= (1u << 20), "memory_bytes %llu", (unsigned long long)d->memory_bytes);
    const double pos[] = {d->tflops_fp32, d->tflops_tf32, d->tflops_bf16, d->tflops_fp16,
                          d->matmul_efficiency, d->hbm_bytes_per_s, d->hbm_efficiency,
                          d->h2d_bytes_per_s, d->d2h_bytes_per_s};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        FUZZ_CHECK(isfinite(pos[i]) && pos[i] > 0, "device figure %zu = %g", i, pos[i]);
    FUZZ_CHECK(d->matmul_efficiency <= 1 && d->hbm_efficiency <= 1, "efficiency above 1");
    FUZZ_CHECK(d->alloc_round_bytes >= 1 && d->segment_round_bytes >= 1, "rounding of 0 bytes");
}

static void check_inputs(const gckpt_plan_file *pf)
{
    FUZZ_CHECK(!strcmp(pf->file, FILE_NAME), "file %s", pf->file);
    FUZZ_CHECK(memchr(pf->generator_version, 0, sizeof pf->generator_version), "version unterminated");
    FUZZ_CHECK(pf->seq >= 1 && pf->seq <= ((uint64_t)1 << 24), "seq %llu", (unsigned long long)pf->seq);
    FUZZ_CHECK(pf->model.family != GCKPT_FAMILY_GPT2 || pf->seq <= pf->model.positions,
               "seq %llu beyond n_positions", (unsigned long long)pf->seq);
    FUZZ_CHECK(pf->n_micro >= 1 && pf->n_micro <= GCKPT_MAX_MB, "n_micro %d", pf->n_micro);
    for (int i = 0; i < pf->n_micro; i++)
        FUZZ_CHECK(pf->micro_batches[i] >= 1 && pf->micro_batches[i] <= (1u << 20), "micro-batch %llu",
                   (unsigned long long)pf->micro_batches[i]);
    FUZZ_CHECK((pf->global_batch == 0) != (pf->grad_accum == 0), "global_batch %llu, grad_accum %llu",
               (unsigned long long)pf->global_batch, (unsigned long long)pf->grad_accum);
    FUZZ_CHECK(pf->global_batch <= ((uint64_t)1 << 32) && pf->grad_accum <= ((uint64_t)1 << 32), "batch range");
    FUZZ_CHECK((unsigned)pf->precision < GCKPT_NPREC && (unsigned)pf->optimizer < GCKPT_NOPT &&
                   (unsigned)pf->attention < GCKPT_NATTN && (unsigned)pf->offload <= GCKPT_OFFLOAD_BOTH,
               "enum out of range");
    FUZZ_CHECK(pf->budget_bytes >= 1 && pf->budget_bytes <= MAXB && pf->usable_bytes <= MAXB, "budget");
    FUZZ_CHECK(pf->margin >= 0 && pf->margin <= 0.99, "margin %g", pf->margin);
    double want = (double)pf->budget_bytes * (1.0 - pf->margin);
    FUZZ_CHECK(fabs(want - (double)pf->usable_bytes) <= 2 + 1e-12 * want, "usable %llu vs %.0f",
               (unsigned long long)pf->usable_bytes, want);
    FUZZ_CHECK(pf->n >= 1 && pf->n <= GCKPT_MAX_ENTRIES && pf->entries, "%zu entries", pf->n);
    FUZZ_CHECK(pf->recommended >= -1 && pf->recommended < (long)pf->n, "recommended %ld", pf->recommended);
    FUZZ_CHECK(pf->smallest >= -1 && pf->smallest < (long)pf->n, "smallest %ld", pf->smallest);
    FUZZ_CHECK(pf->recommended < 0 || pf->entries[pf->recommended].fits, "recommended entry does not fit");
    for (size_t i = 0; pf->smallest >= 0 && i < pf->n; i++)
        FUZZ_CHECK(pf->entries[i].r.device_peak_bytes >= pf->entries[pf->smallest].r.device_peak_bytes,
                   "smallest %ld, but entry %zu has a smaller device peak", pf->smallest, i);
}

static bool raw_int(const cJSON *it, uint64_t *out)
{
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0) || it->valuedouble > (double)MAXB ||
        it->valuedouble != floor(it->valuedouble))
        return false;
    *out = (uint64_t)it->valuedouble;
    return true;
}

/* Entry i against the inputs, against itself and against its raw JSON object. */
static void check_entry(const gckpt_plan_file *pf, size_t i, const cJSON *raw, const cJSON *raw_every)
{
    const gckpt_entry *e = &pf->entries[i];
    const gckpt_result *r = &e->r;
    /* a VLM's (inputs.vision): every_n counts its vision blocks first, then its text layers
     * (transformers' module order), and checkpointed_layers lists the text layers */
    const uint64_t off = pf->vlm ? pf->towers[0] : 0, L = pf->vlm ? pf->towers[1] : pf->model.layers;

    FUZZ_CHECK(e->every_n <= off + L, "entry %zu: every_n %u > %llu layers", i, e->every_n, (unsigned long long)(off + L));
    bool listed = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, raw_every) {
        uint64_t v;
        listed |= raw_int(it, &v) && v == e->every_n;
    }
    FUZZ_CHECK(listed, "entry %zu: every_n %u not among inputs.every_n_layers", i, e->every_n);
    FUZZ_CHECK(!e->offload || e->every_n > 0, "entry %zu offloads without checkpointing", i);
    FUZZ_CHECK(!e->offload || pf->offload != GCKPT_OFFLOAD_OFF, "entry %zu offloads, inputs.offload off", i);
    FUZZ_CHECK(e->offload || !e->every_n || pf->offload != GCKPT_OFFLOAD_ON, "entry %zu: inputs.offload on", i);
    listed = false;
    for (int k = 0; k < pf->n_micro; k++) listed |= pf->micro_batches[k] == e->micro_batch;
    FUZZ_CHECK(listed, "entry %zu: micro-batch %llu not swept", i, (unsigned long long)e->micro_batch);
    FUZZ_CHECK(e->grad_accum >= 1, "entry %zu: grad_accum 0", i);
    if (pf->global_batch)
        FUZZ_CHECK((unsigned __int128)e->micro_batch * e->grad_accum == pf->global_batch,
                   "entry %zu: %llu x %llu != global batch %llu", i, (unsigned long long)e->micro_batch,
                   (unsigned long long)e->grad_accum, (unsigned long long)pf->global_batch);
    else
        FUZZ_CHECK(e->grad_accum == pf->grad_accum, "entry %zu: grad_accum %llu != %llu", i,
                   (unsigned long long)e->grad_accum, (unsigned long long)pf->grad_accum);

    /* memory */
    FUZZ_CHECK(r->peak_bytes <= MAXB && r->device_peak_bytes <= MAXB && r->host_pinned_bytes <= MAXB,
               "entry %zu: byte count above 2^53", i);
    unsigned __int128 seg = pf->dev.segment_round_bytes;
    unsigned __int128 dp = (r->peak_bytes + seg - 1) / seg * seg + pf->dev.context_bytes;
    FUZZ_CHECK(dp == r->device_peak_bytes, "entry %zu: device peak %llu", i,
               (unsigned long long)r->device_peak_bytes);
    FUZZ_CHECK(r->after_forward_bytes <= r->peak_bytes, "entry %zu: after_forward > peak", i);
    /* CPU offload on several GPUs (inputs.layout.offload) pins host memory of its own */
    FUZZ_CHECK(pf->layout.offload ? !e->offload || r->host_pinned_bytes > 0 : e->offload == (r->host_pinned_bytes > 0),
               "entry %zu: host pinned %llu, offload %d", i,
               (unsigned long long)r->host_pinned_bytes, e->offload);
    FUZZ_CHECK(r->peak_phase < GCKPT_NPHASE, "entry %zu: phase %u", i, r->peak_phase);
    FUZZ_CHECK(r->peak_layer >= -1 && (r->peak_layer < 0 || (uint64_t)r->peak_layer < off + L), "entry %zu: peak layer %d",
               i, r->peak_layer);
    FUZZ_CHECK(r->peak_micro < 3 && (r->peak_micro != 1 || e->grad_accum >= 2), "entry %zu: peak micro-step %u", i,
               r->peak_micro);
    int64_t sum = 0;
    for (int k = 0; k < GCKPT_NCOMP; k++) {
        FUZZ_CHECK(r->breakdown[k] >= 0 && r->breakdown[k] <= (int64_t)MAXB, "entry %zu: component %s = %lld", i,
                   gckpt_component_names[k], (long long)r->breakdown[k]);
        sum += r->breakdown[k];
    }
    FUZZ_CHECK(sum == (int64_t)r->peak_bytes, "entry %zu: breakdown sums to %lld, peak %llu", i, (long long)sum,
               (unsigned long long)r->peak_bytes);
    FUZZ_CHECK(e->fits == (r->device_peak_bytes <= pf->usable_bytes), "entry %zu: fits %d", i, e->fits);

    /* time */
    const double t[] = {r->step_s, r->forward_s, r->backward_s, r->recompute_s, r->copy_s,
                        r->optimizer_s, r->tokens_per_s, r->mfu};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        FUZZ_CHECK(isfinite(t[k]) && t[k] >= 0 && t[k] <= 1e12, "entry %zu: time %zu = %g", i, k, t[k]);
    FUZZ_CHECK(r->step_s > 0, "entry %zu: step_s 0", i);
    FUZZ_CHECK(e->every_n || r->recompute_s == 0, "entry %zu: recompute without checkpointing", i);
    FUZZ_CHECK(e->offload || pf->layout.offload || r->copy_s == 0, "entry %zu: copy time without offload", i);

    /* the raw entry: the same setting, and checkpointed layers 0, n, 2n, ... < L */
    FUZZ_CHECK(cJSON_IsObject(raw), "entry %zu: raw entry not an object", i);
    uint64_t v;
    FUZZ_CHECK(raw_int(cJSON_GetObjectItemCaseSensitive(raw, "index"), &v) && v == i, "entry %zu: index", i);
    FUZZ_CHECK(raw_int(cJSON_GetObjectItemCaseSensitive(raw, "every_n_layers"), &v) && v == e->every_n,
               "entry %zu: every_n_layers", i);
    FUZZ_CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(raw, "offload")) &&
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(raw, "offload")) == e->offload,
               "entry %zu: offload", i);
    FUZZ_CHECK(raw_int(cJSON_GetObjectItemCaseSensitive(raw, "micro_batch"), &v) && v == e->micro_batch,
               "entry %zu: micro_batch", i);
    FUZZ_CHECK(raw_int(cJSON_GetObjectItemCaseSensitive(raw, "grad_accum"), &v) && v == e->grad_accum,
               "entry %zu: grad_accum", i);
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(raw, "checkpointed_layers");
    FUZZ_CHECK(cJSON_IsArray(cl), "entry %zu: checkpointed_layers not an array", i);
    uint64_t k = 0;
    /* the first text layer whose module index off + l is a multiple of every_n */
    const uint64_t first = e->every_n && off % e->every_n ? e->every_n - off % e->every_n : 0;
    cJSON_ArrayForEach(it, cl) {
        FUZZ_CHECK(e->every_n > 0, "entry %zu: a checkpointed layer with every_n 0", i);
        FUZZ_CHECK(raw_int(it, &v) && v == first + k * e->every_n && v < L,
                   "entry %zu: checkpointed layer %llu is not %llu (every_n %u, %llu layers)", i,
                   (unsigned long long)k, (unsigned long long)(first + k * e->every_n), e->every_n, (unsigned long long)L);
        k++;
    }
    /* all of them: the next multiple is past the last layer */
    FUZZ_CHECK(e->every_n == 0 ? k == 0 : first + k * e->every_n >= L, "entry %zu: %llu checkpointed layers of %llu, every_n %u",
               i, (unsigned long long)k, (unsigned long long)L, e->every_n);

    /* a timeline, if any: three arrays of one length, phases by name */
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(raw, "timeline");
    if (tl) {
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(tl, "seconds");
        const cJSON *al = cJSON_GetObjectItemCaseSensitive(tl, "allocated_bytes");
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(tl, "phase");
        FUZZ_CHECK(cJSON_IsArray(sec) && cJSON_IsArray(al) && cJSON_IsArray(ph) &&
                       cJSON_GetArraySize(sec) == cJSON_GetArraySize(al) &&
                       cJSON_GetArraySize(al) == cJSON_GetArraySize(ph),
                   "entry %zu: timeline arrays", i);
        cJSON_ArrayForEach(it, ph) {
            bool known = false;
            for (int k2 = 0; k2 < GCKPT_NPHASE && cJSON_IsString(it); k2++)
                known |= !strcmp(it->valuestring, gckpt_phase_names[k2]);
            FUZZ_CHECK(known, "entry %zu: timeline phase %s", i, cJSON_IsString(it) ? it->valuestring : "(not a string)");
        }
    }

    gckpt_setting s = gckpt_plan_file_setting(pf, i);
    /* (a CP plan's rank runs seq / cp tokens) */
    FUZZ_CHECK(s.seq == (pf->cp ? pf->seq / pf->cp : pf->seq) && s.micro_batch == e->micro_batch && s.grad_accum == e->grad_accum &&
                   s.precision == pf->precision && s.optimizer == pf->optimizer &&
                   s.attention == pf->attention && s.every_n == e->every_n && s.offload == e->offload,
               "entry %zu: setting", i);
}

/* No number in o is infinite (1e999): the embedded config and profile reach their readers
 * printed back to text, where cJSON writes infinity as null, which an optional field takes
 * as "absent": a plan's value silently replaced by a default. */
static void check_finite(const cJSON *o, const char *what)
{
    if (cJSON_IsNumber(o))
        FUZZ_CHECK(isfinite(o->valuedouble), "an infinite number in %s (key %s) was accepted", what,
                   o->string ? o->string : "(array item)");
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next) check_finite(c, what);
}

static void check_accepted(const gckpt_plan_file *pf, const char *text)
{
    check_inputs(pf);
    check_model(pf);
    check_device(&pf->dev);
    cJSON *root = cJSON_ParseWithOpts(text, NULL, true);
    FUZZ_CHECK(cJSON_IsObject(root), "accepted text is not a JSON object");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    const cJSON *every = cJSON_GetObjectItemCaseSensitive(in, "every_n_layers");
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    FUZZ_CHECK(cJSON_IsArray(every) && cJSON_IsArray(entries), "inputs.every_n_layers / entries");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(in, "model");
    check_finite(cJSON_GetObjectItemCaseSensitive(model, "config"), "inputs.model.config");
    check_finite(cJSON_GetObjectItemCaseSensitive(in, "device"), "inputs.device");
    FUZZ_CHECK((size_t)cJSON_GetArraySize(entries) == pf->n, "%d raw entries, %zu read",
               cJSON_GetArraySize(entries), pf->n);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) check_entry(pf, i++, e, every);
    cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    gckpt_plan_file pf;
    gckpt_err err = {{0}};
    if (!gckpt_plan_parse(FILE_NAME, text, &pf, &err)) {
        fuzz_check_error(&err, FILE_NAME);
        /* nothing kept but the file name */
        FUZZ_CHECK(!pf.entries && !pf.config_text && pf.n == 0 && pf.recommended == -1 && pf.smallest == -1,
                   "a refused plan kept its entries or config");
        FUZZ_CHECK(!strcmp(pf.file, FILE_NAME), "a refused plan lost its file name: %s", pf.file);
    } else {
        check_accepted(&pf, text);
        gckpt_plan_file_free(&pf);
        FUZZ_CHECK(!pf.entries && !pf.config_text && pf.n == 0, "gckpt_plan_file_free left data");
    }
    free(text);
    return 0;
}
