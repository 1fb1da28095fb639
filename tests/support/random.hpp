// Deterministic test data: every test seeds its own generator, so failures reproduce.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "dsa/core/types.hpp"

namespace dsa_test {

/// n floats uniform in [lo, hi).
inline std::vector<float> uniform(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// n floats from N(0, sigma^2).
inline std::vector<float> normal(std::size_t n, std::uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// Converts floats to a storage type (bf16, fp8_e4m3, ...), rounding as the type defines.
template <class T>
std::vector<T> convert(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = dsa::from_float<T>(v[i]);
  return out;
}

/// n normal values (mean 0, `sigma`) rounded to T.
template <class T>
std::vector<T> normal_as(std::size_t n, std::uint64_t seed, float sigma = 1.0f) {
  return convert<T>(normal(n, seed, sigma));
}

/// Converts a storage type back to floats.
template <class T>
std::vector<float> to_floats(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = dsa::to_float(v[i]);
  return out;
}

}  // namespace dsa_test
