#include "device_evaluation.hpp"

#include "tessera/crypto/digest.hpp"
#include "tessera/net/task.hpp"

namespace tessera::hub {

using core::log_level;

std::vector<rounds::evaluator> device_evaluation::plan(const hub_context& ctx, const rounds::engine& engine, device_registry& devices) {
  std::vector<rounds::excluded_device> excluded;
  auto evaluators = engine.plan_evaluation(devices.ready_offers(), excluded);
  if (!evaluators) {
    ctx.say(log_level::error, "no device evaluates round " + std::to_string(engine.completed()) + ": " + evaluators.error().message);
    return {};
  }
  for (const auto& e : excluded) {
    device_entry& d = devices[e.id];
    if (d.told_over_budget) continue;
    d.told_over_budget = true;  // once per device (until its HELLO changes)
    ctx.say(log_level::warning, "device " + e.id + " does not evaluate the model: " + e.reason);
  }
  return std::move(evaluators).value();
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
  if (ctx.config.secure_aggregation.enabled) mask(evaluators);
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

void device_evaluation::mask(std::vector<rounds::evaluator>& evaluators) {
  std::map<core::codec_kind, std::size_t> codecs;
  for (const auto& e : evaluators) ++codecs[e.codec];
  const auto common = std::max_element(codecs.begin(), codecs.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::erase_if(evaluators, [&](const rounds::evaluator& e) {
    if (common == codecs.end() || e.codec == common->first) return false;
    ctx_->say(log_level::warning, "device " + e.id + " does not evaluate the model after round " + std::to_string(round_) + ": its copy travels in " +
                                      std::string(core::to_string(e.codec)) + ", the others' in " + std::string(core::to_string(common->first)) +
                                      ", and a masked evaluation sends one model to every device");
    return true;
  });
  auto sum = rounds::evaluation_sum(ctx_->config.secure_aggregation, evaluators, static_cast<std::int64_t>(round_));
  if (!sum) {
    ctx_->say(log_level::warning, "round " + std::to_string(round_) + ": the devices do not evaluate the model: " + sum.error().message);
    evaluators.clear();
    return;
  }
  max_examples_ = rounds::evaluation_max_examples(evaluators);
  auto party = std::make_unique<sum_party>(std::move(sum).value(), "the evaluation of round " + std::to_string(round_), round_);
  party_ = party.get();
  secure_.emplace(*ctx_, std::move(party), *devices_);
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
  if (!d.session) return;  // it gets the model when it reconnects (scores in the clear; a masked sum waits for its steps' deadlines)
  d.download_id = devices_->next_transfer();  // fresh, so a restarted agent never resumes another download
  d.download = std::make_shared<download_slot>(d.download_id, bytes, sha);
  net::msg::assign a{.round = round_,
                     .widths = widths_,
                     .hyper_json = hyper_json_,
                     .transfer = d.download_id,
                     .size = bytes->size(),
                     .blob_codec = e.codec,
                     .sha256 = sha,
                     .evaluate = true};
  if (party_ != nullptr) {
    a.secure = party_->part_for(id);
    a.max_examples = static_cast<std::uint64_t>(max_examples_);
    a.loss_bound = rounds::k_evaluation_loss_bound;
  }
  d.session->send(a);
  d.session->send_blob(std::shared_ptr<net::outgoing_transfer>(d.download, &d.download->out));
}

bool device_evaluation::on_reply(const std::string& id, device_entry& d, const net::msg::evaluation& e) {
  if (party_ != nullptr && party_->uploaded(id)) return false;  // sent again after a reconnect: its first is in the sum
  if (!expects(id) || e.round != round_ || e.transfer != d.download_id) {
    ctx_->say(log_level::warning, unasked(id, e.round));
    return false;
  }
  if (party_ != nullptr) {
    count_download(d);
    waiting_.erase(id);
    return secure_->take_vector(*party_, id, e.masked);
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
  if (party_ == nullptr) return waiting_.empty();
  party_->refuse(id, why);
  return secure_->after_leaving();
}



void device_evaluation::time_out() const {
  if (party_ != nullptr) return;  // the protocol ends it (its unmasking goes on with who uploaded)
  for (const auto& [id, e] : waiting_)
    ctx_->say(log_level::warning, "device " + id + " left out of the evaluation after round " + std::to_string(round_) +
                                      ": no answer within round_deadline_s");
}

rounds::round_metrics device_evaluation::finish() {
  for (const auto& [id, e] : waiting_) count_download((*devices_)[id]);
  if (party_ != nullptr) {
    auto released = party_->sum().finish();
    if (released) {
      if (auto ok = rounds::add_released_scores(released.value(), max_examples_, scores_); !ok) released = ok.error();
    }
    if (!released) ctx_->say(log_level::warning, "round " + std::to_string(round_) + ": the devices' scores are withheld: " + released.error().message);
  }
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
