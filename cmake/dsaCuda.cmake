# The CUDA backend's build (DSA_ENABLE_CUDA=ON): nvcc as the CUDA compiler, C++20, and the flags
# of dsa's own CUDA targets (tests, tools, benchmarks).
include_guard(GLOBAL)

# Hopper first (the V3.2 kernels' home), Ampere as the widest deployed target. Set before
# enable_language, which would otherwise pick nvcc's default (sm_75 for CUDA 13). A build of the
# Python binding alone (`pip install .` with DSA_ENABLE_CUDA=ON: no tests, tools or benchmarks)
# defaults to sm_90 only, which halves its nvcc time; CMAKE_CUDA_ARCHITECTURES or CUDAARCHS
# choose others (docs/python.md).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  if(DSA_BUILD_PYTHON AND NOT DSA_BUILD_TESTS AND NOT DSA_BUILD_TOOLS AND NOT DSA_BUILD_BENCH)
    set(CMAKE_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA architectures to build dsa's CUDA targets for")
  else()
    set(CMAKE_CUDA_ARCHITECTURES "90;80" CACHE STRING "CUDA architectures to build dsa's CUDA targets for")
  endif()
endif()
# CMake does not look in the toolkit's default prefix unless nvcc is on PATH or CUDACXX is set.
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS "/usr/local/cuda/bin/nvcc")
  find_program(_dsa_nvcc nvcc)
  if(NOT _dsa_nvcc)
    set(CMAKE_CUDA_COMPILER "/usr/local/cuda/bin/nvcc" CACHE FILEPATH "CUDA compiler")
  endif()
  unset(_dsa_nvcc CACHE)
endif()

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
  message(FATAL_ERROR "dsa: the CUDA backend needs nvcc >= 12.0 (C++20); found ${CMAKE_CUDA_COMPILER_VERSION}")
endif()
# CMake < 3.26 does not know nvcc's C++20 flag; nvcc >= 12 has it.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

if(NOT TARGET dsa_cuda)
  message(FATAL_ERROR "dsa: DSA_ENABLE_CUDA=ON but the CUDA toolkit (CUDAToolkit) was not found")
endif()

option(DSA_CUDA_PTXAS_VERBOSE "Print ptxas' register, spill and shared-memory report for dsa's kernels" OFF)

# Flags of dsa's own CUDA code (never exported): every nvcc warning is an error, the host
# compiler warns as for the .cpp files.
add_library(dsa_cuda_dev_flags INTERFACE)
if(DSA_WERROR)
  target_compile_options(dsa_cuda_dev_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
else()
  target_compile_options(dsa_cuda_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endif()
if(DSA_CUDA_PTXAS_VERBOSE)
  target_compile_options(dsa_cuda_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
endif()

# dsa_cuda_target(<target>): C++20 CUDA, dsa::cuda and the dev flags for one of dsa's own targets.
function(dsa_cuda_target target)
  set_target_properties(${target} PROPERTIES
    CUDA_STANDARD 20
    CUDA_STANDARD_REQUIRED ON
    CUDA_EXTENSIONS OFF)
  target_link_libraries(${target} PRIVATE dsa_cuda_dev_flags)
  get_target_property(_type ${target} TYPE)
  if(_type STREQUAL "STATIC_LIBRARY" OR _type STREQUAL "OBJECT_LIBRARY")
    target_link_libraries(${target} PUBLIC dsa::cuda)
  else()
    target_link_libraries(${target} PRIVATE dsa::cuda)
  endif()
endfunction()

# The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), one file per op
# family (compiled in parallel), as dsa_cpu_ops (cmake/dsaTargets.cmake) for the CPU. They are how
# host-compiled code runs the CUDA backend: the tests, the benchmarks, dsa_validate and the Python
# binding include dsa/cuda/ops.hpp, which declares these instances extern, call the ops directly
# and link this; so does transformer<cuda_backend> below. The --use_fast_math launchers, built
# with other flags, must not.
if(DSA_BUILD_TESTS OR DSA_BUILD_TOOLS OR DSA_BUILD_BENCH OR DSA_BUILD_PYTHON)
  add_library(dsa_cuda_ops STATIC)
  foreach(family IN LISTS DSA_OP_FAMILIES)
    target_sources(dsa_cuda_ops PRIVATE "${PROJECT_SOURCE_DIR}/instances/cuda_ops_${family}.cu")
  endforeach()
  dsa_cuda_target(dsa_cuda_ops)
  target_compile_definitions(dsa_cuda_ops PUBLIC DSA_EXTERN_CUDA_OPS)
  if(DSA_BUILD_PYTHON)
    # Linked into the extension module, a shared object.
    set_target_properties(dsa_cuda_ops PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
endif()
if(DSA_BUILD_TESTS OR DSA_BUILD_TOOLS OR DSA_BUILD_BENCH)
  # transformer<cuda_backend> compiled once (instances/cuda_transformer.cu), as dsa_cpu_transformer
  # for the CPU: host-compiled programs include dsa/model/cuda/transformer.hpp, which declares it
  # extern under DSA_EXTERN_CUDA_TRANSFORMER, and link this.
  add_library(dsa_cuda_transformer STATIC "${PROJECT_SOURCE_DIR}/instances/cuda_transformer.cu")
  dsa_cuda_target(dsa_cuda_transformer)
  target_link_libraries(dsa_cuda_transformer PUBLIC dsa_model_io dsa_cuda_ops)
  target_compile_definitions(dsa_cuda_transformer PUBLIC DSA_EXTERN_CUDA_TRANSFORMER)
endif()
