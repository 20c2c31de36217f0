// The trainer's parts as library calls: token data, fault hooks, checkpoints, and one rank's
// training loop (world size 1: no DDP wrapper, as accelerate at one process) with save and resume.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "runtime/process_runner.h"
#include "runtime/reducer_factory.h"
#include "runtime/token_data.h"
#include "runtime/trainer.h"
#include "runtime/training_checkpoint.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/plan.h"
#include "tests/temp_dir.h"

// Last: glog (pulled in by LibTorch) defines its own CHECK, which Catch's must replace.
#undef CHECK
#include <catch2/catch.hpp>

namespace fs = std::filesystem;
using namespace hookstream;

namespace {

// A per-process scratch directory (ctest runs tests in parallel), removed when the test ends.
test::TempDir scratch(const std::string& name) {
  return test::TempDir("hookstream-trainer-test-" + std::to_string(getpid()) + "-" + name);
}

void write_tokens(const fs::path& path, const std::vector<uint32_t>& ids) {
  std::ofstream out(path, std::ios::binary);
  for (uint32_t id : ids) {
    const unsigned char le[4] = {static_cast<unsigned char>(id), static_cast<unsigned char>(id >> 8),
                                 static_cast<unsigned char>(id >> 16), static_cast<unsigned char>(id >> 24)};
    out.write(reinterpret_cast<const char*>(le), 4);
  }
}

Plan tiny_run_plan(int world_size) {
  LoadOptions load;
  load.world_size = world_size;
  return load_plan(std::string(HOOKSTREAM_SOURCE_DIR) + "/plans/tiny-run.yaml", load);
}

c10::intrusive_ptr<c10d::ProcessGroup> single_rank_group() {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(free_local_port());
  options.isServer = true;
  options.numWorkers = 1;
  options.timeout = std::chrono::seconds(30);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  return make_gloo_process_group(store, 0, 1, std::chrono::seconds(30));
}

}  // namespace

TEST_CASE("synthetic tokens are the same in every run, differ per rank, and labels are inputs shifted", "[trainer]") {
  TokenSource a = TokenSource::synthetic(42, 64), b = TokenSource::synthetic(42, 64);
  const TokenBatch x = a.next(0, 3, 1, 2, 16), y = b.next(0, 3, 1, 2, 16), other = a.next(1, 3, 1, 2, 16);
  CHECK(at::equal(x.input_ids, y.input_ids));
  CHECK_FALSE(at::equal(x.input_ids, other.input_ids));
  CHECK(at::equal(x.input_ids.narrow(1, 1, 15), x.labels.narrow(1, 0, 15)));
  CHECK(x.input_ids.max().item<int64_t>() < 64);
  CHECK(x.input_ids.sizes() == at::IntArrayRef({2, 16}));
}

TEST_CASE("a token file is split into one contiguous slice per rank, read front to back", "[trainer]") {
  const auto dir = scratch("tokens");
  std::vector<uint32_t> ids(40);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = i;
  write_tokens(dir / "t.bin", ids);
  TokenSource rank1 = TokenSource::from_file((dir / "t.bin").string(), 64, 1, 2, 4);
  const TokenBatch first = rank1.next(1, 0, 0, 1, 4);
  CHECK(first.input_ids[0][0].item<int64_t>() == 20);  // rank 1's slice is tokens [20, 40)
  CHECK(first.labels[0][3].item<int64_t>() == 24);
  CHECK(rank1.position().cursor == 4);
  rank1.next(1, 0, 1, 3, 4);  // 3 more samples: cursor 16, the next would run past 20
  const TokenBatch wrapped = rank1.next(1, 1, 0, 1, 4);
  CHECK(wrapped.input_ids[0][0].item<int64_t>() == 20);
  CHECK(rank1.position().epoch == 1);
  // Resuming at a saved position continues exactly there.
  TokenSource again = TokenSource::from_file((dir / "t.bin").string(), 64, 1, 2, 4);
  again.seek(DataPosition{8, 0});
  CHECK(again.next(1, 0, 0, 1, 4).input_ids[0][0].item<int64_t>() == 28);

  write_tokens(dir / "bad.bin", {1, 2, 3, 99, 4, 5});
  CHECK_THROWS_WITH(validate_token_file((dir / "bad.bin").string(), 64, 1, 2),
                    Catch::Contains("token 99 at offset 3"));
  CHECK_THROWS_AS(TokenSource::from_file((dir / "t.bin").string(), 64, 0, 2, 30), InputError);  // slice too short
}

TEST_CASE("fault injection hooks parse, and anything else is an input error", "[trainer]") {
  const FaultInjection exit = parse_fault_injection("exit-rank=1@step=2");
  CHECK(exit.kind == FaultInjection::Kind::ExitRank);
  CHECK(exit.rank == 1);
  CHECK(exit.step == 2);
  CHECK(parse_fault_injection("kill-rank=0@step=0").kind == FaultInjection::Kind::KillRank);
  CHECK(parse_fault_injection("reload-oom").kind == FaultInjection::Kind::ReloadOom);
  const FaultInjection oom = parse_fault_injection("oom-rank=1@step=3");
  CHECK(oom.kind == FaultInjection::Kind::OomRank);
  CHECK(oom.rank == 1);
  CHECK(oom.step == 3);
  CHECK(parse_fault_injection("").kind == FaultInjection::Kind::None);
  CHECK_THROWS_AS(parse_fault_injection("exit-rank=one"), InputError);
}

TEST_CASE("the failed request of an out-of-memory text, in the caching allocator's units", "[trainer]") {
  // c10/cuda/CUDACachingAllocator.cpp's message, as PyTorch 2.x words it.
  CHECK(requested_bytes_in("CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 79.19 GiB of "
                           "which 1.02 GiB is free.") == static_cast<int64_t>(1.95 * 1024 * 1024 * 1024));
  CHECK(requested_bytes_in("Tried to allocate 512.00 MiB.") == int64_t(512) << 20);
  CHECK(requested_bytes_in("Tried to allocate 20 bytes") == 20);
  CHECK(requested_bytes_in("CUDA out of memory (injected: oom-rank)") == 0);
}

TEST_CASE("one rank trains without a Reducer, the loss falls, and a resumed run repeats it bit for bit",
          "[trainer]") {
  const auto dir = scratch("train");
  const Plan plan = tiny_run_plan(1);
  TrainerOptions options;
  options.steps = 6;
  const TrainResult whole = train(plan, options, single_rank_group());
  REQUIRE(whole.steps.size() == 6);
  CHECK(whole.steps.back().loss < whole.steps.front().loss);
  CHECK(whole.replicas_identical);
  CHECK(whole.steps.front().tokens == 2 * 2 * 32);  // micro-batch x accumulation x sequence

  TrainerOptions first = options;
  first.steps = 3;
  first.checkpoint_dir = (dir / "ckpt").string();
  const TrainResult part = train(plan, first, single_rank_group());
  REQUIRE(part.last_checkpoint);
  const auto latest = latest_checkpoint(first.checkpoint_dir);
  REQUIRE(latest);
  CHECK(latest->step == 3);
  CHECK_NOTHROW(validate_checkpoint(*latest, plan, 1, true));
  CHECK_THROWS_WITH(validate_checkpoint(*latest, plan, 2, false), Catch::Contains("saved by 1 ranks"));

  TrainerOptions second = options;
  second.checkpoint_dir = first.checkpoint_dir;
  second.resume = true;
  const TrainResult rest = train(plan, second, single_rank_group());
  CHECK(rest.first_step == 3);
  REQUIRE(rest.steps.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(rest.steps[i].loss == whole.steps[i + 3].loss);
  CHECK(rest.parameter_digest == whole.parameter_digest);
}

TEST_CASE("latest_checkpoint ignores unfinished saves", "[trainer]") {
  const auto dir = scratch("latest");
  CHECK_FALSE(latest_checkpoint((dir / "none").string()));
  fs::create_directories(dir / "step-00000004.partial");
  fs::create_directories(dir / "step-00000007");  // no manifest: rank 0 died before committing
  CHECK_FALSE(latest_checkpoint(dir.string()));
}

TEST_CASE("free_local_port picks a free port below the kernel's ephemeral range, where none can take it", "[trainer][launcher]") {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  REQUIRE(range >> low >> high);
  std::set<int> seen;
  for (int k = 0; k < 20; ++k) {
    const int port = free_local_port();
    if (low - 10000 >= 1000) {
      CHECK(port >= 10000);
      CHECK(port < low);  // an ephemeral socket (Gloo's pairs, port 0 binds) cannot be handed it
    }
    seen.insert(port);
    // Free: a store can bind it.
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(port);
    options.isServer = true;
    options.numWorkers = 1;
    options.waitWorkers = false;
    options.timeout = std::chrono::seconds(5);
    CHECK_NOTHROW(c10d::TCPStore("127.0.0.1", options));
  }
  CHECK(seen.size() > 1);  // concurrent launchers do not all reach for one port
}
