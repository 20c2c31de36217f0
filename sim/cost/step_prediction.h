// One step of a plan on a device: the memory model's peaks and the time model's schedule of the
// step the stream expansion produces (sim/streams/stream_expansion.h with the plan's offload protocol).
#pragma once

#include <cstdint>

#include "sim/cost/calibration.h"
#include "sim/sync/ddp/ddp_simulation.h"
#include "sim/cost/device_spec.h"
#include "sim/cost/engine_cost.h"
#include "sim/events/event_model.h"
#include "sim/cost/memory_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/cost/time_model.h"

namespace hookstream {

struct StepPrediction {
  MemoryEstimate memory;          // with per-op points over the step (MemoryModelOptions::step)
  Schedule schedule;              // rank 0's step (ranks with the same plan run the same ops); for
                                  // FSDP/ZeRO step_ns includes the engine's exposed communication
  EngineStepCost engine;          // FSDP1/FSDP2/ZeRO: collectives, offload copies, CPU optimizer step
  int64_t tokens_per_step = 0;    // sequence_len x micro_batch x accumulation steps x world size
  double tokens_per_second = 0;   // over all ranks
};

// `calibration` overrides estimated durations where it matches. `ddp`: this plan's DDP simulation
// when the caller has run it (its steady-state buckets are reused; otherwise they are simulated).
// Throws InputError for a protocol or calibration file that cannot be read.
StepPrediction predict_step(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                            const Calibration* calibration = nullptr, const SyncSimulation* ddp = nullptr);

// The same for a step already expanded (rank 0's ops, e.g. with a protocol given on the command
// line): memory per op over it, and its schedule with every all-reduce over plan.world_size ranks.
StepPrediction predict_expanded_step(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                                     const EventModel& step, const Calibration* calibration = nullptr);

// predict_expanded_step in two halves, for a caller that needs the time only when the memory fits
// (a fix search rejects a candidate that still runs out of memory without timing it):
// the memory model over the expanded step, then the time model with that estimate carried along.
MemoryEstimate estimate_step_memory(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                                    const EventModel& step);
StepPrediction predict_step_time(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                                 const EventModel& step, const Calibration* calibration, MemoryEstimate memory);

}  // namespace hookstream
