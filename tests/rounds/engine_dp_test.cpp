// Tests of the engine's differential privacy (rounds/src/engine_dp.cpp): Poisson sampling, groups that
// do not depend on who else was drawn, clipping on the hub, the noise's deviation, fixed denominators,
// the accountant and the stop before the target ε, rounds nobody was sampled for.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/error.hpp"
#include "tessera/rounds/privacy_ledger.hpp"
#include "tessera/rounds/recorder.hpp"
#include "../core/test_files.hpp"

using namespace tessera;

namespace {

core::result<rounds::run_config> try_config(nlohmann::json dp, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model", {{"inputs", 16}, {"hidden", {32}}, {"outputs", 4}}},
                      {"local_steps", 2}, {"batch", 4}, {"min_width", 4}, {"rounds", 100}, {"dp", std::move(dp)}};
  j.update(extra);
  core::config_reader r(j, "run.json");
  rounds::run_config c;
  TESSERA_TRY(rounds::read_run_fields(r, c, /*allow_central=*/true));
  TESSERA_TRY(r.finish());
  return c;
}
rounds::run_config config(nlohmann::json dp, nlohmann::json extra = nlohmann::json::object()) {
  auto c = try_config(std::move(dp), std::move(extra));
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  return std::move(c).value();
}

rounds::engine engine_for(const rounds::run_config& c, bool seeded = true) {
  std::vector<float> params(core::param_count(c.model.full_arch()));
  core::initialize(c.model, params);
  rounds::engine e(c, std::move(params), 0);
  if (seeded) e.use_seeded_draws();
  return e;
}

std::vector<rounds::device_offer> fleet(std::size_t n) {
  std::vector<rounds::device_offer> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({.id = "d" + std::to_string(i), .budget_bytes = 64u << 20, .examples = 100, .codecs = {core::codec_kind::f32}, .capacity = 0});
  return out;
}

// Every assignment uploads received + change(i) (a function of the parameter's index in its subnet).
void report_all(rounds::engine& e, const std::function<float(std::size_t)>& change, std::uint64_t clipped = 0) {
  for (auto& a : e.assignments()) {
    std::vector<float> local(core::param_count(a.sub.arch));
    core::gather(e.full(), a.sub, e.params(), local);
    for (std::size_t i = 0; i < local.size(); ++i) local[i] += change(i);
    std::vector<std::byte> blob(a.blob_bytes);
    REQUIRE(core::encode(a.sub.arch, a.codec, local, blob).ok());
    REQUIRE(e.sent(a).ok());
    REQUIRE(e.downloaded(a).ok());
    const rounds::update_claim claim{.round = static_cast<std::uint64_t>(e.current_round()), .clipped = clipped,
                                     .examples = static_cast<std::uint64_t>(a.task.steps * a.task.batch),
                                     .steps = static_cast<std::uint64_t>(a.task.steps), .loss = 0.5, .size = a.blob_bytes,
                                     .codec = a.codec};
    REQUIRE(e.announce(a, claim).ok());
    REQUIRE(e.receive(a, blob).ok());
  }
}

// Every assignment uploads received + change(device) on every value, in round 1.
void report_by_device(rounds::engine& e, const std::function<float(const std::string&)>& change) {
  for (auto& a : e.assignments()) {
    std::vector<float> local(core::param_count(a.sub.arch));
    core::gather(e.full(), a.sub, e.params(), local);
    for (auto& v : local) v += change(a.device);
    std::vector<std::byte> blob(a.blob_bytes);
    REQUIRE(core::encode(a.sub.arch, a.codec, local, blob).ok());
    REQUIRE(e.sent(a).ok());
    REQUIRE(e.downloaded(a).ok());
    REQUIRE(e.announce(a, {.round = 1, .clipped = 0, .examples = 8, .steps = 2, .loss = 0.5, .size = a.blob_bytes, .codec = a.codec}).ok());
    REQUIRE(e.receive(a, blob).ok());
  }
}

// Secure aggregation: every assignment's change(i), unweighted, encoded with its share of the noise as
// an agent would (its noise key here from its rounding key), handed over unmasked (the masks cancel).
// `fitted(d)` (adaptive clipping): whether device d's change fitted within the clip (default: yes).
void report_all_secure(rounds::engine& e, const std::function<float(std::size_t)>& change,
                       const std::function<bool(std::size_t)>& fitted = {}, const std::function<bool(std::size_t)>& drawn = {},
                       const std::function<bool(std::size_t)>& reports = {}) {
  const crypto::secagg_params& p = e.secagg_params();
  for (std::size_t d = 0; d < e.assignments().size(); ++d) {
    auto& a = e.assignments()[d];
    if (reports && !reports(d)) {
      e.refuse(a, "no longer on the network");
      continue;
    }
    std::vector<float> received(core::param_count(a.sub.arch));
    core::gather(e.full(), a.sub, e.params(), received);
    std::vector<float> trained = received;
    for (std::size_t i = 0; i < trained.size(); ++i) trained[i] += change(i);
    const auto input = crypto::secagg_change_input(received, trained, p, a.segments, !fitted || fitted(d), !drawn || drawn(d));
    REQUIRE(input.ok());
    const auto noise_key = crypto::derive_key(a.rounding_key, "test noise").value();
    const auto encoded = crypto::secagg_encode(p, e.assignments().size(), a.segments, input.value(), a.rounding_key, &noise_key);
    REQUIRE(encoded.ok());
    REQUIRE(e.sent(a).ok());
    REQUIRE(e.downloaded(a).ok());
    const rounds::update_claim claim{.round = static_cast<std::uint64_t>(e.current_round()), .clipped = 0,
                                     .examples = static_cast<std::uint64_t>(a.task.steps * a.task.batch),
                                     .steps = static_cast<std::uint64_t>(a.task.steps), .loss = 0.5, .size = a.upload_bytes,
                                     .codec = a.codec};
    REQUIRE(e.announce(a, claim).ok());
    REQUIRE(e.receive_encoded(a, encoded.value()).ok());
  }
}

}  // namespace

TEST_CASE("dp config: named errors for what cannot work") {
  CHECK(try_config({{"noise_multiplier", 0}}).error().message.find("dp.noise_multiplier") != std::string::npos);
  CHECK(try_config({{"sample_rate", 1.5}}).error().message.find("dp.sample_rate") != std::string::npos);
  CHECK(try_config({{"clip", 1}}, {{"secure_aggregation", {{"replication", 3}}}}).ok());
  CHECK(try_config({{"clip", 1}, {"adaptive_clip", {{"target_quantile", 0.5}}}}, {{"secure_aggregation", {{"replication", 3}}}}).ok());
  // Under secure aggregation the count rides in the ring as ±(σ_Δ / σ_b)·C/2, which must fit the clip.
  auto tight = engine_for(config({{"clip", 1}, {"noise_multiplier", 1.0}, {"adaptive_clip", {{"count_noise", 0.6}}}},
                                 {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}}}}));
  const auto refused = tight.begin_round(fleet(10));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("needs at least σ_Δ / 2") != std::string::npos);
  const auto c = config({{"sample_rate", 0.1}, {"target_epsilon", 4}});
  CHECK(c.dp.enabled);
  CHECK(c.dp.noise_multiplier == 1.0);
  CHECK(c.dp.delta == 1e-5);
}

TEST_CASE("dp: every device is sampled independently with probability q; the simulator's draw is seeded, the hub's is not") {
  const auto c = config({{"sample_rate", 0.1}}, {{"strategy", "fedavg"}});
  auto e = engine_for(c);
  REQUIRE(e.begin_round(fleet(2000)).ok());
  const std::size_t n = e.assignments().size();
  CHECK(n > 140);  // 200 expected, binomial deviation 13.4: beyond 4 deviations either way fails
  CHECK(n < 260);
  std::set<std::string> first;
  for (const auto& a : e.assignments()) first.insert(a.device);
  auto again = engine_for(c);
  REQUIRE(again.begin_round(fleet(2000)).ok());
  std::set<std::string> second;
  for (const auto& a : again.assignments()) second.insert(a.device);
  CHECK(first == second);
  auto hub = engine_for(c, /*seeded=*/false);
  REQUIRE(hub.begin_round(fleet(2000)).ok());
  std::set<std::string> third;
  for (const auto& a : hub.assignments()) third.insert(a.device);
  CHECK(third != first);
  // The task tells the device to clip, and its budget counts the received copy.
  CHECK(e.assignments()[0].task.clip_norm == 1.0);
}

TEST_CASE("dp: under IST a device's group depends on its own draw, not on who else was offered") {
  const auto c = config({{"sample_rate", 1.0}}, {{"groups", 4}});
  auto all = engine_for(c);
  REQUIRE(all.begin_round(fleet(40)).ok());
  CHECK(all.assignments().size() == 40);
  std::map<std::string, std::size_t> group;
  std::set<std::size_t> used;
  for (const auto& a : all.assignments()) {
    group[a.device] = a.group;
    used.insert(a.group);
  }
  CHECK(used.size() == 4);
  auto fewer = engine_for(c);
  auto offers = fleet(40);
  offers.erase(offers.begin(), offers.begin() + 25);
  REQUIRE(fewer.begin_round(offers).ok());
  for (const auto& a : fewer.assignments()) CHECK(a.group == group[a.device]);
}

TEST_CASE("dp: the hub clips what a device did not, adds noise of deviation σC and divides by the expected contributors") {
  // FedAvg, q = 1, 4 devices of a population of 4: each change has norm 10 (clip 0.5): after clipping
  // the mean change is the clipped change; the noise σC/4 = 0.0025 per coordinate.
  const auto c = config({{"sample_rate", 1.0}, {"clip", 0.5}, {"noise_multiplier", 0.02}}, {{"strategy", "fedavg"}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet(4)).ok());
  const double per = 10.0 / std::sqrt(static_cast<double>(before.size()));
  report_all(e, [&](std::size_t) { return static_cast<float>(per); });
  const auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(m.value().dp.clipped == 4);
  CHECK(m.value().dp.sampled == 4);
  CHECK(m.value().dp.noise == "hub");
  double sq = 0, mean = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const double d = static_cast<double>(e.params()[i]) - before[i];
    sq += d * d;
    mean += d;
  }
  mean /= static_cast<double>(before.size());
  const double expected_step = 0.5 / std::sqrt(static_cast<double>(before.size()));  // the clipped change per coordinate
  CHECK(std::abs(mean - expected_step) < 0.0025 * 5 / std::sqrt(static_cast<double>(before.size())));
  CHECK(std::sqrt(sq) < 0.5 + 0.0025 * std::sqrt(static_cast<double>(before.size())) * 1.1);
  // A device claiming more than one clipped change is rejected.
  REQUIRE(e.begin_round(fleet(4)).ok());
  auto& a = e.assignments()[0];
  REQUIRE(e.sent(a).ok());
  REQUIRE(e.downloaded(a).ok());
  const rounds::update_claim two{.round = static_cast<std::uint64_t>(e.current_round()), .clipped = 2, .examples = 8, .steps = 2,
                                 .loss = 0.5, .size = a.blob_bytes, .codec = a.codec};
  CHECK(e.announce(a, two).error().code == rounds::errc::bad_values);
}

TEST_CASE("dp: the noise's sample deviation is σC over the expected contributors, within 2% over 10^5 draws") {
  // Population 8, q = 1, every device sends back what it received: every coordinate moves by
  // noise / (q·N) only.
  const auto c = config({{"sample_rate", 1.0}, {"clip", 2.0}, {"noise_multiplier", 1.5}, {"population", 8}},
                        {{"strategy", "fedavg"}, {"model", {{"inputs", 400}, {"hidden", {250}}, {"outputs", 10}}}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(before.size() > 100000);
  REQUIRE(e.begin_round(fleet(8)).ok());
  report_all(e, [](std::size_t) { return 0.0f; });
  REQUIRE(e.close_round(nullptr).ok());
  double sum = 0, sq = 0;
  const auto n = static_cast<double>(before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    const double d = static_cast<double>(e.params()[i]) - before[i];
    sum += d;
    sq += d * d;
  }
  const double mean = sum / n, deviation = std::sqrt(sq / n - mean * mean);
  const double expected = 1.5 * 2.0 / 8.0;
  MESSAGE("noise deviation " << deviation << " over " << n << " coordinates, expected " << expected);
  CHECK(std::abs(deviation / expected - 1.0) < 0.02);
  CHECK(std::abs(mean) < 5 * expected / std::sqrt(n));
}

TEST_CASE("dp: the hub's noise is exact: sums in units of C/2^20 plus discrete Gaussian noise, no fractions of a unit") {
  // One device of a population of one sends back what it received: every coordinate moves by the
  // noise alone, a whole number of units (C / 2^20 at σ ≤ 1). A floating-point Gaussian would leave
  // fractions spread over [0, 1).
  const double clip = 1.0, unit = clip / 0x1p20;
  const auto c = config({{"sample_rate", 1.0}, {"clip", clip}, {"noise_multiplier", 0.5}, {"population", 1}}, {{"strategy", "fedavg"}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet(1)).ok());
  report_all(e, [](std::size_t) { return 0.0f; });
  REQUIRE(e.close_round(nullptr).ok());
  double worst = 0, sq = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const double units = (static_cast<double>(e.params()[i]) - before[i]) / unit;
    worst = std::max(worst, std::abs(units - std::round(units)));
    sq += units * units;
  }
  const double n = static_cast<double>(before.size());
  CHECK(worst < 0.1);  // what the float parameters keep of a unit
  // Deviation σ·(κ + √n/2) units: the noise covers one device's quantized change, rounding included.
  CHECK(std::sqrt(sq / n) / (0.5 * (0x1p20 + std::sqrt(n) / 2)) == doctest::Approx(1.0).epsilon(0.05));
}

TEST_CASE("dp: one device more moves the hub's integer sums by its quantized clipped change, within κ + √n/2") {
  // The same seeded round (the same noise) over d0..d9, who send back what they received, and over
  // the same ten and d10, whose change (norm about 27) is clipped to C = 1. The released sums differ by
  // d10's quantized change: norm within rounding of κ = 2^20 units, pointing where d10's change did.
  const auto c = config({{"sample_rate", 1.0}, {"clip", 1.0}, {"noise_multiplier", 0.8}, {"population", 20}}, {{"strategy", "fedavg"}});
  const auto released = [&](std::size_t devices) {
    auto e = engine_for(c);
    REQUIRE(e.begin_round(fleet(devices)).ok());
    report_by_device(e, [](const std::string& device) { return device == "d10" ? 0.1f : 0.0f; });
    REQUIRE(e.close_round(nullptr).ok());
    return std::vector<float>(e.params().begin(), e.params().end());
  };
  const auto ten = released(10), eleven = released(11);
  const double unit = 1.0 / 0x1p20, contributors = 20;
  double sq = 0, along = 0;
  for (std::size_t i = 0; i < ten.size(); ++i) {
    const double units = (static_cast<double>(eleven[i]) - ten[i]) * contributors / unit;
    sq += units * units;
    along += units;  // d10's change is the same on every coordinate: its clipped change is κ/√n each
  }
  const double n = static_cast<double>(ten.size());
  // The float parameters hold a difference to about 0.15 units a coordinate (two roundings of values
  // near 0.1, times 20·2^20): allow √n/2 more on each side of the quantized change's own bound.
  CHECK(std::sqrt(sq) <= 0x1p20 + std::sqrt(n));
  CHECK(std::sqrt(sq) >= 0x1p20 - std::sqrt(n));
  CHECK(along / std::sqrt(n) == doctest::Approx(0x1p20).epsilon(1e-3));
}

TEST_CASE("dp: ε is the accountant's after each round, and the run stops before the round that would pass the target") {
  const double q = 0.2, sigma = 1.1;
  // The hub's noise: the sampled discrete Gaussian mechanism.
  const core::discrete_gaussian_mechanism noise{.sigma = sigma};
  core::rdp_accountant reference;
  reference.compose(q, noise, 3);
  const double after3 = reference.epsilon(1e-5).epsilon;
  reference.compose(q, noise, 1);
  const double after4 = reference.epsilon(1e-5).epsilon;
  REQUIRE(after4 > after3);
  const double target = 0.5 * (after3 + after4);  // room for three rounds, not four
  const auto c = config({{"sample_rate", q}, {"noise_multiplier", sigma}, {"target_epsilon", target}}, {{"strategy", "fedavg"}});
  auto e = engine_for(c);
  for (int r = 1; r <= 3; ++r) {
    CAPTURE(r);
    REQUIRE_FALSE(e.finished());
    REQUIRE(e.begin_round(fleet(50)).ok());
    report_all(e, [](std::size_t i) { return 0.001f * static_cast<float>(i % 3); });
    const auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    core::rdp_accountant expected;
    expected.compose(q, noise, r);
    CHECK(*m.value().dp.epsilon == doctest::Approx(expected.epsilon(1e-5).epsilon).epsilon(1e-12));
  }
  // The figure itself, from tests/core/rdp_reference.py (case dgauss_q0.2_sigma1.1_T3, 50 digits).
  CHECK(e.epsilon() == doctest::Approx(3.9412355046247978).epsilon(1e-6));
  CHECK(e.finished());
  CHECK(e.privacy_stop().find("round 4 would take ε from") == 0);
  CHECK(e.privacy_stop().find("past dp.target_epsilon") != std::string::npos);
  CHECK(e.epsilon() <= target);
  // A target below one round's ε: the first round is refused, naming the figures.
  const auto tight = config({{"sample_rate", q}, {"noise_multiplier", sigma}, {"target_epsilon", 0.01}}, {{"strategy", "fedavg"}});
  auto t = engine_for(tight);
  const auto first = t.begin_round(fleet(50));
  REQUIRE_FALSE(first.ok());
  CHECK(first.error().code == rounds::errc::privacy_budget);
  CHECK(first.error().message.find("round 1 would take ε from 0 to") == 0);
}

TEST_CASE("dp: a round nobody was sampled for still releases its noise and counts") {
  const auto c = config({{"sample_rate", 1e-6}, {"noise_multiplier", 1.0}}, {{"strategy", "fedavg"}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet(3)).ok());
  CHECK(e.assignments().empty());
  CHECK(e.all_reported());
  const auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(m.value().dp.sampled == 0);
  CHECK(*m.value().dp.epsilon > 0);
  std::size_t moved = 0;
  for (std::size_t i = 0; i < before.size(); ++i) moved += e.params()[i] != before[i] ? 1 : 0;
  CHECK(moved == before.size());
}

TEST_CASE("dp: one device more moves adaptive clipping's noised count by ½, fitting or clipped: the sensitivity ε is accounted for") {
  // One seeded round (the same noise) over devices d0..d9, whose changes fit the clip, and over the
  // same ten and d10, whose change fits or is clipped. The released count is read back from where it
  // moved the clip: clip' = clip · exp(−η (count / expected − quantile)).
  const double eta = 0.2, quantile = 0.5, expected = 20;
  const auto c = config({{"sample_rate", 1.0}, {"noise_multiplier", 0.8}, {"clip", 1.0}, {"population", 20},
                         {"adaptive_clip", {{"target_quantile", quantile}, {"learning_rate", eta}, {"count_noise", 2.0}}}},
                        {{"strategy", "fedavg"}});
  const auto released_count = [&](std::size_t devices, float last_change) {
    auto e = engine_for(c);
    REQUIRE(e.begin_round(fleet(devices)).ok());
    // 0.01 per value: norm about 0.27, within the clip of 1.
    report_by_device(e, [&](const std::string& device) { return device == "d10" ? last_change : 0.01f; });
    REQUIRE(e.close_round(nullptr).ok());
    return expected * (quantile - std::log(e.dp_clip() / 1.0) / eta);
  };
  const double ten = released_count(10, 0);
  CHECK(released_count(11, 0.01f) - ten == doctest::Approx(0.5).epsilon(1e-6));   // d10 fits
  CHECK(released_count(11, 0.1f) - ten == doctest::Approx(-0.5).epsilon(1e-6));   // d10's change, norm about 2.7, is clipped
}

TEST_CASE("dp: adaptive clipping moves the clip to the target quantile of the change norms, from a noised count") {
  // 40 devices, all sampled; device i's change has norm 0.1 (i + 1): the median is about 2.05.
  const auto c = config({{"sample_rate", 1.0}, {"noise_multiplier", 0.5}, {"clip", 0.5}, {"population", 40},
                         {"adaptive_clip", {{"target_quantile", 0.5}, {"learning_rate", 0.2}, {"count_noise", 1.0}}}},
                        {{"strategy", "fedavg"}});
  auto e = engine_for(c);
  double clip = 0;
  for (int r = 0; r < 60; ++r) {
    REQUIRE(e.begin_round(fleet(40)).ok());
    CHECK(e.assignments()[0].task.clip_norm == e.dp_clip());
    const std::size_t n = core::param_count(e.assignments()[0].sub.arch);
    for (auto& a : e.assignments()) {
      const double norm = 0.1 * static_cast<double>(std::stoul(a.device.substr(1)) + 1);
      std::vector<float> local(n);
      core::gather(e.full(), a.sub, e.params(), local);
      for (auto& v : local) v += static_cast<float>(norm / std::sqrt(static_cast<double>(n)));
      std::vector<std::byte> blob(a.blob_bytes);
      REQUIRE(core::encode(a.sub.arch, a.codec, local, blob).ok());
      REQUIRE(e.sent(a).ok());
      REQUIRE(e.downloaded(a).ok());
      const rounds::update_claim claim{.round = static_cast<std::uint64_t>(e.current_round()), .clipped = 0, .examples = 8, .steps = 2,
                                       .loss = 0.5, .size = a.blob_bytes, .codec = a.codec};
      REQUIRE(e.announce(a, claim).ok());
      REQUIRE(e.receive(a, blob).ok());
    }
    const auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    clip = *m.value().dp.clip;
  }
  MESSAGE("clip after 60 rounds: " << clip);
  CHECK(clip > 1.5);
  CHECK(clip < 2.7);
  // A count noise too small to leave the changes any budget is refused, with the figures.
  const auto tight = config({{"noise_multiplier", 2.0}, {"adaptive_clip", {{"count_noise", 0.9}}}}, {{"strategy", "fedavg"}});
  auto t = engine_for(tight);
  const auto refused = t.begin_round(fleet(4));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("dp.adaptive_clip.count_noise 0.9 must exceed noise_multiplier / 2 = 1") == 0);
}

TEST_CASE("dp under secure aggregation: the devices' noise, the ring from the population, the Skellam accountant") {
  // FedAvg, q = 1, population 8, threshold 3, 30% expected to drop out: the noise is sized for 5
  // contributors (⌊0.7·8⌋, above the threshold), each device's share a fifth of the variance; with 8
  // contributors the sums carry 8/5 of it. Every device sends back what it received plus 0.01.
  const double clip = 2.0, sigma = 1.5;
  const auto c = config({{"sample_rate", 1.0}, {"clip", clip}, {"noise_multiplier", sigma}, {"population", 8}, {"expected_dropout", 0.3}},
                        {{"strategy", "fedavg"}, {"model", {{"inputs", 400}, {"hidden", {250}}, {"outputs", 10}}},
                         {"secure_aggregation", {{"replication", 3}, {"bits", 40}}}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  const auto n = static_cast<double>(before.size());
  REQUIRE(e.begin_round(fleet(8)).ok());
  REQUIRE(e.assignments().size() == 8);
  REQUIRE(e.secure_round_open());
  // The ring: 2^10 √d steps per clip (the ring has room), each device's share (σS)²/5.
  const auto ring = e.private_ring_for(8).value();
  const crypto::secagg_params& p = e.secagg_params();
  CHECK(p.clip == clip);
  CHECK(p.summands == ring.summands);
  CHECK(ring.limit == doctest::Approx(1024.0 * std::sqrt(n)).epsilon(1e-4));
  CHECK(p.noise_contributors == 5);
  CHECK(p.noise == doctest::Approx(sigma * sigma * ring.limit * ring.limit / 5.0).epsilon(1e-12));
  CHECK(ring.mechanism.l2 == doctest::Approx(ring.limit + std::sqrt(n)).epsilon(1e-12));
  CHECK(ring.mechanism.variance == doctest::Approx(sigma * sigma * ring.limit * ring.limit).epsilon(1e-12));
  report_all_secure(e, [](std::size_t) { return 0.01f; });
  const auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(m.value().dp.noise == "devices");
  CHECK(m.value().secagg.withheld == 0);
  // Each coordinate moved by (8·0.01 + noise) / 8: noise deviation σC √(8/5) / 8.
  double sum = 0, sq = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const double d = static_cast<double>(e.params()[i]) - before[i] - 0.01;
    sum += d;
    sq += d * d;
  }
  const double mean = sum / n, deviation = std::sqrt(sq / n - mean * mean);
  const double expected = sigma * clip * std::sqrt(8.0 / 5.0) / 8.0;
  MESSAGE("noise deviation " << deviation << " over " << n << " coordinates, expected " << expected);
  CHECK(std::abs(deviation / expected - 1.0) < 0.02);
  CHECK(std::abs(mean) < 5 * expected / std::sqrt(n));
  // ε: the sampled Skellam mechanism's, once.
  core::rdp_accountant reference;
  reference.compose(1.0, ring.mechanism, 1);
  CHECK(*m.value().dp.epsilon == doctest::Approx(reference.epsilon(1e-5).epsilon).epsilon(1e-12));
  // Each round draws fresh rounding (and, in the simulator, noise) keys: a FedAvg plan's seed is 0,
  // so the round must go into them, or a device's noise would repeat and add up round after round.
  REQUIRE(e.begin_round(fleet(8)).ok());
  const auto round2 = e.assignments()[0].rounding_key;
  report_all_secure(e, [](std::size_t) { return 0.0f; });
  REQUIRE(e.close_round(nullptr).ok());
  REQUIRE(e.begin_round(fleet(8)).ok());
  CHECK(e.assignments()[0].device == "d0");
  CHECK(e.assignments()[0].rounding_key != round2);
  // Close to the Gaussian's at the same σ: the rounding costs S + √d over S.
  core::rdp_accountant gaussian;
  gaussian.compose(1.0, sigma, 1);
  CHECK(*m.value().dp.epsilon >= gaussian.epsilon(1e-5).epsilon);
  CHECK(*m.value().dp.epsilon < gaussian.epsilon(1e-5).epsilon * 1.01);
}

TEST_CASE("dp under secure aggregation: a sum with fewer survivors than its noise is sized for is withheld, and the round counts") {
  // 8 devices, threshold 3, noise sized for 5: four survivors would carry 4/5 of σ's variance.
  const auto c = config({{"sample_rate", 1.0}, {"noise_multiplier", 1.0}, {"population", 8}, {"expected_dropout", 0.3}},
                        {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}, {"bits", 40}}}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet(8)).ok());
  REQUIRE(e.secagg_params().noise_contributors == 5);
  report_all_secure(e, [](std::size_t) { return 0.01f; }, {}, {}, [](std::size_t d) { return d < 4; });
  const auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(m.value().secagg.withheld == 1u);
  CHECK(e.last_secure().withheld.find("4 contributors, below the 5 the devices' noise is sized for") != std::string::npos);
  CHECK(std::equal(before.begin(), before.end(), e.params().begin()));
  CHECK(m.value().dp.epsilon.has_value());  // the round's noise was drawn: it counts all the same
  // Five survivors carry it: released.
  REQUIRE(e.begin_round(fleet(8)).ok());
  report_all_secure(e, [](std::size_t) { return 0.01f; }, {}, {}, [](std::size_t d) { return d < 5; });
  const auto five = e.close_round(nullptr);
  REQUIRE(five.ok());
  CHECK(five.value().secagg.withheld == 0u);
  // Sized for the threshold alone (expected_dropout 1): each share a third, and any 3 release it.
  auto t = engine_for(config({{"sample_rate", 1.0}, {"noise_multiplier", 1.0}, {"population", 8}, {"expected_dropout", 1.0}},
                             {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}, {"bits", 40}}}}));
  REQUIRE(t.begin_round(fleet(8)).ok());
  CHECK(t.secagg_params().noise_contributors == 3);
  CHECK(t.secagg_params().noise == doctest::Approx(t.private_ring_for(8).value().mechanism.variance / 3.0).epsilon(1e-12));
}

TEST_CASE("dp under secure aggregation: fewer devices sampled than a sum needs train nothing, and the round counts") {
  const auto c = config({{"sample_rate", 1.0}, {"noise_multiplier", 1.0}, {"population", 50}},
                        {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}}}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  const auto left = e.begin_round(fleet(2));
  REQUIRE(left.ok());
  REQUIRE(left.value().size() == 2);
  CHECK(left.value()[0].reason.find("below the 3 a secure sum needs") != std::string::npos);
  CHECK(e.assignments().empty());
  CHECK_FALSE(e.secure_round_open());
  const auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(*m.value().dp.epsilon > 0);
  CHECK(std::equal(before.begin(), before.end(), e.params().begin()));
}

TEST_CASE("dp under secure aggregation: a ring too small for the population is refused by name") {
  const auto c = config({{"sample_rate", 0.01}, {"noise_multiplier", 1.0}, {"population", 100000}},
                        {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}, {"bits", 16}}}});
  auto e = engine_for(c);
  const auto r = e.begin_round(fleet(10));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("secure_aggregation.bits 16") != std::string::npos);
}

TEST_CASE("dp under secure aggregation: adaptive clipping counts the fitting changes in the ring, and ε stays σ's") {
  // 40 devices, all sampled, FedAvg; device i's change has norm 0.1 (i + 1) before its own clip: the
  // median norm is about 2.05. The count rides in the ring with the devices' noise.
  const auto c = config({{"sample_rate", 1.0}, {"noise_multiplier", 0.5}, {"clip", 0.5}, {"population", 40},
                         {"adaptive_clip", {{"target_quantile", 0.5}, {"learning_rate", 0.2}, {"count_noise", 1.0}}}},
                        {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 30}, {"threshold", 30}}}});
  auto e = engine_for(c);
  const auto ring = e.private_ring_for(40).value();
  CHECK(ring.fitted_per_clip > 0);
  CHECK(ring.fitted_per_clip <= 1);
  // ε: the count costs nothing beyond σ (Andrew et al.): the same as without adaptive clipping, but for
  // the count value's rounding.
  const auto plain = engine_for(config({{"sample_rate", 1.0}, {"noise_multiplier", 0.5}, {"clip", 0.5}, {"population", 40}},
                                       {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 30}, {"threshold", 30}}}}));
  const auto plain_ring = plain.private_ring_for(40).value();
  const double adaptive_eps = core::rdp_accountant().epsilon_after(1.0, ring.mechanism, 10, 1e-5).epsilon;
  const double plain_eps = core::rdp_accountant().epsilon_after(1.0, plain_ring.mechanism, 10, 1e-5).epsilon;
  CHECK(adaptive_eps == doctest::Approx(plain_eps).epsilon(1e-3));
  double clip = 0.5;
  for (int r = 0; r < 60; ++r) {
    REQUIRE(e.begin_round(fleet(40)).ok());
    REQUIRE(e.assignments().size() == 40);
    CHECK(e.secagg_params().clip == clip);
    CHECK(e.secagg_params().fitted_value == doctest::Approx(ring.fitted_per_clip * clip));
    // Each device clips its own change to the round's clip and says whether it fitted; the changes
    // are tiny (the model barely moves): what matters is the count.
    report_all_secure(e, [](std::size_t) { return 1e-6f; }, [&](std::size_t d) { return 0.1 * static_cast<double>(d + 1) <= clip; });
    const auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    CHECK(m.value().dp.noise == "devices");
    clip = e.dp_clip();
  }
  MESSAGE("clip after 60 rounds: " << clip);
  CHECK(clip > 1.6);
  CHECK(clip < 2.6);
}

TEST_CASE("dp with a server optimizer: it steps on the noised release, every coordinate a group trains, and ε is unchanged") {
  // The same seeded round twice (the same sample, groups and noise), without and with FedAdam (β1 0.5,
  // β2 0.75, τ 0.1, η 0.05): where the plain run's noised change is Δ, the step is
  // m = 0.5·Δ, v = 0.75·0.01 + 0.25·Δ², x = x0 + 0.05·m / (√v + 0.1). Post-processing of the release:
  // the accountant composes the same mechanism. Weights between the two groups get no release, so no
  // step, and their moments stay m = 0, v = τ² = 0.01.
  const nlohmann::json dp = {{"sample_rate", 1.0}, {"clip", 0.5}, {"noise_multiplier", 0.5}};
  const nlohmann::json shape = {{"groups", 2}, {"model", {{"inputs", 16}, {"hidden", {32, 32}}, {"outputs", 4}}}};
  const auto run = [&](nlohmann::json extra) {
    extra.update(shape);
    auto e = engine_for(config(dp, extra));
    REQUIRE(e.begin_round(fleet(4)).ok());
    report_all(e, [](std::size_t i) { return 0.001f * static_cast<float>(i % 7); });
    const auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    return std::tuple(m.value(), std::vector<float>(e.params().begin(), e.params().end()), e.server_optimizer().state());
  };
  auto initial = engine_for(config(dp, shape));
  const std::vector<float> x0(initial.params().begin(), initial.params().end());
  const auto [plain_m, plain, plain_state] = run(nlohmann::json::object());
  const auto [opt_m, stepped, state] =
      run({{"server_optimizer", {{"kind", "adam"}, {"lr", 0.05}, {"beta1", 0.5}, {"beta2", 0.75}, {"epsilon", 0.1}}}});
  CHECK(plain_state.m.empty());
  REQUIRE(state.m.size() == x0.size());
  REQUIRE(state.v.size() == x0.size());
  CHECK(*opt_m.dp.epsilon == *plain_m.dp.epsilon);
  CHECK(opt_m.dp.sampled == plain_m.dp.sampled);
  std::size_t between = 0, released = 0;
  for (std::size_t i = 0; i < x0.size(); ++i) {
    CAPTURE(i);
    const double delta = static_cast<double>(plain[i]) - x0[i];
    if (delta == 0) {  // no group trains it: no release
      ++between;
      REQUIRE(stepped[i] == x0[i]);
      REQUIRE(state.m[i] == 0.0f);
      REQUIRE(state.v[i] == static_cast<float>(0.1 * 0.1));
      continue;
    }
    ++released;
    const double m = 0.5 * delta, v = 0.75 * 0.01 + 0.25 * delta * delta;
    REQUIRE(state.m[i] == doctest::Approx(m).epsilon(1e-5));
    REQUIRE(state.v[i] == doctest::Approx(v).epsilon(1e-5));
    REQUIRE(std::abs(static_cast<double>(stepped[i]) - x0[i] - 0.05 * m / (std::sqrt(v) + 0.1)) < 1e-6);
  }
  CHECK(between > 0);  // the weights joining group 0's neurons to group 1's
  CHECK(released > between);
}

TEST_CASE("dp with the devices' noise: ε against the model's users and against the hub, which drew the sample") {
  // q = 0.5 of 8 devices: the users' ε is amplified by sampling, the hub's is not (it knows who took part).
  const double delta = 1e-5;
  const auto make = [](nlohmann::json extra) {
    nlohmann::json dp = {{"sample_rate", 0.5}, {"clip", 1.0}, {"noise_multiplier", 1.0}, {"population", 8}};
    if (extra.is_object()) dp.update(extra);
    return config(dp, {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}, {"bits", 40}}}});
  };
  auto e = engine_for(make({}));
  const auto ring = e.private_ring_for(8).value();
  for (int r = 0; r < 3; ++r) {
    REQUIRE(e.begin_round(fleet(8)).ok());
    if (e.secure_round_open()) report_all_secure(e, [](std::size_t) { return 0.01f; });
    const auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    REQUIRE(m.value().dp.epsilon_hub.has_value());
    CHECK(m.value().to_line().find("(hub ") != std::string::npos);
    CHECK(m.value().to_json().contains("epsilon_hub"));
  }
  const double users = core::rdp_accountant().epsilon_after(0.5, ring.mechanism, 3, delta).epsilon;
  const double hub = core::rdp_accountant().epsilon_after(1.0, ring.mechanism, 3, delta).epsilon;
  CHECK(e.epsilon() == doctest::Approx(users).epsilon(1e-12));
  CHECK(*e.epsilon_hub() == doctest::Approx(hub).epsilon(1e-12));
  CHECK(hub > users);
  MESSAGE("3 rounds at q 0.5, σ 1: ε " << users << " against the model's users, " << hub << " against the hub");

  // The checkpoint keeps both, through the file; one without the hub's accountant is refused.
  testing::temp_dir dir("dp-observers");
  REQUIRE(rounds::save_checkpoint(dir.file("c.ckpt"), e.save({}), nullptr).ok());
  auto loaded = rounds::load_checkpoint(dir.file("c.ckpt"), e.config().model, nullptr);
  REQUIRE(loaded.ok());
  REQUIRE(loaded.value().has_value());
  auto resumed = engine_for(make({}));
  REQUIRE(resumed.restore(*loaded.value()).ok());
  CHECK(*resumed.epsilon_hub() == *e.epsilon_hub());
  CHECK(resumed.epsilon() == e.epsilon());
  auto without = e.save({});
  without.privacy_hub.reset();
  auto refused = engine_for(make({}));
  const auto r = refused.restore(without);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == rounds::errc::checkpoint_mismatch);
  CHECK(r.error().message.find("against the hub is unknown") != std::string::npos);

  // target_epsilon bounds the hub's ε unless the operator names the users': a target between the two
  // one-round figures stops the first before round 1 and lets the second run.
  const double hub_one = core::rdp_accountant().epsilon_after(1.0, ring.mechanism, 1, delta).epsilon;
  const double users_one = core::rdp_accountant().epsilon_after(0.5, ring.mechanism, 1, delta).epsilon;
  REQUIRE(users_one < hub_one);
  const double between = (users_one + hub_one) / 2;
  auto strict = engine_for(make({{"target_epsilon", between}}));
  const auto stopped = strict.begin_round(fleet(8));
  REQUIRE_FALSE(stopped.ok());
  CHECK(stopped.error().code == rounds::errc::privacy_budget);
  CHECK(stopped.error().message.find("ε against the hub") != std::string::npos);
  auto lenient = engine_for(make({{"target_epsilon", between}, {"target_observer", "users"}}));
  CHECK(lenient.begin_round(fleet(8)).ok());
}

TEST_CASE("dp with the hub's noise: one ε, the users'; no figure against the hub, which sees the sums") {
  auto e = engine_for(config({{"sample_rate", 1.0}, {"noise_multiplier", 1.0}, {"population", 4}}, {{"strategy", "fedavg"}}));
  REQUIRE(e.begin_round(fleet(4)).ok());
  report_all(e, [](std::size_t) { return 0.01f; });
  const auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(m.value().dp.epsilon.has_value());
  CHECK_FALSE(m.value().dp.epsilon_hub.has_value());
  CHECK_FALSE(e.epsilon_hub().has_value());
  CHECK_FALSE(e.save({}).privacy_hub.has_value());
}

TEST_CASE("dp: the sample is drawn from every device offered; past the cap a random subset takes part, not the first ids") {
  // q = 1 of 10 devices with a cap of 3 (the hub's max_devices): each round 3 take part, the other 7 are
  // named; over rounds every device gets its turn, where a cap by id order would always keep d0..d2.
  auto e = engine_for(config({{"sample_rate", 1.0}, {"noise_multiplier", 1.0}, {"population", 10}}, {{"strategy", "fedavg"}}));
  e.set_round_cap(3);
  std::set<std::string> took_part;
  for (int r = 0; r < 8; ++r) {
    const auto excluded = e.begin_round(fleet(10));
    REQUIRE(excluded.ok());
    CHECK(e.assignments().size() == 3);
    CHECK(excluded.value().size() == 7);
    for (const auto& x : excluded.value()) CHECK(x.reason.find("max_devices") != std::string::npos);
    for (const auto& a : e.assignments()) took_part.insert(a.device);
    report_all(e, [](std::size_t) { return 0.01f; });
    REQUIRE(e.close_round(nullptr).ok());
  }
  CHECK(took_part.size() >= 8);  // 24 draws of 3 from 10: all but a rare one or two appear
  // Each capped round is accounted at twice the sensitivity (σ/2 for the hub's discrete Gaussian): one
  // device more may take another's place.
  CHECK(e.epsilon() == doctest::Approx(core::rdp_accountant().epsilon_after(1.0, core::discrete_gaussian_mechanism{.sigma = 0.5}, 8, 1e-5).epsilon)
                           .epsilon(1e-12));
  // The figure itself, from tests/core/rdp_reference.py (case dgauss_q1_sigma0.5_T8, 50 digits).
  CHECK(e.epsilon() == doctest::Approx(41.75711504232587).epsilon(1e-6));
  // The charge does not depend on whether this round's own sample overflowed: at q 0.1 of the same
  // ten, the cap of 3 rarely binds, yet every round is accounted as if it could (one device more may
  // always be the one that makes it bind).
  // ε after `rounds` rounds of ten devices at q with a cap.
  const auto capped_run = [](double q, std::size_t cap, int rounds) {
    auto run = engine_for(config({{"sample_rate", q}, {"noise_multiplier", 1.0}, {"population", 10}}, {{"strategy", "fedavg"}}));
    run.set_round_cap(cap);
    for (int r = 0; r < rounds; ++r) {
      REQUIRE(run.begin_round(fleet(10)).ok());
      report_all(run, [](std::size_t) { return 0.01f; });
      REQUIRE(run.close_round(nullptr).ok());
    }
    return run.epsilon();
  };
  CHECK(capped_run(0.1, 3, 4) ==
        doctest::Approx(core::rdp_accountant().epsilon_after(0.1, core::discrete_gaussian_mechanism{.sigma = 0.5}, 4, 1e-5).epsilon).epsilon(1e-12));
  // A cap the population cannot pass costs nothing.
  CHECK(capped_run(0.1, 10, 1) ==
        doctest::Approx(core::rdp_accountant().epsilon_after(0.1, core::discrete_gaussian_mechanism{.sigma = 1.0}, 1, 1e-5).epsilon).epsilon(1e-12));
  // Without a cap all ten take part.
  auto all = engine_for(config({{"sample_rate", 1.0}, {"noise_multiplier", 1.0}, {"population", 10}}, {{"strategy", "fedavg"}}));
  REQUIRE(all.begin_round(fleet(10)).ok());
  CHECK(all.assignments().size() == 10);
  report_all(all, [](std::size_t) { return 0.01f; });
  REQUIRE(all.close_round(nullptr).ok());
  CHECK(all.epsilon() == doctest::Approx(core::rdp_accountant().epsilon_after(1.0, core::discrete_gaussian_mechanism{.sigma = 1.0}, 1, 1e-5).epsilon)
                             .epsilon(1e-12));
}

namespace {

// A private FedAvg run of four devices, every one sampled, with a checkpoint file (and its ledger
// beside it) in a folder of its own.
struct ledger_run {
  explicit ledger_run(const char* tag)
      : c(config({{"sample_rate", 1.0}, {"clip", 1.0}, {"noise_multiplier", 1.0}, {"population", 4}}, {{"strategy", "fedavg"}})),
        d(tag),
        ckpt(d.file("hub.ckpt")),
        e(engine_for(c)),
        rec(rounds::recorder::open(c, {.checkpoint = ckpt, .seal_key = std::nullopt}, {}).value()) {}
  // One round, every device reporting a small change.
  void round() {
    REQUIRE(e.begin_round(fleet(4)).ok());
    report_all(e, [](std::size_t) { return 0.001f; });
    REQUIRE(e.close_round(nullptr).ok());
  }
  rounds::run_config c;
  testing::temp_dir d;
  std::string ckpt;
  rounds::engine e;
  rounds::recorder rec;
};

}  // namespace

TEST_CASE("dp: a rollback to an older checkpoint keeps ε: the privacy ledger raises what the old file says") {
  ledger_run run("dp-ledger");
  const auto& c = run.c;
  const std::string& ckpt = run.ckpt;
  auto& e = run.e;
  std::string after_one;
  for (int round = 1; round <= 3; ++round) {
    run.round();
    REQUIRE(run.rec.save_state(e, {}).ok());
    if (round == 1) after_one = testing::read_bytes(ckpt);
  }
  const double spent = e.epsilon();
  // A backup of round 1 put back, with no previous file beside it: the model and round are round 1's,
  // the accounting the three rounds'.
  testing::write_bytes(ckpt, after_one);
  std::filesystem::remove(rounds::previous_checkpoint(ckpt));
  auto loaded = rounds::load_latest_checkpoint(ckpt, c.model, nullptr);
  REQUIRE(loaded.ok());
  REQUIRE(loaded.value().has_value());
  CHECK(loaded.value()->state.round == 1);
  REQUIRE(loaded.value()->ledger_round.has_value());
  CHECK(*loaded.value()->ledger_round == 3);
  auto resumed = engine_for(c);
  REQUIRE(resumed.restore(std::move(loaded.value()->state)).ok());
  CHECK(resumed.epsilon() == doctest::Approx(spent).epsilon(1e-12));
  CHECK(resumed.completed() == 1);
  // Without the ledger the same file would have reported round 1's ε: the check above can fail.
  auto bare = rounds::load_checkpoint(ckpt, c.model, nullptr);
  REQUIRE(bare.ok());
  auto plain = engine_for(c);
  REQUIRE(plain.restore(std::move(*bare.value())).ok());
  CHECK(plain.epsilon() < spent * 0.8);

  // The ledger without a checkpoint is refused, by name: starting afresh would forget the spending.
  std::filesystem::remove(ckpt);
  const auto orphan = rounds::load_latest_checkpoint(ckpt, c.model, nullptr);
  REQUIRE_FALSE(orphan.ok());
  CHECK(orphan.error().code == rounds::errc::checkpoint_mismatch);
  CHECK(testing::contains(orphan.error().message, rounds::ledger_path(ckpt).string()));
  CHECK(testing::contains(orphan.error().message, "up to round 3"));

  // Another run's ledger (another seed) is refused, not merged or passed over.
  testing::write_bytes(ckpt, after_one);
  auto other = *rounds::load_ledger(rounds::ledger_path(ckpt), nullptr).value();
  other.seed += 1;
  REQUIRE(rounds::save_ledger(rounds::ledger_path(ckpt), other, nullptr).ok());
  const auto foreign = rounds::load_latest_checkpoint(ckpt, c.model, nullptr);
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.error().code == rounds::errc::checkpoint_mismatch);
  CHECK(testing::contains(foreign.error().message, "the ledger of a run with seed"));
}

TEST_CASE("dp: a round's spending is in the ledger as soon as it closes, before its checkpoint and anything it sends") {
  // Round 2 closes and its release would go out (the hub's evaluation sends the model); the hub dies
  // before the checkpoint. The restart loads round 1's checkpoint and round 2's ε.
  ledger_run run("dp-ledger-early");
  const auto& c = run.c;
  const std::string& ckpt = run.ckpt;
  auto& e = run.e;
  for (int round = 1; round <= 2; ++round) {
    run.round();
    REQUIRE(run.rec.record_privacy(e).ok());
    if (round == 1) REQUIRE(run.rec.save_state(e, {}).ok());
  }
  auto loaded = rounds::load_latest_checkpoint(ckpt, c.model, nullptr);
  REQUIRE(loaded.ok());
  REQUIRE(loaded.value().has_value());
  CHECK(loaded.value()->state.round == 1);
  CHECK(loaded.value()->ledger_round == std::optional<std::int64_t>(2));
  auto resumed = engine_for(c);
  REQUIRE(resumed.restore(std::move(loaded.value()->state)).ok());
  CHECK(resumed.epsilon() == doctest::Approx(e.epsilon()).epsilon(1e-12));
}

TEST_CASE("dp: what a round publishes is private unless dp.publish_exact names the exact figures") {
  testing::temp_dir d("dp-published");
  for (const bool exact : {false, true}) {
    CAPTURE(exact);
    auto c = config({{"sample_rate", 1.0}, {"clip", 1.0}, {"noise_multiplier", 1.0}, {"population", 4}, {"publish_exact", exact}},
                    {{"strategy", "fedavg"}});
    c.metrics_path = d.file(exact ? "exact.jsonl" : "private.jsonl");
    auto e = engine_for(c);
    auto rec = rounds::recorder::open(c, {}, {});
    REQUIRE(rec.ok());
    std::vector<rounds::round_metrics> seen;
    rec.value().on_round([&](const rounds::round_metrics& m) { seen.push_back(m); });
    REQUIRE(e.begin_round(fleet(4)).ok());
    report_all(e, [](std::size_t) { return 0.001f; });
    auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    // The engine holds them all; the record decides what leaves.
    REQUIRE(m.value().train_loss.has_value());
    REQUIRE(m.value().dp.sampled == 4);
    REQUIRE(rec.value().record(e, m.value(), rounds::recorder::clock::now(), {}).ok());
    const auto line = nlohmann::json::parse(testing::read_bytes(c.metrics_path));
    CHECK(line.at("epsilon").get<double>() == doctest::Approx(e.epsilon()));
    CHECK(line.at("devices") == 4);
    REQUIRE(seen.size() == 1);
    if (exact) {
      CHECK(line.at("dp_sampled") == 4);
      CHECK(line.at("train_loss").is_number());
      CHECK(line.at("examples").get<std::int64_t>() > 0);
      CHECK_FALSE(line.contains("withheld"));
      CHECK(seen[0].train_loss.has_value());
    } else {
      for (const std::string_view name : rounds::withheld_figures()) CHECK_FALSE(line.contains(std::string(name)));
      CHECK(line.at("withheld").size() == rounds::withheld_figures().size());
      CHECK_FALSE(seen[0].train_loss.has_value());
      CHECK_FALSE(seen[0].dp.sampled.has_value());
      CHECK(testing::contains(seen[0].to_line(), "loss    -"));
      CHECK_FALSE(testing::contains(seen[0].to_line(), "sampled"));
    }
  }
}

TEST_CASE("dp with self-sampling devices: every ready device is asked, each draws itself, and ε against the hub is amplified too") {
  const double delta = 1e-5;
  const auto c = config({{"sample_rate", 0.5}, {"clip", 1.0}, {"noise_multiplier", 1.0}, {"population", 8}, {"self_sampling", true},
                         {"publish_exact", true}},
                        {{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}, {"bits", 40}}}});
  auto e = engine_for(c);
  const auto ring = e.private_ring_for(8).value();
  for (int r = 0; r < 3; ++r) {
    REQUIRE(e.begin_round(fleet(8)).ok());
    // The hub draws nobody: all eight take part, and the round's parameters (which every device signs)
    // carry the rate each draws itself at.
    CHECK(e.assignments().size() == 8);
    REQUIRE(e.secure_round_open());
    CHECK(e.secagg_params().sample_rate == 0.5);
    // Half of them drew themselves out and send their noise alone.
    report_all_secure(e, [](std::size_t) { return 0.01f; }, {}, [](std::size_t d) { return d % 2 == 0; });
    const auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    // Nobody knows how many drew themselves in: no sampled count, even where exact figures are published.
    CHECK_FALSE(m.value().dp.sampled.has_value());
    CHECK(m.value().dp.epsilon_hub.has_value());
  }
  const double amplified = core::rdp_accountant().epsilon_after(0.5, ring.mechanism, 3, delta).epsilon;
  CHECK(e.epsilon() == doctest::Approx(amplified).epsilon(1e-12));
  CHECK(*e.epsilon_hub() == doctest::Approx(amplified).epsilon(1e-12));
  CHECK(amplified < core::rdp_accountant().epsilon_after(1.0, ring.mechanism, 3, delta).epsilon);

  // Without secure aggregation the hub would see who uploaded a change: refused by name.
  const auto clear = try_config({{"self_sampling", true}});
  REQUIRE_FALSE(clear.ok());
  CHECK(testing::contains(clear.error().message, "self_sampling needs secure_aggregation"));
}
