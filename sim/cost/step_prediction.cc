#include "sim/cost/step_prediction.h"

#include <filesystem>

#include "sim/cost/profiled_costs.h"
#include "sim/sync/ddp/ddp_simulation.h"
#include "sim/streams/stream_expansion.h"
#include "sim/streams/stream_protocol.h"

namespace hookstream {

StepPrediction predict_step(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                            const Calibration* calibration, const SyncSimulation* ddp) {
  const std::string plan_dir = std::filesystem::path(plan.source).parent_path().string();
  // The protocol only matters for offloaded layers; without offloading the "none" protocol runs
  // every layer on the current stream.
  const StreamProtocol protocol =
      load_stream_protocol(plan.activation_offloading ? plan.offload_protocol_name() : "none", plan_dir);
  // The steady-state step: DDP's buckets as rebuilt after the first iteration.
  const BucketAssignment buckets = steady_state_buckets(plan, structure, ddp);
  ExpansionOptions expansion;
  expansion.buckets = &buckets;
  return predict_expanded_step(plan, structure, device, expand_step(plan, structure, protocol, expansion), calibration);
}

StepPrediction predict_expanded_step(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                                     const EventModel& step, const Calibration* calibration) {
  StepPrediction prediction;
  MemoryModelOptions memory;
  memory.step = &step;
  prediction.memory = estimate_memory(plan, structure, device, memory);
  TimeModelOptions options;
  options.calibration = calibration;
  options.collective_ranks = plan.world_size;
  if (device.profile) {
    // Kernel durations from the device's measured profile (sim/cost/profiled_costs.h); the
    // roofline for what it does not cover.
    EventModel profiled = step;
    apply_device_profile(profiled, plan, structure, device, *device.profile);
    prediction.schedule = schedule_step(std::move(profiled), device, options);
  } else {
    prediction.schedule = schedule_step(step, device, options);
  }
  prediction.tokens_per_step = static_cast<int64_t>(plan.sequence_len_for(0, 0)) * plan.micro_batch_size *
                               std::max(1, plan.gradient_accumulation_steps) * std::max(1, plan.world_size);
  prediction.tokens_per_second = prediction.schedule.tokens_per_second(prediction.tokens_per_step);
  return prediction;
}

}  // namespace hookstream
