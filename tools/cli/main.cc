// The hookstream command line: a thin driver over the sim/, traces/ and runtime/ libraries.
// Exit codes: 0 all clear, 1 a check failed, 2 bad input, 3 an internal error.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "sim/input_error.h"
#include "tools/cli/commands.h"


int main(int argc, char** argv) {
  using namespace hookstream;
  CLI::App app{"hookstream: verify DDP gradient-hook and CUDA-stream schedules before spending GPU time"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hookstream 0.1.0");
  const std::vector<Command> commands = {register_verify_command(app), register_simulate_command(app),
                                         register_plan_command(app), register_replay_command(app),
                                         register_oracle_command(app), register_run_command(app)};
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
  for (const Command& command : commands) {
    if (command.app && command.app->parsed()) return run_reporting_errors(command.run);
  }
  return 2;
}
