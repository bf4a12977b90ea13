"""Per-handoff overhead: switchboard with the event log on and off against langgraph-swarm, in one process.

Every query is one turn on a new thread of a SQLite checkpointer on disk: triage -> billing -> refunds, refunds
answers (2 handoffs, 3 calls of the same scripted model, which answers at once, so the time is the framework's).
The anchors (``bench/anchors.py``: no switchboard code) use LangGraph's own ``SqliteSaver`` on our SQLite settings
(WAL, ``synchronous=NORMAL``), so both sides write to disk alike.
A langgraph-supervisor graph (the supervisor
delegates to refunds, which answers and hands back: also 2 handoffs and 3 model calls) is the second anchor.
The graphs take turns query by query (order rotated) so that machine noise hits them alike. Figures: seconds
per handoff (turn time / 2), median and p95; the ratios on/swarm, off/swarm and on/off; events stored per turn.

Targets (the scoreboard's): events on <= 0.45x swarm and <= 1.10x events off.

Usage: ``python bench/handoff_overhead.py [--turns 200] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CHAIN,
    answer_at_once,
    chain_policy,
    load_average,
    pct,
    supervisor_app,
    supervisor_available,
    swarm_app,
    swarm_available,
    write_json,
)


def _switchboard(home: Path, events: bool):
    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph.builder import build_graph
    from graph.contracts.settings import Settings
    from nodes.testing.scripted import KeywordRouter, ScriptedChatModel

    home.mkdir()
    return build_graph(model=ScriptedChatModel(policy=chain_policy), checkpointer=open_checkpointer(home / "c.db"),
                       router=KeywordRouter(), store=open_store(home / "b.db"), settings=Settings.from_env(db=home / "c.db"),
                       events=None if events else False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from langchain_core.messages import HumanMessage

    from graph.contracts.state import ensure_ids

    tmp = Path(tempfile.mkdtemp(prefix="switchboard-handoff-bench-"))
    runners = {"on": _switchboard(tmp / "on", True), "off": _switchboard(tmp / "off", False)}
    from anchors import sqlite_saver  # the anchors: LangGraph's own SqliteSaver, on our SQLite settings (WAL)

    if swarm_available():
        runners["swarm"] = swarm_app(chain_policy, sqlite_saver(tmp / "swarm.db"))[0]
    if supervisor_available():  # supervisor -> refunds -> back to the supervisor: 2 handoffs, 3 model calls too
        runners["supervisor"] = supervisor_app(answer_at_once, sqlite_saver(tmp / "supervisor.db"))[0]
    hops = len(CHAIN) - 1
    secs: dict[str, list[float]] = {k: [] for k in runners}
    cpus: dict[str, list[float]] = {k: [] for k in runners}
    names = list(runners)
    for i in range(args.turns + 3):
        for name in names[i % len(names):] + names[:i % len(names)]:
            msg = ensure_ids([HumanMessage(f"I was charged twice, please refund it (#{i})")])
            t0, c0 = time.perf_counter(), time.process_time()
            runners[name].invoke({"messages": msg}, {"configurable": {"thread_id": f"h{i}"}})
            if i >= 3:  # 3 warm-up turns
                secs[name].append((time.perf_counter() - t0) / hops)
                cpus[name].append((time.process_time() - c0) / hops)
    from checkpoints.event_log import open_event_log

    n_events = len(open_event_log(tmp / "on" / "c.db").events())
    fig = _figures(secs, cpus, {"turns": args.turns, "handoffs_per_turn": hops,
                                "anchor_sqlite": "SqliteSaver, WAL, synchronous=NORMAL",
                                "events_per_turn": round(n_events / (args.turns + 3), 1)})
    _print(fig, list(secs), hops, args.turns)
    write_json(args.json, fig)
    return 0


def _figures(secs: dict[str, list[float]], cpus: dict[str, list[float]], fig: dict) -> dict:
    """Medians, p95 and the ratios (wall and CPU clock) of the per-handoff times ``secs``/``cpus`` (seconds)."""
    for name, xs in secs.items():
        fig[name] = {"median_ms": round(statistics.median(xs) * 1e3, 3), "p95_ms": round(pct(xs, 95) * 1e3, 3),
                     "cpu_median_ms": round(statistics.median(cpus[name]) * 1e3, 3)}
    med = {k: fig[k]["median_ms"] for k in secs}
    # the same ratios on the process CPU clock (steadier than wall time on a shared machine)
    cpu = {k: fig[k]["cpu_median_ms"] for k in secs}
    fig["cpu_on_vs_off"] = round(cpu["on"] / cpu["off"], 3)
    if "swarm" in cpu:
        fig["cpu_on_vs_swarm"] = round(cpu["on"] / cpu["swarm"], 3)
    fig["on_vs_off"] = round(med["on"] / med["off"], 3)
    if "swarm" in med:
        fig["on_vs_swarm"] = round(med["on"] / med["swarm"], 3)
        fig["off_vs_swarm"] = round(med["off"] / med["swarm"], 3)
    if "supervisor" in med:
        fig["on_vs_supervisor"] = round(med["on"] / med["supervisor"], 3)
    return fig


def _print(fig: dict, names: list[str], hops: int, turns: int) -> None:
    print(f"per-handoff overhead, {turns} one-turn threads x {hops} handoffs, SQLite on disk (WAL on both sides)   "
          f"load average {load_average()}")
    for name in names:
        print(f"  {name:>6}: median {fig[name]['median_ms']:7.2f} ms   p95 {fig[name]['p95_ms']:7.2f} ms   "
              f"CPU median {fig[name]['cpu_median_ms']:7.2f} ms")
    print(f"  events on / off = {fig['on_vs_off']:.2f}x (target <= 1.10)   events per turn {fig['events_per_turn']}")
    if "on_vs_swarm" in fig:
        print(f"  on / swarm = {fig['on_vs_swarm']:.2f}x (target <= 0.45)   off / swarm = {fig['off_vs_swarm']:.2f}x")
    print(f"  CPU: on / off = {fig['cpu_on_vs_off']:.2f}x"
          + (f"   on / swarm = {fig['cpu_on_vs_swarm']:.2f}x" if "cpu_on_vs_swarm" in fig else ""))
    if "on_vs_supervisor" in fig:
        print(f"  on / langgraph-supervisor = {fig['on_vs_supervisor']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
