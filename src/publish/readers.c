/*
 * Readers: registration (both flavours, unregistered at thread exit) and
 * read sections (G1), in the calling thread's reader word.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "publish_impl.h"

#include <stdio.h>

#include "util/error.h"

/* Misuse that returns a status callers often drop (an unbalanced
 * rsp_read_end) is also printed in debug and sanitizer builds. */
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(RSP__TSAN)
#define RSP__REPORT_MISUSE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSP__REPORT_MISUSE 1
#endif
#endif
#ifndef RSP__REPORT_MISUSE
#define RSP__REPORT_MISUSE 0
#endif

/* The calling thread's reader state. A thread may be registered with
 * liburcu both as a reader and as an owner (tests do that): liburcu
 * asserts on a second registration, so registrations are counted. */
RSP__TLS uint32_t rsp__tls_reader;          /* MODE_WORD(mode) | depth */
static RSP__TLS uint32_t rsp__tls_rcu_regs; /* liburcu-memb registrations held */

static inline void tls_set_mode(uint32_t mode)
{
    rsp__tls_reader = MODE_WORD(mode) | tls_depth();
}

static void rcu_register_ref(void)
{
    if (rsp__tls_rcu_regs++ == 0)
        urcu_memb_register_thread();
}

static void rcu_unregister_ref(void)
{
    RSP__ASSERT(rsp__tls_rcu_regs != 0);
    if (--rsp__tls_rcu_regs == 0)
        urcu_memb_unregister_thread();
}

rsp_status rsp__read_section_check(const char *what, rsp_error *err)
{
    if (__builtin_expect(tls_depth() != 0, 1))
        return RSP_OK;
    if (tls_mode() == MODE_NONE)
        return rsp__fail(err, RSP_ENOTREG,
                         "%s: the calling thread is not registered: call rsp_reader_register first",
                         what);
    return rsp__fail(err, RSP_EINVAL, "%s called outside a read section (rsp_read_begin)", what);
}

/* A reader thread that exits without rsp_reader_unregister would stay in
 * liburcu's registry, and the next grace period would wait on a dead
 * thread: a key destructor unregisters it at thread exit instead. */
static pthread_key_t rsp__reader_key;
static pthread_once_t rsp__reader_key_once = PTHREAD_ONCE_INIT;
static int rsp__reader_key_rc;

static void reader_at_exit(void *unused)
{
    (void)unused;
    rsp__reader_unregister();
}

static void reader_key_create(void)
{
    rsp__reader_key_rc = pthread_key_create(&rsp__reader_key, reader_at_exit);
}

/* Both registrations: the key whose destructor unregisters at thread exit. */
static rsp_status reader_key_set(rsp_error *err)
{
    pthread_once(&rsp__reader_key_once, reader_key_create);
    if (rsp__reader_key_rc != 0 || pthread_setspecific(rsp__reader_key, &rsp__reader_key) != 0)
        return rsp__fail(err, RSP_ENOMEM, "cannot register the reader (no thread-specific key)");
    return RSP_OK;
}

rsp_status rsp__reader_register(rsp_error *err)
{
    if (tls_mode() == MODE_MEMB)
        return RSP_OK;
    if (tls_mode() != MODE_NONE)
        return rsp__fail(err, RSP_EINVAL,
                         "the calling thread is registered as a QSBR reader: "
                         "rsp_reader_unregister first");
    rsp_status st = reader_key_set(err);
    if (st != RSP_OK)
        return st;
    rcu_register_ref();
    tls_set_mode(MODE_MEMB);
    return RSP_OK;
}

rsp_status rsp__reader_register_qsbr(rsp_error *err)
{
    if (tls_mode() == MODE_QSBR_ONLINE || tls_mode() == MODE_QSBR_OFFLINE)
        return RSP_OK;
    if (tls_mode() != MODE_NONE)
        return rsp__fail(err, RSP_EINVAL,
                         "the calling thread is registered as a default reader: "
                         "rsp_reader_unregister first");
    rsp_status st = reader_key_set(err);
    if (st != RSP_OK)
        return st;
    urcu_qsbr_register_thread(); /* online */
    tls_set_mode(MODE_QSBR_ONLINE);
    return RSP_OK;
}

void rsp__reader_unregister(void)
{
    if (tls_mode() == MODE_NONE)
        return;
    /* Unregistering inside a section would let a grace period end under
     * the reader's feet: close the sections first. */
    while (tls_depth() > 0)
        rsp__read_end();
    if (tls_mode() == MODE_MEMB) {
        rcu_unregister_ref();
    } else {
        rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
        urcu_qsbr_unregister_thread();      /* G1: offline first, if online */
    }
    tls_set_mode(MODE_NONE);
    pthread_setspecific(rsp__reader_key, NULL);
}

void rsp__reader_fork_child(void)
{
    rsp__tls_reader = 0;
}

bool rsp__reader_registered(void)
{
    return tls_mode() != MODE_NONE;
}

bool rsp__reader_is_qsbr(void)
{
    return tls_mode() == MODE_QSBR_ONLINE || tls_mode() == MODE_QSBR_OFFLINE;
}

bool rsp__in_read_section(void)
{
    /* An online QSBR reader holds what it read until it is quiescent: a
     * grace period waits for it as for a section. */
    const uint32_t s = rsp__tls_reader;
    return (s & DEPTH_MASK) != 0 || s == MODE_WORD(MODE_QSBR_ONLINE);
}

/* The cases of quiescent / offline / online that do nothing or refuse. */
__attribute__((cold)) static rsp_status qsbr_call_other(void)
{
    if (tls_mode() == MODE_NONE)
        return RSP_ENOTREG;
    if (tls_depth() != 0)
        return RSP_EINVAL; /* it would end the section's protection */
    return RSP_OK;         /* a default reader, or already offline: nothing to announce */
}

rsp_status rsp__reader_quiescent(void)
{
    /* The one case that announces: an online QSBR reader outside a section. */
    if (__builtin_expect(rsp__tls_reader != MODE_WORD(MODE_QSBR_ONLINE), 0))
        return qsbr_call_other();
    rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
    urcu_qsbr_quiescent_state();        /* G1 */
    return RSP_OK;
}

rsp_status rsp__reader_offline(void)
{
    if (tls_mode() != MODE_QSBR_ONLINE || tls_depth() != 0)
        return qsbr_call_other();
    rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
    urcu_qsbr_thread_offline();         /* G1 */
    tls_set_mode(MODE_QSBR_OFFLINE);
    return RSP_OK;
}

rsp_status rsp__reader_online(void)
{
    if (tls_mode() == MODE_NONE)
        return RSP_ENOTREG;
    if (tls_mode() == MODE_QSBR_OFFLINE) {
        urcu_qsbr_thread_online();
        tls_set_mode(MODE_QSBR_ONLINE);
    }
    return RSP_OK;
}

/* rsp__read_begin's cases past its fast path: a nested section, a QSBR
 * reader, and the refusals. */
__attribute__((noinline)) static rsp_status read_begin_other(uint32_t s)
{
    const uint32_t mode = s >> DEPTH_BITS;
    if (mode == MODE_MEMB || mode == MODE_QSBR_ONLINE) {
        /* Nested (liburcu sees the outermost section only), or a QSBR
         * reader (nothing to announce: quiescence ends protection). */
        if ((s & DEPTH_MASK) == DEPTH_MASK)
            return RSP_EINVAL;
        rsp__tls_reader = s + 1;
        return RSP_OK;
    }
    if (rsp__forked())
        return RSP_EFORKED;
    return mode == MODE_NONE ? RSP_ENOTREG : RSP_EINVAL; /* offline QSBR reader */
}

rsp_status rsp__read_begin_explain(rsp_status st, rsp_error *err)
{
    if (st == RSP_ENOTREG)
        return rsp__fail(err, st,
                         "rsp_read_begin: the calling thread is not registered: call "
                         "rsp_reader_register first");
    if (st != RSP_EINVAL)
        return st;
    /* The two refusals that share RSP_EINVAL: read_begin_other's. */
    if (tls_mode() == MODE_QSBR_OFFLINE)
        return rsp__fail(err, st,
                         "rsp_read_begin: the calling thread is an offline QSBR reader: call "
                         "rsp_reader_online first");
    return rsp__fail(err, st,
                     "rsp_read_begin: read sections nested %u deep on this thread, the most "
                     "there may be: end one first (an rsp_read_begin without its rsp_read_end?)",
                     (unsigned)DEPTH_MASK);
}

rsp_status rsp__read_begin(void)
{
    const uint32_t s = rsp__tls_reader;
    if (__builtin_expect(s == MEMB_IDLE, 1)) { /* the outermost section of a default reader */
        rsp__tls_reader = s + 1;
        urcu_memb_read_lock();
        return RSP_OK;
    }
    return read_begin_other(s);
}

/* An unbalanced rsp__read_end: ignored rather than corrupting the nesting
 * (ours and liburcu's), and said where a developer will see it. */
__attribute__((noinline, cold)) static rsp_status read_end_unbalanced(void)
{
#if RSP__REPORT_MISUSE
    fprintf(stderr, "rsp: rsp_read_end without an open read section on this thread "
                    "(ignored: RSP_EINVAL, the nesting count is unchanged)\n");
#endif
    return RSP_EINVAL;
}

/* rsp__read_end's cases past its fast path. */
__attribute__((noinline)) static rsp_status read_end_other(uint32_t s)
{
    if (__builtin_expect((s & DEPTH_MASK) == 0, 0))
        return rsp__forked() ? RSP_EFORKED : read_end_unbalanced();
    /* A nested section of a default reader, or a QSBR reader's: nothing
     * to tell liburcu. */
    rsp__tls_reader = s - 1;
    return RSP_OK;
}

rsp_status rsp__read_end(void)
{
    const uint32_t s = rsp__tls_reader;
    if (__builtin_expect(s == MEMB_IDLE + 1, 1)) { /* a default reader's outermost section */
        rsp__tls_reader = MEMB_IDLE;
        rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
        urcu_memb_read_unlock();            /* G1 */
        return RSP_OK;
    }
    return read_end_other(s);
}
