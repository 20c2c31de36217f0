#include "runtime/tiled_mlp.h"

#include <torch/csrc/autograd/autograd.h>

namespace hookstream {

TiledMlpSpec tiled_mlp_spec(const Plan& plan, const ModelStructure& structure, const DecoderLayerUse& layer,
                            const ModelStepView& step, const ParameterTable& weights_table, LayerFunction mlp) {
  TiledMlpSpec spec;
  spec.mlp = std::move(mlp);
  spec.weights_table = weights_table;
  spec.weights = mlp_trainable_weights(structure, layer, step);
  spec.shards = step.shards;
  spec.strategy = plan.tiled_mlp_backward;
  spec.weights_as_inputs = plan.tiled_mlp_weights_as_inputs;
  spec.layer = layer.index;
  return spec;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct TiledCall : torch::CustomClassHolder {
  TiledMlpSpec spec;
  size_t weight_inputs = 0;
};

std::string chunk_label(const TiledMlpSpec& spec, size_t chunk) {
  return "tiled_mlp chunk " + std::to_string(chunk) + " (layer " + std::to_string(spec.layer) + ")";
}

void accumulate_into_grad(at::Tensor& weight, const at::Tensor& grad) {
  if (!grad.defined()) return;
  at::Tensor& slot = weight.mutable_grad();
  if (slot.defined()) {
    slot.add_(grad);
  } else {
    slot = grad.clone();
  }
}

struct TiledMlpFunction : torch::autograd::Function<TiledMlpFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, at::TensorList weight_inputs,
                            c10::intrusive_ptr<TiledCall> call) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->save_for_backward({hidden});
    torch::NoGradGuard no_grad;
    // Each shard's output is written into one preallocated tensor, as DeepSpeed's TiledMLP
    // (deepspeed/runtime/sequence_parallel/ulysses_sp.py) fills its output: a list of shard outputs
    // and their cat would hold the MLP's output twice at the end of the forward.
    at::Tensor out;
    int64_t offset = 0;
    for (const at::Tensor& shard : hidden.chunk(call->spec.shards, /*dim=*/1)) {
      const at::Tensor y = call->spec.mlp(shard, call->spec.weights_table);
      if (!out.defined()) {
        std::vector<int64_t> sizes = y.sizes().vec();
        sizes[1] = hidden.size(1);
        out = at::empty(sizes, y.options());
      }
      out.narrow(1, offset, y.size(1)).copy_(y);
      offset += y.size(1);
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto call = c10::static_intrusive_pointer_cast<TiledCall>(ctx->saved_data["call"].toCapsule());
    const TiledMlpSpec& spec = call->spec;
    const at::Tensor hidden = ctx->get_saved_variables()[0];
    const auto hidden_shards = hidden.chunk(spec.shards, 1);
    const auto grad_shards = grad_outputs[0].chunk(spec.shards, 1);
    std::vector<at::Tensor> weights;
    for (int index : spec.weights) weights.push_back(spec.weights_table[index]);

    // The input's gradient is written shard by shard into one zeroed tensor, as DeepSpeed's
    // TiledMLP does (x_shard.grad set to a view of x_grad before each shard's backward, so that
    // AccumulateGrad adds in place): no list of shard gradients and no cat of them at the end.
    const bool input_grad = hidden.requires_grad();
    at::Tensor x_grad = input_grad ? at::zeros_like(hidden) : at::Tensor();
    std::vector<at::Tensor> weight_grads(weights.size());
    int64_t offset = 0;
    for (size_t i = 0; i < hidden_shards.size(); ++i) {
      at::Tensor shard = hidden_shards[i].detach();
      shard.requires_grad_(input_grad);
      at::Tensor shard_grad = input_grad ? x_grad.narrow(1, offset, shard.size(1)) : at::Tensor();
      offset += shard.size(1);
      at::Tensor output;
      {
        torch::AutoGradMode enable_grad(true);
        output = spec.mlp(shard, spec.weights_table);
      }
      const bool last = i + 1 == hidden_shards.size();
      const bool use_backward = spec.strategy == TiledBackward::BackwardPerChunk ||
                                (spec.strategy == TiledBackward::GradThenBackward && last);
      if (!output.requires_grad()) continue;  // its slice of x_grad stays zero
      GraphTaskScope scope(spec.recorder, chunk_label(spec, i));
      if (use_backward) {
        // A nested graph task that runs the weights' AccumulateGrad: DDP's hooks fire here. The
        // shard's AccumulateGrad adds into its slice of x_grad (grad mode is off in backward:
        // torch/csrc/autograd/functions/accumulate_grad.h accumulates in place).
        if (input_grad) shard.mutable_grad() = shard_grad;
        torch::autograd::backward({output}, {grad_shards[i]});
        continue;
      }
      // torch::autograd::grad runs no AccumulateGrad: no hook fires for these chunks.
      std::vector<at::Tensor> wrt;
      if (input_grad) wrt.push_back(shard);
      wrt.insert(wrt.end(), weights.begin(), weights.end());
      const variable_list grads = torch::autograd::grad({output}, wrt, {grad_shards[i]}, false, false,
                                                        /*allow_unused=*/true);
      size_t next = 0;
      if (input_grad) {
        if (grads[next].defined()) shard_grad.copy_(grads[next]);
        ++next;
      }
      for (size_t w = 0; w < weights.size(); ++w, ++next) {
        if (!grads[next].defined()) continue;
        if (spec.strategy == TiledBackward::GradThenBackward) {
          accumulate_into_grad(weights[w], grads[next]);
        } else {
          weight_grads[w] = weight_grads[w].defined() ? weight_grads[w] + grads[next] : grads[next];
        }
      }
    }

    variable_list result;
    result.push_back(x_grad);
    for (size_t w = 0; w < call->weight_inputs; ++w) {
      // BackwardPerChunk / GradThenBackward return None for weight inputs: their AccumulateGrad
      // still runs in the outer task with an undefined gradient, and its post hooks (DDP's) fire.
      result.push_back(spec.strategy == TiledBackward::FunctionReturnsGrads ? weight_grads[w] : at::Tensor());
    }
    result.push_back(at::Tensor());  // the TiledCall
    return result;
  }
};

}  // namespace

at::Tensor tiled_mlp(const at::Tensor& hidden, const TiledMlpSpec& spec, const ParameterTable& inputs_table) {
  auto call = c10::make_intrusive<TiledCall>();
  call->spec = spec;
  if (call->spec.strategy == TiledBackward::FunctionReturnsGrads) call->spec.weights_as_inputs = true;
  std::vector<at::Tensor> inputs;
  if (call->spec.weights_as_inputs) {
    for (int index : spec.weights) inputs.push_back(inputs_table[index]);
  }
  call->weight_inputs = inputs.size();
  return TiledMlpFunction::apply(hidden, at::TensorList(inputs), call);
}

}  // namespace hookstream
