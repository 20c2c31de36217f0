// Pinned host memory before a run: offloaded checkpoints live in pinned (page-locked) host slots
// (runtime/activation_offload.h), which the kernel cannot swap. If the ranks on one machine ask for
// more than it has free, cudaHostAlloc fails mid-step or the OOM killer ends a rank; issue 22 asks
// for a clear error from the plan before the run instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hookstream {

// MemAvailable of a /proc/meminfo-format file, in bytes; nullopt when the file or the line is missing
// (not Linux, a sandbox without /proc).
std::optional<int64_t> read_mem_available(const std::string& meminfo_path = "/proc/meminfo");

// "" when `ranks` ranks of `per_rank_bytes` pinned host memory each fit in `available_bytes`;
// otherwise what is missing, as one line (no file name: the caller names the plan).
std::string pinned_host_shortfall(int64_t per_rank_bytes, int ranks, int64_t available_bytes);

}  // namespace hookstream
