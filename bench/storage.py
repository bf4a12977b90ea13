"""Checkpoint storage per thread as turns grow (DESIGN.md, "Storage growth"), against langgraph-swarm.

One thread of 100 turns on a SQLite checkpointer, in one process: switchboard with the offline model (a
refund-status question per turn: 4 messages, one business tool call; transcript in LangGraph's ``DeltaChannel``),
and a langgraph-swarm graph whose scripted model makes the same 4 messages per turn (a tool call, then an answer;
``add_messages``: every checkpoint stores the whole list). Prints bytes per thread after 10, 50 and 100 turns, the
bytes the 10th and the 100th turn added, the wall time, and checks that the whole transcript is read back. The second
anchor, a langgraph-supervisor graph, answers the same question through a refunds worker (delegate, tool call,
answer, hand back, the supervisor's answer).
``--baseline`` adds switchboard with ``Annotated[list, add_messages]`` instead of DeltaChannel (slow: ~3 minutes).

Targets (the scoreboard's): <= 1 MB for 100 turns; linear: the 100th turn adds <= 1.1x the 10th.
Usage: ``python bench/storage.py [--turns 100] [--baseline] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, refund_status_supervisor, refund_status_swarm, supervisor_available, swarm_available, write_json

MARKS = (10, 50, 100)

from langchain_core.messages import AnyMessage  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from graph.contracts.state import SupportState  # noqa: E402


class BaselineState(SupportState, total=False):
    """switchboard's state with the usual transcript channel instead of DeltaChannel."""

    messages: Annotated[list[AnyMessage], add_messages]


def thread_bytes(saver, thread_id: str) -> int:
    """Bytes a SQLite saver stores for one thread (checkpoint blobs + metadata + pending writes): a measurement of the
    saver's own tables, so it lives here in the benchmark and not in the product."""
    conn = saver.conn
    a = conn.execute("SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?",
                     (thread_id,)).fetchone()[0]
    b = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?", (thread_id,)).fetchone()[0]
    return int(a) + int(b)


def _question(turn: int) -> str:
    return f"Where is my refund? (asking again, #{turn})"


def _grow(send, saver, thread_id: str, turns: int) -> dict:
    sizes: list[int] = []
    t0 = time.perf_counter()
    for turn in range(1, turns + 1):
        send(_question(turn))
        sizes.append(thread_bytes(saver, thread_id))
    added = [b - a for a, b in zip([0, *sizes], sizes)]
    return {"bytes": {n: sizes[n - 1] for n in MARKS if n <= turns}, "turn_10_added": added[min(10, turns) - 1],
            "last_turn_added": added[-1], "seconds": round(time.perf_counter() - t0, 2)}


def switchboard(turns: int, kind: str = "delta") -> dict:
    import graph.builder as builder
    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph.contracts.settings import Settings
    from graph.conversation import Conversation
    from nodes.embedded.offline_model import OfflineChatModel
    from nodes.testing.scripted import KeywordRouter

    home = Path(tempfile.mkdtemp())
    original = builder.SupportState
    builder.SupportState = BaselineState if kind == "add_messages" else SupportState
    try:
        r = KeywordRouter()
        saver = open_checkpointer(home / "cp.db")
        g = builder.build_graph(model=OfflineChatModel(router=r), checkpointer=saver, router=r,
                                store=open_store(home / "b.db"), settings=Settings.from_env(db=home / "cp.db"))
    finally:
        builder.SupportState = original
    conv = Conversation("grow", graph=g)
    out = _grow(conv.send, saver, "grow", turns)
    from checkpoints.threads import thread_values  # read back from the file, as `switchboard history` does

    humans = [m.content for m in thread_values(open_checkpointer(home / "cp.db"), "grow")["messages"] if m.type == "human"]
    out["transcript_recovered"] = humans == [_question(t) for t in range(1, turns + 1)]
    return out


def swarm(turns: int) -> dict:
    from anchors import sqlite_saver  # LangGraph's own SqliteSaver, WAL as ours
    from langchain_core.messages import HumanMessage

    saver = sqlite_saver(Path(tempfile.mkdtemp()) / "swarm.db")
    app, _ = refund_status_swarm(saver)
    cfg = {"configurable": {"thread_id": "grow"}}
    return _grow(lambda text: app.invoke({"messages": [HumanMessage(text)]}, cfg), saver, "grow", turns)


def supervisor(turns: int) -> dict:
    """The langgraph-supervisor anchor: the supervisor delegates each question to refunds (one ``refund_status`` call,
    then the answer), which hands back; the supervisor answers (``add_messages`` transcript, 9 messages a turn)."""
    from anchors import sqlite_saver  # LangGraph's own SqliteSaver, WAL as ours
    from langchain_core.messages import HumanMessage

    saver = sqlite_saver(Path(tempfile.mkdtemp()) / "supervisor.db")
    app, _ = refund_status_supervisor(saver)
    cfg = {"configurable": {"thread_id": "grow"}}
    return _grow(lambda text: app.invoke({"messages": [HumanMessage(text)]}, cfg), saver, "grow", turns)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--baseline", action="store_true", help="also switchboard with add_messages (slow)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    runs = {"switchboard": switchboard(args.turns)}
    if swarm_available():
        runs["swarm"] = swarm(args.turns)
    if supervisor_available():
        runs["supervisor"] = supervisor(args.turns)
    if args.baseline:
        runs["add_messages"] = switchboard(args.turns, "add_messages")
    print(f"checkpoint bytes per thread (SQLite saver, 4 messages per turn)   load average {load_average()}")
    print(f"  {'':12}" + "".join(f"{f'{n} turns':>12}" for n in MARKS if n <= args.turns)
          + f"{'10th turn':>11}{'last turn':>11}{'seconds':>9}")
    for name, r in runs.items():
        print(f"  {name:12}" + "".join(f"{r['bytes'][n]:>12,}" for n in MARKS if n <= args.turns)
              + f"{r['turn_10_added']:>11,}{r['last_turn_added']:>11,}{r['seconds']:>9}")
    sb = runs["switchboard"]
    total, growth = sb["bytes"][max(sb["bytes"])], sb["last_turn_added"] / sb["turn_10_added"]
    print(f"  switchboard: {total / 1e6:.2f} MB (target <= 1 MB), last turn / 10th turn = {growth:.2f} (target <= 1.10), "
          f"transcript read back: {'yes' if sb['transcript_recovered'] else 'NO'}")
    if "swarm" in runs:
        sw = runs["swarm"]["bytes"]
        print("  ratio switchboard / swarm: " + ", ".join(f"{n} turns {sb['bytes'][n] / sw[n]:.3f}x" for n in sw))
    if "supervisor" in runs:
        su = runs["supervisor"]["bytes"]
        print("  ratio switchboard / langgraph-supervisor: "
              + ", ".join(f"{n} turns {sb['bytes'][n] / su[n]:.3f}x" for n in su))
    write_json(args.json, {"turns": args.turns, "runs": runs})
    return 0 if sb["transcript_recovered"] else 1


if __name__ == "__main__":
    sys.exit(main())
