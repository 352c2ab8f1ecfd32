#include "device_evaluation.hpp"

#include "tessera/crypto/digest.hpp"
#include "tessera/net/task.hpp"

namespace tessera::hub {

using core::log_level;

std::vector<rounds::evaluator> device_evaluation::plan(const hub_context& ctx, const rounds::engine& engine, device_registry& devices) {
  std::vector<rounds::excluded_device> excluded;
  auto evaluators = engine.plan_evaluation(devices.ready_offers(ctx.config.max_devices), excluded);
  for (const auto& e : excluded) {
    device_entry& d = devices[e.id];
    if (d.told_over_budget) continue;
    d.told_over_budget = true;  // once per device (until its HELLO changes)
    ctx.say(log_level::warning, "device " + e.id + " does not evaluate the model: " + e.reason);
  }
  return evaluators;
}

device_evaluation::device_evaluation(const hub_context& ctx, rounds::engine& engine, device_registry& devices,
                                     rounds::round_metrics metrics, std::vector<rounds::evaluator> evaluators)
    : ctx_(&ctx),
      engine_(&engine),
      devices_(&devices),
      metrics_(std::move(metrics)),
      round_(static_cast<std::uint64_t>(engine.completed())),
      widths_(net::hidden_widths(engine.full_arch())),
      hyper_json_(net::task_to_json(engine.evaluation_task())) {
  for (auto& e : evaluators) {
    auto& copy = model_[e.codec];
    if (!copy.first) {
      auto bytes = std::make_shared<std::vector<std::byte>>(e.blob_bytes);
      if (auto ok = engine.encode_model(e.codec, *bytes); !ok) {
        ctx.say(log_level::error, "the model cannot be sent for evaluation: " + ok.error().message);
        model_.erase(e.codec);
        continue;
      }
      copy.second = crypto::sha256_of(*bytes);
      copy.first = std::move(bytes);
    }
    waiting_.emplace(e.id, std::move(e));
  }
}

void device_evaluation::send_all() {
  ctx_->say(log_level::info, "round " + std::to_string(round_) + ": " + std::to_string(waiting_.size()) +
                                 " device(s) evaluate the model on their validation examples");
  for (const auto& [id, e] : waiting_) {
    device_entry& d = (*devices_)[id];
    d.download.reset();
    send(d, id);
  }
}

void device_evaluation::send(device_entry& d, const std::string& id) {
  const rounds::evaluator& e = waiting_.at(id);
  const auto& [bytes, sha] = model_.at(e.codec);
  if (!d.session) return;  // it gets the model when it reconnects
  d.download_id = devices_->next_transfer();  // fresh, so a restarted agent never resumes another download
  d.download = std::make_shared<download_slot>(d.download_id, bytes, sha);
  d.session->send(net::msg::assign{.round = round_,
                                   .widths = widths_,
                                   .hyper_json = hyper_json_,
                                   .transfer = d.download_id,
                                   .size = bytes->size(),
                                   .blob_codec = e.codec,
                                   .sha256 = sha,
                                   .evaluate = true});
  d.session->send_blob(std::shared_ptr<net::outgoing_transfer>(d.download, &d.download->out));
}

bool device_evaluation::on_reply(const std::string& id, device_entry& d, const net::msg::evaluation& e) {
  if (!expects(id) || e.round != round_ || e.transfer != d.download_id) {
    ctx_->say(log_level::warning, unasked(id, e.round));
    return false;
  }
  // Its score counts as many examples as it said it holds out: a device cannot outweigh the others by
  // claiming more.
  if (e.examples != d.validation_examples)
    return drop(id, "it scored " + std::to_string(e.examples) + " examples but holds out " + std::to_string(d.validation_examples));
  scores_.add({.id = id,
               .examples = static_cast<std::int64_t>(e.examples),
               .loss_sum = e.loss_sum,
               .correct = static_cast<std::int64_t>(e.correct)});
  waiting_.erase(id);
  count_download(d);
  return waiting_.empty();
}

bool device_evaluation::drop(const std::string& id, const std::string& why) {
  if (!expects(id)) return false;
  ctx_->say(log_level::warning, "device " + id + " left out of the evaluation after round " + std::to_string(round_) + ": " + why);
  waiting_.erase(id);
  count_download((*devices_)[id]);
  return waiting_.empty();
}

void device_evaluation::time_out() const {
  for (const auto& [id, e] : waiting_)
    ctx_->say(log_level::warning, "device " + id + " left out of the evaluation after round " + std::to_string(round_) +
                                      ": no answer within round_deadline_s");
}

rounds::round_metrics device_evaluation::finish() {
  for (const auto& [id, e] : waiting_) count_download((*devices_)[id]);
  engine_->note_federated(scores_, metrics_);
  metrics_.fed.bytes_down = bytes_down_;
  if (!metrics_.fed.devices) ctx_->say(log_level::warning, "round " + std::to_string(round_) + ": no device evaluated the model");
  return std::move(metrics_);
}

std::string device_evaluation::unasked(const std::string& id, std::uint64_t round) {
  return "device " + id + " sent an evaluation (round " + std::to_string(round) + ") that was not asked for";
}

void device_evaluation::count_download(device_entry& d) {
  bytes_down_ += d.download ? d.download->out.bytes_sent_total() : 0;
  d.download.reset();
}

}  // namespace tessera::hub
