// MoE experts as one module per expert: how transformers 4.x (and custom modelling code loaded with
// trust_remote_code) builds the sparse MoE blocks that transformers 5 stores as fused [E, ...]
// tensors (architecture.cc). With per-expert modules an expert that gets no token on a rank in a
// step runs no forward, so its parameters get no gradient: an unused parameter for DDP, a missing
// reduce-scatter for FSDP/ZeRO (sim/verify/moe_routing_check.h). The fused tensors are used every step.
//
// Which layout a model gets: transformers 5 (hookstream's default, 5.17) -> fused; a plan that says
// `hookstream.transformers_version: 4.x` (or --transformers-version) -> per-expert where v4.57
// builds per-expert modules; `trust_remote_code: true` with an auto_map AutoModelForCausalLM in
// config.json -> the repository's own code, per-expert for the codes described here. docs/architectures.md.
#pragma once

#include <string>
#include <vector>

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/model_config.h"

namespace hookstream {

enum class ExpertLayout { None, Fused, PerExpert };

// One nn.Linear of an expert MLP (no bias in any of the described blocks).
struct ExpertLinearSpec {
  std::string leaf;   // w1 / gate_proj ...
  ModuleRole role;    // Gate, Up or Down: what the expert MLP does with it
  std::string in;     // in_features expression
  std::string out;    // out_features expression
};

struct PerExpertSpec {
  // The sparse MoE block's attribute in the decoder layer: "mlp", or Mixtral v4's "block_sparse_moe".
  std::string block = "mlp";
  // The router's attribute in the block: `gate` for most, JambaSparseMoeBlock's `router`.
  std::string router = "gate";
  // The router: nn.Linear(hidden, E, bias=False) named `gate` (Mixtral, Qwen2/3-MoE v4), or a module
  // `gate` holding a bare weight [E, hidden] (DeepseekV3TopkRouter, remote MoEGate).
  bool router_linear = true;
  bool router_first = true;  // `gate` registered before `experts`
  // The block is registered right after this module of the layer (v4.57.1 MiniMaxDecoderLayer:
  // self_attn, block_sparse_moe, then the norms), not where v5 registers its fused tensors (after
  // the norms); empty: where v5 does.
  std::string after;
  // Remote DeepSeek MoEGate: an nn.Parameter e_score_correction_bias [E] when topk_method is
  // "noaux_tc"; it only biases the top-k choice, so it never gets a gradient.
  bool router_correction_bias = false;
  std::vector<ExpertLinearSpec> expert;  // one expert's Linears, registration order
  std::string source;                    // the modelling code it mirrors
};

struct ExpertLayoutChoice {
  ExpertLayout layout = ExpertLayout::None;
  const PerExpertSpec* spec = nullptr;  // PerExpert only
  std::string decided_by;               // for reports: which version or key decided it
  // Non-empty when the pinned transformers cannot build this model_type (not in v4.57.1) or builds
  // experts hookstream does not describe: why, for a one-line refusal (exit 2) naming the key.
  std::string refused;
};

// The layout `spec` (an MoE architecture) gets from `transformers_version` ("4.57", "5.17") and
// trust_remote_code with config.json's auto_map. None for a dense architecture. Any 4.x is read as
// v4.57.1, the last 4.x release: an MoE type it has no modelling file for, or whose per-expert
// block is not described here, comes back with `refused` set, never as fused.
ExpertLayoutChoice choose_expert_layout(const ArchitectureSpec& spec, const ModelConfig& model,
                                        const std::string& transformers_version, bool trust_remote_code);

const char* to_string(ExpertLayout layout);  // "none", "fused", "per_expert"

}  // namespace hookstream
