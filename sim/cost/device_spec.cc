#include "sim/cost/device_spec.h"

#include "sim/inputs/data_files.h"
#include "sim/cost/device_profile.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "sim/inputs/input_error.h"
#include "sim/inputs/yaml_input.h"

namespace hookstream {

namespace {

double read_fraction(const std::string& source, const YAML::Node& node, const std::string& key) {
  const double value = yaml_number(source, node, key, false);
  if (value > 1) throw InputError(yaml_where(source, node), "key " + key + ": expected a fraction in (0, 1]");
  return value;
}

const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {
      "name", "aliases", "memory_bytes", "matrix_tflops", "vector_tflops_fp32", "hbm_gbps",
      "matrix_efficiency", "hbm_efficiency", "host_link", "nvlink_gbps", "network_gbps", "blas_workspace_mib"};
  return keys;
}

const std::set<std::string>& known_link_keys() {
  static const std::set<std::string> keys = {"pcie_gen", "pinned_h2d_gbps", "pinned_d2h_gbps", "measured",
                                             "pageable_gbps"};
  return keys;
}

const YAML::Node required(const std::string& source, const YAML::Node& map, const YAML::Node& owner,
                          const std::string& key) {
  const YAML::Node node = map[key];
  if (!node) throw InputError(yaml_where(source, owner), "missing key " + key);
  return node;
}


}  // namespace

DeviceSpec parse_device_spec(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& error) {
    throw InputError(source + ":" + std::to_string(error.mark.line + 1), "malformed YAML: " + yaml_parse_message(error));
  }
  if (!root.IsMap()) throw InputError(source, "expected a mapping of device fields");
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    if (!known_keys().count(key)) throw InputError(yaml_where(source, entry.first), "unknown key " + key);
  }
  DeviceSpec spec;
  spec.source = source;
  const YAML::Node name = required(source, root, root, "name");
  if (!name.IsScalar() || name.Scalar().empty()) throw InputError(yaml_where(source, name), "key name: expected a string");
  spec.name = name.Scalar();
  if (const YAML::Node aliases = root["aliases"]) {
    if (!aliases.IsSequence()) throw InputError(yaml_where(source, aliases), "key aliases: expected a list of names");
    for (const YAML::Node& alias : aliases) {
      if (!alias.IsScalar()) throw InputError(yaml_where(source, alias), "key aliases: expected a list of names");
      spec.aliases.push_back(alias.Scalar());
    }
  }
  spec.memory_bytes = static_cast<long long>(
      yaml_number(source, required(source, root, root, "memory_bytes"), "memory_bytes", false));
  spec.matrix_tflops = yaml_number(source, required(source, root, root, "matrix_tflops"), "matrix_tflops", false);
  spec.vector_tflops_fp32 =
      yaml_number(source, required(source, root, root, "vector_tflops_fp32"), "vector_tflops_fp32", false);
  spec.hbm_gbps = yaml_number(source, required(source, root, root, "hbm_gbps"), "hbm_gbps", false);
  if (root["matrix_efficiency"]) spec.matrix_efficiency = read_fraction(source, root["matrix_efficiency"], "matrix_efficiency");
  if (root["hbm_efficiency"]) spec.hbm_efficiency = read_fraction(source, root["hbm_efficiency"], "hbm_efficiency");
  spec.nvlink_gbps = yaml_number(source, required(source, root, root, "nvlink_gbps"), "nvlink_gbps", true);
  spec.network_gbps = yaml_number(source, required(source, root, root, "network_gbps"), "network_gbps", false);
  if (root["blas_workspace_mib"]) {
    spec.blas_workspace_bytes = static_cast<int64_t>(
        yaml_number(source, root["blas_workspace_mib"], "blas_workspace_mib", true) * 1024.0 * 1024.0);
  }

  const YAML::Node link = required(source, root, root, "host_link");
  if (!link.IsMap()) throw InputError(yaml_where(source, link), "key host_link: expected a mapping");
  for (const auto& entry : link) {
    const std::string key = entry.first.Scalar();
    if (!known_link_keys().count(key)) throw InputError(yaml_where(source, entry.first), "unknown key host_link." + key);
  }
  spec.host_link.pcie_gen = static_cast<int>(
      yaml_number(source, required(source, link, link, "pcie_gen"), "host_link.pcie_gen", false));
  spec.host_link.pinned_h2d_gbps =
      yaml_number(source, required(source, link, link, "pinned_h2d_gbps"), "host_link.pinned_h2d_gbps", false);
  spec.host_link.pinned_d2h_gbps =
      yaml_number(source, required(source, link, link, "pinned_d2h_gbps"), "host_link.pinned_d2h_gbps", false);
  spec.host_link.pageable_gbps =
      yaml_number(source, required(source, link, link, "pageable_gbps"), "host_link.pageable_gbps", false);
  if (const YAML::Node measured = link["measured"]) {
    try {
      spec.host_link.measured = measured.as<bool>();
    } catch (const YAML::Exception&) {
      throw InputError(yaml_where(source, measured), "key host_link.measured: expected true or false");
    }
  }
  return spec;
}

DeviceSpec load_device_spec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot read the device file");
  std::stringstream text;
  text << in.rdbuf();
  DeviceSpec spec = parse_device_spec(text.str(), path);
  const std::string profile = (std::filesystem::path(path).parent_path() / "profiles" / (spec.name + ".yaml")).string();
  std::error_code error;
  if (std::filesystem::is_regular_file(profile, error)) {
    auto loaded = std::make_shared<DeviceProfile>(load_device_profile(profile));
    if (loaded->device != spec.name) {
      throw InputError(profile, "key device: expected " + spec.name + " (the device file's name), got " + loaded->device);
    }
    spec.profile = std::move(loaded);
  }
  return spec;
}

std::string device_dir() { return data_dir() + "/devices"; }

std::vector<std::string> list_devices() { return list_data_files("devices", ".yaml"); }

DeviceSpec find_device_spec(const std::string& name_or_path) {
  std::error_code error;
  if (name_or_path.find('/') != std::string::npos || std::filesystem::is_regular_file(name_or_path, error)) {
    return load_device_spec(name_or_path);
  }
  const std::string wanted = lowercase(name_or_path);
  const std::vector<std::string> names = list_devices();
  // File name first, then the aliases inside each file (sorted order: deterministic on clashes).
  for (const std::string& name : names) {
    if (lowercase(name) == wanted) return load_device_spec(device_dir() + "/" + name + ".yaml");
  }
  for (const std::string& name : names) {
    DeviceSpec spec = load_device_spec(device_dir() + "/" + name + ".yaml");
    if (lowercase(spec.name) == wanted) return spec;
    for (const std::string& alias : spec.aliases) {
      if (lowercase(alias) == wanted) return spec;
    }
  }
  std::string known;
  for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
  throw InputError("gpu " + name_or_path, "unknown device; expected a file path or one of: " + known);
}

const DeviceSpec& DeviceSpecCache::find(const std::string& name_or_path) {
  auto found = specs_.find(name_or_path);
  if (found == specs_.end()) found = specs_.emplace(name_or_path, find_device_spec(name_or_path)).first;
  return found->second;
}

}  // namespace hookstream
