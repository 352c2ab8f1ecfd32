// tessera/core/math/conv.hpp — convolution and pooling over a batch, channels-last, with no allocation.
//
// The kernels the convolutional networks are built of (DESIGN.md §2): a 2-D convolution (a 1-D one is
// the same with height 1), max pooling and global average pooling, forward and backward. Tensors are
// channels-last: an example is height × width × channels floats (a 1-D sequence: steps × channels),
// a batch is examples one after another. Weights are out_c rows of kernel_h × kernel_w × in_c (OHWI),
// so a convolution is a matrix product of its weights with the input's patches (im2col), done
// `k_conv_chunk_rows` output positions at a time in a patch buffer the caller owns (conv_patch_floats):
// the buffer stays small whatever the batch, and the product runs on Eigen's kernels. Export to the
// usual OIHW layout is a transpose (core/io).
//
//   auto g = core::make_conv_geometry({.height = 28, .width = 28, .channels = 1}, 32, 3, 1, core::padding_kind::same);
//   std::vector<float> patches(core::conv_patch_floats(g.value(), rows));
//   core::conv_forward(g.value(), w, b, x, rows, y, patches);            // y: rows × out_size()
//   core::conv_backward(g.value(), w, x, dy, rows, dw, db, dx, patches); // dx may be null (first layer)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"

namespace tessera::core {

// "same" pads (kernel − 1) / 2 zeros on each side (odd kernels), so stride 1 keeps the size and stride
// 2 halves it, rounding up; "valid" pads nothing.
enum class padding_kind { same, valid };
inline constexpr auto k_padding_names = names_in_order<padding_kind>({"same", "valid"});

// One example's shape, channels-last. A 1-D sequence has height 1.
struct tensor_shape {
  std::int64_t height = 1;
  std::int64_t width = 1;
  std::int64_t channels = 1;
  [[nodiscard]] std::int64_t size() const noexcept { return height * width * channels; }
  [[nodiscard]] std::int64_t positions() const noexcept { return height * width; }
  [[nodiscard]] bool operator==(const tensor_shape&) const = default;
};
// "28×28×32", "28×32" for a sequence (height 1), "784" for a flat input.
[[nodiscard]] std::string shape_text(const tensor_shape& s);

struct conv_geometry {
  tensor_shape in;
  tensor_shape out;
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride = 1;
  std::int64_t pad_h = 0, pad_w = 0;  // zeros before the first row / column (and as many after)

  [[nodiscard]] std::int64_t patch() const noexcept { return kernel_h * kernel_w * in.channels; }  // one weight row
  [[nodiscard]] std::int64_t weights() const noexcept { return out.channels * patch(); }
};

// The geometry of a convolution of `in` with `out_channels` kernels of size `kernel` (square in 2-D;
// along the sequence when in.height is 1). Errors name both shapes: a kernel larger than the padded
// input, an even kernel with same padding, a stride other than 1 or 2.
[[nodiscard]] result<conv_geometry> make_conv_geometry(const tensor_shape& in, std::int64_t out_channels, std::int64_t kernel,
                                                       std::int64_t stride, padding_kind padding);

// Output positions a patch buffer holds at once, and the buffer's floats for a batch of `rows`.
inline constexpr std::int64_t k_conv_chunk_rows = 256;
[[nodiscard]] std::size_t conv_patch_floats(const conv_geometry& g, std::int64_t rows) noexcept;

// y = x ∗ w + b (rows examples; y: rows × out.size()). `scale` multiplies the input (a narrow subnet's
// compensation, as for dense layers).
void conv_forward(const conv_geometry& g, std::span<const float> w, std::span<const float> b, const float* x, std::int64_t rows,
                  float* y, std::span<float> patches, float scale = 1.0f);
// From dy (rows × out.size()): dw and db overwritten with the batch's sums (added to them with
// `accumulate`: a momentum buffer), dx (if not null) overwritten with the input's gradient. `scale` as
// in the forward pass.
void conv_backward(const conv_geometry& g, std::span<const float> w, const float* x, const float* dy, std::int64_t rows,
                   std::span<float> dw, std::span<float> db, float* dx, std::span<float> patches, float scale = 1.0f,
                   bool accumulate = false);

// Max pooling over size × size windows (along the sequence alone when in.height is 1), stride = size,
// no padding (a last partial window is dropped). `argmax` (rows × out.size()) records each maximum's
// offset in the example for the backward pass, as a float (exact: an example holds fewer than 2^24
// values, layers.hpp) so that it lives in the float workspace. The first of equal maxima takes it, as in
// PyTorch, and a NaN in a window is its output, as in PyTorch; the first NaN takes the gradient, where
// PyTorch's kernel gives it to the last (a difference only between NaNs).
inline constexpr std::int64_t k_max_pool = 8;  // the largest window
[[nodiscard]] result<tensor_shape> max_pool_shape(const tensor_shape& in, std::int64_t size);
void max_pool_forward(const tensor_shape& in, std::int64_t size, const float* x, std::int64_t rows, float* y, float* argmax);
// dx overwritten: each dy goes to its window's maximum.
void max_pool_backward(const tensor_shape& in, std::int64_t size, const float* dy, std::int64_t rows, const float* argmax, float* dx);

// The mean of each channel over the positions: rows × in.channels.
void global_avg_pool_forward(const tensor_shape& in, const float* x, std::int64_t rows, float* y);
void global_avg_pool_backward(const tensor_shape& in, const float* dy, std::int64_t rows, float* dx);

}  // namespace tessera::core
