// Argument structs and entry points of the CLI's subcommands.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace hookstream {

struct VerifyArgs {
  std::string plan;
  std::string model;
  int world_size = -1;  // -1: not given
  std::vector<std::string> set;
  std::string format = "text";
  std::string output;
  bool no_colour = false;
};

struct OracleArgs {
  std::string plan;
  std::string model;
  int world_size = -1;  // -1: not given
  std::vector<std::string> set;
  std::string format = "text";
  int timeout_seconds = 120;
};

void emit(const std::string& text, const std::string& output_path);
int run_verify(const VerifyArgs& args);
// `hookstream oracle`: runs the plan's structure for real under c10d's Reducer (needs LibTorch);
// returns nullptr when built without it.
CLI::App* register_oracle_command(CLI::App& app, OracleArgs& args);
int run_oracle_command(const OracleArgs& args);

}  // namespace hookstream
