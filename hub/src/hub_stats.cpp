// The hub's statistics phase: before round 1 of a model that standardizes its inputs, the fleet's
// feature statistics in two passes (rounds/statistics.hpp holds the state, core/fed_stats.hpp the sums).
#include <cstdio>

#include "tessera/hub/error.hpp"
#include "tessera/hub/hub.hpp"
#include "device_registry.hpp"
#include "hub_context.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::hub {
namespace {

using core::log_level;

// Bytes of base64 for `n` float64 values.
std::size_t base64_bytes(std::size_t n) { return (n * 8 + 2) / 3 * 4; }

}  // namespace

core::result<void> hub_service::check_frame_room() const {
  if (ctx_->config.model.input_normalization != core::input_normalization_kind::standardize) return {};
  // The largest statistics message is pass 1's reply: three arrays of float64 per feature and a count
  // per class. It travels as one control frame, so it must fit in one.
  const auto f = static_cast<std::size_t>(ctx_->config.model.inputs);
  const std::size_t need = 3 * base64_bytes(f) + 21 * static_cast<std::size_t>(ctx_->config.model.outputs) + 512;
  const std::uint32_t limit = net::to_session_config(ctx_->config.link).max_frame_payload;
  if (need > limit)
    return core::make_error(core::errc::invalid_spec, "model.inputs " + std::to_string(f) + " with input_normalization standardize: a device's " +
                                                          "statistics take " + std::to_string(need) + " bytes, more than a control frame holds (" +
                                                          std::to_string(limit) + ")");
  return {};
}

void hub_service::start_statistics(std::vector<rounds::device_offer> offers) {
  if (!stats_) stats_ = std::make_unique<rounds::stats_gathering>(ctx_->config.model, ctx_->config.min_stats_examples);
  auto excluded = stats_->begin(std::move(offers));
  if (!excluded) {
    log(log_level::warning, "the fleet's statistics cannot start: " + excluded.error().message);
    waiting_since_ = std::chrono::steady_clock::now();  // wait another device_wait_s for the fleet to change
    return;
  }
  for (const auto& e : excluded.value()) log(log_level::warning, "device " + e.id + " is not asked for statistics: " + e.reason);
  waiting_ = false;
  wait_timer_.cancel();
  log(log_level::info, "measuring the fleet's input statistics on " + std::to_string(stats_->asked().size()) + " device(s)");
  ask_statistics();
}

void hub_service::ask_statistics() {
  net::msg::stats m{.pass = static_cast<std::uint32_t>(stats_->pass()),
                    .task = ctx_->config.model.task,
                    .inputs = static_cast<std::uint64_t>(ctx_->config.model.inputs),
                    .outputs = static_cast<std::uint64_t>(ctx_->config.model.outputs)};
  if (m.pass == 2) {
    m.mean = stats_->mean();
    m.target_mean = stats_->target_mean();
  }
  for (const auto& id : stats_->asked()) {
    device_entry* d = devices_->find(id);
    if (d == nullptr || !d->session) {
      log(log_level::warning, "device " + id + " left out of the statistics: it is not connected");
      stats_->drop(id, "it is not connected");
    } else {
      d->session->send(m);
    }
  }
  if (stats_->pass_complete()) return end_statistics_pass();
  const int pass = stats_->pass();
  deadline_timer_.expires_after(std::chrono::milliseconds(static_cast<std::int64_t>(ctx_->config.round_deadline_s * 1000.0)));
  deadline_timer_.async_wait([this, pass](const boost::system::error_code& ec) {
    if (ec || stopping_ || !stats_ || stats_->pass() != pass) return;
    for (const auto& id : stats_->waiting()) {
      log(log_level::warning, "device " + id + " left out of the statistics: no answer within round_deadline_s");
      stats_->drop(id, "no answer within round_deadline_s");
    }
    end_statistics_pass();
  });
}

void hub_service::on_stats_reply(const std::shared_ptr<net::session>& s, const net::msg::stats_reply& r) {
  const std::string& id = s->peer_device_id();
  if (!stats_ || !stats_->is_asked(id) || static_cast<int>(r.pass) != stats_->pass()) {
    log(log_level::warning, "device " + id + " sent statistics (pass " + std::to_string(r.pass) + ") that were not asked for");
    return;
  }
  core::result<void> ok;
  if (r.pass == 1) {
    ok = stats_->add_sums(id, {.examples = static_cast<std::int64_t>(r.examples),
                               .sum = r.sum,
                               .min = r.min,
                               .max = r.max,
                               .label_counts = r.label_counts,
                               .target_sum = r.target_sum});
  } else {
    ok = stats_->add_spread(id, {.examples = static_cast<std::int64_t>(r.examples), .sq_dev = r.sq_dev, .target_sq_dev = r.target_sq_dev});
  }
  if (!ok) {
    log(log_level::warning, "device " + id + " left out of the statistics: " + ok.error().message);
    stats_->drop(id, ok.error().message);
  }
  if (stats_->pass_complete()) end_statistics_pass();
}

void hub_service::drop_from_statistics(const std::string& id, const std::string& why) {
  if (!stats_ || !stats_->is_asked(id)) return;
  log(log_level::warning, "device " + id + " left out of the statistics: " + why);
  stats_->drop(id, why);
  if (stats_->pass_complete()) end_statistics_pass();
}

void hub_service::end_statistics_pass() {
  deadline_timer_.cancel();
  const int pass = stats_->pass();
  if (auto ok = stats_->finish_pass(); !ok) {
    log(log_level::warning, "the fleet's statistics (pass " + std::to_string(pass) + "): " + ok.error().message + "; starting again");
    waiting_ = true;
    waiting_since_ = std::chrono::steady_clock::now();
    arm_wait_timer();
    return;
  }
  if (stats_->at() == rounds::stats_gathering::phase::spread) {
    ask_statistics();
    return;
  }
  auto normalization = stats_->normalization();
  if (!normalization) return finish("the fleet's statistics: " + normalization.error().message);
  const nlohmann::json summary = stats_->summary();
  if (auto ok = engine_->set_normalization(std::move(normalization).value(), summary); !ok)
    return finish("the fleet's statistics: " + ok.error().message);
  log(log_level::info, "the fleet's input statistics: " + summary.dump());
  stats_.reset();
  // Checkpointed before round 1: a restarted hub does not ask again.
  if (auto saved = recorder_->save_state(*engine_, devices_->records()); !saved) return finish(saved.error().message);
  waiting_ = true;
  waiting_since_ = std::chrono::steady_clock::now() - std::chrono::hours(1);  // the fleet has waited already
  maybe_start_round();
  if (waiting_) arm_wait_timer();
}

}  // namespace tessera::hub
