#include "traces/importers/gzip_reader.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "sim/inputs/input_error.h"

#ifdef HOOKSTREAM_WITH_ISAL
#include <isa-l/igzip_lib.h>
#endif

namespace hookstream {

namespace {

constexpr size_t kCompressedChunkBytes = size_t{1} << 18;

// Reads up to `size` bytes, retrying short reads so blocks are full until the end of the file.
// Returns the bytes read; -1 with errno set on a read error.
ssize_t read_fully(int fd, char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

namespace {

// One gzip member at a time: a gzip header, deflate data and the CRC-32/length trailer.
class GzipMemberDecoder {
 public:
  enum class Status { Progress, MemberEnd, Error };
  virtual ~GzipMemberDecoder() = default;
  virtual void start_member() = 0;
  // Inflates from [in, in + in_len) into [out, out + out_len), advancing both past what it used.
  virtual Status step(const unsigned char*& in, size_t& in_len, unsigned char*& out, size_t& out_len,
                      std::string& error) = 0;
};

class ZlibDecoder : public GzipMemberDecoder {
 public:
  ZlibDecoder() {
    // 16 + MAX_WBITS: a gzip header and trailer (CRC-32, length), as gzread expects.
    if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  ~ZlibDecoder() override { inflateEnd(&stream_); }
  void start_member() override { inflateReset(&stream_); }
  Status step(const unsigned char*& in, size_t& in_len, unsigned char*& out, size_t& out_len,
              std::string& error) override {
    stream_.next_in = const_cast<Bytef*>(in);
    stream_.avail_in = static_cast<uInt>(std::min<size_t>(in_len, UINT32_MAX));
    stream_.next_out = out;
    stream_.avail_out = static_cast<uInt>(std::min<size_t>(out_len, UINT32_MAX));
    const int ret = inflate(&stream_, Z_NO_FLUSH);
    in_len -= static_cast<size_t>(stream_.next_in - in);
    in = stream_.next_in;
    out_len -= static_cast<size_t>(stream_.next_out - out);
    out = stream_.next_out;
    if (ret == Z_STREAM_END) return Status::MemberEnd;
    if (ret == Z_OK || ret == Z_BUF_ERROR) return Status::Progress;  // Z_BUF_ERROR: wants input
    error = stream_.msg ? stream_.msg : "zlib error " + std::to_string(ret);
    return Status::Error;
  }

 private:
  z_stream stream_{};
};

#ifdef HOOKSTREAM_WITH_ISAL
// ISA-L's igzip: the same gzip members, about three times as fast as zlib (a100 trace: 7 ms
// against 23 ms CPU); it checks the header, CRC-32 and length as zlib does.
class IsalDecoder : public GzipMemberDecoder {
 public:
  IsalDecoder() { start_member(); }
  void start_member() override {
    isal_inflate_init(&state_);
    state_.crc_flag = ISAL_GZIP;
  }
  Status step(const unsigned char*& in, size_t& in_len, unsigned char*& out, size_t& out_len,
              std::string& error) override {
    state_.next_in = const_cast<uint8_t*>(in);
    state_.avail_in = static_cast<uint32_t>(std::min<size_t>(in_len, UINT32_MAX));
    state_.next_out = out;
    state_.avail_out = static_cast<uint32_t>(std::min<size_t>(out_len, UINT32_MAX));
    const int ret = isal_inflate(&state_);
    in_len -= static_cast<size_t>(state_.next_in - in);
    in = state_.next_in;
    out_len -= static_cast<size_t>(state_.next_out - out);
    out = state_.next_out;
    if (ret < 0) {
      error = message(ret);
      return Status::Error;
    }
    return state_.block_state == ISAL_BLOCK_FINISH ? Status::MemberEnd : Status::Progress;
  }

 private:
  // zlib's words for the same faults, so messages do not depend on the engine.
  static std::string message(int ret) {
    switch (ret) {
      case ISAL_INVALID_BLOCK: return "invalid block type";
      case ISAL_INVALID_SYMBOL: return "invalid code";
      case ISAL_INVALID_LOOKBACK: return "invalid distance too far back";
      case ISAL_INVALID_WRAPPER: return "incorrect header check";
      case ISAL_UNSUPPORTED_METHOD: return "unknown compression method";
      case ISAL_INCORRECT_CHECKSUM: return "incorrect data check";
      default: return "igzip error " + std::to_string(ret);
    }
  }
  inflate_state state_{};
};
#endif

std::unique_ptr<GzipMemberDecoder> make_decoder(InflateEngine engine) {
#ifdef HOOKSTREAM_WITH_ISAL
  if (engine == InflateEngine::Fastest) return std::make_unique<IsalDecoder>();
#endif
  (void)engine;
  return std::make_unique<ZlibDecoder>();
}

}  // namespace

// Inflates on its own thread into a ring of kRingBlocks blocks; the caller takes filled blocks in
// order and gives each back when it asks for the next. The thread never outlives the reader (the
// destructor stops and joins it) and hands errors over as text, thrown on the caller's thread.
class GzipReader::Inflater {
 public:
  // `whole_file`: the first read reached the end of the file. Such a file (alexnet's trace: 25 kB)
  // inflates on the calling thread, in less time than starting a thread takes.
  // `threaded` false: no thread either; read() inflates into the caller's buffer.
  Inflater(int fd, std::vector<unsigned char> first_input, size_t block_bytes, InflateEngine engine, bool whole_file,
           bool threaded = true)
      : fd_(fd), input_(std::move(first_input)), decoder_(make_decoder(engine)),
        blocks_(whole_file || !threaded ? 1 : kRingBlocks), sizes_(blocks_.size(), 0), block_bytes_(block_bytes) {
    in_len_ = input_.size();
    input_.resize(std::max(input_.size(), kCompressedChunkBytes));
    in_ = input_.data();
    if (!whole_file && threaded) thread_ = std::thread([this] { run(); });
  }

  bool threaded() const { return thread_.joinable(); }

  // Without a thread: inflates into out[0, capacity). An error is thrown on the call after the
  // one that handed out the good bytes before it (`offset`: the bytes handed out before this call).
  size_t read(unsigned char* out, size_t capacity, const std::string& path, uint64_t offset) {
    if (finished_) {
      if (!error_.empty()) {
        throw InputError(path, "corrupt or truncated gzip data at decompressed byte " + std::to_string(offset) + " (" +
                                   error_ + ")");
      }
      return 0;
    }
    bool end = false;
    std::string error;
    const size_t n = inflate_into(out, capacity, end, error);
    if (end || !error.empty()) {
      finished_ = true;
      error_ = error;
      if (n == 0) return read(out, capacity, path, offset);
    }
    return n;
  }

  ~Inflater() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  // The next filled block; empty at the end of the data. Throws the inflater's error (with the
  // decompressed offset `offset` where the good data ended) once the blocks before it are taken.
  std::string_view next(const std::string& path, uint64_t offset) {
    if (!thread_.joinable()) fill_inline();
    std::unique_lock<std::mutex> lock(mutex_);
    if (holding_) {
      ++released_;
      holding_ = false;
      space_.notify_one();
    }
    ready_.wait(lock, [&] { return consumed_ < produced_ || finished_; });
    if (consumed_ < produced_) {
      const size_t index = consumed_ % blocks_.size();
      ++consumed_;
      holding_ = true;
      return std::string_view(blocks_[index].data(), sizes_[index]);
    }
    if (!error_.empty()) {
      throw InputError(path, "corrupt or truncated gzip data at decompressed byte " + std::to_string(offset) + " (" +
                                 error_ + ")");
    }
    return {};
  }

 private:
  // Without a thread: the one block is filled when the caller asks (and gave the last one back).
  void fill_inline() {
    if (finished_) return;
    holding_ = false;
    released_ = consumed_;
    produced_ = consumed_;
    std::vector<char>& block = blocks_[0];
    if (block.empty()) block.resize(block_bytes_);
    bool end = false;
    std::string error;
    sizes_[0] = inflate_into(reinterpret_cast<unsigned char*>(block.data()), block.size(), end, error);
    if (sizes_[0] > 0) ++produced_;
    if (end || !error.empty()) {
      finished_ = true;
      error_ = error;
    }
  }

  void run() {
    try {
      for (;;) {
        size_t index;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          space_.wait(lock, [&] { return stop_ || produced_ - released_ < blocks_.size(); });
          if (stop_) return;
          index = produced_ % blocks_.size();
        }
        // The slot is neither filled nor held by the caller: this thread owns it until produced_ moves.
        std::vector<char>& block = blocks_[index];
        if (block.empty()) block.resize(block_bytes_);
        bool end = false;
        std::string error;
        const size_t n = inflate_into(reinterpret_cast<unsigned char*>(block.data()), block.size(), end, error);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          sizes_[index] = n;
          if (n > 0) ++produced_;
          if (end || !error.empty()) {
            finished_ = true;
            error_ = error;
          }
        }
        ready_.notify_one();
        if (end || !error.empty()) return;
      }
    } catch (const std::exception& e) {  // e.g. bad_alloc: the caller reports it, this thread must not throw
      std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
      error_ = e.what();
      ready_.notify_one();
    }
  }

  // Compressed bytes not yet inflated move to the front, and the rest of the buffer is filled.
  // False at the end of the file; a read error is an error.
  bool read_input(std::string& error) {
    std::memmove(input_.data(), in_, in_len_);
    const ssize_t n = read_fully(fd_, reinterpret_cast<char*>(input_.data()) + in_len_, input_.size() - in_len_);
    if (n < 0) {
      error = std::string("read error: ") + std::strerror(errno);
      return false;
    }
    in_ = input_.data();
    in_len_ += static_cast<size_t>(n);
    return n > 0;
  }

  // Inflates into out[0, capacity) until it is full, the data ends (`end`) or an error (`error`).
  size_t inflate_into(unsigned char* out, size_t capacity, bool& end, std::string& error) {
    size_t room = capacity;
    while (room > 0) {
      if (member_done_) {
        // Concatenated gzip members are one stream (gunzip, gzread); bytes after the last member
        // that do not start another are ignored, as gzread ignores them.
        while (in_len_ < 2 && read_input(error)) {
        }
        if (!error.empty()) break;
        if (in_len_ < 2 || in_[0] != 0x1f || in_[1] != 0x8b) {
          end = true;
          break;
        }
        decoder_->start_member();
        member_done_ = false;
      }
      if (in_len_ == 0 && !read_input(error)) {
        // The same words gzread uses for a stream that stops before its trailer.
        if (error.empty()) error = "unexpected end of file";
        break;
      }
      const size_t in_before = in_len_, room_before = room;
      const auto status = decoder_->step(in_, in_len_, out, room, error);
      if (status == GzipMemberDecoder::Status::Error) break;
      if (status == GzipMemberDecoder::Status::MemberEnd) {
        member_done_ = true;
      } else if (in_len_ == in_before && room == room_before && in_len_ > 0) {
        error = "inflate made no progress";  // never seen; guards against spinning
        break;
      }
    }
    return capacity - room;
  }

  // Touched by the inflating thread only.
  int fd_;
  std::vector<unsigned char> input_;
  const unsigned char* in_ = nullptr;  // compressed bytes not yet inflated: [in_, in_ + in_len_)
  size_t in_len_ = 0;
  std::unique_ptr<GzipMemberDecoder> decoder_;
  bool member_done_ = false;

  // The ring: slot i % size holds block i. Guarded by mutex_ except a slot's bytes, which belong
  // to the inflating thread from released_ to produced_ and to the caller while it holds them.
  std::vector<std::vector<char>> blocks_;
  std::vector<size_t> sizes_;
  size_t block_bytes_;
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  uint64_t produced_ = 0, consumed_ = 0, released_ = 0;
  bool holding_ = false, finished_ = false, stop_ = false;
  std::string error_;
  std::thread thread_;  // last: starts once everything above is initialised; none for a small file
};

bool GzipReader::engine_available(InflateEngine engine) {
#ifdef HOOKSTREAM_WITH_ISAL
  return true;
#else
  return engine == InflateEngine::Zlib;
#endif
}

const char* GzipReader::engine_name(InflateEngine engine) {
  return engine_available(InflateEngine::Fastest) && engine == InflateEngine::Fastest ? "isa-l igzip" : "zlib";
}

GzipReader::GzipReader(const std::string& path, size_t block_bytes, InflateEngine engine, bool inflate_thread)
    : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(path, std::string("cannot open (") + std::strerror(errno) + ")");
  plain_block_.resize(std::max<size_t>(block_bytes, 2));  // two bytes at least, to see the gzip magic
  const ssize_t n = read_fully(fd_, plain_block_.data(), plain_block_.size());
  if (n < 0) {
    const int saved = errno;
    ::close(fd_);
    throw InputError(path, std::string("read error (") + std::strerror(saved) + ")");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(plain_block_.data());
  if (n >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) {
    std::vector<unsigned char> first(bytes, bytes + n);
    const size_t plain_block_size = plain_block_.size();
    std::vector<char>().swap(plain_block_);
    try {
      inflater_ = std::make_unique<Inflater>(fd_, std::move(first), block_bytes, engine,
                                             static_cast<size_t>(n) < plain_block_size, inflate_thread);
    } catch (...) {
      ::close(fd_);
      throw;
    }
  } else {
    plain_pending_ = plain_sniffed_ = static_cast<size_t>(n);
    plain_eof_ = static_cast<size_t>(n) < plain_block_.size();
  }
}

GzipReader::~GzipReader() {
  inflater_.reset();  // joins the inflating thread before its file closes
  ::close(fd_);
}

std::string_view GzipReader::next_block() {
  if (inflater_) {
    const std::string_view block = inflater_->next(path_, handed_out_);
    handed_out_ += block.size();
    return block;
  }
  size_t n = plain_pending_;
  plain_pending_ = 0;
  if (n == 0 && !plain_eof_) {
    const ssize_t got = read_fully(fd_, plain_block_.data(), plain_block_.size());
    if (got < 0) {
      throw InputError(path_, "read error at byte " + std::to_string(handed_out_) + " (" + std::strerror(errno) + ")");
    }
    n = static_cast<size_t>(got);
    plain_eof_ = n < plain_block_.size();
  }
  handed_out_ += n;
  return std::string_view(plain_block_.data(), n);
}

size_t GzipReader::read(char* out, size_t capacity) {
  size_t done = 0;
  if (inflater_ && !inflater_->threaded()) {
    done = inflater_->read(reinterpret_cast<unsigned char*>(out), capacity, path_, handed_out_);
  } else if (inflater_) {
    while (done < capacity) {
      if (unread_.empty()) {
        unread_ = next_block();  // counts the block as handed out: taken back, counted as copied
        handed_out_ -= unread_.size();
        if (unread_.empty()) break;
      }
      const size_t n = std::min(unread_.size(), capacity - done);
      std::memcpy(out + done, unread_.data(), n);
      unread_.remove_prefix(n);
      done += n;
      handed_out_ += n;
    }
    return done;
  } else {
    // The bytes read while sniffing the gzip magic first, then read() straight into `out`.
    if (plain_pending_ > 0) {
      const size_t n = std::min(plain_pending_, capacity);
      const size_t first = plain_sniffed_ - plain_pending_;
      std::memcpy(out, plain_block_.data() + first, n);
      plain_pending_ -= n;
      done = n;
    }
    if (done < capacity && plain_pending_ == 0 && !plain_eof_) {
      const ssize_t got = read_fully(fd_, out + done, capacity - done);
      if (got < 0) {
        throw InputError(path_, "read error at byte " + std::to_string(handed_out_ + done) + " (" +
                                    std::strerror(errno) + ")");
      }
      plain_eof_ = static_cast<size_t>(got) < capacity - done;
      done += static_cast<size_t>(got);
    }
  }
  handed_out_ += done;
  return done;
}

}  // namespace hookstream
