// Cost inputs of an expanded step (FLOPs and bytes per op) and what they do to predicted step time.
#include <catch2/catch.hpp>

#include "sim/cost/device_profile.h"
#include "sim/cost/device_spec.h"
#include "sim/cost/step_prediction.h"
#include "sim/streams/stream_expansion.h"

using namespace hookstream;

namespace {

// Llama-3.1-8B at 2048 tokens on one GPU; `extra` adds plan keys.
Plan llama(const std::string& extra = "") {
  return parse_plan("base_model: Llama-3.1-8B\nsequence_len: 2048\nmicro_batch_size: 1\n" + extra, "plan.yaml");
}

double total_flops(const Plan& plan, const std::string& phase = "") {
  const EventModel step = expand_step(plan, build_model_structure(plan), load_stream_protocol("none"));
  double sum = 0;
  for (const Op& op : step.ops) {
    if (phase.empty() || op.phase == phase) sum += op.flops;
  }
  return sum;
}

double op_bytes(const EventModel& step, const std::string& name) {
  for (const Op& op : step.ops) {
    if (op.name == name) return static_cast<double>(op.bytes);
  }
  FAIL("no op " << name);
  return 0;
}

}  // namespace

TEST_CASE("a plain full fine-tune step is 3x forward, ~6 x GEMM parameters x tokens", "[streams]") {
  const Plan plan = llama();
  const ModelStructure structure = build_model_structure(plan);
  const double forward = total_flops(plan, "forward");
  const double total = total_flops(plan);
  // Every weight is trainable: each GEMM's backward is its input and weight gradient.
  CHECK(total == Approx(3 * forward));
  // The rule of thumb over the GEMM weights (decoder projections and lm_head, not the embedding
  // gather); the attention core (QK^T, PV) adds ~4 % at 2048 tokens.
  double gemm_parameters = 0;
  for (const Parameter& p : structure.parameters) {
    if (p.shape.size() == 2 && (p.layer >= 0 || p.group == "head")) gemm_parameters += static_cast<double>(p.numel());
  }
  CHECK(gemm_parameters == Approx(7.5e9).epsilon(0.01));
  CHECK(total == Approx(6 * gemm_parameters * 2048).epsilon(0.05));
  CHECK(total > 6 * gemm_parameters * 2048);

  // The head's ops carry their costs: lm_head 2*t*h*V forward, loss and embedding bytes, AdamW bytes.
  const EventModel step = expand_step(plan, structure, load_stream_protocol("none"));
  double lm_head = 0, optimizer_bytes = 0;
  for (const Op& op : step.ops) {
    if (op.name == "lm_head forward") lm_head = op.flops;
    if (op.phase == "optimizer") optimizer_bytes = static_cast<double>(op.bytes);
  }
  CHECK(lm_head == Approx(2.0 * 2048 * 4096 * 128256));
  const double logits = 2048.0 * 128256;
  CHECK(op_bytes(step, "loss forward") == Approx(14 * logits));
  CHECK(op_bytes(step, "loss backward") == Approx(22 * logits));
  CHECK(op_bytes(step, "embedding forward") == Approx(2 * 2048.0 * 4096 * 2));
  CHECK(op_bytes(step, "embedding backward") > 128256.0 * 4096 * 2);
  // bf16 parameters, bf16 states: 7 accesses of 2 bytes per trainable element (~8.03e9 elements).
  CHECK(optimizer_bytes == Approx(14 * 8.03e9).epsilon(0.01));
}

TEST_CASE("checkpointing adds one forward per checkpointed layer, less the down projection when non-reentrant", "[streams]") {
  const Plan plain = llama();
  const ModelStructure structure = build_model_structure(plain);
  const LayerCost layer = layer_cost(plain.model, 2048, 1, &structure, 0);
  // The down projection's base GEMM: `hookstream run`'s non-reentrant recompute stops before it
  // (runtime/deferred_linear.h). This plan has no adapter: no LoRA B GEMM to leave out.
  const double down = 2.0 * 2048 * 14336 * 4096;
  for (const char* reentrant : {"true", "false"}) {
    INFO("use_reentrant " << reentrant);
    const Plan checkpointed =
        llama(std::string("gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: ") + reentrant + "\n");
    const double recompute = layer.forward_flops() - (std::string(reentrant) == "false" ? down : 0.0);
    CHECK(total_flops(checkpointed) - total_flops(plain) == Approx(32 * recompute));
    CHECK(total_flops(checkpointed, "recompute") == Approx(32 * recompute));
  }
  // Only the checkpointed layers (axolotl's default: reentrant).
  const Plan some = llama("gradient_checkpointing: true\nhookstream:\n  checkpoint_layers: [0, 5, 9]\n");
  CHECK(total_flops(some) - total_flops(plain) == Approx(3 * layer.forward_flops()));
  // A tiled MLP's recompute runs the whole layer (its MLP is its own function).
  const Plan tiled = llama("gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\ntiled_mlp: true\n");
  CHECK(total_flops(tiled, "recompute") == Approx(32 * layer.forward_flops()));
}

TEST_CASE("a tiled MLP adds one MLP forward per layer, on top of checkpoint recompute", "[streams]") {
  const Plan plain = llama();
  const ModelStructure structure = build_model_structure(plain);
  const LayerCost layer = layer_cost(plain.model, 2048, 1, &structure, 0);
  CHECK(layer.mlp_forward_flops() == Approx(2.0 * 2048 * 4096 * 14336 * 3));
  for (const char* shards : {"1", "4"}) {
    INFO("shards " << shards);
    const Plan tiled = llama(std::string("tiled_mlp: true\ntiled_mlp_num_shards: ") + shards + "\n");
    CHECK(total_flops(tiled) - total_flops(plain) == Approx(32 * layer.mlp_forward_flops()));
  }
  const Plan both = llama("gradient_checkpointing: true\ntiled_mlp: true\ntiled_mlp_num_shards: 4\n");
  CHECK(total_flops(both) - total_flops(plain) == Approx(32 * (layer.forward_flops() + layer.mlp_forward_flops())));
}

TEST_CASE("LoRA backward: frozen base weights cost only their input gradient", "[streams]") {
  const Plan full = llama();
  const Plan lora = llama("adapter: lora\nlora_r: 16\nlora_target_linear: true\n");
  const ModelStructure structure = build_model_structure(lora);
  const LayerCost layer = layer_cost(lora.model, 2048, 1, &structure, 0);
  CHECK(layer.lora_flops > 0);
  CHECK(layer.lora_flops < 0.02 * layer.projection_flops);
  // Backward = base forward (input gradients) + 2x the attention core + 2x LoRA's GEMMs.
  CHECK(layer.backward_flops() == Approx(layer.projection_flops + 2 * layer.attention_flops + 2 * layer.lora_flops));
  const double full_backward = total_flops(full, "backward");
  const double lora_backward = total_flops(lora, "backward");
  CHECK(lora_backward < 0.6 * full_backward);
  // The frozen lm_head: its input gradient only (1x forward).
  const EventModel step = expand_step(lora, structure, load_stream_protocol("none"));
  double head_forward = 0, head_backward = 0, embedding_backward = -1;
  for (const Op& op : step.ops) {
    if (op.name == "lm_head forward") head_forward = op.flops;
    if (op.name == "lm_head backward") head_backward = op.flops;
    if (op.name == "embedding backward") embedding_backward = static_cast<double>(op.bytes);
  }
  CHECK(head_backward == Approx(head_forward));
  CHECK(embedding_backward == 0);  // frozen table: no gradient
}

TEST_CASE("predicted step time: checkpointing and a tiled MLP cost time", "[streams][time]") {
  const DeviceSpec h100 = load_device_spec(std::string(HOOKSTREAM_SOURCE_DIR) + "/devices/H100-SXM.yaml");
  const auto seconds = [&](const Plan& plan) {
    return predict_step(plan, build_model_structure(plan), h100).schedule.step_ns;
  };
  const std::string lora = "adapter: lora\nlora_r: 16\nlora_target_linear: true\n";
  const double plain = seconds(llama(lora));
  const double checkpointed = seconds(llama(lora + "gradient_checkpointing: true\n"));
  const double tiled = seconds(llama(lora + "tiled_mlp: true\n"));
  CHECK(checkpointed > plain * 1.2);
  CHECK(tiled > plain * 1.1);
  CHECK(seconds(llama(lora + "gradient_checkpointing: true\ntiled_mlp: true\n")) > checkpointed);
}

// Liger's RMSNorm is one fused kernel each way: the step is shorter by the difference between the
// profiled eager norm and the fused one's bytes at the copy bandwidth, for each norm the step runs
// (two per layer in forward, recompute and backward; the final norm in forward and backward).
TEST_CASE("predicted step time: Liger's fused RMSNorm replaces the eager norm's kernels", "[streams][time][liger]") {
  const DeviceSpec h100 = load_device_spec(std::string(HOOKSTREAM_SOURCE_DIR) + "/devices/H100-SXM.yaml");
  REQUIRE(h100.profile);
  const auto seconds = [&](const Plan& plan) { return predict_step(plan, build_model_structure(plan), h100).schedule.step_ns; };
  const std::string base = "adapter: lora\nlora_r: 16\nlora_target_linear: true\ngradient_checkpointing: true\n";
  const std::string norm = "plugins: [axolotl.integrations.liger.LigerPlugin]\nliger_rms_norm: true\n";
  const double plain = seconds(llama(base));
  const double liger = seconds(llama(base + norm));
  const DeviceProfile& profile = *h100.profile;
  const double elements = 2048.0 * 4096;
  const auto& eager = profile.elementwise.at("rmsnorm");
  const double per_byte = 1.0 / profile.d2d_gbps_read_plus_write;  // ns per byte
  const double saved_forward = elements * (eager.forward_ns - 4 * per_byte);
  const double saved_backward = elements * (eager.backward_ns - 6 * per_byte);
  const double expected = 32 * 2 * (2 * saved_forward + saved_backward) + saved_forward + saved_backward;
  CHECK(plain - liger == Approx(expected).epsilon(0.01));
  // Without the plugin the key changes nothing (axolotl never applies it).
  CHECK(seconds(llama(base + "liger_rms_norm: true\n")) == plain);
}
