// Internal to core/math: row-major Eigen views over the flat buffers the passes use (parameters,
// workspace, patches), the workspace's alignment, the index conversions, and what the MLP's and the
// layered passes share of LayerNorm.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <Eigen/Core>

namespace tessera::core::detail {

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using matrix_map = Eigen::Map<matrix>;
using const_matrix_map = Eigen::Map<const matrix>;
using row_vector_map = Eigen::Map<Eigen::RowVectorXf>;
using const_row_vector_map = Eigen::Map<const Eigen::RowVectorXf>;
using vector_map = Eigen::Map<Eigen::VectorXf>;

// Workspace slots start on 64-byte boundaries (16 floats) so Eigen's packets never straddle them.
inline constexpr std::size_t k_align_floats = 16;
constexpr std::size_t align_up(std::size_t n) noexcept { return (n + k_align_floats - 1) / k_align_floats * k_align_floats; }

inline std::size_t sz(std::int64_t v) noexcept { return static_cast<std::size_t>(v); }
// Eigen::Index is std::ptrdiff_t, 32 bits on armhf; every size here indexes an allocated arena, so it fits.
inline Eigen::Index ix(std::int64_t v) noexcept { return static_cast<Eigen::Index>(v); }

// LayerNorm's first half: each row of z standardised in place (mean 0, variance 1 with `epsilon`), and
// each row's 1/σ into rstd (the backward pass needs it).
inline void standardize_rows(matrix_map z, float* rstd, float epsilon) {
  const float inv_n = 1.0f / static_cast<float>(z.cols());
  for (Eigen::Index r = 0; r < z.rows(); ++r) {
    auto zr = z.row(r);
    const float mean = zr.sum() * inv_n;
    zr.array() -= mean;
    const float var = zr.squaredNorm() * inv_n;
    const float inv = 1.0f / std::sqrt(var + epsilon);
    rstd[r] = inv;
    zr *= inv;
  }
}

// out += the column sums of a (or of a ⊙ b), a and b rows × cols row-major: row by row, in plain loops
// the compiler vectorises. Eigen's colwise() on a row-major matrix with many rows and few columns
// strides down each column, and its row-by-row expressions cost more per row than a row of a few
// channels is worth.
inline void add_column_sums(const float* a, std::int64_t rows, std::int64_t cols, float* __restrict out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict row = a + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}
inline void add_column_dots(const float* a, const float* b, std::int64_t rows, std::int64_t cols, float* __restrict out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict ra = a + r * cols;
    const float* __restrict rb = b + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) out[c] += ra[c] * rb[c];
  }
}

// dst = a·b·scale, or dst += it. A product whose result has one column (or one row) Eigen computes as a
// matrix-vector product of the other operand with a column of b (a row of a); a slice of a scaled
// operand has no direct access, and Eigen copies it into a heap temporary (a batch of one row, a layer
// of one unit, a last chunk of one position). The scale rides on the operand that is not sliced, where
// Eigen takes it as the product's factor, as it does in the blocked product: the same floats either way.
template <class Dst, class A, class B>
void scaled_product(Dst&& dst, float scale, const A& a, const B& b, bool accumulate) {
  if (dst.cols() != 1 && dst.rows() == 1) {
    if (accumulate) dst.noalias() += a * (scale * b);
    else dst.noalias() = a * (scale * b);
  } else {
    if (accumulate) dst.noalias() += (scale * a) * b;
    else dst.noalias() = (scale * a) * b;
  }
}

}  // namespace tessera::core::detail
