// What a gradient-sync engine keeps in memory and moves over the link, per rank and step: FSDP2
// (fully_shard), FSDP1 (FlatParameter units), DeepSpeed ZeRO-1/2/3 and their CPU offload. The
// memory model (memory_model.cc) takes the engine's sharded weights, gradients, optimizer states,
// unsharded buffers and host memory from here; step prediction adds the engine's collectives,
// scheduled against the step's compute as the engine's prefetch allows. DDP is not costed here
// (the Reducer's buckets are events of the expanded step). docs/memory-and-time.md, "Engines".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/cost/device_spec.h"
#include "sim/cost/memory_model.h"
#include "sim/events/event_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

enum class BackwardPrefetch { None, BackwardPre, BackwardPost };

// The engine's settings that change memory or communication, resolved from the plan's keys with
// each engine's (and accelerate's / HF Trainer's) defaults.
struct EngineCostSettings {
  EngineKind kind = EngineKind::Ddp;
  bool sharded = false;           // FSDP1/FSDP2/ZeRO-1..3 over more than one rank: costed here
  std::string name;               // "FSDP2", "FSDP1 FULL_SHARD", "ZeRO-2"
  int world = 1;
  int shard_ranks = 1;            // ranks one unit is sharded over (HYBRID_SHARD: the node)
  int zero_stage = 0;
  bool reshard_after_forward = true;
  bool offload_params = false;    // FSDP CPUOffload(Policy) / ZeRO-3 offload_param: cpu
  bool offload_optimizer = false; // FSDP CPU offload (the optimizer steps on CPU) / ZeRO offload_optimizer
  bool fp32_master = false;       // trainable parameters kept in fp32 (FSDP upcast / DeepSpeed fp32 partitions)
  int param_dtype_bytes = 2;      // all-gather and compute dtype (MixedPrecisionPolicy.param_dtype)
  int reduce_dtype_bytes = 2;     // gradient reduction dtype
  BackwardPrefetch backward_prefetch = BackwardPrefetch::BackwardPre;
  bool forward_prefetch = false;
  bool overlap_comm = false;
  bool contiguous_gradients = true;
  int64_t reduce_bucket_elements = 500000000;
  int64_t allgather_bucket_elements = 500000000;
  int64_t prefetch_bucket_elements = 50000000;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;  // ZeRO-3 stage3_max_reuse_distance (config.py default 1e9)
  int64_t param_persistence_threshold = 100000;
  int64_t sub_group_elements = 1000000000;  // ZeRO-3 sub_group_size (config.py default 1e9)
  std::vector<std::string> settings;  // what was read, in the user's keys ("zero_optimization.stage: 2")
  std::vector<std::string> notes;     // read but not modelled, or assumed
};
EngineCostSettings engine_cost_settings(const Plan& plan);

// Device and host memory of the engine's model states for rank 0, each tensor rounded by
// `round_device` (the CUDA caching allocator) when it lives on the GPU.
struct EngineMemory {
  std::map<MemoryCategory, int64_t> device;   // every moment of the step
  std::vector<int64_t> grads_by_layer;        // sharded grads produced in backward; [layers]: outside the stack
  int64_t unsharded_peak = 0;                 // gathered parameters and unsharded grads at the backward peak
  int64_t comm_buffers = 0;                   // ZeRO ipg buckets
  int64_t optimizer_bytes = 0;                // what the optimizer steps on this rank's device (for its temporaries)
  int64_t step_bytes = 0;                     // device bytes step() allocates (ZeRO-3's fp32 gradient of one sub-group)
  // ZeRO: the model-state tensors by DeepSpeed's names (bit16_params, bit16_gradients or
  // bit16_gradient_partition, fp32_partition, optimizer_states, fp32_gradients, gathered), unrounded,
  // wherever they live (device or host).
  std::map<std::string, int64_t> parts;
  std::map<MemoryCategory, int64_t> host;     // pinned host memory under CPU offload
  std::vector<std::string> notes;
};
EngineMemory engine_memory(const Plan& plan, const ModelStructure& structure, const EngineCostSettings& settings,
                           bool allocator_rounding);

// ZeRO-3's parameter fetches in one micro-step once the coordinator's trace is complete (from
// the second forward on), module by module as PartitionedParameterCoordinator runs them
// (deepspeed/runtime/zero/partitioned_param_coordinator.py, 0.19): a module's parameters are
// all-gathered unless still gathered; after its use they are released unless the trace uses them
// again within stage3_max_reuse_distance elements (or a prefetch already skipped over that use);
// stage3_prefetch_bucket_size elements of the modules next in the trace are gathered ahead, under
// stage3_max_live_parameters. Checkpointed layers run their modules' forwards again in backward (the
// recompute fetches; their backward then finds them gathered unless the layer is larger than the
// reuse distance). Parameters under the persistence threshold are left out (gathered once, kept).
struct Zero3Fetches {
  std::vector<int64_t> forward_elements;   // all-gathered in forward, by decoder layer; [layers]: outside the stack
  std::vector<int64_t> backward_elements;  // all-gathered in backward (recomputes included), by layer
  int64_t recompute_elements = 0;          // the part of the backward's that recomputes gather
  int64_t kept_elements = 0;               // released in no module's forward: still gathered when backward uses them
  int64_t peak_available = 0;              // most elements gathered at once (the coordinator's __n_available_params)
  int forward_gathers = 0, backward_gathers = 0;  // module fetches that all-gather (prefetches included)
  // All-gathered elements by the flag DeepSpeed gives them: the phase of the hook whose fetch issued
  // the all-gather (a recompute's forward hooks count as forward, a prefetch as its issuer's).
  int64_t forward_flagged = 0, backward_flagged = 0;
  int steps = 0;  // the coordinator's steps: every module call's fetch, parameter-less containers included
};
Zero3Fetches zero3_fetches(const Plan& plan, const ModelStructure& structure, const EngineCostSettings& settings);

// One kind of transfer in a step: its count, bytes and time on the link.
struct CommTotal {
  std::string collective;  // "all_gather", "reduce_scatter", "all_reduce", "H2D", "D2H", "cpu_optimizer_step"
  std::string phase;       // "forward", "backward", "optimizer"
  int count = 0;
  int64_t bytes = 0;       // per rank, summed
  double ns = 0;
};

struct EngineStepCost {
  std::vector<CommTotal> collectives;  // by collective and phase, in step order
  std::string link;                    // "NVLink 450 GB/s" / "network 50 GB/s"
  double comm_ns = 0;                  // every transfer, serialized on the link
  double exposed_ns = 0;               // what the step waits for beyond its compute
  double optimizer_saved_ns = 0;       // the GPU optimizer step's time this engine does not spend (sharded or on CPU)
  std::vector<std::string> notes;
};

// Ring collective times over `ranks` (NCCL's ring algorithm; per rank, bandwidth B of the link):
// all-reduce 2 (n-1)/n S / B, all-gather and reduce-scatter (n-1)/n S / B, S the full (unsharded) size.
double ring_allgather_ns(int64_t bytes, int ranks, const DeviceSpec& device, int gpus_per_node = 8);
double ring_reduce_scatter_ns(int64_t bytes, int ranks, const DeviceSpec& device, int gpus_per_node = 8);

// The engine's transfers over one step of `schedule_model` (rank 0's scheduled step: per-layer
// compute times), overlapped with compute as the engine's prefetch and overlap settings allow.
EngineStepCost engine_step_cost(const Plan& plan, const ModelStructure& structure, const EngineCostSettings& settings,
                                const DeviceSpec& device, const EventModel& scheduled);

}  // namespace hookstream
