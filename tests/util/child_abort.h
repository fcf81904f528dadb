/*
 * Tests of RSP__ASSERT (src/util/assert.h): run a misuse in a child
 * process and tell whether it aborted with the invariant message. The
 * parent asserts (cmocka). Include once per test file, after cmocka.h.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_TESTS_UTIL_CHILD_ABORT_H
#define RSP_TESTS_UTIL_CHILD_ABORT_H

#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run fn in a child process; its wait status, its stderr in buf. */
static inline int run_child(void (*fn)(void), char *buf, size_t cap)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL); /* cmocka's handler would jump back into it */
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        fn();
        _exit(0); /* the invariant held: the parent fails the test */
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < cap - 1 && (r = read(fds[0], buf + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/* True when fn's child died of SIGABRT after printing the invariant
 * message naming cond. */
static inline bool aborts_with(void (*fn)(void), const char *cond)
{
    char buf[4096];
    const int status = run_child(fn, buf, sizeof buf);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT))
        print_error("child did not abort (status %d); stderr: %s\n", status, buf);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
           strstr(buf, "rsp: internal invariant violated") && strstr(buf, cond);
}

/* True when fn's child exits 0 with nothing on stderr (the control: the
 * well-behaved use trips no invariant). */
static inline bool runs_clean(void (*fn)(void))
{
    char buf[4096];
    const int status = run_child(fn, buf, sizeof buf);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0 && buf[0] == '\0'))
        print_error("child status %d; stderr: %s\n", status, buf);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && buf[0] == '\0';
}

#endif
