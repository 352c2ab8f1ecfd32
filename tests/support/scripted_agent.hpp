// A device that speaks the protocol on net::client + net::session but does not train, answering each
// assignment as a script says: tests use it to misbehave on cue, benchmarks to put hundreds of devices
// in one process.
//
// It says HELLO, takes each ASSIGN it can hold (the task decodes, the codec is one it offered, the
// declared size is the subnet's and within its budget; otherwise it REFUSEs), downloads the subnet and
// answers with hooks.answer (default: the subnet back unchanged, announced with the download's digest,
// so nothing is hashed). After each RESULT, hooks.after_result may answer the same assignment again.
// hold_after(r) makes it sit on downloaded assignments of later rounds until the hold is raised. A
// broken link is resumed as tessera-edge resumes it: HELLO lists the assignment held, a download
// continues from the bytes already here, an answer is announced again and its upload continues from
// the hub's ACK.
//
//   idle ──ASSIGN──▶ downloading ──blob──▶ [held] ──answer──▶ answered ──RESULT──┬─▶ idle
//                                                               ▲── after_result ─┘
//
// Everything runs on the io_context's thread: the hooks, and calls to hold_after() and the accessors
// (or make them while the io_context is not running).
//
//   testing::scripted_agent a(io, tls, {.id = "device-0", .client = {.host = "127.0.0.1", .port = port}});
//   a.hooks().answer = [](const testing::assignment& j) { return testing::reply::upload(j, spoiled(*j.subnet)); };
//   a.start();
//   ... io.run_for(...) ...
//   for (const auto& v : a.verdicts()) CHECK(!v.accepted);
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/crypto/tls.hpp"
#include "tessera/net/client.hpp"
#include "tessera/net/task.hpp"

namespace tessera::testing {

struct scripted_agent_config {
  std::string id{};                        // must be the id in its certificate
  net::client_config client{};
  net::session_config session{};
  std::uint64_t budget_bytes = 64u << 20;  // HELLO's memory budget; also the largest subnet it holds
  std::uint64_t examples = 500;            // HELLO's example count
  std::uint64_t validation_examples = 0;   // HELLO's: held out, so the hub asks it to evaluate
  std::vector<net::codec> codecs{net::codec::f32};
};

// One assignment as the agent holds it.
struct assignment {
  net::msg::assign assign{};
  net::training_task task{};
  std::shared_ptr<std::vector<std::byte>> subnet{};  // the download's bytes, whole once downloaded
  std::size_t results = 0;                           // RESULTs received for it so far
};

// What goes back for an assignment: an UPDATE and, unless `blob` is null, the bytes it announces.
struct reply {
  net::msg::update update{};
  std::shared_ptr<const std::vector<std::byte>> blob{};

  // The subnet back as it came, with the download's digest.
  [[nodiscard]] static reply echo(const assignment& a);
  // `bytes` announced honestly (their size and SHA-256).
  [[nodiscard]] static reply upload(const assignment& a, std::vector<std::byte> bytes);
  // An UPDATE with no blob after it.
  [[nodiscard]] static reply update_only(const net::msg::update& u);
};

// An UPDATE for `a` claiming every assigned step and example, a loss of 0.5, and a blob of `size` bytes
// with digest `sha256`.
[[nodiscard]] net::msg::update honest_update(const assignment& a, std::uint64_t size, const net::digest& sha256);

struct scripted_agent_hooks {
  std::function<reply(const assignment&)> answer{};  // empty: reply::echo
  std::function<std::optional<reply>(const assignment&, const net::msg::result&)> after_result{};
  std::function<void(bool first)> on_welcome{};
  std::function<void(const net::msg::assign&)> on_assign{};  // every ASSIGN, before it is checked
  std::function<void(const std::string&)> on_problem{};     // as problems() grows
  std::function<void(const core::error&)> on_link_lost{};    // not called after stop()
  std::function<void(const core::error&)> on_connect_failed{};
  // An evaluating ASSIGN, downloaded: the EVALUATION to send (nullopt: none). Empty: an honest-looking
  // score of validation_examples examples, half of them correct.
  std::function<std::optional<net::msg::evaluation>(const assignment&)> evaluate{};
};

class scripted_agent {
 public:
  struct verdict {
    std::uint64_t round = 0;
    bool accepted = false;
    std::string code{};  // RESULT's code: why, for a program
    std::string reason{};
  };

  scripted_agent(net::asio::io_context& io, const crypto::tls_context& tls, scripted_agent_config config);
  ~scripted_agent();
  scripted_agent(const scripted_agent&) = delete;
  scripted_agent& operator=(const scripted_agent&) = delete;

  // Set before start().
  [[nodiscard]] scripted_agent_hooks& hooks() noexcept { return hooks_; }
  void start();
  void stop();
  // Answers assignments of rounds up to `round`, and one held until now if it is among them.
  void hold_after(std::uint64_t round);
  // Closes the link (the client reconnects); with `forget`, as a restarted device: the assignment in
  // progress is gone, so the next HELLO resumes nothing.
  void drop_link(bool forget);

  [[nodiscard]] const std::string& id() const noexcept { return config_.id; }
  [[nodiscard]] const std::vector<verdict>& verdicts() const noexcept { return verdicts_; }
  [[nodiscard]] int welcomes() const noexcept { return welcomes_; }
  [[nodiscard]] std::size_t assignments() const noexcept { return assignments_; }
  [[nodiscard]] std::size_t refused() const noexcept { return refused_; }            // ASSIGNs it REFUSEd
  [[nodiscard]] std::size_t evaluations() const noexcept { return evaluations_; }    // EVALUATIONs sent
  [[nodiscard]] std::size_t hub_refusals() const noexcept { return hub_refusals_; }  // REFUSEs from the hub
  // Anything the hub did that this device did not expect, one line each.
  [[nodiscard]] const std::vector<std::string>& problems() const noexcept { return problems_; }

 private:
  enum class stage { downloading, held, answered };
  struct job;
  struct outgoing;

  void attach(const std::shared_ptr<net::session>& s);
  void on_ready(net::session& s);
  void on_welcome(net::session& s);
  void on_assign(net::session& s, const net::msg::assign& a);
  void on_downloaded(net::session& s, const std::shared_ptr<net::incoming_transfer>& in);
  void on_result(net::session& s, const net::msg::result& r);
  [[nodiscard]] reply script() const;  // hooks.answer, or the echo
  void answer(net::session& s, const reply& r);
  void resend(net::session& s);
  void problem(std::string what);

  scripted_agent_config config_;
  scripted_agent_hooks hooks_;
  std::shared_ptr<net::client> client_;
  std::weak_ptr<net::session> session_;
  std::shared_ptr<job> job_;  // the assignment in progress; a session holding its transfer keeps it alive
  std::uint64_t hold_after_ = UINT64_MAX;
  std::atomic<bool> stopped_{false};  // stop() may come from another thread
  std::vector<verdict> verdicts_;
  std::vector<std::string> problems_;
  int welcomes_ = 0;
  std::size_t evaluations_ = 0;
  std::size_t assignments_ = 0, refused_ = 0, hub_refusals_ = 0;
};

}  // namespace tessera::testing
