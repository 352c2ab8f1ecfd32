// tessera/net/write_queue.hpp — the frames a session has yet to write, in order, and what is written.
//
// Control frames are owned here and bounded (a peer that does not read cannot make us buffer without
// limit); a CHUNK is its two headers plus a view of the sender's blob, so data bytes are never copied.
// The session writes pending() — the rest of the front frame's headers, or of its data, since Asio's
// SSL stream writes one buffer per call — and reports consume(n). Data bytes are counted on their
// transfer as they go out (what a resume may have to send again). On a graceful close, queued chunks
// are dropped, except one whose bytes a write in flight still references; a resume sends them again.
//
//   net::write_queue q(cfg.max_queued_control);
//   if (!q.push_control(encode_message(msg::ping{1}))) fail(errc::queue_full);
//   q.push_chunk(t, offset, data);
//   auto bytes = q.pending();                      // write some of them, then:
//   if (q.consume(n)) { /* the front frame is out: cut more chunks */ }
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "tessera/net/transfer.hpp"

namespace tessera::net {

class write_queue {
 public:
  explicit write_queue(std::size_t max_control) noexcept : max_control_(max_control) {}

  // A whole control frame; false (and nothing queued) when `max_control` are already waiting.
  [[nodiscard]] bool push_control(std::vector<std::byte> frame);
  // The last word before a graceful close (REFUSE): queued even past the bound.
  void push_final(std::vector<std::byte> frame);
  // A CHUNK of `data` (a view into t's blob, at `offset`); `t` is kept alive while queued.
  void push_chunk(std::shared_ptr<outgoing_transfer> t, std::uint64_t offset, std::span<const std::byte> data);

  [[nodiscard]] bool empty() const noexcept { return frames_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return frames_.size(); }
  [[nodiscard]] std::size_t control_frames() const noexcept { return control_; }
  // Whether the front frame is a CHUNK (tests and diagnostics).
  [[nodiscard]] bool front_is_chunk() const noexcept { return !frames_.empty() && frames_.front().transfer; }
  // The next bytes to write: never empty unless the queue is.
  [[nodiscard]] std::span<const std::byte> pending() const noexcept;
  // `n` bytes of pending() were written; true when that completed the front frame (now removed).
  bool consume(std::size_t n);
  // Graceful close: drops every queued CHUNK but a front one that is partly written or whose write is
  // in flight (`front_in_flight`), since the stream still references its bytes.
  void drop_unsent_chunks(bool front_in_flight);
  // The same for the CHUNKs of one transfer only (its sender moved on).
  void drop_chunks_of(std::uint64_t transfer, bool front_in_flight);
  void clear() noexcept;

 private:
  struct entry {
    std::vector<std::byte> head;                  // a whole control frame, or a CHUNK's two headers
    std::span<const std::byte> body;              // CHUNK data, in the sender's blob
    std::shared_ptr<outgoing_transfer> transfer;  // CHUNK: keeps the blob's owner alive while queued
    std::uint64_t offset = 0;                     // CHUNK: where body starts in the blob
  };
  std::size_t max_control_;
  std::size_t control_ = 0;  // control frames in frames_
  std::size_t written_ = 0;  // bytes of frames_.front() already written
  std::deque<entry> frames_;
};

}  // namespace tessera::net
