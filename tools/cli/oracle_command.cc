// `hookstream oracle PLAN.yaml`: the real-DDP oracle from the command line. Built only with LibTorch.
#include <CLI/CLI.hpp>

#include "tools/cli/commands.h"

namespace hookstream {

#ifndef HOOKSTREAM_WITH_TORCH
CLI::App* register_oracle_command(CLI::App&, OracleArgs&) { return nullptr; }
int run_oracle_command(const OracleArgs&) { return 2; }
#endif

}  // namespace hookstream
