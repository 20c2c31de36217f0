#include "traces/recorded_step.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <tuple>

#include "sim/inputs/input_error.h"
#include "traces/runtime_annotations.h"

namespace hookstream {

const char* to_string(OpClass op_class) {
  switch (op_class) {
    case OpClass::None: return "none";
    case OpClass::Forward: return "forward";
    case OpClass::Recompute: return "recompute";
    case OpClass::Backward: return "backward";
    case OpClass::CopyD2H: return "copy D2H";
    case OpClass::CopyH2D: return "copy H2D";
    case OpClass::Copy: return "copy (other)";
    case OpClass::AllReduce: return "all-reduce";
    case OpClass::Optimizer: return "optimizer";
    case OpClass::Other: return "outside layers";
  }
  return "?";
}

bool OpGroup::operator<(const OpGroup& o) const {
  return std::make_tuple(static_cast<int>(op_class), layer, index) <
         std::make_tuple(static_cast<int>(o.op_class), o.layer, o.index);
}

std::string OpGroup::label() const {
  std::string text = to_string(op_class);
  if (op_class == OpClass::AllReduce) return text + " #" + std::to_string(index);
  if (op_class == OpClass::Other) {
    static const char* where[] = {" (before the layers)", " (between forward and backward layers)", " (after the layers)"};
    return text + where[std::clamp(index, 0, 2)];
  }
  if (layer >= 0) text += " L" + std::to_string(layer);
  return text;
}

namespace {

bool is_gpu_kind(OpKind kind) {
  return kind == OpKind::Kernel || kind == OpKind::Copy || kind == OpKind::Memset || kind == OpKind::Collective;
}
bool is_sync_kind(OpKind kind) {
  return kind == OpKind::EventRecord || kind == OpKind::StreamWait || kind == OpKind::EventSync ||
         kind == OpKind::StreamSync || kind == OpKind::DeviceSync;
}
bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// Step boundaries: the runtime's hookstream:step:N, or the PyTorch profiler's ProfilerStep#N
// (torch/profiler/profiler.py, profile.step()).
std::optional<int> step_number(const std::string& name) {
  std::string digits;
  if (starts_with(name, "hookstream:step:")) digits = name.substr(16);
  else if (starts_with(name, "ProfilerStep#")) digits = name.substr(13);
  else return std::nullopt;
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoi(digits);
}

// The phase a foreign trace's own ranges announce (torchrec / the profiler's record_function names).
OpClass foreign_phase(const std::string& name) {
  if (name == "## forward ##" || starts_with(name, "DistributedDataParallel.forward")) return OpClass::Forward;
  if (name == "## backward ##") return OpClass::Backward;
  if (name == "## optimizer ##" || starts_with(name, "Optimizer.step#")) return OpClass::Optimizer;
  return OpClass::None;
}

// Kernel-name heuristics for unannotated kernels: autograd kernels usually say so in their name
// (cuDNN/cuBLAS "wgrad"/"dgrad", ATen "*_backward_*"), optimizers run multi_tensor_apply or fused
// Adam kernels (aten/src/ATen/native/cuda/fused_adam*.cu).
bool contains_lowercase(const std::string& text, const char* lower_word) {
  const auto equal = [](char a, char b) { return (a >= 'A' && a <= 'Z' ? static_cast<char>(a + 32) : a) == b; };
  const char* end = lower_word + std::strlen(lower_word);
  return std::search(text.begin(), text.end(), lower_word, end, equal) != text.end();
}

OpClass kernel_name_class(const std::string& name) {
  for (const char* word : {"backward", "wgrad", "dgrad", "_bwd"}) {
    if (contains_lowercase(name, word)) return OpClass::Backward;
  }
  for (const char* word : {"adam", "multi_tensor_apply", "sgd", "optimizer"}) {
    if (contains_lowercase(name, word)) return OpClass::Optimizer;
  }
  return OpClass::None;
}

struct Range {
  int marker = -1;  // op index of the marker in the trace
  double end_ns = 0;
  std::optional<RuntimeAnnotation> annotation;
  OpClass foreign = OpClass::None;
};

// What a range holds, found in a first walk so the second can decide at the range's start.
struct RangeContents {
  int gpu_ops = 0;
  int imported_syncs = 0;      // recorded CUDA sync ops (with a stream or blocking) inside
  int protocol_work = 0;       // compute/copy protocol ranges nested inside (layer ranges)
  std::map<int, int> streams;  // real stream -> GPU ops launched inside
};

// A rank's ops in issue order, and its markers apart: markers are few (none in an nsys export
// without NVTX, ~2% of a Kineto trace's ops), and the step ranges, the labels and whether any range
// is open are all read from them, so those questions cost no pass over the rank's ops (a pass over
// a long trace's ops reads ~40-60 MB).
struct RankOps {
  std::vector<int> ops;
  std::vector<int> markers;
};

class StepExtractor {
 public:
  StepExtractor(const EventModel& trace, const StepSelection& selection) : trace_(trace), selection_(selection) {}

  RecordedStep run() {
    std::map<int, RankOps> ops_of_rank;
    RankOps* current = nullptr;  // ops come rank by rank (trace_builder.h): one map look-up per rank change
    int current_rank = 0;
    for (int i = 0; i < static_cast<int>(trace_.ops.size()); ++i) {
      const Op& op = trace_.ops[i];
      if (current == nullptr || op.rank != current_rank) {
        current = &ops_of_rank[op.rank];
        current_rank = op.rank;
      }
      current->ops.push_back(i);
      if (op.kind != OpKind::Marker) continue;
      current->markers.push_back(i);
      if (is_runtime_annotation(op.name) && !step_number(op.name)) step_.annotated = true;
    }
    step_.model.ops.reserve(trace_.ops.size());
    step_.groups.reserve(trace_.ops.size());
    step_.origin.reserve(trace_.ops.size());
    step_.annotation.reserve(trace_.ops.size());
    step_.model.streams = trace_.streams;
    step_.model.events = trace_.events;
    step_.model.source = trace_.source;
    if (selection_.step < 0) choose_default_step(ops_of_rank);
    for (const auto& [rank, of_rank] : ops_of_rank) {
      const auto [begin, end] = window(rank, of_rank.markers);
      contents_.clear();
      // The first walk only fills contents_ for the ranges it meets: a rank whose markers are all
      // step ranges has none, and skips it.
      if (std::any_of(of_rank.markers.begin(), of_rank.markers.end(),
                      [&](int i) { return !step_number(trace_.ops[i].name); })) {
        walk(of_rank.ops, begin, end, /*emit=*/false);
      }
      map_streams(rank);
      walk(of_rank.ops, begin, end, /*emit=*/true);
    }
    finish();
    return std::move(step_);
  }

 private:
  // The host-time window of the selected step on this rank (the whole trace without step ranges),
  // from the rank's markers.
  std::pair<double, double> window(int rank, const std::vector<int>& markers) {
    std::vector<std::tuple<int, double, double>> steps;
    for (int i : markers) {
      const Op& op = trace_.ops[i];
      if (auto n = step_number(op.name)) steps.emplace_back(*n, op.start_ns, op.start_ns + std::max(0.0, op.duration_ns));
    }
    if (steps.empty()) {
      if (selection_.step >= 0) {
        throw InputError(trace_.source, "--step " + std::to_string(selection_.step) +
                                            ": the trace has no step ranges (hookstream:step:N or ProfilerStep#N)");
      }
      if (step_.step_label.empty()) step_.step_label = "whole trace";
      return {-1e300, 1e300};
    }
    std::sort(steps.begin(), steps.end());
    auto chosen = steps.end() - 1;
    if (selection_.step < 0 && default_step_ >= 0) {
      const auto found = std::find_if(steps.begin(), steps.end(), [&](const auto& s) { return std::get<0>(s) == default_step_; });
      if (found != steps.end()) chosen = found;
    }
    if (selection_.step >= 0) {
      chosen = std::find_if(steps.begin(), steps.end(), [&](const auto& s) { return std::get<0>(s) == selection_.step; });
      if (chosen == steps.end()) {
        throw InputError(trace_.source, "--step " + std::to_string(selection_.step) + ": rank " + std::to_string(rank) +
                                            " recorded steps " + std::to_string(std::get<0>(steps.front())) + ".." +
                                            std::to_string(std::get<0>(steps.back())));
      }
    }
    if (step_.step_label.empty()) {
      for (int i : markers) {
        const Op& op = trace_.ops[i];
        if (op.start_ns == std::get<1>(*chosen) && step_number(op.name) == std::get<0>(*chosen)) {
          step_.step_label = op.name;
          break;
        }
      }
    }
    return {std::get<1>(*chosen), std::get<2>(*chosen)};
  }

  // The step analysed when none is asked for: the last complete one. The PyTorch profiler opens
  // ProfilerStep#N+1 at profile.step() and closes it when the profiler stops
  // (torch/profiler/profiler.py, _KinetoProfile.stop), so a trace's last step range is often a
  // partial one that launched nothing (0 ns measured); HTA leaves the last step out by default for
  // the same reason. A step is complete on a rank when its range has a length and GPU work was
  // launched inside it (for ranks whose steps launch no GPU work, as in CPU traces: a length is
  // enough). The default is the highest step number that every rank with steps recorded complete;
  // when there is none, the last one as before. Leaving a later step out is said in the notes.
  void choose_default_step(const std::map<int, RankOps>& ops_of_rank) {
    struct StepRange {
      double start = 0, end = 0;
      int64_t gpu_ops = 0;
    };
    std::map<int, int> complete_on;  // step number -> ranks where it is complete
    std::map<int, std::string> why_partial;
    int ranks_with_steps = 0, last_recorded = -1;
    for (const auto& [rank, of_rank] : ops_of_rank) {
      std::map<int, StepRange> steps;
      for (int i : of_rank.markers) {
        const Op& op = trace_.ops[i];
        if (auto n = step_number(op.name)) steps[*n] = {op.start_ns, op.start_ns + std::max(0.0, op.duration_ns), 0};
      }
      if (steps.empty()) continue;
      ++ranks_with_steps;
      last_recorded = std::max(last_recorded, steps.rbegin()->first);
      // GPU ops belong to the step whose range holds the host op that issued them (as in walk()).
      // Step ranges follow one another: the one holding an issue time is the last to start at or
      // before it (a binary search; a trace has hundreds of steps and ~10^5 GPU ops).
      std::vector<std::pair<double, StepRange*>> by_start;
      for (auto& [n, range] : steps) by_start.emplace_back(range.start, &range);
      std::sort(by_start.begin(), by_start.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      double now = -1e300;
      bool any_gpu = false;
      for (int i : of_rank.ops) {
        const Op& op = trace_.ops[i];
        if (!is_gpu_kind(op.kind)) {
          now = op.start_ns;
          continue;
        }
        const auto after = std::upper_bound(by_start.begin(), by_start.end(), now,
                                            [](double t, const auto& entry) { return t < entry.first; });
        if (after == by_start.begin()) continue;
        StepRange& range = *std::prev(after)->second;
        if (now <= range.end) {
          ++range.gpu_ops;
          any_gpu = true;
        }
      }
      for (const auto& [n, range] : steps) {
        if (range.end <= range.start) {
          why_partial.emplace(n, "its range has no length");
        } else if (any_gpu && range.gpu_ops == 0) {
          why_partial.emplace(n, "no GPU work was launched in it");
        } else {
          ++complete_on[n];
        }
      }
    }
    for (auto it = complete_on.rbegin(); it != complete_on.rend(); ++it) {
      if (it->second == ranks_with_steps && !why_partial.count(it->first)) {
        default_step_ = it->first;
        break;
      }
    }
    if (default_step_ < 0 || default_step_ == last_recorded) return;
    std::string skipped;
    for (const auto& [n, why] : why_partial) {
      if (n > default_step_) skipped += (skipped.empty() ? "" : "; ") + std::string("step ") + std::to_string(n) + ": " + why;
    }
    step_.notes.push_back("default step: " + std::to_string(default_step_) + ", the last complete one; the later " +
                          "step(s) are partial (" + skipped + "), as a profiler stopped mid-step leaves its last " +
                          "step range (--step N picks another)");
  }

  // Logical stream name -> real stream, by where the GPU work of the ranges naming it ran.
  void map_streams(int rank) {
    std::map<std::string, std::map<int, int>> votes;
    for (const auto& [marker, contents] : contents_) {
      const auto annotation = parse(trace_.ops[marker]);
      if (!annotation || annotation->type != RuntimeAnnotation::Type::ProtocolStep) continue;
      for (const auto& [stream, count] : contents.streams) votes[annotation->stream][stream] += count;
    }
    for (const auto& [name, counts] : votes) {
      const auto best = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
        return a.second < b.second || (a.second == b.second && a.first > b.first);
      });
      logical_[{rank, name}] = best->first;
      Stream& stream = step_.model.streams[best->first];
      if (stream.name.find('(') == std::string::npos) stream.name += " (" + name + ")";
    }
  }

  std::optional<RuntimeAnnotation> parse(const Op& marker) const {
    return parse_runtime_annotation(marker.name, trace_.source);
  }

  int logical_stream(int rank, const std::string& name) {
    const auto found = logical_.find({rank, name});
    if (found != logical_.end()) return found->second;
    // A stream the trace shows no GPU work for (CPU traces; streams used only to wait on).
    Stream stream;
    stream.rank = rank;
    stream.name = name;
    stream.legacy_default = name == "default";
    stream.non_blocking = !stream.legacy_default;
    int64_t next_id = stream.legacy_default ? 0 : 1000000;
    for (const Stream& s : step_.model.streams) {
      if (s.rank != rank) continue;
      stream.device = s.device;
      if (s.id >= next_id) next_id = stream.legacy_default ? -1 : s.id + 1;
    }
    if (next_id < 0) {
      stream.legacy_default = false;
      next_id = 1000000;
      for (const Stream& s : step_.model.streams) if (s.rank == rank && s.id >= next_id) next_id = s.id + 1;
    }
    stream.id = next_id;
    return logical_[{rank, name}] = step_.model.add_stream(stream);
  }

  int named_event(int rank, const std::string& name) {
    const auto found = events_.find({rank, name});
    if (found != events_.end()) return found->second;
    return events_[{rank, name}] = step_.model.add_event(Event{name, rank});
  }

  int named_buffer(int rank, int stream, const std::string& name) {
    const auto found = buffers_.find({rank, name});
    if (found != buffers_.end()) return found->second;
    Buffer buffer;
    buffer.name = name;
    buffer.rank = rank;
    const bool host = starts_with(name, "cpu");
    buffer.memory = host ? MemoryKind::PinnedHost : MemoryKind::Device;
    buffer.device = host || stream < 0 ? -1 : step_.model.streams[stream].device;
    return buffers_[{rank, name}] = step_.model.add_buffer(buffer);
  }

  std::vector<BufferAccess> accesses(int rank, int stream, const RuntimeAnnotation& a) {
    std::vector<BufferAccess> list;
    for (const std::string& b : a.reads) list.push_back({named_buffer(rank, stream, b), 0, -1, false});
    for (const std::string& b : a.writes) list.push_back({named_buffer(rank, stream, b), 0, -1, true});
    return list;
  }

  void walk(const std::vector<int>& ops, double begin, double end, bool emit) {
    std::vector<Range> stack;
    double now = -1e300;
    int position = 0;  // Other ops: 0 before layers, 1 after forward layers began, 2 after backward layers began
    int collectives = 0;
    for (int i : ops) {
      const Op& op = trace_.ops[i];
      const bool gpu = is_gpu_kind(op.kind);
      if (!gpu) {
        now = op.start_ns;
        // Ranges of other host threads need not nest with this one's: drop every range that ended.
        stack.erase(std::remove_if(stack.begin(), stack.end(), [&](const Range& r) { return r.end_ns <= now; }), stack.end());
      }
      const bool inside = now >= begin && now <= end;
      if (op.kind == OpKind::Marker) {
        if (step_number(op.name)) continue;
        Range range{i, op.start_ns + std::max(0.0, op.duration_ns), parse(op), foreign_phase(op.name)};
        if (!range.annotation && range.foreign == OpClass::None) continue;
        if (!emit) {
          // A compute/copy step nested in a layer range: the layer range is not work of its own.
          if (range.annotation && (range.annotation->kind == "compute" || range.annotation->kind == "copy")) {
            for (Range& outer : stack) contents_[outer.marker].protocol_work++;
          }
        } else if (inside && range.annotation) {
          emit_annotation(op, i, *range.annotation, position);
        }
        stack.push_back(std::move(range));
        continue;
      }
      if (!emit) {
        for (Range& r : stack) {
          RangeContents& c = contents_[r.marker];
          if (gpu) {
            c.gpu_ops++;
            if (op.stream >= 0) c.streams[op.stream]++;
          } else if (is_sync_kind(op.kind) && (op.stream >= 0 || op.sync_stream >= 0 || op.blocks_host)) {
            c.imported_syncs++;
          }
        }
        continue;
      }
      if (!inside) continue;
      // Recorded sync ops inside a sync-step range are that step; keep them as recorded. The op is
      // copied straight into the step and edited there (a local copy moved in wrote each op twice).
      Op& copy = step_.model.ops.emplace_back(op);
      // A synchronize whose stream or event the trace does not name (Kineto without sync events
      // records only the cudaStreamSynchronize call): the host was blocked for the recorded time,
      // but nothing says what for, so it orders nothing and replays as host time.
      if ((op.kind == OpKind::StreamSync && op.sync_stream < 0) || (op.kind == OpKind::EventSync && op.event < 0)) {
        copy.kind = OpKind::HostCompute;
      }
      OpGroup group;
      Text annotation_name;
      const Range* protocol = nullptr;
      const Range* layer = nullptr;
      bool optimizer = false;
      OpClass foreign = OpClass::None;
      for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
        if (it->annotation) {
          const RuntimeAnnotation& a = *it->annotation;
          if (annotation_name.empty()) annotation_name = trace_.ops[it->marker].name;
          if (a.type == RuntimeAnnotation::Type::ProtocolStep && !protocol && !layer) protocol = &*it;
          if (a.type == RuntimeAnnotation::Type::Layer && !layer) layer = &*it;
          if (a.type == RuntimeAnnotation::Type::Optimizer) optimizer = true;
        } else if (foreign == OpClass::None) {
          foreign = it->foreign;
        }
      }
      if (gpu) {
        const RuntimeAnnotation* a = protocol ? &*protocol->annotation : layer ? &*layer->annotation : nullptr;
        if (a) {
          copy.layer = a->layer;
          copy.phase = phases_(a->phase);
        }
        if (op.kind == OpKind::Collective) {
          group = {OpClass::AllReduce, -1, collectives++};
          copy.phase = phases_("reduction");
        } else if (protocol && (protocol->annotation->kind == "compute" || protocol->annotation->kind == "copy")) {
          const RuntimeAnnotation& p = *protocol->annotation;
          copy.accesses = accesses(op.rank, op.stream, p);
          if (p.kind == "copy" || op.kind == OpKind::Copy) {
            group = {copy_class(op, p.phase), p.layer, 0};
          } else {
            group = {p.what == "recompute" ? OpClass::Recompute : p.what == "backward" ? OpClass::Backward : OpClass::Forward, p.layer, 0};
            if (p.what == "recompute") copy.phase = phases_("recompute");
          }
        } else if (layer || protocol) {
          const RuntimeAnnotation& l = layer ? *layer->annotation : *protocol->annotation;
          group = {op.kind == OpKind::Copy ? copy_class(op, "") : l.phase == "forward" ? OpClass::Forward : OpClass::Backward,
                   l.layer, 0};
        } else if (optimizer) {
          group = {OpClass::Optimizer, -1, 0};
          copy.phase = phases_("optimizer");
        } else if (op.kind == OpKind::Copy) {
          group = {copy_class(op, ""), -1, 0};
        } else if (!step_.annotated) {
          // Evidence, strongest first: the profiler's phase ranges, the importer's launching-thread
          // rule (phase "backward": launched from the autograd engine's thread), kernel names.
          OpClass c = foreign;
          if (c == OpClass::None && op.phase == "backward") c = OpClass::Backward;
          if (c == OpClass::None) c = name_class(op.name);
          group = {c == OpClass::None ? OpClass::Other : c, -1, 0};
        } else {
          group = {OpClass::Other, -1, position};
        }
        if (group.op_class == OpClass::Forward && group.layer >= 0) position = std::max(position, 1);
        if ((group.op_class == OpClass::Backward || group.op_class == OpClass::Recompute) && group.layer >= 0) position = 2;
        if (group.op_class == OpClass::Other && !step_.annotated) group.index = 0;
      }
      push_attribution(group, i, annotation_name);
    }
  }

  // kernel_name_class once per distinct kernel name: a long trace launches the same few hundred
  // kernels over and over, and the case-insensitive word search is the costly part. Keys view the
  // trace's own names, which outlive the extractor.
  OpClass name_class(const std::string& name) {
    const auto found = name_class_.find(name);
    if (found != name_class_.end()) return found->second;
    return name_class_.emplace(name, kernel_name_class(name)).first->second;
  }

  static OpClass copy_class(const Op& op, const std::string& phase) {
    if (op.copy == CopyKind::DeviceToHost) return OpClass::CopyD2H;
    if (op.copy == CopyKind::HostToDevice) return OpClass::CopyH2D;
    // Offload protocols copy device -> host in forward and back in backward.
    if (op.copy == CopyKind::Unknown && phase == "forward") return OpClass::CopyD2H;
    if (op.copy == CopyKind::Unknown && phase == "backward") return OpClass::CopyH2D;
    return OpClass::Copy;
  }

  void push(Op&& op, const OpGroup& group, int origin, const Text& annotation) {
    step_.model.ops.push_back(std::move(op));
    push_attribution(group, origin, annotation);
  }

  // What the step keeps beside its last op.
  void push_attribution(const OpGroup& group, int origin, const Text& annotation) {
    step_.groups.push_back(group);
    step_.origin.push_back(origin);
    step_.annotation.push_back(annotation);
  }

  // At a protocol-step range's start: the sync op it announces when the trace did not record one,
  // or the work op itself when no GPU work ran under it (CPU traces).
  void emit_annotation(const Op& marker, int index, const RuntimeAnnotation& a, int& position) {
    const RangeContents& contents = contents_[index];
    const int rank = marker.rank;
    Op op;
    op.rank = rank;
    op.name = marker.name;
    op.layer = a.layer;
    op.phase = phases_(a.phase);
    op.start_ns = marker.start_ns;
    op.duration_ns = 0;
    OpGroup group;
    if (a.type == RuntimeAnnotation::Type::Layer) {
      if (contents.gpu_ops > 0 || contents.protocol_work > 0) return;
      op.kind = OpKind::Kernel;
      op.stream = logical_stream(rank, current_stream_name(rank));
      op.duration_ns = marker.duration_ns;
      group = {a.phase == "forward" ? OpClass::Forward : OpClass::Backward, a.layer, 0};
    } else if (a.type == RuntimeAnnotation::Type::Optimizer) {
      if (contents.gpu_ops > 0) return;
      op.kind = OpKind::Kernel;
      op.stream = logical_stream(rank, current_stream_name(rank));
      op.duration_ns = marker.duration_ns;
      op.phase = phases_("optimizer");
      group = {OpClass::Optimizer, -1, 0};
    } else if (a.kind == "compute" || a.kind == "copy") {
      if (contents.gpu_ops > 0) return;
      op.stream = logical_stream(rank, a.stream);
      op.kind = a.kind == "copy" ? OpKind::Copy : OpKind::Kernel;
      op.duration_ns = marker.duration_ns;
      op.accesses = accesses(rank, op.stream, a);
      if (a.kind == "copy") {
        op.copy = a.phase == "forward" ? CopyKind::DeviceToHost : CopyKind::HostToDevice;
        group = {copy_class(op, a.phase), a.layer, 0};
      } else {
        group = {a.what == "recompute" ? OpClass::Recompute : a.what == "backward" ? OpClass::Backward : OpClass::Forward, a.layer, 0};
        if (a.what == "recompute") op.phase = phases_("recompute");
      }
    } else {
      if (contents.imported_syncs > 0 && a.kind != "free" && a.kind != "record_stream") return;
      const int stream = logical_stream(rank, a.stream);
      if (a.kind == "wait_stream") {
        op.kind = OpKind::StreamWait;
        op.stream = stream;
        op.sync_stream = logical_stream(rank, a.other_stream);
      } else if (a.kind == "record") {
        op.kind = OpKind::EventRecord;
        op.stream = stream;
        op.event = named_event(rank, a.event);
      } else if (a.kind == "wait_event") {
        op.kind = OpKind::StreamWait;
        op.stream = stream;
        op.event = named_event(rank, a.event);
      } else if (a.kind == "host_sync") {
        op.blocks_host = true;
        op.duration_ns = marker.duration_ns;
        if (!a.event.empty()) {
          op.kind = OpKind::EventSync;
          op.event = named_event(rank, a.event);
        } else {
          op.kind = OpKind::StreamSync;
          op.sync_stream = logical_stream(rank, a.other_stream.empty() ? a.stream : a.other_stream);
        }
      } else {
        // free / record_stream: allocator bookkeeping on the stream (race checker semantics).
        op.kind = a.kind == "free" ? OpKind::Free : OpKind::RecordStream;
        op.stream = stream;
        const std::vector<std::string>& names = a.writes.empty() ? a.reads : a.writes;
        for (const std::string& b : names) op.accesses.push_back({named_buffer(rank, stream, b), 0, -1, a.kind == "free"});
      }
    }
    if (group.op_class == OpClass::Forward && group.layer >= 0) position = std::max(position, 1);
    if ((group.op_class == OpClass::Backward || group.op_class == OpClass::Recompute) && group.layer >= 0) position = 2;
    push(std::move(op), group, -1, marker.name);
  }

  // The stream that layer ranges without a protocol run on: the one most compute steps named.
  const std::string& current_stream_name(int rank) {
    const auto cached = current_.find(rank);
    if (cached != current_.end()) return cached->second;
    std::map<std::string, int> count;
    for (const auto& [marker, contents] : contents_) {
      const Op& op = trace_.ops[marker];
      if (op.rank != rank) continue;
      const auto a = parse(op);
      if (a && a->kind == "compute") count[a->stream]++;
    }
    if (count.empty()) return current_[rank] = "compute";
    return current_[rank] =
               std::max_element(count.begin(), count.end(), [](const auto& x, const auto& y) { return x.second < y.second; })->first;
  }

  void finish() {
    if (!step_.annotated) forward_before_backward();
    double first = 1e300, last = -1e300;
    for (const Op& op : step_.model.ops) {
      if (op.start_ns < 0) continue;
      first = std::min(first, op.start_ns);
      last = std::max(last, op.start_ns + std::max(0.0, op.duration_ns));
    }
    step_.start_ns = step_.model.ops.empty() ? 0 : first;
    step_.end_ns = step_.model.ops.empty() ? 0 : last;
    if (step_.annotated) {
      step_.notes.push_back("attributed by the hookstream runtime annotations (layer, phase, buffers, logical streams)");
    } else {
      step_.notes.push_back("no hookstream annotations: all-reduces from NCCL kernel names, copies from memcpy kinds, "
                            "phases from the profiler's ranges, the launching thread (autograd's for backward) or kernel names, "
                            "forward before the first backward; no per-layer attribution, no buffer "
                            "accesses");
    }
  }

  // A foreign trace's GPU work that nothing attributed and that a rank launched before its first
  // backward op is that step's forward (a training step runs forward, then backward, then the
  // optimizer); unattributed work after it stays "outside layers".
  void forward_before_backward() {
    std::map<int, size_t> first_backward;  // rank -> index of its first backward op
    for (size_t i = 0; i < step_.model.ops.size(); ++i) {
      if (step_.groups[i].op_class == OpClass::Backward) first_backward.emplace(step_.model.ops[i].rank, i);
    }
    for (size_t i = 0; i < step_.model.ops.size(); ++i) {
      const auto b = first_backward.find(step_.model.ops[i].rank);
      if (b == first_backward.end() || i >= b->second || step_.groups[i].op_class != OpClass::Other) continue;
      step_.groups[i].op_class = OpClass::Forward;
      step_.model.ops[i].phase = phases_("forward");
    }
  }

  const EventModel& trace_;
  StepSelection selection_;
  int default_step_ = -1;  // the step chosen when none was asked for (choose_default_step)
  RecordedStep step_;
  TextInterner phases_;  // one Text per phase name, shared by the ops
  std::map<int, RangeContents> contents_;
  std::map<std::pair<int, std::string>, int> logical_;
  std::map<std::pair<int, std::string>, int> events_;
  std::map<std::pair<int, std::string>, int> buffers_;
  std::map<int, std::string> current_;
  std::unordered_map<std::string_view, OpClass> name_class_;
};

}  // namespace

RecordedStep extract_step(const EventModel& trace, const StepSelection& selection) {
  return StepExtractor(trace, selection).run();
}

}  // namespace hookstream
