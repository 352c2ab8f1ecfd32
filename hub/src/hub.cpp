#include "tessera/hub/hub.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>

#include "tessera/core/file_io.hpp"
#include "tessera/core/targets.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/hub/error.hpp"
#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "revocations.hpp"
#include "refusal_log.hpp"
#include "tessera/net/task.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::hub {
namespace {

using clock_type = std::chrono::steady_clock;
using core::log_level;
using rounds::assignment;
using rounds::assignment_state;
using rounds::is_open;

}  // namespace

hub_service::hub_service(boost::asio::io_context& io, const hub_config& config, core::log_sink log)
    : io_(io), ctx_(std::make_unique<hub_context>(hub_context{.config = config, .log = std::move(log)})),
      obs_(std::make_unique<hub_figures>()), refused_(std::make_unique<refusal_log>()), crl_timer_(io), secure_timer_(io),
      wait_timer_(io), deadline_timer_(io) {
  // Transfer ids start at random: a restarted hub never offers bytes of another run's download under an
  // id an agent still holds.
  std::random_device rd;
  devices_ = std::make_unique<device_registry>(((static_cast<std::uint64_t>(rd()) << 32) ^ rd()) & ~net::upload_bit & ~std::uint64_t{0xffff});
}

hub_service::~hub_service() = default;

core::result<std::unique_ptr<hub_service>> hub_service::create(boost::asio::io_context& io, const hub_config& config,
                                                               core::log_sink log) {
  std::unique_ptr<hub_service> h(new hub_service(io, config, std::move(log)));
  TESSERA_ASSIGN_OR_RETURN(revocations revoked, revocations::load(*h->ctx_));
  h->revoked_ = std::make_unique<revocations>(std::move(revoked));
  std::error_code ec;
  rounds::recorder_settings rs;
  if (!config.seal_key.empty()) {
    TESSERA_ASSIGN_OR_RETURN(rs.seal_key, crypto::sealing_key::load(config.seal_key));
  }
  if (config.validation) {
    TESSERA_ASSIGN_OR_RETURN(core::memory_table v, core::load_data(*config.validation, nullptr));
    h->validation_ = std::make_unique<core::memory_table>(std::move(v));
    core::target_summary targets;
    targets.add(h->validation_->targets());
    TESSERA_TRY(core::check_targets(targets, config.model.task, config.model.outputs, *config.validation));
    if (h->validation_->feature_count() != config.model.inputs)
      return core::make_error(core::errc::invalid_spec, h->validation_->describe() + ": " +
                                                            std::to_string(h->validation_->feature_count()) +
                                                            " features per example, but model.inputs is " +
                                                            std::to_string(config.model.inputs));
  }
  if (!config.audit_uploads.empty()) {
    std::filesystem::create_directories(config.audit_uploads, ec);
    if (ec) return core::make_error(core::errc::io, config.audit_uploads + ": cannot create the audit_uploads folder: " + ec.message());
  }
  // Resume from the latest checkpoint, or start from the seeded initial model.
  std::vector<float> params(core::param_count(config.model.full_arch()));
  core::initialize(config.model, params);
  h->engine_ = std::make_unique<rounds::engine>(config, std::move(params), 0);
  if (!config.checkpoint_dir.empty()) {
    std::filesystem::create_directories(config.checkpoint_dir, ec);
    if (ec) return core::make_error(core::errc::io, config.checkpoint_dir + ": cannot create the checkpoint folder: " + ec.message());
    rs.checkpoint = std::filesystem::path(config.checkpoint_dir) / "hub.ckpt";
    // The newest checkpoint, or the previous one if the newest is missing or corrupt (a crash while it
    // was being replaced, a damaged disk). Another run's checkpoint is refused, never passed over.
    TESSERA_ASSIGN_OR_RETURN(auto loaded, rounds::load_latest_checkpoint(rs.checkpoint, config.model, rs.seal_key ? &*rs.seal_key : nullptr));
    if (loaded) {
      const std::string file = loaded->file.string();
      h->devices_->restore(loaded->state.registry);
      h->resumed_from_ = loaded->state.round;
      if (auto ok = h->engine_->restore(std::move(loaded->state)); !ok) return core::error{ok.error().code, file + ": " + ok.error().message};
      if (const auto& fb = loaded->fell_back_from)
        h->log(log_level::warning, "checkpoint " + fb->reason.message + "; resumed from the previous one (" + file + "), after round " +
                                       std::to_string(h->resumed_from_));
    }
  }
  TESSERA_TRY(h->check_frame_room());
  TESSERA_ASSIGN_OR_RETURN(h->recorder_, rounds::recorder::open(config, std::move(rs), h->ctx_->log));
  TESSERA_TRY(h->revoked_->load_operator_list());
  h->obs_->load_round_series(config.metrics_path, h->resumed_from_);
  return h;
}

void hub_service::log(log_level level, const std::string& text) const {
  ctx_->say(level, text);
}

core::result<std::uint16_t> hub_service::start() {
  net::session_config sc = net::to_session_config(ctx_->config.link);
  sc.handshake_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(ctx_->config.handshake_timeout_s * 1000.0));
  server_ = net::server::create(io_, revoked_->tls(), sc,
                                {.max_sessions = ctx_->config.max_sessions,
                                 .max_handshakes = ctx_->config.max_handshakes,
                                 .max_handshakes_per_source = ctx_->config.max_handshakes_per_source});
  server_->on_session([this](const std::shared_ptr<net::session>& s) { attach(s); });
  TESSERA_ASSIGN_OR_RETURN(const std::uint16_t port, server_->listen(ctx_->config.listen.host, ctx_->config.listen.port));
  TESSERA_TRY(start_endpoint());
  if (resumed_from_ > 0)
    log(log_level::info, "resumed from checkpoint after round " + std::to_string(resumed_from_) + " (" +
                             std::to_string(devices_->size()) + " devices known" +
                             (engine_->private_rounds() ? ", ε " + std::to_string(engine_->epsilon()) + " spent" : "") +
                             (engine_->epsilon_hub() ? " (against the hub " + std::to_string(*engine_->epsilon_hub()) + ")" : "") + ")");
  if (engine_->private_rounds()) {
    const auto& d = ctx_->config.dp;
    log(log_level::info, std::string(engine_->secure() ? "differential privacy: each device adds its share of the noise under secure aggregation "
                                                        "(Skellam in the ring; any " + std::to_string(ctx_->config.secure_aggregation.min_aggregate()) +
                                                        " contributors carry all of it)"
                                                      : "differential privacy: the hub adds the noise (no secure aggregation)") +
                             ": devices sampled with q " +
                             std::to_string(d.sample_rate) + ", changes clipped to " + std::to_string(d.clip) + ", noise σ " +
                             std::to_string(d.noise_multiplier) + " × clip, δ " + std::to_string(d.delta) +
                             (d.target_epsilon > 0 ? ", stopping before ε" +
                                                         std::string(engine_->secure() && d.target_observer == rounds::dp_observer::hub
                                                                         ? " against the hub" : "") +
                                                         " passes " + std::to_string(d.target_epsilon)
                                                   : "") +
                             (d.adaptive_clip ? "; the clip adapts toward the " + std::to_string(d.target_quantile) + " quantile of the changes' norms" : ""));
  }
  if (engine_->finished()) {
    finish("");
    return port;
  }
  waiting_ = true;
  waiting_since_ = clock_type::now();
  arm_wait_timer();
  watch_revocations();
  return port;
}

void hub_service::attach(const std::shared_ptr<net::session>& s) {
  std::weak_ptr<net::session> weak = s;
  s->on_message([this, weak](const net::message& m) {
    auto self = weak.lock();
    if (!self) return;
    if (const auto* h = std::get_if<net::msg::hello>(&m)) on_hello(self, *h);
    else if (const auto* u = std::get_if<net::msg::update>(&m)) on_update(self, *u);
    else if (const auto* r = std::get_if<net::msg::refuse>(&m)) on_refuse(self, *r);
    else if (const auto* st = std::get_if<net::msg::stats_reply>(&m)) on_stats_reply(self, *st);
    else if (const auto* ev = std::get_if<net::msg::evaluation>(&m)) on_evaluation(self, *ev);
    else if (std::holds_alternative<net::msg::secagg_keys>(m) || std::holds_alternative<net::msg::secagg_shares>(m) ||
             std::holds_alternative<net::msg::secagg_unmask_reply>(m))
      on_secure(self, m);
  });
  s->on_blob_received([this, weak](const std::shared_ptr<net::incoming_transfer>& in) {
    if (auto self = weak.lock()) on_upload(self, in);
  });
  s->on_blob_sent([this, weak](const std::shared_ptr<net::outgoing_transfer>& out) {
    if (auto self = weak.lock()) on_download_sent(self->peer_device_id(), out);
  });
  s->on_closed([this, weak](const core::error& why) {
    if (auto self = weak.lock()) on_closed(self, why);
  });
}

void hub_service::arm_wait_timer() {
  // Re-check once a second: devices come and go, and device_wait_s runs out.
  wait_timer_.expires_after(std::chrono::seconds(1));
  wait_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_ || !waiting_) return;
    maybe_start_round();
    if (waiting_) arm_wait_timer();
  });
}

void hub_service::maybe_start_round() {
  if (!waiting_ || stopping_ || paused_) return;
  const std::size_t ready = devices_->ready_count();
  const bool waited = clock_type::now() - waiting_since_ >= core::seconds_to_ms(ctx_->config.device_wait_s);
  if (ready >= ctx_->config.max_devices || (waited && ready >= ctx_->config.min_devices)) start_round();
}

void hub_service::start_round() {
  const auto planning = clock_type::now();
  if (finish_requested_) return finish("");
  reload_revocations();
  if (engine_->needs_statistics()) return start_statistics(devices_->ready_offers(ctx_->config.max_devices));
  engine_->set_population(devices_->size());  // differential privacy: every registered device, connected or not
  engine_->set_private_round_cap(ctx_->config.max_devices);
  // A private round draws its sample from every ready device and caps it itself (at random, not by id).
  auto excluded = engine_->begin_round(
      devices_->ready_offers(engine_->private_rounds() ? device_registry::k_no_cap : ctx_->config.max_devices));
  if (!excluded && excluded.error().code == rounds::errc::privacy_budget) {
    log(log_level::info, "stopping: " + excluded.error().message);
    finish("");
    return;
  }
  if (!excluded) {
    log(log_level::warning, "round " + std::to_string(engine_->current_round()) + " cannot start: " + excluded.error().message);
    waiting_since_ = clock_type::now();  // wait another device_wait_s for the fleet to change
    return;
  }
  for (const auto& e : excluded.value())
    log(log_level::warning, "device " + e.id + " left out of round " + std::to_string(engine_->current_round()) + ": " + e.reason);
  waiting_ = false;
  wait_timer_.cancel();
  round_started_ = planning;  // a round's seconds cover planning to checkpoint
  for (auto& a : engine_->assignments()) {
    device_entry& d = (*devices_)[a.device];
    d.upload.reset();
    d.download.reset();
    send_assignment(d, a);
  }
  if (engine_->secure_round_open()) start_secure();
  deadline_timer_.expires_after(core::seconds_to_ms(ctx_->config.round_deadline_s));
  deadline_timer_.async_wait([this, round = engine_->current_round()](const boost::system::error_code& ec) {
    if (ec || stopping_ || !engine_->in_round() || engine_->current_round() != round) return;
    end_collection();
  });
  if (engine_->all_reported()) end_collection();  // every download failed to encode
}

void hub_service::close_round() {
  deadline_timer_.cancel();
  secure_timer_.cancel();
  for (const auto& a : engine_->assignments()) {
    if (is_open(a.state))
      log(log_level::warning, "device " + a.device + " missed the deadline of round " + std::to_string(engine_->current_round()) +
                                  ": its neurons keep their values");
    (*devices_)[a.device].upload.reset();  // a late upload still arriving is answered "round closed"
  }
  auto m = engine_->close_round(validation_.get());
  if (!m) {
    finish("round " + std::to_string(engine_->current_round()) + ": " + m.error().message);
    return;
  }
  if (secure_) {
    const rounds::secure_outcome& o = engine_->last_secure();
    std::string steps;
    for (const auto& [step, seconds] : secure_->timings) steps += " " + step + " " + std::to_string(seconds).substr(0, 5) + " s,";
    log(o.withheld.empty() ? log_level::info : log_level::warning,
        "round " + std::to_string(engine_->completed()) + ": secure aggregation released " + std::to_string(o.released) + " of " +
            std::to_string(o.segments) + " sums (" + std::to_string(o.dropped) + " device(s) dropped, " + std::to_string(o.clipped) +
            " values clipped); 3 extra round trips:" + steps.substr(0, steps.empty() ? 0 : steps.size() - 1) +
            (o.withheld.empty() ? "" : "; withheld: " + o.withheld));
    secure_.reset();
  }
  const rounds::round_faults& f = engine_->last_faults();
  m.value().stragglers = f.stragglers;
  m.value().refused = f.refused;
  m.value().rejected = f.rejected;
  m.value().resent_bytes = f.resent_bytes;
  obs_->stragglers += static_cast<double>(f.stragglers);
  for (const auto& a : engine_->assignments()) {
    device_entry& d = (*devices_)[a.device];
    if (a.state == assignment_state::accepted) ++d.record.rounds_done;
    else ++d.record.rounds_missed;
  }
  if (engine_->evaluation_due()) return start_evaluation(std::move(m).value());
  after_round(m.value());
}

void hub_service::after_round(rounds::round_metrics& m) {
  if (auto saved = recorder_->record(*engine_, m, round_started_, devices_->records()); !saved) {
    finish(saved.error().message);
    return;
  }
  obs_->observe_round(m);
  if (finish_requested_) {
    log(log_level::info, "finishing after round " + std::to_string(m.round) + " as the operator asked");
    finish("");
    return;
  }
  if (engine_->finished()) {
    if (!engine_->privacy_stop().empty()) log(log_level::info, "stopping: " + engine_->privacy_stop());
    finish("");
    return;
  }
  waiting_ = true;
  waiting_since_ = clock_type::now();
  maybe_start_round();
  if (waiting_) arm_wait_timer();
}

void hub_service::finish(const std::string& failure) {
  failure_ = failure;
  if (failure.empty()) {
    if (auto saved = recorder_->finish(*engine_); !saved) failure_ = saved.error().message;
  }
  if (!failure_.empty()) log(log_level::error, failure_);
  finished_ = failure_.empty();
  stop();
}

void hub_service::stop() {
  if (stopping_) return;
  stopping_ = true;
  waiting_ = false;
  wait_timer_.cancel();
  deadline_timer_.cancel();
  secure_timer_.cancel();
  crl_timer_.cancel();
  devices_->release_sessions();
  if (server_) server_->stop();
  if (endpoint_) endpoint_->stop();
  if (on_stopped_) on_stopped_();
}

}  // namespace tessera::hub
