// The parameters a Hugging Face model folder's weights hold, from the safetensors headers only, and
// how they compare with the structure hookstream builds.
//
// transformers' from_pretrained reads model.safetensors, or model.safetensors.index.json (a
// "weight_map" of tensor name -> shard file) for a sharded checkpoint (modeling_utils.py,
// _get_resolved_checkpoint_files). A folder with neither but other *.safetensors files is read
// file by file (adapter_model.safetensors, PEFT's adapter, excluded). None of the modelled types
// renames checkpoint keys on load (transformers/conversion_mapping.py has no entry for them), so
// checkpoint names are module names.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/inputs/model_structure.h"

namespace hookstream {

struct CheckpointTensor {
  std::string file;             // the shard holding it (file name within the folder)
  bool has_header = false;      // false: listed by the index, but its shard is not in the folder
  std::string dtype;            // safetensors spelling (BF16, F32, U8, ...)
  std::vector<int64_t> shape;
};

struct CheckpointLayout {
  std::string dir;
  std::vector<std::string> files;  // what was read: the index and/or the shards
  std::vector<std::string> missing_shards;  // named by the index, not in the folder (not downloaded)
  std::map<std::string, CheckpointTensor> tensors;
};

// The checkpoint in `model_dir`, or nullopt when it holds no safetensors (a folder with only
// config.json). A malformed index or header is an InputError naming the file.
std::optional<CheckpointLayout> read_checkpoint_layout(const std::string& model_dir);

struct CheckpointDifference {
  std::string name;        // the checkpoint's spelling (no PEFT prefix, no base_layer)
  std::string what;        // "missing from the checkpoint", "not built by hookstream", "shape", "dtype"
  std::string hookstream;  // hookstream's value (shape or dtype), when both have the tensor
  std::string checkpoint;
};

struct CheckpointComparison {
  int compared = 0;       // tensors present on both sides
  int shapes_known = 0;   // of those, with a header to compare shapes against
  std::vector<CheckpointDifference> differences;  // names, then shapes; sorted by name within each
  std::vector<CheckpointDifference> dtype_notes;  // stored dtype differs from the config's (cast on load)
  bool matches() const { return differences.empty(); }
};

// The checkpoint name of a structure parameter: PEFT's "base_model.model." prefix and LoRA's
// ".base_layer" removed; empty for LoRA's own lora_A/lora_B (not in a base checkpoint).
std::string checkpoint_name(const Parameter& parameter);

// Names, shapes (and, as notes, dtypes) of `structure` against `layout`. A tied lm_head.weight the
// checkpoint also stores is not a difference (transformers ties it back on load).
CheckpointComparison compare_with_checkpoint(const ModelStructure& structure, const ModelConfig& config,
                                             const CheckpointLayout& layout);

// For the commands whose verdict rests on the structure (verify, simulate): one line when the
// checkpoint beside the model's config differs from `structure` (hookstream inspect lists the
// differences), empty when it matches or there is none. A wrong structure changes the answer, so
// it is never silent.
std::string checkpoint_mismatch_warning(const ModelStructure& structure, const ModelConfig& config,
                                        const std::string& model_dir);

}  // namespace hookstream
