#include "tessera/core/io/model_io.hpp"

#include <cmath>
#include <string_view>

#include "tessera/core/io/safetensors.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {
namespace {

constexpr const char* k_spec_key = "tessera.spec";
constexpr const char* k_input_mean = "input.mean";
constexpr const char* k_input_std = "input.std";

// How a weight is laid out in the file against its layout in memory (mlp.hpp): a convolution's OHWI
// is written OIHW (OIW for 1-D), and a dense layer after a flatten has its columns channel-major, as
// PyTorch's flatten of an NCHW tensor gives them (position-major in memory, channels-last).
enum class file_order { same, oihw, channel_major };

struct named_slot {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset;
  file_order order = file_order::same;
  std::int64_t taps = 1, units = 0;  // a reordered weight's taps and input units
};

// The index in memory of the weight's value at `i` in the file.
std::size_t memory_index(const named_slot& t, std::size_t i) {
  if (t.order == file_order::same) return i;
  const auto taps = static_cast<std::size_t>(t.taps), units = static_cast<std::size_t>(t.units);
  const std::size_t row = i / (taps * units), col = i % (taps * units);
  const std::size_t unit = col / taps, tap = col % taps;  // the file: unit-major; memory: tap-major
  return row * taps * units + tap * units + unit;
}

std::vector<named_slot> tensor_table(const mlp_arch& arch) {
  std::vector<named_slot> out;
  const auto slots = param_slots(arch);
  const auto plans = plan_layers(arch);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const std::string base = "layers." + std::to_string(i);
    const layer_plan& p = plans[i];
    if (p.kind == layer_kind::conv2d)
      out.push_back({base + ".weight", {p.units, p.in_units, p.conv.kernel_h, p.conv.kernel_w}, slots[i].weight, file_order::oihw, p.taps, p.in_units});
    else if (p.kind == layer_kind::conv1d)
      out.push_back({base + ".weight", {p.units, p.in_units, p.conv.kernel_w}, slots[i].weight, file_order::oihw, p.taps, p.in_units});
    else if (p.taps > 1)
      out.push_back({base + ".weight", {slots[i].rows, slots[i].cols}, slots[i].weight, file_order::channel_major, p.taps, p.in_units});
    else
      out.push_back({base + ".weight", {slots[i].rows, slots[i].cols}, slots[i].weight});
    out.push_back({base + ".bias", {slots[i].rows}, slots[i].bias});
    if (slots[i].has_norm) {
      out.push_back({base + ".norm.weight", {slots[i].rows}, slots[i].gain});
      out.push_back({base + ".norm.bias", {slots[i].rows}, slots[i].shift});
    }
  }
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  out += "]";
  return out;
}

std::size_t elements(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

}  // namespace

result<void> save_model(const std::string& path, const model_spec& spec, std::span<const float> params,
                        const std::map<std::string, std::string>& extra_metadata, const input_normalization& normalization) {
  const mlp_arch arch = spec.full_arch();
  if (params.size() != param_count(arch))
    return make_error(errc::invalid_argument, path + ": " + std::to_string(params.size()) + " parameters, the spec has " +
                                                  std::to_string(param_count(arch)));
  const bool standardize = spec.input_normalization == input_normalization_kind::standardize;
  const auto inputs = static_cast<std::size_t>(spec.inputs);
  if (standardize != !normalization.empty() || (standardize && (normalization.mean.size() != inputs || normalization.std.size() != inputs)))
    return make_error(errc::invalid_argument, path + ": the spec's input_normalization is " +
                                                  std::string(k_input_normalization_names.name(spec.input_normalization)) + ", but " +
                                                  std::to_string(normalization.mean.size()) + " input means are given for " +
                                                  std::to_string(inputs) + " inputs");
  std::vector<tensor_f32> tensors;
  if (standardize) {
    tensors.push_back({k_input_mean, {spec.inputs}, normalization.mean});
    tensors.push_back({k_input_std, {spec.inputs}, normalization.std});
  }
  for (const auto& t : tensor_table(arch)) {
    std::vector<float> values(elements(t.shape));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = params[t.offset + memory_index(t, i)];
    tensors.push_back({t.name, t.shape, std::move(values)});
  }
  auto metadata = extra_metadata;
  metadata[k_spec_key] = to_json(spec);
  metadata["format"] = "pt";
  return write_safetensors(path, tensors, metadata);
}

result<stored_model> load_model(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(safetensors_file file, read_safetensors(path));
  const auto it = file.metadata.find(k_spec_key);
  if (it == file.metadata.end())
    return make_error(errc::bad_format, path + ": no '" + std::string(k_spec_key) + "' metadata: not a Tessera model");
  stored_model model;
  TESSERA_ASSIGN_OR_RETURN(model.spec, parse_model_spec(it->second, path + ": metadata '" + k_spec_key + "'"));
  const mlp_arch arch = model.spec.full_arch();
  model.params.resize(param_count(arch));
  for (const auto& t : tensor_table(arch)) {
    const tensor_f32* found = file.find(t.name);
    if (found == nullptr) return make_error(errc::bad_format, path + ": tensor '" + t.name + "' is missing");
    if (found->shape != t.shape) {
      return make_error(errc::bad_format, path + ": tensor '" + t.name + "' has shape " + shape_text(found->shape) +
                                              ", the spec needs " + shape_text(t.shape));
    }
    for (std::size_t i = 0; i < found->data.size(); ++i) model.params[t.offset + memory_index(t, i)] = found->data[i];
  }
  if (model.spec.input_normalization == input_normalization_kind::standardize) {
    for (const char* name : {k_input_mean, k_input_std}) {
      const tensor_f32* found = file.find(name);
      if (found == nullptr) return make_error(errc::bad_format, path + ": tensor '" + name + "' is missing (the spec standardizes its inputs)");
      if (found->shape != std::vector<std::int64_t>{model.spec.inputs})
        return make_error(errc::bad_format, path + ": tensor '" + std::string(name) + "' has shape " + shape_text(found->shape) +
                                                ", the spec needs [" + std::to_string(model.spec.inputs) + "]");
      (name == std::string_view(k_input_mean) ? model.normalization.mean : model.normalization.std) = found->data;
    }
    for (const float s : model.normalization.std)
      if (!(s > 0) || !std::isfinite(s)) return make_error(errc::bad_format, path + ": tensor 'input.std' holds a value that is not a finite positive number");
  }
  model.metadata = std::move(file.metadata);
  return model;
}

}  // namespace tessera::core
