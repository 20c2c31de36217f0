#include "sim/inputs/architectures/per_expert_layout.h"

#include <map>

namespace hookstream {

namespace {

// An expert MLP as LlamaMLP-style gate/up/down over `width`.
std::vector<ExpertLinearSpec> swiglu_expert(const std::string& width) {
  return {{"gate_proj", ModuleRole::Gate, "hidden_size", width},
          {"up_proj", ModuleRole::Up, "hidden_size", width},
          {"down_proj", ModuleRole::Down, width, "hidden_size"}};
}

// transformers v4.57's per-expert blocks, by model_type. gpt_oss is absent: GptOssExperts is fused in
// every transformers that has it (4.55+).
const std::map<std::string, PerExpertSpec>& v4_specs() {
  static const std::map<std::string, PerExpertSpec> specs = [] {
    std::map<std::string, PerExpertSpec> m;
    // MixtralDecoderLayer.block_sparse_moe = MixtralSparseMoeBlock: gate = nn.Linear(H, E), then
    // experts = nn.ModuleList(MixtralBlockSparseTop2MLP: w1 [I, H], w2 [H, I], w3 [I, H]); forward
    // act(w1(x)) * w3(x) -> w2, looping only over `expert_hit` (experts with a token).
    PerExpertSpec mixtral;
    mixtral.block = "block_sparse_moe";
    mixtral.expert = {{"w1", ModuleRole::Gate, "hidden_size", "intermediate_size"},
                      {"w2", ModuleRole::Down, "intermediate_size", "hidden_size"},
                      {"w3", ModuleRole::Up, "hidden_size", "intermediate_size"}};
    mixtral.source = "transformers v4.57 models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock.__init__";
    m["mixtral"] = mixtral;
    // Qwen2MoeSparseMoeBlock: gate, experts (Qwen2MoeMLP of moe_intermediate_size), shared_expert,
    // shared_expert_gate; skips an expert whose token list is empty (`if top_x.shape[0] == 0`).
    PerExpertSpec qwen2;
    qwen2.expert = swiglu_expert("moe_intermediate_size");
    qwen2.source = "transformers v4.57 models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock.__init__";
    m["qwen2_moe"] = qwen2;
    // Qwen3MoeSparseMoeBlock: gate, then experts (Qwen3MoeMLP of moe_intermediate_size).
    PerExpertSpec qwen3 = qwen2;
    qwen3.source = "transformers v4.57 models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock.__init__";
    m["qwen3_moe"] = qwen3;
    // DeepseekV3MoE: experts (DeepseekV3MLP of moe_intermediate_size), gate = DeepseekV3TopkRouter
    // (weight [E, H]; e_score_correction_bias is a buffer), shared_experts.
    PerExpertSpec deepseek;
    deepseek.router_linear = false;
    deepseek.router_first = false;
    deepseek.expert = swiglu_expert("moe_intermediate_size");
    deepseek.source = "transformers v4.57 models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3MoE.__init__";
    m["deepseek_v3"] = deepseek;
    return m;
  }();
  return specs;
}

// Custom modelling code (trust_remote_code) whose MoE block is described: DeepSeek-V3's
// modeling_deepseek.py (DeepseekV3MoE: experts = nn.ModuleList(DeepseekV3MLP) at ep_size 1,
// gate = MoEGate with weight [E, H] and, for topk_method "noaux_tc", the nn.Parameter
// e_score_correction_bias [E], then shared_experts).
const PerExpertSpec* remote_spec(const std::string& model_type, const ModelConfig& model) {
  static const PerExpertSpec deepseek = [] {
    PerExpertSpec s = v4_specs().at("deepseek_v3");
    s.source = "DeepSeek-V3 modeling_deepseek.py (remote code) DeepseekV3MoE.__init__ / MoEGate.__init__";
    return s;
  }();
  static const PerExpertSpec deepseek_noaux = [] {
    PerExpertSpec s = deepseek;
    s.router_correction_bias = true;
    return s;
  }();
  if (model_type == "deepseek_v3") return model.topk_method == "noaux_tc" ? &deepseek_noaux : &deepseek;
  // The other remote MoE codes of the described types (Mixtral/Qwen-MoE forks) keep v4's modules.
  auto it = v4_specs().find(model_type);
  return it == v4_specs().end() ? nullptr : &it->second;
}

}  // namespace

ExpertLayoutChoice choose_expert_layout(const ArchitectureSpec& spec, const ModelConfig& model,
                                        const std::string& transformers_version, bool trust_remote_code) {
  ExpertLayoutChoice choice;
  if (spec.moe == MoeLayers::None) return choice;
  choice.layout = ExpertLayout::Fused;
  if (trust_remote_code && !model.remote_code_class.empty()) {
    // transformers runs the repository's code whenever auto_map has the class and trust_remote_code
    // is on (models/auto/auto_factory.py from_config/from_pretrained), whatever its own version.
    if (const PerExpertSpec* remote = remote_spec(spec.model_type, model)) {
      choice.layout = ExpertLayout::PerExpert;
      choice.spec = remote;
      choice.decided_by = "trust_remote_code: true with auto_map AutoModelForCausalLM " + model.remote_code_class +
                          " (" + remote->source + ")";
      return choice;
    }
    choice.decided_by = "trust_remote_code: true with auto_map " + model.remote_code_class +
                        ": custom code hookstream does not describe; modelled as transformers " + transformers_version;
  }
  const bool v4 = transformers_version.rfind("4.", 0) == 0;
  auto it = v4_specs().find(spec.model_type);
  if (v4 && it != v4_specs().end()) {
    choice.layout = ExpertLayout::PerExpert;
    choice.spec = &it->second;
    choice.decided_by = "transformers " + transformers_version + " (" + it->second.source + ")";
    return choice;
  }
  if (choice.decided_by.empty()) {
    choice.decided_by = "transformers " + transformers_version + (v4 ? " (this model's experts are fused in 4.x too)" : " (fused [E, ...] expert tensors)");
  }
  return choice;
}

const char* to_string(ExpertLayout layout) {
  switch (layout) {
    case ExpertLayout::None: return "none";
    case ExpertLayout::Fused: return "fused";
    case ExpertLayout::PerExpert: return "per_expert";
  }
  return "none";
}

}  // namespace hookstream
