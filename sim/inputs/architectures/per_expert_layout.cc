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

// transformers v4.57.1's per-expert blocks, by model_type (read from the v4.57.1 wheel's modeling
// files and checked against it by the structure oracle run under 4.57.1: docs/structure-oracle.md).
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
    // MiniMaxDecoderLayer.block_sparse_moe = MiniMaxSparseMoeBlock, Mixtral's block copied (gate,
    // then MiniMaxBlockSparseTop2MLP w1/w2/w3 of intermediate_size; the same expert_hit loop).
    PerExpertSpec minimax = mixtral;
    minimax.after = "self_attn";
    minimax.source = "transformers v4.57 models/minimax/modeling_minimax.py MiniMaxSparseMoeBlock.__init__";
    m["minimax"] = minimax;
    // PhimoeDecoderLayer.block_sparse_moe = PhimoeSparseMoeBlock: gate, then PhimoeBlockSparseTop2MLP
    // (w1/w2/w3 of intermediate_size), looping over experts whose top_x is non-empty.
    PerExpertSpec phimoe = mixtral;
    phimoe.source = "transformers v4.57 models/phimoe/modeling_phimoe.py PhimoeSparseMoeBlock.__init__";
    m["phimoe"] = phimoe;
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
    // Qwen3NextSparseMoeBlock: gate, experts (Qwen3NextMLP of moe_intermediate_size), shared_expert,
    // shared_expert_gate, as Qwen2-MoE's.
    PerExpertSpec qwen3_next = qwen2;
    qwen3_next.source = "transformers v4.57 models/qwen3_next/modeling_qwen3_next.py Qwen3NextSparseMoeBlock.__init__";
    m["qwen3_next"] = qwen3_next;
    // OlmoeSparseMoeBlock: gate, then experts (OlmoeMLP gate/up/down of intermediate_size).
    PerExpertSpec olmoe;
    olmoe.expert = swiglu_expert("intermediate_size");
    olmoe.source = "transformers v4.57 models/olmoe/modeling_olmoe.py OlmoeSparseMoeBlock.__init__";
    m["olmoe"] = olmoe;
    // FlexOlmoSparseMoeBlock: OLMoE's block (gate, then FlexOlmoMLP of intermediate_size).
    PerExpertSpec flex_olmo = olmoe;
    flex_olmo.source = "transformers v4.57 models/flex_olmo/modeling_flex_olmo.py FlexOlmoSparseMoeBlock.__init__";
    m["flex_olmo"] = flex_olmo;
    // JambaSparseMoeBlock (the layer's `feed_forward` on an expert layer): router = nn.Linear(H, E),
    // then experts (JambaMLP gate/up/down of intermediate_size).
    PerExpertSpec jamba = olmoe;
    jamba.block = "feed_forward";
    jamba.router = "router";
    jamba.source = "transformers v4.57 models/jamba/modeling_jamba.py JambaSparseMoeBlock.__init__";
    m["jamba"] = jamba;
    // DeepseekV3MoE: experts (DeepseekV3MLP of moe_intermediate_size), gate = DeepseekV3TopkRouter
    // (weight [E, H]; e_score_correction_bias is a buffer), shared_experts.
    PerExpertSpec deepseek;
    deepseek.router_linear = false;
    deepseek.router_first = false;
    deepseek.expert = swiglu_expert("moe_intermediate_size");
    deepseek.source = "transformers v4.57 models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3MoE.__init__";
    m["deepseek_v3"] = deepseek;
    // DeepseekV2MoE: experts, gate = DeepseekV2MoEGate (weight [E, H] only), shared_experts.
    PerExpertSpec deepseek_v2 = deepseek;
    deepseek_v2.source = "transformers v4.57 models/deepseek_v2/modeling_deepseek_v2.py DeepseekV2MoE.__init__";
    m["deepseek_v2"] = deepseek_v2;
    // Glm4MoeMoE: experts, gate = Glm4MoeTopkRouter (weight [E, H]; e_score_correction_bias a
    // buffer), shared_experts: DeepSeek-V3's block.
    PerExpertSpec glm4_moe = deepseek;
    glm4_moe.source = "transformers v4.57 models/glm4_moe/modeling_glm4_moe.py Glm4MoeMoE.__init__";
    m["glm4_moe"] = glm4_moe;
    // Glm4vMoeTextMoE (GLM-4.5V's decoder) is GLM-4-MoE's block too, but GLM-4.5V on 4.x is refused
    // for its tie rule (undescribed_in_v4).
    return m;
  }();
  return specs;
}

// MoE types whose experts transformers v4.57.1 already stores as fused tensors under v5's names and
// shapes (others fused in 4.x differ: Llama-4 and Qwen3-VL-MoE keep [E, H, 2I], Aria a grouped GEMM,
// GraniteMoe names its block block_sparse_moe): only those the v4-* fixtures and the structure
// oracle under 4.57.1 matched are listed; the rest are refused on 4.x.
bool fused_in_v4(const std::string& model_type) {
  // DBRX (branch arch12): v4.57.1's DbrxExpertGLU has 5.17's w1 / v1 / w2 [E * ffn_hidden_size,
  // d_model] and the same block (transformers-4.57.1 models/dbrx/modeling_dbrx.py).
  static const char* const kFused[] = {"gpt_oss", "dbrx"};
  for (const char* t : kFused) {
    if (model_type == t) return true;
  }
  return false;
}

// MoE types transformers v4.57.1 has but builds in a way not described here (why, for the refusal).
// Every other MoE type of the table is not in v4.57.1's CONFIG_MAPPING_NAMES (added in 5.x): keep
// this list complete when a type v4.57.1 knows joins the table.
const char* undescribed_in_v4(const std::string& model_type) {
  if (model_type == "ernie4_5_moe") {
    return "Ernie4_5_MoeSparseMoeBlock registers moe_statics (an e_score_correction_bias parameter) and a float32 "
           "gate before its per-expert modules";
  }
  if (model_type == "llama4_text") return "fused experts Llama4TextExperts gate_up_proj [E, H, 2I], down_proj [E, I, H]";
  if (model_type == "qwen3_vl_moe_text") {
    return "fused experts Qwen3VLMoeTextExperts gate_up_proj [E, H, 2I], down_proj [E, I, H]";
  }
  if (model_type == "aria_text") return "experts AriaGroupedExpertsMLP, fc1/fc2 grouped GEMM weights";
  // The experts are described (per-expert, as GLM-4-MoE's), but v4.57.1 ties lm_head by the
  // composite config's own tie_word_embeddings while 5.17's Glm4vMoeConfig.__post_init__ takes the
  // text config's true over it, which is what hookstream reads (the oracle under 4.57.1 saw it).
  if (model_type == "glm4v_moe_text") {
    return "GLM-4.5V ties lm_head by the composite config's own tie_word_embeddings, not the text config's as 5.17 does";
  }
  if (model_type == "longcat_flash") {
    return "LongcatFlashMoE's experts are an nn.ModuleList of per-expert MLPs and identity (zero) experts, not 5.17's "
           "fused tensors";
  }
  if (model_type == "jetmoe") {
    return "JetMoeBlock registers input_layernorm, self_attention (its attention experts), post_attention_layernorm, "
           "then mlp, another order than v5's";
  }
  if (model_type == "granitemoe" || model_type == "granitemoeshared" || model_type == "granitemoehybrid") {
    return "fused experts registered as block_sparse_moe.input_linear/output_linear/router.layer, and "
           "GraniteMoeHybrid's decoder layer in another order";
  }
  return nullptr;
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
  if (v4 && !choice.decided_by.empty()) return choice;  // remote code not described: said above
  if (v4 && fused_in_v4(spec.model_type)) {
    choice.decided_by = "transformers " + transformers_version + " (fused expert tensors, as v4.57.1 builds them)";
    return choice;
  }
  if (v4) {
    // 4.x is read as v4.57.1: a type it has no modelling file for cannot be built there at all
    // (AutoConfig: "does not recognize this architecture"); one it builds in an undescribed way is
    // not modelled as fused.
    const char* undescribed = undescribed_in_v4(spec.model_type);
    choice.refused = undescribed != nullptr
                         ? "transformers " + transformers_version + " knows " + spec.model_type +
                               " but hookstream cannot model it yet on 4.x (v4.57.1: " + undescribed +
                               "); pin transformers 5.x"
                         : "transformers " + transformers_version + " cannot build model_type \"" + spec.model_type +
                               "\" (not in transformers v4.57.1, the last 4.x; added in 5.x); pin transformers 5.x";
    return choice;
  }
  choice.decided_by = "transformers " + transformers_version + " (fused [E, ...] expert tensors)";
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
