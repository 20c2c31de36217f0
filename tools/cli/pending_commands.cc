// Subcommands whose libraries have not landed yet register nothing. Each moves to its own file
// when it lands, and leaves this one.
#include "tools/cli/commands.h"

namespace hookstream {

Command register_plan_command(CLI::App&) { return {}; }

}  // namespace hookstream
