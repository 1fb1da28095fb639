# Cross-building dsa for aarch64 (NEON) on an x86-64 Debian host and running its tests under
# qemu-user: apt-get install g++-aarch64-linux-gnu qemu-user, then
#   cmake --preset aarch64-qemu && cmake --build --preset aarch64-qemu && ctest --preset aarch64-qemu
# The header-only dependencies (Eigen, doctest, nlohmann-json) are the host's packages: they hold
# no compiled code. ctest runs every test binary through CMAKE_CROSSCOMPILING_EMULATOR. The
# preset's tests leave out the memory tests (peak RSS under an emulator measures the emulator;
# 11 minutes of the 15 the suite takes there) and the packaging ones (they build host consumers);
# tests built for an emulator define DSA_TEST_UNDER_EMULATOR (tests/CMakeLists.txt).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
