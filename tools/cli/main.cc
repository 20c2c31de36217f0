// The hookstream command line: a thin driver over the sim/ (and runtime/) libraries.
// Exit codes: 0 all clear, 1 a check failed, 2 bad input.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include "sim/input_error.h"
#include "sim/report.h"
#include "sim/verify.h"
#include "tools/cli/commands.h"

namespace hookstream {

namespace {

// Writes `text` to `path` through a temporary file and a rename, so a failed run never leaves a
// partial output file behind.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp-hookstream";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "cannot write the output file");
    out << text;
    if (!out.flush()) {
      std::filesystem::remove(temporary);
      throw InputError(path, "cannot write the output file");
    }
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace

void emit(const std::string& text, const std::string& output_path) {
  if (output_path.empty()) {
    std::cout << text;
  } else {
    write_atomically(output_path, text);
  }
}

int run_verify(const VerifyArgs& args) {
  LoadOptions load;
  if (!args.model.empty()) load.model_path = args.model;
  if (args.world_size != -1) load.world_size = args.world_size;
  load.set = args.set;
  const PlanSource source = read_plan_source(args.plan, load);
  const VerifyResult result = verify_plan(source);
  if (args.format == "json") {
    emit(render_json(result).dump(2) + "\n", args.output);
  } else {
    const bool colour = args.output.empty() && !args.no_colour && isatty(STDOUT_FILENO) != 0;
    emit(render_text(result, colour), args.output);
  }
  return result.ok() ? 0 : 1;
}

}  // namespace hookstream

int main(int argc, char** argv) {
  using namespace hookstream;
  CLI::App app{"hookstream: verify DDP gradient-hook and CUDA-stream schedules before spending GPU time"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hookstream 0.1.0");

  VerifyArgs verify;
  CLI::App* verify_cmd = app.add_subcommand("verify", "simulate DDP's Reducer for every rank and iteration of a plan");
  verify_cmd->add_option("plan", verify.plan, "training plan (axolotl-style YAML)")->required();
  verify_cmd->add_option("--model", verify.model, "HF config.json (overrides base_model)");
  verify_cmd->add_option("--world-size", verify.world_size, "number of ranks (overrides hookstream.world_size)");
  verify_cmd->add_option("--set", verify.set, "override a plan key: key=value (dotted keys, YAML values)");
  verify_cmd->add_option("--format", verify.format, "text or json")->check(CLI::IsMember({"text", "json"}));
  verify_cmd->add_option("-o,--output", verify.output, "write the report to FILE instead of stdout");
  verify_cmd->add_flag("--no-colour,--no-color", verify.no_colour, "never colour the text report");

  OracleArgs oracle;
  CLI::App* oracle_cmd = register_oracle_command(app, oracle);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "hookstream: error: " << e.what() << "\n";
    return 2;
  }
  try {
    if (verify_cmd->parsed()) return run_verify(verify);
    if (oracle_cmd && oracle_cmd->parsed()) return run_oracle_command(oracle);
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
  return 2;
}
