// The FSDP2 oracle (oracles/fsdp2_worker.py): the plan's tiny model under real
// torch.distributed.fsdp.fully_shard of the pinned oracle venv (PyTorch 2.11), Gloo on CPU, one
// process per rank, and what happened per rank.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/inputs/plan.h"

namespace hookstream {

struct Fsdp2OracleRank {
  int rank = 0;
  bool errored = false;
  std::string error_text;  // the exception's text (c10 backtrace removed)
  std::string error_type;  // RuntimeError, AttributeError, DistBackendError, ...
  std::string phase;       // forward / backward
  int iteration = 0;
  int micro_step = 0;
  // Per unit ("" = root): all_gather / reduce_scatter / pre_backward / post_backward ... counts.
  std::map<std::string, std::map<std::string, int>> counts;
};

struct Fsdp2OracleResult {
  std::string torch_version;
  bool has_set_reduce_scatter_unused_params = false;
  std::vector<Fsdp2OracleRank> ranks;
  // Per completed iteration: parameter -> "wrong" / "none" for sharded gradients that differ from
  // the mean over ranks of the local gradients (absent: equal).
  std::vector<std::map<std::string, std::string>> gradients;
};

struct Fsdp2OracleOptions {
  std::string python;      // the oracle venv's python
  std::string source_dir;  // the repository (oracles/run.sh, oracles/fsdp2_worker.py)
  int collective_timeout_ms = 3000;
};

// Runs every plan (one launcher, one process per rank running the plans in turn, each with its
// own process group): the results in the plans' order.
std::vector<Fsdp2OracleResult> run_fsdp2_oracle(const std::vector<Plan>& plans, const Fsdp2OracleOptions& options);

}  // namespace hookstream
