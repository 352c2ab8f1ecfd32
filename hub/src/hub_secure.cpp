// The hub's side of secure aggregation (crypto/secagg.hpp, DESIGN §6). The engine holds the protocol's
// server and applies the sums; this file moves a round through the protocol's steps on the network:
//
//   ASSIGN{secure} ─▶ SECAGG_KEYS from each device   (secure_step_s; who is late cannot take part)
//   SECAGG_ROSTER  ─▶ SECAGG_SHARES from each member (secure_step_s; who is late cannot take part)
//   SECAGG_INBOX   ─▶ UPDATE + the masked upload     (round_deadline_s, as any round)
//   SECAGG_UNMASK  ─▶ SECAGG_UNMASK_REPLY            (secure_step_s) ─▶ close_round: the sums
//
// The hub relays keys and encrypted shares and adds masked vectors: it never holds one device's update.
#include <algorithm>
#include <utility>

#include "tessera/hub/hub.hpp"
#include "device_registry.hpp"
#include "hub_context.hpp"

namespace tessera::hub {

using core::log_level;
using rounds::is_open;

namespace {

std::string_view step_name(int step) {
  static constexpr std::string_view names[] = {"keys", "shares", "uploads", "unmasking"};
  return names[step];
}

}  // namespace

void hub_service::start_secure() {
  secure_ = std::make_unique<secure_phase>();
  secure_->step_started = std::chrono::steady_clock::now();
  arm_secure_timer();
}

void hub_service::arm_secure_timer() {
  secure_timer_.expires_after(core::seconds_to_ms(ctx_->config.secure_step_s));
  secure_timer_.async_wait([this, round = engine_->current_round(), step = secure_->at](const boost::system::error_code& ec) {
    if (ec || stopping_ || !secure_ || !engine_->in_round() || engine_->current_round() != round || secure_->at != step) return;
    log(log_level::warning, "round " + std::to_string(round) + ": the secure aggregation's " + std::string(step_name(static_cast<int>(step))) +
                                " step ran out of secure_step_s: going on with the devices that answered");
    end_secure_step();
  });
}

bool hub_service::secure_step_done() const {
  const secure_phase& sp = *secure_;
  switch (sp.at) {
    case secure_phase::step::keys:
      return std::all_of(engine_->assignments().begin(), engine_->assignments().end(),
                         [&](const rounds::assignment& a) { return !is_open(a.state) || sp.keyed.contains(a.device); });
    case secure_phase::step::shares:
      return std::all_of(sp.roster->begin(), sp.roster->end(), [&](const crypto::secagg_member& m) {
        const rounds::assignment* a = std::as_const(*engine_).find(m.keys.id);
        return sp.shared.contains(m.keys.id) || a == nullptr || !is_open(a->state);
      });
    case secure_phase::step::uploads: return false;
    case secure_phase::step::unmask:
      return std::all_of(sp.request->survivors.begin(), sp.request->survivors.end(),
                         [&](const std::string& id) { return sp.replied.contains(id); });
  }
  return false;
}

void hub_service::send_secure_step(device_entry& d, const std::string& id) {
  const secure_phase& sp = *secure_;
  if (!d.session) return;
  const auto round = static_cast<std::uint64_t>(engine_->current_round());
  switch (sp.at) {
    case secure_phase::step::keys: break;  // the agent sends its keys with each ASSIGN and after a reconnect
    case secure_phase::step::shares:
      // Each member gets the roster with its neighbours' keys (all of them while the graph is complete).
      if (!sp.shared.contains(id))
        if (auto mine = engine_->secagg_server().roster_for(id); mine) d.session->send(net::msg::secagg_roster{.round = round, .roster = std::move(mine).value()});
      break;
    case secure_phase::step::uploads:
      if (sp.shared.contains(id)) d.session->send(net::msg::secagg_inbox{.round = round, .boxes = engine_->secagg_server().inbox(id)});
      break;
    case secure_phase::step::unmask:
      if (!sp.replied.contains(id) && std::find(sp.request->survivors.begin(), sp.request->survivors.end(), id) != sp.request->survivors.end())
        d.session->send(net::msg::secagg_unmask{.round = round, .request = *sp.request});
      break;
  }
}

// The step ends: everyone answered, or its time ran out.
void hub_service::end_secure_step() {
  secure_phase& sp = *secure_;
  const auto now = std::chrono::steady_clock::now();
  sp.timings.emplace_back(step_name(static_cast<int>(sp.at)), std::chrono::duration<double>(now - sp.step_started).count());
  sp.step_started = now;
  const std::string round = std::to_string(engine_->current_round());
  switch (sp.at) {
    case secure_phase::step::keys: {
      for (auto& a : engine_->assignments())
        if (is_open(a.state) && !sp.keyed.contains(a.device)) {
          log(log_level::warning, "device " + a.device + " sent no secure aggregation keys in round " + round + ": left out");
          engine_->refuse(a, "no secure aggregation keys within secure_step_s");
        }
      auto roster = engine_->secagg_server().roster();
      if (!roster) {
        log(log_level::warning, "round " + round + ": secure aggregation cannot go on: " + roster.error().message);
        for (auto& a : engine_->assignments()) engine_->refuse(a, "the round's secure aggregation stopped: " + roster.error().message);
        return close_round();
      }
      sp.roster = std::move(roster).value();
      sp.at = secure_phase::step::shares;
      for (const auto& m : *sp.roster) send_secure_step((*devices_)[m.keys.id], m.keys.id);
      arm_secure_timer();
      if (secure_step_done()) end_secure_step();
      return;
    }
    case secure_phase::step::shares: {
      for (const auto& m : *sp.roster) {
        rounds::assignment* a = engine_->find(m.keys.id);
        if (a != nullptr && is_open(a->state) && !sp.shared.contains(m.keys.id)) {
          log(log_level::warning, "device " + m.keys.id + " sent no secure aggregation shares in round " + round + ": left out");
          engine_->refuse(*a, "no secure aggregation shares within secure_step_s");
        }
      }
      sp.at = secure_phase::step::uploads;
      secure_timer_.cancel();
      for (const auto& id : sp.shared) send_secure_step((*devices_)[id], id);
      if (engine_->all_reported()) end_collection();
      return;
    }
    case secure_phase::step::uploads: return;  // ends by end_collection
    case secure_phase::step::unmask: return close_round();
  }
}

// Every update is in, or the round's deadline passed. A secure round unmasks first.
void hub_service::end_collection() {
  if (!secure_) return close_round();
  secure_phase& sp = *secure_;
  if (sp.at == secure_phase::step::unmask) return;  // already unmasking
  deadline_timer_.cancel();
  if (!sp.roster || sp.at != secure_phase::step::uploads) {
    if (sp.at != secure_phase::step::uploads)
      log(log_level::warning, "round " + std::to_string(engine_->current_round()) + " ended before its secure aggregation's " +
                                  std::string(step_name(static_cast<int>(sp.at))) + " step was over: nothing is released");
    return close_round();
  }
  sp.timings.emplace_back("uploads", std::chrono::duration<double>(std::chrono::steady_clock::now() - sp.step_started).count());
  sp.step_started = std::chrono::steady_clock::now();
  sp.request = engine_->secagg_server().unmask_request();
  sp.at = secure_phase::step::unmask;
  if (sp.request->survivors.size() < engine_->secagg_params().threshold) {
    log(log_level::warning, "round " + std::to_string(engine_->current_round()) + ": " + std::to_string(sp.request->survivors.size()) +
                                " masked updates, below the threshold " + std::to_string(engine_->secagg_params().threshold) +
                                ": nothing is released");
    return close_round();
  }
  for (const auto& id : sp.request->survivors) send_secure_step((*devices_)[id], id);
  arm_secure_timer();
  if (secure_step_done()) end_secure_step();
}

void hub_service::on_secure(const std::shared_ptr<net::session>& s, const net::message& m) {
  const std::string& id = s->peer_device_id();
  (*devices_)[id].seen();
  const std::uint64_t round = net::round_of(m);
  const std::string what = std::string(net::to_string(net::type_of(m))) + " from " + id;
  if (!secure_ || !engine_->in_round() || round != static_cast<std::uint64_t>(engine_->current_round())) {
    log(log_level::warning, what + " for round " + std::to_string(round) + ", which runs no secure aggregation now: ignored");
    return;
  }
  secure_phase& sp = *secure_;
  rounds::assignment* a = engine_->find(id);
  const auto drop = [&](const core::error& why) {
    log(log_level::warning, what + " refused: " + why.message);
    if (a != nullptr) engine_->refuse(*a, why.message);
  };
  if (const auto* k = std::get_if<net::msg::secagg_keys>(&m)) {
    if (sp.keyed.contains(id)) return;  // sent again after a reconnect
    if (sp.at != secure_phase::step::keys || a == nullptr || !is_open(a->state))
      return log(log_level::warning, what + " after the keys step: ignored");
    if (k->keys.id != id) return drop(core::make_error(core::errc::invalid_argument, "keys advertised for " + k->keys.id));
    if (auto ok = engine_->secagg_server().add_keys(k->keys, a->segments); !ok) return drop(ok.error());
    sp.keyed.insert(id);
  } else if (const auto* sh = std::get_if<net::msg::secagg_shares>(&m)) {
    if (sp.shared.contains(id)) return;
    if (sp.at != secure_phase::step::shares || a == nullptr || !is_open(a->state))
      return log(log_level::warning, what + " outside the shares step: ignored");
    if (auto ok = engine_->secagg_server().add_boxes(id, sh->boxes); !ok) return drop(ok.error());
    sp.shared.insert(id);
  } else if (const auto* r = std::get_if<net::msg::secagg_unmask_reply>(&m)) {
    if (sp.replied.contains(id)) return;
    if (sp.at != secure_phase::step::unmask || r->reply.id != id)
      return log(log_level::warning, what + " outside the unmasking step: ignored");
    if (auto ok = engine_->secagg_server().add_reply(r->reply); !ok) return log(log_level::warning, what + " refused: " + ok.error().message);
    sp.replied.insert(id);
  }
  if (secure_step_done()) end_secure_step();
  else if (engine_->all_reported() && sp.at != secure_phase::step::unmask) end_collection();
}

}  // namespace tessera::hub
