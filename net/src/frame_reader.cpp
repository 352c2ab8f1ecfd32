#include "tessera/net/frame_reader.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace tessera::net {
namespace {

// Bytes read only to be dropped pass through this much scratch at a time: one TLS record's plaintext,
// the most a single read returns, so a discarded 1 MiB chunk never costs a 1 MiB buffer.
constexpr std::size_t k_scratch_bytes = 16u << 10;
// A control payload's store starts at one TLS record and doubles as bytes arrive, so a header that
// announces a large payload costs only what has come; a store grown past `k_kept_bytes` by one large
// frame is let go at the next header, so an idle session holds little.
constexpr std::size_t k_first_bytes = 16u << 10;
constexpr std::size_t k_kept_bytes = 64u << 10;

}  // namespace

frame_reader::frame_reader(std::uint32_t max_payload) noexcept : max_payload_(max_payload) {}

void frame_reader::reserve_store(std::size_t n) {
  if (n <= store_capacity_) return;
  store_.reset();
  store_ = std::make_unique_for_overwrite<std::byte[]>(n);
  store_capacity_ = n;
}

void frame_reader::grow_store(std::size_t n) {
  TESSERA_ASSERT(n > store_capacity_);
  auto bigger = std::make_unique_for_overwrite<std::byte[]>(n);
  if (filled_ > 0) std::memcpy(bigger.get(), store_.get(), filled_);
  store_ = std::move(bigger);
  store_capacity_ = n;
}

std::uint32_t frame_reader::chunk_data_bytes() const noexcept {
  return header_.payload_bytes - static_cast<std::uint32_t>(chunk_header_bytes);
}

std::span<std::byte> frame_reader::buffer() noexcept {
  switch (part_) {
    case part::header: return std::span<std::byte>(header_buf_).subspan(filled_);
    case part::payload:
      return std::span<std::byte>(store_.get() + filled_, std::min(payload_size_, store_capacity_) - filled_);
    case part::chunk_header: return std::span<std::byte>(chunk_buf_).subspan(filled_);
    case part::skip:
      return std::span<std::byte>(store_.get(), static_cast<std::size_t>(std::min<std::uint64_t>(skip_left_, payload_size_)));
    case part::data: return dest_.subspan(filled_);
    case part::route:
    case part::failed: break;
  }
  TESSERA_ASSERT(!"frame_reader::buffer() while a chunk awaits its route, or after an error");
  return {};
}

frame_event frame_reader::commit(std::size_t n) {
  TESSERA_ASSERT(n <= buffer().size());
  switch (part_) {
    case part::header:
      filled_ += n;
      return filled_ < header_bytes ? frame_event::need_more : on_header();
    case part::payload:
      filled_ += n;
      body_ += n;
      if (filled_ == payload_size_) return end_frame(frame_event::control);
      if (filled_ == store_capacity_) grow_store(std::min(payload_size_, 2 * store_capacity_));
      return frame_event::need_more;
    case part::chunk_header:
      filled_ += n;
      body_ += n;
      return filled_ < chunk_header_bytes ? frame_event::need_more : on_chunk_header();
    case part::skip:
      skip_left_ -= n;
      body_ += n;
      if (skip_left_ > 0) return frame_event::need_more;
      if (dest_.empty()) return end_frame(frame_event::chunk_end);
      part_ = part::data;
      filled_ = 0;
      return frame_event::need_more;
    case part::data:
      filled_ += n;
      body_ += n;
      return filled_ < dest_.size() ? frame_event::need_more : end_frame(frame_event::chunk_end);
    case part::route:
    case part::failed: break;
  }
  return frame_event::failed;  // unreachable: buffer() asserted above
}

frame_event frame_reader::on_header() {
  auto h = decode_header(header_buf_, max_payload_);
  if (!h) return fail(std::move(h).error());
  header_ = h.value();
  filled_ = 0;
  body_ = 0;
  if (header_.type == frame_type::chunk) {
    part_ = part::chunk_header;
    return frame_event::need_more;
  }
  // Sized only now that the header passed the limit check, and only for the first bytes: the store grows
  // as they arrive. The capacity is reused between frames, up to k_kept_bytes.
  if (store_capacity_ > k_kept_bytes) {
    store_.reset();
    store_capacity_ = 0;
  }
  payload_size_ = header_.payload_bytes;
  reserve_store(std::min<std::size_t>(payload_size_, k_first_bytes));
  if (header_.payload_bytes == 0) return end_frame(frame_event::control);
  part_ = part::payload;
  return frame_event::need_more;
}

frame_event frame_reader::on_chunk_header() {
  auto c = decode_chunk_header(chunk_buf_, header_.payload_bytes);
  if (!c) return fail(std::move(c).error());
  chunk_ = c.value();
  part_ = part::route;
  filled_ = 0;
  return frame_event::chunk_begin;
}

void frame_reader::accept_chunk(std::uint64_t skip, std::span<std::byte> dest) {
  TESSERA_ASSERT(part_ == part::route && skip <= chunk_data_bytes() && skip + dest.size() == chunk_data_bytes());
  dest_ = dest;
  skip_left_ = skip;
  filled_ = 0;
  if (skip_left_ == 0) {
    part_ = part::data;
    return;
  }
  payload_size_ = static_cast<std::size_t>(std::min<std::uint64_t>(skip_left_, k_scratch_bytes));
  reserve_store(payload_size_);
  part_ = part::skip;
}

void frame_reader::discard_chunk() { accept_chunk(chunk_data_bytes(), {}); }

frame_event frame_reader::end_frame(frame_event e) noexcept {
  part_ = part::header;
  filled_ = 0;
  return e;
}

frame_event frame_reader::fail(core::error e) {
  error_ = std::move(e);
  part_ = part::failed;
  return frame_event::failed;
}

core::error frame_reader::truncated() const {
  if (part_ == part::header)
    return make_error(errc::truncated_header, "frame header needs 12 bytes, got " + std::to_string(filled_));
  return make_error(errc::truncated_payload, std::string(to_string(header_.type)) + " payload needs " +
                                                 std::to_string(header_.payload_bytes) + " bytes, got " +
                                                 std::to_string(body_));
}

// The reader driven from one buffer. Bytes are copied region by region as from a socket; the views
// returned point into `bytes`, which is why CHUNK data may simply be dropped here.
core::result<decoded_frame> decode_frame(std::span<const std::byte> bytes, std::uint32_t max_payload) {
  frame_reader reader(max_payload);
  std::size_t used = 0;
  while (used < bytes.size()) {
    const std::span<std::byte> into = reader.buffer();
    const std::size_t n = std::min(into.size(), bytes.size() - used);
    std::memcpy(into.data(), bytes.data() + used, n);
    used += n;
    switch (reader.commit(n)) {
      case frame_event::need_more: break;
      case frame_event::chunk_begin: reader.discard_chunk(); break;
      case frame_event::control:
        return decoded_frame{reader.header(), {}, bytes.subspan(header_bytes, reader.header().payload_bytes), used};
      case frame_event::chunk_end:
        return decoded_frame{reader.header(), reader.chunk(),
                             bytes.subspan(header_bytes + chunk_header_bytes, reader.chunk_data_bytes()), used};
      case frame_event::failed: return reader.error();
    }
  }
  return reader.truncated();
}

}  // namespace tessera::net
