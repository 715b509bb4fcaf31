/* Counter-based random numbers shared by the executor's host and CUDA code: a value is a
 * pure function of (key, counter), so a recompute or another backend thread draws the
 * same number for the same element. */
#ifndef GCKPT_EXEC_RNG_H
#define GCKPT_EXEC_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GCKPT_HD __host__ __device__ __forceinline__
#else
#define GCKPT_HD static inline
#endif

/* splitmix64 finaliser */
GCKPT_HD uint64_t gckpt_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

GCKPT_HD uint64_t gckpt_rng(uint64_t key, uint64_t i)
{
    return gckpt_mix64(key ^ gckpt_mix64(i + 0x9e3779b97f4a7c15ULL));
}

/* uniform in [0, 1) with 24 bits: exactly representable in fp32 */
GCKPT_HD float gckpt_rng_unit(uint64_t key, uint64_t i)
{
    return (float)(gckpt_rng(key, i) >> 40) * (1.0f / 16777216.0f);
}

/* a key from four numbers (seed, step, micro-step, op slot ...) */
GCKPT_HD uint64_t gckpt_key(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return gckpt_mix64(gckpt_mix64(gckpt_mix64(a ^ 0x1234567ULL) ^ b) ^ c) ^ d;
}

/* a weight's initial element i: uniform in [-scale, scale) (both backends' init, and the
 * host values a quantized weight is made from) */
GCKPT_HD float gckpt_rng_uniform(uint64_t key, uint64_t i, float scale)
{
    return (2.0f * gckpt_rng_unit(key, i) - 1.0f) * scale;
}

/* A gradient checksum's term for element i holding raw bits `bits` (both backends' checksum
 * sum it over a tensor, wrapping; a sum over pieces at their element offsets is the same) */
GCKPT_HD uint64_t gckpt_hash_term(uint64_t salt, uint64_t bits, uint64_t i)
{
    return gckpt_rng(salt ^ (bits * 0x9e3779b97f4a7c15ULL), i);
}

/* dropout: element i is kept when its draw is >= p */
GCKPT_HD int gckpt_keep(uint64_t key, uint64_t i, float p) { return gckpt_rng_unit(key, i) >= p; }

#endif
