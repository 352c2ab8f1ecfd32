// The transfer table without sockets: windows, ACKs, resume offsets, take-over between sessions' tables,
// routing of arriving chunks, digests, discards, and detaching on close.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "frame_bytes.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/net/transfer_table.hpp"
#include "tessera/net/write_queue.hpp"

namespace net = tessera::net;
using tessera::test::pattern;

namespace {

struct cut {
  std::uint64_t id, offset, bytes;
  bool operator==(const cut&) const = default;
};

std::vector<cut> cut_all(net::transfer_table& table) {
  std::vector<cut> out;
  table.next_chunks([&](const std::shared_ptr<net::outgoing_transfer>& t, std::uint64_t offset,
                        std::span<const std::byte> data) { out.push_back({t->id(), offset, data.size()}); });
  return out;
}

net::chunk_header header(std::uint64_t id, std::uint64_t offset) { return {id, offset}; }

// Routes and completes one chunk of `data` at `offset` as a session would: the bytes land in the route.
tessera::core::result<net::transfer_table::chunk_outcome> deliver(net::transfer_table& table, std::uint64_t id,
                                                                  std::uint64_t offset, std::span<const std::byte> data) {
  auto route = table.route_chunk(header(id, offset), data.size());
  if (!route) return route.error();
  const auto& r = route.value();
  if (r.transfer) std::copy(data.begin() + static_cast<std::ptrdiff_t>(r.skip), data.end(), r.dest.begin());
  if (!r.transfer) return net::transfer_table::chunk_outcome{};
  return table.chunk_done(r);
}

}  // namespace

TEST_CASE("transfer_table: chunks are cut within the window, and ACKs move it") {
  const auto data = pattern(1000, 1);
  auto out = std::make_shared<net::outgoing_transfer>(5, data);
  net::transfer_table table(100, 300);
  // A short last chunk.
  {
    const auto odd = pattern(250, 2);
    auto t = std::make_shared<net::outgoing_transfer>(4, odd);
    net::transfer_table small(100, 1000);
    REQUIRE(small.attach(t, 0) == net::transfer_table::attach_result::attached);
    CHECK(cut_all(small) == std::vector<cut>{{4, 0, 100}, {4, 100, 100}, {4, 200, 50}});
  }
  CHECK(table.attach(out, 0) == net::transfer_table::attach_result::attached);
  CHECK(cut_all(table) == std::vector<cut>{{5, 0, 100}, {5, 100, 100}, {5, 200, 100}});
  CHECK(cut_all(table).empty());  // the window is full
  auto a = table.on_ack({5, 150});
  REQUIRE(a);
  CHECK(a.value().moved);
  CHECK(!a.value().completed);
  CHECK(out->acked() == 150);
  // Chunks keep their size: a window is filled while it has room, so it may overshoot by less than one.
  CHECK(cut_all(table) == std::vector<cut>{{5, 300, 100}, {5, 400, 100}});
  CHECK(table.attach(out, 0) == net::transfer_table::attach_result::already_here);
  CHECK(cut_all(table).empty());  // attaching again did not restart the window
  REQUIRE(table.on_ack({5, 450}));
  CHECK(cut_all(table) == std::vector<cut>{{5, 500, 100}, {5, 600, 100}, {5, 700, 100}});
  REQUIRE(table.on_ack({5, 750}));
  CHECK(cut_all(table) == std::vector<cut>{{5, 800, 100}, {5, 900, 100}});
  CHECK(cut_all(table).empty());
  // The ACK of everything completes the transfer and removes it.
  auto done = table.on_ack({5, 1000});
  REQUIRE(done);
  CHECK(done.value().completed == out);
  CHECK(out->complete());
  CHECK(table.outgoing_count() == 0);
}

TEST_CASE("transfer_table: ACKs beyond the size are refused; late or unknown ones are harmless") {
  const auto data = pattern(100, 2);
  auto out = std::make_shared<net::outgoing_transfer>(1, data);
  net::transfer_table table(50, 100);
  REQUIRE(table.attach(out, 0) == net::transfer_table::attach_result::attached);
  auto bad = table.on_ack({1, 101});
  REQUIRE(!bad);
  CHECK(bad.error().code == net::errc::bad_field);
  CHECK(bad.error().message.find("'offset'") != std::string::npos);
  auto unknown = table.on_ack({42, 7});
  REQUIRE(unknown);
  CHECK(!unknown.value().moved);
}

TEST_CASE("transfer_table: a send resumes from the largest of its ACK, the peer's offset and an early ACK") {
  const auto data = pattern(1000, 3);
  SUBCASE("peer offset from HELLO") {
    auto out = std::make_shared<net::outgoing_transfer>(2, data);
    net::transfer_table table(100, 200);
    REQUIRE(table.attach(out, 420) == net::transfer_table::attach_result::attached);
    CHECK(cut_all(table) == std::vector<cut>{{2, 420, 100}, {2, 520, 100}});
  }
  SUBCASE("an ACK that arrived before send_blob") {
    auto out = std::make_shared<net::outgoing_transfer>(2, data);
    net::transfer_table table(100, 200);
    REQUIRE(table.on_ack({2, 600}));
    REQUIRE(table.attach(out, 100) == net::transfer_table::attach_result::attached);
    CHECK(out->acked() == 600);
    CHECK(cut_all(table).front() == cut{2, 600, 100});
  }
  SUBCASE("the receiver holds it all: nothing to send") {
    auto out = std::make_shared<net::outgoing_transfer>(2, data);
    net::transfer_table table(100, 200);
    CHECK(table.attach(out, 1000) == net::transfer_table::attach_result::complete);
    CHECK(cut_all(table).empty());
  }
  SUBCASE("an offset past the size is ignored, not believed") {
    auto out = std::make_shared<net::outgoing_transfer>(2, data);
    net::transfer_table table(100, 200);
    REQUIRE(table.attach(out, 5000) == net::transfer_table::attach_result::attached);
    CHECK(out->acked() == 0);
  }
  SUBCASE("early ACKs are remembered for a bounded number of transfers") {
    net::transfer_table table(100, 200);
    for (std::uint64_t id = 100; id < 100 + net::transfer_table::k_max_peer_acks + 10; ++id) REQUIRE(table.on_ack({id, 300}));
    auto kept = std::make_shared<net::outgoing_transfer>(100, data);
    auto forgotten = std::make_shared<net::outgoing_transfer>(100 + net::transfer_table::k_max_peer_acks + 5, data);
    REQUIRE(table.attach(kept, 0) == net::transfer_table::attach_result::attached);
    REQUIRE(table.attach(forgotten, 0) == net::transfer_table::attach_result::attached);
    CHECK(kept->acked() == 300);
    CHECK(forgotten->acked() == 0);
  }
}

TEST_CASE("transfer_table: attaching to a newer table takes a transfer over; the old one lets go") {
  const auto data = pattern(1000, 4);
  auto out = std::make_shared<net::outgoing_transfer>(3, data);
  std::vector<std::byte> dest(1000);
  auto in = std::make_shared<net::incoming_transfer>(4, dest, tessera::crypto::sha256_of(data));
  net::transfer_table old_table(100, 200), new_table(100, 200);
  REQUIRE(old_table.attach(out, 0) == net::transfer_table::attach_result::attached);
  (void)old_table.attach(in);
  REQUIRE(deliver(old_table, 4, 0, std::span(data).first(100)));
  REQUIRE(new_table.attach(out, 0) == net::transfer_table::attach_result::attached);
  const auto ack = new_table.attach(in);
  CHECK(ack.transfer == 4);
  CHECK(ack.offset == 100);  // what the receiver already holds
  CHECK(cut_all(old_table).empty());
  auto late_ack = old_table.on_ack({3, 200});
  REQUIRE(late_ack);
  CHECK(!late_ack.value().moved);
  auto stale = old_table.route_chunk(header(4, 100), 100);
  REQUIRE(!stale);
  CHECK(stale.error().code == net::errc::stopped);  // a newer connection has it: no fault of this peer
  CHECK(!cut_all(new_table).empty());
  CHECK(deliver(new_table, 4, 100, std::span(data).subspan(100, 100)));
}

TEST_CASE("transfer_table: arriving chunks land in place, resends are skipped, gaps and overruns refused") {
  const auto data = pattern(500, 5);
  std::vector<std::byte> dest(500, std::byte{0});
  auto in = std::make_shared<net::incoming_transfer>(8, dest, tessera::crypto::sha256_of(data));
  net::transfer_table table(100, 200);
  CHECK(table.attach(in).offset == 0);

  auto unknown = table.route_chunk(header(9, 0), 10);
  REQUIRE(!unknown);
  CHECK(unknown.error().code == net::errc::unknown_transfer);
  auto gap = table.route_chunk(header(8, 1), 10);
  REQUIRE(!gap);
  CHECK(gap.error().code == net::errc::chunk_out_of_range);
  auto over = table.route_chunk(header(8, 0), 501);
  REQUIRE(!over);
  CHECK(over.error().code == net::errc::chunk_out_of_range);

  auto r = table.route_chunk(header(8, 0), 200);
  REQUIRE(r);
  CHECK(r.value().skip == 0);
  CHECK(r.value().dest.data() == dest.data());  // straight into the receiver's memory
  auto first = deliver(table, 8, 0, std::span(data).first(200));
  REQUIRE(first);
  CHECK(first.value().ack.offset == 200);
  CHECK(!first.value().completed);

  // A resend overlapping what is held: the held part is skipped, never rewritten.
  auto overlap = table.route_chunk(header(8, 150), 100);
  REQUIRE(overlap);
  CHECK(overlap.value().skip == 50);
  CHECK(overlap.value().dest.data() == dest.data() + 200);
  REQUIRE(deliver(table, 8, 150, std::span(data).subspan(150, 100)));
  CHECK(in->received() == 250);
  // Wholly held: nothing lands, the ACK repeats what is held.
  auto again = deliver(table, 8, 0, std::span(data).first(100));
  REQUIRE(again);
  CHECK(again.value().ack.offset == 250);

  auto last = deliver(table, 8, 250, std::span(data).subspan(250));
  REQUIRE(last);
  CHECK(last.value().completed);
  CHECK(last.value().ack.offset == 500);
  CHECK(in->complete());
  CHECK(dest == data);
  CHECK(in->bytes_received_total() == 200 + 100 + 100 + 250);
  CHECK(table.incoming_count() == 0);
}

TEST_CASE("transfer_table: a blob whose digest differs is refused and starts over") {
  const auto data = pattern(64, 6);
  std::vector<std::byte> dest(64);
  auto in = std::make_shared<net::incoming_transfer>(2, dest, tessera::crypto::sha256_of(pattern(64, 7)));
  net::transfer_table table(32, 64);
  (void)table.attach(in);
  REQUIRE(deliver(table, 2, 0, std::span(data).first(32)));
  auto bad = deliver(table, 2, 32, std::span(data).subspan(32));
  REQUIRE(!bad);
  CHECK(bad.error().code == net::errc::digest_mismatch);
  CHECK(in->received() == 0);
  CHECK(!in->complete());
}

TEST_CASE("transfer_table: chunks of discarded transfers are dropped, and the discard list is bounded") {
  net::transfer_table table(32, 64);
  table.discard(11);
  auto r = table.route_chunk(header(11, 4096), 100);
  REQUIRE(r);
  CHECK(!r.value().transfer);
  CHECK(r.value().skip == 100);  // all of it is dropped
  for (std::uint64_t id = 100; id < 100 + net::transfer_table::k_max_discarded; ++id) table.discard(id);
  auto forgotten = table.route_chunk(header(11, 0), 10);  // the oldest discard was forgotten
  REQUIRE(!forgotten);
  CHECK(forgotten.error().code == net::errc::unknown_transfer);
  CHECK(table.route_chunk(header(100, 0), 10));
}

TEST_CASE("transfer_table: a forgotten transfer is let go in both directions; a chunk arriving into it finishes quietly") {
  net::transfer_table table(32, 64);
  const auto data = pattern(100, 3);
  std::vector<std::byte> here(100);
  auto in = std::make_shared<net::incoming_transfer>(5, std::span<std::byte>(here), tessera::crypto::sha256_of(data));
  const auto out_bytes = pattern(80, 4);
  auto out = std::make_shared<net::outgoing_transfer>(6, std::span<const std::byte>(out_bytes));
  (void)table.attach(in);
  REQUIRE(table.attach(out, 0) == net::transfer_table::attach_result::attached);
  REQUIRE(deliver(table, 5, 0, std::span(data).first(20)));

  // A chunk is being read into the blob when its owner moves on: the route keeps the memory alive.
  auto route = table.route_chunk(header(5, 20), 30);
  REQUIRE(route);
  REQUIRE(route.value().transfer);
  table.forget(5);
  table.forget(6);
  CHECK(table.incoming_count() == 0);
  CHECK(table.outgoing_count() == 0);
  CHECK(cut_all(table).empty());  // nothing more is sent of 6
  std::weak_ptr<net::incoming_transfer> weak = in;
  in.reset();
  CHECK(!weak.expired());  // held by the route alone
  std::copy(data.begin() + 20, data.begin() + 50, route.value().dest.begin());
  auto done = table.chunk_done(route.value());
  REQUIRE(done);  // no protocol error, no ACK
  CHECK(done.value().forgotten);
  CHECK(!done.value().completed);
  route = tessera::core::make_error(net::errc::unknown_transfer, "gone");
  CHECK(weak.expired());
  // Later chunks of 5 are dropped whole, as a discarded blob's.
  auto later = table.route_chunk(header(5, 50), 50);
  REQUIRE(later);
  CHECK(!later.value().transfer);
  // ACKs for 6 are remembered as for a transfer never sent: harmless.
  CHECK(table.on_ack(net::msg::ack{6, 40}));
}

TEST_CASE("transfer_table: on close, transfers are detached and resume from their last ACK") {
  const auto data = pattern(1000, 8);
  auto out = std::make_shared<net::outgoing_transfer>(6, data);
  std::vector<std::byte> dest(10);
  auto in = std::make_shared<net::incoming_transfer>(7, dest, tessera::crypto::sha256_of(pattern(10, 9)));
  net::write_queue queue(8);
  {
    net::transfer_table table(100, 400);
    REQUIRE(table.attach(out, 0) == net::transfer_table::attach_result::attached);
    (void)table.attach(in);
    table.next_chunks([&](const std::shared_ptr<net::outgoing_transfer>& t, std::uint64_t offset,
                          std::span<const std::byte> bytes) { queue.push_chunk(t, offset, bytes); });
    // 250 data bytes reach TLS, 100 of them are acknowledged, then the link breaks.
    while (out->bytes_sent_total() < 250) queue.consume(1);
    REQUIRE(table.on_ack({6, 100}));
    table.detach_all();
    CHECK(table.outgoing_count() == 0);
    CHECK(table.incoming_count() == 0);
  }
  queue.clear();
  CHECK(out->unacked_at_breaks() == 150);
  net::transfer_table next(100, 400);
  REQUIRE(next.attach(out, 0) == net::transfer_table::attach_result::attached);
  CHECK(cut_all(next).front() == cut{6, 100, 100});  // only unacknowledged bytes go again
  CHECK(next.attach(in).offset == 0);
}
