// The model golden case of dsa_validate on host backends: validate/model_replay.hpp (the replay
// and the golden README's criteria, for any backend) with the host transformer.
//
// Used by tools/dsa_validate.cpp (--model DIR) and tests/model/test_transformer_golden.cpp.
#pragma once

#include "dsa/model/transformer.hpp"
#include "validate/model_replay.hpp"
#include "validate/primitive_cases.hpp"
