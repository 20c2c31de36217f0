#include "sim/cost/engine_cost.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <optional>

#include "sim/cost/optimizer_states.h"
#include "sim/cost/time_model.h"
#include "sim/sync/fsdp1/fsdp1_model.h"
#include "sim/sync/fsdp2/fsdp2_units.h"
#include "sim/sync/zero/zero_common.h"

namespace hookstream {

namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// An accelerate config's fsdp_config value (read_accelerate_config keeps them as "key: value" in
// Engine::settings, "fsdp_config." prefixed), with or without accelerate's `fsdp_` prefix.
std::optional<std::string> accelerate_fsdp_setting(const Engine& engine, const std::string& name) {
  for (const std::string& setting : engine.settings) {
    for (const std::string& key : {"fsdp_config.fsdp_" + name + ": ", "fsdp_config." + name + ": "}) {
      if (setting.rfind(key, 0) == 0) return setting.substr(key.size());
    }
  }
  return std::nullopt;
}

bool truthy(const std::string& value) {
  const std::string v = upper(value);
  return v == "TRUE" || v == "1" || v == "YES";
}

int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

}  // namespace

EngineCostSettings engine_cost_settings(const Plan& plan) {
  EngineCostSettings s;
  s.kind = plan.engine.kind;
  s.world = std::max(1, plan.world_size);
  s.shard_ranks = s.world;
  const Engine& engine = plan.engine;
  const FsdpSettings& fsdp = engine.fsdp;
  const int model_bytes = dtype_bytes(plan.model.torch_dtype);
  // HF Trainer passes `bf16` to accelerate as mixed_precision="bf16" (axolotl's bf16: auto is bf16
  // on a GPU): FSDP's MixedPrecision(Policy) param_dtype = reduce_dtype = bf16
  // (accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision).
  const bool mixed = plan.bf16.value_or(true);
  s.param_dtype_bytes = mixed ? 2 : model_bytes;
  s.reduce_dtype_bytes = s.param_dtype_bytes;
  const bool four_bit = plan.load_in_4bit;
  switch (s.kind) {
    case EngineKind::Ddp:
      s.name = "DDP";
      return s;
    case EngineKind::Fsdp2: {
      s.name = "FSDP2";
      s.sharded = s.world > 1;
      // fully_shard(mesh=...) over accelerate's mesh (Engine::dp_shard / dp_replicate): the units
      // are sharded over the dp_shard group; HSDP all-reduces each shard across the replicas.
      s.shard_ranks = std::max(1, engine.shard_ranks(s.world));
      if (engine.dp_replicate > 1) s.name = fmt::format("FSDP2 HSDP {}x{}", engine.dp_replicate, s.shard_ranks);
      // fully_shard(reshard_after_forward=True) is the default (torch/distributed/fsdp/_fully_shard/_fully_shard.py).
      s.reshard_after_forward = fsdp.reshard_after_forward.value_or(true);
      if (auto v = accelerate_fsdp_setting(engine, "reshard_after_forward")) s.reshard_after_forward = truthy(*v);
      // CPUOffloadPolicy: sharded parameters and gradients live on the CPU and the optimizer steps there
      // (torch/distributed/fsdp/_fully_shard/_fsdp_api.py CPUOffloadPolicy).
      bool offload = fsdp.offload_params;
      if (auto v = accelerate_fsdp_setting(engine, "offload_params")) offload = offload || truthy(*v);
      s.offload_params = s.offload_optimizer = offload;
      // accelerate's fsdp2_prepare_model upcasts trainable low-precision parameters to fp32 when
      // mixed precision is on (not for 4-bit models): fp32 sharded parameters, gradients and states.
      s.fp32_master = mixed && !four_bit;
      // FSDP2 prefetches the next unit's all-gather in backward itself (FSDPParamGroup's
      // _backward_prefetch, one unit); forward all-gathers overlap the previous unit as the CPU runs ahead.
      s.backward_prefetch = BackwardPrefetch::BackwardPre;
      s.forward_prefetch = true;
      s.settings.push_back(fmt::format("fsdp_config.reshard_after_forward: {}", s.reshard_after_forward ? "true" : "false"));
      if (offload) s.settings.push_back("fsdp_config.offload_params: true");
      break;
    }
    case EngineKind::Fsdp1: {
      s.sharded = s.world > 1;
      // The sharding strategy: accelerate's fsdp_sharding_strategy / fsdp_reshard_after_forward (a
      // ShardingStrategy name or number), or axolotl's fsdp_config.reshard_after_forward (true:
      // FULL_SHARD, false: SHARD_GRAD_OP, accelerate/utils/dataclasses.py __post_init__).
      std::string strategy = "FULL_SHARD";
      if (fsdp.reshard_after_forward) strategy = *fsdp.reshard_after_forward ? "FULL_SHARD" : "SHARD_GRAD_OP";
      for (const char* key : {"sharding_strategy", "reshard_after_forward"}) {
        if (auto v = accelerate_fsdp_setting(engine, key)) {
          const std::string value = upper(*v);
          static const std::vector<std::string> names = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"};
          if (value == "TRUE") strategy = "FULL_SHARD";
          else if (value == "FALSE") strategy = "SHARD_GRAD_OP";
          else if (value.size() == 1 && value[0] >= '1' && value[0] <= '5') strategy = names[static_cast<size_t>(value[0] - '1')];
          else if (std::find(names.begin(), names.end(), value) != names.end()) strategy = value;
        }
      }
      s.name = "FSDP1 " + strategy;
      s.reshard_after_forward = strategy == "FULL_SHARD" || strategy == "HYBRID_SHARD";
      if (strategy == "NO_SHARD") s.shard_ranks = 1;
      // HYBRID_SHARD: FULL_SHARD within a node, replicated (all-reduced) across nodes.
      if (strategy == "HYBRID_SHARD" || strategy == "_HYBRID_SHARD_ZERO2") s.shard_ranks = std::min(s.world, 8);
      bool offload = fsdp.offload_params;
      if (auto v = accelerate_fsdp_setting(engine, "offload_params")) offload = offload || truthy(*v);
      s.offload_params = s.offload_optimizer = offload;
      // accelerate's Accelerator.prepare_model upcasts trainable FlatParameters to fp32 under mixed precision.
      s.fp32_master = mixed && !four_bit;
      // HF TrainingArguments passes fsdp_config.get("backward_prefetch", "NO_PREFETCH"), and accelerate
      // turns NO_PREFETCH into None (no backward prefetch); axolotl's FSDPConfig has no such field.
      s.backward_prefetch = BackwardPrefetch::None;
      if (auto v = accelerate_fsdp_setting(engine, "backward_prefetch")) {
        const std::string value = upper(*v);
        if (value == "BACKWARD_PRE" || value == "1") s.backward_prefetch = BackwardPrefetch::BackwardPre;
        if (value == "BACKWARD_POST" || value == "2") s.backward_prefetch = BackwardPrefetch::BackwardPost;
      }
      if (auto v = accelerate_fsdp_setting(engine, "forward_prefetch")) s.forward_prefetch = truthy(*v);
      s.settings.push_back("sharding strategy: " + strategy);
      s.settings.push_back(std::string("backward_prefetch: ") +
                           (s.backward_prefetch == BackwardPrefetch::BackwardPre    ? "BACKWARD_PRE"
                            : s.backward_prefetch == BackwardPrefetch::BackwardPost ? "BACKWARD_POST"
                                                                                    : "NO_PREFETCH"));
      if (offload) s.settings.push_back("fsdp_config.offload_params: true");
      break;
    }
    case EngineKind::DeepSpeed: {
      const DeepSpeedConfig ds = engine.deepspeed.value_or(DeepSpeedConfig{});
      s.zero_stage = ds.zero_stage;
      s.name = "ZeRO-" + std::to_string(ds.zero_stage);
      s.sharded = s.world > 1 && ds.zero_stage >= 1;
      if (ds.zero_stage == 0) s.notes.push_back("DeepSpeed stage 0 is costed as DDP (its own all-reduce is not modelled)");
      // deepspeed/runtime/zero/config.py DeepSpeedZeroConfig defaults.
      s.overlap_comm = ds.overlap_comm_or_default();
      s.contiguous_gradients = ds.contiguous_gradients.value_or(true);
      // The sizes as DeepSpeed ends up with them once HF's Trainer filled "auto" (zero_common.h),
      // the same the ZeRO sync models use.
      s.reduce_bucket_elements = zero_reduce_bucket_size(plan);
      if (ds.allgather_bucket_size) s.allgather_bucket_elements = *ds.allgather_bucket_size;
      if (ds.stage3_prefetch_bucket_size) s.prefetch_bucket_elements = *ds.stage3_prefetch_bucket_size;
      else if (ds.stage3_prefetch_bucket_size_auto && plan.model.hidden_size > 0) {
        // transformers' trainer_config_finalize: int(0.9 * hidden_size * hidden_size).
        s.prefetch_bucket_elements = static_cast<int64_t>(0.9 * plan.model.hidden_size * plan.model.hidden_size);
      }
      if (ds.stage3_max_live_parameters) s.max_live_parameters = *ds.stage3_max_live_parameters;
      if (ds.stage3_max_reuse_distance) s.max_reuse_distance = *ds.stage3_max_reuse_distance;
      s.param_persistence_threshold = zero_persistence_threshold(plan);
      if (ds.sub_group_size) s.sub_group_elements = *ds.sub_group_size;
      s.offload_optimizer = ds.offload_optimizer == "cpu" || ds.offload_optimizer == "nvme";
      // offload_param is a stage-3 setting (DeepSpeedZeroConfig: "only for stage 3").
      s.offload_params = ds.zero_stage == 3 && (ds.offload_param == "cpu" || ds.offload_param == "nvme");
      if (ds.offload_optimizer == "nvme" || ds.offload_param == "nvme") {
        s.notes.push_back("offload to nvme is costed as cpu (the NVMe swapper's reads and writes are not modelled)");
      }
      if (!ds.offload_param.empty() && ds.offload_param != "none" && ds.zero_stage != 3) {
        s.notes.push_back("zero_optimization.offload_param applies to stage 3 only (DeepSpeed ignores it at stage " +
                          std::to_string(ds.zero_stage) + ")");
      }
      // DeepSpeed keeps an fp32 partition of every trainable parameter (single_partition_of_fp32_groups
      // in stage_1_and_2.py, fp32_partitioned_groups_flat in stage3.py), whatever the model dtype.
      s.fp32_master = true;
      // bf16.enabled / fp16.enabled (accelerate fills "auto" from mixed_precision: bf16 on with HF's
      // bf16): the engine casts the module to 16 bits (engine.py _configure_distributed_model).
      s.param_dtype_bytes = s.reduce_dtype_bytes = mixed ? 2 : model_bytes;
      s.settings.push_back("zero_optimization.stage: " + std::to_string(ds.zero_stage));
      s.settings.push_back(fmt::format("overlap_comm: {}", s.overlap_comm ? "true" : "false"));
      s.settings.push_back(fmt::format("reduce_bucket_size: {}", s.reduce_bucket_elements));
      if (s.offload_optimizer) s.settings.push_back("offload_optimizer: " + ds.offload_optimizer);
      if (s.offload_params) s.settings.push_back("offload_param: " + ds.offload_param);
      if (ds.zero_stage == 3) {
        s.settings.push_back(fmt::format("stage3_prefetch_bucket_size: {}", s.prefetch_bucket_elements));
        s.settings.push_back(fmt::format("stage3_max_live_parameters: {}", s.max_live_parameters));
        s.settings.push_back(fmt::format("stage3_max_reuse_distance: {}", s.max_reuse_distance));
        s.settings.push_back(fmt::format("stage3_param_persistence_threshold: {}", s.param_persistence_threshold));
      }
      break;
    }
  }
  if (s.offload_optimizer) {
    s.notes.push_back("CPU optimizer step: assumed 20 GB/s of host memory per rank, 28 bytes per fp32 element (not in devices/)");
  }
  return s;
}

namespace {

// A group of parameters gathered and resharded together: an FSDP unit (fully_shard module or
// FlatParameter) or a ZeRO-3 fetch group (a decoder layer; the modules outside the stack).
struct CostUnit {
  std::string name;
  int layer = -1;                  // decoder layer; -1 the root
  int64_t gathered_elements = 0;   // unsharded, with the engine's padding
  int64_t shard_trainable = 0;     // rank 0's partition of trainable parameters (optimizer, sharded grads)
  int64_t trainable_elements = 0;  // unsharded trainable elements (unsharded grads)
  int64_t shard_frozen_bytes = 0;  // rank 0's partition of frozen parameters, as stored
  int64_t shard_elements = 0;      // rank 0's partition, all parameters
  int64_t persistent_bytes = 0;    // ZeRO-3: 16-bit bytes beyond the partition of whole-kept parameters
  int64_t largest_module = 0;      // ZeRO-3: the largest module's own elements (one fetch)
};

// parameter_offload.py mark_persistent_parameters: `param.ds_numel <= param_threshold` stays whole
// (ds_persist) on every rank, gathered once at its first use.
bool zero3_persistent(const Parameter& p, const EngineCostSettings& s) { return p.numel() <= s.param_persistence_threshold; }

// Bytes per element as stored when not upcast: PEFT's adapters are fp32 (autocast_adapter_dtype).
int stored_bytes(const Parameter& p) { return p.adapter ? 4 : dtype_bytes(p.dtype); }

// `notes`: where the unit builder's settings read but not modelled go (FSDP2: fsdp2_units' notes).
std::vector<CostUnit> cost_units(const Plan& plan, const ModelStructure& structure, const EngineCostSettings& s,
                                 std::vector<std::string>* notes = nullptr) {
  std::vector<CostUnit> units;
  const int64_t world = s.shard_ranks;
  if (s.kind == EngineKind::Fsdp1) {
    // FlatParamHandle (torch/distributed/fsdp/_flat_param.py _init_flat_param_and_metadata): one
    // flat tensor per unit, aligned per parameter with use_orig_params, padded to a multiple of the
    // world size; each rank holds numel / world (fsdp1_units does the layout).
    for (const Fsdp1Unit& u : fsdp1_units(plan, structure)) {
      CostUnit c;
      c.name = u.display();
      c.layer = u.layer;
      const int64_t shard = ceil_div(u.numel, world);
      c.gathered_elements = shard * world;
      c.shard_elements = shard;
      bool any_trainable = false;
      for (size_t i = 0; i < u.params.size(); ++i) {
        const Parameter& p = structure.parameters[static_cast<size_t>(u.params[i])];
        const int64_t local = world == plan.world_size ? u.local_numel(i, 0, p.numel()) : ceil_div(p.numel(), world);
        if (p.trainable) {
          any_trainable = true;
          c.trainable_elements += p.numel();
          c.shard_trainable += local;
        } else {
          c.shard_frozen_bytes += p.quantized ? ceil_div(p.bytes(), world) : local * stored_bytes(p);
        }
      }
      // use_orig_params=False flattens only uniformly trainable parameters: the whole flat shard
      // (padding included) is the optimizer's; with use_orig_params it sees the original views.
      if (any_trainable && !plan.engine.fsdp.use_orig_params.value_or(false)) {
        c.shard_trainable = shard;
        c.trainable_elements = c.gathered_elements;
      }
      units.push_back(std::move(c));
    }
    return units;
  }
  // FSDP2: fully_shard units (fsdp2_units); each parameter sharded on dim 0 into world chunks of
  // ceil(dim0 / world) rows, the last padded (_fsdp_param.py FSDPParam._init_sharded_param:
  // torch.chunk, padded to the first chunk's size). ZeRO: per decoder layer and the root, each
  // parameter's partition ceil(numel / world) (stage3.py _partition_param: partition_size).
  std::vector<int> unit_of(structure.parameters.size(), 0);
  if (s.kind == EngineKind::Fsdp2) {
    const Fsdp2Units fs = fsdp2_units(plan, structure);
    if (notes != nullptr) notes->insert(notes->end(), fs.notes.begin(), fs.notes.end());
    for (const Fsdp2Unit& u : fs.units) {
      CostUnit c;
      c.name = u.path.empty() ? "the root unit" : u.path;
      c.layer = u.layer;
      units.push_back(std::move(c));
    }
    unit_of = fs.unit_of;
  } else {
    units.resize(structure.layers.size() + 1);
    units[0].name = "the modules outside the decoder layers";
    for (size_t i = 0; i < structure.layers.size(); ++i) {
      units[i + 1].name = structure.layers[i].path;
      units[i + 1].layer = static_cast<int>(i);
    }
    const int layers = static_cast<int>(structure.layers.size());
    for (size_t i = 0; i < structure.parameters.size(); ++i) {
      const int layer = structure.parameters[i].layer;
      unit_of[i] = layer >= 0 && layer < layers ? layer + 1 : 0;
    }
  }
  const bool zero3 = s.kind == EngineKind::DeepSpeed && s.zero_stage == 3;
  std::map<std::pair<int, std::string>, int64_t> module_elements;  // ZeRO-3 fetches module by module
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    const Parameter& p = structure.parameters[i];
    const int u = std::max(0, unit_of[i]);
    CostUnit& c = units[static_cast<size_t>(u)];
    int64_t local = ceil_div(p.numel(), world);
    if (s.kind == EngineKind::Fsdp2 && !p.shape.empty() && p.shape[0] > 0) local = ceil_div(p.shape[0], world) * (p.numel() / p.shape[0]);
    int64_t gathered = local * world;
    if (zero3 && zero3_persistent(p, s)) {
      // stage3.py persistent_parameters: under param_persistence_threshold a parameter is
      // gathered once and kept whole (ds_persist); its fp32 partition is still 1/world.
      c.persistent_bytes += (p.numel() - local) * (p.trainable ? s.param_dtype_bytes : stored_bytes(p));
      gathered = 0;
    }
    c.gathered_elements += gathered;
    c.shard_elements += local;
    if (p.trainable) {
      c.trainable_elements += p.numel();
      c.shard_trainable += local;
    } else {
      c.shard_frozen_bytes += p.quantized ? ceil_div(p.bytes(), world) : local * stored_bytes(p);
    }
    if (zero3 && gathered > 0) module_elements[{u, p.module}] += p.numel();  // only ZeRO-3 fetches by module
  }
  for (const auto& [key, elements] : module_elements) {
    CostUnit& c = units[static_cast<size_t>(key.first)];
    c.largest_module = std::max(c.largest_module, elements);
  }
  return units;
}

}  // namespace

namespace {

// One module that owns parameters, as ZeRO-3 fetches it.
struct TraceModule {
  int layer = -1;            // decoder layer; -1 outside the stack
  int64_t elements = 0;      // every parameter's elements: the reuse-distance walk counts them all (ds_numel)
  int64_t gathered = 0;      // the non-persistent ones: what a fetch all-gathers
  bool trainable = false;
  bool in_backward = false;  // its output requires grad, so its backward hook fetches it again
  bool embedding = false;    // the input embedding (PEFT's enable_input_require_grads hooks it)
  std::string path;
};

struct TraceUse {
  int module = 0;
  bool backward = false;   // a backward use or a recompute (the coordinator's step runs on)
  bool recompute = false;  // a checkpointed layer's forward run again inside backward
  // Only the release of `module`, later than its use: a non-reentrant checkpoint's trigger module
  // is released after the recompute its backward ran.
  bool release_only = false;
  bool held = false;       // its release waits for `owner`'s (a frozen module's recompute use)
  // The module whose backward release also releases it (-1: the step's end); its own index: the
  // use's release comes with a later release_only entry.
  int owner = -1;
};

// The parameter indices of one decoder layer in the order its forward calls their modules
// (input norm, attention projections, post-attention norm, MLP / experts), then any other
// parameter of the layer in named_parameters() order.
std::vector<int> layer_call_order(const ModelStructure& structure, const DecoderLayerUse& use) {
  std::vector<int> order;
  auto add = [&](int index) {
    if (index >= 0) order.push_back(index);
  };
  auto add_linear = [&](const LinearUse& linear) {
    for (int index : {linear.weight, linear.bias, linear.lora_a, linear.lora_b}) add(index);
  };
  add(use.input_norm);
  add(use.input_norm_bias);
  for (const LinearUse* linear : {&use.q, &use.k, &use.v}) add_linear(*linear);
  add(use.q_norm);
  add(use.k_norm);
  for (const LinearUse& linear : use.attention_other) add_linear(linear);
  add_linear(use.o);
  add(use.post_attention_norm);
  add(use.post_attention_norm_bias);
  add_linear(use.gate);
  for (const ExpertUse& expert : use.experts) {
    for (const LinearUse* linear : {&expert.gate, &expert.up, &expert.down}) add_linear(*linear);
  }
  add_linear(use.up);
  add_linear(use.down);
  for (const LinearUse& linear : use.mlp_other) add_linear(linear);
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    if (structure.parameters[i].layer == use.index) order.push_back(static_cast<int>(i));
  }
  return order;
}

}  // namespace

Zero3Fetches zero3_fetches(const Plan& plan, const ModelStructure& structure, const EngineCostSettings& s) {
  const int layers = static_cast<int>(structure.layers.size());
  Zero3Fetches out;
  out.forward_elements.assign(static_cast<size_t>(layers) + 1, 0);
  out.backward_elements.assign(static_cast<size_t>(layers) + 1, 0);
  // Modules in call order: embedding (and vision tower) first, the decoder layers, then the final
  // norm and the head; each module where its first parameter in that order puts it.
  std::vector<int> order;
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    const Parameter& p = structure.parameters[i];
    if ((p.layer < 0 || p.layer >= layers) && p.group != "final_norm" && p.group != "head") order.push_back(static_cast<int>(i));
  }
  for (const DecoderLayerUse& use : structure.layers) {
    const std::vector<int> in_layer = layer_call_order(structure, use);
    order.insert(order.end(), in_layer.begin(), in_layer.end());
  }
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    const Parameter& p = structure.parameters[i];
    if ((p.layer < 0 || p.layer >= layers) && (p.group == "final_norm" || p.group == "head")) order.push_back(static_cast<int>(i));
  }
  std::vector<TraceModule> modules;
  std::map<std::string, int> module_of;
  std::vector<char> seen(structure.parameters.size(), 0);
  std::vector<int> module_order;  // modules owning parameters, in call order
  for (int index : order) {
    if (seen[static_cast<size_t>(index)]) continue;
    seen[static_cast<size_t>(index)] = 1;
    const Parameter& p = structure.parameters[static_cast<size_t>(index)];
    auto [it, added] = module_of.emplace(p.module, static_cast<int>(modules.size()));
    if (added) {
      modules.push_back(TraceModule{});
      modules.back().layer = p.layer >= 0 && p.layer < layers ? p.layer : -1;
      modules.back().path = p.module;
      modules.back().embedding = p.group == "embed";
      module_order.push_back(it->second);
    }
    TraceModule& m = modules[static_cast<size_t>(it->second)];
    m.elements += p.numel();
    if (!zero3_persistent(p, s)) m.gathered += p.numel();
    m.trainable = m.trainable || p.trainable;
  }
  // The modules without parameters share one entry: their fetch gathers and releases nothing, but
  // it is a step of the coordinator's trace that runs a prefetch round.
  const int no_parameters = static_cast<int>(modules.size());
  modules.push_back(TraceModule{});

  // Parameter-less modules a transformers/PEFT forward calls between them (observed in the
  // coordinator's __submodule_order of a real LlamaForCausalLM with and without PEFT LoRA,
  // oracles/zero3_fetch_worker.py): the decoder's rotary_emb after the embedding
  // (modeling_llama.py LlamaModel.forward), the MLP's act_fn between gate_proj and up_proj
  // (LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))), and PEFT's lora_dropout before
  // lora_A (peft/tuners/lora/layer.py Linear.forward: lora_B(lora_A(dropout(x)))).
  std::map<std::string, std::string> act_fn_at;  // the module of a gated MLP's up projection weight -> its act_fn
  for (const DecoderLayerUse& use : structure.layers) {
    if (use.mlp_gated && use.gate.weight >= 0 && use.up.weight >= 0) {
      const std::string& up = structure.parameters[static_cast<size_t>(use.up.weight)].module;
      const size_t cut = up.rfind('.' + use.up.name);
      if (cut != std::string::npos) act_fn_at[up] = up.substr(0, cut) + ".act_fn";
    }
  }

  // The call tree: every module whose __call__ runs DeepSpeed's hooks (parameter_offload.py
  // _register_deepspeed_module hooks every module; ModuleList/ModuleDict are never called, PEFT's
  // PeftModel calls the wrapped model, not its LoraModel step, as observed).
  struct CallNode {
    std::string path;
    int module = -1;          // its TraceModule (no_parameters when it owns none)
    int layer = -1;           // the decoder layer it belongs to
    bool in_backward = false; // its output requires grad: its pre-backward hook fetches it
    bool flow_in = false;     // its input requires grad
    std::vector<int> children;
  };
  std::vector<CallNode> tree(1);
  tree[0].module = no_parameters;
  std::vector<int> open{0};
  auto is_called_container = [&](const std::string& prefix, const std::string& next) {
    const std::string last = prefix.substr(prefix.rfind('.') == std::string::npos ? 0 : prefix.rfind('.') + 1);
    if (!next.empty() && std::all_of(next.begin(), next.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
    if (last == "lora_A" || last == "lora_B" || last == "lora_dropout" || last == "lora_embedding_A" || last == "lora_embedding_B" ||
        last == "lora_magnitude_vector")
      return false;
    return !(prefix == "base_model" && plan.adapter != Adapter::None);
  };
  bool flow = false;
  // Adds the module at `path` under its innermost called ancestor, opening the ancestors not open yet.
  // `layer`: the decoder layer of the module entered (-1 outside the stack); an ancestor belongs to
  // it when the layer's own path is a prefix of the ancestor's.
  auto enter = [&](const std::string& path, int module, int layer) -> int {
    auto layer_of = [&](const std::string& prefix) {
      return layer >= 0 && prefix.size() >= structure.layers[static_cast<size_t>(layer)].path.size() ? layer : -1;
    };
    std::vector<std::pair<std::string, std::string>> ancestors;  // (prefix, next component)
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
      const size_t next_end = path.find('.', dot + 1);
      ancestors.emplace_back(path.substr(0, dot), path.substr(dot + 1, next_end == std::string::npos ? std::string::npos : next_end - dot - 1));
    }
    std::vector<std::string> called;
    for (const auto& [prefix, next] : ancestors) {
      if (is_called_container(prefix, next)) called.push_back(prefix);
    }
    size_t keep = 1;
    while (keep < open.size() && keep - 1 < called.size() && tree[static_cast<size_t>(open[keep])].path == called[keep - 1]) ++keep;
    open.resize(keep);
    for (size_t i = keep - 1; i < called.size(); ++i) {
      CallNode node;
      node.path = called[i];
      node.module = no_parameters;
      node.layer = layer_of(called[i]);
      node.flow_in = flow;
      tree.push_back(node);
      tree[static_cast<size_t>(open.back())].children.push_back(static_cast<int>(tree.size()) - 1);
      open.push_back(static_cast<int>(tree.size()) - 1);
    }
    CallNode node;
    node.path = path;
    node.module = module;
    node.layer = layer;
    node.flow_in = flow;
    tree.push_back(node);
    tree[static_cast<size_t>(open.back())].children.push_back(static_cast<int>(tree.size()) - 1);
    return static_cast<int>(tree.size()) - 1;
  };
  // A module's backward hook runs when its output requires grad: it holds a trainable parameter,
  // or one before it does, or it is the embedding whose output PEFT's enable_input_require_grads
  // forward hook marks (registered before DeepSpeed's, so DeepSpeed wraps an output requiring grad).
  for (int mi : module_order) {
    TraceModule& m = modules[static_cast<size_t>(mi)];
    if (auto a = act_fn_at.find(m.path); a != act_fn_at.end()) {
      const int act = enter(a->second, no_parameters, m.layer);
      // act_fn's input is the gate projection's output: the sibling before it.
      const std::vector<int>& siblings = tree[static_cast<size_t>(open.back())].children;
      tree[static_cast<size_t>(act)].in_backward = siblings.size() >= 2 && tree[static_cast<size_t>(siblings[siblings.size() - 2])].in_backward;
    }
    const std::string lora_a = ".lora_A.default";
    if (m.path.size() > lora_a.size() && m.path.compare(m.path.size() - lora_a.size(), lora_a.size(), lora_a) == 0) {
      const std::string wrapper = m.path.substr(0, m.path.size() - lora_a.size());
      bool x_requires_grad = flow;
      const int wrapper_node = open.size() > 1 && tree[static_cast<size_t>(open.back())].path == wrapper ? open.back() : -1;
      if (wrapper_node >= 0) x_requires_grad = tree[static_cast<size_t>(wrapper_node)].flow_in;
      const int dropout = enter(wrapper + ".lora_dropout.default", no_parameters, m.layer);
      tree[static_cast<size_t>(dropout)].in_backward = x_requires_grad;
    }
    const int node = enter(m.path, mi, m.layer);
    m.in_backward = m.trainable || flow || (m.embedding && plan.input_require_grads());
    tree[static_cast<size_t>(node)].in_backward = m.in_backward;
    flow = m.in_backward || (plan.input_require_grads() && m.layer < 0);
    if (m.embedding && plan.model.rope_theta > 0) {
      const size_t cut = m.path.rfind('.');
      if (cut != std::string::npos && structure.layers.size() > 0) enter(m.path.substr(0, cut) + ".rotary_emb", no_parameters, -1);
    }
  }
  // Tied embeddings: the head module's weight is the embedding's parameter, fetched again where the head runs.
  if (plan.model.tie_word_embeddings) {
    for (size_t i = 0; i < structure.parameters.size(); ++i) {
      if (structure.parameters[i].group != "embed") continue;
      const int embed = module_of.at(structure.parameters[i].module);
      const std::string& embed_path = modules[static_cast<size_t>(embed)].path;
      const size_t model_at = embed_path.rfind("model.embed_tokens");
      const std::string head = (model_at == std::string::npos ? std::string() : embed_path.substr(0, model_at)) + "lm_head";
      const int node = enter(head, embed, -1);
      tree[static_cast<size_t>(node)].in_backward = flow;
      break;
    }
  }
  // A container's output requires grad when one of its modules' does.
  std::function<bool(int)> mark = [&](int id) {
    CallNode& node = tree[static_cast<size_t>(id)];
    bool any = node.in_backward;
    for (int child : node.children) any = mark(child) || any;
    if (node.module == no_parameters && !node.children.empty()) node.in_backward = any;
    return node.in_backward;
  };
  mark(0);

  // The trace: forward in call order; backward from the loss, each module's pre-backward hook as
  // its output's gradient arrives: a container before its modules, and those in reverse call order
  // (autograd runs the later-created node first). A checkpointed layer runs its modules forward
  // again in backward (the recompute).
  std::vector<TraceUse> trace;
  // Appends the forward calls of the subtree at `id`; a recompute passes the module whose backward
  // runs it (`owner`, -1: the root's) and, non-reentrant, stops at that module's call (early stop).
  std::function<bool(int, bool, int)> forward_walk = [&](int id, bool recompute, int owner) {
    const CallNode& node = tree[static_cast<size_t>(id)];
    const TraceModule& m = modules[static_cast<size_t>(node.module)];
    trace.push_back({node.module, recompute, recompute, false, recompute && node.module != no_parameters && !m.trainable, owner});
    if (owner >= 0 && node.module == owner) return true;
    for (int child : node.children) {
      if (forward_walk(child, recompute, owner)) return true;
    }
    return false;
  };
  std::function<void(int, std::vector<int>&)> backward_order = [&](int id, std::vector<int>& out_nodes) {
    const CallNode& node = tree[static_cast<size_t>(id)];
    if (node.in_backward) out_nodes.push_back(id);
    for (auto it = node.children.rbegin(); it != node.children.rend(); ++it) backward_order(*it, out_nodes);
  };
  // A recompute's frozen parameters stay gathered until the backward release of the module whose
  // backward is running (DeepSpeed PR #8148: fetch_sub_module's update_recompute_parameters while
  // `forward and torch._C._current_graph_task_id() != -1`; release_sub_module releases them with
  // that module's backward): under reentrant checkpointing the root's, so the step's end; under
  // non-reentrant the module whose backward unpacked the layer's saved tensors.
  std::function<void(int)> backward_walk = [&](int id) {
    const CallNode& node = tree[static_cast<size_t>(id)];
    const bool layer_node = node.layer >= 0 && node.path == structure.layers[static_cast<size_t>(node.layer)].path;
    if (layer_node && plan.layer_checkpointed(node.layer)) {
      if (plan.use_reentrant) {
        // CheckpointFunction.backward reruns the whole layer (its own call included) before any of its backward.
        forward_walk(id, true, -1);
      } else {
        std::vector<int> order_nodes;
        backward_order(id, order_nodes);
        size_t trigger_at = 0;
        while (trigger_at < order_nodes.size() && tree[static_cast<size_t>(order_nodes[trigger_at])].module == no_parameters) ++trigger_at;
        if (trigger_at < order_nodes.size()) {
          // Non-reentrant: the backward runs down to the first module whose node unpacks saved
          // tensors (its pre-backward fetch first); the unpack recomputes the layer up to its last
          // saved tensor, inside that module's forward, so the recompute ends at its pre-forward
          // fetch (early stop: its post-forward release does not run), then it is released with
          // its backward and the rest of the layer runs backward.
          for (size_t i = 0; i < trigger_at; ++i) trace.push_back({no_parameters, true, false});
          const int trigger = tree[static_cast<size_t>(order_nodes[trigger_at])].module;
          trace.push_back({trigger, true, false, false, false, trigger});
          forward_walk(id, true, trigger);
          trace.push_back({trigger, true, false, true, false, -1});
          for (size_t i = trigger_at + 1; i < order_nodes.size(); ++i) {
            trace.push_back({tree[static_cast<size_t>(order_nodes[i])].module, true, false});
          }
          return;
        }
      }
    }
    if (node.in_backward) trace.push_back({node.module, true, false});
    for (auto it = node.children.rbegin(); it != node.children.rend(); ++it) backward_walk(*it);
  };
  forward_walk(0, false, -1);
  backward_walk(0);
  const size_t n = trace.size();
  for (const TraceUse& use : trace) out.steps += use.release_only ? 0 : 1;
  std::vector<int64_t> prefix(n + 1, 0);
  for (size_t k = 0; k < n; ++k) {
    prefix[k + 1] = prefix[k] + (trace[k].release_only ? 0 : modules[static_cast<size_t>(trace[k].module)].elements);
  }
  std::vector<long> next_use(n, -1), last_seen(modules.size(), -1);
  for (size_t k = n; k-- > 0;) {
    next_use[k] = last_seen[static_cast<size_t>(trace[k].module)];
    if (!trace[k].release_only) last_seen[static_cast<size_t>(trace[k].module)] = static_cast<long>(k);
  }
  std::vector<std::vector<int>> held_by(modules.size());  // owner -> frozen modules it keeps gathered
  std::vector<char> held(modules.size(), 0);
  std::vector<char> available(modules.size(), 0), last_use_forward(modules.size(), 0);
  std::vector<long> protect(modules.size(), -1);  // __most_recent_step_id_param_fetched_for
  int64_t live = 0;
  size_t queue = 0;  // the coordinator's __param_queue: the trace position it has popped up to
  // `issuer`: the use whose fetch all-gathers it (itself, or the fetch whose prefetch round did).
  auto record = [&](size_t k, size_t issuer) {
    const TraceUse& use = trace[k];
    // DeepSpeed flags an all-gather by the hook that issued it: a forward hook (a recompute's
    // included) or a pre-backward hook (__all_gather_params(params, forward)).
    const bool forward_hook = !trace[issuer].backward || trace[issuer].recompute;
    (forward_hook ? out.forward_flagged : out.backward_flagged) += modules[static_cast<size_t>(use.module)].gathered;
    const TraceModule& m = modules[static_cast<size_t>(use.module)];
    const size_t slot = m.layer >= 0 ? static_cast<size_t>(m.layer) : static_cast<size_t>(layers);
    (use.backward ? out.backward_elements : out.forward_elements)[slot] += m.gathered;
    (use.backward ? out.backward_gathers : out.forward_gathers) += 1;
    if (use.recompute) out.recompute_elements += m.gathered;
    available[static_cast<size_t>(use.module)] = 1;
    last_use_forward[static_cast<size_t>(use.module)] = 0;  // gathered afresh, not kept
    live += m.gathered;
  };
  auto release = [&](int module) {
    if (!available[static_cast<size_t>(module)]) return;
    available[static_cast<size_t>(module)] = 0;
    live -= modules[static_cast<size_t>(module)].gathered;
  };
  for (size_t k = 0; k < n; ++k) {
    const int mi = trace[k].module;
    TraceModule& m = modules[static_cast<size_t>(mi)];
    if (trace[k].release_only) {
      for (int frozen : held_by[static_cast<size_t>(mi)]) {
        held[static_cast<size_t>(frozen)] = 0;
        release(frozen);
      }
      held_by[static_cast<size_t>(mi)].clear();
    }
    if (trace[k].release_only) {
      if (m.gathered == 0 || !available[static_cast<size_t>(mi)] || held[static_cast<size_t>(mi)]) continue;
      bool keep = protect[static_cast<size_t>(mi)] > static_cast<long>(k) + 1;
      if (!keep && next_use[k] >= 0) keep = prefix[static_cast<size_t>(next_use[k])] - prefix[k + 1] < s.max_reuse_distance;
      if (!keep) release(mi);
      continue;
    }
    if (trace[k].held && m.gathered > 0) {
      held[static_cast<size_t>(mi)] = 1;
      if (trace[k].owner >= 0) held_by[static_cast<size_t>(trace[k].owner)].push_back(mi);
    }
    if (m.gathered > 0 && !available[static_cast<size_t>(mi)]) {
      record(k, k);
    } else if (m.gathered > 0 && trace[k].backward && last_use_forward[static_cast<size_t>(mi)]) {
      out.kept_elements += m.gathered;  // still gathered since its forward
    }
    last_use_forward[static_cast<size_t>(mi)] = !trace[k].backward;
    // fetch_sub_module pops the module's own entry, then prefetches the next entries of the trace
    // up to min(max_live_parameters - available, prefetch_bucket_size) elements, skipping gathered
    // ones (whose skipped use it records, so they are not released before it).
    queue = std::max(queue, k + 1);
    if (s.prefetch_bucket_elements > 0) {
      const int64_t limit = std::min(s.max_live_parameters - live, s.prefetch_bucket_elements);
      int64_t prefetching = 0;
      while (queue < n && prefetching < limit) {
        if (trace[queue].release_only) {  // not a step of DeepSpeed's trace
          ++queue;
          continue;
        }
        const int next = trace[queue].module;
        protect[static_cast<size_t>(next)] = std::max(protect[static_cast<size_t>(next)], static_cast<long>(queue));
        const TraceModule& nm = modules[static_cast<size_t>(next)];
        if (nm.gathered > 0 && !available[static_cast<size_t>(next)]) {
          record(queue, k);
          prefetching += nm.gathered;
        }
        ++queue;
      }
    }
    out.peak_available = std::max(out.peak_available, live);
    // release_sub_module after the module's forward / backward: released unless a prefetch skipped
    // over a later use, or the trace uses it again within max_reuse_distance elements
    // (__params_to_release walks the modules after this step until that many elements).
    if (m.gathered == 0 || !available[static_cast<size_t>(mi)] || held[static_cast<size_t>(mi)]) continue;
    if (trace[k].owner == mi) continue;  // a non-reentrant recompute's trigger: released after it
    bool keep = protect[static_cast<size_t>(mi)] > static_cast<long>(k) + 1;
    if (!keep && next_use[k] >= 0) keep = prefix[static_cast<size_t>(next_use[k])] - prefix[k + 1] < s.max_reuse_distance;
    if (!keep) release(mi);
  }
  return out;
}

EngineMemory engine_memory(const Plan& plan, const ModelStructure& structure, const EngineCostSettings& s,
                           bool allocator_rounding) {
  EngineMemory m;
  const int layers = static_cast<int>(structure.layers.size());
  m.grads_by_layer.assign(static_cast<size_t>(layers) + 1, 0);
  if (!s.sharded) return m;
  auto device = [&](int64_t bytes) { return bytes <= 0 ? 0 : allocator_rounding ? device_allocation_bytes(bytes) : bytes; };
  auto add = [&](MemoryCategory category, int64_t bytes) {
    if (bytes > 0) m.device[category] += device(bytes);
  };
  auto add_host = [&](MemoryCategory category, int64_t bytes) {
    if (bytes > 0) m.host[category] += bytes;
  };
  const OptimizerStates optimizer = optimizer_states(plan.optimizer);
  // The optimizer's states of `elements` trainable elements of `bytes` each, as flat allocations.
  auto states_bytes = [&](int64_t elements, int bytes, bool on_device) {
    int64_t total = 0;
    for (int state = 0; state < optimizer.states; ++state) {
      for (int64_t allocation : optimizer.state_allocations(elements, bytes)) total += on_device ? device(allocation) : allocation;
    }
    return total;
  };
  const std::vector<CostUnit> units = cost_units(plan, structure, s, &m.notes);
  auto slot = [&](int layer) { return static_cast<size_t>(layer >= 0 && layer < layers ? layer : layers); };

  if (s.kind == EngineKind::Fsdp2 || s.kind == EngineKind::Fsdp1) {
    // Sharded parameters, gradients and optimizer states per unit (FSDP1's flat shard, FSDP2's
    // DTensor shards): trainable ones in fp32 when accelerate upcast them, else as stored (PEFT's
    // adapters fp32). With CPU offload they live in pinned host memory (CPUOffloadPolicy
    // pin_memory=True; FSDP1 CPUOffload(offload_params=True)) and the optimizer steps there.
    int64_t layer_w = 0, layer_g = 0, layer_plain_g = 0, all_w = 0, all_g = 0, root_w = 0, root_g = 0;
    const int tb = s.fp32_master ? 4 : (plan.adapter != Adapter::None ? 4 : dtype_bytes(plan.model.torch_dtype));
    for (const CostUnit& u : units) {
      const int64_t weights = u.shard_frozen_bytes + u.shard_trainable * tb;
      // FSDP1 keeps one sharded gradient per FlatParameter that requires grad: the reduce-scatter's
      // output is a whole padded shard (torch/distributed/fsdp/_runtime_utils.py
      // _get_reduce_scatter_tensors: `torch.empty_like(chunks[0])`), kept as _saved_grad_shard and
      // then flat_param.grad; with use_orig_params a unit mixing frozen and trainable parameters
      // (FlatParamHandle._validate_tensors_to_flatten permits it) still holds that whole shard, the
      // frozen parameters' part included (_use_sharded_grad_views only gives them no view: their
      // .grad is None, the storage is the flat gradient's). FSDP2 shards each parameter: only the
      // trainable ones have gradients.
      const int64_t grad_elements = s.kind == EngineKind::Fsdp1 && u.trainable_elements > 0 ? u.shard_elements : u.shard_trainable;
      const int64_t grads = grad_elements * tb;
      if (s.offload_params) {
        add_host(MemoryCategory::Weights, weights);
        add_host(MemoryCategory::Gradients, grads);
        add_host(MemoryCategory::OptimizerStates, states_bytes(u.shard_trainable, tb, false));
      } else {
        add(MemoryCategory::Weights, weights);
        m.device[MemoryCategory::OptimizerStates] += states_bytes(u.shard_trainable, tb, true);
        m.grads_by_layer[slot(u.layer)] += device(grads);
        m.optimizer_bytes += u.shard_trainable * tb;  // the optimizer steps the trainable parameters' views
      }
      // Unsharded while computing: the all-gather output in param_dtype (FSDP2 FSDPParamGroup's
      // all-gather output, FSDP1 FlatParamHandle._full_param_padded), FSDP1's low-precision
      // _mp_shard under mixed precision; the unsharded gradients in param_dtype, which FSDP2's
      // foreach_reduce copies into a reduce_dtype reduce-scatter input before freeing them
      // (_fsdp_collectives.py foreach_reduce), FSDP1's flat gradient of the whole unit.
      int64_t w = device(u.gathered_elements * s.param_dtype_bytes);
      if (s.kind == EngineKind::Fsdp1 && s.param_dtype_bytes != tb) w += device(u.shard_elements * s.param_dtype_bytes);
      int64_t g = 0, reduce_input = 0;
      if (u.trainable_elements > 0) {
        g = device((s.kind == EngineKind::Fsdp2 ? u.trainable_elements : u.gathered_elements) * s.param_dtype_bytes);
        if (s.kind == EngineKind::Fsdp2) reduce_input = device(u.trainable_elements * s.reduce_dtype_bytes);
      }
      all_w += w;
      all_g += g;
      if (u.layer >= 0) {
        layer_w = std::max(layer_w, w);
        layer_g = std::max(layer_g, g + reduce_input);  // the computing layer, at its reduce-scatter
        layer_plain_g = std::max(layer_plain_g, g);
      } else {
        root_w = w;
        root_g = g;  // the root's reduce-scatter comes after every layer's
      }
    }
    if (s.shard_ranks <= 1) {
      m.notes.push_back("NO_SHARD: the flat parameters stay whole on every rank; nothing is gathered");
    } else if (!s.reshard_after_forward) {
      // reshard_after_forward=False / SHARD_GRAD_OP: every unit stays unsharded from its forward
      // to its backward; at the first backward layer all are gathered, plus the head's gradients
      // and that layer's.
      m.unsharded_peak = all_w + root_g + layer_g;
    } else {
      // The root is not resharded after forward (FSDP2 FSDPState._lazy_init clears the root's
      // post_forward_mesh_info; FSDP1 _runtime_utils._post_forward_reshard skips the root); at a
      // layer's backward: the root with its gradients, the computing layer, the one prefetched
      // (FSDP2's _backward_prefetch, FSDP1 BACKWARD_PRE; BACKWARD_POST and no prefetch issue the
      // next all-gather after the current unit resharded) and the computing layer's gradients.
      const int prefetched = s.backward_prefetch == BackwardPrefetch::BackwardPre ? 1 : 0;
      m.unsharded_peak = root_w + root_g + (1 + prefetched) * layer_w + layer_g;
    }
    // Gradient accumulation: accelerate's accumulate() runs the non-final micro-steps under
    // no_sync() (FSDP1) / set_requires_gradient_sync(False) (FSDP2): unsharded gradients of every
    // unit are kept until the last micro-step reduce-scatters them.
    if (plan.gradient_accumulation_steps > 1 && s.shard_ranks > 1) {
      m.unsharded_peak += all_g - root_g - layer_plain_g;  // the other layers' unsharded gradients
      m.notes.push_back("gradient accumulation under no_sync(): every unit's unsharded gradients stay until the last micro-step");
    }
    return m;
  }

  // DeepSpeed ZeRO (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py). Per rank, with P
  // trainable elements and N ranks: 16-bit parameters whole (stage 1/2, bit16_groups_flat) or
  // 1/N (stage 3, fp16_partitioned_groups_flat), the fp32 master partition P/N
  // (single_partition_of_fp32_groups / fp32_partitioned_groups_flat), the optimizer's states of
  // P/N fp32 elements, the fp32 gradient partition P/N, 16-bit gradients P (stage 1) or P/N
  // (stage 2/3). That is estimate_zero2_model_states_mem_needs' 2 P + 18 P / N and
  // estimate_zero3_model_states_mem_needs' 4 x largest layer + 18 P / N (a test runs both).
  // offload_optimizer moves the fp32 master, states and fp32 gradients to the host (the 16-bit
  // gradient partition goes straight to the pinned CPU buffer), offload_param stage 3's 16-bit partitions.
  const int pb = s.param_dtype_bytes;
  int64_t trainable = 0, shard_trainable = 0, frozen_bytes = 0, shard_frozen_bytes = 0, persistent = 0;
  int64_t largest = 0, largest_trainable = 0;
  for (const CostUnit& u : units) {
    trainable += u.trainable_elements;
    shard_trainable += u.shard_trainable;
    shard_frozen_bytes += u.shard_frozen_bytes;
    persistent += u.persistent_bytes;
    largest = std::max(largest, u.largest_module);
    if (u.trainable_elements > 0) largest_trainable = std::max(largest_trainable, u.largest_module);
  }
  for (const Parameter& p : structure.parameters) {
    if (!p.trainable) frozen_bytes += p.bytes();
  }
  if (s.zero_stage == 3) {
    const int64_t params16 = shard_trainable * pb + shard_frozen_bytes + persistent;
    m.parts["bit16_params"] = params16;
    if (s.offload_params) add_host(MemoryCategory::Weights, params16);
    else add(MemoryCategory::Weights, params16);
  } else {
    // Frozen parameters are not in the optimizer's groups: they stay whole as the module's own.
    add(MemoryCategory::Weights, trainable * pb);
    m.device[MemoryCategory::Weights] += frozen_bytes;
    m.parts["bit16_params"] = trainable * pb + frozen_bytes;
  }
  if (s.offload_optimizer) {
    add_host(MemoryCategory::MasterWeights, shard_trainable * 4);
    add_host(MemoryCategory::OptimizerStates, states_bytes(shard_trainable, 4, false));
  } else {
    add(MemoryCategory::MasterWeights, shard_trainable * 4);
    m.device[MemoryCategory::OptimizerStates] += states_bytes(shard_trainable, 4, true);
    m.optimizer_bytes = shard_trainable * 4;
  }
  m.parts["fp32_partition"] = shard_trainable * 4;
  m.parts["optimizer_states"] = states_bytes(shard_trainable, 4, false);
  if (s.zero_stage < 3) {
    // Gradients produced in backward, by layer: stage 1's 16-bit param.grad (whole), stage 2's
    // 16-bit partition (grads_in_partition), and the fp32 gradient partition the optimizer steps
    // on. With offload_optimizer both go to the pinned CPU buffers.
    for (const CostUnit& u : units) {
      int64_t bytes = 0;
      if (s.zero_stage == 1) bytes += u.trainable_elements * pb;
      else if (!s.offload_optimizer) bytes += u.shard_trainable * pb;
      if (!s.offload_optimizer) bytes += u.shard_trainable * 4;
      m.grads_by_layer[slot(u.layer)] += device(bytes);
    }
    if (s.offload_optimizer) add_host(MemoryCategory::Gradients, shard_trainable * 4);
    m.parts["bit16_gradients"] = (s.zero_stage == 1 ? trainable : (s.offload_optimizer ? 0 : shard_trainable)) * pb;
    m.parts["fp32_gradients"] = shard_trainable * 4;
  } else {
    // Stage 3: the gradient_accumulation_dtype (the model dtype unless data_types.grad_accum_dtype)
    // partition buffer, allocated once (stage3.py grad_partitions_flat_buffer; pinned on the host
    // with offload_optimizer), filled layer by layer; step() makes the fp32 gradient of one
    // sub-group at a time (_prepare_fp32_grad_for_sub_group, sub_group_size elements, default 1e9).
    const int64_t fp32_grad = 4 * std::min(s.sub_group_elements, shard_trainable);
    if (s.offload_optimizer) {
      add_host(MemoryCategory::Gradients, shard_trainable * pb + fp32_grad);
    } else {
      for (const CostUnit& u : units) m.grads_by_layer[slot(u.layer)] += device(u.shard_trainable * pb);
      m.step_bytes = device(fp32_grad);
      m.optimizer_bytes = fp32_grad;  // the optimizer steps one sub-group at a time
    }
    m.parts["bit16_gradient_partition"] = shard_trainable * pb;
    m.parts["fp32_gradients"] = fp32_grad;
  }
  // The ipg bucket: reduce_bucket_size elements of the gradient dtype with contiguous_gradients, a
  // second with overlap_comm (stage_1_and_2.py setup_buckets); stage 3's __ipg_bucket_flat_buffer.
  if (trainable > 0 && (s.contiguous_gradients || s.zero_stage == 3)) {
    const int64_t bucket = std::min(s.reduce_bucket_elements, trainable) * pb;
    m.comm_buffers = device(bucket) * (s.overlap_comm && s.zero_stage < 3 ? 2 : 1);
  }
  if (s.zero_stage == 3) {
    // Gathered at the peak: what the coordinator holds at once over the fetch trace (zero3_fetches:
    // the computing module, the modules prefetched after it, and those kept for a reuse within
    // stage3_max_reuse_distance), in the 16-bit dtype; plus the computing module's 16-bit gradients.
    // With no prefetch and no reuse that is the estimate's 4 x largest layer.
    const Zero3Fetches fetches = zero3_fetches(plan, structure, s);
    const int64_t live = std::max(largest, fetches.peak_available);
    m.unsharded_peak = device(live * pb) + device(largest_trainable * pb);
    if (fetches.kept_elements > 0) {
      m.notes.push_back(fmt::format("stage3_max_reuse_distance {}: {:.3g} M parameter elements stay gathered from their forward to their "
                                    "backward use (released only when reused beyond that distance)",
                                    s.max_reuse_distance, fetches.kept_elements / 1e6));
    }
    m.parts["gathered"] = live * pb + largest_trainable * pb;
    if (persistent > 0) m.notes.push_back("parameters under stage3_param_persistence_threshold stay whole on every rank");
  }
  if (s.offload_optimizer) m.notes.push_back("offload_optimizer: fp32 master, optimizer states and fp32 gradients in pinned host memory");
  return m;
}

double ring_allgather_ns(int64_t bytes, int ranks, const DeviceSpec& device, int gpus_per_node) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double gbps = collective_link_gbps(ranks, device, gpus_per_node);
  return gbps > 0 ? (ranks - 1.0) / ranks * static_cast<double>(bytes) / gbps : 0;  // bytes / (GB/s) = ns
}

double ring_reduce_scatter_ns(int64_t bytes, int ranks, const DeviceSpec& device, int gpus_per_node) {
  return ring_allgather_ns(bytes, ranks, device, gpus_per_node);
}

namespace {

// Host memory bandwidth one rank's CPU optimizer gets (DeepSpeedCPUAdam / torch's AdamW on CPU
// tensors): an assumption until devices/ carries host figures; 28 bytes per fp32 element (param,
// grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written).
constexpr double kHostOptimizerGbps = 20;
constexpr double kCpuAdamBytesPerElement = 28;

// One stretch of rank 0's compute between two points where the engine communicates.
struct Segment {
  int micro = 0;
  int layer = -1;       // decoder layer, -1 outside the stack
  bool backward = false;
  bool optimizer = false;
  double ns = 0;
};

bool backward_phase(const std::string& phase) {
  return phase.find("backward") != std::string::npos || phase == "recompute";
}

std::vector<Segment> segments_of(const EventModel& model) {
  std::vector<Segment> segments;
  for (const Op& op : model.ops) {
    if (op.rank != 0 || op.kind != OpKind::Kernel || op.duration_ns <= 0) continue;
    const std::string& phase = op.phase;
    Segment s;
    s.micro = op.micro_step;
    s.optimizer = phase == "optimizer";
    s.backward = !s.optimizer && backward_phase(phase);
    s.layer = s.optimizer ? -1 : op.layer;
    if (!segments.empty()) {
      Segment& last = segments.back();
      if (last.micro == s.micro && last.layer == s.layer && last.backward == s.backward && last.optimizer == s.optimizer) {
        last.ns += op.duration_ns;
        continue;
      }
    }
    s.ns = op.duration_ns;
    segments.push_back(s);
  }
  return segments;
}

// Walks the compute segments (not the optimizer's) in order: `new_micro_step()` before the first
// segment of each micro-step (per-micro-step gather state starts over), then `visit(i, segment,
// slot)`, `slot` being the segment's decoder layer or, outside the stack, the root's slot `layers`.
template <typename NewMicroStep, typename Visit>
void for_each_compute_segment(const std::vector<Segment>& segments, int layers, NewMicroStep new_micro_step, Visit visit) {
  int current = -1;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    if (seg.optimizer) continue;
    if (seg.micro != current) {
      current = seg.micro;
      new_micro_step();
    }
    visit(i, seg, seg.layer >= 0 && seg.layer < layers ? static_cast<size_t>(seg.layer) : static_cast<size_t>(layers));
  }
}

class LinkTimeline {
 public:
  LinkTimeline(const DeviceSpec& device, EngineStepCost& cost) : device_(device), cost_(cost) {}
  // A transfer issued at `issue`: starts when the link is free, returns its end.
  double run(const std::string& collective, const std::string& phase, int64_t bytes, double ns, double issue) {
    const double start = std::max(free_, issue);
    free_ = start + ns;
    auto it = std::find_if(cost_.collectives.begin(), cost_.collectives.end(),
                           [&](const CommTotal& t) { return t.collective == collective && t.phase == phase; });
    if (it == cost_.collectives.end()) {
      cost_.collectives.push_back(CommTotal{collective, phase, 0, 0, 0});
      it = std::prev(cost_.collectives.end());
    }
    ++it->count;
    it->bytes += bytes;
    it->ns += ns;
    cost_.comm_ns += ns;
    return free_;
  }
  double free() const { return free_; }
  double h2d_ns(int64_t bytes) const { return copy_ns(bytes, device_.host_link.pinned_h2d_gbps); }
  double d2h_ns(int64_t bytes) const { return copy_ns(bytes, device_.host_link.pinned_d2h_gbps); }

 private:
  static double copy_ns(int64_t bytes, double gbps) { return gbps > 0 ? static_cast<double>(bytes) / gbps : 0; }
  const DeviceSpec& device_;
  EngineStepCost& cost_;
  double free_ = 0;
};

}  // namespace

EngineStepCost engine_step_cost(const Plan& plan, const ModelStructure& structure, const EngineCostSettings& s,
                                const DeviceSpec& device, const EventModel& scheduled) {
  EngineStepCost cost;
  if (!s.sharded) return cost;
  const int gpus_per_node = 8;
  const int n = s.shard_ranks;
  const double gbps = collective_link_gbps(n, device, gpus_per_node);
  cost.link = fmt::format("{} {:g} GB/s per rank, ring over {} ranks", n <= gpus_per_node ? (device.nvlink_gbps > 0 ? "NVLink" : "PCIe") : "network", gbps, n);
  const std::vector<CostUnit> units = cost_units(plan, structure, s);
  const int layers = static_cast<int>(structure.layers.size());
  std::vector<const CostUnit*> unit_of_layer(static_cast<size_t>(layers) + 1, nullptr);  // [layers]: the root
  for (const CostUnit& u : units) {
    const size_t at = u.layer >= 0 && u.layer < layers ? static_cast<size_t>(u.layer) : static_cast<size_t>(layers);
    unit_of_layer[at] = &u;
  }
  auto unit_at = [&](int layer) { return unit_of_layer[layer >= 0 && layer < layers ? static_cast<size_t>(layer) : static_cast<size_t>(layers)]; };
  const bool fsdp = s.kind == EngineKind::Fsdp1 || s.kind == EngineKind::Fsdp2;
  const bool zero3 = s.kind == EngineKind::DeepSpeed && s.zero_stage == 3;
  const bool gathers = (fsdp && n > 1) || zero3;
  const int pb = s.param_dtype_bytes, rb = s.reduce_dtype_bytes;

  const std::vector<Segment> segments = segments_of(scheduled);
  int last_micro = 0;
  for (const Segment& seg : segments) last_micro = std::max(last_micro, seg.micro);
  LinkTimeline link(device, cost);
  double t = 0, compute = 0;
  int64_t bucket = 0;  // ZeRO-1/2/3: gradient bytes waiting in the ipg bucket
  const int64_t bucket_cap = std::max<int64_t>(1, s.reduce_bucket_elements) * pb;
  // Per micro-step: units gathered for forward, and re-gathered for backward.
  std::vector<char> gathered(static_cast<size_t>(layers) + 1, 0), regathered(static_cast<size_t>(layers) + 1, 0);
  // ZeRO's reduction of the bucket: reduce to each partition's owner (stage_1_and_2.py
  // average_tensor with reduce_scatter=True; stage3.py __reduce_and_partition_ipg_grads), a
  // reduce-scatter's volume. Without overlap_comm it runs on the compute stream.
  // Which segments wait for an all-gather: forward gathers every unit once per micro-step;
  // backward re-gathers what forward resharded: FSDP's layers with reshard_after_forward (never
  // the root, which FSDP does not reshard after forward), every module under ZeRO-3 (released
  // after its forward unless persistent).
  std::vector<char> need_gather(segments.size(), 0);
  std::vector<double> ready_at(segments.size(), -1);
  // ZeRO-3: the elements each segment's modules all-gather, from the coordinator's fetch trace
  // (zero3_fetches: releases within stage3_max_reuse_distance are skipped, recomputes re-gather),
  // issued with the layer's first segment of the phase.
  std::vector<int64_t> zero3_elements(segments.size(), 0);
  std::optional<Zero3Fetches> fetches;
  if (zero3) {
    fetches = zero3_fetches(plan, structure, s);
    std::vector<char> forward_done(static_cast<size_t>(layers) + 1, 0), backward_done(static_cast<size_t>(layers) + 1, 0);
    for_each_compute_segment(
        segments, layers,
        [&] {
          std::fill(forward_done.begin(), forward_done.end(), 0);
          std::fill(backward_done.begin(), backward_done.end(), 0);
        },
        [&](size_t i, const Segment& seg, size_t at) {
          std::vector<char>& done = seg.backward ? backward_done : forward_done;
          if (done[at]) return;
          done[at] = 1;
          zero3_elements[i] = (seg.backward ? fetches->backward_elements : fetches->forward_elements)[at];
          need_gather[i] = zero3_elements[i] > 0;
        });
  } else {
    for_each_compute_segment(
        segments, layers,
        [&] {
          std::fill(gathered.begin(), gathered.end(), 0);
          std::fill(regathered.begin(), regathered.end(), 0);
        },
        [&](size_t i, const Segment& seg, size_t at) {
          bool needed = false;
          if (!seg.backward && !gathered[at]) {
            needed = true;
          } else if (seg.backward && !regathered[at]) {
            regathered[at] = 1;
            needed = (s.reshard_after_forward && seg.layer >= 0 && seg.layer < layers) || !gathered[at];
          }
          gathered[at] = 1;
          const CostUnit* unit = unit_at(seg.layer);
          need_gather[i] = gathers && needed && unit != nullptr && unit->gathered_elements > 0;
        });
  }
  auto prefetches = [&](const Segment& seg) {
    if (zero3) return s.prefetch_bucket_elements > 0;
    return !seg.backward || s.kind == EngineKind::Fsdp2 || s.backward_prefetch != BackwardPrefetch::None;
  };
  // The unit's all-gather (after an H2D copy of its shard when parameters are offloaded).
  auto gather = [&](size_t i, double issue) {
    const Segment& seg = segments[i];
    const CostUnit* unit = unit_at(seg.layer);
    const std::string phase = seg.backward ? "backward" : "forward";
    double ready = issue;
    if (s.offload_params) {
      const int64_t shard = (zero3 ? ceil_div(zero3_elements[i], n) : unit->shard_elements) * pb;
      ready = link.run("H2D", phase, shard, link.h2d_ns(shard), ready);
    }
    const int64_t bytes = (zero3 ? zero3_elements[i] : unit->gathered_elements) * pb;
    return link.run("all_gather", phase, bytes, ring_allgather_ns(bytes, n, device, gpus_per_node), ready);
  };
  auto reduce_bucket = [&](int64_t bytes, double issue) {
    const double end = link.run("reduce_scatter", "backward", bytes, ring_reduce_scatter_ns(bytes, n, device, gpus_per_node), issue);
    if (!s.overlap_comm) t = std::max(t, end);
  };
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    const bool sync = seg.micro == last_micro;  // no_sync() / stage 1 reduce at the boundary only
    double ns = seg.ns;
    if (seg.optimizer) {
      // The optimizer steps on this rank's partition only; with CPU offload on the host.
      const double saved = s.shard_ranks > 1 ? ns * (1.0 - 1.0 / s.shard_ranks) : 0;
      ns -= saved;
      cost.optimizer_saved_ns += saved;
      if (s.kind == EngineKind::DeepSpeed && s.zero_stage < 3 && bucket > 0) {
        reduce_bucket(bucket, t);
        bucket = 0;
      }
      t = std::max(t, link.free());  // step() waits for every reduction
      if (s.offload_optimizer) {
        cost.optimizer_saved_ns += ns;
        ns = 0;
        int64_t shard = 0;
        for (const CostUnit& u : units) shard += u.shard_trainable;
        // ZeRO-Offload / FSDP CPU offload: gradients to the host (FSDP copies each unit's after its
        // reduce-scatter; counted here, before the step that waits for them), the step there, and
        // the updated 16-bit partitions back unless the parameters live on the host (FSDP
        // offload_params, ZeRO-3 offload_param: copied in before each all-gather instead).
        t = link.run("D2H", "optimizer", shard * rb, link.d2h_ns(shard * rb), t);
        const double step = kCpuAdamBytesPerElement * static_cast<double>(shard) / kHostOptimizerGbps;
        t = link.run("cpu_optimizer_step", "optimizer", 0, step, t);
        if (!s.offload_params) t = link.run("H2D", "optimizer", shard * pb, link.h2d_ns(shard * pb), t);
      }
      compute += ns;
      t += ns;
      if (s.kind == EngineKind::DeepSpeed && s.zero_stage < 3) {
        // The updated 16-bit partitions are all-gathered (all_gather_dp_groups over bit16_groups_flat).
        int64_t bytes = 0;
        for (const CostUnit& u : units) bytes += u.trainable_elements * pb;
        t = link.run("all_gather", "optimizer", bytes, ring_allgather_ns(bytes, n, device, gpus_per_node), t);
      }
      continue;
    }
    const CostUnit* unit = unit_at(seg.layer);
    // Its own all-gather, unless an earlier segment prefetched it.
    if (need_gather[i] && ready_at[i] < 0) ready_at[i] = gather(i, t);
    if (need_gather[i]) t = std::max(t, ready_at[i]);
    // Prefetch: the next unit's all-gather is issued as this one starts computing, ahead of this
    // unit's reduce-scatter on the link (FSDP2's implicit forward prefetch as the CPU runs ahead and
    // its _backward_prefetch; FSDP1 limit_all_gathers' two in flight in forward, BACKWARD_PRE/POST
    // in backward, none under HF's NO_PREFETCH; ZeRO-3 stage3_prefetch_bucket_size > 0).
    for (size_t j = i + 1; j < segments.size(); ++j) {
      if (!need_gather[j]) continue;
      if (ready_at[j] < 0 && prefetches(segments[j])) ready_at[j] = gather(j, t);
      break;
    }
    t += ns;
    compute += ns;
    // A unit's gradients are ready when its backward ends (the next segment is another unit).
    const bool unit_done = seg.backward && (i + 1 == segments.size() || segments[i + 1].layer != seg.layer ||
                                            segments[i + 1].micro != seg.micro || !segments[i + 1].backward);
    if (!unit_done || unit == nullptr || unit->trainable_elements == 0) continue;
    if (seg.layer < 0 && i + 1 < segments.size() && segments[i + 1].backward && segments[i + 1].micro == seg.micro) {
      // The root's gradients (head, then embedding) are reduced with the root's last backward.
      bool later = false;
      for (size_t j = i + 1; j < segments.size() && segments[j].micro == seg.micro && !segments[j].optimizer; ++j) {
        if (segments[j].layer < 0 && segments[j].backward) later = true;
      }
      if (later) continue;
    }
    if (fsdp) {
      if (!sync) continue;
      const int64_t bytes = (s.kind == EngineKind::Fsdp1 ? unit->gathered_elements : unit->trainable_elements) * rb;
      if (n <= 1) {
        link.run("all_reduce", "backward", bytes, ring_allreduce_ns(bytes, s.world, device, gpus_per_node), t);
        continue;
      }
      // FSDP2 foreach_reduce / FSDP1 _reduce_grad: reduce-scatter on its own stream after the
      // unit's backward (post-backward hook); HYBRID_SHARD all-reduces the shard across nodes.
      const double end = link.run("reduce_scatter", "backward", bytes, ring_reduce_scatter_ns(bytes, n, device, gpus_per_node), t);
      if (s.world > n) {
        // The replica group (rank r, r + n, r + 2n, ...: accelerate's mesh puts dp_replicate
        // outermost) stays inside one node only when the whole world does.
        const int64_t shard = unit->shard_trainable * rb;
        link.run("all_reduce", "backward", shard,
                 ring_allreduce_ns(shard, s.world / n, device, s.world <= gpus_per_node ? gpus_per_node : 1), end);
      }
      continue;
    }
    // ZeRO: stage 2 and 3 reduce every micro-step, stage 1 at the accumulation boundary only.
    if (s.zero_stage == 1 && !sync) continue;
    bucket += unit->trainable_elements * pb;
    while (bucket >= bucket_cap) {
      reduce_bucket(bucket_cap, t);
      bucket -= bucket_cap;
    }
    const bool last_of_micro = i + 1 == segments.size() || segments[i + 1].micro != seg.micro || segments[i + 1].optimizer;
    if (last_of_micro && bucket > 0 && (s.zero_stage >= 2 || sync)) {
      reduce_bucket(bucket, t);  // engine.backward's epilogue flushes the bucket
      bucket = 0;
    }
  }
  const double end = std::max(t, link.free());
  cost.exposed_ns = std::max(0.0, end - compute);
  if (s.kind == EngineKind::Fsdp1 && s.backward_prefetch == BackwardPrefetch::None && s.reshard_after_forward) {
    cost.notes.push_back("FSDP1 without backward_prefetch: each backward all-gather waits for the previous unit's backward (HF's default NO_PREFETCH)");
  }
  if (fetches) {
    cost.notes.push_back(fmt::format("ZeRO-3 all-gathers as the coordinator's complete trace issues them (from the second step on; the "
                                     "first records the trace without prefetching): {} module fetches in forward, {} in backward per "
                                     "micro-step, prefetch {} elements, max_reuse_distance {}",
                                     fetches->forward_gathers, fetches->backward_gathers, s.prefetch_bucket_elements, s.max_reuse_distance));
    if (fetches->recompute_elements > 0) {
      cost.notes.push_back(fmt::format("checkpointed layers' recomputes all-gather {:.3g} M elements again in backward per micro-step",
                                       fetches->recompute_elements / 1e6));
    }
  }
  cost.notes.push_back("collectives share one link in issue order; NCCL's per-collective latency and CPU issue overhead are not modelled");
  return cost;
}

}  // namespace hookstream
