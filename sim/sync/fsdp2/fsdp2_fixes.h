// Candidate fixes for FSDP2 findings, in the user's keys (fsdp_config.*, tiled_mlp,
// gradient_checkpointing_kwargs); verify re-simulates each before offering it.
#pragma once

#include <vector>

#include "sim/inputs/plan.h"
#include "sim/verify/verify.h"

namespace hookstream {

std::vector<VerifiedFix> fsdp2_candidate_fixes(const Plan& plan);

}  // namespace hookstream
