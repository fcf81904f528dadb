/*
 * Internal: happens-before annotations for ThreadSanitizer.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Our own atomics (util/sync.h) are __atomic builtins, which TSan models:
 * an edge made by them needs nothing here. Some hand-offs cross code that
 * TSan cannot see: liburcu (linked dynamically, uninstrumented: its wait-free
 * queue, rcu_assign_pointer/rcu_dereference, the grace periods behind
 * call_rcu and synchronize_rcu) and Concurrency Kit's structures (ck_ring,
 * ck_stack: ck_pr inline assembly). Without help TSan reports the data
 * carried across them as races. At each such hand-off the sender calls
 * rsp__hb_release(obj) after its last write and the receiver
 * rsp__hb_acquire(obj) before its first read, naming the same object: that
 * is the synchronises-with edge the real barrier provides, told to TSan.
 * Never use them to mirror an edge of our own atomics: that would hide a
 * wrong memory order from TSan instead of letting it check the order.
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

/*
 * rsp__hb_ignore_begin/end: hide the accesses in between from TSan. Only for
 * a structure whose own ordering TSan cannot model (ck_ring's slot copies,
 * ck_stack's benign reuse race); every hand-over through it is still stated
 * with rsp__hb_release/acquire at the call site.
 */
#ifdef RSP__TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#define rsp__hb_ignore_begin()                                                                     \
    do {                                                                                           \
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);                                              \
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);                                             \
    } while (0)
#define rsp__hb_ignore_end()                                                                       \
    do {                                                                                           \
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);                                               \
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);                                                \
    } while (0)
#else
#define rsp__hb_ignore_begin() ((void)0)
#define rsp__hb_ignore_end() ((void)0)
#endif

#endif
