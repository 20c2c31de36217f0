#include "sim/sync/zero/zero0_model.h"

#include <fmt/format.h>

#include "sim/inputs/model_config.h"

namespace hookstream {

namespace {

// deepspeed/runtime/engine.py: allreduce_gradients(bucket_size=MEMORY_OPT_ALLREDUCE_SIZE) passes it
// to buffered_allreduce_fallback as elements_per_buffer; no DeepSpeed JSON key changes it there.
constexpr int64_t kMemoryOptAllreduceSize = 500000000;

class Zero0Model : public SyncModel {
 public:
  Zero0Model(const Plan& plan, const ModelStructure& structure) : plan_(plan), structure_(structure) {}

  std::string name() const override { return "DeepSpeed ZeRO-0"; }

  void begin_step(AutogradEngine&, const StepPosition&) override {}

  SimTensor before_backward(AutogradEngine&, const StepPosition&, SimTensor output) override { return output; }

  // No ZeRO optimizer, no hook: the gradient stays in .grad until the boundary.
  void on_accumulate(AutogradEngine&, const AccumulateEvent&, bool) override {}

  void end_step(AutogradEngine&, const StepPosition& position) override {
    // _backward_epilogue -> allreduce_gradients: "Communicate only at gradient accumulation
    // boundaries" (not a ZeRO stage that partitions gradients), then buffered_allreduce_fallback.
    if (!position.synced || plan_.world_size <= 1) return;
    // split_half_float_double_sparse: one dense group per supported dtype, in the accelerator's
    // order (float, half, bfloat16), each of the module's trainable parameters in parameters() order.
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      int count = 0;
      int64_t elements = 0;
      for (const Parameter& p : structure_.parameters) {
        if (!p.trainable || p.dtype != dtype || p.numel() == 0) continue;
        ++count;
        elements += p.numel();
        // allreduce_no_retain: the bucket is reduced once it holds more than numel_per_bucket.
        if (elements > kMemoryOptAllreduceSize) {
          all_reduce(count, elements, dtype);
          count = 0;
          elements = 0;
        }
      }
      if (count > 0) all_reduce(count, elements, dtype);
    }
  }

 private:
  void all_reduce(int count, int64_t elements, DType dtype) {
    issue(Collective{fmt::format("all_reduce gradients ({} params, {} elements, {})", count, elements,
                                 c10_scalar_type_name(dtype)),
                     elements * dtype_bytes(dtype)});
  }

  const Plan& plan_;
  const ModelStructure& structure_;
};

}  // namespace

std::unique_ptr<SyncModel> make_zero0_model(const Plan& plan, const ModelStructure& structure) {
  return std::make_unique<Zero0Model>(plan, structure);
}

}  // namespace hookstream
