#include "sim/cost/step_prediction.h"

#include <filesystem>

#include "sim/cost/expert_parallel_cost.h"
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
  // The steady-state step: DDP's buckets as rebuilt after the first iteration. FSDP and ZeRO have
  // no Reducer buckets (their transfers are costed by engine_step_cost): no DDP simulation for them.
  const BucketAssignment buckets = engine_cost_settings(plan).sharded ? BucketAssignment{} : steady_state_buckets(plan, structure, ddp);
  ExpansionOptions expansion;
  expansion.buckets = &buckets;
  return predict_expanded_step(plan, structure, device, expand_step(plan, structure, protocol, expansion), calibration);
}

StepPrediction predict_expanded_step(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                                     const EventModel& step, const Calibration* calibration) {
  return predict_step_time(plan, structure, device, step, calibration, estimate_step_memory(plan, structure, device, step));
}

MemoryEstimate estimate_step_memory(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                                    const EventModel& step) {
  MemoryModelOptions memory;
  memory.step = &step;
  return estimate_memory(plan, structure, device, memory);
}

StepPrediction predict_step_time(const Plan& plan, const ModelStructure& structure, const DeviceSpec& device,
                                 const EventModel& step, const Calibration* calibration, MemoryEstimate memory) {
  StepPrediction prediction;
  prediction.memory = std::move(memory);
  TimeModelOptions options;
  options.collective_ranks = plan.world_size;
  // Kernel durations from the device's measured profile where there is one (sim/cost/profiled_costs.h;
  // the roofline for what it does not cover).
  EventModel timed = step;
  ProfiledCosts profiled;
  if (device.profile) profiled = apply_device_profile(timed, plan, structure, device, *device.profile);
  const EngineCostSettings engine = engine_cost_settings(plan);
  // The expansion's all-reduces are DDP's buckets, which FSDP and ZeRO do not run: they stay as
  // ordering points at no cost, and the engine's own transfers (engine_cost.h) are scheduled
  // against the step's compute, adding what the engine's prefetch and overlap cannot hide.
  if (engine.sharded) {
    for (Op& op : timed.ops) {
      if (op.kind == OpKind::Collective) op.bytes = 0;
    }
  }
  // The calibration, applied here rather than by the scheduler: a profiled kernel's parts are
  // scaled one by one (sim/cost/calibration.h), which only this step's costing knows.
  if (calibration != nullptr) {
    for (size_t i = 0; i < timed.ops.size(); ++i) {
      Op& op = timed.ops[i];
      const bool has_parts = i < profiled.parts.size() && profiled.parts[i].total() > 0;
      const double estimate = estimate_op_ns(op, device, plan.world_size, options);
      const double calibrated = calibration->apply(op, estimate, has_parts ? &profiled.parts[i] : nullptr);
      if (calibrated != estimate) op.duration_ns = calibrated;  // the scheduler estimates the rest as before
    }
  }
  prediction.schedule = schedule_step(std::move(timed), device, options);
  if (engine.sharded) {
    prediction.engine = engine_step_cost(plan, structure, engine, device, prediction.schedule.model);
    prediction.schedule.step_ns += prediction.engine.exposed_ns - prediction.engine.optimizer_saved_ns;
  } else if (plan.engine.expert_parallel > 1) {
    // Pure EP under DDP: the Reducer's buckets are in the expansion; the all-to-alls are added here.
    prediction.engine = expert_parallel_step_cost(plan, structure, device);
    prediction.schedule.step_ns += prediction.engine.exposed_ns;
  }
  prediction.tokens_per_step = static_cast<int64_t>(plan.sequence_len_for(0, 0)) * plan.micro_batch_size *
                               std::max(1, plan.gradient_accumulation_steps) * std::max(1, plan.world_size);
  prediction.tokens_per_second = prediction.schedule.tokens_per_second(prediction.tokens_per_step);
  return prediction;
}

}  // namespace hookstream
