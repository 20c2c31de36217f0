// runtime/fused_adamw.h: off CUDA (and on LibTorch 1.13) FusedAdamW is torch::optim::AdamW, step for
// step and bit for bit, and its state saves and loads like AdamW's (checkpoints written by either
// load into the other). The fused CUDA path is checked against AdamW by hookstream-runtime-gpu-check.
#include "runtime/fused_adamw.h"


// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;

namespace {

std::vector<at::Tensor> make_params(uint64_t seed) {
  at::manual_seed(seed);
  return {at::randn({16, 8}).requires_grad_(true), at::randn({8}).requires_grad_(true),
          at::randn({3, 5, 2}).requires_grad_(true)};
}

void set_grads(std::vector<at::Tensor>& params, int step) {
  at::manual_seed(1000 + step);
  for (at::Tensor& p : params) p.mutable_grad() = at::randn(p.sizes());
}

}  // namespace

TEST_CASE("fused AdamW: on the CPU it is LibTorch's AdamW bit for bit, and its state round-trips", "[runtime][optim]") {
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  std::vector<at::Tensor> a = make_params(7), b = make_params(7);
  FusedAdamW fused(a, options);
  torch::optim::AdamW plain(b, options);
  CHECK_FALSE(fused.fused());
  for (int step = 0; step < 3; ++step) {
    set_grads(a, step);
    set_grads(b, step);
    fused.step();
    plain.step();
  }
  for (size_t i = 0; i < a.size(); ++i) CHECK(at::equal(a[i], b[i]));
  // A checkpoint of FusedAdamW loads into AdamW and the two go on identically.
  ReloadedAdamW loaded = reload_as_adamw(fused, a, options);
  set_grads(a, 3);
  set_grads(loaded.params, 3);
  fused.step();
  loaded.optimizer->step();
  for (size_t i = 0; i < a.size(); ++i) CHECK(at::equal(a[i], loaded.params[i]));
}
