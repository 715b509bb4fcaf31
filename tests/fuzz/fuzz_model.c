/* libFuzzer target: the model-config reader (gckpt_model_parse) on arbitrary bytes.
 * A config is either refused with one line naming the file, or accepted as a model
 * whose dimensions are consistent and whose parameter count is exact (no 64-bit
 * overflow: checked here in 128 bits). */
#include "fuzz_common.h"
#include "gckpt/core/model.h"
#include "gckpt/core/params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    gckpt_model m;
    gckpt_err err = {{0}};
    if (!gckpt_model_parse("fuzz.json", text, &m, &err)) {
        fuzz_check_error(&err, "fuzz.json");
    } else {
        FUZZ_CHECK(m.layers >= 1 && m.hidden >= 1 && m.heads >= 1 && m.kv_heads >= 1 &&
                       m.head_dim >= 1 && m.intermediate >= 1 && m.vocab >= 1,
                   "a zero dimension was accepted");
        FUZZ_CHECK(m.heads % m.kv_heads == 0, "kv heads %llu do not divide heads %llu",
                   (unsigned long long)m.kv_heads, (unsigned long long)m.heads);
        FUZZ_CHECK(m.family < GCKPT_NFAMILY, "family %d", (int)m.family);
        /* experts: the mixture-of-experts families and DeepSeek's routed experts only */
        bool routed = m.family == GCKPT_FAMILY_MOE || m.family == GCKPT_FAMILY_DEEPSEEK;
        FUZZ_CHECK(routed == (m.experts > 0) &&
                       (!m.experts || (m.top_k >= 1 && m.top_k <= m.experts && m.expert_inter >= 1)),
                   "experts %llu, top-k %llu", (unsigned long long)m.experts, (unsigned long long)m.top_k);
        FUZZ_CHECK(memchr(m.model_type, 0, sizeof m.model_type) != NULL, "model_type unterminated");
        FUZZ_CHECK(m.attn_dropout >= 0 && m.attn_dropout < 1 && m.resid_dropout >= 0 &&
                       m.resid_dropout < 1 && m.embd_dropout >= 0 && m.embd_dropout < 1,
                   "dropout out of [0, 1)");
        FUZZ_CHECK(m.norm_eps > 0 && m.norm_eps <= 1, "norm eps %g", m.norm_eps);
        unsigned __int128 p = closed_form_params128(&m);
        FUZZ_CHECK(p <= UINT64_MAX, "parameter count overflows 64 bits");
        FUZZ_CHECK((uint64_t)p == gckpt_param_count(&m), "parameter count %llu != %llu",
                   (unsigned long long)(uint64_t)p, (unsigned long long)gckpt_param_count(&m));
    }
    free(text);
    return 0;
}
