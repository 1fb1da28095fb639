// dsa::tensor_view: a non-owning, trivially copyable view = pointer + extents + strides.
//
// Names follow std::mdspan (extent(r), stride(r), data_handle()) so code can move to mdspan
// later. Extents and strides are int64 so that V3.2-sized problems (128K x 2048 x 128 elements)
// never overflow index arithmetic. The memory space is part of the type: a host view cannot be
// passed where a device view is expected, so handing host memory to the CUDA backend is a
// compile error rather than a crash.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "dsa/core/checked_math.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"

DSA_NAMESPACE_BEGIN

/// Memory reachable by the host CPU.
struct host_space {
  static constexpr const char* name = "host";
};
/// Memory of the current CUDA device.
struct device_space {
  static constexpr const char* name = "device";
};

using index_t = std::int64_t;

namespace detail {

template <std::size_t Rank>
std::string array_string(const std::array<index_t, Rank>& a) {
  std::string s = "[";
  for (std::size_t r = 0; r < Rank; ++r) {
    if (r) s += ", ";
    s += std::to_string(a[r]);
  }
  return s + "]";
}

/// The magnitude of e as an unsigned value (exact for the most negative index_t too).
inline std::uint64_t magnitude(index_t e) {
  return e < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(e) : static_cast<std::uint64_t>(e);
}

/// Host-side construction check: the product of the extents' magnitudes, zeros counted as 1,
/// fits index_t. So size(), the row-major strides, is_contiguous() and any product of a subset of
/// the extents an op forms cannot overflow, whatever the order of the factors (a zero extent
/// does not hide two huge ones). Negative extents are left to check_valid in the op front-ends,
/// which reports them with the argument's name.
template <std::size_t Rank>
void check_extents(const std::array<index_t, Rank>& extents) {
  constexpr std::uint64_t max = static_cast<std::uint64_t>(std::numeric_limits<index_t>::max());
  std::uint64_t n = 1;
  for (std::size_t r = 0; r < Rank; ++r) {
    const std::uint64_t m = extents[r] == 0 ? 1 : magnitude(extents[r]);
    if (mul_overflows(n, m, &n) || n > max) {
      fail("tensor_view", "extents", array_string(extents),
           "an element count (the product of the extents) that fits in int64");
    }
  }
}

/// Host-side construction check of a strided view: the offsets of its elements, sums of
/// i_r * stride_r with 0 <= i_r < extent_r, stay within index_t. The positive and the negative
/// terms are summed separately, so every partial sum of any element's offset is bounded too.
/// Dimensions with no index (extent <= 0) contribute nothing.
template <std::size_t Rank>
void check_strides(const std::array<index_t, Rank>& extents, const std::array<index_t, Rank>& strides) {
  index_t hi = 0, lo = 0;
  for (std::size_t r = 0; r < Rank; ++r) {
    if (extents[r] <= 0) continue;
    index_t t = 0;
    bool overflow = mul_overflows(extents[r] - 1, strides[r], &t);
    if (!overflow) {
      index_t& sum = t > 0 ? hi : lo;
      overflow = add_overflows(sum, t, &sum);
    }
    if (overflow) {
      fail("tensor_view", "strides", array_string(strides),
           "element offsets (sums of index * stride) that fit in int64 for extents " + array_string(extents));
    }
  }
}

}  // namespace detail

template <class T, std::size_t Rank, class Space = host_space>
class tensor_view {
  static_assert(Rank >= 1, "dsa::tensor_view needs rank >= 1");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using space = Space;
  using extents_type = std::array<index_t, Rank>;
  static constexpr std::size_t rank() { return Rank; }

  /// An absent view: null data, all extents zero. Optional outputs take this value.
  tensor_view() = default;

  /// Row-major (C order) view. On the host, throws dsa::error when the element count does not
  /// fit index_t (see detail::check_extents).
  DSA_HOST_DEVICE tensor_view(T* data, const extents_type& extents) : data_(data), extents_(extents) {
#if !DSA_DEVICE_COMPILE
    detail::check_extents(extents_);
#endif
    index_t s = 1;
    for (std::size_t r = Rank; r-- > 0;) {
      strides_[r] = s;
      s *= extents_[r];
    }
  }

  /// Strided view; strides are in elements. On the host, throws dsa::error when the element
  /// count or an element's offset does not fit index_t.
  DSA_HOST_DEVICE tensor_view(T* data, const extents_type& extents, const extents_type& strides)
      : data_(data), extents_(extents), strides_(strides) {
#if !DSA_DEVICE_COMPILE
    detail::check_extents(extents_);
    detail::check_strides(extents_, strides_);
#endif
  }

  /// A view of T converts to a view of const T.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  DSA_HOST_DEVICE tensor_view(const tensor_view<U, Rank, Space>& other)
      : data_(other.data_handle()), extents_(other.extents()), strides_(other.strides()) {}

  DSA_HOST_DEVICE T* data_handle() const { return data_; }
  DSA_HOST_DEVICE index_t extent(std::size_t r) const { return extents_[r]; }
  DSA_HOST_DEVICE index_t stride(std::size_t r) const { return strides_[r]; }
  DSA_HOST_DEVICE const extents_type& extents() const { return extents_; }
  DSA_HOST_DEVICE const extents_type& strides() const { return strides_; }

  /// Number of elements (cannot overflow: the constructors check the extents on the host).
  DSA_HOST_DEVICE index_t size() const {
    index_t n = 1;
    for (std::size_t r = 0; r < Rank; ++r) n *= extents_[r];
    return n;
  }
  DSA_HOST_DEVICE bool empty() const { return size() == 0; }
  /// True for the default-constructed "absent" view used for optional outputs.
  DSA_HOST_DEVICE bool is_absent() const { return data_ == nullptr && size() == 0; }

  /// True when the elements are densely packed in row-major order (size-1 dims ignored).
  DSA_HOST_DEVICE bool is_contiguous() const {
    index_t s = 1;
    for (std::size_t r = Rank; r-- > 0;) {
      if (extents_[r] != 1 && strides_[r] != s) return false;
      s *= extents_[r];
    }
    return true;
  }

  template <class... I>
  DSA_HOST_DEVICE T& operator()(I... idx) const {
    static_assert(sizeof...(I) == Rank, "dsa::tensor_view: wrong number of indices");
    const index_t i[] = {static_cast<index_t>(idx)...};
    index_t off = 0;
    for (std::size_t r = 0; r < Rank; ++r) off += i[r] * strides_[r];
    return data_[off];
  }

  /// Pointer to the start of row `i` along dimension 0. A view without elements may have a
  /// null pointer (rows of zero columns, absent views): its rows are null too, since offsetting
  /// a null pointer is undefined behaviour even when nothing is then read.
  DSA_HOST_DEVICE T* row(index_t i) const { return data_ == nullptr ? data_ : data_ + i * strides_[0]; }

 private:
  T* data_ = nullptr;
  extents_type extents_{};
  extents_type strides_{};
};

template <class T, std::size_t Rank>
using host_view = tensor_view<T, Rank, host_space>;
template <class T, std::size_t Rank>
using device_view = tensor_view<T, Rank, device_space>;

/// Row-major view over contiguous memory: dsa::make_view(ptr, {rows, cols}).
template <class Space = host_space, class T, std::size_t Rank>
DSA_HOST_DEVICE tensor_view<T, Rank, Space> make_view(T* data, const index_t (&extents)[Rank]) {
  std::array<index_t, Rank> e{};
  for (std::size_t r = 0; r < Rank; ++r) e[r] = extents[r];
  return tensor_view<T, Rank, Space>(data, e);
}

// ---- shape checks shared by every op front-end -------------------------------------------

/// "[2, 3, 4]"
template <class View>
std::string shape_string(const View& v) {
  std::string s = "[";
  for (std::size_t r = 0; r < View::rank(); ++r) {
    if (r) s += ", ";
    s += std::to_string(v.extent(r));
  }
  return s + "]";
}

/// Throws unless v.extent(dim) == expected; `what` says where the expectation comes from.
template <class View>
void check_extent(std::string_view op, std::string_view name, const View& v, std::size_t dim, index_t expected,
                  std::string_view what) {
  if (v.extent(dim) != expected) {
    fail(op, std::string(name) + ".extent(" + std::to_string(dim) + ")", v.extent(dim),
         std::to_string(expected) + " (" + std::string(what) + ")");
  }
}

/// Throws if the view is absent (null data with elements) or has negative extents.
template <class View>
void check_valid(std::string_view op, std::string_view name, const View& v) {
  for (std::size_t r = 0; r < View::rank(); ++r) {
    if (v.extent(r) < 0) fail(op, std::string(name) + ".shape", shape_string(v), "non-negative extents");
  }
  if (v.data_handle() == nullptr && v.size() != 0) fail(op, std::string(name) + ".data", "null", "a non-null pointer");
}

/// Throws unless the innermost dimension is unit-stride (the vectorised paths need it).
template <class View>
void check_inner_contiguous(std::string_view op, std::string_view name, const View& v) {
  constexpr std::size_t last = View::rank() - 1;
  if (v.extent(last) > 1 && v.stride(last) != 1) {
    fail(op, std::string(name) + ".stride(" + std::to_string(last) + ")", v.stride(last), "1 (unit-stride rows)");
  }
}

DSA_NAMESPACE_END
