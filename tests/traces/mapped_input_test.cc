// A trace file truncated by another process while hookstream has it mapped: one line naming the
// file, exit 2 (MappedInputScope), where the process used to die of SIGBUS. Each case runs the real
// importer code in a forked child (the outcome is the child's exit), truncating the file from
// inside the read, at a point where the reader still has mapped pages ahead of it.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "sim/inputs/input_error.h"
#include "traces/importers/kineto/kineto_event_scanner.h"
#include "traces/importers/mapped_input.h"
#include "traces/importers/nsys/sqlite_database.h"
#include "traces/trace_loader.h"
#include "trace_test_files.h"

using namespace hookstream;

namespace {

struct ChildOutcome {
  bool exited = false;
  int exit_code = -1;
  int signal = 0;
  std::string err;
};

// Runs `body` in a child whose stderr goes to `log`; the child exits 0 when `body` returns.
ChildOutcome run_in_child(const std::string& log, const std::function<void()>& body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(120);
    dup2(fd, STDERR_FILENO);
    try {
      body();
    } catch (...) {
      _exit(121);
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  ChildOutcome out;
  out.exited = WIFEXITED(status);
  out.exit_code = out.exited ? WEXITSTATUS(status) : -1;
  out.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::ifstream in(log, std::ios::binary);
  out.err = std::string(std::istreambuf_iterator<char>(in), {});
  return out;
}

// Keeps nothing; truncates `path` to zero bytes at its first event, once per process.
class TruncatingSink : public KinetoEventSink {
 public:
  explicit TruncatingSink(std::string path) : path_(std::move(path)) {}
  bool wants_category(const std::string&) const override { return true; }
  void event(KinetoEvent&) override {
    if (!truncated_) {
      truncated_ = true;
      REQUIRE(::truncate(path_.c_str(), 0) == 0);
    }
  }
  static bool truncated_;

 private:
  std::string path_;
};
bool TruncatingSink::truncated_ = false;

}  // namespace

TEST_CASE("mapped input: a Kineto .json truncated while the parallel scan reads it is one line and exit 2",
          "[traces][kineto][robustness]") {
  const auto dir = test::temp_dir("mapped-kineto");
  // alexnet's events (0.3 MB of JSON, as the profiler wrote it) in 16 KiB chunks: the file is
  // mapped, and the scan is still in its first chunks when the first event truncates it.
  const std::string path = (dir / "alexnet.json").string();
  std::ofstream(path, std::ios::binary) << test::inflate_all(test::shared_trace("kineto/alexnet-a100-syncevents.json.gz"));
  const auto out = run_in_child((dir / "stderr.txt").string(), [&] {
    KinetoParallelScan scan;
    scan.chunk_bytes = 16 << 10;
    std::vector<std::unique_ptr<KinetoEventSink>> sinks;
    scan_kineto_trace_parallel(path, [&] { return std::make_unique<TruncatingSink>(path); }, sinks, scan);
  });
  INFO(out.err);
  CHECK(out.signal == 0);
  REQUIRE(out.exited);
  CHECK(out.exit_code == 2);
  CHECK(out.err == "hookstream: error: " + MappedInputScope::message(path) + "\n");
}

TEST_CASE("mapped input: an nsys export truncated while SQLite reads it through its mapping is one line and exit 2",
          "[traces][nsys][robustness]") {
  const auto dir = test::temp_dir("mapped-nsys");
  const std::string path = (dir / "cloverleaf.sqlite").string();
  std::filesystem::copy_file(test::shared_trace("nsys/cloverleaf-nsys2024.5.sqlite"), path);
  const auto out = run_in_child((dir / "stderr.txt").string(), [&] {
    SqliteDatabase db(path);
    // One statement holds its read transaction, so SQLite keeps its mapping of the whole file and
    // reads the pages after the truncation through it.
    SqliteQuery query(db, "SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME");
    REQUIRE(query.step());
    REQUIRE(::truncate(path.c_str(), 0) == 0);
    while (query.step()) {
    }
  });
  INFO(out.err);
  CHECK(out.signal == 0);
  REQUIRE(out.exited);
  CHECK(out.exit_code == 2);
  CHECK(out.err == "hookstream: error: " + MappedInputScope::message(path) + "\n");
}

TEST_CASE("mapped input: a SIGBUS outside every mapped input keeps its default action",
          "[traces][robustness]") {
  const auto dir = test::temp_dir("mapped-other");
  const auto out = run_in_child((dir / "stderr.txt").string(), [&] {
    // A range scope and a range-less one (as SQLite's), neither of which a raised signal is.
    static const char mapped[16] = {};
    const MappedInputScope kineto("kineto.json", mapped, sizeof mapped);
    const MappedInputScope nsys("nsys.sqlite");
    ::raise(SIGBUS);
  });
  CHECK_FALSE(out.exited);
  CHECK(out.signal == SIGBUS);
  CHECK(out.err.empty());
}

TEST_CASE("mapped input: a truncated copy at rest is an InputError naming the file, not a crash",
          "[traces][kineto][robustness]") {
  const auto dir = test::temp_dir("mapped-at-rest");
  const std::string text = test::inflate_all(test::shared_trace("kineto/a100-rank3-of-8-control.json.gz"));
  const std::string path = (dir / "a100.json").string();
  std::ofstream(path, std::ios::binary) << text.substr(0, text.size() / 2);
  std::string error;
  try {
    load_trace(path);
  } catch (const InputError& e) {
    error = e.what();
  }
  INFO(error);
  CHECK(error.rfind(path + ": ", 0) == 0);
  CHECK(error.find('\n') == std::string::npos);
}
