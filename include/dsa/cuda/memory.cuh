// device_buffer<T> and the host <-> device copies under the name docs/design.md's "Layout" gives them.
// The implementation is host-only C++ in memory.hpp, so that g++-only translation units can use
// it too.
#pragma once

#include "dsa/cuda/memory.hpp"
