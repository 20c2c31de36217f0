// The safetensors format (its header: sim/inputs/model_source/safetensors_header.h, shared with the
// simulator), with the tensors' raw little-endian bytes read through LibTorch. Hugging Face
// checkpoints and PEFT adapters use it; `hookstream run` reads initial weights from it and
// writes checkpoints with it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "sim/inputs/model_source/safetensors_header.h"

namespace hookstream {

// A safetensors file opened for reading: the header is parsed and checked (offsets inside the file,
// sizes matching dtype x shape) up front; tensors are read on demand. Throws InputError naming the
// file (and the tensor) for a missing, truncated or malformed file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // InputError if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor on the CPU in its stored dtype.
  at::Tensor tensor(const std::string& name) const;

 private:
  std::string path_;
  int64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype name of a scalar type ("F32", "BF16", ...); InputError for types the format
// cannot hold.
std::string safetensors_dtype(c10::ScalarType type);

// Writes `tensors` (any device and layout: copied to contiguous CPU), data in the given order, the
// header padded with spaces to a multiple of 8 bytes (as the reference writer does, so the data is
// aligned), to `path` atomically (a temporary file renamed over it). Names must be unique.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hookstream
