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

#endif
