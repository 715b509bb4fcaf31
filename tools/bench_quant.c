/* Report (not a test): how long the host quantizers and dequantizers take for one weight
 * of a given shape (default Llama-3.1-8B's q_proj 4096 x 4096 and mlp 14336 x 4096): the
 * setup cost of a QLoRA run on the host backend, and the host dequantization per use.
 *   gckpt-bench-quant [ROWS COLS] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gckpt/core/quant_layout.h"
#include "gckpt/executor/exec_rng.h"
#include "gckpt/executor/quant4.h"
#include "gckpt/executor/quant8.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench(gckpt_quant_scheme sc, int dq, uint64_t rows, uint64_t cols, const float *w, uint16_t *out)
{
    gckpt_quant_layout l;
    if (gckpt_quant_layout_of(sc, rows, cols, dq, GCKPT_DT_U8, &l)) return 1;
    void *stat[GCKPT_NQS] = {0}, *weight = malloc(l.weight.bytes);
    for (int k = 0; k < GCKPT_NQS; k++)
        if (l.stat[k].numel) stat[k] = malloc(l.stat[k].bytes);
    float *raw = malloc(l.blocks * sizeof *raw);
    gckpt_err err = {{0}};
    uint64_t n = rows * cols;
    double t0 = now();
    bool ok;
    if (sc == GCKPT_QUANT_INT8) {
        ok = gckpt_q8_quantize(w, rows, cols, weight, stat[GCKPT_QS_SCB], &err);
    } else {
        gckpt_q4_store st = gckpt_q4_store_of(&l, weight, stat);
        ok = gckpt_q4_quantize(sc, w, n, &st, raw, &err);
    }
    double t1 = now();
    if (ok && sc == GCKPT_QUANT_INT8) {
        ok = gckpt_q8_dequantize(weight, stat[GCKPT_QS_SCB], rows, cols, GCKPT_DT_BF16, out, &err);
    } else if (ok) {
        gckpt_q4_store st = gckpt_q4_store_of(&l, weight, stat);
        ok = gckpt_q4_dequantize(sc, &st, n, GCKPT_DT_BF16, out, &err);
    }
    double t2 = now();
    if (!ok) fprintf(stderr, "%s\n", err.msg);
    else
        printf("%-4s %-5s %6llu x %-6llu  stored %10llu + %8llu B   quantize %8.1f ms (%6.1f M elements/s)   "
               "dequantize to bf16 %7.1f ms (%6.1f M elements/s)\n",
               gckpt_quant_names[sc], sc == GCKPT_QUANT_INT8 ? "" : dq ? "dq" : "plain", (unsigned long long)rows,
               (unsigned long long)cols, (unsigned long long)l.weight.bytes, (unsigned long long)l.stats_bytes,
               1e3 * (t1 - t0), 1e-6 * (double)n / (t1 - t0), 1e3 * (t2 - t1), 1e-6 * (double)n / (t2 - t1));
    free(weight);
    for (int k = 0; k < GCKPT_NQS; k++) free(stat[k]);
    free(raw);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    uint64_t shapes[2][2] = {{4096, 4096}, {14336, 4096}};
    int ns = 2;
    if (argc == 3) {
        shapes[0][0] = strtoull(argv[1], NULL, 10);
        shapes[0][1] = strtoull(argv[2], NULL, 10);
        ns = 1;
    } else if (argc != 1) {
        fprintf(stderr, "usage: gckpt-bench-quant [ROWS COLS]\n");
        return 2;
    }
    int rc = 0;
    for (int s = 0; s < ns; s++) {
        uint64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        if (!rows || !cols || n / cols != rows || n > (1ull << 32)) {
            fprintf(stderr, "gckpt-bench-quant: a shape of %llu x %llu elements\n", (unsigned long long)rows,
                    (unsigned long long)cols);
            return 2;
        }
        float *w = malloc(n * sizeof *w);
        uint16_t *out = malloc(n * sizeof *out);
        if (!w || !out) { fprintf(stderr, "gckpt-bench-quant: out of memory\n"); return 2; }
        for (uint64_t i = 0; i < n; i++) w[i] = gckpt_rng_uniform(7, i, 0.0346f);
        rc |= bench(GCKPT_QUANT_NF4, 1, rows, cols, w, out);
        rc |= bench(GCKPT_QUANT_NF4, 0, rows, cols, w, out);
        rc |= bench(GCKPT_QUANT_FP4, 1, rows, cols, w, out);
        rc |= bench(GCKPT_QUANT_INT8, 0, rows, cols, w, out);
        free(w);
        free(out);
    }
    return rc;
}
