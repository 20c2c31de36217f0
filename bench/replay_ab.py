"""Two `hookstream replay` binaries on the same traces, against the two-core reading floor.

    python3 bench/replay_ab.py --before OLD/hookstream --after build/tools/hookstream \
        --replay-bench build/bench/replay_bench TRACE...

For a speed change of the replay: fresh processes of the two binaries alternate on each trace (so
both meet the same load on a shared machine), each timed fork to wait4 as bench/replay_vs_hta.py
times them (CPU = user + system). The floor is `replay_bench --floor TRACE` (the "Two-core floors"
of bench/RESULTS.md), measured once per trace after the runs. Prints a Markdown table: CPU and wall
min / median per binary and the floor ratio (wall / floor) of each, min and median; and the load
average before and after, since on a loaded machine the wall times say more about the load than
about the code (read the CPU columns and the minima). The last two columns are load-robust: the
floor's own CPU time (`floor_cpu_s`: both connections' CPU for nsys; reading plus simdjson's parse,
each on one core, for Kineto) and each binary's least CPU over it, which is the floor ratio two
perfectly shared idle cores would give at best (a wall ratio can be no lower when the floor itself
spreads perfectly over the two cores).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_vs_hta import check_table, floor_of, timed  # noqa: E402  (the same timing, floor and table check)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the hookstream binary to compare against")
    parser.add_argument("--after", required=True, help="the hookstream binary measured")
    parser.add_argument("--replay-bench", required=True)
    parser.add_argument("--runs", type=int, default=7, help="processes of each binary per trace")
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args()
    load_before = os.getloadavg()
    lines = ["| trace | runs each | before CPU ms: min / median | after CPU ms: min / median | before wall ms: min / median "
             "| after wall ms: min / median | peak RSS MB: before / after | two-core floor ms | floor ratio before: min (median) "
             "| floor ratio after: min (median) | floor CPU ms | CPU over floor CPU: before / after (min) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for path in args.traces:
        runs = {"before": [], "after": []}
        for _ in range(args.runs):
            for which in ("before", "after"):
                wall, cpu, rss, _ = timed([getattr(args, which), "replay", path])
                runs[which].append((wall, cpu, rss))
        floor = floor_of(args.replay_bench, path)
        floor_ms = floor["floor_s"] * 1e3
        floor_cpu_ms = floor.get("floor_cpu_s", -1) * 1e3
        if floor_ms <= 0:  # replay_bench claims none for a file not in the importers' layouts
            sys.exit(f"replay_ab: {path}: replay_bench --floor gives no floor for it")
        cells = {}
        for which, figures in runs.items():
            walls = [w * 1e3 for w, _, _ in figures]
            cpus = [c * 1e3 for _, c, _ in figures]
            cells[which] = {
                "cpu": f"{min(cpus):.0f} / {statistics.median(cpus):.0f}",
                "wall": f"{min(walls):.0f} / {statistics.median(walls):.0f}",
                "rss": f"{max(r for _, _, r in figures):.0f}",
                "ratio": f"{min(walls) / floor_ms:.2f}x ({statistics.median(walls) / floor_ms:.2f}x)",
                "cpu_ratio": f"{min(cpus) / floor_cpu_ms:.2f}x" if floor_cpu_ms > 0 else "-",
            }
        b, a = cells["before"], cells["after"]
        lines.append(f"| {os.path.basename(path)} | {args.runs} | {b['cpu']} | {a['cpu']} | {b['wall']} | {a['wall']} | "
                     f"{b['rss']} / {a['rss']} | {floor_ms:.1f} | {b['ratio']} | {a['ratio']} | {floor_cpu_ms:.1f} | "
                     f"{b['cpu_ratio']} / {a['cpu_ratio']} |")
        print(lines[-1], file=sys.stderr, flush=True)
    check_table(lines)
    load_after = os.getloadavg()
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Load average (1 / 5 / 15 min): "
          f"{load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} before, "
          f"{load_after[0]:.1f} / {load_after[1]:.1f} / {load_after[2]:.1f} after.\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
