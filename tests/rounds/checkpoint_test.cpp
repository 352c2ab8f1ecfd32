#include <doctest/doctest.h>

#include <fstream>

#include "../core/test_files.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/rounds/checkpoint.hpp"

using namespace tessera;
using tessera::testing::temp_dir;

namespace {

core::model_spec spec(std::int64_t hidden = 16) {
  core::model_spec s;
  s.inputs = 8;
  s.hidden = {hidden, hidden};
  s.outputs = 3;
  return s;
}

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

  CHECK_FALSE(rounds::load_checkpoint(sealed, spec(), &other.value()).ok());
  auto unsealed_read = rounds::load_checkpoint(sealed, spec(), nullptr);
  REQUIRE_FALSE(unsealed_read.ok());
  CHECK(unsealed_read.error().message.find("sealed") != std::string::npos);

  // A flipped parameter byte (near the end) fails the digest; a flipped header byte fails parsing.
  const auto size = static_cast<std::streamoff>(std::filesystem::file_size(plain));
  flip_byte(plain, size - 3);
  auto tampered = rounds::load_checkpoint(plain, spec(), nullptr);
  REQUIRE_FALSE(tampered.ok());
  CHECK(tampered.error().message.find("SHA-256") != std::string::npos);

  flip_byte(sealed, 40);
  CHECK_FALSE(rounds::load_checkpoint(sealed, spec(), &key.value()).ok());

  // Truncated: the parameters end early.
  REQUIRE(rounds::save_checkpoint(plain, c, nullptr).ok());
  std::filesystem::resize_file(plain, static_cast<std::uintmax_t>(size - 8));
  auto cut = rounds::load_checkpoint(plain, spec(), nullptr);
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().message.find("parameter bytes") != std::string::npos);

  tessera::testing::write_bytes(d.file("junk.ckpt"), std::string_view("not a checkpoint at all"));
  auto junk = rounds::load_checkpoint(d.file("junk.ckpt"), spec(), nullptr);
  REQUIRE_FALSE(junk.ok());
  CHECK(junk.error().message.find("not a hub checkpoint") != std::string::npos);
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
