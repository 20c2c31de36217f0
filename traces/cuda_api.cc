#include "traces/cuda_api.h"

#include <cctype>

namespace hookstream {

namespace {
bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
}  // namespace

std::string_view strip_api_version(std::string_view name) {
  const size_t v = name.rfind("_v");
  if (v == std::string_view::npos || v + 2 >= name.size()) return name;
  for (size_t i = v + 2; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return name;
  }
  return name.substr(0, v);
}

ApiRole classify_api(std::string_view full_name) {
  const std::string_view name = strip_api_version(full_name);
  // Driver twins carry a _v2 API version of their own ("cuEventRecord_v2" is not in traces we know
  // of, but cuMemcpyHtoD_v2 is); strip it too so the name compares plainly.
  const std::string_view base = ends_with(name, "_v2") ? name.substr(0, name.size() - 3) : name;
  // HIP (ROCm) names its runtime calls as CUDA does with "hip" for "cuda" (hip_runtime_api.h), and
  // PyTorch's ROCm build (hipified) makes the same calls: a Kineto trace from ROCm has
  // hipDeviceSynchronize, hipStreamWaitEvent, hipMemcpyWithStream... under "cuda_runtime". The rules
  // below see the name after its API prefix: "cuda", "cu" (driver) or "hip".
  std::string_view api;  // the name without "cuda" / "hip" (runtime) or "cu" (driver, before "Ctx"...)
  bool driver = false;
  if (starts_with(base, "cuda")) api = base.substr(4);
  else if (starts_with(base, "hip")) api = base.substr(3);
  else if (starts_with(base, "cu")) api = base.substr(2), driver = true;
  else return ApiRole::Other;
  if (api == "EventRecord" || api == "EventRecordWithFlags") return ApiRole::EventRecord;
  if (api == "StreamWaitEvent") return ApiRole::StreamWait;
  if (api == "EventSynchronize") return ApiRole::EventSync;
  if (api == "StreamSynchronize") return ApiRole::StreamSync;
  if ((!driver && (api == "DeviceSynchronize" || api == "ThreadSynchronize")) || api == "CtxSynchronize") {
    return ApiRole::DeviceSync;
  }
  // Copies and memsets are synchronous unless their name says Async: cudaMemcpy and hipMemcpy return
  // when the copy is done, and so does hipMemcpyWithStream, the blocking copy on a stream that
  // PyTorch's ROCm build makes where CUDA makes cudaMemcpyAsync + cudaStreamSynchronize
  // (c10/cuda/CUDAFunctions.h, memcpy_and_sync).
  const bool async = contains(api, "Async");
  if (starts_with(api, "Memcpy")) return async ? ApiRole::AsyncCopy : ApiRole::SyncCopy;
  if (starts_with(api, "Memset")) return async ? ApiRole::AsyncMemset : ApiRole::SyncMemset;
  return ApiRole::Other;
}

bool is_sync_role(ApiRole role) {
  return role == ApiRole::StreamWait || role == ApiRole::EventSync || role == ApiRole::StreamSync ||
         role == ApiRole::DeviceSync;
}

bool blocks_host(ApiRole role) {
  switch (role) {
    case ApiRole::EventSync:
    case ApiRole::StreamSync:
    case ApiRole::DeviceSync:
    case ApiRole::SyncCopy:
    case ApiRole::SyncMemset:
      return true;
    default:
      return false;
  }
}

bool is_collective_kernel(std::string_view kernel_name) {
  // ASCII case folding by hand: std::tolower per character showed up in profiles of long
  // templated kernel names.
  const auto fold = [](char c) { return static_cast<char>(c | 0x20); };
  for (size_t i = 0; i + 4 <= kernel_name.size(); ++i) {
    if (fold(kernel_name[i]) == 'n' && fold(kernel_name[i + 1]) == 'c' && fold(kernel_name[i + 2]) == 'c' &&
        fold(kernel_name[i + 3]) == 'l') {
      return true;
    }
  }
  return false;
}

std::string display_op_name(std::string_view name, size_t limit) {
  constexpr std::string_view kReturnType = "void ";  // a kernel returns nothing
  if (starts_with(name, kReturnType) && ends_with(name, ")")) {
    // The parameter list is the last top-level "(...)"; parentheses inside it ("operator()",
    // "{lambda(long, long)#1}") are counted, not matched by position.
    const size_t from = kReturnType.size();
    int depth = 0;
    for (size_t i = name.size(); i-- > from;) {
      if (name[i] == ')') {
        ++depth;
      } else if (name[i] == '(' && --depth == 0) {
        if (i > from) name = name.substr(from, i - from);
        break;
      }
    }
  }
  if (name.size() <= limit) return std::string(name);
  size_t cut = limit - 3;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return std::string(name.substr(0, cut)) + "...";
}

}  // namespace hookstream
