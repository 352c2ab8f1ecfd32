#include "tessera/net/write_queue.hpp"

#include <algorithm>

#include "tessera/net/frame.hpp"

namespace tessera::net {

bool write_queue::push_control(std::vector<std::byte> frame) {
  if (control_ >= max_control_) return false;
  push_final(std::move(frame));
  return true;
}

void write_queue::push_final(std::vector<std::byte> frame) {
  ++control_;
  frames_.push_back({std::move(frame), {}, nullptr, 0});
}

void write_queue::push_chunk(std::shared_ptr<outgoing_transfer> t, std::uint64_t offset,
                             std::span<const std::byte> data) {
  entry f;
  f.head.resize(header_bytes + chunk_header_bytes);
  encode_header({frame_type::chunk, 0, static_cast<std::uint32_t>(chunk_header_bytes + data.size())},
                std::span<std::byte, header_bytes>(f.head.data(), header_bytes));
  encode_chunk_header({t->id(), offset},
                      std::span<std::byte, chunk_header_bytes>(f.head.data() + header_bytes, chunk_header_bytes));
  f.body = data;
  f.transfer = std::move(t);
  f.offset = offset;
  frames_.push_back(std::move(f));
}

std::span<const std::byte> write_queue::pending() const noexcept {
  if (frames_.empty()) return {};
  const entry& f = frames_.front();
  if (written_ < f.head.size()) return std::span<const std::byte>(f.head).subspan(written_);
  return f.body.subspan(written_ - f.head.size());
}

bool write_queue::consume(std::size_t n) {
  TESSERA_ASSERT(n <= pending().size());
  const entry& f = frames_.front();
  if (f.transfer && written_ + n > f.head.size()) {
    outgoing_transfer& t = *f.transfer;
    t.bytes_sent_total_ += written_ + n - std::max(written_, f.head.size());
    t.sent_high_ = std::max(t.sent_high_, f.offset + (written_ + n - f.head.size()));
  }
  written_ += n;
  if (written_ < f.head.size() + f.body.size()) return false;
  if (!f.transfer) --control_;
  frames_.pop_front();
  written_ = 0;
  return true;
}

void write_queue::drop_unsent_chunks(bool front_in_flight) {
  const bool keep_front = front_in_flight || written_ > 0;
  std::deque<entry> kept;
  for (std::size_t i = 0; i < frames_.size(); ++i) {
    if (frames_[i].transfer && !(i == 0 && keep_front)) continue;
    kept.push_back(std::move(frames_[i]));
  }
  frames_.swap(kept);
}

void write_queue::drop_chunks_of(std::uint64_t transfer, bool front_in_flight) {
  const bool keep_front = front_in_flight || written_ > 0;
  std::deque<entry> kept;
  for (std::size_t i = 0; i < frames_.size(); ++i) {
    if (frames_[i].transfer && frames_[i].transfer->id() == transfer && !(i == 0 && keep_front)) continue;
    kept.push_back(std::move(frames_[i]));
  }
  frames_.swap(kept);
}

void write_queue::clear() noexcept {
  frames_.clear();
  control_ = 0;
  written_ = 0;
}

}  // namespace tessera::net
