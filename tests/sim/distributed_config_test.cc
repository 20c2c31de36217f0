// Distributed settings from where users put them: axolotl's deepspeed/fsdp_config/fsdp_version and
// parallel sizes, a DeepSpeed JSON, an accelerate config, --world-size / --nnodes x
// --nproc-per-node; the engine they decide; contradictions and malformed files as one line.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/fsdp1/fsdp1_model.h"
#include "sim/sync/fsdp2/fsdp2_units.h"
#include "tests/sim/plan_text.h"
#include "tests/temp_dir.h"

namespace hookstream {
namespace {

using test::parse;
using test::parse_error;

std::string write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

const std::string kPlan = "base_model: tiny-llama\nmicro_batch_size: 2\ngradient_accumulation_steps: 4\n";

}  // namespace

TEST_CASE("a plan with no distributed keys runs on DDP, which is modelled", "[plan][engine]") {
  const Plan plan = parse(kPlan);
  CHECK(plan.engine.kind == EngineKind::Ddp);
  CHECK(plan.engine.modelled());
  CHECK(plan.world_size == 1);
  CHECK(plan.world_size_from.empty());
}

TEST_CASE("fsdp_config and fsdp_version decide FSDP1 or FSDP2 as axolotl does", "[plan][engine]") {
  const Plan v2 = parse(kPlan + "fsdp_version: 2\nfsdp_config:\n  offload_params: true\n");
  CHECK(v2.engine.kind == EngineKind::Fsdp2);
  CHECK(v2.engine.modelled());  // sim/sync/fsdp2/ (offload changes memory, not the hook schedule)
  CHECK(v2.engine.name() == "FSDP2");
  CHECK(v2.engine.decided_by.at(0) == "fsdp_version: 2 (plan.yaml:4)");
  CHECK(v2.engine.settings.at(0) == "fsdp_config.offload_params: true");
  // fsdp_config.fsdp_version (or its alias `version`) when the top-level key is absent.
  CHECK(parse(kPlan + "fsdp_config:\n  version: 2\n").engine.kind == EngineKind::Fsdp2);
  CHECK(parse(kPlan + "fsdp_config:\n  fsdp_version: 2\n").engine.kind == EngineKind::Fsdp2);
  // Otherwise FSDP1 (axolotl's _resolve_fsdp_version default), also for the old `fsdp:` list.
  const Plan v1 = parse(kPlan + "fsdp_config:\n  fsdp_offload_params: true\n");
  CHECK(v1.engine.kind == EngineKind::Fsdp1);
  CHECK(v1.engine.modelled());  // sim/sync/fsdp1/ (a full fine-tune with transformer wrapping; offload changes memory, not hooks)
  CHECK(v1.engine.decided_by.at(0) == "fsdp_config (plan.yaml:4), FSDP version 1 by axolotl's default");
  CHECK(parse(kPlan + "fsdp:\n  - full_shard\n  - auto_wrap\n").engine.kind == EngineKind::Fsdp1);
  CHECK(parse(kPlan + "fsdp:\nfsdp_config:\n").engine.modelled());  // both unset
  CHECK(parse_error(kPlan + "fsdp_version: 3\n") == "plan.yaml:4: key \"fsdp_version\": expected an integer in [1, 2], got \"3\"");
}

TEST_CASE("FSDP1 with LoRA is modelled (PEFT's wrap policy), QLoRA's packed 4-bit weights too", "[plan][engine][fsdp1]") {
  const std::string lora = kPlan + "adapter: lora\nlora_target_modules: [q_proj]\nfsdp_config:\n  use_orig_params: true\n";
  const Plan plan = parse(lora);
  CHECK(plan.engine.kind == EngineKind::Fsdp1);
  CHECK(plan.engine.fsdp.peft_wrap_policy);
  CHECK(plan.engine.modelled());
  CHECK(fsdp1_not_modelled_reason(plan.engine.fsdp).empty());
  // Every adapter unit is a LoRA A/B Linear, nested in its layer; the layer's FlatParameter is frozen.
  const ModelStructure structure = build_model_structure(plan);
  int adapters = 0;
  for (const Fsdp1Unit& u : fsdp1_units(plan, structure)) {
    if (u.adapter) {
      ++adapters;
      CHECK(u.params.size() == 1);
      CHECK(u.accumulator == u.params.front());
      CHECK(structure.parameters[static_cast<size_t>(u.params.front())].adapter);
    } else {
      CHECK(u.accumulator == -1);  // frozen layers and root
    }
  }
  CHECK(adapters == 2 * static_cast<int>(structure.layers.size()));  // q_proj's lora_A and lora_B per layer
  const Plan qlora = parse(kPlan + "adapter: qlora\nload_in_4bit: true\nlora_target_modules: [q_proj]\nfsdp_config:\n  use_orig_params: false\n");
  CHECK(qlora.engine.modelled());
  CHECK(fsdp1_not_modelled_reason(qlora.engine.fsdp).empty());
  // Each 4-bit base weight flattens as its packed bnb_4bit_quant_storage (bf16) tensor: (n + 1) / 4
  // elements (real FSDP1 + bitsandbytes 0.50.2, tests/oracles/fsdp1_qlora_oracle_test.cc).
  const ModelStructure qlora_structure = build_model_structure(qlora);
  int packed = 0;
  for (const Parameter& p : qlora_structure.parameters) {
    if (!p.quantized) continue;
    const Fsdp1FlatElement element = fsdp1_flat_element(qlora, p);
    CHECK(element.numel == (p.numel() + 1) / 4);
    CHECK(element.dtype == DType::BFloat16);
    CHECK_FALSE(element.integer);
    ++packed;
  }
  CHECK(packed > 0);
  // unfrozen_parameters: each unfrozen leaf with a trainable weight is a unit of its own (PEFT's
  // lambda policy), which the forward graph calls (ModuleKind::Leaf): modelled.
  const Plan unfrozen = parse(lora + "unfrozen_parameters:\n  - model\\.norm\n");
  CHECK(unfrozen.engine.modelled());
  const ModelStructure unfrozen_structure = build_model_structure(unfrozen);
  int norm_units = 0;
  for (const Fsdp1Unit& u : fsdp1_units(unfrozen, unfrozen_structure)) {
    if (u.adapter && u.name.size() >= 10 && u.name.compare(u.name.size() - 10, 10, "model.norm") == 0) {
      ++norm_units;
      CHECK(u.accumulator == u.params.front());
    }
  }
  CHECK(norm_units == 1);
  // lora_target_parameters: a ParamWrapper reads its lora_A/lora_B without calling them. One expert
  // tensor is modelled (its first forward raises on every rank: tests/oracles/
  // fsdp1_param_wrapper_oracle_test.cc); nested wrappers (several entries) and 2-D targets are not.
  CHECK(parse(lora + "lora_target_parameters: [mlp.experts.gate_up_proj]\n").engine.modelled());
  for (const std::string& targets : {std::string("[mlp.experts.gate_up_proj, mlp.experts.down_proj]"), std::string("[mlp.gate.weight]")}) {
    const Plan wrapped = parse(lora + "lora_target_parameters: " + targets + "\n");
    INFO(targets);
    CHECK_FALSE(wrapped.engine.modelled());
    CHECK(fsdp1_not_modelled_reason(wrapped.engine.fsdp).find("ParamWrapper") != std::string::npos);
  }
  // A full fine-tune never takes PEFT's policy.
  CHECK_FALSE(parse(kPlan + "fsdp_config:\n  use_orig_params: true\n").engine.fsdp.peft_wrap_policy);
}

TEST_CASE("QLoRA under FSDP2 is LoRA over frozen base weights, and the result says no oracle checked it", "[plan][engine][fsdp2]") {
  const std::string head = kPlan + "lora_target_modules: [q_proj]\nfsdp_version: 2\nfsdp_config:\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n";
  const Plan qlora = parse(head + "adapter: qlora\nload_in_4bit: true\n");
  CHECK(qlora.engine.modelled());
  const ModelStructure structure = build_model_structure(qlora);
  for (const Parameter& p : structure.parameters) {
    if (p.quantized) CHECK_FALSE(p.trainable);  // Params4bit: no AccumulateGrad, no reduce-scatter
  }
  const Fsdp2Units units = fsdp2_units(qlora, structure);
  REQUIRE(units.notes.size() == 1);
  CHECK(units.notes[0].find("bitsandbytes-quantized base weights (load_in_4bit) under FSDP2") != std::string::npos);
  CHECK(units.notes[0].find("not checked against real fully_shard") != std::string::npos);
  // Plain LoRA: no such note.
  const Plan lora = parse(head + "adapter: lora\n");
  CHECK(fsdp2_units(lora, build_model_structure(lora)).notes.empty());
}

TEST_CASE("tensor, context and expert parallelism are not modelled, even on DDP", "[plan][engine]") {
  const Plan plan = parse(kPlan + "context_parallel_size: 4\ntensor_parallel_size: 1\n");
  CHECK(plan.engine.kind == EngineKind::Ddp);
  CHECK_FALSE(plan.engine.modelled());
  CHECK(plan.engine.name() == "DDP with context_parallel_size: 4");
  CHECK(parse(kPlan + "tensor_parallel_size: 1\n").engine.modelled());
}

TEST_CASE("a DeepSpeed JSON: stage, offload, and 'auto' or matching batch values", "[plan][engine]") {
  hookstream::test::TempDir dir("hookstream-deepspeed-test-" + std::to_string(getpid()));
  const std::string zero3 = write(dir / "zero3.json", R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
    "offload_optimizer": {"device": "none"}}, "gradient_accumulation_steps": "auto", "train_micro_batch_size_per_gpu": 2})");
  const Plan plan = parse(kPlan + "deepspeed: " + zero3 + "\n");
  CHECK(plan.engine.kind == EngineKind::DeepSpeed);
  CHECK(plan.engine.name() == "DeepSpeed ZeRO-3");
  REQUIRE(plan.engine.deepspeed);
  CHECK(plan.engine.deepspeed->offload_param == "cpu");
  CHECK(plan.engine.deepspeed->offload_optimizer.empty());
  CHECK(plan.engine.settings.at(0) == "zero_optimization.stage: 3 (" + zero3 + ")");
  // An inline mapping is the JSON itself (axolotl's `deepspeed: str | dict`).
  CHECK(parse(kPlan + "deepspeed:\n  zero_optimization:\n    stage: 2\n").engine.name() == "DeepSpeed ZeRO-2");
  // zero_optimization without a stage: DeepSpeed's default stage 0, still DeepSpeed's engine, not DDP.
  CHECK(parse(kPlan + "deepspeed:\n  zero_optimization:\n    overlap_comm: true\n").engine.name() == "DeepSpeed ZeRO-0");
  // No zero_optimization: transformers' TrainingArguments hands the JSON to accelerate's
  // DeepSpeedPlugin, which refuses it (tests/oracles/deepspeed_resolve_oracle_test.cc).
  CHECK(parse_error(kPlan + "deepspeed:\n  bf16:\n    enabled: true\n") ==
        "plan.yaml:4: key \"deepspeed\": no \"zero_optimization\": accelerate's DeepSpeedPlugin refuses a DeepSpeed config without it "
        "(axolotl's `deepspeed:` reaches it through transformers' TrainingArguments) (\"Please specify the ZeRO optimization config in the "
        "DeepSpeed config.\")");
  // "auto": stage under axolotl fails in the plugin; offload devices are the plugin's "none";
  // overlap_comm / contiguous_gradients are dropped by DeepSpeed (its defaults apply).
  const std::string stage_auto = write(dir / "stage_auto.json", R"({"zero_optimization": {"stage": "auto"}})");
  CHECK(parse_error(kPlan + "deepspeed: " + stage_auto + "\n") ==
        stage_auto + ": key \"zero_optimization.stage\": \"auto\" does not resolve under axolotl: its setup_deepspeed_env exports it as "
                     "ACCELERATE_DEEPSPEED_ZERO_STAGE=auto and accelerate's DeepSpeedPlugin fails on int('auto') (\"ValueError: invalid literal "
                     "for int() with base 10: 'auto'\"); set 0, 1, 2 or 3");
  const std::string flags = write(dir / "flags.json", R"({"zero_optimization": {"stage": 3, "overlap_comm": "auto", "contiguous_gradients": "auto",
    "offload_param": {"device": "auto"}, "offload_optimizer": {"device": "auto"}}})");
  const Plan autos = parse(kPlan + "deepspeed: " + flags + "\n");
  REQUIRE(autos.engine.deepspeed);
  CHECK(autos.engine.deepspeed->overlap_comm_or_default());  // stage 3's default
  CHECK_FALSE(autos.engine.deepspeed->contiguous_gradients.has_value());  // DeepSpeed's default (true)
  CHECK(autos.engine.deepspeed->offload_param.empty());
  CHECK(autos.engine.deepspeed->offload_optimizer.empty());

  // transformers refuses numbers that differ from the TrainingArguments.
  const std::string mismatch = write(dir / "gas.json", R"({"gradient_accumulation_steps": 8, "zero_optimization": {"stage": 2}})");
  CHECK(parse_error(kPlan + "deepspeed: " + mismatch + "\n") ==
        mismatch + ": key \"gradient_accumulation_steps\": 8 contradicts gradient_accumulation_steps 4 (plan.yaml:3); "
                   "transformers refuses a mismatch: set it to \"auto\" or to the same value");
  const std::string total = write(dir / "total.json", R"({"train_batch_size": 64, "zero_optimization": {"stage": 2}})");
  LoadOptions eight;
  eight.world_size = 8;
  CHECK(parse(kPlan + "deepspeed: " + total + "\n", eight).engine.kind == EngineKind::DeepSpeed);  // 2 x 4 x 8
  eight.world_size = 4;
  CHECK(parse_error(kPlan + "deepspeed: " + total + "\n", eight).find("key \"train_batch_size\": 64 contradicts") != std::string::npos);

  // Missing, malformed, wrong types: one line naming the file and key.
  CHECK(parse_error(kPlan + "deepspeed: no/such.json\n").rfind("plan.yaml:4: key \"deepspeed\": DeepSpeed config \"no/such.json\" not found; "
                                                              "axolotl opens it relative to the working directory", 0) == 0);
  const std::string broken = write(dir / "broken.json", "{\n  \"zero_optimization\": {\"stage\": 3,}\n}\n");
  CHECK(parse_error(kPlan + "deepspeed: " + broken + "\n").rfind(broken + ":2: malformed JSON", 0) == 0);
  const std::string stage = write(dir / "stage.json", R"({"zero_optimization": {"stage": "three"}})");
  CHECK(parse_error(kPlan + "deepspeed: " + stage + "\n") == stage + ": key \"zero_optimization.stage\": expected 0, 1, 2, 3 or \"auto\", got \"three\"");
  CHECK(parse_error(kPlan + "deepspeed: " + zero3 + "\nfsdp_config:\n  offload_params: true\n") ==
        "plan.yaml:4: key \"deepspeed\": deepspeed and fsdp_config (plan.yaml:5) cannot be used together, as axolotl says");
}

TEST_CASE("world size from --world-size, torchrun's flags or an accelerate config, contradictions are errors", "[plan][engine]") {
  LoadOptions torchrun;
  torchrun.nnodes = 2;
  torchrun.nproc_per_node = 8;
  const Plan plan = parse(kPlan, torchrun);
  CHECK(plan.world_size == 16);
  CHECK(plan.world_size_from == "--nnodes 2 x --nproc-per-node 8");
  torchrun.world_size = 8;
  CHECK(parse_error(kPlan, torchrun) == "--world-size: 8 contradicts --nnodes 2 x --nproc-per-node 8 = 16");
  LoadOptions half;
  half.nnodes = 2;
  CHECK(parse_error(kPlan, half) == "--nnodes: expected both --nnodes and --nproc-per-node (torchrun's world size is their product)");
  CHECK(parse(kPlan + "hookstream:\n  world_size: 4\n").world_size_from == "plan.yaml:5");
}

TEST_CASE("an accelerate config: distributed_type, num_processes, fsdp_config, another version is an error", "[plan][engine]") {
  hookstream::test::TempDir dir("hookstream-accelerate-test-" + std::to_string(getpid()));
  LoadOptions options;
  options.accelerate_config = write(dir / "fsdp.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\n"
                                                       "fsdp_config:\n  fsdp_version: 2\n  fsdp_offload_params: false\n"
                                                       "mixed_precision: bf16\nnum_machines: 2\nnum_processes: 16\n");
  const Plan plan = parse(kPlan, options);
  CHECK(plan.engine.kind == EngineKind::Fsdp2);
  CHECK(plan.engine.decided_by.at(0) == "distributed_type: FSDP (" + *options.accelerate_config + ")");
  CHECK(plan.world_size == 16);
  CHECK(plan.world_size_from == *options.accelerate_config + ": num_processes");
  options.world_size = 8;
  CHECK(parse_error(kPlan, options) == *options.accelerate_config + ": key \"num_processes\": 16 contradicts --world-size = 8");
  options.world_size.reset();
  // The plan says DeepSpeed, the accelerate config FSDP.
  CHECK(parse_error(kPlan + "deepspeed:\n  zero_optimization:\n    stage: 2\n", options) ==
        *options.accelerate_config + ": key \"distributed_type\": FSDP contradicts the plan's deepspeed (plan.yaml:4)");
  // MULTI_GPU is plain DDP.
  options.accelerate_config = write(dir / "ddp.yaml", "distributed_type: MULTI_GPU\nnum_processes: 4\n");
  const Plan ddp = parse(kPlan, options);
  CHECK(ddp.engine.modelled());
  CHECK(ddp.world_size == 4);
  // A key accelerate 1.15 does not know: written by another accelerate version.
  options.accelerate_config = write(dir / "old.yaml", "distributed_type: MULTI_GPU\nnum_processes: 4\nfsdp_sharding_strategy: 1\n");
  CHECK(parse_error(kPlan, options) == *options.accelerate_config +
                                           ":3: unknown key \"fsdp_sharding_strategy\": not a key of accelerate 1.15's config (ClusterConfig), "
                                           "so another accelerate version wrote this file");
  options.accelerate_config = write(dir / "none.yaml", "num_processes: 4\n");
  CHECK(parse_error(kPlan, options).find("key \"distributed_type\": missing") != std::string::npos);
  options.accelerate_config = (dir / "absent.yaml").string();
  CHECK(parse_error(kPlan, options).rfind("--accelerate-config: cannot read the accelerate config", 0) == 0);
}


TEST_CASE("an accelerate config of distributed_type DEEPSPEED: its JSON or its inline fields, as accelerate's DeepSpeedPlugin reads them", "[plan][engine][zero]") {
  hookstream::test::TempDir dir("hookstream-accelerate-ds-test-" + std::to_string(getpid()));
  const std::string zero3 = write(dir / "zero3.json", R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
    "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}})");
  const std::string head = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n";
  LoadOptions options;

  // deepspeed_config_file: the JSON decides (what `accelerate config` writes: mixed_precision null).
  options.accelerate_config = write(dir / "file.yaml", head + "deepspeed_config:\n  deepspeed_config_file: " + zero3 +
                                                           "\n  zero3_init_flag: true\nmixed_precision: null\n");
  const Plan plan = parse(kPlan, options);
  CHECK(plan.engine.name() == "DeepSpeed ZeRO-3");
  REQUIRE(plan.engine.deepspeed);
  CHECK(plan.engine.deepspeed->file == zero3);
  CHECK(plan.engine.deepspeed->offload_param == "cpu");
  CHECK(plan.engine.decided_by.at(0) == "distributed_type: DEEPSPEED (" + *options.accelerate_config + "), deepspeed_config_file: " + zero3);
  CHECK(plan.world_size == 2);
  CHECK(std::find(plan.engine.settings.begin(), plan.engine.settings.end(), "zero3_init_flag: true (" + *options.accelerate_config + ":6)") !=
        plan.engine.settings.end());
  // "none" is the questionnaire's "no file": the inline fields apply.
  options.accelerate_config = write(dir / "none.yaml", head + "deepspeed_config:\n  deepspeed_config_file: none\n  zero_stage: 1\n");
  CHECK(parse(kPlan, options).engine.name() == "DeepSpeed ZeRO-1");

  // The JSON beside fields it would ignore: DeepSpeedPlugin._deepspeed_config_checks raises.
  options.accelerate_config = write(dir / "both.yaml", head + "deepspeed_config:\n  deepspeed_config_file: " + zero3 + "\n  zero_stage: 2\n");
  CHECK(parse_error(kPlan, options).rfind(*options.accelerate_config + ":6: key \"deepspeed_config.zero_stage\": accelerate refuses it beside the "
                                                                       "DeepSpeed config " + zero3 + " (DeepSpeedPlugin: \"When using `deepspeed_config_file`",
                                          0) == 0);
  options.accelerate_config = write(dir / "precision.yaml", head + "deepspeed_config:\n  deepspeed_config_file: " + zero3 + "\nmixed_precision: bf16\n");
  CHECK(parse_error(kPlan, options).rfind(*options.accelerate_config + ":6: key \"mixed_precision\": accelerate refuses it", 0) == 0);
  // The plan's own deepspeed: is a JSON for the plugin too.
  options.accelerate_config = write(dir / "inline-beside.yaml", head + "deepspeed_config:\n  offload_optimizer_device: cpu\n");
  CHECK(parse_error(kPlan + "deepspeed: " + zero3 + "\n", options)
            .rfind(*options.accelerate_config + ":5: key \"deepspeed_config.offload_optimizer_device\": accelerate refuses it beside the DeepSpeed config " + zero3,
                   0) == 0);
  options.accelerate_config = write(dir / "plain.yaml", head + "deepspeed_config:\n  zero3_init_flag: false\n");
  const Plan beside = parse(kPlan + "deepspeed: " + zero3 + "\n", options);
  CHECK(beside.engine.name() == "DeepSpeed ZeRO-3");
  CHECK(beside.engine.decided_by.size() == 2);

  // A JSON that is missing or has no zero_optimization.
  options.accelerate_config = write(dir / "missing.yaml", head + "deepspeed_config:\n  deepspeed_config_file: no/such.json\n");
  CHECK(parse_error(kPlan, options).rfind(*options.accelerate_config + ":5: key \"deepspeed_config.deepspeed_config_file\": DeepSpeed config \"no/such.json\" "
                                                                       "not found; accelerate opens it relative to the working directory",
                                          0) == 0);
  const std::string bare = write(dir / "bare.json", R"({"bf16": {"enabled": true}})");
  options.accelerate_config = write(dir / "bare.yaml", head + "deepspeed_config:\n  deepspeed_config_file: " + bare + "\n");
  CHECK(parse_error(kPlan, options) == bare + ": no \"zero_optimization\": accelerate's DeepSpeedPlugin refuses a DeepSpeed config without it "
                                              "(\"Please specify the ZeRO optimization config in the DeepSpeed config.\")");
  // Stage "auto" in a deepspeed_config_file: the plugin fills its own default, 2 (nothing sets
  // ACCELERATE_DEEPSPEED_ZERO_STAGE: accelerate refuses zero_stage beside the file).
  const std::string stage_auto = write(dir / "stage_auto.json", R"({"zero_optimization": {"stage": "auto"}})");
  options.accelerate_config = write(dir / "stage_auto.yaml", head + "deepspeed_config:\n  deepspeed_config_file: " + stage_auto + "\n");
  const Plan filled = parse(kPlan, options);
  CHECK(filled.engine.name() == "DeepSpeed ZeRO-2");
  CHECK(filled.engine.settings.at(0) == "zero_optimization.stage: 2 (\"auto\": accelerate's DeepSpeedPlugin default) (" + stage_auto + ")");

  // Inline fields: the plugin's defaults where unset (zero_stage 2), offload devices, accumulation.
  options.accelerate_config = write(dir / "inline.yaml", head + "deepspeed_config:\n  zero3_init_flag: false\n");
  const Plan two = parse(kPlan, options);
  CHECK(two.engine.name() == "DeepSpeed ZeRO-2");
  CHECK(two.engine.deepspeed->file == *options.accelerate_config);
  options.accelerate_config = write(dir / "inline3.yaml", head + "deepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n"
                                                                 "  offload_param_device: nvme\n  gradient_accumulation_steps: 4\n");
  const Plan three = parse(kPlan, options);
  CHECK(three.engine.name() == "DeepSpeed ZeRO-3");
  CHECK(three.engine.deepspeed->offload_optimizer == "cpu");
  CHECK(three.engine.deepspeed->offload_param == "nvme");
  options.accelerate_config = write(dir / "gas.yaml", head + "deepspeed_config:\n  gradient_accumulation_steps: 8\n");
  CHECK(parse_error(kPlan, options) == *options.accelerate_config + ":5: key \"deepspeed_config.gradient_accumulation_steps\": 8 contradicts "
                                                                    "gradient_accumulation_steps 4 (plan.yaml:3); transformers refuses a mismatch: set the same value");
  options.accelerate_config = write(dir / "stage5.yaml", head + "deepspeed_config:\n  zero_stage: 5\n");
  CHECK(parse_error(kPlan, options) == *options.accelerate_config + ":5: key \"deepspeed_config.zero_stage\": expected 0, 1, 2 or 3, got 5");
  options.accelerate_config = write(dir / "device.yaml", head + "deepspeed_config:\n  offload_param_device: gpu\n");
  CHECK(parse_error(kPlan, options) == *options.accelerate_config + ":5: key \"deepspeed_config.offload_param_device\": expected none, cpu or nvme, got \"gpu\"");
  // --set of a DeepSpeed setting edits the inline field; one accelerate cannot hold inline is refused.
  options.accelerate_config = write(dir / "inline-set.yaml", head + "deepspeed_config:\n  zero_stage: 2\n");
  options.set = {"deepspeed.zero_optimization.stage=1"};
  CHECK(parse(kPlan, options).engine.name() == "DeepSpeed ZeRO-1");
  options.set = {"deepspeed.zero_optimization.overlap_comm=false"};
  CHECK(parse_error(kPlan, options) == *options.accelerate_config + ": key \"zero_optimization.overlap_comm\": accelerate's inline deepspeed_config has no "
                                                                    "field for it; it needs a DeepSpeed JSON named by deepspeed_config.deepspeed_config_file");
  // --set of a DeepSpeed setting edits the JSON deepspeed_config_file names (in memory).
  options.accelerate_config = write(dir / "file-set.yaml", head + "deepspeed_config:\n  deepspeed_config_file: " + zero3 + "\n");
  options.set = {"deepspeed.zero_optimization.stage=2"};
  CHECK(parse(kPlan, options).engine.name() == "DeepSpeed ZeRO-2");
}

}  // namespace hookstream
