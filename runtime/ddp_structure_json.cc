#include "runtime/ddp_structure_json.h"

#include <set>

#include <nlohmann/json.hpp>

#include "runtime/model_step.h"
#include "sim/sync/fsdp2/fsdp2_units.h"
#include "sim/sync/zero/zero_common.h"

namespace hookstream {

namespace {

using Json = nlohmann::ordered_json;

Json linear_json(const ModelStructure& structure, const LinearUse& use) {
  return Json{{"path", linear_module_path(structure, use)},
              {"weight", use.weight},
              {"bias", use.bias},
              {"lora_a", use.lora_a},
              {"lora_b", use.lora_b}};
}

const char* tiled_name(TiledBackward strategy) {
  switch (strategy) {
    case TiledBackward::BackwardPerChunk: return "per_chunk_backward";
    case TiledBackward::GradThenBackward: return "grad_then_backward";
    case TiledBackward::FunctionReturnsGrads: return "function_returns_grads";
  }
  return "per_chunk_backward";
}

// Every module path the forward asks "skipped?" about (runtime/oracle_model.cc does the same asks).
std::vector<std::string> queried_paths(const Plan& plan, const ModelStructure& structure) {
  std::set<std::string> paths;
  auto module_of = [&](int index) {
    if (index >= 0) paths.insert(structure.parameters[static_cast<size_t>(index)].module);
  };
  auto linear = [&](const LinearUse& use) {
    if (use.weight < 0) return;
    paths.insert(linear_module_path(structure, use));
    module_of(use.lora_a);
    module_of(use.lora_b);
  };
  module_of(structure.embed);
  module_of(structure.final_norm);
  module_of(structure.lm_head);
  paths.insert("lm_head");
  for (const DecoderLayerUse& layer : structure.layers) {
    paths.insert(layer.path);
    paths.insert(layer.path + ".self_attn");
    paths.insert(layer.path + "." + layer.mixer_module);
    paths.insert(layer.path + "." + layer.mlp_module);
    for (int norm : {layer.input_norm, layer.q_norm, layer.k_norm, layer.post_attention_norm}) module_of(norm);
    for (const LinearUse* use : {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up, &layer.down}) linear(*use);
    for (const ExpertUse& expert : layer.experts) {
      paths.insert(expert.path);
      for (const LinearUse* use : {&expert.gate, &expert.up, &expert.down}) linear(*use);
    }
  }
  (void)plan;
  return {paths.begin(), paths.end()};
}

}  // namespace

std::string ddp_structure_json(const Plan& plan, const ModelStructure& structure) {
  const ModelConfig& m = plan.model;
  Json j;
  j["schema"] = "hookstream.ddp-structure/1";
  j["torch_version_modelled"] = plan.torch_version.text();
  j["vision"] = !structure.vision_blocks.empty();
  j["world_size"] = plan.world_size;
  j["iterations"] = plan.iterations;
  j["gradient_accumulation_steps"] = std::max(1, plan.gradient_accumulation_steps);
  j["micro_batch_size"] = plan.micro_batch_size;
  j["ddp"] = Json{{"find_unused_parameters", plan.find_unused_parameters()},
                  {"static_graph", plan.static_graph},
                  {"gradient_as_bucket_view", plan.gradient_as_bucket_view},
                  {"bucket_cap_mb", plan.ddp_bucket_cap_mb ? Json(*plan.ddp_bucket_cap_mb) : Json(nullptr)}};
  // FSDP1 oracle (oracles/fsdp1_worker.py): accelerate 1.15 defaults use_orig_params to false.
  j["fsdp1"] = Json{{"use_orig_params", plan.engine.fsdp.use_orig_params.value_or(false)},
                    {"distributed_debug", plan.torch_distributed_debug},
                    // transformers' Trainer wraps a PEFT model with PEFT's fsdp_auto_wrap_policy.
                    {"peft_wrap_policy", plan.engine.fsdp.peft_wrap_policy}};
  // torch.compile and torch._dynamo.config for oracles/ddp_worker.py (docs/ddp-compile.md).
  j["compile"] = Json{{"torch_compile", plan.torch_compile.enabled},
                      {"backend", plan.torch_compile.backend},
                      {"optimize_ddp", to_string(plan.torch_compile.optimize_ddp)},
                      {"compiled_autograd", plan.torch_compile.compiled_autograd}};
  j["use_reentrant"] = plan.use_reentrant;
  j["input_require_grads"] = plan.input_require_grads();
  j["tiled_mlp_backward"] = tiled_name(plan.tiled_mlp_backward);
  j["tiled_mlp_weights_as_inputs"] = plan.tiled_mlp_weights_as_inputs ||
                                     plan.tiled_mlp_backward == TiledBackward::FunctionReturnsGrads;
  j["tiled_mlp_ds_grad_is_ready"] = plan.tiled_mlp_ds_grad_is_ready.value_or(plan.engine.kind == EngineKind::DeepSpeed);
  // The DeepSpeed engine's settings (oracles/zero_worker.py passes them to deepspeed.initialize);
  // null when the plan does not run on DeepSpeed. null values: DeepSpeed's defaults.
  if (plan.engine.kind == EngineKind::DeepSpeed && plan.engine.deepspeed) {
    const DeepSpeedConfig& ds = *plan.engine.deepspeed;
    auto optional_json = [](const auto& v) { return v ? Json(*v) : Json(nullptr); };
    j["deepspeed"] = Json{{"stage", ds.zero_stage},
                          {"overlap_comm", optional_json(ds.overlap_comm)},
                          {"contiguous_gradients", optional_json(ds.contiguous_gradients)},
                          // What DeepSpeed ends up with after HF's Trainer filled "auto" (zero_common.h).
                          {"reduce_bucket_size", ds.reduce_bucket_size || ds.reduce_bucket_size_auto
                                                     ? Json(zero_reduce_bucket_size(plan)) : Json(nullptr)},
                          {"param_persistence_threshold", zero_persistence_threshold(plan)},
                          // "auto": what HF's Trainer fills, int(0.9 * hidden_size^2).
                          {"prefetch_bucket_size", ds.stage3_prefetch_bucket_size_auto && !ds.stage3_prefetch_bucket_size
                                                       ? Json(static_cast<long long>(0.9 * m.hidden_size * m.hidden_size))
                                                       : optional_json(ds.stage3_prefetch_bucket_size)},
                          {"max_live_parameters", optional_json(ds.stage3_max_live_parameters)},
                          {"max_reuse_distance", optional_json(ds.stage3_max_reuse_distance)},
                          {"leaf_modules", plan.z3_leaf_mlp}};
  } else {
    j["deepspeed"] = nullptr;
  }
  j["lora_scale"] = plan.lora_alpha / static_cast<double>(std::max(1, plan.lora_r));
  j["model"] = Json{{"hidden_size", m.hidden_size},
                    {"num_attention_heads", m.num_attention_heads},
                    {"num_key_value_heads", m.num_key_value_heads > 0 ? m.num_key_value_heads : m.num_attention_heads},
                    {"head_dim", m.head_dim > 0 ? m.head_dim : m.hidden_size / std::max(1, m.num_attention_heads)},
                    {"vocab_size", m.vocab_size},
                    {"tie_word_embeddings", m.tie_word_embeddings}};
  Json params = Json::array();
  for (const Parameter& p : structure.parameters) {
    params.push_back(Json{{"name", p.name}, {"module", p.module}, {"shape", p.shape}, {"trainable", p.trainable}});
  }
  j["parameters"] = std::move(params);
  j["ddp_parameters"] = structure.ddp_parameters;
  j["embed"] = structure.embed;
  j["final_norm"] = structure.final_norm;
  j["lm_head"] = structure.lm_head;
  Json layers = Json::array();
  for (const DecoderLayerUse& layer : structure.layers) {
    // Per-expert MoE layers (sim/inputs/architectures/per_expert_layout.h): `gate` is the router.
    Json experts = Json::array();
    for (const ExpertUse& expert : layer.experts) {
      experts.push_back(Json{{"index", expert.index},
                             {"path", expert.path},
                             {"gate", linear_json(structure, expert.gate)},
                             {"up", linear_json(structure, expert.up)},
                             {"down", linear_json(structure, expert.down)}});
    }
    layers.push_back(Json{{"index", layer.index},
                          {"path", layer.path},
                          {"mlp_module", layer.mlp_module},
                          {"experts", std::move(experts)},
                          {"tiled", plan.layer_tiled(layer.index)},
                          {"input_norm", layer.input_norm},
                          {"q_norm", layer.q_norm},
                          {"k_norm", layer.k_norm},
                          {"post_attention_norm", layer.post_attention_norm},
                          {"q", linear_json(structure, layer.q)},
                          {"k", linear_json(structure, layer.k)},
                          {"v", linear_json(structure, layer.v)},
                          {"o", linear_json(structure, layer.o)},
                          {"gate", linear_json(structure, layer.gate)},
                          {"up", linear_json(structure, layer.up)},
                          {"down", linear_json(structure, layer.down)}});
  }
  j["layers"] = std::move(layers);
  const std::vector<std::string> paths = queried_paths(plan, structure);
  Json positions = Json::array();
  for (int rank = 0; rank < plan.world_size; ++rank) {
    for (int it = 0; it < plan.iterations; ++it) {
      for (int micro = 0; micro < std::max(1, plan.gradient_accumulation_steps); ++micro) {
        const ModelStepView step = model_step_view(plan, rank, it, micro);
        Json skipped = Json::array();
        for (const std::string& path : paths) {
          if (step.skipped(path)) skipped.push_back(path);
        }
        Json counts = Json::array();
        for (const DecoderLayerUse& layer : structure.layers) counts.push_back(plan.checkpoint_count(layer.index, rank, it, micro));
        positions.push_back(Json{{"rank", rank},
                                 {"iteration", it},
                                 {"micro_step", micro},
                                 {"sequence_len", plan.sequence_len_for(rank, it, micro)},
                                 {"shards", step.shards},
                                 {"checkpoint_count", std::move(counts)},
                                 {"skipped", std::move(skipped)}});
      }
    }
  }
  j["positions"] = std::move(positions);
  if (plan.engine.kind == EngineKind::Fsdp2) {
    // oracles/fsdp2_worker.py: which modules fully_shard wraps (besides the root) and how.
    const Fsdp2Units units = fsdp2_units(plan, structure);
    Json paths = Json::array();
    for (size_t u = 1; u < units.units.size(); ++u) paths.push_back(units.units[u].path);
    // The device mesh fully_shard gets: [dp_replicate, dp_shard] (accelerate's fsdp_dim_names).
    j["fsdp2"] = Json{{"units", std::move(paths)},
                      {"reshard_after_forward", units.reshard_after_forward},
                      {"mesh", Json::array({plan.engine.dp_replicate, plan.engine.shard_ranks(plan.world_size)})}};
  }
  return j.dump(1) + "\n";
}

}  // namespace hookstream
