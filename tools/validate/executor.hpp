// What every dsa_validate executor (primitive_cases.hpp, concept `executor`) shares, whatever its
// backend: the error for a backend that failed, and the byte a device executor fills its output
// buffers with. Kept apart from the case headers so that the CUDA executor
// (validate/cuda_cases.hpp) uses them without including the CPU cases. Standard C++ only.
#pragma once

#include <stdexcept>

namespace dsa_validate {

/// The backend itself failed while running a group (a CUDA runtime error: a kernel fault, out of
/// memory), as opposed to a file
/// that does not hold what the group needs. Deliberately not a dsa::error, so run_group does not
/// turn it into an input_error: dsa_validate reports the group as FAIL (exit code 1), since it is
/// dsa, not the file, that failed.
class backend_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Written over every output buffer an executor allocates before the op runs, so that an element
/// the op fails to write cannot pass as the zero of a fresh allocation: 0x7F7F7F7F reads back as
/// 3.4e38 (f32), 0x7F7F as 3.4e38 (bf16), 2139062143 (int32, never a valid index) and 0x7F as
/// NaN (e4m3), none of which a golden case expects (an e4m3 NaN code only from a NaN input), so
/// every unwritten element fails its group's comparison (tests/tools/test_primitive_cases.cpp
/// checks this for every group).
inline constexpr unsigned char output_poison_byte = 0x7F;

}  // namespace dsa_validate
