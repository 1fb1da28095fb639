// The one configuration header: version, namespace and host/device portability macros.
// Every dsa header includes this first. It must compile with g++, clang++ and nvcc.
#pragma once

#define DSA_VERSION_MAJOR 0
#define DSA_VERSION_MINOR 1
#define DSA_VERSION_PATCH 0

// The inline namespace carries the ABI version: two dsa versions with incompatible layouts
// can be linked into one program without ODR violations.
#define DSA_NAMESPACE_BEGIN \
  namespace dsa {           \
  inline namespace v0 {
#define DSA_NAMESPACE_END \
  }                       \
  }

#if defined(__CUDACC__) || defined(__HIPCC__)
#define DSA_HOST_DEVICE __host__ __device__
#define DSA_DEVICE __device__
#define DSA_FORCEINLINE __forceinline__
#else
#define DSA_HOST_DEVICE
#define DSA_DEVICE
#if defined(__GNUC__) || defined(__clang__)
#define DSA_FORCEINLINE inline __attribute__((always_inline))
#else
#define DSA_FORCEINLINE inline
#endif
#endif

// True while compiling device code (nvcc's device pass); host-only facilities (exceptions,
// std::string) must stay out of such code paths.
#if defined(__CUDA_ARCH__)
#define DSA_DEVICE_COMPILE 1
#else
#define DSA_DEVICE_COMPILE 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DSA_RESTRICT __restrict__
#else
#define DSA_RESTRICT
#endif
