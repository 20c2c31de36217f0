// The header of a safetensors file (huggingface/safetensors, docs "Format"): an 8-byte
// little-endian header length N, N bytes of JSON {tensor name: {"dtype", "shape", "data_offsets":
// [begin, end]}, with an optional "__metadata__": {string: string}}, then the tensors' raw bytes,
// offsets relative to the end of the header. Only the header is read, so a 100 GB checkpoint's
// names, shapes and dtypes cost one small read. Shared by the simulator (checking a model's
// structure against the checkpoint in a Hugging Face snapshot) and runtime/safetensors.h (which
// reads the tensors with LibTorch); no LibTorch here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hookstream {

struct SafetensorsEntry {
  std::string dtype;            // safetensors spelling: F32, BF16, F16, F64, I64, I32, I8, U8, BOOL, F8_E4M3, ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;   // byte offsets into the data section
};

struct SafetensorsHeader {
  int64_t data_start = 0;  // 8 + header length: where the data section begins in the file
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};

// Bits per element of a safetensors dtype (safetensors/src/tensor.rs Dtype::bitsize); 0 for a
// name the format does not define.
int safetensors_dtype_bits(const std::string& dtype);

// Reads and checks the header of the file at `path`: the length fits the file, the JSON is an
// object of {dtype, shape, data_offsets}, every dtype is one the format defines, every tensor's
// offsets hold exactly dtype x shape and end inside the file. Throws InputError naming the file
// (and the tensor) otherwise; a file that is not there or is a directory is an InputError too.
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace hookstream
