#include "sim/sync/fsdp1/fsdp1_pairing.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hookstream {

namespace {

// How c10 prints a tensor's device type inside a CollectiveFingerPrint (observed with torch 2.11 on
// CPU: the int8 device type goes through TensorOptions' printer).
constexpr const char* kCpuDeviceText =
    "TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), requires_grad=false (default), "
    "pinned_memory=false (default), memory_format=(nullopt))";

bool same_fingerprint(const Collective& a, const Collective& b) {
  return a.op == b.op && a.shape == b.shape && a.dtypes == b.dtypes;
}

// What Gloo alone compares: the kind of collective and the bytes each rank sends.
bool same_for_gloo(const Collective& a, const Collective& b) { return a.op == b.op && a.bytes == b.bytes; }

// c10's operator<< for std::vector (c10/util/Logging.h): elements separated by a space.
std::string spaced(const std::vector<std::string>& items) { return fmt::format("{}", fmt::join(items, " ")); }

std::string fingerprint_text(const Collective& c, size_t sequence) {
  std::vector<std::string> devices(c.dtypes.size(), kCpuDeviceText);
  return fmt::format("CollectiveFingerPrint(SequenceNumber={}, OpType={}, TensorShape=[{}], TensorDtypes={}, "
                     "TensorDeviceTypes={})",
                     sequence, c.op, fmt::join(c.shape, ", "), spaced(c.dtypes), spaced(devices));
}

std::vector<std::string> shape_strings(const Collective& c) {
  std::vector<std::string> out;
  for (int64_t d : c.shape) out.push_back(std::to_string(d));
  return out;
}

// CollectiveFingerPrint::verify_tensors and compute_collective_diff, as rank `mine` raises it.
std::string detail_mismatch_text(int mine, const Collective& a, int other, const Collective& b, size_t sequence) {
  std::string diff;
  if (a.op != b.op) diff += fmt::format("  Op type: {}vs {}", a.op, b.op);
  if (a.shape != b.shape) diff += fmt::format("  Tensor Tensor shapes: {}vs {}", spaced(shape_strings(a)), spaced(shape_strings(b)));
  if (a.dtypes != b.dtypes) diff += fmt::format("  Tensor Tensor dtypes: {}vs {}", spaced(a.dtypes), spaced(b.dtypes));
  return fmt::format(
      "Detected mismatch between collectives on ranks. Rank {} is running collective: {}, but Rank {} is running "
      "collective: {}.Collectives differ in the following aspects: {}",
      mine, fingerprint_text(a, sequence), other, fingerprint_text(b, sequence), diff);
}

std::string python_list(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out + "]";
}

std::string unit_of_payload(const std::string& payload) {
  const std::string prefix = kExecOrderIndexPayload;
  return payload.rfind(prefix, 0) == 0 ? payload.substr(prefix.size()) : payload;
}

}  // namespace

std::vector<Finding> pair_fsdp1_collectives(const std::vector<std::vector<int>>& classes,
                                            const std::vector<CollectiveLog>& logs,
                                            std::vector<std::vector<Finding>>& per_class,
                                            const Fsdp1PairingInputs& inputs) {
  const bool detail = inputs.distributed_debug == "DETAIL";
  std::vector<int> class_of_rank;
  for (size_t c = 0; c < classes.size(); ++c) {
    for (int r : classes[c]) {
      if (class_of_rank.size() <= static_cast<size_t>(r)) class_of_rank.resize(static_cast<size_t>(r) + 1, -1);
      class_of_rank[static_cast<size_t>(r)] = static_cast<int>(c);
    }
  }
  const int world = static_cast<int>(class_of_rank.size());
  std::vector<Finding> stop(classes.size());
  std::vector<Finding> silent(classes.size());
  auto entry = [&](int rank, size_t k) -> const std::pair<StepKey, Collective>* {
    const auto& log = logs[static_cast<size_t>(class_of_rank[static_cast<size_t>(rank)])].collectives;
    return k < log.size() ? &log[k] : nullptr;
  };
  auto make = [&](VerdictKind kind, int rank, const std::pair<StepKey, Collective>& at) {
    Finding f;
    f.kind = kind;
    f.rank = rank;
    f.iteration = at.first.iteration;
    f.micro_step = at.first.micro_step;
    f.phase = at.second.phase;
    return f;
  };
  for (size_t k = 0;; ++k) {
    std::vector<int> present, absent;
    for (int r = 0; r < world; ++r) (entry(r, k) ? present : absent).push_back(r);
    if (present.empty()) break;
    if (!absent.empty()) {
      // A rank that stopped (its own error) or finished issues nothing more: the others block in
      // this collective until the process group's timeout.
      const int other = absent.front();
      const size_t oc = static_cast<size_t>(class_of_rank[static_cast<size_t>(other)]);
      for (int r : present) {
        const size_t c = static_cast<size_t>(class_of_rank[static_cast<size_t>(r)]);
        if (stop[c].kind != VerdictKind::Ok) continue;
        const auto& at = *entry(r, k);
        Finding f = make(VerdictKind::CollectiveMismatch, r, at);
        f.error_text = fmt::format("no error at first: rank {} blocks in '{}' until the process group timeout", r,
                                   at.second.what);
        f.explanation = fmt::format("rank {} never issues its collective #{}: {}", other, k,
                                    logs[oc].stopped ? "it stopped earlier with an error" : "its run issues fewer collectives");
        if (silent[c].kind != VerdictKind::Ok) f.explanation += "; before that, " + silent[c].explanation;
        stop[c] = std::move(f);
      }
      break;
    }
    bool fingerprints_differ = false, payloads_differ = false;
    for (int r : present) {
      const Collective& a = entry(r, k)->second;
      const Collective& b = entry(present.front(), k)->second;
      if (detail ? !same_fingerprint(a, b) : !same_for_gloo(a, b)) fingerprints_differ = true;
      if (a.payload != b.payload) payloads_differ = true;
    }
    if (fingerprints_differ) {
      for (int r : present) {
        const auto& at = *entry(r, k);
        // verify_tensors compares this rank's fingerprint with every rank's in rank order and
        // raises at the first that differs.
        int other = -1;
        for (int s : present) {
          if (detail ? !same_fingerprint(at.second, entry(s, k)->second) : !same_for_gloo(at.second, entry(s, k)->second)) {
            other = s;
            break;
          }
        }
        if (other < 0) other = r == present.front() ? present.back() : present.front();
        const Collective& theirs = entry(other, k)->second;
        const size_t c = static_cast<size_t>(class_of_rank[static_cast<size_t>(r)]);
        Finding f = make(VerdictKind::CollectiveMismatch, r, at);
        if (detail) {
          f.error_text = detail_mismatch_text(r, at.second, other, theirs, k);
          f.explanation = fmt::format(
              "collective #{} on the process group: rank {} runs '{}' while rank {} runs '{}'; with "
              "TORCH_DISTRIBUTED_DEBUG=DETAIL ProcessGroupWrapper compares their fingerprints (op type, shapes, "
              "dtypes) before running them",
              k, r, at.second.what, other, theirs.what);
        } else {
          f.error_text = fmt::format("no error at first: rank {} runs '{}' against rank {}'s '{}' in Gloo", r,
                                     at.second.what, other, theirs.what);
          f.explanation = fmt::format(
              "collective #{} on the process group pairs collectives of different kinds or sizes; without "
              "TORCH_DISTRIBUTED_DEBUG=DETAIL nothing checks them first and Gloo times out or aborts (\"Received "
              "data size doesn't match expected size. Is there a distributed collective mismatch in your code?\")",
              k);
        }
        if (silent[c].kind != VerdictKind::Ok) f.explanation += "; before that, " + silent[c].explanation;
        stop[c] = std::move(f);
      }
      break;
    }
    if (!payloads_differ) continue;
    const std::string& first_payload = entry(present.front(), k)->second.payload;
    if (first_payload.rfind(kExecOrderIndexPayload, 0) == 0) {
      // _check_order: every rank compares every pair of ranks' gathered handle indices, in
      // itertools.combinations order, and raises for the first pair that differs.
      int r1 = -1, r2 = -1;
      for (size_t i = 0; i < present.size() && r1 < 0; ++i) {
        for (size_t j = i + 1; j < present.size(); ++j) {
          if (entry(present[i], k)->second.payload != entry(present[j], k)->second.payload) {
            r1 = present[i];
            r2 = present[j];
            break;
          }
        }
      }
      const std::string u1 = unit_of_payload(entry(r1, k)->second.payload);
      const std::string u2 = unit_of_payload(entry(r2, k)->second.payload);
      std::string text;
      std::string why;
      if (inputs.use_orig_params) {
        // _get_names_from_handle_indices looks the FlatParameter up in param_to_fqn, which with
        // use_orig_params holds only the original parameters: a KeyError whose text is the
        // FlatParameter's repr (its values are this rank's shard; shown as "...").
        const auto trainable = inputs.requires_grad_of_unit.find(u1);
        text = trainable == inputs.requires_grad_of_unit.end() || trainable->second
                   ? "Parameter containing:\ntensor([...], requires_grad=True)"
                   : "Parameter containing:\ntensor([...])";
        why = fmt::format("KeyError raised while naming the parameters of {}'s FlatParameter (use_orig_params: "
                          "param_to_fqn has no FlatParameter keys)",
                          u1);
      } else {
        auto names = [&](const std::string& unit) {
          const auto it = inputs.fqns_of_unit.find(unit);
          return "[" + python_list(it == inputs.fqns_of_unit.end() ? std::vector<std::string>{} : it->second) + "]";
        };
        text = fmt::format("Forward order differs across ranks: rank {} is all-gathering parameters for {} while rank "
                           "{} is all-gathering parameters for {}",
                           r1, names(u1), r2, names(u2));
        why = "RuntimeError";
      }
      for (int r : present) {
        const auto& at = *entry(r, k);
        Finding f = make(VerdictKind::EngineError, r, at);
        f.error_text = text;
        const auto flat = inputs.flat_param_of_unit.find(u1);
        f.parameter = flat == inputs.flat_param_of_unit.end() ? u1 : flat->second;
        f.explanation = fmt::format(
            "FSDP1's forward-order check (TORCH_DISTRIBUTED_DEBUG=DETAIL, first iteration, _exec_order_utils.py "
            "_check_order) all-gathers the index of the unit each rank unshards next: rank {} unshards {} while rank "
            "{} unshards {} — the ranks run different FSDP units in forward (a unit skipped on some rank); {}. "
            "Fix: run every FSDP unit on every rank (route no tokens through an idle expert instead of skipping it)",
            r1, u1, r2, u2, why);
        stop[static_cast<size_t>(class_of_rank[static_cast<size_t>(r)])] = std::move(f);
      }
      break;
    }
    // Equal fingerprints, different data: the collective exchanges shards of different units
    // (an unshard that mixes two units' FlatParameters, a reduce-scatter that sums two units'
    // gradients). Nothing raises here.
    for (int r : present) {
      const size_t c = static_cast<size_t>(class_of_rank[static_cast<size_t>(r)]);
      if (silent[c].kind != VerdictKind::Ok) continue;
      const auto& at = *entry(r, k);
      int other = -1;
      for (int s : present) {
        if (entry(s, k)->second.payload != at.second.payload) {
          other = s;
          break;
        }
      }
      Finding f = make(VerdictKind::WrongGradient, r, at);
      f.parameter = at.second.payload;
      f.error_text = "no error: the ranks pair collectives of different FSDP units silently";
      f.explanation = fmt::format(
          "collective #{} ('{}' on rank {}) ran against '{}' on rank {}: equal-sized, so {} exchanged them without an "
          "error and the unit's parameters or gradients mix two units' data",
          k, at.second.what, r, entry(other, k)->second.what, other,
          detail ? "even ProcessGroupWrapper's fingerprint check (op type, shapes, dtypes)" : "Gloo");
      silent[c] = std::move(f);
    }
  }
  // A rank whose collectives all paired, some silently with another unit's: wrong results, no error.
  for (size_t c = 0; c < classes.size(); ++c) {
    if (stop[c].kind == VerdictKind::Ok && silent[c].kind != VerdictKind::Ok && per_class[c].empty()) {
      per_class[c].push_back(silent[c]);
    }
  }
  return stop;
}

}  // namespace hookstream
