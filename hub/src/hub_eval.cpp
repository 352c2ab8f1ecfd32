// The hub's evaluation on the devices: after a round that evaluates (eval_every, the last round), the
// assembled model goes to the connected devices that hold validation examples and whose budget holds it
// for inference (rounds::engine::plan_evaluation); each scores it on its own validation split and
// answers EVALUATION. The federated figures join the round's metrics before they are recorded.
#include "tessera/crypto/digest.hpp"
#include "tessera/hub/hub.hpp"
#include "device_registry.hpp"
#include "hub_context.hpp"
#include "tessera/net/task.hpp"

namespace tessera::hub {

using core::log_level;

bool hub_service::evaluating(const std::string& id) const { return eval_ && eval_->waiting.contains(id); }

void hub_service::start_evaluation(rounds::round_metrics m) {
  std::vector<rounds::excluded_device> excluded;
  auto evaluators = engine_->plan_evaluation(devices_->ready_offers(ctx_->config.max_devices), excluded);
  for (const auto& e : excluded) {
    device_entry& d = (*devices_)[e.id];
    if (d.told_over_budget) continue;
    d.told_over_budget = true;  // once per device (until its HELLO changes)
    log(log_level::warning, "device " + e.id + " does not evaluate the model: " + e.reason);
  }
  if (evaluators.empty()) return after_round(m);
  eval_ = std::make_unique<evaluation_phase>();
  eval_->metrics = std::move(m);
  eval_->round = static_cast<std::uint64_t>(engine_->completed());
  eval_->widths = net::hidden_widths(engine_->full_arch());
  eval_->hyper_json = net::task_to_json(engine_->evaluation_task());
  for (auto& e : evaluators) {
    auto& copy = eval_->model[e.codec];
    if (!copy.first) {
      auto bytes = std::make_shared<std::vector<std::byte>>(e.blob_bytes);
      if (auto ok = engine_->encode_model(e.codec, *bytes); !ok) {
        log(log_level::error, "the model cannot be sent for evaluation: " + ok.error().message);
        eval_->model.erase(e.codec);
        continue;
      }
      copy.second = crypto::sha256_of(*bytes);
      copy.first = std::move(bytes);
    }
    eval_->waiting.emplace(e.id, std::move(e));
  }
  log(log_level::info, "round " + std::to_string(eval_->round) + ": " + std::to_string(eval_->waiting.size()) +
                           " device(s) evaluate the model on their validation examples");
  for (const auto& [id, e] : eval_->waiting) {
    (*devices_)[id].download.reset();
    send_evaluation((*devices_)[id], id);
  }
  if (eval_->waiting.empty()) return end_evaluation();
  deadline_timer_.expires_after(std::chrono::milliseconds(static_cast<std::int64_t>(ctx_->config.round_deadline_s * 1000.0)));
  deadline_timer_.async_wait([this, round = eval_->round](const boost::system::error_code& ec) {
    if (ec || stopping_ || !eval_ || eval_->round != round) return;
    for (const auto& [id, e] : eval_->waiting)
      log(log_level::warning, "device " + id + " left out of the evaluation after round " + std::to_string(round) +
                                  ": no answer within round_deadline_s");
    end_evaluation();
  });
}

void hub_service::send_evaluation(device_entry& d, const std::string& id) {
  const rounds::evaluator& e = eval_->waiting.at(id);
  const auto& [bytes, sha] = eval_->model.at(e.codec);
  if (!d.session) return;  // it gets the model when it reconnects
  d.download_id = devices_->next_transfer();  // fresh, so a restarted agent never resumes another download
  d.download = std::make_shared<download_slot>(d.download_id, bytes, sha);
  d.session->send(net::msg::assign{.round = eval_->round,
                                   .widths = eval_->widths,
                                   .hyper_json = eval_->hyper_json,
                                   .transfer = d.download_id,
                                   .size = bytes->size(),
                                   .blob_codec = e.codec,
                                   .sha256 = sha,
                                   .evaluate = true});
  d.session->send_blob(std::shared_ptr<net::outgoing_transfer>(d.download, &d.download->out));
}

void hub_service::on_evaluation(const std::shared_ptr<net::session>& s, const net::msg::evaluation& e) {
  const std::string& id = s->peer_device_id();
  device_entry& d = (*devices_)[id];
  d.seen();
  if (!evaluating(id) || e.round != eval_->round || e.transfer != d.download_id) {
    log(log_level::warning, "device " + id + " sent an evaluation (round " + std::to_string(e.round) + ") that was not asked for");
    return;
  }
  // Its score counts as many examples as it said it holds out: a device cannot outweigh the others by
  // claiming more.
  if (e.examples != d.validation_examples)
    return drop_from_evaluation(id, "it scored " + std::to_string(e.examples) + " examples but holds out " +
                                        std::to_string(d.validation_examples));
  eval_->scores.add({.id = id,
                     .examples = static_cast<std::int64_t>(e.examples),
                     .loss_sum = e.loss_sum,
                     .correct = static_cast<std::int64_t>(e.correct)});
  eval_->waiting.erase(id);
  eval_->bytes_down += d.download ? d.download->out.bytes_sent_total() : 0;
  d.download.reset();
  if (eval_->waiting.empty()) end_evaluation();
}

void hub_service::drop_from_evaluation(const std::string& id, const std::string& why) {
  if (!evaluating(id)) return;
  log(log_level::warning, "device " + id + " left out of the evaluation after round " + std::to_string(eval_->round) + ": " + why);
  eval_->waiting.erase(id);
  device_entry& d = (*devices_)[id];
  eval_->bytes_down += d.download ? d.download->out.bytes_sent_total() : 0;
  d.download.reset();
  if (eval_->waiting.empty()) end_evaluation();
}

void hub_service::end_evaluation() {
  deadline_timer_.cancel();
  auto phase = std::move(eval_);
  for (const auto& [id, e] : phase->waiting) {
    device_entry& d = (*devices_)[id];
    phase->bytes_down += d.download ? d.download->out.bytes_sent_total() : 0;
    d.download.reset();
  }
  engine_->note_federated(phase->scores, phase->metrics);
  phase->metrics.fed_bytes_down = phase->bytes_down;
  if (!phase->metrics.fed_devices)
    log(log_level::warning, "round " + std::to_string(phase->round) + ": no device evaluated the model");
  after_round(phase->metrics);
}

}  // namespace tessera::hub
