// The hookstream command line: a thin driver over the sim/, traces/ and runtime/ libraries.
// Exit codes: 0 all clear, 1 a check failed, 2 bad input, 3 an internal error.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "sim/input_error.h"
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

}  // namespace hookstream

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
  try {
    for (const Command& command : commands) {
      if (command.app && command.app->parsed()) return command.run();
    }
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
