// RoPE frequencies against numbers computed in Python from transformers' published rules
// (modeling_rope_utils.py _compute_llama3_parameters), not from this implementation:
//   inv = [1 / 500000 ** (i / 128) for i in range(0, 128, 2)]; wl = 2 pi / f;
//   low (wl > 8192): f / 8; medium (2048 <= wl <= 8192): s = (8192 / wl - 1) / 3,
//   (1 - s) * f / 8 + s * f; high: f.
#include "runtime/rope.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

using namespace hookstream;

TEST_CASE("rope: Llama 3.1's llama3 scaling keeps high, divides low and blends medium frequencies", "[runtime][rope]") {
  const ModelConfig config = load_model_config(*find_preset("Llama-3.1-8B"));
  REQUIRE(config.rope_type == "llama3");
  const at::Tensor inv = rope_inv_freq(config, at::TensorOptions().dtype(at::kDouble));
  REQUIRE(inv.size(0) == 64);
  const std::pair<int, double> expected[] = {
      {0, 1.0},                                     // high frequency: unchanged
      {20, 0.016560440080994446},                   // wavelength 379: unchanged
      {29, 0.002166570763503359},                   // wavelength 2402: blended
      {32, 0.0005248461609929547},                  // 4443: blended
      {34, 0.00017850781276799638},                 // 6695: blended
      {40, 3.428102195952591e-05},                  // 22911: divided by 8
      {63, 3.068925988914511e-07},                  // divided by 8
  };
  for (const auto& [j, value] : expected) {
    INFO("inv_freq[" << j << "]");
    const double got = inv[j].item<double>();
    CHECK(got == Approx(value).epsilon(1e-12));
  }
}

TEST_CASE("rope: default and Qwen-VL's M-RoPE (text positions) are theta^(-2j/d)", "[runtime][rope]") {
  ModelConfig config = load_model_config(*find_preset("Qwen3-VL-4B"));
  REQUIRE(config.rope_type == "default");
  const at::Tensor inv = rope_inv_freq(config, at::TensorOptions().dtype(at::kDouble));
  const int64_t d = config.head_dim;
  for (int64_t j : {int64_t{0}, d / 4, d / 2 - 1}) {
    CHECK(inv[j].item<double>() == Approx(std::pow(config.rope_theta, -2.0 * j / d)).epsilon(1e-12));
  }
  config.rope_type = "linear";
  config.rope_factor = 4;
  CHECK(rope_inv_freq(config, at::TensorOptions().dtype(at::kDouble))[1].item<double>() ==
        Approx(inv[1].item<double>() / 4).epsilon(1e-12));
}
