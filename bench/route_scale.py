"""The scoreboard's own cost: ``switchboard route`` over BANKING77's test queries, the path it replaced against
today's, each a new process measured from outside (``os.wait4``: wall seconds, CPU seconds of the process and the
workers it waited for, peak RSS of the largest of them).

- old path: what ``route`` ran before (one process; the full desk with its in-memory event log; an in-memory saver
  that keeps every thread; the seeded records restored before every query, on disk), on the first ``--limit`` rows;
- new path: ``switchboard route`` (forked workers, one per CPU; a checkpointer that forgets each finished thread;
  no event log; scratch records in memory, restored only after a query changed them) on the same rows, then on the
  whole file (RSS against the number of queries);
- the figures of both on the same rows must be equal (except the seconds): ``same_figures``.

Target (the scoreboard's): >= 10x faster end to end, RSS flat in the number of queries. On a shared 2-core machine the
wall ratio depends on the load (the workers get more of a loaded machine than one process does), the CPU ratio
does not: both are printed.

Usage: ``python bench/route_scale.py [--limit 300] [--csv ../shared/data/banking77/test.csv] [--json FILE]``;
``SWITCHBOARD_BENCH_SMOKE=1``: 24 and 48 rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, SMOKE, load_average, write_json

DATA = REPO.parent / "shared" / "data" / "banking77"


def old_path(csv: Path, labels: Path, limit: int, out: Path) -> None:
    """The ``route`` of before, in this process: writes its figures to ``out``."""
    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoints.business import open_store
    from graph.app.evaluation import BusinessSnapshot, evaluate, read_evaluation_set
    from graph.builder import build_desk, make_deps
    from graph.contracts.settings import Settings

    texts, expected = read_evaluation_set(csv, labels, limit)
    scratch = Path(tempfile.mkdtemp(prefix="switchboard-route-old-"))  # on disk, as before
    settings = Settings.from_env(db=str(scratch / "unused.db"), business_db=scratch / "business.db")
    deps = make_deps(settings=settings, store=open_store(scratch / "business.db"))
    desk = build_desk(checkpointer=InMemorySaver(), deps=deps)
    deps.router.route("warm-up")
    snapshot = BusinessSnapshot(scratch / "business.db")
    report = evaluate(desk.graph, texts, expected, router=str(deps.router.source), model=settings.model,
                      before_each=snapshot.restore)
    out.write_text(json.dumps(report.figures(), indent=2) + "\n")


def _child(cmd: list[str], env: dict) -> dict:
    """Wall s, CPU s (with the children it waited for) and peak RSS MB of one process; exits on a failure."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"error: {' '.join(cmd[:5])}…: {err.read().decode()[-600:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
            "peak_rss_mb": round(ru.ru_maxrss / 1024, 1)}


def _figures(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in ("p50_s", "p95_s")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=24 if SMOKE else 300, help="rows of the old-vs-new comparison")
    ap.add_argument("--all", type=int, default=48 if SMOKE else None, help="rows of the whole-file run (default: all)")
    ap.add_argument("--csv", type=Path, default=DATA / "test.csv")
    ap.add_argument("--labels", type=Path, default=DATA / "agent_map.json")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--old-path", nargs=2, metavar=("LIMIT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.old_path:
        old_path(args.csv, args.labels, int(args.old_path[0]), Path(args.old_path[1]))
        return 0
    if not args.csv.exists():
        raise SystemExit(f"error: {args.csv} is missing (BANKING77, ../shared/data)")
    tmp = Path(tempfile.mkdtemp(prefix="switchboard-route-bench-"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")},
           "SWITCHBOARD_HOME": str(tmp / "home"), "PYTHONPATH": str(REPO)}
    route = [sys.executable, "-m", "graph.app.cli", "route", str(args.csv), "--labels", str(args.labels)]
    figures: dict = {"load_before": load_average(), "cpus": len(os.sched_getaffinity(0)), "limit": args.limit}
    figures["old"] = _child([sys.executable, __file__, "--csv", str(args.csv), "--labels", str(args.labels),
                             "--old-path", str(args.limit), str(tmp / "old.json")], env)
    figures["new"] = _child([*route, "--limit", str(args.limit), "--json", str(tmp / "new.json")], env)
    figures["same_figures"] = _figures(tmp / "old.json") == _figures(tmp / "new.json")
    whole = [*route, "--json", str(tmp / "all.json")] + (["--limit", str(args.all)] if args.all else [])
    figures["new_all"] = _child(whole, env)
    figures["new_all"]["queries"] = json.loads((tmp / "all.json").read_text())["queries"]
    for key, n in (("old", args.limit), ("new", args.limit), ("new_all", figures["new_all"]["queries"])):
        f = figures[key]
        f["queries_per_s"] = round(n / f["wall_s"], 1)
        f["cpu_ms_per_query"] = round(1000 * f["cpu_s"] / n, 1)
    figures["speedup_wall"] = round(figures["old"]["wall_s"] / figures["new"]["wall_s"], 2)
    figures["speedup_cpu"] = round(figures["old"]["cpu_s"] / figures["new"]["cpu_s"], 2)
    figures["load_after"] = load_average()
    for key in ("old", "new", "new_all"):
        f = figures[key]
        n = f.get("queries", args.limit)
        print(f"{key:8} {n:5} queries: {f['wall_s']:7.1f} s wall, {f['cpu_s']:7.1f} s CPU, {f['queries_per_s']:6.1f} "
              f"queries/s, {f['cpu_ms_per_query']:5.1f} ms CPU/query, peak RSS {f['peak_rss_mb']:.0f} MB")
    print(f"speed-up on {args.limit} queries: {figures['speedup_wall']}x wall, {figures['speedup_cpu']}x CPU; "
          f"same figures: {figures['same_figures']}; load {figures['load_before']} -> {figures['load_after']}")
    write_json(args.json, figures)
    return 0 if figures["same_figures"] else 1


if __name__ == "__main__":
    sys.exit(main())
