/* libFuzzer target: the planner's JSON API (gckpt_api_call, what the Python package calls)
 * on arbitrary request bytes. Every answer is one JSON object {"ok": bool, ...}: a refusal
 * carries one non-empty printable line in "error"; an accepted plan is a gckpt.plan/2
 * object with entries, a snippet or text a string, the options a non-empty list. */
#include "fuzz_common.h"
#include "gckpt/planner/plan_api.h"

#include <cjson/cJSON.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *request = fuzz_text(data, size);
    char *answer = gckpt_api_call(request);
    FUZZ_CHECK(answer != NULL, "no answer (out of memory?)");
    cJSON *a = cJSON_Parse(answer);
    FUZZ_CHECK(cJSON_IsObject(a), "the answer is not a JSON object: %.200s", answer);
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(a, "ok");
    FUZZ_CHECK(cJSON_IsBool(ok), "no boolean ok");
    if (cJSON_IsFalse(ok)) {
        const char *e = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "error"));
        FUZZ_CHECK(e && *e, "a refusal without its message");
        for (const char *c = e; *c; c++)
            FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f, "the message has control byte 0x%02x", (unsigned char)*c);
    } else {
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(a, "plan");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(a, "text");
        const cJSON *opts = cJSON_GetObjectItemCaseSensitive(a, "options");
        FUZZ_CHECK(!!plan + !!text + !!opts == 1, "an answer with none or several of plan, text, options");
        if (plan) {
            FUZZ_CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(plan, "schema")), "gckpt.plan/2"),
                       "a plan without its schema");
            FUZZ_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(plan, "entries")) >= 1, "a plan without entries");
        }
        if (text) FUZZ_CHECK(cJSON_IsString(text), "text is not a string");
        if (opts) FUZZ_CHECK(cJSON_GetArraySize(opts) >= 1, "no options");
    }
    cJSON_Delete(a);
    gckpt_api_free(answer);
    free(request);
    return 0;
}
