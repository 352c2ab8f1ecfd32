// The agent's answers to the hub's statistics requests (DESIGN §3: STATS before round 1): the device's
// policy first, then two passes over its training examples on the worker thread. Under secure
// aggregation a pass is a masked sum (DESIGN §6): the keys go out with the request's answer begun, the
// vector is masked once both it and the inbox are in, and only the masked vector leaves the device. The
// rest of the agent is in agent.cpp.
#include <thread>

#include "tessera/core/data/fed_stats.hpp"
#include "tessera/core/data/stats_vector.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/edge/agent.hpp"

namespace tessera::edge {

using core::log_level;

void agent::on_stats(const net::msg::stats& q) {
  cancel_job();  // the hub measures before round 1: anything in progress belongs to an earlier run
  waiting_.reset();
  summing_.reset();
  const std::string what = "the statistics (pass " + std::to_string(q.pass) + ")";
  if (auto ok = check_request_policy("statistics", config_.privacy, config_.secure_aggregation, q.secure ? &*q.secure : nullptr); !ok)
    return refuse(what, ok.error());
  if (static_cast<std::int64_t>(q.inputs) != data_->feature_count())
    return refuse(what, make_error(errc::inputs_mismatch, "the model takes " + std::to_string(q.inputs) + " inputs, this device's data (" +
                                                              data_->name() + ") has " + std::to_string(data_->feature_count()) +
                                                              " features"));
  if (auto ok = data_->check_targets(q.task, static_cast<std::int64_t>(q.outputs)); !ok)
    return refuse(what, make_error(errc::labels_mismatch, ok.error().message));
  if (q.secure) {
    if (secure_ == nullptr)
      return refuse(what, make_error(errc::secure_refused, "the statistics use secure aggregation, which this device's secure_aggregation (off) refuses"));
    const auto task = q.task;
    const std::size_t length = q.pass == 1 ? core::sums_vector_length(static_cast<std::int64_t>(q.inputs), task, static_cast<std::int64_t>(q.outputs))
                                           : core::spread_vector_length(static_cast<std::int64_t>(q.inputs), task);
    // What every device is asked, scale included, but for its own rounding key: each neighbour checks it
    // is the same (net::sum_request_digest).
    auto round = secure_round::start_sum(*q.secure, 0, net::sum_request_digest(q), length, *secure_, config_.privacy);
    if (!round) return refuse(what, round.error());
    summing_.emplace(masked_sum{.label = what,
                                .round = std::move(round).value(),
                                .request = q,
                                .reply = [pass = q.pass](std::vector<std::byte> masked) -> net::message {
                                  return net::msg::stats_reply{.pass = pass, .masked = std::move(masked)};
                                },
                                .values = std::nullopt});
    if (session_) session_->send(summing_->round->keys_message());
  }
  const std::uint64_t generation = ++generation_;
  // A pass reads every training example once: on the worker, so the link keeps its heartbeats. A masked
  // pass measures within the request's bounds.
  worker_ = std::thread([this, generation, q] {
    auto measured = [&]() -> core::result<measurement> {
      TESSERA_ASSIGN_OR_RETURN(auto stream, data_->training_examples());
      const std::span<const double> bounds = q.secure ? std::span<const double>(q.bounds) : std::span<const double>();
      measurement m;
      if (q.pass == 1) {
        TESSERA_ASSIGN_OR_RETURN(m.sums, core::measure_sums(*stream, q.task, static_cast<std::int64_t>(q.outputs), bounds));
      } else {
        TESSERA_ASSIGN_OR_RETURN(m.spread, core::measure_spread(*stream, q.mean, q.target_mean, bounds));
      }
      return m;
    }();
    boost::asio::post(io_, [this, generation, q, measured = std::move(measured)]() mutable { on_measured(generation, q, std::move(measured)); });
  });
}

void agent::on_measured(std::uint64_t generation, const net::msg::stats& q, core::result<measurement> measured) {
  if (worker_.joinable()) worker_.join();
  if (generation != generation_ || stopped_) return;  // superseded meanwhile
  const std::string what = "the statistics (pass " + std::to_string(q.pass) + ")";
  if (!measured) return refuse(what, make_error(errc::training_failed, measured.error().message));
  const measurement& m = measured.value();
  if (summing_) {
    const core::stats_scale scale{.max_examples = static_cast<std::int64_t>(q.max_examples), .bounds = q.bounds};
    auto values = q.pass == 1 ? core::sums_vector(m.sums, q.task, scale) : core::spread_vector(m.spread, q.mean, q.target_mean, q.task, scale);
    if (!values) return refuse(what, make_error(errc::secure_step, values.error().message));
    // The clipped count stays here and in the masked sum: the hub sees the fleet's only.
    if (m.sums.clipped > 0)
      log(log_level::warning, what + ": " + std::to_string(m.sums.clipped) + " of " + std::to_string(m.sums.examples) +
                                  " examples had a value beyond its statistics bound, clipped to it");
    summing_->values = std::move(values).value();
    if (summing_->round->has_inbox()) send_masked_sum();
    return;
  }
  net::msg::stats_reply r{.pass = q.pass, .features = q.inputs};
  if (q.pass == 1) {
    r.examples = static_cast<std::uint64_t>(m.sums.examples);
    r.sum = m.sums.sum;
    r.min = m.sums.min;
    r.max = m.sums.max;
    r.label_counts = m.sums.label_counts;
    r.target_sum = m.sums.target_sum;
  } else {
    r.examples = static_cast<std::uint64_t>(m.spread.examples);
    r.sq_dev = m.spread.sq_dev;
    r.target_sq_dev = m.spread.target_sq_dev;
  }
  log(log_level::info, what.substr(4) + " of " + std::to_string(r.examples) + " examples sent");
  if (session_) session_->send(r);
}

void agent::start_masked_evaluation(const net::msg::assign& a) {
  const std::string what = "the evaluation of round " + std::to_string(a.round);
  // Keys signed over the whole request (the model's digest, the score's scale): every evaluator was sent
  // the same, or its neighbours refuse the roster.
  auto round = secure_round::start_sum(*a.secure, a.round, net::sum_request_digest(a), core::k_score_vector_length, *secure_, config_.privacy);
  if (!round) {
    job_.reset();
    return refuse(what, round.error());
  }
  net::msg::stats scale{.pass = 0};  // pass 0: no statistics; the score's scale
  scale.max_examples = a.max_examples;
  scale.bounds = {a.loss_bound};
  summing_.emplace(masked_sum{.label = what,
                              .round = std::move(round).value(),
                              .request = std::move(scale),
                              .reply = [r = a.round, transfer = a.transfer](std::vector<std::byte> masked) -> net::message {
                                return net::msg::evaluation{.round = r, .transfer = transfer, .masked = std::move(masked)};
                              },
                              .values = std::nullopt});
  if (session_) session_->send(summing_->round->keys_message());
}

void agent::send_masked_sum() {
  masked_sum& s = *summing_;
  if (auto ok = s.round->mask_values(std::move(*s.values)); !ok) return refuse(s.label, ok.error());
  s.values.reset();
  log(log_level::info, s.label + " masked and sent: the hub receives only the sum over the devices that unmask");
  if (!session_) return;
  session_->send(s.round->masked_with());
  session_->send(s.reply(std::vector<std::byte>(s.round->upload().begin(), s.round->upload().end())));
}

}  // namespace tessera::edge
