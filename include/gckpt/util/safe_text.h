/* Text from files and devices made safe to show: names are data, never instructions to
 * a terminal. */
#ifndef GCKPT_SAFE_TEXT_H
#define GCKPT_SAFE_TEXT_H

#ifdef __cplusplus
extern "C" {
#endif

/* In place: every byte a terminal could act on becomes '?': C0 controls (ESC, BEL, CR,
 * newline, ...), DEL, the C1 controls U+0080..U+009F (CSI, OSC in UTF-8), the bidirectional
 * overrides and isolates U+202A..U+202E and U+2066..U+2069, and bytes that are not UTF-8
 * (a lone 0x9B is CSI to an 8-bit terminal). Well-formed UTF-8 text is kept. */
void gckpt_text_sanitize(char *s);

#ifdef __cplusplus
}
#endif

#endif
