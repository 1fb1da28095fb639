// Zero-copy bridges between dsa views and Eigen.
//
//   Eigen::MatrixXf m(4, 128);
//   auto v = dsa::interop::view_of(m);           // host_view<float, 2>, row/column strides kept
//   auto e = dsa::interop::eigen_map(v);         // Eigen::Map with the view's strides
#pragma once

#include <Eigen/Core>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN
namespace interop {

/// A rank-2 host view as an Eigen::Map of a row-major matrix with the view's strides.
template <class T>
auto eigen_map(const host_view<T, 2>& v) {
  using Scalar = std::remove_const_t<T>;
  using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MapType = std::conditional_t<std::is_const_v<T>, const Matrix, Matrix>;
  using Stride = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  return Eigen::Map<MapType, Eigen::Unaligned, Stride>(v.data_handle(), v.extent(0), v.extent(1),
                                                       Stride(v.stride(0), v.stride(1)));
}

/// A rank-1 host view as an Eigen::Map of a column vector with the view's stride.
template <class T>
auto eigen_map(const host_view<T, 1>& v) {
  using Scalar = std::remove_const_t<T>;
  using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;
  using MapType = std::conditional_t<std::is_const_v<T>, const Vector, Vector>;
  using Stride = Eigen::InnerStride<Eigen::Dynamic>;
  return Eigen::Map<MapType, Eigen::Unaligned, Stride>(v.data_handle(), v.extent(0), Stride(v.stride(0)));
}

/// A view of any Eigen dense object with direct access (Matrix, Array, Map, Block), keeping its
/// storage order through the strides.
template <class Derived>
auto view_of(Eigen::DenseBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  const index_t rs = Derived::IsRowMajor ? m.outerStride() : m.innerStride();
  const index_t cs = Derived::IsRowMajor ? m.innerStride() : m.outerStride();
  return host_view<Scalar, 2>(m.derived().data(), {m.rows(), m.cols()}, {rs, cs});
}

template <class Derived>
auto view_of(const Eigen::DenseBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  const index_t rs = Derived::IsRowMajor ? m.outerStride() : m.innerStride();
  const index_t cs = Derived::IsRowMajor ? m.innerStride() : m.outerStride();
  return host_view<const Scalar, 2>(m.derived().data(), {m.rows(), m.cols()}, {rs, cs});
}

}  // namespace interop
DSA_NAMESPACE_END
