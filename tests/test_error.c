/* tests/test_error.c — clef_error formatting and wrapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "core/error.h"

static void test_set_and_wrap(void **state) {
    (void)state;
    clef_error err;
    clef_err_clear(&err);
    assert_int_equal(err.status, CLEF_OK);
    assert_int_equal(clef_err_set(&err, CLEF_ERR_FORMAT, "bad magic 0x%08x", 0x12345678u),
                     CLEF_ERR_FORMAT);
    assert_string_equal(err.message, "bad magic 0x12345678");
    clef_err_wrap(&err, "file '%s'", "m.gguf");
    assert_string_equal(err.message, "file 'm.gguf': bad magic 0x12345678");
    assert_string_equal(clef_status_name(CLEF_ERR_FORMAT), "format");
    /* NULL error records are allowed everywhere. */
    assert_int_equal(clef_err_set(NULL, CLEF_ERR_IO, "x"), CLEF_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_set_and_wrap)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
