#include "tessera/core/math/conv.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>

#include <Eigen/Core>

#include "eigen_views.hpp"

namespace tessera::core {
namespace {

using namespace detail;

// Where output position `pos` (counted over the batch) reads its patch: its example and top-left
// corner; next() steps to the following position without a division.
struct patch_origin {
  std::int64_t example = 0, row = 0, col = 0;  // the output position's
  std::int64_t top = 0, left = 0;              // its patch's corner in the input (negative in the padding)

  patch_origin(const conv_geometry& g, std::int64_t pos) noexcept
      : example(pos / g.out.positions()), row(pos % g.out.positions() / g.out.width), col(pos % g.out.width) {
    place(g);
  }
  // Steps `n` positions along the output row (n ≤ the row's remaining width).
  void advance(const conv_geometry& g, std::int64_t n) noexcept {
    col += n - 1;
    next(g);
  }
  void next(const conv_geometry& g) noexcept {
    if (++col == g.out.width) {
      col = 0;
      if (++row == g.out.height) {
        row = 0;
        ++example;
      }
    }
    place(g);
  }
  void place(const conv_geometry& g) noexcept {
    top = row * g.stride - g.pad_h;
    left = col * g.stride - g.pad_w;
  }
};

// n floats from src to dst: Eigen's vectorised copy, no call per run (runs are a few channels long).
void copy_run(const float* src, std::int64_t n, float* dst) {
  Eigen::Map<Eigen::VectorXf>(dst, ix(n)) = Eigen::Map<const Eigen::VectorXf>(src, ix(n));
}
void add_run(const float* src, std::int64_t n, float* dst) {
  Eigen::Map<Eigen::VectorXf>(dst, ix(n)) += Eigen::Map<const Eigen::VectorXf>(src, ix(n));
}

// The patches of output positions [first, first + count), one row each (im2col); zeros where the
// kernel reaches into the padding. Channels-last, a kernel row's taps are one run of kernel_w ×
// channels floats in the input as in the patch: one copy per kernel row where it lies inside.
void gather_patches(const conv_geometry& g, const float* x, std::int64_t first, std::int64_t count, float* patches) {
  const std::int64_t c = g.in.channels, run = g.kernel_w * c;
  patch_origin o(g, first);
  for (std::int64_t r = 0; r < count; ++r, o.next(g)) {
    const float* example = x + o.example * g.in.size();
    float* row = patches + r * g.patch();
    const bool whole_width = o.left >= 0 && o.left + g.kernel_w <= g.in.width;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t ih = o.top + kh;
      float* dst = row + kh * run;
      if (ih < 0 || ih >= g.in.height) {
        std::fill_n(dst, sz(run), 0.0f);
        continue;
      }
      const float* line = example + ih * g.in.width * c;
      if (whole_width) {
        copy_run(line + o.left * c, run, dst);
        continue;
      }
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const std::int64_t iw = o.left + kw;
        if (iw < 0 || iw >= g.in.width) std::fill_n(dst + kw * c, sz(c), 0.0f);
        else copy_run(line + iw * c, c, dst + kw * c);
      }
    }
  }
}

// Few input channels (the first layer of an image network): a patch row is a handful of floats, and
// gathering it costs more than its GEMM. The patches are then gathered transposed, one row per tap and
// channel and one column per position, so that a tap's values for the positions along an output row
// are one strided run of the input (a contiguous one at stride 1 with one channel).
bool gather_transposed(const conv_geometry& g) noexcept { return g.in.channels < 4; }

// The patches of positions [first, first + count) as columns of `pt` (patch × count), zeros in the padding.
void gather_patches_transposed(const conv_geometry& g, const float* x, std::int64_t first, std::int64_t count, float* pt) {
  const std::int64_t c = g.in.channels, s = g.stride;
  patch_origin o(g, first);
  for (std::int64_t r = 0; r < count;) {
    const std::int64_t seg = std::min(count - r, g.out.width - o.col);  // positions left on this output row
    const float* example = x + o.example * g.in.size();
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t ih = o.top + kh;
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        // Position j of the segment reads column iw = o.left + kw + j·s: inside for j in [lo, hi).
        const std::int64_t start = o.left + kw;
        const std::int64_t lo = std::clamp<std::int64_t>(start >= 0 ? 0 : (-start + s - 1) / s, 0, seg);
        const std::int64_t hi = std::clamp<std::int64_t>(start >= g.in.width ? 0 : (g.in.width - start + s - 1) / s, lo, seg);
        for (std::int64_t ch = 0; ch < c; ++ch) {
          float* dst = pt + ((kh * g.kernel_w + kw) * c + ch) * count + r;
          if (ih < 0 || ih >= g.in.height) {
            std::fill_n(dst, sz(seg), 0.0f);
            continue;
          }
          std::fill_n(dst, sz(lo), 0.0f);
          if (lo < hi) {  // the first value read, iw = start + lo·s, is inside the row: so is the pointer
            const float* src = example + (ih * g.in.width + start + lo * s) * c + ch;
            if (s * c == 1) std::copy(src, src + (hi - lo), dst + lo);  // one channel, stride 1: a run of the input row
            else
              for (std::int64_t j = lo; j < hi; ++j) dst[j] = src[(j - lo) * s * c];
          }
          std::fill_n(dst + hi, sz(seg - hi), 0.0f);
        }
      }
    }
    r += seg;
    o.advance(g, seg);
  }
}

// The reverse of gather_patches (col2im): each patch value added back to the input position it came
// from; the padding's share is dropped.
void scatter_patches(const conv_geometry& g, const float* patches, std::int64_t first, std::int64_t count, float* dx) {
  const std::int64_t c = g.in.channels, run = g.kernel_w * c;
  patch_origin o(g, first);
  for (std::int64_t r = 0; r < count; ++r, o.next(g)) {
    float* example = dx + o.example * g.in.size();
    const float* row = patches + r * g.patch();
    const bool whole_width = o.left >= 0 && o.left + g.kernel_w <= g.in.width;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t ih = o.top + kh;
      if (ih < 0 || ih >= g.in.height) continue;
      const float* src = row + kh * run;
      float* line = example + ih * g.in.width * c;
      if (whole_width) {
        add_run(src, run, line + o.left * c);
        continue;
      }
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const std::int64_t iw = o.left + kw;
        if (iw >= 0 && iw < g.in.width) add_run(src + kw * c, c, line + iw * c);
      }
    }
  }
}

}  // namespace

std::string shape_text(const tensor_shape& s) {
  if (s.positions() == 1) return std::to_string(s.channels);
  const std::string tail = std::to_string(s.width) + "×" + std::to_string(s.channels);
  return s.height == 1 ? tail : std::to_string(s.height) + "×" + tail;
}

result<conv_geometry> make_conv_geometry(const tensor_shape& in, std::int64_t out_channels, std::int64_t kernel, std::int64_t stride,
                                         padding_kind padding) {
  const bool two_d = in.height > 1;
  const std::string what = "a convolution of " + std::to_string(kernel) + (two_d ? "×" + std::to_string(kernel) : "") +
                           " kernels, stride " + std::to_string(stride) + ", on " + shape_text(in);
  if (in.height < 1 || in.width < 1 || in.channels < 1) return make_error(errc::invalid_spec, what + ": the input is empty");
  if (out_channels < 1) return make_error(errc::invalid_spec, what + ": needs at least one output channel");
  if (kernel < 1) return make_error(errc::invalid_spec, what + ": the kernel must be at least 1");
  if (stride != 1 && stride != 2) return make_error(errc::invalid_spec, what + ": the stride must be 1 or 2");
  if (padding == padding_kind::same && kernel % 2 == 0)
    return make_error(errc::invalid_spec, what + ": same padding needs an odd kernel (the zeros go evenly on both sides)");
  conv_geometry g;
  g.in = in;
  g.kernel_h = two_d ? kernel : 1;
  g.kernel_w = kernel;
  g.stride = stride;
  const std::int64_t pad = padding == padding_kind::same ? (kernel - 1) / 2 : 0;
  g.pad_h = two_d ? pad : 0;
  g.pad_w = pad;
  if (in.width + 2 * g.pad_w < g.kernel_w || in.height + 2 * g.pad_h < g.kernel_h)
    return make_error(errc::invalid_spec, what + ": the kernel is larger than the " + std::string(k_padding_names.name(padding)) +
                                              "-padded input");
  g.out = {.height = (in.height + 2 * g.pad_h - g.kernel_h) / stride + 1,
           .width = (in.width + 2 * g.pad_w - g.kernel_w) / stride + 1,
           .channels = out_channels};
  return g;
}

std::size_t conv_patch_floats(const conv_geometry& g, std::int64_t rows) noexcept {
  return sz(std::min(rows * g.out.positions(), k_conv_chunk_rows)) * sz(g.patch());
}

void conv_forward(const conv_geometry& g, std::span<const float> w, std::span<const float> b, const float* x, std::int64_t rows,
                  float* y, std::span<float> patches, float scale) {
  TESSERA_ASSERT(w.size() == sz(g.weights()) && b.size() == sz(g.out.channels));
  const std::int64_t total = rows * g.out.positions();
  TESSERA_ASSERT(patches.size() >= conv_patch_floats(g, rows));
  const const_matrix_map weights(w.data(), ix(g.out.channels), ix(g.patch()));
  const Eigen::Map<const Eigen::RowVectorXf> bias(b.data(), ix(g.out.channels));
  for (std::int64_t first = 0; first < total; first += k_conv_chunk_rows) {
    const std::int64_t count = std::min(k_conv_chunk_rows, total - first);
    matrix_map out(y + first * g.out.channels, ix(count), ix(g.out.channels));
    if (gather_transposed(g)) {
      gather_patches_transposed(g, x, first, count, patches.data());
      out.noalias() = const_matrix_map(patches.data(), ix(g.patch()), ix(count)).transpose() * weights.transpose();
    } else {
      gather_patches(g, x, first, count, patches.data());
      out.noalias() = const_matrix_map(patches.data(), ix(count), ix(g.patch())) * weights.transpose();
    }
    if (scale != 1.0f) out *= scale;
    out.rowwise() += bias;
  }
}

void conv_backward(const conv_geometry& g, std::span<const float> w, const float* x, const float* dy, std::int64_t rows,
                   std::span<float> dw, std::span<float> db, float* dx, std::span<float> patches, float scale, bool accumulate) {
  TESSERA_ASSERT(w.size() == sz(g.weights()) && dw.size() == w.size() && db.size() == sz(g.out.channels));
  const std::int64_t total = rows * g.out.positions();
  TESSERA_ASSERT(patches.size() >= conv_patch_floats(g, rows));
  const const_matrix_map weights(w.data(), ix(g.out.channels), ix(g.patch()));
  matrix_map grad_w(dw.data(), ix(g.out.channels), ix(g.patch()));
  Eigen::Map<Eigen::RowVectorXf> grad_b(db.data(), ix(g.out.channels));
  if (!accumulate) {
    grad_w.setZero();
    grad_b.setZero();
  }
  if (dx != nullptr) std::fill_n(dx, sz(rows * g.in.size()), 0.0f);
  for (std::int64_t first = 0; first < total; first += k_conv_chunk_rows) {
    const std::int64_t count = std::min(k_conv_chunk_rows, total - first);
    const const_matrix_map d_out(dy + first * g.out.channels, ix(count), ix(g.out.channels));
    add_column_sums(d_out.data(), count, g.out.channels, grad_b.data());
    if (dx == nullptr && gather_transposed(g)) {  // the first layer: no input gradient, the patches transposed
      gather_patches_transposed(g, x, first, count, patches.data());
      const const_matrix_map pt(patches.data(), ix(g.patch()), ix(count));
      scaled_product(grad_w, scale, d_out.transpose(), pt.transpose(), /*accumulate=*/true);
      continue;
    }
    gather_patches(g, x, first, count, patches.data());
    matrix_map p(patches.data(), ix(count), ix(g.patch()));
    scaled_product(grad_w, scale, d_out.transpose(), p, /*accumulate=*/true);
    if (dx == nullptr) continue;
    scaled_product(p, scale, d_out, weights, /*accumulate=*/false);  // the patches are spent: their buffer takes their gradient
    scatter_patches(g, patches.data(), first, count, dx);
  }
}

result<tensor_shape> max_pool_shape(const tensor_shape& in, std::int64_t size) {
  const bool two_d = in.height > 1;
  if (size < 2 || size > k_max_pool)
    return make_error(errc::invalid_spec, "max pooling over " + std::to_string(size) + " positions: the window must be 2 to " +
                                              std::to_string(k_max_pool));
  if (in.width < size || (two_d && in.height < size))
    return make_error(errc::invalid_spec, "max pooling over " + std::to_string(size) + (two_d ? "×" + std::to_string(size) : "") +
                                              " windows on " + shape_text(in) + ": the input is smaller than one window");
  return tensor_shape{.height = two_d ? in.height / size : 1, .width = in.width / size, .channels = in.channels};
}

namespace {

// One window position's values (window index k) against the best so far, every channel at once: a
// value takes over when larger, and a NaN takes over a number (so that a NaN anywhere in the window
// comes out, as in PyTorch; here the first NaN, where PyTorch's kernel keeps the last). Written as selects over whole rows, no conditional store:
// GCC compiles them without a branch per lane here (measured). The index is chosen before `held`
// changes.
void take_larger(const float* v, float k, std::int64_t channels, float* best, float* where) {
  const Eigen::Map<const Eigen::ArrayXf> candidate(v, ix(channels));
  Eigen::Map<Eigen::ArrayXf> held(best, ix(channels)), index(where, ix(channels));
  // "Not at most held" is true when larger or when either is NaN; a held NaN stays: two plain
  // comparisons, no isNaN() calls.
  const auto takes_over = !(candidate <= held) && (held == held);
  index = takes_over.select(k, index);
  held = takes_over.select(candidate, held);
}

// A float's rank as an int, for max pooling: the float's order (both zeros equal), NaN above all.
inline std::int32_t pool_rank(float x) noexcept {
  const auto b = std::bit_cast<std::int32_t>(x);
  const std::int32_t magnitude = b & 0x7fffffff;
  const std::int32_t ordered = b < 0 ? -magnitude : magnitude;
  return magnitude > 0x7f800000 ? std::numeric_limits<std::int32_t>::max() : ordered;
}

// A window of K positions (2 for a 1-D pool of 2, 4 for a 2×2 pool, the usual ones) in one pass, by the
// rule of take_larger: a position takes over when its rank is higher, so the first of equal maxima and
// the first NaN are kept. Compared as ints because GCC leaves float comparisons that must see NaN
// scalar, with a branch per value; as ints it vectorises them over the channels (x86-64 and AArch64).
// `at` holds each position's offset in the example.
template <int K>
void window_max(const std::array<const float*, 4>& at_ptr, const std::array<float, 4>& at, std::int64_t channels,
                float* __restrict best, float* __restrict where) {
  const float* __restrict p0 = at_ptr[0];
  const float* __restrict p1 = at_ptr[1];
  const float* __restrict p2 = at_ptr[K > 2 ? 2 : 0];
  const float* __restrict p3 = at_ptr[K > 2 ? 3 : 0];
  const auto n = static_cast<std::int32_t>(channels);
  for (std::int32_t ch = 0; ch < n; ++ch) {
    float held = p0[ch], index = at[0];
    std::int32_t rank = pool_rank(held);
    const auto take = [&](float candidate, float offset) {
      const std::int32_t r = pool_rank(candidate);
      const bool over = r > rank;
      held = over ? candidate : held;
      index = over ? offset : index;
      rank = over ? r : rank;
    };
    take(p1[ch], at[1]);
    if constexpr (K > 2) {
      take(p2[ch], at[2]);
      take(p3[ch], at[3]);
    }
    best[ch] = held;
    where[ch] = index + static_cast<float>(ch);
  }
}

}  // namespace

void max_pool_forward(const tensor_shape& in, std::int64_t size, const float* x, std::int64_t rows, float* y, float* argmax) {
  const bool two_d = in.height > 1;
  const tensor_shape out{.height = two_d ? in.height / size : 1, .width = in.width / size, .channels = in.channels};
  const std::int64_t size_h = two_d ? size : 1;
  const std::int64_t c = in.channels;
  TESSERA_ASSERT(size >= 2 && size <= k_max_pool);
  // Each window index's offset from the window's corner, as a float (exact: an example holds fewer than
  // 2^24 values): the last step turns indices into offsets without a division.
  std::array<float, k_max_pool * k_max_pool> relative{};
  for (std::int64_t k = 0; k < size_h * size; ++k) relative[sz(k)] = static_cast<float>(((k / size) * in.width + k % size) * c);
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* example = x + n * in.size();
    for (std::int64_t oh = 0; oh < out.height; ++oh) {
      for (std::int64_t ow = 0; ow < out.width; ++ow) {
        const std::int64_t at = (n * out.positions() + oh * out.width + ow) * c;
        float* best = y + at;
        float* where = argmax + at;
        // The window's positions in order, every channel at once: the first of equal maxima takes the
        // gradient, as in PyTorch. `where` holds the window index, then the offset in the example.
        const auto offset = [&](std::int64_t kh, std::int64_t kw) { return ((oh * size_h + kh) * in.width + ow * size + kw) * c; };
        if (size_h * size == 2 || size_h * size == 4) {
          std::array<const float*, 4> ptr{};
          std::array<float, 4> at_offset{};
          for (std::int64_t k = 0; k < size_h * size; ++k) {
            const std::int64_t o = offset(k / size, k % size);
            ptr[sz(k)] = example + o;
            at_offset[sz(k)] = static_cast<float>(o);
          }
          if (size_h * size == 2) window_max<2>(ptr, at_offset, c, best, where);
          else window_max<4>(ptr, at_offset, c, best, where);
          continue;
        }
        std::copy_n(example + offset(0, 0), sz(c), best);
        std::fill_n(where, sz(c), 0.0f);
        for (std::int64_t k = 1; k < size_h * size; ++k) take_larger(example + offset(k / size, k % size), static_cast<float>(k), c, best, where);
        const auto corner = static_cast<float>(offset(0, 0));
        for (std::int64_t ch = 0; ch < c; ++ch) where[ch] = corner + static_cast<float>(ch) + relative[static_cast<std::size_t>(where[ch])];
      }
    }
  }
}

void max_pool_backward(const tensor_shape& in, std::int64_t size, const float* dy, std::int64_t rows, const float* argmax, float* dx) {
  const bool two_d = in.height > 1;
  const std::int64_t out_size = (two_d ? in.height / size : 1) * (in.width / size) * in.channels;
  std::fill_n(dx, sz(rows * in.size()), 0.0f);
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t i = 0; i < out_size; ++i) dx[n * in.size() + static_cast<std::int64_t>(argmax[n * out_size + i])] += dy[n * out_size + i];
}

// Written as plain loops: Eigen's partial reductions and row broadcasts may evaluate into heap
// temporaries, and a training step must not allocate.
void global_avg_pool_forward(const tensor_shape& in, const float* x, std::int64_t rows, float* y) {
  const float inv = 1.0f / static_cast<float>(in.positions());
  for (std::int64_t n = 0; n < rows; ++n) {
    float* out = y + n * in.channels;
    std::fill_n(out, sz(in.channels), 0.0f);
    for (std::int64_t p = 0; p < in.positions(); ++p) {
      const float* row = x + n * in.size() + p * in.channels;
      for (std::int64_t c = 0; c < in.channels; ++c) out[c] += row[c];
    }
    for (std::int64_t c = 0; c < in.channels; ++c) out[c] *= inv;
  }
}

void global_avg_pool_backward(const tensor_shape& in, const float* dy, std::int64_t rows, float* dx) {
  const float inv = 1.0f / static_cast<float>(in.positions());
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t p = 0; p < in.positions(); ++p)
      for (std::int64_t c = 0; c < in.channels; ++c) dx[n * in.size() + p * in.channels + c] = dy[n * in.channels + c] * inv;
}

}  // namespace tessera::core
