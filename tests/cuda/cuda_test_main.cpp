// doctest main of the CUDA tests. A run in which some test case skipped for want of a GPU, and
// nothing failed, exits with dsa_test::skip_return_code so that ctest lists the test as skipped
// rather than passed; any failure still exits non-zero as usual.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "cuda_test.hpp"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  if (const int skipped = dsa_test::skipped_cuda_cases(); skipped > 0) {
    std::printf("dsa: %d test case(s) skipped: no CUDA device; exit code %d marks the run as skipped\n", skipped,
                dsa_test::skip_return_code);
    return dsa_test::skip_return_code;
  }
  return 0;
}
