#include "sim/streams/sync_mutation.h"

namespace hookstream {

std::vector<SyncStepVerdict> mutate_sync_steps(const StreamProtocol& protocol, const Plan& plan,
                                               const ModelStructure& structure, const ExpansionOptions& options) {
  const EventModel original = expand_step(plan, structure, protocol, options);
  RaceCheckOptions check;
  check.suggest_fixes = false;
  check.max_races = 1;
  std::vector<SyncStepVerdict> verdicts;
  for (const char* phase : {"forward", "backward"}) {
    const bool forward = std::string(phase) == "forward";
    const std::vector<ProtocolStep>& steps = forward ? protocol.forward : protocol.backward;
    for (size_t s = 0; s < steps.size(); ++s) {
      if (!is_sync_step(steps[s].kind)) continue;
      StreamProtocol mutant = protocol;
      std::vector<ProtocolStep>& mutated = forward ? mutant.forward : mutant.backward;
      mutated.erase(mutated.begin() + static_cast<std::ptrdiff_t>(s));
      const EventModel model = expand_step(plan, structure, mutant, options);
      const RaceReport report = check_races(model, check);
      SyncStepVerdict verdict;
      verdict.phase = phase;
      verdict.index = s;
      verdict.step = steps[s];
      verdict.races = report.race_count;
      if (!report.races.empty()) verdict.evidence = describe_race(model, report.races[0]);
      verdict.redundant = report.ok() && same_happens_before(original, model);
      verdicts.push_back(std::move(verdict));
    }
  }
  return verdicts;
}

}  // namespace hookstream
