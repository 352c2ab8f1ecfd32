// bench_secagg_graphs — what the neighbour graphs of Bell et al. (CCS 2020) save as the roster grows:
// the protocol alone (crypto/secagg.hpp, real certificates, one thread), n devices summing one segment
// of --values values (a FedAvg model, or IST's shared parameters), a --dropout share of them leaving
// after sharing keys (so the hub recovers their keys and removes their masks). For each n and each
// --neighbors k (0: every device every other's neighbour, Bonawitz et al. 2017):
//   per device: CPU of the shares step (certificates and signatures checked, key agreements, Shamir
//   shares, boxes), of masking and of unmasking; bytes of its roster, its boxes out and in, the
//   unmasking request and its reply (encoded frames);
//   the hub: CPU of its steps (the rosters it sends, routing, the request, the sums);
// and checks that the released sum is the survivors' sum within the quantization bound.
//   bench_secagg_graphs [--devices 100,200,400] [--neighbors 0,16,64] [--values 10000] [--dropout 0.05]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/cpu_time.hpp"
#include "common/fleet_run.hpp"
#include "common/options.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/core/io/file_io.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/crypto/secagg_graph.hpp"
#include "tessera/net/messages.hpp"

namespace {

using namespace tessera;
using bench::add_cpu_time;
using bench::die;
using bench::must;

std::vector<std::size_t> list_of(const std::string& s) {
  std::vector<std::size_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoul(item));
  return out;
}

std::string text_of(const std::filesystem::path& p) {
  const auto b = must(core::read_file_bounded(p, 1u << 16));
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// The threshold the engine sets (rounds/src/engine_secure.cpp): a majority of a secret's holders.
std::size_t threshold_for(std::size_t devices, std::size_t neighbors) {
  const std::size_t holders = neighbors == 0 || devices <= neighbors + 1 ? devices : 2 * ((neighbors + 1) / 2) + 1;
  return std::max<std::size_t>(2, holders / 2 + 1);
}

struct row {
  std::size_t devices = 0, neighbors = 0, threshold = 0, dropped = 0;
  double mean_neighbours = 0;
  double shares_ms = 0, mask_ms = 0, unmask_ms = 0;                               // per device
  double roster_kb = 0, boxes_out_kb = 0, boxes_in_kb = 0, request_kb = 0, reply_kb = 0;  // per device
  double hub_ms = 0, finish_ms = 0;
  double max_error_steps = 0;
};

struct device {
  std::string id, cert;
  crypto::signing_key key;
};

row measure(const std::vector<device>& fleet, const std::string& ca, std::size_t n, std::size_t k, std::size_t values, double dropout) {
  row out{.devices = n, .neighbors = k, .threshold = threshold_for(n, k)};
  crypto::secagg_params p{.round = 0,
                          .bits = 32,
                          .clip = 1.0,
                          .threshold = out.threshold,
                          .segments = {{.length = values, .min_aggregate = 3}},
                          .neighbors = k};
  const auto nonce = must(crypto::random_key());  // a fresh protocol round, as the engine draws
  std::memcpy(&p.round, nonce.data(), sizeof p.round);
  const auto frame = [](const net::message& m) { return static_cast<double>(net::encode_message(m).size()) / 1e3; };
  crypto::secagg_server server(p);
  double hub = 0;
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < n; ++d) {
    clients.push_back(must(crypto::secagg_client::create(fleet[d].id, fleet[d].cert, fleet[d].key, ca, p, {.segments = {0}, .model = {}})));
    must(add_cpu_time(hub, [&] { return server.add_keys(clients.back().keys(), {0}); }));
  }
  // Who leaves after sharing keys: a seeded draw.
  core::rng r(n * 1000 + k);
  std::set<std::size_t> leaving;
  while (leaving.size() < static_cast<std::size_t>(std::floor(dropout * static_cast<double>(n)))) leaving.insert(static_cast<std::size_t>(r.below(n)));
  out.dropped = leaving.size();
  double shares = 0, mask = 0, unmask = 0;
  std::size_t neighbours = 0;
  for (std::size_t d = 0; d < n; ++d) {
    const auto roster = must(add_cpu_time(hub, [&] { return server.roster_for(fleet[d].id); }));
    out.roster_kb += frame(net::msg::secagg_roster{.round = 1, .roster = roster});
    auto boxes = must(add_cpu_time(shares, [&] { return clients[d].share_keys(roster); }));
    neighbours += boxes.size();
    out.boxes_out_kb += frame(net::msg::secagg_shares{.round = 1, .boxes = boxes});
    must(add_cpu_time(hub, [&] { return server.add_boxes(fleet[d].id, std::move(boxes)); }));
  }
  std::vector<double> expected(values, 0.0);
  for (std::size_t d = 0; d < n; ++d) {
    const auto inbox = add_cpu_time(hub, [&] { return server.inbox(fleet[d].id); });
    out.boxes_in_kb += frame(net::msg::secagg_inbox{.round = 1, .boxes = inbox});
    if (leaving.contains(d)) continue;
    std::vector<float> input(values);
    for (std::size_t i = 0; i < values; ++i) {
      input[i] = static_cast<float>(0.2 * (r.uniform_double() - 0.5));
      expected[i] += input[i];
    }
    auto masked = must(add_cpu_time(mask, [&] { return clients[d].mask(inbox, {input}, must(crypto::random_key())); }));
    auto pledge = must(add_cpu_time(mask, [&] { return clients[d].masked_with(fleet[d].key); }));
    out.reply_kb += frame(net::msg::secagg_masked_with{.round = 1, .pledge = pledge});  // counted with the replies
    must(add_cpu_time(hub, [&] { return server.add_masked_with(std::move(pledge)); }));
    must(add_cpu_time(hub, [&] { return server.add_masked(std::move(masked)); }));
  }
  // The consistency check: each survivor checks its neighbours' pledges and signs the set (its CPU
  // counts as unmasking's), then its request goes out with its holders' signatures, which it verifies
  // before it answers. Request bytes: the check's and the unmasking's, per survivor.
  (void)add_cpu_time(hub, [&] { return server.check_request(); });
  double requests_kb = 0;
  for (std::size_t d = 0; d < n; ++d) {
    if (leaving.contains(d)) continue;
    const auto asked = add_cpu_time(hub, [&] { return server.check_request_for(fleet[d].id); });
    requests_kb += frame(net::msg::secagg_check{.round = 1, .request = asked});
    auto sig = must(add_cpu_time(unmask, [&] { return clients[d].check(asked, fleet[d].key); }));
    out.reply_kb += frame(net::msg::secagg_check_reply{.round = 1, .signature = sig});
    must(add_cpu_time(hub, [&] { return server.add_signature(std::move(sig)); }));
  }
  if (server.unmask_request().released.size() != 1) die("n=" + std::to_string(n) + " k=" + std::to_string(k) + ": the segment was not released");
  for (std::size_t d = 0; d < n; ++d) {
    if (leaving.contains(d)) continue;
    const auto request = add_cpu_time(hub, [&] { return server.unmask_request_for(fleet[d].id); });
    requests_kb += frame(net::msg::secagg_unmask{.round = 1, .request = request});
    auto reply = must(add_cpu_time(unmask, [&] { return clients[d].unmask(request); }));
    out.reply_kb += frame(net::msg::secagg_unmask_reply{.round = 1, .reply = reply});
    must(add_cpu_time(hub, [&] { return server.add_reply(std::move(reply)); }));
  }
  double finish = 0;
  const auto sums = must(add_cpu_time(finish, [&] { return server.finish(); }));
  out.finish_ms = 1e3 * finish;
  hub += finish;
  if (!sums[0].released) die("n=" + std::to_string(n) + " k=" + std::to_string(k) + ": " + sums[0].withheld);
  const double step = must(crypto::fixed_point::create(1.0, 32, n)).step();
  for (std::size_t i = 0; i < values; ++i) out.max_error_steps = std::max(out.max_error_steps, std::abs(sums[0].sum[i] - expected[i]) / step);
  const double all = static_cast<double>(n), alive = static_cast<double>(n - leaving.size());
  out.mean_neighbours = static_cast<double>(neighbours) / all;
  out.shares_ms = 1e3 * shares / all;
  out.mask_ms = 1e3 * mask / alive;
  out.unmask_ms = 1e3 * unmask / alive;
  out.roster_kb /= all;
  out.boxes_out_kb /= all;
  out.boxes_in_kb /= all;
  out.reply_kb /= alive;
  out.request_kb = requests_kb / alive;
  out.hub_ms = 1e3 * hub;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> devices{100, 200, 400}, neighbors{0, 16, 64};
  std::size_t values = 10000;
  double dropout = 0.05;
  bench::parse_options(argc, argv, "bench/secagg/graphs.cpp",
                       {{"--devices", [&](const std::string& v) { devices = list_of(v); }},
                        {"--neighbors", [&](const std::string& v) { neighbors = list_of(v); }},
                        {"--values", values},
                        {"--dropout", dropout}});
  const std::size_t most = *std::max_element(devices.begin(), devices.end());
  std::printf("bench_secagg_graphs: one segment of %zu values, %.0f%% of the devices leave after sharing keys\n", values, 100 * dropout);
  const auto work = bench::fleet_dir("tessera-bench-secagg-graphs");
  bench::make_pki(work, most);
  const std::string ca = text_of(work / "pki" / "ca.pem");
  std::vector<device> fleet;
  for (std::size_t d = 0; d < most; ++d) {
    const std::string id = "dev-" + std::to_string(d);
    fleet.push_back({.id = id, .cert = text_of(work / "pki" / (id + ".pem")), .key = must(crypto::signing_key::load(work / "pki" / (id + ".key")))});
  }
  std::printf("\n| devices | neighbors | neighbours (mean) | threshold | dropped | per device: shares, masking, unmasking (ms CPU) | "
              "per device: roster, boxes out, boxes in, request, reply (kB) | hub CPU (ms), of which the sums | error (ring steps) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (std::size_t n : devices)
    for (std::size_t k : neighbors) {
      const row x = measure(fleet, ca, n, k, values, dropout);
      std::printf("| %zu | %s | %.1f | %zu | %zu | %.1f, %.1f, %.2f | %.1f, %.1f, %.1f, %.1f, %.1f | %.0f, %.0f | %.2f |\n", x.devices,
                  k == 0 ? "0 (all)" : std::to_string(k).c_str(), x.mean_neighbours, x.threshold, x.dropped, x.shares_ms, x.mask_ms,
                  x.unmask_ms, x.roster_kb, x.boxes_out_kb, x.boxes_in_kb, x.request_kb, x.reply_kb, x.hub_ms, x.finish_ms, x.max_error_steps);
      std::fflush(stdout);
    }
  std::filesystem::remove_all(work);
  return 0;
}
