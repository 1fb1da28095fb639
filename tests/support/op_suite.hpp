// Every public op of dsa, run once on fixed-seed inputs: the workload of the determinism and
// concurrency tests (tests/cpu/test_determinism.cpp, tests/cpu/test_concurrency.cpp).
//
// run_op_suite(be) returns the raw bytes of every output, named by op, so two runs can be
// compared bit for bit. Sizes are small (the suite runs in well under a second, also under
// ThreadSanitizer) but every op has at least 16 independent output rows, so 2, 3 and 8 threads
// all split the work differently.
//
// Compiled once (op_suite.cpp, target dsa_test_op_suite) and linked by both tests: it calls every
// op in every type combination, 30 s of compile at -O3 that each of them paid before.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"

namespace dsa_test {

struct op_output {
  std::string name;
  std::vector<std::byte> bytes;
};

/// Runs every public op on `be` and returns every output's bytes.
std::vector<op_output> run_op_suite(const dsa::cpu_backend& be);

}  // namespace dsa_test
