"""Issue 23 item 4: whole-process speed of `hookstream replay` against HolisticTraceAnalysis (HTA) and
against the two-core reading floor. One command (run with the oracle venv's Python, which has the
pinned HTA of oracles/requirements.txt):

  build/oracle-venv/bin/python bench/replay_vs_hta.py --hookstream build/hookstream \
      --replay-bench build/bench/replay_bench [--out FILE]

Table 1, against HTA: every HTA test trace given (default: the Kineto traces in ../shared/traces,
all four from HTA's tests/data, see ../shared/traces/README.md). For each trace, fresh processes,
alternating: `hookstream replay TRACE` (its default: every whole-trace analysis, among them HTA's
idle-time breakdown, kernel breakdown, memory bandwidth and NCCL/compute overlap, and the step
analysis) and one Python process that imports HTA, loads the trace (`TraceAnalysis(trace_dir=...)`,
a folder holding only that trace) and runs HTA's four matching analyses with plots off:
get_idle_time_breakdown, get_gpu_kernel_breakdown, get_memory_bw_summary (every rank),
get_comm_comp_overlap. Wall time from fork to wait4, median of --runs. The target (>= 50x) applies
to traces of 10 MB or more of JSON (the size HTA parses: inflated); smaller ones are listed, marked.

Table 2, against the floor: the scaled traces of bench/replay_bench.cc (written by
`replay_bench --write`, the same generator) and the PyTorch 2.11 MLP trace inflated. For each:
`hookstream replay` whole-process wall (median of --runs fresh processes) over the two-core
reading floor that `replay_bench --floor` measures on the same file (nsys: libsqlite3 reading the
importer's columns on two connections; Kineto: max(read, (read + simdjson parse) / 2)). Target
<= 1.5x. The floor column is also given for table 1's traces.

--tiny: the smallest HTA trace and the smallest scaled trace, one run each (the ctest entry: it
checks that the benchmark runs end to end and writes a well-formed table, never a timing).
"""
import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED_TRACES = os.path.join(REPO, "..", "shared", "traces")

# The HTA side: one process, what a user of HTA runs for the analyses hookstream's replay gives.
# hta/trace_analysis.py (HTA 0.5.0): TraceAnalysis.__init__ loads every trace of trace_dir;
# get_idle_time_breakdown and get_memory_bw_summary default to rank 0, so every rank is passed.
HTA_PROGRAM = r"""
import json, sys, time
start = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
imported = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
loaded = time.perf_counter()
ranks = sorted(analyzer.t.traces.keys())
idle, _ = analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False)
kernels, _ = analyzer.get_gpu_kernel_breakdown(visualize=False)
bandwidth = analyzer.get_memory_bw_summary(ranks=ranks)
overlap = analyzer.get_comm_comp_overlap(visualize=False)
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "load_s": loaded - imported, "analyses_s": done - loaded,
                  "ranks": ranks, "idle_rows": len(idle), "kernel_types": len(kernels),
                  "bandwidth_rows": 0 if bandwidth is None else len(bandwidth), "overlap_rows": len(overlap)}))
"""


def timed(argv, env=None, stdout=subprocess.DEVNULL):
    """Runs argv as a fresh process: (wall s, CPU s of the process and its children, peak RSS MB, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read() if stdout == subprocess.PIPE else b""
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"replay_vs_hta: {' '.join(argv)} exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def json_bytes(path):
    """The bytes of JSON a Kineto trace holds (what HTA parses): inflated size of a .gz."""
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            size = 0
            while chunk := f.read(1 << 22):
                size += len(chunk)
            return size
    return os.path.getsize(path)


def floor_of(replay_bench, path):
    _, _, _, out = timed([replay_bench, "--floor", path], stdout=subprocess.PIPE)
    return json.loads(out)


def hookstream_runs(hookstream, path, runs):
    walls, cpus, rss = [], [], []
    for _ in range(runs):
        wall, cpu, peak, _ = timed([hookstream, "replay", path])
        walls.append(wall)
        cpus.append(cpu)
        rss.append(peak)
    return walls, cpus, rss


def hta_table(args, traces, rows_out):
    lines = ["| trace (HTA's tests/data) | file MB | JSON MB | in target (>= 10 MB JSON) | runs | hookstream s (CPU s) | HTA s (CPU s): import + load + analyses | HTA / hookstream, CPU | HTA / hookstream, wall (target >= 50x) | two-core floor s | hookstream wall / floor |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for path in traces:
        size_mb = os.path.getsize(path) / 1e6
        json_mb = json_bytes(path) / 1e6
        folder = tempfile.mkdtemp(prefix="hookstream-hta-")
        try:
            os.symlink(os.path.abspath(path), os.path.join(folder, os.path.basename(path)))
            hs_walls, hs_cpus, hta_walls, hta_cpus, phases = [], [], [], [], []
            for _ in range(args.hta_runs):
                # Alternating, so both see the same machine.
                wall, cpu, _, _ = timed([args.hookstream, "replay", path])
                hs_walls.append(wall)
                hs_cpus.append(cpu)
                wall, cpu, _, out = timed([sys.executable, "-c", HTA_PROGRAM, folder], stdout=subprocess.PIPE)
                hta_walls.append(wall)
                hta_cpus.append(cpu)
                phases.append(json.loads(out.decode().strip().splitlines()[-1]))
            extra_walls, extra_cpus, _ = hookstream_runs(args.hookstream, path, max(0, args.runs - args.hta_runs))
            hs_walls += extra_walls
            hs_cpus += extra_cpus
        finally:
            shutil.rmtree(folder)
        floor = floor_of(args.replay_bench, path)
        hs, hta = statistics.median(hs_walls), statistics.median(hta_walls)
        hs_cpu, hta_cpu = statistics.median(hs_cpus), statistics.median(hta_cpus)
        p = phases[len(phases) // 2]
        # An HTA that loaded nothing would be fast and wrong: each analysis must have produced rows.
        if min(p["idle_rows"], p["kernel_types"], p["bandwidth_rows"], p["overlap_rows"]) <= 0 or not p["ranks"]:
            sys.exit(f"replay_vs_hta: HTA produced an empty analysis on {path}: {p}")
        lines.append(f"| {os.path.basename(path)} | {size_mb:.2f} | {json_mb:.2f} | {'yes' if json_mb >= 10 else 'no'} | "
                     f"{len(hs_walls)} / {len(hta_walls)} | {hs:.3f} ({hs_cpu:.3f}) | "
                     f"{hta:.2f} ({hta_cpu:.2f}): {p['import_s']:.2f} + {p['load_s']:.2f} + {p['analyses_s']:.2f} | "
                     f"{hta_cpu / hs_cpu:.1f}x | {hta / hs:.1f}x | {floor['floor_s']:.4f} | {hs / floor['floor_s']:.1f}x |")
        rows_out.append({"trace": path, "hookstream_s": hs, "hta_s": hta, "ratio": hta / hs, "cpu_ratio": hta_cpu / hs_cpu, "json_mb": json_mb,
                         "floor_s": floor["floor_s"], "hta": p})
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


SCALED = [
    # label, source (relative to the shared traces, or @ and a path in this repository), copies, suffix
    ("nsys cloverleaf x64", "nsys/cloverleaf-nsys2024.5.sqlite", 64, ".sqlite"),
    ("Kineto alexnet x1024 (.json.gz)", "kineto/alexnet-a100-syncevents.json.gz", 1024, ".json.gz"),
    ("Kineto alexnet x1024 (.json)", "kineto/alexnet-a100-syncevents.json.gz", 1024, ".json"),
    ("Kineto PyTorch 2.11 MLP, x1 (.json, inflated)", "@bench/traces/torch2.11-mlp-train-300steps.json.gz", 1, ".json"),
]
TINY_SCALED = [("nsys cloverleaf x2", "nsys/cloverleaf-nsys2024.5.sqlite", 2, ".sqlite")]


def scaled_table(args, cases, rows_out):
    lines = ["| scaled trace | file MB | runs | hookstream replay wall s: median (min) | CPU s | peak RSS MB | two-core floor s | of which read on one core s | floor ratio: median (min) (target <= 1.5x) | floor CPU s | CPU over floor CPU: min (what two idle cores would give at best) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, source, copies, suffix in cases:
        source = os.path.join(REPO, source[1:]) if source.startswith("@") else os.path.join(args.traces, source)
        fd, path = tempfile.mkstemp(prefix="hookstream-scaled-", suffix=suffix)
        os.close(fd)
        try:
            if copies == 1:  # inflated byte for byte, as replay_bench's x1 row
                with gzip.open(source, "rb") as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
            else:
                timed([args.replay_bench, "--write", source, str(copies), path])
            walls, cpus, rss = hookstream_runs(args.hookstream, path, args.runs)
            floor = floor_of(args.replay_bench, path)
            size_mb = os.path.getsize(path) / 1e6
        finally:
            os.remove(path)
        wall, best = statistics.median(walls), min(walls)
        # The floor's own CPU (replay_bench --floor: floor_cpu_s) against hookstream's least CPU: a
        # loaded machine stretches both walls, the CPU times much less (bench/replay_ab.py).
        floor_cpu = floor.get("floor_cpu_s", -1)
        cpu_ratio = f"{min(cpus) / floor_cpu:.2f}x" if floor_cpu > 0 else "no floor x"
        lines.append(f"| {label} | {size_mb:.1f} | {len(walls)} | {wall:.3f} ({best:.3f}) | {statistics.median(cpus):.3f} | "
                     f"{statistics.median(rss):.0f} | {floor['floor_s']:.4f} | {floor['read_one_core_s']:.4f} | "
                     f"{wall / floor['floor_s']:.2f}x ({best / floor['floor_s']:.2f}x) | {floor_cpu:.4f} | {cpu_ratio} |")
        rows_out.append({"trace": label, "hookstream_s": wall, "floor_s": floor["floor_s"], "ratio": wall / floor["floor_s"],
                         "hookstream_cpu_s": min(cpus), "floor_cpu_s": floor_cpu})
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def check_table(lines):
    """Each row has as many cells as the header, and the ratio cells are numbers: the ctest's check."""
    header = lines[0].count("|")
    for line in lines[2:]:
        if line.count("|") != header:
            sys.exit(f"replay_vs_hta: malformed row: {line}")
        for cell in line.strip("|").split("|"):
            if not cell.strip():
                sys.exit(f"replay_vs_hta: empty cell in: {line}")
        if "x" not in line.split("|")[-2]:
            sys.exit(f"replay_vs_hta: no ratio in: {line}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hookstream", required=True)
    parser.add_argument("--replay-bench", required=True)
    parser.add_argument("--traces", default=SHARED_TRACES, help="the shared traces folder (its kineto/ and nsys/)")
    parser.add_argument("--hta-trace", action="append", help="an HTA test trace (default: every kineto/*.json.gz of --traces)")
    parser.add_argument("--runs", type=int, default=11, help="hookstream processes per trace")
    parser.add_argument("--hta-runs", type=int, default=3, help="HTA processes per trace")
    parser.add_argument("--tiny", action="store_true", help="one small trace of each table, one run: checks it runs")
    parser.add_argument("--out", help="write the Markdown here (default: stdout)")
    parser.add_argument("--json", help="also write the measured figures as JSON here")
    args = parser.parse_args()
    for tool in (args.hookstream, args.replay_bench):
        if not os.access(tool, os.X_OK):
            print(f"replay_vs_hta: {tool}: not an executable (build it: cmake --build build --target hookstream replay_bench)", file=sys.stderr)
            return 2
    kineto = os.path.join(args.traces, "kineto")
    traces = args.hta_trace or sorted(os.path.join(kineto, f) for f in os.listdir(kineto) if f.endswith(".json.gz"))
    cases = SCALED
    if args.tiny:
        traces = [min(traces, key=os.path.getsize)]
        cases = TINY_SCALED
        args.runs = args.hta_runs = 1
    rows = {"hta": [], "scaled": []}
    out = []
    machine = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in machine.splitlines() if l.startswith("Model name")), platform.processor())
    try:
        import hta  # noqa: F401  (checked before any timing)
    except ImportError:
        print(f"replay_vs_hta: {sys.executable} has no HolisticTraceAnalysis (pinned in oracles/requirements.txt): "
              "run tools/setup.sh --oracles", file=sys.stderr)
        return 1
    from importlib.metadata import version
    out.append(f"Machine: {model}, {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB. "
               f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. HTA {version('HolisticTraceAnalysis')}, pandas "
               f"{version('pandas')}, Python {platform.python_version()}. hookstream: {args.hookstream}.")
    out.append("")
    out.append("CPU: user + system time of the process and the children it waited for (wait4). Wall: fork to wait4. "
               "The HTA column splits HTA's own wall time: importing HTA (pandas, plotly), TraceAnalysis() loading the "
               "trace, the four analyses.")
    out.append("")
    table = hta_table(args, traces, rows["hta"])
    check_table(table)
    out += table
    out.append("")
    table = scaled_table(args, cases, rows["scaled"])
    check_table(table)
    out += table
    load = os.getloadavg()
    out.append("")
    out.append(f"Load average when the runs ended: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min).")
    text = "\n".join(out) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
