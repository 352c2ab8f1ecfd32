// The agent within its budget under any hub: a scripted hub (net::server in the test, over mutual TLS
// on 127.0.0.1) sends a real tessera-edge process ten ASSIGNs back to back, each with a subnet whose
// training arena takes three quarters of the agent's budget. A superseded assignment's arena must be
// gone before the next is reserved — whether its download was under way, finished and training, or its
// chunks still queued — so the agent's peak RSS stays within its idle peak plus its memory budget.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "fleet.hpp"
#include "support/test_pki.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/net/server.hpp"
#include "tessera/net/task.hpp"

namespace tessera::testing {
namespace {

namespace asio = boost::asio;

constexpr std::size_t k_budget_mib = 32;
constexpr std::int64_t k_batch = 32;

// The widest 784-h-10 subnet whose arena stays within `bytes`.
core::mlp_arch arch_within(std::size_t bytes) {
  core::model_spec spec;
  spec.inputs = 784;
  spec.outputs = 10;
  spec.hidden = {8};
  core::mlp_arch best = spec.full_arch();
  for (std::int64_t h = 16;; h += 8) {
    spec.hidden = {h};
    const core::mlp_arch a = spec.full_arch();
    if (core::bytes_needed(a, k_batch, /*momentum=*/true, core::codec_kind::f32) > bytes) return best;
    best = a;
  }
}

// Sends ASSIGNs on cue over the one session the agent opens; each one's blob follows at once.
class scripted_hub {
 public:
  scripted_hub(asio::io_context& io, const fleet& f) : io_(io) {
    auto tls = crypto::make_hub_tls(test_pki::in(f.file("pki")).hub_tls_files());
    REQUIRE_MESSAGE(tls.ok(), (tls ? std::string() : tls.error().message));
    server_ = net::server::create(io, tls.value(), net::session_config{});
    server_->on_session([this](const std::shared_ptr<net::session>& s) {
      std::weak_ptr<net::session> weak = s;
      s->on_message([this, weak](const net::message& m) {
        auto self = weak.lock();
        if (!self) return;
        if (std::holds_alternative<net::msg::hello>(m)) {
          self->send(net::msg::welcome{});
          session_ = self;
        } else if (const auto* r = std::get_if<net::msg::refuse>(&m)) {
          refusals_.push_back(r->reason);
        }
      });
    });
    auto port = server_->listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    port_ = port.value();
    arch_ = arch_within(k_budget_mib * 3 / 4 << 20);
    params_.resize(core::param_count(arch_));
    core::rng r(7);
    for (auto& p : params_) p = (r.uniform() - 0.5f) * 0.05f;
    blob_.resize(core::encoded_bytes(arch_, core::codec_kind::f32));
    REQUIRE(core::encode(arch_, core::codec_kind::f32, params_, blob_).ok());
    sha_ = crypto::sha256_of(blob_);
  }
  ~scripted_hub() { server_->stop(); }

  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] bool connected() const { return session_ != nullptr; }
  [[nodiscard]] const core::mlp_arch& arch() const { return arch_; }
  [[nodiscard]] const std::vector<std::string>& refusals() const { return refusals_; }

  // ASSIGN for `round` and its blob; training long enough that only a newer ASSIGN ends it.
  void assign(std::uint64_t round) {
    const std::uint64_t transfer = 1000 + round;
    core::training_task task{.arch = arch_, .steps = 1'000'000, .batch = k_batch, .sgd = {.learning_rate = 0.01f, .momentum = 0.9f},
                             .normalization = nullptr};
    session_->send(net::msg::assign{.round = round, .widths = net::hidden_widths(arch_), .hyper_json = net::task_to_json(task),
                                    .transfer = transfer, .size = blob_.size(), .blob_codec = core::codec_kind::f32, .sha256 = sha_});
    session_->send_blob(std::make_shared<net::outgoing_transfer>(transfer, std::span<const std::byte>(blob_), sha_));
  }

 private:
  asio::io_context& io_;
  std::shared_ptr<net::server> server_;
  std::shared_ptr<net::session> session_;
  std::uint16_t port_ = 0;
  core::mlp_arch arch_;
  std::vector<float> params_;
  std::vector<std::byte> blob_;
  net::digest sha_{};
  std::vector<std::string> refusals_;
};

}  // namespace

TEST_CASE("agent budget: ten ASSIGNs back to back from a scripted hub keep the agent within its idle peak plus its budget") {
  fleet f("assign_storm");
  INFO(f.diagnostics());
  f.make_pki({"device-0"});
  const auto data = f.make_training_shards(600, 1, 5);

  asio::io_context io;
  scripted_hub hub(io, f);
  nlohmann::json config = f.agent_config("device-0", data[0], hub.port());
  config["memory_budget_mib"] = k_budget_mib;
  child_process& agent = f.start_agent("device-0", config);
  const std::function<void()> pump = [&io] {
    io.restart();
    io.run_for(5ms);
  };
  REQUIRE_MESSAGE(eventually([&] { return hub.connected(); }, 30s, pump), "the agent did not say HELLO within 30 s");
  pump();
  const long idle_kib = agent.status_kib("VmHWM");
  REQUIRE(idle_kib > 0);

  const std::size_t arena = core::plan_training_memory(hub.arch(), k_batch, true, core::codec_kind::f32).total;
  // Rounds 1–4 back to back (downloads overtaken), round 5 downloaded and training, 6–9 back to back
  // again (one interrupting training), then round 10 left to download and train.
  for (std::uint64_t r = 1; r <= 5; ++r) hub.assign(r);
  REQUIRE_MESSAGE(wait_for_log(agent, "round 5: subnet of", 30s, 1, pump), "the agent did not take round 5");
  // A few MiB on loopback: downloaded within this second, and training on the worker by its end.
  for (const auto until = std::chrono::steady_clock::now() + 1000ms; std::chrono::steady_clock::now() < until;) pump();
  for (std::uint64_t r = 6; r <= 10; ++r) hub.assign(r);
  REQUIRE_MESSAGE(wait_for_log(agent, "round 10: subnet of", 30s, 1, pump), "the agent did not take round 10");
  // Round 10's download completes and training runs for a while: its arena is the only one.
  for (const auto until = std::chrono::steady_clock::now() + 1500ms; std::chrono::steady_clock::now() < until;) pump();
  const long peak_kib = agent.status_kib("VmHWM");
  const long budget_kib = static_cast<long>(k_budget_mib) * 1024;
  MESSAGE("arena " << arena / 1024 << " KiB of a " << budget_kib << " KiB budget; agent peak " << peak_kib << " KiB, idle peak "
                   << idle_kib << " KiB: growth " << peak_kib - idle_kib << " KiB");
  CHECK(peak_kib <= idle_kib + budget_kib);
  CHECK(agent.running());
  CHECK(hub.refusals().empty());
  const std::string log = agent.err();
  for (int r = 1; r <= 10; ++r) CHECK(count_of(log, "round " + std::to_string(r) + ": subnet of") == 1);  // each one reserved in turn
}

}  // namespace tessera::testing
