// Format-independent parts of the dataset module: statistics, the in-memory table, a table read as a
// stream, load_all, and the helpers the IDX, CSV and .npy readers share.
#include "tessera/core/data/dataset.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "dataset_internal.hpp"

namespace tessera::core {

namespace detail {

std::string errno_text(int e) { return std::generic_category().message(e); }

std::string hex_bytes(std::span<const std::uint8_t> bytes) {
  std::string out;
  for (const std::uint8_t b : bytes) {
    char buf[4] = {};
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(b));
    if (!out.empty()) out += ' ';
    out += buf;
  }
  return out;
}

result<void> close_written(std::FILE* f, bool failed, int err, const std::string& path) {
  if (std::fclose(f) != 0 && !failed) {
    failed = true;
    err = errno;
  }
  if (failed) {
    std::remove(path.c_str());
    return make_error(errc::io, path + ": write failed: " + std::generic_category().message(err));
  }
  return {};
}

result<std::size_t> pread_full(int fd, std::span<std::uint8_t> out, std::int64_t offset, const std::string& path) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset) + static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(errc::io, path + ": read failed at offset " + std::to_string(offset) + ": " +
                                      std::generic_category().message(errno));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

// A constant feature (deviation 0) is centred but not scaled, instead of dividing by zero.
result<standardize_params> prepare_standardize(const input_normalization& stats, std::int64_t features,
                                               const std::string& what) {
  const auto n = static_cast<std::size_t>(features);
  if (stats.mean.size() != n || stats.std.size() != n)
    return make_error(errc::invalid_argument,
                      what + ": standardize statistics have " + std::to_string(stats.mean.size()) + " means and " +
                          std::to_string(stats.std.size()) + " standard deviations, the data has " +
                          std::to_string(features) + " features");
  standardize_params p;
  p.mean.assign(n, 0.0f);
  p.inv_stddev.assign(n, 1.0f);
  for (std::size_t j = 0; j < n; ++j) {
    const float m = stats.mean[j];
    const float s = stats.std[j];
    if (!std::isfinite(m) || !std::isfinite(s))
      return make_error(errc::not_finite, what + ": standardize statistics for feature " + std::to_string(j) +
                                              " are not finite (mean " + std::to_string(m) + ", stddev " +
                                              std::to_string(s) + ")");
    if (s < 0.0f)
      return make_error(errc::invalid_argument, what + ": standardize statistics for feature " + std::to_string(j) +
                                                    " have a negative stddev " + std::to_string(s));
    p.mean[j] = m;
    p.inv_stddev[j] = s == 0.0f ? 1.0f : 1.0f / s;
  }
  return p;
}

bool must_measure(normalization norm, const input_normalization& given) noexcept {
  return norm == normalization::standardize && given.mean.empty() && given.std.empty();
}

result<standardize_params> normalization_params(normalization norm, const input_normalization& given,
                                                std::int64_t features, example_stream* raw, const std::string& what) {
  if (norm != normalization::standardize) return standardize_params{};
  if (!must_measure(norm, given)) return prepare_standardize(given, features, what);
  TESSERA_ASSERT(raw != nullptr);
  TESSERA_ASSIGN_OR_RETURN(const input_normalization measured, compute_stats(*raw));
  return prepare_standardize(measured, features, what);
}

std::string truncated_at(const std::string& path, const record_layout& layout, std::int64_t record) {
  return path + ": truncated at record " + std::to_string(record) + " of " + std::to_string(layout.count) +
         " (offset " + std::to_string(layout.data_offset + record * layout.record_bytes) + ")";
}

std::string data_continues(const std::string& path, const record_layout& layout, const std::string& declared) {
  return path + ": data continues after the " + std::to_string(layout.count) + " records its header " + declared +
         " declares";
}

result<void> check_file_size(const std::string& path, std::int64_t file_size, const record_layout& layout,
                             const std::string& declared) {
  // The readers bound count and record size (2^31 records of at most 2^27 bytes): no overflow in 64 bits.
  const std::int64_t expected = layout.data_offset + layout.count * layout.record_bytes;
  if (file_size < expected)
    return make_error(errc::truncated,
                      truncated_at(path, layout, (file_size - layout.data_offset) / layout.record_bytes));
  if (file_size > expected)
    return make_error(errc::bad_format, data_continues(path, layout, declared) + " (" +
                                            std::to_string(file_size - expected) + " more bytes)");
  return {};
}

}  // namespace detail

namespace {

// Indices per gather() when a table is read as a stream: a stack array, so read() does not allocate.
constexpr std::size_t k_index_chunk = 256;

// Reads a table from its first example to its last; owns the table or borrows it (owned_ empty).
class table_stream final : public example_stream {
 public:
  explicit table_stream(example_table& table) : table_(table) {}
  explicit table_stream(std::unique_ptr<example_table> table) : owned_(std::move(table)), table_(*owned_) {}

  std::int64_t feature_count() const noexcept override { return table_.feature_count(); }
  std::int64_t size_hint() const noexcept override { return table_.size(); }
  std::string describe() const override { return table_.describe(); }

  result<std::size_t> read(std::span<float> features, std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(table_.feature_count());
    const auto want = static_cast<std::size_t>(
        std::min<std::int64_t>(static_cast<std::int64_t>(targets.size()), table_.size() - next_));
    TESSERA_ASSERT(features.size() >= want * f);
    std::array<std::uint32_t, k_index_chunk> indices{};
    // next_ moves once every chunk is in: a failed read leaves the stream where it was.
    std::size_t done = 0;
    while (done < want) {
      const std::size_t k = std::min(k_index_chunk, want - done);
      // The tables' gather() takes 32-bit indices, so every index below size() fits.
      const std::int64_t first = next_ + static_cast<std::int64_t>(done);
      for (std::size_t j = 0; j < k; ++j) indices[j] = static_cast<std::uint32_t>(first + static_cast<std::int64_t>(j));
      TESSERA_TRY(table_.gather(std::span(indices).first(k), features.subspan(done * f, k * f), targets.subspan(done, k)));
      done += k;
    }
    next_ += static_cast<std::int64_t>(done);
    return done;
  }

  result<void> rewind() override {
    next_ = 0;
    return {};
  }

 private:
  std::unique_ptr<example_table> owned_;  // declared before table_, which may refer to it
  example_table& table_;
  std::int64_t next_ = 0;  // index of the next example to read
};

// Rows per chunk when a helper reads a whole stream: about 256 KiB of features, at least one row, so the
// scratch memory does not depend on the dataset size.
std::size_t chunk_rows(std::int64_t features) {
  constexpr std::size_t k_chunk_floats = std::size_t{1} << 16;
  const auto f = static_cast<std::size_t>(std::max<std::int64_t>(features, 1));
  return std::max<std::size_t>(1, k_chunk_floats / f);
}

}  // namespace

result<input_normalization> compute_stats(example_stream& stream) {
  const std::int64_t features = stream.feature_count();
  TESSERA_ASSERT(features > 0);
  const auto f = static_cast<std::size_t>(features);
  // Start from the first example whatever the caller did before, so "the statistics" are those of the
  // whole dataset.
  TESSERA_TRY(stream.rewind());

  // Welford's update in double: one pass, and no catastrophic cancellation of sum(x^2) - n*mean^2 on
  // features with a large mean and a small spread (pixel columns that are almost always 255).
  std::vector<double> mean(f, 0.0);
  std::vector<double> m2(f, 0.0);
  std::int64_t count = 0;
  const std::size_t rows = chunk_rows(features);
  std::vector<float> x(rows * f);
  std::vector<float> y(rows);
  while (true) {
    TESSERA_ASSIGN_OR_RETURN(const std::size_t n, stream.read(x, y));
    if (n == 0) break;
    for (std::size_t r = 0; r < n; ++r) {
      ++count;
      const double inv_count = 1.0 / static_cast<double>(count);
      const float* row = x.data() + r * f;
      for (std::size_t j = 0; j < f; ++j) {
        const double v = row[j];
        const double delta = v - mean[j];
        mean[j] += delta * inv_count;
        m2[j] += delta * (v - mean[j]);
      }
    }
  }
  if (count == 0)
    return make_error(errc::invalid_argument, stream.describe() + ": no examples to measure statistics on");
  TESSERA_TRY(stream.rewind());

  // Population deviation (divide by n), as scikit-learn's StandardScaler does, so statistics exported to
  // Python agree with the ones measured there.
  input_normalization stats;
  stats.mean.resize(f);
  stats.std.resize(f);
  for (std::size_t j = 0; j < f; ++j) {
    const double sd = std::sqrt(std::max(0.0, m2[j] / static_cast<double>(count)));
    stats.mean[j] = static_cast<float>(mean[j]);
    const auto sd_f = static_cast<float>(sd);
    stats.std[j] = sd_f == 0.0f ? 1.0f : sd_f;
  }
  return stats;
}

memory_table::memory_table(std::int64_t feature_count, std::vector<float> features, std::vector<float> targets,
                           std::string description)
    : features_per_example_(feature_count),
      features_(std::move(features)),
      targets_(std::move(targets)),
      description_(std::move(description)) {
  TESSERA_ASSERT(features_per_example_ > 0);
  TESSERA_ASSERT(features_.size() == targets_.size() * static_cast<std::size_t>(features_per_example_));
  // gather() takes 32-bit indices: every example must be reachable by one.
  TESSERA_ASSERT(std::uint64_t{targets_.size()} <= std::uint64_t{std::numeric_limits<std::uint32_t>::max()} + 1);
}

result<void> memory_table::gather(std::span<const std::uint32_t> indices, std::span<float> features,
                                  std::span<float> targets) {
  const auto f = static_cast<std::size_t>(features_per_example_);
  // Spans too small for the indices are a bug in the caller, not bad input.
  TESSERA_ASSERT(targets.size() >= indices.size());
  TESSERA_ASSERT(features.size() >= indices.size() * f);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::size_t i = indices[k];
    if (i >= targets_.size())
      return make_error(errc::invalid_argument, description_ + ": index " + std::to_string(i) +
                                                    " is out of range (size " + std::to_string(targets_.size()) +
                                                    ")");
    std::memcpy(features.data() + k * f, features_.data() + i * f, f * sizeof(float));
    targets[k] = targets_[i];
  }
  return {};
}

memory_table memory_table::subset(std::span<const std::uint32_t> indices, std::string description) const {
  const auto f = static_cast<std::size_t>(features_per_example_);
  std::vector<float> x(indices.size() * f);
  std::vector<float> y(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::size_t i = indices[k];
    TESSERA_ASSERT(i < targets_.size());  // subset() is given indices the caller built from size()
    std::memcpy(x.data() + k * f, features_.data() + i * f, f * sizeof(float));
    y[k] = targets_[i];
  }
  return memory_table(features_per_example_, std::move(x), std::move(y), std::move(description));
}

std::unique_ptr<example_stream> make_table_stream(example_table& table) {
  return std::make_unique<table_stream>(table);
}

std::unique_ptr<example_stream> make_table_stream(std::unique_ptr<example_table> table) {
  TESSERA_ASSERT(table != nullptr);
  return std::make_unique<table_stream>(std::move(table));
}

result<memory_table> load_all(example_stream& stream, std::int64_t max_examples) {
  return load_examples(stream, max_examples, /*refuse_more=*/true);
}

result<memory_table> load_first(example_stream& stream, std::int64_t count) {
  return load_examples(stream, count, /*refuse_more=*/false);
}

result<memory_table> load_examples(example_stream& stream, std::int64_t max_examples, bool refuse_more) {
  TESSERA_ASSERT(max_examples >= 0);
  const std::int64_t features = stream.feature_count();
  TESSERA_ASSERT(features > 0);
  const auto f = static_cast<std::size_t>(features);
  const auto over_budget = [&] {
    return make_error(errc::over_budget, stream.describe() + ": more than " + std::to_string(max_examples) +
                                             " examples (the max_examples bound of load_all)");
  };
  // When the header states the count, refuse before reading a byte.
  std::int64_t hint = stream.size_hint();
  if (hint > max_examples) {
    if (refuse_more) return over_budget();
    hint = max_examples;
  }
  TESSERA_TRY(stream.rewind());  // "whole stream": from the first example whatever was read before

  std::vector<float> x;
  std::vector<float> y;
  if (hint > 0) {
    x.reserve(static_cast<std::size_t>(hint) * f);
    y.reserve(static_cast<std::size_t>(hint));
  }
  // Read straight into the tail of the growing vectors. At most max_examples + 1 examples are ever asked
  // for: one past the bound is enough to know the stream is over it, so memory stays bounded by it.
  const auto limit = static_cast<std::size_t>(max_examples) + (refuse_more ? 1 : 0);
  const std::size_t rows = chunk_rows(features);
  std::size_t have = 0;
  while (have < limit) {
    const std::size_t want = std::min(rows, limit - have);
    x.resize((have + want) * f);
    y.resize(have + want);
    TESSERA_ASSIGN_OR_RETURN(const std::size_t n,
                             stream.read(std::span(x).subspan(have * f, want * f), std::span(y).subspan(have, want)));
    have += n;
    if (n == 0) break;
  }
  if (refuse_more && have > static_cast<std::size_t>(max_examples)) return over_budget();
  x.resize(have * f);
  y.resize(have);
  x.shrink_to_fit();
  y.shrink_to_fit();
  return memory_table(features, std::move(x), std::move(y), stream.describe());
}

}  // namespace tessera::core
