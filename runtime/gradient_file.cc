#include "runtime/gradient_file.h"

#include <fstream>
#include <stdexcept>

namespace hookstream {

void write_gradients(const std::string& path, const std::vector<at::Tensor>& grads,
                     const std::vector<int64_t>& numels) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < numels.size(); ++i) {
    at::Tensor flat = i < grads.size() && grads[i].defined()
                          ? grads[i].detach().to(at::kFloat).contiguous().view({-1})
                          : at::zeros({numels[i]}, at::kFloat);
    out.write(reinterpret_cast<const char*>(flat.data_ptr<float>()), numels[i] * sizeof(float));
  }
  if (!out) throw std::runtime_error(path + ": cannot write gradients");
}

std::vector<at::Tensor> read_gradients(const std::string& path, const std::vector<int64_t>& numels) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open gradients");
  std::vector<at::Tensor> result;
  for (int64_t n : numels) {
    at::Tensor t = at::empty({n}, at::kFloat);
    in.read(reinterpret_cast<char*>(t.data_ptr<float>()), n * sizeof(float));
    if (!in) throw std::runtime_error(path + ": truncated gradient file");
    result.push_back(t);
  }
  return result;
}

}  // namespace hookstream
