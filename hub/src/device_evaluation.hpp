// Internal: the hub's evaluation on the devices. After a round that evaluates (eval_every, the last
// round), the assembled model goes to the connected devices that hold validation examples and whose
// budget holds it for inference (rounds::engine::plan_evaluation); each scores it on its own validation
// split and answers EVALUATION. The federated figures join the round's metrics before they are
// recorded. The round driver owns this in its evaluating phase (phase.hpp), times it, and records the
// round when a call says nobody is left to wait for.
//
//   auto who = device_evaluation::plan(ctx, engine, devices);    // none: record the round at once
//   device_evaluation eval(ctx, engine, devices, std::move(metrics), std::move(who));
//   eval.send_all();
//   ... if (eval.on_reply(id, device, reply)) record(eval.finish());
//
// Under secure aggregation the scores are one masked sum (DESIGN §6): ASSIGN carries the sum's secure
// part and the score's scale, the protocol's steps run as a training round's (secure()), each reply is a
// masked vector, on_reply's true means every vector is in (the driver then asks for the unmasking), and
// finish() takes the released sum: the fleet's accuracy and loss, no device's own. Every evaluator
// gets the same copy of the model (its digest is what their keys sign): one whose codec differs from
// the most common is left out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "secure_steps.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/metrics.hpp"

namespace tessera::hub {

class device_evaluation {
 public:
  // The devices that score the model now, among the ready ones; logs once per device (until its HELLO
  // changes) one whose budget cannot hold the model.
  [[nodiscard]] static std::vector<rounds::evaluator> plan(const hub_context& ctx, const rounds::engine& engine, device_registry& devices);

  // Encodes the model once per codec the evaluators take; an evaluator whose copy cannot be encoded is
  // left out.
  device_evaluation(const hub_context& ctx, rounds::engine& engine, device_registry& devices, rounds::round_metrics metrics,
                    std::vector<rounds::evaluator> evaluators);

  [[nodiscard]] std::uint64_t round() const noexcept { return round_; }
  [[nodiscard]] bool expects(const std::string& id) const { return waiting_.contains(id); }
  [[nodiscard]] bool done() const noexcept { return waiting_.empty(); }
  // The masked sum's protocol, or null (scores in the clear).
  [[nodiscard]] secure_steps* secure() noexcept { return secure_ ? &*secure_ : nullptr; }

  // The model to every evaluator.
  void send_all();
  // ASSIGN{evaluate} and the model's download to one evaluator (again after it lost them); none while it
  // is not connected.
  void send(device_entry& d, const std::string& id);

  // Each returns true when no evaluator is left to wait for.
  [[nodiscard]] bool on_reply(const std::string& id, device_entry& d, const net::msg::evaluation& e);
  [[nodiscard]] bool drop(const std::string& id, const std::string& why);  // false for a device not waited for
  // The deadline: every evaluator that has not answered is named in the log.
  void time_out() const;

  // The round's figures with the devices' scores (the evaluation is over).
  [[nodiscard]] rounds::round_metrics finish();

  // The log line for an evaluation nobody asked for.
  [[nodiscard]] static std::string unasked(const std::string& id, std::uint64_t round);

 private:
  // What an evaluator's download sent, once it is done with it.
  void count_download(device_entry& d);
  // Under secure aggregation: the sum over `evaluators`, all of one codec.
  void mask(std::vector<rounds::evaluator>& evaluators);

  const hub_context* ctx_;
  rounds::engine* engine_;
  device_registry* devices_;
  rounds::round_metrics metrics_;
  std::uint64_t round_ = 0;
  std::vector<std::uint32_t> widths_;  // the ASSIGN every evaluating device gets: the whole model
  std::string hyper_json_;
  std::map<std::string, rounds::evaluator> waiting_;  // asked, no answer yet
  // One encoded copy of the model per codec, shared by the devices' downloads.
  std::map<core::codec_kind, std::pair<std::shared_ptr<const std::vector<std::byte>>, net::digest>> model_;
  rounds::federated_scores scores_;
  std::uint64_t bytes_down_ = 0;  // of the model, to the devices (resent bytes included)
  std::optional<secure_steps> secure_;
  sum_party* party_ = nullptr;  // secure_'s
  std::int64_t max_examples_ = 0;
};

}  // namespace tessera::hub
