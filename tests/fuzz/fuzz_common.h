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

/* The oracle for gckpt_param_count on anything the readers accept. */
#include "closed_form_params.h"

#endif
