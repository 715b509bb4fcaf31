/* Tensor parallelism on the CUDA backend (needs MPI and two GPUs; exits 77, "skipped", without them):
 * `mpirun -np 2 gckpt-run --backend cuda` on a tiny llama planned with --tp 2 (interp_tp.c's ops through
 * the backend: the vocabulary-parallel lookup, the logits' all-gather and column copies, NCCL in the
 * world), fp32 and amp-bf16, every_n off / 1 / 2 x offload, two steps. Required: every entry passes,
 * every rank's allocator peak equals its schedule's (peak_bytes.exact) and rank 0's (the busiest) the
 * plan's byte for byte, the ranks' gathered gradient checksum agrees across ranks and entries, the loss
 * and gradient norm are near the host backend's TP run of the same plan (NCCL's sums are ring / tree
 * ordered and cuBLAS is not OpenBLAS: the bounds are not measured, no GPU where this was written). With
 * four GPUs also TP x FSDP (--tp 2 --dp-shard 2: the TP pair's and the dp_shard pair's own NCCL
 * communicators, cuda_nccl.cu's groups). Written without a GPU: unverified. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_mpi.h"
#include "gckpt/core/parallel.h"

/* T x S ranks (S: --dp-shard, 0 none) of the tiny llama in precision prec on the GPUs, against the same plan
 * on the host backend. */
static void check(int T, int S, gckpt_precision prec)
{
    int world = T * (S ? S : 1);
    char plan[96], rc_name[112], rh_name[112];
    snprintf(plan, sizeof plan, "tiny-llama-tp%ds%d-%s.json", T, S, gckpt_precision_names[prec]);
    snprintf(rc_name, sizeof rc_name, "%s.cuda.jsonl", plan);
    snprintf(rh_name, sizeof rh_name, "%s.host.jsonl", plan);
    char *t = pf_plan_text_mesh("tiny-llama", prec, GCKPT_SDPA, every, 3, 2, 2, 0, NULL, NULL, (uint32_t)T, 0, (uint32_t)S);
    assert_non_null(t);
    cli_write(plan, t);
    free(t);
    cJSON *r = run(world, plan, "cuda", rc_name), *h = run(world, plan, "host", rh_name);
    assert_string_equal(str(r, "ranks.parallel"), "tp");
    assert_int_equal(num(r, "ranks.world_size"), world);
    int n = cJSON_GetArraySize(pf_at(r, "entries"));
    assert_int_equal(n, 5);
    const char *hash0 = str(r, "entries[0].numerics.grad_checksum");
    for (int i = 0; i < n; i++) {
        char p[96];
        snprintf(p, sizeof p, "entries[%d].pass", i);
        if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d did not pass on the GPUs", plan, i);
        double busiest = 0;
        for (int k = 0; k < world; k++) {
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.measured", i, k);
            busiest = fmax(busiest, num(r, p));
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.exact", i, k);
            if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d rank %d: the allocator's peak != its schedule's", plan, i, k);
            snprintf(p, sizeof p, "entries[%d].ranks[%d].grad_checksum", i, k);
            assert_string_equal(str(r, p), hash0);
        }
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.predicted", i);
        double pred = num(r, p);
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.measured", i);
        if (num(r, p) != busiest || pred != busiest)
            fail_msg("%s entry %d: the plan predicted %.0f, rank 0 measured %.0f, the busiest rank %.0f", plan, i, pred,
                     num(r, p), busiest);
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.measured", i);
        if (num(h, p) != busiest) fail_msg("%s entry %d: the host backend's peak %.0f, the GPUs' %.0f", plan, i, num(h, p), busiest);
        gpu_check_numerics(r, h, plan, i, prec, hash0);
    }
    cJSON_Delete(r);
    cJSON_Delete(h);
}

static void tp_alone(void **st)
{
    (void)st;
    check(2, 0, GCKPT_FP32);
    check(2, 0, GCKPT_AMP_BF16);
}

static void tp_fsdp(void **st)
{
    (void)st;
    if (gpus < 4) {
        print_message("TP x FSDP needs four GPUs (%d here): not run\n", gpus);
        skip();
    }
    check(2, 2, GCKPT_FP32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(tp_alone), cmocka_unit_test(tp_fsdp)};
    return gpu_mpi_main("test_cuda_tp", tests, sizeof tests / sizeof tests[0]);
}
