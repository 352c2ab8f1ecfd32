#include "round_transfers.hpp"

#include <chrono>
#include <filesystem>

#include "tessera/core/io/file_io.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/hub/error.hpp"
#include "tessera/net/task.hpp"

namespace tessera::hub {

using clock_type = std::chrono::steady_clock;
using core::log_level;
using rounds::assignment;
using rounds::assignment_state;

void round_transfers::send_assignment(device_entry& d, assignment& a) {
  // A fresh transfer id each time, so a restarted agent never resumes bytes of another download.
  d.download_id = devices_->next_transfer();
  std::shared_ptr<const std::vector<std::byte>> bytes;
  net::digest sha{};
  if (d.download) {  // a resend: the agent lost its copy; the model has not changed within the round
    bytes = d.download->bytes;
    sha = d.download->out.sha256();
  } else if (auto it = encoded_.find({a.group, a.codec, a.sub.arch.frozen_codec}); it != encoded_.end()) {
    bytes = it->second.bytes;  // another device of the group got these bytes in this dispatch
    sha = it->second.sha;
  } else {
    auto fresh = std::make_shared<std::vector<std::byte>>(a.blob_bytes);
    if (auto ok = engine_->encode_download(a, *fresh); !ok) {
      engine_->reject(a, ok.error());
      ctx_->say(log_level::error, ok.error().message);
      return;
    }
    sha = crypto::sha256_of(*fresh);
    bytes = std::move(fresh);
    encoded_[{a.group, a.codec, a.sub.arch.frozen_codec}] = {bytes, sha};
  }
  d.download = std::make_shared<download_slot>(d.download_id, std::move(bytes), sha);
  d.download_started = clock_type::now();
  d.subnet_params = core::param_count(a.sub.arch);
  d.codec = a.codec;
  (void)engine_->sent(a);  // always fits an open assignment
  net::msg::assign m{.round = static_cast<std::uint64_t>(engine_->current_round()),
                     .widths = net::hidden_widths(a.sub.arch),
                     .hyper_json = net::task_to_json(a.task),
                     .transfer = d.download_id,
                     .size = d.download->out.size(),
                     .blob_codec = a.codec,
                     .sha256 = sha};
  if (engine_->secure())
    m.secure = net::msg::secure_assign{.params = engine_->secagg_params(), .segments = a.segments, .rounding_key = a.rounding_key,
                                       .upload_size = a.upload_bytes};
  d.session->send(m);
  d.session->send_blob(std::shared_ptr<net::outgoing_transfer>(d.download, &d.download->out));
}

void round_transfers::reject(const std::shared_ptr<net::session>& s, const std::string& id, const core::error& why, std::uint64_t transfer) {
  ctx_->say(log_level::warning, "update from " + id + " refused: " + why.message);
  figures_->rejections.add(core::error_name(why.code));
  if (transfer != 0) s->discard_blob(transfer);  // its chunks may already be on their way
  s->send(net::msg::result{.accepted = false, .code = core::error_name(why.code), .reason = why.message});
}

core::error round_transfers::unassigned(std::uint64_t update_round) const {
  const auto round = static_cast<std::int64_t>(update_round);
  if (round <= engine_->completed()) return make_error(errc::round_closed, "update for round " + std::to_string(round) + ", which is closed");
  if (engine_->in_round() && round == engine_->current_round())
    return make_error(errc::not_assigned, "no assignment for this device in round " + std::to_string(round));
  return make_error(errc::round_not_open, "update for round " + std::to_string(round) + ", which is not open");
}

bool round_transfers::on_update(const std::shared_ptr<net::session>& s, const net::msg::update& u, bool uploads_over) {
  const std::string& id = s->peer_device_id();
  device_entry& d = (*devices_)[id];
  d.seen();
  assignment* a = engine_->find(id);
  if (d.accepted_upload != 0 && u.transfer == d.accepted_upload) {  // accepted before the link broke and its RESULT was lost
    s->send(net::msg::result{.accepted = true, .code = {}, .reason = {}});
    return false;
  }
  if (a == nullptr) {
    reject(s, id, unassigned(u.round), u.transfer);
    return false;
  }
  if (uploads_over) {  // the survivors are fixed: no masked input joins now
    reject(s, id, make_error(errc::round_closed, "update for round " + std::to_string(u.round) + ", whose uploads are over (its survivors are fixed)"),
           u.transfer);
    return false;
  }
  if (u.transfer != net::upload_transfer_id(d.download_id)) {
    reject(s, id, make_error(errc::wrong_transfer, "update for round " + std::to_string(u.round) +
                                                       " answers another assignment (transfer " + std::to_string(u.transfer) + ")"),
           u.transfer);
    return false;
  }
  if (d.upload && d.upload->in.id() == u.transfer) {  // the agent re-announces after a reconnect
    if (!d.upload->in.complete()) s->expect_blob(std::shared_ptr<net::incoming_transfer>(d.upload, &d.upload->in));
    return false;
  }
  const rounds::update_claim claim{.round = u.round, .clipped = u.clipped, .examples = u.examples, .steps = u.steps,
                                   .loss = u.loss, .size = u.size, .codec = u.blob_codec};
  if (auto ok = engine_->announce(*a, claim); !ok) {
    reject(s, id, ok.error(), u.transfer);
    return engine_->all_reported();
  }
  d.upload = std::make_shared<upload_slot>(u.transfer, a->upload_bytes, u.sha256);
  d.upload_started = clock_type::now();
  s->expect_blob(std::shared_ptr<net::incoming_transfer>(d.upload, &d.upload->in));
  return false;
}

void round_transfers::audit(const std::string& id, const upload_slot& upload) const {
  const auto path = std::filesystem::path(ctx_->config.audit_uploads) / ("round-" + std::to_string(engine_->current_round()) + "-" + id + ".bin");
  if (auto ok = core::write_file_atomic(path, upload.bytes, 0600, /*replace=*/true); !ok)
    ctx_->say(log_level::error, "audit_uploads: " + ok.error().message);
}

bool round_transfers::on_upload(const std::shared_ptr<net::session>& s, const std::shared_ptr<net::incoming_transfer>& in, bool uploads_over) {
  const std::string& id = s->peer_device_id();
  device_entry& d = (*devices_)[id];
  assignment* a = engine_->find(id);
  if (a == nullptr || !d.upload || &d.upload->in != in.get() || a->state != assignment_state::uploading || uploads_over) {
    reject(s, id, make_error(errc::round_closed, "update arrived after its round closed"), 0);
    return false;
  }
  a->bytes_up = in->bytes_received_total();
  a->resent_bytes += in->bytes_received_total() - in->size();
  if (!ctx_->config.audit_uploads.empty()) audit(id, *d.upload);
  auto ok = engine_->receive(*a, d.upload->bytes);
  d.upload.reset();
  if (!ok) {
    reject(s, id, ok.error(), 0);
  } else {
    d.accepted_upload = in->id();
    s->send(net::msg::result{.accepted = true, .code = {}, .reason = {}});
    const double seconds = std::chrono::duration<double>(clock_type::now() - d.upload_started).count();
    figures_->updates_accepted += 1;
    figures_->upload_seconds.observe(seconds);
    if (seconds > 0) d.up_rate = static_cast<double>(in->size()) / seconds;
  }
  d.bytes_up += in->bytes_received_total();
  return engine_->all_reported();
}

void round_transfers::note_downloaded(device_entry& d, assignment& a, const net::outgoing_transfer& out) {
  if (a.state == assignment_state::downloading) {
    const double seconds = std::chrono::duration<double>(clock_type::now() - d.download_started).count();
    figures_->download_seconds.observe(seconds);
    if (seconds > 0) d.down_rate = static_cast<double>(out.size()) / seconds;
  }
  d.bytes_down += out.bytes_sent_total() - a.bytes_down;
  a.bytes_down = out.bytes_sent_total();
  a.resent_bytes += out.bytes_sent_total() - out.size();
  (void)engine_->downloaded(a);  // an update may have come first after a cut: then it stays as it is
}

void round_transfers::on_download_sent(const std::string& id, const std::shared_ptr<net::outgoing_transfer>& out) {
  assignment* a = engine_->find(id);
  device_entry* d = devices_->find(id);
  if (a == nullptr || d == nullptr || !d->download || &d->download->out != out.get()) return;
  note_downloaded(*d, *a, *out);
}

}  // namespace tessera::hub
