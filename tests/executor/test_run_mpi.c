/* gckpt-run on several ranks: `mpirun -np N gckpt-run --plan P` on the host backend, a
 * tiny llama planned for DDP, ZeRO-1, FSDP2, ZeRO-2 and ZeRO-3 on 2 and 4 GPUs, every_n
 * off / 1 / 2 x offload.
 * Required: every rank's measured allocator peak equals its schedule's prediction (and
 * the plan's within the tolerance), rank 0 alone writes the report (schema-valid, a
 * section per rank), the loss and the gradient checksum equal the single-process run of
 * the same global batch (micro-batch x grad_accum x ranks micro-steps in one process)
 * bit for bit when each rank runs one micro-step (the rank-ordered sum is the one process's
 * accumulation), and with two micro-steps per rank the loss bit for bit and the gradient
 * norm within 1e-6 (the sums associate differently: ((g0 + g1) + (g2 + g3)) against
 * (((g0 + g1) + g2) + g3)), identical across every setting; ZeRO-1 likewise against one
 * process computing in its model dtype; FSDP2, ZeRO-2 and ZeRO-3 in fp32 likewise and under
 * amp-bf16 against one bf16 process. A multi-rank plan without mpirun, a rank count that differs
 * from the plan, and zero2 / fsdp in a precision other than fp32 or amp-bf16 (a hand-written
 * plan: gckpt-plan plans only those two) are refused. Skipped (77) when the build has no MPI. */
#include <fnmatch.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_harness.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/schedule.h"
#include "gckpt/executor/exec_run.h"
#include "plan_fixture.h"
#include "report_fixture.h"

static cJSON *schema;
static const uint32_t every[] = {0, 1, 2};

/* Environment of mpirun and its ranks: root allowed; under tests/ci/sanitize.sh no leak
 * check in the ranks (OpenMPI unloads its plugins in MPI_Finalize, so what they keep until
 * exit is reported without a module to suppress it by; the one-process runs of the other
 * tests check gckpt-run's own leaks), every other ASan / UBSan check on. */
static const cli_opts mpi_env = {.env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                         "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1",
                                         /* ranks out of step end the run with a message, well
                                          * within the test's bound */
                                         "GCKPT_COLLECTIVE_TIMEOUT=60"}};

/* HSDP's replicate dimension of the next plan written (0: none; check_case sets it) */
static uint32_t next_dp_replicate;

/* bucket: a ds_config's reduce_bucket_size (0: the Trainer's "auto") */
static void write_plan_peft(const char *name, const char *model, int ranks, uint64_t grad_accum, gckpt_parallel mode,
                            gckpt_precision prec, uint64_t bucket, const gckpt_peft *peft)
{
    gckpt_layout l = {.gpus = (uint32_t)ranks, .nodes = 1, .mode = (uint8_t)mode, .dp_replicate = next_dp_replicate};
    if (bucket) {
        l.ds.set = GCKPT_DS_REDUCE_BUCKET;
        l.ds.reduce_bucket = bucket;
    }
    char *t = pf_plan_text_full(model, prec, GCKPT_SDPA, every, 3, 2, grad_accum, 0, peft, ranks > 1 ? &l : NULL);
    assert_non_null(t);
    cli_write(name, t);
    free(t);
}

static void write_plan(const char *name, const char *model, int ranks, uint64_t grad_accum, gckpt_parallel mode,
                       gckpt_precision prec, uint64_t bucket)
{
    write_plan_peft(name, model, ranks, grad_accum, mode, prec, bucket, NULL);
}

/* The report's entry records; fails unless the file is one schema-valid report. */
static cJSON *load(const char *name)
{
    char path[512];
    cli_path(name, path, sizeof path);
    return rf_load_or_fail(path, schema);
}

static double num(cJSON *r, const char *path)
{
    cJSON *v = pf_at(r, path);
    if (!cJSON_IsNumber(v)) fail_msg("%s: not a number", path);
    return v->valuedouble;
}

static const char *str(cJSON *r, const char *path)
{
    cJSON *v = pf_at(r, path);
    if (!cJSON_IsString(v)) fail_msg("%s: not a string", path);
    return v->valuestring;
}

/* One process, the same global batch: ranks x grad_accum micro-steps. */
static cJSON *single(const char *plan, const char *report, int steps)
{
    char err[4096], st[8];
    snprintf(st, sizeof st, "%d", steps);
    int rc = cli_run(GCKPT_RUN_EXE, A("--plan", (char *)plan, "--all", "--backend", "host", "--steps", st, "--warmup",
                                      "0", "-q", "-o", (char *)report),
                     NULL, err, sizeof err);
    if (rc != 0) fail_msg("%s: exit %d: %s", plan, rc, err);
    return load(report);
}

static int mpi(int np, const char *plan, const char *report, int steps, char *err, size_t n)
{
    char npv[8], st[8];
    snprintf(npv, sizeof npv, "%d", np);
    snprintf(st, sizeof st, "%d", steps);
    return cli_run_opts(GCKPT_MPIEXEC, A("-np", npv, "--oversubscribe", GCKPT_RUN_EXE, "--plan", (char *)plan, "--all",
                                         "--backend", "host", "--steps", st, "--warmup", "0", "-o", (char *)report),
                        &mpi_env, err, n);
}

/* A mode on np ranks of grad_accum micro-steps each against one process of np x grad_accum
 * (in the precision the ranks compute in: ZeRO's bf16 model for amp-bf16). bitwise: the
 * gradients equal one process's bit for bit (then `steps` steps are compared). */
typedef struct {
    gckpt_parallel mode;
    gckpt_precision prec, one_prec;
    int np;
    uint64_t grad_accum;
    bool bitwise;
    int steps;
    double norm_tol; /* not bitwise: the gradient norm's relative tolerance (0: 1e-6, fp32's) */
    const char *model; /* tests/executor/data's model (NULL: tiny-llama) */
    uint64_t bucket;   /* ZeRO's reduce_bucket_size (0: the Trainer's "auto") */
    gckpt_method method; /* LoRA / QLoRA (peft's defaults, gckpt_peft_default); 0: full fine-tuning */
    int ref_np; /* the reference: the same mode on ref_np ranks of the same global batch (0: one process) */
    uint8_t quant_storage; /* QLoRA's bnb_4bit_quant_storage (0: peft's default, uint8) */
    uint32_t dp_replicate; /* HSDP: fsdp over dp_replicate x (np / dp_replicate) (0: none) */
} run_case;

static void check_case(const run_case *c)
{
    const char *mode = gckpt_parallel_names[c->mode];
    const char *model = c->model ? c->model : "tiny-llama";
    char plan[96], one[96], rep[112], rep1[112], err[8192];
    const char *how = gckpt_method_names[c->method];
    snprintf(plan, sizeof plan, "%s-%s%d-%s-%s-ga%llu%s%s%s.json", model, mode, c->np, gckpt_precision_names[c->prec], how,
             (unsigned long long)c->grad_accum, c->bucket ? "-bucket" : "", c->quant_storage ? "-sbf16" : "",
             c->dp_replicate ? "-hsdp" : "");
    snprintf(rep, sizeof rep, "%sl", plan);
    int ref_np = c->ref_np ? c->ref_np : 1;
    uint64_t ref_ga = (uint64_t)c->np * c->grad_accum / (uint64_t)ref_np;
    char who[32] = "one";
    if (c->ref_np) snprintf(who, sizeof who, "%s%d", mode, c->ref_np);
    snprintf(one, sizeof one, "%s-%s-%s-%s-ga%llu%s.json", model, who, gckpt_precision_names[c->one_prec], how,
             (unsigned long long)ref_ga, c->quant_storage ? "-sbf16" : "");
    snprintf(rep1, sizeof rep1, "%sl", one);
    gckpt_peft peft;
    gckpt_peft_default(c->method, &peft);
    if (c->quant_storage) peft.quant_storage = c->quant_storage;
    next_dp_replicate = c->dp_replicate;
    write_plan_peft(plan, model, c->np, c->grad_accum, c->mode, c->prec, c->bucket, &peft);
    next_dp_replicate = 0;
    write_plan_peft(one, model, ref_np, ref_ga, c->ref_np ? c->mode : GCKPT_PAR_NONE, c->one_prec, 0, &peft);
    double t0 = cli_now();
    int rc = mpi(c->np, plan, rep, c->steps, err, sizeof err);
    if (rc != 0) fail_msg("%s: mpirun -np %d: exit %d: %s", plan, c->np, rc, err);
    print_message("mpirun -np %d, %s, grad_accum %llu, 5 entries x %d steps: %.2f s\n", c->np, plan,
                  (unsigned long long)c->grad_accum, c->steps, cli_now() - t0);
    if (c->ref_np && (rc = mpi(ref_np, one, rep1, c->steps, err, sizeof err)) != 0)
        fail_msg("%s: mpirun -np %d: exit %d: %s", one, ref_np, rc, err);
    cJSON *r = load(rep), *s = c->ref_np ? load(rep1) : single(one, rep1, c->steps);
    assert_int_equal(num(r, "ranks.world_size"), c->np);
    assert_string_equal(str(r, "ranks.parallel"), mode);
    int n = cJSON_GetArraySize(pf_at(r, "entries"));
    assert_int_equal(n, 5);
    const char *hash0 = str(r, "entries[0].numerics.grad_checksum");
    for (int i = 0; i < n; i++) {
        char p[96];
        snprintf(p, sizeof p, "entries[%d].pass", i);
        if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d did not pass", plan, i);
        snprintf(p, sizeof p, "entries[%d].ranks", i);
        assert_int_equal(cJSON_GetArraySize(pf_at(r, p)), c->np);
        double busiest = 0;
        for (int k = 0; k < c->np; k++) {
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.measured", i, k);
            busiest = fmax(busiest, num(r, p));
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.exact", i, k);
            if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d rank %d: measured peak != its prediction", plan, i, k);
            snprintf(p, sizeof p, "entries[%d].ranks[%d].grad_checksum", i, k);
            assert_string_equal(str(r, p), hash0); /* the averaged gradients, on every rank */
        }
        /* the entry is the busiest rank's, as the plan's memory, and the plan's sweep predicted
         * exactly that rank's schedule: no note (a sweep shares one context across every_n; DDP's
         * unused-parameter maps once leaked into its checkpointed entries) */
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.measured", i);
        if (num(r, p) != busiest) fail_msg("%s entry %d: measured %.0f, the busiest rank %.0f", plan, i, num(r, p), busiest);
        snprintf(p, sizeof p, "entries[%d].memory.schedule_peak_bytes", i);
        double sched = num(r, p);
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.predicted", i);
        if (sched != num(r, p) || sched != busiest)
            fail_msg("%s entry %d: the plan predicted %.0f, the busiest rank's schedule %.0f, measured %.0f", plan, i,
                     num(r, p), sched, busiest);
        snprintf(p, sizeof p, "entries[%d].message", i);
        if (!cJSON_IsNull(pf_at(r, p))) fail_msg("%s entry %d: message %s", plan, i, str(r, p));
        snprintf(p, sizeof p, "entries[%d].numerics.loss", i);
        double loss = num(r, p), loss1 = num(s, p);
        if (loss != loss1) fail_msg("%s entry %d: loss %.17g, %s %.17g", plan, i, loss, one, loss1);
        snprintf(p, sizeof p, "entries[%d].numerics.grad_checksum", i);
        assert_string_equal(str(r, p), hash0); /* across every_n / offload */
        if (c->bitwise) assert_string_equal(str(r, p), str(s, p));
        snprintf(p, sizeof p, "entries[%d].numerics.grad_norm", i);
        double g = num(r, p), g1 = num(s, p);
        print_message("entry %d: loss %.9g (%s %.9g), grad norm %.17g (%.17g, %+.2e)\n", i, loss,
                      c->ref_np ? "reference" : "one process", loss1, g, g1, (g - g1) / g1);
        assert_true(fabs(g - g1) <= (c->norm_tol > 0 ? c->norm_tol : 1e-6) * g1);
    }
    cJSON_Delete(r);
    cJSON_Delete(s);
}

/* DDP: one micro-step per rank, two steps, bit for bit (2 and 4 ranks); two micro-steps per
 * rank, one step: the loss bit for bit, the gradient norm within 1e-6. */
static void ddp(void **st)
{
    (void)st;
    const run_case cases[] = {{GCKPT_PAR_DDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 2, 1, true, 2},
                              {GCKPT_PAR_DDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 4, 1, true, 2},
                              {GCKPT_PAR_DDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 2, 2, false, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

/* DDP with LoRA and QLoRA (buckets over the adapters, find_unused_parameters' maps whatever
 * every_n, FINDINGS R-DISTPEFT-1, -2): one micro-step per rank, two steps, bit for bit against one
 * process of the same global batch; every rank's peak exact. */
static void ddp_peft(void **st)
{
    (void)st;
    const run_case cases[] = {
        {GCKPT_PAR_DDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 2, 1, true, 2, .method = GCKPT_METHOD_LORA},
        {GCKPT_PAR_DDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 2, 1, true, 2, .method = GCKPT_METHOD_QLORA}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

/* FSDP2, ZeRO-1, ZeRO-2 and ZeRO-3 with LoRA and QLoRA (ZeRO-3's and FSDP2's QLoRA with bf16
 * storage were refused by gckpt-run before; FSDP2: the frozen parameters
 * sharded and gathered, a uint8 Params4bit whole, only the adapters reduce-scattered,
 * R-DISTPEFT-3, -4, -7; ZeRO-1/2: the frozen parameters whole, the flat groups over the adapters,
 * R-DISTPEFT-5; ZeRO-3: every parameter partitioned, a Params4bit by its stored bytes, the
 * frozen ones gathered again for the recompute and released at the backward's end, the
 * optimizer's partitions over the adapters, R-DISTPEFT-6, -8):
 * every rank's peak exact. The reference is the same mode on 4 ranks of one micro-step each, not
 * one process: the wrapper's bf16 adapters (MixedPrecisionPolicy, DeepSpeed's bf16 model) are a
 * recipe no one-GPU setting has (peft keeps them fp32, and the weights' initial values are keyed
 * by the recipe's tensors). The first step's loss is bit for bit (the same weights, the same
 * samples); the gradient norm within 2^-8 (each rank's two bf16 .grad summed before the bf16
 * reduction, as in `sharded`). */
static void sharded_peft(void **st)
{
    (void)st;
    const double tol = 1.0 / 256;
    static const gckpt_parallel modes[] = {GCKPT_PAR_FSDP, GCKPT_PAR_ZERO1, GCKPT_PAR_ZERO2, GCKPT_PAR_ZERO3};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        check_case(&(run_case){modes[i], GCKPT_AMP_BF16, GCKPT_AMP_BF16, 2, 2, false, 1, tol,
                               .method = GCKPT_METHOD_LORA, .ref_np = 4});
        check_case(&(run_case){modes[i], GCKPT_AMP_BF16, GCKPT_AMP_BF16, 2, 2, false, 1, tol,
                               .method = GCKPT_METHOD_QLORA, .ref_np = 4});
    }
    /* bnb_4bit_quant_storage bf16 (the FSDP + QLoRA recipe) under FSDP2 (the packed storage
     * sharded along dim 0 and gathered, R-DISTPEFT-7) and ZeRO-3 (partitioned by its stored
     * elements, R-DISTPEFT-8): every rank's peak exact, the reference as above, and the same packed
     * bytes as the uint8 storage's: loss and gradient checksum equal the uint8 run's (the cases
     * above) bit for bit. Both were refused before. */
    static const gckpt_parallel packed[] = {GCKPT_PAR_FSDP, GCKPT_PAR_ZERO3};
    for (size_t i = 0; i < sizeof packed / sizeof *packed; i++) {
        check_case(&(run_case){packed[i], GCKPT_AMP_BF16, GCKPT_AMP_BF16, 2, 2, false, 1, tol,
                               .method = GCKPT_METHOD_QLORA, .ref_np = 4, .quant_storage = GCKPT_DT_BF16});
        char u8n[96], b16n[96];
        const char *m = gckpt_parallel_names[packed[i]];
        snprintf(u8n, sizeof u8n, "tiny-llama-%s2-amp-bf16-qlora-ga2.jsonl", m);
        snprintf(b16n, sizeof b16n, "tiny-llama-%s2-amp-bf16-qlora-ga2-sbf16.jsonl", m);
        cJSON *u8 = load(u8n), *b16 = load(b16n);
        for (int e = 0; e < cJSON_GetArraySize(pf_at(u8, "entries")); e++) {
            char p[96];
            snprintf(p, sizeof p, "entries[%d].numerics.loss", e);
            if (num(u8, p) != num(b16, p))
                fail_msg("%s qlora entry %d: bf16 storage loss %.17g, uint8 %.17g", m, e, num(b16, p), num(u8, p));
            snprintf(p, sizeof p, "entries[%d].numerics.grad_checksum", e);
            assert_string_equal(str(b16, p), str(u8, p));
        }
        cJSON_Delete(u8);
        cJSON_Delete(b16);
    }
}

/* ZeRO-1: amp-bf16 (the bf16 model, fp32 master) on 2 ranks against one bf16 process, one
 * step (the next ones differ: one bf16 process has no fp32 master); fp32 on 4 ranks against
 * one fp32 process, two steps bit for bit (the partitioned AdamW step is the whole one). */
static void zero1(void **st)
{
    (void)st;
    const run_case cases[] = {{GCKPT_PAR_ZERO1, GCKPT_AMP_BF16, GCKPT_BF16, 2, 1, true, 1},
                              {GCKPT_PAR_ZERO1, GCKPT_FP32, GCKPT_FP32, 4, 1, true, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

/* The sharded modes, each against one process of the same global batch:
 *  - fp32 (FSDP2, ZeRO-2: rank 1 keeps the head's gradients, its peak is higher; ZeRO-3:
 *    persistent norm weights whole, the rest gathered per module): one micro-step per rank,
 *    bit for bit (2 ranks over two steps: the sharded AdamW step is the whole one's; 4 ranks
 *    over one: the checksum summed over the ranks' pieces); with two micro-steps per rank
 *    (fp32_accum; FSDP2's no_sync micro-step), one step: the loss bit for bit, the gradient norm
 *    within 1e-6;
 *  - amp-bf16 (FSDP2: fp32 sharded masters, bf16 all-gathers, compute and reduce-scatter;
 *    ZeRO-2 / ZeRO-3: DeepSpeed's bf16 model, its buffers bf16, the fp32 master partition)
 *    against one bf16 process, one step (the next ones differ: one bf16 process has no fp32
 *    master): bit for bit with one micro-step per rank (2 and 4 ranks: the rank-ordered bf16 sum
 *    is the one process's bf16 accumulation); with two micro-steps per rank (amp_accum) the loss
 *    bit for bit and the gradient norm within 2^-8: an element is then two bf16 roundings of
 *    2^-9 away (((g0 + g1) + (g2 + g3)) against (((g0 + g1) + g2) + g3), each sum rounded to
 *    bf16).
 * Kept to these (the suite runs under ASan too). */
static void sharded(gckpt_parallel mode, bool fp32_accum, bool amp_accum)
{
    const run_case fp32[] = {{mode, GCKPT_FP32, GCKPT_FP32, 2, 1, true, 2, 0},
                             {mode, GCKPT_FP32, GCKPT_FP32, 4, 1, true, 1, 0},
                             {mode, GCKPT_FP32, GCKPT_FP32, 2, 2, false, 1, 0}};
    const run_case amp[] = {{mode, GCKPT_AMP_BF16, GCKPT_BF16, 2, 1, true, 1, 0},
                            {mode, GCKPT_AMP_BF16, GCKPT_BF16, 4, 1, true, 1, 0},
                            {mode, GCKPT_AMP_BF16, GCKPT_BF16, 2, 2, false, 1, 0x1p-8}};
    for (size_t i = 0; i < (fp32_accum ? 3u : 2u); i++) check_case(&fp32[i]);
    for (size_t i = 0; i < (amp_accum ? 3u : 2u); i++) check_case(&amp[i]);
}
/* FSDP2 also with three micro-steps per rank (fp32, one step, against one process of six): the
 * schedule's micro-steps as gckpt_micro_runs makes them, the first, the one between (no_sync: no
 * reduce-scatter, the unsharded .grads kept and added to) and the synchronising last, each run as
 * often as its segments say; every rank's peak its prediction, the loss bit for bit, the gradient
 * norm within 1e-6. */
static void fsdp(void **st)
{
    (void)st, sharded(GCKPT_PAR_FSDP, true, true);
    check_case(&(run_case){GCKPT_PAR_FSDP, GCKPT_FP32, GCKPT_FP32, 2, 3, false, 1, 0});
}
static void zero2(void **st) { (void)st, sharded(GCKPT_PAR_ZERO2, false, true); }
/* HSDP (FSDP2 over a 2 x 2 mesh, FINDINGS R-DIST-27): parameters sharded over the dp_shard pair
 * (ranks 0, 1 and 2, 3), each unit's reduced shard averaged across the dp_replicate pair (0, 2 and
 * 1, 3) in place, held to the backward's end; every rank's allocator peak equals its prediction,
 * the loss one process's of 4 micro-steps bit for bit, the gradient norm within 1e-6 in fp32 (the
 * two-level mean associates ((g0 + g1) + (g2 + g3)) against one process's (((g0 + g1) + g2) + g3))
 * and within 2^-8 under amp-bf16 against one bf16 process (each level's sum rounded to bf16);
 * two micro-steps per rank too (no_sync: neither reduction in the first). */
static void hsdp(void **st)
{
    (void)st;
    const run_case cases[] = {
        {GCKPT_PAR_FSDP, GCKPT_FP32, GCKPT_FP32, 4, 1, false, 2, 0, .dp_replicate = 2},
        {GCKPT_PAR_FSDP, GCKPT_AMP_BF16, GCKPT_BF16, 4, 1, false, 1, 0x1p-8, .dp_replicate = 2},
        {GCKPT_PAR_FSDP, GCKPT_FP32, GCKPT_FP32, 4, 2, false, 1, 0, .dp_replicate = 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}
/* HSDP with LoRA and QLoRA (uint8 and bf16 quant storage) over the 2 x 2 mesh (FINDINGS
 * R-DISTPEFT-11: only the units with adapters reduce-scatter in the dp_shard pair and all-reduce
 * across the dp_replicate pair; a uint8 Params4bit whole on every rank, a bf16-stored one sharded
 * over the pair): every rank's allocator peak equals its prediction. The reference is FSDP2 on the
 * same 4 ranks of one micro-step each (the wrapper's bf16 adapters: no one-GPU recipe, as in
 * `sharded_peft`): the first step's loss bit for bit (the same weights, the same samples), the
 * gradient norm within 2^-8 (the two-level bf16 mean ((g0 + g1) + (g2 + g3)) against the 4-rank
 * reduction's, each sum rounded to bf16). Refused before ("a ParallelismConfig mesh (HSDP) is not
 * measured with adapters"). */
static void hsdp_peft(void **st)
{
    (void)st;
    const double tol = 1.0 / 256;
    const run_case cases[] = {
        {GCKPT_PAR_FSDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 4, 1, false, 1, tol, .method = GCKPT_METHOD_LORA, .ref_np = 4,
         .dp_replicate = 2},
        {GCKPT_PAR_FSDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 4, 1, false, 1, tol, .method = GCKPT_METHOD_QLORA, .ref_np = 4,
         .dp_replicate = 2},
        {GCKPT_PAR_FSDP, GCKPT_AMP_BF16, GCKPT_AMP_BF16, 4, 1, false, 1, tol, .method = GCKPT_METHOD_QLORA, .ref_np = 4,
         .quant_storage = GCKPT_DT_BF16, .dp_replicate = 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
    /* the bf16 storage holds the uint8 one's packed bytes: loss and gradients bit for bit (a shard
     * taken by world rank, not by its place in the dp_shard pair, broke this) */
    cJSON *u8 = load("tiny-llama-fsdp4-amp-bf16-qlora-ga1-hsdp.jsonl");
    cJSON *b16 = load("tiny-llama-fsdp4-amp-bf16-qlora-ga1-sbf16-hsdp.jsonl");
    for (int e = 0; e < cJSON_GetArraySize(pf_at(u8, "entries")); e++) {
        char p[96];
        snprintf(p, sizeof p, "entries[%d].numerics.loss", e);
        if (num(u8, p) != num(b16, p))
            fail_msg("hsdp qlora entry %d: bf16 storage loss %.17g, uint8 %.17g", e, num(b16, p), num(u8, p));
        snprintf(p, sizeof p, "entries[%d].numerics.grad_checksum", e);
        assert_string_equal(str(b16, p), str(u8, p));
    }
    cJSON_Delete(u8);
    cJSON_Delete(b16);
}
/* ZeRO-3 on 3 ranks with a persistent parameter whose element count 3 does not divide and whose
 * bytes fill its allocation (found by tests/ci/mpi_soak.py; here 2 layers, hidden 32, one kv
 * head of 8: k_proj and v_proj 256 fp32 elements = 1024 bytes, under the persistence threshold
 * 320, kept whole): the all-gather's 3 x 86 = 258 elements are the tensor and padding, the whole
 * copy only the tensor. Before, every entry failed at the first step ("whole copy cannot take
 * 258 gathered elements"; where the allocation's rounding had room for the padding it passed).
 * Now two steps against one fp32 process: the second step's loss, whose forward reads the whole
 * copies gathered after the first, bit for bit; the gradient norm within 1e-6 (not bit for bit:
 * each rank's piece divided by 3, D10). */
static void zero3(void **st)
{
    (void)st, sharded(GCKPT_PAR_ZERO3, false, false);
    check_case(&(run_case){GCKPT_PAR_ZERO3, GCKPT_FP32, GCKPT_FP32, 3, 1, false, 2, 0, "tiny-llama-z3w3"});
}

/* A tied head (the tiny llama tied) under FSDP2 (accelerate's unit [final norm, embedding =
 * head], gathered from the embedding's forward to the backward's end, reduce-scattered last) and
 * ZeRO-3 (the shared weight gathered once, reduced once): every rank's measured peak equals its
 * prediction, the gradients one fp32 process's bit for bit over two steps, and amp-bf16 against
 * one bf16 process (FSDP2). */
static void tied(void **st)
{
    (void)st;
    const run_case cases[] = {{GCKPT_PAR_FSDP, GCKPT_FP32, GCKPT_FP32, 2, 1, true, 2, 0, "tiny-llama-tied"},
                              {GCKPT_PAR_FSDP, GCKPT_AMP_BF16, GCKPT_BF16, 2, 1, true, 1, 0, "tiny-llama-tied"},
                              {GCKPT_PAR_ZERO3, GCKPT_FP32, GCKPT_FP32, 2, 1, true, 2, 0, "tiny-llama-tied"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

/* ZeRO-2 where a rank's slice of the no-decay group (the norms) ends in a later layer than its
 * slice of the weight-decay group (issue 21: 4 layers, hidden 40, vocab 1000; rank 0 keeps layer
 * 2's input_layernorm, its last weight-decay parameter is in layer 1): the rank's partition
 * buffer must exist when that norm's gradient is reduced, the first it keeps in the backward.
 * Before, rank 0 failed there and rank 1 waited in that all-reduce forever. */
static void zero2_split(void **st)
{
    (void)st;
    const run_case cases[] = {{GCKPT_PAR_ZERO2, GCKPT_AMP_BF16, GCKPT_BF16, 2, 1, true, 1, 0, "tiny-llama-z2split"},
                              {GCKPT_PAR_ZERO2, GCKPT_FP32, GCKPT_FP32, 2, 1, true, 1, 0, "tiny-llama-z2split"},
                              /* 3 ranks, 2 micro-steps (found by tests/ci/mpi_soak.py): rank 0 peaks
                               * 2.04 % below the busiest rank 1, whose peak the plan's is; each rank
                               * is judged against its own schedule, the entry against the plan */
                              {GCKPT_PAR_ZERO2, GCKPT_FP32, GCKPT_FP32, 3, 2, false, 1, 0, "tiny-llama-z2w3"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

/* Rank 0's reduced-gradient elements under ZeRO-2 on np ranks (the core's z2_numel: every
 * parameter overlapping its partition of the flat groups, whole). */
static uint64_t z2_numel(const char *fixture, int np)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", GCKPT_TEST_DATA, fixture);
    gckpt_model m;
    gckpt_device d;
    gckpt_err err = {{0}};
    if (!gckpt_model_load(path, &m, &err) || !gckpt_device_load("h100-sxm-80gb", &d, &err)) fail_msg("%s", err.msg);
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_AMP_BF16,
                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA,
                       .layout = {.gpus = (uint32_t)np, .nodes = 1, .mode = GCKPT_PAR_ZERO2}};
    static gckpt_recipe r;
    static gckpt_ctx c;
    gckpt_setting_recipe(&m, &s, GCKPT_TARGET_CPU, &r);
    if (!gckpt_ctx_init(&c, &m, &d, &r, &s, &err)) fail_msg("%s", err.msg);
    assert_true(c.par.z2_numel > 0);
    return c.par.z2_numel;
}

/* ZeRO-2 whose reduce_bucket_size (a ds_config's) equals rank 0's reduced-gradient elements: the
 * ipg bucket and the partition buffer are then scratch buffers of one size and dtype, which the
 * executor tells apart by the schedule's marks (GCKPT_PE_IPG_BUCKET, GCKPT_PE_GRAD_PARTITION).
 * Before, it told them apart by their sizes and refused the setup ("not told apart": every entry
 * an error). Now the run is the default bucket's, against one bf16 process bit for bit. */
static void zero2_bucket_size(void **st)
{
    (void)st;
    uint64_t n = z2_numel("tiny-llama", 2);
    print_message("reduce_bucket_size %llu (rank 0's partition buffer)\n", (unsigned long long)n);
    check_case(&(run_case){GCKPT_PAR_ZERO2, GCKPT_AMP_BF16, GCKPT_BF16, 2, 1, true, 1, 0, NULL, n});
}

static int own_lines(const char *err);

/* Tensor parallelism alone (gckpt-plan --tp T; interp_tp.c), fp32 (and amp-bf16 and pure bf16 at T 2), every_n off / 1 / 2
 * x offload, on T ranks
 * against one process of the same batch (the TP ranks share it: mb x grad_accum): every entry passes, every
 * rank's allocator peak equals its schedule's and the busiest rank's the plan's byte for byte, the ranks' loss and
 * gathered gradient checksum agree, the loss equals one process's within 1e-6 (bit for bit measured at T 2
 * and 4; the rowwise all-reduce adds the ranks' partial sums, a reassociation) and the gradient norm within
 * 1e-6 (the checksum differs: the colwise input gradients and rowwise outputs are summed in another order).
 * T 4 on a model with 4 key/value heads and uneven intermediate (70) and vocabulary (131) chunks; qwen3's
 * q / k norms. */
/* gckpt-run-testhooks' GCKPT_TEST_GRAD_DUMP records (tests/executor/run_test_hooks.c): a piece of a
 * gradient, n floats from element lo of the whole tensor. */
typedef struct {
    int32_t tensor, layer;
    uint64_t lo, n;
} grad_rec;

/* One process's whole gradients (the last of each tensor and layer in its dump). */
typedef struct {
    int32_t tensor, layer;
    uint64_t n;
    float *v;
    bool *seen;
} whole_grad;

static FILE *open_scratch(const char *name)
{
    char path[512];
    cli_path(name, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open", name);
    return f;
}

static size_t read_whole(const char *name, whole_grad *w, size_t cap)
{
    FILE *f = open_scratch(name);
    size_t n = 0;
    grad_rec r;
    while (fread(&r, sizeof r, 1, f) == 1) {
        if (r.lo || r.n > 1u << 24) fail_msg("%s: not a whole gradient", name);
        size_t k = 0;
        while (k < n && (w[k].tensor != r.tensor || w[k].layer != r.layer)) k++;
        if (k == n) {
            if (n == cap) fail_msg("%s: more than %zu gradients", name, cap);
            w[n++] = (whole_grad){r.tensor, r.layer, r.n, malloc(sizeof(float) * (r.n + 1)), calloc(r.n + 1, 1)};
        }
        if (w[k].n != r.n || fread(w[k].v, sizeof(float), r.n, f) != r.n) fail_msg("%s: a short record", name);
    }
    fclose(f);
    return n;
}

/* The largest elementwise difference between the ranks' gradient pieces (dump.<rank>) and one
 * process's whole gradients (one.0); fails unless the pieces cover every element. */
static double grads_max_diff(const char *dump, int world, const char *one)
{
    static whole_grad w[512];
    char name[256];
    snprintf(name, sizeof name, "%s.0", one);
    size_t n = read_whole(name, w, sizeof w / sizeof *w);
    double worst = 0;
    float *buf = NULL;
    for (int k = 0; k < world; k++) {
        snprintf(name, sizeof name, "%s.%d", dump, k);
        FILE *f = open_scratch(name);
        grad_rec r;
        while (fread(&r, sizeof r, 1, f) == 1) {
            size_t j = 0;
            while (j < n && (w[j].tensor != r.tensor || w[j].layer != r.layer)) j++;
            if (j == n || r.lo + r.n > w[j].n) fail_msg("%s: a piece of tensor %d layer %d outside one process's", name, r.tensor, r.layer);
            float *nb = realloc(buf, sizeof *buf * (r.n + 1));
            assert_non_null(nb);
            buf = nb;
            if (fread(buf, sizeof *buf, r.n, f) != r.n) fail_msg("%s: a short record", name);
            for (uint64_t i = 0; i < r.n; i++) {
                worst = fmax(worst, fabs((double)buf[i] - (double)w[j].v[r.lo + i]));
                w[j].seen[r.lo + i] = true;
            }
        }
        fclose(f);
    }
    free(buf);
    for (size_t j = 0; j < n; j++) {
        for (uint64_t i = 0; i < w[j].n; i++)
            if (!w[j].seen[i]) fail_msg("tensor %d layer %d element %llu: no rank's piece", w[j].tensor, w[j].layer, (unsigned long long)i);
        free(w[j].v);
        free(w[j].seen);
    }
    return worst;
}

/* R, S: --dp-replicate R, --dp-shard S beside --tp T (0: none); the world is T x R x S ranks, the one
 * process runs R x S x grad_accum micro-steps (the data-parallel ranks' batches in their order). */
/* peft: LoRA (NULL: full fine-tuning), the one process's the same; *busiest_rank: 0, or the last rank k > 0
 * whose allocator peak was above every lower rank's at some entry */
static void check_tp_case(const char *model, int T, int R, int S, uint64_t grad_accum, int steps, gckpt_precision prec,
                          const gckpt_peft *peft, int *busiest_rank)
{
    char plan[112], one[112], rep[128], rep1[128], err[8192];
    const char *pn = gckpt_precision_names[prec], *lo = peft ? "-lora" : "";
    int dp = (R ? R : 1) * (S ? S : 1), world = T * dp;
    if (busiest_rank) *busiest_rank = 0;
    if (dp == 1) snprintf(plan, sizeof plan, "%s-tp%d-%s%s-ga%llu.json", model, T, pn, lo, (unsigned long long)grad_accum);
    else snprintf(plan, sizeof plan, "%s-tp%dr%ds%d-%s-ga%llu.json", model, T, R, S, pn, (unsigned long long)grad_accum);
    snprintf(one, sizeof one, "%s-tpone-%s%s-ga%llu.json", model, pn, lo, (unsigned long long)grad_accum * (uint64_t)dp);
    snprintf(rep, sizeof rep, "%sl", plan);
    snprintf(rep1, sizeof rep1, "%sl", one);
    char *t = pf_plan_text_mesh(model, prec, GCKPT_SDPA, every, 3, 2, grad_accum, 0, peft, NULL, (uint32_t)T, (uint32_t)R,
                                (uint32_t)S);
    assert_non_null(t);
    cli_write(plan, t);
    free(t);
    t = pf_plan_text_full(model, prec, GCKPT_SDPA, every, 3, 2, grad_accum * (uint64_t)dp, 0, peft, NULL);
    assert_non_null(t);
    cli_write(one, t);
    free(t);
    /* the test build, every gradient piece dumped (GCKPT_TEST_GRAD_DUMP) */
    char npv[8], st[8], dump[160], dumpv[192], dump1[160], dump1v[192];
    snprintf(npv, sizeof npv, "%d", world);
    snprintf(st, sizeof st, "%d", steps);
    snprintf(dump, sizeof dump, "%s.grads", plan);
    snprintf(dump1, sizeof dump1, "%s.grads", one);
    snprintf(dumpv, sizeof dumpv, "GCKPT_TEST_GRAD_DUMP=%s", dump);
    snprintf(dump1v, sizeof dump1v, "GCKPT_TEST_GRAD_DUMP=%s", dump1);
    for (int k = 0; k < world; k++) { /* appended to: none from an earlier run */
        char name[200], path[512];
        snprintf(name, sizeof name, "%s.%d", dump, k);
        cli_path(name, path, sizeof path);
        unlink(path);
    }
    char one0[200], path0[512];
    snprintf(one0, sizeof one0, "%s.0", dump1);
    cli_path(one0, path0, sizeof path0);
    unlink(path0);
    int rc = cli_run_opts(GCKPT_MPIEXEC, A("-np", npv, "--oversubscribe", "-x", dumpv, GCKPT_RUN_HOOKS_EXE, "--plan", plan,
                                           "--all", "--backend", "host", "--steps", st, "--warmup", "0", "-o", rep),
                          &mpi_env, err, sizeof err);
    if (rc != 0) fail_msg("%s: mpirun -np %d: exit %d: %s", plan, world, rc, err);
    const cli_opts dump_env = {.env = {dump1v}};
    rc = cli_run_opts(GCKPT_RUN_HOOKS_EXE, A("--plan", one, "--all", "--backend", "host", "--steps", st, "--warmup", "0",
                                             "-q", "-o", rep1),
                      &dump_env, err, sizeof err);
    if (rc != 0) fail_msg("%s: exit %d: %s", one, rc, err);
    double gmax = grads_max_diff(dump, world, dump1);
    print_message("tp %d x %d (%s, grad_accum %llu, %d steps): the gradients within %.3g of one process's elementwise\n",
                  T, dp, pn, (unsigned long long)grad_accum, steps, gmax);
    /* fp32: the TP sums and the data-parallel reductions reassociate (measured up to 1.5e-8); amp-bf16:
     * each rank's rowwise partial outputs rounded to bf16 before their sum */
    if (gmax > (prec == GCKPT_FP32 ? 1e-7 : 1e-3)) fail_msg("%s: a gradient element %.3g from one process's", plan, gmax);
    cJSON *r = load(rep), *s = load(rep1);
    assert_int_equal(num(r, "ranks.world_size"), world);
    assert_string_equal(str(r, "ranks.parallel"), "tp");
    int n = cJSON_GetArraySize(pf_at(r, "entries"));
    assert_int_equal(n, 5);
    const char *hash0 = str(r, "entries[0].numerics.grad_checksum");
    for (int i = 0; i < n; i++) {
        char p[96];
        snprintf(p, sizeof p, "entries[%d].pass", i);
        if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d did not pass", plan, i);
        snprintf(p, sizeof p, "entries[%d].ranks", i);
        assert_int_equal(cJSON_GetArraySize(pf_at(r, p)), world);
        double busiest = 0;
        for (int k = 0; k < world; k++) {
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.measured", i, k);
            if (busiest_rank && num(r, p) > busiest && k) *busiest_rank = k;
            busiest = fmax(busiest, num(r, p));
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.exact", i, k);
            if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d rank %d: measured peak != its prediction", plan, i, k);
            snprintf(p, sizeof p, "entries[%d].ranks[%d].grad_checksum", i, k);
            assert_string_equal(str(r, p), hash0); /* the gathered gradients, on every rank */
        }
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.measured", i);
        double meas = num(r, p);
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.predicted", i);
        double pred = num(r, p);
        snprintf(p, sizeof p, "entries[%d].memory.schedule_peak_bytes", i);
        /* the plan is the busiest TP rank's (gckpt_plan_tp_busiest), byte for byte */
        if (meas != busiest || pred != busiest || num(r, p) != busiest)
            fail_msg("%s entry %d: the plan predicted %.0f, the busiest rank's schedule %.0f, measured %.0f, the busiest "
                     "rank %.0f", plan, i, pred, num(r, p), meas, busiest);
        snprintf(p, sizeof p, "entries[%d].message", i);
        if (!cJSON_IsNull(pf_at(r, p))) fail_msg("%s entry %d: message %s", plan, i, str(r, p));
        snprintf(p, sizeof p, "entries[%d].numerics.grad_checksum", i);
        assert_string_equal(str(r, p), hash0); /* across every_n / offload */
        snprintf(p, sizeof p, "entries[%d].numerics.loss", i);
        double loss = num(r, p), loss1 = num(s, p);
        snprintf(p, sizeof p, "entries[%d].numerics.grad_norm", i);
        double g = num(r, p), g1 = num(s, p);
        print_message("tp %d x %d entry %d: loss %.17g (one process %.17g%s), grad norm %.17g (%.17g, %+.2e)\n", T, dp, i,
                      loss, loss1, loss == loss1 ? ", bit for bit" : "", g, g1, (g - g1) / g1);
        /* amp-bf16: each rank's rowwise partial output is rounded to bf16 before the sum (one process
         * rounds the whole product once), and the logits' pieces likewise: measured 6.7e-6 on the loss,
         * 3.0e-4 on the norm (grad_accum 2; a missing all-reduce moves the loss by 1e-3) */
        double lt = prec == GCKPT_FP32 ? 1e-6 : 3e-5, gt = prec == GCKPT_FP32 ? 1e-6 : 1e-3;
        if (fabs(loss - loss1) > lt * fabs(loss1)) fail_msg("%s entry %d: loss %.17g, one process %.17g", plan, i, loss, loss1);
        if (fabs(g - g1) > gt * g1) fail_msg("%s entry %d: gradient norm %.17g, one process %.17g", plan, i, g, g1);
    }
    cJSON_Delete(r);
    cJSON_Delete(s);
}

static void check_tp_mesh(const char *model, int T, int R, int S, uint64_t grad_accum, int steps, gckpt_precision prec)
{
    check_tp_case(model, T, R, S, grad_accum, steps, prec, NULL, NULL);
}

static void check_tp(const char *model, int T, uint64_t grad_accum, int steps, gckpt_precision prec)
{
    check_tp_mesh(model, T, 0, 0, grad_accum, steps, prec);
}

/* LoRA under TP alone (gckpt-plan --tp T --method lora; interp_tp_lora.c, FINDINGS R-TP-12, R-EXEC-8): each
 * colwise layer's lora_B its rows, lora_A replicated, lora_B's input gradient all-reduced. As check_tp against
 * one process's LoRA step: every rank's allocator peak equal to its schedule's and the plan equal to the
 * busiest rank's, the loss and the adapters' gradients within float reassociation. The fp32 q / v case's
 * busiest rank is the last (the short vocabulary chunk pads its logits for the gather without checkpointing,
 * R-TP-15, R-TP-18). */
static void tp_lora(void **st)
{
    (void)st;
    gckpt_peft qv, col;
    gckpt_peft_default(GCKPT_METHOD_LORA, &qv);
    qv.targets = (1u << GCKPT_LT_Q) | (1u << GCKPT_LT_V);
    col = qv;
    col.targets |= (1u << GCKPT_LT_K) | (1u << GCKPT_LT_GATE) | (1u << GCKPT_LT_UP);
    int busiest = -1;
    check_tp_case("tiny-llama", 2, 0, 0, 1, 2, GCKPT_FP32, &qv, &busiest);
    print_message("tp 2 LoRA q / v fp32: the busiest rank %d\n", busiest);
    assert_int_equal(busiest, 1);
    check_tp_case("tiny-llama", 2, 0, 0, 2, 1, GCKPT_AMP_BF16, &qv, NULL);
    check_tp_case("tiny-llama-tp4", 4, 0, 0, 2, 1, GCKPT_FP32, &col, &busiest);
    print_message("tp 4 LoRA on every colwise layer fp32: the busiest rank %d\n", busiest);
    /* QLoRA under TP, as gckpt-plan refuses it (R-TP-14): a LoRA plan made QLoRA is refused, one line and
     * exit 2, no report */
    char *t = pf_plan_text_tp("tiny-llama", GCKPT_FP32, GCKPT_SDPA, every, 3, 2, 1, 0, &qv, NULL, 2, 0);
    assert_non_null(t);
    cJSON *j = cJSON_Parse(t), *in = pf_at(j, "inputs");
    free(t);
    cJSON_ReplaceItemInObject(in, "method", cJSON_CreateString("qlora"));
    cJSON_AddStringToObject(cJSON_AddObjectToObject(in, "quant"), "type", "nf4");
    t = cJSON_Print(j);
    cJSON_Delete(j);
    cli_write("tp-qlora.json", t);
    free(t);
    char err[8192];
    int rc = cli_run(GCKPT_RUN_EXE, A("--plan", "tp-qlora.json", "--backend", "host", "-o", "no.jsonl"), NULL, err, sizeof err);
    if (rc != 2 || !strstr(err, "--method qlora") || !strstr(err, "R-TP-14") || strchr(err, '\n') != strrchr(err, '\n'))
        fail_msg("QLoRA under TP: exit %d: %s", rc, err);
    assert_false(cli_exists("no.jsonl"));
}

/* TP x DDP (gckpt-plan --tp 2 --dp-replicate 2; interp_fsdp.c's exec_tp_fsdp_ops, FINDINGS R-TP-11): 4 ranks,
 * each TP group FSDP2 over one shard rank replicated twice: every micro-step's reduce output kept as the
 * partial output and added into the synchronising one's before its all-reduce across the replicas; fp32 at
 * grad_accum 2 (the partial output made and consumed) over two steps (the AdamW step on the reduced
 * gradients), and grad_accum 1. As check_tp against one process of 2 x grad_accum micro-steps: every rank's
 * peak equal to its schedule's (the plan's), the loss within 1e-6 (measured bit for bit), the gradient norm
 * within 1e-6 (measured 1.5e-8). */
static void tp_ddp(void **st)
{
    (void)st;
    check_tp_mesh("tiny-llama", 2, 2, 0, 2, 2, GCKPT_FP32);
    check_tp_mesh("tiny-llama", 2, 2, 0, 1, 1, GCKPT_FP32);
    /* qwen3's q / k norms under FSDP2 are not measured: gckpt-plan refuses the plan, and gckpt-run a
     * hand-made one (TP alone's with replicas added) entry by entry, naming why */
    char *t = pf_plan_text_tp("tiny-qwen3-tp2", GCKPT_FP32, GCKPT_SDPA, every, 3, 2, 1, 0, NULL, NULL, 2, 0);
    assert_non_null(t);
    cJSON *j = cJSON_Parse(t);
    free(t);
    assert_non_null(j);
    cJSON *tpj = pf_at(j, "inputs.tensor_parallel");
    cJSON_ReplaceItemInObject(tpj, "world_size", cJSON_CreateNumber(4));
    cJSON_AddNumberToObject(tpj, "dp_replicate_size", 2);
    t = cJSON_Print(j);
    cJSON_Delete(j);
    cli_write("qwen3-tpddp.json", t);
    free(t);
    char err[8192];
    int rc = mpi(4, "qwen3-tpddp.json", "qwen3-tpddp.jsonl", 1, err, sizeof err);
    assert_int_equal(rc, 1);
    cJSON *r = load("qwen3-tpddp.jsonl");
    for (int i = 0; i < cJSON_GetArraySize(pf_at(r, "entries")); i++) {
        char p[64];
        snprintf(p, sizeof p, "entries[%d].status", i);
        assert_string_equal(str(r, p), "error");
        snprintf(p, sizeof p, "entries[%d].message", i);
        if (!strstr(str(r, p), "TP x FSDP with q / k norms")) fail_msg("%s", str(r, p));
    }
    cJSON_Delete(r);
}

/* TP x FSDP (--tp 2 --dp-shard 2, R-TP-8): 4 ranks, each TP rank's local parameters FSDP2-sharded over
 * its fsdp pair (dim 0 of the local tensors: the embedding's and lm_head's chunk(V) rows; the embedding's
 * whole [V, h] .grad packed by its rows), the all-gathers and reduce-scatters fp32 (fsdp_fp32) in the pair,
 * the TP collectives in the TP pair; fp32 over two steps and amp-bf16 (autocast, fp32 wire). HSDP x TP
 * (--tp 2 --dp-replicate 2 --dp-shard 2, R-TP-11): 8 ranks, the partial output of the reduce-scatters
 * kept between micro-steps and all-reduced across the replicas. As check_tp. */
static void tp_fsdp(void **st)
{
    (void)st;
    check_tp_mesh("tiny-llama", 2, 0, 2, 2, 2, GCKPT_FP32);
    check_tp_mesh("tiny-llama", 2, 0, 2, 2, 1, GCKPT_AMP_BF16);
    check_tp_mesh("tiny-llama", 2, 2, 2, 2, 1, GCKPT_FP32);
}

static void tp(void **st)
{
    (void)st;
    check_tp("tiny-llama", 2, 1, 2, GCKPT_FP32);
    check_tp("tiny-llama-tp4", 4, 2, 1, GCKPT_FP32);
    check_tp("tiny-llama", 2, 2, 1, GCKPT_AMP_BF16);
    /* pure bf16 (R-TP-22): the shards, the residual stream and every collective bf16, against one bf16
     * process: each rank's rowwise partial output and input-gradient piece rounded to bf16 before their sum
     * (measured: loss 3.9e-7 relative, gradient norm +2.0e-4, elements within 7.3e-4; amp-bf16's bounds) */
    check_tp("tiny-llama", 2, 2, 1, GCKPT_BF16);
    /* SGD with momentum (R-TP-23): the embedding's momentum buffer whole like its gradient, its rows stepped;
     * two steps (the buffer carried), grad_accum 2 (its plan files the only fp32 ga2 ones at T 2); against one
     * SGD process */
    pf_optimizer = GCKPT_SGD;
    check_tp("tiny-llama", 2, 2, 2, GCKPT_FP32);
    pf_optimizer = GCKPT_ADAMW;
    /* qwen3's q_norm / k_norm (replicated_with_grad_allreduce): each rank's heads give part of their
     * gradient (without the all-reduce the norm is 2.7e-6 off, with it 2e-8) */
    check_tp("tiny-qwen3-tp2", 2, 2, 1, GCKPT_FP32);
    /* refused, one line and exit 2, no report: without mpirun, on other ranks than T, TP x FSDP on T ranks */
    char err[8192];
    int rc = cli_run(GCKPT_RUN_EXE, A("--plan", "tiny-llama-tp2-fp32-ga1.json", "--backend", "host", "-o", "no.jsonl"), NULL,
                     err, sizeof err);
    assert_int_equal(rc, 2);
    if (!strstr(err, "a plan for 2 ranks (tensor parallelism)") || !strstr(err, "mpirun -np 2 gckpt-run") ||
        strchr(err, '\n') != strrchr(err, '\n'))
        fail_msg("without mpirun: %s", err);
    rc = mpi(4, "tiny-llama-tp2-fp32-ga1.json", "no.jsonl", 1, err, sizeof err);
    if (rc != 2 || !strstr(err, "a plan for 2 ranks, started as 4 ranks") || own_lines(err) != 1) fail_msg("4 ranks for 2: %s", err);
    /* TP x FSDP on the ranks of TP alone */
    char *t = pf_plan_text_tp("tiny-llama-tp4", GCKPT_AMP_BF16, GCKPT_SDPA, every, 3, 2, 1, 0, NULL, NULL, 2, 2);
    assert_non_null(t);
    cli_write("tpfsdp.json", t);
    free(t);
    rc = mpi(2, "tpfsdp.json", "no.jsonl", 1, err, sizeof err);
    if (rc != 2 || !strstr(err, "a plan for 4 ranks, started as 2 ranks") || !strstr(err, "mpirun -np 4 gckpt-run") ||
        own_lines(err) != 1)
        fail_msg("TP x FSDP on 2 ranks: %s", err);
    assert_false(cli_exists("no.jsonl"));
}

/* Context parallelism (gckpt-plan --cp C [--dp-shard S] --gpus C x S; interp_cp.c, FINDINGS R-EXEC-6), every_n
 * off / 1 / 2, on C x S ranks against one process over the whole sequence (the same micro-batches, S x
 * grad_accum of them: the CP ranks of a group share theirs): every entry passes, every rank's allocator peak
 * equals its prediction (FSDP2's walked step at seq / C, CP's buffers and the ring's replayed transients,
 * core/cp_walk.c) and the busiest rank's is the plan's, byte for byte (on the contiguous split the last
 * rank's, a little above rank 0's); fp32: the loss (the Trainer's CP loss averaged over the
 * ranks) within 1e-6 of one process's and the gradients within 1e-6 elementwise (the ring's merge and the
 * dK/dV sums reassociate); amp-bf16 against one bf16 process within 1e-5 and 1e-3. Cases: tiny-llama at cp
 * 2 (head-tail, seq 32), cp 4 (seq 32) and the contiguous split (cp 4, seq 36), cp 2 x dp_shard 2, amp-bf16,
 * and a wide-attention llama whose peak is a ring call's. Another precision is refused, one line, exit 2. */
static void check_cp_peft(const char *model, uint32_t C, uint64_t seq, uint32_t dp_shard, uint32_t R, uint64_t grad_accum,
                          int steps, gckpt_precision prec, const gckpt_peft *peft, gckpt_offload_sel offload)
{
    char plan[96], one[96], rep[112], rep1[112], err[8192];
    const uint32_t dp = dp_shard * (R ? R : 1); /* the data-parallel ranks: dp_shard x dp_replicate */
    int world = (int)(C * dp);
    /* amp-bf16: FSDP2's MixedPrecisionPolicy computes in bf16: against one bf16 process (as fsdp's cases) */
    gckpt_precision one_prec = prec == GCKPT_AMP_BF16 ? GCKPT_BF16 : prec;
    const char *pn = gckpt_precision_names[prec], *how = gckpt_method_names[peft ? peft->method : GCKPT_METHOD_FULL];
    const char *off = offload == GCKPT_OFFLOAD_ON ? "-offload" : "";
    snprintf(plan, sizeof plan, "%s-cp%us%ur%u-s%llu-ga%llu-%s-%s%s.json", model, C, dp_shard, R, (unsigned long long)seq,
             (unsigned long long)grad_accum, pn, how, off);
    snprintf(one, sizeof one, "%s-cpone-s%llu-ga%llu-%s-%s%s.json", model, (unsigned long long)seq,
             (unsigned long long)grad_accum * dp, pn, how, off);
    snprintf(rep, sizeof rep, "%sl", plan);
    snprintf(rep1, sizeof rep1, "%sl", one);
    /* amp-bf16 with adapters: FSDP2's MixedPrecisionPolicy casts them to bf16, a recipe no one process has (as
     * sharded_peft says): every rank's peak is checked, not the numerics */
    const bool ref = !(peft && peft->method != GCKPT_METHOD_FULL && prec == GCKPT_AMP_BF16);
    char *t = pf_plan_text_cp_peft(model, prec, every, 3, 2, grad_accum, seq, C, dp_shard, R, peft, offload);
    assert_non_null(t);
    cli_write(plan, t);
    free(t);
    t = pf_plan_text_cp_peft(model, one_prec, every, 3, 2, grad_accum * dp, seq, 0, 0, 0, peft, offload);
    assert_non_null(t);
    cli_write(one, t);
    free(t);
    char npv[8], st[8], dump[128], dumpv[160], dump1[128], dump1v[160], name[200], path[512];
    snprintf(st, sizeof st, "%d", steps);
    snprintf(npv, sizeof npv, "%d", world);
    snprintf(dump, sizeof dump, "%s.grads", plan);
    snprintf(dump1, sizeof dump1, "%s.grads", one);
    snprintf(dumpv, sizeof dumpv, "GCKPT_TEST_GRAD_DUMP=%s", dump);
    snprintf(dump1v, sizeof dump1v, "GCKPT_TEST_GRAD_DUMP=%s", dump1);
    for (int k = 0; k < world; k++) { /* appended to: none from an earlier run */
        snprintf(name, sizeof name, "%s.%d", dump, k);
        cli_path(name, path, sizeof path);
        unlink(path);
    }
    snprintf(name, sizeof name, "%s.0", dump1);
    cli_path(name, path, sizeof path);
    unlink(path);
    int rc = cli_run_opts(GCKPT_MPIEXEC, A("-np", npv, "--oversubscribe", "-x", dumpv, GCKPT_RUN_HOOKS_EXE, "--plan", plan,
                                           "--all", "--backend", "host", "--steps", st, "--warmup", "0", "-o", rep),
                          &mpi_env, err, sizeof err);
    if (rc != 0) fail_msg("%s: mpirun -np %d: exit %d: %s", plan, world, rc, err);
    const cli_opts dump_env = {.env = {dump1v}};
    rc = !ref ? 0 : cli_run_opts(GCKPT_RUN_HOOKS_EXE, A("--plan", one, "--all", "--backend", "host", "--steps", st, "--warmup", "0",
                                             "-q", "-o", rep1),
                      &dump_env, err, sizeof err);
    if (rc != 0) fail_msg("%s: exit %d: %s", one, rc, err);
    /* each entry appends its gradients: the last of each tensor is the last entry's (every_n 2) */
    double gmax = ref ? grads_max_diff(dump, world, dump1) : 0;
    if (ref) print_message("%s cp %u x dp_shard %u x dp_replicate %u, seq %llu, %s (grad_accum %llu, %d steps): the gradients "
                  "within %.3g of one process's elementwise\n", model, C, dp_shard, R ? R : 1, (unsigned long long)seq, pn,
                  (unsigned long long)grad_accum, steps, gmax);
    /* fp32: reassociation; amp-bf16: the ring merges the blocks' unrounded outputs in fp32 where one bf16 process
     * rounds its one SDPA output */
    double gt = prec == GCKPT_FP32 ? 1e-6 : 1e-3, lt = prec == GCKPT_FP32 ? 1e-6 : 1e-5;
    if (gmax > gt) fail_msg("%s: a gradient element %.3g from one process's", plan, gmax);
    cJSON *r = load(rep), *s = ref ? load(rep1) : NULL;
    assert_int_equal(num(r, "ranks.world_size"), world);
    int n = cJSON_GetArraySize(pf_at(r, "entries"));
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++) {
        char p[96];
        snprintf(p, sizeof p, "entries[%d].pass", i);
        if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d did not pass", plan, i);
        double busiest = 0, rank0 = 0;
        for (int k = 0; k < world; k++) {
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.measured", i, k);
            busiest = fmax(busiest, num(r, p));
            if (!k) rank0 = num(r, p);
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.exact", i, k);
            if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d rank %d: measured peak != its prediction", plan, i, k);
        }
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.predicted", i);
        double pred = num(r, p);
        snprintf(p, sizeof p, "entries[%d].memory.schedule_peak_bytes", i);
        /* the plan is the busiest CP rank's (planner/plan_cp.c), and so is the schedule's prediction */
        if (pred != busiest || num(r, p) != busiest)
            fail_msg("%s entry %d: the plan predicted %.0f, the schedule %.0f, the busiest rank measured %.0f (rank 0 "
                     "%.0f)", plan, i, pred, num(r, p), busiest, rank0);
        if (busiest != rank0) /* the contiguous split: the last rank's ring runs every block */
            print_message("%s cp %u entry %d: the busiest rank measured %.0f, %.0f above rank 0\n", model, C, i, busiest,
                          busiest - rank0);
        if (!ref) continue;
        snprintf(p, sizeof p, "entries[%d].numerics.loss", i);
        double loss = num(r, p), loss1 = num(s, p);
        snprintf(p, sizeof p, "entries[%d].numerics.grad_norm", i);
        double g = num(r, p), g1 = num(s, p);
        print_message("%s cp %u x %u entry %d: peak %.0f, loss %.17g (one process %.17g%s), grad norm %.17g (%.17g, %+.2e)\n",
                      model, C, dp_shard, i, busiest, loss, loss1, loss == loss1 ? ", bit for bit" : "", g, g1, (g - g1) / g1);
        if (fabs(loss - loss1) > lt * fabs(loss1)) fail_msg("%s entry %d: loss %.17g, one process %.17g", plan, i, loss, loss1);
        if (fabs(g - g1) > gt * g1) fail_msg("%s entry %d: gradient norm %.17g, one process %.17g", plan, i, g, g1);
    }
    cJSON_Delete(r);
    cJSON_Delete(s);
}

static void check_cp_prec(const char *model, uint32_t C, uint64_t seq, uint32_t dp_shard, uint64_t grad_accum, int steps,
                          gckpt_precision prec)
{
    check_cp_peft(model, C, seq, dp_shard, 0, grad_accum, steps, prec, NULL, GCKPT_OFFLOAD_OFF);
}

static void check_cp(const char *model, uint32_t C, uint64_t seq, uint32_t dp_shard, uint64_t grad_accum, int steps)
{
    check_cp_prec(model, C, seq, dp_shard, grad_accum, steps, GCKPT_FP32);
}

static void cp(void **st)
{
    (void)st;
    check_cp("tiny-llama", 2, 32, 1, 1, 1);
    check_cp("tiny-llama", 2, 32, 1, 2, 2);
    /* cp 4 (three partial-merge ranks, each rank's ring of four blocks) and the contiguous split (seq 36 on
     * 4 ranks: 36 % 8 != 0, no load balancing, the blocks above the diagonal skipped) */
    check_cp("tiny-llama", 4, 32, 1, 1, 1);
    check_cp("tiny-llama", 4, 36, 1, 1, 1);
    /* CP x dp_shard (FSDP2 over the 4 ranks, the ring in each CP pair; against 2 x grad_accum micro-steps) */
    check_cp("tiny-llama", 2, 32, 2, 2, 1);
    /* the wide-attention llama of R-CP-11 (16 heads of 64 over hidden 64): the peak inside a ring call
     * (the backward's), its transients replayed (without them rank 0 measures 3.5 % below) */
    check_cp("tiny-llama-wide", 2, 32, 1, 1, 1);
    /* amp-bf16 (FSDP2's mixed precision: bf16 compute, fp32 reductions) */
    check_cp_prec("tiny-llama", 2, 32, 1, 2, 1, GCKPT_AMP_BF16);
    /* LoRA all-linear (FINDINGS R-CP-23, R-CP-25): the adapters' gradients against one process's, every rank's
     * peak its prediction; lora_dropout 0 (so rank 0 keeps its o_proj input copies): a CP rank draws the dropout
     * masks of its own pieces, not one process's over the whole sequence */
    gckpt_peft lora;
    gckpt_peft_default(GCKPT_METHOD_LORA, &lora);
    lora.dropout = 0;
    check_cp_peft("tiny-llama", 2, 32, 1, 0, 2, 1, GCKPT_FP32, &lora, GCKPT_OFFLOAD_OFF);
    /* activation offload (FINDINGS R-CP-24; every_n 1 and 2 offloaded, every_n off plain), full fine-tuning and LoRA */
    check_cp_peft("tiny-llama", 2, 32, 1, 0, 2, 1, GCKPT_FP32, NULL, GCKPT_OFFLOAD_ON);
    check_cp_peft("tiny-llama", 2, 32, 1, 0, 2, 1, GCKPT_FP32, &lora, GCKPT_OFFLOAD_ON);
    /* another precision (a hand-edited plan: gckpt-plan plans fp32 and amp-bf16): refused by gckpt-run before any
     * rank runs (one line, exit 2, no report) */
    char *t = pf_plan_text_cp("tiny-llama", GCKPT_AMP_BF16, every, 3, 2, 1, 32, 2, 1, 0), *at = t ? strstr(t, "\"amp-bf16\"") : NULL;
    assert_non_null(at);
    memcpy(at, "\"bf16\"    ", 10); /* JSON whitespace after the value */
    cli_write("cp2-bf16.json", t);
    free(t);
    char err[8192];
    int rc = mpi(2, "cp2-bf16.json", "no.jsonl", 1, err, sizeof err);
    if (rc != 2 || !strstr(err, "gckpt-run executes context parallelism in fp32 and amp-bf16 only") || own_lines(err) != 1)
        fail_msg("cp 2 bf16: exit %d: %s", rc, err);
    assert_false(cli_exists("no.jsonl"));
}

/* CP x HSDP (gckpt-plan --cp 2 --dp-shard 2 --dp-replicate 2 --gpus 8, FINDINGS R-CP-17): accelerate's mesh
 * (dp_replicate, dp_shard, cp), FSDP2 over the flattened dp_shard_cp (4 consecutive ranks) with the replicas'
 * all-reduce, the ring in each CP pair; 8 ranks against one process over the 4 data-parallel ranks' micro-batches:
 * check_cp_peft's checks (every rank's allocator peak its prediction, the busiest the plan's, the loss and
 * gradients one process's). */
static void cp_hsdp(void **st)
{
    (void)st;
    check_cp_peft("tiny-llama", 2, 32, 2, 2, 1, 1, GCKPT_FP32, NULL, GCKPT_OFFLOAD_OFF);
    check_cp_peft("tiny-llama", 2, 32, 2, 2, 1, 1, GCKPT_AMP_BF16, NULL, GCKPT_OFFLOAD_OFF);
    /* with LoRA all-linear (FINDINGS R-CP-28; amp-bf16: fp32 LoRA under HSDP is not planned, peft_ok), lora_dropout
     * 0, without and with activation offload: every rank's peak its prediction (no one-process reference for
     * FSDP2's bf16 adapters: the numerics are not compared) */
    gckpt_peft lora;
    gckpt_peft_default(GCKPT_METHOD_LORA, &lora);
    lora.dropout = 0;
    check_cp_peft("tiny-llama", 2, 32, 2, 2, 1, 1, GCKPT_AMP_BF16, &lora, GCKPT_OFFLOAD_OFF);
    check_cp_peft("tiny-llama", 2, 32, 2, 2, 1, 1, GCKPT_AMP_BF16, &lora, GCKPT_OFFLOAD_ON);
}

/* The lines of err that gckpt-run wrote (mpirun adds its own about the exit status). */
static int own_lines(const char *err)
{
    int n = 0;
    for (const char *p = err; (p = strstr(p, "gckpt-run: ")); p++) n += p == err || p[-1] == '\n';
    return n;
}

static void refusals(void **st)
{
    (void)st;
    char err[8192];
    write_plan("ddp2.json", "tiny-llama", 2, 1, GCKPT_PAR_DDP, GCKPT_AMP_BF16, 0);
    int rc = cli_run(GCKPT_RUN_EXE, A("--plan", "ddp2.json", "--backend", "host", "-o", "no.jsonl"), NULL, err, sizeof err);
    assert_int_equal(rc, 2);
    if (!strstr(err, "mpirun -np 2 gckpt-run --plan ddp2.json") || strchr(err, '\n') != strrchr(err, '\n'))
        fail_msg("without mpirun: %s", err);
    rc = mpi(4, "ddp2.json", "no.jsonl", 1, err, sizeof err);
    assert_int_equal(rc, 2);
    if (!strstr(err, "a plan for 2 ranks, started as 4 ranks") || own_lines(err) != 1)
        fail_msg("4 ranks for 2: %s", err);
    assert_false(cli_exists("no.jsonl"));
    /* what is not planned per rank (a hand-edited plan's precision): each entry an error naming why */
    const struct {
        gckpt_parallel mode;
        const char *prec;
        const char *why;
    } no[] = {{GCKPT_PAR_ZERO2, "bf16", "--parallel zero2: only --precision amp-bf16 (the Trainer's bf16=True) or fp32"},
              {GCKPT_PAR_FSDP, "amp-fp16", "--parallel fsdp: only --precision amp-bf16 (the Trainer's bf16=True) or fp32"}};
    for (size_t k = 0; k < sizeof no / sizeof *no; k++) {
        write_plan("refused.json", "tiny-llama", 2, 1, no[k].mode, GCKPT_AMP_BF16, 0);
        char *t = cli_slurp("refused.json"), *at = t ? strstr(t, "\"amp-bf16\"") : NULL;
        assert_non_null(at);
        size_t cap = strlen(t) + 32;
        char *edited = malloc(cap);
        assert_non_null(edited);
        snprintf(edited, cap, "%.*s\"%s\"%s", (int)(at - t), t, no[k].prec, at + strlen("\"amp-bf16\""));
        free(t);
        cli_write("refused.json", edited);
        free(edited);
        rc = mpi(2, "refused.json", "refused.jsonl", 1, err, sizeof err);
        assert_int_equal(rc, 1);
        cJSON *r = load("refused.jsonl");
        for (int i = 0; i < cJSON_GetArraySize(pf_at(r, "entries")); i++) {
            char p[64];
            snprintf(p, sizeof p, "entries[%d].status", i);
            assert_string_equal(str(r, p), "error");
            snprintf(p, sizeof p, "entries[%d].message", i);
            if (!strstr(str(r, p), no[k].why)) fail_msg("%s", str(r, p));
        }
        cJSON_Delete(r);
    }
}

/* Whether name matches one of the comma-separated fnmatch patterns of list. */
static bool name_in(const char *name, const char *list)
{
    char pat[128];
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        snprintf(pat, sizeof pat, "%.*s", (int)(k < sizeof pat ? k : sizeof pat - 1), p);
        if (*pat && fnmatch(pat, name, 0) == 0) return true;
        p += k + (p[k] == ',');
    }
    return false;
}

int main(void)
{
#ifndef GCKPT_HAVE_MPI
    fprintf(stderr, "test_run_mpi: this build has no MPI (libopenmpi-dev): skipped\n");
    return 77;
#else
    if (access(GCKPT_MPIEXEC, X_OK) != 0) {
        fprintf(stderr, "test_run_mpi: %s not found: skipped\n", GCKPT_MPIEXEC);
        return 77;
    }
    schema = rf_schema();
    if (!schema || !cli_setup("gckpt-mpi")) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(ddp), cmocka_unit_test(ddp_peft), cmocka_unit_test(sharded_peft), cmocka_unit_test(zero1), cmocka_unit_test(fsdp),
                                       cmocka_unit_test(zero2), cmocka_unit_test(hsdp), cmocka_unit_test(hsdp_peft), cmocka_unit_test(zero2_split),
                                       cmocka_unit_test(zero2_bucket_size),
                                       cmocka_unit_test(zero3), cmocka_unit_test(tied), cmocka_unit_test(tp), cmocka_unit_test(tp_lora),
                                       cmocka_unit_test(tp_ddp), cmocka_unit_test(tp_fsdp), cmocka_unit_test(cp),
                                       cmocka_unit_test(cp_hsdp), cmocka_unit_test(refusals)};
    /* GCKPT_MPI_TEST: the tests to run, GCKPT_MPI_SKIP: those left to another CTest entry;
     * each a comma-separated list of fnmatch patterns (hsdp_peft; tp*,cp) */
    const char *only = getenv("GCKPT_MPI_TEST"), *skip = getenv("GCKPT_MPI_SKIP");
    struct CMUnitTest chosen[sizeof tests / sizeof *tests];
    size_t n = 0;
    for (size_t i = 0; i < sizeof tests / sizeof *tests; i++)
        if ((!only || !*only || name_in(tests[i].name, only)) && !(skip && *skip && name_in(tests[i].name, skip)))
            chosen[n++] = tests[i];
    int rc = _cmocka_run_group_tests("test_run_mpi", chosen, n, NULL, NULL);
    cli_teardown();
    cJSON_Delete(schema);
    return rc;
#endif
}
