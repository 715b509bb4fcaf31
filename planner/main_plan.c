/* gckpt-plan: predict peak memory and step time for every gradient-checkpointing
 * setting, recommend the fastest that fits, write the plan. */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/planner/cli_names.h"
#include "gckpt/planner/plan.h"
#include "gckpt/planner/plan_args.h"
#include "gckpt/planner/plan_output.h"
#include "gckpt/planner/calibrate.h"
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
"  --model NAME|PATH|ID   model: a name in models/, a path to an HF config.json, or a\n"
"                         Hugging Face Hub id such as Qwen/Qwen2.5-7B (its config.json\n"
"                         from the HF cache or downloaded; docs/hub.md) (default llama-3.1-8b)\n"
"  --revision REV         Hub id: the branch, tag or commit (default main)\n"
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
"  --code-base C          hf (default: Hugging Face modules run eagerly) | fused (own\n"
"                         fused modules: torchtitan, llm-foundry, ...): whose fitted time\n"
"                         parameters of the GPU profile (docs/step-time.md)\n"
"  --loss L               hf (default: transformers' loss on the full fp32 logits) | liger\n"
"                         (use_liger_kernel=True: Liger's fused linear cross-entropy) | cce\n"
"                         (cut-cross-entropy); docs/fused-loss.md\n"
"  --liger-kernels K      with --loss liger: the Liger kernels on, a comma list of rope,\n"
"                         rms_norm, swiglu, fused_linear_cross_entropy (liger_kernel_config's\n"
"                         keys; default: all, where the model type's apply function uses them)\n"
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
"  --quant-storage S      qlora 4-bit: bnb_4bit_quant_storage uint8 (default) | bf16 (FSDP2 shards\n"
"                         bf16-stored 4-bit weights, keeps uint8 ones whole on every rank)\n"
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
"  --dp-replicate R --dp-shard S\n"
"                         HSDP: FSDP2 over accelerate's ParallelismConfig mesh, the\n"
"                         parameters sharded over S ranks, replicated R times (R x S = the\n"
"                         GPUs; implies --parallel fsdp)\n"
"  --cp C                 context parallelism (accelerate's cp_size, torch's ring attention):\n"
"                         FSDP2 over every GPU, C ranks share each sequence (seq / C each);\n"
"                         alone (C = the GPUs) or with --dp-shard S (C x S = the GPUs, one\n"
"                         node); SDPA, llama-like models, seq a multiple of C; rank 0 planned\n"
"  --tp T                 tensor parallelism (transformers' tp_plan, no --parallel): alone\n"
"                         (T = the GPUs), with --dp-shard S, --dp-replicate R or both (their\n"
"                         product = the GPUs, one node); rank 0 planned\n"
"  --parallelism-config FILE\n"
"                         the same from a JSON object of ParallelismConfig's fields\n"
"                         (dp_replicate_size, dp_shard_size, tp_size, cp_size)\n"
"  --fsdp-offload off|on  --parallel fsdp: FSDP2's CPUOffloadPolicy (fsdp_config\n"
"                         \"cpu_offload\"; from the source, unverified; default off)\n"
"  --images N             vision-language models (LLaVA, LLaVA-NeXT, Gemma 3, Qwen2.5-VL,\n"
"                         Qwen3-VL): images per sample (default 1); their tokens are part\n"
"                         of --seq\n"
"  --image-size HxW       the images' size in pixels (default: the vision config's\n"
"                         image_size; LLaVA's processor resizes and crops any size,\n"
"                         LLaVA-NeXT's picks its anyres tiles from it, Gemma 3's resizes\n"
"                         any size to image_size: mm_tokens_per_image each, pan-and-scan off;\n"
"                         the Qwen-VLs' tokens follow it (smart_resize): required there)\n"
"  --vision-tower T       trained (default: the model as loaded trains it) | frozen\n"
"                         (requires_grad_(False) on the tower; the projector trains)\n"
"  --checkpoint-towers T  all (default: every_n_layers counts the vision blocks, then\n"
"                         the text layers) | text | vision (every_n counted from that\n"
"                         tower's layer 0, the other's layers plain: per-layer code)\n"
"  --every-n LIST         every_n_layers values: all (default: off and 1..L), off, or a\n"
"                         list such as off,1,2,4 (0 = off); L counts a VLM's vision\n"
"                         blocks and text layers together (--checkpoint-towers text or\n"
"                         vision: that tower's)\n"
"  --offload off|on|both  offload checkpointed inputs to pinned host memory (default both)\n"
"  --budget SIZE          memory budget, e.g. 80GiB, 79GB (default: the GPU's memory)\n"
"  --margin PCT           part of the budget kept free, e.g. 5%% or 0.05 (default 5%%)\n"
"  -o, --output FILE      write the JSON plan (schema gckpt.plan/2); '-' for stdout\n"
"  --html FILE            the dashboard: one self-contained HTML page over the plan\n"
"                         (docs/dashboard.md; gckpt-dash adds gckpt-run's reports)\n"
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

enum { O_PLOT = GCKPT_OPT_END, O_TABLE, O_LIST, O_CALIB, O_HTML };

/* What the command line asks for: the planning options (plan_args.c) and the outputs. */
typedef struct {
    gckpt_plan_args pa;
    const char *out, *plot, *html;
    bool all, quiet;
    const char **calib; /* --calibrate-from REPORT...: the reports (calibrate.c) */
    int n_calib;
    bool gpu_given, planning; /* --gpu given; any other planning option given */
} cli_args;

/* The outputs' options; 0 or the exit status of a bad value. */
static int parse_output_option(int c, const char *arg, cli_args *a)
{
    if (c == O_PLOT) {
        gckpt_err perr;
        if (!gckpt_plot_name_ok(arg, &perr)) return bad("%s%s", perr.msg, "");
        a->plot = arg;
    } else if (c == O_HTML) {
        if (!strcmp(arg, "-")) return bad("--html: the page goes to a file, not stdout%s%s", "", "");
        a->html = arg;
    } else if (!strcmp(arg, "all")) {
        a->all = true;
    } else if (!strcmp(arg, "frontier")) {
        a->all = false;
    } else {
        return bad("--table: unknown '%s' (frontier, all)%s", arg, "");
    }
    return 0;
}

/* The command line into a; GCKPT_EXIT_OK with *answered set after --list, --help or
 * --version; the exit status of a bad usage. */
static int parse_args(int argc, char **argv, cli_args *a, bool *answered)
{
    /* the planning options from their one table, then the CLI's own */
    static const struct { const char *name; int has_arg, code; } own[] = {
        {"output", required_argument, 'o'}, {"plot", required_argument, O_PLOT}, {"html", required_argument, O_HTML},
        {"table", required_argument, O_TABLE}, {"quiet", no_argument, 'q'}, {"list", no_argument, O_LIST},
        {"calibrate-from", required_argument, O_CALIB},
        {"help", no_argument, 'h'}, {"version", no_argument, 'V'}};
    enum { N_OWN = sizeof own / sizeof own[0] };
    struct option opts[GCKPT_OPT_END - GCKPT_OPT_MODEL + N_OWN + 1];
    int n = 0;
    for (const gckpt_plan_option *o = gckpt_plan_options; o->name; o++)
        opts[n++] = (struct option){o->name, o->has_arg ? required_argument : no_argument, 0, o->code};
    for (int i = 0; i < N_OWN; i++) opts[n++] = (struct option){own[i].name, own[i].has_arg, 0, own[i].code};
    opts[n] = (struct option){0, 0, 0, 0};
    int c, rc = GCKPT_EXIT_OK;
    *answered = false;
    opterr = 0; /* one line of ours instead of getopt's message and the usage */
    if (!(a->calib = calloc((size_t)argc, sizeof *a->calib))) return bad("out of memory%s%s", "", "");
    while ((c = getopt_long(argc, argv, ":o:qhV", opts, NULL)) != -1) {
        a->gpu_given |= c == GCKPT_OPT_GPU;
        a->planning |= c != GCKPT_OPT_GPU && c != O_CALIB && c != 'o' && c != 'q';
        if (c >= GCKPT_OPT_MODEL && c < GCKPT_OPT_END) {
            const gckpt_plan_option *o = gckpt_plan_options;
            while (o->code != c) o++;
            rc = gckpt_plan_args_set(&a->pa, o, optarg);
            if (rc) return bad("%s%s", a->pa.err.msg, "");
            continue;
        }
        switch (c) {
        case O_PLOT: case O_TABLE: case O_HTML: rc = parse_output_option(c, optarg, a); break;
        case 'o': a->out = optarg; break;
        case 'q': a->quiet = true; break;
        case O_CALIB: a->calib[a->n_calib++] = optarg; break;
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
    a->pa.wants_output = a->out || a->plot || a->html;
    if (gckpt_plan_args_finish(&a->pa)) return bad("%s%s", a->pa.err.msg, "");
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
    for (int i = 0; i < a->pa.n_modes; i++) {
        gckpt_plan_request r = a->pa.req;
        r.layout.mode = a->pa.modes[i];
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
            if (i > 0) fprintf(later_f, "warning [%s] (%s): %s\n", p.warnings[w].code, gckpt_parallel_names[a->pa.modes[i]],
                               p.warnings[w].message);
        }
        if (i == 0) { /* the header without the first mode's layout line, then the layout */
            p.req.layout.mode = GCKPT_PAR_NONE;
            gckpt_plan_print_header(&p, f);
            p.req.layout.mode = a->pa.modes[0];
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
        fprintf(f, "%-6s %-7s %-7s %4llu %4llu %7llu %11.2f %8.3f %9.0f %9.3f  %s%s\n", gckpt_parallel_names[a->pa.modes[i]],
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
    gckpt_plan_output outs = {.json = a->out, .plot = a->plot, .html = a->html};
    if (!gckpt_plan_output_check(&outs, a->pa.req.model_ref, a->pa.req.gpu_ref, &err)) {
        gckpt_plan_output_free(&outs);
        return fail_line(&err);
    }
    gckpt_plan p;
    if (!gckpt_plan_run(&a->pa.req, &p, &err)) {
        gckpt_plan_output_free(&outs);
        return fail_line(&err);
    }
    int rc = GCKPT_EXIT_OK;
    FILE *human = (a->out && !strcmp(a->out, "-")) ? stderr : stdout;
    if (!a->quiet) {
        gckpt_plan_print_header(&p, human);
        if (a->pa.attn_note[0]) fprintf(human, "note: %s\n\n", a->pa.attn_note);
        gckpt_plan_print_table(&p, human, a->all);
        gckpt_plan_print_recommendation(&p, human);
        if (p.recommended < 0) gckpt_plan_print_alternatives(&a->pa.req, &p, human);
    }
    if ((a->out || a->plot || a->html) && !gckpt_plan_output_write(&outs, &p, human, a->quiet, &err)) rc = fail_line(&err);
    if (rc == GCKPT_EXIT_OK && !gckpt_stdout_check(&err)) rc = fail_line(&err);
    gckpt_plan_output_free(&outs);
    gckpt_plan_free(&p); /* the plan keeps its own copy of the every_n list */
    return rc;
}

/* --calibrate-from: fit the profile to the reports' measured steps, write it (-o). */
static int calibrate_and_write(const cli_args *a)
{
    gckpt_err err = {{0}};
    if (!a->out) return bad("--calibrate-from needs -o FILE for the calibrated profile%s%s", "", "");
    if (!gckpt_outpath_check(&a->out, 1, a->calib, a->n_calib, &err)) return fail_line(&err);
    char *json;
    gckpt_calibration_summary sum;
    if (!gckpt_calibrate(a->calib, (size_t)a->n_calib, a->gpu_given ? a->pa.req.gpu_ref : NULL, &json, &sum, &err))
        return fail_line(&err);
    if (!a->quiet) gckpt_calibration_print(&sum, strcmp(a->out, "-") ? stdout : stderr);
    int rc = gckpt_write_file_atomic(a->out, json, &err) && gckpt_stdout_check(&err) ? GCKPT_EXIT_OK : fail_line(&err);
    free(json);
    gckpt_calibration_summary_free(&sum);
    return rc;
}

int main(int argc, char **argv)
{
    cli_args a = {0};
    gckpt_plan_args_init(&a.pa);
    gckpt_stdio_guard();
    bool answered;
    int rc = parse_args(argc, argv, &a, &answered);
    if (rc == GCKPT_EXIT_OK && !answered)
        rc = a.n_calib ? calibrate_and_write(&a) : a.pa.n_modes > 1 ? compare_modes(&a) : plan_and_write(&a);
    gckpt_plan_args_free(&a.pa);
    free(a.calib);
    return rc;
}
