// The one decoder without sockets: every valid sequence means the same whatever cuts it arrives in, and
// every way a frame must be refused is one row of a table (one enum, one generator, as ggml's
// tests/test-gguf.cpp does), each checked for its typed error wherever the input is cut.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "frame_bytes.hpp"
#include "frame_replay.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/frame_reader.hpp"
#include "tessera/net/messages.hpp"

namespace net = tessera::net;
using tessera::test::chunk_frame;
using tessera::test::concat;
using tessera::test::pattern;
using tessera::test::reader_event;
using tessera::test::replay_bytewise;
using tessera::test::replay_split;
using tessera::test::replay_whole;

namespace {

std::vector<std::byte> header_only(net::frame_type t, std::uint16_t flags, std::uint32_t payload_bytes) {
  std::vector<std::byte> h(net::header_bytes);
  net::encode_header({t, flags, payload_bytes}, std::span<std::byte, net::header_bytes>(h.data(), net::header_bytes));
  return h;
}

std::vector<std::byte> every_control_message() {
  std::vector<std::vector<std::byte>> parts;
  for (const net::message& m : std::vector<net::message>{
           net::msg::hello{.device_id = "pi-07", .version = 1, .memory_budget_bytes = 1u << 20, .examples = 10,
                           .codecs = {net::codec::f32}, .resume = {{1, 4}}},
           net::msg::welcome{100, 1u << 20, 65536},
           net::msg::assign{.round = 1, .widths = {8, 4}, .hyper_json = R"({"lr":0.1})", .transfer = 2, .size = 8,
                            .blob_codec = net::codec::f32, .sha256 = {}},
           net::msg::ack{2, 4},
           net::msg::update{.round = 1, .examples = 10, .steps = 2, .loss = 0.25, .transfer = 3, .size = 8,
                            .blob_codec = net::codec::f16, .sha256 = {}},
           net::msg::result{false, "digest"}, net::msg::ping{1}, net::msg::pong{1}, net::msg::refuse{"no"}})
    parts.push_back(net::encode_message(m));
  return concat(std::move(parts));
}

struct valid_sequence {
  const char* name;
  std::vector<std::byte> bytes;
  std::uint32_t limit = net::default_max_payload;
};

// Routing in a replay: odd transfers are discarded, even ones skip (offset % 7) bytes already held.
std::vector<valid_sequence> valid_sequences() {
  std::vector<valid_sequence> v;
  v.push_back({"every control message", every_control_message()});
  v.push_back({"control frames with empty payloads",
               concat({net::encode_frame(net::frame_type::ping, {}), net::encode_frame(net::frame_type::refuse, {})})});
  v.push_back({"chunks kept whole, partly skipped, wholly skipped, and discarded",
               concat({chunk_frame(2, 0, pattern(40, 1)), chunk_frame(2, 40, pattern(5, 2)),
                       chunk_frame(4, 3, pattern(1, 3)), chunk_frame(1, 0, pattern(33, 4)),
                       chunk_frame(6, 13, pattern(9, 5))})});
  v.push_back({"control and chunk frames interleaved",
               concat({net::encode_message(net::msg::ack{8, 0}), chunk_frame(8, 0, pattern(17, 6)),
                       net::encode_message(net::msg::ping{2}), chunk_frame(9, 0, pattern(3, 7)),
                       net::encode_message(net::msg::pong{2})})});
  v.push_back({"payloads exactly at the limit",
               concat({net::encode_frame(net::frame_type::ping, pattern(64, 8)),
                       chunk_frame(10, 0, pattern(64 - net::chunk_header_bytes, 9))}),
               64});
  return v;
}

}  // namespace

TEST_CASE("frame_reader: every valid sequence gives the same events whole, byte by byte and at every split") {
  for (const auto& seq : valid_sequences()) {
    INFO(seq.name);
    const auto whole = replay_whole(seq.bytes, seq.limit);
    REQUIRE(!whole.empty());
    for (const auto& e : whole) CHECK(e.kind != net::frame_event::failed);
    CHECK(replay_bytewise(seq.bytes, seq.limit) == whole);
    for (std::size_t cut = 1; cut < seq.bytes.size(); ++cut) {
      INFO("split at " << cut);
      CHECK(replay_split(seq.bytes, seq.limit, cut) == whole);
    }
  }
}

TEST_CASE("frame_reader: chunk routing as the replays do it — kept data arrive intact, skipped bytes never land") {
  const auto data = pattern(40, 1);
  const auto events = replay_whole(concat({chunk_frame(2, 3, data), chunk_frame(1, 0, data)}), net::default_max_payload);
  REQUIRE(events.size() == 4);
  CHECK(events[0].kind == net::frame_event::chunk_begin);
  CHECK(events[1].kind == net::frame_event::chunk_end);
  // offset 3: three bytes skipped as already held, the other 37 land in the destination.
  CHECK(events[1].bytes == std::vector<std::byte>(data.begin() + 3, data.end()));
  CHECK(events[3].kind == net::frame_event::chunk_end);
  CHECK(events[3].bytes.empty());  // discarded
}

TEST_CASE("frame_reader: every proper prefix of a valid sequence ends truncated, never otherwise") {
  for (const auto& seq : valid_sequences()) {
    INFO(seq.name);
    for (std::size_t n = 1; n < seq.bytes.size(); ++n) {
      const auto events = replay_whole(std::span(seq.bytes).first(n), seq.limit);
      if (events.empty() || !events.back().at_end) continue;  // the prefix ends between frames
      CHECK((events.back().error == net::errc::truncated_header || events.back().error == net::errc::truncated_payload));
    }
  }
  // decode_frame wants a whole frame: every prefix of one is refused, from 0 bytes on.
  const auto f = net::encode_message(net::msg::ping{1});
  for (std::size_t n = 0; n < f.size(); ++n) {
    auto r = net::decode_frame(std::span(f).first(n), net::default_max_payload);
    REQUIRE(!r);
    CHECK(r.error().code == (n < net::header_bytes ? net::errc::truncated_header : net::errc::truncated_payload));
  }
}

// ---- Every way a frame must be refused: one enum, one generator, one loop.

enum class malformed {
  bad_magic,
  bad_version,
  type_zero,
  type_above_last,
  type_255,
  nonzero_flags,
  length_over_limit,
  length_huge,
  length_over_hard_cap,
  truncated_header,
  truncated_payload,
  header_without_payload,
  chunk_without_data,
  chunk_shorter_than_sub_header,
  truncated_chunk_sub_header,
  truncated_chunk_data,
  chunk_offset_overflow,
  bad_frame_after_good_one,
  count_,
};

struct malformed_case {
  const char* name;
  std::vector<std::byte> bytes;
  net::errc expected;
  bool from_header_alone = false;  // refused from 12 bytes, before anything is sized
  std::uint32_t limit = net::default_max_payload;
};

malformed_case make_malformed(malformed m) {
  const auto ping = net::encode_message(net::msg::ping{1});
  auto patched = [&](std::size_t at, std::uint8_t value) {
    auto f = ping;
    f[at] = std::byte{value};
    return f;
  };
  switch (m) {
    case malformed::bad_magic: return {"bad magic", patched(0, 'X'), net::errc::bad_magic, true};
    case malformed::bad_version: return {"an older peer's version", patched(4, 1), net::errc::bad_version, true};
    case malformed::type_zero: return {"type 0", patched(5, 0), net::errc::unknown_type, true};
    case malformed::type_above_last:
      return {"type past the last", patched(5, net::max_frame_type + 1), net::errc::unknown_type, true};
    case malformed::type_255: return {"type 255", patched(5, 255), net::errc::unknown_type, true};
    case malformed::nonzero_flags: return {"nonzero flags", patched(6, 1), net::errc::bad_flags, true};
    case malformed::length_over_limit:
      return {"length one over the limit", header_only(net::frame_type::hello, 0, net::default_max_payload + 1),
              net::errc::frame_too_large, true};
    case malformed::length_huge:
      return {"length near 4 GiB", header_only(net::frame_type::update, 0, 0xfffffff0u), net::errc::frame_too_large, true};
    case malformed::length_over_hard_cap:
      // A configured limit above the hard cap is clamped to it.
      return {"length over the hard cap under a larger limit", header_only(net::frame_type::chunk, 0, net::hard_max_payload + 1),
              net::errc::frame_too_large, true, 0xffffffffu};
    case malformed::truncated_header:
      return {"truncated header", std::vector<std::byte>(ping.begin(), ping.begin() + 5), net::errc::truncated_header};
    case malformed::truncated_payload:
      return {"truncated payload", std::vector<std::byte>(ping.begin(), ping.end() - 1), net::errc::truncated_payload};
    case malformed::header_without_payload:
      return {"header without its payload", std::vector<std::byte>(ping.begin(), ping.begin() + net::header_bytes),
              net::errc::truncated_payload};
    case malformed::chunk_without_data:
      return {"CHUNK with a sub-header and no data", net::encode_frame(net::frame_type::chunk, std::vector<std::byte>(16)),
              net::errc::bad_chunk, true};
    case malformed::chunk_shorter_than_sub_header:
      return {"CHUNK shorter than its sub-header", net::encode_frame(net::frame_type::chunk, std::vector<std::byte>(8)),
              net::errc::bad_chunk, true};
    case malformed::truncated_chunk_sub_header: {
      auto f = chunk_frame(2, 0, pattern(8, 1));
      f.resize(net::header_bytes + 10);
      return {"truncated CHUNK sub-header", f, net::errc::truncated_payload};
    }
    case malformed::truncated_chunk_data: {
      auto f = chunk_frame(2, 0, pattern(8, 1));
      f.pop_back();
      return {"truncated CHUNK data", f, net::errc::truncated_payload};
    }
    case malformed::chunk_offset_overflow:
      return {"CHUNK offset + length overflows", chunk_frame(2, UINT64_MAX - 3, pattern(8, 1)),
              net::errc::chunk_out_of_range};
    case malformed::bad_frame_after_good_one:
      return {"a bad frame after a good one", concat({ping, patched(4, 7)}), net::errc::bad_version};
    case malformed::count_: break;
  }
  return {"?", {}, net::errc::bad_magic};
}

// The first error decode_frame meets walking the frames of `bytes`.
std::error_code first_decode_error(std::span<const std::byte> bytes, std::uint32_t limit) {
  while (true) {
    auto f = net::decode_frame(bytes, limit);
    if (!f) return f.error().code;
    bytes = bytes.subspan(f.value().frame_bytes);
  }
}

TEST_CASE("frame_reader: every malformed input is refused with its typed error, wherever it is cut") {
  for (int i = 0; i < static_cast<int>(malformed::count_); ++i) {
    const malformed_case c = make_malformed(static_cast<malformed>(i));
    INFO(c.name);
    CHECK(first_decode_error(c.bytes, c.limit) == c.expected);
    const auto whole = replay_whole(c.bytes, c.limit);
    REQUIRE(!whole.empty());
    CHECK(whole.back().kind == net::frame_event::failed);
    CHECK(whole.back().error == c.expected);
    CHECK(!whole.back().message.empty());
    CHECK(replay_bytewise(c.bytes, c.limit) == whole);
    for (std::size_t cut = 1; cut < c.bytes.size(); ++cut) CHECK(replay_split(c.bytes, c.limit, cut) == whole);
    if (c.from_header_alone) {
      // Refused from the header: no later byte was needed, nothing was sized from it.
      net::frame_reader r(c.limit);
      std::size_t at = 0;
      net::frame_event e = net::frame_event::need_more;
      while (e == net::frame_event::need_more) {
        auto into = r.buffer();
        const std::size_t n = std::min(into.size(), c.bytes.size() - at);
        std::memcpy(into.data(), c.bytes.data() + at, n);
        at += n;
        e = r.commit(n);
      }
      CHECK(e == net::frame_event::failed);
      CHECK(r.error().code == c.expected);
      CHECK(at <= net::header_bytes + net::chunk_header_bytes);
      CHECK(r.capacity_bytes() == 0);
    }
  }
}

// ---- What the reader holds and where bytes land.

TEST_CASE("frame_reader: a control payload's store holds what arrived, not what the header announced") {
  net::frame_reader r(net::hard_max_payload);
  auto feed = [&](std::span<const std::byte> f) {
    net::frame_event e = net::frame_event::need_more;
    for (std::size_t at = 0; at < f.size();) {
      auto into = r.buffer();
      REQUIRE(!into.empty());
      const std::size_t n = std::min(into.size(), f.size() - at);
      std::memcpy(into.data(), f.data() + at, n);
      at += n;
      e = r.commit(n);
    }
    return e;
  };
  CHECK(r.capacity_bytes() == 0);
  // Small payloads: exactly their size, the store reused.
  CHECK(feed(net::encode_frame(net::frame_type::ping, pattern(100, 1))) == net::frame_event::control);
  CHECK(r.capacity_bytes() == 100);
  CHECK(r.payload().size() == 100);
  CHECK(feed(net::encode_frame(net::frame_type::ping, pattern(50, 2))) == net::frame_event::control);
  CHECK(r.capacity_bytes() == 100);
  CHECK(std::vector<std::byte>(r.payload().begin(), r.payload().end()) == pattern(50, 2));

  // A header announcing 1 MiB, then a trickle: the store follows the bytes that came, at most doubled.
  const auto big = pattern(1u << 20, 3);
  const auto frame = net::encode_frame(net::frame_type::hello, big);
  const std::span<const std::byte> all(frame);
  CHECK(feed(all.first(net::header_bytes + 1)) == net::frame_event::need_more);
  CHECK(r.capacity_bytes() <= 16u << 10);
  std::size_t at = net::header_bytes + 1;
  for (const std::size_t upto : {std::size_t{20000}, std::size_t{100000}, std::size_t{700000}}) {
    CHECK(feed(all.subspan(at, net::header_bytes + upto - at)) == net::frame_event::need_more);
    at = net::header_bytes + upto;
    CAPTURE(upto);
    CHECK(r.capacity_bytes() <= 2 * upto);
    CHECK(r.capacity_bytes() >= upto);
  }
  CHECK(feed(all.subspan(at)) == net::frame_event::control);
  CHECK(std::equal(r.payload().begin(), r.payload().end(), big.begin(), big.end()));  // nothing lost as it grew
  CHECK(r.capacity_bytes() == big.size());

  // The next frame lets the large store go.
  CHECK(feed(net::encode_frame(net::frame_type::ping, pattern(300, 4))) == net::frame_event::control);
  CHECK(r.capacity_bytes() == 300);
  CHECK(std::vector<std::byte>(r.payload().begin(), r.payload().end()) == pattern(300, 4));
}

TEST_CASE("frame_reader: chunk data are read straight into the destination, after the skipped bytes") {
  net::frame_reader r(net::default_max_payload);
  const auto data = pattern(24, 5);
  const auto f = chunk_frame(4, 10, data);
  std::size_t at = 0;
  auto commit_some = [&](std::size_t most) {
    auto into = r.buffer();
    const std::size_t n = std::min({into.size(), f.size() - at, most});
    std::memcpy(into.data(), f.data() + at, n);
    at += n;
    return r.commit(n);
  };
  while (at < net::header_bytes + net::chunk_header_bytes - 1) CHECK(commit_some(1) == net::frame_event::need_more);
  REQUIRE(commit_some(1) == net::frame_event::chunk_begin);
  CHECK(r.chunk().transfer == 4);
  CHECK(r.chunk().offset == 10);
  REQUIRE(r.chunk_data_bytes() == 24);
  std::vector<std::byte> blob(64, std::byte{0xee});
  // Four bytes already held: they are read and dropped; the rest go to blob[14..34).
  const std::span<std::byte> dest = std::span(blob).subspan(14, 20);
  r.accept_chunk(4, dest);
  CHECK(r.buffer().data() != dest.data());
  CHECK(commit_some(4) == net::frame_event::need_more);
  for (std::size_t i = 0; i < 19; ++i) {
    CHECK(r.buffer().data() == dest.data() + i);  // no copy: the next byte's home is the blob itself
    CHECK(commit_some(1) == net::frame_event::need_more);
  }
  CHECK(commit_some(1) == net::frame_event::chunk_end);
  CHECK(std::equal(data.begin() + 4, data.end(), blob.begin() + 14));
  CHECK(blob[13] == std::byte{0xee});
  CHECK(blob[34] == std::byte{0xee});
  CHECK(r.at_boundary());
  CHECK(r.capacity_bytes() <= 4);  // the scratch for dropped bytes was sized by them, not by the chunk
}

TEST_CASE("frame_reader: dropping a large chunk goes through a bounded scratch area") {
  const auto big = pattern(40u << 10, 7);
  const auto seq = concat({chunk_frame(3, 0, big), chunk_frame(2, 20000, big)});  // discarded; skip 20000 % 7
  const auto whole = replay_whole(seq, net::default_max_payload);
  REQUIRE(whole.size() == 4);
  CHECK(whole[3].bytes.size() == big.size() - 20000 % 7);
  CHECK(replay_bytewise(seq, net::default_max_payload) == whole);
  for (std::size_t cut = 1; cut < seq.size(); cut += 997) CHECK(replay_split(seq, net::default_max_payload, cut) == whole);

  net::frame_reader r(net::default_max_payload);
  std::size_t at = 0;
  net::frame_event e = net::frame_event::need_more;
  while (at < seq.size() / 2) {
    auto into = r.buffer();
    const std::size_t n = std::min(into.size(), seq.size() - at);
    std::memcpy(into.data(), seq.data() + at, n);
    at += n;
    e = r.commit(n);
    if (e == net::frame_event::chunk_begin) r.discard_chunk();
    CHECK(r.capacity_bytes() < big.size());
  }
  CHECK(e == net::frame_event::chunk_end);
}
