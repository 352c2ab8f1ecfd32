#include "tessera/net/transfer_table.hpp"

#include <string>

namespace tessera::net {
namespace {

core::error taken_over(std::uint64_t id) {
  return make_error(errc::stopped, "transfer " + std::to_string(id) + " resumed on a newer connection");
}

}  // namespace

transfer_table::transfer_table(std::uint32_t chunk_bytes, std::uint64_t window_bytes) noexcept
    : chunk_bytes_(chunk_bytes), window_bytes_(window_bytes) {}

transfer_table::attach_result transfer_table::attach(const std::shared_ptr<outgoing_transfer>& t,
                                                     std::uint64_t peer_offset) {
  if (t->owner_ == this) return attach_result::already_here;
  // Over-claiming only hurts the receiver, whose digest check then fails.
  if (peer_offset <= t->size()) t->acked_ = std::max(t->acked_, peer_offset);
  if (auto it = peer_acks_.find(t->id()); it != peer_acks_.end()) {
    if (it->second <= t->size()) t->acked_ = std::max(t->acked_, it->second);
    peer_acks_.erase(it);
  }
  t->next_ = t->acked_;  // resume from what the receiver confirmed
  t->owner_ = this;
  if (t->complete()) return attach_result::complete;
  outgoing_[t->id()] = t;
  return attach_result::attached;
}

core::result<transfer_table::ack_outcome> transfer_table::on_ack(const msg::ack& a) {
  auto it = outgoing_.find(a.transfer);
  if (it == outgoing_.end()) {
    // Either late (the transfer completed) or early: a receiver announces what it holds when it
    // re-registers a transfer after a reconnect, possibly before the sender attaches it here.
    // Remember the latter, boundedly, so the resume starts there.
    if (peer_acks_.size() < k_max_peer_acks || peer_acks_.count(a.transfer) != 0)
      peer_acks_[a.transfer] = std::max(peer_acks_[a.transfer], a.offset);
    return ack_outcome{};
  }
  auto t = it->second;
  if (t->owner_ != this) {
    outgoing_.erase(it);
    return ack_outcome{};
  }
  if (a.offset > t->size())
    return make_error(errc::bad_field, "ACK: field 'offset': " + std::to_string(a.offset) + " beyond size " +
                                           std::to_string(t->size()));
  if (a.offset > t->acked_) t->acked_ = a.offset;
  // The receiver may hold more than we knew (ACKs lost with the previous connection): skip ahead.
  if (t->acked_ > t->next_) t->next_ = t->acked_;
  ack_outcome out{.moved = true, .completed = nullptr};
  if (t->complete()) {
    outgoing_.erase(it);
    out.completed = std::move(t);
  }
  return out;
}

msg::ack transfer_table::attach(const std::shared_ptr<incoming_transfer>& t) {
  t->owner_ = this;
  incoming_[t->id()] = t;
  return msg::ack{t->id(), t->received_};
}

void transfer_table::discard(std::uint64_t id) {
  if (discarded(id)) return;
  if (discarded_.size() >= k_max_discarded) discarded_.pop_front();
  discarded_.push_back(id);
}

void transfer_table::forget(std::uint64_t id) {
  if (auto it = incoming_.find(id); it != incoming_.end()) {
    if (it->second->owner_ == this) it->second->owner_ = nullptr;
    incoming_.erase(it);
    discard(id);
  }
  if (auto it = outgoing_.find(id); it != outgoing_.end()) {
    if (it->second->owner_ == this) it->second->owner_ = nullptr;
    outgoing_.erase(it);
  }
}

bool transfer_table::discarded(std::uint64_t id) const {
  return std::find(discarded_.begin(), discarded_.end(), id) != discarded_.end();
}

core::result<transfer_table::chunk_route> transfer_table::route_chunk(const chunk_header& c, std::uint64_t data_bytes) {
  auto it = incoming_.find(c.transfer);
  if (it == incoming_.end()) {
    // The caller refused this blob (its announcement was rejected): drop the bytes, ACK nothing, so
    // the sender stops after one window and reads the verdict.
    if (discarded(c.transfer)) return chunk_route{nullptr, c.offset, data_bytes, data_bytes, {}};
    return make_error(errc::unknown_transfer,
                      "CHUNK for transfer " + std::to_string(c.transfer) + " that was not announced");
  }
  const auto& in = it->second;
  if (in->owner_ != this) return taken_over(c.transfer);
  const std::uint64_t end = c.offset + data_bytes;  // no overflow: decode_chunk_header checked it
  if (end > in->size())
    return make_error(errc::chunk_out_of_range, "CHUNK [" + std::to_string(c.offset) + ", " + std::to_string(end) +
                                                    ") beyond the declared size " + std::to_string(in->size()));
  if (c.offset > in->received_)
    return make_error(errc::chunk_out_of_range, "CHUNK at " + std::to_string(c.offset) + " leaves a gap after " +
                                                    std::to_string(in->received_) + " received bytes");
  // Bytes we already hold are read and dropped, so the hashed prefix never changes.
  const std::uint64_t skip = std::min(data_bytes, in->received_ - c.offset);
  return chunk_route{.transfer = in, .offset = c.offset, .bytes = data_bytes, .skip = skip,
                     .dest = in->dest_.subspan(static_cast<std::size_t>(c.offset + skip),
                                               static_cast<std::size_t>(data_bytes - skip))};
}

core::result<transfer_table::chunk_outcome> transfer_table::chunk_done(const chunk_route& r) {
  TESSERA_ASSERT(r.transfer != nullptr);  // a dropped chunk has nothing to complete
  incoming_transfer& in = *r.transfer;
  if (in.owner_ == nullptr && discarded(in.id())) return chunk_outcome{.ack = {}, .completed = false, .forgotten = true};
  if (in.owner_ != this) return taken_over(in.id());  // taken over while its bytes were arriving here
  in.bytes_received_total_ += r.bytes;
  if (!r.dest.empty()) {
    in.hasher_.update(std::span<const std::byte>(r.dest));
    in.received_ = r.offset + r.skip + r.dest.size();
  }
  if (in.received_ == in.size() && !in.verified_) {
    if (in.hasher_.finish() != in.expected_) {
      in.received_ = 0;  // the bytes are wrong somewhere: the next attempt must start over
      return make_error(errc::digest_mismatch, "transfer " + std::to_string(in.id()) + ": SHA-256 of " +
                                                   std::to_string(in.size()) + " bytes differs from the declared one");
    }
    in.verified_ = true;
    incoming_.erase(in.id());
    return chunk_outcome{msg::ack{in.id(), in.received_}, true, false};
  }
  return chunk_outcome{msg::ack{in.id(), in.received_}, false, false};
}

void transfer_table::detach_all() {
  for (auto& [id, t] : outgoing_) {
    if (t->owner_ != this) continue;
    if (t->sent_high_ > t->acked_) t->unacked_at_breaks_ += t->sent_high_ - t->acked_;
    t->next_ = t->sent_high_ = t->acked_;
    t->owner_ = nullptr;
  }
  for (auto& [id, t] : incoming_)
    if (t->owner_ == this) t->owner_ = nullptr;
  outgoing_.clear();
  incoming_.clear();
}

}  // namespace tessera::net
