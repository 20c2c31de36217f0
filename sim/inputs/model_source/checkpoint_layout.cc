#include "sim/inputs/model_source/checkpoint_layout.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/inputs/input_error.h"
#include "sim/inputs/json_input.h"
#include "sim/inputs/model_source/safetensors_header.h"

namespace hookstream {

namespace fs = std::filesystem;

namespace {

const std::string kPeftPrefix = "base_model.model.";
const std::string kBaseLayer = ".base_layer";

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(path.string(), "cannot read");
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string safetensors_spelling(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "F32";
    case DType::BFloat16: return "BF16";
    case DType::Float16: return "F16";
  }
  return "?";
}

void add_file(CheckpointLayout& layout, const fs::path& path) {
  const SafetensorsHeader header = read_safetensors_header(path.string());
  const std::string file = path.filename().string();
  layout.files.push_back(file);
  for (const auto& [name, entry] : header.entries) {
    CheckpointTensor& tensor = layout.tensors[name];
    tensor.file = file;
    tensor.has_header = true;
    tensor.dtype = entry.dtype;
    tensor.shape = entry.shape;
  }
}

}  // namespace

std::optional<CheckpointLayout> read_checkpoint_layout(const std::string& model_dir) {
  if (model_dir.empty()) return std::nullopt;
  const fs::path dir(model_dir);
  std::error_code error;
  CheckpointLayout layout;
  layout.dir = model_dir;
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(single, error)) {
    add_file(layout, single);
    return layout;
  }
  if (fs::is_regular_file(index, error)) {
    const std::string source = index.string();
    const nlohmann::json root = parse_input_json(read_text(index), source);
    if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object()) {
      throw InputError(source, "key \"weight_map\": expected an object of tensor name -> shard file");
    }
    layout.files.push_back(index.filename().string());
    std::vector<std::string> shards;
    for (auto it = root["weight_map"].begin(); it != root["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw InputError(source, "key \"weight_map." + it.key() + "\": expected a file name");
      const std::string shard = it.value().get<std::string>();
      layout.tensors[it.key()].file = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    std::sort(shards.begin(), shards.end());
    for (const std::string& shard : shards) {
      if (fs::is_regular_file(dir / shard, error)) {
        add_file(layout, dir / shard);
      } else {
        layout.missing_shards.push_back(shard);
      }
    }
    return layout;
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const fs::path& path = entry.path();
    if (path.extension() == ".safetensors" && path.filename() != "adapter_model.safetensors" &&
        fs::is_regular_file(path, error)) {
      files.push_back(path);
    }
  }
  if (files.empty()) return std::nullopt;
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) add_file(layout, path);
  return layout;
}

std::string checkpoint_name(const Parameter& parameter) {
  if (parameter.adapter) return "";
  std::string name = parameter.name;
  if (name.compare(0, kPeftPrefix.size(), kPeftPrefix) == 0) name = name.substr(kPeftPrefix.size());
  const size_t base = name.find(kBaseLayer + ".");
  if (base != std::string::npos) name.erase(base, kBaseLayer.size());
  return name;
}

CheckpointComparison compare_with_checkpoint(const ModelStructure& structure, const ModelConfig& config,
                                             const CheckpointLayout& layout) {
  CheckpointComparison result;
  std::vector<std::string> built;
  std::vector<CheckpointDifference> missing, shapes;
  for (const Parameter& p : structure.parameters) {
    const std::string name = checkpoint_name(p);
    if (name.empty()) continue;
    built.push_back(name);
    auto it = layout.tensors.find(name);
    if (it == layout.tensors.end()) {
      missing.push_back({name, "missing from the checkpoint", shape_text(p.shape), ""});
      continue;
    }
    ++result.compared;
    const CheckpointTensor& tensor = it->second;
    if (!tensor.has_header) continue;
    ++result.shapes_known;
    const bool packed = tensor.dtype == "U8" || tensor.dtype == "I8";
    if (packed && p.quantized) continue;  // a pre-quantized bitsandbytes checkpoint stores packed bytes
    if (tensor.shape != p.shape) {
      shapes.push_back({name, "shape", shape_text(p.shape), shape_text(tensor.shape) + " in " + tensor.file});
    } else if (tensor.dtype != safetensors_spelling(p.quantized ? config.torch_dtype : p.dtype) && !p.adapter) {
      result.dtype_notes.push_back({name, "dtype", safetensors_spelling(p.dtype), tensor.dtype + " in " + tensor.file});
    }
  }
  std::sort(built.begin(), built.end());
  std::vector<CheckpointDifference> extra;
  for (const auto& [name, tensor] : layout.tensors) {
    if (std::binary_search(built.begin(), built.end(), name)) continue;
    // Tied: the head (lm_head; BioGPT output_projection, GPT-NeoX-Japanese embed_out) is the embedding; a checkpoint that stores it anyway is re-tied on load
    // (PreTrainedModel.tie_weights, _tied_weights_keys).
    if (config.tie_word_embeddings && name == structure.head_module + ".weight") continue;
    extra.push_back({name, "not built by hookstream", "", tensor.has_header ? shape_text(tensor.shape) + " in " + tensor.file : "in " + tensor.file});
  }
  for (auto* list : {&missing, &extra, &shapes}) {
    std::sort(list->begin(), list->end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    result.differences.insert(result.differences.end(), list->begin(), list->end());
  }
  return result;
}

std::string checkpoint_mismatch_warning(const ModelStructure& structure, const ModelConfig& config,
                                        const std::string& model_dir) {
  const std::optional<CheckpointLayout> layout = read_checkpoint_layout(model_dir);
  if (!layout) return "";
  const CheckpointComparison comparison = compare_with_checkpoint(structure, config, *layout);
  if (comparison.matches()) return "";
  const CheckpointDifference& first = comparison.differences.front();
  return "warning: hookstream's structure of " + config.source + " differs from the checkpoint in " + model_dir +
         " in " + std::to_string(comparison.differences.size()) + " tensor(s), first " + first.name + ": " + first.what +
         "; the verdict is for hookstream's structure (hookstream inspect lists every difference)";
}

}  // namespace hookstream
