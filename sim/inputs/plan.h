// A training plan: model + the training strategy that decides the gradient-hook schedule.
// Users write it as axolotl-style YAML (axolotl's key names wherever axolotl has one) plus a
// `hookstream:` section for what axolotl cannot say. See docs/plan-format.md.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/inputs/axolotl_config/distributed_config.h"
#include "sim/inputs/model_config.h"
#include "sim/sync/ddp_python_reducer/torch_compile.h"
#include "sim/inputs/torch_version.h"

namespace hookstream {

enum class Adapter { None, Lora, Qlora };
enum class CheckpointMode { None, Reentrant, NonReentrant };

// How a tiled MLP (Arctic Long Sequence Training / DeepSpeed TiledMLP style autograd.Function)
// produces parameter gradients in its backward.
enum class TiledBackward {
  // torch.autograd.backward() on every recomputed chunk: one nested graph task per chunk, each
  // firing the weights' AccumulateGrad hooks.
  BackwardPerChunk,
  // torch.autograd.grad() for all chunks but the last (no AccumulateGrad runs, no hook), the summed
  // weight grads written to .grad, then backward() on the last chunk: hooks fire once, nested.
  GradThenBackward,
  // torch.autograd.grad() for every chunk; the Function returns the summed weight gradients as the
  // gradients of its weight inputs: the accumulators run once, in the outer graph task.
  FunctionReturnsGrads,
};

// axolotl's `device_map`: one full replica per rank (DDP as intended) or one replica spread over
// several GPUs (accelerate's "auto"/"balanced"/"sequential").
enum class DeviceMap { PerRank, Auto, Balanced, Sequential };

// Values a single rank, iteration or micro-step may override.
struct PlanOverride {
  std::optional<int> sequence_len;
  std::optional<int> tiled_mlp_num_shards;
  std::optional<std::vector<int>> checkpoint_twice_layers;
  std::optional<std::vector<std::string>> unused_modules;
};

// Modules a rank leaves out of one step's forward because routing sent them no token (an MoE
// expert with no token on that rank: sim/verify/moe_routing_check.h builds these). Added to the
// unused modules of that rank (every rank for -1) and iteration, on top of any override.
struct RoutedIdle {
  int rank = -1;
  int iteration = 0;
  std::vector<std::string> modules;
};

// A key of the user's config that hookstream reads no value from, and where it is.
struct ConfigKeyNote {
  std::string key;
  std::string where;  // "FILE:LINE"
  std::string note;   // the schema class it comes from, or why it is ignored
};

struct Plan {
  std::string source;  // the YAML file, for messages

  // --- the model -------------------------------------------------------------------------------
  std::string base_model;  // preset name, HF id that matches a preset, or path to config.json
  ModelConfig model;

  // --- axolotl keys ----------------------------------------------------------------------------
  int sequence_len = 2048;
  int micro_batch_size = 1;
  int gradient_accumulation_steps = 1;
  Adapter adapter = Adapter::None;
  int lora_r = 8;
  double lora_alpha = 16;
  // PEFT's target_modules as the user wrote them: a list of module-name suffixes, or (a YAML
  // string) one regular expression matched in full against each module name, or "all-linear".
  // Matched against the model by build_model_structure, with PEFT 0.21's rules.
  std::vector<std::string> lora_target_modules;
  bool lora_target_modules_regex = false;  // lora_target_modules: "a string" (one entry)
  // axolotl's lora_target_linear: every Linear's leaf name but the output head's, added to the list.
  bool lora_target_linear = false;
  // axolotl's lora_target_parameters (PEFT's target_parameters): "<module>.<parameter>" suffixes of
  // bare nn.Parameters to wrap in lora.ParamWrapper, e.g. fused MoE expert tensors.
  std::vector<std::string> lora_target_parameters;
  bool load_in_4bit = false;
  bool load_in_8bit = false;
  bool gradient_checkpointing = false;
  // HF's gradient_checkpointing_kwargs.use_reentrant; transformers defaults it to true.
  bool use_reentrant = true;
  bool activation_offloading = false;
  bool tiled_mlp = false;
  // hookstream.tiled_mlp_layers: the decoder layers whose MLP is tiled; unset with tiled_mlp = all.
  std::optional<std::vector<int>> tiled_mlp_layers;
  std::optional<int> tiled_mlp_num_shards;  // unset: ceil(sequence_len / hidden_size) as ALST does
  // HF Trainer: unset means false when gradient checkpointing is on, true otherwise.
  std::optional<bool> ddp_find_unused_parameters;
  std::optional<double> ddp_bucket_cap_mb;  // unset: DDP's 25 MiB default (and the 1 MiB first bucket)
  DeviceMap device_map = DeviceMap::PerRank;
  std::vector<std::string> unfrozen_parameters;  // axolotl: regexes of parameters left trainable
  // axolotl's chunked_cross_entropy: the loss is computed over `num_chunks` slices of the tokens, so
  // the full-vocabulary logits (and their fp32 upcast) exist for one slice at a time.
  // axolotl's LigerPlugin (src/axolotl/integrations/liger/plugin.py pre_model_load) with its keys
  // liger_rms_norm and liger_glu_activation (liger_swiglu, its older name): the model's RMSNorm
  // and SwiGLU MLP become Liger's, which save other tensors for backward (docs/memory-and-time.md
  // "Liger kernels"). Read from `plugins` and the two keys; in effect only with the plugin listed
  // and for the model types liger_applies() names.
  std::vector<std::string> plugins;
  bool liger_rms_norm = false;
  bool liger_glu_activation = false;
  bool liger_plugin() const;
  bool liger_applies() const;  // the model type is one whose Liger patch hookstream models
  bool liger_rms_norm_applied() const { return liger_rms_norm && liger_plugin() && liger_applies(); }
  bool liger_glu_applied() const { return liger_glu_activation && liger_plugin() && liger_applies(); }
  // axolotl's sample_packing: several samples packed into each sequence_len row (so every row is
  // full: micro_batch_size x sequence_len tokens) instead of rows padded to the batch's longest.
  bool sample_packing = false;
  // The attention kernel transformers runs, from axolotl's attn_implementation / flex_attention /
  // flash_attention / sdp_attention / eager_attention (ModelLoader._set_attention_config, that
  // precedence); unset: transformers' default, "sdpa". "eager" materialises [B, H, S, S] scores.
  std::string attn_implementation = "sdpa";
  // axolotl's `rl` (RLType), lowercased; "" for supervised fine-tuning. What TRL's trainer runs per
  // micro-step: rl_rows_factor() and rl_reference_forward() (sim/cost uses both).
  std::string rl;
  bool chunked_cross_entropy = false;
  int chunked_cross_entropy_num_chunks = 8;
  // hookstream.chunked_loss: which chunked loss runs. "logits" (default): axolotl's
  // chunked_cross_entropy, the lm_head writes the full bf16 logits and the fp32 upcast +
  // cross-entropy run one chunk at a time. "recompute_lm_head": the lm_head itself runs per chunk
  // and is recomputed in backward (`hookstream run`'s ChunkLossFunction, torchtune-style custom
  // code): the full logits never exist, at the cost of a second lm_head GEMM in backward.
  bool chunked_loss_recomputes_lm_head = false;
  // The key only applies to a chunked loss (without chunked_cross_entropy there is one chunk).
  bool loss_recomputes_lm_head() const { return chunked_cross_entropy && chunked_loss_recomputes_lm_head; }

  // axolotl's trust_remote_code: with an auto_map in config.json, transformers builds the model
  // from the repository's own modelling code (per-expert MoE modules, sim/inputs/architectures/
  // per_expert_layout.h).
  bool trust_remote_code = false;

  // --- training (hookstream run): axolotl / HF TrainingArguments names and defaults ------------
  // axolotl's `optimizer` (HF TrainingArguments' optim), as written; sim/cost/optimizer_states.h says
  // what it keeps per parameter. Unset: torch's AdamW.
  std::string optimizer = "adamw_torch";
  double learning_rate = 5e-5;      // HF TrainingArguments default
  double weight_decay = 0.0;        // HF TrainingArguments default (AdamW)
  int seed = 42;                    // HF TrainingArguments default
  std::optional<bool> bf16;         // unset or "auto": bf16 on a GPU, float32 on CPU
  std::optional<int> max_steps;     // optimizer steps `hookstream run` takes unless --steps

  // --- hookstream: section ---------------------------------------------------------------------
  int world_size = 1;
  int iterations = 3;  // optimizer steps simulated (each has gradient_accumulation_steps micro-steps)
  bool static_graph = false;
  bool gradient_as_bucket_view = false;
  // Which decoder layers run under checkpoint; empty with gradient_checkpointing = all layers.
  std::optional<std::vector<int>> checkpoint_layers;
  // Layers whose checkpointed function is run twice in one forward (PyTorch's CheckpointTwiceModule).
  std::vector<int> checkpoint_twice_layers;
  TiledBackward tiled_mlp_backward = TiledBackward::BackwardPerChunk;
  bool tiled_mlp_weights_as_inputs = false;  // the custom Function receives the MLP weights as inputs
  // DeepSpeed's TiledMLP (deepspeed/runtime/sequence_parallel/ulysses_sp.py) sets
  // param.ds_grad_is_ready = False on its compute params for every shard but the last, so ZeRO
  // buckets each parameter once. Unset: true under DeepSpeed (axolotl keeps DeepSpeed's TiledMLP when
  // the params carry ds_id / param_idx_in_group), false otherwise; DDP and FSDP ignore it.
  std::optional<bool> tiled_mlp_ds_grad_is_ready;
  // deepspeed.utils.set_z3_leaf_modules(model, [<the MLP block's class>]) before deepspeed.initialize,
  // as Mixtral/Qwen-MoE training scripts do with their sparse MoE block: under ZeRO-3 the block's
  // parameters are fetched together and reduced by one module backward hook that zero-fills the
  // gradients of parameters the block did not use (deepspeed/runtime/zero/stage3.py
  // create_reduce_and_remove_grad_hooks, reduce_leaf_module_grads). Ignored by other engines.
  bool z3_leaf_mlp = false;
  // The environment variable TORCH_DISTRIBUTED_DEBUG of the training processes: "OFF" (torch's
  // default when it is unset), "INFO" or "DETAIL". DETAIL wraps every process group in
  // ProcessGroupWrapper (c10d/ProcessGroupWrapper.cpp: each collective's op type, shapes and dtypes
  // are compared across ranks first) and turns on FSDP1's forward-order check
  // (fsdp/_exec_order_utils.py _check_order). Read by the FSDP1 model (docs/engines/fsdp1.md).
  std::string torch_distributed_debug = "OFF";
  // PEFT/HF `model.enable_input_require_grads()`: the embedding output requires grad even when the
  // embedding is frozen, so the first reentrant checkpoint has a backward.
  // Unset: true with an adapter (PEFT's PeftModel calls it when gradient checkpointing is on),
  // false otherwise.
  std::optional<bool> enable_input_require_grads;
  // Unset: trainable in a full fine-tune, frozen with an adapter.
  std::optional<bool> train_vision_tower;
  bool vision_inputs = true;        // the batch carries images (vision tower used in forward)
  // Image tokens per sample (after the patch merger; part of sequence_len), for the vision tower's
  // cost: 1024 is one 1024 x 1024 image for Qwen3-VL (16-pixel patches, 2 x 2 merge).
  int vision_tokens = 1024;
  // Modules present in the model but not used in forward (e.g. "lm_head", "model.layers.3.mlp").
  std::vector<std::string> unused_modules;
  // Streams, memory and time (see docs/plan-format.md): the offload stream protocol, by name (a
  // file in protocols/) or path; unset: "none" without activation_offloading, "double_buffer_events"
  // with it. The GPU, by name (a file in devices/) or path. Measured per-op durations, if any.
  std::optional<std::string> offload_protocol;
  // How the offloaded checkpoints' pinned CPU slots are allocated. false ("caching"): PyTorch's
  // CachingHostAllocator, as torch.empty(pin_memory=True) and save_on_cpu / torchtune's
  // OffloadActivations (axolotl's activation_offloading) get them, each slot rounded up to a power
  // of two (aten/src/ATen/core/CachingHostAllocator.h, c10::llvm::PowerOf2Ceil). true ("exact"):
  // `hookstream run` pins each slot at its own size (cudaHostAlloc), which a 2.5 GiB slot at 320K
  // tokens needs to fit 32 layers in a 128 GiB host (80 GiB, not 128).
  bool pinned_slots_exact = false;
  // hookstream.offload_layers: the checkpointed layers whose input goes to a pinned CPU slot; the
  // other checkpointed layers keep theirs on the GPU (plain checkpointing). Unset with
  // activation_offloading = every checkpointed layer, as axolotl's offloading does. Partial offload
  // trades GPU memory for host memory: at 448K tokens the 32 offloaded inputs of Llama-8B need
  // 112 GiB of pinned memory, more than a 128 GiB host can pin beside the process.
  std::optional<std::vector<int>> offload_layers;
  std::string gpu = "H100-SXM";
  std::optional<std::string> calibration;
  // hookstream run's inputs (paths relative to the plan's folder): a safetensors file of weights
  // (unset: random initialisation from `seed`), a file of pre-tokenized ids (unset: synthetic
  // tokens from `seed`); docs/run.md gives both formats.
  std::optional<std::string> weights;
  std::optional<std::string> data;
  std::map<int, PlanOverride> rank_overrides;       // key: rank
  std::map<int, PlanOverride> iteration_overrides;  // key: iteration (0-based)
  std::map<int, PlanOverride> micro_step_overrides;  // key: micro-step of every iteration (0-based)
  // The PyTorch whose DDP is modelled (hookstream.torch_version, --torch-version).
  TorchVersion torch_version = newest_torch_version();
  // The transformers that builds the model (hookstream.transformers_version,
  // --transformers-version): "MAJOR.MINOR". 5.x stores MoE experts as fused [E, ...] tensors, 4.x
  // as one module per expert (sim/inputs/architectures/per_expert_layout.h).
  std::string transformers_version = "5.17";
  // Steps where routing leaves an expert without tokens (the adverse cases of the MoE routing check).
  std::vector<RoutedIdle> routed_idle;
  // torch.compile of the DDP model (axolotl's torch_compile*, hookstream.optimize_ddp,
  // hookstream.compiled_autograd): which DDP reducer runs (sim/sync/ddp_python_reducer/).
  TorchCompile torch_compile;

  // --- what the config says beyond the DDP model (docs/plan-format.md) -------------------------
  // The engine the plan runs on (DDP, FSDP1/2, DeepSpeed ZeRO) and other parallelism: from the
  // plan's deepspeed/fsdp_config/fsdp_version/..._parallel_size keys and --accelerate-config.
  Engine engine;
  // Where the world size came from ("--world-size", "--nnodes x --nproc-per-node", "FILE:LINE"
  // for hookstream.world_size, "ACCELERATE: num_processes"); empty: given nowhere (world_size 1).
  std::string world_size_from;
  std::vector<ConfigKeyNote> not_modelled_keys;  // axolotl keys whose value may change the answer
  std::vector<ConfigKeyNote> no_effect_keys;     // axolotl keys that cannot change a training step
  std::vector<ConfigKeyNote> ignored_keys;       // not in axolotl's schema: axolotl drops them too

  // --- derived helpers -------------------------------------------------------------------------
  bool find_unused_parameters() const {
    return ddp_find_unused_parameters.value_or(!gradient_checkpointing);
  }
  bool input_require_grads() const {
    return enable_input_require_grads.value_or(adapter != Adapter::None);
  }
  std::string offload_protocol_name() const {
    return offload_protocol.value_or(activation_offloading ? "double_buffer_events" : "none");
  }
  // eager_attention_forward (transformers' modeling_llama.py): softmax(QK^T) in fp32, cast to the
  // model dtype, both saved for backward; sdpa/flash/flex keep O(S) state (a logsumexp per head).
  bool eager_attention() const { return attn_implementation == "eager"; }
  // Preference training runs chosen and rejected through the policy as one concatenated batch
  // (TRL trl/trainer/dpo_trainer.py DPOTrainer.concatenated_forward; CPOTrainer for axolotl's orpo
  // and simpo), one grad-enabled call of the (DDP-wrapped) model per micro-step: twice the rows.
  bool rl_pairs() const { return rl == "dpo" || rl == "ipo" || rl == "orpo" || rl == "simpo"; }
  int rows_per_micro_step() const { return micro_batch_size * (rl_pairs() ? 2 : 1); }
  // DPO/IPO also run the reference model under torch.no_grad() on the same rows
  // (DPOTrainer.compute_ref_log_probs): with an adapter the policy itself inside
  // null_ref_context() (PeftModel.disable_adapter), else a frozen copy of the base model.
  bool rl_reference_forward() const { return rl == "dpo" || rl == "ipo"; }
  bool rl_reference_copy() const { return rl_reference_forward() && adapter == Adapter::None; }
  // The rl values whose step hookstream models (the others stay in the not-modelled list).
  bool rl_modelled() const { return rl.empty() || rl_pairs(); }
  bool vision_tower_trainable() const { return train_vision_tower.value_or(adapter == Adapter::None); }
  bool layer_checkpointed(int layer) const;
  // Checkpointed, with activation_offloading, and in offload_layers (or it unset): its input goes to
  // a pinned CPU slot through the offload protocol.
  bool layer_offloaded(int layer) const;
  bool layer_tiled(int layer) const;  // tiled_mlp on and the layer in tiled_mlp_layers (or it unset)
  // Per position. `micro_step` -1 leaves micro_step_overrides out (the memory and time models,
  // which cost one representative micro-step); the DDP simulation and the oracles pass it.
  int checkpoint_count(int layer, int rank, int iteration, int micro_step = -1) const;  // 0, 1 or 2
  int sequence_len_for(int rank, int iteration, int micro_step = -1) const;
  int tiled_shards_for(int rank, int iteration, int micro_step = -1) const;  // 1 when tiled_mlp is off
  std::vector<std::string> unused_modules_for(int rank, int iteration, int micro_step = -1) const;
  int transformers_major() const;  // 4 or 5
};

struct LoadOptions {
  std::optional<std::string> model_path;  // --model CONFIG.json overrides base_model
  std::optional<int> world_size;          // --world-size
  std::optional<int> nnodes;              // torchrun's --nnodes
  std::optional<int> nproc_per_node;      // torchrun's --nproc-per-node
  std::optional<std::string> accelerate_config;  // --accelerate-config FILE
  std::vector<std::string> set;           // --set key=value (dotted keys, YAML values)
  std::optional<std::string> torch_version;  // --torch-version (replaces hookstream.torch_version)
  std::optional<std::string> transformers_version;  // --transformers-version (replaces hookstream.transformers_version)
};

// "4.57.1" -> "4.57"; throws InputError (at `where`) unless it is a 4.x or 5.x version.
std::string parse_transformers_version(const std::string& text, const std::string& where);

// Reads, overrides and validates a plan. Throws InputError (one line: file, key or line, expected).
Plan load_plan(const std::string& path, const LoadOptions& options = {});
Plan parse_plan(const std::string& yaml_text, const std::string& source,
                const LoadOptions& options = {});
// `key` (dotted) as the plan text spells that setting: another spelling the loader reads as the
// same key (fsdp_config's `fsdp_` prefix, `version` for fsdp_version, a DeepSpeed mapping's
// `stage3_` aliases) when the text uses it, else `key`. Fixes are written in it, so a patch edits
// the user's key instead of adding a duplicate; --set does the same.
// With `options`: a `deepspeed.*` key while `deepspeed:` names a JSON file is spelled as that file
// spells it, and an `fsdp_config.*` key of a plan whose engine comes from --accelerate-config as
// the accelerate file spells it (`fsdp_` prefixed when absent there).
std::string key_as_written(const std::string& yaml_text, const std::string& key, const LoadOptions& options = {});
// The spelling of key_as_written and the file holding that setting: "" for the plan itself, else
// the DeepSpeed JSON path or the accelerate config path (a fix edits that file; --set does too).
struct SettingLocation {
  std::string key;
  std::string file;
};
SettingLocation setting_as_written(const std::string& yaml_text, const std::string& key, const LoadOptions& options = {});
// Renders the plan back to YAML (only keys that differ from defaults, stable order).
std::string to_yaml(const Plan& plan);
// The set of keys a plan accepts (dotted), for --set validation and "did you mean".
const std::vector<std::string>& known_plan_keys();
// The top-level axolotl keys the loader reads a value from; axolotl/keys.json marks exactly these
// "modelled" (tests/sim/axolotl_keys_test.cc).
std::vector<std::string> modelled_axolotl_keys();

}  // namespace hookstream
