/* Context parallelism on the CUDA backend (needs MPI and two GPUs; exits 77, "skipped", without them):
 * `mpirun -np 2 gckpt-run --backend cuda` on a tiny llama planned with --cp 2 (interp_cp.c's ring over
 * the backend's ring_* ops, cuda_cp.cu's block kernels, the K/V all-gather and the dK/dV reduce-scatter
 * over NCCL), fp32 and amp-bf16, every_n off / 1 / 2 x offload, grad_accum 2, two steps. Required: every
 * entry passes, every rank's allocator peak equals its schedule's (peak_bytes.exact) and the host
 * backend's for the same rank of the same plan byte for byte (the ring's temporaries come from its arena
 * or the backend's scratch on both), the busiest rank's the plan's, the gradient checksum agrees across
 * ranks and entries, the loss and gradient norm are near the host backend's run (bounds not measured: no
 * GPU where this was written). With four GPUs also CP 4 on an uneven sequence and CP x FSDP (the CP
 * group's own NCCL communicator). Written without a GPU: unverified. */
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

/* C x S ranks (S: --dp-shard, 0 none) of the tiny llama at sequence seq in precision prec on the GPUs,
 * against the same plan on the host backend. */
static void check(int C, int S, uint64_t seq, gckpt_precision prec)
{
    int world = C * (S ? S : 1);
    char plan[96], rc_name[112], rh_name[112];
    snprintf(plan, sizeof plan, "tiny-llama-cp%ds%d-s%llu-%s.json", C, S, (unsigned long long)seq, gckpt_precision_names[prec]);
    snprintf(rc_name, sizeof rc_name, "%s.cuda.jsonl", plan);
    snprintf(rh_name, sizeof rh_name, "%s.host.jsonl", plan);
    char *t = pf_plan_text_cp("tiny-llama", prec, every, 3, 2, 2, seq, (uint32_t)C, (uint32_t)(S ? S : 1), 0);
    assert_non_null(t);
    cli_write(plan, t);
    free(t);
    cJSON *r = run(world, plan, "cuda", rc_name), *h = run(world, plan, "host", rh_name);
    assert_int_equal(num(r, "ranks.world_size"), world);
    int n = cJSON_GetArraySize(pf_at(r, "entries"));
    assert_int_equal(n, cJSON_GetArraySize(pf_at(h, "entries")));
    assert_true(n >= 3);
    const char *hash0 = str(r, "entries[0].numerics.grad_checksum");
    for (int i = 0; i < n; i++) {
        char p[96];
        snprintf(p, sizeof p, "entries[%d].pass", i);
        if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d did not pass on the GPUs", plan, i);
        double busiest = 0;
        for (int k = 0; k < world; k++) {
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.measured", i, k);
            double mk = num(r, p);
            busiest = fmax(busiest, mk);
            if (num(h, p) != mk) fail_msg("%s entry %d rank %d: the host backend's peak %.0f, the GPU's %.0f", plan, i, k, num(h, p), mk);
            snprintf(p, sizeof p, "entries[%d].ranks[%d].peak_bytes.exact", i, k);
            if (!cJSON_IsTrue(pf_at(r, p))) fail_msg("%s entry %d rank %d: the allocator's peak != its schedule's", plan, i, k);
            snprintf(p, sizeof p, "entries[%d].ranks[%d].grad_checksum", i, k);
            assert_string_equal(str(r, p), hash0);
        }
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.predicted", i);
        double pred = num(r, p);
        snprintf(p, sizeof p, "entries[%d].memory.peak_bytes.measured", i);
        if (num(r, p) != busiest || pred != busiest)
            fail_msg("%s entry %d: the plan predicted %.0f, measured %.0f, the busiest rank %.0f", plan, i, pred, num(r, p), busiest);
        gpu_check_numerics(r, h, plan, i, prec, hash0);
    }
    cJSON_Delete(r);
    cJSON_Delete(h);
}

static void cp_alone(void **st)
{
    (void)st;
    check(2, 0, 32, GCKPT_FP32);
    check(2, 0, 32, GCKPT_AMP_BF16);
}

static void cp_fsdp(void **st)
{
    (void)st;
    if (gpus < 4) {
        print_message("CP x FSDP and CP 4 need four GPUs (%d here): not run\n", gpus);
        skip();
    }
    check(4, 0, 36, GCKPT_FP32); /* 36 / 4 = 9 tokens: the contiguous split, not the load balancer's */
    check(2, 2, 32, GCKPT_AMP_BF16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(cp_alone), cmocka_unit_test(cp_fsdp)};
    return gpu_mpi_main("test_cuda_cp", tests, sizeof tests / sizeof tests[0]);
}
