#include "tessera/core/math/layers.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {
namespace {

// Floats one example may hold after any layer: a bound on the work a spec may ask for.
constexpr std::int64_t k_max_activation = std::int64_t{1} << 24;

// The integer `v` in [lo, hi], or why not.
result<std::int64_t> integer_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi, const std::string& what) {
  if (!v.is_number_integer())
    return make_error(errc::invalid_spec, what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const auto n = v.get<std::int64_t>();
  if (n < lo || n > hi)
    return make_error(errc::invalid_spec, what + " is " + std::to_string(n) + ", must be in [" + std::to_string(lo) + ", " +
                                              std::to_string(hi) + "]");
  return n;
}

result<layer_spec> parse_conv(layer_kind kind, const nlohmann::json& v) {
  if (!v.is_object()) return make_error(errc::invalid_spec, "expects an object {\"channels\", \"kernel\", \"stride\", \"padding\"}");
  layer_spec l{.kind = kind};
  for (const auto& [key, value] : v.items()) {
    if (key == "channels") {
      TESSERA_ASSIGN_OR_RETURN(l.units, integer_in(value, 1, k_max_width, "channels"));
    } else if (key == "kernel") {
      TESSERA_ASSIGN_OR_RETURN(l.kernel, integer_in(value, 1, k_max_kernel, "kernel"));
    } else if (key == "stride") {
      TESSERA_ASSIGN_OR_RETURN(l.stride, integer_in(value, 1, 2, "stride"));
    } else if (key == "padding") {
      const auto p = value.is_string() ? k_padding_names.find(value.get<std::string>()) : std::nullopt;
      if (!p) return make_error(errc::invalid_spec, "padding must be \"same\" or \"valid\"");
      l.padding = *p;
    } else {
      return make_error(errc::invalid_spec, "unknown field '" + key + "' (channels, kernel, stride, padding)");
    }
  }
  if (l.units == 0) return make_error(errc::invalid_spec, "channels is required");
  if (l.kernel == 0) return make_error(errc::invalid_spec, "kernel is required");
  return l;
}

result<layer_spec> parse_layer(const nlohmann::json& entry) {
  if (!entry.is_object() || entry.size() != 1)
    return make_error(errc::invalid_spec, "must be an object with one key: dense, conv1d, conv2d, max_pool, global_avg_pool or flatten");
  // The object's one member, through its iterator: the items() proxy is a temporary that a reference
  // into it would outlive.
  const auto member = entry.begin();
  const std::string key = member.key();
  const nlohmann::json& value = member.value();
  const auto kind = k_layer_names.find(key);
  if (!kind) return make_error(errc::invalid_spec, "unknown layer '" + key + "' (dense, conv1d, conv2d, max_pool, global_avg_pool, flatten)");
  switch (*kind) {
    case layer_kind::dense: {
      TESSERA_ASSIGN_OR_RETURN(const std::int64_t n, integer_in(value, 1, k_max_width, "its width"));
      return layer_spec{.kind = layer_kind::dense, .units = n};
    }
    case layer_kind::conv1d:
    case layer_kind::conv2d: return parse_conv(*kind, value);
    case layer_kind::max_pool: {
      TESSERA_ASSIGN_OR_RETURN(const std::int64_t n, integer_in(value, 2, k_max_pool, "its window"));
      return layer_spec{.kind = layer_kind::max_pool, .pool = n};
    }
    case layer_kind::global_avg_pool:
    case layer_kind::flatten:
      if (value != true) return make_error(errc::invalid_spec, "takes true (it has no settings)");
      return layer_spec{.kind = *kind};
  }
  return make_error(errc::invalid_spec, "unknown layer");
}

// The shape after `l` on `in`, or why it does not fit (without the layer's name: the caller adds it).
result<tensor_shape> shape_after(const layer_spec& l, const tensor_shape& in) {
  const bool flat = in.positions() == 1, sequence = in.height == 1 && in.width > 1;
  switch (l.kind) {
    case layer_kind::dense:
      if (!flat) return make_error(errc::invalid_spec, "takes a flat input: put {\"flatten\": true} or {\"global_avg_pool\": true} before it");
      return tensor_shape{.height = 1, .width = 1, .channels = l.units};
    case layer_kind::conv1d:
    case layer_kind::conv2d: {
      const bool two_d = l.kind == layer_kind::conv2d;
      if (flat) return make_error(errc::invalid_spec, std::string("needs ") + (two_d ? "an image" : "a sequence") +
                                                          ": give input_shape as " + (two_d ? "[channels, height, width]" : "[steps, features]"));
      if (two_d == sequence) return make_error(errc::invalid_spec, two_d ? "needs an image: use conv1d on a sequence" : "needs a sequence: use conv2d on an image");
      TESSERA_ASSIGN_OR_RETURN(const conv_geometry g, make_conv_geometry(in, l.units, l.kernel, l.stride, l.padding));
      return g.out;
    }
    case layer_kind::max_pool:
      if (flat) return make_error(errc::invalid_spec, "needs a sequence or an image");
      return max_pool_shape(in, l.pool);
    case layer_kind::global_avg_pool:
      if (flat) return make_error(errc::invalid_spec, "needs a sequence or an image");
      return tensor_shape{.height = 1, .width = 1, .channels = in.channels};
    case layer_kind::flatten: return tensor_shape{.height = 1, .width = 1, .channels = in.size()};
  }
  return make_error(errc::invalid_spec, "unknown layer");
}

}  // namespace

result<tensor_shape> parse_input_shape(std::span<const std::int64_t> dims, std::string_view where) {
  const std::string w(where);
  if (dims.empty() || dims.size() > 3)
    return make_error(errc::invalid_spec, w + ": expects [n], [steps, features] or [channels, height, width], not " +
                                              std::to_string(dims.size()) + " numbers");
  std::int64_t size = 1;
  for (const std::int64_t d : dims) {
    if (d < 1 || d > k_max_dimension)
      return make_error(errc::invalid_spec, w + ": " + std::to_string(d) + " is not in [1, " + std::to_string(k_max_dimension) + "]");
    size *= d;
  }
  if (size > k_max_width)
    return make_error(errc::invalid_spec, w + ": " + std::to_string(size) + " inputs per example, more than " + std::to_string(k_max_width));
  if (dims.size() == 3 && dims[1] == 1)  // held as a sequence, it would read the features in the wrong order
    return make_error(errc::invalid_spec, w + ": an image of height 1: write it as a sequence, [width, channels], its features "
                                              "position by position");
  switch (dims.size()) {
    case 1: return tensor_shape{.height = 1, .width = 1, .channels = dims[0]};
    case 2: return tensor_shape{.height = 1, .width = dims[0], .channels = dims[1]};
    default: return tensor_shape{.height = dims[1], .width = dims[2], .channels = dims[0]};
  }
}

std::vector<std::int64_t> input_dims(const tensor_shape& s) {
  if (s.positions() == 1) return {s.channels};
  if (s.height == 1) return {s.width, s.channels};
  return {s.channels, s.height, s.width};
}

result<std::vector<layer_spec>> parse_layers(const nlohmann::json& array, std::string_view where) {
  const std::string w(where);
  if (!array.is_array()) return make_error(errc::invalid_spec, w + ": expects a list of layers");
  if (array.size() > k_max_layers)
    return make_error(errc::invalid_spec, w + ": " + std::to_string(array.size()) + " layers, more than " + std::to_string(k_max_layers));
  std::vector<layer_spec> out;
  for (std::size_t i = 0; i < array.size(); ++i) {
    auto l = parse_layer(array[i]);
    if (!l) {
      const auto& e = array[i];
      const std::string kind = e.is_object() && e.size() == 1 ? " (" + e.begin().key() + ")" : "";
      return make_error(errc::invalid_spec, w + ": layer " + std::to_string(i + 1) + kind + ": " + l.error().message);
    }
    out.push_back(l.value());
  }
  return out;
}

nlohmann::json layers_json(std::span<const layer_spec> layers) {
  nlohmann::json out = nlohmann::json::array();
  for (const layer_spec& l : layers) {
    const std::string key(k_layer_names.name(l.kind));
    switch (l.kind) {
      case layer_kind::dense: out.push_back({{key, l.units}}); break;
      case layer_kind::conv1d:
      case layer_kind::conv2d:
        out.push_back({{key, {{"channels", l.units}, {"kernel", l.kernel}, {"stride", l.stride}, {"padding", k_padding_names.name(l.padding)}}}});
        break;
      case layer_kind::max_pool: out.push_back({{key, l.pool}}); break;
      case layer_kind::global_avg_pool:
      case layer_kind::flatten: out.push_back({{key, true}}); break;
    }
  }
  return out;
}

std::string layer_text(const layer_spec& l) {
  std::string out(k_layer_names.name(l.kind));
  switch (l.kind) {
    case layer_kind::dense: return out + " " + std::to_string(l.units);
    case layer_kind::conv1d:
    case layer_kind::conv2d:
      return out + " " + std::to_string(l.units) + " k" + std::to_string(l.kernel) + (l.stride != 1 ? " s" + std::to_string(l.stride) : "") +
             (l.padding == padding_kind::valid ? " valid" : "");
    case layer_kind::max_pool: return out + " " + std::to_string(l.pool);
    case layer_kind::global_avg_pool:
    case layer_kind::flatten: return out;
  }
  return out;
}

result<std::vector<tensor_shape>> layer_shapes(const tensor_shape& input, std::span<const layer_spec> layers, std::int64_t outputs,
                                               std::string_view where) {
  const std::string w(where);
  std::vector<tensor_shape> shapes;
  tensor_shape at = input;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string name = "layer " + std::to_string(i + 1) + " (" + layer_text(layers[i]) + ") on " + shape_text(at);
    auto next = shape_after(layers[i], at);
    if (!next) return make_error(errc::invalid_spec, w + ": " + name + ": " + next.error().message);
    if (next.value().size() > k_max_activation)
      return make_error(errc::invalid_spec, w + ": " + name + " gives " + shape_text(next.value()) + ", more than " +
                                                std::to_string(k_max_activation) + " values per example");
    if (input.height > 1 && next.value().height == 1 && next.value().width > 1)  // 1-D rules would apply from here
      return make_error(errc::invalid_spec, w + ": " + name + " gives " + shape_text(next.value()) +
                                                ": an image may not shrink to one row (pool or convolve it to a single position, or "
                                                "keep more rows)");
    at = next.value();
    shapes.push_back(at);
  }
  if (at.positions() != 1)
    return make_error(errc::invalid_spec, w + ": the last layer gives " + shape_text(at) + ", but the output layer (dense " +
                                              std::to_string(outputs) + ") takes a flat input: end the list with {\"flatten\": true} or "
                                              "{\"global_avg_pool\": true}");
  shapes.push_back({.height = 1, .width = 1, .channels = outputs});
  return shapes;
}

std::vector<std::int64_t> hidden_units(std::span<const layer_spec> layers) {
  std::vector<std::int64_t> out;
  for (const layer_spec& l : layers)
    if (l.parametric()) out.push_back(l.units);
  return out;
}

std::vector<std::string> layer_kind_names() {
  std::vector<std::string> out;
  for (const auto& e : k_layer_names.entries()) out.emplace_back(e.name);
  return out;
}

std::string missing_layer_kinds(std::span<const layer_spec> layers, std::span<const std::string> known) {
  std::vector<layer_kind> missing;
  for (const layer_spec& l : layers) {
    const bool named = std::find(known.begin(), known.end(), k_layer_names.name(l.kind)) != known.end();
    if (l.kind != layer_kind::dense && !named && std::find(missing.begin(), missing.end(), l.kind) == missing.end()) missing.push_back(l.kind);
  }
  std::string out;
  for (layer_kind k : missing) (out += out.empty() ? "" : ", ") += k_layer_names.name(k);
  return out;
}

}  // namespace tessera::core
