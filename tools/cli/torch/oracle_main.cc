// `hookstream oracle PLAN.yaml`: runs the plan's structure under the real c10d Reducer (one process
// per rank over Gloo on 127.0.0.1) and prints what really happened beside the simulator's
// prediction. Part of the LibTorch commands module (tools/cli/torch_commands.h); options in
// tools/cli/oracle_command.cc.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <fmt/format.h>
#include <iostream>
#include <memory>

#include "tools/cli/commands.h"
#include "tools/cli/torch_commands.h"

#include "runtime/differential.h"
#include "runtime/oracle.h"
#include "runtime/reducer_factory.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/json_text.h"
#include "sim/verify/report.h"
#include "sim/verify/verify.h"

namespace hookstream {

namespace {

// The worker sits beside this module: build/tools/ in the build tree, PREFIX/lib/hookstream/ once
// installed (tools/CMakeLists.txt puts both there), so it is found from the module's own file.
std::string worker_path() {
  if (const char* worker = std::getenv("HOOKSTREAM_ORACLE_WORKER")) return worker;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&worker_path), &info) == 0 || info.dli_fname == nullptr) {
    return HOOKSTREAM_ORACLE_WORKER_NAME;
  }
  return (std::filesystem::path(info.dli_fname).parent_path() / HOOKSTREAM_ORACLE_WORKER_NAME).string();
}

int run_oracle_command(const OracleArgs& args) {
  if (!gloo_available()) {
    throw InputError("oracle", "this build's LibTorch has no Gloo, which the oracle's CPU ranks need (expected a build "
                               "against Debian's LibTorch: tools/build.sh)");
  }
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  if (args.world_size != -1) load.world_size = args.world_size;
  load.set = args.set;
  // The prediction is for the PyTorch the oracle runs (its LibTorch), whatever the plan names.
  load.torch_version = torch_version();
  VerifyOptions verify_options;
  verify_options.search_fixes = false;
  const VerifyResult predicted = verify_plan(read_plan_source(args.plan, load), verify_options);
  int64_t parameters = 0;
  for (const auto& p : predicted.structure.parameters) parameters += p.numel();
  if (parameters > 50'000'000) {
    throw InputError(args.plan, fmt::format("the oracle trains the model for real on the CPU; this one has {} parameters "
                                            "(expected a tiny config, e.g. presets/tiny-llama.json via --model)",
                                            parameters));
  }
  OracleOptions options;
  options.worker_path = worker_path();
  options.timeout = std::chrono::seconds(args.timeout_seconds);
  const OracleResult observed = run_oracle(predicted.plan, options);
  const DifferentialReport comparison = compare_with_oracle(predicted.plan, predicted.simulation, observed);
  if (args.format == "json") {
    nlohmann::json j;
    j["schema"] = "hookstream.oracle/1";
    j["plan"] = args.plan;
    j["observed"] = nlohmann::json::array();
    for (const auto& f : observed.findings) j["observed"].push_back(finding_json(f));
    j["predicted"] = nlohmann::json::array();
    for (const auto& f : predicted.simulation.findings) j["predicted"].push_back(finding_json(f));
    j["unclassified_errors"] = observed.unclassified_errors;
    j["agree"] = comparison.agree();
    std::cout << json_text(j, 2) << "\n";
  } else {
    std::cout << fmt::format("real DDP (c10d Reducer over Gloo, {} ranks): {}\n", predicted.plan.world_size,
                             observed.ok() ? "ok" : "failed");
    for (const auto& f : observed.findings) {
      std::cout << fmt::format("  {} rank {} iteration {}: {} {}\n", to_string(f.kind),
                               ranks_text(f.ranks.empty() ? std::vector<int>{f.rank} : f.ranks), f.iteration,
                               f.parameter, f.error_text.substr(0, f.error_text.find('\n')).substr(0, 120));
    }
    for (const auto& e : observed.unclassified_errors) std::cout << "  unclassified error: " << e.substr(0, e.find('\n')) << "\n";
    std::cout << "simulator vs real DDP:\n" << comparison.describe();
  }
  if (!comparison.agree()) return 1;
  return observed.ok() ? 0 : 1;
}
}  // namespace

}  // namespace hookstream

extern "C" int hookstream_oracle_main(const void* oracle_args) {
  const auto& args = *static_cast<const hookstream::OracleArgs*>(oracle_args);
  return hookstream::run_reporting_errors([&] { return hookstream::run_oracle_command(args); });
}
