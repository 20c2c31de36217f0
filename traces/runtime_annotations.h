// The record_function ranges `hookstream run` wraps around its work (runtime/, documented in
// docs/stream-protocols.md "Runtime annotations"), parsed back from a trace's marker names:
//
//   hookstream:{phase}:L{layer}:{kind}:{stream}[:r={buf}[{slot}],...][:w={buf}[{slot}],...]
//              [:e={event}[{slot}]][:s={other_stream}][:what={layer|recompute|backward}]
//   hookstream:{phase}:L{layer}:layer      one decoder layer's forward or backward
//   hookstream:step:{n}                    one optimizer step (forward, backward, optimizer)
//   hookstream:optimizer                   the optimizer's step
//
// A protocol-step range names the logical stream (the protocol's stream name) and the buffers the
// step reads and writes; the GPU work launched inside the range is that step's work. That is what
// gives a recorded trace the per-buffer access information the race checker needs.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hookstream {

struct RuntimeAnnotation {
  enum class Type { ProtocolStep, Layer, TrainingStep, Optimizer };
  Type type = Type::ProtocolStep;
  std::string phase;               // forward | backward (ProtocolStep, Layer)
  int layer = -1;
  std::string kind;                // copy, compute, wait_stream, record, wait_event, free, record_stream, host_sync
  std::string stream;              // logical stream the step is enqueued on (wait_stream: the waiter)
  std::vector<std::string> reads;  // "reload[1]", "hidden[3]"
  std::vector<std::string> writes;
  std::string event;               // "reload_free[0]"
  std::string other_stream;        // wait_stream: the waitee; host_sync: the stream synchronized
  std::string what;                // compute: layer | recompute | backward
  int step = -1;                   // TrainingStep: n
};

// True when `name` starts with "hookstream:" (then parse_runtime_annotation must succeed).
bool is_runtime_annotation(const std::string& name);

// Parses one range name. Returns nullopt for names that are not hookstream annotations; throws
// InputError(where, ...) naming the annotation and what was expected when a "hookstream:" name is
// malformed (a runtime/replay version mismatch must not be guessed around).
std::optional<RuntimeAnnotation> parse_runtime_annotation(const std::string& name, const std::string& where);

// The inverse, used by test fixtures and docs: the exact name the runtime emits.
std::string format_runtime_annotation(const RuntimeAnnotation& annotation);

}  // namespace hookstream
