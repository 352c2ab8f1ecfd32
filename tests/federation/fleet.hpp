// Helpers for the federation tests: real tessera-hub, tessera-edge, tessera-sim and tessera-pki
// processes on 127.0.0.1, in a temporary folder per test case.
//
// Every child runs under a guard (testing::child_process, tests/support, shared with the benchmarks)
// that SIGKILLs and reaps it when the guard goes, so a failing REQUIRE never leaves processes behind;
// the children also die with the test process (PR_SET_PDEATHSIG). Their standard output and error go
// to files in the folder, which the tests poll: every wait has a deadline and fails with the tail of
// every log (fleet::diagnostics).
//
//   testing::fleet f("resume");
//   INFO(f.diagnostics());                              // printed if a check fails
//   const auto ids = f.make_device_pki(2);              // "device-0", "device-1"
//   auto data = f.make_shards(sim_json);                // each device's "data" object
//   auto hub = f.start_hub("hub", hub_json);            // waits for the port
//   auto agents = f.start_agents(ids, data, hub.port);
//   require_exit_0(hub.process, 60s);
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/test_files.hpp"
#include "support/child_process.hpp"
#include "support/text.hpp"
#include "support/wait.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/io/model_io.hpp"

namespace tessera::testing {

using namespace std::chrono_literals;

// The binaries under test (compile definitions, see tests/federation/CMakeLists.txt).
inline constexpr const char* k_hub_binary = TESSERA_HUB_BINARY;
inline constexpr const char* k_edge_binary = TESSERA_EDGE_BINARY;
inline constexpr const char* k_sim_binary = TESSERA_SIM_BINARY;
inline constexpr const char* k_pki_binary = TESSERA_PKI_BINARY;

// Fashion-MNIST from Debian's dataset-fashion-mnist package (tessera-sim's default data).
inline const std::string k_fashion_dir = "/usr/share/datasets/fashion-mnist/";

struct hub_handle {
  child_process& process;
  std::uint16_t port = 0;
};

// One test case's federation: its folder, certificates, shards and processes.
class fleet {
 public:
  explicit fleet(std::string_view tag) : dir_(tag) {}
  ~fleet() {
    for (auto& c : children_) c->kill();  // before the folder goes
  }
  fleet(const fleet&) = delete;
  fleet& operator=(const fleet&) = delete;

  [[nodiscard]] std::string file(const std::string& name) const { return dir_.file(name); }
  [[nodiscard]] std::string pki_file(const std::string& name) const { return dir_.file("pki/" + name); }

  // The tail of every child's output: what a failed check prints (INFO is evaluated only then).
  [[nodiscard]] std::string diagnostics() const {
    std::string s;
    for (const auto& c : children_) {
      s += "\n--- " + c->name() + " (stderr, last lines) ---\n" + last_lines(c->err(), 25);
      const std::string out = last_lines(c->out(), 8);
      if (!out.empty()) s += "--- " + c->name() + " (stdout, last lines) ---\n" + out;
    }
    return s;
  }

  // Starts a child whose output goes to <name>.out and <name>.err in the folder.
  child_process& spawn(const std::string& name, std::vector<std::string> argv) {
    REQUIRE(!argv.empty());
    auto c = child_process::start(name, std::move(argv), {.out = dir_.path() / (name + ".out"), .err = dir_.path() / (name + ".err"), .on_out_line = {}});
    REQUIRE_MESSAGE(c.ok(), (c ? std::string() : c.error().message));
    children_.push_back(std::move(c).value());
    return *children_.back();
  }

  // Runs a command-line tool to completion; fails the test if it runs over `limit` or exits non-zero.
  std::string run_tool(const std::string& name, std::vector<std::string> argv, std::chrono::milliseconds limit = 60s) {
    child_process& c = spawn(name, std::move(argv));
    const auto code = c.wait_exit(limit);
    if (!code) c.kill();
    REQUIRE_MESSAGE(code.has_value(), name << " did not finish within " << limit.count() << " ms");
    REQUIRE_MESSAGE(*code == 0, name << " exited with " << *code << ":\n" << c.err());
    return c.out();
  }

  // A CA, the hub's certificate for 127.0.0.1 and one certificate per device id, under pki/.
  void make_pki(const std::vector<std::string>& device_ids) {
    const std::string pki = file("pki");
    run_tool("pki-init", {k_pki_binary, "init", "--dir", pki});
    run_tool("pki-hub", {k_pki_binary, "issue-hub", "--dir", pki, "--name", "127.0.0.1"});
    for (const auto& id : device_ids) run_tool("pki-" + id, {k_pki_binary, "issue-device", "--dir", pki, "--id", id});
  }
  // make_pki for `n` devices named as tessera-sim numbers its devices, "device-0" to "device-<n-1>": their ids.
  std::vector<std::string> make_device_pki(int n) {
    std::vector<std::string> ids;
    for (int d = 0; d < n; ++d) ids.push_back("device-" + std::to_string(d));
    make_pki(ids);
    return ids;
  }
  // tessera-pki revoke's standard output.
  std::string revoke(const std::string& device_id, const std::string& run = "") {
    return run_tool("pki-revoke-" + device_id + run, {k_pki_binary, "revoke", "--dir", file("pki"), "--cert", pki_file(device_id + ".pem")});
  }

  // Writes the simulator's shards for `sim` (a tessera-sim configuration) and returns each device's
  // "data" object (data.json), in device order.
  std::vector<nlohmann::json> make_shards(const nlohmann::json& sim) {
    const std::string config = write_json("sim-shards.json", sim);
    run_tool("sim-shards", {k_sim_binary, "shards", "--out", file("shards"), "--config", config}, 120s);
    std::vector<nlohmann::json> data;
    for (std::int64_t d = 0; d < sim.at("devices").get<std::int64_t>(); ++d) {
      const std::string text = read_text(file("shards/device-" + std::to_string(d) + "/data.json"));
      REQUIRE_MESSAGE(!text.empty(), "no data.json for device " << d);
      data.push_back(nlohmann::json::parse(text));
    }
    return data;
  }

  // The first `examples` of Fashion-MNIST's training set (write_subset), dealt out as tessera-sim deals
  // them to `devices` devices with `seed`: each device's "data" object, in device order.
  std::vector<nlohmann::json> make_training_shards(std::int64_t examples, int devices, int seed) {
    return make_shards({{"devices", devices}, {"seed", seed}, {"data", {{"train", write_subset("train", examples)}}}});
  }

  // The first `n` examples of a packaged IDX set (e.g. "train" or "t10k" of Fashion-MNIST) as
  // uncompressed IDX files in the folder: a small data set, so a federation runs in seconds. Returns
  // {"features": path, "labels": path}: a data source's fields.
  nlohmann::json write_subset(const std::string& set, std::int64_t n) {
    auto in = core::open_idx(k_fashion_dir + set + "-images-idx3-ubyte.gz", k_fashion_dir + set + "-labels-idx1-ubyte.gz",
                             {.norm = core::normalization::none, .stats = {}});
    REQUIRE_MESSAGE(in.ok(), (in ? std::string() : in.error().message));
    const std::int64_t features = in.value()->feature_count();
    const auto count = static_cast<std::size_t>(n);
    std::vector<float> x(count * static_cast<std::size_t>(features)), y(count);
    std::size_t got = 0;
    while (got < count) {
      auto r = in.value()->read(std::span<float>(x).subspan(got * static_cast<std::size_t>(features)), std::span<float>(y).subspan(got));
      REQUIRE_MESSAGE(r.ok(), (r ? std::string() : r.error().message));
      REQUIRE_MESSAGE(r.value() > 0, set << " holds fewer than " << n << " examples");
      got += r.value();
    }
    std::vector<std::uint8_t> pixels(x.size()), labels(y.size());
    std::transform(x.begin(), x.end(), pixels.begin(), [](float v) { return static_cast<std::uint8_t>(v); });
    std::transform(y.begin(), y.end(), labels.begin(), [](float v) { return static_cast<std::uint8_t>(v); });
    const std::string images = file(set + "-" + std::to_string(n) + "-images-idx3-ubyte");
    const std::string labels_path = file(set + "-" + std::to_string(n) + "-labels-idx1-ubyte");
    REQUIRE(core::write_idx_images(images, 1, features, pixels).ok());
    REQUIRE(core::write_idx_labels(labels_path, labels).ok());
    return {{"features", images}, {"labels", labels_path}};
  }

  // Runs tessera-sim with `config`, written as <name>.json, to completion (see run_tool).
  void run_sim(const std::string& name, const nlohmann::json& config) {
    run_tool(name, {k_sim_binary, "--config", write_json(name + ".json", config)}, 120s);
  }

  std::string write_json(const std::string& name, const nlohmann::json& j) const {
    const std::string path = file(name);
    std::ofstream out(path);
    out << j.dump(2) << '\n';
    REQUIRE(out.good());
    return path;
  }

  // The TLS part of a hub configuration, for the certificates of make_pki.
  [[nodiscard]] nlohmann::json hub_tls() const {
    return {{"ca", pki_file("ca.pem")}, {"cert", pki_file("hub.pem")}, {"key", pki_file("hub.key")}, {"crl", pki_file("ca.crl")}};
  }

  // Starts tessera-hub with `config` (listen and tls filled in unless given) and waits for the port it
  // prints in its first line.
  hub_handle start_hub(const std::string& name, nlohmann::json config, const std::vector<std::string>& overrides = {}) {
    if (!config.contains("listen")) config["listen"] = "127.0.0.1:0";
    if (!config.contains("tls")) config["tls"] = hub_tls();
    std::vector<std::string> argv{k_hub_binary, "--config", write_json(name + ".json", config)};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    child_process& hub = spawn(name, std::move(argv));
    std::uint16_t port = 0;
    const bool up = eventually(
        [&] {
          const std::string out = hub.out();
          const auto at = out.find(" on 127.0.0.1:");
          if (at == std::string::npos || out.find('\n', at) == std::string::npos) return !hub.running();
          port = static_cast<std::uint16_t>(std::stoul(out.substr(at + 14)));
          return true;
        },
        30s);
    REQUIRE_MESSAGE((up && port != 0), name << " did not start listening:\n" << hub.err());
    return {hub, port};
  }

  // The agent configuration for device `id` (certificates of make_pki) against a hub on `port`. The
  // agents outlive a hub's run (after_run wait): tests restart hubs under the same agents.
  [[nodiscard]] nlohmann::json agent_config(const std::string& id, const nlohmann::json& data, std::uint16_t port) const {
    return {{"hub", "127.0.0.1:" + std::to_string(port)},
            {"after_run", "wait"},
            {"hub_name", "127.0.0.1"},
            {"tls", {{"ca", pki_file("ca.pem")}, {"cert", pki_file(id + ".pem")}, {"key", pki_file(id + ".key")}}},
            {"data", data},
            {"memory_budget_mib", 16},
            {"reconnect", {{"initial_ms", 50}, {"max_ms", 500}, {"jitter", 0.5}}},
            {"heartbeat_s", 1},
            {"idle_timeout_s", 10}};
  }

  child_process& start_agent(const std::string& name, const nlohmann::json& config) {
    return spawn(name, {k_edge_binary, "run", "--config", write_json(name + ".json", config)});
  }
  child_process& start_agent(const std::string& id, const nlohmann::json& data, std::uint16_t port) {
    return start_agent(id, agent_config(id, data, port));
  }
  // One agent per device, device d with data[d]. With `exit_after_rounds` each leaves by itself after
  // that many accepted updates; `suffix` follows the id in each process's name, to tell apart the runs
  // of one folder.
  std::vector<child_process*> start_agents(const std::vector<std::string>& ids, const std::vector<nlohmann::json>& data,
                                           std::uint16_t port, std::optional<int> exit_after_rounds = std::nullopt,
                                           const std::string& suffix = "") {
    REQUIRE(data.size() >= ids.size());
    std::vector<child_process*> agents;
    for (std::size_t d = 0; d < ids.size(); ++d) {
      nlohmann::json config = agent_config(ids[d], data[d], port);
      if (exit_after_rounds) config["exit_after_rounds"] = *exit_after_rounds;
      agents.push_back(&start_agent(ids[d] + suffix, config));
    }
    return agents;
  }

 private:
  temp_dir dir_;
  std::deque<std::unique_ptr<child_process>> children_;  // declared after dir_: killed before it is removed
};

// Waits until `needle` appears `times` times in the child's stderr; false on timeout or if it exited first.
[[nodiscard]] inline bool wait_for_log(child_process& c, std::string_view needle, std::chrono::milliseconds limit,
                                       std::size_t times = 1, const std::function<void()>& pump = {}) {
  bool found = false;
  (void)eventually(
      [&] {
        const bool alive = c.running();
        found = count_of(c.err(), needle) >= times;
        return found || !alive;
      },
      limit, pump);
  return found;
}

// Waits up to `limit` for a child that ends by itself (a hub after its last round, an agent told to
// leave); fails the test unless it exited with 0.
inline void require_exit_0(child_process& c, std::chrono::milliseconds limit) {
  const auto code = c.wait_exit(limit);
  REQUIRE_MESSAGE(code.has_value(), c.name() << " did not finish within " << std::chrono::duration<double>(limit).count() << " s");
  REQUIRE_MESSAGE(*code == 0, c.name() << " exited with " << *code);
}

// An agent started with exit_after_rounds `rounds`, once the hub is done: it leaves within 30 s with
// 0, after `rounds` accepted updates and no refusal.
inline void check_agent_left(child_process& a, int rounds) {
  const auto code = a.wait_exit(30s);
  REQUIRE_MESSAGE(code.has_value(), a.name() << " did not exit after " << rounds << " accepted updates");
  CHECK(*code == 0);
  CHECK(count_of(a.err(), "update accepted") == static_cast<std::size_t>(rounds));
  CHECK(count_of(a.err(), "refusing") == 0);
}

// The hub's metrics file: one JSON object per completed line.
[[nodiscard]] inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  const std::string text = read_text(path);
  std::size_t start = 0;
  for (auto end = text.find('\n'); end != std::string::npos; start = end + 1, end = text.find('\n', start))
    out.push_back(nlohmann::json::parse(text.substr(start, end - start)));
  return out;
}

// The metrics file of a run of `rounds` rounds, which must all be there: one line each.
[[nodiscard]] inline std::vector<nlohmann::json> read_rounds(const std::string& path, int rounds) {
  auto lines = read_metrics(path);
  REQUIRE(lines.size() == static_cast<std::size_t>(rounds));
  return lines;
}

// A short run tessera-sim and tessera-hub both drive (the fields rounds/run_config.hpp shares), for the
// tests that compare the two: 784-64-64-10 on Fashion-MNIST, 20 local steps of batch 32 at lr 0.05.
[[nodiscard]] inline nlohmann::json short_run(const std::string& strategy, int rounds, int seed) {
  return {{"model", {{"inputs", 784}, {"hidden", {64, 64}}, {"outputs", 10}}},
          {"strategy", strategy},
          {"rounds", rounds},
          {"local_steps", 20},
          {"batch", 32},
          {"lr", 0.05},
          {"seed", seed}};
}

// What every round's metrics line must say: numbered in order, the whole fleet assigned, and exactly
// the faults expected. Returns the lines for the caller's own checks.
struct round_faults {
  int stragglers = 0, refused = 0, rejected = 0;
};
inline std::vector<nlohmann::json> check_every_round(const std::string& metrics_path, int rounds, int devices, round_faults faults) {
  const auto metrics = read_rounds(metrics_path, rounds);
  for (int r = 0; r < rounds; ++r) {
    const auto& m = metrics[static_cast<std::size_t>(r)];
    CAPTURE(m.dump());
    CHECK(m.at("round") == r + 1);
    CHECK(m.at("devices") == devices);
    CHECK(m.at("stragglers") == faults.stragglers);
    CHECK(m.at("refused") == faults.refused);
    CHECK(m.at("rejected") == faults.rejected);
  }
  return metrics;
}

// One round of a run, as the hub's metrics line and tessera-sim's for the same run give it.
struct hub_and_sim {
  nlohmann::json hub, sim;
};
// The hub's metrics lines (check_every_round's checks passed, no faults) beside tessera-sim's, round by
// round: both files must hold all `rounds`.
inline std::vector<hub_and_sim> rounds_beside_sim(const std::string& hub_path, const std::string& sim_path, int rounds, int devices) {
  const auto hub = check_every_round(hub_path, rounds, devices, {});
  const auto sim = read_rounds(sim_path, rounds);
  std::vector<hub_and_sim> out;
  for (std::size_t r = 0; r < hub.size(); ++r) out.push_back({hub[r], sim[r]});
  return out;
}

[[nodiscard]] inline core::stored_model load_model_or_fail(const std::string& path) {
  auto m = core::load_model(path);
  REQUIRE_MESSAGE(m.ok(), path << ": " << (m ? std::string() : m.error().message));
  return std::move(m).value();
}

[[nodiscard]] inline bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

}  // namespace tessera::testing
