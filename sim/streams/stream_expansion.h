// Expands a plan and a stream protocol into the ops of one optimizer step (sim/events/event_model.h), in
// host issue order per rank: forward kernels per layer (with the protocol's offload steps for
// checkpointed layers), backward (reload, recompute, backward kernels per tiled-MLP chunk), DDP's
// bucket all-reduces on a "nccl" stream where the Reducer launches them, the optimizer step.
// Every op carries layer/phase/iteration, buffer accesses and cost inputs (flops, bytes). The work
// is linear in layers x ranks x devices.
#pragma once

#include <vector>

#include "sim/events/event_model.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/ddp/reducer_model.h"
#include "sim/streams/stream_protocol.h"

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

// Cost inputs of one decoder layer for `tokens` = micro_batch * sequence tokens. FLOPs count the
// GEMMs (2*m*n*k each); norms, RoPE, activations and residual adds are elementwise bytes.
struct LayerCost {
  double projection_flops = 0;  // forward base GEMMs q, k, v, o, gate, up, down
  double attention_flops = 0;   // forward QK^T and PV: 4 * seq^2 * heads * head_dim * batch, halved for causal masks
  double mlp_flops = 0;         // forward base gate, up, down only (tiled MLP chunks split it)
  double lora_flops = 0;        // forward LoRA A and B GEMMs of every adapted projection
  double lora_mlp_flops = 0;    // the part of lora_flops in gate, up, down
  // Backward: every projection's input-gradient GEMM (1x its forward), its weight-gradient GEMM
  // only when the weight is trainable (1x more), LoRA's A and B input and weight gradients (2x),
  // the attention core's dQ, dK, dV, dP (2x).
  double attention_backward_flops = 0;  // q, k, v, o (+ LoRA) and the attention core
  double mlp_backward_flops = 0;        // gate, up, down (+ LoRA)
  int64_t hidden_state_bytes = 0;  // hidden_size * sequence_len * micro_batch * dtype bytes
  // Elementwise kernels of one layer (memory-bound: bytes read + written), forward / backward.
  // RMSNorm: input and post-attention norms (+ Qwen3's per-head q/k norms); RoPE on q and k;
  // act(gate) * up; the two residual adds.
  int64_t rmsnorm_bytes = 0, rmsnorm_backward_bytes = 0;
  int64_t rope_bytes = 0, rope_backward_bytes = 0;
  int64_t silu_mul_bytes = 0, silu_mul_backward_bytes = 0;
  int64_t residual_bytes = 0, residual_backward_bytes = 0;
  // attn_implementation "eager": the [B, H, S, S] scores go through HBM (QK^T written, softmax in
  // fp32, cast back, read by PV; backward reads them and writes dP and dS). 0 for sdpa/flash/flex.
  int64_t eager_scores_bytes = 0, eager_scores_backward_bytes = 0;
  // A recurrent token mixer's elementwise work (token_mixer.h): the causal depthwise conv1d with its
  // SiLU over conv_channels, and the gated RMSNorm over the value width. 0 in an attention layer.
  int64_t mixer_elementwise_bytes = 0, mixer_elementwise_backward_bytes = 0;

  // What a non-reentrant checkpoint's recompute in `hookstream run` leaves out (recompute_defers_down):
  // the down projection's base and LoRA B GEMMs and the MLP's residual add. 0: the whole forward.
  double deferred_down_flops = 0;
  int64_t deferred_residual_bytes = 0;

  double forward_flops() const { return projection_flops + lora_flops + attention_flops; }
  double recompute_flops() const { return forward_flops() - deferred_down_flops; }
  double mlp_forward_flops() const { return mlp_flops + lora_mlp_flops; }
  double backward_flops() const { return attention_backward_flops + mlp_backward_flops; }
};
// One projection of a decoder layer (q, k, v, o, gate, up, down, in that order): y[tokens, out] =
// x[tokens, in] W^T, its weight trainable or frozen, with a LoRA pair of rank lora_rank (0: none).
struct ProjectionShape {
  double in = 0, out = 0;
  bool mlp = false;
  bool trainable = true;
  double lora_rank = 0;
};
// Without `structure`: every weight trainable, no adapter. An MoE layer's MLP width is the experts
// a token goes through.
std::vector<ProjectionShape> layer_projections(const ModelConfig& model, const ModelStructure* structure = nullptr, int layer = -1);
// Forward FLOPs of a recurrent token mixer's core over `tokens` tokens (0 for attention), a
// roofline estimate of the chunked kernel (docs/memory-and-time.md "Recurrent token mixers").
double recurrent_mixer_flops(TokenMixer mixer, const RecurrentMixerShape& shape, double tokens);
// Without `structure`: every weight trainable, no adapter (a full fine-tune). With it: decoder
// layer `layer`'s trainable flags and LoRA pairs.
LayerCost layer_cost(const ModelConfig& model, int sequence_len, int micro_batch,
                     const ModelStructure* structure = nullptr, int layer = -1, bool eager_attention = false);

// Whether the recompute of checkpointed decoder layer `layer` stops before its MLP's down
// projection, as `hookstream run` does (runtime/deferred_linear.h): non-reentrant checkpointing of
// a layer with a dense MLP, not tiled. PyTorch's own early stop (torch/utils/checkpoint.py) stops
// one GEMM later: it runs the down projection's base GEMM again; a prediction for an eager run of
// the same plan is short by that GEMM per layer (docs/memory-and-time.md).
bool recompute_defers_down(const Plan& plan, const ModelStructure& structure, int layer);
// Sets cost.deferred_* of `layer` over `tokens` tokens when recompute_defers_down.
void apply_recompute_deferral(const Plan& plan, const ModelStructure& structure, int layer, double tokens, LayerCost& cost);

EventModel expand_step(const Plan& plan, const ModelStructure& structure, const StreamProtocol& protocol,
                       const ExpansionOptions& options = {});

}  // namespace hookstream
