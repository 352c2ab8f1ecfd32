// tessera/rounds/run_config.hpp — the settings of a federated run, shared by tessera-sim and tessera-hub.
//
// The simulator and the hub read the same field names with the same defaults, so a configuration tried
// in the simulator means the same thing on a real fleet (and the two can be checked against each
// other: same seed, same shards, same model). Each adds its own fields (sim_config, hub_config).
// The seeds of a run's sub-streams (plan, shards, batch order) are in core/base/seeds.hpp.
//
//   core::config_reader r(json, "hub.json");
//   rounds::run_config c;
//   TESSERA_TRY(rounds::read_run_fields(r, c, /*allow_central=*/false));
//   TESSERA_TRY(r.finish());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/config/json_config.hpp"
#include "tessera/core/data/data_source.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/math/optimizer.hpp"
#include "tessera/core/math/server_optimizer.hpp"

namespace tessera::rounds {

// ist: subnets of every hidden layer (DESIGN §2); fedavg: the whole model everywhere; slt: successive
// layer training (Pfeiffer, Khalili, Henkel, NeurIPS 2023), one hidden layer a stage, the layers below
// it frozen, the ones above it a narrower head (core::make_stage_plan); central: the simulator's
// reference, one device with all the data.
enum class strategy_kind { ist, fedavg, slt, central };
inline constexpr auto k_strategy_names = core::names_in_order<strategy_kind>({"ist", "fedavg", "slt", "central"});
// The strategies a real fleet runs (central is the simulator's reference).
inline constexpr auto k_fleet_strategy_names = core::names_in_order<strategy_kind>({"ist", "fedavg", "slt"});
[[nodiscard]] inline std::string_view to_string(strategy_kind s) noexcept { return k_strategy_names.name(s); }

// Which figure early stopping watches: the hub's validation set, the devices' (federated) evaluation, or
// (auto) the hub's when it has one and the devices' otherwise.
enum class patience_kind { automatic, validation, federated };
inline constexpr auto k_patience_names = core::names_in_order<patience_kind>({"auto", "validation", "federated"});

// What happens to an update whose change (trained − what the device was sent) exceeds the bounds:
// rejected with the reason, scaled and clamped into them (and counted), or nothing (no bound).
enum class update_bound_kind { reject, clip, off };
inline constexpr auto k_update_bound_names = core::names_in_order<update_bound_kind>({"reject", "clip", "off"});

// Secure aggregation (crypto/secagg.hpp, DESIGN §6): the hub learns only sums of replicated groups.
// Every IST group is trained by at least `replication` devices (the plan has ⌊devices / replication⌋
// groups); a group's (and the shared parameters') sum is released only from `threshold` or more
// devices. Each device's change (trained − received) is clipped to ±clip per value, fixed-point in
// Z_2^bits, masked; the clipped values are counted in the round's figures.
struct secure_aggregation_config {
  bool enabled = false;
  std::size_t replication = 3;
  std::size_t threshold = 0;         // 0: replication
  double clip = 1.0;
  int bits = 32;
  std::size_t neighbors = 64;        // Bell et al. 2020 neighbour graphs for larger rosters (0: complete)
  // |feature|, |target| at most these (one for all, or per feature and then the target): the masked
  // statistics' scales (core/data/stats_vector.hpp).
  std::vector<double> statistics_bounds = {1e4};

  [[nodiscard]] std::size_t min_aggregate() const noexcept { return threshold > 0 ? threshold : replication; }
};

// Client-level differential privacy (DP-FedAvg, McMahan et al., ICLR 2018): each round samples every
// registered device with probability sample_rate; a device clips its change to L2 norm `clip`; the hub
// adds discrete Gaussian noise of deviation noise_multiplier · clip to every sum and divides by the expected
// number of contributors; an RDP accountant (core/privacy/rdp.hpp) tracks ε at `delta` and the run stops
// before a round that would pass target_epsilon (0: no target). Under secure aggregation the devices
// add the noise instead (discrete, in the ring: any secure_aggregation.threshold contributors carry
// all of it), the ring's clip is `clip`, and the accountant composes the Skellam mechanism.
// Whose ε dp.target_epsilon bounds when the devices add the noise: the hub's (it knows who was sampled,
// so amplification by sampling does not hold against it) or the model's users' (it does).
enum class dp_observer { hub, users };
inline constexpr auto k_dp_observer_names = core::names_in_order<dp_observer>({"hub", "users"});

struct dp_config {
  bool enabled = false;
  double sample_rate = 1.0;
  double noise_multiplier = 1.0;
  double clip = 1.0;
  double delta = 1e-5;
  double target_epsilon = 0;
  dp_observer target_observer = dp_observer::hub;  // with the devices' noise; the hub's noise: the users' (the hub sees all)
  std::size_t population = 0;  // the registered devices the fixed denominators count (0: the hub's registry, the simulator's fleet)
  // Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021): `clip` is where it starts;
  // each round moves it geometrically toward the target quantile of the devices' change norms, from
  // the noised count of devices that did not clip (noise deviation count_noise; 0: the expected
  // contributors / 20). The changes' noise is then raised so that both together cost what
  // noise_multiplier alone would: σ_Δ = (σ⁻² − (2·count_noise)⁻²)^(−1/2).
  bool adaptive_clip = false;
  double target_quantile = 0.5;
  double clip_learning_rate = 0.2;
  double count_noise = 0;
  // Publish the round's exact figures (round_metrics::withhold_exact) anyway: the training loss, example
  // counts, change norms, clipped counts and the devices' scores, which are not private.
  bool publish_exact = false;
  // Whether the exact figures may be published: no DP, or the operator said so.
  [[nodiscard]] bool publishes_exact() const noexcept { return !enabled || publish_exact; }
  // With the devices' noise: the hub asks every ready device, and each draws from its own CSPRNG
  // whether it contributes (probability sample_rate); one not drawn sends its noise alone, masked
  // like any input. The hub cannot tell who trained, so amplification by sampling holds against it
  // too (ε against the hub = against the users); every device downloads, trains and uploads each round.
  bool self_sampling = false;
  // With the devices' noise: the share of a round's assigned devices expected not to finish. Each
  // device's noise share is sized for the rest (at least secure_aggregation's min_aggregate), and a sum
  // with fewer survivors than that is not released: 1 sizes it for min_aggregate alone.
  double expected_dropout = 0.3;
};

// When the devices score the model and when a run stops for want of progress (the fields eval_every,
// patience, patience_on).
struct evaluation_schedule {
  std::int64_t every = 1;            // rounds between evaluations (and the last round)
  std::int64_t patience = 0;         // stop after this many evaluations without a new best (0: never)
  patience_kind patience_on = patience_kind::automatic;
};

// Bounds on an update's change against what the device was sent (plain rounds: a masked upload is
// bounded per value by secure_aggregation.clip): its L2 norm and its largest value, 0: derived from the
// sent subnet (engine::update_bounds); and what passing them does (the fields max_update_norm,
// max_update_abs, update_bound).
struct update_limits {
  double max_norm = 0;
  double max_abs = 0;
  update_bound_kind action = update_bound_kind::reject;
};

struct run_config {
  core::model_spec model;
  strategy_kind strategy = strategy_kind::ist;
  std::size_t groups = 0;            // 0: one per device, as many as min_width allows
  std::int64_t min_width = 8;
  // IST: rounds one random partition is kept before the next cut (1: a fresh cut every round). Kept
  // partitions let a subnet adapt to its cut over several rounds at a small learning rate.
  std::int64_t repartition_every = 1;
  // IST: how each cut orders the neurons (core::cut_kind): at random from the span's seed, or rolling
  // windows that move by one neuron per cut (FedRolex).
  core::cut_kind cut = core::cut_kind::random;
  // IST: the last this-many rounds train the whole model (a FedAvg round) on the devices whose budget
  // holds it; the others sit those rounds out. A round where no device holds it stays an IST round.
  std::int64_t whole_model_rounds = 0;
  // SLT: the head's share of each hidden layer above the stage (its first units), and the rounds of each
  // stage, one entry per hidden layer adding up to `rounds` (empty: rounds split evenly, the remainder
  // going to the first stages). The stage's layer is cut into groups as IST cuts (groups, cut,
  // repartition_every) when the devices' budgets cannot hold it whole. frozen_codec f16 or q8: the
  // layers below the stage travel and are held in it (core::compact_frozen), in a half or a quarter of
  // the memory, and the hub rounds the global model's frozen layers through it as each stage begins, so
  // that what the devices compute with is the model.
  struct slt_settings {
    double head_fraction = 0.25;
    std::vector<std::int64_t> stage_rounds{};
    core::codec_kind frozen_codec = core::codec_kind::f32;
  } slt;
  // SLT: the stage (a hidden layer, 0-based) of the round after `completed` rounds.
  [[nodiscard]] std::size_t slt_stage(std::int64_t completed) const noexcept;
  std::int64_t rounds = 50;
  // > 0: each round's cohort, this many devices drawn uniformly at random from those ready (the hub from
  // the CSPRNG, the simulator from the seed); 0: every ready device (up to the hub's max_devices, which
  // caps a round the same way, at random).
  std::size_t devices_per_round = 0;
  std::int64_t local_steps = 50;
  std::int64_t batch = 32;
  // > 0: devices take each step's batch in micro-batches of this many examples (core::batch_part): the
  // same step in the memory of this many rows, so a budget holds a wider model or subnet; 0: whole.
  std::int64_t micro_batch = 0;
  // The rows a device's training memory holds: what budgets are planned with.
  [[nodiscard]] std::int64_t memory_rows() const noexcept { return core::memory_rows(batch, micro_batch); }
  core::lr_schedule lr;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  core::codec_kind codec = core::codec_kind::f32;  // parameters pass through it both ways
  std::uint64_t seed = 1;
  evaluation_schedule evaluation;
  struct statistics_settings {
    std::int64_t min_examples = 10;    // min_stats_examples: devices with fewer are not asked for statistics
    bool normalization_given = false;  // model.input_normalization was in the configuration
  } statistics;
  update_limits update_bounds;
  // How the reports of one parameter combine (core::aggregate_kind): the example-weighted mean, or a
  // robust aggregate for replicated groups (plain rounds only: under secure aggregation the hub sees
  // only sums, and differential privacy's sensitivity is the mean's).
  struct aggregate_settings {
    core::aggregate_kind kind = core::aggregate_kind::mean;
    double trim_fraction = 0.2;  // trimmed_mean: the share dropped at each end
  } aggregate;
  // The hub's step after assembly (core/math/server_optimizer.hpp): (assembled − previous) as a pseudo-gradient
  // for FedAvgM, FedAdam or FedYogi, on the coordinates some update reached. The default, kind none with
  // lr 1, is the plain assembly (the engine then takes no step at all). It composes with everything that
  // assembles: secure aggregation (the released mean change), differential privacy (post-processing of
  // the noised release: ε is unchanged) and a robust aggregate; central training has no assembly and
  // refuses anything but the default.
  core::server_optimizer_options server_optimizer;
  secure_aggregation_config secure_aggregation;
  dp_config dp;
  std::string metrics_path;          // JSON lines; empty: none
  std::string output_path;           // safetensors written at the end; empty: none
};

// Reads the shared fields; errors are kept by the reader (see core::config_reader::finish). Only the
// simulator allows `central`.
[[nodiscard]] core::result<void> read_run_fields(core::config_reader& r, run_config& c, bool allow_central);

// A data source's `normalization: standardize` (the hub's validation set, the simulator's data) means
// the fleet's statistics: it turns model.input_normalization to standardize (an explicit "none" there is
// an error, kept by `source_reader`) and the source is read as it is, the model standardizing it.
void standardize_with_fleet(core::config_reader& source_reader, core::data_source& source, run_config& c);

// After the data sources (which may turn standardize on): differential privacy with the fleet's
// exact feature statistics, which the model carries out beside ε, is refused by name unless
// dp.publish_exact says the data is not private.
void check_private_inputs(core::config_reader& r, const run_config& c);

// What a valid configuration makes of the run that its strategy's name does not say: IST whose every
// round trains the whole model (whole_model_rounds covering the run, or one group), for the hub and the
// simulator to say at start. Empty: nothing to say.
[[nodiscard]] std::vector<std::string> plan_notes(const run_config& c);

}  // namespace tessera::rounds
