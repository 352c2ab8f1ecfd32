// A device with a valid certificate that misbehaves after HELLO, one connection and one named test per
// misdeed, against the real hub service with two real agents training beside it (tests/hub's fixture,
// one io_context, mutual TLS on 127.0.0.1). The device is a raw TLS peer that writes exactly the frames
// the test gives it — valid or not — and follows the protocol only as far as a case needs (it ACKs the
// download it is sent and answers PINGs). Each misdeed must end in a REFUSE or a rejecting RESULT that
// names it, the hub must not crash, and the two agents must train every round undisturbed.
#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>

#include "federation_fixture.hpp"
#include "support/text.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/task.hpp"

using namespace tessera;
using namespace std::chrono_literals;

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr int k_rounds = 3;
const std::string k_id = "dev-hostile";

const crypto::cert_files& hostile_cert() {
  static const crypto::cert_files files = [] {
    const auto& pki = test::test_pki::get();
    crypto::cert_files f{pki.dir / (k_id + ".pem"), pki.dir / (k_id + ".key")};
    if (!std::filesystem::exists(f.cert)) REQUIRE(crypto::issue(pki.ca, {.device_id = k_id}, f, false).ok());
    return f;
  }();
  return files;
}

std::vector<std::byte> frame_of(const net::message& m) { return net::encode_message(m); }

std::vector<std::byte> chunk_frame(std::uint64_t transfer, std::uint64_t offset, std::span<const std::byte> data) {
  std::vector<std::byte> payload(net::chunk_header_bytes + data.size());
  net::encode_chunk_header({transfer, offset}, std::span<std::byte, net::chunk_header_bytes>(payload.data(), net::chunk_header_bytes));
  std::memcpy(payload.data() + net::chunk_header_bytes, data.data(), data.size());
  return net::encode_frame(net::frame_type::chunk, payload);
}

std::vector<std::byte> text_frame(net::frame_type type, const std::string& json) {
  return net::encode_frame(type, std::as_bytes(std::span(json.data(), json.size())));
}

// The raw peer. Hooks run on the io_context's thread and answer with frames to send.
class hostile_peer : public std::enable_shared_from_this<hostile_peer> {
 public:
  struct hooks {
    std::function<void(hostile_peer&)> welcomed, assigned, downloaded;
    std::function<void(hostile_peer&, const net::msg::result&)> result;
  };

  hostile_peer(asio::io_context& io, hooks h)
      : tls_(std::make_shared<asio::ssl::context>(static_cast<SSL_CTX*>(
            test::test_pki::get().agent_tls(hostile_cert(), "127.0.0.1").native_handle_add_ref()))),
        stream_(io, *tls_),
        hooks_(std::move(h)) {}

  // Connects, and sends `hello` as the first frame (the test's choice of id).
  void start(std::uint16_t port, const std::string& hello_id) {
    stream_.lowest_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    stream_.async_handshake(asio::ssl::stream_base::client, [self = shared_from_this(), hello_id](const boost::system::error_code& ec) {
      if (ec) {
        self->closed = true;
        return;
      }
      self->read();
      self->send(frame_of(net::msg::hello{.device_id = hello_id, .version = net::protocol_version, .memory_budget_bytes = 16u << 20,
                                          .examples = 300, .codecs = {net::codec::f32}, .resume = {}}));
    });
  }

  void send(std::vector<std::byte> bytes) {
    out_.push_back(std::move(bytes));
    if (out_.size() == 1) write();
  }

  // An UPDATE for the current assignment with the download sent back unchanged, then its blob.
  [[nodiscard]] net::msg::update honest_update() const {
    const auto hyper = nlohmann::json::parse(assign->hyper_json);
    const auto steps = hyper.at("steps").get<std::uint64_t>();
    return net::msg::update{.round = assign->round, .examples = steps * hyper.at("batch").get<std::uint64_t>(), .steps = steps, .loss = 0.5,
                            .transfer = net::upload_transfer_id(assign->transfer), .size = assign->size,
                            .blob_codec = assign->blob_codec, .sha256 = assign->sha256};
  }
  void echo() {
    send(frame_of(honest_update()));
    send(chunk_frame(net::upload_transfer_id(assign->transfer), 0, download));
  }

  // Closes the socket and drops the hooks (which may hold the peer itself).
  void shut() {
    boost::system::error_code ec;
    stream_.lowest_layer().close(ec);
    hooks_ = {};
  }

  bool welcomed = false;
  bool closed = false;  // the hub ended the connection
  std::optional<net::msg::assign> assign;
  std::vector<std::byte> download;
  std::vector<net::msg::result> results;
  std::optional<net::msg::refuse> refused;
  int assignments = 0;

 private:
  void write() {
    asio::async_write(stream_, asio::buffer(out_.front()), [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
      if (ec) {
        self->out_.clear();
        return;
      }
      self->out_.pop_front();
      if (!self->out_.empty()) self->write();
    });
  }

  void read() {
    stream_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
      if (ec) {
        self->closed = true;
        return;
      }
      self->in_.insert(self->in_.end(), self->buf_.begin(), self->buf_.begin() + static_cast<std::ptrdiff_t>(n));
      self->parse();
      self->read();
    });
  }

  void parse() {
    std::size_t used = 0;
    for (;;) {
      auto f = net::decode_frame(std::span<const std::byte>(in_).subspan(used), net::hard_max_payload);
      if (!f) break;
      const auto& frame = f.value();
      used += frame.frame_bytes;
      if (frame.header.type == net::frame_type::chunk) {
        on_chunk(frame);
        continue;
      }
      auto m = net::parse_message(frame.header.type, frame.payload);
      REQUIRE_MESSAGE(m.ok(), "the hub sent a frame that does not parse: " << (m ? "" : m.error().message));
      on_message(m.value());
    }
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(used));
  }

  void on_message(const net::message& m) {
    if (std::holds_alternative<net::msg::welcome>(m)) {
      welcomed = true;
      if (hooks_.welcomed) hooks_.welcomed(*this);
    } else if (const auto* a = std::get_if<net::msg::assign>(&m)) {
      assign = *a;
      ++assignments;
      download.assign(static_cast<std::size_t>(a->size), std::byte{0});
      received_ = 0;
      if (hooks_.assigned) hooks_.assigned(*this);
    } else if (const auto* p = std::get_if<net::msg::ping>(&m)) {
      send(frame_of(net::msg::pong{.seq = p->seq}));
    } else if (const auto* r = std::get_if<net::msg::result>(&m)) {
      results.push_back(*r);
      if (hooks_.result) hooks_.result(*this, *r);
    } else if (const auto* x = std::get_if<net::msg::refuse>(&m)) {
      if (x->code != net::msg::k_run_finished) refused = *x;  // the run's end is said to every device: no refusal of this one
    }
  }

  void on_chunk(const net::decoded_frame& f) {
    REQUIRE(assign.has_value());
    REQUIRE(f.chunk.transfer == assign->transfer);
    REQUIRE(f.chunk.offset + f.payload.size() <= download.size());
    std::memcpy(download.data() + f.chunk.offset, f.payload.data(), f.payload.size());
    received_ = std::max<std::uint64_t>(received_, f.chunk.offset + f.payload.size());
    send(frame_of(net::msg::ack{.transfer = assign->transfer, .offset = received_}));
    if (received_ == download.size() && hooks_.downloaded) hooks_.downloaded(*this);
  }

  std::shared_ptr<asio::ssl::context> tls_;
  asio::ssl::stream<tcp::socket> stream_;
  hooks hooks_;
  std::vector<std::byte> in_;
  std::array<std::byte, 16384> buf_{};
  std::deque<std::vector<std::byte>> out_;
  std::uint64_t received_ = 0;
};

// What the peer saw, copied out before the io_context its socket belongs to goes.
struct peer_record {
  bool closed = false;
  std::vector<net::msg::result> results;
  std::optional<net::msg::refuse> refused;
  int assignments = 0;
};

struct outcome {
  std::unique_ptr<peer_record> peer;
  std::string hub_log;
};

// The hub, the two agents and one hostile connection, for k_rounds rounds; then the checks every case
// shares: the hub finished, and both agents had every round's update accepted.
outcome run_case(const std::string& tag, hostile_peer::hooks hooks, const std::string& hello_id = k_id) {
  testing::temp_dir dir(tag);
  hub_testing::federation f(dir);
  f.start_hub(f.hub_config({{"rounds", k_rounds}, {"min_devices", 2}, {"max_devices", 3}, {"device_wait_s", 1},
                            {"round_deadline_s", 2}}));
  const auto& pki = test::test_pki::get();
  f.start_agent(pki.dev_a, f.data_for("dev-a", 300));
  f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
  auto peer = std::make_shared<hostile_peer>(f.io(), std::move(hooks));
  peer->start(f.port(), hello_id);
  f.run(60s);
  INFO(f.logs());
  REQUIRE(f.hub().finished());
  CHECK(f.hub().failure().empty());
  REQUIRE(f.recorded().size() == static_cast<std::size_t>(k_rounds));
  for (const auto& m : f.recorded()) CHECK((m.train_loss && std::isfinite(*m.train_loss)));
  // dev-a and dev-b: an update accepted every round.
  const std::string log = f.logs();
  for (int r = 1; r <= k_rounds; ++r) CHECK(testing::count_of(log, "round " + std::to_string(r) + ": update accepted") == 2);
  CHECK(testing::count_of(log, "update rejected") == 0);
  auto record = std::make_unique<peer_record>(peer_record{peer->closed, peer->results, peer->refused, peer->assignments});
  peer->shut();  // its socket and handlers go with the hub's io_context, not after it
  f.io().restart();
  f.io().poll();
  peer.reset();
  return {std::move(record), f.logs()};
}

// The hub refused the peer with a REFUSE naming `what`, and logged it.
void check_refused(const outcome& o, const std::string& what) {
  INFO(o.hub_log);
  REQUIRE(o.peer->refused.has_value());
  CAPTURE(o.peer->refused->reason);
  CHECK(o.peer->refused->reason.find(what) != std::string::npos);
  CHECK(o.peer->closed);
  CHECK(testing::count_of(o.hub_log, what) >= 1);
}

// The hub rejected the peer's first update with a RESULT naming `what`; the honest one after it was
// accepted on the same connection.
void check_rejected_then_accepted(const outcome& o, const std::string& what, const std::string& code) {
  INFO(o.hub_log);
  CHECK_FALSE(o.peer->refused.has_value());
  REQUIRE(o.peer->results.size() >= 2);
  CAPTURE(o.peer->results[0].reason);
  CHECK_FALSE(o.peer->results[0].accepted);
  CHECK(o.peer->results[0].reason.find(what) != std::string::npos);
  CHECK(o.peer->results[0].code == code);
  CHECK(o.peer->results[1].accepted);
}

// After the download: `bad` first; once the hub answers it, the honest update (and every later round's).
hostile_peer::hooks update_then_echo(std::function<void(hostile_peer&)> bad) {
  return {.welcomed = {},
          .assigned = {},
          .downloaded = [bad](hostile_peer& p) {
            if (p.assignments == 1) bad(p);
            else p.echo();
          },
          .result = [](hostile_peer& p, const net::msg::result& r) {
            if (!r.accepted && p.results.size() == 1) p.echo();
          }};
}

// After the download: an honest UPDATE, then `bad` in place of its blob.
hostile_peer::hooks announce_then(std::function<void(hostile_peer&)> bad) {
  return {.welcomed = {}, .assigned = {}, .downloaded = [bad](hostile_peer& p) {
            p.send(frame_of(p.honest_update()));
            bad(p);
          }, .result = {}};
}

}  // namespace

TEST_CASE("hostile peer: a CHUNK at offset 2^64-16 is refused") {
  const std::vector<std::byte> sixteen(16, std::byte{1});
  const auto o = run_case("hostile-chunk-offset", announce_then([&](hostile_peer& p) {
    p.send(chunk_frame(net::upload_transfer_id(p.assign->transfer), std::numeric_limits<std::uint64_t>::max() - 15, sixteen));
  }));
  check_refused(o, "offset");
}

TEST_CASE("hostile peer: a CHUNK leaving a gap is refused") {
  const auto o = run_case("hostile-chunk-gap", announce_then([](hostile_peer& p) {
    p.send(chunk_frame(net::upload_transfer_id(p.assign->transfer), 16, std::span(p.download).subspan(16, 16)));
  }));
  check_refused(o, "leaves a gap");
}

TEST_CASE("hostile peer: a CHUNK for a transfer never announced is refused") {
  const std::vector<std::byte> bytes(64, std::byte{7});
  const auto o = run_case("hostile-chunk-unknown",
                          {.welcomed = [&](hostile_peer& p) { p.send(chunk_frame(987654321, 0, bytes)); }, .assigned = {}, .downloaded = {}, .result = {}});
  check_refused(o, "not announced");
}

TEST_CASE("hostile peer: an ACK beyond the download's size is refused") {
  const auto o = run_case("hostile-ack-beyond", {.welcomed = {},
                                                 .assigned = [](hostile_peer& p) {
                                                   p.send(frame_of(net::msg::ack{.transfer = p.assign->transfer, .offset = p.assign->size + 1}));
                                                 },
                                                 .downloaded = {},
                                                 .result = {}});
  check_refused(o, "beyond");
}

TEST_CASE("hostile peer: an UPDATE for the previous round is rejected, the link kept") {
  const auto o = run_case("hostile-update-round", update_then_echo([](hostile_peer& p) {
    auto u = p.honest_update();
    u.round -= 1;
    p.send(frame_of(u));
  }));
  check_rejected_then_accepted(o, "update for round 0", "rounds.wrong_round");
}

TEST_CASE("hostile peer: an UPDATE for another assignment's transfer is rejected, the link kept") {
  const auto o = run_case("hostile-update-foreign", update_then_echo([](hostile_peer& p) {
    auto u = p.honest_update();
    u.transfer = net::upload_transfer_id(p.assign->transfer + 1);  // the hub's next download: another device's
    p.send(frame_of(u));
  }));
  check_rejected_then_accepted(o, "answers another assignment", "hub.wrong_transfer");
}

TEST_CASE("hostile peer: an UPDATE for transfer 0 is rejected, the link kept") {
  const auto o = run_case("hostile-update-zero", update_then_echo([](hostile_peer& p) {
    auto u = p.honest_update();
    u.transfer = 0;
    p.send(frame_of(u));
  }));
  check_rejected_then_accepted(o, "answers another assignment", "hub.wrong_transfer");
}

TEST_CASE("hostile peer: a HELLO with another device's id is refused, and that device keeps its session") {
  const auto o = run_case("hostile-hello-other", {}, "dev-a");
  check_refused(o, "dev-a");
  CHECK(testing::count_of(o.hub_log, "replaced") == 0);
}

TEST_CASE("hostile peer: a second HELLO, with another device's id, is refused") {
  const auto o = run_case("hostile-hello-again", {.welcomed = [](hostile_peer& p) {
                                                    p.send(frame_of(net::msg::hello{.device_id = "dev-b", .version = net::protocol_version,
                                                                                    .memory_budget_bytes = 16u << 20, .examples = 300,
                                                                                    .codecs = {net::codec::f32}, .resume = {}}));
                                                  },
                                                  .assigned = {}, .downloaded = {}, .result = {}});
  check_refused(o, "HELLO");
  CHECK(testing::count_of(o.hub_log, "replaced") == 0);
}

TEST_CASE("hostile peer: 1 MiB of '[' is refused as invalid JSON") {
  const std::string brackets(net::default_max_payload, '[');
  const auto o = run_case("hostile-brackets",
                          {.welcomed = [&](hostile_peer& p) { p.send(text_frame(net::frame_type::update, brackets)); }, .assigned = {}, .downloaded = {}, .result = {}});
  check_refused(o, "JSON");
}

TEST_CASE("hostile peer: an UPDATE with loss null is rejected with its reason; the link is kept for the next round") {
  auto hooks = update_then_echo([](hostile_peer& p) {
    const auto honest = frame_of(p.honest_update());
    nlohmann::json j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(honest.data()) + net::header_bytes,
                                                         honest.size() - net::header_bytes));
    j["loss"] = nullptr;  // what an encoder writes for a NaN
    p.send(text_frame(net::frame_type::update, j.dump()));
  });
  hooks.result = {};  // a rejected claim ends the assignment: nothing to retry in this round
  const auto o = run_case("hostile-loss-null", hooks);
  INFO(o.hub_log);
  CHECK_FALSE(o.peer->refused.has_value());
  REQUIRE(o.peer->results.size() >= 2);
  CHECK_FALSE(o.peer->results[0].accepted);
  CHECK(o.peer->results[0].reason == "update reports a non-finite loss");
  CHECK(o.peer->results[0].code == "rounds.loss_not_finite");
  CHECK(o.peer->assignments >= 2);
  CHECK(o.peer->results.back().accepted);  // the next round's update, on the same connection
}
