// Reads a file that may be gzip-compressed (Kineto writes .json.gz) as a sequence of blocks of
// decompressed bytes, so a large trace is never held in memory whole. Plain files are read with
// large read() calls on the calling thread. Gzip files are inflated (ISA-L's igzip when the build
// has it, else zlib) on a second thread into a ring of kRingBlocks blocks (1 MiB in all) while
// the caller parses the previous block, so on two cores inflating and parsing overlap; a file
// whose compressed bytes fit the first read is inflated on the calling thread instead.
// Errors (open, read, corrupt or truncated gzip) are InputErrors thrown on the calling thread,
// naming the file and the offset in the decompressed data where reading stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "traces/importers/block_source.h"

namespace hookstream {

// What inflates gzip: ISA-L's igzip where the build found it (libisal-dev), else zlib; or zlib.
enum class InflateEngine { Fastest, Zlib };

class GzipReader final : public BlockSource {
 public:
  // 256 KiB: inflating into blocks that stay in a core's L2 cache measured 27 ms CPU for the
  // 35 MB a100 trace, 1 MiB blocks 40 ms (single-threaded inflate(): 23 ms).
  static constexpr size_t kDefaultBlockBytes = size_t{1} << 18;
  static constexpr size_t kRingBlocks = 4;

  // `inflate_thread` false: gzip is inflated on the calling thread, by read() straight into the
  // caller's buffer (the Kineto scanner's chunks, parsed on other threads meanwhile).
  explicit GzipReader(const std::string& path, size_t block_bytes = kDefaultBlockBytes,
                      InflateEngine engine = InflateEngine::Fastest, bool inflate_thread = true);
  ~GzipReader();
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  // Whether this build has the engine (zlib always; Fastest means ISA-L when it is available).
  static bool engine_available(InflateEngine engine);
  static const char* engine_name(InflateEngine engine);

  const std::string& path() const override { return path_; }
  bool compressed() const { return inflater_ != nullptr; }

  // The next block of decompressed bytes, empty at the end of the file. The bytes stay valid
  // until the next call (the block then goes back to the ring).
  std::string_view next_block() override;

  // Fills out[0, capacity) with the next decompressed bytes, as many as the file has; 0 at its end.
  // Plain files are read and gzip inflated into `out` itself (a reader with an inflate thread
  // copies from its ring). The errors of next_block(), thrown once the good bytes before the fault
  // are handed out. Not to be mixed with next_block() on one reader.
  size_t read(char* out, size_t capacity);

  // Decompressed bytes handed out so far (the offset of the first byte of the next block).
  uint64_t offset() const { return handed_out_; }

 private:
  class Inflater;

  std::string path_;
  int fd_ = -1;
  std::vector<char> plain_block_;  // plain files: the block handed out last
  size_t plain_pending_ = 0;       // bytes read while sniffing the gzip magic, not yet handed out
  size_t plain_sniffed_ = 0;       // of which there were (read() hands them out from the front)
  bool plain_eof_ = false;
  std::unique_ptr<Inflater> inflater_;
  std::string_view unread_;  // read() with an inflate thread: what is left of the block taken last
  uint64_t handed_out_ = 0;
};

}  // namespace hookstream
