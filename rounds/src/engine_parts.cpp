// What the drivers reach of the run's secure and private parts (secure_aggregation.hpp,
// private_aggregation.hpp) and of its cohorts: the hub drives the secure protocol's steps, restores the
// accountant from its checkpoint and reports ε; the simulator seeds the draws and adds plain encodings.
#include <algorithm>

#include "cohort.hpp"
#include "private_aggregation.hpp"
#include "secure_aggregation.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/natural_order.hpp"

namespace tessera::rounds {

std::size_t engine::beside_arena(const core::mlp_arch& arch) const noexcept {
  return core::beside_arena(arch, aggregation_->masked_segments(), aggregation_->clips());
}

std::size_t engine::whole_model_bytes(std::int64_t rows) const noexcept {
  return core::bytes_needed(full_, rows > 0 ? rows : config_.memory_rows(), config_.momentum != 0.0f, config_.codec) + beside_arena(full_);
}

const crypto::secagg_params& engine::secagg_params() const {
  TESSERA_ASSERT(secure_ != nullptr);
  return secure_->params();
}

crypto::secagg_server& engine::secagg_server() {
  TESSERA_ASSERT(secure_ != nullptr);
  return secure_->server();
}

const secure_outcome& engine::last_secure() const noexcept {
  static const secure_outcome none;
  return secure_ != nullptr ? secure_->outcome() : none;
}

bool engine::secure_round_open() const noexcept { return secure_ != nullptr && secure_->open(); }

double engine::secure_weight(const assignment& a, std::uint64_t examples) noexcept {
  const auto most = static_cast<double>(a.task.steps) * static_cast<double>(a.task.batch);
  return most > 0 ? std::min(1.0, static_cast<double>(examples) / most) : 0.0;
}

void engine::set_population(std::size_t registered) noexcept {
  refusals_.population = registered;
  if (private_ != nullptr) private_->set_population(registered);
}

void engine::set_round_cap(std::size_t most) noexcept {
  cohort_.cap = most;
  if (private_ != nullptr) private_->set_cap(cohort_size());
}

void engine::use_seeded_draws() noexcept {
  cohort_.seeded = true;
  if (private_ != nullptr) private_->use_seeded();
}

std::size_t engine::cohort_size() const noexcept {
  const std::size_t a = config_.devices_per_round, b = cohort_.cap;
  return a == 0 ? b : b == 0 ? a : std::min(a, b);
}

core::result<std::vector<device_offer>> engine::draw_cohort(std::vector<device_offer> offers, std::string_view purpose) const {
  std::sort(offers.begin(), offers.end(), [](const auto& a, const auto& b) { return natural_less(a.id, b.id); });
  return draw_from(std::move(offers), cohort_size(), cohort_.seeded, config_.seed, current_round(), purpose);
}

const core::rdp_accountant& engine::privacy() const noexcept {
  static const core::rdp_accountant none;
  return private_ != nullptr ? private_->accountant() : none;
}

void engine::restore_privacy(core::rdp_accountant a, double clip, std::optional<core::rdp_accountant> against_hub) noexcept {
  if (private_ != nullptr) private_->restore(std::move(a), clip, std::move(against_hub));
}

std::optional<core::rdp_accountant> engine::privacy_against_hub() const {
  return private_ != nullptr ? private_->hub_accountant() : std::nullopt;
}

std::optional<double> engine::epsilon_hub() const { return private_ != nullptr ? private_->epsilon_hub() : std::nullopt; }

double engine::dp_clip() const noexcept { return private_ != nullptr ? private_->clip() : config_.dp.clip; }

double engine::epsilon() const { return privacy().epsilon(config_.dp.delta).epsilon; }

const std::string& engine::privacy_stop() const noexcept {
  static const std::string none;
  return private_ != nullptr ? private_->stop_message() : none;
}

core::result<private_ring> engine::private_ring_for(std::size_t population) const {
  return make_private_ring(config_, params_.size(), population);
}

}  // namespace tessera::rounds
