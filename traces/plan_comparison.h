// A recorded step against the plan's simulated step (sim/streams/stream_expansion.h expand_step scheduled
// by sim/cost/time_model.h, i.e. sim/cost/step_prediction.h predict_step): both sides' ops are put in the same
// op groups (traces/recorded_step.h OpGroup: forward / recompute / backward of layer L, D2H / H2D
// copies of layer L, the k-th all-reduce, the optimizer, the ops outside the decoder layers before,
// between and after them) and compared group by group. The measured durations make a calibration
// file (sim/cost/calibration.h) that the simulator loads with hookstream.calibration.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/inputs/plan.h"
#include "traces/recorded_step.h"

namespace hookstream {

struct GroupComparison {
  OpGroup group;
  int recorded_ops = 0;
  double measured_ns = 0;   // sum of the recorded ops' durations (GPU time)
  int simulated_ops = 0;
  double predicted_ns = 0;  // sum of the simulated ops' predicted durations
};

struct ClassComparison {
  OpClass op_class = OpClass::None;
  int recorded_ops = 0, simulated_ops = 0;
  double measured_ns = 0, predicted_ns = 0;
};

// One recorded rank against the plan: DDP ranks run the same ops, so a rank whose step or op class
// takes longer than the others' is a straggler (a slower GPU, a host hiccup, more tokens).
struct RankComparison {
  int rank = 0;
  double measured_step_ns = 0;           // first issue .. last completion of that rank's step
  std::vector<ClassComparison> classes;  // measured side only (predicted is the same for every rank)
};

struct PlanComparison {
  std::string plan, protocol, device;
  // Every recorded rank is compared with the plan's simulated rank 0 (sim/cost/step_prediction.h
  // simulates one rank; ranks with the same plan run the same ops). The group and class figures
  // below are the mean over the ranks that recorded the group; the step is the slowest rank's.
  std::vector<RankComparison> ranks;     // by rank
  double measured_step_ns = 0, predicted_step_ns = 0;
  std::vector<GroupComparison> groups;   // sorted by group
  std::vector<ClassComparison> classes;  // by class
  int matched = 0, recorded_only = 0, simulated_only = 0;  // groups
  std::vector<int64_t> bucket_bytes;     // the simulated all-reduces' bytes in launch order
  nlohmann::json calibration;            // hookstream.calibration/1
  std::vector<std::string> notes;
};

// Throws InputError for a protocol or calibration file of the plan that cannot be read.
PlanComparison compare_with_plan(const RecordedStep& step, const Plan& plan);

std::string render_plan_comparison_text(const PlanComparison& comparison, size_t largest = 10);
nlohmann::json render_plan_comparison_json(const PlanComparison& comparison);

}  // namespace hookstream
