// Tests of frozen layers held encoded (mlp_arch::frozen_codec f16 or q8; core/math/src/frozen.cpp):
// the passes against a network holding the same decoded values in f32, the memory they save, a
// device's round with them, and blobs a hostile hub could send.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/optimizer.hpp"
#include "tessera/core/train/device_round.hpp"
#include "tessera/core/train/training_block.hpp"
#include "test_archs.hpp"

using namespace tessera;
using namespace tessera::core;

namespace {

std::vector<float> held_values(std::size_t n, std::uint64_t seed) {
  rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = (r.uniform() * 2.0f - 1.0f) * 0.5f;
  return v;
}

// A dense layer of 70 units: eight whole blocks of rows and a part of one.
mlp_arch held_dense_arch() {
  return {.widths = {20, 70, 9, 3}, .task = task_kind::classification, .layer_norm = true, .input_scale = {1.0f, 2.0f, 1.5f}};
}

// The subnet's frozen blob (the start of its download) and its parameters as a device holding them
// computes with: the frozen layers decoded, the others as they are.
struct held_model {
  std::vector<std::byte> download;
  std::vector<float> decoded;
};
held_model held_download(const mlp_arch& a, std::span<const float> params) {
  held_model m{.download = std::vector<std::byte>(encoded_bytes(a, codec_kind::f32)), .decoded = {params.begin(), params.end()}};
  REQUIRE(encode(a, codec_kind::f32, params, m.download).ok());
  REQUIRE(round_frozen(a, m.decoded).ok());
  return m;
}

void check_close(std::span<const float> got, std::span<const float> want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(std::fabs(got[i] - want[i]) <= 2e-5f * (1.0f + std::fabs(want[i])));
  }
}

}  // namespace

TEST_CASE("compact frozen layers: the passes equal a network holding their decoded values in f32") {
  for (const mlp_arch& arch : {held_dense_arch(), testing::small_image_arch(true, 40), testing::small_image_arch(false, 40)}) {
    for (const codec_kind held : {codec_kind::f16, codec_kind::q8}) {
      for (std::int64_t frozen = 1; frozen < static_cast<std::int64_t>(arch.layer_count()); ++frozen) {
        CAPTURE(arch.widths.size());
        CAPTURE(to_string(held));
        CAPTURE(frozen);
        mlp_arch a = arch;
        a.frozen = frozen;
        a.frozen_codec = held;
        REQUIRE(compact_frozen(a));
        mlp_arch plain = a;
        plain.frozen_codec = codec_kind::f32;
        const auto start = held_values(param_count(a), 5);
        const held_model m = held_download(a, start);
        // The held values differ from the originals (they were rounded), the trained ones do not.
        const network ref(plain);
        const std::size_t off = ref.trained_offset();
        CHECK_FALSE(std::equal(start.begin(), start.begin() + static_cast<std::ptrdiff_t>(off), m.decoded.begin()));
        CHECK(std::equal(start.begin() + static_cast<std::ptrdiff_t>(off), start.end(), m.decoded.begin() + static_cast<std::ptrdiff_t>(off)));
        std::vector<float> scratch(frozen_scratch_floats(a));
        const network net(a, {.blob = std::span(m.download).first(frozen_bytes(a)), .scratch = scratch});
        CHECK(net.held_count() == net.trained_count());
        const std::int64_t rows = 5;
        const auto x = held_values(static_cast<std::size_t>(rows * a.inputs()), 6);
        std::vector<float> y(static_cast<std::size_t>(rows));
        for (std::size_t r = 0; r < y.size(); ++r) y[r] = static_cast<float>(r % 3);
        std::vector<float> ws(ref.workspace_floats(rows)), g_ref(ref.trained_count()), g(net.trained_count());
        REQUIRE(ref.forward_backward(m.decoded, g_ref, x.data(), y.data(), rows, ws).ok());
        const auto out_ref = std::vector<float>(ref.outputs(ws, rows).begin(), ref.outputs(ws, rows).end());
        const std::vector<float> trained(m.decoded.begin() + static_cast<std::ptrdiff_t>(off), m.decoded.end());
        REQUIRE(net.forward_backward(trained, g, x.data(), y.data(), rows, ws).ok());
        check_close(net.outputs(ws, rows), out_ref);
        check_close(g, g_ref);
        // A step moves the trained parameters as the plain network's step does; the blob is read only.
        const sgd_options sgd{.learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f};
        std::vector<float> p_ref = m.decoded, v_ref(ref.trained_count()), p = trained, v(net.trained_count());
        sgd_prepare_start(sgd, std::span<const float>(p_ref).subspan(off), v_ref);
        sgd_prepare_start(sgd, p, v);
        REQUIRE(ref.train_step(p_ref, {}, v_ref, sgd, x.data(), y.data(), rows, ws).ok());
        REQUIRE(net.train_step(p, {}, v, sgd, x.data(), y.data(), rows, ws).ok());
        check_close(p, std::span<const float>(p_ref).subspan(off));
      }
    }
  }
}

TEST_CASE("compact frozen layers: the arena holds them encoded, in a quarter (q8) or a half (f16) of their f32 bytes") {
  mlp_arch a{.widths = {784, 256, 64, 10}, .task = task_kind::classification, .layer_norm = true, .input_scale = {1, 1, 1}};
  a.frozen = 1;
  const training_memory f32 = plan_training_memory(a, 32, true, codec_kind::f32);
  const std::size_t frozen_f32 = 4 * (784 * 256 + 3 * 256);
  for (const codec_kind held : {codec_kind::f16, codec_kind::q8}) {
    CAPTURE(to_string(held));
    a.frozen_codec = held;
    const training_memory m = plan_training_memory(a, 32, true, codec_kind::f32);
    CHECK(m.frozen_bytes == frozen_bytes(a));
    CHECK(m.frozen_bytes == (held == codec_kind::f16 ? frozen_f32 / 2 : 784 * 256 + 3 * 256 + 4 * (256 + 3)));
    CHECK(m.params_bytes == 4 * (param_count(a) - trained_offset(a)));
    CHECK(m.scratch_bytes == 4 * (8 * 784 + 3 * 256));
    // Their product packs a block of 8 columns, not the layer's 256, and has no backward products.
    CHECK(m.stack_bytes < f32.stack_bytes);
    // The download is one span: the frozen blob ends where the parameters begin.
    CHECK(m.frozen + m.frozen_bytes == m.params);
    CHECK(m.needed() + frozen_f32 - m.frozen_bytes - m.scratch_bytes - k_arena_alignment <= f32.needed());
    CHECK(encoded_bytes(a, codec_kind::q8) == m.frozen_bytes + update_bytes(a, codec_kind::q8));
    const training_memory q = plan_training_memory(a, 32, true, codec_kind::q8);
    CHECK(q.frozen + q.frozen_bytes == q.staging);
    CHECK(q.staging_bytes == update_bytes(a, codec_kind::q8));
  }
}

TEST_CASE("compact frozen layers: a device's round takes them from the download, trains the rest and sends only it") {
  mlp_arch a = held_dense_arch();
  a.frozen = 1;
  a.frozen_codec = codec_kind::q8;
  const auto start = held_values(param_count(a), 9);
  for (const codec_kind codec : {codec_kind::f32, codec_kind::f16}) {
    CAPTURE(to_string(codec));
    auto block = training_block::allocate(plan_training_memory(a, 8, true, codec));
    REQUIRE(block.ok());
    std::vector<std::byte> download(encoded_bytes(a, codec));
    REQUIRE(encode(a, codec, start, download).ok());
    const std::span<std::byte> blob = blob_region(block.value(), codec, download.size());
    std::memcpy(blob.data(), download.data(), download.size());
    REQUIRE(take_download(block.value(), a, codec, blob).ok());
    // What the device trains from is what the hub's decode of the same blob gives.
    std::vector<float> decoded(param_count(a));
    REQUIRE(decode(a, codec, download, decoded).ok());
    const std::size_t off = trained_offset(a);
    CHECK(std::equal(block.value().params().begin(), block.value().params().end(), decoded.begin() + static_cast<std::ptrdiff_t>(off)));
    std::vector<float> labels(64);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 3);
    memory_table table(20, held_values(64 * 20, 10), std::move(labels), "held");
    table_batches batches(table, 4, 8);
    const training_task task{.arch = a, .steps = 6, .batch = 8, .sgd = {.learning_rate = 0.1f, .momentum = 0.9f}};
    const std::span<std::byte> upload = update_region(block.value(), a, codec);
    REQUIRE(upload.size() == update_bytes(a, codec));
    REQUIRE(train_for_upload(block.value(), task, codec, upload, batches, nullptr).ok());
    // The hub lays the update into its copy: the frozen layers stay as they were sent, the rest moved.
    std::vector<float> back = decoded;
    REQUIRE(decode_update(a, codec, upload, back).ok());
    CHECK(std::equal(back.begin(), back.begin() + static_cast<std::ptrdiff_t>(off), decoded.begin()));
    CHECK_FALSE(std::equal(back.begin() + static_cast<std::ptrdiff_t>(off), back.end(), decoded.begin() + static_cast<std::ptrdiff_t>(off)));
  }
}

TEST_CASE("compact frozen layers: a blob whose frozen part would decode to what is not a number is refused, naming it") {
  mlp_arch a = held_dense_arch();
  a.frozen = 1;
  const auto start = held_values(param_count(a), 12);
  struct bad_case {
    codec_kind held;
    std::size_t byte;
    std::vector<unsigned char> bytes;
    const char* message;
  };
  // q8: the first row's scale infinite, or so large that -128 of it (a byte no encoder writes) is not
  // finite though 127 of it is; f16: value 3 infinite.
  const float inf = INFINITY, huge = 2.67e36f;
  std::vector<unsigned char> inf_bytes(4), huge_bytes(4);
  std::memcpy(inf_bytes.data(), &inf, 4);
  std::memcpy(huge_bytes.data(), &huge, 4);
  for (const bad_case& c : {bad_case{codec_kind::q8, 0, inf_bytes, "q8 blob: row scale at byte 0 is inf"},
                            bad_case{codec_kind::q8, 0, huge_bytes, "at most the largest float / 128"},
                            bad_case{codec_kind::f16, 6, {0x00, 0x7c}, "frozen layers (f16): value 3 is not finite"}}) {
    CAPTURE(c.message);
    a.frozen_codec = c.held;
    auto block = training_block::allocate(plan_training_memory(a, 8, true, codec_kind::f32));
    REQUIRE(block.ok());
    std::vector<std::byte> download(encoded_bytes(a, codec_kind::f32));
    REQUIRE(encode(a, codec_kind::f32, start, download).ok());
    std::memcpy(download.data() + c.byte, c.bytes.data(), c.bytes.size());
    const std::span<std::byte> blob = blob_region(block.value(), codec_kind::f32, download.size());
    std::memcpy(blob.data(), download.data(), download.size());
    const auto r = take_download(block.value(), a, codec_kind::f32, blob);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::not_finite);
    CHECK(r.error().message.find(c.message) != std::string::npos);
  }
}
