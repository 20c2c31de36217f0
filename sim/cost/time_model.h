// How long a step takes: per-op durations from FLOPs and bytes against a device spec (or measured
// durations from a calibration file), then a schedule of the EventModel that follows its
// happens-before order: each stream runs its ops in order; an op starts when its stream is free, the
// host has issued it, and every event its stream waits on has completed. docs/memory-and-time.md.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/cost/calibration.h"
#include "sim/cost/device_spec.h"
#include "sim/events/event_model.h"

namespace hookstream {

struct TimeModelOptions {
  const Calibration* calibration = nullptr;  // measured durations win over estimates
  int collective_ranks = 0;  // ranks in each all-reduce; 0: the distinct ranks in the model
  int gpus_per_node = 8;     // all-reduces within a node use NVLink, across nodes the network
  double host_issue_ns = 0;  // host time to issue one op (launch overhead); 0 in exact tests
};

// Duration of one op in ns. Kernels: roofline max(flops / (peak x efficiency), bytes / (HBM x
// efficiency)). Copies: bytes over the host link (pinned or pageable) or HBM (device to device).
// Collectives: ring all-reduce, 2 (n-1)/n x bytes / link bandwidth. Sync/record/alloc ops: 0.
double estimate_op_ns(const Op& op, const DeviceSpec& device, int collective_ranks, const TimeModelOptions& options = {});
// The per-rank bandwidth (GB/s) a collective over `ranks` GPUs runs at: NVLink within a node,
// the network across nodes, PCIe through the host without NVLink.
double collective_link_gbps(int ranks, const DeviceSpec& device, int gpus_per_node = 8);
// Ring all-reduce time of `bytes` over `ranks` GPUs.
double ring_allreduce_ns(int64_t bytes, int ranks, const DeviceSpec& device, int gpus_per_node = 8);

struct IdleGap {
  double start_ns = 0;
  double end_ns = 0;
};

struct StreamUsage {
  int stream = -1;        // index into EventModel::streams
  double busy_ns = 0;     // sum of op durations
  double idle_ns = 0;     // step time minus busy time
  std::vector<IdleGap> gaps;  // idle intervals between the stream's first and last op
};

struct Schedule {
  EventModel model;            // the input with every op's start_ns / duration_ns set
  double step_ns = 0;          // last completion (GPU or host) over all ranks
  double copy_ns = 0;          // total host<->device copy time
  double hidden_copy_ns = 0;   // the part of it that overlaps compute on the same rank
  double copy_hidden_fraction = 1;  // hidden_copy_ns / copy_ns (1 when there are no copies)
  std::vector<StreamUsage> streams;
  double tokens_per_second(int64_t tokens) const { return step_ns > 0 ? tokens / (step_ns * 1e-9) : 0; }
};

Schedule schedule_step(const EventModel& model, const DeviceSpec& device, const TimeModelOptions& options = {});
// The same, scheduling `model` in place instead of a copy of it (a caller that is done with it).
Schedule schedule_step(EventModel&& model, const DeviceSpec& device, const TimeModelOptions& options = {});

// The two halves of schedule_step, for a caller that reads the model on another thread while it is
// scheduled (traces/step_analysis.cc builds the dependency DAG beside the schedule): the times each
// op gets, computed without writing to `model`; then the Schedule of `model` with those times.
struct OpTimes {
  std::vector<double> start_ns, duration_ns;  // per op of the model
};
OpTimes schedule_times(const EventModel& model, const DeviceSpec& device, const TimeModelOptions& options = {});
// Throws std::invalid_argument when `times` is not for `model` (another op count).
Schedule schedule_from_times(EventModel&& model, const OpTimes& times);
// The same with `figures` = schedule_figures(model, times) computed earlier: for a caller that
// works out the figures while another thread still reads the model (replay's DAG), and writes the
// times into the ops only once that thread is done.
Schedule schedule_from_times(EventModel&& model, const OpTimes& times, Schedule figures);
// The same figures (step time, copy overlap, stream usage) without the model: Schedule::model is
// left empty, `model` is only read. For a caller that compares schedules (replay's what-if).
Schedule schedule_figures(const EventModel& model, const OpTimes& times);

}  // namespace hookstream
