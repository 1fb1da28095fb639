# Third-party packages dsa's targets need. Debian/Ubuntu: see the README's dependency line.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
# The CUDA toolkit is optional: with it the dsa::cuda target exists (header-only, links cudart).
find_package(CUDAToolkit QUIET)
