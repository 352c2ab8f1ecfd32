#include "tessera/edge/device_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/mlp.hpp"

namespace tessera::edge {
namespace {

// Bytes a stream reader holds: its read buffer (the readers use 64 KiB) plus zlib's window and buffers.
constexpr std::size_t k_stream_reader_bytes = (64 + 64 + 32) << 10;

// One pass over all of a source's examples: their targets (and so their count).
core::result<core::target_summary> summarize_targets(core::example_stream& s) {
  std::vector<float> x(static_cast<std::size_t>(64 * s.feature_count())), y(64);
  core::target_summary summary;
  for (;;) {
    TESSERA_ASSIGN_OR_RETURN(const std::size_t got, s.read(x, y));
    if (got == 0) break;
    summary.add(std::span(y).first(got));
  }
  TESSERA_TRY(s.rewind());
  return summary;
}

}  // namespace

core::result<std::unique_ptr<device_data>> device_data::open(const data_config& c, std::uint64_t seed) {
  if (!(c.validation_fraction >= 0 && c.validation_fraction <= 0.5))
    return core::make_error(core::errc::invalid_spec, "validation_fraction must be in [0, 0.5]");
  std::unique_ptr<device_data> d(new device_data());
  TESSERA_ASSIGN_OR_RETURN(core::opened_data opened, core::open_data(c.source, nullptr));
  d->source_ = c.source;
  d->name_ = opened.table ? opened.table->describe() : opened.stream->describe();
  if (opened.table) {  // random access: a range is held out, with no copy
    d->table_ = std::move(opened.table);
    TESSERA_ASSIGN_OR_RETURN(d->targets_, summarize_targets(*core::make_table_stream(*d->table_)));
    const std::int64_t n = d->table_->size();
    const auto held_out = static_cast<std::int64_t>(std::floor(c.validation_fraction * static_cast<double>(n)));
    if (n - held_out < 1) return core::make_error(core::errc::bad_format, d->table_->describe() + ": no examples to train on");
    d->train_table_ = core::make_range_table(*d->table_, 0, n - held_out);
    if (held_out > 0) d->validation_table_ = core::make_range_table(*d->table_, n - held_out, n);
    d->train_ = std::make_unique<core::table_batches>(*d->train_table_, seed, c.max_batch);
    d->train_examples_ = n - held_out;
    return d;
  }
  if (c.shuffle_buffer < 1) return core::make_error(core::errc::invalid_spec, "shuffle_buffer must be at least 1");
  TESSERA_ASSIGN_OR_RETURN(d->targets_, summarize_targets(*opened.stream));
  const std::int64_t every = c.validation_fraction > 0 ? std::max<std::int64_t>(2, std::llround(1.0 / c.validation_fraction)) : 0;
  d->every_ = every;
  if (every > 0) {
    TESSERA_ASSIGN_OR_RETURN(auto v, core::open_data_stream(c.source, nullptr));
    d->validation_stream_ = core::make_split_stream(std::move(v), every, true);
    d->train_stream_ = core::make_split_stream(std::move(opened.stream), every, false);
    d->stream_buffers_ = 2 * k_stream_reader_bytes;
  } else {
    d->train_stream_ = std::move(opened.stream);
    d->stream_buffers_ = k_stream_reader_bytes;
  }
  // One counting pass: the trainer needs the example count for epochs, and it finds bad records early.
  {
    std::vector<float> x(static_cast<std::size_t>(64 * d->train_stream_->feature_count())), y(64);
    std::int64_t n = 0;
    for (;;) {
      auto got = d->train_stream_->read(x, y);
      TESSERA_TRY(got);
      if (got.value() == 0) break;
      n += static_cast<std::int64_t>(got.value());
    }
    TESSERA_TRY(d->train_stream_->rewind());
    if (n == 0) return core::make_error(core::errc::bad_format, d->train_stream_->describe() + ": no examples to train on");
    d->train_examples_ = n;
  }
  d->train_ = std::make_unique<core::shuffled_stream_batches>(*d->train_stream_, static_cast<std::size_t>(c.shuffle_buffer), seed);
  return d;
}

core::result<std::unique_ptr<core::example_stream>> device_data::training_examples() const {
  if (train_table_) return core::make_table_stream(*train_table_);
  TESSERA_ASSIGN_OR_RETURN(auto s, core::open_data_stream(source_, nullptr));
  if (every_ > 0) return core::make_split_stream(std::move(s), every_, false);
  return s;
}

std::string device_data::digest() const {
  // FNV-1a over what decides whether the data suits a model: its shape and its targets' range.
  const std::string text = std::to_string(train_examples_) + "/" + std::to_string(targets_.examples) + "/" +
                           std::to_string(feature_count()) + "/" + std::to_string(targets_.min) + "/" +
                           std::to_string(targets_.max) + "/" + std::to_string(targets_.first_fractional) + "/" +
                           std::to_string(targets_.first_not_finite);
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::size_t device_data::buffer_bytes() const noexcept { return train_->buffer_bytes() + stream_buffers_; }

core::result<core::evaluation> device_data::validate(const core::network& net, std::span<const float> params,
                                                     core::training_buffers buf, std::int64_t batch) {
  core::evaluation ev;
  const std::int64_t k = net.arch().outputs();
  double loss_sum = 0;
  std::int64_t correct = 0;
  auto score = [&](std::int64_t rows) -> core::result<void> {
    net.forward(params, buf.features.data(), rows, buf.workspace);
    auto l = net.loss(buf.workspace, buf.targets.data(), rows);
    TESSERA_TRY(l);
    loss_sum += l.value() * static_cast<double>(rows);
    if (net.arch().task == core::task_kind::classification) {
      const auto out = net.outputs(buf.workspace, rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* o = out.data() + r * k;
        if (static_cast<float>(std::max_element(o, o + k) - o) == buf.targets[static_cast<std::size_t>(r)]) ++correct;
      }
    }
    ev.examples += rows;
    return {};
  };
  const auto inputs = static_cast<std::size_t>(net.arch().inputs());
  if (validation_table_) {
    // Index buffer on the stack: validation must not allocate either.
    std::uint32_t idx[256];
    const std::int64_t step = std::min<std::int64_t>(batch, 256);
    for (std::int64_t start = 0; start < validation_table_->size(); start += step) {
      const std::int64_t rows = std::min(step, validation_table_->size() - start);
      for (std::int64_t i = 0; i < rows; ++i) idx[i] = static_cast<std::uint32_t>(start + i);
      const auto n = static_cast<std::size_t>(rows);
      TESSERA_TRY(validation_table_->gather(std::span(idx, n), buf.features.first(n * inputs), buf.targets.first(n)));
      TESSERA_TRY(score(rows));
    }
  } else if (validation_stream_) {
    TESSERA_TRY(validation_stream_->rewind());
    for (;;) {
      auto got = validation_stream_->read(buf.features.first(static_cast<std::size_t>(batch) * inputs),
                                          buf.targets.first(static_cast<std::size_t>(batch)));
      TESSERA_TRY(got);
      if (got.value() == 0) break;
      TESSERA_TRY(score(static_cast<std::int64_t>(got.value())));
    }
  }
  if (ev.examples > 0) {
    ev.loss = loss_sum / static_cast<double>(ev.examples);
    ev.accuracy = static_cast<double>(correct) / static_cast<double>(ev.examples);
  }
  return ev;
}

}  // namespace tessera::edge
