#include "sim/streams/stream_expansion.h"

#include "sim/cost/optimizer_states.h"

#include <algorithm>
#include <map>

#include "sim/sync/ddp/ddp_simulation.h"
#include "sim/inputs/input_error.h"
#include "sim/sync/ddp/reducer_model.h"

namespace hookstream {

namespace {

// The projections of one attention + MLP block (a decoder layer, or one LongCat-Flash sub-block).
std::vector<ProjectionShape> block_projections(const ModelConfig& model, const ModelStructure* structure, const DecoderLayerUse* use) {
  const double h = model.hidden_size;
  const double head_dim = model.head_dim > 0 ? model.head_dim : (model.num_attention_heads > 0 ? h / model.num_attention_heads : 0);
  const double q_width = model.num_attention_heads * head_dim;
  const double kv_width = model.num_key_value_heads * head_dim;
  // An MoE layer costs the experts a token goes through (top_k routed + shared), not all E.
  const double inter = use != nullptr && use->mlp_width > 0 ? static_cast<double>(use->mlp_width) : model.intermediate_size;
  static const LinearUse kAbsent;
  struct Projection {
    const LinearUse& linear;
    double in, out;
    bool mlp;
  };
  const Projection projections[] = {
      {use ? use->q : kAbsent, h, q_width, false},  {use ? use->k : kAbsent, h, kv_width, false},
      {use ? use->v : kAbsent, h, kv_width, false}, {use ? use->o : kAbsent, q_width, h, false},
      {use ? use->gate : kAbsent, h, inter, true},  {use ? use->up : kAbsent, h, inter, true},
      {use ? use->down : kAbsent, inter, h, true}};
  std::vector<ProjectionShape> shapes;
  const bool recurrent = use != nullptr && use->mixer != TokenMixer::Attention;
  // FalconH1: attention's four projections stay; the mixer's in- and out-projections are appended.
  const bool parallel = use != nullptr && use->parallel_attention;
  // A recurrent mixer's projections have the shapes the table built (its in-projections appended
  // after the seven; q, k and v absent, o its out_proj).
  auto from_weight = [&](const LinearUse& linear, ProjectionShape& shape) {
    const std::vector<int64_t>& w = structure->parameters[static_cast<size_t>(linear.weight)].shape;
    shape.out = static_cast<double>(w.at(0));
    shape.in = static_cast<double>(w.at(1));
  };
  for (const Projection& p : projections) {
    ProjectionShape shape;
    shape.in = p.in;
    shape.out = p.out;
    shape.mlp = p.mlp;
    // The input gradient is always computed (earlier layers and LoRA need it); the weight gradient
    // only for a trainable weight: a frozen (LoRA/QLoRA base) weight costs 1x forward in backward.
    shape.trainable = use == nullptr || (p.linear.weight >= 0 && structure->parameters[p.linear.weight].trainable);
    if (use != nullptr && p.linear.lora_a >= 0) {
      shape.lora_rank = static_cast<double>(structure->parameters[p.linear.lora_a].shape[0]);  // lora_A is [r, in]
    }
    if (recurrent && !parallel && !p.mlp) {
      shape.in = shape.out = 0;
      if (p.linear.weight >= 0) from_weight(p.linear, shape);
    }
    // A NemotronH token-mixer block has no MLP; its ungated MLP (up, down) no gate projection.
    if (p.mlp && use != nullptr && (!use->has_mlp || (!use->mlp_gated && !use->moe && &p.linear == &use->gate))) {
      shape.in = shape.out = 0;
    }
    shapes.push_back(shape);
  }
  if (recurrent) {
    std::vector<const LinearUse*> extra;
    for (const LinearUse& linear : use->mixer_in) extra.push_back(&linear);
    if (parallel && use->mixer_out.weight >= 0) extra.push_back(&use->mixer_out);
    for (const LinearUse* linear : extra) {
      ProjectionShape shape;
      from_weight(*linear, shape);
      shape.trainable = structure->parameters[static_cast<size_t>(linear->weight)].trainable;
      if (linear->lora_a >= 0) shape.lora_rank = static_cast<double>(structure->parameters[linear->lora_a].shape[0]);
      shapes.push_back(shape);
    }
  }
  return shapes;
}

}  // namespace

std::vector<ProjectionShape> layer_projections(const ModelConfig& model, const ModelStructure* structure, int layer) {
  const DecoderLayerUse* use =
      structure != nullptr && layer >= 0 && layer < static_cast<int>(structure->layers.size()) ? &structure->layers[layer] : nullptr;
  std::vector<ProjectionShape> shapes = block_projections(model, structure, use);
  if (use == nullptr) return shapes;
  // LongCat-Flash: the second sub-block's q/k/v/o and dense MLP, then the shortcut MoE block's
  // router and the experts a token goes to (its mlp_width: moe_topk experts; a token routed to one
  // of the zero_expert_num identity experts costs nothing, so this is an upper bound). The first
  // seven stay the first sub-block's (callers index them: [5] up, [6] down). MLA's projections are
  // costed with the head_dim formula, as for DeepSeek-V3 (approximate).
  for (const DecoderLayerUse& sub : use->sublayers) {
    const std::vector<ProjectionShape> more = block_projections(model, structure, &sub);
    shapes.insert(shapes.end(), more.begin(), more.end());
  }
  for (const DecoderLayerUse& moe : use->shortcut) {
    std::vector<ProjectionShape> more = block_projections(model, structure, &moe);
    for (ProjectionShape& p : more) {
      if (!p.mlp) p.in = p.out = 0;  // the shortcut block has no attention
    }
    shapes.insert(shapes.end(), more.begin(), more.end());
  }
  return shapes;
}

double recurrent_mixer_flops(TokenMixer mixer, const RecurrentMixerShape& s, double tokens) {
  switch (mixer) {
    case TokenMixer::Attention: case TokenMixer::None: return 0;
    case TokenMixer::GatedDeltaNet: {
      // fla's chunk_gated_delta_rule per head and chunk of C tokens: the intra-chunk products
      // (K K^T, the WY transform's A K and A V, Q K^T, (Q K^T) V: about 4 C (dk + dv) per token)
      // and the chunk-state ones (Q S, W S, K^T V into S: 3 x 2 dk dv per token). Causal masks do
      // not halve it: the kernels compute whole C x C blocks.
      const double per_token = 4.0 * s.chunk * (s.key_dim + s.value_dim) + 6.0 * s.key_dim * s.value_dim;
      return tokens * s.heads * per_token;
    }
    case TokenMixer::Mamba1: {
      // mamba_ssm's selective_scan_fn: 9 FLOPs per channel, state entry and token
      // (selective_scan_interface.py selective_scan_flop_jit: 9 * batch * seqlen * dim * dstate).
      // Elementwise work on the CUDA cores, costed here at the matrix rate as the other cores are.
      return 9.0 * tokens * s.heads * s.key_dim;
    }
    case TokenMixer::ShortConv: {
      // Lfm2ShortConv.forward: B * x, the causal depthwise conv1d (conv_L_cache multiply-adds per
      // channel and token: F.conv1d with groups = hidden_size, or the causal_conv1d kernel), C * y.
      // Elementwise work, costed at the matrix rate as the other mixers' is.
      return tokens * s.conv_channels * (2.0 * s.conv_kernel + 2.0);
    }
    case TokenMixer::LightningAttention: {
      // MiniMaxLightningAttention.forward per head and block of B tokens: Q K^T and its product
      // with V inside the block (2 x 2 B d per token, whole B x B blocks: the decay mask is applied
      // after the matmul), Q times the running state and K^T V into it (2 x 2 d^2 per token).
      const double per_token = 4.0 * s.chunk * s.key_dim + 4.0 * s.key_dim * s.value_dim;
      return tokens * s.heads * per_token;
    }
    case TokenMixer::Mamba2: {
      // mamba_chunk_scan_combined (SSD) per head and chunk of C tokens: C Bᵀ and its product with
      // X inside the chunk (2 C (d_state + head_dim) per token), the chunk state Bᵀ X and the
      // output's C S (2 x 2 d_state head_dim per token); the scan between chunks is negligible.
      const double per_token = 2.0 * s.chunk * (s.key_dim + s.value_dim) + 4.0 * s.key_dim * s.value_dim;
      return tokens * s.heads * per_token;
    }
  }
  return 0;
}

bool recompute_defers_down(const Plan& plan, const ModelStructure& structure, int layer) {
  if (plan.use_reentrant || plan.layer_tiled(layer) || layer < 0 || layer >= static_cast<int>(structure.layers.size())) return false;
  const DecoderLayerUse& use = structure.layers[static_cast<size_t>(layer)];
  return use.has_mlp && !use.moe && use.down.weight >= 0;
}

void apply_recompute_deferral(const Plan& plan, const ModelStructure& structure, int layer, double tokens, LayerCost& cost) {
  if (!recompute_defers_down(plan, structure, layer)) return;
  const ProjectionShape down = layer_projections(plan.model, &structure, layer)[6];
  cost.deferred_down_flops = 2 * tokens * down.out * (down.in + down.lora_rank);
  cost.deferred_residual_bytes = cost.residual_bytes / 2;  // one of the layer's two adds
}

LayerCost layer_cost(const ModelConfig& model, int sequence_len, int micro_batch, const ModelStructure* structure, int layer,
                     bool eager_attention) {
  const double tokens = static_cast<double>(sequence_len) * micro_batch;
  const double h = model.hidden_size;
  const double head_dim = model.head_dim > 0 ? model.head_dim : (model.num_attention_heads > 0 ? h / model.num_attention_heads : 0);
  const double q_width = model.num_attention_heads * head_dim;
  const double kv_width = model.num_key_value_heads * head_dim;
  const std::vector<ProjectionShape> projections = layer_projections(model, structure, layer);
  const double inter = projections[5].out;  // up (an ungated MLP has no gate)
  LayerCost cost;
  for (const ProjectionShape& p : projections) {
    const double base = 2 * tokens * p.in * p.out;
    const double forward_lora = 2 * tokens * p.lora_rank * (p.in + p.out);
    // LoRA A and B are trainable: input and weight gradients of both, 2x their forward.
    const double backward = base * (p.trainable ? 2 : 1) + 2 * forward_lora;
    cost.projection_flops += base;
    cost.lora_flops += forward_lora;
    if (p.mlp) {
      cost.mlp_flops += base;
      cost.lora_mlp_flops += forward_lora;
      cost.mlp_backward_flops += backward;
    } else {
      cost.attention_backward_flops += backward;
    }
  }
  // QK^T and PV: 2 GEMMs of 2*seq*seq*head_dim per head; causal masking halves the useful work.
  const DecoderLayerUse* use =
      structure != nullptr && layer >= 0 && layer < static_cast<int>(structure->layers.size()) ? &structure->layers[layer] : nullptr;
  const bool parallel = use != nullptr && use->parallel_attention;
  const bool recurrent = use != nullptr && use->mixer != TokenMixer::Attention && !parallel;
  // LongCat-Flash runs 1 + sublayers attention blocks per layer (an MLA block costed as h/heads heads).
  const double blocks = use != nullptr ? 1.0 + static_cast<double>(use->sublayers.size()) : 1.0;
  const double sdpa_flops =
      blocks * 4.0 * sequence_len * static_cast<double>(sequence_len) * model.num_attention_heads * head_dim * micro_batch / 2;
  cost.attention_flops = recurrent ? recurrent_mixer_flops(use->mixer, use->mixer_shape, tokens)
                         : parallel ? sdpa_flops + recurrent_mixer_flops(use->mixer, use->mixer_shape, tokens)
                                    : sdpa_flops;
  cost.attention_backward_flops += 2 * cost.attention_flops;
  cost.hidden_state_bytes = static_cast<int64_t>(model.hidden_size) * sequence_len * micro_batch * dtype_bytes(model.torch_dtype);
  // Elementwise kernels, in bytes of the model dtype (eager PyTorch: each reads its inputs and
  // writes its output once; transformers' LlamaRMSNorm / apply_rotary_pos_emb / act_fn(gate) * up).
  const double e = dtype_bytes(model.torch_dtype);
  const double qk = q_width + kv_width;
  const auto bytes = [&](double values) { return static_cast<int64_t>(values * tokens * e); };
  // Norm forward: read x, write y (x2 norms; q/k norms read and write q and k). Backward: read the
  // grad and x, write the input grad.
  cost.rmsnorm_bytes = bytes(2 * 2 * h + (model.qk_norm ? 2 * qk : 0));
  cost.rmsnorm_backward_bytes = bytes(2 * 3 * h + (model.qk_norm ? 3 * qk : 0));
  // RoPE: q and k read and written (forward), their grads likewise (backward).
  cost.rope_bytes = bytes(2 * qk);
  cost.rope_backward_bytes = bytes(2 * qk);
  if (recurrent) {
    // No RoPE and no q/k norms; instead the conv1d + SiLU (read and write conv_channels; backward
    // reads the grad and the input, writes the input grad) and the gated RMSNorm (reads the core
    // output and the gate z, writes its output; backward reads three, writes two).
    const double c = static_cast<double>(use->mixer_shape.conv_channels);
    const double v = static_cast<double>(use->mixer_shape.heads * use->mixer_shape.value_dim);
    cost.rope_bytes = cost.rope_backward_bytes = 0;
    cost.rmsnorm_bytes = bytes(2 * 2 * h);
    cost.rmsnorm_backward_bytes = bytes(2 * 3 * h);
    cost.mixer_elementwise_bytes = bytes(2 * c + 3 * v);
    cost.mixer_elementwise_backward_bytes = bytes(3 * c + 5 * v);
    if (use->mixer == TokenMixer::ShortConv) {
      // Lfm2ShortConv: the conv (no activation; read and write c) and the products B * x and C * y
      // (read two, write one each); backward: the conv's 3c, and each product reads the grad and
      // both inputs and writes two grads.
      cost.mixer_elementwise_bytes = bytes(2 * c + 2 * 3 * c);
      cost.mixer_elementwise_backward_bytes = bytes(3 * c + 2 * 5 * c);
    } else if (use->mixer == TokenMixer::LightningAttention) {
      // MiniMaxLightningAttention: the activation on qkv (read and write 3v), the decay multiplies
      // of q and k (2 x 2v), the RMSNorm on the core output (2v), sigmoid(output_gate) and its
      // product (2v + 3v); backward about 1.5x each (reads the saved input besides the grad).
      cost.mixer_elementwise_bytes = bytes(6 * v + 4 * v + 2 * v + 5 * v);
      cost.mixer_elementwise_backward_bytes = bytes(9 * v + 6 * v + 3 * v + 8 * v);
    }
  }
  // act(gate) * up: read gate, write act; read act and up, write the product. Backward: read the
  // grad, gate and up, write the gate and up grads.
  cost.silu_mul_bytes = bytes(5 * inter);
  cost.silu_mul_backward_bytes = bytes(5 * inter);
  // Two residual adds (read 2, write 1 each); backward accumulates the branch grads the same way.
  cost.residual_bytes = bytes(2 * 3 * h);
  cost.residual_backward_bytes = bytes(2 * 3 * h);
  if (parallel) {
    // FalconH1: attention's RoPE and norms as above, plus the Mamba2 mixer's conv1d + gated norm.
    const double c = static_cast<double>(use->mixer_shape.conv_channels);
    const double v = static_cast<double>(use->mixer_shape.heads * use->mixer_shape.value_dim);
    cost.mixer_elementwise_bytes = bytes(2 * c + 3 * v);
    cost.mixer_elementwise_backward_bytes = bytes(3 * c + 5 * v);
  }
  if (use != nullptr && (use->mixer == TokenMixer::None || !use->has_mlp)) {
    // A NemotronH block: one norm and one residual add, and no attention or no MLP.
    cost.rmsnorm_bytes = bytes(2 * h);
    cost.rmsnorm_backward_bytes = bytes(3 * h);
    cost.residual_bytes = cost.residual_backward_bytes = bytes(3 * h);
  }
  if (use != nullptr && !use->mlp_gated && !use->moe) {
    // relu2(up): read up, write the activation (no product with a gate); backward reads the grad
    // and up, writes up's grad.
    cost.silu_mul_bytes = bytes(2 * inter);
    cost.silu_mul_backward_bytes = bytes(3 * inter);
  }
  if (blocks > 1) {
    // LongCat-Flash: each sub-block has its two norms, RoPE, act(gate) * up and two residual adds.
    for (int64_t* b : {&cost.rmsnorm_bytes, &cost.rmsnorm_backward_bytes, &cost.rope_bytes, &cost.rope_backward_bytes,
                       &cost.silu_mul_bytes, &cost.silu_mul_backward_bytes, &cost.residual_bytes, &cost.residual_backward_bytes}) {
      *b = static_cast<int64_t>(static_cast<double>(*b) * blocks);
    }
  }
  if (eager_attention && (use == nullptr || use->mixer == TokenMixer::Attention)) {
    // transformers' eager_attention_forward on the full S x S matrix (the causal mask is added, not
    // skipped): QK^T written (dtype), read by softmax, written fp32, read and cast (dtype), read by
    // PV: 2 + 2 + 4 + 4 + 2 + 2 bytes per score. Backward: dP written and read, P read in fp32 and
    // dtype, dS written fp32 and read: about 2 + 2 + 4 + 2 + 4 + 4 + 2.
    const double scores = double(micro_batch) * model.num_attention_heads * double(sequence_len) * sequence_len;
    cost.eager_scores_bytes = static_cast<int64_t>(16 * scores);
    cost.eager_scores_backward_bytes = static_cast<int64_t>(20 * scores);
  }
  return cost;
}

namespace {

// Where in backward a bucket's last gradient is produced: 0 the head, 1 + (L-1-i) decoder layer i,
// L + 1 the embedding (and everything before the decoder: vision tower).
int backward_position(const Parameter& parameter, int layers) {
  if (parameter.layer >= 0) return 1 + (layers - 1 - parameter.layer);
  if (parameter.group == "head" || parameter.group == "final_norm") return 0;
  return layers + 1;
}

class StepExpander {
 public:
  StepExpander(const Plan& plan, const ModelStructure& structure, const StreamProtocol& protocol, const ExpansionOptions& options)
      : plan_(plan), structure_(structure), protocol_(protocol), options_(options), layers_(plan.model.num_hidden_layers) {
    if (options_.devices_per_process < 1) throw InputError("expansion", "devices_per_process must be at least 1");
    if (protocol_.current_stream() < 0) throw InputError(protocol_.source, "the protocol has no current stream");
    plan_buckets();
  }

  EventModel run() {
    model_.source = "simulated: " + plan_.source + " with protocol " + protocol_.name;
    if (!options_.ranks.empty()) {
      for (int rank : options_.ranks) expand_rank(rank);
    } else {
      const int ranks = options_.all_ranks ? plan_.world_size : 1;
      for (int rank = 0; rank < ranks; ++rank) expand_rank(rank);
    }
    add_peer_reads();
    return std::move(model_);
  }

 private:
  struct Device {
    int device = 0;
    std::vector<int> streams;               // protocol stream -> model stream
    int nccl = -1;
    int hidden = -1;                        // model buffer of hidden[0]; hidden[i] = hidden + i
    std::vector<int> buffers;               // protocol buffer -> model buffer of slot 0
    std::vector<int> events;                // protocol event -> model event of slot 0
    std::vector<int> buckets;               // DDP bucket -> model buffer
    int allreduce_ready = -1;               // model event of bucket 0's "ready on compute"
    int allreduce_done = -1;
    int current_stream = -1;
    int current() const { return current_stream; }
  };

  void plan_buckets() {
    BucketAssignment computed;
    if (!options_.buckets) computed = ReducerModel(reducer_parameters(structure_), reducer_options(plan_)).buckets();
    const BucketAssignment& assignment = options_.buckets ? *options_.buckets : computed;
    launch_at_.assign(layers_ + 2, {});
    buckets_of_layer_.assign(layers_ + 2, {});
    int launched_until = 0;
    for (size_t b = 0; b < assignment.buckets.size(); ++b) {
      int complete = 0;
      int64_t bytes = 0;
      for (int ddp_index : assignment.buckets[b]) {
        const Parameter& parameter = structure_.ddp_parameter(ddp_index);
        const int position = backward_position(parameter, layers_);
        complete = std::max(complete, position);
        bytes += parameter.bytes();
        auto& at = buckets_of_layer_[position];
        if (at.empty() || at.back() != static_cast<int>(b)) at.push_back(static_cast<int>(b));
      }
      // The Reducer launches buckets in index order (reducer.cpp mark_bucket_ready): a bucket that
      // completes early waits for every earlier one.
      launched_until = std::max(launched_until, complete);
      launch_at_[launched_until].push_back(static_cast<int>(b));
      bucket_bytes_.push_back(bytes);
    }
  }

  // A ring all-reduce reads every rank's bucket (each rank's chunk travels round the ring), so each
  // rank's collective also reads the same bucket of the other expanded ranks: the race checker
  // then needs the collective's cross-rank ordering to see that every rank's gradient writes
  // happen before the call reads them (ProcessGroupNCCL: the NCCL stream waits for the current
  // stream on each rank, and the call completes on no rank before all have joined).
  void add_peer_reads() {
    std::map<std::pair<std::string, int>, std::vector<int>> buckets;  // (name, device) -> buffers of every rank
    for (size_t b = 0; b < model_.buffers.size(); ++b) {
      const Buffer& buffer = model_.buffers[b];
      if (buffer.name.rfind("bucket[", 0) == 0) buckets[{buffer.name, buffer.device}].push_back(static_cast<int>(b));
    }
    for (Op& op : model_.ops) {
      if (op.kind != OpKind::Collective || op.accesses.empty()) continue;
      const Buffer& own = model_.buffers[op.accesses.front().buffer];
      for (int peer : buckets[{own.name, own.device}]) {
        if (model_.buffers[peer].rank != op.rank) op.accesses.push_back({peer, 0, -1, false});
      }
    }
  }

  void expand_rank(int rank) {
    rank_ = rank;
    devices_.clear();
    for (int d = 0; d < options_.devices_per_process; ++d) devices_.push_back(make_device(rank, d));
    const int sequence = plan_.sequence_len_for(rank, options_.iteration);
    // Rows per micro-step: micro_batch_size, doubled for preference training (Plan::rl_pairs).
    hidden_bytes_ = layer_cost(plan_.model, sequence, plan_.rows_per_micro_step()).hidden_state_bytes;
    costs_.clear();
    for (int layer = 0; layer < layers_; ++layer) {
      costs_.push_back(layer_cost(plan_.model, sequence, plan_.rows_per_micro_step(), &structure_, layer, plan_.eager_attention()));
      apply_recompute_deferral(plan_, structure_, layer, double(sequence) * plan_.rows_per_micro_step(), costs_.back());
    }
    cost_head(sequence);
    shards_ = plan_.tiled_shards_for(rank, options_.iteration);
    for (Device& device : devices_) size_buffers(device);
    const int micro_steps = std::max(1, plan_.gradient_accumulation_steps);
    for (int micro = 0; micro < micro_steps; ++micro) {
      micro_ = micro;
      const bool synced = micro == micro_steps - 1;  // DDP's no_sync() on all but the last micro-step
      forward();
      backward(synced);
    }
    for (Device& device : devices_) {
      Op& op = add(OpKind::Kernel, device.current(), "optimizer step", "optimizer", -1);
      for (int bucket : device.buckets) op.accesses.push_back({bucket, 0, -1, false});
      op.bytes = head_.optimizer_bytes;
    }
  }

  // Cost inputs outside the decoder layers (the vision tower is not costed).
  struct HeadCost {
    int64_t embedding_forward_bytes = 0, embedding_backward_bytes = 0;
    int64_t norm_forward_bytes = 0, norm_backward_bytes = 0;
    double lm_head_flops = 0, lm_head_backward_flops = 0;
    int64_t loss_forward_bytes = 0, loss_backward_bytes = 0;  // over all chunks
    int loss_chunks = 1;  // chunked_cross_entropy: one op per chunk
    // The vision tower, in forward order: patch embed, blocks, final merger, DeepStack mergers.
    struct VisionOp {
      std::string name;
      double flops = 0;
      int64_t bytes = 0;
    };
    std::vector<VisionOp> vision;
    bool vision_backward = false;  // some vision parameter is trainable
    int64_t optimizer_bytes = 0;
  };

  // The optimizer step touches, per trainable element, each state read and written (torch's AdamW:
  // exp_avg and exp_avg_sq in the parameter's dtype; 8-bit optimizers 1 byte plus block scales),
  // the parameter read and written and its grad read (OptimizerStates::step_traffic). That is the
  // one-pass (fused) traffic; the foreach implementation makes more passes: a lower bound.

  void cost_head(int sequence) {
    const int64_t hidden = hidden_bytes_;
    const double tokens = static_cast<double>(sequence) * plan_.rows_per_micro_step();
    const double vocab = plan_.model.vocab_size;
    const int element = dtype_bytes(plan_.model.torch_dtype);
    const auto trainable = [&](int parameter) { return parameter >= 0 && structure_.parameters[parameter].trainable; };
    HeadCost head;
    // Embedding: a gather of one row per token (read it, write the hidden state). Its backward, only
    // for a trainable table, zero-fills the vocab x hidden grad, then scatter-adds the token grads.
    head.embedding_forward_bytes = 2 * hidden;
    if (trainable(structure_.embed)) {
      head.embedding_backward_bytes = static_cast<int64_t>(vocab * plan_.model.hidden_size * element) + 3 * hidden;
    }
    // Final RMSNorm: reads and writes a hidden state; backward reads grad and input, writes grad.
    head.norm_forward_bytes = 2 * hidden;
    head.norm_backward_bytes = 3 * hidden;
    // lm_head: the input gradient is always needed (the decoder is upstream); the weight gradient
    // only for a trainable (or tied, trainable) head.
    head.lm_head_flops = 2 * tokens * plan_.model.hidden_size * vocab;
    head.lm_head_backward_flops = head.lm_head_flops * (trainable(structure_.lm_head) ? 2 : 1);
    // Cross-entropy of stock transformers (ForCausalLMLoss, unchunked), memory-bound over the
    // logits: forward reads the logits and writes their fp32 upcast (element + 4), log_softmax reads
    // that and writes its fp32 output (4 + 4); backward writes nll's dense fp32 grad (4),
    // log_softmax backward reads it and its saved output and writes (4 + 4 + 4), the upcast's
    // backward reads that and writes the logits' grad (4 + element).
    const double logits = tokens * vocab;
    head.loss_forward_bytes = static_cast<int64_t>(logits * (element + 12));
    head.loss_backward_bytes = static_cast<int64_t>(logits * (element + 20));
    if (plan_.chunked_cross_entropy) {
      // axolotl's chunked_cross_entropy (axolotl/monkeypatch/loss/chunked.py): per chunk, a
      // torch.compile'd (inductor) upcast + cross-entropy. Fused, forward reads the bf16 chunk
      // twice (max, then sum of exp; the fp32 upcast never reaches memory); backward recomputes
      // the softmax from the chunk (read) and writes its bf16 grad, then the backward of
      // `logits.chunk()` copies the chunk grads into the full logits grad (read + write).
      head.loss_chunks = std::max(1, plan_.chunked_cross_entropy_num_chunks);
      head.loss_forward_bytes = static_cast<int64_t>(logits * 2 * element);
      head.loss_backward_bytes = static_cast<int64_t>(logits * 4 * element);
      // hookstream.chunked_loss: recompute_lm_head (runtime/train_model.cc, ChunkLossFunction):
      // no logits are kept, so backward first runs each chunk's lm_head GEMM again.
      if (plan_.loss_recomputes_lm_head()) head.lm_head_backward_flops += head.lm_head_flops;
    }
    cost_vision(head, sequence);
    const OptimizerStates optimizer = optimizer_states(plan_.optimizer);
    for (const Parameter& parameter : structure_.parameters) {
      if (!parameter.trainable) continue;
      // PEFT keeps LoRA adapters in fp32 on a bf16 base (autocast_adapter_dtype; memory model).
      const int element = parameter.adapter ? 4 : static_cast<int>(parameter.bytes() / std::max<int64_t>(1, parameter.numel()));
      head.optimizer_bytes += optimizer.step_traffic(parameter.numel(), element);
    }
    head_ = head;
  }

  // The vision tower of a Qwen-VL model on `plan.vision_tokens` image tokens per sample (HF
  // Qwen3VLVisionModel: Conv3d patch embedding, ViT blocks with full attention within the image,
  // the 2 x 2 patch merger into the text width, and Qwen3-VL's DeepStack mergers). GEMM FLOPs as
  // for the decoder; LayerNorm, GELU and residual adds as bytes (each op is costed at the larger).
  void cost_vision(HeadCost& head, int sequence) {
    if (!plan_.vision_inputs || !plan_.model.vision || structure_.vision_blocks.empty()) return;
    const VisionTowerConfig& v = *plan_.model.vision;
    const double merge = static_cast<double>(v.spatial_merge_size) * v.spatial_merge_size;
    const double per_sample = std::min(plan_.vision_tokens, sequence) * merge;  // patches per sample
    const double patches = per_sample * plan_.micro_batch_size;
    if (patches <= 0) return;
    const double e = dtype_bytes(plan_.model.torch_dtype);
    const double hv = v.hidden_size, iv = v.intermediate_size;
    const double pixels = static_cast<double>(v.in_channels) * v.temporal_patch_size * v.patch_size * v.patch_size;
    const auto bytes = [&](double values) { return static_cast<int64_t>(values * e); };
    head.vision.push_back({"vision patch embed", 2 * patches * pixels * hv, bytes(patches * (pixels + hv))});
    for (size_t b = 0; b < structure_.vision_blocks.size(); ++b) {
      // qkv (3 hv), proj, fc1, fc2 (and Qwen2.5-VL's gate_proj); attention QK^T and PV over the
      // whole image (not causal).
      const double mlp_gemms = structure_.vision_blocks[b].gate.weight >= 0 ? 3 : 2;
      const double gemms = 2 * patches * hv * (3 * hv + hv + mlp_gemms * iv);
      const double attention = 4 * per_sample * per_sample * hv * plan_.micro_batch_size;
      // Two LayerNorms (read + write), GELU (read + write), two residual adds (read 2, write 1).
      head.vision.push_back({"vision block " + std::to_string(b), gemms + attention, bytes(patches * (4 * hv + 2 * iv + 6 * hv))});
    }
    const double merged = patches / merge;  // one text token per merge x merge patches
    const double wide = hv * merge;
    const double merger = 2 * merged * wide * wide + 2 * merged * wide * v.out_hidden_size;
    head.vision.push_back({"vision merger", merger, bytes(patches * hv * 2)});
    for (size_t k = 0; k < structure_.vision_deepstack_mergers.size(); ++k) {
      head.vision.push_back({"vision deepstack merger " + std::to_string(k), merger, bytes(patches * hv * 2)});
    }
    for (const Parameter& parameter : structure_.parameters) head.vision_backward |= parameter.group == "vision" && parameter.trainable;
  }

  Device make_device(int rank, int d) {
    Device device;
    device.device = d;
    // Current stream first, then the others in file order; the legacy default stream is id 0.
    std::vector<int> order{protocol_.current_stream()};
    for (size_t s = 0; s < protocol_.streams.size(); ++s) if (static_cast<int>(s) != order[0]) order.push_back(static_cast<int>(s));
    device.streams.assign(protocol_.streams.size(), -1);
    int64_t next_id = 1;
    for (int s : order) {
      const ProtocolStream& spec = protocol_.streams[s];
      Stream stream{rank, d, spec.legacy_default ? 0 : next_id++, spec.name, spec.legacy_default, spec.non_blocking, 0};
      device.streams[s] = model_.add_stream(stream);
    }
    device.current_stream = device.streams[order[0]];
    // ProcessGroupNCCL runs collectives on its own stream per device.
    device.nccl = model_.add_stream(Stream{rank, d, next_id++, "nccl", false, true, 0});
    device.hidden = static_cast<int>(model_.buffers.size());
    for (int i = 0; i <= layers_; ++i) model_.add_buffer(Buffer{"hidden[" + std::to_string(i) + "]", MemoryKind::Device, rank, d, 0});
    for (const ProtocolBuffer& spec : protocol_.buffers) {
      device.buffers.push_back(static_cast<int>(model_.buffers.size()));
      const int count = spec.count < 0 ? layers_ : spec.count;
      for (int slot = 0; slot < count; ++slot) {
        model_.add_buffer(Buffer{spec.name + "[" + std::to_string(slot) + "]", spec.memory, rank,
                                 spec.memory == MemoryKind::Device ? d : -1, 0});
      }
    }
    for (const ProtocolEvent& spec : protocol_.events) {
      device.events.push_back(static_cast<int>(model_.events.size()));
      const int count = spec.count < 0 ? layers_ : spec.count;
      for (int slot = 0; slot < count; ++slot) model_.add_event(Event{spec.name + "[" + std::to_string(slot) + "]", rank});
    }
    for (size_t b = 0; b < bucket_bytes_.size(); ++b) {
      device.buckets.push_back(model_.add_buffer(Buffer{"bucket[" + std::to_string(b) + "]", MemoryKind::Device, rank, d, bucket_bytes_[b]}));
    }
    device.allreduce_ready = static_cast<int>(model_.events.size());
    for (size_t b = 0; b < bucket_bytes_.size(); ++b) model_.add_event(Event{"allreduce_ready[" + std::to_string(b) + "]", rank});
    device.allreduce_done = model_.add_event(Event{"allreduce_done", rank});
    return device;
  }

  void size_buffers(const Device& device) {
    for (int i = 0; i <= layers_; ++i) model_.buffers[device.hidden + i].bytes = hidden_bytes_;
    for (size_t p = 0; p < protocol_.buffers.size(); ++p) {
      const int count = protocol_.buffers[p].count < 0 ? layers_ : protocol_.buffers[p].count;
      for (int slot = 0; slot < count; ++slot) model_.buffers[device.buffers[p] + slot].bytes = hidden_bytes_;
    }
  }

  // The layers the protocol runs on: under activation_offloading the offloaded ones
  // (Plan::layer_offloaded; hookstream.offload_layers may keep some checkpointed inputs on the GPU),
  // else the checkpointed ones (protocol "none": recompute from the kept input).
  bool protocol_layer(int layer) const {
    if (options_.all_layers) return true;
    return plan_.activation_offloading ? plan_.layer_offloaded(layer) : plan_.layer_checkpointed(layer);
  }
  // Checkpointed but outside offload_layers: plain checkpointing, as protocols/none.yaml expands it
  // (forward; in backward a recompute from the input kept on the GPU, then the layer's backward).
  bool kept_checkpoint(int layer) const { return !protocol_layer(layer) && plan_.layer_checkpointed(layer); }

  void recompute_op(int stream, int layer, const std::vector<BufferAccess>& accesses) {
    std::vector<BufferAccess> reads;
    for (const BufferAccess& access : accesses) if (!access.write) reads.push_back(access);
    elementwise_ops(stream, layer, "recompute", false, reads);
    Op& op = add(OpKind::Kernel, stream, layer_name(layer, "recompute"), "recompute", layer);
    // A recompute is one more forward of the layer, less what it defers to backward.
    op.flops = costs_[layer].recompute_flops();
    op.accesses = accesses;
  }

  Op& add(OpKind kind, int stream, std::string name, const char* phase, int layer) {
    Op op;
    op.kind = kind;
    op.rank = rank_;
    op.stream = stream;
    op.name = std::move(name);
    op.iteration = options_.iteration;
    op.micro_step = micro_;
    op.layer = layer;
    op.phase = phases_(phase);
    model_.ops.push_back(std::move(op));
    return model_.ops.back();
  }

  // --- forward ---------------------------------------------------------------------------------

  void forward() {
    for (Device& device : devices_) {
      Op& embed = add(OpKind::Kernel, device.current(), "embedding forward", "forward", -1);
      embed.bytes = head_.embedding_forward_bytes;
      embed.accesses.push_back({device.hidden, 0, -1, true});
      // Qwen-VL: the vision tower runs after the token embedding, its output scattered into it.
      for (const HeadCost::VisionOp& vision : head_.vision) {
        Op& op = add(OpKind::Kernel, device.current(), vision.name + " forward", "forward", -1);
        op.flops = vision.flops;
        op.bytes = vision.bytes;
      }
    }
    reset_counters();
    for (int layer = 0; layer < layers_; ++layer) {
      for (Device& device : devices_) {
        if (protocol_layer(layer)) {
          run_steps(device, protocol_.forward, layer, "forward");
        } else {
          elementwise_ops(device.current(), layer, "forward", false, {{device.hidden + layer, 0, -1, false}});
          Op& op = add(OpKind::Kernel, device.current(), layer_name(layer, "forward"), "forward", layer);
          // DPO/IPO: the reference forward (torch.no_grad(), same rows) runs the layer once more.
          op.flops = costs_[layer].forward_flops() * (plan_.rl_reference_forward() ? 2 : 1);
          op.accesses = {{device.hidden + layer, 0, -1, false}, {device.hidden + layer + 1, 0, -1, true}};
        }
      }
    }
    for (Device& device : devices_) {
      // Three ops, not one: norm and loss are bandwidth-bound, lm_head matrix-bound, and one op
      // would be costed at the max of the two instead of their sum.
      Op& norm = add(OpKind::Kernel, device.current(), "final norm forward", "forward", -1);
      norm.bytes = head_.norm_forward_bytes;
      norm.accesses.push_back({device.hidden + layers_, 0, -1, false});
      add(OpKind::Kernel, device.current(), "lm_head forward", "forward", -1).flops = head_.lm_head_flops;
      loss_ops(device, "loss forward", "forward", head_.loss_forward_bytes);
    }
  }

  // --- backward --------------------------------------------------------------------------------

  void backward(bool synced) {
    for (Device& device : devices_) {
      loss_ops(device, "loss backward", "backward", head_.loss_backward_bytes);
      Op& lm_head = add(OpKind::Kernel, device.current(), "lm_head backward", "backward", -1);
      lm_head.flops = head_.lm_head_backward_flops;
      add_bucket_writes(device, lm_head, 0);
      Op& norm = add(OpKind::Kernel, device.current(), "final norm backward", "backward", -1);
      norm.bytes = head_.norm_backward_bytes;
      norm.accesses.push_back({device.hidden + layers_, 0, -1, false});
      add_bucket_writes(device, norm, 0);
      if (synced) launch_buckets(device, 0);
    }
    reset_counters();
    for (int layer = layers_ - 1; layer >= 0; --layer) {
      const int position = 1 + (layers_ - 1 - layer);
      for (Device& device : devices_) {
        if (protocol_layer(layer)) {
          run_steps(device, protocol_.backward, layer, "backward");
        } else {
          if (kept_checkpoint(layer)) recompute_op(device.current(), layer, {{device.hidden + layer, 0, -1, false}});
          backward_kernels(device, device.current(), layer, {{device.hidden + layer, 0, -1, false}});
        }
        if (synced) launch_buckets(device, position);
      }
    }
    for (Device& device : devices_) {
      // A frozen tower fed by pixels that need no grad has no backward (autograd skips it). A
      // trainable one: input and weight gradients, 2x its forward, last block first.
      if (head_.vision_backward) {
        for (auto it = head_.vision.rbegin(); it != head_.vision.rend(); ++it) {
          Op& op = add(OpKind::Kernel, device.current(), it->name + " backward", "backward", -1);
          op.flops = 2 * it->flops;
          op.bytes = 2 * it->bytes;
        }
      }
      Op& embed = add(OpKind::Kernel, device.current(), "embedding backward", "backward", -1);
      embed.bytes = head_.embedding_backward_bytes;
      add_bucket_writes(device, embed, layers_ + 1);
      if (!synced) continue;
      launch_buckets(device, layers_ + 1);
      // finalize_backward: work.wait() makes the current stream wait for the NCCL stream
      // (ProcessGroupNCCL WorkNCCL::synchronizeStreams).
      Op& record = add(OpKind::EventRecord, device.nccl, "record allreduce_done on nccl", "reduction", -1);
      record.event = device.allreduce_done;
      Op& wait = add(OpKind::StreamWait, device.current(), "current stream waits allreduce_done", "reduction", -1);
      wait.event = device.allreduce_done;
    }
  }

  // The loss as one op, or one per chunk of chunked_cross_entropy (the last takes the remainder).
  void loss_ops(const Device& device, const std::string& name, const char* phase, int64_t bytes) {
    const int chunks = head_.loss_chunks;
    for (int c = 0; c < chunks; ++c) {
      const std::string op_name = chunks > 1 ? name + " chunk " + std::to_string(c + 1) + " of " + std::to_string(chunks) : name;
      add(OpKind::Kernel, device.current(), op_name, phase, -1).bytes = bytes / chunks + (c == chunks - 1 ? bytes % chunks : 0);
    }
  }

  void add_bucket_writes(const Device& device, Op& op, int position) {
    for (int bucket : buckets_of_layer_[position]) op.accesses.push_back({device.buckets[bucket], 0, -1, true});
  }

  void launch_buckets(const Device& device, int position) {
    for (int bucket : launch_at_[position]) {
      // ProcessGroupNCCL::syncStreams: the NCCL stream waits for an event on the current stream.
      Op& record = add(OpKind::EventRecord, device.current(), "record allreduce_ready[" + std::to_string(bucket) + "]", "reduction", -1);
      record.event = device.allreduce_ready + bucket;
      Op& wait = add(OpKind::StreamWait, device.nccl, "nccl waits allreduce_ready[" + std::to_string(bucket) + "]", "reduction", -1);
      wait.event = device.allreduce_ready + bucket;
      Op& reduce = add(OpKind::Collective, device.nccl, "allreduce bucket " + std::to_string(bucket), "reduction", -1);
      reduce.bytes = bucket_bytes_[bucket];
      reduce.accesses.push_back({device.buckets[bucket], 0, -1, true});
    }
  }

  // The backward of one decoder layer: attention, then the MLP once per tiled-MLP chunk. A tiled
  // MLP saved only its input, so each chunk first recomputes its MLP forward (with grad), on top
  // of any checkpoint recompute of the whole layer.
  void backward_kernels(const Device& device, int stream, int layer, const std::vector<BufferAccess>& accesses) {
    const int position = 1 + (layers_ - 1 - layer);
    const LayerCost& cost = costs_[layer];
    elementwise_ops(stream, layer, "backward", true, accesses);
    Op& attention = add(OpKind::Kernel, stream, layer_name(layer, "attention backward"), "backward", layer);
    attention.flops = cost.attention_backward_flops;
    attention.accesses = accesses;
    add_bucket_writes(device, attention, position);
    for (int chunk = 0; chunk < shards_; ++chunk) {
      const std::string name = shards_ > 1 ? "mlp backward chunk " + std::to_string(chunk + 1) + " of " + std::to_string(shards_) : "mlp backward";
      Op& mlp = add(OpKind::Kernel, stream, layer_name(layer, name), "backward", layer);
      mlp.flops = (cost.mlp_backward_flops + (plan_.tiled_mlp ? cost.mlp_forward_flops() : 0)) / shards_;
      mlp.accesses = accesses;
      add_bucket_writes(device, mlp, position);
    }
  }

  // A layer's elementwise kernels (memory-bound, LayerCost's bytes), one op each, issued before
  // the layer's GEMM op on the same stream with its reads: the GEMM op stays the last access of
  // the layer's buffers, so race partners and fixes name it.
  void elementwise_ops(int stream, int layer, const char* phase, bool backward, const std::vector<BufferAccess>& reads) {
    const LayerCost& cost = costs_[layer];
    const std::string suffix = backward ? " backward" : std::string(" ") + (std::string(phase) == "recompute" ? "recompute" : "forward");
    const std::pair<const char*, int64_t> kernels[] = {
        {"rmsnorm", backward ? cost.rmsnorm_backward_bytes : cost.rmsnorm_bytes},
        {"rope", backward ? cost.rope_backward_bytes : cost.rope_bytes},
        {"silu*up", backward ? cost.silu_mul_backward_bytes : cost.silu_mul_bytes},
        {"residual add", backward ? cost.residual_backward_bytes
                         : cost.residual_bytes - (std::string(phase) == "recompute" ? cost.deferred_residual_bytes : 0)},
        {"eager attention scores", backward ? cost.eager_scores_backward_bytes : cost.eager_scores_bytes},
        {"conv1d+gated norm", backward ? cost.mixer_elementwise_backward_bytes : cost.mixer_elementwise_bytes}};
    const bool recurrent = cost.mixer_elementwise_bytes > 0;
    for (const auto& [what, bytes] : kernels) {
      if (bytes <= 0 && std::string(what) == "eager attention scores") continue;  // sdpa/flash/flex: none
      if (!recurrent && std::string(what) == "conv1d+gated norm") continue;       // attention layers
      // No RoPE in a recurrent mixer (FalconH1's parallel attention has it); no MLP in a NemotronH
      // mixer block.
      if (bytes <= 0 && (std::string(what) == "rope" || std::string(what) == "silu*up")) continue;
      Op& op = add(OpKind::Kernel, stream, layer_name(layer, std::string(what) + suffix), phase, layer);
      op.bytes = bytes;
      op.accesses = reads;
    }
  }

  // --- protocol steps ----------------------------------------------------------------------------

  void reset_counters() {
    process_counter_ = 0;
    device_counters_.assign(devices_.size(), 0);
  }

  int slot(const SlotSelection& select, int layer, int device) const {
    return select.slot(layer, select.counter_per_process ? process_counter_ : device_counters_[device]);
  }

  int buffer(const Device& device, const BufferRef& ref, int layer) const {
    if (ref.name == kHiddenBuffer) return device.hidden + layer + (ref.next ? 1 : 0);
    const int p = protocol_.find_buffer(ref.name);
    const ProtocolBuffer& spec = protocol_.buffers[p];
    const int count = spec.count < 0 ? layers_ : spec.count;
    return device.buffers[p] + slot(spec.select, layer, device.device) % count;
  }

  int event(const Device& device, const std::string& name, int layer) const {
    const int p = protocol_.find_event(name);
    const ProtocolEvent& spec = protocol_.events[p];
    const int count = spec.count < 0 ? layers_ : spec.count;
    return device.events[p] + slot(spec.select, layer, device.device) % count;
  }

  int stream(const Device& device, const std::string& name) const {
    return device.streams[protocol_.find_stream(name)];
  }

  const std::string& buffer_name(int buffer) const { return model_.buffers[buffer].name; }

  void run_steps(Device& device, const std::vector<ProtocolStep>& steps, int layer, const char* phase) {
    for (const ProtocolStep& step : steps) {
      const int on = stream(device, step.stream.empty() ? protocol_.streams[protocol_.current_stream()].name : step.stream);
      switch (step.kind) {
        case StepKind::WaitStream: {
          // Stream.wait_stream(other): record an event on `other`, wait on it (torch/cuda/streams.py).
          const int other = stream(device, step.other_stream);
          Op& op = add(OpKind::StreamWait, on, "wait_stream " + step.stream + " <- " + step.other_stream, phase, layer);
          op.sync_stream = other;
          break;
        }
        case StepKind::Record: {
          const int e = event(device, step.event, layer);
          Op& op = add(OpKind::EventRecord, on, "record " + model_.events[e].name + " on " + step.stream, phase, layer);
          op.event = e;
          break;
        }
        case StepKind::WaitEvent: {
          const int e = event(device, step.event, layer);
          Op& op = add(OpKind::StreamWait, on, step.stream + " waits " + model_.events[e].name, phase, layer);
          op.event = e;
          break;
        }
        case StepKind::Copy: {
          const int from = buffer(device, step.from, layer), to = buffer(device, step.to, layer);
          const bool d2h = step.copy == CopyKind::DeviceToHost;
          Op& op = add(OpKind::Copy, on, std::string(d2h ? "D2H " : "H2D ") + buffer_name(from) + " -> " + buffer_name(to), phase, layer);
          op.copy = step.copy;
          op.source = model_.buffers[from].memory;
          op.destination = model_.buffers[to].memory;
          op.bytes = hidden_bytes_;
          // cudaMemcpyAsync with pageable host memory returns only when the copy is done (CUDA
          // runtime API, "API synchronization behavior"); so does copy_(non_blocking=False).
          op.blocks_host = step.blocking || op.source == MemoryKind::PageableHost || op.destination == MemoryKind::PageableHost;
          op.accesses = {{from, 0, -1, false}, {to, 0, -1, true}};
          break;
        }
        case StepKind::Compute: {
          std::vector<BufferAccess> accesses;
          for (const BufferRef& ref : step.reads) accesses.push_back({buffer(device, ref, layer), 0, -1, false});
          for (const BufferRef& ref : step.writes) accesses.push_back({buffer(device, ref, layer), 0, -1, true});
          if (step.what == "backward") {
            backward_kernels(device, on, layer, accesses);
          } else {
            if (step.what == "recompute") {
              recompute_op(on, layer, accesses);
              break;
            }
            std::vector<BufferAccess> reads;
            for (const BufferAccess& access : accesses) if (!access.write) reads.push_back(access);
            elementwise_ops(on, layer, phase, false, reads);
            Op& op = add(OpKind::Kernel, on, layer_name(layer, "forward"), phase, layer);
            op.flops = costs_[layer].forward_flops();
            op.accesses = std::move(accesses);
          }
          break;
        }
        case StepKind::Free: {
          const int b = buffer(device, step.buffer, layer);
          Op& op = add(OpKind::Free, on, "free " + buffer_name(b), phase, layer);
          op.accesses = {{b, 0, -1, true}};
          break;
        }
        case StepKind::RecordStream: {
          const int b = buffer(device, step.buffer, layer);
          Op& op = add(OpKind::RecordStream, on, buffer_name(b) + ".record_stream(" + step.stream + ")", phase, layer);
          op.accesses = {{b, 0, -1, false}};
          break;
        }
        case StepKind::HostSync: {
          if (!step.event.empty()) {
            const int e = event(device, step.event, layer);
            Op& op = add(OpKind::EventSync, -1, "host synchronizes " + model_.events[e].name, phase, layer);
            op.event = e;
          } else {
            Op& op = add(OpKind::StreamSync, -1, "host synchronizes " + step.other_stream, phase, layer);
            op.sync_stream = stream(device, step.other_stream);
          }
          model_.ops.back().blocks_host = true;
          break;
        }
      }
    }
    ++device_counters_[device.device];
    ++process_counter_;
  }

  static std::string layer_name(int layer, const std::string& what) { return "layer " + std::to_string(layer) + " " + what; }

  const Plan& plan_;
  const ModelStructure& structure_;
  const StreamProtocol& protocol_;
  ExpansionOptions options_;
  int layers_;
  EventModel model_;
  TextInterner phases_;  // every op of a phase shares its name
  std::vector<std::vector<int>> launch_at_;        // backward position -> buckets launched there
  std::vector<std::vector<int>> buckets_of_layer_;  // backward position -> buckets it writes
  std::vector<int64_t> bucket_bytes_;
  std::vector<Device> devices_;
  std::vector<int> device_counters_;
  int process_counter_ = 0;
  int rank_ = 0;
  int micro_ = 0;
  int shards_ = 1;
  std::vector<LayerCost> costs_;  // per decoder layer (trainable flags may differ by layer)
  HeadCost head_;
  int64_t hidden_bytes_ = 0;  // one hidden state: what offload copies move
};

}  // namespace

EventModel expand_step(const Plan& plan, const ModelStructure& structure, const StreamProtocol& protocol,
                       const ExpansionOptions& options) {
  return StepExpander(plan, structure, protocol, options).run();
}

}  // namespace hookstream
