// A device profile: what the kernels of a training step achieve on one GPU, measured on it
// (tools/profile_device.py; devices/profiles/README.md for the format and the readings). The time
// model uses it where the device spec's one `matrix_efficiency` and one `hbm_efficiency` (a
// roofline) mispredict: GEMM efficiency varies with shape (LoRA's rank-16 GEMMs reach ~5% of the
// tensor-core peak, a 4096x14336 projection ~68%), attention runs its own kernels (cuDNN/flash SDPA),
// and eager elementwise kernels move more bytes than their inputs and outputs (RMSNorm's float32
// upcast). Compute side only: copies and collectives stay with the device spec.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/cost/device_spec.h"

namespace hookstream {

// The three GEMMs autograd runs for nn.Linear y[m,n] = x[m,k] W[n,k]^T: forward, input gradient
// dY[m,n] W[n,k], weight gradient dY^T[n,m] X[m,k] (torch/csrc/autograd/FunctionsManual.cpp, mm_mat1/2_backward).
enum class GemmForm { Forward = 0, InputGrad = 1, WeightGrad = 2 };

struct GemmReading {
  double m = 0, n = 0, k = 0;
  GemmForm form = GemmForm::Forward;
  double tflops = 0;  // achieved, 2mnk / seconds
};

struct SdpaReading {
  double seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  // Achieved TFLOP/s counting causal attention's useful work: forward 4 seq^2 heads head_dim / 2,
  // backward 2.5x that (dQ, dK, dV, dP and the recomputed P).
  double forward_tflops = 0, backward_tflops = 0;
};

struct ElementwiseCost {
  double forward_ns = 0, backward_ns = 0;  // per element of the tensor the kernel works on
};

struct DeviceProfile {
  std::string device;  // the device spec's name this profile is for
  std::string source;  // the file
  std::vector<GemmReading> gemm;
  std::vector<SdpaReading> sdpa;
  // rmsnorm, rope, silu_mul, residual, lora_scale_add, cross_entropy, embedding (all required).
  std::map<std::string, ElementwiseCost> elementwise;
  double d2d_gbps_read_plus_write = 0;
  double adamw_ns_per_parameter = 0;  // torch.optim.AdamW(fused=True), float32

  // GEMM time: the roofline max(2mnk / peak, 2(mk + nk + mn) / HBM) of `spec`, times the slowdown
  // against that roofline measured for the nearest shape (n, k in log distance, same form),
  // interpolated linearly in log m between its readings and held flat outside them.
  double gemm_ns(double m, double n, double k, GemmForm form, const DeviceSpec& spec) const;
  // Causal SDPA of `batch` sequences: the achieved rate of the nearest head layout, interpolated
  // in log seq, held flat outside the readings.
  double sdpa_ns(double seq, double batch, double heads, double kv_heads, double head_dim, bool backward) const;
  double elementwise_ns(const std::string& kind, double elements, bool backward) const;
};

// Throws InputError "FILE:LINE: key ...: expected ..." for a bad file.
DeviceProfile parse_device_profile(const std::string& yaml_text, const std::string& source);
DeviceProfile load_device_profile(const std::string& path);
// load_device_spec reads profiles/<name>.yaml beside a device file into DeviceSpec::profile.

}  // namespace hookstream
