// Expands a plan and a stream protocol into the ops of one optimizer step (sim/event_model.h), in
// host issue order per rank: forward kernels per layer (with the protocol's offload steps for
// checkpointed layers), backward (reload, recompute, backward kernels per tiled-MLP chunk), DDP's
// bucket all-reduces on a "nccl" stream where the Reducer launches them, the optimizer step.
// Every op carries layer/phase/iteration, buffer accesses and cost inputs (flops, bytes). The work
// is linear in layers x ranks x devices.
#pragma once

#include <vector>

#include "sim/event_model.h"
#include "sim/model_structure.h"
#include "sim/plan.h"
#include "sim/reducer_model.h"
#include "sim/stream_protocol.h"

namespace hookstream {

struct ExpansionOptions {
  // Ranks expanded: false: rank 0 only (ranks with the same per-rank plan issue the same ops);
  // true: every rank of plan.world_size.
  bool all_ranks = false;
  // Explicit ranks to expand (e.g. one representative per rank class of simulate_ddp); overrides
  // all_ranks when not empty.
  std::vector<int> ranks;
  // Devices one process drives (each a replica issued in turn by the same host thread). Counters
  // with `counter: per_process` run across them.
  int devices_per_process = 1;
  int iteration = 0;  // which iteration's per-rank overrides apply
  // Apply the protocol to every layer, not only to checkpointed ones (used by tests and when a
  // plan offloads without gradient checkpointing).
  bool all_layers = false;
  // DDP's buckets as lists of DDP parameter indices, in the Reducer's order (simulate_ddp's
  // initial_buckets, or rebuilt_buckets for iterations after the first). Null: computed from the
  // plan with the Reducer's initial assignment (compute_bucket_assignment_by_size, reversed).
  const BucketAssignment* buckets = nullptr;
};

// Cost inputs of one decoder layer for `tokens` = micro_batch * sequence tokens.
struct LayerCost {
  double projection_flops = 0;  // q, k, v, o, gate, up, down: 2*m*n*k each
  double attention_flops = 0;   // 4 * seq^2 * heads * head_dim * batch, halved for causal masks
  double mlp_flops = 0;         // gate, up, down only (tiled MLP chunks split it)
  int64_t hidden_state_bytes = 0;  // hidden_size * sequence_len * micro_batch * dtype bytes
};
LayerCost layer_cost(const ModelConfig& model, int sequence_len, int micro_batch);

EventModel expand_step(const Plan& plan, const ModelStructure& structure, const StreamProtocol& protocol,
                       const ExpansionOptions& options = {});

}  // namespace hookstream
