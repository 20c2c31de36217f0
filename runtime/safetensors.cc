#include "runtime/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "sim/input_error.h"

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

// The header is at most 100 MB in the reference implementation (safetensors/src/tensor.rs,
// MAX_HEADER_SIZE); a larger length means a corrupt or foreign file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t read_le64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

std::string safetensors_dtype(c10::ScalarType type) {
  for (const DtypeInfo& info : dtypes()) {
    if (info.type == type) return info.name;
  }
  throw InputError("safetensors", std::string("cannot store dtype ") + c10::toString(type));
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::error_code error;
  if (std::filesystem::is_directory(path_, error)) throw InputError(path_, "expected a safetensors file, got a directory");
  std::ifstream file(path_, std::ios::binary);
  if (!file) throw InputError(path_, std::string("cannot read: ") + std::strerror(errno));
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path_, error));
  unsigned char length_bytes[8];
  if (!file.read(reinterpret_cast<char*>(length_bytes), 8)) {
    throw InputError(path_, "truncated: shorter than the 8-byte header length of a safetensors file");
  }
  const uint64_t header_length = read_le64(length_bytes);
  if (header_length > kMaxHeaderBytes || static_cast<int64_t>(header_length) > file_size - 8) {
    throw InputError(path_, "header length " + std::to_string(header_length) + " exceeds the file (" +
                                std::to_string(file_size) + " bytes): truncated or not a safetensors file");
  }
  std::string header(header_length, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_length));
  data_start_ = 8 + static_cast<int64_t>(header_length);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, or out_of_range 406 for a number past double (1e400), which is valid JSON.
    throw InputError(path_, std::string("malformed header JSON: ") + e.what());
  }
  if (!root.is_object()) throw InputError(path_, "expected the header to be a JSON object");
  const int64_t data_size = file_size - data_start_;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) throw InputError(path_, "__metadata__: expected an object of strings");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) throw InputError(path_, "__metadata__." + m.key() + ": expected a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + name;
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
      throw InputError(path_, where + ": expected {dtype, shape, data_offsets}");
    }
    SafetensorsEntry entry;
    if (!value["dtype"].is_string()) throw InputError(path_, where + ": dtype: expected a string");
    entry.dtype = value["dtype"].get<std::string>();
    const DtypeInfo* info = find_dtype(entry.dtype);
    if (info == nullptr) throw InputError(path_, where + ": unsupported dtype " + entry.dtype);
    int64_t numel = 1;
    if (!value["shape"].is_array()) throw InputError(path_, where + ": shape: expected a list of sizes");
    for (const auto& d : value["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw InputError(path_, where + ": shape: expected non-negative integers");
      entry.shape.push_back(d.get<int64_t>());
      numel *= entry.shape.back();
    }
    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_integer() || !offsets[1].is_number_integer()) {
      throw InputError(path_, where + ": data_offsets: expected [begin, end]");
    }
    entry.begin = offsets[0].get<int64_t>();
    entry.end = offsets[1].get<int64_t>();
    if (entry.begin < 0 || entry.end < entry.begin || entry.end - entry.begin != numel * info->bytes) {
      throw InputError(path_, where + ": data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                                  "] do not hold " + std::to_string(numel) + " " + entry.dtype + " values");
    }
    if (entry.end > data_size) {
      throw InputError(path_, where + ": truncated file: data ends at byte " + std::to_string(data_start_ + entry.end) +
                                  ", the file has " + std::to_string(file_size));
    }
    entries_.emplace(name, std::move(entry));
  }
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
