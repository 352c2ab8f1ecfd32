#include "tessera/rounds/checkpoint.hpp"

#include <cmath>

#include <cstring>

#include <nlohmann/json.hpp>

#include "tessera/core/base64.hpp"
#include "tessera/core/file_io.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/crypto/digest.hpp"

namespace tessera::rounds {
namespace {

using core::errc;
using core::make_error;

constexpr char k_magic[8] = {'T', 'S', 'C', 'K', 'P', 'T', '\x01', '\0'};
constexpr std::uint64_t k_max_header = 16u << 20;

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

core::result<void> save_checkpoint(const std::filesystem::path& path, const checkpoint& c, const crypto::sealing_key* key) {
  const auto param_bytes = std::as_bytes(std::span(c.params));
  nlohmann::json j;
  j["round"] = c.round;
  j["plan_seed"] = c.plan_seed;
  j["seed"] = c.seed;
  j["strategy"] = c.strategy;
  j["spec"] = nlohmann::json::parse(core::to_json(c.spec));
  j["param_count"] = c.params.size();
  j["params_sha256"] = crypto::to_hex(crypto::sha256_of(param_bytes));
  nlohmann::json reg = nlohmann::json::array();
  for (const auto& d : c.registry)
    reg.push_back({{"id", d.id}, {"budget_bytes", d.budget_bytes}, {"examples", d.examples},
                   {"rounds_done", d.rounds_done}, {"rounds_missed", d.rounds_missed}, {"last_seen", d.last_seen}});
  j["registry"] = std::move(reg);
  j["early_stop"] = {{"have_best", c.stopping.have_best}, {"best_score", c.stopping.best_score},
                     {"evals_since_best", c.stopping.evals_since_best}, {"stopped", c.stopping.stopped}};
  if (!c.normalization.empty()) {
    j["normalization"] = {{"mean", core::encode_floats(c.normalization.mean)}, {"std", core::encode_floats(c.normalization.std)}};
    j["statistics"] = c.statistics;
  }
  if (c.privacy) {
    j["privacy"] = {{"orders", std::vector<double>(c.privacy->orders().begin(), c.privacy->orders().end())},
                    {"rdp", std::vector<double>(c.privacy->rdp().begin(), c.privacy->rdp().end())},
                    {"steps", c.privacy->steps()},
                    {"clip", c.dp_clip}};
  }
  const std::string header = j.dump();
  std::vector<std::byte> bytes;
  bytes.reserve(16 + header.size() + param_bytes.size());
  for (char ch : k_magic) bytes.push_back(static_cast<std::byte>(ch));
  put_u64(bytes, header.size());
  for (char ch : header) bytes.push_back(static_cast<std::byte>(ch));
  bytes.insert(bytes.end(), param_bytes.begin(), param_bytes.end());
  if (key != nullptr) return crypto::seal_file(*key, bytes, path, /*force=*/true);
  return core::write_file_atomic(path, bytes, 0600, /*replace=*/true);
}

core::result<std::optional<checkpoint>> load_checkpoint(const std::filesystem::path& path, const core::model_spec& expected,
                                                        const crypto::sealing_key* key) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<checkpoint>{};
  const std::string where = path.string();
  const std::size_t max_bytes = 16 + k_max_header + core::param_count(expected.full_arch()) * sizeof(float);
  TESSERA_ASSIGN_OR_RETURN(const std::vector<std::byte> b,
                           key != nullptr ? crypto::unseal_file(*key, path) : core::read_file_bounded(path, max_bytes));
  if (b.size() < 16 || std::memcmp(b.data(), k_magic, 8) != 0) {
    const bool sealed = b.size() >= 5 && std::memcmp(b.data(), "TSEAL", 5) == 0;
    return make_error(errc::bad_format, where + ": not a hub checkpoint" +
                                            (sealed && key == nullptr ? " (it is sealed: give the key file, seal_key)" : ""));
  }
  const std::uint64_t n = get_u64(b.data() + 8);
  if (n > k_max_header || n > b.size() - 16) return make_error(errc::truncated, where + ": header length " + std::to_string(n) + " is beyond the file");
  const nlohmann::json j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(b.data() + 16), n), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(errc::bad_format, where + ": the header is not a JSON object");
  checkpoint c;
  try {
    c.round = j.at("round").get<std::int64_t>();
    c.plan_seed = j.at("plan_seed").get<std::uint64_t>();
    c.seed = j.at("seed").get<std::uint64_t>();
    c.strategy = j.at("strategy").get<std::string>();
    TESSERA_ASSIGN_OR_RETURN(c.spec, core::parse_model_spec(j.at("spec").dump(), where + ": spec"));
    const auto count = j.at("param_count").get<std::uint64_t>();
    const std::string sha = j.at("params_sha256").get<std::string>();
    if (core::to_json(c.spec) != core::to_json(expected))
      return make_error(errc::invalid_spec, where + ": holds model " + core::to_json(c.spec) + ", the configuration asks for " +
                                                core::to_json(expected) + " (use another checkpoint_dir to start afresh)");
    if (count != core::param_count(expected.full_arch()) || b.size() - 16 - n != count * sizeof(float))
      return make_error(errc::truncated, where + ": " + std::to_string(b.size() - 16 - n) + " parameter bytes for " +
                                             std::to_string(count) + " parameters");
    c.params.resize(count);
    std::memcpy(c.params.data(), b.data() + 16 + n, count * sizeof(float));
    if (crypto::to_hex(crypto::sha256_of(std::as_bytes(std::span(c.params)))) != sha)
      return make_error(errc::bad_format, where + ": the parameters do not match their SHA-256");
    for (const auto& d : j.at("registry")) {
      c.registry.push_back({.id = d.at("id").get<std::string>(),
                            .budget_bytes = d.at("budget_bytes").get<std::uint64_t>(),
                            .examples = d.at("examples").get<std::uint64_t>(),
                            .rounds_done = d.at("rounds_done").get<std::int64_t>(),
                            .rounds_missed = d.at("rounds_missed").get<std::int64_t>(),
                            .last_seen = d.at("last_seen").get<std::int64_t>()});
    }
    if (const auto es = j.find("early_stop"); es != j.end()) {
      c.stopping = {.have_best = es->at("have_best").get<bool>(),
                    .best_score = es->at("best_score").get<double>(),
                    .evals_since_best = es->at("evals_since_best").get<std::int64_t>(),
                    .stopped = es->at("stopped").get<bool>()};
    }
    if (const auto nz = j.find("normalization"); nz != j.end()) {
      const auto inputs = static_cast<std::size_t>(expected.inputs);
      TESSERA_ASSIGN_OR_RETURN(c.normalization.mean, core::decode_floats(nz->at("mean").get<std::string>(), inputs, where + ": normalization.mean"));
      TESSERA_ASSIGN_OR_RETURN(c.normalization.std, core::decode_floats(nz->at("std").get<std::string>(), inputs, where + ": normalization.std"));
      if (const auto st = j.find("statistics"); st != j.end()) c.statistics = *st;
    }
    if (const auto pv = j.find("privacy"); pv != j.end()) {
      const auto orders = pv->at("orders").get<std::vector<double>>();
      const auto rdp = pv->at("rdp").get<std::vector<double>>();
      auto restored = core::rdp_accountant::restore(orders, rdp, pv->at("steps").get<std::int64_t>());
      if (!restored) return make_error(errc::bad_format, where + ": privacy: " + restored.error().message);
      c.privacy = std::move(restored).value();
      if (const auto clip = pv->find("clip"); clip != pv->end()) {
        c.dp_clip = clip->get<double>();
        if (!std::isfinite(c.dp_clip) || c.dp_clip < 0) return make_error(errc::bad_format, where + ": privacy.clip is not a finite clip");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error(errc::bad_format, where + ": header field missing or of the wrong type (" + e.what() + ")");
  }
  if (c.round < 0) return make_error(errc::bad_format, where + ": negative round");
  return std::optional<checkpoint>(std::move(c));
}

}  // namespace tessera::rounds
