#include "runtime/training_checkpoint.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "runtime/cuda_device.h"
#include "runtime/plan_fingerprint.h"
#include "runtime/reducer_factory.h"
#include "sim/inputs/input_error.h"

namespace hookstream {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kSchema = "hookstream.checkpoint/1";

std::string error_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

void write_text_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp-hookstream";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw InputError(path.string(), "cannot write the checkpoint manifest");
  }
  fs::rename(temporary, path);
}

CheckpointInfo read_manifest(const fs::path& directory) {
  const fs::path path = directory / kManifest;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CheckpointInfo info;
  info.directory = directory.string();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    if (j.at("schema").get<std::string>() != kSchema) {
      throw InputError(path.string(), std::string("expected schema \"") + kSchema + "\"");
    }
    info.step = j.at("step").get<int>();
    info.world_size = j.at("world_size").get<int>();
    info.fingerprint = j.at("plan_fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path.string(), std::string("malformed checkpoint manifest: ") + e.what());
  }
  return info;
}

}  // namespace

std::string checkpoint_directory(const std::string& root, int step) {
  return (fs::path(root) / fmt::format("step-{:08d}", step)).string();
}

std::string staging_directory(const std::string& root, int step) { return checkpoint_directory(root, step) + ".partial"; }

std::string rank_file(const std::string& directory, int rank) {
  return (fs::path(directory) / fmt::format("rank-{}.pt", rank)).string();
}

std::optional<CheckpointInfo> latest_checkpoint(const std::string& root) {
  std::error_code error;
  if (root.empty() || !fs::is_directory(root, error)) return std::nullopt;
  static const std::regex complete_name("step-([0-9]{8})");
  std::optional<fs::path> newest;
  int newest_step = -1;
  for (const auto& entry : fs::directory_iterator(root)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !std::regex_match(name, match, complete_name)) continue;
    if (!fs::exists(entry.path() / kManifest)) continue;  // rank 0 died before committing it
    const int step = std::stoi(match[1].str());
    if (step > newest_step) {
      newest_step = step;
      newest = entry.path();
    }
  }
  if (!newest) return std::nullopt;
  return read_manifest(*newest);
}

void validate_checkpoint(const CheckpointInfo& checkpoint, const Plan& plan, int world_size, bool read_rank_files) {
  const std::string manifest = (fs::path(checkpoint.directory) / kManifest).string();
  if (checkpoint.world_size != world_size) {
    throw InputError(manifest, fmt::format("saved by {} ranks; this run has {} (each rank resumes its own data "
                                           "position and optimizer state)", checkpoint.world_size, world_size));
  }
  const std::string fingerprint = plan_fingerprint(plan);
  if (checkpoint.fingerprint != fingerprint) {
    throw InputError(manifest, fmt::format("plan fingerprint {} differs from this plan's {} (a checkpoint of "
                                           "another model or schedule)", checkpoint.fingerprint, fingerprint));
  }
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string file = rank_file(checkpoint.directory, rank);
    if (!fs::exists(file)) throw InputError(file, "missing rank file of a complete checkpoint");
    if (!read_rank_files) continue;
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(file, c10::Device(c10::kCPU));
      at::Tensor step;
      archive.read("step", step);
    } catch (const std::exception& e) {
      throw InputError(file, "cannot read the checkpoint: " + first_line(error_text(e)));
    }
  }
}

void save_rank_state(const std::string& path, const TrainModel& model, const torch::optim::Optimizer& optimizer,
                     const RankState& state, c10::Device device) {
  torch::serialize::OutputArchive archive;
  archive.write("step", at::tensor(int64_t{state.step}));
  archive.write("data.cursor", at::tensor(state.data.cursor));
  archive.write("data.epoch", at::tensor(state.data.epoch));
  archive.write("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
  if (device.is_cuda()) archive.write("rng.cuda", cuda_rng_state(device));
  const std::vector<at::Tensor> params = model.ddp_parameters();
  const std::vector<std::string> names = model.ddp_parameter_names();
  for (size_t i = 0; i < params.size(); ++i) archive.write("param." + names[i], params[i].detach());
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  const std::string temporary = path + ".tmp-hookstream";
  archive.save_to(temporary);
  fs::rename(temporary, path);
}

RankState load_rank_state(const std::string& path, TrainModel& model, torch::optim::Optimizer& optimizer,
                          c10::Device device) {
  RankState state;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    // A fresh tensor per key: read() into a defined tensor set_()s its storage.
    auto read = [&archive](const std::string& key) {
      at::Tensor value;
      archive.read(key, value);
      return value;
    };
    state.step = static_cast<int>(read("step").item<int64_t>());
    state.data.cursor = read("data.cursor").item<int64_t>();
    state.data.epoch = read("data.epoch").item<int64_t>();
    const std::vector<at::Tensor> params = model.ddp_parameters();
    const std::vector<std::string> names = model.ddp_parameter_names();
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor saved = read("param." + names[i]);
        if (!saved.sizes().equals(params[i].sizes())) {
          throw InputError(path, "tensor param." + names[i] + " has another shape than the model's");
        }
        at::Tensor target = params[i];
        target.copy_(saved);
      }
    }
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_state(read("rng.cpu").to(at::kCPU));
    }
    if (device.is_cuda()) set_cuda_rng_state(device, read("rng.cuda").to(at::kCPU));
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(path, "cannot read the checkpoint: " + first_line(error_text(e)));
  }
  return state;
}

void commit_checkpoint(const std::string& root, int step, int world_size, const std::string& fingerprint) {
  const fs::path staging = staging_directory(root, step);
  nlohmann::json j;
  j["schema"] = kSchema;
  j["step"] = step;
  j["world_size"] = world_size;
  j["plan_fingerprint"] = fingerprint;
  j["torch_version"] = torch_version();
  j["files"] = nlohmann::json::array();
  for (int rank = 0; rank < world_size; ++rank) j["files"].push_back(fs::path(rank_file("", rank)).filename().string());
  write_text_atomically(staging / kManifest, j.dump(2) + "\n");
  const fs::path final_directory = checkpoint_directory(root, step);
  std::error_code ignored;
  fs::remove_all(final_directory, ignored);  // an older save of the same step (a rerun)
  fs::rename(staging, final_directory);
}

}  // namespace hookstream
