// What every subcommand shares, in the CLI and in the LibTorch commands module alike.
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "sim/inputs/axolotl_config/config_report.h"
#include "sim/inputs/input_error.h"
#include "sim/verify/json_text.h"
#include "sim/inputs/model_structure.h"
#include "tools/cli/commands.h"

namespace hookstream {

void emit(const std::string& text, const std::string& path) {
  if (path.empty()) {
    std::cout << text;
    return;
  }
  const std::string temporary = path + ".tmp-hookstream";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "cannot write the output file");
    out << text;
    if (!out.flush()) {
      out.close();
      std::filesystem::remove(temporary);
      throw InputError(path, "cannot write the output file");
    }
  }
  std::filesystem::rename(temporary, path);
}

void DistributedFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--world-size", world_size, "number of ranks (overrides hookstream.world_size)");
  cmd->add_option("--nnodes", nnodes, "torchrun's --nnodes: machines (world size = nnodes x nproc-per-node)");
  cmd->add_option("--nproc-per-node", nproc_per_node, "torchrun's --nproc-per-node: processes per machine");
  cmd->add_option("--accelerate-config", accelerate_config,
                  "accelerate config file (distributed_type, num_processes, num_machines, fsdp_config, deepspeed_config)");
}

void DistributedFlags::apply(LoadOptions& load) const {
  if (world_size != -1) load.world_size = world_size;
  if (nnodes != -1) load.nnodes = nnodes;
  if (nproc_per_node != -1) load.nproc_per_node = nproc_per_node;
  if (!accelerate_config.empty()) load.accelerate_config = accelerate_config;
}

std::optional<int> report_engine_not_modelled(const PlanSource& source, const std::string& format, const std::string& output) {
  const Plan plan = parse_plan(source.yaml_text, source.source, source.options);
  if (plan.engine.modelled()) return std::nullopt;
  if (format == "json") {
    emit(json_text(render_engine_not_modelled_json(plan), 2) + "\n", output);
  } else {
    emit(render_engine_not_modelled_text(plan), output);
  }
  return 1;
}

std::optional<int> report_startup_failure(const PlanSource& source, const std::string& format, const std::string& output) {
  const Plan plan = parse_plan(source.yaml_text, source.source, source.options);
  try {
    build_model_structure(plan);
  } catch (const StartupError& e) {
    // The run stops in the library before the first step: no hook schedule to simulate, but a
    // verdict, the library's own text, and where in the user's config it comes from.
    const std::string model = plan.model.source + " (" + plan.model.model_type + ")";
    if (format == "json") {
      const nlohmann::json j = {{"schema", "hookstream.verify/2"}, {"plan", source.source}, {"ok", false},
                                {"verdict", e.verdict()}, {"where", e.where()}, {"library", e.library()},
                                {"message", e.message()}, {"model", model}};
      emit(json_text(j, 2) + "\n", output);
    } else {
      emit("plan     " + source.source + ": " + model + "\n" +
               "FAIL     " + e.verdict() + "  before the first step (" + e.library() + " raises while wrapping the model)\n" +
               "  where    " + e.where() + "\n" +
               "  " + e.library() + "  " + e.message() + "\n",
           output);
    }
    return 1;
  }
  return std::nullopt;
}

}  // namespace hookstream

namespace hookstream {

int run_reporting_errors(const std::function<int()>& body) {
  try {
    return body();
  } catch (const InputError& e) {
    std::cerr << "hookstream: error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "hookstream: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hookstream: internal error: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace hookstream
