"""Checkpoint storage per thread as turns grow (DESIGN.md, "Storage growth").

Runs the same conversation (a refund-status question per turn: 4 messages per turn, one business tool call)
on a SQLite checkpointer twice, in one process: with switchboard's transcript channel (LangGraph's
``DeltaChannel``: each checkpoint stores only its step's new messages) and with the usual
``Annotated[list, add_messages]`` (each checkpoint stores the whole list). Prints bytes per thread after
10, 50 and 100 turns and the ratio. Run: ``python bench/storage.py`` (part of ``make bench``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MARKS = (10, 50, 100)

from langchain_core.messages import AnyMessage  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from graph.state import SupportState  # noqa: E402


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


def run(kind: str) -> dict[int, int]:
    import graph.builder as builder
    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph.conversation import Conversation
    from graph.settings import Settings
    from nodes.offline_model import OfflineChatModel
    from nodes.scripted_models import KeywordRouter

    schema = SupportState
    if kind == "add_messages":
        schema = BaselineState
    home = Path(tempfile.mkdtemp())
    original = builder.SupportState
    builder.SupportState = schema
    try:
        r = KeywordRouter()
        saver = open_checkpointer(home / "cp.db")
        g = builder.build_graph(model=OfflineChatModel(router=r), checkpointer=saver, router=r,
                                store=open_store(home / "b.db"), settings=Settings.from_env(db=home / "cp.db"))
    finally:
        builder.SupportState = original
    conv = Conversation("grow", graph=g)
    out: dict[int, int] = {}
    for turn in range(1, max(MARKS) + 1):
        conv.send(f"Where is my refund? (asking again, #{turn})")
        if turn in MARKS:
            out[turn] = thread_bytes(saver, "grow")
    assert len(conv.state["messages"]) >= 4 * max(MARKS)
    return out


def main() -> int:
    t0 = time.perf_counter()
    delta = run("delta")
    base = run("add_messages")
    print("checkpoint bytes per thread (SQLite saver, 4 messages per turn)")
    print(f"  {'turns':>5} {'DeltaChannel':>14} {'add_messages':>14} {'ratio':>7}")
    for n in MARKS:
        print(f"  {n:>5} {delta[n]:>14,} {base[n]:>14,} {base[n] / delta[n]:>6.1f}x")
    growth_d = delta[100] / delta[10]
    growth_b = base[100] / base[10]
    print(f"  growth 10 -> 100 turns: DeltaChannel x{growth_d:.1f} (linear would be x10), add_messages x{growth_b:.1f}")
    print(f"  ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
