#include "tessera/edge/privacy_budget.hpp"

#include <algorithm>
#include <span>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/io/file_io.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/edge/error.hpp"
#include "tessera/edge/privacy_policy.hpp"

namespace tessera::edge {
namespace {

constexpr std::string_view k_format = "tessera device privacy ledger";

}  // namespace

core::result<core::skellam_mechanism> round_mechanism(const crypto::secagg_params& p, std::size_t least, std::size_t values) {
  auto ring = crypto::fixed_point::create(p.clip, p.bits, crypto::secagg_summands(p, p.threshold));
  if (!ring) return make_error(errc::privacy_policy, "the round's ring (clip, bits, summands) is not one this device can use: " + ring.error().message);
  if (!(p.noise > 0)) return make_error(errc::privacy_policy, "the round asks the devices for no noise");
  const double count = p.fitted_value / p.clip;
  const double rounding = std::sqrt(static_cast<double>(values) + (count > 0 ? 1.0 : 0.0));
  const double l2 = static_cast<double>(ring.value().limit()) * std::sqrt(1.0 + count * count) + rounding;
  return core::skellam_mechanism{.l1 = std::min(rounding, l2) * l2, .l2 = l2, .variance = static_cast<double>(least) * p.noise};
}

core::result<std::unique_ptr<privacy_budget>> privacy_budget::open(std::filesystem::path file, double max_epsilon, double delta) {
  std::unique_ptr<privacy_budget> b(new privacy_budget(std::move(file), max_epsilon, delta));
  std::error_code ec;
  if (!std::filesystem::exists(b->file_, ec)) return b;
  const std::string where = b->file_.string() + " (privacy.ledger)";
  TESSERA_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, core::read_file_bounded(b->file_, 1u << 20));
  const auto j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), nullptr, false);
  if (!j.is_object() || j.value("format", "") != k_format)
    return make_error(errc::privacy_policy, where + " is not this device's privacy ledger: move it away only if its spending is to be forgotten");
  try {
    auto spent = core::rdp_accountant::restore(core::default_rdp_orders(), j.at("rdp").get<std::vector<double>>(), j.at("rounds").get<std::int64_t>());
    if (!spent) return make_error(errc::privacy_policy, where + ": " + spent.error().message);
    b->spent_ = std::move(spent).value();
  } catch (const nlohmann::json::exception& e) {
    return make_error(errc::privacy_policy, where + ": a field is missing or of the wrong type (" + e.what() + ")");
  }
  return b;
}

double privacy_budget::epsilon() const { return spent_.epsilon(delta_).epsilon; }

core::result<void> privacy_budget::check(const core::skellam_mechanism& m, double q) const {
  const double next = spent_.epsilon_after(q, m, 1, delta_).epsilon;
  if (next > max_)
    return make_error(errc::privacy_policy, "this round would take the ε this device has spent against the hub from " + policy_figure(epsilon()) +
                                                " to " + policy_figure(next) + " (δ " + policy_figure(delta_) + ", " + std::to_string(rounds()) +
                                                " rounds so far), past its privacy.max_epsilon " + policy_figure(max_));
  return {};
}

core::result<void> privacy_budget::spend(const core::skellam_mechanism& m, double q) {
  TESSERA_TRY(check(m, q));
  core::rdp_accountant next = spent_;
  next.compose(q, m, 1);
  const nlohmann::json j{{"format", k_format}, {"rdp", std::vector<double>(next.rdp().begin(), next.rdp().end())}, {"rounds", next.steps()},
                         {"epsilon", next.epsilon(delta_).epsilon}, {"delta", delta_}};
  const std::string text = j.dump();
  if (auto written = core::write_file_atomic(file_, std::as_bytes(std::span(text)), 0600, /*replace=*/true); !written)
    return make_error(errc::privacy_policy, file_.string() + " (privacy.ledger): cannot record this round's spending, so its input stays here: " +
                                                written.error().message);
  spent_ = std::move(next);
  return {};
}

}  // namespace tessera::edge
