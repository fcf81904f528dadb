/*
 * Internal: RSP__ASSERT, the library's own invariants.
 * SPDX-License-Identifier: Apache-2.0
 *
 * An RSP__ASSERT states something no caller can cause: a reservation made
 * before the state changed is being consumed, a count that must be positive
 * is, a slot is where the bookkeeping says. A caller's error is never an
 * assertion: it gets a status and a message.
 *
 * Active when RSP_DEBUG_ASSERTS is defined (Debug and sanitizer builds, see
 * src/CMakeLists.txt): a violation prints the condition, file and line and
 * aborts, so the test that tripped it fails at the cause. In other builds
 * the condition is not evaluated (it must have no side effects).
 */
#ifndef RSP_UTIL_ASSERT_H
#define RSP_UTIL_ASSERT_H

#ifdef RSP_DEBUG_ASSERTS
#define RSP__ASSERT(cond) ((cond) ? (void)0 : rsp__assert_fail(#cond, __FILE__, __LINE__, __func__))
/* Print "rsp: internal invariant violated: ..." to stderr and abort. */
_Noreturn void rsp__assert_fail(const char *cond, const char *file, int line, const char *func);
#else
#define RSP__ASSERT(cond) ((void)sizeof(!(cond)))
#endif

/*
 * A call that a reservation made earlier cannot let fail (an append to a
 * frozen work list, a table with room reserved): evaluated in every build,
 * its result checked where RSP__ASSERT is active. RSP__MUST_OK for a call
 * returning a status (RSP_OK is 0), RSP__MUST for a condition (a bool
 * result, a pointer compared with NULL). Never for a caller's error.
 */
#define RSP__MUST_OK(call)                                                                         \
    do {                                                                                           \
        int rsp__must_st_ = (int)(call);                                                           \
        RSP__ASSERT(rsp__must_st_ == 0);                                                           \
        (void)rsp__must_st_;                                                                       \
    } while (0)
#define RSP__MUST(cond)                                                                            \
    do {                                                                                           \
        _Bool rsp__must_ok_ = (cond);                                                              \
        RSP__ASSERT(rsp__must_ok_);                                                                \
        (void)rsp__must_ok_;                                                                       \
    } while (0)

#endif
