/*
 * Internal: a JSON text writer into a caller's fixed buffer that never
 * allocates and counts what it could not write, so one walk both fills a
 * buffer that is large enough and answers the size a smaller one needs
 * (the state dump: core/dump.c, pool_dump.c).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Single-threaded: one writer, one caller.
 */
#ifndef RSP_UTIL_JSON_H
#define RSP_UTIL_JSON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct rsp__jw {
    char *buf;   /* the caller's; NULL with size 0 only counts */
    size_t size; /* bytes of buf */
    size_t len;  /* bytes the text needs so far, without the NUL */
} rsp__jw;

/* Append printf-formatted text: written while it fits (buf stays
 * NUL-terminated), counted always. O(text). */
static inline void rsp__jw_put(rsp__jw *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void rsp__jw_put(rsp__jw *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool room = w->buf && w->len < w->size;
    int n = vsnprintf(room ? w->buf + w->len : NULL, room ? w->size - w->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        w->len += (size_t)n;
}

/* Append s as a JSON string, quoted, with '"', '\\' and control bytes
 * escaped. O(strlen(s)). */
static inline void rsp__jw_str(rsp__jw *w, const char *s)
{
    rsp__jw_put(w, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            rsp__jw_put(w, "\\%c", *c);
        else if (*c < 0x20)
            rsp__jw_put(w, "\\u%04x", *c);
        else
            rsp__jw_put(w, "%c", *c);
    }
    rsp__jw_put(w, "\"");
}

#endif
