// What a streaming parser reads: a file's bytes as a sequence of blocks, with the file's path
// for error messages. GzipReader serves a whole (possibly compressed) file; the Kineto scanner's
// chunks serve one slice of it each, so several threads can parse one trace.
#pragma once

#include <string>
#include <string_view>

namespace hookstream {

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  virtual const std::string& path() const = 0;
  // The next block of bytes, empty at the end. The bytes stay valid until the next call.
  virtual std::string_view next_block() = 0;
};

}  // namespace hookstream
