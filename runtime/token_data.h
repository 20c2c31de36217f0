// The tokens `hookstream run` trains on: synthetic sequences from the plan's seed, or a local file
// of pre-tokenized ids (docs/run.md, "Data"). Nothing is downloaded.
//
// Each micro-batch is [micro_batch_size, sequence_len + 1] tokens; the caller's inputs are the
// first sequence_len, the labels the last sequence_len (the "labels shifted by one" of a causal LM,
// done here so the model never sees a -100).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace hookstream {

struct TokenBatch {
  at::Tensor input_ids;  // [batch, sequence_len] int64, CPU
  at::Tensor labels;     // [batch, sequence_len] int64, CPU
};

// Where a rank is in its slice of a token file; saved in checkpoints. Synthetic data has no
// position (each batch is a function of seed, rank, step and micro-step).
struct DataPosition {
  int64_t cursor = 0;  // tokens of the rank's slice consumed in this pass
  int64_t epoch = 0;   // completed passes over the slice
};

class TokenSource {
 public:
  // Synthetic: sample b of (rank, step, micro_step) is an arithmetic sequence modulo the
  // vocabulary, t_i = (start + i * stride) mod vocab, with start and stride in {1, 2, 3} drawn from
  // a generator seeded by (seed, rank, step, micro_step): the same in every run, different per
  // rank, and learnable, so the loss falls.
  static TokenSource synthetic(uint64_t seed, int64_t vocab_size);
  // A file of little-endian uint32 token ids, no header. Rank r of w reads the contiguous slice
  // [r * n / w, (r + 1) * n / w) of the n tokens, front to back, wrapping around at its end.
  // Throws InputError for a missing or unreadable file, a size that is not a multiple of 4, or a
  // slice shorter than one sample (`sequence_len + 1` tokens).
  static TokenSource from_file(const std::string& path, int64_t vocab_size, int rank, int world_size,
                               int64_t sequence_len);

  // The next micro-batch. Throws InputError naming the file and token offset for an id outside
  // the vocabulary.
  TokenBatch next(int rank, int step, int micro_step, int64_t batch, int64_t sequence_len);

  bool from_file() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  DataPosition position() const { return position_; }
  // Throws InputError when `position` is outside this rank's slice (a checkpoint of another file).
  void seek(const DataPosition& position);

 private:
  uint64_t seed_ = 0;
  int64_t vocab_size_ = 0;
  std::string path_;
  int64_t slice_begin_ = 0;  // in tokens
  int64_t slice_tokens_ = 0;
  DataPosition position_;
};

// Reads a whole token file once and throws InputError (file, offset, expected) for what
// TokenSource would reject later: a size that is not a multiple of 4, an id outside the vocabulary,
// a slice shorter than one sample for some rank. The launcher calls it before starting ranks.
void validate_token_file(const std::string& path, int64_t vocab_size, int world_size, int64_t sequence_len);

// splitmix64 finaliser: independent streams from (seed, rank, step, ...) without global state.
uint64_t mix_seed(uint64_t x);

}  // namespace hookstream
