// Which rank of a run went away. A collective that fails because a peer died says "connection
// closed" (Gloo) or, with NCCL, only times out; neither names the rank. Every rank therefore keeps
// a heartbeat counter in the run's TCPStore (its own client and thread), watches the others', and
// when one stops advancing records it as vanished. The trainer names it in its error; and if no
// collective fails within the abort delay after that (a rank blocked in a collective that will not
// return soon), the monitor itself reports and ends the process: a dead peer never leaves a silent
// hang. Rank 0 hosts the store: a store that stops answering means rank 0 vanished.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace hookstream {

struct LivenessOptions {
  std::chrono::milliseconds interval{250};       // between heartbeats
  std::chrono::milliseconds stale_after{5000};   // a counter unchanged this long: the rank vanished
  std::chrono::milliseconds abort_after{30000};  // then, no failure in the main thread: exit
};

class RankLiveness {
 public:
  // `store`: a client of the run's store used by this monitor only (TCPStore clients are not shared
  // between threads here).
  RankLiveness(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, LivenessOptions options);
  ~RankLiveness();
  RankLiveness(const RankLiveness&) = delete;
  RankLiveness& operator=(const RankLiveness&) = delete;

  // Ranks seen to vanish so far (sorted).
  std::vector<int> vanished_ranks() const;
  // Waits up to `wait` for a vanished rank to be detected (after a collective failed: the peer's
  // heartbeat may not be stale yet).
  std::vector<int> wait_for_vanished(std::chrono::milliseconds wait) const;
  // This rank finished cleanly: tell the others (a rank that is done is not "vanished") and stop.
  void finish();

 private:
  void run();
  void stop();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  LivenessOptions options_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  std::set<int> vanished_;
  std::thread thread_;
};

}  // namespace hookstream
