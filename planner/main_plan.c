/* gckpt-plan: predict peak memory and step time for every gradient-checkpointing
 * setting, recommend the fastest that fits, write the plan. */
#include <dirent.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/planner/calibrate.h"
#include "gckpt/planner/cli_names.h"
#include "gckpt/planner/ds_config.h"
#include "gckpt/planner/plan.h"
#include "gckpt/planner/plan_output.h"
#include "gckpt/util/outpath.h"
#include "gckpt/util/safe_text.h"
#include "gckpt/util/stdio_check.h"

/* text after lead, wrapped at spaces to lines of at most 90 columns, continuation lines
 * indented as far as lead is long */
static void print_wrapped(FILE *f, const char *lead, const char *text)
{
    const int width = 90, indent = (int)strlen(lead);
    fputs(lead, f);
    int col = indent;
    while (*text) {
        size_t w = strcspn(text, " ");
        if (col > indent && col + 1 + (int)w > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, w, f);
        col += (int)w;
        text += w;
        while (*text == ' ') text++;
    }
    fputc('\n', f);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: gckpt-plan [options]\n"
"\n"
"Predict peak GPU memory and step time of Hugging Face training for every\n"
"gradient-checkpointing setting (every_n_layers x offload x micro-batch), say where\n"
"the peak is, and recommend the fastest setting that fits.\n"
"\n"
"  --model NAME|PATH      model: a name in models/ or a path to an HF config.json\n"
"                         (default llama-3.1-8b)\n"
"  --gpu NAME|PATH        GPU profile: a name in devices/ or a path (default h100-sxm-80gb)\n"
"  --target cuda|cpu      whose kernels to plan: CUDA's, or PyTorch's CPU kernels (what\n"
"                         tools/hf_probe measures; compare with your own CPU run); default:\n"
"                         the profile's \"kind\" (cuda unless it says cpu, as\n"
"                         tests/data/devices/cpu-exact.json does); recorded in the plan\n"
"  --seq N                sequence length in tokens (default: 4096, or the model's\n"
"                         max_position_embeddings / n_positions when smaller)\n"
"  --allow-long-seq       plan a --seq beyond max_position_embeddings (RoPE models;\n"
"                         recorded in the plan)\n"
"  --micro-batch N[,N..]  per-device micro-batch sizes to sweep (default 1)\n"
"  --grad-accum N         gradient accumulation steps (default 1)\n"
"  --global-batch N       sequences per optimizer step per device; sets grad-accum =\n"
"                         N / micro-batch for each micro-batch that divides N\n"
"  --precision P          fp32 | bf16 (pure) | amp-bf16 (HF bf16=True, default) | amp-fp16\n"
"                         (any case)\n"
                          );
    /* the optimizers from the one table (cli_names.c) */
    char list[1024];
    gckpt_optimizer_spellings(list, sizeof list, true);
    strncat(list, "; the TrainingArguments optim names are accepted", sizeof list - strlen(list) - 1);
    print_wrapped(f, "  --optimizer O          ", list);
    fprintf(f,
"  --attention A          sdpa (default) | eager | flash_attention_2 (planned as sdpa)\n"
"  --method M             full (default) | lora (peft LoRA) | qlora (bitsandbytes 4-bit or\n"
"                         8-bit base + prepare_model_for_kbit_training + LoRA)\n"
"  --lora-rank N          LoRA r (default 16)\n"
"  --lora-alpha N         lora_alpha (default 2 x rank)\n"
"  --lora-dropout P       lora_dropout in [0, 1) (default 0.05)\n"
"  --lora-targets T       all-linear (default) or a list of module names such as\n"
"                         q_proj,k_proj,v_proj,o_proj (gpt2: c_attn,c_proj,c_fc)\n"
"  --modules-to-save LIST trainable copies: lm_head, embed_tokens (gpt2: wte)\n"
"  --quant Q              qlora: nf4 (default) | fp4 | int8 (load_in_8bit)\n"
"  --double-quant on|off  qlora 4-bit: bnb_4bit_use_double_quant (default on)\n"
"  --compute-dtype D      qlora 4-bit: bnb_4bit_compute_dtype bf16 (default) | fp16 | fp32\n"
"  --gpus N               GPUs per node (default 1)\n"
"  --nodes M              nodes (default 1)\n"
"  --parallel MODE[,..]   with several GPUs (required there): ddp | fsdp (FSDP2 fully_shard)\n"
"                         | zero1 | zero2 | zero3 (DeepSpeed), or a list to compare; memory\n"
"                         is the busiest rank's (README, \"Several GPUs\")\n"
"  --moe-imbalance F      mixture of experts: plan the most-loaded expert receiving F x the\n"
"                         balanced share of the tokens (default: balanced routing; recorded\n"
"                         in the plan; with transformers' grouped_mm experts it changes\n"
"                         neither memory nor FLOPs)\n"
"  --deepspeed FILE       a ds_config.json: its ZeRO stage and bucket limits (\"auto\" as\n"
"                         the Trainer resolves it) and ZeRO-3's CPU offload (from the\n"
"                         source, unverified); NVMe offload and fp16 are refused\n"
"  --fsdp-offload off|on  --parallel fsdp: FSDP2's CPUOffloadPolicy (fsdp_config\n"
"                         \"cpu_offload\"; from the source, unverified; default off)\n"
"  --every-n LIST         every_n_layers values: all (default: off and 1..L), off, or a\n"
"                         list such as off,1,2,4 (0 = off)\n"
"  --offload off|on|both  offload checkpointed inputs to pinned host memory (default both)\n"
"  --budget SIZE          memory budget, e.g. 80GiB, 79GB (default: the GPU's memory)\n"
"  --margin PCT           part of the budget kept free, e.g. 5%% or 0.05 (default 5%%)\n"
"  -o, --output FILE      write the JSON plan (schema gckpt.plan/2); '-' for stdout\n"
"  --plot FILE            plot (.png or .svg) memory vs step time and the recommended\n"
"                         entry's memory timeline with gnuplot\n"
"  --table frontier|all   rows of the table: notable entries (default) or all\n"
"  -q, --quiet            no table or recommendation on stdout\n"
"  --list                 list the models and GPUs shipped with gckpt\n"
"  --calibrate-from REPORT [REPORT...]\n"
"                         fit the --gpu profile's efficiencies (default: the plans' profile)\n"
"                         to the step times measured in gckpt-run or Trainer callback\n"
"                         reports; write the calibrated profile to -o (docs/calibration.md)\n"
"  -h, --help             this help\n"
"  -V, --version          version\n"
"\n"
"Exit status: 0 success (also when nothing fits: the plan says so), 2 bad usage or input,\n"
"an output that cannot be written (checked before any work) or a failed write to stdout.\n");
}

static int bad(const char *fmt, const char *a, const char *b)
{
    gckpt_err e; /* one line, arguments sanitised */
    gckpt_seterr(&e, fmt, a, b);
    fprintf(stderr, "gckpt-plan: %s\n", e.msg);
    return GCKPT_EXIT_INPUT;
}

/* An unknown option: one line naming it (getopt leaves it at argv[optind - 1], or in
 * optopt for an unknown letter inside a group such as -qx). */
static int bad_option(int argc, char **argv)
{
    char name[64];
    const char *arg = optind - 1 < argc ? argv[optind - 1] : "";
    if (optopt && !(arg[0] == '-' && arg[1] == '-')) snprintf(name, sizeof name, "-%c", optopt);
    else snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);
    return bad("unknown option '%s'%s (see --help)", name, "");
}

static void list_dir(const char *sub)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", gckpt_data_dir(), sub);
    DIR *d = opendir(path);
    printf("%s (%s):\n", sub, path);
    if (!d) {
        printf("  (cannot open)\n");
        return;
    }
    struct dirent *e;
    char *names[512];
    int n = 0;
    while ((e = readdir(d)) && n < 512) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json") && (names[n] = strndup(e->d_name, l - 5)))
            gckpt_text_sanitize(names[n++]);
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    for (int i = 0; i < n; i++) {
        printf("  %s\n", names[i]);
        free(names[i]);
    }
}

/* a finite number, the whole string */
static bool parse_real(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool parse_margin(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v)) return false;
    if (*end == '%') {
        v /= 100.0;
        end++;
    }
    if (*end || v < 0 || v >= 1) return false;
    *out = v;
    return true;
}

static int parse_every(const char *s, uint32_t **out, int *n)
{
    if (!strcmp(s, "all")) {
        *out = NULL;
        *n = 0;
        return 0;
    }
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    if (cap > 4096) return -1; /* no model has that many layers */
    uint32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    int k = 0;
    char *dup = strdup(s), *save = NULL;
    if (!dup) {
        free(v);
        return -1;
    }
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint64_t x;
        if (!strcmp(tok, "off")) x = 0;
        else if (!gckpt_parse_u64(tok, 0, 100000, &x)) {
            free(dup);
            free(v);
            return -1;
        }
        bool dupl = false;
        for (int i = 0; i < k; i++) dupl |= v[i] == x;
        if (!dupl) v[k++] = (uint32_t)x;
    }
    free(dup);
    if (!k || s[strlen(s) - 1] == ',' || s[0] == ',') {
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

/* One alternative request re-planned: its line of "What would fit instead". */
static void print_alternative(const gckpt_plan_request *r, const char *label, bool *header, FILE *f)
{
    gckpt_plan_request c = *r;
    if (r->every_n) {
        c.every_n = malloc(sizeof *c.every_n * (size_t)r->n_every);
        if (!c.every_n) return;
        memcpy(c.every_n, r->every_n, sizeof *c.every_n * (size_t)r->n_every);
    }
    gckpt_plan p;
    gckpt_err err;
    bool ok = gckpt_plan_run(&c, &p, &err);
    free(c.every_n);
    if (!ok) return;
    if (!*header) {
        fprintf(f, "\nWhat would fit instead (same model, GPU, sequence and batch):\n");
        *header = true;
    }
    fprintf(f, "  %-46s ", label);
    if (p.recommended >= 0) {
        const gckpt_entry *e = &p.entries[p.recommended];
        char en[16];
        if (e->every_n) snprintf(en, sizeof en, "%u", e->every_n);
        else snprintf(en, sizeof en, "off");
        fprintf(f, "fits: every_n_layers=%s offload=%s mb %llu, %.2f GiB, %.0f tokens/s\n", en,
                e->offload ? "on" : "off", (unsigned long long)e->micro_batch,
                (double)e->r.device_peak_bytes / 1073741824.0, e->r.tokens_per_s);
    } else {
        fprintf(f, "does not fit either (smallest %.2f GiB)\n",
                (double)p.entries[p.smallest].r.device_peak_bytes / 1073741824.0);
    }
    gckpt_plan_free(&p);
}

/* When nothing fits: re-plan with cheaper precision / optimizer choices and, for full
 * fine-tuning, with LoRA and QLoRA (the planner's defaults: r 16, all-linear; QLoRA nf4
 * with double quantization, bf16 compute), and say which would fit, so the user gets a
 * way forward, not only a "no". */
static void print_alternatives(const gckpt_plan_request *req, const gckpt_model *model, FILE *f)
{
    /* several GPUs: the other modes on the same GPUs (the precision / optimizer / LoRA
     * alternatives below are refused there: nothing else was measured per rank) */
    if (req->layout.mode != GCKPT_PAR_NONE) {
        bool header = false;
        char label[96];
        for (int m = GCKPT_PAR_DDP; m < GCKPT_NPAR; m++) {
            if (m == req->layout.mode) continue;
            gckpt_plan_request r = *req;
            r.layout.mode = (uint8_t)m;
            snprintf(label, sizeof label, "--parallel %s", gckpt_parallel_names[m]);
            print_alternative(&r, label, &header, f);
        }
        return;
    }
    static const struct { int prec, opt; } alt[] = {
        {-1, GCKPT_ADAMW_8BIT}, {GCKPT_BF16, -1}, {GCKPT_BF16, GCKPT_ADAMW_8BIT}, {GCKPT_BF16, GCKPT_SGD},
    };
    bool header = false;
    char label[96];
    int tried[sizeof alt / sizeof alt[0] + 1][2] = {{(int)req->precision, (int)req->optimizer}};
    int ntried = 1;
    for (size_t i = 0; i < sizeof alt / sizeof alt[0]; i++) {
        gckpt_plan_request r = *req;
        if (alt[i].prec >= 0) r.precision = (gckpt_precision)alt[i].prec;
        if (alt[i].opt >= 0) r.optimizer = (gckpt_optimizer)alt[i].opt;
        /* an alternative that keeps one of the request's choices can equal the request
         * or an earlier one (bf16 + adamw-8bit from a bf16 request): say each once */
        bool seen = false;
        for (int k = 0; k < ntried; k++) seen |= tried[k][0] == (int)r.precision && tried[k][1] == (int)r.optimizer;
        if (seen) continue;
        tried[ntried][0] = (int)r.precision;
        tried[ntried][1] = (int)r.optimizer;
        ntried++;
        snprintf(label, sizeof label, "--precision %-8s --optimizer %-13s", gckpt_precision_names[r.precision],
                 gckpt_optimizer_names[r.optimizer]);
        print_alternative(&r, label, &header, f);
    }
    if (req->peft.method != GCKPT_METHOD_FULL) return;
    static const struct { int method, prec; } peft[] = {
        {GCKPT_METHOD_LORA, GCKPT_BF16}, {GCKPT_METHOD_LORA, GCKPT_AMP_BF16}, {GCKPT_METHOD_QLORA, GCKPT_AMP_BF16}};
    for (size_t i = 0; i < sizeof peft / sizeof peft[0]; i++) {
        gckpt_plan_request r = *req;
        gckpt_peft_default((gckpt_method)peft[i].method, &r.peft);
        r.precision = (gckpt_precision)peft[i].prec;
        /* where all-linear is refused (the mixture-of-experts families), the family's
         * modelled linears: the attention projections */
        gckpt_err err;
        const char *tg = "all-linear";
        if (!gckpt_peft_model_ok(model, &r.peft, &err)) {
            r.peft.targets = gckpt_lora_family_targets(model->family);
            tg = "q/k/v/o";
        }
        snprintf(label, sizeof label, "--method %-5s --precision %-8s (r 16, %s)", gckpt_method_names[peft[i].method],
                 gckpt_precision_names[r.precision], tg);
        print_alternative(&r, label, &header, f);
    }
}

enum { O_MODEL = 256, O_GPU, O_SEQ, O_MB, O_GA, O_GB, O_PREC, O_OPT, O_ATTN, O_EVERY, O_OFF,
       O_BUDGET, O_MARGIN, O_PLOT, O_TABLE, O_LIST, O_LONG, O_METHOD, O_RANK, O_ALPHA, O_LDROP, O_TARGETS,
       O_MTS, O_QUANT, O_DQ, O_CDT, O_GPUS, O_NODES, O_PAR, O_DS, O_MOE, O_FSDP_OFF, O_TARGET, O_CALIB };

/* What the command line asks for. */
typedef struct {
    gckpt_plan_request req;
    const char *out, *plot;
    bool all, quiet, ga_set, gb_set;
    char attn_note[320];
    uint32_t *every;
    int n_every;
    /* LoRA / QLoRA options as given: applied over the method's defaults once all are read */
    const char *peft_opt[O_CDT - O_METHOD + 1];
    /* --parallel: the modes to plan, in the order given */
    uint8_t modes[GCKPT_NPAR];
    int n_modes;
    const char *ds_path; /* --deepspeed */
    const char *fsdp_offload; /* --fsdp-offload on|off */
    /* --calibrate-from: the reports (argv's strings), whether --gpu and a planning option were given */
    const char **calib;
    int n_calib;
    bool gpu_given, planning;
} cli_args;

/* --deepspeed FILE: its stage decides the mode (or must agree with --parallel), its limits go
 * into the layout; 0 or the exit status of a bad file or combination. */
static int apply_deepspeed(cli_args *a)
{
    if (!a->ds_path) return 0;
    if (strlen(a->ds_path) >= sizeof a->req.deepspeed) return bad("--deepspeed: path too long%s%s", "", "");
    gckpt_ds_config ds;
    gckpt_err err;
    if (!gckpt_ds_config_read(a->ds_path, &ds, &err)) return bad("%s%s", err.msg, "");
    if (a->n_modes > 1 || (a->n_modes == 1 && a->modes[0] != ds.mode))
        return bad("--parallel %s contradicts --deepspeed (zero_optimization.stage: %s)",
                   gckpt_parallel_names[a->modes[0]], gckpt_parallel_names[ds.mode]);
    if (ds.bf16 == 1 && a->req.precision != GCKPT_AMP_BF16)
        return bad("--deepspeed: bf16.enabled is true; plan it with --precision amp-bf16 (the Trainer's bf16=True)%s%s", "", "");
    if (ds.bf16 == 0 && a->req.precision != GCKPT_FP32)
        return bad("--deepspeed: bf16.enabled is false; plan it with --precision fp32%s%s", "", "");
    a->modes[0] = (uint8_t)ds.mode;
    a->n_modes = 1;
    a->req.layout.ds = ds.limits;
    a->req.layout.offload = ds.offload;
    snprintf(a->req.deepspeed, sizeof a->req.deepspeed, "%s", a->ds_path);
    return 0;
}

/* --parallel LIST into a->modes; 0 or the exit status of a bad value. */
static int parse_parallel(const char *arg, cli_args *a)
{
    char buf[128];
    if (strlen(arg) >= sizeof buf) return bad("--parallel: '%s' is too long%s", arg, "");
    snprintf(buf, sizeof buf, "%s", arg);
    a->n_modes = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int v = gckpt_parallel_from(tok);
        if (v < 0) return bad("--parallel: unknown '%s' (none, ddp, fsdp, zero1, zero2, zero3 or a list)%s", tok, "");
        bool seen = false;
        for (int i = 0; i < a->n_modes; i++) seen |= a->modes[i] == v;
        if (!seen) a->modes[a->n_modes++] = (uint8_t)v;
    }
    if (!a->n_modes || arg[0] == ',' || arg[strlen(arg) - 1] == ',')
        return bad("--parallel: '%s' is not a mode or a list like ddp,fsdp,zero3%s", arg, "");
    return 0;
}

/* --fsdp-offload on|off: FSDP2's CPUOffloadPolicy (fsdp_config's "cpu_offload"), --parallel
 * fsdp alone; 0 or the exit status of a bad value. */
static int apply_fsdp_offload(cli_args *a)
{
    const char *v = a->fsdp_offload;
    if (!v) return 0;
    if (strcmp(v, "on") && strcmp(v, "off")) return bad("--fsdp-offload: '%s' is not on or off%s", v, "");
    if (a->n_modes != 1 || a->modes[0] != GCKPT_PAR_FSDP)
        return bad("--fsdp-offload needs --parallel fsdp alone (ZeRO's offload is read from --deepspeed FILE)%s%s", "", "");
    if (!strcmp(v, "on")) a->req.layout.offload = GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM;
    return 0;
}

/* The layout against the number of GPUs; 0 or the exit status of a bad combination. */
static int check_layout(cli_args *a)
{
    uint32_t world = gckpt_layout_world(&a->req.layout);
    if (world == 1 && a->ds_path) return bad("--deepspeed needs more than one GPU (--gpus N, --nodes M)%s%s", "", "");
    int rc = apply_deepspeed(a);
    if (rc) return rc;
    if (world == 1) {
        if (a->n_modes > 1 || (a->n_modes == 1 && a->modes[0] != GCKPT_PAR_NONE))
            return bad("--parallel %s needs more than one GPU (--gpus N, --nodes M)%s",
                       gckpt_parallel_names[a->modes[a->n_modes - 1]], "");
        a->n_modes = 0;
        return a->fsdp_offload ? apply_fsdp_offload(a) : 0; /* refused: no fsdp on one GPU */
    }
    if (!a->n_modes) {
        char w[16];
        snprintf(w, sizeof w, "%u", world);
        return bad("%s GPUs: choose --parallel ddp, fsdp, zero1, zero2, zero3 or a list to compare%s", w, "");
    }
    for (int i = 0; i < a->n_modes; i++)
        if (a->modes[i] == GCKPT_PAR_NONE) return bad("--parallel none with several GPUs: choose ddp, fsdp, zero1, zero2 or zero3%s%s", "", "");
    if (a->n_modes > 1 && (a->out || a->plot))
        return bad("--parallel with a list compares modes; -o and --plot need one mode%s%s", "", "");
    a->req.layout.mode = a->modes[0];
    return apply_fsdp_offload(a);
}

/* The LoRA / QLoRA options over the defaults of --method (gckpt_peft_default); 0 or the
 * exit status of a bad value. Options other than --method need lora or qlora, the
 * quantization ones qlora. */
static int apply_peft_options(cli_args *a)
{
    const char *const *o = a->peft_opt;
    static const char *const names[] = {"method", "lora-rank", "lora-alpha", "lora-dropout", "lora-targets",
                                        "modules-to-save", "quant", "double-quant", "compute-dtype"};
    int method = o[0] ? gckpt_method_from(o[0]) : GCKPT_METHOD_FULL;
    if (method < 0) return bad("--method: unknown '%s' (full, lora, qlora)%s", o[0], "");
    gckpt_peft *pf = &a->req.peft;
    gckpt_peft_default((gckpt_method)method, pf);
    for (int i = 1; i <= O_CDT - O_METHOD; i++) {
        if (!o[i]) continue;
        if (method == GCKPT_METHOD_FULL) return bad("--%s needs --method lora or qlora%s", names[i], "");
        if (i >= O_QUANT - O_METHOD && method != GCKPT_METHOD_QLORA) return bad("--%s needs --method qlora%s", names[i], "");
    }
    uint64_t rank = pf->rank;
    char badname[64];
    if (o[1] && !gckpt_parse_u64(o[1], 1, 65536, &rank)) return bad("--lora-rank: '%s' is not an integer in [1, 65536]%s", o[1], "");
    pf->rank = (uint32_t)rank;
    pf->alpha = 2.0 * (double)rank;
    if (o[2] && (!parse_real(o[2], &pf->alpha) || pf->alpha <= 0 || pf->alpha > 1e6))
        return bad("--lora-alpha: '%s' is not a number in (0, 1e6]%s", o[2], "");
    if (o[3] && (!parse_real(o[3], &pf->dropout) || pf->dropout < 0 || pf->dropout >= 1))
        return bad("--lora-dropout: '%s' is not a probability in [0, 1)%s", o[3], "");
    if (o[4] && !gckpt_lora_targets_parse(o[4], &pf->targets, badname, sizeof badname)) {
        char all[256];
        gckpt_lora_all_names(all, sizeof all);
        return bad("--lora-targets: '%s' is not all-linear or a linear's name (%s)", badname, all);
    }
    if (o[5] && !gckpt_mts_parse(o[5], &pf->modules_to_save, badname, sizeof badname))
        return bad("--modules-to-save: '%s' is not lm_head, embed_tokens, wte or embed_in%s", badname, "");
    if (o[6]) {
        int q = -1;
        for (int k = 1; k < GCKPT_NQUANT; k++)
            if (!strcmp(o[6], gckpt_quant_names[k])) q = k;
        if (q < 0) return bad("--quant: unknown '%s' (nf4, fp4, int8)%s", o[6], "");
        pf->quant = (uint8_t)q;
    }
    if (o[7] && strcmp(o[7], "on") && strcmp(o[7], "off")) return bad("--double-quant: '%s' is not on or off%s", o[7], "");
    if (o[7]) pf->double_quant = !strcmp(o[7], "on");
    if (o[8]) {
        static const struct { const char *name; uint8_t dt; } cd[] = {
            {"bf16", GCKPT_DT_BF16}, {"fp16", GCKPT_DT_F16}, {"fp32", GCKPT_DT_F32}};
        int k = 0;
        while (k < 3 && strcmp(o[8], cd[k].name)) k++;
        if (k == 3) return bad("--compute-dtype: unknown '%s' (bf16, fp16, fp32)%s", o[8], "");
        pf->compute_dtype = cd[k].dt;
    }
    if (pf->quant == GCKPT_QUANT_INT8 && (o[7] || o[8]))
        return bad("--%s applies to 4-bit quantization (nf4, fp4), not --quant int8%s", o[7] ? "double-quant" : "compute-dtype", "");
    return 0;
}

/* Sizes, counts and lists; 0, or the exit status of a bad value. */
static int parse_number_option(int c, const char *arg, cli_args *a)
{
    gckpt_plan_request *req = &a->req;
    switch (c) {
    case O_SEQ:
        if (!gckpt_parse_u64(arg, 1, 1u << 24, &req->seq)) return bad("--seq: '%s' is not an integer in [1, 16777216]%s", arg, "");
        return 0;
    case O_MB: {
        int n = gckpt_parse_list(arg, 1, 1u << 16, req->micro_batches, GCKPT_MAX_MB);
        if (n <= 0) return bad("--micro-batch: '%s' is not a list of integers in [1, 65536] (at most 64 values)%s", arg, "");
        req->n_micro = n;
        return 0;
    }
    case O_GA:
        if (!gckpt_parse_u64(arg, 1, 1u << 20, &req->grad_accum)) return bad("--grad-accum: '%s' is not an integer in [1, 1048576]%s", arg, "");
        a->ga_set = true;
        return 0;
    case O_GB:
        if (!gckpt_parse_u64(arg, 1, 1u << 26, &req->global_batch)) return bad("--global-batch: '%s' is not an integer in [1, 67108864]%s", arg, "");
        a->gb_set = true;
        return 0;
    case O_EVERY:
        free(a->every);
        a->every = NULL;
        if (parse_every(arg, &a->every, &a->n_every) != 0) return bad("--every-n: '%s' is not 'all' or a list like off,1,2,4%s", arg, "");
        return 0;
    case O_BUDGET:
        if (!gckpt_parse_size(arg, &req->budget_bytes) || req->budget_bytes < (1u << 20))
            return bad("--budget: '%s' is not a size such as 80GiB, 79GB or 512MiB (at least 1 MiB)%s", arg, "");
        return 0;
    case O_GPUS: case O_NODES: {
        uint64_t v;
        const char *name = c == O_GPUS ? "gpus" : "nodes";
        if (!gckpt_parse_u64(arg, 1, 1024, &v)) return bad("--%s: '%s' is not an integer in [1, 1024]", name, arg);
        if (c == O_GPUS) req->layout.gpus = (uint32_t)v;
        else req->layout.nodes = (uint32_t)v;
        return 0;
    }
    case O_MOE: { /* checked against the model's experts by gckpt_plan_moe_check */
        char *end;
        double f = strtod(arg, &end);
        if (end == arg || *end || !(f >= 1 && f <= 65536))
            return bad("--moe-imbalance: '%s' is not a factor >= 1 such as 2%s", arg, "");
        req->moe_imbalance = f;
        return 0;
    }
    default: /* O_MARGIN */
        if (!parse_margin(arg, &req->margin)) return bad("--margin: '%s' is not a fraction in [0, 1) such as 5%% or 0.05%s", arg, "");
        return 0;
    }
}

/* Names and choices; 0, or the exit status of a bad value. */
static int parse_name_option(int c, const char *arg, cli_args *a)
{
    gckpt_plan_request *req = &a->req;
    int v;
    switch (c) {
    case O_MODEL: case O_GPU:
        if (strlen(arg) >= sizeof req->model_ref) return bad("--%s: name too long%s", c == O_MODEL ? "model" : "gpu", "");
        strcpy(c == O_MODEL ? req->model_ref : req->gpu_ref, arg);
        return 0;
    case O_PREC:
        if ((v = gckpt_precision_from_user(arg)) < 0) return bad("--precision: unknown '%s' (%s)", arg, gckpt_precision_spellings);
        req->precision = (gckpt_precision)v;
        return 0;
    case O_OPT:
        if ((v = gckpt_optimizer_from_user(arg)) < 0) {
            char list[512];
            gckpt_optimizer_spellings(list, sizeof list, false);
            return bad("--optimizer: unknown '%s' (%s)", arg, list);
        }
        req->optimizer = (gckpt_optimizer)v;
        return 0;
    case O_ATTN:
        if ((v = gckpt_attention_from_user(arg, a->attn_note, sizeof a->attn_note)) < 0)
            return bad("--attention: unknown '%s' (%s)", arg, gckpt_attention_spellings);
        req->attention = (gckpt_attention)v;
        snprintf(req->attn_impl, sizeof req->attn_impl, "%s", a->attn_note[0] ? arg : "");
        return 0;
    case O_OFF:
        if (!strcmp(arg, "off")) req->offload = GCKPT_OFFLOAD_OFF;
        else if (!strcmp(arg, "on")) req->offload = GCKPT_OFFLOAD_ON;
        else if (!strcmp(arg, "both")) req->offload = GCKPT_OFFLOAD_BOTH;
        else return bad("--offload: unknown '%s' (off, on, both)%s", arg, "");
        return 0;
    case O_TARGET:
        if ((v = gckpt_target_from(arg)) < 0) return bad("--target: unknown '%s' (cpu, cuda)%s", arg, "");
        req->target = (gckpt_target)v;
        req->target_given = true;
        return 0;
    case O_PLOT: {
        gckpt_err perr;
        if (!gckpt_plot_name_ok(arg, &perr)) return bad("%s%s", perr.msg, "");
        a->plot = arg;
        return 0;
    }
    default: /* O_TABLE */
        if (!strcmp(arg, "all")) a->all = true;
        else if (!strcmp(arg, "frontier")) a->all = false;
        else return bad("--table: unknown '%s' (frontier, all)%s", arg, "");
        return 0;
    }
}

/* The command line into a; GCKPT_EXIT_OK with *answered set after --list, --help or
 * --version; the exit status of a bad usage. */
static int parse_args(int argc, char **argv, cli_args *a, bool *answered)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL}, {"gpu", required_argument, 0, O_GPU},
        {"seq", required_argument, 0, O_SEQ}, {"micro-batch", required_argument, 0, O_MB},
        {"grad-accum", required_argument, 0, O_GA}, {"global-batch", required_argument, 0, O_GB},
        {"precision", required_argument, 0, O_PREC}, {"optimizer", required_argument, 0, O_OPT},
        {"attention", required_argument, 0, O_ATTN}, {"every-n", required_argument, 0, O_EVERY},
        {"offload", required_argument, 0, O_OFF}, {"budget", required_argument, 0, O_BUDGET},
        {"margin", required_argument, 0, O_MARGIN}, {"output", required_argument, 0, 'o'},
        {"plot", required_argument, 0, O_PLOT}, {"table", required_argument, 0, O_TABLE},
        {"quiet", no_argument, 0, 'q'}, {"list", no_argument, 0, O_LIST},
        {"allow-long-seq", no_argument, 0, O_LONG},
        {"method", required_argument, 0, O_METHOD}, {"lora-rank", required_argument, 0, O_RANK},
        {"lora-alpha", required_argument, 0, O_ALPHA}, {"lora-dropout", required_argument, 0, O_LDROP},
        {"lora-targets", required_argument, 0, O_TARGETS}, {"modules-to-save", required_argument, 0, O_MTS},
        {"quant", required_argument, 0, O_QUANT}, {"double-quant", required_argument, 0, O_DQ},
        {"compute-dtype", required_argument, 0, O_CDT}, {"gpus", required_argument, 0, O_GPUS},
        {"nodes", required_argument, 0, O_NODES}, {"parallel", required_argument, 0, O_PAR},
        {"deepspeed", required_argument, 0, O_DS}, {"moe-imbalance", required_argument, 0, O_MOE},
        {"fsdp-offload", required_argument, 0, O_FSDP_OFF}, {"target", required_argument, 0, O_TARGET},
        {"calibrate-from", required_argument, 0, O_CALIB},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
    int c, rc = GCKPT_EXIT_OK;
    *answered = false;
    opterr = 0; /* one line of ours instead of getopt's message and the usage */
    if (!(a->calib = calloc((size_t)argc, sizeof *a->calib))) return bad("out of memory%s%s", "", "");
    while ((c = getopt_long(argc, argv, ":o:qhV", opts, NULL)) != -1) {
        a->gpu_given |= c == O_GPU;
        a->planning |= c != O_GPU && c != O_CALIB && c != 'o' && c != 'q';
        switch (c) {
        case O_CALIB: a->calib[a->n_calib++] = optarg; break;
        case O_SEQ: case O_MB: case O_GA: case O_GB: case O_EVERY: case O_BUDGET: case O_MARGIN: case O_GPUS:
        case O_NODES: case O_MOE:
            rc = parse_number_option(c, optarg, a);
            break;
        case O_MODEL: case O_GPU: case O_PREC: case O_OPT: case O_ATTN: case O_OFF: case O_PLOT: case O_TABLE:
        case O_TARGET:
            rc = parse_name_option(c, optarg, a);
            break;
        case 'o': a->out = optarg; break;
        case 'q': a->quiet = true; break;
        case O_LONG: a->req.allow_long_seq = true; break;
        case O_PAR: rc = parse_parallel(optarg, a); break;
        case O_DS: a->ds_path = optarg; break;
        case O_FSDP_OFF: a->fsdp_offload = optarg; break;
        case O_METHOD: case O_RANK: case O_ALPHA: case O_LDROP: case O_TARGETS: case O_MTS: case O_QUANT: case O_DQ:
        case O_CDT:
            a->peft_opt[c - O_METHOD] = optarg;
            break;
        case O_LIST:
            list_dir("models");
            list_dir("devices");
            *answered = true;
            return GCKPT_EXIT_OK;
        case 'h': usage(stdout); *answered = true; return GCKPT_EXIT_OK;
        case 'V': printf("gckpt-plan %s\n", GCKPT_VERSION); *answered = true; return GCKPT_EXIT_OK;
        case ':': return bad("option '%s' needs a value%s (see --help)", argv[optind - 1], "");
        default: return bad_option(argc, argv);
        }
        if (rc) return rc;
    }
    while (a->n_calib && optind < argc) a->calib[a->n_calib++] = argv[optind++]; /* REPORT... */
    if (optind < argc) return bad("unexpected argument '%s'%s (see --help)", argv[optind], "");
    if (a->n_calib && a->planning) return bad("--calibrate-from takes --gpu, -o and -q only%s%s", "", "");
    if (a->n_calib) return GCKPT_EXIT_OK;
    if (a->ga_set && a->gb_set) return bad("--grad-accum and --global-batch exclude each other%s%s", "", "");
    if ((rc = apply_peft_options(a))) return rc;
    if ((rc = check_layout(a))) return rc;
    a->req.every_n = a->every;
    a->req.n_every = a->n_every;
    char hint[512];
    if (gckpt_model_id_hint(a->req.model_ref, hint, sizeof hint)) return bad("%s%s", hint, "");
    return GCKPT_EXIT_OK;
}

static int fail_line(const gckpt_err *err)
{
    fprintf(stderr, "gckpt-plan: %s\n", err->msg);
    return GCKPT_EXIT_INPUT;
}

/* --parallel LIST: one plan per mode, each mode's recommendation on one line. */
static int compare_modes(const cli_args *a)
{
    gckpt_err err = {{0}};
    FILE *f = stdout;
    /* warnings the header printed (the first mode's), and the later modes' other ones,
     * printed once under the table */
    char said[32][sizeof ((gckpt_warning *)0)->code];
    size_t n_said = 0;
    char *later = NULL;
    size_t later_len = 0;
    FILE *later_f = open_memstream(&later, &later_len);
    if (!later_f) {
        gckpt_seterr(&err, "out of memory");
        return fail_line(&err);
    }
    for (int i = 0; i < a->n_modes; i++) {
        gckpt_plan_request r = a->req;
        r.layout.mode = a->modes[i];
        gckpt_plan p;
        if (!gckpt_plan_run(&r, &p, &err)) {
            fclose(later_f);
            free(later);
            return fail_line(&err);
        }
        for (size_t w = 0; w < p.n_warnings; w++) {
            bool dup = false;
            for (size_t k = 0; k < n_said; k++) dup |= !strcmp(said[k], p.warnings[w].code);
            if (dup || n_said == sizeof said / sizeof said[0]) continue;
            snprintf(said[n_said++], sizeof said[0], "%s", p.warnings[w].code);
            if (i > 0) fprintf(later_f, "warning [%s] (%s): %s\n", p.warnings[w].code, gckpt_parallel_names[a->modes[i]],
                               p.warnings[w].message);
        }
        if (i == 0) { /* the header without the first mode's layout line, then the layout */
            p.req.layout.mode = GCKPT_PAR_NONE;
            gckpt_plan_print_header(&p, f);
            p.req.layout.mode = a->modes[0];
            fprintf(f, "%u GPUs (%u node%s x %u): memory is the busiest rank's (rank 0; zero1, zero2: the busiest of all ranks), tok/s per GPU; global = micro-batch "
                       "x grad-accum x %u\n", gckpt_layout_world(&r.layout), r.layout.nodes ? r.layout.nodes : 1,
                    r.layout.nodes > 1 ? "s" : "", r.layout.gpus ? r.layout.gpus : 1, gckpt_layout_world(&r.layout));
            fprintf(f, "%-6s %-7s %-7s %4s %4s %7s %11s %8s %9s %9s  %s\n", "mode", "every_n", "offload", "mb", "ga",
                    "global", "device GiB", "step s", "tok/s/GPU", "comm s", "peak at");
        }
        const gckpt_entry *e = &p.entries[p.recommended >= 0 ? p.recommended : p.smallest];
        char en[16], where[256];
        if (e->every_n) snprintf(en, sizeof en, "%u", e->every_n);
        else snprintf(en, sizeof en, "off");
        gckpt_peak_where(&p, &e->r, where, sizeof where);
        fprintf(f, "%-6s %-7s %-7s %4llu %4llu %7llu %11.2f %8.3f %9.0f %9.3f  %s%s\n", gckpt_parallel_names[a->modes[i]],
                en, e->every_n ? (e->offload ? "on" : "off") : "-", (unsigned long long)e->micro_batch,
                (unsigned long long)e->grad_accum,
                (unsigned long long)(e->micro_batch * e->grad_accum * gckpt_layout_world(&r.layout)),
                (double)e->r.device_peak_bytes / 1073741824.0, e->r.step_s, e->r.tokens_per_s, e->r.comm_s,
                p.recommended >= 0 ? "" : "NOTHING FITS, smallest: ", where);
        gckpt_plan_free(&p);
    }
    fclose(later_f);
    fprintf(f, "(each mode's recommended entry, or its smallest when nothing fits; plan one mode for its table and snippet)\n");
    if (later_len) fputs(later, f);
    free(later);
    return gckpt_stdout_check(&err) ? GCKPT_EXIT_OK : fail_line(&err);
}

/* Check every output, plan, print, write the outputs. */
static int plan_and_write(const cli_args *a)
{
    gckpt_err err = {{0}};
    /* every output is checked before any work: a bad one costs nothing */
    gckpt_plan_output outs = {.json = a->out, .plot = a->plot};
    if (!gckpt_plan_output_check(&outs, a->req.model_ref, a->req.gpu_ref, &err)) {
        gckpt_plan_output_free(&outs);
        return fail_line(&err);
    }
    gckpt_plan p;
    if (!gckpt_plan_run(&a->req, &p, &err)) {
        gckpt_plan_output_free(&outs);
        return fail_line(&err);
    }
    int rc = GCKPT_EXIT_OK;
    FILE *human = (a->out && !strcmp(a->out, "-")) ? stderr : stdout;
    if (!a->quiet) {
        gckpt_plan_print_header(&p, human);
        if (a->attn_note[0]) fprintf(human, "note: %s\n\n", a->attn_note);
        gckpt_plan_print_table(&p, human, a->all);
        gckpt_plan_print_recommendation(&p, human);
        if (p.recommended < 0) print_alternatives(&a->req, &p.model, human);
    }
    if ((a->out || a->plot) && !gckpt_plan_output_write(&outs, &p, human, a->quiet, &err)) rc = fail_line(&err);
    if (rc == GCKPT_EXIT_OK && !gckpt_stdout_check(&err)) rc = fail_line(&err);
    gckpt_plan_output_free(&outs);
    gckpt_plan_free(&p); /* the plan keeps its own copy of the every_n list */
    return rc;
}

/* --calibrate-from: fit, print, write the profile (planner/calibrate.c). */
static int calibrate_and_write(const cli_args *a)
{
    gckpt_err err = {{0}};
    if (!a->out) return bad("--calibrate-from needs -o FILE for the calibrated profile%s%s", "", "");
    if (!gckpt_outpath_check(&a->out, 1, a->calib, a->n_calib, &err)) return fail_line(&err);
    char *json;
    gckpt_calibration_summary sum;
    if (!gckpt_calibrate(a->calib, (size_t)a->n_calib, a->gpu_given ? a->req.gpu_ref : NULL, &json, &sum, &err))
        return fail_line(&err);
    if (!a->quiet) gckpt_calibration_print(&sum, strcmp(a->out, "-") ? stdout : stderr);
    int rc = gckpt_write_file_atomic(a->out, json, &err) && gckpt_stdout_check(&err) ? GCKPT_EXIT_OK : fail_line(&err);
    free(json);
    gckpt_calibration_summary_free(&sum);
    return rc;
}

int main(int argc, char **argv)
{
    cli_args a = {.req = {.seq = 0 /* the model's default */, .micro_batches = {1}, .n_micro = 1, .grad_accum = 1,
                          .precision = GCKPT_AMP_BF16, .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA,
                          .offload = GCKPT_OFFLOAD_BOTH, .margin = 0.05}};
    gckpt_stdio_guard();
    snprintf(a.req.model_ref, sizeof a.req.model_ref, "llama-3.1-8b");
    snprintf(a.req.gpu_ref, sizeof a.req.gpu_ref, "h100-sxm-80gb");
    bool answered;
    int rc = parse_args(argc, argv, &a, &answered);
    if (rc == GCKPT_EXIT_OK && !answered)
        rc = a.n_calib ? calibrate_and_write(&a) : a.n_modes > 1 ? compare_modes(&a) : plan_and_write(&a);
    free(a.every);
    free(a.calib);
    return rc;
}
