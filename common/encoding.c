/* common/encoding.c — hex and base64url (common/encoding.h). */
#include "encoding.h"

#include <string.h>

void hex_encode(const void *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = in;

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool hex_decode(const char *hex, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(hex[2 * i]), lo = hi < 0 ? -1 : hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return hex[2 * n] == '\0';
}

static const char b64url_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void base64url_encode(const void *in, size_t n, char *out)
{
    const unsigned char *p = in;
    uint32_t acc = 0;
    unsigned bits = 0;

    for (size_t i = 0; i < n; i++) {
        acc = (acc << 8 | p[i]) & 0xFFFF;
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            *out++ = b64url_alphabet[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        *out++ = b64url_alphabet[(acc << (6 - bits)) & 63];
    *out = '\0';
}

static int b64url_value(char c)
{
    const char *hit = c ? strchr(b64url_alphabet, c) : NULL;

    return hit ? (int)(hit - b64url_alphabet) : -1;
}

bool base64url_decode(const char *in, size_t n, unsigned char *out, size_t cap, size_t *len_out)
{
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t len = 0;

    for (size_t i = 0; i < n; i++) {
        int v = b64url_value(in[i]);

        if (v < 0)
            return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (len == cap)
                return false;
            out[len++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (bits >= 6 || acc != 0)
        return false;
    *len_out = len;
    return true;
}
