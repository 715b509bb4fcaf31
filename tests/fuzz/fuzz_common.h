/* Shared by the fuzz targets: input bytes as text, and the checks every refusal must
 * pass (DESIGN.md §4: one line naming the file). A failed check aborts, which
 * libFuzzer (and the replay driver) report as a crash. */
#ifndef GCKPT_FUZZ_COMMON_H
#define GCKPT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/model.h"
#include "gckpt/util/util.h"

#define FUZZ_CHECK(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "fuzz check failed at %s:%d: %s\n", __FILE__,     \
                    __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* The bytes as a NUL-terminated string (an embedded NUL ends the text, as it would in
 * a file: gckpt_read_file refuses those). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    if (!t) abort();
    if (size) memcpy(t, data, size);
    t[size] = 0;
    return t;
}

/* A refusal: one non-empty line of printable text that starts with "<file>: ". */
static inline void fuzz_check_error(const gckpt_err *err, const char *file)
{
    size_t n = strnlen(err->msg, sizeof err->msg);
    FUZZ_CHECK(n > 0 && n < sizeof err->msg, "empty or unterminated error message");
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK((unsigned char)err->msg[i] >= 0x20 && err->msg[i] != 0x7f,
                   "control character 0x%02x at %zu in error message: %s",
                   (unsigned char)err->msg[i], i, err->msg);
    if (file) {
        size_t fl = strlen(file);
        FUZZ_CHECK(!strncmp(err->msg, file, fl) && err->msg[fl] == ':',
                   "error message does not name the file %s: %s", file, err->msg);
    }
}

/* An independent parameter count in 128 bits (no overflow possible), the oracle for
 * gckpt_param_count on anything the readers accept. */
static inline unsigned __int128 params128(const gckpt_model *m)
{
    typedef unsigned __int128 u;
    u h = m->hidden, q = (u)m->heads * m->head_dim, kv = (u)m->kv_heads * m->head_dim,
      I = m->intermediate, V = m->vocab, L = m->layers;
    u layer;
    if (m->family == GCKPT_FAMILY_GPT2) {
        layer = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * I + I) + (I * h + h);
    } else {
        layer = h * q + 2 * h * kv + q * h + 3 * h * I + 2 * h;
        if (m->qkv_bias) layer += q + 2 * kv;
        if (m->o_bias) layer += h;
        if (m->mlp_bias) layer += 2 * I + h;
        if (m->qk_norm) layer += 2 * (u)m->head_dim;
    }
    u embed = V * h + (u)m->positions * h;
    u head = (m->family == GCKPT_FAMILY_GPT2 ? 2 * h : h) + (m->tied ? 0 : V * h);
    return embed + L * layer + head;
}

#endif
