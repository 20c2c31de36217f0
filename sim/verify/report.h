// Renders a VerifyResult: a text report a person reads in ten seconds (ANSI colour only when asked),
// and JSON with the schema in docs/verify-json.md. Output is deterministic.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/verify/verify.h"

namespace hookstream {

std::string render_text(const VerifyResult& result, bool colour);
nlohmann::json render_json(const VerifyResult& result);
nlohmann::json finding_json(const Finding& finding);
nlohmann::json cost_json(const PlanCost& cost);
std::string ranks_text(const std::vector<int>& ranks);
// The YAML lines a fix changes, e.g. "gradient_checkpointing_kwargs:\n  use_reentrant: false".
std::string fix_yaml(const std::vector<FixChange>& changes);
// Numbered fixes: rationale, predicted cost next to `before`'s, the YAML to paste.
// Each fix as a unified diff of the user's config (`source_text`, named `source_path`), with the
// training-code change each `hookstream:` key stands for; empty `source_text`: the keys as YAML.
std::string fix_list_text(const std::vector<VerifiedFix>& fixes, const std::optional<PlanCost>& before, bool colour,
                          const std::string& source_text = "", const std::string& source_path = "");
// The diff of one fix against the user's config, and its code-change notes (JSON `patch`, `code_changes`).
std::string fix_patch(const VerifiedFix& fix, const std::string& source_text, const std::string& source_path);
std::vector<std::string> fix_code_changes(const VerifiedFix& fix);
// One change as JSON: key and value, and `file` when it edits a file other than the plan.
nlohmann::json change_json(const FixChange& change);

}  // namespace hookstream
