# The library targets. Everything is header-only: INTERFACE targets carry include paths,
# the C++20 requirement and the dependencies.
include(GNUInstallDirs)

# dsa::dsa — core + ops + CPU backend (Eigen).
add_library(dsa INTERFACE)
add_library(dsa::dsa ALIAS dsa)
target_include_directories(dsa INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(dsa INTERFACE cxx_std_20)
target_link_libraries(dsa INTERFACE Eigen3::Eigen Threads::Threads)

# dsa::model — checkpoint loading (safetensors, config.json) and the reference forward pass.
add_library(dsa_model INTERFACE)
add_library(dsa::model ALIAS dsa_model)
set_target_properties(dsa_model PROPERTIES EXPORT_NAME model)
target_link_libraries(dsa_model INTERFACE dsa nlohmann_json::nlohmann_json)

# dsa::cuda — the CUDA backend headers (.cuh need nvcc; launchers link cudart, cuBLAS for
# dsa::linear's matrix products and cuBLASLt for fp8_linear's block-scaled FP8 path; the installed
# config's find_dependency(CUDAToolkit) defines all three).
if(CUDAToolkit_FOUND)
  add_library(dsa_cuda INTERFACE)
  add_library(dsa::cuda ALIAS dsa_cuda)
  set_target_properties(dsa_cuda PROPERTIES EXPORT_NAME cuda)
  target_link_libraries(dsa_cuda INTERFACE dsa CUDA::cudart CUDA::cublas CUDA::cublasLt)
  # A usage requirement of the headers, not a preference: tensor_view's __host__ __device__
  # members call std::array's constexpr accessors, which device code may call only with this flag.
  target_compile_options(dsa_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
endif()

# The op families (docs/architecture.md, "Op families"): the instance files (instances/cpu_ops_<family>.cpp,
# instances/cuda_ops_<family>.cu), the Python binding's python/src/ops_<family>.cpp and python/dsa/<family>.py
# are split along them.
set(DSA_OP_FAMILIES quant indexer topk attention dense moe)

# Flags for dsa's own tests, tools and benchmarks (never exported to users).
add_library(dsa_dev_flags INTERFACE)
target_compile_options(dsa_dev_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic $<$<BOOL:${DSA_WERROR}>:-Werror>>
  # GCC 12 reports false maybe-uninitialized warnings inside Eigen's AVX-512 intrinsics paths.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>)
if(DSA_NATIVE)
  target_compile_options(dsa_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
if(DSA_SANITIZE AND DSA_SANITIZE_THREAD)
  message(FATAL_ERROR "dsa: DSA_SANITIZE (ASan + UBSan) and DSA_SANITIZE_THREAD (TSan) cannot be combined")
endif()
if(DSA_SANITIZE)
  target_compile_options(dsa_dev_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer>)
  target_link_options(dsa_dev_flags INTERFACE -fsanitize=address,undefined)
endif()
if(DSA_SANITIZE_THREAD)
  # dsa is header-only, so instrumenting dsa's own executables instruments all of its code;
  # libstdc++'s std::thread and mutexes are seen through TSan's interceptors.
  target_compile_options(dsa_dev_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread -fno-omit-frame-pointer>)
  target_link_options(dsa_dev_flags INTERFACE -fsanitize=thread)
endif()

# transformer<cpu_backend> compiled once (instances/cpu_transformer.cpp) for dsa's own programs
# that run the CPU forward pass: they link dsa_cpu_transformer, which brings dsa::model, the
# development flags and DSA_EXTERN_CPU_TRANSFORMER, instead of compiling the whole pass (every
# layer's ops) in each translation unit -- the bulk of a model-level test's compile time, paid
# ten times per build before (docs/decisions.md, "CI budget") -- and likewise the model's file
# I/O (instances/model_io.cpp, dsa/model/io_linkage.hpp), which is also a target of its own,
# dsa_model_io, for programs that read checkpoints but run no forward pass (they must not
# instantiate transformer<cpu_backend>: under DSA_EXTERN_CPU_TRANSFORMER it is only declared).
# Programs compiled with other flags (the AVX-512 test variants) must not link any of these: they
# compile their own pass and ops.
if(DSA_BUILD_TESTS OR DSA_BUILD_TOOLS OR DSA_BUILD_EXAMPLES OR DSA_BUILD_BENCH)
  # The CPU ops, likewise (dsa/core/op_instances.hpp): programs that link dsa_cpu_ops call the
  # instances compiled here (one file per op family, built in parallel) for the type combinations the CPU
  # headers list; the forward pass is one of them.
  add_library(dsa_cpu_ops STATIC "${PROJECT_SOURCE_DIR}/instances/cpu_isa.cpp")
  foreach(family IN LISTS DSA_OP_FAMILIES)
    target_sources(dsa_cpu_ops PRIVATE "${PROJECT_SOURCE_DIR}/instances/cpu_ops_${family}.cpp")
  endforeach()
  target_link_libraries(dsa_cpu_ops PUBLIC dsa::dsa dsa_dev_flags)
  target_compile_definitions(dsa_cpu_ops PUBLIC DSA_EXTERN_CPU_OPS)
  add_library(dsa_model_io STATIC "${PROJECT_SOURCE_DIR}/instances/model_io.cpp")
  target_link_libraries(dsa_model_io PUBLIC dsa::model dsa_dev_flags)
  target_compile_definitions(dsa_model_io PUBLIC DSA_EXTERN_CPU_TRANSFORMER)
  add_library(dsa_cpu_transformer STATIC "${PROJECT_SOURCE_DIR}/instances/cpu_transformer.cpp")
  target_link_libraries(dsa_cpu_transformer PUBLIC dsa_model_io dsa_cpu_ops)
endif()

# dsa_cpu_runtime: the CPU ops and forward pass as dsa's shipped programs (the tools and the Python
# module) link them: per x86-64 level, chosen by the loader, under DSA_CPU_DISPATCH
# (cmake/dsaCpuDispatch.cmake); otherwise the static instances above, built with the build's flags.
if(DSA_CPU_DISPATCH AND (DSA_BUILD_TOOLS OR DSA_BUILD_PYTHON))
  include(dsaCpuDispatch)
elseif(DSA_BUILD_TOOLS)
  add_library(dsa_cpu_runtime INTERFACE)
  target_link_libraries(dsa_cpu_runtime INTERFACE dsa_cpu_transformer)
endif()
