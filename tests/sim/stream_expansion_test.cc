// Expansion of a plan + protocol into the ops of one step.
#include <catch2/catch.hpp>

#include <algorithm>

#include "sim/streams/stream_expansion.h"
#include "tests/sim/stream_test_plans.h"

using namespace hookstream;

namespace {
int count_ops(const EventModel& model, OpKind kind, const std::string& phase = "") {
  return static_cast<int>(std::count_if(model.ops.begin(), model.ops.end(), [&](const Op& op) {
    return op.kind == kind && (phase.empty() || op.phase == phase);
  }));
}
}  // namespace

TEST_CASE("layer cost follows the model shapes", "[streams]") {
  ModelConfig llama;
  llama.hidden_size = 4096;
  llama.intermediate_size = 14336;
  llama.num_attention_heads = 32;
  llama.num_key_value_heads = 8;
  llama.head_dim = 128;
  llama.torch_dtype = DType::BFloat16;
  const LayerCost cost = layer_cost(llama, 100000, 1);
  // streams-and-races.md: one offloaded hidden state of Llama 8B at 100K tokens is 100000*4096*2 bytes.
  CHECK(cost.hidden_state_bytes == int64_t{100000} * 4096 * 2);
  const double tokens = 100000;
  CHECK(cost.mlp_flops == Approx(2 * tokens * 4096 * 14336 * 3));
  CHECK(cost.projection_flops == Approx(cost.mlp_flops + 2 * tokens * 4096 * (4096 + 2 * 1024) + 2 * tokens * 4096 * 4096));
  CHECK(cost.attention_flops == Approx(4.0 * 1e10 * 32 * 128 / 2));
}

TEST_CASE("expansion of double_buffer_events: per-layer ops in host issue order", "[streams]") {
  const Plan plan = testing::offload_plan();
  const ModelStructure structure = build_model_structure(plan);
  const StreamProtocol protocol = load_stream_protocol("double_buffer_events");
  const EventModel model = expand_step(plan, structure, protocol);
  const int layers = plan.model.num_hidden_layers;
  CHECK(model.streams.size() == 3);  // compute, copy, nccl
  CHECK(model.streams[0].name == "compute");
  CHECK(count_ops(model, OpKind::Copy, "forward") == layers);
  CHECK(count_ops(model, OpKind::Copy, "backward") == layers);
  CHECK(count_ops(model, OpKind::Kernel, "recompute") == 5 * layers);  // the layer and its 4 elementwise kernels
  CHECK(std::count_if(model.ops.begin(), model.ops.end(), [](const Op& op) { return op.name.find(" recompute") == op.name.size() - 10; }) ==
        5 * layers);
  CHECK(count_ops(model, OpKind::Collective) >= 1);
  // Every rank 0 only by default; all ranks on request.
  CHECK(std::all_of(model.ops.begin(), model.ops.end(), [](const Op& op) { return op.rank == 0; }));
  ExpansionOptions all;
  all.all_ranks = true;
  const EventModel both = expand_step(plan, structure, protocol, all);
  CHECK(both.ops.size() == 2 * model.ops.size());
  // Backward reloads use reload[i mod 2] and copy a hidden state's bytes.
  const auto h2d = std::find_if(model.ops.begin(), model.ops.end(), [](const Op& op) {
    return op.kind == OpKind::Copy && op.copy == CopyKind::HostToDevice;
  });
  REQUIRE(h2d != model.ops.end());
  CHECK(h2d->layer == layers - 1);
  CHECK(model.buffers[h2d->accesses[1].buffer].name == "reload[" + std::to_string((layers - 1) % 2) + "]");
  CHECK(h2d->bytes == int64_t{16} * 8 * 4);
  // The optimizer step is last, after the all-reduces.
  CHECK(model.ops.back().phase == "optimizer");
}

TEST_CASE("expansion: offload_layers runs the protocol on the listed layers, plain checkpointing on the others", "[streams]") {
  const Plan plan = testing::offload_plan("  offload_layers: [0]\n");
  const int layers = plan.model.num_hidden_layers;
  REQUIRE(layers >= 2);
  const ModelStructure structure = build_model_structure(plan);
  const EventModel model = expand_step(plan, structure, load_stream_protocol("double_buffer_events"));
  // One offload and one reload, both of layer 0; every layer still recomputes in backward.
  CHECK(count_ops(model, OpKind::Copy, "forward") == 1);
  CHECK(count_ops(model, OpKind::Copy, "backward") == 1);
  for (const Op& op : model.ops) {
    if (op.kind == OpKind::Copy) CHECK(op.layer == 0);
  }
  CHECK(count_ops(model, OpKind::Kernel, "recompute") == 5 * layers);
  // A kept layer's recompute reads its input where the forward left it, on the GPU.
  const auto kept = std::find_if(model.ops.begin(), model.ops.end(), [&](const Op& op) {
    return op.kind == OpKind::Kernel && op.phase == "recompute" && op.layer == layers - 1;
  });
  REQUIRE(kept != model.ops.end());
  REQUIRE(!kept->accesses.empty());
  CHECK(model.buffers[kept->accesses[0].buffer].memory == MemoryKind::Device);
  CHECK(model.buffers[kept->accesses[0].buffer].name.find("reload") == std::string::npos);
}

TEST_CASE("expansion: tiled MLP backward is one op per chunk, collectives at the Reducer's launch points", "[streams]") {
  const Plan plan = testing::offload_plan("tiled_mlp: true\ntiled_mlp_num_shards: 4\n");
  const ModelStructure structure = build_model_structure(plan);
  const EventModel model = expand_step(plan, structure, load_stream_protocol("none"));
  int chunks = 0;
  for (const Op& op : model.ops) chunks += op.name.find("chunk") != std::string::npos;
  CHECK(chunks == 4 * plan.model.num_hidden_layers);
  // Every bucket is all-reduced exactly once, after the backward op that last writes it.
  for (size_t b = 0; b < model.buffers.size(); ++b) {
    if (model.buffers[b].name.rfind("bucket[", 0) != 0) continue;
    int last_write = -1, reduce = -1, reductions = 0;
    for (size_t i = 0; i < model.ops.size(); ++i) {
      for (const BufferAccess& access : model.ops[i].accesses) {
        if (access.buffer != static_cast<int>(b)) continue;
        if (model.ops[i].kind == OpKind::Collective) reduce = static_cast<int>(i), ++reductions;
        else if (access.write && reduce < 0) last_write = static_cast<int>(i);
      }
    }
    INFO(model.buffers[b].name);
    CHECK(reductions == 1);
    CHECK(last_write < reduce);
  }
}

TEST_CASE("expansion: a per-process counter runs across the devices of one process", "[streams]") {
  const Plan plan = testing::offload_plan();
  const ModelStructure structure = build_model_structure(plan);
  ExpansionOptions two;
  two.devices_per_process = 2;
  const EventModel model = expand_step(plan, structure, load_stream_protocol("global_counter_buffers"), two);
  for (const Op& op : model.ops) {
    if (op.kind != OpKind::Copy || op.copy != CopyKind::HostToDevice) continue;
    const int device = model.streams[op.stream].device;
    // Device 0 sees counter values 0, 2, 4, ...: always reload[0]; device 1 always reload[1].
    CHECK(model.buffers[op.accesses[1].buffer].name == "reload[" + std::to_string(device) + "]");
  }
}

TEST_CASE("elementwise kernels and the vision tower get their own memory-bound / GEMM ops", "[streams][time]") {
  // Llama-3.1-8B at 4096 tokens: per layer, RMSNorm (2 norms), RoPE on q and k, act(gate) * up and
  // the 2 residual adds, in bf16 bytes.
  const Plan llama = parse_plan("base_model: Llama-3.1-8B\nsequence_len: 4096\n", "llama.yaml");
  const LayerCost cost = layer_cost(llama.model, 4096, 1);
  const int64_t t = 4096, h = 4096, qk = 4096 + 1024, inter = 14336;
  CHECK(cost.rmsnorm_bytes == 4 * h * t * 2);
  CHECK(cost.rmsnorm_backward_bytes == 6 * h * t * 2);
  CHECK(cost.rope_bytes == 2 * qk * t * 2);
  CHECK(cost.silu_mul_bytes == 5 * inter * t * 2);
  CHECK(cost.residual_bytes == 6 * h * t * 2);
  const EventModel step = expand_step(llama, build_model_structure(llama), load_stream_protocol("none"));
  int rmsnorm = 0;
  for (const Op& op : step.ops) {
    if (op.name == "layer 3 silu*up forward") CHECK(op.bytes == cost.silu_mul_bytes);
    if (op.name == "layer 3 rope backward") CHECK(op.bytes == cost.rope_backward_bytes);
    rmsnorm += op.name.find("rmsnorm") != std::string::npos;
    CHECK(op.name.find("vision") == std::string::npos);  // a text model has no vision ops
  }
  CHECK(rmsnorm == 2 * 32);  // forward and backward of every layer

  // Qwen3-VL: patch embed, every block, the merger and the DeepStack mergers run in forward; a
  // frozen tower (LoRA on the decoder's projections only) has no backward, a trainable one (full
  // fine-tune) does.
  const std::string vl = "base_model: Qwen/Qwen3-VL-4B-Instruct\nsequence_len: 4096\n";
  const Plan lora = parse_plan(vl + "adapter: lora\nlora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]\n", "vl.yaml");
  // axolotl's lora_target_linear takes every Linear's leaf name, the tower's (qkv, proj,
  // linear_fc1, linear_fc2) too, so its adapters train and the tower has a backward.
  const Plan lora_linear = parse_plan(vl + "adapter: lora\nlora_target_linear: true\n", "vl.yaml");
  const Plan full = parse_plan(vl, "vl.yaml");
  const Plan text_only = parse_plan(vl + "hookstream:\n  vision_inputs: false\n", "vl.yaml");
  const auto count = [](const Plan& plan, const std::string& suffix) {
    const EventModel m = expand_step(plan, build_model_structure(plan), load_stream_protocol("none"));
    int n = 0;
    for (const Op& op : m.ops) {
      n += op.name.starts_with("vision") && op.name.size() > suffix.size() && op.name.ends_with(suffix);
    }
    return n;
  };
  const int blocks = lora.model.vision->depth;
  const int deepstack = static_cast<int>(lora.model.vision->deepstack_visual_indexes.size());
  CHECK(deepstack > 0);
  CHECK(count(lora, " forward") == 1 + blocks + 1 + deepstack);
  CHECK(count(lora, " backward") == 0);
  CHECK(count(lora_linear, " backward") == 1 + blocks + 1 + deepstack);
  CHECK(count(full, " backward") == 1 + blocks + 1 + deepstack);
  CHECK(count(text_only, " forward") == 0);
  // More image tokens, more vision FLOPs (the attention within the image grows quadratically).
  const auto vision_flops = [](const Plan& plan) {
    double flops = 0;
    for (const Op& op : expand_step(plan, build_model_structure(plan), load_stream_protocol("none")).ops) {
      if (op.name.rfind("vision block", 0) == 0) flops += op.flops;
    }
    return flops;
  };
  const Plan more = parse_plan(vl + "adapter: lora\nlora_target_linear: true\nhookstream:\n  vision_tokens: 2048\n", "vl.yaml");
  CHECK(vision_flops(more) > 2 * vision_flops(lora));
}
