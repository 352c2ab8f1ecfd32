// Tests of tessera/core/math/conv.hpp: each kernel against a direct computation in double, the
// geometry's shapes and errors.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/conv.hpp"

using namespace tessera;

namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  core::rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.uniform() * 2.0 - 1.0);
  return v;
}

// The input value the kernel tap (kh, kw) of output (oh, ow) reads, or nullopt in the padding.
struct direct {
  const core::conv_geometry& g;
  const std::vector<float>& x;
  [[nodiscard]] const float* at(std::int64_t n, std::int64_t oh, std::int64_t ow, std::int64_t kh, std::int64_t kw) const {
    const std::int64_t ih = oh * g.stride + kh - g.pad_h, iw = ow * g.stride + kw - g.pad_w;
    if (ih < 0 || ih >= g.in.height || iw < 0 || iw >= g.in.width) return nullptr;
    return x.data() + n * g.in.size() + (ih * g.in.width + iw) * g.in.channels;
  }
};

// Forward and backward of one geometry against the definition, summed in double.
void check_against_definition(const core::conv_geometry& g, std::int64_t rows, float scale) {
  const auto x = random_values(static_cast<std::size_t>(rows * g.in.size()), 1);
  const auto w = random_values(static_cast<std::size_t>(g.weights()), 2);
  const auto b = random_values(static_cast<std::size_t>(g.out.channels), 3);
  const auto dy = random_values(static_cast<std::size_t>(rows * g.out.size()), 4);
  std::vector<float> patches(core::conv_patch_floats(g, rows)), y(static_cast<std::size_t>(rows * g.out.size()));
  core::conv_forward(g, w, b, x.data(), rows, y.data(), patches, scale);
  std::vector<float> dw(w.size()), db(b.size()), dx(x.size());
  core::conv_backward(g, w, x.data(), dy.data(), rows, dw, db, dx.data(), patches, scale);
  // A first layer's backward pass: no input gradient (and, with few channels, its patches gathered
  // another way); the weights' gradient is the same.
  std::vector<float> dw_first(w.size()), db_first(b.size());
  core::conv_backward(g, w, x.data(), dy.data(), rows, dw_first, db_first, nullptr, patches, scale);

  std::vector<double> want_y(y.size()), want_dw(w.size()), want_db(b.size()), want_dx(x.size());
  const direct d{g, x};
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t oh = 0; oh < g.out.height; ++oh)
      for (std::int64_t ow = 0; ow < g.out.width; ++ow)
        for (std::int64_t oc = 0; oc < g.out.channels; ++oc) {
          const std::size_t o = static_cast<std::size_t>(((n * g.out.height + oh) * g.out.width + ow) * g.out.channels + oc);
          double sum = 0;
          for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
            for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
              const float* in = d.at(n, oh, ow, kh, kw);
              if (in == nullptr) continue;
              for (std::int64_t ic = 0; ic < g.in.channels; ++ic) {
                const std::size_t wi = static_cast<std::size_t>(((oc * g.kernel_h + kh) * g.kernel_w + kw) * g.in.channels + ic);
                sum += static_cast<double>(w[wi]) * in[ic];
                want_dw[wi] += static_cast<double>(dy[o]) * in[ic] * scale;
                want_dx[static_cast<std::size_t>(in + ic - x.data())] += static_cast<double>(dy[o]) * w[wi] * scale;
              }
            }
          want_y[o] = sum * scale + b[static_cast<std::size_t>(oc)];
          want_db[static_cast<std::size_t>(oc)] += dy[o];
        }
  const auto near = [](const std::vector<float>& got, const std::vector<double>& want, const char* what) {
    INFO(what);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1.0));
    }
  };
  near(y, want_y, "y");
  near(dw, want_dw, "dw");
  near(db, want_db, "db");
  near(dx, want_dx, "dx");
  near(dw_first, want_dw, "dw without dx");
  near(db_first, want_db, "db without dx");
}

}  // namespace

TEST_CASE("conv: 2-D and 1-D convolutions, forward and backward, equal their definition") {
  struct case_t {
    core::tensor_shape in;
    std::int64_t out_c, kernel, stride;
    core::padding_kind padding;
    std::int64_t rows;
    float scale;
  };
  const std::vector<case_t> cases = {
      {{.height = 6, .width = 5, .channels = 3}, 4, 3, 1, core::padding_kind::same, 2, 1.0f},
      {{.height = 7, .width = 7, .channels = 2}, 3, 3, 2, core::padding_kind::same, 2, 1.0f},   // odd size, stride 2
      {{.height = 8, .width = 6, .channels = 2}, 5, 5, 2, core::padding_kind::valid, 3, 0.5f},  // a scaled subnet's layer
      {{.height = 1, .width = 11, .channels = 4}, 6, 3, 1, core::padding_kind::same, 3, 1.0f},  // 1-D
      {{.height = 1, .width = 12, .channels = 3}, 2, 4, 2, core::padding_kind::valid, 2, 1.0f}, // 1-D, even kernel
      // 3 × 12 × 12 = 432 output positions: the patch buffer's chunks of 256 cross an example's boundary.
      {{.height = 12, .width = 12, .channels = 2}, 3, 3, 1, core::padding_kind::same, 3, 2.0f},
      // One channel (an image's first layer), its patches gathered transposed: stride 1 and 2, valid
      // padding with a kernel of 5; and 5 channels, gathered row by row.
      {{.height = 28, .width = 28, .channels = 1}, 4, 3, 1, core::padding_kind::same, 2, 1.0f},
      {{.height = 9, .width = 11, .channels = 1}, 3, 3, 2, core::padding_kind::same, 3, 1.0f},
      {{.height = 9, .width = 10, .channels = 1}, 2, 5, 2, core::padding_kind::valid, 2, 1.0f},
      {{.height = 1, .width = 13, .channels = 1}, 3, 5, 2, core::padding_kind::same, 2, 1.0f},
      {{.height = 5, .width = 6, .channels = 5}, 3, 3, 1, core::padding_kind::same, 2, 1.0f},
      // One channel at stride 2 over 2 examples of 14 × 14 outputs: the chunk at 256 starts mid-row.
      {{.height = 28, .width = 28, .channels = 1}, 2, 3, 2, core::padding_kind::same, 2, 1.0f},
  };
  for (const auto& c : cases) {
    auto g = core::make_conv_geometry(c.in, c.out_c, c.kernel, c.stride, c.padding);
    REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.error().message));
    CAPTURE(core::shape_text(c.in));
    CAPTURE(core::shape_text(g.value().out));
    check_against_definition(g.value(), c.rows, c.scale);
  }
}

TEST_CASE("conv: output shapes follow the padding and the stride; impossible ones are refused naming both shapes") {
  const auto out = [](core::tensor_shape in, std::int64_t k, std::int64_t s, core::padding_kind p) {
    auto g = core::make_conv_geometry(in, 8, k, s, p);
    REQUIRE(g.ok());
    return g.value().out;
  };
  CHECK(out({.height = 28, .width = 28, .channels = 1}, 3, 1, core::padding_kind::same) == core::tensor_shape{28, 28, 8});
  CHECK(out({.height = 28, .width = 28, .channels = 1}, 3, 2, core::padding_kind::same) == core::tensor_shape{14, 14, 8});
  CHECK(out({.height = 7, .width = 7, .channels = 1}, 3, 2, core::padding_kind::same) == core::tensor_shape{4, 4, 8});
  CHECK(out({.height = 28, .width = 28, .channels = 1}, 5, 1, core::padding_kind::valid) == core::tensor_shape{24, 24, 8});
  CHECK(out({.height = 1, .width = 28, .channels = 28}, 3, 2, core::padding_kind::valid) == core::tensor_shape{1, 13, 8});

  const auto refused = [](core::tensor_shape in, std::int64_t k, std::int64_t s, core::padding_kind p) {
    auto g = core::make_conv_geometry(in, 8, k, s, p);
    REQUIRE_FALSE(g.ok());
    return g.error().message;
  };
  CHECK(refused({.height = 4, .width = 4, .channels = 2}, 5, 1, core::padding_kind::valid) ==
        "a convolution of 5×5 kernels, stride 1, on 4×4×2: the kernel is larger than the valid-padded input");
  CHECK(refused({.height = 1, .width = 9, .channels = 2}, 4, 1, core::padding_kind::same) ==
        "a convolution of 4 kernels, stride 1, on 9×2: same padding needs an odd kernel (the zeros go evenly on both sides)");
  CHECK(refused({.height = 8, .width = 8, .channels = 2}, 3, 3, core::padding_kind::same).ends_with(": the stride must be 1 or 2"));
}

TEST_CASE("conv: max pooling takes each window's first maximum and sends the gradient there; 1-D pools along the sequence") {
  // One example, 4×4×2: channel 0 counts 0..15, channel 1 is 1 everywhere (ties: the first position wins).
  core::tensor_shape in{.height = 4, .width = 4, .channels = 2};
  std::vector<float> x(32);
  for (int p = 0; p < 16; ++p) {
    x[static_cast<std::size_t>(2 * p)] = static_cast<float>(p);
    x[static_cast<std::size_t>(2 * p + 1)] = 1.0f;
  }
  auto shape = core::max_pool_shape(in, 2);
  REQUIRE(shape.ok());
  CHECK(shape.value() == core::tensor_shape{2, 2, 2});
  std::vector<float> y(8);
  std::vector<float> argmax(8);
  core::max_pool_forward(in, 2, x.data(), 1, y.data(), argmax.data());
  CHECK(y == std::vector<float>{5, 1, 7, 1, 13, 1, 15, 1});
  CHECK(argmax == std::vector<float>{10, 1, 14, 5, 26, 17, 30, 21});
  std::vector<float> dx(32);
  core::max_pool_backward(in, 2, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}.data(), 1, argmax.data(), dx.data());
  std::vector<float> want(32, 0.0f);
  for (std::size_t i = 0; i < 8; ++i) want[static_cast<std::size_t>(argmax[i])] = static_cast<float>(i + 1);
  CHECK(dx == want);

  // A sequence of 5 steps, pooled by 2: the fifth step is dropped.
  core::tensor_shape seq{.height = 1, .width = 5, .channels = 1};
  REQUIRE(core::max_pool_shape(seq, 2).ok());
  CHECK(core::max_pool_shape(seq, 2).value() == core::tensor_shape{1, 2, 1});
  std::vector<float> s{3, -1, 0, 4, 9}, sy(2);
  std::vector<float> sa(2);
  core::max_pool_forward(seq, 2, s.data(), 1, sy.data(), sa.data());
  CHECK(sy == std::vector<float>{3, 4});
  CHECK(sa == std::vector<float>{0, 3});
  CHECK_FALSE(core::max_pool_shape(seq, 6).ok());
  CHECK(core::max_pool_shape(seq, 6).error().message == "max pooling over 6 windows on 5×1: the input is smaller than one window");
  CHECK(core::max_pool_shape({.height = 16, .width = 16, .channels = 1}, 9).error().message ==
        "max pooling over 9 positions: the window must be 2 to 8");

  // A NaN anywhere in a window is the window's output, as in PyTorch (the first NaN takes the gradient;
  // PyTorch's kernel gives it to the last).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  core::tensor_shape pairs{.height = 1, .width = 8, .channels = 1};
  std::vector<float> n{nan, 5, 5, nan, nan, nan, 2, 3}, ny(4), na(4);
  core::max_pool_forward(pairs, 2, n.data(), 1, ny.data(), na.data());
  CHECK(std::isnan(ny[0]));
  CHECK(std::isnan(ny[1]));
  CHECK(std::isnan(ny[2]));
  CHECK(ny[3] == 3);
  CHECK(na == std::vector<float>{0, 3, 4, 7});
}

// The usual windows (2×2, and 2 along a sequence) take a vectorised path that ranks floats as ints; every
// window size must give what the rule says, for every value a float can hold: ties (the first wins, also
// -0 against +0), infinities, and NaNs of either sign (the first NaN wins over any number).
TEST_CASE("conv: max pooling of every window size agrees with the rule on ties, zeros, infinities and NaNs") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special{0.0f, -0.0f, 1.0f, -1.0f, 1.0f, inf, -inf, nan, -nan, 3.5f, -2.0f, 1e-40f, -1e-40f};
  core::rng r(13);
  for (const std::int64_t size : {2, 3, 4}) {
    for (const bool two_d : {true, false}) {
      const core::tensor_shape in{.height = two_d ? 2 * size : 1, .width = 3 * size, .channels = 11};
      std::vector<float> x(static_cast<std::size_t>(2 * in.size()));
      for (auto& v : x) v = r.below(3) == 0 ? special[r.below(special.size())] : static_cast<float>(r.below(5)) - 2.0f;
      const std::int64_t out_h = two_d ? 2 : 1, out_w = 3, size_h = two_d ? size : 1;
      const std::size_t outs = static_cast<std::size_t>(2 * out_h * out_w * in.channels);
      std::vector<float> y(outs), where(outs);
      core::max_pool_forward(in, size, x.data(), 2, y.data(), where.data());
      std::size_t at = 0;
      for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t oh = 0; oh < out_h; ++oh)
          for (std::int64_t ow = 0; ow < out_w; ++ow)
            for (std::int64_t c = 0; c < in.channels; ++c, ++at) {
              std::int64_t best = -1;
              for (std::int64_t kh = 0; kh < size_h; ++kh)
                for (std::int64_t kw = 0; kw < size; ++kw) {
                  const std::int64_t i = ((oh * size_h + kh) * in.width + ow * size + kw) * in.channels + c;
                  const float v = x[static_cast<std::size_t>(n * in.size() + i)];
                  const float held = best < 0 ? 0.0f : x[static_cast<std::size_t>(n * in.size() + best)];
                  if (best < 0 || (!(v <= held) && held == held)) best = i;
                }
              INFO("size ", size, two_d ? " 2-D" : " 1-D", ", output ", at);
              CHECK(where[at] == static_cast<float>(best));
              const float want = x[static_cast<std::size_t>(n * in.size() + best)];
              CHECK(std::bit_cast<std::uint32_t>(y[at]) == std::bit_cast<std::uint32_t>(want));
            }
    }
  }
}

TEST_CASE("conv: global average pooling is each channel's mean, and spreads its gradient evenly") {
  core::tensor_shape in{.height = 2, .width = 2, .channels = 3};
  std::vector<float> x(24);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  std::vector<float> y(6);
  core::global_avg_pool_forward(in, x.data(), 2, y.data());
  CHECK(y == std::vector<float>{4.5f, 5.5f, 6.5f, 16.5f, 17.5f, 18.5f});
  std::vector<float> dx(24);
  core::global_avg_pool_backward(in, std::vector<float>{4, 8, 12, 0, 0, 4}.data(), 2, dx.data());
  CHECK(dx[0] == 1.0f);
  CHECK(dx[1] == 2.0f);
  CHECK(dx[2] == 3.0f);
  CHECK(dx[9] == 1.0f);
  CHECK(dx[23] == 1.0f);
  CHECK(dx[12] == 0.0f);
}
