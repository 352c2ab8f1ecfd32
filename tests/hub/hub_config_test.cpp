#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/hub/error.hpp"
#include "tessera/hub/hub_config.hpp"
#include "../core/test_files.hpp"

using namespace tessera;

namespace {

std::string error_of(const nlohmann::json& j) { return testing::error_of(hub::parse_hub_config(j, "hub.json")).message; }

}  // namespace

TEST_CASE("hub config: defaults, and overrides from the command line") {
  auto c = core::load_config("", {"listen=0.0.0.0:9000", "rounds=12", "tls.crl=other.crl", "strategy=fedavg",
                                     "model.hidden=[64,32]"}, hub::read_hub_config);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  CHECK(c.value().listen.host == "0.0.0.0");
  CHECK(c.value().listen.port == 9000);
  CHECK(c.value().rounds == 12);
  CHECK(c.value().lr.total_rounds == 12);
  CHECK(c.value().tls.crl == "other.crl");
  CHECK(c.value().tls.ca_cert == "pki/ca.pem");
  CHECK(c.value().strategy == rounds::strategy_kind::fedavg);
  CHECK(c.value().model.hidden == std::vector<std::int64_t>{64, 32});
  CHECK_FALSE(c.value().validation.has_value());
}

TEST_CASE("hub config: secure aggregation from the command line, off by default") {
  auto plain = core::load_config("", {}, hub::read_hub_config);
  REQUIRE(plain.ok());
  CHECK_FALSE(plain.value().secure_aggregation.enabled);
  CHECK(plain.value().secure_step_s == 60);
  auto c = core::load_config("", {R"(secure_aggregation={"replication": 4, "clip": 0.5})", "secure_step_s=5", "audit_uploads=audit"},
                             hub::read_hub_config);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  const auto& sa = c.value().secure_aggregation;
  CHECK(sa.enabled);
  CHECK(sa.replication == 4);
  CHECK(sa.min_aggregate() == 4);  // the threshold defaults to the replication
  CHECK(sa.clip == 0.5);
  CHECK(sa.bits == 32);
  CHECK(c.value().secure_step_s == 5);
  CHECK(c.value().audit_uploads == "audit");
  CHECK(error_of({{"secure_aggregation", {{"bits", 8}}}}).find("secure_aggregation.bits") != std::string::npos);
}

TEST_CASE("hub config: errors name the file and the field") {
  CHECK(error_of({{"listen", "nowhere"}}).find("hub.json: field 'listen'") != std::string::npos);
  CHECK(error_of({{"min_devices", 5}, {"max_devices", 2}}).find("'max_devices'") != std::string::npos);
  CHECK(error_of({{"max_devices", 100}, {"devices_per_round", 200}}).find("'devices_per_round': 200 is above max_devices (100)") !=
        std::string::npos);
  CHECK(error_of({{"seal_key", "k"}}).find("'seal_key'") != std::string::npos);
  CHECK(error_of({{"strategy", "central"}}).find("'strategy'") != std::string::npos);
  CHECK(error_of({{"nesterov", true}}).find("'nesterov'") != std::string::npos);
  CHECK(error_of({{"heartbeat_s", 30}, {"idle_timeout_s", 20}}).find("'idle_timeout_s'") != std::string::npos);
  CHECK(error_of({{"validation", {{"format", "idx"}}}}).find("validation") != std::string::npos);
  CHECK(error_of({{"roundz", 3}}).find("roundz") != std::string::npos);
}

TEST_CASE("hub error codes have stable names, the first and the last") {
  CHECK(core::error_name(hub::errc::round_closed) == "hub.round_closed");
  CHECK(core::error_name(hub::errc::checkpoint_mismatch) == "hub.checkpoint_mismatch");
}

TEST_CASE("hub config: examples/hub.json loads as shipped and with each change the README shows") {
  const std::string file = std::string(TESSERA_EXAMPLES_DIR) + "/hub.json";
  const std::vector<std::vector<std::string>> documented = {
      {},
      {"rounds=100", "listen=0.0.0.0:7443"},
      {"validation=null"},
      {R"(secure_aggregation={"replication": 3})", "whole_model_rounds=0"},
      {R"(dp={"sample_rate": 0.05, "noise_multiplier": 1.0, "clip": 1.0, "target_epsilon": 4})", "repartition_every=1",
       "whole_model_rounds=0"},
      {"strategy=fedavg", "repartition_every=1", "whole_model_rounds=0"},
  };
  for (const auto& overrides : documented) {
    const auto c = core::load_config(file, overrides, hub::read_hub_config);
    const std::string what = (overrides.empty() ? std::string("as shipped") : overrides.front()) + ": " +
                             (c.ok() ? std::string() : c.error().message);
    CHECK_MESSAGE(c.ok(), what);
  }
  // Without the override the shipped IST settings are refused by name, with the value that fixes it.
  const auto fedavg = core::load_config(file, {"strategy=fedavg"}, hub::read_hub_config);
  REQUIRE_FALSE(fedavg.ok());
  CHECK(testing::contains(fedavg.error().message, "repartition_every"));
  CHECK(testing::contains(fedavg.error().message, "set it to 1"));
}

TEST_CASE("hub config: --help states the defaults the parser uses (help defaults)") {
  // It said scale_unit, which a CSV validation set is not.
  CHECK(testing::help_default(hub::read_hub_config, "validation.normalization") == "scale_unit (csv: none)");
}
