/* SHA-256 (FIPS 180-4) of a buffer, for provenance: which input files a derived file
 * (a calibrated device profile) was made from. */
#ifndef GCKPT_SHA256_H
#define GCKPT_SHA256_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The digest of data[0..n) as 64 lowercase hex digits and a NUL into hex. */
void gckpt_sha256_hex(const void *data, size_t n, char hex[65]);

#ifdef __cplusplus
}
#endif

#endif
