// Bridge for LibTorch packages that ship c10d's reducer.hpp without the distributed-autograd
// headers it includes (Debian's libtorch-dev 1.13.1). reducer.hpp only needs two names from here:
// DistAutogradContext::GradCallback (for a static_assert against its own GradCallback) and
// ContextPtr (the type of Reducer::RpcContext's members). The definitions below match
// torch/csrc/distributed/autograd/context/context.h of PyTorch 1.13 for those two names; nothing
// else of distributed autograd is declared, so any other use fails to compile instead of
// silently linking against a different layout. runtime/CMakeLists.txt adds this directory to the
// include path only when the installed LibTorch lacks the real header.
#pragma once

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
