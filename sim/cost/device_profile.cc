#include "sim/cost/device_profile.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "sim/inputs/input_error.h"
#include "sim/inputs/yaml_input.h"

namespace hookstream {

namespace {

// A list row of exactly `size` entries.
const YAML::Node& row(const std::string& source, const YAML::Node& node, const std::string& key, size_t size, const char* layout) {
  if (!node.IsSequence() || node.size() != size) {
    throw InputError(yaml_where(source, node), "key " + key + ": expected a row " + layout);
  }
  return node;
}

const std::set<std::string>& elementwise_kinds() {
  static const std::set<std::string> kinds = {"rmsnorm", "rope", "silu_mul", "residual", "lora_scale_add", "cross_entropy", "embedding"};
  return kinds;
}

// Linear interpolation of y in log x over points sorted by x; flat outside them.
double interpolate_log(const std::vector<std::pair<double, double>>& points, double x) {
  if (points.empty()) return 0;
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  const auto upper = std::upper_bound(points.begin(), points.end(), x,
                                      [](double at, const std::pair<double, double>& point) { return at < point.first; });
  const auto lower = upper - 1;
  const double t = std::log(x / lower->first) / std::log(upper->first / lower->first);
  return lower->second + t * (upper->second - lower->second);
}

double log_distance(double a, double b) { return std::abs(std::log(a / b)); }

double roofline_ns(double m, double n, double k, const DeviceSpec& spec) {
  const double compute = 2 * m * n * k / (spec.matrix_tflops * 1e12);
  const double memory = 2 * (m * k + n * k + m * n) / (spec.hbm_gbps * 1e9);  // bf16 operands and result
  return std::max(compute, memory) * 1e9;
}

}  // namespace

double DeviceProfile::gemm_ns(double m, double n, double k, GemmForm form, const DeviceSpec& spec) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  // The nearest measured (n, k) of this form; readings are in file order, so ties go to the first.
  const GemmReading* nearest = nullptr;
  double best = 0;
  for (const GemmReading& reading : gemm) {
    if (reading.form != form) continue;
    const double distance = log_distance(reading.n, n) + log_distance(reading.k, k);
    if (nearest == nullptr || distance < best) {
      nearest = &reading;
      best = distance;
    }
  }
  if (nearest == nullptr) throw std::logic_error(source + ": no GEMM readings of a form the parser requires");
  std::vector<std::pair<double, double>> slowdown;  // (m, measured / roofline)
  for (const GemmReading& reading : gemm) {
    if (reading.form != form || reading.n != nearest->n || reading.k != nearest->k) continue;
    const double measured = 2 * reading.m * reading.n * reading.k / (reading.tflops * 1e12) * 1e9;
    slowdown.emplace_back(reading.m, measured / roofline_ns(reading.m, reading.n, reading.k, spec));
  }
  std::sort(slowdown.begin(), slowdown.end());
  return interpolate_log(slowdown, m) * roofline_ns(m, n, k, spec);
}

double DeviceProfile::sdpa_ns(double seq, double batch, double heads, double kv_heads, double head_dim, bool backward) const {
  if (seq <= 0 || batch <= 0 || heads <= 0) return 0;
  const SdpaReading* nearest = nullptr;
  double best = 0;
  for (const SdpaReading& reading : sdpa) {
    const double distance = log_distance(reading.heads, heads) + log_distance(reading.kv_heads, std::max(1.0, kv_heads)) +
                            log_distance(reading.head_dim, head_dim);
    if (nearest == nullptr || distance < best) {
      nearest = &reading;
      best = distance;
    }
  }
  if (nearest == nullptr) throw std::logic_error(source + ": no SDPA readings");
  std::vector<std::pair<double, double>> rate;
  for (const SdpaReading& reading : sdpa) {
    if (reading.heads != nearest->heads || reading.kv_heads != nearest->kv_heads || reading.head_dim != nearest->head_dim) continue;
    rate.emplace_back(reading.seq, backward ? reading.backward_tflops : reading.forward_tflops);
  }
  std::sort(rate.begin(), rate.end());
  const double flops = 4.0 * seq * seq * heads * head_dim / 2 * batch * (backward ? 2.5 : 1.0);
  return flops / (interpolate_log(rate, seq) * 1e12) * 1e9;
}

double DeviceProfile::elementwise_ns(const std::string& kind, double elements, bool backward) const {
  const auto it = elementwise.find(kind);
  if (it == elementwise.end()) throw std::logic_error(source + ": no elementwise cost " + kind);
  return elements * (backward ? it->second.backward_ns : it->second.forward_ns);
}

DeviceProfile parse_device_profile(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& error) {
    throw InputError(source + ":" + std::to_string(error.mark.line + 1), "malformed YAML: " + yaml_parse_message(error));
  }
  if (!root.IsMap()) throw InputError(source, "expected a mapping with keys device, gemm, sdpa, elementwise, copies, adamw_ns_per_parameter");
  static const std::set<std::string> keys = {"device", "gemm", "sdpa", "elementwise", "copies", "adamw_ns_per_parameter"};
  for (const auto& entry : root) {
    if (!keys.count(entry.first.Scalar())) throw InputError(yaml_where(source, entry.first), "unknown key " + entry.first.Scalar());
  }
  const auto required = [&](const YAML::Node& owner, const std::string& key) {
    const YAML::Node node = owner[key];
    if (!node) throw InputError(yaml_where(source, owner), "missing key " + key);
    return node;
  };
  DeviceProfile profile;
  profile.source = source;
  const YAML::Node device = required(root, "device");
  if (!device.IsScalar() || device.Scalar().empty()) throw InputError(yaml_where(source, device), "key device: expected a device name");
  profile.device = device.Scalar();

  const YAML::Node gemm = required(root, "gemm");
  if (!gemm.IsSequence()) throw InputError(yaml_where(source, gemm), "key gemm: expected a list of [m, n, k, fwd|dgrad|wgrad, TFLOP/s] rows");
  bool forms[3] = {false, false, false};
  for (const YAML::Node& node : gemm) {
    row(source, node, "gemm", 5, "[m, n, k, fwd|dgrad|wgrad, TFLOP/s]");
    GemmReading reading;
    reading.m = yaml_number(source, node[0], "gemm m", false);
    reading.n = yaml_number(source, node[1], "gemm n", false);
    reading.k = yaml_number(source, node[2], "gemm k", false);
    const std::string form = node[3].IsScalar() ? node[3].Scalar() : "";
    if (form == "fwd") reading.form = GemmForm::Forward;
    else if (form == "dgrad") reading.form = GemmForm::InputGrad;
    else if (form == "wgrad") reading.form = GemmForm::WeightGrad;
    else throw InputError(yaml_where(source, node[3]), "key gemm: expected fwd, dgrad or wgrad as the fourth entry");
    reading.tflops = yaml_number(source, node[4], "gemm TFLOP/s", false);
    forms[static_cast<int>(reading.form)] = true;
    profile.gemm.push_back(reading);
  }
  if (!forms[0] || !forms[1] || !forms[2]) throw InputError(yaml_where(source, gemm), "key gemm: expected rows of each form fwd, dgrad and wgrad");

  const YAML::Node sdpa = required(root, "sdpa");
  if (!sdpa.IsSequence() || sdpa.size() == 0) {
    throw InputError(yaml_where(source, sdpa), "key sdpa: expected a list of [seq, heads, kv_heads, head_dim, forward TFLOP/s, backward TFLOP/s] rows");
  }
  for (const YAML::Node& node : sdpa) {
    row(source, node, "sdpa", 6, "[seq, heads, kv_heads, head_dim, forward TFLOP/s, backward TFLOP/s]");
    SdpaReading reading;
    reading.seq = yaml_number(source, node[0], "sdpa seq", false);
    reading.heads = yaml_number(source, node[1], "sdpa heads", false);
    reading.kv_heads = yaml_number(source, node[2], "sdpa kv_heads", false);
    reading.head_dim = yaml_number(source, node[3], "sdpa head_dim", false);
    reading.forward_tflops = yaml_number(source, node[4], "sdpa forward TFLOP/s", false);
    reading.backward_tflops = yaml_number(source, node[5], "sdpa backward TFLOP/s", false);
    profile.sdpa.push_back(reading);
  }

  const YAML::Node elementwise = required(root, "elementwise");
  if (!elementwise.IsMap()) throw InputError(yaml_where(source, elementwise), "key elementwise: expected a mapping of kernel: [forward ns, backward ns]");
  for (const auto& entry : elementwise) {
    const std::string kind = entry.first.Scalar();
    if (!elementwise_kinds().count(kind)) throw InputError(yaml_where(source, entry.first), "unknown key elementwise." + kind);
    row(source, entry.second, "elementwise." + kind, 2, "[forward ns, backward ns] per element");
    profile.elementwise[kind] = {yaml_number(source, entry.second[0], "elementwise." + kind, false), yaml_number(source, entry.second[1], "elementwise." + kind, false)};
  }
  for (const std::string& kind : elementwise_kinds()) {
    if (!profile.elementwise.count(kind)) throw InputError(yaml_where(source, elementwise), "missing key elementwise." + kind);
  }

  const YAML::Node copies = required(root, "copies");
  if (!copies.IsMap()) throw InputError(yaml_where(source, copies), "key copies: expected a mapping");
  static const std::set<std::string> copy_keys = {"pinned_h2d_gbps", "pinned_d2h_gbps", "d2d_gbps_read_plus_write"};
  for (const auto& entry : copies) {
    if (!copy_keys.count(entry.first.Scalar())) throw InputError(yaml_where(source, entry.first), "unknown key copies." + entry.first.Scalar());
    yaml_number(source, entry.second, "copies." + entry.first.Scalar(), false);
  }
  profile.d2d_gbps_read_plus_write = yaml_number(source, required(copies, "d2d_gbps_read_plus_write"), "copies.d2d_gbps_read_plus_write", false);
  profile.adamw_ns_per_parameter = yaml_number(source, required(root, "adamw_ns_per_parameter"), "adamw_ns_per_parameter", false);
  return profile;
}

DeviceProfile load_device_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot read the device profile");
  std::stringstream text;
  text << in.rdbuf();
  return parse_device_profile(text.str(), path);
}

}  // namespace hookstream
