/* Host-side element access: bf16 / fp16 stored as 16-bit patterns, computed in fp32;
 * conversions round to nearest even, as PyTorch does. */
#ifndef GCKPT_HOST_NUM_H
#define GCKPT_HOST_NUM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gckpt/executor/executor.h"
#include "gckpt/executor/kernel_math.h"

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0x1f) return u2f(s | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24 */
        return s ? -v : v;
    }
    return u2f(s | ((e + 112) << 23) | (m << 13));
}
static inline uint16_t f32_to_f16(float f)
{
    uint32_t u = f2u(f), s = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                               /* below 2^-14: subnormal or 0 */
        float v = u2f(a) * 16777216.0f;                  /* exact scaling to units of 2^-24 */
        uint32_t q = (uint32_t)v;
        float r = v - (float)q;
        if (r > 0.5f || (r == 0.5f && (q & 1u))) q++;
        return (uint16_t)(s | q);
    }
    uint32_t e = (a >> 23) - 112, m = a & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13), rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(s | h);
}

/* the storage element of element i of t (a strided column view's, gckpt_xt.vW) */
static inline uint64_t at_(const gckpt_xt *t, uint64_t i)
{
    if (!t->vW) return i;
    return t->vstep > 1 ? gckpt_view_index_step(i, t->cols, t->vW, t->voff, t->vblk, t->vstride, t->vstep)
                        : gckpt_view_index(i, t->cols, t->vW, t->voff, t->vblk, t->vstride);
}

/* element i of t as fp32 (int64 and bool as their value) */
static inline float ld(const gckpt_xt *t, uint64_t i)
{
    i = at_(t, i);
    switch (t->dt) {
    case GCKPT_DT_F32: return ((const float *)t->p)[i];
    case GCKPT_DT_BF16: return bf16_to_f32(((const uint16_t *)t->p)[i]);
    case GCKPT_DT_F16: return f16_to_f32(((const uint16_t *)t->p)[i]);
    case GCKPT_DT_BOOL: case GCKPT_DT_U8: return (float)((const uint8_t *)t->p)[i];
    case GCKPT_DT_I8: return (float)((const int8_t *)t->p)[i];
    case GCKPT_DT_I32: return (float)((const int32_t *)t->p)[i];
    default: return (float)((const int64_t *)t->p)[i];
    }
}

/* store v rounded to t's dtype */
static inline void st(const gckpt_xt *t, uint64_t i, float v)
{
    i = at_(t, i);
    switch (t->dt) {
    case GCKPT_DT_F32: ((float *)t->p)[i] = v; break;
    case GCKPT_DT_BF16: ((uint16_t *)t->p)[i] = f32_to_bf16(v); break;
    case GCKPT_DT_F16: ((uint16_t *)t->p)[i] = f32_to_f16(v); break;
    case GCKPT_DT_BOOL: ((uint8_t *)t->p)[i] = v != 0; break;
    case GCKPT_DT_U8: ((uint8_t *)t->p)[i] = (uint8_t)v; break;
    case GCKPT_DT_I8: ((int8_t *)t->p)[i] = (int8_t)v; break;
    case GCKPT_DT_I32: ((int32_t *)t->p)[i] = (int32_t)v; break;
    default: ((int64_t *)t->p)[i] = (int64_t)v; break;
    }
}

/* v rounded through dtype dt (what storing and reloading gives) */
static inline float rnd(uint8_t dt, float v)
{
    switch (dt) {
    case GCKPT_DT_BF16: return bf16_to_f32(f32_to_bf16(v));
    case GCKPT_DT_F16: return f16_to_f32(f32_to_f16(v));
    default: return v;
    }
}

/* element i of an integer tensor (int64 or int32: indices, offsets) */
static inline int64_t ldi(const gckpt_xt *t, uint64_t i)
{
    return t->dt == GCKPT_DT_I32 ? ((const int32_t *)t->p)[i] : ((const int64_t *)t->p)[i];
}
static inline void sti(const gckpt_xt *t, uint64_t i, int64_t v)
{
    if (t->dt == GCKPT_DT_I32) ((int32_t *)t->p)[i] = (int32_t)v;
    else ((int64_t *)t->p)[i] = v;
}

#endif
