// What a check concluded, with its evidence. Shared by the simulator (predicted) and the runtime's
// real-DDP oracle (observed), so the two can be compared field by field.
#pragma once

#include <string>
#include <vector>

namespace hookstream {

enum class VerdictKind {
  Ok,
  MarkedReadyTwice,     // RuntimeError "Expected to mark a variable ready only once ..."
  SilentDivergence,     // no error, but gradients reduced before all local contributions arrived
  UnfinishedReduction,  // a bucket never completed: error at the next synced forward
  StaticGraphChanged,   // static_graph=True and a hook fired more often than in iteration 0
  NoGradient,           // a trainable parameter gets no gradient at all
  CollectiveMismatch,   // ranks issue different collective sequences: a hang until the timeout
  ReplicaSplit,         // one DDP replica spread over several GPUs by device_map
  ReducerAssert,        // the Reducer hits one of its own internal assertions (a PyTorch bug path)
  // FSDP and DeepSpeed ZeRO (sim/sync/): see ../shared/docs/fsdp-zero-moe.md for the texts.
  GradientReducedTwice,  // ZeRO asserts: a parameter's gradient entered a reduction twice in one step
  WrongGradient,         // no error, but the reduced gradient is not the sum of the step's contributions
                         // (doubled, partial, overwritten, or left unreduced on every rank alike)
  ShardedParameterUse,   // compute on a parameter while it is sharded/freed (FSDP2 "mixed torch.Tensor
                         // and DTensor", FSDP1 freed storage)
  EngineError,           // another error the engine raises (state asserts, AttributeError, ...)
  ExtraCollectives,      // warning: more all-gathers/reduce-scatters than needed (memory and time cost)
};

const char* to_string(VerdictKind kind);            // snake_case as in the JSON schema: "marked_ready_twice"
bool parse_verdict_kind(const std::string& text, VerdictKind& kind);

// Where in the run a finding happened.
enum class Phase { Forward, Backward, AfterBackward };
const char* to_string(Phase phase);

struct Finding {
  VerdictKind kind = VerdictKind::Ok;
  int rank = 0;
  std::vector<int> ranks;  // every rank with this same finding (rank is the first of them)
  int iteration = 0;   // optimizer step (0-based)
  int micro_step = 0;  // within gradient accumulation (0-based)
  Phase phase = Phase::Backward;
  int ddp_index = -1;       // DDP's parameter index (what the Reducer prints)
  std::string parameter;    // fully qualified name
  int layer = -1;           // decoder layer, -1 outside the stack
  std::vector<std::string> graph_tasks;  // the graph tasks whose hooks fired for this parameter
  std::string error_text;   // the text PyTorch raises, or "no error: ..." with the reason
  std::string explanation;  // one or two sentences: why
};

// A finding shared by several ranks keeps the text of its first rank; the Reducer's
// prior-iteration error names the rank ("... for rank 3: ..."). This gives the text as `rank` sees it.
std::string error_text_for_rank(const Finding& finding, int rank);

}  // namespace hookstream
