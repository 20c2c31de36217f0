#include "tools/cli/torch_commands.h"

#include <dlfcn.h>

#include <cstdlib>

#include "sim/input_error.h"

namespace hookstream {

int call_torch_command(const char* entry, const void* args) {
#ifndef HOOKSTREAM_TORCH_COMMANDS_PATH
  (void)entry;
  (void)args;
  throw InputError("hookstream", "this build has no LibTorch: run and oracle need it (build with -DHOOKSTREAM_WITH_TORCH=ON)");
#else
  const char* override_path = std::getenv("HOOKSTREAM_TORCH_COMMANDS");
  const std::string path = override_path ? override_path : HOOKSTREAM_TORCH_COMMANDS_PATH;
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
