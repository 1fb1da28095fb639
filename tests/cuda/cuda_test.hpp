// What every CUDA doctest test uses: the device check that turns a missing GPU into a clean,
// reported skip instead of a failure.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <string_view>

#include "dsa/cuda/backend.hpp"

namespace dsa_test {

/// ctest's SKIP_RETURN_CODE for the CUDA tests (the Automake convention).
inline constexpr int skip_return_code = 77;

/// Test cases that skipped for want of a device in this process (read by cuda_test_main.cpp).
inline int& skipped_cuda_cases() {
  static int n = 0;
  return n;
}

/// Asked once per process: the answer cannot change while it runs.
inline bool cuda_device_present() {
  static const bool present = dsa::has_device();
  return present;
}

/// DSA_TEST_UNDER_SANITIZER: tools/gpu_check.sh sets it to the compute-sanitizer tool of the run
/// ("racecheck", "memcheck", "initcheck", "synccheck"); "" when unset.
inline std::string_view sanitizer_tool() {
  static const std::string_view tool = [] {
    const char* v = std::getenv("DSA_TEST_UNDER_SANITIZER");
    return v == nullptr ? std::string_view() : std::string_view(v);
  }();
  return tool;
}

/// True under any sanitizer (DSA_TEST_UNDER_SANITIZER set to anything but "" or "0"). The cases
/// whose V3.2-sized shapes take many minutes under racecheck then run smaller shapes that keep
/// their code paths (the same kernel instances, partial and multiple tiles, several head groups
/// and splits, looped grids); the full shapes run without the sanitizer (docs/cuda.md, "Tests").
inline bool under_sanitizer() { return sanitizer_tool() != "" && sanitizer_tool() != "0"; }

/// `full` normally, `reduced` under the sanitizers (under_sanitizer()).
template <class T>
T full_or_sanitizer(T full, T reduced) {
  return under_sanitizer() ? reduced : full;
}

/// True under compute-sanitizer's initcheck.
inline bool under_initcheck() { return sanitizer_tool() == "initcheck"; }

/// True under compute-sanitizer's racecheck.
inline bool under_racecheck() { return sanitizer_tool() == "racecheck"; }

/// The dsa::linear path of the tests' backends: dsa's SIMT kernel under initcheck, which does not
/// see the stores of cuBLAS's sm_90 GEMMs and reports every later read of their outputs
/// (docs/records/2026-11-26-gpu-run-4.md); cuBLAS otherwise, the default users get.
inline dsa::cuda_linear_path linear_path_for_tests() {
  return under_initcheck() ? dsa::cuda_linear_path::simt : dsa::cuda_linear_path::cublas;
}

}  // namespace dsa_test

/// First statement of a test case that needs a GPU: without one, report and leave the case.
#define DSA_TEST_REQUIRE_CUDA_DEVICE()                                  \
  do {                                                                  \
    if (!::dsa_test::cuda_device_present()) {                           \
      MESSAGE("SKIPPED: no CUDA device (dsa::device_count() == 0)");    \
      ++::dsa_test::skipped_cuda_cases();                               \
      return;                                                           \
    }                                                                   \
  } while (0)
