#include "sim/cost/profiled_costs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <tuple>

#include "sim/cost/optimizer_states.h"
#include "sim/streams/stream_expansion.h"

namespace hookstream {

namespace {

bool starts_with(const std::string& text, const std::string& prefix) { return text.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

CostParts part(CostPart which, double ns) {
  CostParts parts;
  parts[which] = ns;
  return parts;
}
CostParts operator+(CostParts a, const CostParts& b) { return a += b; }
CostParts operator*(double k, CostParts a) {
  for (double& ns : a.ns) ns *= k;
  return a;
}
const CostParts kNone{};

// The costs of one step's kernels for one plan: what every name maps to, by part (GEMMs, attention,
// the rest), so that a calibration can scale each part by what it measured (sim/cost/calibration.h).
class KernelCosts {
 public:
  KernelCosts(const Plan& plan, const ModelStructure& structure, const DeviceSpec& spec, const DeviceProfile& profile)
      : plan_(plan), structure_(structure), spec_(spec), profile_(profile) {
    const ModelConfig& model = plan.model;
    batch_ = std::max(1, plan.micro_batch_size);
    seq_ = plan.sequence_len_for(0, 0);
    tokens_ = static_cast<double>(seq_) * batch_;
    h_ = model.hidden_size;
    head_dim_ = model.head_dim > 0 ? model.head_dim : (model.num_attention_heads > 0 ? h_ / model.num_attention_heads : 0);
    q_width_ = model.num_attention_heads * head_dim_;
    kv_width_ = model.num_key_value_heads * head_dim_;
    shards_ = std::max(1, plan.tiled_shards_for(0, 0));
    chunks_ = plan.chunked_cross_entropy ? std::max(1, plan.chunked_cross_entropy_num_chunks) : 1;
  }

  std::optional<CostParts> of(const std::string& name) const {
    if (starts_with(name, "layer ")) return layer_op(name);
    const double logits_per_chunk = std::ceil(tokens_ / chunks_) * plan_.model.vocab_size;
    const double chunk_tokens = std::ceil(tokens_ / chunks_);
    const double vocab = plan_.model.vocab_size;
    const bool head_trainable = trainable(structure_.lm_head);
    if (name == "embedding forward") return elementwise("embedding", tokens_ * h_, false);
    if (name == "embedding backward") return trainable(structure_.embed) ? elementwise("embedding", tokens_ * h_, true) : kNone;
    if (name == "final norm forward") return rms_norm(tokens_ * h_, false);
    if (name == "final norm backward") return rms_norm(tokens_ * h_, true);
    // lm_head: one GEMM per loss chunk (a chunk's logits at a time).
    if (name == "lm_head forward") return chunks_ * gemm(chunk_tokens, vocab, h_, GemmForm::Forward);
    if (name == "lm_head backward") {
      return chunks_ * (gemm(chunk_tokens, vocab, h_, GemmForm::InputGrad) +
                        (head_trainable ? gemm(chunk_tokens, vocab, h_, GemmForm::WeightGrad) : kNone));
    }
    // The float32 upcast + cross-entropy of one chunk's logits. A chunked loss recomputes the
    // chunk's softmax in backward (axolotl's compiled chunk function saves only its bf16 input;
    // `hookstream run`'s ChunkLossFunction saves nothing), and with hookstream.chunked_loss:
    // recompute_lm_head also the chunk's lm_head GEMM, since the full logits are never kept.
    if (starts_with(name, "loss forward")) return elementwise("cross_entropy", logits_per_chunk, false);
    if (starts_with(name, "loss backward")) {
      const CostParts recompute =
          plan_.chunked_cross_entropy
              ? (plan_.loss_recomputes_lm_head() ? gemm(chunk_tokens, vocab, h_, GemmForm::Forward) : kNone) +
                    elementwise("cross_entropy", logits_per_chunk, false)
              : kNone;
      return recompute + elementwise("cross_entropy", logits_per_chunk, true);
    }
    if (name == "optimizer step") {
      // Fused AdamW per trainable parameter; other optimizers (8-bit, Adafactor...) keep the roofline.
      const std::string optimizer = optimizer_states(plan_.optimizer).name;
      if (optimizer.find("adamw") == std::string::npos || optimizer.find("8bit") != std::string::npos) return std::nullopt;
      double parameters = 0;
      for (const Parameter& parameter : structure_.parameters) parameters += parameter.trainable ? static_cast<double>(parameter.numel()) : 0;
      return part(CostPart::Elementwise, parameters * profile_.adamw_ns_per_parameter);
    }
    return std::nullopt;
  }

 private:
  bool trainable(int parameter) const { return parameter >= 0 && structure_.parameters[parameter].trainable; }

  // Memoized: a step asks for the same few dozen shapes once per layer op (each lookup scans the
  // profile's readings); the cache lives as long as this one step's costing.
  CostParts gemm(double m, double n, double k, GemmForm form) const {
    const auto key = std::make_tuple(m, n, k, static_cast<int>(form));
    auto it = gemm_cache_.find(key);
    if (it == gemm_cache_.end()) it = gemm_cache_.emplace(key, profile_.gemm_ns(m, n, k, form, spec_)).first;
    return part(CostPart::Gemm, it->second);
  }

  CostParts elementwise(const std::string& kind, double elements, bool backward) const {
    return part(CostPart::Elementwise, profile_.elementwise_ns(kind, elements, backward));
  }

  // An RMSNorm over `elements`. Liger's (Plan::liger_rms_norm_applied) is one fused kernel each way
  // (liger_kernel/ops/rms_norm.py; `hookstream run`: PyTorch's fused CUDA RMSNorm): its bf16 bytes
  // (forward: read x, write y; backward: read dy and x, write dx) at the measured copy bandwidth.
  // Eager's is transformers' LlamaRMSNorm, about seven kernels each way, as profiled.
  CostParts rms_norm(double elements, bool backward) const {
    if (!plan_.liger_rms_norm_applied()) return elementwise("rmsnorm", elements, backward);
    return part(CostPart::Elementwise, 2 * (backward ? 3 : 2) * elements / (profile_.d2d_gbps_read_plus_write * 1e9) * 1e9);
  }

  // A bf16 tensor copied (read + write): attention's output transposed back to [tokens, heads x dim].
  CostParts copy(double elements) const {
    return part(CostPart::Elementwise, 2 * 2 * elements / (profile_.d2d_gbps_read_plus_write * 1e9) * 1e9);
  }

  // Forward of projection p over m tokens: the base GEMM, LoRA's A and B and its scale-and-add.
  CostParts projection_forward(const ProjectionShape& p, double m) const {
    if (p.in <= 0 || p.out <= 0) return kNone;  // absent in this layer (a recurrent mixer's q, k, v)
    CostParts ns = gemm(m, p.out, p.in, GemmForm::Forward);
    if (p.lora_rank > 0) {
      ns += gemm(m, p.lora_rank, p.in, GemmForm::Forward) + gemm(m, p.out, p.lora_rank, GemmForm::Forward) +
            elementwise("lora_scale_add", m * p.out, false);
    }
    return ns;
  }

  // Backward: the input gradient, the weight gradient of a trainable weight, LoRA's input and
  // weight gradients of A and B, the scale's backward, and the add where the base and adapter
  // input gradients meet.
  CostParts projection_backward(const ProjectionShape& p, double m) const {
    if (p.in <= 0 || p.out <= 0) return kNone;
    CostParts ns = gemm(m, p.out, p.in, GemmForm::InputGrad) + (p.trainable ? gemm(m, p.out, p.in, GemmForm::WeightGrad) : kNone);
    if (p.lora_rank > 0) {
      ns += gemm(m, p.out, p.lora_rank, GemmForm::InputGrad) + gemm(m, p.out, p.lora_rank, GemmForm::WeightGrad) +
            gemm(m, p.lora_rank, p.in, GemmForm::InputGrad) + gemm(m, p.lora_rank, p.in, GemmForm::WeightGrad) +
            elementwise("lora_scale_add", m * p.out, true) + elementwise("residual", m * p.in, true);
    }
    return ns;
  }

  CostParts attention_core(bool backward, int layer) const {
    const DecoderLayerUse& use = structure_.layers.at(static_cast<size_t>(layer));
    // No profile has recurrent-mixer kernels: the roofline of its FLOPs at the device's matrix
    // throughput (backward 2x forward), the same estimate the roofline time model makes. Its own
    // (Triton) kernels are neither cuBLAS GEMMs nor SDPA: the elementwise part for a calibration.
    const double flops = recurrent_mixer_flops(use.mixer, use.mixer_shape, tokens_) * (backward ? 2 : 1);
    const CostParts mixer = flops > 0 ? part(CostPart::Elementwise, flops / (spec_.matrix_tflops * 1e12 * spec_.matrix_efficiency) * 1e9)
                                      : kNone;
    if (use.mixer != TokenMixer::Attention && !use.parallel_attention) return mixer;
    // Attention (FalconH1: with its Mamba2 mixer beside it).
    return part(CostPart::Attention, profile_.sdpa_ns(seq_, batch_, plan_.model.num_attention_heads,
                                                      plan_.model.num_key_value_heads, head_dim_, backward)) +
           copy(tokens_ * q_width_) + mixer;
  }

  // The MLP forward of `m` tokens: gate, up, down and SiLU(gate) * up between them.
  CostParts mlp_forward(const std::vector<ProjectionShape>& projections, double m) const {
    CostParts ns;
    for (const ProjectionShape& p : projections) ns += p.mlp ? projection_forward(p, m) : kNone;
    return ns;
  }

  std::optional<CostParts> layer_op(const std::string& name) const {
    // "layer N what"
    const size_t space = name.find(' ', 6);
    if (space == std::string::npos) return std::nullopt;
    const int layer = std::atoi(name.c_str() + 6);
    const std::string what = name.substr(space + 1);
    const std::vector<ProjectionShape> projections = layer_projections(plan_.model, &structure_, layer);
    const double inter = projections[5].out;  // up (an ungated MLP has no gate)
    const double qk = q_width_ + kv_width_;
    if (what == "recompute" && recompute_defers_down(plan_, structure_, layer)) {
      // `hookstream run`'s recompute stops before the down projection (runtime/deferred_linear.h):
      // of it only LoRA's A GEMM runs (in its backward, for B's weight gradient).
      CostParts ns = attention_core(false, layer);
      for (size_t i = 0; i < projections.size(); ++i) {
        const ProjectionShape& p = projections[i];
        ns += i != 6 ? projection_forward(p, tokens_)
                     : (p.lora_rank > 0 ? gemm(tokens_, p.lora_rank, p.in, GemmForm::Forward) : kNone);
      }
      return ns;
    }
    if (what == "forward" || what == "recompute") {
      CostParts ns = attention_core(false, layer);
      for (const ProjectionShape& p : projections) ns += p.mlp ? kNone : projection_forward(p, tokens_);
      // A tiled MLP runs its forward shard by shard (the GEMMs at tokens / shards rows).
      return ns + shards_ * mlp_forward(projections, tokens_ / shards_) +
             (shards_ > 1 ? elementwise("silu_mul", tokens_ * inter, false) : kNone);
    }
    if (what == "attention backward") {
      CostParts ns = attention_core(true, layer);
      for (const ProjectionShape& p : projections) ns += p.mlp ? kNone : projection_backward(p, tokens_);
      // q, k and v read the same normed input: their input gradients are summed (two adds).
      return ns + elementwise("residual", 2 * tokens_ * h_, true);
    }
    if (starts_with(what, "mlp backward")) {
      const double m = tokens_ / shards_;
      CostParts ns = elementwise("residual", m * h_, true);  // gate's and up's input gradients summed
      for (const ProjectionShape& p : projections) ns += p.mlp ? projection_backward(p, m) : kNone;
      // A tiled MLP saved only its input: each shard first recomputes its forward (with grad).
      if (plan_.tiled_mlp) ns += mlp_forward(projections, m) + elementwise("silu_mul", m * inter, false);
      return ns;
    }
    const bool backward = ends_with(what, " backward");
    if (!backward && !ends_with(what, " forward") && !ends_with(what, " recompute")) return std::nullopt;
    const std::string kernel = what.substr(0, what.rfind(' '));
    if (kernel == "rmsnorm") {
      const DecoderLayerUse& use = structure_.layers.at(static_cast<size_t>(layer));
      const bool recurrent = use.mixer != TokenMixer::Attention && !use.parallel_attention;
      return rms_norm(tokens_ * (2 * h_ + (plan_.model.qk_norm && !recurrent ? qk : 0)), backward);
    }
    if (kernel == "conv1d+gated norm") return std::nullopt;  // not profiled: the roofline of its bytes
    if (kernel == "rope") return elementwise("rope", tokens_ * qk, backward);
    // A tiled MLP's SiLU * up runs inside its shards (costed with the MLP ops above).
    if (kernel == "silu*up") return shards_ > 1 ? kNone : elementwise("silu_mul", tokens_ * inter, backward);
    if (kernel == "residual add") {
      // A deferring recompute runs only the attention's add (recompute_defers_down).
      const bool deferred = ends_with(what, " recompute") && recompute_defers_down(plan_, structure_, layer);
      return elementwise("residual", (deferred ? 1 : 2) * tokens_ * h_, backward);
    }
    return std::nullopt;
  }

  const Plan& plan_;
  const ModelStructure& structure_;
  const DeviceSpec& spec_;
  const DeviceProfile& profile_;
  int batch_ = 1, seq_ = 0, shards_ = 1, chunks_ = 1;
  double tokens_ = 0, h_ = 0, head_dim_ = 0, q_width_ = 0, kv_width_ = 0;
  mutable std::map<std::tuple<double, double, double, int>, double> gemm_cache_;
};

}  // namespace

std::vector<CostParts> profiled_cost_parts(const EventModel& step, const Plan& plan, const ModelStructure& structure,
                                           const DeviceSpec& spec, const DeviceProfile& profile) {
  const KernelCosts costs(plan, structure, spec, profile);
  std::vector<CostParts> parts(step.ops.size());
  for (size_t i = 0; i < step.ops.size(); ++i) {
    if (step.ops[i].kind != OpKind::Kernel) continue;
    if (const std::optional<CostParts> op_parts = costs.of(step.ops[i].name.str())) parts[i] = *op_parts;
  }
  return parts;
}

ProfiledCosts apply_device_profile(EventModel& step, const Plan& plan, const ModelStructure& structure, const DeviceSpec& spec,
                                   const DeviceProfile& profile) {
  const KernelCosts costs(plan, structure, spec, profile);
  ProfiledCosts result;
  result.parts.resize(step.ops.size());
  for (size_t i = 0; i < step.ops.size(); ++i) {
    Op& op = step.ops[i];
    if (op.kind != OpKind::Kernel || op.duration_ns >= 0) continue;
    const std::optional<CostParts> parts = costs.of(op.name.str());
    if (!parts) {
      ++result.roofline;
      continue;
    }
    op.duration_ns = parts->total();
    result.parts[i] = *parts;
    ++result.costed;
  }
  return result;
}

}  // namespace hookstream
