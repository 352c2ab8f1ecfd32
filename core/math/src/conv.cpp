#include "tessera/core/math/conv.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include <Eigen/Core>

#include "eigen_views.hpp"

namespace tessera::core {
namespace {

using namespace detail;

// Where output position `pos` (counted over the batch) reads its patch: its example and top-left corner.
struct patch_origin {
  std::int64_t example, top, left;
};
patch_origin origin_of(const conv_geometry& g, std::int64_t pos) noexcept {
  const std::int64_t per_example = g.out.positions();
  const std::int64_t q = pos % per_example;
  return {pos / per_example, (q / g.out.width) * g.stride - g.pad_h, (q % g.out.width) * g.stride - g.pad_w};
}

// The patches of output positions [first, first + count), one row each (im2col); zeros where the
// kernel reaches into the padding.
void gather_patches(const conv_geometry& g, const float* x, std::int64_t first, std::int64_t count, float* patches) {
  const std::size_t c = sz(g.in.channels);
  for (std::int64_t r = 0; r < count; ++r) {
    const patch_origin o = origin_of(g, first + r);
    const float* example = x + o.example * g.in.size();
    float* row = patches + r * g.patch();
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t ih = o.top + kh;
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const std::int64_t iw = o.left + kw;
        float* dst = row + (kh * g.kernel_w + kw) * g.in.channels;
        if (ih < 0 || ih >= g.in.height || iw < 0 || iw >= g.in.width) std::fill_n(dst, c, 0.0f);
        else std::memcpy(dst, example + (ih * g.in.width + iw) * g.in.channels, c * sizeof(float));
      }
    }
  }
}

// The reverse of gather_patches (col2im): each patch value added back to the input position it came
// from; the padding's share is dropped.
void scatter_patches(const conv_geometry& g, const float* patches, std::int64_t first, std::int64_t count, float* dx) {
  for (std::int64_t r = 0; r < count; ++r) {
    const patch_origin o = origin_of(g, first + r);
    float* example = dx + o.example * g.in.size();
    const float* row = patches + r * g.patch();
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t ih = o.top + kh;
      if (ih < 0 || ih >= g.in.height) continue;
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const std::int64_t iw = o.left + kw;
        if (iw < 0 || iw >= g.in.width) continue;
        const float* src = row + (kh * g.kernel_w + kw) * g.in.channels;
        float* dst = example + (ih * g.in.width + iw) * g.in.channels;
        for (std::int64_t ch = 0; ch < g.in.channels; ++ch) dst[ch] += src[ch];
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
    gather_patches(g, x, first, count, patches.data());
    const const_matrix_map p(patches.data(), ix(count), ix(g.patch()));
    matrix_map out(y + first * g.out.channels, ix(count), ix(g.out.channels));
    out.noalias() = p * weights.transpose();
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
    grad_b += d_out.colwise().sum();
    gather_patches(g, x, first, count, patches.data());
    matrix_map p(patches.data(), ix(count), ix(g.patch()));
    if (scale != 1.0f) grad_w.noalias() += (scale * d_out.transpose()) * p;
    else grad_w.noalias() += d_out.transpose() * p;
    if (dx == nullptr) continue;
    if (scale != 1.0f) p.noalias() = (scale * d_out) * weights;  // the patches are spent: their buffer takes their gradient
    else p.noalias() = d_out * weights;
    scatter_patches(g, patches.data(), first, count, dx);
  }
}

result<tensor_shape> max_pool_shape(const tensor_shape& in, std::int64_t size) {
  const bool two_d = in.height > 1;
  if (size < 2)
    return make_error(errc::invalid_spec, "max pooling over " + std::to_string(size) + " positions: the window must be at least 2");
  if (in.width < size || (two_d && in.height < size))
    return make_error(errc::invalid_spec, "max pooling over " + std::to_string(size) + (two_d ? "×" + std::to_string(size) : "") +
                                              " windows on " + shape_text(in) + ": the input is smaller than one window");
  return tensor_shape{.height = two_d ? in.height / size : 1, .width = in.width / size, .channels = in.channels};
}

void max_pool_forward(const tensor_shape& in, std::int64_t size, const float* x, std::int64_t rows, float* y, float* argmax) {
  const bool two_d = in.height > 1;
  const tensor_shape out{.height = two_d ? in.height / size : 1, .width = in.width / size, .channels = in.channels};
  const std::int64_t size_h = two_d ? size : 1;
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* example = x + n * in.size();
    for (std::int64_t oh = 0; oh < out.height; ++oh) {
      for (std::int64_t ow = 0; ow < out.width; ++ow) {
        const std::int64_t at = (n * out.positions() + oh * out.width + ow) * out.channels;
        for (std::int64_t c = 0; c < in.channels; ++c) {
          float best = -std::numeric_limits<float>::infinity();
          std::int64_t where = ((oh * size_h) * in.width + ow * size) * in.channels + c;
          for (std::int64_t kh = 0; kh < size_h; ++kh) {
            for (std::int64_t kw = 0; kw < size; ++kw) {
              const std::int64_t offset = ((oh * size_h + kh) * in.width + ow * size + kw) * in.channels + c;
              if (example[offset] > best) {  // the first of equal maxima takes the gradient, as in PyTorch
                best = example[offset];
                where = offset;
              }
            }
          }
          y[at + c] = best;
          argmax[at + c] = static_cast<float>(where);
        }
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
