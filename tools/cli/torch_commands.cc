#include "tools/cli/torch_commands.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "sim/inputs/input_error.h"

namespace hookstream {

#ifdef HOOKSTREAM_WITH_TORCH
namespace {

// Where the module is: beside the executable in the build tree (build/tools/), or in
// PREFIX/lib/hookstream/ beside PREFIX/bin/hookstream once installed (tools/CMakeLists.txt installs
// it there). Found from the running executable, not from the path it was built at, so an installed
// or moved tree works without the build directory.
std::string module_path() {
  if (const char* override_path = std::getenv("HOOKSTREAM_TORCH_COMMANDS")) return override_path;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::filesystem::path dir = error ? std::filesystem::path(".") : exe.parent_path();
  const std::filesystem::path beside = dir / HOOKSTREAM_TORCH_COMMANDS_NAME;
  if (std::filesystem::exists(beside, error)) return beside.string();
  return (dir.parent_path() / "lib" / "hookstream" / HOOKSTREAM_TORCH_COMMANDS_NAME).string();
}

}  // namespace
#endif

int call_torch_command(const char* entry, const void* args) {
#ifndef HOOKSTREAM_WITH_TORCH
  (void)entry;
  (void)args;
  throw InputError("hookstream", "this build has no LibTorch: run and oracle need it (build with -DHOOKSTREAM_WITH_TORCH=ON)");
#else
  const std::string path = module_path();
  // RTLD_LOCAL: the module's copies of hookstream's own code stay its own. Never closed: LibTorch
  // registers static state that must outlive the call.
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    const char* why = dlerror();
    throw InputError(path, std::string("cannot load the LibTorch commands module: ") + (why ? why : "unknown error"));
  }
  using Entry = int (*)(const void*);
  auto* function = reinterpret_cast<Entry>(dlsym(module, entry));
  if (function == nullptr) throw InputError(path, std::string("the module has no entry point ") + entry);
  return function(args);
#endif
}

}  // namespace hookstream
