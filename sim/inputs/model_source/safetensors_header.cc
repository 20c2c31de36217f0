#include "sim/inputs/model_source/safetensors_header.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {

// The header is at most 100 MB in the reference implementation (safetensors/src/tensor.rs,
// MAX_HEADER_SIZE); a larger length means a corrupt or foreign file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t read_le64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

int safetensors_dtype_bits(const std::string& dtype) {
  // safetensors/src/tensor.rs: enum Dtype and its bitsize().
  static const std::map<std::string, int> bits = {
      {"BOOL", 8},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},     {"I8", 8},
      {"F8_E5M2", 8},  {"F8_E4M3", 8},  {"F8_E8M0", 8}, {"I16", 16},    {"U16", 16},   {"F16", 16},
      {"BF16", 16},    {"I32", 32},     {"U32", 32},    {"F32", 32},    {"F64", 64},   {"I64", 64},
      {"U64", 64},     {"C64", 64},
  };
  auto it = bits.find(dtype);
  return it == bits.end() ? 0 : it->second;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) throw InputError(path, "expected a safetensors file, got a directory");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(path, std::string("cannot read: ") + std::strerror(errno));
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  unsigned char length_bytes[8];
  if (!file.read(reinterpret_cast<char*>(length_bytes), 8)) {
    throw InputError(path, "truncated: shorter than the 8-byte header length of a safetensors file");
  }
  const uint64_t header_length = read_le64(length_bytes);
  if (header_length > kMaxHeaderBytes || static_cast<int64_t>(header_length) > file_size - 8) {
    throw InputError(path, "header length " + std::to_string(header_length) + " exceeds the file (" +
                               std::to_string(file_size) + " bytes): truncated or not a safetensors file");
  }
  std::string text(header_length, '\0');
  file.read(text.data(), static_cast<std::streamsize>(header_length));
  SafetensorsHeader header;
  header.data_start = 8 + static_cast<int64_t>(header_length);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, or out_of_range 406 for a number past double (1e400), which is valid JSON.
    throw InputError(path, std::string("malformed header JSON: ") + e.what());
  }
  if (!root.is_object()) throw InputError(path, "expected the header to be a JSON object");
  const int64_t data_size = file_size - header.data_start;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) throw InputError(path, "__metadata__: expected an object of strings");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) throw InputError(path, "__metadata__." + m.key() + ": expected a string");
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + name;
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
      throw InputError(path, where + ": expected {dtype, shape, data_offsets}");
    }
    SafetensorsEntry entry;
    if (!value["dtype"].is_string()) throw InputError(path, where + ": dtype: expected a string");
    entry.dtype = value["dtype"].get<std::string>();
    const int bits = safetensors_dtype_bits(entry.dtype);
    if (bits == 0) throw InputError(path, where + ": unsupported dtype " + entry.dtype);
    int64_t numel = 1;
    if (!value["shape"].is_array()) throw InputError(path, where + ": shape: expected a list of sizes");
    for (const auto& d : value["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw InputError(path, where + ": shape: expected non-negative integers");
      entry.shape.push_back(d.get<int64_t>());
      numel *= entry.shape.back();
    }
    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_integer() || !offsets[1].is_number_integer()) {
      throw InputError(path, where + ": data_offsets: expected [begin, end]");
    }
    entry.begin = offsets[0].get<int64_t>();
    entry.end = offsets[1].get<int64_t>();
    // Sub-byte dtypes (F4, F6) pack elements; the reference rounds the tensor up to whole bytes.
    const int64_t bytes = (numel * bits + 7) / 8;
    if (entry.begin < 0 || entry.end < entry.begin || entry.end - entry.begin != bytes) {
      throw InputError(path, where + ": data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                                 "] do not hold " + std::to_string(numel) + " " + entry.dtype + " values");
    }
    if (entry.end > data_size) {
      throw InputError(path, where + ": truncated file: data ends at byte " + std::to_string(header.data_start + entry.end) +
                                 ", the file has " + std::to_string(file_size));
    }
    header.entries.emplace(name, std::move(entry));
  }
  return header;
}

}  // namespace hookstream
