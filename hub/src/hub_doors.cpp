// The hub's doors (hub.hpp): devices arriving (HELLO: joined, reconnected) and leaving; who may stay
// connected — the revocation lists watched and applied to open sessions —; and refused connections
// logged without letting a flood fill the disk. What a device's messages mean for the round is the
// round driver's.
#include <algorithm>
#include <chrono>

#include <boost/asio/post.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/math/layers.hpp"
#include "tessera/hub/hub.hpp"
#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "operator_desk.hpp"
#include "refusal_log.hpp"
#include "revocations.hpp"
#include "round_driver.hpp"

namespace tessera::hub {

using core::log_level;

// How long the session a device already has may take to answer a PING when another connection of
// the device says HELLO: a link that broke unnoticed does not answer, a live agent does within a round
// trip.
constexpr std::chrono::milliseconds k_duplicate_probe{2000};

void hub_service::attach(const std::shared_ptr<net::session>& s) {
  s->deliver_on(strand_);  // each handler below runs on the hub's strand
  std::weak_ptr<net::session> weak = s;
  s->on_message([this, weak](const net::message& m) {
    auto self = weak.lock();
    if (!self) return;
    if (const auto* h = std::get_if<net::msg::hello>(&m)) return on_hello(self, *h);
    // Only the device's admitted session speaks for it: not a second connection while the hub probes
    // the first (on_hello), nor one it turned away.
    if (const device_entry* d = devices_->find(self->peer_device_id()); d == nullptr || d->session != self) return;
    if (const auto* u = std::get_if<net::msg::update>(&m)) rounds_->on_update(self, *u);
    else if (const auto* r = std::get_if<net::msg::refuse>(&m)) rounds_->on_refuse(self, *r);
    else if (const auto* st = std::get_if<net::msg::stats_reply>(&m)) rounds_->on_stats_reply(self, *st);
    else if (const auto* ev = std::get_if<net::msg::evaluation>(&m)) rounds_->on_evaluation(self, *ev);
    else if (std::holds_alternative<net::msg::secagg_keys>(m) || std::holds_alternative<net::msg::secagg_shares>(m) ||
             std::holds_alternative<net::msg::secagg_check_reply>(m) || std::holds_alternative<net::msg::secagg_unmask_reply>(m) ||
             std::holds_alternative<net::msg::secagg_masked_with>(m))
      rounds_->on_secure(self, m);
  });
  s->on_blob_received([this, weak](const std::shared_ptr<net::incoming_transfer>& in) {
    if (auto self = weak.lock()) rounds_->on_upload(self, in);
  });
  s->on_blob_sent([this, weak](const std::shared_ptr<net::outgoing_transfer>& out) {
    if (auto self = weak.lock()) rounds_->on_download_sent(self->peer_device_id(), out);
  });
  s->on_closed([this, weak](const core::error& why) {
    if (auto self = weak.lock()) on_closed(self, why);
  });
}

void hub_service::on_hello(const std::shared_ptr<net::session>& s, const net::msg::hello& h) {
  const std::string& id = s->peer_device_id();
  if (revoked_->is_revoked(id, s->peer_serial()))  // its handshake began under the list before, or an operator revoked it
    return refuse_revoked(*s, "HELLO with a revoked certificate: refused");
  // A model with layers the agent cannot run (an agent from before convolutional networks) is refused at
  // the door, by name, not by a download of the wrong size later; until the agent is upgraded.
  if (const std::string missing = core::missing_layer_kinds(engine().config().model.layers, h.layer_kinds); !missing.empty()) {
    turn_away(*s, "model_unsupported", "its agent cannot run this model's layers (" + missing + "): turned away until it is upgraded");
    s->refuse(net::errc::refused, "this device's agent cannot run the hub's model: it does not know the layer kinds " + missing +
                                      " (upgrade tessera-edge on it)",
              "model_unsupported", /*lasting=*/true);
    return;
  }
  // Successive layer training sends frozen layers (encoded, with slt.frozen_codec f16 or q8), which an
  // agent from before it would train and send back whole, or could not read: refused at the door, by
  // name, until it is upgraded.
  const rounds::run_config& rc = engine().config();
  const bool compact = rc.slt.frozen_codec != core::codec_kind::f32;
  const char* needed = rc.strategy != rounds::strategy_kind::slt ? nullptr : compact ? net::k_feature_compact_frozen : net::k_feature_frozen_layers;
  if (needed != nullptr && std::find(h.features.begin(), h.features.end(), needed) == h.features.end()) {
    const std::string cannot = compact ? "cannot hold frozen layers in " + std::string(core::to_string(rc.slt.frozen_codec))
                                       : std::string("cannot train with frozen layers");
    turn_away(*s, "model_unsupported", "its agent " + cannot + " (strategy slt): turned away until it is upgraded");
    s->refuse(net::errc::refused, "this device's agent " + cannot + ", which the hub's strategy slt sends (upgrade tessera-edge on it)",
              "model_unsupported", /*lasting=*/true);
    return;
  }
  // A budget that cannot hold the narrowest subnet (the whole model, for FedAvg; for SLT, of every stage
  // still to come) stays that way until the agent is restarted with another: it is told so, and waits
  // its longest backoff before it asks again.
  const rounds::device_offer offer{.id = id, .budget_bytes = h.memory_budget_bytes, .examples = h.examples, .codecs = h.codecs,
                                   .capacity = 0, .validation_examples = h.validation_examples};
  if (const auto fits = engine().admissible(offer); !fits && fits.error().code == core::errc::over_budget) {
    turn_away(*s, "over_budget", "cannot train this model: " + fits.error().message + ": turned away until its budget changes");
    s->refuse(net::errc::refused, "this device cannot train the hub's model: " + fits.error().message +
                                      " (raise its memory_budget_mib, or the hub's operator narrows the model" +
                                      (engine().config().strategy == rounds::strategy_kind::slt ? ", min_width or slt.head_fraction)"
                                                                                                   : " or min_width)"),
              "over_budget", /*lasting=*/true);
    return;
  }
  const device_entry* d = devices_->find(id);
  if (const auto& holder = d == nullptr ? nullptr : d->session ? d->session : d->handover.session; holder && holder != s) {
    // Another session of this device: a link that broke unnoticed (it does not answer, and gives way),
    // or a second agent with the same identity (it answers, and the newcomer is turned away).
    std::weak_ptr<net::session> newer = s, older = holder;
    holder->probe(k_duplicate_probe, [this, newer, older, h](bool answered) {
      auto n = newer.lock();
      if (!n) return;
      boost::asio::post(strand_, [this, n, older, h, answered] {
        if (n->ended() || stopped(rounds_->phase())) return;
        const device_entry* e = devices_->find(n->peer_device_id());
        const auto& now = e == nullptr ? nullptr : e->session ? e->session : e->handover.session;
        const auto o = older.lock();
        if (answered && o && now == o) refuse_duplicate(n, *o);
        else if (now && now != o && now != n) on_hello(n, h);  // another took its place meanwhile: that one is probed
        else admit(n, h);
      });
    });
    return;
  }
  admit(s, h);
}

// Logged and counted (turn_away), then told: REFUSE, lasting (it waits its longest backoff).
void hub_service::refuse_revoked(net::session& s, const std::string& why) {
  turn_away(s, "revoked", why);
  s.refuse(net::errc::revoked, "this device's certificate (serial " + s.peer_serial() + ") is revoked", "revoked", /*lasting=*/true);
}

void hub_service::refuse_duplicate(const std::shared_ptr<net::session>& s, const net::session& holder) {
  const std::string& id = s->peer_device_id();
  turn_away(*s, "duplicate_identity",
            "a second connection while its session from " + holder.peer_address() + " still answers: refused (two agents with one certificate?)");
  // The holder's address stays in the hub's log: whoever holds a copied key should not learn where the
  // real device is.
  s->refuse(net::errc::duplicate_identity,
            "device " + id + " is already connected and answering: is a second agent running with this device's certificate? "
                             "(the hub's log names both addresses)",
            "duplicate_identity", /*lasting=*/true);
}

void hub_service::admit(const std::shared_ptr<net::session>& s, const net::msg::hello& h) {
  const std::string& id = s->peer_device_id();
  if (revoked_->is_revoked(id, s->peer_serial()))  // revoked while its HELLO waited for the probe
    return refuse_revoked(*s, "HELLO with a revoked certificate: refused");
  device_entry& d = (*devices_)[id];
  // A dead link the hub had not noticed yet (it did not answer a PING), or a newer one still waiting
  // for its WELCOME: cut at once. Its transfers go to this session once it has closed.
  for (std::shared_ptr<net::session>* held : {&d.session, &d.handover.session}) {
    if (!*held || *held == s) continue;
    log(log_level::info, "device " + id + ": its connection from " + (*held)->peer_address() + " did not answer: cut, the one from " +
                             s->peer_address() + " takes over");
    auto older = std::exchange(*held, nullptr);
    older->abandon(net::errc::replaced, "a newer connection of this device replaced this one");
    let_go(d, std::move(older));
  }
  const bool known = d.record.id == id;
  d.record.id = id;
  d.serial = s->peer_serial();
  if (d.validation_examples != h.validation_examples || d.record.budget_bytes != h.memory_budget_bytes)
    d.told_over_budget = false;  // it may hold the model for evaluation now: say so again if not
  d.record.budget_bytes = h.memory_budget_bytes;
  d.record.examples = h.examples;
  d.seen();
  d.validation_examples = h.validation_examples;
  d.codecs = h.codecs;
  log(log_level::info, "device " + id + (known ? " reconnected" : " joined") + ": budget " +
                           core::mib_text(h.memory_budget_bytes) + ", " + std::to_string(h.examples) + " examples");
  if (!d.unfit.empty() && h.data_digest != d.data_digest) {
    d.unfit.clear();
    log(log_level::info, "device " + id + " has other data now: it takes part again");
  }
  d.data_digest = h.data_digest;
  d.handover.session = s;
  d.handover.hello = h;
  welcome_waiting(d);
}

// A session the device no longer speaks through, closing (cut, or refused): until its on_closed, it may
// still touch the device's transfers on its own thread, and no newer session gets them.
void hub_service::let_go(device_entry& d, std::shared_ptr<net::session> older) {
  if (!older->ended()) d.handover.letting_go.push_back(older.get());
}

// The newest session of the device gets its WELCOME and what it resumes once no older one holds the
// transfers.
void hub_service::welcome_waiting(device_entry& d) {
  if (!d.handover.letting_go.empty() || !d.handover.session || stopped(rounds_->phase())) return;
  d.session = std::exchange(d.handover.session, nullptr);
  rounds_->on_hello(d.session, d, *d.handover.hello);
}

// A device refused at its HELLO: the log line names it by id, address and serial; /metrics counts it
// by `code`; the status page lists it.
void hub_service::turn_away(const net::session& s, const std::string& code, const std::string& why) {
  const std::string& id = s.peer_device_id();
  log(log_level::warning, "device " + id + " (" + s.peer_address() + ", certificate serial " + s.peer_serial() + "): " + why);
  figures_->connections_refused.add(code);
  figures_->turned_away.note({.who = id, .address = s.peer_address(), .serial = s.peer_serial(), .code = code, .reason = why});
}

void hub_service::on_closed(const std::shared_ptr<net::session>& s, const core::error& why) {
  const std::string& id = s->peer_device_id();
  const bool stopping = stopped(rounds_->phase());
  if (id.empty()) {  // never got past the handshake: a revoked or foreign certificate, a port scan, a flood
    if (!stopping) {
      // Counted by the TLS failure's reason when there is one (unknown_ca, certificate_revoked, ...),
      // else by the error (a handshake or HELLO deadline, eviction, a certificate without a device id).
      figures_->connections_refused.add(s->tls_failure().empty() ? core::error_name(why.code) : "tls." + s->tls_failure());
      refused_->note(why, ctx_->log);
      if (certificate_trouble(s->tls_failure()))  // not a scan, a silent socket or plain HTTP: the status page lists it
        figures_->turned_away.note({.who = host_of(s->peer_address()), .address = s->peer_address(), .serial = {},
                                    .code = "tls." + s->tls_failure(), .reason = why.message});
    }
    return;
  }
  device_entry* d = devices_->find(id);
  if (d == nullptr) return;
  if (std::erase(d->handover.letting_go, s.get()) > 0) {  // an older session has let go: the newest may go on
    welcome_waiting(*d);
    return;
  }
  if (d->handover.session == s) d->handover.session.reset();  // never welcomed: it left all the same
  else if (d->session != s) return;
  else d->session.reset();
  if (stopping) return;
  log(log_level::info, "device " + id + " disconnected: " + why.message);
  rounds_->on_disconnected(id);
}

void hub_service::watch_revocations() {
  crl_timer_.expires_after(std::chrono::milliseconds(250));
  crl_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped(rounds_->phase())) return;
    reload_revocations();
    if (!stopped(rounds_->phase())) watch_revocations();
  });
}

void hub_service::reload_revocations() {
  if (!revoked_->reload()) return;
  server_->set_tls(revoked_->tls());
  desk_->set_tls(revoked_->tls());
  close_revoked();
}

// Sessions already open were verified against the old list: each whose certificate is revoked now goes
// at once, and no phase waits for it any more.
void hub_service::close_revoked() {
  std::vector<std::string> gone;
  for (auto& [id, d] : devices_->entries()) {
    bool revoked = false;
    for (std::shared_ptr<net::session>* held : {&d.session, &d.handover.session}) {
      if (!*held || !revoked_->is_revoked(id, (*held)->peer_serial())) continue;
      auto s = std::exchange(*held, nullptr);
      refuse_revoked(*s, "its certificate is revoked: session closed");
      let_go(d, std::move(s));  // a device back with a new certificate waits until this one has closed
      revoked = true;
    }
    if (revoked) gone.push_back(id);
  }
  rounds_->on_revoked(gone);
}

}  // namespace tessera::hub
