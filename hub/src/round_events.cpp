// What the devices send, as the round driver takes it: a HELLO resuming what the device holds, updates
// and their uploads, refusals, statistics, evaluations and the secure protocol's steps; and devices
// leaving (disconnected, or revoked).
#include <algorithm>

#include "round_driver.hpp"

namespace tessera::hub {
namespace {

using core::log_level;
using rounds::assignment;
using rounds::assignment_state;
using rounds::is_open;

// The offset the agent holds of the device's current download, as its HELLO's resume says; none if it
// does not hold it (or claims more than it has).
std::optional<std::uint64_t> held_offset(const net::msg::hello& h, const device_entry& d) {
  const auto held = std::find_if(h.resume.begin(), h.resume.end(), [&](const net::msg::resume_entry& r) { return r.transfer == d.download_id; });
  if (held == h.resume.end() || !d.download || held->offset > d.download->out.size()) return std::nullopt;
  return held->offset;
}

// The rest of the download, from what the agent holds.
void resend_from(const std::shared_ptr<net::session>& s, device_entry& d, std::uint64_t offset) {
  s->send_blob(std::shared_ptr<net::outgoing_transfer>(d.download, &d.download->out), offset);
}

}  // namespace

void round_driver::on_hello(const std::shared_ptr<net::session>& s, device_entry& d, const net::msg::hello& h) {
  const std::string& id = s->peer_device_id();
  assignment* a = stopped() ? nullptr : engine_->find(id);
  const net::msg::welcome welcome{.heartbeat_ms = static_cast<std::uint32_t>(ctx_.config.link.heartbeat_s * 1000.0)};
  if (auto* ep = in<evaluating_phase>(); ep != nullptr && ep->eval.expects(id)) {
    s->send(welcome);
    // It still holds the model: the rest of it, or (all of it arrived) its EVALUATION is on its way.
    if (const auto offset = held_offset(h, d)) {
      if (*offset < d.download->out.size()) resend_from(s, d, *offset);
    } else if (ep->eval.secure() == nullptr) {
      ep->eval.send(d, id);
    }  // masked: it sends its keys or its score again itself, and the step's message goes below
  } else if (a == nullptr || !is_open(a->state)) {
    s->send(welcome);
  } else if (const auto offset = held_offset(h, d)) {
    // The agent still has this round's assignment. An upload in flight is registered before the
    // WELCOME, so our ACK tells the agent where to resume; a download continues from its offset.
    if (d.upload && !d.upload->in.complete()) s->expect_blob(std::shared_ptr<net::incoming_transfer>(d.upload, &d.upload->in));
    s->send(welcome);
    if (*offset < d.download->out.size()) resend_from(s, d, *offset);
    else if (a->state == assignment_state::downloading)  // it got every byte; the last ACK was lost
      transfers_.note_downloaded(d, *a, d.download->out);
    if (auto* sp = in<secure_phase>()) sp->steps.send_step(d, id);  // a step's message the broken link may have lost
  } else {
    // It lost the assignment (a restarted agent): whatever it had sent is void; send it again.
    d.upload.reset();
    s->send(welcome);
    transfers_.send_assignment(d, *a);
  }
  // After its assignment, the consistency check or the unmasking may still need it.
  if (uploads_over()) in<secure_phase>()->steps.send_step(d, id);
  else if (secure_steps* st = active_steps(); st != nullptr && in<secure_phase>() == nullptr) st->send_step(d, id);  // a masked sum's
  maybe_start_round();
}

void round_driver::on_update(const std::shared_ptr<net::session>& s, const net::msg::update& u) {
  if (transfers_.on_update(s, u, uploads_over())) end_collection();
}

void round_driver::on_upload(const std::shared_ptr<net::session>& s, const std::shared_ptr<net::incoming_transfer>& in) {
  if (transfers_.on_upload(s, in, uploads_over())) end_collection();
}

void round_driver::on_download_sent(const std::string& id, const std::shared_ptr<net::outgoing_transfer>& out) {
  transfers_.on_download_sent(id, out);
}

void round_driver::on_refuse(const std::shared_ptr<net::session>& s, const net::msg::refuse& r) {
  const std::string& id = s->peer_device_id();
  assignment* a = engine_->find(id);
  ctx_.say(log_level::warning, "device " + id + " refused" + (a ? " its assignment" : "") + ": " + r.reason);
  figures_.refusals.add(r.code);
  // Data that cannot train this model does not change by itself: no assignment until it does.
  if (r.code == "edge.inputs_mismatch" || r.code == "edge.labels_mismatch") {
    devices_[id].unfit = r.reason;
    ctx_.say(log_level::warning, "device " + id + " gets no assignment until its data changes (it reconnects with other data)");
  }
  if (a != nullptr && is_open(a->state)) {
    engine_->refuse(*a, r.reason);
    if (engine_->all_reported()) end_collection();
  }
  drop_from_statistics(id, "it refused: " + r.reason);
  drop_from_evaluation(id, "it refused: " + r.reason);
}

void round_driver::on_stats_reply(const std::shared_ptr<net::session>& s, const net::msg::stats_reply& r) {
  const std::string& id = s->peer_device_id();
  auto* sp = in<statistics_phase>();
  if (sp == nullptr || !sp->stats.expects(id, r.pass)) return ctx_.say(log_level::warning, fleet_statistics::unasked(id, r.pass));
  if (!sp->stats.on_reply(id, r)) return;
  if (sp->stats.secure() != nullptr) return advance_secure();  // every masked vector is in: the unmasking
  end_statistics_pass();
}

void round_driver::on_evaluation(const std::shared_ptr<net::session>& s, const net::msg::evaluation& e) {
  const std::string& id = s->peer_device_id();
  device_entry& d = devices_[id];
  d.seen();
  auto* ep = in<evaluating_phase>();
  if (ep == nullptr) return ctx_.say(log_level::warning, device_evaluation::unasked(id, e.round));
  if (!ep->eval.on_reply(id, d, e)) return;
  if (ep->eval.secure() != nullptr) return advance_secure();  // every masked score is in: the unmasking
  end_evaluation();
}

void round_driver::on_secure(const std::shared_ptr<net::session>& s, const net::message& m) {
  const std::string& id = s->peer_device_id();
  devices_[id].seen();
  const std::uint64_t round = net::round_of(m);
  secure_steps* steps = active_steps();
  if (steps == nullptr || round != steps->party().round()) {
    ctx_.say(log_level::warning, secure_steps::describe(id, m) + " for round " + std::to_string(round) +
                                     ", which runs no secure aggregation now: ignored");
    return;
  }
  if (!steps->on_message(id, m)) return;
  if (steps->done()) end_secure_step();
  else if (uploads_in() && !steps->past_uploads()) end_collection();
}

void round_driver::on_disconnected(const std::string& id) { drop_from_statistics(id, "it disconnected"); }

// Sessions already open were verified against the old list; the round a revoked device was in stops
// waiting for it (its neurons keep their values).
void round_driver::on_revoked(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    drop_from_statistics(id, "its certificate is revoked");
    drop_from_evaluation(id, "its certificate is revoked");
    if (assignment* a = engine_->in_round() ? engine_->find(id) : nullptr; a != nullptr && is_open(a->state))
      engine_->refuse(*a, "its certificate is revoked");
  }
  if (!ids.empty() && engine_->in_round() && in<evaluating_phase>() == nullptr && engine_->all_reported()) end_collection();
}

}  // namespace tessera::hub
