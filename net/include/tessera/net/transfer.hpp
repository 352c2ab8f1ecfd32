// tessera/net/transfer.hpp — resumable blob transfers that outlive a connection.
//
// A blob (a subnet's parameters in the declared codec) travels as CHUNK frames, each acknowledged by an
// ACK carrying the receiver's contiguous byte count. The state of a transfer lives in one of these
// objects, owned by the caller, not in the session: when a link breaks, the caller attaches the same
// object to the next session and the sender continues from the last acknowledged offset, so only bytes
// that were never acknowledged are sent again. Received bytes land directly in the caller's buffer;
// the receiver checks the size and the SHA-256 of the whole blob before reporting it complete.
//
//   // sender (agent uploading, hub downloading):
//   auto out = std::make_shared<net::outgoing_transfer>(id, std::span<const std::byte>(params));
//   session->send_blob(out);                     // again on the next session after a break
//   // receiver: the buffer is sized from the round's plan, never from the peer (a declared size that
//   // differs from the plan is refused by the caller); the digest comes from ASSIGN/UPDATE:
//   auto in = std::make_shared<net::incoming_transfer>(id, std::span<std::byte>(arena_slice), sha);
//   session->expect_blob(in);                    // from the handler of the announcing message
//
// After a reconnect (HELLO is always the agent's first frame):
//   download  agent sends HELLO{resume: {id, in->received()}}, calls expect_blob(in) on WELCOME;
//             hub calls send_blob(out, offset from HELLO) after its WELCOME.
//   upload    hub calls expect_blob(in) on HELLO, which ACKs what it holds before the WELCOME;
//             agent calls send_blob(out) on WELCOME and resumes from that ACK.
//
// A transfer is attached to one session at a time. Attaching it to a new session takes it over: the
// old session (typically a dead link the hub has not noticed yet) stops sending or receiving it and
// closes. Neither object is thread-safe (but for bytes_sent_total(), bytes_received_total() and an
// incoming transfer's complete(), readable from any thread): when sessions run on several threads,
// attach a transfer to a new session only after the old one's on_closed. The rules for their bytes
// (windows, ACKs, resume offsets, take-over) live in transfer_table.hpp, one table per session.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tessera/crypto/digest.hpp"
#include "tessera/net/messages.hpp"

namespace tessera::net {

class transfer_table;
class write_queue;

class outgoing_transfer {
 public:
  // `data` must stay valid and unchanged until complete(); its digest is computed here, once.
  outgoing_transfer(std::uint64_t id, std::span<const std::byte> data);
  // Same, with a digest the caller already computed (it is what the receiver will check against).
  outgoing_transfer(std::uint64_t id, std::span<const std::byte> data, const digest& sha256);

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return data_.size(); }
  [[nodiscard]] const digest& sha256() const noexcept { return sha256_; }
  [[nodiscard]] std::uint64_t acked() const noexcept { return acked_; }
  [[nodiscard]] bool complete() const noexcept { return acked_ == data_.size(); }
  // Data bytes handed to TLS over all sessions (size() plus whatever was sent again after breaks), and
  // how many sent bytes were unacknowledged when a session ended: a resume re-sends at most those.
  [[nodiscard]] std::uint64_t bytes_sent_total() const noexcept { return bytes_sent_total_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t unacked_at_breaks() const noexcept { return unacked_at_breaks_; }

 private:
  friend class transfer_table;  // windows, ACKs, take-over and detaching
  friend class write_queue;     // counts the data bytes handed to TLS
  std::uint64_t id_;
  std::span<const std::byte> data_;
  digest sha256_;
  std::uint64_t acked_ = 0;
  std::uint64_t next_ = 0;  // next offset to send on the current session
  const transfer_table* owner_ = nullptr;  // the session's table it is attached to; a newer one takes over
  // Read by the owner on another thread while a session sends (a round's figures): counted atomically.
  std::atomic<std::uint64_t> bytes_sent_total_{0};
  std::uint64_t unacked_at_breaks_ = 0;
  std::uint64_t sent_high_ = 0;  // end of the highest byte handed to TLS on the current session
};

class incoming_transfer {
 public:
  // `dest` is the caller's memory of exactly the declared size; `expected` the declared SHA-256.
  incoming_transfer(std::uint64_t id, std::span<std::byte> dest, const digest& expected);
  incoming_transfer(const incoming_transfer&) = delete;
  incoming_transfer& operator=(const incoming_transfer&) = delete;

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return dest_.size(); }
  [[nodiscard]] std::uint64_t received() const noexcept { return received_; }
  // True once every byte arrived and the digest matched.
  [[nodiscard]] bool complete() const noexcept { return verified_.load(); }
  [[nodiscard]] std::span<std::byte> data() const noexcept { return dest_; }
  [[nodiscard]] std::uint64_t bytes_received_total() const noexcept { return bytes_received_total_.load(std::memory_order_relaxed); }

 private:
  friend class transfer_table;
  std::uint64_t id_;
  std::span<std::byte> dest_;
  digest expected_;
  std::uint64_t received_ = 0;  // contiguous bytes held from offset 0
  // Hashes bytes as they become contiguous, so completing a 64 MiB blob costs no long pause that would
  // starve the session's deadlines; re-sent bytes before received_ are discarded, never rewritten.
  crypto::sha256 hasher_;
  std::atomic<bool> verified_{false};  // read by the owner on another thread, like the count below
  const transfer_table* owner_ = nullptr;
  std::atomic<std::uint64_t> bytes_received_total_{0};
};

}  // namespace tessera::net
