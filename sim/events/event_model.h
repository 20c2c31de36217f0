// The one event model: what happens on each rank's host thread and GPU streams during a step.
// The simulator's expansion of a plan (sim/streams/stream_expansion.h), the trace importers (traces/) and the
// runtime's own trace output all produce it, so a simulated step and a recorded step compare op by
// op. Checkers (race checker, memory model, time model) and analyses only read this model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/hook_firing.h"
#include "sim/events/text.h"

namespace hookstream {

// One byte each: an Op carries four of them (see Op).
enum class MemoryKind : uint8_t { Device, PinnedHost, PageableHost, Managed, Unknown };
enum class CopyKind : uint8_t { HostToDevice, DeviceToHost, DeviceToDevice, PeerToPeer, Unknown };

enum class OpKind : uint8_t {
  Kernel,        // compute on a stream (GEMMs, elementwise, attention, optimizer, ...)
  Copy,          // memcpy between host and device or device and device
  Memset,
  Collective,    // NCCL/Gloo all-reduce, broadcast, ... (on the communication stream)
  EventRecord,   // cudaEventRecord(event, stream)
  StreamWait,    // cudaStreamWaitEvent(stream, event): the stream waits, the host does not
  EventSync,     // cudaEventSynchronize(event): the host waits
  StreamSync,    // cudaStreamSynchronize(stream): the host waits
  DeviceSync,    // cudaDeviceSynchronize: the host waits for every stream of the device
  Alloc,         // caching-allocator block handed out for a buffer (host-side bookkeeping)
  Free,          // block returned to the allocator (reusable by the stream it was freed on)
  RecordStream,  // tensor.record_stream(s): the block may not be reused until s's work completes
  HostCompute,   // host-side work that matters for ordering (a blocking call, Python overhead)
  Marker,        // an annotation (NVTX range, phase boundary): no ordering effect
};

const char* to_string(OpKind kind);
const char* to_string(MemoryKind kind);
const char* to_string(CopyKind kind);

// A stream of one device of one rank. Stream 0 of a device is the legacy default stream, which
// synchronizes with blocking streams (CUDA semantics; streams-and-races.md).
struct Stream {
  int rank = 0;
  int device = 0;
  int64_t id = 0;            // CUDA stream id as traces report it, or a simulator-assigned number
  std::string name;          // "compute", "copy", "nccl", "default", or "stream 7"
  bool legacy_default = false;
  bool non_blocking = true;  // created with cudaStreamNonBlocking (does not sync with legacy default)
  int priority = 0;
};

// A named range of bytes that ops read and write: a reload buffer, a pinned CPU slot, an
// activation, a gradient bucket, a parameter's gradient.
struct Buffer {
  std::string name;          // e.g. "reload_buffer[1]", "cpu_slot[7]", "bucket[0]"
  MemoryKind memory = MemoryKind::Device;
  int rank = 0;
  int device = 0;            // -1 for host memory
  int64_t bytes = 0;
};

struct BufferAccess {
  int buffer = -1;           // index into EventModel::buffers
  int64_t offset = 0;
  int64_t bytes = -1;        // -1: the whole buffer
  bool write = false;
};

struct Op {
  // Fields are grouped so that the struct packs into 128 bytes (144 with one int per enum and the
  // fields in reading order; each Text is one pointer): a long trace holds ~10^6 ops across
  // import, step cut and replay.
  OpKind kind = OpKind::Kernel;
  CopyKind copy = CopyKind::Unknown;
  MemoryKind source = MemoryKind::Unknown, destination = MemoryKind::Unknown;
  bool blocks_host = false;  // synchronous with respect to the host (pageable memcpy, sync calls)
  int rank = 0;
  int stream = -1;           // index into EventModel::streams; -1 for host-only ops
  Text name;                 // kernel name, "D2H activation layer 3", "allreduce bucket 2", ...
  // Where in the step it belongs (simulator ops; importers fill what they can).
  int iteration = 0;
  int micro_step = 0;
  int layer = -1;
  int event = -1;            // EventRecord/StreamWait/EventSync: index into EventModel::events
  Text phase;                // "forward", "backward", "recompute", "optimizer", "reduction", ...
  std::vector<BufferAccess> accesses;
  int sync_stream = -1;      // StreamSync: the stream waited for; StreamWait with event -1: the
                             // stream waited on (Stream.wait_stream: record + wait in one call)
  // Cost inputs (simulator) or measurements (traces), all optional.
  double flops = 0;
  int64_t bytes = 0;         // bytes moved (copies, collectives) or touched (memory-bound kernels)
  double start_ns = -1;      // measured or predicted start, -1 unknown
  double duration_ns = -1;   // measured or predicted duration, -1 unknown
  int64_t correlation = -1;  // trace correlation id linking host call and GPU activity
  Text source_api;           // the runtime/driver API call that issued it, when known
};
static_assert(sizeof(void*) != 8 || sizeof(Op) <= 128, "Op grew: see the note on its field order");

struct Event {
  std::string name;
  int rank = 0;
};

// One step (or a whole trace) of one or more ranks. `ops` are in host issue order per rank: an op
// is issued after every earlier op of the same rank (that is the host's program order).
struct EventModel {
  std::vector<Stream> streams;
  std::vector<Buffer> buffers;
  std::vector<Event> events;
  std::vector<Op> ops;
  std::vector<HookFiring> hooks;  // gradient-hook firings, where known
  std::string source;             // "simulated: plans/x.yaml", "nsys: file.sqlite", ...

  int add_stream(Stream stream);
  int add_buffer(Buffer buffer);
  int add_event(Event event);
  int find_stream(int rank, int device, int64_t id) const;  // -1 if absent
};

}  // namespace hookstream
