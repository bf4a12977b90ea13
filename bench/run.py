"""``make bench``: the scoreboard — one table, switchboard | langgraph-swarm | ratio |
langgraph-supervisor | ratio (where it applies).

Runs the scoreboard benchmarks one after another, each a new process writing its figures as JSON (their own
printouts go to ``bench/results/<time>.log``), then prints one table and writes every figure, with the machine's
load average before and after each benchmark, to ``bench/results/<time>.json``. About 6 minutes on a loaded
2-core machine. Ratios are measured in the same script (the machine is shared: compare ratios, not absolute times).

Pass names to run a subset, or other benchmarks of the project (not on the scoreboard)::

    python bench/run.py                       # the scoreboard
    python bench/run.py storage throughput    # a subset of it
    python bench/run.py crash supervisor      # the other benchmarks, printing their own output
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scoreboard import COLUMNS, rows

REPO = Path(__file__).resolve().parent.parent
#: Where the figures go (``SWITCHBOARD_BENCH_RESULTS``: elsewhere, e.g. the smoke test's folder).
RESULTS = Path(os.environ.get("SWITCHBOARD_BENCH_RESULTS") or REPO / "bench" / "results")

#: The scoreboard: name -> script and arguments (each also gets ``--json FILE``).
SCOREBOARD = {
    "handoff": ["bench/handoff_overhead.py", "--turns", "200"],  # per-handoff overhead, events on/off, vs swarm
    "pingpong": ["bench/pingpong.py"],                           # model calls until a ping-pong stops
    "storage": ["bench/storage.py"],                             # checkpoint bytes at 10/50/100 turns
    "model_input": ["bench/model_input.py"],                     # messages per model call per history mode
    "router": ["bench/router_speed.py"],                         # route() plain arrays vs scikit-learn
    "startup": ["bench/startup.py"],                             # CLI start-up, one-shot chat vs bare LangGraph
    "throughput": ["bench/throughput.py"],                       # turns/s at 1/2/4, peak RSS of 100 turns
    "operators": ["bench/operator_scale.py"],                    # threads/pending/stats at 1k/10k threads vs a bare read
    "route": ["bench/route_scale.py"],                           # switchboard route: old path vs workers, all queries
    "long_thread": ["bench/long_thread.py", "--turns", "2000"],  # CPU per turn at 10/100/500/2000 of one thread
}
#: Other benchmarks of the project: run by name, they print their own figures.
OTHERS = {
    "supervisor": ["bench/supervisor_parallel.py"],         # 3 experts x 100 ms, parallel vs sequential
    "compound": ["bench/compound_detection.py"],            # compound detection on BANKING77 pairs
    "events": ["bench/events_overhead.py"],                 # event-log overhead per BANKING77 query
    "crash": ["bench/crash_approval.py", "--runs", "50"],   # SIGKILL at random points, then recover
    "store": ["bench/store_calls.py"],                      # business store per-call cost (SQLite)
    "serve": ["bench/serve_load.py"],                       # served desk, 1 vs 2 instances, SIGKILL
    "edges": ["bench/edge_health.py"],                      # a seeded home's stats --edges and draw --health
}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_scoreboard(names: list[str], stamp: str) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / f"{stamp}.log"
    tmp = Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
    figures: dict = {"started": stamp, "cpus": os.cpu_count(), "benchmarks": {}}
    failed = []
    console = Console(width=None if sys.stdout.isatty() else 150)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console) as progress, log.open("w") as out:
        task = progress.add_task("benchmarks", total=len(names))
        for name in names:
            progress.update(task, description=f"{name} (load {_load()[0]})")
            target = tmp / f"{name}.json"
            entry: dict = {"command": " ".join(["python", *SCOREBOARD[name]]), "load_before": _load()}
            out.write(f"\n=== {name}: {entry['command']}\n")
            out.flush()
            t0 = time.perf_counter()
            rc = subprocess.call([sys.executable, *SCOREBOARD[name], "--json", str(target)], cwd=REPO,
                                 stdout=out, stderr=subprocess.STDOUT)
            entry |= {"exit": rc, "seconds": round(time.perf_counter() - t0, 1), "load_after": _load()}
            if target.exists():
                entry["figures"] = json.loads(target.read_text())
            if rc != 0 or "figures" not in entry:
                failed.append(name)
            figures["benchmarks"][name] = entry
            progress.advance(task)
    (RESULTS / f"{stamp}.json").write_text(json.dumps(figures, indent=2) + "\n")
    table = Table(*COLUMNS, title=f"make bench  {stamp}")
    for row in rows(figures["benchmarks"]):
        table.add_row(*row)
    console.print(table)
    total = sum(e["seconds"] for e in figures["benchmarks"].values())
    console.print(f"{total:.0f} s; figures in {_shown(RESULTS / f'{stamp}.json')}, output in {_shown(log)}")
    if failed:
        console.print(f"failed: {', '.join(failed)} (see the log)", style="red")
    return 1 if failed else 0


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in SCOREBOARD and n not in OTHERS]
    if unknown:
        print(f"error: unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join([*SCOREBOARD, *OTHERS])}",
              file=sys.stderr)
        return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    board = [n for n in (names or list(SCOREBOARD)) if n in SCOREBOARD]
    rc = run_scoreboard(board, stamp) if board else 0
    for name in [n for n in names if n in OTHERS]:
        print(f"\n=== {name}: {' '.join(OTHERS[name])}", flush=True)
        rc = max(rc, 1 if subprocess.call([sys.executable, *OTHERS[name]], cwd=REPO) != 0 else 0)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
