// `hookstream run`'s checkpoints: one directory per checkpoint, DIR/step-NNNNNNNN/, holding
// manifest.json (step, world size, plan fingerprint, LibTorch version) and one torch::save archive
// per rank, rank-R.pt: the trainable parameters by name (frozen ones are rebuilt from the seed or
// the weights file, so only what changes is saved), AdamW's state (exp_avg, exp_avg_sq, step, via
// Optimizer::save), the step counter, the CPU generator's state (and the CUDA one's on GPU) and the
// rank's data position. docs/run.md describes the layout.
//
// Atomicity: ranks write rank files into DIR/step-NNNNNNNN.partial/ (each through a temporary name
// and rename); after a barrier rank 0 writes the manifest and renames the directory. A directory
// without the ".partial" suffix and with a manifest is complete; --resume takes the newest one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "runtime/token_data.h"
#include "runtime/train_model.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct CheckpointInfo {
  std::string directory;  // DIR/step-NNNNNNNN
  int step = 0;           // optimizer steps completed when it was saved
  int world_size = 0;
  std::string fingerprint;
};

std::string checkpoint_directory(const std::string& root, int step);
std::string staging_directory(const std::string& root, int step);
std::string rank_file(const std::string& directory, int rank);

// The newest complete checkpoint under `root`; nullopt when there is none (or no `root`).
// Throws InputError for a complete-looking directory whose manifest cannot be read.
std::optional<CheckpointInfo> latest_checkpoint(const std::string& root);

// Refuses (InputError naming the file) a checkpoint of another plan (runtime/plan_fingerprint.h)
// or world size, or with a missing rank file; with `read_rank_files`, also one whose rank files
// torch::load cannot read (truncated, corrupt).
void validate_checkpoint(const CheckpointInfo& checkpoint, const Plan& plan, int world_size, bool read_rank_files);

struct RankState {
  int step = 0;
  DataPosition data;
};

// Writes this rank's archive to `path` (temporary name, then rename).
void save_rank_state(const std::string& path, const TrainModel& model, const torch::optim::Optimizer& optimizer,
                     const RankState& state, c10::Device device);
// Restores parameters, optimizer, generators; returns step and data position. Throws InputError
// naming the file for a file that cannot be read or lacks a tensor.
RankState load_rank_state(const std::string& path, TrainModel& model, torch::optim::Optimizer& optimizer,
                          c10::Device device);

// Rank 0, after every rank's file is in the staging directory: manifest, then rename.
void commit_checkpoint(const std::string& root, int step, int world_size, const std::string& fingerprint);

}  // namespace hookstream
