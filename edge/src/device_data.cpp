#include "tessera/edge/device_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/base/seeds.hpp"
#include "tessera/core/math/mlp.hpp"

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
  if (c.shuffle_buffer < 1) return core::make_error(core::errc::invalid_spec, "shuffle_buffer must be at least 1");
  std::unique_ptr<device_data> d(new device_data());
  TESSERA_ASSIGN_OR_RETURN(core::opened_data opened, core::open_data(c.source, nullptr));
  d->source_ = c.source;
  d->name_ = opened.table ? opened.table->describe() : opened.stream->describe();
  // One pass over every example: the targets (checked against a model later), the count, and any bad
  // record found now rather than mid-training.
  if (opened.table) {
    TESSERA_ASSIGN_OR_RETURN(d->targets_, summarize_targets(*core::make_table_stream(*opened.table)));
  } else {
    TESSERA_ASSIGN_OR_RETURN(d->targets_, summarize_targets(*opened.stream));
  }
  const std::int64_t n = d->targets_.examples;
  if (n > std::int64_t{1} << 32) return core::make_error(core::errc::unsupported, d->name_ + ": more than 2^32 examples");
  std::vector<std::uint32_t> held;
  if (c.validation) {  // a validation set of its own: every example of the files trains
    d->validation_source_ = *c.validation;
    TESSERA_ASSIGN_OR_RETURN(core::opened_data v, core::open_data(*c.validation, nullptr));
    const std::int64_t vf = v.table ? v.table->feature_count() : v.stream->feature_count();
    const std::string vname = v.table ? v.table->describe() : v.stream->describe();
    if (vf != (opened.table ? opened.table->feature_count() : opened.stream->feature_count()))
      return core::make_error(core::errc::invalid_spec, vname + ": " + std::to_string(vf) + " features per example, but " + d->name_ +
                                                            " has " + std::to_string(opened.table ? opened.table->feature_count()
                                                                                                  : opened.stream->feature_count()));
    if (v.table) {
      TESSERA_ASSIGN_OR_RETURN(d->validation_targets_, summarize_targets(*core::make_table_stream(*v.table)));
      d->validation_table_ = std::move(v.table);
    } else {
      TESSERA_ASSIGN_OR_RETURN(d->validation_targets_, summarize_targets(*v.stream));
      d->validation_stream_ = std::move(v.stream);
      d->stream_buffers_ += k_stream_reader_bytes;
    }
    d->validation_examples_ = d->validation_targets_.examples;
  } else {
    held = core::held_out_rows(n, c.validation_fraction, core::validation_seed(seed));
    d->validation_examples_ = static_cast<std::int64_t>(held.size());
  }
  d->held_out_ = std::make_shared<const std::vector<std::uint32_t>>(std::move(held));
  const auto held_count = static_cast<std::int64_t>(d->held_out_->size());
  d->train_examples_ = n - held_count;
  if (d->train_examples_ < 1) return core::make_error(core::errc::bad_format, d->name_ + ": no examples to train on");
  if (opened.table) {  // random access: views of the file, no copy
    d->table_ = std::move(opened.table);
    d->train_table_ = core::make_subset_table(*d->table_, d->held_out_, /*listed=*/false);
    if (held_count > 0) d->validation_table_ = core::make_subset_table(*d->table_, d->held_out_, /*listed=*/true);
    d->train_ = std::make_unique<core::table_batches>(*d->train_table_, seed, c.max_batch);
    return d;
  }
  if (held_count > 0) {
    TESSERA_ASSIGN_OR_RETURN(auto v, core::open_data_stream(c.source, nullptr));
    d->validation_stream_ = core::make_split_stream(std::move(v), d->held_out_, /*listed=*/true);
    d->train_stream_ = core::make_split_stream(std::move(opened.stream), d->held_out_, /*listed=*/false);
    d->stream_buffers_ += 2 * k_stream_reader_bytes;
  } else {
    d->train_stream_ = std::move(opened.stream);
    d->stream_buffers_ += k_stream_reader_bytes;
  }
  d->train_ = std::make_unique<core::shuffled_stream_batches>(*d->train_stream_, static_cast<std::size_t>(c.shuffle_buffer), seed);
  return d;
}

core::result<std::unique_ptr<core::example_stream>> device_data::training_examples() const {
  if (train_table_) return core::make_table_stream(*train_table_);
  TESSERA_ASSIGN_OR_RETURN(auto s, core::open_data_stream(source_, nullptr));
  if (!held_out_->empty()) return core::make_split_stream(std::move(s), held_out_, /*listed=*/false);
  return s;
}

core::result<void> device_data::check_targets(core::task_kind task, std::int64_t outputs) const {
  TESSERA_TRY(core::check_targets(targets_, task, outputs, source_));
  if (validation_source_) TESSERA_TRY(core::check_targets(validation_targets_, task, outputs, *validation_source_));
  return {};
}

std::string device_data::digest() const {
  // FNV-1a over what decides whether the data suits a model: its shape and its targets' range.
  const std::string text = std::to_string(train_examples_) + "/" + std::to_string(validation_examples_) + "/" +
                           std::to_string(validation_targets_.min) + "/" + std::to_string(validation_targets_.max) + "/" +
                           std::to_string(targets_.examples) + "/" +
                           std::to_string(feature_count()) + "/" + std::to_string(targets_.min) + "/" +
                           std::to_string(targets_.max) + "/" + std::to_string(targets_.first_fractional) + "/" +
                           std::to_string(targets_.first_not_finite);
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::size_t device_data::buffer_bytes() const noexcept {
  return train_->buffer_bytes() + stream_buffers_ + held_out_->size() * sizeof(std::uint32_t);
}

core::result<core::evaluation> device_data::validate(const core::network& net, std::span<const float> params,
                                                     core::training_buffers buf, std::int64_t batch,
                                                     const core::input_normalization* normalization) {
  if (validation_table_) return core::evaluate_in(net, params, *validation_table_, buf, batch, normalization);
  core::evaluation ev;
  if (!validation_stream_) return ev;
  const auto inputs = static_cast<std::size_t>(net.arch().inputs());
  TESSERA_TRY(validation_stream_->rewind());
  for (;;) {
    TESSERA_ASSIGN_OR_RETURN(const std::size_t got, validation_stream_->read(buf.features.first(static_cast<std::size_t>(batch) * inputs),
                                                                            buf.targets.first(static_cast<std::size_t>(batch))));
    if (got == 0) break;
    if (normalization != nullptr) core::normalize_rows(buf.features.first(got * inputs), *normalization);
    TESSERA_TRY(core::score_batch(net, params, buf.features.data(), buf.targets.data(), static_cast<std::int64_t>(got),
                                  buf.workspace, ev));
  }
  core::finish(ev);
  return ev;
}

}  // namespace tessera::edge
