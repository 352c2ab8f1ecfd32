// What the drivers reach of the run's secure and private parts (secure_aggregation.hpp,
// private_aggregation.hpp): the hub drives the secure protocol's steps, restores the accountant from
// its checkpoint and reports ε; the simulator seeds the privacy draws and adds plain encodings.
#include "private_aggregation.hpp"
#include "secure_aggregation.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/rounds/engine.hpp"

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

void engine::set_private_round_cap(std::size_t most) noexcept {
  if (private_ != nullptr) private_->set_cap(most);
}

void engine::use_seeded_privacy() noexcept {
  if (private_ != nullptr) private_->use_seeded();
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
