// tessera/net/frame_reader.hpp — the one frame decoder: incremental, I/O-free, chunk data in place.
//
// The reader never touches a socket. It says where the next bytes of the stream belong (buffer()); its
// owner puts some bytes there, from wherever they come, and calls commit(n); when that completes a part
// of a frame the reader answers with an event. The parts of a frame, in order:
//   1. the 12-byte header, validated in full by decode_header (frame.hpp) before anything is sized;
//   2. a control payload, stored as it arrives: the store starts at 16 KiB and doubles while bytes come,
//      never beyond the payload's size (within the limit the header passed), so a header announcing
//      1 MiB followed by a trickle costs what arrived, not what was announced;
//   3. or, for CHUNK, the 16-byte sub-header (decode_chunk_header), after which the owner decides
//      where the data go: accept_chunk(skip, dest) reads `skip` leading bytes (already held) into a
//      bounded scratch area and the rest straight into `dest`, the transfer's own memory, with no copy;
//      discard_chunk() drops all of them through the scratch area.
// Every byte sequence gives the same events however it is cut into commits: the session drives the
// reader from async_read_some, decode_frame from one buffer, and the tests and the fuzzer at every cut.
//
//   net::frame_reader r(cfg.max_frame_payload);
//   for (;;) {
//     std::span<std::byte> into = r.buffer();
//     std::size_t n = read_some(into);                          // however the owner gets bytes
//     switch (r.commit(n)) {
//       case net::frame_event::need_more: break;
//       case net::frame_event::control: handle(r.header().type, r.payload()); break;
//       case net::frame_event::chunk_begin: r.accept_chunk(skip, dest_for(r.chunk())); break;
//       case net::frame_event::chunk_end: chunk_arrived(); break;
//       case net::frame_event::failed: return r.error();        // typed: net::errc
//     }
//   }
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tessera/core/base/error.hpp"
#include "tessera/net/frame.hpp"

namespace tessera::net {

// What a commit completed. Exactly one per commit; need_more when no part is complete yet.
enum class frame_event {
  need_more,    // the current part is not complete: call buffer() again
  control,      // a control frame: header() and payload() until the next commit
  chunk_begin,  // a CHUNK's sub-header: header(), chunk(), chunk_data_bytes(); the owner must now call
                // accept_chunk or discard_chunk before buffer()
  chunk_end,    // every data byte of that CHUNK is where accept_chunk said (or dropped)
  failed,       // malformed input: error() says how; the reader stays failed
};

class frame_reader {
 public:
  // `max_payload` is the receiver's limit (clamped to hard_max_payload by decode_header).
  explicit frame_reader(std::uint32_t max_payload) noexcept;
  frame_reader(const frame_reader&) = delete;
  frame_reader& operator=(const frame_reader&) = delete;

  // Where the next bytes go: never empty. Asserts after chunk_begin until routed, and after failed.
  [[nodiscard]] std::span<std::byte> buffer() noexcept;
  // `n` bytes (n ≤ buffer().size()) were written at buffer().data().
  [[nodiscard]] frame_event commit(std::size_t n);

  // After chunk_begin: drop `skip` leading data bytes, then put the rest in `dest`;
  // skip + dest.size() must equal chunk_data_bytes(). `dest` must stay valid until chunk_end.
  void accept_chunk(std::uint64_t skip, std::span<std::byte> dest);
  // After chunk_begin: drop every data byte of this CHUNK.
  void discard_chunk();

  [[nodiscard]] const frame_header& header() const noexcept { return header_; }
  [[nodiscard]] const chunk_header& chunk() const noexcept { return chunk_; }
  // Data bytes of the current CHUNK: payload_bytes - 16, at least 1.
  [[nodiscard]] std::uint32_t chunk_data_bytes() const noexcept;
  // The JSON bytes of the control frame just reported.
  [[nodiscard]] std::span<const std::byte> payload() const noexcept { return {store_.get(), payload_size_}; }
  [[nodiscard]] const core::error& error() const noexcept { return error_; }

  // Between frames: no byte of the next frame has been committed.
  [[nodiscard]] bool at_boundary() const noexcept { return part_ == part::header && filled_ == 0; }
  // Some, not all, of a header has been committed.
  [[nodiscard]] bool in_header() const noexcept { return part_ == part::header && filled_ > 0; }
  // The error for input that ends here (not after failed): errc::truncated_header at a boundary or
  // inside a header, errc::truncated_payload anywhere after one.
  [[nodiscard]] core::error truncated() const;
  // Bytes the reader holds beyond its fixed 28: at most twice the bytes of the largest payload committed,
  // at least 16 KiB once a frame was read; above 64 KiB only until the next header.
  [[nodiscard]] std::size_t capacity_bytes() const noexcept { return store_capacity_; }

 private:
  enum class part { header, payload, chunk_header, route, skip, data, failed };
  frame_event on_header();
  frame_event on_chunk_header();
  frame_event end_frame(frame_event e) noexcept;
  frame_event fail(core::error e);
  // Makes store_ hold at least `n` bytes; when it must grow, to exactly `n` (and uninitialised: every
  // byte is written by the owner before it is read).
  void reserve_store(std::size_t n);
  // A control payload outgrew store_: to `n` bytes, keeping the filled_ bytes.
  void grow_store(std::size_t n);

  std::uint32_t max_payload_;
  part part_ = part::header;
  std::size_t filled_ = 0;        // bytes of the current part already committed (header, payload, data)
  std::uint64_t body_ = 0;        // payload bytes of the current frame committed so far
  std::uint64_t skip_left_ = 0;   // bytes still to drop before the data go to dest_
  std::array<std::byte, header_bytes> header_buf_{};
  std::array<std::byte, chunk_header_bytes> chunk_buf_{};
  // A control payload, or the scratch area for dropped bytes.
  std::unique_ptr<std::byte[]> store_;
  std::size_t store_capacity_ = 0;
  std::size_t payload_size_ = 0;  // control: its payload's bytes; dropping: the scratch area's
  std::span<std::byte> dest_;
  frame_header header_{};
  chunk_header chunk_{};
  core::error error_;
};

}  // namespace tessera::net
