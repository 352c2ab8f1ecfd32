#include "tessera/rounds/privacy_ledger.hpp"

#include <algorithm>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/io/file_io.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {
namespace {

constexpr std::string_view k_format = "tessera privacy ledger";
constexpr std::size_t k_max_bytes = 1u << 20;  // a ledger is a few kilobytes

nlohmann::json accountant_json(const core::rdp_accountant& a) {
  return {{"rdp", std::vector<double>(a.rdp().begin(), a.rdp().end())}, {"steps", a.steps()}};
}

core::result<core::rdp_accountant> accountant_of(const nlohmann::json& j) {
  return core::rdp_accountant::restore(core::default_rdp_orders(), j.at("rdp").get<std::vector<double>>(), j.at("steps").get<std::int64_t>());
}

// Each order's RDP the larger of the two, and the larger step count: a bound on both.
core::result<core::rdp_accountant> larger_of(const core::rdp_accountant& a, const core::rdp_accountant& b) {
  std::vector<double> rdp(a.rdp().size());
  for (std::size_t i = 0; i < rdp.size(); ++i) rdp[i] = std::max(a.rdp()[i], b.rdp()[i]);
  return core::rdp_accountant::restore(core::default_rdp_orders(), rdp, std::max(a.steps(), b.steps()));
}

bool holds_more(const core::rdp_accountant& ledger, const core::rdp_accountant& c) {
  for (std::size_t i = 0; i < c.rdp().size(); ++i)
    if (ledger.rdp()[i] > c.rdp()[i]) return true;
  return ledger.steps() > c.steps();
}

}  // namespace

std::filesystem::path ledger_path(const std::filesystem::path& checkpoint_file) { return checkpoint_file.string() + ".ledger"; }

core::result<void> save_ledger(const std::filesystem::path& path, const privacy_ledger& given, const crypto::sealing_key* key) {
  // Merged with what the file holds for the same run, so that the file never loses spending whatever
  // the caller was told at load.
  privacy_ledger l = given;
  TESSERA_ASSIGN_OR_RETURN(const auto held, load_ledger(path, key));
  if (held && held->seed == l.seed && held->strategy == l.strategy) {
    TESSERA_ASSIGN_OR_RETURN(l.users, larger_of(held->users, l.users));
    if (held->hub && l.hub) {
      TESSERA_ASSIGN_OR_RETURN(l.hub, larger_of(*held->hub, *l.hub));
    } else if (held->hub) {
      l.hub = held->hub;
    }
    l.round = std::max(l.round, held->round);
  }
  nlohmann::json j{{"format", k_format}, {"version", 1},          {"seed", l.seed},
                   {"strategy", l.strategy}, {"round", l.round}, {"users", accountant_json(l.users)}};
  if (l.hub) j["hub"] = accountant_json(*l.hub);
  const std::string text = j.dump();
  const auto text_bytes = std::as_bytes(std::span(text));
  std::vector<std::byte> bytes(text_bytes.begin(), text_bytes.end());
  if (key != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(bytes, crypto::seal(*key, bytes));
  }
  return core::write_file_atomic(path, bytes, 0600, /*replace=*/true);
}

core::result<std::optional<privacy_ledger>> load_ledger(const std::filesystem::path& path, const crypto::sealing_key* key) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<privacy_ledger>{};
  const std::string where = path.string();
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, core::read_file_bounded(path, k_max_bytes));
  if (key != nullptr) {
    auto opened = crypto::unseal(*key, bytes);
    if (!opened) return make_error(errc::checkpoint_corrupt, where + ": cannot be opened with the sealing key: " + opened.error().message);
    bytes = std::move(opened).value();
  }
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != k_format)
    return make_error(errc::checkpoint_corrupt, where + " is not a privacy ledger" + (key == nullptr ? " (or it is sealed and no seal_key is given)" : ""));
  try {
    if (j.at("version").get<int>() != 1) return make_error(errc::checkpoint_corrupt, where + ": ledger version " + j.at("version").dump() + " is not known");
    privacy_ledger l{.seed = j.at("seed").get<std::uint64_t>(), .strategy = j.at("strategy").get<std::string>(),
                     .round = j.at("round").get<std::int64_t>(), .users = {}, .hub = std::nullopt};
    auto users = accountant_of(j.at("users"));
    if (!users) return make_error(errc::checkpoint_corrupt, where + ": users: " + users.error().message);
    l.users = std::move(users).value();
    if (const auto hub = j.find("hub"); hub != j.end()) {
      auto against_hub = accountant_of(*hub);
      if (!against_hub) return make_error(errc::checkpoint_corrupt, where + ": hub: " + against_hub.error().message);
      l.hub = std::move(against_hub).value();
    }
    return std::optional<privacy_ledger>(std::move(l));
  } catch (const nlohmann::json::exception& e) {
    return make_error(errc::checkpoint_corrupt, where + ": a field is missing or of the wrong type (" + e.what() + ")");
  }
}

core::result<bool> apply_ledger(checkpoint& c, const privacy_ledger& l, const std::string& where) {
  if (l.seed != c.seed || l.strategy != c.strategy)
    return make_error(errc::checkpoint_mismatch, where + " is the ledger of a run with seed " + std::to_string(l.seed) + " and strategy " +
                                                     l.strategy + "; the checkpoint's has seed " + std::to_string(c.seed) + " and strategy " + c.strategy);
  if (!c.privacy)
    return make_error(errc::checkpoint_mismatch, where + " records privacy spent up to round " + std::to_string(l.round) +
                                                     ", but the checkpoint carries no accountant");
  bool raised = holds_more(l.users, *c.privacy);
  TESSERA_ASSIGN_OR_RETURN(c.privacy, larger_of(l.users, *c.privacy));
  if (l.hub) {
    if (!c.privacy_hub) {
      c.privacy_hub = *l.hub;
      raised = true;
    } else {
      raised = raised || holds_more(*l.hub, *c.privacy_hub);
      TESSERA_ASSIGN_OR_RETURN(c.privacy_hub, larger_of(*l.hub, *c.privacy_hub));
    }
  }
  return raised;
}

}  // namespace tessera::rounds
