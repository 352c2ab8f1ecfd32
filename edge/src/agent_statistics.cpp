// The agent's answers to the hub's statistics requests (DESIGN §3: STATS before round 1): the device's
// policy first, then two passes over its training examples on the worker thread. The rest of the
// agent is in agent.cpp.
#include <thread>

#include "tessera/core/data/fed_stats.hpp"
#include "tessera/edge/agent.hpp"

namespace tessera::edge {

using core::log_level;

void agent::on_stats(const net::msg::stats& q) {
  cancel_job();  // the hub measures before round 1: anything in progress belongs to an earlier run
  waiting_.reset();
  const std::string what = "the statistics (pass " + std::to_string(q.pass) + ")";
  if (auto ok = check_request_policy("statistics", config_.privacy, config_.secure_aggregation); !ok) return refuse(what, ok.error());
  if (static_cast<std::int64_t>(q.inputs) != data_->feature_count())
    return refuse(what, make_error(errc::inputs_mismatch, "the model takes " + std::to_string(q.inputs) + " inputs, this device's data (" +
                                                              data_->name() + ") has " + std::to_string(data_->feature_count()) +
                                                              " features"));
  if (auto ok = data_->check_targets(q.task, static_cast<std::int64_t>(q.outputs)); !ok)
    return refuse(what, make_error(errc::labels_mismatch, ok.error().message));
  const std::uint64_t generation = ++generation_;
  // A pass reads every training example once: on the worker, so the link keeps its heartbeats.
  worker_ = std::thread([this, generation, q] {
    auto reply = [&]() -> core::result<net::msg::stats_reply> {
      TESSERA_ASSIGN_OR_RETURN(auto stream, data_->training_examples());
      net::msg::stats_reply r{.pass = q.pass, .features = q.inputs};
      if (q.pass == 1) {
        TESSERA_ASSIGN_OR_RETURN(auto s, core::measure_sums(*stream, q.task, static_cast<std::int64_t>(q.outputs)));
        r.examples = static_cast<std::uint64_t>(s.examples);
        r.sum = std::move(s.sum);
        r.min = std::move(s.min);
        r.max = std::move(s.max);
        r.label_counts = std::move(s.label_counts);
        r.target_sum = s.target_sum;
      } else {
        TESSERA_ASSIGN_OR_RETURN(auto s, core::measure_spread(*stream, q.mean, q.target_mean));
        r.examples = static_cast<std::uint64_t>(s.examples);
        r.sq_dev = std::move(s.sq_dev);
        r.target_sq_dev = s.target_sq_dev;
      }
      return r;
    }();
    boost::asio::post(io_, [this, generation, reply = std::move(reply)]() mutable { on_measured(generation, std::move(reply)); });
  });
}

void agent::on_measured(std::uint64_t generation, core::result<net::msg::stats_reply> reply) {
  if (worker_.joinable()) worker_.join();
  if (generation != generation_ || stopped_) return;  // superseded meanwhile
  if (!reply) return refuse("the statistics", make_error(errc::training_failed, reply.error().message));
  log(log_level::info, "statistics (pass " + std::to_string(reply.value().pass) + ") of " + std::to_string(reply.value().examples) +
                           " examples sent");
  if (session_) session_->send(reply.value());
}

}  // namespace tessera::edge
