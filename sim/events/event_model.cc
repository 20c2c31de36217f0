#include "sim/events/event_model.h"

namespace hookstream {

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::Kernel: return "kernel";
    case OpKind::Copy: return "copy";
    case OpKind::Memset: return "memset";
    case OpKind::Collective: return "collective";
    case OpKind::EventRecord: return "event_record";
    case OpKind::StreamWait: return "stream_wait";
    case OpKind::EventSync: return "event_sync";
    case OpKind::StreamSync: return "stream_sync";
    case OpKind::DeviceSync: return "device_sync";
    case OpKind::Alloc: return "alloc";
    case OpKind::Free: return "free";
    case OpKind::RecordStream: return "record_stream";
    case OpKind::HostCompute: return "host_compute";
    case OpKind::Marker: return "marker";
  }
  return "unknown";
}

const char* to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Device: return "device";
    case MemoryKind::PinnedHost: return "pinned";
    case MemoryKind::PageableHost: return "pageable";
    case MemoryKind::Managed: return "managed";
    case MemoryKind::Unknown: return "unknown";
  }
  return "unknown";
}

const char* to_string(CopyKind kind) {
  switch (kind) {
    case CopyKind::HostToDevice: return "HtoD";
    case CopyKind::DeviceToHost: return "DtoH";
    case CopyKind::DeviceToDevice: return "DtoD";
    case CopyKind::PeerToPeer: return "PtoP";
    case CopyKind::Unknown: return "unknown";
  }
  return "unknown";
}

int EventModel::add_stream(Stream stream) {
  streams.push_back(std::move(stream));
  return static_cast<int>(streams.size()) - 1;
}

int EventModel::add_buffer(Buffer buffer) {
  buffers.push_back(std::move(buffer));
  return static_cast<int>(buffers.size()) - 1;
}

int EventModel::add_event(Event event) {
  events.push_back(std::move(event));
  return static_cast<int>(events.size()) - 1;
}

int EventModel::find_stream(int rank, int device, int64_t id) const {
  for (size_t i = 0; i < streams.size(); ++i) {
    if (streams[i].rank == rank && streams[i].device == device && streams[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace hookstream
