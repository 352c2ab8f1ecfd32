#include "tessera/core/train/device_round.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "tessera/core/math/codec.hpp"

namespace tessera::core {

std::span<std::byte> blob_region(training_block& block, codec_kind codec, std::size_t bytes) noexcept {
  const training_memory& m = block.layout();
  // Compact frozen layers: the blob starts with them, in their region, which ends where the rest begins.
  const std::size_t first = m.frozen_bytes > 0 ? m.frozen : codec == codec_kind::f32 ? m.params : m.staging;
  const std::span<std::byte> all = block.all();
  TESSERA_ASSERT(first + bytes <= all.size());
  TESSERA_ASSERT(bytes <= m.frozen_bytes + (codec == codec_kind::f32 ? m.params_bytes : m.staging_bytes));
  return all.subspan(first, bytes);
}

std::span<std::byte> update_region(training_block& block, const mlp_arch& arch, codec_kind codec) noexcept {
  const std::size_t bytes = update_bytes(arch, codec);
  if (codec != codec_kind::f32) {
    TESSERA_ASSERT(bytes <= block.staging().size());
    return block.staging().first(bytes);
  }
  const std::span<std::byte> params = std::as_writable_bytes(block.params());
  TESSERA_ASSERT(bytes <= params.size());
  return params.last(bytes);  // the trained layers are the layout's last parameters
}

result<void> take_download(training_block& block, const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob) {
  const std::span<float> params = block.params();
  const std::size_t held = frozen_bytes(arch);
  if (held > 0) TESSERA_TRY(check_frozen(arch, blob.first(std::min(held, blob.size()))));
  if (codec != codec_kind::f32) {
    if (held == 0) return decode(arch, codec, blob, params);
    return decode_update(arch, codec, blob.subspan(std::min(held, blob.size())), params);
  }
  // f32 arrived in place; its digest matched, but the values must still be finite before training.
  const auto bad = std::find_if(params.begin(), params.end(), [](float v) { return !std::isfinite(v); });
  if (bad != params.end())
    return make_error(errc::not_finite, "parameter " + std::to_string(bad - params.begin()) + " is not finite");
  return {};
}

double clip_change(std::span<const float> received, std::span<float> params, double clip) noexcept {
  TESSERA_ASSERT(received.size() == params.size() && clip > 0);
  double sq = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double d = static_cast<double>(params[i]) - static_cast<double>(received[i]);
    sq += d * d;
  }
  const double norm = std::sqrt(sq);
  if (!(norm > clip)) return norm;
  // Scaled a little inside the ball: float rounding must not carry the result past it.
  const double scale = clip / norm * (1.0 - 1e-6);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double d = static_cast<double>(params[i]) - static_cast<double>(received[i]);
    params[i] = static_cast<float>(static_cast<double>(received[i]) + d * scale);
  }
  return norm;
}

result<local_training_report> train_for_upload(training_block& block, const training_task& task, codec_kind codec,
                                               std::span<std::byte> upload, batch_source& data,
                                               const std::atomic<bool>* cancel, std::span<const float> received) {
  local_trainer trainer(task.arch, memory_rows(task), block.buffers());
  std::optional<normalized_batches> normalized;
  if (task.normalization && !task.normalization->empty()) normalized.emplace(data, *task.normalization);
  batch_source& source = normalized ? static_cast<batch_source&>(*normalized) : data;
  TESSERA_ASSIGN_OR_RETURN(auto report,
                           trainer.run(block.params(), source, {.steps = task.steps, .sgd = task.sgd, .batch = task.batch, .cancel = cancel}));
  // Diverged: the report could not even be sent (a loss that is not a number), and the parameters
  // are of no use to anyone.
  if (!std::isfinite(report.mean_loss))
    return make_error(errc::not_finite, "training diverged: the mean loss over " + std::to_string(report.steps) + " steps is not finite");
  if (task.clip_norm > 0) {
    if (received.size() != block.params().size())
      return make_error(errc::invalid_argument, "clipping the change needs the received parameters");
    report.clipped = clip_change(received, block.params(), task.clip_norm) > task.clip_norm;
  }
  if (codec != codec_kind::f32) TESSERA_TRY(encode_update(task.arch, codec, block.params(), upload));
  return report;
}

}  // namespace tessera::core
