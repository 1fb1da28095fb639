# The CPU kernels of dsa's shipped programs (dsa_run, dsa_validate, dsa_make_tiny_model, the Python
# module), chosen at load time for the CPU they run on (docs/decisions.md, "The shipped programs pick
# their CPU kernels at load time").
#
# DSA_CPU_DISPATCH=ON compiles the CPU op instances, the forward pass and the model's file I/O
# (the instance files of dsa_cpu_ops, dsa_cpu_transformer and dsa_model_io) once per x86-64 level
# into a shared library of the same name, libdsa_cpu.so:
#   lib/libdsa_cpu.so                          x86-64 (SSE2, every x86-64 CPU)
#   lib/glibc-hwcaps/x86-64-v3/libdsa_cpu.so   -march=x86-64-v3 (AVX2, FMA, F16C, BMI2)
#   lib/glibc-hwcaps/x86-64-v4/libdsa_cpu.so   -march=x86-64-v4 (AVX-512 F, BW, CD, DQ, VL)
# and the programs link the first. glibc's loader (2.33 and later) looks in the glibc-hwcaps
# subdirectories of every directory it searches, best level first, and loads the variant this CPU
# runs: the dispatch is the loader's, once per process, with no code of ours and no indirect call.
# An older glibc loads the x86-64 one: correct, at the portable build's speed. The programs print
# what they got (dsa::cpu_detail::instances_isa_level, instances/cpu_isa.cpp).
# GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F (or -AVX2) makes the loader take a lower level: how
# tests/tools/test_isa_dispatch.cpp runs every variant on one machine and how to measure the AVX2
# kernels on an AVX-512 host.
#
# Why whole libraries and not per-function dispatch: the kernels are header-only templates, and
# every inline function or template they instantiate (dsa's own, Eigen's, the standard library's)
# would be emitted once per level under one name, of which the static linker keeps one -- a
# program could run AVX-512 code on a CPU without it. Each variant is linked on its own, with
# -Bsymbolic-functions so that its calls bind to its own functions, while data (the thread pool,
# thread-locals) still resolves to one copy per process.
#
# The level x86-64-v4 of the loader has no AVX512-BF16, so the v4 library narrows to bf16 without
# VCVTNE2PS2BF16 (cpu/arch/avx512_io.hpp): the one instruction a -march=native build on a Zen 4 or
# Sapphire Rapids host has beyond it.
#
# OFF (as with DSA_NATIVE, the sanitizers, or off x86-64 Linux): the programs link the static
# instances compiled with the build's own flags, as the tests do.

set(DSA_CPU_DISPATCH_LEVELS x86-64 x86-64-v3 x86-64-v4)
set(_dsa_cpu_dispatch_sources
  "${PROJECT_SOURCE_DIR}/instances/cpu_isa.cpp"
  "${PROJECT_SOURCE_DIR}/instances/cpu_transformer.cpp"
  "${PROJECT_SOURCE_DIR}/instances/model_io.cpp")
foreach(family IN LISTS DSA_OP_FAMILIES)
  list(APPEND _dsa_cpu_dispatch_sources "${PROJECT_SOURCE_DIR}/instances/cpu_ops_${family}.cpp")
endforeach()

# The programs link dsa_cpu_runtime: the base library (the others are built with it, as the
# loader needs them beside it) and the declarations that make their calls go to it.
add_library(dsa_cpu_runtime INTERFACE)
target_link_libraries(dsa_cpu_runtime INTERFACE dsa::model dsa_dev_flags)
target_compile_definitions(dsa_cpu_runtime INTERFACE DSA_EXTERN_CPU_OPS DSA_EXTERN_CPU_TRANSFORMER)

foreach(level IN LISTS DSA_CPU_DISPATCH_LEVELS)
  string(MAKE_C_IDENTIFIER "${level}" id)
  set(lib dsa_cpu_${id})
  add_library(${lib} SHARED ${_dsa_cpu_dispatch_sources})
  target_link_libraries(${lib} PRIVATE dsa::model dsa_dev_flags)
  target_compile_definitions(${lib} PRIVATE DSA_EXTERN_CPU_OPS DSA_EXTERN_CPU_TRANSFORMER)
  set_target_properties(${lib} PROPERTIES OUTPUT_NAME dsa_cpu)
  target_link_options(${lib} PRIVATE "LINKER:-Bsymbolic-functions" "LINKER:--exclude-libs,ALL")
  if(level STREQUAL "x86-64")
    set(subdir "")
    target_link_libraries(dsa_cpu_runtime INTERFACE ${lib})
  else()
    set(subdir "/glibc-hwcaps/${level}")
    target_compile_options(${lib} PRIVATE -march=${level})
    add_dependencies(dsa_cpu_runtime ${lib})
  endif()
  set_target_properties(${lib} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/lib${subdir}")
  set(DSA_CPU_DISPATCH_SUBDIR_${id} "${subdir}")
endforeach()

# dsa_cpu_dispatch_install(DESTINATION dir): the libraries into dir and its glibc-hwcaps
# subdirectories (the tools' lib/, the Python package's dsa/).
function(dsa_cpu_dispatch_install)
  cmake_parse_arguments(ARG "" "DESTINATION" "" ${ARGN})
  foreach(level IN LISTS DSA_CPU_DISPATCH_LEVELS)
    string(MAKE_C_IDENTIFIER "${level}" id)
    install(TARGETS dsa_cpu_${id} LIBRARY DESTINATION "${ARG_DESTINATION}${DSA_CPU_DISPATCH_SUBDIR_${id}}")
  endforeach()
endfunction()
