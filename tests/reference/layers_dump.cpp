// layers_dump: one batch through a network, for a reference to compare with. Writes, in OUT_DIR:
//   params.safetensors  the model (core::save_model: PyTorch's layouts, the spec in its metadata)
//   grads.safetensors   d(mean loss)/d(params) in the same layouts (the gradient has the parameters' layout)
//   batch.safetensors   x [batch, inputs] as input_shape writes an example, y [batch] (class indices),
//                       logits [batch, outputs] from network::forward, loss [1] from forward_backward
// The parameters are the seeded initial model with every value (LayerNorm's gains and shifts too) moved
// by up to ±0.1, so that no gain is 1 and no shift 0; the inputs are uniform in [0, 1).
//   layers_dump SPEC_JSON OUT_DIR BATCH SEED
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/io/model_io.hpp"
#include "tessera/core/io/safetensors.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace {

using namespace tessera;

int fail(const std::string& why) {
  std::fprintf(stderr, "layers_dump: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return fail("usage: layers_dump SPEC_JSON OUT_DIR BATCH SEED");
  auto spec = core::load_model_spec(argv[1]);
  if (!spec) return fail(spec.error().message);
  const std::string out = argv[2];
  const std::int64_t rows = std::atoll(argv[3]);
  const auto seed = static_cast<std::uint64_t>(std::atoll(argv[4]));
  if (rows < 1 || rows > 4096) return fail("BATCH must be in [1, 4096]");

  const core::network net(spec.value().full_arch());
  const auto& arch = net.arch();
  std::vector<float> params(net.param_count()), grads(net.param_count());
  core::initialize(spec.value(), params);
  core::rng r(seed);
  for (float& p : params) p += 0.2f * (r.uniform() - 0.5f);

  const auto inputs = static_cast<std::size_t>(arch.inputs());
  const auto outputs = static_cast<std::size_t>(arch.widths.back());
  const auto n = static_cast<std::size_t>(rows);
  std::vector<float> x(n * inputs), y(n);
  for (float& v : x) v = r.uniform();
  for (float& v : y) v = static_cast<float>(r.below(outputs));

  std::vector<float> workspace(net.workspace_floats(rows));
  net.forward(params, x.data(), rows, workspace);
  const auto logits = net.outputs(workspace, rows);
  std::vector<float> out_logits(logits.begin(), logits.end());
  auto loss = net.forward_backward(params, grads, x.data(), y.data(), rows, workspace);
  if (!loss) return fail(loss.error().message);

  const std::vector<core::tensor_f32> batch = {
      {"x", {rows, static_cast<std::int64_t>(inputs)}, x},
      {"y", {rows}, y},
      {"logits", {rows, static_cast<std::int64_t>(outputs)}, out_logits},
      {"loss", {1}, {static_cast<float>(loss.value())}}};
  for (const auto& written : {core::save_model(out + "/params.safetensors", spec.value(), params),
                              core::save_model(out + "/grads.safetensors", spec.value(), grads),
                              core::write_safetensors(out + "/batch.safetensors", batch, {})})
    if (!written) return fail(written.error().message);
  return 0;
}
