// Where a plan's `base_model` is, found offline the way transformers' from_pretrained and
// huggingface_hub find it: a local path (a config.json, or a directory holding one), the Hugging
// Face cache, or a bundled preset.
//
// The cache location follows huggingface_hub/constants.py: HF_HUB_CACHE, else the legacy
// HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, where HF_HOME is $HF_HOME, else
// ${XDG_CACHE_HOME:-~/.cache}/huggingface. A repo "ORG/NAME" lives in models--ORG--NAME
// (file_download.py repo_folder_name); a revision (default "main", axolotl's `revision_of_model`)
// that names a file in refs/ is replaced by the commit in it, then
// snapshots/<commit>/config.json is the file (file_download.py try_to_load_from_cache).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hookstream {

// The environment variables the cache location depends on; unset ones are nullopt. Passed in, so
// tests and callers decide which environment counts.
struct HubEnvironment {
  std::optional<std::string> hf_hub_cache, huggingface_hub_cache, hf_home, xdg_cache_home, home;
  static HubEnvironment from_process();
};

// The hub cache directory huggingface_hub would use in `environment`.
std::string hub_cache_dir(const HubEnvironment& environment);

enum class ModelSourceKind { Path, HubCache, Preset };

struct ModelLocation {
  ModelSourceKind kind = ModelSourceKind::Path;
  std::string config_path;   // the config.json to read
  // The folder of a Hugging Face layout (config.json beside the weights): a local model
  // directory or a cache snapshot; empty for a preset or a config file given by another name.
  std::string model_dir;
  std::string revision;      // HubCache: the commit of the snapshot
};

struct ModelLookup {
  std::string plan_dir = ".";    // relative paths are tried here first, then in the working directory
  std::string revision;          // empty: "main"
  HubEnvironment environment;
};

// Finds `reference` (a path, an HF repo id, or a preset name). Not found: InputError at `where`
// naming `key`, every place looked, and how to pass --model.
ModelLocation locate_model(const std::string& reference, const ModelLookup& lookup, const std::string& where,
                           const std::string& key);

// The Hugging Face model folder a loaded config came from (ModelConfig::source): the folder of a
// file named config.json (a local model directory or a cache snapshot, where the safetensors are),
// empty for a preset or a config file of another name.
std::string model_dir_of(const std::string& config_source);

// huggingface_hub's validate_repo_id: "NAME" or "NAMESPACE/NAME" of [A-Za-z0-9_.-], no "--" or "..",
// not starting or ending with "-" or ".".
bool is_hub_repo_id(const std::string& reference);

}  // namespace hookstream
