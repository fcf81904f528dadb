/*
 * The version (rsp.h "Version"): the shared library reports the numbers of
 * the header it was built from, and rsp_version_check serves the same or an
 * older minor of its major and refuses anything else, naming both versions.
 * Linked against librsp.so, so the functions are checked as exported.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

static void library_reports_the_headers_version(void **state)
{
    (void)state;
    assert_int_equal(rsp_version(), RSP_VERSION);
    assert_int_equal(rsp_version_major(), RSP_VERSION_MAJOR);
    assert_int_equal(rsp_version_minor(), RSP_VERSION_MINOR);
    assert_int_equal(rsp_version_patch(), RSP_VERSION_PATCH);
    assert_int_equal(RSP_VERSION,
                     RSP_VERSION_MAJOR * 10000 + RSP_VERSION_MINOR * 100 + RSP_VERSION_PATCH);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", RSP_VERSION_MAJOR, RSP_VERSION_MINOR,
             RSP_VERSION_PATCH);
    assert_string_equal(rsp_version_string(), want);
}

static void check_serves_this_and_older_minors(void **state)
{
    (void)state;
    rsp_error e = {.status = RSP_EDEVICE, .message = "untouched"};
    assert_int_equal(RSP_VERSION_CHECK(&e), RSP_OK);
    assert_int_equal(rsp_version_check(RSP_VERSION_MAJOR, RSP_VERSION_MINOR, NULL), RSP_OK);
    for (uint32_t minor = 0; minor < RSP_VERSION_MINOR; minor++)
        assert_int_equal(rsp_version_check(RSP_VERSION_MAJOR, minor, &e), RSP_OK);
    /* Success leaves err as it was. */
    assert_int_equal(e.status, RSP_EDEVICE);
    assert_string_equal(e.message, "untouched");
}

static void check_refuses_a_newer_minor_or_another_major(void **state)
{
    (void)state;
    const struct {
        uint32_t major, minor;
    } bad[] = {
        {RSP_VERSION_MAJOR, RSP_VERSION_MINOR + 1},
        {RSP_VERSION_MAJOR + 1, 0},
        {RSP_VERSION_MAJOR + 1, RSP_VERSION_MINOR},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rsp_error e = {0};
        assert_int_equal(rsp_version_check(bad[i].major, bad[i].minor, &e), RSP_EINVAL);
        assert_int_equal(e.status, RSP_EINVAL);
        char asked[32];
        snprintf(asked, sizeof asked, "rsp %u.%u ", (unsigned)bad[i].major, (unsigned)bad[i].minor);
        assert_non_null(strstr(e.message, asked));
        assert_non_null(strstr(e.message, rsp_version_string()));
        assert_int_equal(rsp_version_check(bad[i].major, bad[i].minor, NULL), RSP_EINVAL);
    }
    if (RSP_VERSION_MAJOR > 0)
        assert_int_equal(rsp_version_check(RSP_VERSION_MAJOR - 1, 0, NULL), RSP_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(library_reports_the_headers_version),
        cmocka_unit_test(check_serves_this_and_older_minors),
        cmocka_unit_test(check_refuses_a_newer_minor_or_another_major),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
