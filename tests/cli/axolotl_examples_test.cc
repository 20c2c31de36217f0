// axolotl's own example configs (../shared/corpora/axolotl-examples, 70 files at axolotl commit
// 067b021c8) as a user runs them: every one gets a verdict (exit 0 or 1, with the report), FSDP and
// DeepSpeed ones the explicit engine_not_modelled result (FSDP1 full fine-tunes and LoRA: an FSDP1 verdict;
// the corpus's FSDP1 adapters are all on bitsandbytes-quantized weights: not modelled, named), DDP ones a real DDP verdict.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "tests/cli/run_binary.h"
#include "tests/temp_dir.h"

namespace {
namespace fs = std::filesystem;
using hookstream::testing::run_command;

std::string corpus(const std::string& relative) { return std::string(HOOKSTREAM_SOURCE_DIR) + "/../shared/corpora/" + relative; }
const std::string kModel = corpus("hf-configs/Llama-3.1-8B.json");

// Runs `hookstream ARGS` with `dir` as the working directory.
hookstream::testing::BinaryRun verify_in(const fs::path& dir, const std::string& args) {
  return run_command("cd '" + dir.string() + "' && " + std::string(HOOKSTREAM_BINARY) + " verify " + args);
}

// A working directory laid out like an axolotl checkout's root, where axolotl opens `deepspeed:`
// paths: deepspeed_configs/ with a ZeRO-3 config offloading parameters and optimizer state to the
// CPU (what the name of the file mixtral_22.yml names says), written by this test.
void write_deepspeed_configs(const fs::path& root) {
  fs::create_directories(root / "deepspeed_configs");
  std::ofstream(root / "deepspeed_configs/zero3_bf16_cpuoffload_all.json")
      << R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
             "offload_param": {"device": "cpu", "pin_memory": true}},
             "bf16": {"enabled": true}, "gradient_accumulation_steps": "auto",
             "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"})";
}
}  // namespace

TEST_CASE("all of axolotl's example configs get a verdict", "[cli][axolotl]") {
  const fs::path examples = corpus("axolotl-examples");
  REQUIRE(fs::is_directory(examples));  // the shared corpus must be there (../shared/corpora)
  hookstream::test::TempDir root("hookstream-axolotl-examples-" + std::to_string(getpid()));
  write_deepspeed_configs(root);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(examples)) {
    const std::string extension = entry.path().extension().string();
    if (extension == ".yml" || extension == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() == 70);
  int engine_not_modelled = 0, fsdp2_verdicts = 0, other_model_class = 0, dense_under_ep = 0;
  for (const fs::path& file : files) {
    const auto r = verify_in(root, "'" + file.string() + "' --model '" + kModel + "'");
    INFO(file.filename().string() << "\n" << r.out);
    if (r.exit_code == 2 && r.out.find("no Experts modules were detected for sharding") != std::string::npos) {
      // Pure expert parallelism on the dense Llama config: the plugin's own ValueError
      // (plugin.py post_model_build), one line. With a qwen3_moe config it gets a verdict (below).
      ++dense_under_ep;
      continue;
    }
    if (r.exit_code == 2) {
      // FSDP2 examples whose transformer_layer_cls_to_wrap names their own model's decoder layer
      // (Gemma3DecoderLayer, ...), run here against a Llama config: one line naming the key.
      CHECK(r.out.find("transformer_layer_cls_to_wrap names '") != std::string::npos);
      CHECK(r.out.find("a class llama does not have") != std::string::npos);
      ++other_model_class;
      continue;
    }
    CHECK((r.exit_code == 0 || r.exit_code == 1));
    if (r.out.find("engine_not_modelled") != std::string::npos) ++engine_not_modelled;
    if (r.out.find("FSDP2 of PyTorch") != std::string::npos) ++fsdp2_verdicts;
  }
  // 20 of them set fsdp_config/fsdp_version, deepspeed, context/tensor/expert parallelism or
  // dp_shard_size; the data-parallel FSDP2 ones get FSDP2 verdicts (sim/sync/fsdp2), the FSDP1
  // QLoRA ones FSDP1 verdicts (sim/sync/fsdp1, packed 4-bit weights). Pure expert parallelism
  // under DDP is modelled (sim/sync/expert_parallel) and refuses the dense config as the plugin
  // does; not modelled yet: expert parallelism beside dp_shard under FSDP2.
  CHECK(engine_not_modelled == 1);
  CHECK(dense_under_ep == 1);
  CHECK(fsdp2_verdicts >= 1);
  // Six FSDP examples wrap their own model's decoder layer, the 8-bit DBRX one its DbrxBlock, and
  // gpt-oss-120b-fft-fsdp2-offload (dp_shard_size: 16 is plain FSDP2 over 16 ranks) its
  // GptOssDecoderLayer: refused on the Llama config this test forces.
  CHECK(other_model_class == 8);
}

TEST_CASE("an FSDP2 example gets an FSDP2 verdict and one with expert parallelism engine_not_modelled", "[cli][axolotl]") {
  const fs::path file = corpus("axolotl-examples/llama-3_3b-fp8-fsdp2.yaml");
  const auto r = verify_in(file.parent_path(), "'" + file.string() + "' --model '" + kModel + "' --format json --world-size 2");
  INFO(r.out);
  // The hook schedule passes; sharded weights, grads and AdamW states fit, but 8192 tokens without
  // activation checkpointing do not (memory is FSDP2's: sharded, plus the unsharded units).
  REQUIRE(r.exit_code == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["findings"].empty());
  CHECK(j["checks"]["memory"] == false);
  CHECK(j["memory"].dump().find("fsdp_unsharded") != std::string::npos);
  CHECK(j["engine"]["kind"] == "fsdp2");
  CHECK(j["engine"]["name"] == "FSDP2");
  CHECK(j["engine"]["modelled"] == true);
  CHECK(j["engine"]["decided_by"][0].get<std::string>().rfind("fsdp_version: 2", 0) == 0);

  const auto text = verify_in(file.parent_path(), "'" + file.string() + "' --model '" + kModel + "' --nnodes 2 --nproc-per-node 8");
  CHECK(text.out.find("FSDP2 units LlamaDecoderLayer; reshard_after_forward=true; FSDP2 of PyTorch") != std::string::npos);
  CHECK(text.out.find("OK       every rank reduce-scatters the same units") != std::string::npos);

  // Qwen2.5 with its own decoder layer class: the class matches the model, a verdict.
  const fs::path qwen = corpus("axolotl-examples/qat_nvfp4_Math-Qwen2.5-72B_baseline.yml");
  const auto q = verify_in(qwen.parent_path(), "'" + qwen.string() + "' --model '" + corpus("hf-configs/Qwen2.5-7B.json") + "' --world-size 2");
  INFO(q.out);
  CHECK((q.exit_code == 0 || q.exit_code == 1));
  CHECK(q.out.find("FSDP2 of PyTorch") != std::string::npos);

  // FSDP2 with expert parallelism: not modelled, said so, naming the plugin's code; its world
  // size is expert_parallel_size x dp_shard_size.
  const fs::path ep = corpus("axolotl-examples/expert_parallel_qwen3_30ba3b_ep_fsdp_fft_4gpu.yaml");
  const auto e = verify_in(ep.parent_path(), "'" + ep.string() + "' --model '" + kModel + "' --format json");
  INFO(e.out);
  REQUIRE(e.exit_code == 1);
  const auto ej = nlohmann::json::parse(e.out);
  CHECK(ej["verdict"] == "engine_not_modelled");
  CHECK(ej["world_size"] == 4);
  CHECK(ej["message"].get<std::string>().find("ExpertParallelPlugin") != std::string::npos);
  CHECK(ej["message"].get<std::string>().find("_ddp_params_and_buffers_to_ignore") != std::string::npos);
  // The plugin's own check of the mesh against the world size: bad input.
  const auto e8 = verify_in(ep.parent_path(), "'" + ep.string() + "' --model '" + kModel + "' --world-size 8");
  CHECK(e8.exit_code == 2);
  CHECK(e8.out.find("= 4, but world_size = 8") != std::string::npos);
}

TEST_CASE("the pure expert-parallel example gets a DDP verdict with the plugin's expert shards", "[cli][axolotl]") {
  // expert_parallel_qwen3_30ba3b_ep_fft_4gpu.yaml: expert_parallel_size 4 (world 4), DDP, on
  // Qwen3-30B-A3B's shapes (a qwen3_moe config.json built with transformers' Qwen3MoeConfig).
  const fs::path file = corpus("axolotl-examples/expert_parallel_qwen3_30ba3b_ep_fft_4gpu.yaml");
  const std::string model = std::string(HOOKSTREAM_SOURCE_DIR) + "/tests/plans/expert_parallel/qwen3_moe_30b_a3b_config.json";
  const auto r = verify_in(file.parent_path(), "'" + file.string() + "' --model '" + model + "' --format json");
  INFO(r.out);
  REQUIRE((r.exit_code == 0 || r.exit_code == 1));
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["world_size"] == 4);
  CHECK(j["engine"]["kind"] == "ddp");
  CHECK(j["engine"]["modelled"] == true);
  CHECK(j["findings"].empty());  // one micro-step: the scale hook runs once
  CHECK(j.dump().find("all_to_all") != std::string::npos);
  const auto text = verify_in(file.parent_path(), "'" + file.string() + "' --model '" + model + "'");
  CHECK(text.out.find("32/128 experts per rank") != std::string::npos);
  CHECK(text.out.find("outside DDP's Reducer") != std::string::npos);
}

TEST_CASE("an FSDP2 example with dp_shard_size is plain FSDP2 over that many ranks", "[cli][axolotl]") {
  // gpt-oss-120b-fft-fsdp2-offload.yaml: dp_shard_size: 16 ("requires 2x8xH100 nodes"). Run on the
  // Llama config with the wrap class that config has.
  const fs::path file = corpus("axolotl-examples/gpt-oss_gpt-oss-120b-fft-fsdp2-offload.yaml");
  const std::string args = "'" + file.string() + "' --model '" + kModel + "' --set fsdp_config.transformer_layer_cls_to_wrap=LlamaDecoderLayer";
  const auto r = verify_in(file.parent_path(), args + " --format json");
  INFO(r.out);
  REQUIRE(r.exit_code <= 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["engine"]["kind"] == "fsdp2");
  CHECK(j["engine"]["modelled"] == true);
  CHECK(j["engine"]["other_parallelism"].empty());
  CHECK(j["world_size"] == 16);
  // accelerate's check: the mesh must cover the world.
  const auto bad = verify_in(file.parent_path(), args + " --world-size 8");
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("ParallelismConfig total_size (16) does not match num_processes (8, --world-size)") != std::string::npos);
  // HSDP: 2 replicas of dp_shard 8.
  const auto hsdp = verify_in(file.parent_path(), args + " --set dp_shard_size=8 --set dp_replicate_size=2");
  INFO(hsdp.out);
  CHECK(hsdp.exit_code <= 1);
  CHECK(hsdp.out.find("HSDP: dp_replicate 2 x dp_shard 8") != std::string::npos);
  CHECK(hsdp.out.find("backward all_reduce") != std::string::npos);
}

TEST_CASE("a DeepSpeed example names the ZeRO stage from its JSON and is simulated by the ZeRO-3 model", "[cli][axolotl]") {
  const fs::path file = corpus("axolotl-examples/mistral_mixtral_mixtral_22.yml");
  hookstream::test::TempDir root("hookstream-axolotl-deepspeed-" + std::to_string(getpid()));
  write_deepspeed_configs(root);
  const auto r = verify_in(root, "'" + file.string() + "' --model '" + kModel + "' --world-size 8 --format json");
  INFO(r.out);
  REQUIRE(r.exit_code <= 1);
  const auto j = nlohmann::json::parse(r.out);
  // ZeRO-3 is modelled (sim/sync/zero/zero3_model.cc): a verify result, not engine_not_modelled.
  CHECK_FALSE(j.contains("verdict"));
  CHECK(j["ok"] == (r.exit_code == 0));
  // A dense model, every rank the same schedule: ZeRO-3's hooks agree (offload moves memory, not hooks).
  CHECK(j["checks"]["ddp"] == true);
  CHECK(j["engine"]["name"] == "DeepSpeed ZeRO-3");
  CHECK(j["engine"]["zero_stage"] == 3);
  CHECK(j["engine"]["deepspeed_config"] == "deepspeed_configs/zero3_bf16_cpuoffload_all.json");
  CHECK(j["world_size"] == 8);
  const std::string settings = j["engine"]["settings"].dump();
  CHECK(settings.find("offload_param: cpu") != std::string::npos);
  CHECK(settings.find("offload_optimizer: cpu") != std::string::npos);

  // From a folder without deepspeed_configs/, as axolotl: the JSON is missing, one line, exit 2.
  const auto missing = verify_in(file.parent_path(), "'" + file.string() + "' --model '" + kModel + "'");
  CHECK(missing.exit_code == 2);
  CHECK(std::count(missing.out.begin(), missing.out.end(), '\n') == 1);
  CHECK(missing.out.find("mixtral_22.yml:48: key \"deepspeed\": DeepSpeed config \"deepspeed_configs/zero3_bf16_cpuoffload_all.json\" not found") !=
        std::string::npos);
}

TEST_CASE("an axolotl config with a stage-0 DeepSpeed JSON gets a DeepSpeed ZeRO-0 verdict", "[cli][axolotl][zero]") {
  // DeepSpeed without a ZeRO optimizer (sim/sync/zero/zero0_model.h): a verify result, with the
  // engine named, never engine_not_modelled.
  const fs::path file = corpus("axolotl-examples/eaft_eaft-example.yml");
  hookstream::test::TempDir root("hookstream-axolotl-zero0-" + std::to_string(getpid()));
  fs::create_directories(root.path() / "deepspeed_configs");
  std::ofstream(root.path() / "deepspeed_configs/zero0.json")
      << R"({"zero_optimization": {"stage": 0}, "bf16": {"enabled": true}, "gradient_accumulation_steps": "auto",
             "train_micro_batch_size_per_gpu": "auto"})";
  const auto r = verify_in(root, "'" + file.string() + "' --model '" + kModel +
                                     "' --world-size 2 --set deepspeed=deepspeed_configs/zero0.json --format json");
  INFO(r.out);
  REQUIRE(r.exit_code <= 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK_FALSE(j.contains("verdict"));
  CHECK(j["engine"]["name"] == "DeepSpeed ZeRO-0");
  CHECK(j["engine"]["zero_stage"] == 0);
  CHECK(j["engine"]["modelled"] == true);
  CHECK(j["checks"]["ddp"] == true);
}

TEST_CASE("a DDP example gets a real DDP verdict and lists its keys hookstream does not model", "[cli][axolotl]") {
  const fs::path file = corpus("axolotl-examples/llama-3_qlora.yml");
  const auto r = verify_in(file.parent_path(), "'" + file.string() + "' --model '" + kModel + "' --world-size 2 --format json");
  INFO(r.out);
  REQUIRE((r.exit_code == 0 || r.exit_code == 1));
  const auto j = nlohmann::json::parse(r.out);
  CHECK(!j.contains("verdict"));
  CHECK(j["engine"]["kind"] == "ddp");
  CHECK(j["engine"]["modelled"] == true);
  CHECK(j["world_size"] == 2);
  CHECK(j["checks"].contains("ddp"));
  CHECK(j["trainable_parameters"].get<int>() > 0);
  std::vector<std::string> not_modelled;
  for (const auto& note : j["config_keys"]["not_modelled"]) not_modelled.push_back(note["key"]);
  CHECK(std::find(not_modelled.begin(), not_modelled.end(), "optimizer") == not_modelled.end());  // paged_adamw_32bit is modelled
  // sample_packing (tokens per micro-batch) and the attention implementation (eager's S x S
  // scores) are modelled; tf32 (matmul precision) changes neither hooks nor memory and is listed.
  CHECK(std::find(not_modelled.begin(), not_modelled.end(), "sample_packing") == not_modelled.end());
  CHECK(std::find(not_modelled.begin(), not_modelled.end(), "attn_implementation") == not_modelled.end());
  CHECK(std::find(not_modelled.begin(), not_modelled.end(), "tf32") != not_modelled.end());
  std::vector<std::string> no_effect;
  for (const auto& note : j["config_keys"]["no_effect"]) no_effect.push_back(note["key"]);
  CHECK(std::find(no_effect.begin(), no_effect.end(), "datasets") != no_effect.end());
  CHECK(j["config_keys"]["axolotl_version"] == "0.18.0");
}

TEST_CASE("axolotl's FSDP1 full fine-tune example gets an FSDP1 gradient-sync verdict, LoRA and QLoRA too",
          "[cli][axolotl][fsdp1]") {
  const fs::path file = corpus("axolotl-examples/llama-3_fft-8b-liger-fsdp.yaml");
  const auto r = verify_in(file.parent_path(), "'" + file.string() + "' --model '" + kModel + "' --world-size 2 --format json");
  INFO(r.out);
  REQUIRE((r.exit_code == 0 || r.exit_code == 1));
  const auto j = nlohmann::json::parse(r.out);
  CHECK(!j.contains("verdict"));
  CHECK(j["engine"]["kind"] == "fsdp1");
  CHECK(j["engine"]["modelled"] == true);
  // Non-reentrant checkpointing inside each decoder-layer unit: one post-backward per unit.
  CHECK(j["checks"]["ddp"] == true);

  // QLoRA under FSDP1: PEFT's wrap policy with bitsandbytes' 4-bit weights flattened as their packed
  // bf16 storage (real FSDP1 + bitsandbytes, tests/oracles/fsdp1_qlora_oracle_test.cc): a verdict.
  const fs::path qlora = corpus("axolotl-examples/qwen3_qlora-fsdp.yaml");
  const auto q = verify_in(qlora.parent_path(), "'" + qlora.string() + "' --model '" + kModel + "' --world-size 2 --format json");
  INFO(q.out);
  REQUIRE((q.exit_code == 0 || q.exit_code == 1));
  const auto k = nlohmann::json::parse(q.out);
  CHECK(!k.contains("verdict"));
  CHECK(k["engine"]["kind"] == "fsdp1");
  CHECK(k["engine"]["modelled"] == true);
  CHECK(k["checks"]["ddp"] == true);

  // The same example as plain LoRA: PEFT's fsdp_auto_wrap_policy units, an FSDP1 verdict.
  const auto l = verify_in(qlora.parent_path(), "'" + qlora.string() + "' --model '" + kModel +
                                                    "' --world-size 2 --set adapter=lora --set load_in_4bit=false --format json");
  INFO(l.out);
  REQUIRE((l.exit_code == 0 || l.exit_code == 1));
  const auto m = nlohmann::json::parse(l.out);
  CHECK(!m.contains("verdict"));
  CHECK(m["engine"]["kind"] == "fsdp1");
  CHECK(m["engine"]["modelled"] == true);
}
