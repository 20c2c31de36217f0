// A GPU as the memory and time models see it: capacity, peak rates, achieved fractions and links.
// Specs are data (devices/NAME.yaml, the same format users write); see devices/README.md for every
// field and where each number comes from.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hookstream {

struct DeviceProfile;  // sim/cost/device_profile.h

struct HostLink {
  int pcie_gen = 0;
  double pinned_h2d_gbps = 0;   // GB/s (1e9 bytes/s), pinned host -> device
  double pinned_d2h_gbps = 0;   // GB/s, device -> pinned host
  bool measured = false;        // the pinned figures were measured (not datasheet x fraction)
  double pageable_gbps = 0;     // GB/s, pageable host memory (staged, synchronous)
};

struct DeviceSpec {
  std::string name;                   // canonical, e.g. "H100-SXM"
  std::vector<std::string> aliases;   // other names lookup accepts, e.g. "H100"
  std::string source;                 // the file it was read from
  long long memory_bytes = 0;
  double matrix_tflops = 0;           // dense BF16/FP16 Tensor Core peak
  double vector_tflops_fp32 = 0;      // FP32 non-tensor peak
  double hbm_gbps = 0;                // device memory bandwidth, GB/s
  double matrix_efficiency = 1;       // achieved fraction of matrix_tflops for large GEMMs
  double hbm_efficiency = 1;          // achieved fraction of hbm_gbps for streaming kernels
  HostLink host_link;
  double nvlink_gbps = 0;             // per direction per GPU; 0: no NVLink (PCIe within a node)
  double network_gbps = 0;            // inter-node bandwidth per GPU, GB/s
  // cuBLAS's workspace, one per (thread, stream) that runs GEMMs, taken from the caching allocator
  // (PyTorch's default CUBLAS_WORKSPACE_CONFIG, aten/src/ATen/cuda/CublasHandlePool.cpp: ":4096:8",
  // 32 MiB, on compute capability 9.0 exactly; ":4096:2:16:8", 8.125 MiB, on any other, sm100 included;
  // parseChosenWorkspaceSize). cuBLASLt's own 1 MiB workspace is not counted: the bias-free GEMMs of
  // the decoder go through cuBLAS. 0: not counted.
  int64_t blas_workspace_bytes = 0;
  // The measured kernel costs of profiles/<name>.yaml beside the device file, when there is one
  // (load_device_spec reads it); null: the time model's roofline alone.
  std::shared_ptr<const DeviceProfile> profile;
};

// Reads a device file and, where it exists, its profile (profiles/NAME.yaml in the same directory).
// Throws InputError "FILE:LINE: what was expected" for a bad file.
DeviceSpec load_device_spec(const std::string& path);
DeviceSpec parse_device_spec(const std::string& yaml_text, const std::string& source);

// `name_or_path`: an existing file path, or a device name / alias (any case) found in device_dir().
// Throws InputError listing the known devices when nothing matches.
DeviceSpec find_device_spec(const std::string& name_or_path);
// find_device_spec, each name read once per cache. A fix search verifies several candidate plans
// on the plan's GPU, and a profiled device's file (profiles/H100-SXM.yaml: 34 KB of YAML, one
// entry per measured kernel shape) costs more to parse than verifying the plan itself: re-reading
// it per candidate was half of a failing ZeRO-2 plan's `verify` (bench/RESULTS.md, 2026-11-28).
// Owned by one call (simulate_plan), not global: a device file edited between two runs is re-read.
class DeviceSpecCache {
 public:
  // The same as find_device_spec(name_or_path), including its InputError (not cached).
  const DeviceSpec& find(const std::string& name_or_path);

 private:
  std::map<std::string, DeviceSpec> specs_;
};

// <data dir>/devices (data dir: $HOOKSTREAM_DATA_DIR if set, else the compile-time HOOKSTREAM_DATA_DIR).
std::string device_dir();
// Canonical names of the bundled devices, sorted case-insensitively.
std::vector<std::string> list_devices();

}  // namespace hookstream
