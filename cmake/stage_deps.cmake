# Stage dsa's third-party build dependencies into one folder, for a machine that has the CUDA
# toolkit, CMake and ninja but neither the Debian -dev packages nor a network (the GPU machines
# this project borrows; docs/cuda.md, "On a GPU machine").
#
#   cmake -P cmake/stage_deps.cmake DIR          # run where the dependencies are installed
#   cmake --preset cuda -DCMAKE_PREFIX_PATH=DIR  # on the bare machine (tools/gpu_check.sh does it)
#
# Copied, each under DIR with the layout it has below its installation prefix (so that the config
# files' own relocation logic finds the headers next to them): Eigen, doctest and nlohmann-json
# (header-only: headers + CMake config files) and Google Benchmark (headers, shared library, config
# files). A config file that hard-codes its prefix (Debian's doctest does) is rewritten to compute
# it from its own location. Google Benchmark is optional: without it the CUDA benchmarks are not
# built (DSA_BUILD_BENCH=OFF) and everything else is.
#
# Search prefixes: CMAKE_PREFIX_PATH (environment), then /usr/local and /usr.
cmake_minimum_required(VERSION 3.25)

# cmake -P script DIR: the first argument after the script's name.
set(_dest "")
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(i RANGE 0 ${_last})
  if(CMAKE_ARGV${i} MATCHES "stage_deps\\.cmake$")
    math(EXPR _next "${i} + 1")
    if(_next LESS CMAKE_ARGC)
      set(_dest "${CMAKE_ARGV${_next}}")
    endif()
  endif()
endforeach()
if(_dest STREQUAL "")
  message(FATAL_ERROR "usage: cmake -P cmake/stage_deps.cmake DIR")
endif()
file(REAL_PATH "${_dest}" _dest BASE_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}")

set(_prefixes "")
if(DEFINED ENV{CMAKE_PREFIX_PATH})
  string(REPLACE ":" ";" _prefixes "$ENV{CMAKE_PREFIX_PATH}")
endif()
list(APPEND _prefixes /usr/local /usr)

# Where CMake's find_package looks for <name>Config.cmake below a prefix (the common layouts).
set(_config_suffixes
  "lib/cmake/@N@" "lib64/cmake/@N@" "lib/x86_64-linux-gnu/cmake/@N@" "lib/aarch64-linux-gnu/cmake/@N@"
  "share/cmake/@N@" "share/@N@/cmake" "share/@lower@/cmake")

# _stage(<package> <config file name> <header dir relative to the prefix> [OPTIONAL] [LIBS <glob>...])
function(_stage package config_name header_rel)
  cmake_parse_arguments(arg "OPTIONAL" "" "LIBS" ${ARGN})
  string(TOLOWER "${package}" lower)
  set(found_prefix "")
  foreach(prefix IN LISTS _prefixes)
    foreach(pattern IN LISTS _config_suffixes)
      string(REPLACE "@N@" "${package}" suffix "${pattern}")
      string(REPLACE "@lower@" "${lower}" suffix "${suffix}")
      if(EXISTS "${prefix}/${suffix}/${config_name}" AND EXISTS "${prefix}/${header_rel}")
        set(found_prefix "${prefix}")
        set(config_rel "${suffix}")
        break()
      endif()
    endforeach()
    if(found_prefix)
      break()
    endif()
  endforeach()
  if(NOT found_prefix)
    if(arg_OPTIONAL)
      message(STATUS "stage_deps: ${package}: not found (optional; the CUDA benchmarks will not be built)")
      return()
    endif()
    message(FATAL_ERROR "stage_deps: ${package}: no ${config_name} with ${header_rel} below ${_prefixes}; "
      "install it (README's dependency line) or add its prefix to CMAKE_PREFIX_PATH")
  endif()

  file(COPY "${found_prefix}/${config_rel}/" DESTINATION "${_dest}/${config_rel}")
  get_filename_component(header_parent "${_dest}/${header_rel}" DIRECTORY)
  file(COPY "${found_prefix}/${header_rel}" DESTINATION "${header_parent}")
  foreach(glob IN LISTS arg_LIBS)
    file(GLOB libs LIST_DIRECTORIES false "${found_prefix}/${glob}")
    foreach(lib IN LISTS libs)
      file(RELATIVE_PATH lib_rel "${found_prefix}" "${lib}")
      get_filename_component(lib_dir "${_dest}/${lib_rel}" DIRECTORY)
      # Symlinks are copied as symlinks (libfoo.so -> libfoo.so.1 -> libfoo.so.1.2.3).
      file(COPY "${lib}" DESTINATION "${lib_dir}")
    endforeach()
  endforeach()

  # Make hard-coded prefixes relative: set(_IMPORT_PREFIX "/usr") -> computed from the file's place.
  file(GLOB config_files "${_dest}/${config_rel}/*.cmake")
  string(REGEX REPLACE "[^/]+" ".." up "${config_rel}")
  foreach(f IN LISTS config_files)
    file(READ "${f}" text)
    string(REPLACE "set(_IMPORT_PREFIX \"${found_prefix}\")"
      "get_filename_component(_IMPORT_PREFIX \"\${CMAKE_CURRENT_LIST_DIR}/${up}\" ABSOLUTE)" patched "${text}")
    if(NOT patched STREQUAL text)
      file(WRITE "${f}" "${patched}")
    endif()
  endforeach()
  message(STATUS "stage_deps: ${package}: ${found_prefix}/{${config_rel}, ${header_rel}} -> ${_dest}")
endfunction()

_stage(Eigen3 Eigen3Config.cmake include/eigen3)
_stage(doctest doctestConfig.cmake include/doctest)
_stage(nlohmann_json nlohmann_jsonConfig.cmake include/nlohmann)
_stage(benchmark benchmarkConfig.cmake include/benchmark OPTIONAL
  LIBS "lib/libbenchmark*" "lib64/libbenchmark*" "lib/x86_64-linux-gnu/libbenchmark*" "lib/aarch64-linux-gnu/libbenchmark*")
file(WRITE "${_dest}/README" "Staged by cmake/stage_deps.cmake; configure dsa with -DCMAKE_PREFIX_PATH=${_dest}\n")
