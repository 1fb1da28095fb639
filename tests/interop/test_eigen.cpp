#include <doctest/doctest.h>

#include "dsa/interop/eigen.hpp"

TEST_CASE("interop: view_of keeps storage order and eigen_map round-trips") {
  Eigen::Matrix<float, 3, 4, Eigen::RowMajor> r;
  Eigen::Matrix<float, 3, 4> c;  // column-major
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) r(i, j) = c(i, j) = static_cast<float>(10 * i + j);

  auto vr = dsa::interop::view_of(r);
  auto vc = dsa::interop::view_of(c);
  CHECK(vr.extent(0) == 3);
  CHECK(vr.extent(1) == 4);
  CHECK(vr.is_contiguous());
  CHECK_FALSE(vc.is_contiguous());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      CHECK(vr(i, j) == r(i, j));
      CHECK(vc(i, j) == c(i, j));
    }

  auto m = dsa::interop::eigen_map(vc);
  CHECK(m.isApprox(c));
  m(2, 3) = -1.0f;  // writes through to the matrix
  CHECK(c(2, 3) == -1.0f);

  const auto& cr = r;
  dsa::host_view<const float, 2> cv = dsa::interop::view_of(cr);
  CHECK(dsa::interop::eigen_map(cv).sum() == doctest::Approx(r.sum()));
}

TEST_CASE("interop: rank-1 strided map") {
  float data[6] = {0, 1, 2, 3, 4, 5};
  dsa::host_view<float, 1> v(data, {3}, {2});
  auto m = dsa::interop::eigen_map(v);
  CHECK(m.size() == 3);
  CHECK(m(1) == 2.0f);
  CHECK(m.sum() == 6.0f);
}
