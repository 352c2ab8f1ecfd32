// tessera/net/transfer_table.hpp — the blobs one session is moving, and every rule for their bytes.
//
// A session owns one table. The table attaches transfers (taking them over from an older session's
// table: a transfer belongs to one table at a time), cuts outgoing blobs into CHUNKs inside the
// window, applies ACKs (remembering a few that arrive before their transfer), routes each arriving
// CHUNK into the receiver's memory (skipping bytes already held, dropping chunks of refused blobs),
// verifies a completed blob's digest, and on close detaches everything so that the next session
// resumes from the last acknowledged offset. No sockets and no clock: tests/net/transfer_table_test.cpp
// drives it directly. Errors are typed; errc::stopped means "taken over by a newer session", which is
// no fault of this peer, every other error is.
//
//   net::transfer_table table(cfg.chunk_bytes, cfg.transfer_window_bytes);
//   table.attach(out, peer_offset);                                    // send_blob
//   table.next_chunks([&](const auto& t, std::uint64_t offset, std::span<const std::byte> data) {
//     queue.push_chunk(t, offset, data);
//   });
//   msg::ack resume_at = table.attach(in);                             // expect_blob: send it
//   auto route = table.route_chunk(reader.chunk(), reader.chunk_data_bytes());   // on chunk_begin
//   auto done = table.chunk_done(route.value());                       // on chunk_end: ACK, complete?
//   table.detach_all();                                                // the session closed
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>

#include "tessera/core/base/error.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/transfer.hpp"

namespace tessera::net {

class transfer_table {
 public:
  // CHUNKs carry at most `chunk_bytes` data bytes; at most `window_bytes` per blob go unacknowledged.
  transfer_table(std::uint32_t chunk_bytes, std::uint64_t window_bytes) noexcept;
  transfer_table(const transfer_table&) = delete;
  transfer_table& operator=(const transfer_table&) = delete;

  // ---- Sending.
  enum class attach_result {
    already_here,  // attached to this table already: nothing changes (restarting would resend the window)
    complete,      // the receiver holds it all (per peer_offset or an early ACK): nothing to send
    attached,      // next_chunks() will cut it from max(last ACK, peer_offset)
  };
  // What the receiver says it holds (HELLO's resume state) counts like an ACK.
  [[nodiscard]] attach_result attach(const std::shared_ptr<outgoing_transfer>& t, std::uint64_t peer_offset);
  // Cuts every CHUNK the windows allow, in transfer-id order: emit(transfer, offset, data).
  template <class Emit>
  void next_chunks(Emit&& emit);

  struct ack_outcome {
    bool moved = false;                            // one of ours took it: more chunks may fit
    std::shared_ptr<outgoing_transfer> completed;  // ...and it is now complete (and no longer here)
  };
  // An ACK for an unknown transfer is remembered (bounded) for a later attach; beyond the size: bad_field.
  [[nodiscard]] core::result<ack_outcome> on_ack(const msg::ack& a);

  // ---- Receiving.
  // Returns the ACK that tells the sender where to resume (ACK 0 on a fresh transfer).
  [[nodiscard]] msg::ack attach(const std::shared_ptr<incoming_transfer>& t);
  // Chunks of `id` are dropped from now on instead of being a protocol error (its announcement was
  // refused). Remembers the last 16 such ids.
  void discard(std::uint64_t id);
  // Lets go of blob `id` in either direction (its owner moved on): an incoming one is detached and its
  // further chunks dropped as discard() drops them; an outgoing one is sent no more.
  void forget(std::uint64_t id);

  // Where an arriving CHUNK's data go.
  struct chunk_route {
    std::shared_ptr<incoming_transfer> transfer;  // null: a discarded blob's chunk, drop all of it
    std::uint64_t offset = 0;                     // the chunk's offset in the blob
    std::uint64_t bytes = 0;                      // its data bytes
    std::uint64_t skip = 0;                       // leading bytes already held: read and dropped
    std::span<std::byte> dest;                    // the rest, in the transfer's memory
  };
  [[nodiscard]] core::result<chunk_route> route_chunk(const chunk_header& c, std::uint64_t data_bytes);

  struct chunk_outcome {
    msg::ack ack;            // what the receiver now holds: send it
    bool completed = false;  // every byte is here and the digest matched
    bool forgotten = false;  // the transfer was forgotten while these bytes arrived: nothing to ACK
  };
  // After the route's bytes arrived. A digest mismatch restarts the blob from 0 (errc::digest_mismatch).
  [[nodiscard]] core::result<chunk_outcome> chunk_done(const chunk_route& r);

  // ---- Closing: every transfer attached here is free for the next session, resuming from its ACK.
  void detach_all();

  [[nodiscard]] std::size_t outgoing_count() const noexcept { return outgoing_.size(); }
  [[nodiscard]] std::size_t incoming_count() const noexcept { return incoming_.size(); }

  static constexpr std::size_t k_max_peer_acks = 64;  // ACKs for transfers not (yet) sent from here
  static constexpr std::size_t k_max_discarded = 16;

 private:
  [[nodiscard]] bool discarded(std::uint64_t id) const;

  std::uint32_t chunk_bytes_;
  std::uint64_t window_bytes_;
  std::map<std::uint64_t, std::shared_ptr<outgoing_transfer>> outgoing_;
  std::map<std::uint64_t, std::shared_ptr<incoming_transfer>> incoming_;
  std::map<std::uint64_t, std::uint64_t> peer_acks_;
  std::deque<std::uint64_t> discarded_;
};

template <class Emit>
void transfer_table::next_chunks(Emit&& emit) {
  std::erase_if(outgoing_, [this](const auto& kv) { return kv.second->owner_ != this; });
  for (auto& [id, t] : outgoing_) {
    while (t->next_ < t->size() && t->next_ - t->acked_ < window_bytes_) {
      const std::uint64_t n = std::min<std::uint64_t>(chunk_bytes_, t->size() - t->next_);
      const std::uint64_t offset = t->next_;
      t->next_ += n;
      emit(t, offset, t->data_.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(n)));
    }
  }
}

}  // namespace tessera::net
