// A simulation's round spread over ranks (ranks.hpp): each rank trains the devices it owns (device d on
// rank d mod size) as run_device does, writes what each reported, and every rank hands every report to
// its own engine in the order of the assignments, doing what run_device does with it. So each rank's
// engine takes the same calls with the same bytes as the one-process run's, and ends with its model.
#include <algorithm>

#include "tessera/core/base/endian.hpp"
#include "tessera/core/train/device_round.hpp"
#include "tessera/core/train/training_block.hpp"
#include "tessera/rounds/sim/simulation.hpp"
#include "ranks.hpp"

namespace tessera::sim {
namespace {

using core::errc;

// What a device's round came to, as its owner writes it.
enum class outcome : std::uint8_t { upload = 0, diverged = 1, failed = 2 };

struct report_record {
  std::uint64_t assignment = 0;
  outcome kind = outcome::upload;
  rounds::update_claim claim;
  std::vector<std::byte> upload;
  std::string why;            // diverged, failed
  std::uint64_t drawn = 0;    // the device's examples drawn after training
};

void write_record(std::vector<std::byte>& out, const report_record& r) {
  core::le_writer w(out);
  w.u64(r.assignment).u8(static_cast<std::uint8_t>(r.kind)).u64(r.claim.clipped).u64(r.claim.examples).u64(r.claim.steps);
  w.f64(r.claim.loss.value_or(0)).u64(r.upload.size()).bytes(std::span<const std::byte>(r.upload));
  w.u64(r.why.size()).bytes(std::span<const char>(r.why)).u64(r.drawn);
}

core::result<std::vector<report_record>> read_records(std::span<const std::byte> all, std::size_t assignments) {
  std::vector<report_record> out;
  core::le_reader in(all);
  const auto bad = [] { return core::make_error(errc::invalid_spec, "ranks exchanged a malformed update record"); };
  while (in.remaining() > 0) {
    report_record r;
    std::uint8_t kind = 0;
    double loss = 0;
    std::uint64_t n = 0;
    if (!in.u64(r.assignment) || !in.u8(kind) || kind > 2 || !in.u64(r.claim.clipped) || !in.u64(r.claim.examples) ||
        !in.u64(r.claim.steps) || !in.f64(loss) || !in.u64(n) || n > in.remaining() || r.assignment >= assignments)
      return bad();
    r.kind = static_cast<outcome>(kind);
    r.claim.loss = loss;
    r.upload.resize(n);
    if (!in.bytes(std::span<std::byte>(r.upload)) || !in.u64(n) || n > in.remaining()) return bad();
    r.why.resize(n);
    if (!in.bytes(std::span<char>(r.why)) || !in.u64(r.drawn)) return bad();
    out.push_back(std::move(r));
  }
  if (out.size() != assignments) return bad();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.assignment < b.assignment; });
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].assignment != i) return bad();
  return out;
}

}  // namespace

core::result<sim_config> for_this_rank(const sim_config& c) {
  const ranks& world = ranks::world();
  if (world.size() == 1) return c;
  const std::string over = " is not spread over ranks yet: run it in one process (mpirun -n 1, or tessera-sim alone)";
  if (c.secure_aggregation.enabled) return core::make_error(errc::invalid_spec, "secure_aggregation" + over);
  if (!c.checkpoint.empty()) return core::make_error(errc::invalid_spec, "checkpoint" + over);
  sim_config mine = c;
  if (world.rank() != 0) {
    mine.metrics_path.clear();
    mine.output_path.clear();
  }
  return mine;
}

// The owner's half of run_device: the same download, the same training, nothing told to the engine.
core::result<void> simulation::train_owned(rounds::assignment& a, device& d, std::size_t index, std::vector<std::byte>& out) {
  report_record r;
  r.assignment = index;
  const auto fail = [&](outcome kind, std::string why) {
    r.kind = kind;
    r.why = std::move(why);
  };
  auto block = core::training_block::allocate(core::plan_training_memory(a.sub.arch, config_.memory_rows(), config_.momentum != 0.0f, a.codec));
  if (!block) fail(outcome::failed, block.error().message);
  if (block) {
    const std::span<std::byte> blob = core::blob_region(block.value(), a.codec, a.blob_bytes);
    if (auto e = engine_.encode_download(a, blob); !e) fail(outcome::failed, e.error().message);
    else if (auto ok = core::take_download(block.value(), a.sub.arch, a.codec, blob); !ok)
      fail(outcome::failed, a.device + " download: " + ok.error().message);
  }
  if (r.kind != outcome::failed) {
    const std::span<std::byte> upload = core::update_region(block.value(), a.sub.arch, a.codec);
    std::vector<float> received;  // clipping for differential privacy: the change against what it received
    if (a.task.clip_norm > 0) received.assign(block.value().params().begin(), block.value().params().end());
    auto report = core::train_for_upload(block.value(), a.task, a.codec, upload, *d.batches, nullptr, received);
    if (!report) {
      fail(report.error().code == errc::not_finite ? outcome::diverged : outcome::failed, report.error().message);
    } else {
      r.claim.clipped = report.value().clipped ? 1u : 0u;
      r.claim.examples = static_cast<std::uint64_t>(report.value().examples);
      r.claim.steps = static_cast<std::uint64_t>(report.value().steps);
      r.claim.loss = report.value().mean_loss;
      r.upload.assign(upload.begin(), upload.end());
    }
  }
  r.drawn = d.batches->drawn();
  write_record(out, r);
  return {};
}

core::result<void> simulation::run_devices_over_ranks() {
  const ranks& world = ranks::world();
  std::vector<std::byte> mine;
  const auto as = engine_.assignments();
  for (std::size_t i = 0; i < as.size(); ++i) {
    const std::size_t d = by_id_.find(as[i].device)->second;
    if (d % world.size() == world.rank()) TESSERA_TRY(train_owned(as[i], devices_[d], i, mine));
  }
  TESSERA_ASSIGN_OR_RETURN(const auto all, world.all_gather(mine));
  TESSERA_ASSIGN_OR_RETURN(const auto records, read_records(all, as.size()));
  for (const report_record& r : records) {  // in the assignments' order, as run_device runs them
    rounds::assignment& a = as[r.assignment];
    device& d = devices_[by_id_.find(a.device)->second];
    if (r.kind == outcome::failed) return make_error(errc::invalid_spec, r.why);
    TESSERA_TRY(engine_.sent(a));
    TESSERA_TRY(engine_.downloaded(a));
    if (config_.strategy != rounds::strategy_kind::central) {
      a.bytes_down = a.blob_bytes;
      a.bytes_up = a.upload_bytes;
    }
    if (d.batches->drawn() < r.drawn) d.batches->skip(r.drawn - d.batches->drawn());  // another rank trained it
    if (r.kind == outcome::diverged) {
      engine_.reject(a, core::make_error(errc::not_finite, r.why));
    } else {
      rounds::update_claim claim = r.claim;
      claim.round = static_cast<std::uint64_t>(engine_.current_round());
      claim.size = r.upload.size();
      claim.codec = a.codec;
      if (engine_.announce(a, claim)) (void)engine_.receive(a, r.upload);
    }
    if (a.state == rounds::assignment_state::rejected && log_ && world.rank() == 0)
      log_(core::log_level::warning, a.device + ": update rejected in round " + std::to_string(engine_.current_round()) + ": " +
                                         a.reason.message);
  }
  return {};
}

}  // namespace tessera::sim
