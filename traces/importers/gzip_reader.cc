#include "traces/importers/gzip_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "sim/input_error.h"

namespace hookstream {

GzipReader::GzipReader(const std::string& path, size_t block_bytes) : path_(path), block_(block_bytes) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw InputError(path, std::string("cannot open (") + std::strerror(errno) + ")");
  gzbuffer(file, static_cast<unsigned>(block_bytes));
  file_ = file;
  setg(block_.data(), block_.data(), block_.data());
}

GzipReader::~GzipReader() {
  if (file_) gzclose(static_cast<gzFile>(file_));
}

GzipReader::int_type GzipReader::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  consumed_before_block_ += static_cast<uint64_t>(egptr() - eback());
  gzFile file = static_cast<gzFile>(file_);
  const int n = gzread(file, block_.data(), static_cast<unsigned>(block_.size()));
  int error = Z_OK;
  const char* message = gzerror(file, &error);
  // zlib returns the data it could inflate from a truncated stream and reports Z_BUF_ERROR
  // ("unexpected end of file") only once the data runs out; a corrupt stream gives Z_DATA_ERROR.
  if (n < 0 || (n == 0 && error != Z_OK)) {
    // zlib prefixes its message with the path, which InputError already gives.
    std::string reason = message ? message : "read error";
    if (reason.compare(0, path_.size() + 2, path_ + ": ") == 0) reason = reason.substr(path_.size() + 2);
    throw InputError(path_, "corrupt or truncated gzip data at decompressed byte " +
                                std::to_string(consumed_before_block_) + " (" + reason + ")");
  }
  setg(block_.data(), block_.data(), block_.data() + n);
  if (n == 0) return traits_type::eof();
  return traits_type::to_int_type(block_[0]);
}

}  // namespace hookstream
