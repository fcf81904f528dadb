/*
 * Internal: happens-before annotations for ThreadSanitizer.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Some of our hand-offs cross code that TSan cannot see: liburcu (linked
 * dynamically, uninstrumented: its queue, rcu_assign_pointer and call_rcu
 * threads) and Concurrency Kit's ck_pr (inline assembly). Without help TSan
 * reports the data carried across them as races. At each such hand-off the
 * sender calls rsp__hb_release(obj) after its last write and the receiver
 * rsp__hb_acquire(obj) before its first read, naming the same object: that
 * is the synchronises-with edge the real barrier provides, told to TSan.
 *
 * Outside TSan builds both are no-ops. Each use carries the tag of the pair
 * it mirrors (docs/ordering.md lists them).
 */
#ifndef RSP_HB_H
#define RSP_HB_H

#if defined(__SANITIZE_THREAD__)
#define RSP__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RSP__TSAN 1
#endif
#endif

#ifdef RSP__TSAN
/* From the sanitizer runtime (sanitizer/tsan_interface.h). */
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define rsp__hb_release(obj) __tsan_release((void *)(obj))
#define rsp__hb_acquire(obj) __tsan_acquire((void *)(obj))
#else
#define rsp__hb_release(obj) ((void)(obj))
#define rsp__hb_acquire(obj) ((void)(obj))
#endif

#endif
