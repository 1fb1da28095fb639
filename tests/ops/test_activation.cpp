// dsa::swiglu: front-end checks and CPU results against a double-precision reference.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/cpu/activation.hpp"
#include "dsa/ops/activation.hpp"
#include "support/dense_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("silu is the double value rounded once to fp32") {
  for (float g : {0.0f, 1.0f, -1.0f, 3.5f, -20.0f, 88.0f, -100.0f, -1000.0f, 1e-30f, 1e30f}) {
    const double x = g;
    CHECK(dsa::silu(g) == static_cast<float>(x / (1.0 + std::exp(-x))));
  }
  CHECK(dsa::silu(-1000.0f) == 0.0f);
  CHECK(std::signbit(dsa::silu(-1000.0f)));
  CHECK(std::isnan(dsa::silu(std::numeric_limits<float>::quiet_NaN())));
  CHECK(dsa::silu(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(dsa::swiglu_value(2.0f, 3.0f) == dsa::silu(2.0f) * 3.0f);
}

TEST_CASE("swiglu matches silu(gate) * up in double, rounded once to bf16") {
  const index_t t = 13, n = 1000;
  const std::vector<bf16> g = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * n), 1, 4.0f));
  const std::vector<bf16> u = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * n), 2, 2.0f));
  std::vector<bf16> y(g.size()), y2(g.size());
  dsa::swiglu(dsa::cpu, dsa::make_view(g.data(), {t, n}), dsa::make_view(u.data(), {t, n}), dsa::make_view(y.data(), {t, n}));
  std::size_t exact = 0, far = 0, spec = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double ref = dsa_test::swiglu_reference(g[i].to_float(), u[i].to_float());
    if (y[i].bits == bf16(static_cast<float>(ref)).bits) ++exact;
    if (std::fabs(y[i].to_float() - ref) > 0x1p-8 * std::fabs(ref) * (1 + 0x1p-12) + 1e-38) ++far;
    if (y[i].bits == bf16(dsa::silu(g[i].to_float()) * u[i].to_float()).bits) ++spec;
  }
  CHECK(far == 0);
  CHECK(spec == y.size());
  CHECK(exact >= y.size() * 995 / 1000);
  dsa::swiglu(dsa::cpu_backend{3}, dsa::make_view(g.data(), {t, n}), dsa::make_view(u.data(), {t, n}),
              dsa::make_view(y2.data(), {t, n}));
  CHECK(same_bits(y, y2));
  // In place over either input.
  std::vector<bf16> gi = g, ui = u;
  dsa::swiglu(dsa::cpu, dsa::make_view(gi.data(), {t, n}), dsa::make_view(u.data(), {t, n}), dsa::make_view(gi.data(), {t, n}));
  dsa::swiglu(dsa::cpu, dsa::make_view(g.data(), {t, n}), dsa::make_view(ui.data(), {t, n}), dsa::make_view(ui.data(), {t, n}));
  CHECK(same_bits(gi, y));
  CHECK(same_bits(ui, y));
}

TEST_CASE("swiglu rejects bad arguments with a clear message") {
  std::vector<bf16> g(4 * 8), u(4 * 8), y(4 * 8);
  const auto gv = dsa::make_view(g.data(), {4, 8});
  const auto uv = dsa::make_view(u.data(), {4, 8});
  const auto yv = dsa::make_view(y.data(), {4, 8});
  CHECK_NOTHROW(dsa::swiglu(dsa::cpu, gv, uv, yv));
  CHECK_THROWS_WITH_AS(dsa::swiglu(dsa::cpu, gv, dsa::make_view(u.data(), {4, 7}), yv),
                       doctest::Contains("dsa::swiglu: up.extent(1) = 7; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::swiglu(dsa::cpu, gv, dsa::make_view(u.data(), {3, 8}), yv),
                       doctest::Contains("dsa::swiglu: up.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::swiglu(dsa::cpu, gv, uv, dsa::make_view(y.data(), {4, 6})),
                       doctest::Contains("dsa::swiglu: y.extent(1) = 6; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::swiglu(dsa::cpu, gv, uv, dsa::make_view(g.data() + 2, {4, 8})),
                       doctest::Contains("dsa::swiglu: y = a view overlapping gate; expected either exactly gate"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::swiglu(dsa::cpu, gv, dsa::host_view<const bf16, 2>(u.data(), {4, 4}, {8, 2}),
                                   dsa::make_view(y.data(), {4, 4})),
                       doctest::Contains("dsa::swiglu: up.stride(1) = 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::swiglu(dsa::cpu, dsa::host_view<const bf16, 2>(nullptr, {4, 8}), uv, yv),
                       doctest::Contains("dsa::swiglu: gate.data = null"), dsa::error);
}
