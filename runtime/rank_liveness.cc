#include "runtime/rank_liveness.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace hookstream {

namespace {
std::string heartbeat_key(int rank) { return "hookstream/heartbeat/" + std::to_string(rank); }
std::string done_key(int rank) { return "hookstream/done/" + std::to_string(rank); }

std::string ranks_text(const std::set<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}
}  // namespace

RankLiveness::RankLiveness(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, LivenessOptions options)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), options_(options) {
  thread_ = std::thread([this] { run(); });
}

RankLiveness::~RankLiveness() { stop(); }

void RankLiveness::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RankLiveness::finish() {
  stop();
  try {
    store_->set(done_key(rank_), std::vector<uint8_t>{1});
  } catch (const std::exception&) {
    // Rank 0 (the store's host) may already have finished and closed it: nothing to tell.
  }
}

std::vector<int> RankLiveness::vanished_ranks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {vanished_.begin(), vanished_.end()};
}

std::vector<int> RankLiveness::wait_for_vanished(std::chrono::milliseconds wait) const {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, wait, [this] { return !vanished_.empty() || stopping_; });
  return {vanished_.begin(), vanished_.end()};
}

void RankLiveness::run() {
  using Clock = std::chrono::steady_clock;
  std::map<int, int64_t> last_value;
  std::map<int, Clock::time_point> last_change;
  std::optional<Clock::time_point> first_vanished;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    std::set<int> vanished_now;
    try {
      store_->add(heartbeat_key(rank_), 1);
      for (int r = 0; r < world_size_; ++r) {
        if (r == rank_) continue;
        // add(key, 0) reads a counter without blocking (get() would wait for a missing key).
        const int64_t value = store_->add(heartbeat_key(r), 0);
        if (!last_value.count(r) || value != last_value[r]) {
          last_value[r] = value;
          last_change[r] = Clock::now();
        } else if (Clock::now() - last_change[r] > options_.stale_after && !store_->check({done_key(r)})) {
          vanished_now.insert(r);
        }
      }
    } catch (const std::exception&) {
      if (rank_ != 0) vanished_now.insert(0);  // the store's host is gone
    }
    lock.lock();
    if (!vanished_now.empty()) {
      vanished_.insert(vanished_now.begin(), vanished_now.end());
      if (!first_vanished) first_vanished = Clock::now();
      changed_.notify_all();
    }
    if (first_vanished && Clock::now() - *first_vanished > options_.abort_after) {
      std::fprintf(stderr,
                   "hookstream: rank %d: rank %s vanished and no collective failed within %lld s; exiting\n",
                   rank_, ranks_text(vanished_).c_str(),
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(options_.abort_after).count()));
      std::fflush(stderr);
      std::_Exit(1);
    }
    changed_.wait_for(lock, options_.interval, [this] { return stopping_; });
  }
}

}  // namespace hookstream
