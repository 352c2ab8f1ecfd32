// The agent's side of secure aggregation against a scripted hub: a net::server in the test drives a
// real edge::agent through the protocol's steps over mutual TLS on 127.0.0.1, with two more devices
// simulated by crypto::secagg_client. Each test names a step the agent must refuse (with
// edge.secure_step and the reason) or, for the honest hub, the whole round it must complete.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "../core/test_files.hpp"
#include "../crypto/test_pki.hpp"
#include "../support/text.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/core/data/stats_vector.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/edge/privacy_budget.hpp"
#include "tessera/net/server.hpp"
#include "tessera/net/task.hpp"

using namespace tessera;
using namespace std::chrono_literals;

namespace {

// What the scripted hub does wrong, if anything.
enum class rogue {
  none, bad_signature, replayed_keys, both_shares,
  empty_inbox,        // no boxes: the agent would mask with its self mask alone
  wide_roster,        // four neighbours, threshold 2: two of five holders could recover its secrets
  small_group,        // sums of two, for a device whose privacy.min_group is 3 (the wire refuses fewer than two)
  noise_removed,      // a private round whose noise field the hub dropped
  noise_lowered,      // a private round whose noise carries σ 0.5
  clear_round,        // a round in the clear (only the hub could add noise)
  statistics,         // the feature statistics, which travel in the clear
  honest_private,     // not rogue: a private round whose noise carries σ 1
  self_sampled,       // not rogue: the same round, its devices drawing themselves at a rate of 1e-9
  diverging,          // a private round whose model (weights near float's largest) makes any training diverge
  revoked_member,     // the roster holds the keys of a device whose certificate the CA revoked
  other_model,        // sa-1, of the agent's group, was sent another model (it signed that model's digest)
  other_set,          // the unmasking names another survivor set than the one the agent signed
  few_signatures,     // the unmasking carries the agent's signature alone (the threshold is 2)
  forged_signature,   // sa-1's signature in the unmasking is over another survivor set
  masked_statistics,  // not rogue: the feature statistics (pass 1) as a masked sum with sa-1 and sa-2
  other_question,     // the statistics as a masked sum, sa-1 asked another question (its keys sign another digest)
  other_scale,        // the statistics as a masked sum, sa-1 asked with another scale (so the sum is the agent's alone)
  masked_evaluation,  // not rogue: the model scored as a masked sum with sa-1 and sa-2
};

// Two more devices of the fleet's CA ("sa-1", "sa-2"), whose protocol clients the scripted hub runs.
crypto::cert_files other_device(const std::string& id) {
  const auto& pki = test::test_pki::get();
  crypto::cert_files f{pki.dir / (id + ".pem"), pki.dir / (id + ".key")};
  if (!std::filesystem::exists(f.cert)) REQUIRE(crypto::issue(pki.ca, {.device_id = id}, f, false).ok());
  return f;
}

// A device of the agent's group (segment 0), sent the model whose digest is `model`.
crypto::secagg_client client_for(const std::string& id, const crypto::secagg_params& p, const crypto::sha256_digest& model) {
  const auto files = other_device(id);
  auto key = crypto::signing_key::load(files.key);
  REQUIRE(key.ok());
  auto c = crypto::secagg_client::create(id, testing::read_text(files.cert), key.value(), testing::read_text(test::test_pki::get().ca.cert), p,
                                         {.segments = {0}, .model = model});
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  return std::move(c).value();
}

class scripted_hub {
 public:
  scripted_hub(rogue r, const testing::temp_dir& dir) : rogue_(r), dir_(dir) {
    model_.inputs = 16;
    model_.hidden = {8};
    model_.outputs = 4;
    arch_ = model_.full_arch();
    params_.resize(core::param_count(arch_));
    core::initialize(model_, params_);
    p_.round = 4242;
    p_.bits = 32;
    p_.clip = 1.0;
    p_.threshold = 2;
    p_.segments = {{.length = core::param_count(arch_) + 1, .min_aggregate = 2}};
    if (r == rogue::masked_evaluation) {  // an evaluation's masked score (core::score_vector): by its round
      p_.bits = 64;
      p_.summands = 3;
      p_.segments = {{.length = core::k_score_vector_length, .min_aggregate = 2}};
    }
    if (r == rogue::masked_statistics || r == rogue::other_question || r == rogue::other_scale) {
      // A sum outside a round, as the hub makes it (rounds/secure_sum.hpp): its messages go by round 0.
      msg_round_ = 0;
      p_.bits = 64;
      p_.summands = 3;
      p_.segments = {{.length = core::sums_vector_length(16, core::task_kind::classification, 4), .min_aggregate = 2}};
    }
    if (r == rogue::noise_removed || r == rogue::noise_lowered || r == rogue::honest_private || r == rogue::self_sampled ||
        r == rogue::diverging) {
      // A private round's ring, sized (as the hub sizes it) for its population: 1024 summands.
      p_.summands = 1024;
      const auto limit = static_cast<double>(crypto::fixed_point::create(p_.clip, p_.bits, p_.summands).value().limit());
      const double sigma = r == rogue::noise_removed ? 0.0 : r == rogue::noise_lowered ? 0.5 : 1.0;
      p_.noise = (sigma * limit) * (sigma * limit) / 2.0;  // each device's share over sums of 2
      if (r == rogue::self_sampled) p_.sample_rate = 1e-9;
    }
    server_ = net::server::create(io_, test::test_pki::get().hub_tls(), net::session_config{});
    server_->on_session([this](const std::shared_ptr<net::session>& s) { attach(s); });
    auto port = server_->listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    port_ = port.value();
    write_data();
  }

  // Runs the agent against the script until it refuses, the round completes, or 20 s pass.
  void run() {
    const auto& pki = test::test_pki::get();
    edge::agent_config c;
    c.hub = {"127.0.0.1", port_};
    c.tls = {.ca_cert = pki.ca.cert, .cert = pki.dev_a.cert, .key = pki.dev_a.key, .hub_name = "localhost"};
    c.tls.crl = pki.ca.crl;  // the device holds the CA's list
    c.data.source = {.format = core::data_format::idx, .features = dir_.file("images"), .labels = dir_.file("labels")};
    c.data.validation_fraction = rogue_ == rogue::masked_evaluation ? 0.25 : 0;
    c.backoff_initial = 50ms;
    c.backoff_max = 200ms;
    c.privacy = policy;
    c.secure_aggregation = mode;
    auto a = edge::agent::create(io_, c, [this](core::log_level, const std::string& line) { agent_log += line + "\n"; });
    REQUIRE_MESSAGE(a.ok(), (a.ok() ? "" : a.error().message));
    agent_ = std::move(a).value();
    agent_->start();
    io_.run_for(20s);
  }

  edge::privacy_policy policy;                     // the agent's
  edge::secure_mode mode = edge::secure_mode::allow;
  std::string agent_log;
  std::optional<net::msg::refuse> refused;
  std::optional<net::msg::secagg_unmask_reply> unmask_reply;
  std::optional<crypto::secagg_signature> check_signature;  // the agent's, over the survivor set
  std::optional<crypto::secagg_masked_with> agent_pledge;    // whom the agent masked with
  std::optional<net::msg::update> update;                    // the UPDATE beside its masked input
  std::optional<net::msg::stats_reply> stats_reply;          // the statistics as they reached the hub
  std::optional<net::msg::evaluation> evaluation;            // a masked score as it reached the hub
  bool uploaded = false;

 private:
  void done() {
    agent_->stop();
    server_->stop();
  }

  void write_data() {
    core::rng r(5);
    std::vector<std::uint8_t> px, lab;
    for (int i = 0; i < 64; ++i) {
      const auto cls = static_cast<std::uint8_t>(r.below(4));
      for (int k = 0; k < 16; ++k) px.push_back(static_cast<std::uint8_t>(k / 4 == cls ? 200 : 20));
      lab.push_back(cls);
    }
    REQUIRE(core::write_idx_images(dir_.file("images"), 4, 4, px).ok());
    REQUIRE(core::write_idx_labels(dir_.file("labels"), lab).ok());
  }

  void attach(const std::shared_ptr<net::session>& s) {
    std::weak_ptr<net::session> weak = s;
    s->on_message([this, weak](const net::message& m) {
      auto self = weak.lock();
      if (!self) return;
      on_message(*self, m);
    });
    s->on_blob_received([this, weak](const std::shared_ptr<net::incoming_transfer>&) {
      auto self = weak.lock();
      if (!self) return;
      uploaded = true;
      self->send(net::msg::result{.accepted = true, .code = {}, .reason = {}});
      ask_check(*self);
    });
  }

  // The uploads are in. Survivors: the agent and sa-1; sa-2 dropped. The rogue hub also names sa-1 as dropped.
  void ask_check(net::session& s) {
    request_ = crypto::secagg_unmask_request{.survivors = {"dev-a", "sa-1"}, .dropped = {"sa-2"}, .released = {0}, .signatures = {}, .partners = {}};
    if (rogue_ == rogue::both_shares) request_.dropped.push_back("sa-1");
    auto asked = request_;
    asked.partners = {sa1_pledge_};  // the surviving neighbour's pledge of whom it masked with
    s.send(net::msg::secagg_check{.round = msg_round_, .request = asked});
  }

  // The statistics' first pass as a masked sum: its secure part and the scale every device is asked with.
  net::msg::stats masked_statistics() const {
    net::msg::stats q{.pass = 1, .inputs = 16, .outputs = 4};
    q.secure = net::msg::secure_assign{.params = p_, .segments = {0}, .rounding_key = {}, .upload_size = p_.segments[0].length * 8};
    q.max_examples = 64;
    q.bounds.assign(17, 1e3);
    return q;
  }

  // The agent signed the survivor set: sa-1 signs too (a set of the script's choosing when forging),
  // and the unmasking goes out with the signatures the script says.
  void on_check_reply(net::session& s, const crypto::secagg_signature& agent_signature) {
    check_signature = agent_signature;
    crypto::secagg_unmask_request sa1_set = request_;
    if (rogue_ == rogue::forged_signature) sa1_set.dropped.clear();  // sa-1 signs a set without sa-2
    if (agent_pledge) sa1_set.partners = {*agent_pledge};
    auto key = crypto::signing_key::load(other_device("sa-1").key);
    REQUIRE(key.ok());
    auto sa1_signature = others_[0].check(sa1_set, key.value());
    REQUIRE_MESSAGE(sa1_signature.ok(), (sa1_signature.ok() ? "" : sa1_signature.error().message));
    crypto::secagg_unmask_request req = request_;
    if (rogue_ == rogue::other_set) {
      req.dropped.clear();  // sa-2 "survived" after all: the hub would ask for its seed, having its key
      req.survivors.push_back("sa-2");
    }
    req.signatures = {agent_signature};
    if (rogue_ != rogue::few_signatures) req.signatures.push_back(std::move(sa1_signature).value());
    s.send(net::msg::secagg_unmask{.round = msg_round_, .request = req});
  }

  void on_message(net::session& s, const net::message& m) {
    if (std::holds_alternative<net::msg::hello>(m)) {
      s.send(net::msg::welcome{});
      if (rogue_ == rogue::statistics) return s.send(net::msg::stats{.pass = 1, .inputs = 16, .outputs = 4});
      if (msg_round_ == 0) return s.send(masked_statistics());
      send_assign(s);
    } else if (const auto* k = std::get_if<net::msg::secagg_keys>(&m)) {
      // The roster: the agent, then sa-1 and sa-2 (sa-1's keys spoiled as the script says).
      crypto::secagg_params sa1_params = p_;
      if (rogue_ == rogue::replayed_keys) sa1_params.round = p_.round - 1;  // keys signed for an earlier round
      const crypto::sha256_digest model = k->keys.model;  // what the agent signed: the ASSIGN's digest
      crypto::sha256_digest sa1_model = model;
      if (rogue_ == rogue::other_model) sa1_model[0] ^= 1;
      if (rogue_ == rogue::other_question || rogue_ == rogue::other_scale) {
        // sa-1 was asked about 17 inputs, or (other_scale) with a scale that shrinks its figures to
        // nothing beside the agent's: its keys sign that request's digest, as an agent makes it.
        net::msg::stats other = masked_statistics();
        if (rogue_ == rogue::other_question) other.inputs = 17;
        else other.max_examples = 1u << 24;
        sa1_model = net::sum_request_digest(other);
      }
      others_.push_back(client_for("sa-1", sa1_params, sa1_model));
      if (rogue_ == rogue::revoked_member) {
        const auto& pki = test::test_pki::get();
        auto key = crypto::signing_key::load(pki.revoked.key);
        REQUIRE(key.ok());
        others_.push_back(crypto::secagg_client::create("dev-gone", testing::read_text(pki.revoked.cert), key.value(),
                                                        testing::read_text(pki.ca.cert), p_, {.segments = {0}, .model = model})
                              .value());
      } else {
        others_.push_back(client_for("sa-2", p_, model));
      }
      if (rogue_ == rogue::wide_roster) {
        others_.push_back(client_for("sa-3", p_, model));
        others_.push_back(client_for("sa-4", p_, model));
      }
      crypto::secagg_roster roster{{.keys = k->keys, .segments = {0}}};
      for (auto& o : others_) roster.push_back({.keys = o.keys(), .segments = {0}});
      if (rogue_ == rogue::bad_signature) roster[1].keys.signature[3] ^= std::byte{1};
      roster_ = roster;
      s.send(net::msg::secagg_roster{.round = msg_round_, .roster = roster});
    } else if (const auto* sh = std::get_if<net::msg::secagg_shares>(&m)) {
      // The others share too; the agent's inbox is their boxes to it.
      std::vector<crypto::secagg_box> inbox;
      for (auto& o : others_) {
        auto boxes = o.share_keys(roster_);
        REQUIRE(boxes.ok());
        for (auto& b : boxes.value())
          if (b.to == "dev-a") inbox.push_back(b);
        others_boxes_.push_back(std::move(boxes).value());
      }
      CHECK(sh->boxes.size() == 2);
      // sa-1 masks an input of its own (it signs the survivor set later), from the boxes to it.
      std::vector<crypto::secagg_box> to_sa1;
      for (const auto& b : sh->boxes)
        if (b.to == "sa-1") to_sa1.push_back(b);
      for (std::size_t o = 1; o < others_.size(); ++o)
        for (auto& b : others_boxes_[o])
          if (b.to == "sa-1") to_sa1.push_back(b);
      const std::vector<std::vector<float>> zero{std::vector<float>(p_.segments[0].length, 0.0f)};
      auto sa1_masked = others_[0].mask(to_sa1, zero, crypto::random_key().value());
      REQUIRE_MESSAGE(sa1_masked.ok(), (sa1_masked.ok() ? "" : sa1_masked.error().message));
      sa1_pledge_ = others_[0].masked_with(crypto::signing_key::load(other_device("sa-1").key).value()).value();
      if (rogue_ == rogue::empty_inbox) inbox.clear();
      s.send(net::msg::secagg_inbox{.round = msg_round_, .boxes = inbox});
    } else if (const auto* u = std::get_if<net::msg::update>(&m)) {
      update = *u;
      upload_.resize(u->size);
      in_ = std::make_shared<net::incoming_transfer>(u->transfer, std::span<std::byte>(upload_), u->sha256);
      s.expect_blob(in_);
    } else if (const auto* q = std::get_if<net::msg::stats_reply>(&m)) {
      stats_reply = *q;
      ask_check(s);
    } else if (const auto* w = std::get_if<net::msg::secagg_masked_with>(&m)) {
      agent_pledge = w->pledge;
    } else if (const auto* c = std::get_if<net::msg::secagg_check_reply>(&m)) {
      on_check_reply(s, c->signature);
    } else if (const auto* e = std::get_if<net::msg::evaluation>(&m)) {
      evaluation = *e;
      ask_check(s);
    } else if (const auto* r = std::get_if<net::msg::secagg_unmask_reply>(&m)) {
      unmask_reply = *r;
      done();
    } else if (const auto* f = std::get_if<net::msg::refuse>(&m)) {
      refused = *f;
      done();
    }
  }

  void send_assign(net::session& s) {
    if (rogue_ == rogue::diverging) std::fill(params_.begin(), params_.end(), 1e38f);
    blob_.resize(core::encoded_bytes(arch_, core::codec_kind::f32));
    REQUIRE(core::encode(arch_, core::codec_kind::f32, params_, blob_).ok());
    const net::digest sha = crypto::sha256_of(blob_);
    core::training_task task{.arch = arch_, .steps = 2, .batch = 4, .sgd = {.learning_rate = 0.05f}, .normalization = nullptr};
    if (p_.summands > 0) task.clip_norm = p_.clip;  // a private round clips the change
    net::msg::assign a{.round = 1, .widths = net::hidden_widths(arch_), .hyper_json = net::task_to_json(task), .transfer = 77,
                       .size = blob_.size(), .blob_codec = core::codec_kind::f32, .sha256 = sha};
    if (rogue_ != rogue::clear_round)
      a.secure = net::msg::secure_assign{.params = p_, .segments = {0}, .rounding_key = {},
                                         .upload_size = p_.segments[0].length * 4};
    if (rogue_ == rogue::masked_evaluation) {
      a.evaluate = true;
      a.secure->upload_size = p_.segments[0].length * 8;
      a.max_examples = 64;
      a.loss_bound = 1e6;
    }
    s.send(a);
    out_ = std::make_shared<net::outgoing_transfer>(a.transfer, std::span<const std::byte>(blob_), sha);
    s.send_blob(out_);
  }

  rogue rogue_;
  std::uint64_t msg_round_ = 1;  // the round the SECAGG_* messages name
  const testing::temp_dir& dir_;
  boost::asio::io_context io_;
  std::shared_ptr<net::server> server_;
  std::uint16_t port_ = 0;
  std::unique_ptr<edge::agent> agent_;
  core::model_spec model_;
  core::mlp_arch arch_;
  std::vector<float> params_;
  crypto::secagg_params p_;
  std::vector<crypto::secagg_client> others_;
  std::vector<std::vector<crypto::secagg_box>> others_boxes_;
  crypto::secagg_unmask_request request_;
  crypto::secagg_masked_with sa1_pledge_;
  crypto::secagg_roster roster_;
  std::vector<std::byte> blob_, upload_;
  std::shared_ptr<net::outgoing_transfer> out_;
  std::shared_ptr<net::incoming_transfer> in_;
};

}  // namespace

TEST_CASE("secure agent: with an honest hub it masks its update and reveals the shares asked for") {
  testing::temp_dir dir("secure_agent_ok");
  scripted_hub hub(rogue::none, dir);
  hub.run();
  INFO(hub.agent_log);
  CHECK(!hub.refused);
  CHECK(hub.uploaded);
  REQUIRE(hub.unmask_reply.has_value());
  CHECK(hub.unmask_reply->reply.id == "dev-a");
  CHECK(hub.unmask_reply->reply.seeds.size() == 2);  // the survivors' self-mask seeds (its own and sa-1's)
  CHECK(hub.unmask_reply->reply.keys.size() == 1);   // the dropped device's key
  // It signed the survivor set it was asked to sign, with its certificate's key.
  REQUIRE(hub.check_signature.has_value());
  CHECK(hub.check_signature->id == "dev-a");
  // Before its masked update it pledged whom it masked with: every neighbour (sa-1 and sa-2, whose boxes
  // it took), none without.
  REQUIRE(hub.agent_pledge.has_value());
  CHECK(hub.agent_pledge->id == "dev-a");
  CHECK(hub.agent_pledge->without.empty());
  // Its UPDATE tells the hub nothing of its data: no training loss, no count of clipped values (its own
  // log has them).
  REQUIRE(hub.update.has_value());
  CHECK_FALSE(hub.update->loss.has_value());
  CHECK(hub.update->clipped == 0u);
  CHECK(testing::contains(hub.agent_log, "masked update of"));
  CHECK(testing::contains(hub.agent_log, "(loss "));
  const auto signer = crypto::verifying_key::from_certificate_pem(testing::read_text(test::test_pki::get().dev_a.cert),
                                                                  testing::read_text(test::test_pki::get().ca.cert));
  REQUIRE(signer.ok());
  const crypto::secagg_unmask_request asked{.survivors = {"dev-a", "sa-1"}, .dropped = {"sa-2"}, .released = {0}, .signatures = {}, .partners = {}};
  CHECK(signer.value().verify(crypto::secagg_check_message(4242, asked), hub.check_signature->signature));
  auto other = asked;
  other.dropped.clear();
  CHECK_FALSE(signer.value().verify(crypto::secagg_check_message(4242, other), hub.check_signature->signature));
}

namespace {

// Runs the agent against a hub that misbehaves as `r` says: the agent must refuse with edge.secure_step
// and a reason holding `reason`, after uploading (the unmasking's refusal) or before (the roster's).
void check_refusal(rogue r, const char* tag, bool uploaded, const std::string& reason, const edge::privacy_policy& policy = {},
                   const std::string& code = "edge.secure_step", edge::secure_mode mode = edge::secure_mode::allow) {
  testing::temp_dir dir(tag);
  scripted_hub hub(r, dir);
  hub.policy = policy;
  hub.mode = mode;
  hub.run();
  INFO(hub.agent_log);
  CHECK(hub.uploaded == uploaded);
  CHECK(!hub.unmask_reply);
  REQUIRE(hub.refused.has_value());
  CHECK(hub.refused->code == code);
  CHECK_MESSAGE(hub.refused->reason.find(reason) != std::string::npos, hub.refused->reason);
}

}  // namespace

TEST_CASE("rogue hub: a device named both survivor and dropped, for both kinds of its share") {
  check_refusal(rogue::both_shares, "secure_agent_both", true, "both the seed and the key of sa-1");
}

TEST_CASE("secure agent refusal: a roster whose key signature does not verify") {
  check_refusal(rogue::bad_signature, "secure_agent_sig", false, "device sa-1 did not sign these keys, segments and model");
}

TEST_CASE("rogue hub: a roster replayed from an earlier round") {
  // sa-1's signature is genuine, but over round 4241: for this round it does not verify.
  check_refusal(rogue::replayed_keys, "secure_agent_replay", false, "device sa-1 did not sign these keys, segments and model for round 4242");
}

TEST_CASE("rogue hub: an unmasking for another survivor set than the one the device signed") {
  // The agent signed {dev-a, sa-1} surviving and sa-2 dropped; the unmasking names sa-2 a survivor,
  // whose seed the hub would then get beside the key it asked others for.
  check_refusal(rogue::other_set, "rogue_other_set", true, "the unmasking asks for another survivor set than the one this device signed");
}

TEST_CASE("rogue hub: an unmasking with fewer survivors' signatures of the set than the threshold") {
  check_refusal(rogue::few_signatures, "rogue_few_signatures", true,
                "carries 1 valid signatures of its survivor set by this device and its neighbours, below the threshold 2");
}

TEST_CASE("rogue hub: an inconsistent survivor set, another device having signed a different one") {
  // sa-1 signed a set without sa-2: the hub showed the two devices different survivors. Its genuine
  // signature does not verify over the agent's set.
  check_refusal(rogue::forged_signature, "rogue_forged", true, "below the threshold 2; not counted: sa-1 (did not sign this set)");
}

TEST_CASE("rogue hub: different models to the devices of one group") {
  // sa-1 signed the digest of another model than the agent's (the model inconsistency attack): the
  // agent sees it in the roster and shares nothing.
  check_refusal(rogue::other_model, "rogue_model", false, "device sa-1, of this device's group, was sent another model than this device");
}

// ---- a hub that deviates: the device's own policy (edge/privacy_policy.hpp) refuses, naming why

TEST_CASE("rogue hub: an empty share inbox, so the device would mask with its self mask alone") {
  check_refusal(rogue::empty_inbox, "rogue_inbox", false, "shares from 0 of this device's 2 neighbours arrived, below the 1");
}

TEST_CASE("rogue hub: a roster with a revoked device's keys") {
  check_refusal(rogue::revoked_member, "rogue_revoked", false,
                "the roster's certificate for dev-gone: device certificate revoked by the CA's revocation list");
}

TEST_CASE("rogue hub: a threshold below a majority of the device's holders") {
  // Five holders (four neighbours and itself): two shares would recover its secrets; a majority is three.
  check_refusal(rogue::wide_roster, "rogue_threshold", false,
                "the round's threshold 2 lets 2 of the 5 holders of this device's secrets (its 4 neighbours and itself) recover them; "
                "its policy asks for 3 (a majority",
                {}, "edge.privacy_policy");
}

TEST_CASE("rogue hub: a threshold below the device's privacy.min_threshold") {
  check_refusal(rogue::none, "rogue_min_threshold", false, "the round's threshold 2 is below this device's privacy.min_threshold 3",
                {.min_threshold = 3}, "edge.privacy_policy");
}

TEST_CASE("rogue hub: a sum released from fewer devices than the device's privacy.min_group") {
  // Fewer than two is refused by the wire itself (net/secagg_messages); the policy raises the floor.
  check_refusal(rogue::small_group, "rogue_group", false,
                "segment 0's sum may be released from 2 device(s) (its min_aggregate), below this device's privacy.min_group 3",
                {.min_group = 3}, "edge.privacy_policy");
}

TEST_CASE("rogue hub: the DP noise removed from a private round") {
  check_refusal(rogue::noise_removed, "rogue_no_noise", false, "the round asks the devices for no noise",
                {.min_noise_multiplier = 1.0}, "edge.privacy_policy");
}

TEST_CASE("rogue hub: the DP noise lowered below the device's minimum") {
  check_refusal(rogue::noise_lowered, "rogue_low_noise", false, "carries a noise multiplier of 0.5 ",
                {.min_noise_multiplier = 1.0}, "edge.privacy_policy");
}

TEST_CASE("rogue hub: a round in the clear for a device that asks for noise") {
  check_refusal(rogue::clear_round, "rogue_clear", false, "the round uploads in the clear, so only the hub could add the noise",
                {.min_noise_multiplier = 1.0}, "edge.privacy_policy");
}

TEST_CASE("rogue hub: feature statistics asked of a device whose secure_aggregation is 'require'") {
  check_refusal(rogue::statistics, "rogue_stats", false, "the statistics would leave this device in the clear", {},
                "edge.privacy_policy", edge::secure_mode::require);
  check_refusal(rogue::statistics, "rogue_stats_off", false, "this device's privacy.statistics is off",
                {.statistics = edge::answer_mode::off}, "edge.privacy_policy");
}

TEST_CASE("secure agent: its statistics reach the hub as a masked vector only, and it unmasks the sum") {
  testing::temp_dir dir("secure_agent_stats");
  scripted_hub hub(rogue::masked_statistics, dir);
  hub.mode = edge::secure_mode::require;  // masked statistics are what 'require' allows
  hub.run();
  INFO(hub.agent_log);
  CHECK_FALSE(hub.refused.has_value());
  REQUIRE(hub.stats_reply.has_value());
  REQUIRE(hub.unmask_reply.has_value());  // it signed the survivor set and answered the unmasking
  CHECK(testing::contains(hub.agent_log, "statistics (pass 1) masked and sent: the hub receives only the sum over the devices that unmask"));
  // What the hub received: the pass and the masked ring values, nothing else — no count, no sum, no
  // histogram, no per-example min or max.
  const net::msg::stats_reply& r = *hub.stats_reply;
  const auto as_json = nlohmann::json::parse(net::to_json(r));
  CHECK(as_json.size() == 2);
  CHECK(as_json.contains("pass"));
  CHECK(as_json.contains("masked"));
  CHECK(r.examples == 0);
  CHECK((r.sum.empty() && r.min.empty() && r.max.empty() && r.label_counts.empty()));
  // The device's vector lies in [-1, 1] (its count is 64 of a scale of 64: exactly 1). Read alone, as
  // the ring's fixed point, the masked vector is noise: each value lands in [-1, 1] with probability
  // about 2^-11, so not even a fifth of them do, and the count is not 1.
  const std::size_t length = core::sums_vector_length(16, core::task_kind::classification, 4);
  REQUIRE(r.masked.size() == length * 8);
  const auto y = crypto::secagg_unpack(r.masked, 64).value();
  std::vector<double> read(y.size());
  crypto::fixed_point::create(1.0, 64, 3).value().decode_sum(y, read);
  std::size_t in_range = 0;
  for (const double v : read) in_range += std::abs(v) <= 1.0 ? 1 : 0;
  CHECK(in_range < length / 5);
  CHECK(std::abs(read[0] - 1.0) > 1e-3);
}

TEST_CASE("rogue hub: statistics whose neighbours were asked another question") {
  check_refusal(rogue::other_question, "rogue_other_question", false, "device sa-1, of this device's group, was sent another model than this device (or asked another question)", {},
                "edge.secure_step", edge::secure_mode::require);
}

TEST_CASE("rogue hub: statistics whose neighbours were given another scale, to single one device out of the sum") {
  check_refusal(rogue::other_scale, "rogue_other_scale", false,
                "device sa-1, of this device's group, was sent another model than this device (or asked another question)", {},
                "edge.secure_step", edge::secure_mode::require);
}

TEST_CASE("secure agent: its score of the model reaches the hub as a masked vector only, and it unmasks the sum") {
  testing::temp_dir dir("secure_agent_evaluation");
  scripted_hub hub(rogue::masked_evaluation, dir);
  hub.run();
  INFO(hub.agent_log);
  CHECK_FALSE(hub.refused.has_value());
  // Round, transfer and the three masked ring values: no count, no loss, no correct predictions.
  REQUIRE(hub.evaluation.has_value());
  CHECK(hub.evaluation->masked.size() == core::k_score_vector_length * 8);
  CHECK((hub.evaluation->examples == 0 && hub.evaluation->correct == 0 && hub.evaluation->loss_sum == 0.0));
  CHECK(nlohmann::json::parse(net::to_json(*hub.evaluation)).size() == 3);
  CHECK(testing::contains(hub.agent_log, "the evaluation of round 1 masked and sent"));
  REQUIRE(hub.unmask_reply.has_value());
}

TEST_CASE("rogue hub: masked statistics with a threshold below the device's privacy.min_threshold") {
  check_refusal(rogue::masked_statistics, "rogue_stats_threshold", false, "the round's threshold 2 is below this device's privacy.min_threshold 3",
                {.min_threshold = 3}, "edge.privacy_policy");
}

TEST_CASE("secure agent: an honest private round meets the device's noise minimum and completes") {
  // The counterpart of the noise cases: σ 1 exactly, each device's share over sums of 2.
  testing::temp_dir dir("secure_agent_noise_ok");
  scripted_hub hub(rogue::honest_private, dir);
  hub.policy = {.min_noise_multiplier = 1.0};
  hub.mode = edge::secure_mode::require;
  hub.run();
  INFO(hub.agent_log);
  CHECK(!hub.refused);
  CHECK(hub.uploaded);
  REQUIRE(hub.unmask_reply.has_value());
  CHECK(hub.agent_log.find("share of the privacy noise") != std::string::npos);
}

TEST_CASE("rogue hub: rounds past the device's privacy.max_epsilon, counted by the device whatever the hub restarts") {
  // One honest private round spends ε₁ against the hub, recorded in the device's own ledger. A hub
  // that starts over (a new process, its own accounting reset) asks again: with privacy.max_epsilon at
  // ε₁ the device's ledger refuses the second round by name. A fresh ledger under the same limit takes
  // it: the refusal is the ledger's, not the limit's alone.
  testing::temp_dir dir("secure_agent_budget");
  const std::string ledger = dir.file("privacy-ledger.json");
  double first = 0;
  {
    scripted_hub hub(rogue::honest_private, dir);
    hub.policy = {.max_epsilon = 1e6, .ledger = ledger};
    hub.run();
    INFO(hub.agent_log);
    CHECK(!hub.refused);
    REQUIRE(hub.unmask_reply.has_value());
    const auto j = nlohmann::json::parse(testing::read_text(ledger));
    CHECK(j.at("rounds") == 1);
    first = j.at("epsilon").get<double>();
    CHECK(first > 0);
    CHECK(std::isfinite(first));
  }
  {
    testing::temp_dir again("secure_agent_budget_again");
    scripted_hub hub(rogue::honest_private, again);
    hub.policy = {.max_epsilon = first * (1 + 1e-9), .ledger = ledger};
    hub.run();
    INFO(hub.agent_log);
    CHECK(!hub.uploaded);
    REQUIRE(hub.refused.has_value());
    CHECK(hub.refused->code == "edge.privacy_policy");
    CHECK_MESSAGE(hub.refused->reason.find("past its privacy.max_epsilon") != std::string::npos, hub.refused->reason);
    CHECK(nlohmann::json::parse(testing::read_text(ledger)).at("rounds") == 1);  // nothing more spent
  }
  {
    testing::temp_dir fresh("secure_agent_budget_fresh");
    scripted_hub hub(rogue::honest_private, fresh);
    hub.policy = {.max_epsilon = first * (1 + 1e-9), .ledger = fresh.file("privacy-ledger.json")};
    hub.run();
    INFO(hub.agent_log);
    CHECK(!hub.refused);
    CHECK(hub.unmask_reply.has_value());
  }
}

TEST_CASE("rogue hub: a round in the clear for a device with a privacy.max_epsilon") {
  check_refusal(rogue::clear_round, "rogue_clear_budget", false, "spends all of this device's privacy.max_epsilon",
                {.max_epsilon = 5.0}, "edge.privacy_policy");
}

TEST_CASE("rogue hub: feature statistics asked of a device with a privacy.max_epsilon") {
  check_refusal(rogue::statistics, "rogue_stats_budget", false, "which no privacy.max_epsilon (5) can count", {.max_epsilon = 5.0},
                "edge.privacy_policy");
}

TEST_CASE("privacy budget: the ledger survives a restart, refuses past the limit, and a file that is not one stops the device") {
  testing::temp_dir dir("privacy_budget");
  const std::string file = dir.file("ledger.json");
  crypto::secagg_params p;
  p.bits = 32;
  p.clip = 1.0;
  p.threshold = 2;
  p.summands = 1024;
  const auto limit = static_cast<double>(crypto::fixed_point::create(p.clip, p.bits, p.summands).value().limit());
  p.noise = limit * limit / 2.0;  // σ 1 over sums of 2
  const auto m = edge::round_mechanism(p, 2, 1000);
  REQUIRE(m.ok());
  core::rdp_accountant reference;
  for (int i = 0; i < 3; ++i) reference.compose(1.0, m.value(), 1);
  {
    auto b = edge::privacy_budget::open(file, 1e6, 1e-5);
    REQUIRE(b.ok());
    for (int i = 0; i < 3; ++i) REQUIRE(b.value()->spend(m.value()).ok());
  }
  auto reopened = edge::privacy_budget::open(file, reference.epsilon(1e-5).epsilon * (1 + 1e-9), 1e-5);
  REQUIRE(reopened.ok());
  CHECK(reopened.value()->rounds() == 3);
  CHECK(reopened.value()->epsilon() == doctest::Approx(reference.epsilon(1e-5).epsilon).epsilon(1e-12));
  const auto past = reopened.value()->check(m.value());
  REQUIRE_FALSE(past.ok());
  CHECK(past.error().message.find("3 rounds so far), past its privacy.max_epsilon") != std::string::npos);
  CHECK_FALSE(reopened.value()->spend(m.value()).ok());
  CHECK(reopened.value()->rounds() == 3);

  testing::write_bytes(file, "{\"rounds\": 0}");
  const auto foreign = edge::privacy_budget::open(file, 10, 1e-5);
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.error().message.find(file + " (privacy.ledger) is not this device's privacy ledger") != std::string::npos);
}

TEST_CASE("secure agent: a device that samples itself out sends its noise alone and counts the round at the rate it drew at") {
  // The same private round twice, with fresh ledgers: once the hub's sample (the device took part for
  // sure: the unsampled release), once with the devices drawing themselves at 1e-9 (it almost surely
  // drew itself out; the release is the sampled one, whoever drew).
  testing::temp_dir dir("secure_agent_self_sampled");
  double spent[2] = {0, 0};
  for (const bool self : {false, true}) {
    CAPTURE(self);
    scripted_hub hub(self ? rogue::self_sampled : rogue::honest_private, dir);
    const std::string ledger = dir.file(self ? "self.json" : "hub.json");
    hub.policy = {.max_epsilon = 1e6, .ledger = ledger};
    hub.run();
    INFO(hub.agent_log);
    CHECK(!hub.refused);
    CHECK(hub.uploaded);
    REQUIRE(hub.unmask_reply.has_value());
    CHECK(testing::contains(hub.agent_log, "did not draw itself into the round's sample") == self);
    spent[self ? 1 : 0] = nlohmann::json::parse(testing::read_text(ledger)).at("epsilon").get<double>();
  }
  CHECK(spent[1] > 0);
  CHECK(spent[1] < spent[0] / 10);  // near the floor the finite orders leave (log(1/δ)/(α_max − 1))
}

TEST_CASE("rogue hub: a model and rate chosen to make training diverge, so that a refusal would tell") {
  // In a private round a refusal would leave in the clear and outside the device's ledger; the
  // device sends its noise alone instead, spends the round, and keeps the reason in its own log.
  testing::temp_dir dir("secure_agent_diverging");
  scripted_hub hub(rogue::diverging, dir);
  hub.policy = {.max_epsilon = 1e6, .ledger = dir.file("ledger.json")};
  hub.run();
  INFO(hub.agent_log);
  CHECK(!hub.refused);
  CHECK(hub.uploaded);
  REQUIRE(hub.unmask_reply.has_value());
  REQUIRE(hub.update.has_value());
  CHECK_FALSE(hub.update->loss.has_value());
  CHECK(testing::contains(hub.agent_log, "training failed"));
  CHECK(testing::contains(hub.agent_log, "noise alone"));
  CHECK(nlohmann::json::parse(testing::read_text(dir.file("ledger.json"))).at("rounds") == 1);
}
