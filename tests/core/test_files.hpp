// Helpers the core tests share (other modules' tests use the folder and file ones too): a fresh folder
// per test case, files written and read whole, integers as the bytes of a file format, the error of a
// result that must have failed, every example of a stream or a table, and small models.
//
//   tessera::testing::temp_dir dir("npy");                  // removed at the end of the test case
//   write_bytes(dir.file("x.npy"), bytes);
//   const core::error e = error_of(core::open_npy(dir.file("x.npy"), labels, {}));
//   CHECK(contains(e.message, "x.npy: "));
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/config/json_config.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/train/train.hpp"

namespace tessera::testing {

// A folder unique to this process and test case, removed at the end of it.
class temp_dir {
 public:
  explicit temp_dir(std::string_view tag = "test") {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("tessera_" + std::string(tag) + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  write_bytes(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// The whole file (empty if it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `size` bytes of v, least significant first (little-endian) or last (big-endian).
inline std::string le_bytes(std::uint64_t v, unsigned size) {
  std::string out;
  for (unsigned b = 0; b < size; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
  return out;
}
inline std::string be_bytes(std::uint64_t v, unsigned size) {
  std::string out = le_bytes(v, size);
  std::reverse(out.begin(), out.end());
  return out;
}

// Batches of one example repeated: `features` inputs all `x`, every target `y` (a class, or a value).
class constant_batches final : public core::batch_source {
 public:
  constant_batches(std::int64_t features, float x, float y) : features_(features), x_(x), y_(y) {}
  [[nodiscard]] std::int64_t feature_count() const noexcept override { return features_; }
  [[nodiscard]] core::result<void> next(std::span<float> features, std::span<float> targets) override {
    std::fill(features.begin(), features.end(), x_);
    std::fill(targets.begin(), targets.end(), y_);
    return {};
  }
  [[nodiscard]] std::string describe() const override { return "constant batches"; }
  [[nodiscard]] std::size_t buffer_bytes() const noexcept override { return 0; }

 private:
  std::int64_t features_;
  float x_, y_;
};

// The error of a result that must have failed (fails the test, instead of asserting, if it did not).
template <class T>
core::error error_of(core::result<T> r) {
  REQUIRE_FALSE(r.ok());
  return std::move(r).error();
}

inline bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// The default --help states for the field at `path` of a configuration `read` parses ("(not listed)" if
// it reads no such field).
template <class Read>
std::string help_default(Read read, const std::string& path) {
  core::field_table help;
  core::describe_config(help, read);
  for (const auto& f : help.fields())
    if (f.path == path) return f.fallback;
  return "(not listed)";
}

// When a reader must refuse a malformed file of a rejection table: as it opens the file (what the
// header or the file's size shows), or at the read or gather that reaches the bad record.
enum class refused_by { open, read };

// A reader's refusal as a rejection table states it: the error code, the file the message must name
// and what else it must say (the field, offset or record the reader points at).
inline void check_refusal(const core::error& e, core::errc code, const std::string& path,
                          const std::vector<std::string>& says) {
  CHECK(e.code == code);
  CHECK(contains(e.message, path));
  for (const std::string& part : says) CHECK(contains(e.message, part));
}

// Runs a rejection table, as ggml's test-gguf does: `rows` has one row per kind of malformed input, in
// the order of its enum (row.kind, `kinds` of them). For each row, the file make(row.kind) returns is
// written to dir/row.file (nothing is written for nullopt: a missing file), then check(row, path).
template <class Row, class Make, class Check>
void for_each_rejection(const temp_dir& dir, const std::vector<Row>& rows, std::size_t kinds, Make make, Check check) {
  REQUIRE(rows.size() == kinds);
  for (std::size_t i = 0; i < kinds; ++i) {
    const Row& row = rows[i];
    REQUIRE(static_cast<std::size_t>(row.kind) == i);  // the table follows the enum
    CAPTURE(row.file);
    const std::string path = dir.file(row.file);
    if (const std::optional<std::string> bytes = make(row.kind)) write_bytes(path, *bytes);
    check(row, path);
  }
}

struct all_examples {
  std::vector<float> x;
  std::vector<float> y;
};

// Reads a stream to the end in batches of `batch`, checking each batch size is as promised.
inline all_examples read_stream(core::example_stream& s, std::size_t batch) {
  all_examples out;
  const auto f = static_cast<std::size_t>(s.feature_count());
  std::vector<float> x(batch * f);
  std::vector<float> y(batch);
  while (true) {
    auto n = s.read(x, y);
    REQUIRE_MESSAGE(n.ok(), (n.ok() ? "" : n.error().message));
    if (n.value() == 0) break;
    REQUIRE(n.value() <= batch);
    out.x.insert(out.x.end(), x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n.value() * f));
    out.y.insert(out.y.end(), y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n.value()));
  }
  return out;
}

// Reads until an error and returns it; fails the test if the stream ends cleanly.
inline core::error read_until_error(core::example_stream& s) {
  const auto f = static_cast<std::size_t>(s.feature_count());
  std::vector<float> x(4 * f);
  std::vector<float> y(4);
  while (true) {
    auto n = s.read(x, y);
    if (!n) return n.error();
    REQUIRE_MESSAGE(n.value() != 0, "the stream ended without the expected error");
  }
}

// Every example of a table, read with one gather per example; the first error if one fails.
inline core::result<all_examples> gather_all(core::example_table& t) {
  const auto f = static_cast<std::size_t>(t.feature_count());
  all_examples out;
  out.x.resize(static_cast<std::size_t>(t.size()) * f);
  out.y.resize(static_cast<std::size_t>(t.size()));
  for (std::uint32_t i = 0; i < static_cast<std::uint32_t>(t.size()); ++i) {
    const std::uint32_t index[1] = {i};
    auto r = t.gather(index, std::span(out.x).subspan(i * f, f), std::span(out.y).subspan(i, 1));
    if (!r) return std::move(r).error();
  }
  return out;
}

// A table must refuse a gather that reaches an index at or past its size: errc::invalid_argument, with
// a message that holds `says` (the table's description, the index and the size).
inline void check_index_refused(core::example_table& t, const std::vector<std::uint32_t>& indices,
                                const std::string& says) {
  const auto f = static_cast<std::size_t>(t.feature_count());
  std::vector<float> x(indices.size() * f);
  std::vector<float> y(indices.size());
  const core::error e = error_of(t.gather(indices, x, y));
  CHECK(e.code == core::errc::invalid_argument);
  CHECK(contains(e.message, says));
}

// Every example of a table, which must read without error.
inline all_examples read_table(core::example_table& t) {
  auto all = gather_all(t);
  REQUIRE_MESSAGE(all.ok(), (all.ok() ? "" : all.error().message));
  return std::move(all).value();
}

// A model spec of the given widths, every other field at its default.
inline core::model_spec spec_of(std::int64_t inputs, std::vector<std::int64_t> hidden, std::int64_t outputs) {
  core::model_spec s;
  s.inputs = inputs;
  s.hidden = std::move(hidden);
  s.outputs = outputs;
  return s;
}

// A full-model architecture (every input scale 1) with the given widths.
inline core::mlp_arch arch_of(std::vector<std::int64_t> widths, bool layer_norm) {
  core::mlp_arch a;
  a.widths = std::move(widths);
  a.layer_norm = layer_norm;
  a.input_scale.assign(a.widths.size() - 1, 1.0f);
  return a;
}

}  // namespace tessera::testing
