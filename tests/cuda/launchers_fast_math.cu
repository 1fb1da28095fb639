// launchers.cu again, built with --use_fast_math (see tests/cuda/CMakeLists.txt): the shared
// numerics must give the same bits under the flags engines commonly use.
#define DSA_TEST_LAUNCHERS_FAST_MATH 1
#include "launchers.cu"
