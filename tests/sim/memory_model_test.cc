// The memory model: allocator rounding, the offload saving of the streams doc, per-category rules.
#include "sim/cost/memory_model.h"

#include <catch2/catch.hpp>

#include "sim/cost/device_spec.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

using namespace hookstream;

namespace {

Plan plan_from(const std::string& yaml) { return parse_plan(yaml, "plan.yaml"); }

MemoryEstimate estimate(const Plan& plan, bool rounding = true) {
  MemoryModelOptions options;
  options.allocator_rounding = rounding;
  return estimate_memory(plan, build_model_structure(plan), find_device_spec(plan.gpu), options);
}

const MemoryPoint& point(const MemoryEstimate& e, const std::string& phase, const std::string& at) {
  for (const MemoryPoint& p : e.device_points) {
    if (p.phase == phase && p.at == at) return p;
  }
  FAIL("no point " << phase << " " << at);
  return e.device_points.front();
}

int64_t category(const MemoryPoint& p, MemoryCategory c) {
  const auto it = p.bytes.find(c);
  return it == p.bytes.end() ? 0 : it->second;
}

const std::string kLlama100k =
    "base_model: Llama-3.1-8B\nsequence_len: 100000\ngradient_checkpointing: true\n";

}  // namespace

TEST_CASE("the caching allocator rounds to 512 B blocks, large tensors keep small segment tails", "[memory]") {
  CHECK(device_allocation_bytes(0) == 0);
  CHECK(device_allocation_bytes(1) == 512);
  CHECK(device_allocation_bytes(512) == 512);
  CHECK(device_allocation_bytes(513) == 1024);
  CHECK(device_allocation_bytes((1 << 20) + 1) == (1 << 20) + 512);   // measured on an H100, PyTorch 2.11
  CHECK(device_allocation_bytes((3 << 20) + 100) == (3 << 20) + 512);  // shares a 20 MiB segment
  CHECK(device_allocation_bytes((11 << 20) + 1) == (12 << 20));        // own segment, 1 MiB tail kept
  CHECK(device_allocation_bytes((10 << 20) + 100) == (10 << 20) + 512);  // tail > 1 MiB is split off
  CHECK(device_allocation_bytes(819200000) == 391 * (2 << 20));
  CHECK(pinned_allocation_bytes(819200000) == (int64_t{1} << 30));  // pinned host: next power of two
  CHECK(pinned_allocation_bytes(4096) == 4096);
}

TEST_CASE("offloading one bf16 hidden state per layer of Llama-3.1-8B at 100K tokens saves 24.4 GiB", "[memory]") {
  const MemoryEstimate kept = estimate(plan_from(kLlama100k), false);
  const MemoryEstimate offloaded = estimate(plan_from(kLlama100k + "activation_offloading: true\n"), false);
  const int64_t hidden_state = int64_t{100000} * 4096 * 2;
  const int64_t saving = category(point(kept, "loss", "cross-entropy"), MemoryCategory::Activations) -
                         category(point(offloaded, "loss", "cross-entropy"), MemoryCategory::Activations);
  CHECK(saving == 32 * hidden_state);
  CHECK(format_gib(saving) == "24.41 GiB");
  // Double-buffered reload (the default protocol): two GPU buffers of one hidden state.
  CHECK(category(point(offloaded, "loss", "cross-entropy"), MemoryCategory::ReloadBuffers) == 2 * hidden_state);
  CHECK(category(point(kept, "loss", "cross-entropy"), MemoryCategory::ReloadBuffers) == 0);
  // One pinned CPU slot per offloaded layer.
  CHECK(offloaded.host_peak.total() == 32 * hidden_state);
  CHECK(kept.host_peak.total() == 0);

  // With the allocators' rounding: 391 x 2 MiB per GPU state, a 1 GiB pinned block per slot.
  const MemoryEstimate rounded_kept = estimate(plan_from(kLlama100k));
  const MemoryEstimate rounded_off = estimate(plan_from(kLlama100k + "activation_offloading: true\n"));
  CHECK(category(point(rounded_kept, "loss", "cross-entropy"), MemoryCategory::Activations) -
            category(point(rounded_off, "loss", "cross-entropy"), MemoryCategory::Activations) ==
        32 * int64_t{391} * (2 << 20));
  CHECK(rounded_off.host_peak.total() == 32 * (int64_t{1} << 30));
}

TEST_CASE("a single-buffer protocol keeps one reload buffer", "[memory]") {
  const MemoryEstimate single =
      estimate(plan_from(kLlama100k + "activation_offloading: true\nhookstream:\n  offload_protocol: single_buffer\n"), false);
  CHECK(category(single.device_points.front(), MemoryCategory::ReloadBuffers) == int64_t{100000} * 4096 * 2);
}

TEST_CASE("full fine-tune: weights, grads and AdamW states in bf16, DDP buckets copy the grads", "[memory]") {
  const std::string yaml = "base_model: Llama-3.1-8B\nsequence_len: 1024\n";
  const Plan plan = plan_from(yaml + "hookstream:\n  world_size: 2\n");
  const ModelStructure structure = build_model_structure(plan);
  int64_t numel = 0;
  for (const Parameter& p : structure.parameters) numel += p.numel();
  CHECK(numel == 8030261248);  // Llama-3.1-8B
  const MemoryEstimate e = estimate(plan, false);
  const MemoryPoint& step = point(e, "optimizer", "AdamW step");
  CHECK(category(step, MemoryCategory::Weights) == 2 * numel);
  CHECK(category(step, MemoryCategory::Gradients) == 2 * numel);
  CHECK(category(step, MemoryCategory::OptimizerStates) == 4 * numel);
  CHECK(category(step, MemoryCategory::DdpBuckets) == 2 * numel);
  CHECK(e.device_peak.phase == "optimizer");

  // gradient_as_bucket_view: grads are views into the buckets, no second copy.
  const MemoryEstimate view = estimate(plan_from(yaml + "hookstream:\n  world_size: 2\n  gradient_as_bucket_view: true\n"), false);
  CHECK(category(point(view, "optimizer", "AdamW step"), MemoryCategory::Gradients) == 0);
  CHECK(category(point(view, "optimizer", "AdamW step"), MemoryCategory::DdpBuckets) == 2 * numel);
  // One process: no DDP, no buckets.
  CHECK(category(point(estimate(plan_from(yaml), false), "optimizer", "AdamW step"), MemoryCategory::DdpBuckets) == 0);
}

TEST_CASE("QLoRA: 4-bit packed base weights plus quantization state, fp32 adapters", "[memory]") {
  const Plan plan = plan_from(
      "base_model: Llama-3.1-8B\nsequence_len: 1024\nadapter: qlora\nload_in_4bit: true\nlora_r: 16\n"
      "lora_target_linear: true\n");
  const ModelStructure structure = build_model_structure(plan);
  int64_t quantized = 0, plain = 0, adapter = 0;
  for (const Parameter& p : structure.parameters) {
    if (p.name.find(".lora_") != std::string::npos) adapter += p.numel();
    else if (p.quantized) quantized += p.numel();
    else plain += p.numel();
  }
  REQUIRE(quantized > 0);
  const MemoryEstimate e = estimate(plan, false);
  const MemoryPoint& step = point(e, "optimizer", "AdamW step");
  CHECK(category(step, MemoryCategory::Weights) == quantized / 2 + 2 * plain);
  const int64_t state = category(step, MemoryCategory::QuantizationState);
  CHECK(state > quantized / 64);          // one 8-bit absmax per 64 weights ...
  CHECK(state < quantized / 64 * 11 / 10);  // ... plus a little for the second-level scales
  CHECK(category(step, MemoryCategory::Adapters) == 4 * adapter);
  CHECK(category(step, MemoryCategory::OptimizerStates) == 8 * adapter);
}

TEST_CASE("checkpointing and tiled MLP shrink activations, an oversized plan is an oom finding", "[memory]") {
  const std::string yaml = "base_model: Llama-3.1-8B\nsequence_len: 16384\n";
  const MemoryEstimate none = estimate(plan_from(yaml));
  const MemoryEstimate checkpointed = estimate(plan_from(yaml + "gradient_checkpointing: true\n"));
  REQUIRE(none.oom);
  CHECK(none.oom->kind == "oom");
  CHECK(none.oom->message.find("H100-SXM") != std::string::npos);
  CHECK(checkpointed.device_peak.total() < none.device_peak.total());
  // Without checkpointing a decoder layer saves (4h + 2q + 2kv + 4I) bf16 values per token.
  const int64_t per_layer_values = 4 * 4096 + 2 * 4096 + 2 * 1024 + 4 * 14336;
  const int64_t saved = category(point(none, "loss", "cross-entropy"), MemoryCategory::Activations);
  CHECK(saved > 32 * per_layer_values * int64_t{16384} * 2);
  CHECK(saved < 33 * per_layer_values * int64_t{16384} * 2);

  const MemoryEstimate tiled = estimate(plan_from(yaml + "gradient_checkpointing: true\ntiled_mlp: true\n"));
  const MemoryPoint& layer0 = point(tiled, "backward", "layer 0");
  CHECK(category(layer0, MemoryCategory::TiledMlpChunks) > 0);
  CHECK(category(layer0, MemoryCategory::RecomputeWorkspace) <
        category(point(checkpointed, "backward", "layer 0"), MemoryCategory::RecomputeWorkspace));
}

TEST_CASE("an EventModel's Alloc/Free ops give per-op memory points", "[memory]") {
  EventModel step;
  const int compute = step.add_stream(Stream{0, 0, 7, "compute"});
  const int a = step.add_buffer(Buffer{"a", MemoryKind::Device, 0, 0, (11 << 20) + 1});
  const int b = step.add_buffer(Buffer{"b", MemoryKind::Device, 0, 0, 1000});
  auto op = [&](OpKind kind, int buffer, const std::string& name) {
    Op o;
    o.kind = kind;
    o.stream = compute;
    o.name = name;
    o.phase = "forward";
    o.accesses.push_back(BufferAccess{buffer, 0, -1, true});
    step.ops.push_back(o);
  };
  op(OpKind::Alloc, a, "alloc a");
  op(OpKind::Alloc, b, "alloc b");
  op(OpKind::Free, a, "free a");
  const std::vector<MemorySample> samples = memory_over_ops(step);
  REQUIRE(samples.size() == 3);
  CHECK(samples[0].bytes == (12 << 20));  // rounded as the caching allocator does
  CHECK(samples[1].bytes == (12 << 20) + 1024);
  CHECK(samples[2].bytes == 1024);

  const Plan plan = plan_from("base_model: tiny-llama\nsequence_len: 8\n");
  MemoryModelOptions options;
  options.step = &step;
  const MemoryEstimate e = estimate_memory(plan, build_model_structure(plan), find_device_spec("H100"), options);
  CHECK(e.device_peak.at == "alloc b");
}
