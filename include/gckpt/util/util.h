/* Small shared helpers: errors, checked size arithmetic, unit parsing, files. */
#ifndef GCKPT_UTIL_H
#define GCKPT_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GCKPT_VERSION "0.1.0"

/* Exit codes shared by both programs (DESIGN.md §4). */
enum { GCKPT_EXIT_OK = 0, GCKPT_EXIT_CHECK = 1, GCKPT_EXIT_INPUT = 2 };

/* One-line error message; every fallible function fills one. */
typedef struct {
    char msg[512];
} gckpt_err;

void gckpt_seterr(gckpt_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Checked 64-bit arithmetic: return false on overflow (result untouched). */
bool gckpt_mul(uint64_t a, uint64_t b, uint64_t *out);
bool gckpt_add(uint64_t a, uint64_t b, uint64_t *out);
/* Product of n factors; false on overflow. */
bool gckpt_mul_n(uint64_t *out, int n, const uint64_t *f);

uint64_t gckpt_round_up(uint64_t x, uint64_t to);

/* "80GiB", "80GB", "512MiB", "1.5TB", "123456" -> bytes. false on junk. */
bool gckpt_parse_size(const char *s, uint64_t *out);
/* Positive decimal integer in [lo, hi]; false on junk. */
bool gckpt_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* "1,2,4" -> array of values in [lo,hi]; returns count or -1. */
int gckpt_parse_list(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, int max);

/* Human formatting: "12.34 GiB". buf must be >= 32 bytes. */
const char *gckpt_fmt_bytes(uint64_t b, char *buf, size_t n);

/* Read a whole (small) file. Refuses directories and files over max_bytes.
 * Returns malloc'd NUL-terminated text or NULL with err set. */
char *gckpt_read_file(const char *path, size_t max_bytes, gckpt_err *err);

/* Directory holding models/ and devices/: the one set by gckpt_data_dir_set, else env
 * GCKPT_DATA_DIR, else build-time. */
const char *gckpt_data_dir(void);
/* The Python package points the library at the data it ships (NULL or "": unset); the
 * text is copied (up to 4095 bytes). Not thread-safe against concurrent planning. */
void gckpt_data_dir_set(const char *dir);

/* Resolve NAME (looked up as <data>/<sub>/NAME.json) or a path. Writes into out. */
bool gckpt_resolve_data(const char *sub, const char *name_or_path, char *out, size_t n,
                        gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
