#include "runtime/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {

struct DtypeInfo {
  const char* name;
  c10::ScalarType type;
  int bytes;
};

const std::vector<DtypeInfo>& dtypes() {
  static const std::vector<DtypeInfo> table = {
      {"F64", c10::kDouble, 8}, {"F32", c10::kFloat, 4},  {"F16", c10::kHalf, 2},  {"BF16", c10::kBFloat16, 2},
      {"I64", c10::kLong, 8},   {"I32", c10::kInt, 4},    {"I16", c10::kShort, 2}, {"I8", c10::kChar, 1},
      {"U8", c10::kByte, 1},    {"BOOL", c10::kBool, 1},
  };
  return table;
}

const DtypeInfo* find_dtype(const std::string& name) {
  for (const DtypeInfo& info : dtypes()) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

}  // namespace

std::string safetensors_dtype(c10::ScalarType type) {
  for (const DtypeInfo& info : dtypes()) {
    if (info.type == type) return info.name;
  }
  throw InputError("safetensors", std::string("cannot store dtype ") + c10::toString(type));
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  SafetensorsHeader header = read_safetensors_header(path_);
  // The header reader accepts every dtype the format defines; LibTorch 1.13 holds fewer.
  for (const auto& [name, entry] : header.entries) {
    if (find_dtype(entry.dtype) == nullptr) throw InputError(path_, "tensor " + name + ": unsupported dtype " + entry.dtype);
  }
  data_start_ = header.data_start;
  entries_ = std::move(header.entries);
  metadata_ = std::move(header.metadata);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> result;
  for (const auto& [name, entry] : entries_) result.push_back(name);
  return result;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError(path_, "tensor " + name + " is missing");
  return it->second;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const DtypeInfo* info = find_dtype(e.dtype);
  at::Tensor result = at::empty(e.shape, at::TensorOptions().dtype(info->type));
  std::ifstream file(path_, std::ios::binary);
  file.seekg(data_start_ + e.begin);
  // The format is little-endian, as is every platform LibTorch runs on here.
  if (!file.read(static_cast<char*>(result.data_ptr()), static_cast<std::streamsize>(e.end - e.begin))) {
    throw InputError(path_, "tensor " + name + ": cannot read its bytes (file changed or truncated)");
  }
  return result;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header["__metadata__"] = m;
  }
  std::vector<at::Tensor> data;
  std::set<std::string> seen;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || !seen.insert(name).second) {
      throw InputError(path, "tensor name " + name + " is reserved or used twice");
    }
    at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
    const int64_t bytes = cpu.numel() * static_cast<int64_t>(cpu.element_size());
    header[name] = {{"dtype", safetensors_dtype(cpu.scalar_type())},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(cpu);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, std::string("cannot write: ") + std::strerror(errno));
    unsigned char length[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i, n >>= 8) length[i] = static_cast<unsigned char>(n & 0xff);
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const at::Tensor& t : data) {
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.flush();
    if (!out) {
      std::remove(temporary.c_str());
      throw InputError(path, std::string("cannot write: ") + std::strerror(errno));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    throw InputError(path, "cannot write: " + error.message());
  }
}

}  // namespace hookstream
