"""Issue 19 "Speed": whole `hookstream` processes on a user's inputs, the model taken from a Hugging
Face cache laid out as huggingface_hub lays it. One command (Python 3 standard library only):

  python3 bench/hf_cache_speed.py --hookstream build/hookstream [--runs 21] [--out FILE]

It builds a temporary cache (HF_HUB_CACHE): for each model, models--ORG--NAME/refs/main holding a
commit hash and models--ORG--NAME/snapshots/<hash>/config.json (huggingface_hub file_download.py:
repo_folder_name, try_to_load_from_cache), the config.json copied from bench/hf-configs/. Then, in
fresh processes (fork to wait4, median of --runs):

- `hookstream verify bench/configs/llama-3.3-70b-qlora-250-lines.yaml --world-size 8` (text, the default, and
  `--format json`): a 250-line
  axolotl config of a Llama-3.3-70B QLoRA run (DDP, 8 ranks); target < 100 ms.
- `hookstream inspect PLAN --format json` of DeepSeek-V3 (671B MoE, 256 routed experts, 61 layers),
  a full fine-tune and a LoRA all-linear plan; target < 1 s.

Each run's output is checked, so a fast wrong answer cannot pass: the verify must have read the
model from the temporary cache (`Llama-3.3-70B-Instruct` is no bundled preset; a failed lookup is
exit 2), the snapshot refs/main names (a stale 2-layer revision sits beside it), and reach a verdict
(exit 0 or 1, not 2), and the inspect JSON must list DeepSeek-V3's
parameters (more than 600 G of them, 256 experts in layer 3's fused expert tensors) from that cache.
--check-only: one run of each, the table's form checked (the ctest entry; never a timing assert).
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# (repo id, committed config.json, commit hash written to refs/main)
MODELS = [
    ("meta-llama/Llama-3.3-70B-Instruct", "hf-configs/Llama-3.3-70B-Instruct.json", "6f6073b423013f6a7d4d9f39144961bfbfbc386b"),
    ("deepseek-ai/DeepSeek-V3", "hf-configs/DeepSeek-V3.json", "1d044fd82b15f1cedb197a288e50cc96a2c27205"),
]

DEEPSEEK_PLANS = {
    "full fine-tune": "base_model: deepseek-ai/DeepSeek-V3\nsequence_len: 4096\nmicro_batch_size: 1\n",
    "LoRA all-linear": ("base_model: deepseek-ai/DeepSeek-V3\nsequence_len: 4096\nmicro_batch_size: 1\nadapter: lora\n"
                        "lora_r: 16\nlora_alpha: 32\nlora_target_linear: true\n"),
}


def make_cache(root):
    """The hub cache huggingface_hub would have after `huggingface-cli download ORG/NAME config.json`."""
    for repo, config, commit in MODELS:
        folder = os.path.join(root, "models--" + repo.replace("/", "--"))
        os.makedirs(os.path.join(folder, "refs"))
        with open(os.path.join(folder, "refs", "main"), "w") as f:
            f.write(commit)
        snapshot = os.path.join(folder, "snapshots", commit)
        os.makedirs(snapshot)
        shutil.copyfile(os.path.join(HERE, config), os.path.join(snapshot, "config.json"))
        # An older revision beside it, as a cache that has seen two downloads holds: a 2-layer
        # config, so a lookup that ignored refs/main would be caught by the checks below.
        with open(os.path.join(HERE, config)) as f:
            old = json.load(f)
        old["num_hidden_layers"] = 2
        stale = os.path.join(folder, "snapshots", "0" * 40)
        os.makedirs(stale)
        with open(os.path.join(stale, "config.json"), "w") as f:
            json.dump(old, f)


def timed(argv, env, accept=(0,)):
    """A fresh process: (wall s, CPU s (user + system, from wait4), exit code, stdout)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode not in accept:
            sys.exit(f"hf_cache_speed: {' '.join(argv)} exited {proc.returncode}: {err.read().decode(errors='replace')[-1500:]}")
        return wall, usage.ru_utime + usage.ru_stime, proc.returncode, out.read().decode(errors="replace")


def check_verify(out, cache):
    # The snapshot refs/main names, and its 80 layers (not the stale 2-layer revision beside it).
    snapshot = os.path.join(cache, "models--meta-llama--Llama-3.3-70B-Instruct", "snapshots", MODELS[0][2])
    if snapshot not in out or not (out.lstrip().startswith("{") or "80 layers" in out):
        sys.exit("hf_cache_speed: the verify report does not show the model of refs/main's snapshot:\n" + out[:2000])


def check_inspect(out, cache):
    report = json.loads(out)
    text = json.dumps(report)
    if cache not in text:
        sys.exit("hf_cache_speed: the inspect report does not name the cached config.json it read")
    params = report.get("parameters") or []
    experts = [p for p in params if ".layers.3.mlp.experts." in p.get("name", "")]
    total = 0
    for p in params:
        n = 1
        for d in p.get("shape", []):
            n *= d
        total += n
    if total < 600e9 or not experts or not any(p.get("shape", [0])[0] == 256 for p in experts):
        sys.exit(f"hf_cache_speed: DeepSeek-V3 not modelled as expected: {total / 1e9:.1f} G parameters, "
                 f"{len(experts)} expert tensors in layer 3")
    return len(params), total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hookstream", required=True)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--check-only", action="store_true", help="one run of each; checks outputs and the table")
    parser.add_argument("--out", help="write the Markdown here (default: stdout)")
    args = parser.parse_args()
    if not os.access(args.hookstream, os.X_OK):
        print(f"hf_cache_speed: {args.hookstream}: not an executable", file=sys.stderr)
        return 2
    runs = 1 if args.check_only else args.runs
    work = tempfile.mkdtemp(prefix="hookstream-hf-cache-")
    try:
        cache = os.path.join(work, "hub")
        make_cache(cache)
        env = dict(os.environ, HF_HUB_CACHE=cache, HF_HUB_OFFLINE="1")
        env.pop("HOOKSTREAM_DATA_DIR", None)
        plan_70b = os.path.join(HERE, "configs", "llama-3.3-70b-qlora-250-lines.yaml")
        with open(plan_70b) as f:
            lines_70b = sum(1 for _ in f)
        rows = []
        for form in ("text", "json"):
            verify = [args.hookstream, "verify", plan_70b, "--world-size", "8", "--format", form]
            walls, cpus, codes = [], [], set()
            for _ in range(runs):
                wall, cpu, code, out = timed(verify, env, accept=(0, 1))
                check_verify(out, cache)
                walls.append(wall)
                cpus.append(cpu)
                codes.add(code)
            rows.append((f"verify --format {form}: axolotl config of {lines_70b} lines, Llama-3.3-70B-Instruct QLoRA from the "
                         f"HF cache, 8 ranks (exit {'/'.join(map(str, sorted(codes)))})", cpus, walls, 0.1))
        for name, plan in DEEPSEEK_PLANS.items():
            path = os.path.join(work, name.replace(" ", "-") + ".yaml")
            with open(path, "w") as f:
                f.write(plan)
            command = [args.hookstream, "inspect", path, "--world-size", "8", "--format", "json"]
            walls, cpus = [], []
            for _ in range(runs):
                wall, cpu, _, out = timed(command, env, accept=(0,))
                tensors, total = check_inspect(out, cache)
                walls.append(wall)
                cpus.append(cpu)
            rows.append((f"inspect: DeepSeek-V3 ({total / 1e9:.0f} G parameters, {tensors} tensors) from the HF cache, {name}",
                         cpus, walls, 1.0))
    finally:
        shutil.rmtree(work)
    machine = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in machine.splitlines() if l.startswith("Model name")), platform.processor())
    load = os.getloadavg()
    out = [f"Machine: {model}, {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
           f"(1 / 5 / 15 min) when the runs ended. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
           f"Whole processes (fork to wait4), {runs} run(s) each. CPU is user + system time of the process: on a loaded "
           f"machine wall time waits for the cores; these commands run on one thread, so CPU time is the wall time of "
           f"an idle machine.", "",
           "| case | runs | CPU ms: median (min) | wall ms: median (min, max) | target ms (wall) | met by CPU / by wall |",
           "| --- | ---: | ---: | ---: | ---: | --- |"]
    for label, cpus, walls, target in rows:
        median, cpu = statistics.median(walls), statistics.median(cpus)
        out.append(f"| {label} | {len(walls)} | {cpu * 1e3:.1f} ({min(cpus) * 1e3:.1f}) | {median * 1e3:.1f} "
                   f"({min(walls) * 1e3:.1f}, {max(walls) * 1e3:.1f}) | {target * 1e3:.0f} | "
                   f"{'yes' if cpu < target else 'no'} / {'yes' if median < target else 'no'} |")
    for line in out[4:]:
        if line.count("|") != out[2].count("|"):
            sys.exit(f"hf_cache_speed: malformed row {line}")
    text = "\n".join(out) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
