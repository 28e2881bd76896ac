/* The test executables' main: Criterion's own (criterion/criterion.h, "Providing your own main"),
   with one change to the exit status. A run in which no selected test ran, every one of them
   skipped (suite `gpu` without a device: each GPU test calls cr_skip_test, and the synthesis says
   "Tested: 0"), exits 77, which meson reports as SKIP, where Criterion's main exits 0 (OK). A run
   that tested anything exits as Criterion's does: 0 when every test passed, 1 otherwise. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stddef.h>

static size_t tested = (size_t)-1; /* set once every suite has run, as the synthesis counts it */

ReportHook(POST_ALL)(struct criterion_global_stats *stats) { tested = stats->nb_tests - stats->tests_skipped; }

int main(int argc, char *argv[]) {
  struct criterion_test_set *tests = criterion_initialize();
  if (!criterion_handle_args(argc, argv, true)) return 0; /* --help, --list, ... */
  const int failed = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  return failed ? 1 : tested == 0 ? 77 : 0;
}
