"""Throughput and memory: one-shot turns per second against langgraph-swarm, and the peak RSS of a long conversation.

* turns/s: 200 distinct threads, one turn each (triage -> billing -> refunds, the same scripted model for both, which
  answers at once), SQLite checkpointer on disk, in this one process, with 1, 2 and 4 conversations at a time
  (threads of this process); switchboard through ``Conversation.send``, swarm through ``invoke``, and a
  langgraph-supervisor graph (supervisor -> refunds -> back: also 2 handoffs and 3 model calls) through ``invoke``;
* peak RSS: a new process per framework runs a 100-turn conversation (switchboard: the offline model, with its
  router; swarm: a scripted model, 4 messages per turn, built from ``bench/anchors.py`` alone: that process imports
  no switchboard module) and reports its own peak resident memory; both children start from this process while it
  is still small (a child's ``ru_maxrss`` counts the parent's pages it was forked with).
* the anchors use LangGraph's own ``SqliteSaver`` on our SQLite settings (WAL, ``synchronous=NORMAL``).

Targets (the scoreboard's): turns/s >= swarm's; peak RSS <= 1.5x swarm's.
Usage: ``python bench/throughput.py [--threads 200] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    SMOKE,
    answer_at_once,
    chain_policy,
    load_average,
    supervisor_app,
    supervisor_available,
    swarm_app,
    swarm_available,
    write_json,
)

CONCURRENCY = (1, 2, 4)


def _switchboard_send(home: Path):
    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph.builder import build_desk
    from graph.contracts.settings import Settings
    from graph.conversation import Conversation
    from nodes.testing.scripted import KeywordRouter, ScriptedChatModel

    desk = build_desk(model=ScriptedChatModel(policy=chain_policy), checkpointer=open_checkpointer(home / "c.db"),
                      router=KeywordRouter(), store=open_store(home / "b.db"), settings=Settings.from_env(db=home / "c.db"))
    return lambda tid, text: Conversation(tid, desk=desk).send(text)


def _swarm_send(home: Path):
    from anchors import sqlite_saver
    from langchain_core.messages import HumanMessage

    app, _ = swarm_app(chain_policy, sqlite_saver(home / "swarm.db"))
    return lambda tid, text: app.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": tid}})


def _supervisor_send(home: Path):
    from anchors import sqlite_saver
    from langchain_core.messages import HumanMessage

    app, _ = supervisor_app(answer_at_once, sqlite_saver(home / "supervisor.db"))
    return lambda tid, text: app.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": tid}})


def turns_per_s(senders: dict, n: int, workers: int, batches: int = 10) -> tuple[dict[str, float], dict[str, float]]:
    """Turns per second of each sender over ``n`` new threads, ``workers`` at a time, and the process CPU
    milliseconds per turn (all threads; steadier than wall time on a loaded machine); the threads are run in
    ``batches`` slices, the senders taking turns slice by slice (order rotated) so that machine noise hits all alike."""
    spent = dict.fromkeys(senders, 0.0)
    cpu = dict.fromkeys(senders, 0.0)
    names = list(senders)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for name, send in senders.items():
            send(f"{name}-{workers}-warm", "I was charged twice, please refund it")
        for b in range(batches):
            ids = range(b * n // batches, (b + 1) * n // batches)
            for name in names[b % len(names):] + names[:b % len(names)]:
                send = senders[name]
                t0, c0 = time.perf_counter(), time.process_time()
                list(pool.map(lambda i, send=send, name=name: send(f"{name}-{workers}-{i}",
                                                                   f"I was charged twice, please refund it (#{i})"), ids))
                spent[name] += time.perf_counter() - t0
                cpu[name] += time.process_time() - c0
    return {name: n / secs for name, secs in spent.items()}, {name: c / n * 1e3 for name, c in cpu.items()}


def long_conversation(kind: str, turns: int = 10 if SMOKE else 100) -> None:
    """Run in a child process: a ``turns``-turn conversation of ``kind`` (switchboard | swarm)."""
    home = Path(tempfile.mkdtemp())
    if kind == "switchboard":
        from checkpoints import open_checkpointer
        from graph.builder import build_desk
        from graph.contracts.settings import Settings
        from graph.conversation import Conversation

        s = Settings.from_env(db=home / "c.db", business_db=home / "b.db")
        conv = Conversation("long", desk=build_desk(checkpointer=open_checkpointer(s.db), settings=s))
        for t in range(turns):
            conv.send(f"Where is my refund? (asking again, #{t})")
        return
    # the same 4-messages-per-turn swarm thread as the storage benchmark, built from bench/anchors.py alone (this
    # process imports no switchboard module: its memory is the anchor's own)
    from anchors import sqlite_saver
    from common import refund_status_swarm
    from langchain_core.messages import HumanMessage

    app, _ = refund_status_swarm(sqlite_saver(home / "swarm.db"))
    cfg = {"configurable": {"thread_id": "long"}}
    for t in range(turns):
        app.invoke({"messages": [HumanMessage(f"Where is my refund? (asking again, #{t})")]}, cfg)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("graph", "nodes", "policies", "checkpoints"))
    if leaked:
        raise SystemExit(f"error: the swarm anchor imported switchboard modules: {leaked[:5]}")


def peak_rss_mb(kind: str) -> float:
    """Peak RSS (MB) of a child process running :func:`long_conversation` (``os.wait4``: that child's own usage)."""
    env = {**os.environ, "SWITCHBOARD_HOME": tempfile.mkdtemp(), "SWITCHBOARD_MODEL": "offline"}
    p = subprocess.Popen([sys.executable, __file__, "--child", kind], env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"error: the {kind} child process failed")
    return ru.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        long_conversation(args.child)
        return 0
    # peak RSS first, while this process is small: a child's ru_maxrss counts the pages it was forked with
    rss_first = {name: round(peak_rss_mb(name), 1) for name in ("switchboard", *(["swarm"] if swarm_available() else []))}
    home = Path(tempfile.mkdtemp(prefix="switchboard-throughput-"))
    os.environ.setdefault("SWITCHBOARD_HOME", str(home))  # the per-thread turn locks
    senders = {"switchboard": _switchboard_send(home)}
    if swarm_available():
        senders["swarm"] = _swarm_send(home)
    if supervisor_available():  # supervisor -> refunds -> back: 2 handoffs, 3 model calls, as the chain
        senders["supervisor"] = _supervisor_send(home)
    fig: dict = {"threads": args.threads, "turns_per_s": {}, "cpu_ms_per_turn": {}, "peak_rss_mb": {}}
    for workers in CONCURRENCY:
        rates, cpu = turns_per_s(senders, args.threads, workers)
        for name, rate in rates.items():
            fig["turns_per_s"].setdefault(name, {})[workers] = round(rate, 1)
            fig["cpu_ms_per_turn"].setdefault(name, {})[workers] = round(cpu[name], 2)
    fig["peak_rss_mb"] = rss_first  # the 100-turn conversation, each in its own process, against swarm only
    print(f"one-shot turns/s, {args.threads} new threads, SQLite on disk   load average {load_average()}")
    for workers in CONCURRENCY:
        row = fig["turns_per_s"]
        line = "   ".join(f"{name} {row[name][workers]:6.1f}" for name in senders)
        ratio = f"   ratio {row['switchboard'][workers] / row['swarm'][workers]:.2f}x (target >= 1)" if "swarm" in row else ""
        print(f"  {workers} at a time: {line}{ratio}   CPU ms per turn: "
              + ", ".join(f"{name} {fig['cpu_ms_per_turn'][name][workers]:.1f}" for name in senders))
    rss = fig["peak_rss_mb"]
    print("peak RSS of a 100-turn conversation: " + ", ".join(f"{k} {v:.0f} MB" for k, v in rss.items())
          + (f"   ratio {rss['switchboard'] / rss['swarm']:.2f}x (target <= 1.5)" if "swarm" in rss else ""))
    fig["own_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    write_json(args.json, fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
