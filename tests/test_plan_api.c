/* The planner's JSON API (planner/plan_api.c), which the Python package calls: a plan
 * equals the command line's -o plan for the same options (the same reader, plan_args.c);
 * every malformed request is one refusal {"ok": false, "error": one line}, never a crash;
 * the data folder a request names is used for that request only. The Python side, with
 * every shipped model, is python/tests/test_plan.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "gckpt/planner/plan_api.h"
#include "gckpt/util/util.h"

#ifndef GCKPT_PLAN_EXE
#error GCKPT_PLAN_EXE must name the gckpt-plan binary
#endif

static cJSON *call(const char *req)
{
    char *a = gckpt_api_call(req);
    assert_non_null(a);
    cJSON *j = cJSON_Parse(a);
    gckpt_api_free(a);
    assert_non_null(j);
    return j;
}

static void assert_refused(const char *req, const char *part)
{
    cJSON *j = call(req);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "ok")));
    const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(j, "error"));
    assert_non_null(e);
    if (!strstr(e, part)) fail_msg("refusal '%s' does not say '%s' (request %s)", e, part, req);
    assert_null(strchr(e, '\n'));
    cJSON_Delete(j);
}

static void malformed_requests(void **state)
{
    (void)state;
    assert_refused("", "request: empty");
    assert_refused("{", "malformed JSON");
    assert_refused("[]", "expected a JSON object");
    assert_refused("{\"op\": 3}", "not an object with a string \"op\"");
    assert_refused("{\"op\": \"fly\"}", "unknown op 'fly'");
    assert_refused("{\"op\": \"plan\", \"data_dir\": 1}", "\"data_dir\" is not a string");
    assert_refused("{\"op\": \"plan\", \"args\": {}}", "not a list of [name, value] pairs");
    assert_refused("{\"op\": \"plan\", \"args\": [[\"seq\"]]}", "a pair [name, value]");
    assert_refused("{\"op\": \"plan\", \"args\": [[\"seq\", 12]]}", "a pair [name, value]");
    assert_refused("{\"op\": \"plan\", \"args\": [\"seq\"]}", "a pair [name, value]");
    assert_refused("{\"op\": \"plan\", \"args\": [[\"output\", \"x.json\"]]}", "unknown option 'output'");
    assert_refused("{\"op\": \"plan\", \"args\": [[\"allow-long-seq\", \"yes\"]]}", "is a flag");
    assert_refused("{\"op\": \"plan\", \"args\": [[\"seq\", null]]}", "needs a value");
    assert_refused("{\"op\": \"calibrate\"}", "\"reports\" is not a non-empty list");
    assert_refused("{\"op\": \"calibrate\", \"reports\": [1]}", "each of \"reports\" is a path");
    assert_refused("{\"op\": \"calibrate\", \"reports\": [\"/nonexistent.jsonl\"]}", "/nonexistent.jsonl");
    /* the command line's own messages */
    assert_refused("{\"op\": \"plan\", \"args\": [[\"seq\", \"0\"]]}", "--seq: '0' is not an integer");
    assert_refused("{\"op\": \"plan\", \"args\": [[\"gpus\", \"2\"], [\"parallel\", \"ddp,fsdp\"]]}",
                   "plan one mode at a time");
    assert_refused("{\"op\": \"snippet\", \"args\": [[\"model\", \"gpt2\"]], \"entry\": 9999}",
                   "\"entry\" is not the index");
    assert_refused("{\"op\": \"snippet\", \"args\": [[\"model\", \"gpt2\"]], \"entry\": 1.5}",
                   "\"entry\" is not the index");
    /* a data folder without the model: refused, and the next request uses the default again */
    assert_refused("{\"op\": \"plan\", \"data_dir\": \"/nonexistent\", \"args\": [[\"model\", \"gpt2\"]]}",
                   "/nonexistent/models/gpt2.json");
    cJSON *j = call("{\"op\": \"plan\", \"args\": [[\"model\", \"gpt2\"], [\"seq\", \"64\"]]}");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
    cJSON_Delete(j);
}

/* The API's plan and gckpt-plan -o's plan for the same options: the same JSON. */
static void same_plan_as_cli(void **state)
{
    (void)state;
    char dir[] = "/tmp/gckpt-api-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out[256], cmd[1024];
    snprintf(out, sizeof out, "%s/plan.json", dir);
    snprintf(cmd, sizeof cmd,
             "%s --model llama-3.2-1b --gpu a100-40gb --seq 2048 --micro-batch 1,2 --every-n off,1,4 --method lora "
             "--lora-rank 8 --lora-targets q_proj,v_proj -q -o %s",
             GCKPT_PLAN_EXE, out);
    assert_int_equal(system(cmd), 0);
    gckpt_err e;
    char *text = gckpt_read_file(out, 64u << 20, &e);
    assert_non_null(text);
    cJSON *want = cJSON_Parse(text);
    free(text);
    cJSON *got = call("{\"op\": \"plan\", \"args\": [[\"model\", \"llama-3.2-1b\"], [\"gpu\", \"a100-40gb\"], "
                      "[\"seq\", \"2048\"], [\"micro-batch\", \"1,2\"], [\"every-n\", \"off,1,4\"], "
                      "[\"method\", \"lora\"], [\"lora-rank\", \"8\"], [\"lora-targets\", \"q_proj,v_proj\"]]}");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(got, "ok")));
    assert_true(cJSON_Compare(cJSON_GetObjectItem(got, "plan"), want, true));
    cJSON_Delete(got);
    cJSON_Delete(want);
    unlink(out);
    rmdir(dir);
}

/* resolve: where a --model reference's config.json is, as a plan reads it. */
static void resolve_model_refs(void **state)
{
    (void)state;
    assert_refused("{\"op\": \"resolve\"}", "\"model\" is not a string");
    assert_refused("{\"op\": \"resolve\", \"model\": \"gpt2\", \"revision\": 1}", "\"revision\" is not a string");
    assert_refused("{\"op\": \"resolve\", \"model\": \"gpt2\", \"revision\": \"main\"}",
                   "--revision applies to a Hugging Face model id");
    cJSON *j = call("{\"op\": \"resolve\", \"model\": \"gpt2\"}");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "path")), "gpt2");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "hub")));
    cJSON_Delete(j);
    /* a folder: its config.json */
    char dir[] = "/tmp/gckpt-api-XXXXXX", req[512], want[300];
    assert_non_null(mkdtemp(dir));
    snprintf(want, sizeof want, "%s/config.json", dir);
    FILE *f = fopen(want, "w");
    assert_non_null(f);
    fputs("{}", f);
    fclose(f);
    snprintf(req, sizeof req, "{\"op\": \"resolve\", \"model\": \"%s\"}", dir);
    j = call(req);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "path")), want);
    cJSON_Delete(j);
    /* a Hub id, offline and not cached: the Hub's refusal (tests/hub and test_plan_hub.py: the rest) */
    char *home = getenv("HF_HOME") ? strdup(getenv("HF_HOME")) : NULL;
    setenv("HF_HOME", dir, 1);
    setenv("HF_HUB_OFFLINE", "1", 1);
    assert_refused("{\"op\": \"resolve\", \"model\": \"someorg/notcached\"}", "HF_HUB_OFFLINE is set");
    unsetenv("HF_HUB_OFFLINE");
    if (home) setenv("HF_HOME", home, 1);
    else unsetenv("HF_HOME");
    free(home);
    unlink(want);
    rmdir(dir);
}

static void options_list_the_table(void **state)
{
    (void)state;
    cJSON *j = call("{\"op\": \"options\"}");
    cJSON *list = cJSON_GetObjectItem(j, "options");
    assert_true(cJSON_GetArraySize(list) >= 30);
    bool seq = false, flag = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
        seq |= !strcmp(n, "seq") && cJSON_IsTrue(cJSON_GetObjectItem(it, "has_arg"));
        flag |= !strcmp(n, "allow-long-seq") && cJSON_IsFalse(cJSON_GetObjectItem(it, "has_arg"));
    }
    assert_true(seq && flag);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(malformed_requests),
        cmocka_unit_test(same_plan_as_cli),
        cmocka_unit_test(options_list_the_table),
        cmocka_unit_test(resolve_model_refs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
