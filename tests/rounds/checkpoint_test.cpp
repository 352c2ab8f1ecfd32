#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "../core/test_files.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/rounds/checkpoint.hpp"

using namespace tessera;
using tessera::testing::contains;
using tessera::testing::read_bytes;
using tessera::testing::temp_dir;
using tessera::testing::write_bytes;

namespace {

core::model_spec spec(std::int64_t hidden = 16) { return testing::spec_of(8, {hidden, hidden}, 3); }

rounds::checkpoint sample() {
  rounds::checkpoint c;
  c.round = 7;
  c.plan_seed = 0xfeedfacecafebeefull;
  c.seed = 3;
  c.strategy = "ist";
  c.spec = spec();
  c.params.resize(core::param_count(c.spec.full_arch()));
  core::initialize(c.spec, c.params);
  c.registry = {{.id = "pi-01", .budget_bytes = 8u << 20, .examples = 600, .rounds_done = 6, .rounds_missed = 1, .last_seen = 1700000000},
                {.id = "pi-02", .budget_bytes = 4u << 20, .examples = 300, .rounds_done = 7, .rounds_missed = 0, .last_seen = 1700000100}};
  return c;
}

void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char ch = 0;
  f.read(&ch, 1);
  ch = static_cast<char>(ch ^ 0x40);
  f.seekp(at);
  f.write(&ch, 1);
}

rounds::checkpoint at_round(std::int64_t round) {
  rounds::checkpoint c = sample();
  c.round = round;
  c.params[0] = static_cast<float>(round);  // tells the files apart beyond the header
  return c;
}

std::uint64_t header_length(const std::string& bytes) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[static_cast<std::size_t>(8 + i)])) << (8 * i);
  return n;
}

// The same state as version 1 wrote it: magic ...\x01, "params_sha256" in the header, no trailing digest.
std::string as_version_1(const std::string& v2) {
  const std::size_t n = header_length(v2);
  nlohmann::json header = nlohmann::json::parse(v2.substr(16, n));
  const std::string params = v2.substr(16 + n, v2.size() - 16 - n - 32);
  header["params_sha256"] = crypto::to_hex(crypto::sha256_of(std::as_bytes(std::span(params.data(), params.size()))));
  const std::string text = header.dump();
  return std::string("TSCKPT\x01\0", 8) + tessera::testing::le_bytes(text.size(), 8) + text + params;
}

// The round a checkpoint file holds, or -1 if it does not load on its own.
std::int64_t round_in(const std::string& path) {
  auto c = rounds::load_checkpoint(path, spec(), nullptr);
  return c.ok() && c.value() ? c.value()->round : -1;
}

}  // namespace

TEST_CASE("checkpoint: round trip, plain and sealed") {
  temp_dir d("ckpt");
  const rounds::checkpoint c = sample();
  auto key = crypto::sealing_key::generate();
  REQUIRE(key.ok());
  const crypto::sealing_key* keys[] = {nullptr, &key.value()};
  for (const crypto::sealing_key* k : keys) {
    const std::string path = d.file(k ? "sealed.ckpt" : "plain.ckpt");
    REQUIRE(rounds::save_checkpoint(path, c, k).ok());
    auto back = rounds::load_checkpoint(path, spec(), k);
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
    REQUIRE(back.value().has_value());
    const rounds::checkpoint& b = *back.value();
    CHECK(b.round == 7);
    CHECK(b.plan_seed == c.plan_seed);
    CHECK(b.seed == 3);
    CHECK(b.strategy == "ist");
    CHECK(b.params == c.params);
    REQUIRE(b.registry.size() == 2);
    CHECK(b.registry[1].id == "pi-02");
    CHECK(b.registry[0].rounds_missed == 1);
    CHECK(b.registry[1].last_seen == 1700000100);
  }
  // No file yet: nothing to resume, not an error.
  auto none = rounds::load_checkpoint(d.file("absent.ckpt"), spec(), nullptr);
  REQUIRE(none.ok());
  CHECK_FALSE(none.value().has_value());
}

TEST_CASE("checkpoint: a changed byte, the wrong key, another model or a missing key are refused with the file named") {
  temp_dir d("ckpt");
  const rounds::checkpoint c = sample();
  const std::string plain = d.file("plain.ckpt"), sealed = d.file("sealed.ckpt");
  auto key = crypto::sealing_key::generate();
  auto other = crypto::sealing_key::generate();
  REQUIRE((key.ok() && other.ok()));
  REQUIRE(rounds::save_checkpoint(plain, c, nullptr).ok());
  REQUIRE(rounds::save_checkpoint(sealed, c, &key.value()).ok());

  auto wrong_model = rounds::load_checkpoint(plain, spec(32), nullptr);
  REQUIRE_FALSE(wrong_model.ok());
  CHECK(wrong_model.error().message.find(plain) != std::string::npos);
  CHECK(wrong_model.error().message.find("configuration asks for") != std::string::npos);

  auto wrong_key = rounds::load_checkpoint(sealed, spec(), &other.value());
  REQUIRE_FALSE(wrong_key.ok());
  CHECK(wrong_key.error().code == rounds::errc::checkpoint_corrupt);
  CHECK(contains(wrong_key.error().message, "another key"));
  auto unsealed_read = rounds::load_checkpoint(sealed, spec(), nullptr);
  REQUIRE_FALSE(unsealed_read.ok());
  CHECK(unsealed_read.error().code == core::errc::bad_format);  // the configuration's fault, not the file's
  CHECK(unsealed_read.error().message.find("sealed") != std::string::npos);
  auto plain_with_key = rounds::load_checkpoint(plain, spec(), &key.value());
  REQUIRE_FALSE(plain_with_key.ok());
  CHECK(plain_with_key.error().code == core::errc::bad_format);
  CHECK(contains(plain_with_key.error().message, "not sealed"));

  // A flipped parameter byte (near the end) fails the digest.
  const auto size = static_cast<std::streamoff>(std::filesystem::file_size(plain));
  flip_byte(plain, size - 40);
  auto tampered = rounds::load_checkpoint(plain, spec(), nullptr);
  REQUIRE_FALSE(tampered.ok());
  CHECK(tampered.error().code == rounds::errc::checkpoint_corrupt);
  CHECK(tampered.error().message.find("SHA-256") != std::string::npos);

  flip_byte(sealed, 40);
  CHECK(tessera::testing::error_of(rounds::load_checkpoint(sealed, spec(), &key.value())).code == rounds::errc::checkpoint_corrupt);

  // Truncated: the file ends early.
  REQUIRE(rounds::save_checkpoint(plain, c, nullptr).ok());
  std::filesystem::resize_file(plain, static_cast<std::uintmax_t>(size - 8));
  auto cut = rounds::load_checkpoint(plain, spec(), nullptr);
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().code == rounds::errc::checkpoint_corrupt);
  CHECK(contains(cut.error().message, plain + " is truncated (" + std::to_string(size - 8) + " of " + std::to_string(size) + " bytes)"));

  tessera::testing::write_bytes(d.file("junk.ckpt"), std::string_view("not a checkpoint at all"));
  auto junk = rounds::load_checkpoint(d.file("junk.ckpt"), spec(), nullptr);
  REQUIRE_FALSE(junk.ok());
  CHECK(junk.error().message.find("not a hub checkpoint") != std::string::npos);

  // A version this build does not know is refused as such: it may be whole, from a newer hub.
  REQUIRE(rounds::save_checkpoint(plain, c, nullptr).ok());
  std::string newer = read_bytes(plain);
  newer[6] = '\x04';
  write_bytes(plain, newer);
  auto unknown = rounds::load_checkpoint(plain, spec(), nullptr);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == core::errc::unsupported);
  CHECK(contains(unknown.error().message, "version 4"));
  CHECK(contains(unknown.error().message, "reads versions 1, 2 and 3"));
}

TEST_CASE("checkpoint: saving keeps the previous one, and never a bad one in its place") {
  temp_dir d("ckpt-keep");
  const std::string path = d.file("hub.ckpt"), prev = path + ".prev";
  CHECK(rounds::previous_checkpoint(path) == std::filesystem::path(prev));
  REQUIRE(rounds::save_checkpoint(path, at_round(7), nullptr).ok());
  CHECK_FALSE(std::filesystem::exists(prev));  // the first has no previous one
  REQUIRE(rounds::save_checkpoint(path, at_round(8), nullptr).ok());
  CHECK(round_in(path) == 8);
  CHECK(round_in(prev) == 7);
  CHECK((std::filesystem::status(prev).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));

  // The newest is damaged and the hub resumes from round 7: saving round 8 again replaces the bad
  // file and leaves round 7 where it is (kept as the previous one, the bad file would have been all
  // there was between the two renames).
  std::filesystem::resize_file(path, 100);
  REQUIRE(rounds::save_checkpoint(path, at_round(8), nullptr).ok());
  CHECK(round_in(path) == 8);
  CHECK(round_in(prev) == 7);
  REQUIRE(rounds::save_checkpoint(path, at_round(9), nullptr).ok());
  CHECK(round_in(path) == 9);
  CHECK(round_in(prev) == 8);
  // Nothing but the two files: no temporary left behind.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"hub.ckpt", "hub.ckpt.prev"});
}

TEST_CASE("checkpoint: every state a crash while saving can leave holds a checkpoint that loads") {
  // save_checkpoint's steps, with A the current file, B the new one and Z the one before A: the
  // states a crash leaves (the file system may keep the renames in any subset until the folder's fsync).
  temp_dir d("ckpt-crash");
  const std::string src = d.file("src.ckpt");
  std::string z, a, b;
  for (auto [round, bytes] : {std::pair{6, &z}, std::pair{7, &a}, std::pair{8, &b}}) {
    REQUIRE(rounds::save_checkpoint(src, at_round(round), nullptr).ok());
    *bytes = read_bytes(src);
  }
  struct state {
    const char* after;
    std::optional<std::string> current, previous;
    bool stray_temporary;
    std::int64_t round;
    bool fell_back;
  };
  const state states[] = {
      {"the temporary is written", a, z, true, 7, false},
      {"the current file is renamed to the previous one", std::nullopt, a, true, 7, true},
      {"the temporary is renamed to the current file", b, a, false, 8, false},
      {"only the second rename reached the disk", b, z, false, 8, false},
  };
  int i = 0;
  for (const state& s : states) {
    CAPTURE(s.after);
    const std::string path = d.file("hub" + std::to_string(i++) + ".ckpt");
    if (s.current) write_bytes(path, *s.current);
    if (s.previous) write_bytes(path + ".prev", *s.previous);
    if (s.stray_temporary) write_bytes(path + ".tmp12345", b.substr(0, b.size() / 2));
    auto got = rounds::load_latest_checkpoint(path, spec(), nullptr);
    REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
    REQUIRE(got.value().has_value());
    CHECK(got.value()->state.round == s.round);
    CHECK(got.value()->fell_back_from.has_value() == s.fell_back);
  }
}

namespace {

// Ways the newest checkpoint can be damaged, in table order (the rejection table below).
enum class damage {
  missing, empty, cut_in_magic, cut_in_length, cut_in_header, cut_at_parameters, cut_in_parameters,
  cut_in_digest, one_byte_short, round_in_header, byte_in_header, byte_in_parameters, byte_in_digest, zeroed,
};
constexpr std::size_t k_damages = 14;

struct damage_row {
  damage kind;
  std::string file;
  std::string plain_says;   // the reason, in an unsealed file
  std::string sealed_says;  // and in a sealed one
};

std::string flipped(std::string bytes, std::size_t at) {
  bytes.at(at) = static_cast<char>(bytes.at(at) ^ 0x01);
  return bytes;
}

// `good` damaged as `kind` asks; `n` is the header's length. In a `sealed` file the checkpoint's bytes
// come after the seal's magic and nonce (20 bytes) and before its 16-byte tag, enciphered in place.
std::optional<std::string> damaged(const std::string& good, damage kind, std::size_t n, bool sealed) {
  const std::size_t shift = sealed ? 20 : 0, tag = sealed ? 16 : 0;
  const std::size_t body = shift + 16 + n, digest = good.size() - tag - 32;
  switch (kind) {
    case damage::missing: return std::nullopt;
    case damage::empty: return std::string();
    case damage::cut_in_magic: return good.substr(0, 5);
    case damage::cut_in_length: return good.substr(0, shift + 12);
    case damage::cut_in_header: return good.substr(0, shift + 16 + n / 2);
    case damage::cut_at_parameters: return good.substr(0, body);
    case damage::cut_in_parameters: return good.substr(0, (body + digest) / 2);
    case damage::cut_in_digest: return good.substr(0, digest + 16);
    case damage::one_byte_short: return good.substr(0, good.size() - 1);
    case damage::round_in_header: {
      // "round":8 becomes "round":9: still JSON, still a checkpoint, and a version-1 file would load it.
      const std::size_t at = good.find("\"round\":8");
      return at == std::string::npos ? flipped(good, shift + 16 + 4) : flipped(good, at + 8);
    }
    case damage::byte_in_header: return flipped(good, shift + 16 + n / 2);
    case damage::byte_in_parameters: return flipped(good, (body + digest) / 2);
    case damage::byte_in_digest: return flipped(good, digest + 7);
    case damage::zeroed: return std::string(good.size(), '\0');
  }
  return std::nullopt;
}

// Saves round 7 then 8 to a scratch file: the newest file's bytes and the previous one's.
std::pair<std::string, std::string> newest_and_previous(const temp_dir& d, const crypto::sealing_key* key) {
  const std::string scratch = d.file(key ? "scratch-sealed.ckpt" : "scratch.ckpt");
  REQUIRE(rounds::save_checkpoint(scratch, at_round(7), key).ok());
  REQUIRE(rounds::save_checkpoint(scratch, at_round(8), key).ok());
  return {read_bytes(scratch), read_bytes(scratch + ".prev")};
}

}  // namespace

TEST_CASE("checkpoint: a newest checkpoint missing, cut short or altered falls back to the previous one, with its reason") {
  temp_dir d("ckpt-fallback");
  auto key = crypto::sealing_key::generate();
  REQUIRE(key.ok());
  const std::string truncated = "is truncated", altered = "is corrupt (its SHA-256 does not match its contents)", not_authentic = "is not authentic";
  const std::vector<damage_row> rows = {
      {damage::missing, "missing.ckpt", "is missing", "is missing"},
      {damage::empty, "empty.ckpt", "is truncated (0 bytes)", "is truncated (0 bytes)"},
      {damage::cut_in_magic, "cut-in-magic.ckpt", "is truncated (5 bytes)", "is truncated (5 bytes)"},
      {damage::cut_in_length, "cut-in-length.ckpt", "is truncated (12 bytes)", "is truncated (32 bytes)"},
      {damage::cut_in_header, "cut-in-header.ckpt", truncated, not_authentic},
      {damage::cut_at_parameters, "cut-at-parameters.ckpt", truncated, not_authentic},
      {damage::cut_in_parameters, "cut-in-parameters.ckpt", truncated, not_authentic},
      {damage::cut_in_digest, "cut-in-digest.ckpt", truncated, not_authentic},
      {damage::one_byte_short, "one-byte-short.ckpt", truncated, not_authentic},
      {damage::round_in_header, "round-in-header.ckpt", altered, not_authentic},
      {damage::byte_in_header, "byte-in-header.ckpt", altered, not_authentic},
      {damage::byte_in_parameters, "byte-in-parameters.ckpt", altered, not_authentic},
      {damage::byte_in_digest, "byte-in-digest.ckpt", altered, not_authentic},
      {damage::zeroed, "zeroed.ckpt", "is not a hub checkpoint", "is not a hub checkpoint"},
  };
  const crypto::sealing_key* keys[] = {nullptr, &key.value()};
  for (const crypto::sealing_key* k : keys) {
    CAPTURE(k != nullptr);
    const auto saved = newest_and_previous(d, k);
    const std::string& newest = saved.first;
    const std::string& previous = saved.second;
    const std::size_t n = header_length(k ? read_bytes(d.file("scratch.ckpt")) : newest);  // the same header either way
    const temp_dir files(k ? "ckpt-fallback-sealed" : "ckpt-fallback-plain");
    tessera::testing::for_each_rejection(
        files, rows, k_damages, [&](damage kind) { return damaged(newest, kind, n, k != nullptr); },
        [&](const damage_row& row, const std::string& path) {
          write_bytes(path + ".prev", previous);
          auto got = rounds::load_latest_checkpoint(path, spec(), k);
          REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
          REQUIRE(got.value().has_value());
          const rounds::loaded_checkpoint& l = *got.value();
          CHECK(l.state.round == 7);
          CHECK(l.state.params == at_round(7).params);
          CHECK(l.file == std::filesystem::path(path + ".prev"));
          REQUIRE(l.fell_back_from.has_value());
          CHECK(l.fell_back_from->file == std::filesystem::path(path));
          const core::error& why = l.fell_back_from->reason;
          CHECK(why.code == (row.kind == damage::missing ? make_error_code(core::errc::io) : make_error_code(rounds::errc::checkpoint_corrupt)));
          CHECK_MESSAGE(contains(why.message, path + " " + (k ? row.sealed_says : row.plain_says)), why.message);
          // On its own the damaged file is refused as corrupt (a missing one is no checkpoint yet).
          auto alone = rounds::load_checkpoint(path, spec(), k);
          if (row.kind == damage::missing) CHECK((alone.ok() && !alone.value().has_value()));
          else CHECK(tessera::testing::error_of(std::move(alone)).code == rounds::errc::checkpoint_corrupt);
        });
  }
}

TEST_CASE("checkpoint: the fleet's statistics are kept, exactly, so a resumed run does not ask again") {
  temp_dir d("ckpt-stats");
  rounds::checkpoint c = sample();
  c.round = 0;  // saved before round 1, once the statistics are in
  c.spec.input_normalization = core::input_normalization_kind::standardize;
  c.normalization.mean = {0.1f, -2.5f, 1e4f, 3.0f, 0.0f, 1.0f, 7.0f, 1e-3f};
  c.normalization.std = {1.0f, 0.25f, 3e3f, 1.0f, 2.0f, 1.0f, 0.5f, 1e-4f};
  c.statistics = {{"examples", 900}, {"devices", {"pi-01", "pi-02"}}, {"label_counts", {300, 300, 300}}};
  REQUIRE(rounds::save_checkpoint(d.file("s.ckpt"), c, nullptr).ok());
  auto back = rounds::load_checkpoint(d.file("s.ckpt"), c.spec, nullptr);
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
  REQUIRE(back.value().has_value());
  CHECK(back.value()->round == 0);
  CHECK(back.value()->normalization == c.normalization);
  CHECK(back.value()->statistics == c.statistics);
  // The spec says standardize: a configuration without it is another model.
  CHECK_FALSE(rounds::load_checkpoint(d.file("s.ckpt"), spec(), nullptr).ok());
}

TEST_CASE("checkpoint: the privacy accountant is kept to the bit, so a resumed run reports the same ε") {
  temp_dir d("ckpt-privacy");
  rounds::checkpoint c = sample();
  core::rdp_accountant a;
  a.compose(0.05, 1.1, 37);
  a.compose(0.02, 0.9, 5);
  c.privacy = a;
  c.dp_clip = 1.75;  // where adaptive clipping got to
  REQUIRE(rounds::save_checkpoint(d.file("p.ckpt"), c, nullptr).ok());
  auto back = rounds::load_checkpoint(d.file("p.ckpt"), c.spec, nullptr);
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
  REQUIRE(back.value()->privacy.has_value());
  const auto& p = *back.value()->privacy;
  CHECK(p.steps() == 42);
  CHECK(back.value()->dp_clip == 1.75);
  REQUIRE(p.rdp().size() == a.rdp().size());
  for (std::size_t i = 0; i < p.rdp().size(); ++i) CHECK(p.rdp()[i] == a.rdp()[i]);
  CHECK(p.epsilon(1e-5).epsilon == a.epsilon(1e-5).epsilon);
  // Without differential privacy there is nothing to keep.
  rounds::checkpoint plain = sample();
  REQUIRE(rounds::save_checkpoint(d.file("q.ckpt"), plain, nullptr).ok());
  CHECK_FALSE(rounds::load_checkpoint(d.file("q.ckpt"), plain.spec, nullptr).value()->privacy.has_value());
}

TEST_CASE("checkpoint: when neither the newest nor the previous checkpoint loads, the error names both") {
  temp_dir d("ckpt-both");
  const std::string path = d.file("hub.ckpt"), prev = path + ".prev";
  REQUIRE(rounds::save_checkpoint(path, at_round(7), nullptr).ok());
  REQUIRE(rounds::save_checkpoint(path, at_round(8), nullptr).ok());
  std::filesystem::resize_file(path, 200);
  write_bytes(prev, flipped(read_bytes(prev), 300));
  const core::error both = tessera::testing::error_of(rounds::load_latest_checkpoint(path, spec(), nullptr));
  CHECK(both.code == rounds::errc::checkpoint_corrupt);
  CHECK_MESSAGE(contains(both.message, path + " is truncated"), both.message);
  CHECK_MESSAGE(contains(both.message, prev + " is corrupt (its SHA-256 does not match its contents)"), both.message);
  CHECK_FALSE(contains(both.message, "key"));

  // The newest missing and the previous one bad; the newest bad and no previous one.
  std::filesystem::remove(path);
  const core::error missing = tessera::testing::error_of(rounds::load_latest_checkpoint(path, spec(), nullptr));
  CHECK(missing.code == rounds::errc::checkpoint_corrupt);
  CHECK(contains(missing.message, path + " is missing"));
  CHECK(contains(missing.message, prev + " is corrupt"));
  std::filesystem::rename(prev, path);
  const core::error alone = tessera::testing::error_of(rounds::load_latest_checkpoint(path, spec(), nullptr));
  CHECK(alone.code == rounds::errc::checkpoint_corrupt);
  CHECK(contains(alone.message, path + " is corrupt"));
  CHECK(contains(alone.message, "no previous checkpoint (" + prev + ")"));
}

TEST_CASE("checkpoint: sealed with another key, both files fail and the error says the key may be wrong") {
  temp_dir d("ckpt-wrong-key");
  auto key = crypto::sealing_key::generate();
  auto other = crypto::sealing_key::generate();
  REQUIRE((key.ok() && other.ok()));
  const std::string path = d.file("hub.ckpt"), prev = path + ".prev";
  REQUIRE(rounds::save_checkpoint(path, at_round(7), &key.value()).ok());
  REQUIRE(rounds::save_checkpoint(path, at_round(8), &key.value()).ok());
  const core::error e = tessera::testing::error_of(rounds::load_latest_checkpoint(path, spec(), &other.value()));
  CHECK(e.code == rounds::errc::checkpoint_corrupt);
  CHECK_MESSAGE(contains(e.message, path + " is not authentic"), e.message);
  CHECK(contains(e.message, prev + " is not authentic"));
  CHECK(contains(e.message, "the sealing key (seal_key) may be the wrong one"));
  // With the right key, a damaged newest file falls back like an unsealed one.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  auto got = rounds::load_latest_checkpoint(path, spec(), &key.value());
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
  CHECK(got.value()->state.round == 7);
  REQUIRE(got.value()->fell_back_from.has_value());
  CHECK(contains(got.value()->fell_back_from->reason.message, path + " is not authentic"));
}

TEST_CASE("checkpoint: another model is refused, not passed over for the previous checkpoint") {
  temp_dir d("ckpt-other-model");
  const std::string path = d.file("hub.ckpt"), prev = path + ".prev";
  REQUIRE(rounds::save_checkpoint(path, at_round(7), nullptr).ok());
  REQUIRE(rounds::save_checkpoint(path, at_round(8), nullptr).ok());
  const core::error e = tessera::testing::error_of(rounds::load_latest_checkpoint(path, spec(32), nullptr));
  CHECK(e.code == core::errc::invalid_spec);
  CHECK(contains(e.message, path + ": holds model"));
  CHECK_FALSE(contains(e.message, prev));
  // The newest corrupt and the previous one another model's: refused, naming both, for the model.
  std::filesystem::resize_file(path, 100);
  const core::error both = tessera::testing::error_of(rounds::load_latest_checkpoint(path, spec(32), nullptr));
  CHECK(both.code == core::errc::invalid_spec);
  CHECK(contains(both.message, path + " is truncated"));
  CHECK(contains(both.message, prev + ": holds model"));
}

TEST_CASE("checkpoint: a version-1 file still loads, is checked as before, and is kept as the previous one") {
  temp_dir d("ckpt-v1");
  const std::string path = d.file("hub.ckpt");
  REQUIRE(rounds::save_checkpoint(d.file("v2.ckpt"), at_round(7), nullptr).ok());
  const std::string v1 = as_version_1(read_bytes(d.file("v2.ckpt")));
  write_bytes(path, v1);
  auto back = rounds::load_latest_checkpoint(path, spec(), nullptr);
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
  REQUIRE(back.value().has_value());
  CHECK(back.value()->state.round == 7);
  CHECK(back.value()->state.params == at_round(7).params);
  CHECK(back.value()->state.registry.size() == 2);
  CHECK_FALSE(back.value()->fell_back_from.has_value());

  // Its parameters are checked by their SHA-256, its length by the header's count; its header is not
  // (what version 2's trailing digest adds): "round":7 turned to 9 loads as round 9.
  const std::size_t n = header_length(v1);
  write_bytes(d.file("p.ckpt"), flipped(v1, 16 + n + 5));
  const core::error flipped_param = tessera::testing::error_of(rounds::load_checkpoint(d.file("p.ckpt"), spec(), nullptr));
  CHECK(flipped_param.code == rounds::errc::checkpoint_corrupt);
  CHECK(contains(flipped_param.message, "the parameters do not match their SHA-256"));
  write_bytes(d.file("c.ckpt"), v1.substr(0, v1.size() - 4));
  const core::error cut = tessera::testing::error_of(rounds::load_checkpoint(d.file("c.ckpt"), spec(), nullptr));
  CHECK(cut.code == rounds::errc::checkpoint_corrupt);
  CHECK(contains(cut.message, "is truncated"));
  std::string round_9 = v1;
  round_9[round_9.find("\"round\":7") + 8] = '9';
  write_bytes(d.file("r.ckpt"), round_9);
  CHECK(round_in(d.file("r.ckpt")) == 9);

  // The first save after an upgrade keeps the version-1 file as the previous checkpoint.
  REQUIRE(rounds::save_checkpoint(path, at_round(8), nullptr).ok());
  CHECK(round_in(path) == 8);
  CHECK(read_bytes(path + ".prev") == v1);
  CHECK(round_in(path + ".prev") == 7);
}

namespace {

// A server optimizer's state for sample(): moments that are not their starting values.
core::server_optimizer_state optimizer_state(core::server_optimizer_kind kind, std::size_t params) {
  core::server_optimizer_state s{.kind = kind, .steps = 11, .m = {}, .v = {}};
  for (std::size_t i = 0; i < params; ++i) s.m.push_back(0.001f * static_cast<float>(i) - 0.25f);
  if (core::moments_of(kind) == 2)
    for (std::size_t i = 0; i < params; ++i) s.v.push_back(1e-6f + 1e-4f * static_cast<float>(i % 17));
  return s;
}

// A version-2 or -3 file with `header` and `body` (parameters, moments) and a digest that fits: what a
// writer that got the layout wrong would leave.
std::string with_digest(char version, const nlohmann::json& header, const std::string& body) {
  const std::string text = header.dump();
  std::string bytes = std::string("TSCKPT", 6) + version + '\0' + tessera::testing::le_bytes(text.size(), 8) + text + body;
  const auto digest = crypto::sha256_of(std::as_bytes(std::span(bytes.data(), bytes.size())));
  for (std::uint8_t x : digest) bytes.push_back(static_cast<char>(x));
  return bytes;
}

}  // namespace

TEST_CASE("checkpoint: a server optimizer's moments and steps are kept to the bit in version 3; without them it is version 2") {
  temp_dir d("ckpt-server-opt");
  auto key = crypto::sealing_key::generate();
  REQUIRE(key.ok());
  const std::size_t params = core::param_count(spec().full_arch());
  for (const auto kind : {core::server_optimizer_kind::momentum, core::server_optimizer_kind::adam, core::server_optimizer_kind::yogi}) {
    CAPTURE(core::to_string(kind));
    rounds::checkpoint c = sample();
    c.server_optimizer = optimizer_state(kind, params);
    const crypto::sealing_key* keys[] = {nullptr, &key.value()};
    for (const crypto::sealing_key* k : keys) {
      const std::string path = d.file(std::string(core::to_string(kind)) + (k ? ".sealed" : ".plain"));
      REQUIRE(rounds::save_checkpoint(path, c, k).ok());
      auto back = rounds::load_checkpoint(path, spec(), k);
      REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
      REQUIRE(back.value()->server_optimizer.has_value());
      CHECK(*back.value()->server_optimizer == *c.server_optimizer);
      CHECK(back.value()->params == c.params);
      CHECK(back.value()->round == 7);
      if (k == nullptr) {
        const std::string bytes = read_bytes(path);
        CHECK(bytes[6] == '\x03');
        const std::size_t vectors = 1 + core::moments_of(kind);
        CHECK(bytes.size() == 16 + header_length(bytes) + vectors * params * 4 + 32);
      }
    }
  }
  // A run without one writes version 2, and a state without moments (kind none) is not written at all.
  rounds::checkpoint plain = sample();
  plain.server_optimizer = core::server_optimizer_state{.kind = core::server_optimizer_kind::none, .steps = 3, .m = {}, .v = {}};
  REQUIRE(rounds::save_checkpoint(d.file("none.ckpt"), plain, nullptr).ok());
  CHECK(read_bytes(d.file("none.ckpt"))[6] == '\x02');
  auto back = rounds::load_checkpoint(d.file("none.ckpt"), spec(), nullptr);
  REQUIRE(back.ok());
  CHECK_FALSE(back.value()->server_optimizer.has_value());
  CHECK(read_bytes(d.file("none.ckpt")).find("server_optimizer") == std::string::npos);
}

TEST_CASE("checkpoint: a version-3 file cut short, or whose moments do not fit its kind, is refused by name") {
  temp_dir d("ckpt-v3");
  const std::size_t params = core::param_count(spec().full_arch());
  rounds::checkpoint c = sample();
  c.server_optimizer = optimizer_state(core::server_optimizer_kind::adam, params);
  const std::string path = d.file("hub.ckpt");
  REQUIRE(rounds::save_checkpoint(path, c, nullptr).ok());
  const std::string good = read_bytes(path);
  const std::size_t n = header_length(good);

  // Cut in its second moment: the size it should have counts both moment vectors.
  write_bytes(d.file("cut.ckpt"), good.substr(0, good.size() - 100));
  const core::error cut = tessera::testing::error_of(rounds::load_checkpoint(d.file("cut.ckpt"), spec(), nullptr));
  CHECK(cut.code == rounds::errc::checkpoint_corrupt);
  CHECK(contains(cut.message, "is truncated (" + std::to_string(good.size() - 100) + " of " + std::to_string(good.size()) + " bytes)"));

  // Whole files (their digest fits) whose layout is wrong: the writer's fault, bad_format.
  const nlohmann::json header = nlohmann::json::parse(good.substr(16, n));
  const std::string body = good.substr(16 + n, good.size() - 16 - n - 32);
  const std::string params_only = body.substr(0, params * 4), with_m = body.substr(0, 2 * params * 4);
  struct bad_layout {
    const char* name;
    std::string file;
    std::string words;
  };
  nlohmann::json one_moment = header, unknown_kind = header, no_state = header, negative = header;
  one_moment["server_optimizer"]["moments"] = 1;
  unknown_kind["server_optimizer"]["kind"] = "lamb";
  no_state.erase("server_optimizer");
  negative["server_optimizer"]["steps"] = -2;
  const bad_layout cases[] = {
      {"adam with one moment", with_digest('\x03', one_moment, with_m), "1 moment vectors for kind adam, which keeps 2"},
      {"an unknown kind", with_digest('\x03', unknown_kind, body), "server_optimizer.kind 'lamb' is not one of none, momentum, adam, yogi"},
      {"version 3 without the state", with_digest('\x03', no_state, body), "server_optimizer"},
      {"negative steps", with_digest('\x03', negative, body), "negative steps"},
      {"moments missing", with_digest('\x03', header, params_only), "bytes after the header for " + std::to_string(params) + " parameters and 2 moment vectors"},
      {"version 2 with moments after the parameters", with_digest('\x02', no_state, body), "parameters"},
  };
  for (const auto& bc : cases) {
    CAPTURE(bc.name);
    write_bytes(d.file("bad.ckpt"), bc.file);
    const core::error e = tessera::testing::error_of(rounds::load_checkpoint(d.file("bad.ckpt"), spec(), nullptr));
    CHECK(e.code == core::errc::bad_format);
    CHECK_MESSAGE(contains(e.message, bc.words), e.message);
    CHECK(contains(e.message, d.file("bad.ckpt")));
  }
  // The same bytes rebuilt as they were load: the cases above fail for their layout only.
  write_bytes(d.file("rebuilt.ckpt"), with_digest('\x03', header, body));
  CHECK(read_bytes(d.file("rebuilt.ckpt")) == good);
}
