#include "sim/inputs/model_source/hf_hub.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_config.h"

namespace hookstream {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// os.path.expanduser of a leading "~" (constants.py expands HF_HOME and HF_HUB_CACHE).
std::string expand_user(const std::string& path, const HubEnvironment& environment) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  return environment.home.value_or("~") + path.substr(1);
}

std::string normalized(const fs::path& path) { return fs::absolute(path).lexically_normal().string(); }

bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// One part of a repo id: [\w\-.]{1,96} between word boundaries (starts and ends with \w).
bool is_repo_part(const std::string& part) {
  if (part.empty() || part.size() > 96 || !is_word(part.front()) || !is_word(part.back())) return false;
  for (char c : part) {
    if (!is_word(c) && c != '-' && c != '.') return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// The places looked, for the not-found message.
struct Search {
  std::vector<std::string> paths;  // local paths tried
  std::string cache;               // what the cache lookup found missing
};

std::optional<ModelLocation> local_path(const std::string& reference, const ModelLookup& lookup, Search& search) {
  std::vector<fs::path> candidates;
  if (fs::path(reference).is_absolute()) {
    candidates.push_back(reference);
  } else {
    candidates.push_back(fs::path(lookup.plan_dir) / reference);
    candidates.push_back(reference);
  }
  std::error_code error;
  for (const fs::path& candidate : candidates) {
    const std::string shown = normalized(candidate);
    if (std::find(search.paths.begin(), search.paths.end(), shown) == search.paths.end()) search.paths.push_back(shown);
    if (fs::is_regular_file(candidate, error)) {
      ModelLocation location;
      location.config_path = normalized(candidate);
      // A file named config.json sits in a model folder (its weights, if any, beside it).
      if (candidate.filename() == "config.json") location.model_dir = normalized(candidate.parent_path());
      return location;
    }
    if (fs::is_directory(candidate, error) && fs::is_regular_file(candidate / "config.json", error)) {
      ModelLocation location;
      location.config_path = normalized(candidate / "config.json");
      location.model_dir = normalized(candidate);
      return location;
    }
  }
  return std::nullopt;
}

std::optional<ModelLocation> hub_cache(const std::string& reference, const ModelLookup& lookup, Search& search) {
  const std::string cache = hub_cache_dir(lookup.environment);
  if (!is_hub_repo_id(reference)) return std::nullopt;
  // file_download.py repo_folder_name: "models" + every "/"-separated part, joined by "--".
  std::string folder = "models--" + reference;
  for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/', at)) folder.replace(at, 1, "--");
  const fs::path repo = fs::path(cache) / folder;
  std::string revision = lookup.revision.empty() ? "main" : lookup.revision;
  const std::string asked = revision;
  std::error_code error;
  // try_to_load_from_cache: a revision with a file in refs/ is replaced by the file's content as
  // read (huggingface_hub writes the commit without a newline and does not strip it).
  const fs::path ref = repo / "refs" / revision;
  if (fs::is_regular_file(ref, error)) {
    std::ifstream file(ref, std::ios::binary);
    std::ostringstream text;
    text << file.rdbuf();
    revision = text.str();
  }
  const fs::path config = repo / "snapshots" / revision / "config.json";
  if (!revision.empty() && revision.find('/') == std::string::npos && fs::is_regular_file(config, error)) {
    ModelLocation location;
    location.kind = ModelSourceKind::HubCache;
    location.config_path = normalized(config);
    location.model_dir = normalized(config.parent_path());
    location.revision = revision;
    return location;
  }
  if (!fs::is_directory(repo, error)) {
    search.cache = "no " + normalized(repo);
  } else if (revision == asked) {
    search.cache = "no " + normalized(repo / "refs" / asked) + " nor " + normalized(config);
  } else {
    search.cache = normalized(repo / "refs" / asked) + " names " + revision + ", but there is no " + normalized(config);
  }
  return std::nullopt;
}

}  // namespace

HubEnvironment HubEnvironment::from_process() {
  HubEnvironment environment;
  environment.hf_hub_cache = env("HF_HUB_CACHE");
  environment.huggingface_hub_cache = env("HUGGINGFACE_HUB_CACHE");
  environment.hf_home = env("HF_HOME");
  environment.xdg_cache_home = env("XDG_CACHE_HOME");
  environment.home = env("HOME");
  return environment;
}

std::string hub_cache_dir(const HubEnvironment& environment) {
  // constants.py: HF_HUB_CACHE = $HF_HUB_CACHE or $HUGGINGFACE_HUB_CACHE or HF_HOME/hub;
  // HF_HOME = $HF_HOME or ${XDG_CACHE_HOME:-~/.cache}/huggingface. An empty variable is a value
  // to os.getenv, so it counts as set (and names the working directory), as there.
  if (environment.hf_hub_cache) return expand_user(*environment.hf_hub_cache, environment);
  if (environment.huggingface_hub_cache) return expand_user(*environment.huggingface_hub_cache, environment);
  std::string home;
  if (environment.hf_home) {
    home = expand_user(*environment.hf_home, environment);
  } else {
    const std::string cache = environment.xdg_cache_home ? *environment.xdg_cache_home
                                                         : environment.home.value_or("~") + "/.cache";
    home = expand_user(cache, environment) + "/huggingface";
  }
  return home + "/hub";
}

std::string model_dir_of(const std::string& config_source) {
  const fs::path path(config_source);
  if (path.filename() != "config.json") return "";
  return path.parent_path().string();
}

bool is_hub_repo_id(const std::string& reference) {
  const size_t slash = reference.find('/');
  if (slash != reference.rfind('/')) return false;
  if (reference.find("--") != std::string::npos || reference.find("..") != std::string::npos) return false;
  if (reference.size() >= 4 && reference.compare(reference.size() - 4, 4, ".git") == 0) return false;
  if (slash == std::string::npos) return is_repo_part(reference);
  return is_repo_part(reference.substr(0, slash)) && is_repo_part(reference.substr(slash + 1));
}

ModelLocation locate_model(const std::string& reference, const ModelLookup& lookup, const std::string& where,
                           const std::string& key) {
  Search search;
  if (auto location = local_path(reference, lookup, search)) return *location;
  if (auto location = hub_cache(reference, lookup, search)) return *location;
  if (auto preset = find_preset(reference)) {
    ModelLocation location;
    location.kind = ModelSourceKind::Preset;
    location.config_path = *preset;
    return location;
  }
  std::string looked = "no file or directory with a config.json at " + join(search.paths, " or ");
  if (is_hub_repo_id(reference)) {
    looked += "; not in the Hugging Face cache " + hub_cache_dir(lookup.environment) + " (" + search.cache +
              "; set HF_HUB_CACHE or HF_HOME, or download it: huggingface-cli download " + reference + " config.json)";
  } else {
    looked += "; not a Hugging Face repo id, so the cache was not searched";
  }
  looked += "; no preset (" + join(list_presets(), ", ") + ")";
  throw InputError(where, "key \"" + key + "\": cannot find model \"" + reference + "\": " + looked +
                              "; pass --model PATH/config.json");
}

}  // namespace hookstream
