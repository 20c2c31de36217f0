#include "sim/sync/fsdp2/fsdp2_fixes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hookstream {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<VerifiedFix> fsdp2_candidate_fixes(const Plan& plan) {
  std::vector<VerifiedFix> out;
  const std::vector<std::string>& classes = plan.engine.fsdp.transformer_layer_cls_to_wrap;
  std::vector<std::string> without_mlp;
  for (const std::string& c : classes) {
    if (!ends_with(c, "MLP")) without_mlp.push_back(c);
  }
  if (without_mlp.size() != classes.size()) {
    // An FSDP unit inside the tiled function gets its post_backward from tile 1's nested backward;
    // as part of the decoder layer's unit it is reduced once, when the outer backward reaches the
    // layer input (docs/engines/fsdp2.md).
    const std::string value = without_mlp.empty() ? "" : fmt::format("{}", fmt::join(without_mlp, ","));
    if (!value.empty()) {
      out.push_back(VerifiedFix{{{"fsdp_config.transformer_layer_cls_to_wrap", value}},
                                "the MLP's parameters join the decoder layer's FSDP unit: one reduce-scatter when the "
                                "outer backward reaches the layer input, after every tile's gradient",
                                std::nullopt});
    }
    if (plan.tiled_mlp) {
      out.push_back(VerifiedFix{{{"tiled_mlp", "false"}},
                                "without tiling the MLP unit runs one forward and one backward per step",
                                std::nullopt});
    }
  }
  if (plan.gradient_checkpointing && plan.use_reentrant) {
    out.push_back(VerifiedFix{{{"gradient_checkpointing_kwargs.use_reentrant", "false"}},
                              "non-reentrant checkpointing recomputes inside the unit's own backward: no second "
                              "forward for FSDP to hook",
                              std::nullopt});
  }
  return out;
}

}  // namespace hookstream
