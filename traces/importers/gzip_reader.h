// Reads a file that may be gzip-compressed (Kineto writes .json.gz) as a stream of bytes, a block at
// a time, so a large trace is never held in memory whole. Plain files pass through unchanged
// (zlib's transparent mode). Errors are InputErrors naming the file and the byte offset in the
// decompressed data where reading stopped.
#pragma once

#include <cstdint>
#include <streambuf>
#include <string>
#include <vector>

namespace hookstream {

class GzipReader : public std::streambuf {
 public:
  explicit GzipReader(const std::string& path, size_t block_bytes = 1 << 18);
  ~GzipReader() override;
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  const std::string& path() const { return path_; }
  // Decompressed bytes handed out so far (the offset of the next byte).
  uint64_t offset() const { return consumed_before_block_ + static_cast<uint64_t>(gptr() - eback()); }

 protected:
  int_type underflow() override;

 private:
  std::string path_;
  void* file_ = nullptr;  // gzFile
  std::vector<char> block_;
  uint64_t consumed_before_block_ = 0;
};

}  // namespace hookstream
