// Reading and writing safetensors files (https://github.com/huggingface/safetensors), and
// Hugging Face checkpoints made of them: the element types (dsa/model/dtype.hpp), one file
// (dsa/model/safetensors_file.hpp), a sharded or single-file checkpoint
// (dsa/model/safetensors_checkpoint.hpp) and the writer (dsa/model/safetensors_writer.hpp).
// Part of the dsa::model target (needs nlohmann_json).
#pragma once

#include "dsa/model/dtype.hpp"
#include "dsa/model/safetensors_checkpoint.hpp"
#include "dsa/model/safetensors_file.hpp"
#include "dsa/model/safetensors_writer.hpp"
