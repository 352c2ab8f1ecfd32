// Tests of tessera/edge/job.hpp: what an assignment must pass before the agent reserves memory, and the
// stages of a job — without a hub or a socket.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/base/seeds.hpp"
#include "tessera/core/data/targets.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/edge/device_data.hpp"
#include "tessera/edge/job.hpp"
#include "tessera/net/task.hpp"
#include "../core/test_files.hpp"
#include "../crypto/test_pki.hpp"
#include "../support/text.hpp"

using namespace tessera;

namespace {

// The model of small_task().
core::model_spec task_spec() { return testing::spec_of(12, {16, 8}, 3); }

core::training_task small_task() {
  return {.arch = task_spec().full_arch(), .steps = 4, .batch = 8, .sgd = {.learning_rate = 0.05f, .momentum = 0.9f}};
}

// What a hub sends for `task`, with `params` as the blob.
net::msg::assign assign_for(const core::training_task& t, core::codec_kind codec, std::span<const std::byte> blob) {
  return {.round = 7,
          .widths = net::hidden_widths(t.arch),
          .hyper_json = net::task_to_json(t),
          .transfer = 42,
          .size = blob.size(),
          .blob_codec = codec,
          .sha256 = crypto::sha256_of(blob)};
}

edge::device_limits roomy() {
  return {.feature_count = 12, .max_batch = 64, .codecs = {core::codec_kind::f32, core::codec_kind::q8}, .arena_budget = 64u << 20};
}

std::vector<std::byte> encoded_params(const core::training_task& t, core::codec_kind codec, float value) {
  std::vector<float> params(core::param_count(t.arch), value);
  std::vector<std::byte> blob(core::encoded_bytes(t.arch, codec));
  REQUIRE(core::encode(t.arch, codec, params, blob).ok());
  return blob;
}


}  // namespace

TEST_CASE("edge error codes have stable names, the first and the last") {
  CHECK(core::error_name(edge::errc::bad_task) == "edge.bad_task");
  CHECK(core::error_name(edge::errc::data_over_budget) == "edge.data_over_budget");
  CHECK(core::error_name(edge::errc::secure_step) == "edge.secure_step");
}

TEST_CASE("check_assignment: every way an ASSIGN does not fit this device, each with its code") {
  const auto t = small_task();
  const auto blob = encoded_params(t, core::codec_kind::f32, 0.1f);
  CHECK(edge::check_assignment(assign_for(t, core::codec_kind::f32, blob), roomy()).ok());

  struct refusal {
    const char* name;
    void (*spoil)(net::msg::assign&, edge::device_limits&);
    std::error_code code;
    const char* words;
  };
  const refusal cases[] = {
      {"task that does not parse", [](net::msg::assign& a, edge::device_limits&) { a.hyper_json = R"({"inputs": 12})"; },
       edge::errc::bad_task, "ASSIGN: field"},
      {"inputs other than the data's features", [](net::msg::assign&, edge::device_limits& l) { l.feature_count = 13; },
       edge::errc::inputs_mismatch, "12 inputs, this device's data has 13 features"},
      {"batch over the reader's bound", [](net::msg::assign&, edge::device_limits& l) { l.max_batch = 4; },
       edge::errc::batch_too_large, "batch 8 exceeds this device's data.max_batch 4"},
      {"codec not enabled", [](net::msg::assign&, edge::device_limits& l) { l.codecs = {core::codec_kind::q8}; },
       edge::errc::codec_disabled, "codec f32 is not enabled"},
      {"size not the subnet's", [](net::msg::assign& a, edge::device_limits&) { a.size += 4; },
       edge::errc::size_mismatch, "bytes, the subnet in f32 is"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    auto a = assign_for(t, core::codec_kind::f32, blob);
    auto limits = roomy();
    c.spoil(a, limits);
    auto r = edge::check_assignment(a, limits);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == c.code);
    CHECK_MESSAGE(r.error().message.find(c.words) != std::string::npos, r.error().message);
  }

  // Over budget is refused when the arena is reserved, with both numbers.
  auto tight = roomy();
  tight.arena_budget = 1024;
  auto j = edge::job::start(assign_for(t, core::codec_kind::f32, blob), tight);
  REQUIRE_FALSE(j.ok());
  CHECK(j.error().code == core::errc::over_budget);
  CHECK(j.error().message.find("1024") != std::string::npos);
}

TEST_CASE("job: download, train, upload, each stage in turn; the update describes the upload exactly") {
  for (auto codec : {core::codec_kind::f32, core::codec_kind::q8}) {
    INFO(core::to_string(codec));
    const auto t = small_task();
    const auto blob = encoded_params(t, codec, 0.1f);
    auto started = edge::job::start(assign_for(t, codec, blob), roomy());
    REQUIRE(started.ok());
    auto j = started.value();
    CHECK(j->at() == edge::job::stage::downloading);
    CHECK(j->on_reconnect() == edge::job::resume_action::expect_download);
    CHECK(j->arena().layout().needed() == core::bytes_needed(t.arch, t.batch, true, codec));
    auto in = j->download();
    CHECK(j->owns(in.get()));
    REQUIRE(in->size() == blob.size());
    std::memcpy(in->data().data(), blob.data(), blob.size());  // where a session writes the chunks

    REQUIRE(j->downloaded().ok());
    CHECK(j->at() == edge::job::stage::training);
    CHECK(j->on_reconnect() == edge::job::resume_action::wait);
    testing::constant_batches data(12, 0.5f, 1.0f);
    auto report = j->train(data, nullptr);
    REQUIRE(report.ok());
    CHECK(report.value().steps == 4);
    const auto sha = crypto::sha256_of(j->blob());
    j->trained(report.value(), sha);
    CHECK(j->at() == edge::job::stage::uploading);
    CHECK(j->on_reconnect() == edge::job::resume_action::resend_upload);
    const net::msg::update& u = j->update();
    CHECK(u.round == 7);
    CHECK(u.examples == 32);
    CHECK(u.steps == 4);
    CHECK((u.loss && std::isfinite(*u.loss)));
    CHECK(u.transfer == net::upload_transfer_id(42));
    CHECK(u.size == blob.size());
    CHECK(u.blob_codec == codec);
    CHECK(u.sha256 == sha);
    auto out = j->upload();
    CHECK(j->owns(out.get()));
    CHECK(out->size() == blob.size());
    CHECK(out->sha256() == sha);
    // The upload decodes to the trained parameters, which moved from where they started.
    std::vector<float> back(core::param_count(t.arch));
    REQUIRE(core::decode(t.arch, codec, j->blob(), back).ok());
    CHECK(std::any_of(back.begin(), back.end(), [](float v) { return std::fabs(v - 0.1f) > 1e-3f; }));
    j->upload_sent();
    CHECK(j->at() == edge::job::stage::waiting_result);
    CHECK(j->on_reconnect() == edge::job::resume_action::resend_upload);
  }
}

TEST_CASE("job: an evaluating ASSIGN scores the whole model on the validation split in inference memory") {
  testing::temp_dir d("evaluate");
  // 50 examples of 12 features; 10 held out (validation_fraction 0.2).
  std::string csv;
  core::rng r(3);
  for (int i = 0; i < 50; ++i) {
    for (int f = 0; f < 12; ++f) csv += std::to_string(r.uniform_double()) + ",";
    csv += std::to_string(i % 3) + "\n";
  }
  testing::write_bytes(d.file("data.csv"), csv);
  const core::data_source source{.format = core::data_format::csv, .features = d.file("data.csv"), .label_column = 12,
                                 .norm = core::normalization::none};
  auto data = edge::device_data::open({.source = source, .validation_fraction = 0.2}, 9);
  REQUIRE(data.ok());
  REQUIRE(data.value()->validation_examples() == 10);

  auto t = small_task();
  t.steps = 1;
  const auto blob = encoded_params(t, core::codec_kind::f32, 0.0f);
  std::vector<float> params(core::param_count(t.arch));
  core::initialize(task_spec(), params);
  std::vector<std::byte> model(core::encoded_bytes(t.arch, core::codec_kind::f32));
  REQUIRE(core::encode(t.arch, core::codec_kind::f32, params, model).ok());
  auto a = assign_for(t, core::codec_kind::f32, model);
  a.evaluate = true;
  // Its memory is inference's: a budget too small to train the model still scores it; a smaller one
  // is refused with both numbers.
  const std::size_t need = core::inference_bytes(t.arch, t.batch, core::codec_kind::f32);
  REQUIRE(need < core::bytes_needed(t.arch, t.batch, true, core::codec_kind::f32));
  auto limits = roomy();
  limits.arena_budget = need;
  auto trains = edge::job::start(assign_for(t, core::codec_kind::f32, model), limits);
  CHECK(trains.error().code == core::errc::over_budget);
  limits.arena_budget = need - 1;
  auto small = edge::job::start(a, limits);
  REQUIRE_FALSE(small.ok());
  CHECK(small.error().code == core::errc::over_budget);
  CHECK(small.error().message.find("evaluating the model") != std::string::npos);
  CHECK(small.error().message.find(std::to_string(need)) != std::string::npos);
  limits.arena_budget = need;
  auto started = edge::job::start(a, limits);
  REQUIRE(started.ok());
  auto j = started.value();
  CHECK(j->evaluates());
  CHECK(j->arena().layout().needed() == need);
  std::memcpy(j->download()->data().data(), model.data(), model.size());
  REQUIRE(j->downloaded().ok());
  auto score = j->evaluate(*data.value());
  REQUIRE(score.ok());
  CHECK(score.value().round == 7);
  CHECK(score.value().transfer == 42);
  CHECK(score.value().examples == 10);
  // The same figures as scoring the held-out rows directly.
  core::memory_table all = core::load_data(source, nullptr).value();
  const auto rows = core::held_out_rows(50, 0.2, core::validation_seed(9));
  core::memory_table held = all.subset(rows, "held out");
  const auto direct = core::evaluate(core::network(t.arch), params, held, t.batch).value();
  CHECK(score.value().correct == static_cast<std::uint64_t>(direct.correct));
  CHECK(score.value().loss_sum == doctest::Approx(direct.loss_sum).epsilon(1e-6));
}

TEST_CASE("job: a download with a value that is not finite is refused as bad_download and stays where it was") {
  for (auto codec : {core::codec_kind::f32, core::codec_kind::q8}) {
    INFO(core::to_string(codec));
    const auto t = small_task();
    auto blob = encoded_params(t, codec, 0.1f);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(blob.data(), &nan, sizeof nan);  // the first f32 value, or the first q8 row's scale
    auto j = edge::job::start(assign_for(t, codec, blob), roomy()).value();
    std::memcpy(j->download()->data().data(), blob.data(), blob.size());
    auto r = j->downloaded();
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == edge::errc::bad_download);
    CHECK(j->at() == edge::job::stage::downloading);
  }
}

TEST_CASE("job: cancelled training reports cancelled, not a failure") {
  const auto t = small_task();
  const auto blob = encoded_params(t, core::codec_kind::f32, 0.1f);
  auto j = edge::job::start(assign_for(t, core::codec_kind::f32, blob), roomy()).value();
  std::memcpy(j->download()->data().data(), blob.data(), blob.size());
  REQUIRE(j->downloaded().ok());
  testing::constant_batches data(12, 0.5f, 1.0f);
  const std::atomic<bool> cancel{true};
  auto r = j->train(data, &cancel);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::cancelled);
}

// ---- data that does not suit the model: each refused once, naming the file and the example ----------

namespace {

// A device whose data is a CSV of `rows` (three features, label last, under a header line) in a folder
// of its own, opened as a device opens its data; and the ASSIGNs it checks against that data.
class csv_device {
 public:
  csv_device(const std::string& name, const std::string& rows) : path_(dir_.file(name)) {
    testing::write_bytes(path_, "width,height,depth,label\n" + rows);
    auto data = edge::device_data::open(
        {.source = {.format = core::data_format::csv, .features = path_, .label_column = 3, .header = true,
                    .norm = core::normalization::none},
         .max_batch = 64},
        1);
    REQUIRE_MESSAGE(data.ok(), (data.ok() ? "" : data.error().message));
    data_ = std::move(data).value();
  }

  // The CSV file, as the messages name it.
  [[nodiscard]] const std::string& path() const { return path_; }

  // The ASSIGN of a model with `inputs` inputs and `outputs` outputs for `task`, checked against the data.
  [[nodiscard]] core::result<core::training_task> check(core::task_kind task, std::int64_t outputs, std::int64_t inputs = 3) const {
    core::model_spec spec = testing::spec_of(inputs, {8}, outputs);
    spec.task = task;
    const core::training_task t{.arch = spec.full_arch(), .steps = 2, .batch = 4, .sgd = {.learning_rate = 0.1f}};
    const auto blob = encoded_params(t, core::codec_kind::f32, 0.1f);
    const edge::device_data& data = *data_;
    const edge::device_limits limits{.feature_count = data.feature_count(), .max_batch = 64, .codecs = {core::codec_kind::f32},
                                     .arena_budget = 64u << 20,
                                     .check_targets = [&data](core::task_kind k, std::int64_t o) { return data.check_targets(k, o); },
                                     .data_name = data.name()};
    return edge::check_assignment(assign_for(t, core::codec_kind::f32, blob), limits);
  }
  // The error check() must end in.
  [[nodiscard]] core::error refusal(core::task_kind task, std::int64_t outputs, std::int64_t inputs = 3) const {
    return testing::error_of(check(task, outputs, inputs));
  }

 private:
  testing::temp_dir dir_{"refusal"};  // first: removed after the data is closed
  std::string path_;
  std::unique_ptr<edge::device_data> data_;
};

}  // namespace

TEST_CASE("refusal: a label at or above the model's outputs, with the file and the row") {
  const csv_device device("high.csv", "1,2,3,0\n1,2,3,1\n1,2,3,12\n1,2,3,2\n");
  const auto e = device.refusal(core::task_kind::classification, 10);
  CHECK(e.code == edge::errc::labels_mismatch);
  CHECK(e.message == device.path() + ": line 4: label 12, but the model has 10 classes (labels 0 to 9)");
  CHECK(core::error_name(e.code) == "edge.labels_mismatch");  // what the hub reads to stop assigning
}

TEST_CASE("refusal: a negative label, with the file and the row") {
  const csv_device device("neg.csv", "1,2,3,0\n\n1,2,3,-1\n");  // a blank line: not an example, still a line
  const auto e = device.refusal(core::task_kind::classification, 10);
  CHECK(e.code == edge::errc::labels_mismatch);
  CHECK(e.message == device.path() + ": line 4: label -1 is negative (labels are class indices from 0)");
}

TEST_CASE("refusal: a fractional label, with the file and the row") {
  const csv_device device("frac.csv", "1,2,3,0\n1,2,3,1\n1,2,3,2.5\n");
  const auto e = device.refusal(core::task_kind::classification, 10);
  CHECK(e.code == edge::errc::labels_mismatch);
  CHECK(e.message == device.path() + ": line 4: label 2.5 is not a whole number (labels are class indices)");
  // The same data suits a regression model with one output.
  CHECK(device.check(core::task_kind::regression, 1).ok());
}

TEST_CASE("refusal: a target that is not finite, with the file and the row") {
  testing::temp_dir d("targets-nan");
  // The CSV reader refuses it as it reads, naming the line and the column.
  testing::write_bytes(d.file("nan.csv"), "1,2,3,0.5\n1,2,3,nan\n");
  auto csv = edge::device_data::open(
      {.source = {.format = core::data_format::csv, .features = d.file("nan.csv"), .label_column = 3, .norm = core::normalization::none}},
      1);
  REQUIRE_FALSE(csv.ok());
  CHECK(csv.error().message == d.file("nan.csv") + ": line 2, column 4: 'nan' is not a finite 32-bit float");
  // A .npy file of float64 targets: its reader refuses the record as the device opens its data.
  const std::vector<float> x(3 * 3, 1.0f);
  REQUIRE(core::write_npy_features(d.file("x.npy"), 3, x).ok());
  const std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
  std::string npy("\x93NUMPY\x01\x00", 8);
  std::string padded = header + std::string(128 - 10 - header.size() - 1, ' ') + "\n";
  npy += static_cast<char>(padded.size() & 0xff);
  npy += static_cast<char>(padded.size() >> 8);
  npy += padded;
  for (const double v : {0.5, 1.5, std::numeric_limits<double>::quiet_NaN()})
    npy.append(reinterpret_cast<const char*>(&v), sizeof v);
  testing::write_bytes(d.file("y.npy"), npy);
  auto data = edge::device_data::open(
      {.source = {.format = core::data_format::npy, .features = d.file("x.npy"), .labels = d.file("y.npy"), .norm = core::normalization::none}},
      1);
  REQUIRE_FALSE(data.ok());
  CHECK(data.error().message == d.file("y.npy") + ": record 2 of 3: label nan is not a finite float32");
  // Targets that reach a check without a reader's (a table in memory) are refused against the model,
  // naming the example.
  core::target_summary s;
  const float t[] = {0.5f, std::numeric_limits<float>::infinity()};
  s.add(t);
  const auto e = testing::error_of(core::check_targets(s, core::task_kind::regression, 1, [](std::int64_t i) {
    return "table: example " + std::to_string(i);
  }));
  CHECK(e.message == "table: example 1: the target is not a finite number");
}

TEST_CASE("refusal: a feature count other than the model's inputs, with the file") {
  const csv_device device("three.csv", "1,2,3,0\n4,5,6,1\n");
  const auto e = device.refusal(core::task_kind::classification, 10, /*inputs=*/4);
  CHECK(e.code == edge::errc::inputs_mismatch);
  CHECK(e.message == "the subnet takes 4 inputs, this device's data (" + device.path() + ") has 3 features");
}

TEST_CASE("secure aggregation: the device's configuration decides, and its buffers count against the budget") {
  const auto t = small_task();
  const auto blob = encoded_params(t, core::codec_kind::f32, 0.1f);
  auto plain = assign_for(t, core::codec_kind::f32, blob);
  auto secure = plain;
  net::msg::secure_assign sa;
  sa.params.round = 9;
  sa.params.threshold = 2;
  sa.params.segments.push_back({.length = core::param_count(t.arch) + 1, .min_aggregate = 2});
  sa.segments = {0};
  sa.upload_size = sa.params.segments[0].length * 4;
  secure.secure = sa;

  // secure_aggregation off (no identity): a secure assignment is refused; require: a plain one is.
  auto off = roomy();
  auto r = edge::check_assignment(secure, off);
  REQUIRE(!r.ok());
  CHECK(r.error().code == edge::errc::secure_refused);
  auto require = roomy();
  require.require_secure = true;
  r = edge::check_assignment(plain, require);
  REQUIRE(!r.ok());
  CHECK(r.error().code == edge::errc::secure_refused);
  CHECK(r.error().message.find("'require'") != std::string::npos);
  auto evaluation = plain;  // scoring the model sends its scores in the clear: require refuses it too
  evaluation.evaluate = true;
  r = edge::check_assignment(evaluation, require);
  REQUIRE(!r.ok());
  CHECK(r.error().code == edge::errc::privacy_policy);
  CHECK(r.error().message.find("'require'") != std::string::npos);
  CHECK(edge::check_assignment(evaluation, roomy()).ok());

  // A budget that holds the arena but not the secure buffers: refused before anything is reserved.
  const std::size_t arena = core::bytes_needed(t.arch, t.batch, true, core::codec_kind::f32);
  const std::size_t extra = core::secure_bytes(t.arch, 1);
  CHECK(extra >= core::param_count(t.arch) * 16);
  const auto& pki = test::test_pki::get();
  auto key = crypto::signing_key::load(pki.dev_a.key);
  REQUIRE(key.ok());
  edge::secure_identity me{.id = "dev-a", .certificate_pem = testing::read_text(pki.dev_a.cert), .key = std::move(key).value(),
                           .ca_pem = testing::read_text(pki.ca.cert), .crl = {}};
  edge::device_limits tight = roomy();
  tight.secure = &me;
  tight.arena_budget = arena + extra;
  CHECK(edge::job::start(secure, tight).ok());  // exactly enough
  tight.arena_budget = arena + extra - 1;
  auto started = edge::job::start(secure, tight);
  REQUIRE(!started.ok());
  CHECK(started.error().code == core::errc::over_budget);
}

TEST_CASE("secure aggregation: an ASSIGN whose ring cannot exist is refused before its arena, naming the fields") {
  const auto t = small_task();
  const auto blob = encoded_params(t, core::codec_kind::f32, 0.1f);
  auto a = assign_for(t, core::codec_kind::f32, blob);
  net::msg::secure_assign sa;
  sa.params.round = 9;
  sa.params.threshold = 2;
  sa.params.segments.push_back({.length = core::param_count(t.arch) + 1, .min_aggregate = 2});
  sa.segments = {0};
  const auto& pki = test::test_pki::get();
  auto key = crypto::signing_key::load(pki.dev_a.key);
  REQUIRE(key.ok());
  edge::secure_identity me{.id = "dev-a", .certificate_pem = testing::read_text(pki.dev_a.cert), .key = std::move(key).value(),
                           .ca_pem = testing::read_text(pki.ca.cert), .crl = {}};

  struct ring_case {
    const char* name;
    int bits;
    std::uint64_t summands;
    std::size_t threshold;
    const char* words;  // empty: accepted
  };
  const ring_case cases[] = {
      {"16 bits cannot hold 100000 summands (net's parser lets both through)", 16, 100000, 2,
       "the secure part's fields 'bits' 16 and 'summands' 100000 make no ring: a ring of 16 bits cannot hold the sum of 100000 inputs"},
      {"the largest sum 16 bits hold", 16, 32767, 2, ""},
      {"one summand more", 16, 32768, 2, "fields 'bits' 16 and 'summands' 32768 make no ring"},
      {"32 bits hold 100000 summands", 32, 100000, 2, ""},
      {"a ring sized for fewer devices than the threshold", 32, 3, 4,
       "the secure part's field 'summands' 3 is below its 'threshold' 4: no roster is both large enough to unmask and small enough"},
      {"no summands: the ring is the roster's, at least the threshold", 16, 0, 4096, ""},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    sa.params.bits = c.bits;
    sa.params.summands = c.summands;
    sa.params.threshold = c.threshold;
    sa.upload_size = sa.params.segments[0].length * crypto::secagg_value_bytes(c.bits);
    a.secure = sa;
    edge::device_limits limits = roomy();
    limits.secure = &me;
    const auto checked = edge::check_assignment(a, limits);
    if (*c.words == '\0') {
      CHECK_MESSAGE(checked.ok(), (checked.ok() ? "" : checked.error().message));
      continue;
    }
    REQUIRE_FALSE(checked.ok());
    CHECK(checked.error().code == edge::errc::secure_step);
    CHECK_MESSAGE(checked.error().message.find(c.words) != std::string::npos, checked.error().message);
    // Refused before anything is reserved: a budget too small for the arena still hears the ring's reason.
    limits.arena_budget = 1024;
    const auto started = edge::job::start(a, limits);
    REQUIRE_FALSE(started.ok());
    CHECK(started.error().code == edge::errc::secure_step);
    CHECK(started.error().message == checked.error().message);
    // An evaluation's secure part is its masked score's, which secure_round::start_sum checks: the
    // training ring's fields do not stop it here; a device without secure aggregation refuses it.
    auto evaluation = a;
    evaluation.evaluate = true;
    edge::device_limits with_keys = roomy();
    with_keys.secure = &me;
    CHECK(edge::check_assignment(evaluation, with_keys).ok());
    CHECK(edge::check_assignment(evaluation, roomy()).error().code == edge::errc::secure_refused);
  }
}

TEST_CASE("privacy policy: the noise multiplier a device finds in a private round counts adaptive clipping's count value") {
  // A ring for 1024 summands; each device's share carries σ 1 over sums of 2 for the change alone. With
  // the count value at the clip (fitted_value = clip) one device moves the sum by √2 clips: σ is 1/√2.
  crypto::secagg_params p{.round = 1, .bits = 32, .clip = 1.0, .threshold = 2, .segments = {{.length = 11, .min_aggregate = 2}}};
  p.summands = 1024;
  const auto limit = static_cast<double>(crypto::fixed_point::create(p.clip, p.bits, p.summands).value().limit());
  p.noise = limit * limit / 2.0;
  net::msg::assign a{};
  a.secure = net::msg::secure_assign{.params = p, .segments = {0}, .rounding_key = {}, .upload_size = 11 * 4};
  core::training_task task{};
  task.clip_norm = 1.0;
  const edge::privacy_policy one{.min_noise_multiplier = 1.0};
  CHECK(edge::check_assignment_policy(a, task, one, edge::secure_mode::allow).ok());
  a.secure->params.fitted_value = 1.0;
  const auto counted = edge::check_assignment_policy(a, task, one, edge::secure_mode::allow);
  REQUIRE_FALSE(counted.ok());
  CHECK(counted.error().message.find("a noise multiplier of 0.7071") != std::string::npos);
  CHECK(edge::check_assignment_policy(a, task, {.min_noise_multiplier = 0.7}, edge::secure_mode::allow).ok());
  // Shares sized for 4 contributors (a quarter of the variance each): σ 1 again, counted over the 4
  // survivors the device then requires of any released sum (crypto::secagg_release_minimum), and a
  // min_group of 4 is met; without them a quarter share is σ/√2.
  a.secure->params.fitted_value = 0;
  a.secure->params.noise = limit * limit / 4.0;
  CHECK_FALSE(edge::check_assignment_policy(a, task, one, edge::secure_mode::allow).ok());
  a.secure->params.noise_contributors = 4;
  CHECK(edge::check_assignment_policy(a, task, {.min_group = 4, .min_noise_multiplier = 1.0}, edge::secure_mode::allow).ok());
  CHECK(edge::fewest_contributors(*a.secure) == 4);
  // A device that wants more of the noise its own (against the hub with colluding devices) caps the count.
  const auto capped = edge::check_assignment_policy(a, task, {.max_noise_contributors = 3}, edge::secure_mode::allow);
  REQUIRE_FALSE(capped.ok());
  CHECK(capped.error().message == "the round's noise is sized for 4 contributors, each adding 1/4 of it; this device's "
                                  "privacy.max_noise_contributors is 3");
  CHECK(edge::check_assignment_policy(a, task, {.max_noise_contributors = 4}, edge::secure_mode::allow).ok());
  const auto group = edge::check_assignment_policy(a, task, {.min_group = 5}, edge::secure_mode::allow);
  REQUIRE_FALSE(group.ok());
  CHECK(group.error().message.find("released from 4 device(s) (the contributors its noise is sized for)") != std::string::npos);
  a.secure->params.noise = limit * limit / 2.0;
  a.secure->params.noise_contributors = 0;
  a.secure->params.fitted_value = 1.0;
  // A clip of the change other than the ring's: the noise is sized for a change it does not bound.
  task.clip_norm = 2.0;
  CHECK(edge::check_assignment_policy(a, task, {.min_noise_multiplier = 0.7}, edge::secure_mode::allow).error().message.find("not its ring's clip") !=
        std::string::npos);
  // Asking for noise refuses what leaves in the clear: statistics and evaluations.
  CHECK(edge::check_request_policy("statistics", one, edge::secure_mode::allow).error().message.find("with no noise") != std::string::npos);
  CHECK(edge::check_request_policy("evaluation", one, edge::secure_mode::allow).error().code == edge::errc::privacy_policy);
  // min_threshold raises the majority, never lowers it: 2 asked, 5 holders need 3.
  CHECK_FALSE(edge::check_roster_threshold(2, 4, {.min_threshold = 2}).ok());
  CHECK(edge::check_roster_threshold(3, 4, {.min_threshold = 2}).ok());
  CHECK_FALSE(edge::check_roster_threshold(3, 4, {.min_threshold = 4}).ok());
}

TEST_CASE("job: frozen layers in q8 come first in the download, stay so in the arena, and leave the upload; a device without q8 refuses them") {
  auto t = small_task();
  t.arch.frozen = 1;
  t.arch.frozen_codec = core::codec_kind::q8;
  std::vector<float> sent(core::param_count(t.arch));
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = 0.01f * static_cast<float>(i % 37) - 0.1f;
  std::vector<std::byte> blob(core::encoded_bytes(t.arch, core::codec_kind::f32));
  REQUIRE(core::encode(t.arch, core::codec_kind::f32, sent, blob).ok());
  CHECK(blob.size() == core::frozen_bytes(t.arch) + core::update_bytes(t.arch, core::codec_kind::f32));

  auto f32_only = roomy();
  f32_only.codecs = {core::codec_kind::f32};
  const auto refused = edge::check_assignment(assign_for(t, core::codec_kind::f32, blob), f32_only);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == edge::errc::codec_disabled);
  CHECK(refused.error().message.find("the frozen layers come in q8, a codec not enabled on this device") != std::string::npos);

  auto started = edge::job::start(assign_for(t, core::codec_kind::f32, blob), roomy());
  REQUIRE(started.ok());
  auto j = started.value();
  CHECK(j->arena().layout().needed() == core::bytes_needed(t.arch, t.batch, true, core::codec_kind::f32));
  CHECK(j->arena().layout().frozen_bytes == core::frozen_bytes(t.arch));
  auto in = j->download();
  REQUIRE(in->size() == blob.size());
  std::memcpy(in->data().data(), blob.data(), blob.size());
  REQUIRE(j->downloaded().ok());
  testing::constant_batches data(12, 0.5f, 1.0f);
  auto report = j->train(data, nullptr);
  REQUIRE(report.ok());
  j->trained(report.value(), crypto::sha256_of(j->update_blob()));
  CHECK(j->update().size == core::update_bytes(t.arch, core::codec_kind::f32));
  // The hub lays the update over what it sent: the trained layers moved, the frozen one is as sent.
  std::vector<float> back = sent;
  REQUIRE(core::decode_update(t.arch, core::codec_kind::f32, j->update_blob(), back).ok());
  const std::size_t off = core::trained_offset(t.arch);
  CHECK(std::equal(back.begin(), back.begin() + static_cast<std::ptrdiff_t>(off), sent.begin()));
  CHECK_FALSE(std::equal(back.begin() + static_cast<std::ptrdiff_t>(off), back.end(), sent.begin() + static_cast<std::ptrdiff_t>(off)));
}
