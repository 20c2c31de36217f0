// `hookstream run PLAN.yaml`: its options. The command itself (verify, launch, train) is in the
// LibTorch commands module, tools/cli/torch/run_main.cc (why: tools/cli/torch_commands.h). docs/run.md.
#include <CLI/CLI.hpp>

#include <memory>

#include "tools/cli/commands.h"
#include "tools/cli/torch_commands.h"

namespace hookstream {

#ifndef HOOKSTREAM_WITH_TORCH
Command register_run_command(CLI::App&) { return {}; }
#else
Command register_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "verify a plan, then train it for real (LibTorch, DDP over Gloo or NCCL)");
  cmd->add_option("plan", args->plan, "training plan (axolotl-style YAML)")->required();
  cmd->add_option("--nproc", args->nproc, "ranks to launch (default: hookstream.world_size; at most the GPUs present)");
  cmd->add_option("--steps", args->steps, "optimizer steps in total (default: max_steps, else hookstream.iterations)");
  cmd->add_flag("--force", args->force, "run a plan that fails verification");
  cmd->add_flag("--apply-fix", args->apply_fix, "run the first fix the verifier proved, instead of a failing plan");
  cmd->add_option("--model", args->model, "HF config.json (overrides base_model)");
  cmd->add_option("--set", args->set, "override a plan key: key=value (dotted keys, YAML values)");
  cmd->add_option("--device", args->device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir, "save checkpoints under DIR");
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "save every K steps (0: at the end only)");
  cmd->add_flag("--resume", args->resume, "continue from the newest complete checkpoint in --checkpoint-dir");
  cmd->add_option("--trace", args->trace, "write each rank's profiler trace (Chrome JSON) to FILE; with several ranks, .rank{r} goes before its extension");
  cmd->add_option("--json", args->json, "write the JSON summary to FILE instead of stdout");
  cmd->add_option("--timeout", args->timeout_seconds, "seconds for rendezvous, collectives and a vanished rank");
  cmd->add_option("--inject-fault", args->inject_fault,
                  "test hook: exit-rank=R@step=S, kill-rank=R@step=S, oom-rank=R@step=S or reload-oom (docs/run.md)");
  cmd->add_flag("--no-oom-fallback", args->no_oom_fallback,
                "when a rank runs out of device memory, stop (exit 3) instead of relaunching with a plan predicted to need less");
  cmd->add_option("--applied-fix", args->applied_fix, "(set by the launcher for its ranks)")->group("");
  cmd->add_option("--oom-report", args->oom_report, "(set by the launcher for its ranks)")->group("");
  return Command{cmd, [args] { return call_torch_command("hookstream_run_main", args.get()); }};
}
#endif

}  // namespace hookstream
