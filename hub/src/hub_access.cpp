// The hub's doors (hub.hpp): devices arriving (HELLO: joined, reconnected, resuming what they hold),
// declining and leaving; who may stay connected — the revocation list watched and applied to open
// sessions —; and refused connections logged without letting a flood fill the disk.
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "tessera/crypto/pki.hpp"
#include "tessera/hub/hub.hpp"
#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "refusal_log.hpp"
#include "revocations.hpp"

namespace tessera::hub {
namespace {

using clock_type = std::chrono::steady_clock;
using core::log_level;
using rounds::assignment;
using rounds::assignment_state;
using rounds::is_open;

}  // namespace

void hub_service::on_hello(const std::shared_ptr<net::session>& s, const net::msg::hello& h) {
  const std::string& id = s->peer_device_id();
  if (revoked_->is_revoked(id, s->peer_serial())) {  // its handshake began under the list before, or an operator revoked it
    log(log_level::warning, "device " + id + ": HELLO with a revoked certificate (serial " + s->peer_serial() + "): refused");
    s->refuse(net::errc::revoked, "this device's certificate is revoked", "revoked");
    return;
  }
  device_entry& d = (*devices_)[id];
  if (d.session && d.session != s) d.session->close();  // a dead link the hub had not noticed yet
  const bool known = d.record.id == id;
  d.session = s;
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
                           std::to_string(h.memory_budget_bytes >> 20) + " MiB, " + std::to_string(h.examples) + " examples");
  if (!d.unfit.empty() && h.data_digest != d.data_digest) {
    d.unfit.clear();
    log(log_level::info, "device " + id + " has other data now: it takes part again");
  }
  d.data_digest = h.data_digest;

  assignment* a = stopping_ ? nullptr : engine_->find(id);
  const net::msg::welcome welcome{.heartbeat_ms = static_cast<std::uint32_t>(ctx_->config.link.heartbeat_s * 1000.0)};
  if (eval_ && !stopping_ && evaluating(id)) {
    const auto held = std::find_if(h.resume.begin(), h.resume.end(),
                                   [&](const net::msg::resume_entry& r) { return r.transfer == d.download_id; });
    s->send(welcome);
    if (held != h.resume.end() && d.download && held->offset <= d.download->out.size()) {
      // It still holds the model: the rest of it, or (all of it arrived) its EVALUATION is on its way.
      if (held->offset < d.download->out.size())
        s->send_blob(std::shared_ptr<net::outgoing_transfer>(d.download, &d.download->out), held->offset);
    } else {
      send_evaluation(d, id);
    }
  } else if (a == nullptr || !is_open(a->state)) {
    s->send(welcome);
  } else {
    const auto held = std::find_if(h.resume.begin(), h.resume.end(),
                                   [&](const net::msg::resume_entry& r) { return r.transfer == d.download_id; });
    if (held != h.resume.end() && d.download && held->offset <= d.download->out.size()) {
      // The agent still has this round's assignment. An upload in flight is registered before the
      // WELCOME, so our ACK tells the agent where to resume; a download continues from its offset.
      if (d.upload && !d.upload->in.complete())
        s->expect_blob(std::shared_ptr<net::incoming_transfer>(d.upload, &d.upload->in));
      s->send(welcome);
      if (held->offset < d.download->out.size())
        s->send_blob(std::shared_ptr<net::outgoing_transfer>(d.download, &d.download->out), held->offset);
      else if (a->state == assignment_state::downloading)  // it got every byte; the last ACK was lost
        note_downloaded(d, *a, d.download->out);
      if (secure_) send_secure_step(d, id);  // a step's message the broken link may have lost
    } else {
      // It lost the assignment (a restarted agent): whatever it had sent is void; send it again.
      d.upload.reset();
      s->send(welcome);
      send_assignment(d, *a);
    }
  }
  // After its assignment, the unmasking may still need its shares.
  if (secure_ && secure_->at == secure_phase::step::unmask && !stopping_) send_secure_step(d, id);
  if (waiting_) maybe_start_round();
}

void hub_service::on_refuse(const std::shared_ptr<net::session>& s, const net::msg::refuse& r) {
  const std::string& id = s->peer_device_id();
  assignment* a = engine_->find(id);
  log(log_level::warning, "device " + id + " refused" + (a ? " its assignment" : "") + ": " + r.reason);
  obs_->refusals.add(r.code);
  // Data that cannot train this model does not change by itself: no assignment until it does.
  if (r.code == "edge.inputs_mismatch" || r.code == "edge.labels_mismatch") {
    (*devices_)[id].unfit = r.reason;
    log(log_level::warning, "device " + id + " gets no assignment until its data changes (it reconnects with other data)");
  }
  if (a != nullptr && is_open(a->state)) {
    engine_->refuse(*a, r.reason);
    if (engine_->all_reported()) end_collection();
  }
  if (stats_) drop_from_statistics(id, "it refused: " + r.reason);
  if (eval_) drop_from_evaluation(id, "it refused: " + r.reason);
}

void hub_service::on_closed(const std::shared_ptr<net::session>& s, const core::error& why) {
  const std::string& id = s->peer_device_id();
  if (id.empty()) {  // never got past the handshake: a revoked or foreign certificate, a port scan, a flood
    if (!stopping_) {
      // Counted by the TLS failure's reason when there is one (unknown_ca, certificate_revoked, ...),
      // else by the error (a handshake or HELLO deadline, eviction, a certificate without a device id).
      obs_->connections_refused.add(s->tls_failure().empty() ? core::error_name(why.code) : "tls." + s->tls_failure());
      refused_->note(why, ctx_->log);
    }
    return;
  }
  device_entry* d = devices_->find(id);
  if (d == nullptr || d->session != s) return;
  d->session.reset();
  if (!stopping_) log(log_level::info, "device " + id + " disconnected: " + why.message);
  if (stats_ && !stopping_) drop_from_statistics(id, "it disconnected");
}

void hub_service::watch_revocations() {
  crl_timer_.expires_after(std::chrono::milliseconds(250));
  crl_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    reload_revocations();
    if (!stopping_) watch_revocations();
  });
}

void hub_service::reload_revocations() {
  if (!revoked_->reload()) return;
  server_->set_tls(revoked_->tls());
  if (endpoint_) endpoint_->set_tls(revoked_->tls());
  close_revoked();
}

// Sessions already open were verified against the old list: each whose certificate is revoked now
// goes at once, and the round it was in stops waiting for it (its neurons keep their values).
void hub_service::close_revoked() {
  std::vector<std::string> gone;
  for (auto& [id, d] : devices_->entries()) {
    if (!d.session || !revoked_->is_revoked(id, d.session->peer_serial())) continue;
    log(log_level::warning, "device " + id + ": its certificate (serial " + d.session->peer_serial() + ") is revoked: session closed");
    auto s = std::move(d.session);
    s->refuse(net::errc::revoked, "this device's certificate is revoked", "revoked");
    gone.push_back(id);
  }
  for (const auto& id : gone) {
    if (stats_) drop_from_statistics(id, "its certificate is revoked");
    if (eval_ && evaluating(id)) drop_from_evaluation(id, "its certificate is revoked");
    if (rounds::assignment* a = engine_->in_round() ? engine_->find(id) : nullptr; a != nullptr && is_open(a->state))
      engine_->refuse(*a, "its certificate is revoked");
  }
  if (!gone.empty() && engine_->in_round() && !eval_ && engine_->all_reported()) end_collection();
}

}  // namespace tessera::hub
