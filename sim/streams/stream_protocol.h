// A stream protocol: what one checkpointed/offloaded decoder layer does on which CUDA stream in
// forward and in backward, as data. Users write them as YAML (docs/stream-protocols.md); the
// built-in ones ship as files in protocols/. The expansion (sim/streams/stream_expansion.h) turns a protocol
// into the ops of a step; the race checker (sim/streams/race_checker.h) decides whether it is ordered.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/events/event_model.h"

namespace hookstream {

struct ProtocolStream {
  std::string name;
  // The legacy default stream (stream 0): implicitly synchronizes with blocking streams.
  bool legacy_default = false;
  // torch.cuda.current_stream(): where layers that the protocol does not cover run.
  bool current = false;
  // PyTorch creates its side streams with cudaStreamNonBlocking (c10/cuda/CUDAStream.cpp), so they
  // do not synchronize with the legacy default stream. `blocking: true` models a stream created with
  // plain cudaStreamCreate.
  bool non_blocking = true;
  int line = 0;
};

// How the slot of a buffer (or event) is chosen for layer i.
struct SlotSelection {
  bool by_counter = false;  // false: from the layer index i; true: from a running counter
  int modulo = 0;           // 0: the value itself; N: value mod N
  // Counter scope: per device (each device counts its own layers) or per process (one counter
  // shared by every device the process drives: the shipped bug).
  bool counter_per_process = false;
  int slot(int layer, int counter) const {
    const int value = by_counter ? counter : layer;
    return modulo > 0 ? value % modulo : value;
  }
};

struct ProtocolBuffer {
  std::string name;
  MemoryKind memory = MemoryKind::Device;
  int count = 1;              // -1: one per layer
  SlotSelection select;
  int line = 0;
};

struct ProtocolEvent {
  std::string name;
  std::string per_buffer;     // non-empty: one event per slot of that buffer, same selection
  int count = 1;              // -1: one per layer
  SlotSelection select;
  int line = 0;
};

enum class StepKind { WaitStream, Record, WaitEvent, Copy, Compute, Free, RecordStream, HostSync };
const char* to_string(StepKind kind);
bool is_sync_step(StepKind kind);  // record, wait_event, wait_stream, host_sync, record_stream

// A buffer reference in a step: NAME (the slot of layer i) or NAME[next] (the slot of layer i+1;
// only `hidden`, the implicit per-layer hidden state, uses it: a layer writes the next one's input).
struct BufferRef {
  std::string name;
  bool next = false;
};

struct ProtocolStep {
  StepKind kind = StepKind::Compute;
  std::string stream;         // the stream the op is enqueued on (wait_stream: the waiter)
  std::string other_stream;   // wait_stream: the waitee; host_sync: the stream synchronized
  std::string event;          // record, wait_event, host_sync {event}
  BufferRef buffer;           // free, record_stream
  BufferRef from, to;         // copy
  CopyKind copy = CopyKind::Unknown;
  bool blocking = false;      // copy: non_blocking=False (the host waits for it)
  std::vector<BufferRef> reads, writes;  // compute
  std::string what;           // compute: layer | recompute | backward
  int line = 0;
  std::string describe() const;  // "wait_stream {waiter: copy, waitee: compute}" (for reports)
};

struct StreamProtocol {
  std::string name;
  std::string source;         // file, for messages
  std::string description;
  std::vector<ProtocolStream> streams;
  std::vector<ProtocolBuffer> buffers;
  std::vector<ProtocolEvent> events;
  std::vector<ProtocolStep> forward, backward;

  int find_stream(const std::string& name) const;  // -1 if absent
  int find_buffer(const std::string& name) const;  // -1 if absent
  int find_event(const std::string& name) const;   // -1 if absent
  int current_stream() const;
};

// The implicit buffer every protocol may use: hidden[i] is decoder layer i's input (hidden[L] the
// final hidden state), on the device, one per layer.
inline constexpr const char* kHiddenBuffer = "hidden";

// Parses a protocol. Throws InputError "SOURCE:LINE: ..." for malformed YAML, unknown keys (with the
// closest known key), missing fields and references to undeclared streams, buffers or events.
StreamProtocol parse_stream_protocol(const std::string& yaml_text, const std::string& source);
StreamProtocol load_stream_protocol_file(const std::string& path);

// Where a protocol named in a plan lives: an existing path (relative to `plan_dir` first, then to the
// working directory), else <data dir>/protocols/NAME.yaml (data dir: $HOOKSTREAM_DATA_DIR if set,
// else the compile-time HOOKSTREAM_DATA_DIR). Throws InputError listing the built-in names.
std::string resolve_stream_protocol(const std::string& name_or_path, const std::string& plan_dir = "");
StreamProtocol load_stream_protocol(const std::string& name_or_path, const std::string& plan_dir = "");
std::string protocol_dir();
std::vector<std::string> list_stream_protocols();  // built-in names, sorted

}  // namespace hookstream
