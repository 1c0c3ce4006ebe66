/*
 * textwidth.c — how many terminal columns a UTF-8 string takes, so tables
 * with Chinese tokens line up. A small wcwidth: East Asian Wide and Fullwidth
 * code points (CJK ideographs, kana, hangul, fullwidth forms, emoji blocks)
 * take 2 columns, combining marks and zero-width characters 0, everything
 * else 1. It does not know grapheme clusters (ZWJ emoji sequences count per
 * code point) and treats East Asian Ambiguous characters as narrow.
 */
#include "qkv_render.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t lo, hi;
} cp_range;

/* Zero width: combining marks, zero-width spaces and joiners, variation
 * selectors, Hangul medial/final jamo. Sorted, non-overlapping. */
static const cp_range zero_width[] = {
    {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x05BF, 0x05BF},
    {0x05C1, 0x05C2}, {0x05C4, 0x05C5}, {0x05C7, 0x05C7}, {0x0610, 0x061A},
    {0x064B, 0x065F}, {0x0670, 0x0670}, {0x06D6, 0x06DC}, {0x06DF, 0x06E4},
    {0x06E7, 0x06E8}, {0x06EA, 0x06ED}, {0x0900, 0x0902}, {0x093A, 0x093A},
    {0x093C, 0x093C}, {0x0941, 0x0948}, {0x094D, 0x094D}, {0x0951, 0x0957},
    {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E}, {0x1160, 0x11FF},
    {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x200B, 0x200F}, {0x202A, 0x202E},
    {0x2060, 0x2064}, {0x20D0, 0x20FF}, {0x302A, 0x302D}, {0x3099, 0x309A},
    {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}, {0xE0001, 0xE0001},
    {0xE0020, 0xE007F}, {0xE0100, 0xE01EF},
};

/* East Asian Wide (W) and Fullwidth (F), after Unicode's EastAsianWidth.txt,
 * merged into blocks; emoji ranges taken whole. Sorted, non-overlapping. */
static const cp_range wide[] = {
    {0x1100, 0x115F},   /* Hangul Jamo initial consonants */
    {0x231A, 0x231B},   {0x2329, 0x232A}, {0x23E9, 0x23EC}, {0x23F0, 0x23F0},
    {0x23F3, 0x23F3},   {0x25FD, 0x25FE}, {0x2614, 0x2615}, {0x2648, 0x2653},
    {0x267F, 0x267F},   {0x2693, 0x2693}, {0x26A1, 0x26A1}, {0x26AA, 0x26AB},
    {0x26BD, 0x26BE},   {0x26C4, 0x26C5}, {0x26CE, 0x26CE}, {0x26D4, 0x26D4},
    {0x26EA, 0x26EA},   {0x26F2, 0x26F3}, {0x26F5, 0x26F5}, {0x26FA, 0x26FA},
    {0x26FD, 0x26FD},   {0x2705, 0x2705}, {0x270A, 0x270B}, {0x2728, 0x2728},
    {0x274C, 0x274C},   {0x274E, 0x274E}, {0x2753, 0x2755}, {0x2757, 0x2757},
    {0x2795, 0x2797},   {0x27B0, 0x27B0}, {0x27BF, 0x27BF}, {0x2B1B, 0x2B1C},
    {0x2B50, 0x2B50},   {0x2B55, 0x2B55},
    {0x2E80, 0x3029},   /* CJK radicals, Kangxi, ideographic space and punctuation */
    {0x302E, 0x303E},   {0x3041, 0x3098}, /* Hiragana */
    {0x309B, 0x33FF},   /* Katakana, Bopomofo, Hangul compatibility jamo, CJK compat */
    {0x3400, 0x4DBF},   /* CJK Extension A */
    {0x4E00, 0x9FFF},   /* CJK Unified Ideographs */
    {0xA000, 0xA4CF},   /* Yi */
    {0xA960, 0xA97F},   /* Hangul Jamo Extended-A */
    {0xAC00, 0xD7A3},   /* Hangul syllables */
    {0xF900, 0xFAFF},   /* CJK Compatibility Ideographs */
    {0xFE10, 0xFE19},   /* vertical forms */
    {0xFE30, 0xFE6F},   /* CJK compatibility forms, small form variants */
    {0xFF00, 0xFF60},   /* fullwidth ASCII */
    {0xFFE0, 0xFFE6},   /* fullwidth signs */
    {0x16FE0, 0x16FE4}, {0x16FF0, 0x16FF1},
    {0x17000, 0x18CFF}, /* Tangut, Khitan */
    {0x18D00, 0x18D08}, {0x1AFF0, 0x1B2FF}, /* Kana supplement and extensions, Nushu */
    {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A},
    {0x1F200, 0x1F202}, {0x1F210, 0x1F23B}, {0x1F240, 0x1F248}, {0x1F250, 0x1F251},
    {0x1F260, 0x1F265},
    {0x1F300, 0x1F64F}, /* pictographs, emoticons */
    {0x1F680, 0x1F6FF}, /* transport and map */
    {0x1F7E0, 0x1F7EB}, {0x1F90C, 0x1F9FF}, {0x1FA70, 0x1FAFF},
    {0x20000, 0x2FFFD}, /* CJK Extensions B-F, compatibility supplement */
    {0x30000, 0x3FFFD}, /* CJK Extensions G-H */
};

static int in_table(uint32_t cp, const cp_range *t, size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp > t[mid].hi) lo = mid + 1;
        else if (cp < t[mid].lo) hi = mid;
        else return 1;
    }
    return 0;
}

int qkv_text_char_width(uint32_t cp) {
    if (cp == 0) return 0;
    if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) return 0; /* C0/C1 controls */
    if (cp < 0x300) return 1;
    if (in_table(cp, zero_width, sizeof zero_width / sizeof zero_width[0])) return 0;
    if (in_table(cp, wide, sizeof wide / sizeof wide[0])) return 2;
    return 1;
}

int qkv_text_next(uint32_t *cp, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    if (!u[0]) {
        *cp = 0;
        return 0;
    }
    int n;
    uint32_t c;
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    } else if ((u[0] & 0xE0) == 0xC0) {
        n = 2;
        c = u[0] & 0x1F;
    } else if ((u[0] & 0xF0) == 0xE0) {
        n = 3;
        c = u[0] & 0x0F;
    } else if ((u[0] & 0xF8) == 0xF0) {
        n = 4;
        c = u[0] & 0x07;
    } else {
        *cp = 0xFFFD;
        return 1;
    }
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) { /* truncated sequence (also stops at NUL) */
            *cp = 0xFFFD;
            return 1;
        }
        c = (c << 6) | (u[i] & 0x3F);
    }
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_for_len[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        *cp = 0xFFFD; /* overlong, out of range or a surrogate */
        return 1;
    }
    *cp = c;
    return n;
}

int qkv_text_width(const char *s) {
    int w = 0;
    uint32_t cp;
    for (int n; (n = qkv_text_next(&cp, s)) > 0; s += n) w += qkv_text_char_width(cp);
    return w;
}
