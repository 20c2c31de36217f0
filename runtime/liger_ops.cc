#include "runtime/liger_ops.h"

#include <algorithm>

#include <torch/version.h>

namespace hookstream {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

c10::ScalarType compute_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// Liger's kernels work one row at a time and hold no float32 copy of a whole tensor; these ATen
// versions go through the rows in chunks so that their float32 temporaries stay one chunk's
// (at most kChunkElements each, 64 MiB in float32) at any sequence length.
constexpr int64_t kChunkElements = int64_t(1) << 24;

template <typename Body>
void for_row_chunks(int64_t rows, int64_t width, Body body) {
  const int64_t step = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, width));
  for (int64_t start = 0; start < rows; start += step) body(start, std::min(step, rows - start));
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const int64_t width = x.size(-1);
    const at::Tensor x2 = x.reshape({-1, width});
    at::Tensor y = at::empty_like(x2);
    at::Tensor rstd = at::empty({x2.size(0), 1}, x.options().dtype(compute_type(x)));
    for_row_chunks(x2.size(0), width, [&](int64_t start, int64_t rows) {
      const at::Tensor xf = x2.narrow(0, start, rows).to(compute_type(x));
      const at::Tensor r = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
      rstd.narrow(0, start, rows).copy_(r);
      y.narrow(0, start, rows).copy_(weight * (xf * r).to(x.scalar_type()));
    });
    ctx->save_for_backward({x, weight, rstd});
    return y.view(x.sizes());
  }

  // y = w * cast(xhat), xhat = x r, r = (mean(x^2) + eps)^-1/2 (the cast passes gradients through):
  // dx = r (dy w - xhat mean(dy w xhat)), dw = sum over rows of dy cast(xhat)
  // (_rms_norm_backward_kernel in liger_kernel/ops/rms_norm.py).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& rstd = saved[2];
    const int64_t width = x.size(-1);
    const at::Tensor x2 = x.reshape({-1, width});
    const at::Tensor dy2 = grad_outputs[0].reshape({-1, width});
    const bool want_dx = ctx->needs_input_grad(0), want_dw = ctx->needs_input_grad(1);
    at::Tensor dx = want_dx ? at::empty_like(x2) : at::Tensor();
    at::Tensor dw = want_dw ? at::zeros({width}, weight.options().dtype(compute_type(x))) : at::Tensor();
    for_row_chunks(x2.size(0), width, [&](int64_t start, int64_t rows) {
      const at::Tensor r = rstd.narrow(0, start, rows);
      const at::Tensor xhat = x2.narrow(0, start, rows).to(r.scalar_type()) * r;
      const at::Tensor dy = dy2.narrow(0, start, rows);
      if (want_dx) {
        const at::Tensor dyw = (dy * weight).to(r.scalar_type());
        dx.narrow(0, start, rows).copy_(r * (dyw - xhat * (dyw * xhat).mean(-1, /*keepdim=*/true)));
      }
      if (want_dw) dw += (dy * xhat.to(x.scalar_type())).to(r.scalar_type()).sum(0);
    });
    return {want_dx ? dx.view(x.sizes()) : at::Tensor(), want_dw ? dw.to(weight.scalar_type()) : at::Tensor(), at::Tensor()};
  }
};

// SiLU(gate) * up. Backward writes the two gradients into the saved gate and up, as Liger's
// _swiglu_backward_kernel does (tl.store into a_ptr and b_ptr, liger_kernel/ops/swiglu.py), so it
// allocates no intermediate-size tensor itself: during it gate, up and dc are alive. (The MLP's
// backward as a whole still holds two intermediate-size tensors above the saved ones, measured:
// MemoryModel's Liger mlp_backward_temporaries.)
// That is safe only for gate and up that nobody else reads: projection outputs (they have a
// grad_fn, so they are not a caller's leaf) that are contiguous (not a fused gate_up's chunks, which
// Liger's ensure_contiguous would copy). Anything else gets fresh gradients.
struct SiluMulFunction : torch::autograd::Function<SiluMulFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->saved_data["in_place"] = gate.grad_fn() != nullptr && up.grad_fn() != nullptr && !gate.is_same(up) &&
                                  gate.is_contiguous() && up.is_contiguous();
    ctx->save_for_backward({gate, up});
    at::Tensor c = at::empty_like(gate, at::MemoryFormat::Contiguous);
    const int64_t width = gate.size(-1);
    const at::Tensor a2 = gate.reshape({-1, width}), b2 = up.reshape({-1, width}), c2 = c.view({-1, width});
    for_row_chunks(a2.size(0), width, [&](int64_t start, int64_t rows) {
      at::Tensor out = c2.narrow(0, start, rows);
      at::mul_out(out, at::silu(a2.narrow(0, start, rows)), b2.narrow(0, start, rows));
    });
    return c;
  }

  // d up = dc silu(a); d gate = silu'(a) (dc up), silu'(a) = s (1 + a (1 - s)), s = sigmoid(a):
  // ATen's silu_backward, in float32 inside the kernel as Liger computes it. Per chunk of rows, the
  // two products dc*up and silu(a) are the only temporaries (model dtype, one chunk each).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const bool in_place = ctx->saved_data["in_place"].toBool();
    const at::Tensor& gate = saved[0];
    const at::Tensor& up = saved[1];
    const int64_t width = gate.size(-1);
    const at::Tensor a2 = gate.reshape({-1, width}), b2 = up.reshape({-1, width});
    const at::Tensor dc2 = grad_outputs[0].reshape({-1, width});
    const bool want_gate = ctx->needs_input_grad(0), want_up = ctx->needs_input_grad(1);
    at::Tensor d_gate = !want_gate ? at::Tensor() : in_place ? a2 : at::empty_like(a2);
    at::Tensor d_up = !want_up ? at::Tensor() : in_place ? b2 : at::empty_like(b2);
    for_row_chunks(a2.size(0), width, [&](int64_t start, int64_t rows) {
      const at::Tensor a = a2.narrow(0, start, rows), b = b2.narrow(0, start, rows), dc = dc2.narrow(0, start, rows);
      // Both read before either is written: d_up may overwrite b and d_gate a.
      const at::Tensor dc_up = want_gate ? dc * b : at::Tensor();
      if (want_up) {
        at::Tensor out = d_up.narrow(0, start, rows);
        at::mul_out(out, dc, at::silu(a));
      }
      if (want_gate) {
        at::Tensor out = d_gate.narrow(0, start, rows);
        at::silu_backward_out(out, dc_up, a);
      }
    });
    return {want_gate ? d_gate.view(gate.sizes()) : at::Tensor(), want_up ? d_up.view(up.sizes()) : at::Tensor()};
  }
};

}  // namespace

at::Tensor liger_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
  // PyTorch's fused CUDA RMSNorm (aten/src/ATen/native/cuda/layer_norm_kernel.cu; since 2.8): one
  // kernel each way, float32 inside, and its autograd formula (derivatives.yaml _fused_rms_norm)
  // saves what Liger's does: the input, the weight and a float32 rstd per row.
  if (x.is_cuda() && x.scalar_type() != at::kDouble) {
    return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight, eps));
  }
#endif
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor liger_silu_mul(const at::Tensor& gate, const at::Tensor& up) { return SiluMulFunction::apply(gate, up); }

}  // namespace hookstream
