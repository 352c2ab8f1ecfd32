// tessera/rounds/engine.hpp — the one implementation of a federated round, apart from any socket.
//
// An engine holds the full model and runs rounds for whatever devices its driver offers: the hub
// (hub/) drives it with network sessions, tessera-sim (rounds/sim/) with in-process devices. Both get
// the same plan, the same checks and the same sums, so the same seed and shards give the same model.
//
//   begin_round(offers)   plan: devices in natural order of their ids ("device-2" before "device-10");
//                         each one's capacity is the largest subnet its reported budget holds
//                         (core::capacity_for_budget, the core's bytes_needed formula) unless the
//                         driver fixes it; a device that cannot hold min_width neurons per layer (or
//                         the whole model, for FedAvg) is left out with its reason. Seeds: core/base/seeds.hpp.
//   encode_download(a)    the subnet in the assignment's codec, into the driver's memory.
//   sent / downloaded / announce / receive / refuse / reject
//                         what happened to an assignment; the engine moves its state (assignment.hpp)
//                         and checks the claim and the values of an update before accepting it.
//   close_round(v)        open assignments become stragglers (their neurons keep their values); the
//                         accepted updates are combined in device order (so the sums are
//                         reproducible whatever order uploads arrived in); the model is evaluated on
//                         `v` when due and early stopping decided. Returns the figures. A round no
//                         update reached (outside DP, whose noise is a release) does not count: the
//                         model stays, last_faults().untrained says why, and the same round runs next;
//                         k_refused_rounds_limit of them in a row that every device refused or had
//                         rejected fail with errc::nobody_trains.
//   plan_evaluation(...)  after a round that evaluates: which devices score the whole model on their
//   note_federated(s, m)  validation splits (their budget holds it for inference), and their scores
//                         added in device order into the round's figures (and early stopping's).
//
// How updates are combined is the run's aggregation (aggregation.hpp), one kind per file: plain (the
// mean weighted by examples, the median or the trimmed mean), secure (masked uploads; the hub learns
// segment sums) and private (differential privacy around either). The engine is the loop around it and
// never asks which kind it holds; the drivers reach the secure and private parts through the accessors
// below. Secure aggregation: IST plans replicate every group; the engine holds the round's protocol
// server, which the hub drives through its steps (keys, boxes, masked inputs, unmasking) before
// close_round; the simulator adds its devices' unmasked encodings instead (receive_encoded), the same
// sums by construction. A segment with too few contributors is withheld and its parameters keep their
// values, as stragglers' do.
//
// Accepted uploads are added to the round's sums as soon as every device before them has ended, so a
// driver that reports in device order (the simulator) holds one subnet at a time.
//
// Server optimizer (config.server_optimizer, core/math/server_optimizer.hpp): after assembly close_round
// takes (assembled − the model the round started from) as a pseudo-gradient and steps from the round's
// start with FedAvgM, FedAdam or FedYogi, on the coordinates the round reached: an accepted update's
// subnet (plain rounds, robust aggregates included), a released segment (secure aggregation), every
// coordinate a group trains (differential privacy with the hub's noise: the noised release). The
// others keep their value and their moments. The default (kind none, lr 1) takes no step. A resumed
// run hands the checkpoint's state to restore_server_optimizer before its first round; a kind with
// moments refuses to begin a round after round 0 without it.
//
//   rounds::engine e(config, initial_params, /*completed=*/0);
//   while (!e.finished()) {
//     TESSERA_TRY(e.begin_round(offers));
//     for (auto& a : e.assignments()) { ... e.sent(a); ... e.announce(a, claim); e.receive(a, blob); }
//     auto m = e.close_round(validation);
//   }
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/input_normalization.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/server_optimizer.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/rounds/aggregation.hpp"
#include "tessera/rounds/assignment.hpp"
#include "tessera/rounds/metrics.hpp"
#include "tessera/rounds/natural_order.hpp"
#include "tessera/rounds/offer.hpp"
#include "tessera/rounds/run_config.hpp"

namespace tessera::rounds {

class secure_aggregation;
class private_aggregation;
struct checkpoint;
struct device_record;

// What an UPDATE says about the upload it announces.
struct update_claim {
  std::uint64_t round = 0;
  std::uint64_t clipped = 0;                 // plain DP rounds: 1 if the change was clipped (a secure round's: ignored)
  std::uint64_t examples = 0;
  std::uint64_t steps = 0;
  std::optional<double> loss;                // a plain round's; a secure round's update tells none
  std::uint64_t size = 0;                    // bytes
  core::codec_kind codec = core::codec_kind::f32;
};

// Early stopping's memory: the best score so far (accuracy for classification, −loss for regression),
// evaluations since it, and whether patience ran out. Checkpointed, so a resumed run stops alike.
struct early_stop {
  bool have_best = false;
  double best_score = 0;
  std::int64_t evals_since_best = 0;
  bool stopped = false;
};

// How the assignments of the last closed round ended, besides accepted.
struct round_faults {
  std::size_t stragglers = 0, refused = 0, rejected = 0;
  std::uint64_t resent_bytes = 0;
  // No update reached the model (and the round released no noise): the round does not count, and the
  // same round runs again. A model nobody trained is not progress.
  bool untrained = false;
  std::string why_untrained{};  // how its devices ended, the first few by name
};

// Untrained rounds in a row in which every registered device was asked and refused or had its update
// rejected, before the run gives up (engine::close_round then fails with errc::nobody_trains).
// Stragglers do not count toward it (a fleet that drops off comes back), nor do rounds that asked only
// some of the fleet (max_devices), nor DP rounds (they count: their noise is a release).
inline constexpr std::size_t k_refused_rounds_limit = 3;

// How the last closed round's secure aggregation ended.
struct secure_outcome {
  std::size_t segments = 0, released = 0;
  std::size_t dropped = 0;                   // devices assigned whose masked input is not in the sums
  std::uint64_t clipped = 0;                 // the simulator's own devices: values their clip saturated
  std::optional<double> fitted_centred;      // adaptive clipping: fitting changes − contributors / 2, noised
  std::string withheld;                      // why segments were withheld (empty: none)
};

// The bounds an update's change is held to (run_config::max_update_norm, max_update_abs).
struct update_bounds {
  double norm = 0;
  double abs = 0;
};

// Differential privacy under secure aggregation (DESIGN §6; engine_dp.cpp): each device adds its share
// of the noise in the ring, whose scale and shares follow from the configuration, the model's size
// and the population alone, so that ε is known before a round. `summands`: the ring's fixed_point
// summands; `limit`: steps per clip; `mechanism`: what the accountant composes each round, whose
// variance a released sum carries (each device adds its share of it: secure_aggregation.cpp).
// With adaptive clipping `fitted_per_clip` (× the clip) is what a device's count value carries
// (crypto::secagg_params::fitted_value) and `change_sigma` the changes' raised noise multiplier.
struct private_ring {
  std::uint64_t summands = 0;
  double limit = 0;
  core::skellam_mechanism mechanism;
  double fitted_per_clip = 0;
  double change_sigma = 0;
};
[[nodiscard]] core::result<private_ring> make_private_ring(const run_config& c, std::size_t params, std::size_t population);

class engine {
 public:
  // `params`: the full model to start from; `completed`: rounds already done (from a checkpoint).
  engine(const run_config& config, std::vector<float> params, std::int64_t completed, early_stop stopping = {});
  ~engine();
  engine(engine&&) noexcept;
  engine& operator=(engine&&) noexcept;

  [[nodiscard]] const run_config& config() const noexcept { return config_; }
  [[nodiscard]] const core::mlp_arch& full() const noexcept { return full_; }
  [[nodiscard]] const core::mlp_arch& full_arch() const noexcept { return full_; }
  [[nodiscard]] std::span<const float> params() const noexcept { return params_; }
  [[nodiscard]] std::int64_t completed() const noexcept { return completed_; }
  [[nodiscard]] std::int64_t current_round() const noexcept { return completed_ + 1; }  // 1-based
  [[nodiscard]] bool in_round() const noexcept { return in_round_; }
  [[nodiscard]] bool finished() const noexcept { return completed_ >= config_.rounds || stopping_.stopped; }
  [[nodiscard]] std::uint64_t plan_seed() const noexcept { return plan_seed_; }
  [[nodiscard]] const early_stop& stopping() const noexcept { return stopping_; }
  [[nodiscard]] const round_faults& last_faults() const noexcept { return faults_; }
  // The most devices a round takes (config.devices_per_round, the driver's cap; 0: all offered).
  [[nodiscard]] std::size_t cohort_size() const noexcept;
  // A uniformly random cohort_size() of `offers` (all of them when fewer), in natural order of their ids,
  // keyed by the round and `purpose`: begin_round draws a plain round's cohort with it, the hub the
  // devices it asks for statistics or an evaluation.
  [[nodiscard]] core::result<std::vector<device_offer>> draw_cohort(std::vector<device_offer> offers, std::string_view purpose) const;
  // What begin_round decided that an operator would not expect, for the driver to log (each said once
  // a run): one of the last whole_model_rounds rounds in which no device of the round holds the whole
  // model, which therefore trains subnets; SLT's stage as it begins. Taking them empties the list.
  [[nodiscard]] std::vector<std::string> take_notes() { return std::exchange(notes_.pending, {}); }

  // The model's input normalization (model.input_normalization: standardize): empty until the fleet's
  // statistics are in (rounds/statistics.hpp); rounds cannot begin before. Every task carries it and
  // evaluation applies it.
  [[nodiscard]] bool needs_statistics() const noexcept {
    return config_.model.input_normalization == core::input_normalization_kind::standardize && normalization_->empty();
  }
  [[nodiscard]] const core::input_normalization& normalization() const noexcept { return *normalization_; }
  // The fleet's statistics behind it (counts, devices: stats_gathering::summary), for checkpoints.
  [[nodiscard]] const nlohmann::json& statistics() const noexcept { return statistics_; }
  // Sets both (one value per input); only while no round is open.
  [[nodiscard]] core::result<void> set_normalization(core::input_normalization n, nlohmann::json statistics = {});

  // The codec a device gets: the configured one if it speaks it, else f32.
  [[nodiscard]] core::codec_kind codec_for(const device_offer& offer) const noexcept;
  // How the device is sent, and holds, a stage's frozen layers: slt.frozen_codec if it speaks it, else f32.
  [[nodiscard]] core::codec_kind frozen_codec_for(const device_offer& offer) const noexcept;
  // One of the last whole_model_rounds rounds with a device whose budget holds the whole model: keeps
  // those devices in `taking` (the full plan then needs no capacities), moves the others to `excluded`
  // and returns true.
  [[nodiscard]] bool whole_model_round(std::vector<device_offer>& taking, std::span<const double> capacities,
                                       std::vector<excluded_device>& excluded) const;
  // The share of every hidden layer a device can train, in (0, 1], or why it cannot take part. SLT:
  // the share of the round's stage's layer.
  [[nodiscard]] core::result<double> capacity(const device_offer& offer) const;
  // Whether a device can ever take part (the hub's door): capacity(offer), or for SLT its capacity in
  // the first stage from this round on that it can train; the current stage's refusal if none.
  [[nodiscard]] core::result<double> admissible(const device_offer& offer) const;
  // SLT: fails (errc::no_devices) naming the first of `offers` that cannot train a stage from the next
  // round on, and why (the simulator, whose devices take every round, asks before round 1).
  [[nodiscard]] core::result<void> check_stages(std::span<const device_offer> offers) const;

  // Plans the next round for `offers` (any order) and prepares every assignment. Returns the devices
  // left out, with reasons; fails (errc::no_devices) if nobody can take part.
  [[nodiscard]] core::result<std::vector<excluded_device>> begin_round(std::vector<device_offer> offers);
  [[nodiscard]] std::span<assignment> assignments() noexcept { return assignments_; }
  [[nodiscard]] std::span<const assignment> assignments() const noexcept { return assignments_; }
  // The device's assignment in the open round, or null.
  [[nodiscard]] assignment* find(std::string_view device) noexcept;
  [[nodiscard]] const assignment* find(std::string_view device) const noexcept;

  // What a device needs to train the whole model, at the run's codec: its arena with `rows` rows in
  // memory (0: memory_rows(), the micro-batch's when there is one) plus what a step takes beside it
  // (core::beside_arena). A budget below it trains subnets only.
  [[nodiscard]] std::size_t whole_model_bytes(std::int64_t rows = 0) const noexcept;
  // Secure aggregation in the open round: its parameters (segments, ring, clip, the sharing threshold)
  // and the protocol's server, which the hub drives; `secure()` says whether the run uses it.
  [[nodiscard]] bool secure() const noexcept { return config_.secure_aggregation.enabled; }
  [[nodiscard]] const crypto::secagg_params& secagg_params() const;
  [[nodiscard]] crypto::secagg_server& secagg_server();
  [[nodiscard]] const secure_outcome& last_secure() const noexcept;
  // Whether the open round runs the protocol (a private round with too few devices sampled does not).
  [[nodiscard]] bool secure_round_open() const noexcept;
  // Segments a device's masked input covers: its group's and the shared parameters' (IST), or one.
  [[nodiscard]] std::size_t secure_segments() const noexcept { return config_.strategy == strategy_kind::ist ? 2 : 1; }
  // A device's weight in the sums: its examples over the most its task allows (steps × batch).
  [[nodiscard]] static double secure_weight(const assignment& a, std::uint64_t examples) noexcept;
  // The simulator's devices: an announced assignment's unmasked encoding (crypto::secagg_encode for
  // the round's assignments as the roster), in place of receive.
  [[nodiscard]] core::result<void> receive_encoded(assignment& a, const crypto::secagg_encoded& e);

  // Differential privacy (config.dp, DESIGN §6; rounds/src/engine_dp.cpp). `population`: the registered
  // devices the fixed denominators count (the hub's registry; dp.population overrides it). The hub
  // draws each round's sampling and noise from the CSPRNG; the simulator, seeded, from the run's seed.
  [[nodiscard]] bool private_rounds() const noexcept { return config_.dp.enabled; }
  void set_population(std::size_t registered) noexcept;
  // The most devices a round takes (the hub's max_devices; 0: no bound beyond devices_per_round): the
  // driver offers every ready device, and the round's cohort — or, in a private round, its sample — is
  // a uniformly random subset of the smaller bound, never the first devices by id.
  void set_round_cap(std::size_t most) noexcept;
  // The simulator: cohorts, DP's sampling and noise drawn from the run's seed (the hub: the CSPRNG).
  void use_seeded_draws() noexcept;
  [[nodiscard]] const core::rdp_accountant& privacy() const noexcept;
  // With the devices' noise, the accountant against the hub (which drew the sample, so nothing is
  // amplified against it); std::nullopt otherwise.
  [[nodiscard]] std::optional<core::rdp_accountant> privacy_against_hub() const;
  // `clip`: the adaptive clip reached (0: dp.clip); `against_hub`: privacy_against_hub's state.
  void restore_privacy(core::rdp_accountant a, double clip = 0, std::optional<core::rdp_accountant> against_hub = std::nullopt) noexcept;
  // The clip the next round's changes get (dp.clip, or where adaptive clipping has moved it).
  [[nodiscard]] double dp_clip() const noexcept;
  // The ring of a private secure round for `population` registered devices (make_private_ring).
  [[nodiscard]] core::result<private_ring> private_ring_for(std::size_t population) const;
  // ε spent so far at dp.delta (+infinity without noise), against the model's users; and with the
  // devices' noise against the hub (std::nullopt otherwise).
  [[nodiscard]] double epsilon() const;
  [[nodiscard]] std::optional<double> epsilon_hub() const;
  // Why the run stopped for its privacy budget (empty: it did not).
  [[nodiscard]] const std::string& privacy_stop() const noexcept;

  // The run's state after the last closed round, as a checkpoint keeps it (checkpoint.hpp): the
  // model, the rounds done, early stopping, the input normalization and its statistics, the privacy
  // accountant and clip, the server optimizer's moments; `registry`: the driver's devices.
  [[nodiscard]] checkpoint save(std::span<const device_record> registry) const;
  // The inverse of save, on an engine that has run no round: the run continues where the checkpoint's
  // ended. Fails (discard the engine then) with errc::checkpoint_mismatch for a checkpoint of another run (seed,
  // strategy, a model of another size, private rounds with no accountant), errc::server_state or
  // errc::bad_statistics for state that does not fit the configuration.
  [[nodiscard]] core::result<void> restore(checkpoint c);

  // The server optimizer and its state (moments, steps): what a checkpoint keeps.
  [[nodiscard]] const core::server_optimizer& server_optimizer() const noexcept { return server_opt_; }
  // A resumed run's state from its checkpoint (std::nullopt: the checkpoint holds none), only while no
  // round is open. Fails with errc::server_state when it does not fit the configuration: none for a
  // kind with moments after round 0, another kind, another size, values that are not finite.
  [[nodiscard]] core::result<void> restore_server_optimizer(std::optional<core::server_optimizer_state> s);

  // Writes the assignment's subnet, encoded in its codec, into `out` (exactly a.blob_bytes bytes).
  [[nodiscard]] core::result<void> encode_download(const assignment& a, std::span<std::byte> out) const;

  // Events. Each fails with errc::illegal_transition where it does not fit the state (and changes nothing).
  [[nodiscard]] core::result<void> sent(assignment& a);        // the download started (again)
  [[nodiscard]] core::result<void> downloaded(assignment& a);  // the device holds the whole download
  // An update is announced. A claim for another round, or for an assignment that already ended, is
  // refused and changes nothing; a claim that does not fit the assignment (codec, size, steps, examples,
  // a non-finite loss) rejects the assignment. On success the upload's bytes may come.
  [[nodiscard]] core::result<void> announce(assignment& a, const update_claim& claim);
  // The announced upload arrived whole (its digest already checked): decode it; every value must be
  // finite (with secure aggregation: masked values in the ring, handed to the protocol's server).
  // Accepts the assignment, or rejects it with the reason.
  [[nodiscard]] core::result<void> receive(assignment& a, std::span<const std::byte> blob);
  void refuse(assignment& a, std::string reason);  // the device declined; a no-op once ended
  void reject(assignment& a, core::error why);     // a no-op once ended
  [[nodiscard]] bool all_reported() const noexcept;

  // Ends the round: stragglers, assembly, evaluation on `validation` (may be null) when due.
  [[nodiscard]] core::result<round_metrics> close_round(core::example_table* validation);

  // Evaluation on the devices, after close_round: whether the round just closed evaluates (eval_every,
  // and the last round), the task a device scores the whole model with (the run's batch, the model's
  // input normalization), and the model in a codec.
  [[nodiscard]] bool evaluation_due() const noexcept;
  // Who scores it: the offered devices that hold validation examples and whose budget holds the whole
  // model for inference (core::inference_bytes in their codec; a budget fixed by the driver is not
  // consulted), in natural order of their ids. Devices without validation examples are left out
  // silently, those over budget in `excluded` with the reason. Of those left, a cohort (cohort_size(),
  // drawn at random as a round's) scores.
  [[nodiscard]] core::result<std::vector<evaluator>> plan_evaluation(std::vector<device_offer> offers,
                                                       std::vector<excluded_device>& excluded) const;
  [[nodiscard]] core::training_task evaluation_task() const;
  [[nodiscard]] core::result<void> encode_model(core::codec_kind codec, std::span<std::byte> out) const;
  // The devices' scores of the round just closed: fills m's fed_* figures and, when early stopping
  // watches them (patience_on; auto: when m has no figure of the hub's own), counts them.
  void note_federated(const federated_scores& scores, round_metrics& m);

 private:
  [[nodiscard]] core::result<void> move(assignment& a, assignment_event e);
  [[nodiscard]] round_view view() const noexcept { return {config_, full_, params_, completed_}; }
  [[nodiscard]] std::size_t beside_arena(const core::mlp_arch& arch) const noexcept;
  [[nodiscard]] core::result<core::round_plan> plan(std::vector<device_offer>& taking, std::span<const double> capacities,
                                                    std::size_t group_devices, std::vector<excluded_device>& excluded);
  // Successive layer training (engine_stages.cpp): the open round's stage, a device's share of its
  // layer, and the stage's plan (groups enough to cover the layer, unless config.groups says).
  [[nodiscard]] core::stage_shape stage() const noexcept;
  [[nodiscard]] core::stage_shape shape_of(std::size_t stage) const noexcept;
  [[nodiscard]] core::result<double> stage_capacity(const device_offer& offer, const core::stage_shape& shape) const;
  [[nodiscard]] core::result<core::round_plan> stage_plan(std::span<const double> capacities, std::size_t group_devices);
  void fold_ready();
  core::result<void> note_untrained();
  void note_score(double score);

  run_config config_;
  core::mlp_arch full_;
  std::vector<float> params_;
  std::int64_t completed_ = 0;
  core::server_optimizer server_opt_;
  bool server_state_pending_ = false;  // resumed with a kind that keeps moments, and they are not restored yet
  // How uploads become the model (aggregation.hpp), and its secure or private part for the drivers
  // (null where the run has none).
  std::unique_ptr<aggregation> aggregation_;
  secure_aggregation* secure_ = nullptr;
  private_aggregation* private_ = nullptr;
  reached_mask reached_;             // the open round's coordinates some update reached
  bool in_round_ = false;
  std::uint64_t plan_seed_ = 0;
  std::size_t groups_ = 0;
  std::vector<assignment> assignments_;
  std::vector<std::size_t> by_device_;  // assignments_'s positions in order of their device ids (find)
  std::size_t folded_ = 0;           // assignments [0, folded_) are in the round's sums
  // The accepted updates' examples, and the loss over those that told one (a secure round's do not).
  struct {
    std::int64_t examples = 0;
    double loss_weighted = 0;
    std::int64_t loss_examples = 0;
  } trained_;
  early_stop stopping_;
  round_faults faults_;
  struct {
    std::vector<std::string> pending;  // take_notes()
    bool whole_model_unheld = false;   // said already
    std::size_t stage_said = 0;        // SLT: stages announced so far (stage k announced once, as it begins)
    std::int64_t rounded_at = -1;      // SLT: the completed rounds when the frozen layers were last rounded (slt.frozen_codec)
  } notes_;
  // Toward errc::nobody_trains: untrained rounds in a row in which every registered device (or, before
  // set_population, every device offered) was asked and refused or had its update rejected.
  struct {
    std::size_t streak = 0;
    std::size_t population = 0;  // set_population's registered devices
    std::size_t offered = 0;     // the open round's offers
  } refusals_;
  struct {
    std::size_t cap = 0;   // set_round_cap
    bool seeded = false;   // use_seeded_draws
    std::optional<std::size_t> drawn_from;  // the open round's cohort: the devices it was drawn from
  } cohort_;
  std::shared_ptr<const core::input_normalization> normalization_ = std::make_shared<const core::input_normalization>();
  nlohmann::json statistics_;
};

}  // namespace tessera::rounds
