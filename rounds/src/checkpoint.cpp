#include "tessera/rounds/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/core/base/assert.hpp"
#include "tessera/core/base/endian.hpp"
#include "tessera/core/config/base64.hpp"
#include "tessera/core/io/file_io.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/error.hpp"
#include "tessera/rounds/privacy_ledger.hpp"

namespace tessera::rounds {
namespace {

constexpr char k_magic[8] = {'T', 'S', 'C', 'K', 'P', 'T', '\x02', '\0'};  // version 2; byte 6 is the version
constexpr std::size_t k_version_at = 6;
constexpr unsigned k_version_moments = 3;                                    // version 2 and the server optimizer's moments
constexpr std::size_t k_max_moments = 2;                                     // core::moments_of: m, v
constexpr std::string_view k_magic_stem("TSCKPT", 6);                      // every version's first bytes
constexpr std::string_view k_sealed_stem("TSEAL", 5);                      // crypto/seal.hpp's magic
constexpr std::size_t k_prefix = 16;                                       // magic, header length
constexpr std::size_t k_digest = 32;                                       // version 2's trailing SHA-256
static_assert(k_digest == std::tuple_size_v<crypto::sha256_digest>);
constexpr std::uint64_t k_max_header = 16u << 20;

// A file whose bytes are not the ones written: "<file> is <reason>", the line the hub logs when it
// falls back to the previous checkpoint.
core::error corrupt(const std::string& where, const std::string& reason) {
  return make_error(errc::checkpoint_corrupt, where + " is " + reason);
}

core::error truncated(const std::string& where, std::size_t size) {
  return corrupt(where, "truncated (" + std::to_string(size) + " bytes)");
}

core::error header_field_error(const std::string& where, const nlohmann::json::exception& e) {
  return make_error(core::errc::bad_format, where + ": header field missing or of the wrong type (" + e.what() + ")");
}

// The largest file a checkpoint of `spec` can be, sealed or not: the bound on reading one.
std::size_t max_file_bytes(const core::model_spec& spec) {
  return k_prefix + k_max_header + (1 + k_max_moments) * core::param_count(spec.full_arch()) * sizeof(float) + k_digest +
         crypto::sealed_overhead_bytes;
}

// The moment vectors a version-3 header of `n` bytes declares, read leniently from bytes that failed
// their digest: only a guess at the size the file should have (1 when the header does not say).
std::uint64_t declared_moments(const std::vector<std::byte>& b, std::uint64_t n) {
  if (n > k_max_header || n > b.size() - k_prefix) return 1;
  const nlohmann::json h = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(b.data() + k_prefix), n), nullptr, false);
  if (!h.is_object()) return 1;
  const auto so = h.find("server_optimizer");
  if (so == h.end() || !so->is_object()) return 1;
  const auto m = so->find("moments");
  if (m == so->end() || !m->is_number_unsigned()) return 1;
  return std::min<std::uint64_t>(m->get<std::uint64_t>(), k_max_moments);
}

// A checkpoint's bytes, unsealed, once they proved to be the ones written.
struct verified {
  std::vector<std::byte> bytes;
  nlohmann::json header;
  unsigned version = 0;
  std::size_t params_at = 0, params_size = 0;  // where in `bytes` the parameters (and version 3's moments) are

  [[nodiscard]] std::span<const std::byte> params() const { return std::span(bytes).subspan(params_at, params_size); }
};

// Reads `path` and checks its bytes before anything is taken from them. Bytes that are not the ones
// written (cut short, failing the trailing SHA-256 or the GCM tag, no checkpoint magic at all; in
// version 1: a header that is not JSON or parameters failing their SHA-256) are errc::checkpoint_corrupt.
// A file that cannot be read, a sealed file without a key or a plain one with a key, and a version this
// build does not know are other errors: the file is what it was, and something else is wrong.
// `spec`, the configured model, bounds the read and tells a file cut short from one altered.
core::result<verified> read_verified(const std::filesystem::path& path, const crypto::sealing_key* key,
                                     const core::model_spec& spec) {
  const std::string where = path.string();
  verified v;
  TESSERA_ASSIGN_OR_RETURN(v.bytes, core::read_file_bounded(path, max_file_bytes(spec)));
  std::vector<std::byte>& b = v.bytes;
  const auto starts_with = [&b](std::string_view magic) {
    return b.size() >= magic.size() && std::memcmp(b.data(), magic.data(), magic.size()) == 0;
  };
  const bool sealed = starts_with(k_sealed_stem);
  if (sealed && key == nullptr)
    return make_error(core::errc::bad_format, where + ": not a hub checkpoint (it is sealed: give the key file, seal_key)");
  if (!sealed && key != nullptr && starts_with(k_magic_stem))
    return make_error(core::errc::bad_format, where + ": not sealed, but a seal_key is given");
  if (sealed) {
    if (b.size() < crypto::sealed_overhead_bytes) return truncated(where, b.size());
    auto plain = crypto::unseal(*key, b);
    if (!plain && plain.error().code == crypto::errc::auth_failed)
      return corrupt(where, "not authentic (changed, truncated, or sealed with another key)");
    if (!plain) return make_error(core::errc::bad_format, where + ": " + plain.error().message);
    b = std::move(plain).value();
  }
  if (b.size() < k_prefix) return truncated(where, b.size());
  if (!starts_with(k_magic_stem)) return corrupt(where, "not a hub checkpoint (its first bytes are not a checkpoint's)");
  const auto version = static_cast<unsigned>(b[k_version_at]);
  if (version < 1 || version > k_version_moments || b[7] != std::byte{0})
    return make_error(core::errc::unsupported, where + ": checkpoint format version " + std::to_string(version) +
                                                   "; this build reads versions 1, 2 and 3");
  std::uint64_t n = 0;  // the header's length, after the 8 bytes of magic (b holds k_prefix bytes)
  const bool read = core::le_reader(std::span<const std::byte>(b).subspan(8)).u64(n);
  TESSERA_ASSERT(read);
  v.version = version;

  if (version >= 2) {
    if (b.size() < k_prefix + k_digest) return truncated(where, b.size());
    const std::size_t covered = b.size() - k_digest;
    const crypto::sha256_digest digest = crypto::sha256_of(std::span<const std::byte>(b).first(covered));
    if (std::memcmp(digest.data(), b.data() + covered, k_digest) != 0) {
      // Cut short or altered: a guess from the length the header declares and the configured model.
      const std::uint64_t vectors = 1 + (version == k_version_moments ? declared_moments(b, n) : 0);
      const std::uint64_t expected_size = k_prefix + n + vectors * core::param_count(spec.full_arch()) * sizeof(float) + k_digest;
      if (n <= k_max_header && b.size() < expected_size)
        return corrupt(where, "truncated (" + std::to_string(b.size()) + " of " + std::to_string(expected_size) + " bytes)");
      return corrupt(where, "corrupt (its SHA-256 does not match its contents)");
    }
    // From here on the bytes are the ones written: a fault is the writer's, not the disk's.
    if (n > k_max_header || n > covered - k_prefix)
      return make_error(core::errc::bad_format, where + ": header length " + std::to_string(n) + " is beyond the file");
    v.header = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(b.data() + k_prefix), n), nullptr, false);
    if (v.header.is_discarded() || !v.header.is_object())
      return make_error(core::errc::bad_format, where + ": the header is not a JSON object");
    v.params_at = k_prefix + n;
    v.params_size = covered - v.params_at;
    return v;
  }

  // Version 1: no digest of the whole; the header's length and the parameters' SHA-256 are the checks.
  if (n > k_max_header || n > b.size() - k_prefix)
    return corrupt(where, "truncated (its header of " + std::to_string(n) + " bytes goes past its " + std::to_string(b.size()) + " bytes)");
  v.header = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(b.data() + k_prefix), n), nullptr, false);
  if (v.header.is_discarded() || !v.header.is_object()) return corrupt(where, "corrupt (its header is not a JSON object)");
  v.params_at = k_prefix + n;
  v.params_size = b.size() - v.params_at;
  try {
    const auto count = v.header.at("param_count").get<std::uint64_t>();
    const std::string sha = v.header.at("params_sha256").get<std::string>();
    if (v.params_size % sizeof(float) != 0 || v.params_size / sizeof(float) != count)
      return corrupt(where, "truncated (" + std::to_string(v.params_size) + " parameter bytes for " + std::to_string(count) + " parameters)");
    if (crypto::to_hex(crypto::sha256_of(v.params())) != sha) return corrupt(where, "corrupt (the parameters do not match their SHA-256)");
  } catch (const nlohmann::json::exception& e) {
    return header_field_error(where, e);
  }
  return v;
}

// The devices' records and the early-stopping state (nlohmann's exceptions reach parse_state's catch,
// which names the field).
void parse_registry(const nlohmann::json& j, checkpoint& c) {
  for (const auto& d : j.at("registry")) {
    c.registry.push_back({.id = d.at("id").get<std::string>(),
                          .budget_bytes = d.at("budget_bytes").get<std::uint64_t>(),
                          .examples = d.at("examples").get<std::uint64_t>(),
                          .rounds_done = d.at("rounds_done").get<std::int64_t>(),
                          .rounds_missed = d.at("rounds_missed").get<std::int64_t>(),
                          .last_seen = d.at("last_seen").get<std::int64_t>(),
                          .examples_drawn = d.value("examples_drawn", std::uint64_t{0})});
  }
  if (const auto es = j.find("early_stop"); es != j.end()) {
    c.stopping = {.have_best = es->at("have_best").get<bool>(),
                  .best_score = es->at("best_score").get<double>(),
                  .evals_since_best = es->at("evals_since_best").get<std::int64_t>(),
                  .stopped = es->at("stopped").get<bool>()};
  }
}

// The accountants (against the model's users; with the devices' noise, against the hub) and the clip
// adaptive clipping reached.
core::result<void> parse_privacy(const nlohmann::json& pv, const std::string& where, checkpoint& c) {
  const auto orders = pv.at("orders").get<std::vector<double>>();
  const auto rdp = pv.at("rdp").get<std::vector<double>>();
  auto restored = core::rdp_accountant::restore(orders, rdp, pv.at("steps").get<std::int64_t>());
  if (!restored) return make_error(core::errc::bad_format, where + ": privacy: " + restored.error().message);
  c.privacy = std::move(restored).value();
  if (const auto hub = pv.find("rdp_hub"); hub != pv.end()) {
    auto against_hub = core::rdp_accountant::restore(orders, hub->get<std::vector<double>>(), pv.at("steps_hub").get<std::int64_t>());
    if (!against_hub) return make_error(core::errc::bad_format, where + ": privacy.rdp_hub: " + against_hub.error().message);
    c.privacy_hub = std::move(against_hub).value();
  }
  if (const auto clip = pv.find("clip"); clip != pv.end()) {
    c.dp_clip = clip->get<double>();
    if (!std::isfinite(c.dp_clip) || c.dp_clip < 0) return make_error(core::errc::bad_format, where + ": privacy.clip is not a finite clip");
  }
  return {};
}

// The run's state from a checked file's header and parameters.
core::result<checkpoint> parse_state(const verified& v, const std::string& where, const core::model_spec& expected) {
  const nlohmann::json& j = v.header;
  checkpoint c;
  try {
    c.round = j.at("round").get<std::int64_t>();
    c.plan_seed = j.at("plan_seed").get<std::uint64_t>();
    c.seed = j.at("seed").get<std::uint64_t>();
    c.strategy = j.at("strategy").get<std::string>();
    TESSERA_ASSIGN_OR_RETURN(c.spec, core::parse_model_spec(j.at("spec").dump(), where + ": spec"));
    const auto count = j.at("param_count").get<std::uint64_t>();
    if (core::to_json(c.spec) != core::to_json(expected))
      return make_error(core::errc::invalid_spec, where + ": holds model " + core::to_json(c.spec) + ", the configuration asks for " +
                                                      core::to_json(expected) + " (use another checkpoint_dir to start afresh)");
    // Version 3: the server optimizer's moments follow the parameters, as many as its kind keeps.
    std::uint64_t moments = 0;
    if (v.version == k_version_moments) {
      const nlohmann::json& so = j.at("server_optimizer");
      const auto name = so.at("kind").get<std::string>();
      const auto kind = core::k_server_optimizer_names.find(name);
      if (!kind)
        return make_error(core::errc::bad_format, where + ": server_optimizer.kind '" + name + "' is not one of " +
                                                      core::k_server_optimizer_names.list());
      moments = so.at("moments").get<std::uint64_t>();
      if (moments == 0 || moments != core::moments_of(*kind))
        return make_error(core::errc::bad_format, where + ": server_optimizer: " + std::to_string(moments) + " moment vectors for kind " + name +
                                                      ", which keeps " + std::to_string(core::moments_of(*kind)));
      c.server_optimizer = core::server_optimizer_state{.kind = *kind, .steps = so.at("steps").get<std::int64_t>(), .m = {}, .v = {}};
      if (c.server_optimizer->steps < 0) return make_error(core::errc::bad_format, where + ": server_optimizer: negative steps");
    }
    if (count != core::param_count(expected.full_arch()) || v.params_size != (1 + moments) * count * sizeof(float))
      return make_error(core::errc::bad_format, where + ": " + std::to_string(v.params_size) + " bytes after the header for " +
                                                    std::to_string(count) + " parameters" +
                                                    (moments > 0 ? " and " + std::to_string(moments) + " moment vectors" : std::string()));
    const std::size_t vector_bytes = count * sizeof(float);
    const std::byte* body = v.bytes.data() + v.params_at;
    c.params.resize(count);
    std::memcpy(c.params.data(), body, vector_bytes);
    if (moments >= 1) {
      c.server_optimizer->m.resize(count);
      std::memcpy(c.server_optimizer->m.data(), body + vector_bytes, vector_bytes);
    }
    if (moments >= 2) {
      c.server_optimizer->v.resize(count);
      std::memcpy(c.server_optimizer->v.data(), body + 2 * vector_bytes, vector_bytes);
    }
    parse_registry(j, c);
    if (const auto nz = j.find("normalization"); nz != j.end()) {
      const auto inputs = static_cast<std::size_t>(expected.inputs);
      TESSERA_ASSIGN_OR_RETURN(c.normalization.mean, core::decode_floats(nz->at("mean").get<std::string>(), inputs, where + ": normalization.mean"));
      TESSERA_ASSIGN_OR_RETURN(c.normalization.std, core::decode_floats(nz->at("std").get<std::string>(), inputs, where + ": normalization.std"));
      if (const auto st = j.find("statistics"); st != j.end()) c.statistics = *st;
    }
    if (const auto pv = j.find("privacy"); pv != j.end()) TESSERA_TRY(parse_privacy(*pv, where, c));
  } catch (const nlohmann::json::exception& e) {
    return header_field_error(where, e);
  }
  if (c.round < 0) return make_error(core::errc::bad_format, where + ": negative round");
  return c;
}

}  // namespace

std::filesystem::path previous_checkpoint(const std::filesystem::path& path) { return path.string() + ".prev"; }

core::result<void> save_checkpoint(const std::filesystem::path& path, const checkpoint& c, const crypto::sealing_key* key,
                                   current_checkpoint current) {
  const auto param_bytes = std::as_bytes(std::span(c.params));
  nlohmann::json j;
  j["round"] = c.round;
  j["plan_seed"] = c.plan_seed;
  j["seed"] = c.seed;
  j["strategy"] = c.strategy;
  j["spec"] = nlohmann::json::parse(core::to_json(c.spec));
  j["param_count"] = c.params.size();
  nlohmann::json reg = nlohmann::json::array();
  for (const auto& d : c.registry) {
    reg.push_back({{"id", d.id}, {"budget_bytes", d.budget_bytes}, {"examples", d.examples},
                   {"rounds_done", d.rounds_done}, {"rounds_missed", d.rounds_missed}, {"last_seen", d.last_seen}});
    if (d.examples_drawn > 0) reg.back()["examples_drawn"] = d.examples_drawn;  // tessera-sim's only: the hub's files stay as they were
  }
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
    if (c.privacy_hub) {
      j["privacy"]["rdp_hub"] = std::vector<double>(c.privacy_hub->rdp().begin(), c.privacy_hub->rdp().end());
      j["privacy"]["steps_hub"] = c.privacy_hub->steps();
    }
  }
  // A server optimizer with moments makes the file version 3; without, it is version 2 as it always was.
  const std::size_t moments = c.server_optimizer ? core::moments_of(c.server_optimizer->kind) : 0;
  if (moments > 0) {
    const core::server_optimizer_state& so = *c.server_optimizer;
    TESSERA_ASSERT(so.m.size() == c.params.size() && so.v.size() == (moments >= 2 ? c.params.size() : 0));
    j["server_optimizer"] = {{"kind", std::string(core::to_string(so.kind))}, {"steps", so.steps}, {"moments", moments}};
  }
  const std::string header = j.dump();
  std::vector<std::byte> bytes;
  bytes.reserve(k_prefix + header.size() + (1 + moments) * param_bytes.size() + k_digest);
  for (char ch : k_magic) bytes.push_back(static_cast<std::byte>(ch));
  if (moments > 0) bytes[k_version_at] = static_cast<std::byte>(k_version_moments);
  core::le_writer(bytes).u64(header.size());
  for (char ch : header) bytes.push_back(static_cast<std::byte>(ch));
  bytes.insert(bytes.end(), param_bytes.begin(), param_bytes.end());
  if (moments >= 1) {
    const auto m = std::as_bytes(std::span(c.server_optimizer->m));
    bytes.insert(bytes.end(), m.begin(), m.end());
  }
  if (moments >= 2) {
    const auto v = std::as_bytes(std::span(c.server_optimizer->v));
    bytes.insert(bytes.end(), v.begin(), v.end());
  }
  const crypto::sha256_digest digest = crypto::sha256_of(bytes);
  for (std::uint8_t x : digest) bytes.push_back(static_cast<std::byte>(x));
  if (key != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(bytes, crypto::seal(*key, bytes));
  }
  // The current file becomes the previous one only if it passes its checks. After a fallback it is the
  // bad one: renamed over the good previous one, a crash before the new file took its name would leave
  // nothing to resume from. A bad current file is replaced instead, and the previous one stays. The
  // check costs a read and a SHA-256 (or GCM) pass over a file the size of the one being written: only
  // a file this process did not write itself is read.
  std::error_code ec;
  if (current == current_checkpoint::written_here ||
      (std::filesystem::exists(path, ec) && read_verified(path, key, c.spec).ok()))
    return core::write_file_keeping_previous(path, bytes, 0600, previous_checkpoint(path));
  return core::write_file_atomic(path, bytes, 0600, /*replace=*/true);
}

core::result<std::optional<checkpoint>> load_checkpoint(const std::filesystem::path& path, const core::model_spec& expected,
                                                        const crypto::sealing_key* key) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<checkpoint>{};
  TESSERA_ASSIGN_OR_RETURN(const verified v, read_verified(path, key, expected));
  TESSERA_ASSIGN_OR_RETURN(checkpoint c, parse_state(v, path.string(), expected));
  return std::optional<checkpoint>(std::move(c));
}

namespace {

core::result<std::optional<loaded_checkpoint>> load_newest_file(const std::filesystem::path& path, const core::model_spec& expected,
                                                                 const crypto::sealing_key* key) {
  auto latest = load_checkpoint(path, expected, key);
  if (latest && latest.value())
    return std::optional<loaded_checkpoint>(
        loaded_checkpoint{.state = std::move(*latest.value()), .file = path, .fell_back_from = std::nullopt, .ledger_round = std::nullopt});
  // Only a file that is not what was written, or is missing, is passed over: another model, a file that
  // cannot be read or one of an unknown version is the configuration's or the operator's to settle.
  if (!latest && latest.error().code != errc::checkpoint_corrupt) return std::move(latest).error();
  const std::filesystem::path previous = previous_checkpoint(path);
  std::error_code ec;
  const bool have_previous = std::filesystem::exists(previous, ec);
  if (latest && !have_previous) return std::optional<loaded_checkpoint>{};  // neither: a fresh start
  core::error why = latest ? make_error(core::errc::io, path.string() + " is missing") : std::move(latest).error();
  // With a key, a wrong key and a changed file look the same to GCM: when nothing loads, say so.
  const std::string key_hint = key != nullptr ? "; the sealing key (seal_key) may be the wrong one" : "";
  if (!have_previous)
    return make_error(errc::checkpoint_corrupt, why.message + ", and there is no previous checkpoint (" + previous.string() + ")" + key_hint);
  auto prev = load_checkpoint(previous, expected, key);
  if (prev && prev.value())
    return std::optional<loaded_checkpoint>(
        loaded_checkpoint{.state = std::move(*prev.value()),
                          .file = previous,
                          .fell_back_from = checkpoint_fallback{.file = path, .reason = std::move(why)},
                          .ledger_round = std::nullopt});
  const core::error prev_error = prev ? make_error(core::errc::io, previous.string() + " is missing") : std::move(prev).error();
  const bool both_corrupt = prev_error.code == errc::checkpoint_corrupt;
  return core::error{both_corrupt ? make_error_code(errc::checkpoint_corrupt) : prev_error.code,
                     "no checkpoint to resume from: " + why.message + "; " + prev_error.message + (both_corrupt ? key_hint : "")};
}

}  // namespace

core::result<std::optional<loaded_checkpoint>> load_latest_checkpoint(const std::filesystem::path& path,
                                                                      const core::model_spec& expected,
                                                                      const crypto::sealing_key* key) {
  TESSERA_ASSIGN_OR_RETURN(auto loaded, load_newest_file(path, expected, key));
  const std::filesystem::path ledger_file = ledger_path(path);
  TESSERA_ASSIGN_OR_RETURN(const auto ledger, load_ledger(ledger_file, key));
  if (!ledger) return loaded;
  if (!loaded)
    return make_error(errc::checkpoint_mismatch, ledger_file.string() + " records privacy spent up to round " + std::to_string(ledger->round) +
                                                     ", but there is no checkpoint beside it: starting afresh would forget that spending. "
                                                     "Put the checkpoint back, or remove the ledger to begin a new run's accounting");
  TESSERA_ASSIGN_OR_RETURN(const bool raised, apply_ledger(loaded->state, *ledger, ledger_file.string()));
  if (raised) loaded->ledger_round = ledger->round;
  return loaded;
}

}  // namespace tessera::rounds
