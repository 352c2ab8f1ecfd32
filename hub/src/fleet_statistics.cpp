#include "fleet_statistics.hpp"

namespace tessera::hub {
namespace {

using core::log_level;

// Bytes of base64 for `n` float64 values.
std::size_t base64_bytes(std::size_t n) { return (n * 8 + 2) / 3 * 4; }

}  // namespace

core::result<void> check_frame_room(const hub_config& config) {
  if (config.model.input_normalization != core::input_normalization_kind::standardize) return {};
  // The largest statistics message is pass 1's reply: three arrays of float64 per feature and a count
  // per class. It travels as one control frame, so it must fit in one.
  const auto f = static_cast<std::size_t>(config.model.inputs);
  const std::size_t need = 3 * base64_bytes(f) + 21 * static_cast<std::size_t>(config.model.outputs) + 512;
  const std::uint32_t limit = net::to_session_config(config.link).max_frame_payload;
  if (need > limit)
    return core::make_error(core::errc::invalid_spec, "model.inputs " + std::to_string(f) + " with input_normalization standardize: a device's " +
                                                          "statistics take " + std::to_string(need) + " bytes, more than a control frame holds (" +
                                                          std::to_string(limit) + ")");
  return {};
}

fleet_statistics::fleet_statistics(const hub_context& ctx, device_registry& devices)
    : ctx_(&ctx), devices_(&devices), gathering_(ctx.config.model, ctx.config.statistics.min_examples) {
  if (ctx.config.secure_aggregation.enabled) gathering_.mask_with(ctx.config.secure_aggregation);
}

core::result<void> fleet_statistics::begin(std::vector<rounds::device_offer> offers) {
  TESSERA_ASSIGN_OR_RETURN(const auto excluded, gathering_.begin(std::move(offers)));
  for (const auto& e : excluded) ctx_->say(log_level::warning, "device " + e.id + " is not asked for statistics: " + e.reason);
  ctx_->say(log_level::info, "measuring the fleet's input statistics on " + std::to_string(gathering_.asked().size()) + " device(s)");
  return {};
}

bool fleet_statistics::ask() {
  const auto& model = ctx_->config.model;
  net::msg::stats m{.pass = static_cast<std::uint32_t>(gathering_.pass()),
                    .task = model.task,
                    .inputs = static_cast<std::uint64_t>(model.inputs),
                    .outputs = static_cast<std::uint64_t>(model.outputs)};
  if (m.pass == 2) {
    m.mean = gathering_.mean();
    m.target_mean = gathering_.target_mean();
  }
  if (gathering_.masked()) return ask_masked(std::move(m));
  for (const auto& id : gathering_.asked()) {
    device_entry* d = devices_->find(id);
    if (d == nullptr || !d->session) leave_out(id, "it is not connected");
    else d->session->send(m);
  }
  return gathering_.pass_complete();
}

// The pass as a masked sum over the asked devices: each gets the sum's secure part with its own
// rounding key, and the scale its vector is divided by.
bool fleet_statistics::ask_masked(net::msg::stats m) {
  secure_.reset();
  party_ = nullptr;
  cannot_mask_.reset();
  auto sum = gathering_.begin_masked_pass();
  if (!sum) {
    cannot_mask_ = sum.error();
    return true;
  }
  const std::string what = "the statistics' pass " + std::to_string(m.pass);
  auto party = std::make_unique<sum_party>(std::move(sum).value(), what, 0);
  party_ = party.get();
  secure_.emplace(*ctx_, std::move(party), *devices_);
  const auto scale = gathering_.scale();
  m.max_examples = static_cast<std::uint64_t>(scale.max_examples);
  m.bounds = scale.bounds;
  const crypto::secagg_params& p = party_->params();
  for (const auto& id : party_->sum().members()) {
    device_entry* d = devices_->find(id);
    if (d == nullptr || !d->session) {
      ctx_->say(log_level::warning, "device " + id + " left out of " + what + ": it is not connected");
      party_->refuse(id, "it is not connected");
      continue;
    }
    m.secure = party_->part_for(id);
    d->session->send(m);
  }
  ctx_->say(log_level::info, what + " as a masked sum over " + std::to_string(party_->open_members().size()) + " device(s) (threshold " +
                                 std::to_string(p.threshold) + "): the hub receives masked values only");
  return false;
}

core::result<void> fleet_statistics::finish_pass() {
  if (!gathering_.masked()) return gathering_.finish_pass();
  if (cannot_mask_) return *cannot_mask_;
  TESSERA_ASSERT(party_ != nullptr);
  auto released = party_->sum().finish();
  if (!released) return released.error();
  return gathering_.add_released(released.value());
}

bool fleet_statistics::expects(const std::string& id, std::uint64_t pass) const {
  if (static_cast<int>(pass) != gathering_.pass()) return false;
  if (party_ != nullptr) return party_->open_segments(id) != nullptr && secure_->at() == secure_steps::step::uploads;
  return gathering_.is_asked(id);
}

bool fleet_statistics::on_reply(const std::string& id, const net::msg::stats_reply& r) {
  if (party_ != nullptr) return secure_->take_vector(*party_, id, r.masked);
  core::result<void> ok;
  if (r.pass == 1) {
    ok = gathering_.add_sums(id, {.examples = static_cast<std::int64_t>(r.examples),
                                  .sum = r.sum,
                                  .min = r.min,
                                  .max = r.max,
                                  .label_counts = r.label_counts,
                                  .target_sum = r.target_sum});
  } else {
    ok = gathering_.add_spread(id, {.examples = static_cast<std::int64_t>(r.examples), .sq_dev = r.sq_dev, .target_sq_dev = r.target_sq_dev});
  }
  if (!ok) leave_out(id, ok.error().message);
  return gathering_.pass_complete();
}

bool fleet_statistics::drop(const std::string& id, const std::string& why) {
  if (party_ != nullptr) {
    if (party_->open_segments(id) == nullptr) return false;
    ctx_->say(log_level::warning, "device " + id + " left out of " + party_->what() + ": " + why);
    party_->refuse(id, why);
    return secure_->after_leaving();
  }
  if (!gathering_.is_asked(id)) return false;
  leave_out(id, why);
  return gathering_.pass_complete();
}

void fleet_statistics::time_out() {
  if (party_ != nullptr) return;  // the protocol ends the pass (its unmasking goes on with who uploaded)
  for (const auto& id : gathering_.waiting()) leave_out(id, "no answer within round_deadline_s");
}

std::string fleet_statistics::unasked(const std::string& id, std::uint64_t pass) {
  return "device " + id + " sent statistics (pass " + std::to_string(pass) + ") that were not asked for";
}

void fleet_statistics::leave_out(const std::string& id, const std::string& why) {
  ctx_->say(log_level::warning, "device " + id + " left out of the statistics: " + why);
  gathering_.drop(id, why);
}

}  // namespace tessera::hub
