#include "traces/importers/mapped_input.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

namespace hookstream {
namespace {

// A signal handler can reach only static storage, so the live scopes are kept in a fixed table
// (the one process-wide state of the importers; a scope fills its slot before publishing it and
// the handler only reads). Importers map at most a few files at once: the Kineto importer one,
// the nsys importer one per SQLite connection (two).
constexpr int kSlots = 16;
constexpr size_t kMessageBytes = 1024;

struct Slot {
  std::atomic<bool> taken{false};  // owned by a scope (filling or live)
  std::atomic<bool> live{false};   // published: the handler may read the fields below
  const char* begin = nullptr;
  const char* end = nullptr;
  size_t length = 0;
  char message[kMessageBytes];
};

Slot slots[kSlots];
struct sigaction previous_action;

void on_sigbus(int signal, siginfo_t* info, void* context) {
  // A fault the kernel raised has si_code > 0 and the faulting address; a signal another process
  // or raise() sent (si_code <= 0) is never a mapped page's.
  const bool fault = info != nullptr && info->si_code > 0;
  const char* address = fault ? static_cast<const char*>(info->si_addr) : nullptr;
  const Slot* found = nullptr;
  for (const Slot& slot : slots) {
    if (!fault) break;
    if (!slot.live.load(std::memory_order_acquire)) continue;
    if (slot.begin != nullptr) {
      if (address >= slot.begin && address < slot.end) {
        found = &slot;
        break;
      }
    } else if (info->si_code == BUS_ADRERR && found == nullptr) {
      found = &slot;  // a range-less scope (SQLite's mapping): kept unless a range matches
    }
  }
  if (found == nullptr) {
    // Not a mapped input's page: the previous action (the default: the process dies of SIGBUS).
    // A fault repeats when the handler returns and meets that action; a sent signal is sent again.
    sigaction(SIGBUS, &previous_action, nullptr);
    if (previous_action.sa_flags & SA_SIGINFO) {
      if (previous_action.sa_sigaction) previous_action.sa_sigaction(signal, info, context);
    } else if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN) {
      previous_action.sa_handler(signal);
    } else if (!fault) {
      ::raise(signal);
    }
    return;
  }
  // write() and _exit() are async-signal-safe; stdio and exceptions are not.
  const ssize_t written = ::write(STDERR_FILENO, found->message, found->length);
  (void)written;
  ::_exit(2);
}

void install_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous_action);
}

}  // namespace

std::string MappedInputScope::message(const std::string& path) {
  return path +
         ": the file changed while it was read (it was truncated or rewritten by another process while "
         "hookstream had it mapped); read a copy that nothing is writing";
}

MappedInputScope::MappedInputScope(const std::string& path, const void* begin, size_t size) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!slots[i].taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    Slot& slot = slots[i];
    slot.begin = static_cast<const char*>(begin);
    slot.end = slot.begin == nullptr ? nullptr : slot.begin + size;
    const std::string line = "hookstream: error: " + message(path) + "\n";
    // A path too long for the slot keeps its end: the line stays one line.
    const size_t keep = std::min(line.size(), kMessageBytes);
    std::memcpy(slot.message, line.data() + (line.size() - keep), keep);
    slot.length = keep;
    slot.live.store(true, std::memory_order_release);
    slot_ = i;
    return;
  }
}

MappedInputScope::~MappedInputScope() {
  if (slot_ < 0) return;
  slots[slot_].live.store(false, std::memory_order_release);
  slots[slot_].taken.store(false, std::memory_order_release);
}

}  // namespace hookstream
