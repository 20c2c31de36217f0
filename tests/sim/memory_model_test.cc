// The memory model: allocator rounding, the offload saving of the streams doc, per-category rules.
#include "sim/cost/memory_model.h"

#include <cmath>

#include <catch2/catch.hpp>

#include "sim/cost/device_spec.h"
#include "sim/cost/step_prediction.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/sync/fsdp1/fsdp1_model.h"

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

TEST_CASE("exact pinned slots take their own size, the caching allocator's a power of two", "[memory]") {
  // 320K tokens: a 2.5 GiB hidden state per layer. PyTorch's pinned caching allocator gives each slot
  // 4 GiB (128 GiB for 32 layers, more than the GPU machines' host); `pinned_slots: exact` 80 GiB.
  const std::string yaml = "base_model: Llama-3.1-8B\nsequence_len: 327680\ngradient_checkpointing: true\n"
                           "activation_offloading: true\n";
  const int64_t slot = int64_t{327680} * 4096 * 2;
  CHECK(estimate(plan_from(yaml)).host_peak.total() == 32 * (int64_t{4} << 30));
  CHECK(estimate(plan_from(yaml + "hookstream:\n  pinned_slots: exact\n")).host_peak.total() == 32 * slot);
  CHECK_THROWS_WITH(plan_from(yaml + "hookstream:\n  pinned_slots: huge\n"),
                    Catch::Contains("pinned_slots") && Catch::Contains("caching") && Catch::Contains("exact"));
}

TEST_CASE("partial offload: listed layers go to pinned slots, the others keep their input on the GPU", "[memory]") {
  const std::string yaml = "base_model: Llama-3.1-8B\nsequence_len: 327680\ngradient_checkpointing: true\n"
                           "activation_offloading: true\nhookstream:\n  pinned_slots: exact\n";
  const int64_t slot = int64_t{327680} * 4096 * 2;
  const MemoryEstimate all = estimate(plan_from(yaml));
  const MemoryEstimate partial = estimate(plan_from(yaml + "  offload_layers: [\"0-23\"]\n"));
  CHECK(all.host_peak.total() == 32 * slot);
  CHECK(partial.host_peak.total() == 24 * slot);
  // The 8 kept inputs are on the GPU until their layer's backward: at the loss all 8, at the peak
  // in the last layer's backward 7 (its own has become its backward's workspace).
  const int64_t more = partial.device_peak.total() - all.device_peak.total();
  CHECK(more >= 7 * slot);
  CHECK(more <= 8 * slot);
  // Checkpointing without offload keeps 32; offload of no layer is not a plan.
  const MemoryEstimate kept = estimate(plan_from("base_model: Llama-3.1-8B\nsequence_len: 327680\ngradient_checkpointing: true\n"));
  CHECK(kept.device_peak.total() > partial.device_peak.total());
  CHECK_THROWS_WITH(plan_from("base_model: Llama-3.1-8B\ngradient_checkpointing: true\nhookstream:\n  offload_layers: [0]\n"),
                    Catch::Contains("hookstream.offload_layers") && Catch::Contains("activation_offloading"));
  CHECK_THROWS_WITH(plan_from(yaml + "  checkpoint_layers: [0, 1, 2, 3]\n  offload_layers: [5]\n"),
                    Catch::Contains("hookstream.offload_layers") && Catch::Contains("layer 5 is not checkpointed"));
  CHECK_THROWS_WITH(plan_from(yaml + "  offload_layers: [40]\n"),
                    Catch::Contains("hookstream.offload_layers") && Catch::Contains("out of range"));
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
  // Sharded engines shard the packed storage but not the quantization state: bitsandbytes keeps
  // the QuantState as an attribute of the parameter and its module, which FSDP's flattening and
  // ZeRO-3's partitioning leave whole on every rank.
  for (const std::string& engine : {std::string("fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n"),
                                    std::string("fsdp_config:\n  use_orig_params: true\n"),
                                    std::string("deepspeed:\n  zero_optimization:\n    stage: 3\n")}) {
    const Plan sharded = plan_from("base_model: Llama-3.1-8B\nsequence_len: 1024\nadapter: qlora\nload_in_4bit: true\nlora_r: 16\n"
                                   "lora_target_linear: true\n" + engine + "hookstream:\n  world_size: 4\n");
    INFO(engine);
    const MemoryPoint& at = point(estimate(sharded, false), "optimizer", "AdamW step");
    CHECK(category(at, MemoryCategory::QuantizationState) == state);
    CHECK(category(at, MemoryCategory::Weights) < quantized / 2);  // the packed weights are sharded
  }
}

TEST_CASE("checkpointing and tiled MLP shrink activations, an oversized plan is an oom finding", "[memory]") {
  const std::string yaml = "base_model: Llama-3.1-8B\nsequence_len: 16384\n";
  const MemoryEstimate none = estimate(plan_from(yaml));
  const MemoryEstimate checkpointed = estimate(plan_from(yaml + "gradient_checkpointing: true\n"));
  REQUIRE(none.oom);
  CHECK(none.oom->kind == "oom");
  CHECK(none.oom->message.find("H100-SXM") != std::string::npos);
  CHECK(checkpointed.device_peak.total() < none.device_peak.total());
  // Without checkpointing a decoder layer saves (2h + 2q + 2kv + 4I) bf16 values per token and its
  // two RMSNorm inputs as fp32 upcasts (2h values of 4 bytes): 184,672 B/token, measured 184,760 on
  // an H100 (tools/measure_layer_memory.py; bench/RESULTS.md "Peak memory").
  const int64_t per_layer_bytes = 2 * (2 * 4096 + 2 * 4096 + 2 * 1024 + 4 * 14336) + 4 * (2 * 4096);
  const int64_t saved = category(point(none, "loss", "cross-entropy"), MemoryCategory::Activations);
  CHECK(saved > 32 * per_layer_bytes * int64_t{16384});
  CHECK(saved < 33 * per_layer_bytes * int64_t{16384});

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

// --- engines (sim/cost/engine_cost.h) ---------------------------------------------------------------

namespace {

std::string zero_yaml(int stage, int world, const std::string& zero = "", const std::string& top = "") {
  return "base_model: Llama-3.1-8B\nsequence_len: 2048\n" + top + "deepspeed:\n  zero_optimization:\n    stage: " +
         std::to_string(stage) + "\n" + zero + "hookstream:\n  world_size: " + std::to_string(world) + "\n";
}

std::string fsdp_yaml(int version, int world, const std::string& config = "", const std::string& top = "") {
  return "base_model: Llama-3.1-8B\nsequence_len: 2048\n" + top + "fsdp_version: " + std::to_string(version) +
         "\nfsdp_config:\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n" + config +
         "hookstream:\n  world_size: " + std::to_string(world) + "\n";
}

// Trainable elements, and the sum over parameters of ceil(numel / world): ZeRO's partitions.
std::pair<int64_t, int64_t> trainable_and_partitions(const Plan& plan, int world) {
  int64_t all = 0, partitions = 0;
  for (const Parameter& p : build_model_structure(plan).parameters) {
    if (!p.trainable) continue;
    all += p.numel();
    partitions += (p.numel() + world - 1) / world;
  }
  return {all, partitions};
}

}  // namespace

TEST_CASE("ZeRO-2 keeps 16-bit weights whole and partitions fp32 master, AdamW states and gradients", "[memory][zero]") {
  const Plan plan = plan_from(zero_yaml(2, 8));
  const auto [p, part] = trainable_and_partitions(plan, 8);
  const MemoryEstimate e = estimate(plan, false);
  const MemoryPoint& step = point(e, "optimizer", "AdamW step");
  CHECK(e.engine == "ZeRO-2");
  CHECK(category(step, MemoryCategory::Weights) == 2 * p);          // bit16_groups_flat
  CHECK(category(step, MemoryCategory::MasterWeights) == 4 * part); // single_partition_of_fp32_groups
  CHECK(category(step, MemoryCategory::OptimizerStates) == 8 * part);
  CHECK(category(step, MemoryCategory::Gradients) == 6 * part);     // 16-bit partition + fp32 partition
  CHECK(category(step, MemoryCategory::DdpBuckets) == 0);
  // contiguous_gradients (default true): one ipg bucket of reduce_bucket_size (5e8) 16-bit elements.
  CHECK(category(step, MemoryCategory::CommBuffers) == 2 * 500000000);
  // overlap_comm doubles it (stage_1_and_2.py setup_buckets), a smaller bucket shrinks it.
  CHECK(category(point(estimate(plan_from(zero_yaml(2, 8, "    overlap_comm: true\n")), false), "optimizer", "AdamW step"),
                 MemoryCategory::CommBuffers) == 4 * 500000000);
  CHECK(category(point(estimate(plan_from(zero_yaml(2, 8, "    reduce_bucket_size: 2e7\n")), false), "optimizer", "AdamW step"),
                 MemoryCategory::CommBuffers) == 2 * 20000000);
  // 2 P + 18 P / N (deepspeed estimate_zero2_model_states_mem_needs), up to the per-parameter ceil.
  const int64_t states = category(step, MemoryCategory::Weights) + category(step, MemoryCategory::MasterWeights) +
                         category(step, MemoryCategory::OptimizerStates) + category(step, MemoryCategory::Gradients);
  CHECK(states == 2 * p + 18 * part);
}

TEST_CASE("ZeRO-1 keeps whole 16-bit gradients, ZeRO-3 partitions the weights and gathers the largest module", "[memory][zero]") {
  const auto [p, part] = trainable_and_partitions(plan_from(zero_yaml(1, 8)), 8);
  const MemoryPoint one = point(estimate(plan_from(zero_yaml(1, 8)), false), "optimizer", "AdamW step");
  CHECK(category(one, MemoryCategory::Gradients) == 2 * p + 4 * part);
  CHECK(category(one, MemoryCategory::Weights) == 2 * p);

  const Plan three = plan_from(zero_yaml(3, 8, "    stage3_prefetch_bucket_size: 0\n    stage3_param_persistence_threshold: 0\n"));
  const MemoryEstimate e = estimate(three, false);
  const MemoryPoint& step = point(e, "optimizer", "AdamW step");
  CHECK(category(step, MemoryCategory::Weights) == 2 * part);
  // Llama-3.1-8B's largest module is embed_tokens (= lm_head): 128256 x 4096; fetched 16-bit plus its 16-bit grads.
  CHECK(category(step, MemoryCategory::GatheredParams) == 4 * int64_t{128256} * 4096);
  // Prefetching: every module fetch gathers up to stage3_prefetch_bucket_size more elements of the
  // trace ahead, whole parameters, as long as fewer than stage3_max_live_parameters are gathered
  // (fetch_sub_module: min(max_n_available - n_available, prefetch_bucket_sz)). Without a reuse
  // distance the gathered elements fill to max_live_parameters, overshooting by less than the
  // module being fetched plus one prefetched MLP weight (14336 x 4096).
  const int64_t largest = int64_t{128256} * 4096, mlp_weight = int64_t{14336} * 4096;
  auto gathered_elements = [&](const std::string& zero) {
    const Plan plan = plan_from(zero_yaml(3, 8, zero));
    return (category(point(estimate(plan, false), "optimizer", "AdamW step"), MemoryCategory::GatheredParams) - 2 * largest) / 2;
  };
  const int64_t live = gathered_elements("    stage3_prefetch_bucket_size: 1e8\n    stage3_max_reuse_distance: 0\n");
  CHECK(live > int64_t{1000000000} - mlp_weight);
  CHECK(live < int64_t{1000000000} + largest + mlp_weight);
  const int64_t capped = gathered_elements("    stage3_prefetch_bucket_size: 1e8\n    stage3_max_live_parameters: 6e8\n    stage3_max_reuse_distance: 0\n");
  CHECK(capped > int64_t{600000000} - mlp_weight);
  CHECK(capped < int64_t{600000000} + largest + mlp_weight);
  // DeepSpeed's default reuse distance keeps modules near the forward/backward turn (not subject to
  // max_live_parameters, which only limits prefetching); with this prefetch they are already kept,
  // the prefetch having skipped over their backward use.
  CHECK(gathered_elements("    stage3_prefetch_bucket_size: 1e8\n") >= live);
  const MemoryPoint prefetch = point(estimate(plan_from(zero_yaml(3, 8, "    stage3_prefetch_bucket_size: 1e8\n")), false), "optimizer", "AdamW step");
  // stage3_max_reuse_distance (default 1e9) keeps a released module gathered when the trace uses
  // it again within that many elements: with every parameter partitioned and no prefetch, a reuse
  // distance above the whole model keeps every module from its forward to its backward.
  const Plan kept = plan_from(zero_yaml(3, 8, "    stage3_prefetch_bucket_size: 0\n    stage3_param_persistence_threshold: 0\n"
                                              "    stage3_max_reuse_distance: 2e10\n"));
  const ModelStructure kept_structure = build_model_structure(kept);
  int64_t all = 0;
  for (const Parameter& p : kept_structure.parameters) all += p.numel();
  CHECK(category(point(estimate(kept, false), "optimizer", "AdamW step"), MemoryCategory::GatheredParams) == 2 * all + 2 * largest);
  // Persistent parameters (the norms, 4096 elements < 1e5) stay whole: more weights than without.
  CHECK(category(prefetch, MemoryCategory::Weights) > category(step, MemoryCategory::Weights));
}

TEST_CASE("ZeRO offload moves the fp32 master, states and gradients to pinned host memory", "[memory][zero]") {
  const Plan plan = plan_from(zero_yaml(2, 4, "    offload_optimizer:\n      device: cpu\n"));
  const auto [p, part] = trainable_and_partitions(plan, 4);
  const MemoryEstimate e = estimate(plan, false);
  const MemoryPoint& step = point(e, "optimizer", "AdamW step");
  CHECK(category(step, MemoryCategory::MasterWeights) == 0);
  CHECK(category(step, MemoryCategory::OptimizerStates) == 0);
  CHECK(category(step, MemoryCategory::Weights) == 2 * p);
  CHECK(category(e.host_peak, MemoryCategory::MasterWeights) == 4 * part);
  CHECK(category(e.host_peak, MemoryCategory::OptimizerStates) == 8 * part);
  CHECK(category(e.host_peak, MemoryCategory::Gradients) == 4 * part);
  // offload_param is a stage-3 setting: at stage 3 the 16-bit partitions go to the host too.
  const MemoryEstimate both = estimate(plan_from(zero_yaml(3, 4, "    offload_optimizer:\n      device: cpu\n    offload_param:\n      device: cpu\n"
                                                                   "    stage3_param_persistence_threshold: 0\n")), false);
  CHECK(category(point(both, "optimizer", "AdamW step"), MemoryCategory::Weights) == 0);
  CHECK(category(both.host_peak, MemoryCategory::Weights) == 2 * part);
}

TEST_CASE("FSDP2 shards fp32-upcast trainable parameters on dim 0 and gathers them in bf16", "[memory][fsdp2]") {
  const Plan plan = plan_from(fsdp_yaml(2, 8));
  const ModelStructure structure = build_model_structure(plan);
  int64_t sharded = 0, gathered_layer = 0;
  for (const Parameter& p : structure.parameters) {
    const int64_t rows = (p.shape[0] + 7) / 8;
    sharded += rows * (p.numel() / p.shape[0]);
    if (p.layer == 0) gathered_layer += 8 * rows * (p.numel() / p.shape[0]);
  }
  const MemoryEstimate e = estimate(plan, false);
  const MemoryPoint& step = point(e, "optimizer", "AdamW step");
  // accelerate's fsdp2_prepare_model upcasts trainable parameters to fp32 under bf16 mixed precision.
  CHECK(category(step, MemoryCategory::Weights) == 4 * sharded);
  CHECK(category(step, MemoryCategory::OptimizerStates) == 8 * sharded);
  CHECK(category(step, MemoryCategory::Gradients) == 4 * sharded);
  // Without mixed precision nothing is upcast: half the sharded bytes.
  CHECK(category(point(estimate(plan_from(fsdp_yaml(2, 8, "", "bf16: false\n")), false), "optimizer", "AdamW step"),
                 MemoryCategory::Weights) == 2 * sharded);
  // reshard_after_forward: false keeps every layer gathered (bf16) until its backward: more unsharded memory.
  const int64_t resharded = category(step, MemoryCategory::FsdpUnsharded);
  const int64_t kept = category(point(estimate(plan_from(fsdp_yaml(2, 8, "  reshard_after_forward: false\n")), false), "optimizer", "AdamW step"),
                                MemoryCategory::FsdpUnsharded);
  // 30 more bf16 layers gathered: 32 minus the computing and the prefetched one.
  CHECK(kept - resharded == 30 * 2 * gathered_layer);
  // CPU offload: sharded parameters, grads and states move to the host; the device keeps the unsharded buffers.
  const MemoryEstimate offloaded = estimate(plan_from(fsdp_yaml(2, 8, "  offload_params: true\n")), false);
  const MemoryPoint& off = point(offloaded, "optimizer", "AdamW step");
  CHECK(category(off, MemoryCategory::Weights) == 0);
  CHECK(category(off, MemoryCategory::OptimizerStates) == 0);
  CHECK(category(off, MemoryCategory::FsdpUnsharded) == resharded);
  CHECK(category(offloaded.host_peak, MemoryCategory::Weights) == 4 * sharded);
  CHECK(category(offloaded.host_peak, MemoryCategory::OptimizerStates) == 8 * sharded);
}

TEST_CASE("FSDP1 pads each unit's FlatParameter to the world size, SHARD_GRAD_OP and BACKWARD_PRE hold more", "[memory][fsdp1]") {
  std::string tiny = fsdp_yaml(1, 3);
  tiny.replace(tiny.find("Llama-3.1-8B"), 12, "tiny-llama");
  const Plan plan = plan_from(tiny);
  const ModelStructure structure = build_model_structure(plan);
  int64_t shards = 0;
  for (const Fsdp1Unit& u : fsdp1_units(plan, structure)) shards += (u.numel + 2) / 3;
  const MemoryPoint step = point(estimate(plan, false), "optimizer", "AdamW step");
  CHECK(category(step, MemoryCategory::Weights) == 4 * shards);  // fp32 flat shards (accelerate's upcast)

  const Plan full = plan_from(fsdp_yaml(1, 8));
  const int64_t full_shard = category(point(estimate(full, false), "optimizer", "AdamW step"), MemoryCategory::FsdpUnsharded);
  const int64_t grad_op = category(point(estimate(plan_from(fsdp_yaml(1, 8, "  reshard_after_forward: false\n")), false), "optimizer", "AdamW step"),
                                   MemoryCategory::FsdpUnsharded);
  // SHARD_GRAD_OP keeps all 32 layers gathered where FULL_SHARD (HF's NO_PREFETCH) holds the computing one:
  // 31 more layers of _full_param_padded (bf16, world x shard) and _mp_shard (bf16, shard).
  const int64_t shard = (fsdp1_units(full, build_model_structure(full))[1].numel + 7) / 8;
  const int64_t layer = 2 * 8 * shard + 2 * shard;
  CHECK(grad_op - full_shard == 31 * layer);
  // HF's default is NO_PREFETCH; accelerate's fsdp_backward_prefetch: BACKWARD_PRE gathers one more layer.
  Plan pre = full;
  pre.engine.settings.push_back("fsdp_config.fsdp_backward_prefetch: BACKWARD_PRE");
  CHECK(category(point(estimate(pre, false), "optimizer", "AdamW step"), MemoryCategory::FsdpUnsharded) - full_shard == layer);
  // NO_SHARD: nothing sharded, nothing gathered.
  Plan no_shard = full;
  no_shard.engine.settings.push_back("fsdp_config.fsdp_sharding_strategy: NO_SHARD");
  const MemoryPoint whole = point(estimate(no_shard, false), "optimizer", "AdamW step");
  CHECK(category(whole, MemoryCategory::FsdpUnsharded) == 0);
  CHECK(category(whole, MemoryCategory::Weights) > 7 * category(point(estimate(full, false), "optimizer", "AdamW step"), MemoryCategory::Weights));
}

TEST_CASE("a trained Qwen3-VL tower holds its saved tensors through the decoder's whole backward", "[memory]") {
  // Qwen3-VL-4B: 24 ViT blocks of width 1024 (MLP 4096), 3 DeepStack mergers, 2x2 patch merge; one
  // image of 1024 merged tokens = 4096 patches of 3 x 2 x 16 x 16 pixels, bf16.
  const std::string vl = "base_model: Qwen3-VL-4B\nsequence_len: 16384\nadapter: lora\nlora_r: 16\nlora_alpha: 32\n"
                         "gradient_checkpointing: true\n";
  const int64_t patches = 4096;
  const int64_t expected = 2 * (patches * 1536 + 24 * patches * (9 * 1024 + 2 * 4096) + 4 * patches * 4 * 1024);
  const MemoryEstimate trained = estimate(plan_from(vl + "lora_target_linear: true\n"), false);
  const MemoryEstimate text_only = estimate(plan_from(vl + "lora_target_linear: true\nhookstream: {vision_inputs: false}\n"), false);
  const MemoryEstimate frozen = estimate(plan_from(vl + "lora_target_modules: [q_proj, v_proj]\n"), false);
  const MemoryEstimate frozen_text = estimate(plan_from(vl + "lora_target_modules: [q_proj, v_proj]\nhookstream: {vision_inputs: false}\n"), false);
  for (const auto& [phase, at] : std::vector<std::pair<std::string, std::string>>{{"loss", "cross-entropy"}, {"backward", "layer 0"}}) {
    INFO(phase << " " << at);
    CHECK(category(point(trained, phase, at), MemoryCategory::Activations) -
              category(point(text_only, phase, at), MemoryCategory::Activations) ==
          expected);
    // A tower with nothing to train records no graph: nothing saved.
    CHECK(category(point(frozen, phase, at), MemoryCategory::Activations) ==
          category(point(frozen_text, phase, at), MemoryCategory::Activations));
  }
}

TEST_CASE("cuBLAS's two workspaces and the residual stream's two gradients in every layer's backward", "[memory]") {
  // Measured per part of the step on an H100 (bench/gpu-results/2026-11-27-h100-s18): 64 MiB in every
  // part (two 32 MiB workspaces, the forward's thread and the autograd device thread), and two hidden
  // states per token above the per-layer sets in each layer's backward.
  const std::string yaml = "base_model: Llama-3.1-8B\nsequence_len: 8192\ngradient_checkpointing: true\n";
  const Plan h100 = plan_from(yaml + "hookstream:\n  gpu: H100-SXM\n");
  const MemoryEstimate e = estimate(h100, false);
  CHECK(category(point(e, "optimizer", "AdamW step"), MemoryCategory::Workspaces) == 64 * (int64_t{1} << 20));
  const MemoryEstimate a100 = estimate(plan_from(yaml + "hookstream:\n  gpu: A100-80GB\n"), false);
  CHECK(category(point(a100, "optimizer", "AdamW step"), MemoryCategory::Workspaces) == 2 * int64_t{8519680});
  // The 8K checkpointed LoRA plan of the GPU benchmark: measured peak 19.78 GiB in layer 31's
  // backward, of which 0.16 GiB is the Reducer's bucket that `hookstream run` built at world size 1
  // until session 20 and accelerate does not (no DDP for one process): 19.62 GiB to predict. Without the residual
  // gradients and the workspaces the model said 19.28 GiB (-1.7%).
  const Plan bench = load_plan(std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/plans/llama8b-lora-8k-checkpoint.yaml");
  const MemoryEstimate b = estimate(bench);
  const double measured = 19.62 * (1 << 30);
  INFO(format_gib(b.device_peak.total()) << " at " << b.device_peak.phase << " " << b.device_peak.at);
  CHECK(b.device_peak.phase == "backward");
  CHECK(std::abs(b.device_peak.total() / measured - 1) < 0.01);
}

TEST_CASE("over a step, a protocol that frees its reload buffers holds one at the peak, one that keeps them two",
          "[memory]") {
  // The 8K offloaded LoRA plan of the GPU benchmark under three protocols. double_buffer_events
  // allocates its two reload buffers once and reuses them (runtime/activation_offload.cc), so both
  // are held in every layer's backward; save_on_cpu and deepspeed_offload free each reload after the
  // layer's backward, before the next layer's copy allocates (host order), and the caching
  // allocator counts a freed block out at the free, record_stream or not.
  Plan plan = load_plan(std::string(HOOKSTREAM_SOURCE_DIR) + "/bench/plans/llama8b-lora-8k-offload_double.yaml");
  const ModelStructure structure = build_model_structure(plan);
  const DeviceSpec device = find_device_spec(plan.gpu);
  const int64_t hidden_state = device_allocation_bytes(int64_t{8192} * 4096 * 2);
  auto peak_of = [&](const std::string& protocol) {
    Plan p = plan;
    p.offload_protocol = protocol;
    return predict_step(p, structure, device).memory.device_peak;
  };
  const MemoryPoint kept = peak_of("double_buffer_events");
  CHECK(category(kept, MemoryCategory::ReloadBuffers) == 2 * hidden_state);
  for (const char* protocol : {"save_on_cpu", "deepspeed_offload"}) {
    INFO(protocol);
    const MemoryPoint freed = peak_of(protocol);
    CHECK(category(freed, MemoryCategory::ReloadBuffers) == hidden_state);
    CHECK(kept.total() - freed.total() == hidden_state);
    CHECK(freed.at == kept.at);
  }
  // single_buffer keeps its one buffer: the same peak as the freeing protocols.
  CHECK(category(peak_of("single_buffer"), MemoryCategory::ReloadBuffers) == hidden_state);
}

// Liger's RMSNorm saves each norm's input in bf16 (and an fp32 rstd per row) instead of the fp32
// upcast; input_layernorm's input is the layer's input, held by the checkpoint already. Liger's
// SwiGLU saves gate and up, not silu(gate). docs/memory-and-time.md "Liger kernels".
TEST_CASE("Liger's RMSNorm and SwiGLU save less per layer, with the plugin only", "[memory][liger]") {
  const std::string yaml = "base_model: Llama-3.1-8B\nsequence_len: 16384\n";
  const std::string liger = "plugins:\n  - axolotl.integrations.liger.LigerPlugin\n";
  const int64_t tokens = 16384;
  auto saved_at_loss = [&](const std::string& extra) {
    return category(point(estimate(plan_from(yaml + extra), false), "loss", "cross-entropy"), MemoryCategory::Activations);
  };
  auto workspace = [&](const std::string& extra) {
    return category(point(estimate(plan_from(yaml + "gradient_checkpointing: true\n" + extra), false), "backward", "layer 0"),
                    MemoryCategory::RecomputeWorkspace);
  };
  // Not checkpointed: per layer, 2h fp32 (16 bytes per h) become 2h bf16 (4) plus two fp32 rstds.
  const int64_t norm_saving = (4 * 2 * 4096 - 2 * 2 * 4096 - 4 * 2) * tokens;
  CHECK(saved_at_loss("") - saved_at_loss(liger + "liger_rms_norm: true\n") == 32 * norm_saving);
  // Checkpointed: the layer's input costs nothing more, so 2h fp32 become h bf16.
  CHECK(workspace("") - workspace(liger + "liger_rms_norm: true\n") == (4 * 2 * 4096 - 2 * 4096 - 4 * 2) * tokens);
  // SwiGLU: one intermediate-size bf16 tensor less per layer.
  CHECK(saved_at_loss("") - saved_at_loss(liger + "liger_glu_activation: true\n") == 32 * 2 * 14336 * tokens);
  // Without the plugin the keys change nothing.
  CHECK(saved_at_loss("liger_rms_norm: true\nliger_glu_activation: true\n") == saved_at_loss(""));
}
