/* What the multi-GPU CUDA tests (test_cuda_tp.c, test_cuda_cp.c) share: mpirun's environment, the
 * report's fields, and one gckpt-run over mpirun on a backend, its report checked against the schema.
 * Included once per test program (its statics are the program's). */
#ifndef GCKPT_TESTS_GPU_MPI_H
#define GCKPT_TESTS_GPU_MPI_H

#include "cli_harness.h"
#include "plan_fixture.h"
#include "report_fixture.h"

static cJSON *schema;
static int gpus;
static const uint32_t every[] = {0, 1, 2};

/* mpirun's environment (root allowed; a rank out of step ends the run well within the test's bound) */
static const cli_opts mpi_env = {.env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                         "GCKPT_COLLECTIVE_TIMEOUT=120"}};

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

static cJSON *run(int np, const char *plan, const char *backend, const char *report)
{
    char npv[8], err[8192], path[512];
    snprintf(npv, sizeof npv, "%d", np);
    int rc = cli_run_opts(GCKPT_MPIEXEC, A("-np", npv, "--oversubscribe", GCKPT_RUN_EXE, "--plan", (char *)plan, "--all", "--backend",
                                           (char *)backend, "--steps", "2", "--warmup", "0", "-o", (char *)report),
                          &mpi_env, err, sizeof err);
    if (rc != 0) fail_msg("%s: mpirun -np %d gckpt-run --backend %s: exit %d: %s", plan, np, backend, rc, err);
    cli_path(report, path, sizeof path);
    return rf_load_or_fail(path, schema);
}


/* Entry i of the GPUs' report r against the host backend's h of the same plan: the gradient checksum
 * hash0's (the same bits for every every_n / offload), the loss and gradient norm near the host's. */
static void gpu_check_numerics(cJSON *r, cJSON *h, const char *plan, int i, gckpt_precision prec, const char *hash0)
{
    char p[96];
    snprintf(p, sizeof p, "entries[%d].numerics.grad_checksum", i);
    assert_string_equal(str(r, p), hash0); /* the same bits for every every_n / offload */
    snprintf(p, sizeof p, "entries[%d].numerics.loss", i);
    double loss = num(r, p), lh = num(h, p);
    snprintf(p, sizeof p, "entries[%d].numerics.grad_norm", i);
    double g = num(r, p), gh = num(h, p);
    print_message("%s entry %d: loss %.9g (host %.9g), grad norm %.9g (host %.9g)\n", plan, i, loss, lh, g, gh);
    double tol = prec == GCKPT_FP32 ? 1e-4 : 2e-2; /* not measured (unverified) */
    if (fabs(loss - lh) > tol * fabs(lh) || fabs(g - gh) > tol * gh)
        fail_msg("%s entry %d: loss %.9g / norm %.9g, the host backend's %.9g / %.9g", plan, i, loss, g, lh, gh);
}

/* The test program's main: exit 77 ("skipped") without MPI, mpirun or two GPUs, else the tests
 * (each a CP / TP layout) in one group under the CLI harness's work folder. */
static int gpu_mpi_main(const char *name, const struct CMUnitTest *tests, size_t n)
{
#ifndef GCKPT_HAVE_MPI
    (void)tests, (void)n;
    fprintf(stderr, "%s: this build has no MPI: skipped\n", name);
    return 77;
#else
    if (access(GCKPT_MPIEXEC, X_OK) != 0) {
        fprintf(stderr, "%s: %s not found: skipped\n", name, GCKPT_MPIEXEC);
        return 77;
    }
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
    if (gpus < 2) {
        printf("%s: %d CUDA GPU%s, two needed: skipped\n", name, gpus, gpus == 1 ? "" : "s");
        return 77;
    }
    char work[64];
    snprintf(work, sizeof work, "gckpt-%s", name);
    schema = rf_schema();
    if (!schema || !cli_setup(work)) return 1;
    int rc = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
    cli_teardown();
    cJSON_Delete(schema);
    return rc;
#endif
}

#endif
