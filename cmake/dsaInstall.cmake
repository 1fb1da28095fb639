# `cmake --install` produces a relocatable package: headers, exported targets, a config file
# with find_dependency and a version file. Consumers: find_package(dsa CONFIG REQUIRED
# [COMPONENTS model cuda]).
include(CMakePackageConfigHelpers)

set(DSA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/dsa" CACHE STRING "Where dsaConfig.cmake goes")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/dsa" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS dsa dsa_model EXPORT dsaTargets)
install(EXPORT dsaTargets NAMESPACE dsa:: DESTINATION "${DSA_INSTALL_CMAKEDIR}")
if(TARGET dsa_cuda)
  install(TARGETS dsa_cuda EXPORT dsaCudaTargets)
  install(EXPORT dsaCudaTargets NAMESPACE dsa:: DESTINATION "${DSA_INSTALL_CMAKEDIR}")
endif()

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/dsaConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/dsaConfig.cmake"
  INSTALL_DESTINATION "${DSA_INSTALL_CMAKEDIR}")
# Header-only: the package fits any architecture. 0.x releases are compatible within a minor.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/dsaConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion
  ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/dsaConfig.cmake" "${PROJECT_BINARY_DIR}/dsaConfigVersion.cmake"
  DESTINATION "${DSA_INSTALL_CMAKEDIR}")
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/dsa")
