#include "runtime/checkpoint.h"

#include <stdexcept>

#include <torch/csrc/autograd/autograd.h>

#include "runtime/activation_offload.h"

namespace hookstream {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What a checkpoint node needs in backward; carried in ctx->saved_data as a capsule.
struct LayerCall : torch::CustomClassHolder {
  CheckpointSpec spec;
  bool input_requires_grad = false;
};

c10::intrusive_ptr<LayerCall> call_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<LayerCall>(ctx->saved_data["call"].toCapsule());
}

at::Tensor detached_like(const at::Tensor& t, bool requires_grad) {
  at::Tensor copy = t.detach();
  copy.requires_grad_(requires_grad);
  return copy;
}

// Reentrant (torch/utils/checkpoint.py CheckpointFunction) and non-reentrant in one node; the
// flavour decides which graph task runs the parameters' AccumulateGrad:
//
// - reentrant: backward recomputes with grad enabled and calls torch::autograd::backward on the
//   recomputation: a nested graph task fires the parameters' hooks, and the node returns only the
//   input's gradient.
// - non-reentrant: PyTorch's use_reentrant=False records the ordinary graph in forward and refills
//   the saved activations from a recomputation in saved-tensor unpack hooks
//   (_checkpoint_without_reentrant_generator), so each parameter's AccumulateGrad runs once, in the
//   outer graph task. LibTorch's C++ API has no saved-tensor hooks; the equivalent here is a node
//   whose inputs include the layer's trainable parameters, whose backward recomputes on detached
//   copies of them and calls torch::autograd::grad (which runs no AccumulateGrad), and returns the
//   parameters' gradients: the outer task's AccumulateGrad then runs once per parameter (summed
//   over every use, e.g. both applications of a checkpoint-twice layer). Only the input is saved,
//   as with real checkpointing. What differs from PyTorch is the moment a parameter's hook fires
//   relative to other layers' (all of one layer's parameters become ready when the node finishes,
//   not as each GEMM's weight gradient is produced); the oracle (oracle_model.cc) therefore runs
//   the plain graph where exact hook order matters, and TrainModel uses this node where memory does.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, at::TensorList weights,
                            c10::intrusive_ptr<LayerCall> call) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    call->input_requires_grad = hidden.requires_grad();
    const CheckpointSpec& spec = call->spec;
    auto run = [&](const at::Tensor& input) {
      torch::NoGradGuard no_grad;
      return spec.layer(input, spec.params);
    };
    if (spec.offload != nullptr) {
      OffloadedLayer compute;
      compute.forward = run;
      return spec.offload->forward(spec.layer_index, hidden, compute);
    }
    ctx->save_for_backward({hidden});
    return run(hidden);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto call = call_of(ctx);
    const CheckpointSpec& spec = call->spec;
    at::Tensor input;
    std::vector<at::Tensor> outputs;  // the recomputed output, or the terms whose sum it is
    std::vector<at::Tensor> weight_copies;
    at::Tensor input_grad;
    std::vector<at::Tensor> weight_grads(spec.reentrant ? 0 : spec.weights.size());
    bool recomputed = false;

    auto recompute = [&](const at::Tensor& source) {
      input = detached_like(source, call->input_requires_grad);
      ParameterTable table = spec.params;
      if (!spec.reentrant) {
        for (int index : spec.weights) {
          weight_copies.push_back(detached_like(spec.params[index], true));
          table[index] = weight_copies.back();
        }
      }
      torch::AutoGradMode enable_grad(true);
      // The recompute's early stop (torch/utils/checkpoint.py early_stop, non-reentrant only): the
      // terms stop before the output's last ops, whose results backward does not read.
      std::vector<at::Tensor> terms = !spec.reentrant && spec.recompute_terms ? spec.recompute_terms(input, table)
                                                                               : std::vector<at::Tensor>{spec.layer(input, table)};
      for (at::Tensor& term : terms) {
        if (term.requires_grad()) outputs.push_back(std::move(term));
      }
      recomputed = true;
    };
    auto run_backward = [&]() {
      if (!recomputed) throw std::logic_error("checkpoint: the protocol runs backward before recompute");
      if (outputs.empty()) {
        // torch/utils/checkpoint.py raises exactly this (a recompute whose terms are all constant
        // is one whose output does not require grad either).
        throw std::runtime_error("none of output has requires_grad=True, this checkpoint() is not necessary");
      }
      GraphTaskScope scope(spec.recorder, spec.label);
      const std::vector<at::Tensor> grads(outputs.size(), grad_outputs[0]);
      if (spec.reentrant) {
        torch::autograd::backward(outputs, grads);
        input_grad = input.grad();
      } else {
        std::vector<at::Tensor> wrt;
        if (input.requires_grad()) wrt.push_back(input);
        wrt.insert(wrt.end(), weight_copies.begin(), weight_copies.end());
        const variable_list result = torch::autograd::grad(outputs, wrt, grads, false, false, /*allow_unused=*/true);
        size_t next = 0;
        if (input.requires_grad()) input_grad = result[next++];
        for (size_t w = 0; w < weight_copies.size(); ++w) weight_grads[w] = result[next++];
      }
      outputs.clear();  // the recomputed graph is done: free it before the next layer
    };

    if (spec.offload != nullptr) {
      OffloadedLayer compute;
      compute.recompute = recompute;
      compute.backward = run_backward;
      spec.offload->backward(spec.layer_index, compute);
    } else {
      recompute(ctx->get_saved_variables()[0]);
      run_backward();
    }
    variable_list result{input_grad};
    result.insert(result.end(), weight_grads.begin(), weight_grads.end());
    result.push_back(at::Tensor());  // the LayerCall
    return result;
  }
};

}  // namespace

at::Tensor checkpoint_layer(const at::Tensor& hidden, CheckpointSpec spec) {
  auto call = c10::make_intrusive<LayerCall>();
  call->spec = std::move(spec);
  std::vector<at::Tensor> weights;
  if (!call->spec.reentrant) {
    for (int index : call->spec.weights) weights.push_back(call->spec.params[index]);
  }
  return CheckpointFunction::apply(hidden, at::TensorList(weights), call);
}

at::Tensor checkpoint_reentrant(const at::Tensor& hidden, LayerFunction layer, const ParameterTable& params,
                                HookRecorder* recorder, std::string label) {
  CheckpointSpec spec;
  spec.layer = std::move(layer);
  spec.params = params;
  spec.reentrant = true;
  spec.recorder = recorder;
  spec.label = std::move(label);
  return checkpoint_layer(hidden, std::move(spec));
}

}  // namespace hookstream
