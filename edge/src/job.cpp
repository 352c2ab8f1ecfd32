#include "tessera/edge/job.hpp"

#include <limits>

#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/net/task.hpp"

namespace tessera::edge {

core::result<core::training_task> check_assignment(const net::msg::assign& a, const device_limits& limits) {
  auto task = net::task_from_assign(a);
  if (!task) return make_error(errc::bad_task, task.error().message);
  const core::training_task& t = task.value();
  if (t.arch.inputs() != limits.feature_count)
    return make_error(errc::inputs_mismatch, "the subnet takes " + std::to_string(t.arch.inputs()) + " inputs, this device's data " +
                                                 (limits.data_name.empty() ? "" : "(" + limits.data_name + ") ") + "has " +
                                                 std::to_string(limits.feature_count) + " features");
  if (limits.requires_normalization && !t.normalization)
    return make_error(errc::inputs_mismatch, "this device's data.normalization is standardize, but the model carries no input "
                                             "statistics (its model.input_normalization is none)");
  if (limits.check_targets) {
    if (auto ok = limits.check_targets(t.arch.task, t.arch.outputs()); !ok) return make_error(errc::labels_mismatch, ok.error().message);
  }
  // The data reader hands out at most a micro-batch at a time when the step is taken in parts.
  if (core::memory_rows(t) > limits.max_batch)
    return make_error(errc::batch_too_large, (t.micro_batch > 0 ? "micro_batch " : "batch ") + std::to_string(core::memory_rows(t)) +
                                                 " exceeds this device's data.max_batch " + std::to_string(limits.max_batch));
  if (std::find(limits.codecs.begin(), limits.codecs.end(), a.blob_codec) == limits.codecs.end())
    return make_error(errc::codec_disabled, "codec " + std::string(core::to_string(a.blob_codec)) + " is not enabled on this device");
  if (std::find(limits.codecs.begin(), limits.codecs.end(), t.arch.frozen_codec) == limits.codecs.end())
    return make_error(errc::codec_disabled, "the frozen layers come in " + std::string(core::to_string(t.arch.frozen_codec)) +
                                                ", a codec not enabled on this device");
  if (a.secure && limits.secure == nullptr)
    return make_error(errc::secure_refused, std::string(a.evaluate ? "the evaluation" : "the assignment") +
                                                " uses secure aggregation, which this device's secure_aggregation (off) refuses");
  if (!a.secure && !a.evaluate && limits.require_secure)
    return make_error(errc::secure_refused, "the assignment uploads in the clear; this device's secure_aggregation is 'require'");
  if (a.secure && !a.evaluate) TESSERA_TRY(secure_round::check(*a.secure, t.arch));
  TESSERA_TRY(check_assignment_policy(a, t, limits.policy, limits.require_secure ? secure_mode::require : secure_mode::allow));
  if (limits.budget != nullptr && a.secure && !a.evaluate) {
    TESSERA_ASSIGN_OR_RETURN(const auto release, round_mechanism(a.secure->params, fewest_contributors(*a.secure), core::param_count(t.arch)));
    TESSERA_TRY(limits.budget->check(release, crypto::secagg_sampling_rate(a.secure->params)));
  }
  const std::size_t expected = core::encoded_bytes(t.arch, a.blob_codec);
  if (a.size != expected)
    return make_error(errc::size_mismatch, "declared size " + std::to_string(a.size) + " bytes, the subnet in " +
                                               std::string(core::to_string(a.blob_codec)) + " is " + std::to_string(expected) + " bytes");
  return task;
}

job::~job() {
  arena_.reset();  // before anyone hears it is gone
  if (released_) released_();
}

core::result<std::shared_ptr<job>> job::start(const net::msg::assign& a, const device_limits& limits) {
  TESSERA_ASSIGN_OR_RETURN(auto task, check_assignment(a, limits));
  // Secure aggregation's buffers come out of the same budget as the arena.
  const bool secure = a.secure.has_value() && !a.evaluate;
  const bool clip = task.clip_norm > 0 && !a.evaluate;
  const std::size_t extra = core::beside_arena(task.arch, secure ? a.secure->segments.size() : 0, clip);
  if (extra >= limits.arena_budget)
    return core::make_error(core::errc::over_budget, std::string(secure ? "secure aggregation" : "clipping the change") + " alone needs " +
                                                         std::to_string(extra) + " bytes, the budget is " + std::to_string(limits.arena_budget));
  const std::int64_t rows = core::memory_rows(task);  // a micro-batch's activations, when the step is taken in parts
  TESSERA_ASSIGN_OR_RETURN(auto arena, a.evaluate ? training_arena::reserve_for_evaluation(task.arch, rows, a.blob_codec, limits.arena_budget)
                                                  : training_arena::reserve(task.arch, rows, task.sgd.momentum != 0.0f,
                                                                            a.blob_codec, limits.arena_budget - extra));
  std::unique_ptr<secure_round> secure_part;
  if (secure) {
    TESSERA_ASSIGN_OR_RETURN(secure_part, secure_round::start(*a.secure, a.round, a.sha256, task.arch, *limits.secure, limits.policy));
  }
  std::shared_ptr<job> j(new job());
  j->round_ = a.round;
  j->evaluate_ = a.evaluate;
  j->download_id_ = a.transfer;
  j->task_ = std::move(task);
  j->codec_ = a.blob_codec;
  j->arena_ = std::move(arena);
  j->blob_ = core::blob_region(j->arena_->block(), j->codec_, static_cast<std::size_t>(a.size));
  j->upload_ = core::update_region(j->arena_->block(), j->task_.arch, j->codec_);
  j->download_state_.emplace(a.transfer, j->blob_, a.sha256);
  j->secure_ = std::move(secure_part);
  if (secure && limits.budget != nullptr) {
    j->budget_ = limits.budget;
    TESSERA_ASSIGN_OR_RETURN(j->release_, round_mechanism(a.secure->params, fewest_contributors(*a.secure), core::param_count(j->task_.arch)));
  }
  if (clip) j->received_.resize(core::param_count(j->task_.arch));
  return j;
}

job::resume_action job::on_reconnect() const noexcept {
  switch (at_) {
    case stage::downloading: return resume_action::expect_download;
    case stage::training:
    case stage::masking: return resume_action::wait;
    case stage::uploading:
    case stage::waiting_result: return resume_action::resend_upload;
  }
  return resume_action::wait;
}

core::result<void> job::downloaded() {
  TESSERA_ASSERT(at_ == stage::downloading);
  if (auto ok = core::take_download(arena_->block(), task_.arch, codec_, blob_); !ok)
    return make_error(errc::bad_download, ok.error().message);
  if (secure_) secure_->keep_received(arena_->params());
  if (!received_.empty()) std::copy(arena_->params().begin(), arena_->params().end(), received_.begin());
  at_ = stage::training;
  return {};
}

core::result<net::msg::evaluation> job::evaluate(device_data& data) {
  TESSERA_ASSERT(evaluate_ && at_ == stage::training);
  const core::network net(task_.arch);
  auto ev = data.validate(net, arena_->params(), arena_->buffers(), core::memory_rows(task_), task_.normalization.get());
  if (!ev) return make_error(errc::training_failed, "evaluation: " + ev.error().message);
  // A model whose outputs overflow scores no loss: said as such, not sent as a null the hub cannot read.
  if (!std::isfinite(ev.value().loss_sum))
    return make_error(errc::training_failed, "evaluation: the model's loss on the " + std::to_string(ev.value().examples) +
                                                 " validation examples is not finite (its outputs overflow)");
  return net::msg::evaluation{.round = round_,
                              .transfer = download_id_,
                              .examples = static_cast<std::uint64_t>(ev.value().examples),
                              .loss_sum = ev.value().loss_sum,
                              .correct = static_cast<std::uint64_t>(ev.value().correct)};
}

core::result<core::local_training_report> job::train(core::batch_source& data, const std::atomic<bool>* cancel) {
  auto report = core::train_for_upload(arena_->block(), task_, codec_, upload_, data, cancel, received_);
  if (!report && report.error().code != core::errc::cancelled)
    return make_error(errc::training_failed, report.error().message);
  return report;
}

void job::prepare_upload(const core::local_training_report& r, std::span<const std::byte> upload, const net::digest& sha256,
                         std::optional<double> loss, std::uint64_t clipped) {
  update_ = {.round = round_,
             .examples = static_cast<std::uint64_t>(r.examples),
             .steps = static_cast<std::uint64_t>(r.steps),
             .loss = loss,
             .transfer = net::upload_transfer_id(download_id_),
             .size = upload.size(),
             .blob_codec = codec_,
             .sha256 = sha256,
             .clipped = clipped};
  upload_state_.emplace(update_.transfer, upload, sha256);
  at_ = stage::uploading;
}

void job::trained(const core::local_training_report& r, const net::digest& sha256) {
  TESSERA_ASSERT(at_ == stage::training);
  received_ = {};
  prepare_upload(r, upload_, sha256, r.mean_loss, r.clipped ? 1 : 0);
}

void job::training_failed_privately() {
  TESSERA_ASSERT(at_ == stage::training && secure_);
  secure_->withdraw();
  core::local_training_report r;
  r.steps = task_.steps;
  r.examples = task_.steps * task_.batch;
  r.mean_loss = std::numeric_limits<double>::quiet_NaN();
  trained_secure(r);
}

void job::trained_secure(const core::local_training_report& r) {
  TESSERA_ASSERT(at_ == stage::training && secure_);
  report_ = r;
  at_ = stage::masking;
}

core::result<void> job::masked() {
  TESSERA_ASSERT(at_ == stage::masking && secure_);
  const double most = static_cast<double>(task_.steps) * static_cast<double>(task_.batch);
  const double weight = most > 0 ? std::min(1.0, static_cast<double>(report_.examples) / most) : 0.0;
  TESSERA_TRY(secure_->mask(arena_->params(), weight, !report_.clipped));
  // Counted before the masked input can leave: a round that fails after this is spent all the same.
  if (budget_ != nullptr) TESSERA_TRY(budget_->spend(release_, secure_->sampling_rate()));
  const auto upload = secure_->upload();
  // Only the masked input tells the hub anything: the device's loss and the values its clip saturated
  // stay here (the agent's log has them).
  prepare_upload(report_, upload, crypto::sha256_of(upload), std::nullopt, 0);
  return {};
}

void job::upload_sent() noexcept {
  if (at_ == stage::uploading) at_ = stage::waiting_result;
}

}  // namespace tessera::edge
