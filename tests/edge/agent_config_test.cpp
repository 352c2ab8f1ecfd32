#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/core/config/json_config.hpp"
#include "tessera/edge/agent.hpp"
#include "../core/test_files.hpp"

using namespace tessera;

namespace {

nlohmann::json minimal() {
  return {{"hub", "hub.example.org:7443"}, {"data", {{"features", "x.idx"}, {"labels", "y.idx"}}}};
}

std::string error_of(const nlohmann::json& j) { return testing::error_of(edge::parse_agent_config(j, "agent.json")).message; }

}  // namespace

TEST_CASE("agent config: defaults and overrides") {
  auto c = edge::parse_agent_config(minimal(), "agent.json");
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  CHECK(c.value().hub.host == "hub.example.org");
  CHECK(c.value().hub.port == 7443);
  CHECK(c.value().tls.hub_name == "hub.example.org");  // the name dialled is the name checked
  CHECK(c.value().budget_bytes == 16u << 20);
  CHECK(c.value().codecs.size() == 3);
  CHECK(c.value().data_seed == 0);

  auto j = minimal();
  REQUIRE(core::apply_overrides(j, {"memory_budget_mib=4", "codecs=[\"q8\"]", "data.seed=18446744073709551615",
                                    "reconnect.max_ms=500", "hub_name=hub", "rate_limit.upload_bytes_per_s=32000"}).ok());
  auto o = edge::parse_agent_config(j, "agent.json");
  REQUIRE_MESSAGE(o.ok(), (o.ok() ? "" : o.error().message));
  CHECK(o.value().budget_bytes == 4u << 20);
  REQUIRE(o.value().codecs.size() == 2);  // f32 is always understood
  CHECK(o.value().codecs[0] == net::codec::q8);
  CHECK(o.value().data_seed == 18446744073709551615ull);
  CHECK(o.value().backoff_max.count() == 500);
  CHECK(o.value().tls.hub_name == "hub");
  CHECK(o.value().link.upload_bytes_per_s == 32000);
  CHECK(o.value().link.download_bytes_per_s == 0);
}

TEST_CASE("agent config: errors name the file and the field") {
  CHECK(error_of({{"hub", "x:1"}}).find("'data'") != std::string::npos);
  auto j = minimal();
  j["hub"] = "no-port";
  CHECK(error_of(j).find("agent.json: field 'hub'") != std::string::npos);
  j = minimal();
  j["codecs"] = {"f32", "zip"};
  CHECK(error_of(j).find("'codecs[1]'") != std::string::npos);
  j = minimal();
  j["data"].erase("labels");
  CHECK(error_of(j).find("'data.labels'") != std::string::npos);
  j = minimal();
  j["reconnect"] = {{"initial_ms", 1000}, {"max_ms", 10}};
  CHECK(error_of(j).find("'reconnect.max_ms'") != std::string::npos);
  j = minimal();
  j["rate_limit"] = {{"upload_bytes_per_s", 100}};
  CHECK(error_of(j).find("'rate_limit.upload_bytes_per_s'") != std::string::npos);
  j = minimal();
  j["memory_budget"] = 3;
  CHECK(error_of(j).find("memory_budget") != std::string::npos);
}

TEST_CASE("agent config: the privacy policy, its defaults and its errors") {
  auto c = edge::parse_agent_config(minimal(), "agent.json");
  REQUIRE(c.ok());
  const edge::privacy_policy& d = c.value().privacy;
  CHECK(d.min_threshold == 0);  // a majority of the device's holders
  CHECK(d.min_group == 2);
  CHECK(d.min_noise_multiplier == 0);
  CHECK(d.statistics == edge::answer_mode::allow);
  CHECK(d.evaluation == edge::answer_mode::allow);

  auto j = minimal();
  j["privacy"] = {{"min_threshold", 4}, {"min_group", 3}, {"min_noise_multiplier", 0.9}, {"statistics", "off"}, {"evaluation", "off"}};
  auto p = edge::parse_agent_config(j, "agent.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p.value().privacy.min_threshold == 4);
  CHECK(p.value().privacy.min_group == 3);
  CHECK(p.value().privacy.min_noise_multiplier == 0.9);
  CHECK(p.value().privacy.statistics == edge::answer_mode::off);
  CHECK(p.value().privacy.evaluation == edge::answer_mode::off);

  j = minimal();
  j["privacy"] = {{"min_group", 1}};  // a sum of one device is that device's update
  CHECK(error_of(j).find("'privacy.min_group'") != std::string::npos);
  j = minimal();
  j["privacy"] = {{"statistics", "sometimes"}};
  CHECK(error_of(j).find("'privacy.statistics'") != std::string::npos);
  j = minimal();
  j["privacy"] = {{"min_noise", 1}};
  CHECK(error_of(j).find("min_noise") != std::string::npos);
}

TEST_CASE("agent config: --help states the defaults the parser uses (help defaults)") {
  // It used to say "127.0.0.1" (the describing reader's hub) and "scale_unit" also for CSV, which reads
  // as none.
  CHECK(testing::help_default(edge::read_agent_config, "hub_name") == "the host of 'hub'");
  CHECK(testing::help_default(edge::read_agent_config, "data.normalization") == "scale_unit (csv: none)");
  CHECK(testing::help_default(edge::read_agent_config, "after_run") == "\"exit\"");
  // And what it says is what a CSV source gets.
  nlohmann::json j = minimal();
  j["data"] = {{"format", "csv"}, {"features", "x.csv"}};
  const auto c = edge::parse_agent_config(j, "agent.json");
  REQUIRE(c.ok());
  CHECK(c.value().data.source.norm == core::normalization::none);
}
