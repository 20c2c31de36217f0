// Device and host memory over one training step, from the plan and the model's parameters:
// weights, adapters, gradients, optimizer states, DDP buckets, saved activations per checkpoint
// mode, recompute working sets, tiled-MLP chunks, logits and loss, offload buffers and pinned CPU
// slots, each tensor rounded as PyTorch's caching allocators round it. docs/memory-and-time.md
// lists every formula and assumption.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/cost/device_spec.h"
#include "sim/events/event_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

enum class MemoryCategory {
  Weights,              // base weights (bf16, or 4/8-bit packed for QLoRA) that are not adapters
  QuantizationState,    // bitsandbytes absmax/scales of quantized weights
  Adapters,             // LoRA A/B
  Gradients,            // .grad of trainable parameters (views into buckets with gradient_as_bucket_view)
  OptimizerStates,      // AdamW exp_avg + exp_avg_sq
  OptimizerTemporaries, // foreach AdamW's intermediate list during step()
  DdpBuckets,           // the Reducer's flat bucket tensors
  Activations,          // tensors saved for backward (or checkpoint inputs)
  RecomputeWorkspace,   // one layer's recomputed activations and its backward temporaries
  TiledMlpChunks,       // one tiled-MLP chunk's intermediates
  LogitsAndLoss,        // logits, their fp32 upcast and log-softmax output (unchunked cross-entropy)
  ReloadBuffers,        // GPU buffers offloaded activations are copied back into
  PinnedSlots,          // pinned host memory, one slot per offloaded layer
  FsdpUnsharded,        // FSDP1/FSDP2: all-gathered (unsharded) parameters and their unsharded grads
  MasterWeights,        // DeepSpeed ZeRO: the fp32 partition of the trainable parameters
  CommBuffers,          // DeepSpeed ZeRO: the ipg reduction bucket(s)
  GatheredParams,       // DeepSpeed ZeRO-3: fetched (gathered) modules and the computing module's 16-bit grads
  Workspaces,           // library workspaces from the caching allocator (cuBLAS, per thread and stream)
};
const char* to_string(MemoryCategory category);

// Memory held at one moment of the step, by category.
struct MemoryPoint {
  std::string phase;  // "forward", "loss", "backward", "optimizer", or an op's phase
  std::string at;     // "layer 31", "cross-entropy", "AdamW step", or an op's name
  int op = -1;        // per-op points: index into the step's ops (MemoryModelOptions::step)
  std::map<MemoryCategory, int64_t> bytes;
  int64_t total() const;
};

struct MemoryFinding {
  std::string kind = "oom";
  MemoryPoint at;          // the peak that does not fit
  int64_t required_bytes = 0;
  int64_t capacity_bytes = 0;
  std::string message;
};

struct MemoryEstimate {
  std::string device_name;
  int64_t capacity_bytes = 0;
  int64_t tokens_per_micro_step = 0;     // sequence_len x micro_batch_size (largest over ranks/iterations)
  std::vector<MemoryPoint> device_points;  // every moment evaluated, in step order
  MemoryPoint device_peak;
  MemoryPoint host_peak;
  std::optional<MemoryFinding> oom;      // device_peak > capacity
  // FSDP1/FSDP2/ZeRO plans: the engine whose sharding sized the model states ("ZeRO-2"; empty for
  // DDP and one rank) and what of its settings is assumed or not modelled.
  std::string engine;
  std::vector<std::string> engine_notes;
};

struct MemoryModelOptions {
  // Round every tensor as c10/cuda/CUDACachingAllocator.cpp and the pinned CachingHostAllocator do.
  bool allocator_rounding = true;
  // A step's ops (sim/streams/stream_expansion.h): Alloc/Free of device buffers add per-op points on top of
  // the persistent memory, so a peak can name the op where it happens.
  const EventModel* step = nullptr;
};

MemoryEstimate estimate_memory(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                               const MemoryModelOptions& options = {});

// The bytes torch.cuda.memory_allocated() grows by for one tensor (c10/cuda/CUDACachingAllocator.cpp):
// rounded up to kMinBlockSize (512 B); a tensor of kMinLargeAlloc (10 MiB) or more gets a segment
// rounded up to kRoundLarge (2 MiB) and keeps its tail when that tail is at most kSmallSize (1 MiB).
// Measured on an H100 with PyTorch 2.11: 1 MiB + 1 B -> 1 MiB + 512 B; 513 B -> 1024 B.
int64_t device_allocation_bytes(int64_t request);
// aten/src/ATen/core/CachingHostAllocator.h: pinned host blocks are rounded up to a power of two.
int64_t pinned_allocation_bytes(int64_t request);

// Live device bytes after each op of `model`, from its Alloc/Free ops (one series per rank/device).
struct MemorySample {
  int rank = 0;
  int device = 0;
  int op = -1;         // index into model.ops
  int64_t bytes = 0;   // live after the op
};
std::vector<MemorySample> memory_over_ops(const EventModel& model);
// The memory model's per-op points (MemoryModelOptions::step) as samples for a timeline: device 0
// of rank 0, every category included.
std::vector<MemorySample> memory_samples(const MemoryEstimate& estimate);

// "24.41 GiB": two decimals, binary units.
std::string format_gib(int64_t bytes);
// The unit that fits: "24.41 GiB", "12.00 MiB", "3.50 KiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace hookstream
