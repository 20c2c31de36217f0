// The PyTorch version whose DDP the simulator models (`--torch-version`, `hookstream.torch_version`).
// Supported: 1.13 and 2.0 through 2.11. Each behaviour that differs between them is a predicate
// here, named after what changed and citing the PyTorch change; docs/ddp-versions.md lists them.
#pragma once

#include <string>

namespace hookstream {

struct TorchVersion {
  int major = 2;
  int minor = 11;

  bool operator==(const TorchVersion& o) const { return major == o.major && minor == o.minor; }
  bool operator!=(const TorchVersion& o) const { return !(*this == o); }
  bool at_least(int ma, int mi) const { return major != ma ? major > ma : minor >= mi; }
  std::string text() const { return std::to_string(major) + "." + std::to_string(minor); }

  // Reducer::autograd_hook updates local_used_map_ *before* its `!expect_autograd_hooks_` return, so
  // a gradient accumulated only inside no_sync() counts as used and is all-reduced at the synced
  // step. Earlier versions returned first: such a parameter is globally unused at finalize and
  // finalize_bucket_dense leaves its .grad untouched (local, replicas diverge). pytorch/pytorch
  // PR #124193 "Fix DDP no_sync when find_unused_parameters is True" (approved 2024-04-30,
  // after the 2.3 branch cut: first in 2.4 by its dates, not checked against a 2.3 wheel), fixing
  // issue #69031.
  bool no_sync_marks_locally_used() const { return at_least(2, 4); }
  // distributed.py applies _DDPSink (static graph) until a flag `_static_graph_delay_allreduce_
  // enqueued` says delay_all_reduce was queued, instead of while num_iterations == 1; the Reducer
  // counts backward calls (num_bwd_calls_) instead of forwards. pytorch/pytorch PR #103487
  // "[DDP] multiple forward support for static graph" (2023-06, 2.1). With gradient accumulation
  // the first no_sync micro-step then already queues delay_all_reduce, and finalize_backward's
  // TORCH_INTERNAL_ASSERT(expect_autograd_hooks_) fails in iteration 0; before, the sink was
  // applied in the next iteration's no_sync micro-step (num_iterations still 1) and it failed there.
  bool static_graph_delay_flag() const { return at_least(2, 1); }
  // distributed.py _ddp_init_helper: a bucket_cap_mb given by the user also caps the first bucket
  // (`bucket_bytes_cap_default`); 1.13 always made the first bucket dist._DEFAULT_FIRST_BUCKET_BYTES
  // (1 MiB) with find_unused_parameters. Read in 2.11's distributed.py; the release that changed it
  // is not pinned down here (modelled for all of 2.x, as runtime/ddp_wrapper.cc does).
  bool first_bucket_only_by_default() const { return at_least(2, 0); }
  // distributed.py _build_debug_param_to_name_mapping: 2.11 builds the parameter-name map whatever
  // TORCH_DISTRIBUTED_DEBUG says, so the Reducer's "marked as ready twice" text names the parameter
  // (and drops the TORCH_DISTRIBUTED_DEBUG hint); 1.13 returned {} when the debug level was OFF.
  // Observed with real 2.11 DDP; the release that changed it is not pinned down, so only 2.11 is
  // modelled with it.
  bool ddp_always_passes_names() const { return at_least(2, 11); }
};

// The newest version modelled, the default.
inline TorchVersion newest_torch_version() { return TorchVersion{2, 11}; }
inline const char* supported_torch_versions() { return "1.13 or 2.0 to 2.11"; }

// "2.11", "2.11.0", "2.11.0+cpu", "1.13.1": MAJOR.MINOR[.PATCH][+LOCAL]. Throws InputError naming
// `where` and the supported range for anything else or a version outside the range.
TorchVersion parse_torch_version(const std::string& text, const std::string& where);

}  // namespace hookstream
