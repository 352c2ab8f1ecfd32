// The write queue alone: bounds, CHUNK framing over the sender's bytes, partial writes, and what a
// graceful close keeps.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "frame_bytes.hpp"
#include "tessera/net/frame_reader.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/write_queue.hpp"

namespace net = tessera::net;
using tessera::test::pattern;

namespace {

// Writes everything queued, `step` bytes per call, into one byte string.
std::vector<std::byte> drain(net::write_queue& q, std::size_t step) {
  std::vector<std::byte> out;
  while (!q.empty()) {
    const auto p = q.pending();
    REQUIRE(!p.empty());
    const std::size_t n = std::min(step, p.size());
    out.insert(out.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
    q.consume(n);
  }
  return out;
}

}  // namespace

TEST_CASE("write_queue: control frames are bounded; the final REFUSE goes past the bound") {
  net::write_queue q(2);
  CHECK(q.push_control(net::encode_message(net::msg::ping{1})));
  CHECK(q.push_control(net::encode_message(net::msg::ping{2})));
  CHECK(!q.push_control(net::encode_message(net::msg::ping{3})));
  CHECK(q.size() == 2);
  q.push_final(net::encode_message(net::msg::refuse{"bye"}));
  CHECK(q.control_frames() == 3);
  // Chunks do not count against the control bound.
  const auto data = pattern(100, 1);
  auto t = std::make_shared<net::outgoing_transfer>(9, data);
  q.push_chunk(t, 0, data);
  CHECK(q.control_frames() == 3);
  CHECK(q.size() == 4);
}

TEST_CASE("write_queue: a CHUNK is its two headers and the sender's own bytes; written bytes are counted") {
  const auto data = pattern(1000, 1);
  auto t = std::make_shared<net::outgoing_transfer>(7, data);
  net::write_queue q(8);
  q.push_chunk(t, 200, std::span(data).subspan(200, 300));
  CHECK(q.pending().size() == net::header_bytes + net::chunk_header_bytes);
  q.consume(net::header_bytes + net::chunk_header_bytes);
  CHECK(q.pending().data() == data.data() + 200);  // no copy of the data
  CHECK(t->bytes_sent_total() == 0);
  CHECK(!q.consume(100));
  CHECK(t->bytes_sent_total() == 100);
  CHECK(q.consume(200));
  CHECK(t->bytes_sent_total() == 300);
  CHECK(q.empty());

  // Whatever the write sizes, the bytes on the wire decode to the same CHUNK.
  for (std::size_t step : {1u, 7u, 28u, 4096u}) {
    q.push_chunk(t, 0, std::span(data).first(40));
    const auto wire = drain(q, step);
    auto f = net::decode_frame(wire, net::default_max_payload);
    REQUIRE(f);
    CHECK(f.value().chunk.transfer == 7);
    CHECK(f.value().chunk.offset == 0);
    CHECK(std::equal(f.value().payload.begin(), f.value().payload.end(), data.begin()));
  }
}

TEST_CASE("write_queue: a graceful close drops queued chunks but the one being written, and keeps control frames") {
  const auto data = pattern(300, 1);
  auto t = std::make_shared<net::outgoing_transfer>(3, data);
  auto fill = [&](net::write_queue& q) {
    q.push_chunk(t, 0, std::span(data).first(100));
    REQUIRE(q.push_control(net::encode_message(net::msg::ack{4, 10})));
    q.push_chunk(t, 100, std::span(data).subspan(100, 100));
    REQUIRE(q.push_control(net::encode_message(net::msg::ping{1})));
    q.push_chunk(t, 200, std::span(data).subspan(200, 100));
  };
  SUBCASE("front chunk untouched and no write in flight: every chunk goes") {
    net::write_queue q(8);
    fill(q);
    q.drop_unsent_chunks(false);
    CHECK(q.size() == 2);
    CHECK(!q.front_is_chunk());
  }
  SUBCASE("a write of the front chunk in flight: it stays, its bytes are still referenced") {
    net::write_queue q(8);
    fill(q);
    q.drop_unsent_chunks(true);
    CHECK(q.size() == 3);
    CHECK(q.front_is_chunk());
  }
  SUBCASE("front chunk partly written: it stays, so the stream never carries half a frame") {
    net::write_queue q(8);
    fill(q);
    q.consume(5);
    q.drop_unsent_chunks(false);
    CHECK(q.size() == 3);
    const auto wire = drain(q, 64);
    CHECK(wire.size() + 5 == (net::header_bytes + net::chunk_header_bytes + 100) +
                                 net::encode_message(net::msg::ack{4, 10}).size() +
                                 net::encode_message(net::msg::ping{1}).size());
  }
}

TEST_CASE("write_queue: dropping one transfer's chunks keeps the others', control frames and a front chunk being written") {
  const auto data = pattern(300, 1);
  auto mine = std::make_shared<net::outgoing_transfer>(3, data);
  auto other = std::make_shared<net::outgoing_transfer>(4, data);
  net::write_queue q(8);
  q.push_chunk(mine, 0, std::span(data).first(100));
  q.push_chunk(other, 0, std::span(data).first(100));
  REQUIRE(q.push_control(net::encode_message(net::msg::ping{1})));
  q.push_chunk(mine, 100, std::span(data).subspan(100, 100));
  SUBCASE("nothing in flight: every chunk of 3 goes") {
    q.drop_chunks_of(3, false);
    CHECK(q.size() == 2);
    CHECK(mine.use_count() == 1);  // the queue holds no reference to it any more
    CHECK(other.use_count() == 2);
  }
  SUBCASE("its front chunk partly written: that one stays whole") {
    q.consume(7);
    q.drop_chunks_of(3, false);
    CHECK(q.size() == 3);
    CHECK(q.front_is_chunk());
    CHECK(mine.use_count() == 2);
  }
}

