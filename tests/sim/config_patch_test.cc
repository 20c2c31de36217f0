// Fixes in the user's own words: a fix's keys set in the text of the user's config, every other
// line kept as written, and the unified diff between the two.
#include "sim/inputs/axolotl_config/config_patch.h"

#include <catch2/catch.hpp>

namespace hookstream {

TEST_CASE("a fix edits the lines of the keys it sets and keeps the rest of the file", "[patch]") {
  const std::string config =
      "base_model: meta-llama/Llama-3.1-8B  # the model\n"
      "# checkpointing\n"
      "gradient_checkpointing: true\n"
      "gradient_checkpointing_kwargs:\n"
      "    use_reentrant: true   # HF's default\n"
      "lora_target_modules:\n"
      "  - q_proj\n"
      "  - v_proj\n"
      "\n"
      "hookstream:\n"
      "  world_size: 8\n";
  // A value on its line: replaced, the comment kept; the child's own indentation kept.
  CHECK(apply_changes_to_config(config, {{"gradient_checkpointing_kwargs.use_reentrant", "false"}}) ==
        "base_model: meta-llama/Llama-3.1-8B  # the model\n# checkpointing\ngradient_checkpointing: true\n"
        "gradient_checkpointing_kwargs:\n    use_reentrant: false   # HF's default\nlora_target_modules:\n  - q_proj\n"
        "  - v_proj\n\nhookstream:\n  world_size: 8\n");
  // A block value: replaced by the new value on the key's line.
  CHECK(apply_changes_to_config(config, {{"lora_target_modules", "[q_proj]"}}).find("lora_target_modules: [q_proj]\n\nhookstream:") !=
        std::string::npos);
  // Missing keys: added to their section, or at the end of the file with their parents.
  CHECK(apply_changes_to_config(config, {{"hookstream.static_graph", "true"}}) == config + "  static_graph: true\n");
  CHECK(apply_changes_to_config(config, {{"ddp_find_unused_parameters", "false"}}) == config + "ddp_find_unused_parameters: false\n");
  CHECK(apply_changes_to_config("base_model: x\n", {{"hookstream.tiled_mlp_backward", "grad_then_backward"}}) ==
        "base_model: x\nhookstream:\n  tiled_mlp_backward: grad_then_backward\n");
  // A flow mapping on the parent's line stays a flow mapping.
  CHECK(apply_changes_to_config("gradient_checkpointing_kwargs: {use_reentrant: true}  # why\n",
                                {{"gradient_checkpointing_kwargs.use_reentrant", "false"}}) ==
        "gradient_checkpointing_kwargs: {use_reentrant: false}  # why\n");
  // Two keys at once (a memory fix).
  CHECK(apply_changes_to_config("micro_batch_size: 4\ngradient_accumulation_steps: 1\n",
                                {{"micro_batch_size", "2"}, {"gradient_accumulation_steps", "2"}}) ==
        "micro_batch_size: 2\ngradient_accumulation_steps: 2\n");
}

TEST_CASE("the patch is a unified diff with three lines of context", "[patch]") {
  const std::string before = "a: 1\nb: 2\nc: 3\nd: 4\ne: 5\nf: 6\ng: 7\nh: 8\n";
  const std::string after = "a: 1\nb: 2\nc: 3\nd: 40\ne: 5\nf: 6\ng: 7\nh: 8\n";
  CHECK(unified_diff(before, after, "plan.yaml") ==
        "--- plan.yaml\n+++ plan.yaml\n@@ -1,7 +1,7 @@\n a: 1\n b: 2\n c: 3\n-d: 4\n+d: 40\n e: 5\n f: 6\n g: 7\n");
  CHECK(unified_diff(before, before + "i: 9\n", "p") == "--- p\n+++ p\n@@ -6,3 +6,4 @@\n f: 6\n g: 7\n h: 8\n+i: 9\n");
  CHECK(unified_diff(before, before, "p").empty());
}

TEST_CASE("hookstream: keys of a fix name the training code they stand for", "[patch]") {
  const auto note = hookstream_code_change({"hookstream.tiled_mlp_backward", "grad_then_backward"});
  REQUIRE(note);
  CHECK(note->find("unslothai/unsloth PR #4077") != std::string::npos);
  CHECK(note->find("axolotl 0.18.0 has no key for it") != std::string::npos);
  CHECK(hookstream_code_change({"hookstream.static_graph", "true"})->find("ddp_static_graph") != std::string::npos);
  CHECK_FALSE(hookstream_code_change({"gradient_checkpointing_kwargs.use_reentrant", "false"}));
}

}  // namespace hookstream

namespace hookstream {

TEST_CASE("a DeepSpeed fix edits the JSON file's own lines and keeps the rest byte for byte", "[patch][zero]") {
  // axolotl's deepspeed_configs layout: 2-space members, one-line objects inside.
  const std::string json =
      "{\n"
      "  \"zero_optimization\": {\n"
      "    \"stage\": 2,\n"
      "    \"offload_optimizer\": {\"device\": \"none\"},\n"
      "    \"overlap_comm\": true\n"
      "  },\n"
      "  \"bf16\": {\n"
      "    \"enabled\": \"auto\"\n"
      "  }\n"
      "}\n";
  // A member's value replaced where it stands.
  CHECK(apply_changes_to_json(json, {{"zero_optimization.stage", "1"}, {"zero_optimization.overlap_comm", "false"}}) ==
        "{\n  \"zero_optimization\": {\n    \"stage\": 1,\n    \"offload_optimizer\": {\"device\": \"none\"},\n"
        "    \"overlap_comm\": false\n  },\n  \"bf16\": {\n    \"enabled\": \"auto\"\n  }\n}\n");
  // Inside a one-line object; a YAML word becomes a JSON string.
  CHECK(apply_changes_to_json(json, {{"zero_optimization.offload_optimizer.device", "cpu"}})
            .find("    \"offload_optimizer\": {\"device\": \"cpu\"},\n") != std::string::npos);
  // A missing member: the last of its object, its siblings' indentation; missing objects around it.
  CHECK(apply_changes_to_json(json, {{"zero_optimization.offload_param.device", "cpu"}}) ==
        "{\n  \"zero_optimization\": {\n    \"stage\": 2,\n    \"offload_optimizer\": {\"device\": \"none\"},\n"
        "    \"overlap_comm\": true,\n    \"offload_param\": {\n      \"device\": \"cpu\"\n    }\n  },\n"
        "  \"bf16\": {\n    \"enabled\": \"auto\"\n  }\n}\n");
  CHECK(apply_changes_to_json("{\"zero_optimization\": {\"stage\": 3}}", {{"zero_optimization.stage3_max_live_parameters", "1000"}}) ==
        "{\"zero_optimization\": {\"stage\": 3, \"stage3_max_live_parameters\": 1000}}");
  CHECK(apply_changes_to_json("{\n    \"train_batch_size\": \"auto\"\n}\n", {{"zero_optimization.stage", "3"}}) ==
        "{\n    \"train_batch_size\": \"auto\",\n    \"zero_optimization\": {\n        \"stage\": 3\n    }\n}\n");
  // Strings holding braces and escaped quotes do not confuse the scan.
  CHECK(apply_changes_to_json("{\"a\": \"}{\\\"\", \"zero_optimization\": {\"stage\": 0}}", {{"zero_optimization.stage", "2"}}) ==
        "{\"a\": \"}{\\\"\", \"zero_optimization\": {\"stage\": 2}}");
}

}  // namespace hookstream
