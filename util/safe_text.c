/* Sanitising names for terminals, tables and plots (include/gckpt/util/safe_text.h). */
#include "gckpt/util/safe_text.h"

#include <stdint.h>

/* Length of the well-formed UTF-8 sequence at s and its code point; 0 when malformed. */
static int utf8_seq(const unsigned char *s, uint32_t *cp)
{
    int n = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (!n || s[0] > 0xF4) return 0;
    uint32_t c = s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0; /* overlong, surrogate */
    *cp = c;
    return n;
}

void gckpt_text_sanitize(char *s)
{
    unsigned char *r = (unsigned char *)s, *w = r;
    while (*r) {
        if (*r < 0x80) {
            *w++ = (*r < 0x20 || *r == 0x7F) ? '?' : *r;
            r++;
            continue;
        }
        uint32_t cp;
        int n = utf8_seq(r, &cp);
        if (!n) {
            *w++ = '?';
            r++;
        } else if ((cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
            *w++ = '?';
            r += n;
        } else {
            for (int i = 0; i < n; i++) *w++ = *r++;
        }
    }
    *w = 0;
}
