"""CPU per turn along one long thread: a turn at 2,000 must cost what a turn at 10 costs.

One thread, the embedded offline model (the shipped router), a SQLite checkpointer on disk and the business store,
driven through the compiled graph itself (``build_desk(...).graph.invoke`` with a customer's ``RunContext``, no
``Conversation`` around it) for ``--turns`` turns of realistic desk messages in a fixed rotation: greetings, the
balance, a card frozen and unfrozen, a transfer's status, a refund request (a duplicate coffee charge: paid the first
time, refused as already refunded afterwards), where that refund is, thanks. Prints, at turns 10, 100, 500 and 2,000
(those that are ``<= --turns``):

* CPU ms per turn (``time.process_time`` around one ``invoke``: this process's CPU clock, not wall time, since the
  machine is shared): the median of a window of ``--window`` turns around the mark, and its worst turn;
* the ratio of each mark's median to turn 10's (target <= 1.2 at 500 and 2,000), and to the median of the same
  messages sent, each right after its turn, to a new short thread (turns 1-21 of its own): the same ratio measured
  under the same machine load, which on a shared machine moves the CPU clock by a third between minutes;
* checkpoint bytes per turn (the thread's bytes in the saver's tables / turns; target <= 10 kB) and the bytes the
  turns of each window added;
* whether the full transcript is read back from the file (every customer message, in order).

``--profile`` runs cProfile (CPU clock) over ``--window`` more turns after the measured ones and prints the top
functions (cumulative and own time), the way the growth was found. The figures also give the CPU a new saver's first
read of the whole thread costs (a new process: the cache of ``checkpoints.sqlite_saver`` is empty). Exit 1 when the
transcript is not read back; the ratio targets are reported, not enforced (the machine is shared). A tiny run for
the tests: ``--turns 12 --window 4``.

Usage: ``python bench/long_thread.py [--turns 2000] [--window 21] [--profile] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, write_json

#: The turns at which CPU per turn is reported (those within ``--turns``).
MARKS = (10, 100, 500, 2000)
#: The desk messages of the thread, sent in this rotation (customer c_ada of the demo bank, ``checkpoints.business``).
MESSAGES = (
    "Hi there!",
    "What's my balance?",
    "Please freeze my card ending 4242, I can't find it",
    "What is the status of transfer tr_3002?",
    "Found it! Unfreeze my card ending 4242 please",
    "I'd like a refund for tx_1007, I was charged twice for that coffee",
    "Where is my refund?",
    "Good morning",
    "How much money is on my account?",
    "Did my transfer tr_3001 arrive?",
    "Thanks, that's all for now.",
)
#: The scoreboard's targets: a mark's median CPU per turn / turn 10's, and checkpoint bytes per turn.
RATIO_TARGET = 1.2
BYTES_PER_TURN_TARGET = 10_000


def message(turn: int) -> str:
    """The customer's message of ``turn`` (1-based): :data:`MESSAGES` in rotation, numbered so no two are equal."""
    return f"{MESSAGES[(turn - 1) % len(MESSAGES)]} (#{turn})"


def windows(turns: int, width: int) -> dict[int, range]:
    """Mark -> the turns of its window: ``width`` turns centred on the mark, shifted to fit in ``2..turns`` (turn 1
    loads the router and is never measured)."""
    out: dict[int, range] = {}
    for mark in [m for m in MARKS if m <= turns] or [turns]:
        start = max(2, min(mark - width // 2, turns - width + 1))
        out[mark] = range(start, min(turns, start + width - 1) + 1)
    return out


def thread_bytes(saver, thread_id: str) -> int:
    """Bytes a SQLite saver stores for one thread (checkpoint blobs + metadata + pending writes), as
    ``bench/storage.py`` measures them."""
    conn = saver.conn
    a = conn.execute("SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints "
                     "WHERE thread_id = ?", (thread_id,)).fetchone()[0]
    b = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?", (thread_id,)).fetchone()[0]
    return int(a) + int(b)


def run(turns: int, width: int, profile: bool = False, thread_id: str = "long") -> dict:
    """Drive one thread for ``turns`` turns; returns the figures (module doc)."""
    home = Path(tempfile.mkdtemp(prefix="switchboard-long-"))
    os.environ["SWITCHBOARD_HOME"] = str(home)
    from langchain_core.messages import HumanMessage

    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from checkpoints.threads import thread_values
    from graph.builder import build_desk
    from graph.contracts.context import RunContext
    from graph.contracts.settings import Settings

    settings = Settings.from_env(model="offline", db=home / "checkpoints.db", business_db=home / "business.db")
    saver = open_checkpointer(settings.db)
    desk = build_desk(checkpointer=saver, settings=settings, store=open_store(settings.business_db))
    config = {"configurable": {"thread_id": thread_id}}
    ctx = RunContext(user_id="c_ada", tenant_id="t_demo")
    wins = windows(turns, width)
    measured = {t for w in wins.values() for t in w}
    profiler = cProfile.Profile(time.process_time) if profile else None  # CPU, not wall
    cpu_ms: dict[int, float] = {}
    ref_ms: dict[int, list[float]] = {}
    size_at: dict[int, int] = {}
    statuses: dict[str, int] = {}
    t_wall = time.perf_counter()
    wall, total = 0.0, 0
    trace = bool(os.environ.get("LONG_THREAD_TRACE"))  # every turn's CPU ms on stderr
    # the profiled turns come after the measured ones (cProfile slows what it watches)
    for turn in range(1, turns + 1 + (width if profiler is not None else 0)):
        if profiler is not None and turn == turns + 1:
            profiler.enable()
        c0 = time.process_time()
        out = desk.graph.invoke({"messages": [HumanMessage(message(turn))]}, config, context=ctx)
        cpu = time.process_time() - c0
        status = str(out["outcome"].status if out.get("outcome") is not None else None)
        statuses[status] = statuses.get(status, 0) + 1
        if trace:
            print(f"turn {turn}: {cpu * 1e3:.1f} ms", file=sys.stderr)
        if turn in measured:
            cpu_ms[turn] = cpu * 1e3
            # the same message on a short thread right after, so both see the machine's load of the moment
            mark = next(m for m, w in wins.items() if turn in w)
            ref = {"configurable": {"thread_id": f"{thread_id}-reference-{mark}"}}
            c0 = time.process_time()
            desk.graph.invoke({"messages": [HumanMessage(message(turn))]}, ref, context=ctx)
            ref_ms.setdefault(mark, []).append((time.process_time() - c0) * 1e3)
        if turn in measured or turn + 1 in measured:
            size_at[turn] = thread_bytes(saver, thread_id)
        if turn == turns:
            wall = time.perf_counter() - t_wall
            total = thread_bytes(saver, thread_id)
    if profiler is not None:
        profiler.disable()
    ran = turns + (width if profiler is not None else 0)
    c0 = time.process_time()
    fresh = open_checkpointer(settings.db)  # a new saver: what a new process's first read of the thread costs
    humans = [m.content for m in thread_values(fresh, thread_id)["messages"] if m.type == "human"]
    cold_ms = (time.process_time() - c0) * 1e3
    marks: dict[int, dict] = {}
    for mark, w in wins.items():
        xs = [cpu_ms[t] for t in w]
        added = size_at[w.stop - 1] - size_at[w.start - 1] if w.start - 1 in size_at else None
        marks[mark] = {"turns": [w.start, w.stop - 1], "median_ms": round(statistics.median(xs), 2),
                       "max_ms": round(max(xs), 2), "reference_ms": round(statistics.median(ref_ms[mark]), 2),
                       "bytes_per_turn": round(added / len(w)) if added is not None else None}
    first = marks[min(marks)]["median_ms"]
    fig: dict = {"turns": turns, "window": width, "marks": marks,
                 "ratio_to_first": {m: round(v["median_ms"] / first, 2) for m, v in marks.items()},
                 "ratio_to_reference": {m: round(v["median_ms"] / v["reference_ms"], 2) for m, v in marks.items()},
                 "bytes_total": total, "bytes_per_turn": round(total / turns),
                 "transcript_recovered": humans == [message(t) for t in range(1, ran + 1)],
                 "cold_read_ms": round(cold_ms, 1), "statuses": statuses, "wall_s": round(wall, 1)}
    if profiler is not None:
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(25)
        fig["profile"] = buf.getvalue()
    return fig


def report(fig: dict) -> None:
    """Print the figures of :func:`run`."""
    print(f"one thread, offline model, SQLite on disk, {fig['turns']} turns via graph.invoke   "
          f"load average {load_average()}   wall {fig['wall_s']} s")
    print(f"  {'turn':>6} {'window':>11} {'CPU ms/turn (median)':>21} {'worst':>8} {'x turn ' + str(min(fig['marks'])):>10}"
          f" {'short thread':>13} {'x short':>8} {'bytes/turn':>11}")
    for mark, m in fig["marks"].items():
        bpt = f"{m['bytes_per_turn']:,}" if m["bytes_per_turn"] is not None else "-"
        print(f"  {mark:>6} {m['turns'][0]:>5}-{m['turns'][1]:<5} {m['median_ms']:>21.1f} {m['max_ms']:>8.1f}"
              f" {fig['ratio_to_first'][mark]:>9.2f}x {m['reference_ms']:>13.1f} {fig['ratio_to_reference'][mark]:>7.2f}x"
              f" {bpt:>11}")
    worst = max((r for m, r in fig["ratio_to_first"].items() if m >= 500), default=None)
    print(f"  ratio at 500+ turns: {worst if worst is not None else 'n/a'} x turn 10, "
          f"{max((r for m, r in fig['ratio_to_reference'].items() if m >= 500), default='n/a')} x a short thread "
          f"at the same moment (target <= {RATIO_TARGET}); "
          f"bytes per turn {fig['bytes_per_turn']:,} (target <= {BYTES_PER_TURN_TARGET:,}); "
          f"{fig['bytes_total'] / 1e6:.2f} MB in all; transcript read back: "
          f"{'yes' if fig['transcript_recovered'] else 'NO'} (a new saver's first read: {fig['cold_read_ms']:.0f} ms CPU); "
          f"outcomes {fig['statuses']}")
    if "profile" in fig:
        print(fig["profile"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--window", type=int, default=21, help="turns per measured window (median)")
    ap.add_argument("--profile", action="store_true", help="cProfile the last window and print the top functions")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.turns < 3 or args.window < 1:
        ap.error("--turns must be >= 3 and --window >= 1")
    fig = run(args.turns, min(args.window, args.turns - 1), profile=args.profile)
    report(fig)
    write_json(args.json, {k: v for k, v in fig.items() if k != "profile"})
    return 0 if fig["transcript_recovered"] else 1


if __name__ == "__main__":
    sys.exit(main())
