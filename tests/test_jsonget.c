/* The JSON reader every input goes through (util/jsonget.c): running out of memory
 * while parsing a valid file is said as such, not as "malformed JSON"; a number beyond a
 * double is named as such. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gckpt/util/jsonget.h"
#include "sanitizer.h"

/* {"a": [1, 1, ..., 1]}: n numbers, each a cJSON node of ~64 bytes */
static char *big_json(size_t n)
{
    char *t = malloc(2 * n + 16);
    assert_non_null(t);
    char *w = t + sprintf(t, "{\"a\":[");
    for (size_t i = 0; i < n; i++) {
        *w++ = '1';
        *w++ = i + 1 < n ? ',' : ']';
    }
    strcpy(w, "}");
    return t;
}

static unsigned long long vm_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

static void test_oom_is_not_malformed(void **st)
{
    (void)st;
    if (GCKPT_TEST_ASAN) skip();
    const size_t n = 1u << 20;
    char *text = big_json(n);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* room for a few MiB of nodes, not for the 64 MiB the array needs */
        struct rlimit rl = {.rlim_cur = vm_size() + (16u << 20), .rlim_max = RLIM_INFINITY};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        gckpt_err e = {{0}};
        cJSON *j = gckpt_json_parse("big.json", text, &e);
        if (write(pipefd[1], e.msg, sizeof e.msg) != (ssize_t)sizeof e.msg) _exit(4);
        _exit(j ? 1 : 0);
    }
    close(pipefd[1]);
    char msg[sizeof(gckpt_err)] = "";
    ssize_t got = read(pipefd[0], msg, sizeof msg);
    close(pipefd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0) fail_msg("the child could not run the case (exit %d)", WEXITSTATUS(status));
    assert_int_equal(got, (ssize_t)sizeof msg);
    if (!strstr(msg, "big.json: out of memory") || strstr(msg, "malformed JSON")) fail_msg("message: \"%s\"", msg);
    gckpt_err err = {{0}};
    cJSON *ok = gckpt_json_parse("big.json", text, &err); /* the same text is valid when memory suffices */
    assert_non_null(ok);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(ok, "a")), (int)n);
    cJSON_Delete(ok);
    /* and a real syntax error is still one */
    text[n] = ';';
    assert_null(gckpt_json_parse("big.json", text, &err));
    assert_non_null(strstr(err.msg, "malformed JSON at byte"));
    free(text);
}

/* 1e999 is valid JSON that no double holds: the message says so (it said "must be a
 * number, got a number") */
static void test_number_beyond_a_double(void **st)
{
    (void)st;
    gckpt_err err = {{0}};
    cJSON *j = gckpt_json_parse("p.json", "{\"x\": 1e999, \"y\": -1e999, \"z\": 1e300}", &err);
    assert_non_null(j);
    double v = 0;
    for (int k = 0; k < 2; k++) {
        const char *f = k ? "y" : "x";
        assert_false(gckpt_json_num(j, "p.json", f, -1e308, 1e308, &v, &err));
        char want[128];
        snprintf(want, sizeof want, "p.json: field '%s' must be a finite number, got one beyond a double's range", f);
        assert_string_equal(err.msg, want);
    }
    assert_true(gckpt_json_num(j, "p.json", "z", 0, 1e308, &v, &err));
    assert_true(v == 1e300);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_oom_is_not_malformed),
                                       cmocka_unit_test(test_number_beyond_a_double)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
