// One firing of a DDP parameter's AccumulateGrad post hook: the event both the simulator
// (sim/sync/ddp/ddp_simulation.h) and the runtime's recorder (runtime/hook_recorder.h) produce, so a
// predicted schedule and a recorded one compare field by field. No LibTorch types.
#pragma once

#include <string>

namespace hookstream {

struct HookFiring {
  int micro_step = 0;
  int ddp_index = -1;
  int parameter = -1;        // index into ModelStructure::parameters (-1 where unknown)
  int task = -1;             // graph task id within the step (simulator), -1 where unknown
  int depth = 0;             // 0: the outer backward; 1: a backward()/grad() inside a node; ...
  std::string graph_task;    // label of the innermost graph task
  bool grad_defined = true;  // the gradient the accumulator received (undefined: returned None)
  bool expected = true;      // the Reducer expected hooks then (simulator; otherwise ignored)
};

}  // namespace hookstream
