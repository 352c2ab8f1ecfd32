// The engine's evaluation of the model a round closed with: on the hub's validation set (close_round),
// on the devices' validation splits (plan_evaluation, note_federated), and early stopping's count.
#include <algorithm>
#include <cstdio>

#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/natural_order.hpp"
#include "cohort.hpp"

namespace tessera::rounds {

void engine::note_score(double score) {
  if (!stopping_.have_best || score > stopping_.best_score) {
    stopping_.have_best = true;
    stopping_.best_score = score;
    stopping_.evals_since_best = 0;
  } else if (config_.evaluation.patience > 0 && ++stopping_.evals_since_best >= config_.evaluation.patience) {
    stopping_.stopped = true;
  }
}

bool engine::evaluation_due() const noexcept {
  // The last round always evaluates, also when the run stops early (its privacy budget).
  return !in_round_ && completed_ > 0 && (completed_ % config_.evaluation.every == 0 || completed_ == config_.rounds || !aggregation_->stop_reason().empty());
}

core::result<std::vector<evaluator>> engine::plan_evaluation(std::vector<device_offer> offers, std::vector<excluded_device>& excluded) const {
  std::sort(offers.begin(), offers.end(), [](const auto& a, const auto& b) { return natural_less(a.id, b.id); });
  std::vector<evaluator> out;
  for (const auto& o : offers) {
    if (o.validation_examples == 0) continue;
    const core::codec_kind codec = codec_for(o);
    const std::size_t need = core::inference_bytes(full_, config_.memory_rows(), codec);
    if (o.capacity <= 0 && need > o.budget_bytes) {
      excluded.push_back({o.id, "scoring the whole model needs " + core::mib_text(need) + "; the budget is " + core::mib_text(o.budget_bytes)});
      continue;
    }
    out.push_back({.id = o.id, .codec = codec, .blob_bytes = core::encoded_bytes(full_, codec), .examples = o.validation_examples});
  }
  // A cohort of those who can score, as a round's: at random, never the first by id.
  return draw_from(std::move(out), cohort_size(), cohort_.seeded, config_.seed, completed_, "tessera evaluation v1");
}

core::training_task engine::evaluation_task() const {
  return {.arch = full_,
          .steps = 1,
          .batch = config_.memory_rows(),  // scoring holds these rows at a time: within the budget planned
          .sgd = {},
          .normalization = normalization_->empty() ? nullptr : normalization_};
}

core::result<void> engine::encode_model(core::codec_kind codec, std::span<std::byte> out) const {
  TESSERA_ASSERT(out.size() == core::encoded_bytes(full_, codec));
  return core::encode(full_, codec, params_, out);
}

void engine::note_federated(const federated_scores& scores, round_metrics& m) {
  scores.fill(m, config_.model.task == core::task_kind::classification);
  if (!m.fed.devices) return;
  // auto: the hub's own figure when it evaluated this round (close_round filled test_loss), else these.
  const bool watch = config_.evaluation.patience_on == patience_kind::federated ||
                     (config_.evaluation.patience_on == patience_kind::automatic && !m.test_loss);
  if (watch) note_score(m.fed.accuracy ? *m.fed.accuracy : -*m.fed.loss);
}

}  // namespace tessera::rounds
