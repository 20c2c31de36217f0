// DDP under torch.compile: the plan's axolotl keys torch_compile / torch_compile_backend /
// torch_compile_mode and hookstream's optimize_ddp / compiled_autograd (docs/plan-format.md), and
// which gradient-sync rules they select (docs/ddp-compile.md).
#pragma once

#include <string>

namespace hookstream {

// torch._dynamo.config.optimize_ddp (torch/_dynamo/config.py; get_optimize_ddp_mode in
// torch/_dynamo/utils.py maps True -> "ddp_optimizer", False -> "no_optimization").
enum class OptimizeDdp { DdpOptimizer, PythonReducer, PythonReducerWithoutCompiledForward, NoOptimization };

const char* to_string(OptimizeDdp mode);
// "ddp_optimizer", "python_reducer", ... and YAML's true/false; false when not one of them.
bool parse_optimize_ddp(const std::string& text, OptimizeDdp& mode);

struct TorchCompile {
  // axolotl's torch_compile (HF TrainingArguments.torch_compile; a backend or mode implies it, as
  // TrainingArguments.__post_init__ does). "auto" is taken as on.
  bool enabled = false;
  std::string backend = "inductor";  // TrainingArguments' default when torch_compile is on
  std::string mode;                  // torch_compile_mode; empty: torch.compile's default
  // Neither transformers 5.17's Trainer nor accelerate 1.15 set optimize_ddp or compiled autograd
  // (no reference to either in their sources): torch's defaults, optimize_ddp=True and
  // compiled_autograd=False.
  OptimizeDdp optimize_ddp = OptimizeDdp::DdpOptimizer;
  bool compiled_autograd = false;
};

}  // namespace hookstream
