// One training step cut out of an imported trace, with every GPU op attributed to what it does in
// the step (forward / recompute / backward of decoder layer L, an offload copy, an all-reduce, the
// optimizer), so it can be compared with a plan's simulated step op class by op class, replayed
// under changes, and race-checked.
//
// Attribution, best evidence first:
// (a) `hookstream run` traces: the runtime annotations of traces/runtime_annotations.h. A GPU op
//     belongs to the innermost annotation range that was open on the host when its launching call
//     was issued (Kineto links the call and the GPU op by correlation id). Protocol-step ranges
//     give the buffers read and written (r=/w=) and the logical stream; sync-step ranges without a
//     recorded CUDA sync of their own (Kineto reports a record only when a wait names it) become
//     the record / wait / host sync they announce. Ranges with no GPU work under them (the CPU
//     legacy profiler records no GPU ops) become one op each on their logical stream, timed by
//     the range.
// (b) foreign traces: NCCL kernels are all-reduces, memcpy kinds give D2H/H2D copies, the
//     profiler's own ranges ("## forward ##", "## backward ##", "Optimizer.step#...", "## optimizer
//     ##") or kernel names ("backward", "Backward", "wgrad", "dgrad", "adam", "multi_tensor_apply")
//     give the phase. There is no per-layer attribution and no buffer information.
#pragma once

#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

enum class OpClass { None, Forward, Recompute, Backward, CopyD2H, CopyH2D, Copy, AllReduce, Optimizer, Other };
const char* to_string(OpClass op_class);

struct OpGroup {
  OpClass op_class = OpClass::None;
  int layer = -1;  // decoder layer, when annotated
  // AllReduce: its ordinal among the step's all-reduces of that rank. Other: where it sits: 0 before
  // any decoder-layer op, 1 after the forward layers started and before the backward layers, 2 after.
  int index = 0;
  bool operator<(const OpGroup& o) const;
  bool operator==(const OpGroup& o) const { return op_class == o.op_class && layer == o.layer && index == o.index; }
  std::string label() const;  // "backward L3", "all-reduce #2", "outside layers (between forward and backward)"
};

struct RecordedStep {
  EventModel model;                     // the step's ops with measured times (start_ns from the trace)
  std::vector<OpGroup> groups;          // per op of `model` (None for host and sync ops)
  std::vector<int> origin;              // per op: index in the imported model, -1 for ops made from annotations
  // Per op: the innermost runtime annotation it was issued in. Text, not std::string: the marker's
  // own name is shared (a long trace's step holds ~10^5-10^6 ops, 32 bytes each as strings).
  std::vector<Text> annotation;
  bool annotated = false;               // hookstream runtime annotations drove the attribution
  std::string step_label;               // "hookstream:step:3", "ProfilerStep#1014" or "whole trace"
  double start_ns = 0, end_ns = 0;      // first issue .. last completion over the step's ops
  std::vector<std::string> notes;       // how the ops were matched
  double measured_ns() const { return end_ns - start_ns; }
};

struct StepSelection {
  int step = -1;  // the step number (hookstream:step:N or ProfilerStep#N); -1: the last one recorded
};

// Throws InputError naming the trace when the requested step is not in it or an annotation is
// malformed.
RecordedStep extract_step(const EventModel& trace, const StepSelection& selection = {});

}  // namespace hookstream
