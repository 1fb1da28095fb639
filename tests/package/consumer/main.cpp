// Uses the library the way an engine does: umbrella header, an op on the CPU backend, the model
// headers, and a dsa::error on bad input.
#include <dsa/dsa.hpp>
#include <dsa/model/safetensors.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<float> x(4 * 16, 1.0f), y(x.size());
  dsa::hadamard_transform(dsa::cpu, dsa::make_view(x.data(), {4, 16}), dsa::make_view(y.data(), {4, 16}), 0.25f);
  // A row of ones transforms to (n, 0, 0, ...): 16 * 0.25 = 4.
  if (y[0] != 4.0f || y[1] != 0.0f) {
    std::puts("consumer: wrong Hadamard result");
    return 1;
  }
  try {
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(x.data(), {4, 15}), dsa::make_view(y.data(), {4, 15}), 1.0f);
    std::puts("consumer: bad size accepted");
    return 1;
  } catch (const dsa::error& e) {
    std::printf("consumer: dsa::error as expected: %s\n", e.what());
  }
  std::printf("consumer: dsa %d.%d.%d OK\n", DSA_VERSION_MAJOR, DSA_VERSION_MINOR, DSA_VERSION_PATCH);
  return 0;
}
