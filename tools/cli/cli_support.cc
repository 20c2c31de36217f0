// What every subcommand shares, in the CLI and in the LibTorch commands module alike.
#include <filesystem>
#include <fstream>
#include <iostream>

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
