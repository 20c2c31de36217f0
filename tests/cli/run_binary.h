// Runs the real hookstream binary (HOOKSTREAM_BINARY) with arguments and captures what it prints
// (stdout and stderr together) and its exit code. Shared by the CLI tests.
#pragma once

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include <catch2/catch.hpp>

namespace hookstream::testing {

struct BinaryRun {
  int exit_code;
  std::string out;
};

// Any shell command line, stderr captured with stdout.
inline BinaryRun run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  return BinaryRun{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline BinaryRun run_binary(const std::string& args) { return run_command(std::string(HOOKSTREAM_BINARY) + " " + args); }

}  // namespace hookstream::testing
