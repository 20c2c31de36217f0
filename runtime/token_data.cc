#include "runtime/token_data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "sim/inputs/input_error.h"

namespace hookstream {

uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

TokenSource TokenSource::synthetic(uint64_t seed, int64_t vocab_size) {
  TokenSource source;
  source.seed_ = seed;
  source.vocab_size_ = vocab_size;
  return source;
}

TokenSource TokenSource::from_file(const std::string& path, int64_t vocab_size, int rank, int world_size,
                                   int64_t sequence_len) {
  std::error_code error;
  const auto bytes = std::filesystem::file_size(path, error);
  if (error) throw InputError(path, "cannot read the token file (" + error.message() + ")");
  if (bytes % 4 != 0) {
    throw InputError(path, fmt::format("expected little-endian uint32 token ids (a size that is a multiple of 4), "
                                       "got {} bytes", bytes));
  }
  const int64_t tokens = static_cast<int64_t>(bytes / 4);
  TokenSource source;
  source.vocab_size_ = vocab_size;
  source.path_ = path;
  source.slice_begin_ = tokens * rank / world_size;
  source.slice_tokens_ = tokens * (rank + 1) / world_size - source.slice_begin_;
  if (source.slice_tokens_ < sequence_len + 1) {
    throw InputError(path, fmt::format("{} tokens give rank {} of {} a slice of {} tokens; one sample needs "
                                       "sequence_len + 1 = {}", tokens, rank, world_size, source.slice_tokens_,
                                       sequence_len + 1));
  }
  return source;
}

void validate_token_file(const std::string& path, int64_t vocab_size, int world_size, int64_t sequence_len) {
  for (int rank = 0; rank < world_size; ++rank) TokenSource::from_file(path, vocab_size, rank, world_size, sequence_len);
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> chunk(1 << 20);
  int64_t offset = 0;
  while (in) {
    in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(chunk.size()));
    const std::streamsize got = in.gcount();
    for (std::streamsize i = 0; i + 3 < got; i += 4, ++offset) {
      const uint32_t id = uint32_t(chunk[i]) | uint32_t(chunk[i + 1]) << 8 | uint32_t(chunk[i + 2]) << 16 |
                          uint32_t(chunk[i + 3]) << 24;
      if (id >= static_cast<uint64_t>(vocab_size)) {
        throw InputError(path, fmt::format("token {} at offset {} is outside the model's vocabulary (expected ids "
                                           "below vocab_size {})", id, offset, vocab_size));
      }
    }
  }
}

void TokenSource::seek(const DataPosition& position) {
  if (from_file() && (position.cursor < 0 || position.cursor >= slice_tokens_ || position.epoch < 0)) {
    throw InputError(path_, fmt::format("a checkpoint's data position {} is outside this rank's slice of {} tokens "
                                        "(was the checkpoint made with another file?)",
                                        position.cursor, slice_tokens_));
  }
  position_ = position;
}

TokenBatch TokenSource::next(int rank, int step, int micro_step, int64_t batch, int64_t sequence_len) {
  at::Tensor tokens = at::empty({batch, sequence_len + 1}, at::kLong);
  int64_t* out = tokens.data_ptr<int64_t>();
  if (!from_file()) {
    const uint64_t stream = mix_seed(mix_seed(mix_seed(seed_ ^ 0x7a11ULL) + static_cast<uint64_t>(rank)) +
                                     static_cast<uint64_t>(step) * 1000003ULL + static_cast<uint64_t>(micro_step));
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(stream);
    const at::Tensor starts = at::randint(vocab_size_, {batch}, gen, at::kLong);
    const at::Tensor strides = at::randint(1, 4, {batch}, gen, at::kLong);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t start = starts[b].item<int64_t>(), stride = strides[b].item<int64_t>();
      for (int64_t i = 0; i <= sequence_len; ++i) out[b * (sequence_len + 1) + i] = (start + i * stride) % vocab_size_;
    }
  } else {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw InputError(path_, "cannot open the token file");
    std::vector<uint32_t> raw(static_cast<size_t>(sequence_len + 1));
    for (int64_t b = 0; b < batch; ++b) {
      // Consecutive samples overlap by one token (the last label of one is the first input of the
      // next), so a slice is used whole; a sample that would run past the slice's end starts a new pass.
      if (position_.cursor + sequence_len + 1 > slice_tokens_) {
        position_.cursor = 0;
        ++position_.epoch;
      }
      const int64_t offset = slice_begin_ + position_.cursor;
      in.seekg(offset * 4);
      in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size() * 4));
      if (!in) throw InputError(path_, fmt::format("cannot read tokens at offset {}", offset));
      for (size_t i = 0; i < raw.size(); ++i) {
        unsigned char le[4];
        std::memcpy(le, &raw[i], 4);
        const uint32_t id = uint32_t(le[0]) | uint32_t(le[1]) << 8 | uint32_t(le[2]) << 16 | uint32_t(le[3]) << 24;
        if (id >= static_cast<uint64_t>(vocab_size_)) {
          throw InputError(path_, fmt::format("token {} at offset {} is outside the model's vocabulary (expected ids "
                                              "below vocab_size {})", id, offset + static_cast<int64_t>(i),
                                              vocab_size_));
        }
        out[b * (sequence_len + 1) + static_cast<int64_t>(i)] = id;
      }
      position_.cursor += sequence_len;
    }
  }
  TokenBatch result;
  result.input_ids = tokens.narrow(1, 0, sequence_len).contiguous();
  result.labels = tokens.narrow(1, 1, sequence_len).contiguous();
  return result;
}

}  // namespace hookstream
