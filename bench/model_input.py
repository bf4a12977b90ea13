"""Model-input size per call as a thread grows, per history mode (``policies.history``), against langgraph-swarm.

switchboard: a 100-turn conversation with the offline model (a refund-status question per turn), once with the
default per-edge history policies and once with each mode for every edge; the size is the ``history_items`` of
the ``model_called`` events (messages the model received, system prompt excluded), averaged over the calls of the
10th, 50th and 100th turn. langgraph-swarm: a scripted model making the same 4 messages per turn; the size is the
number of non-system messages each call received (the whole thread: swarm forwards everything).

Usage: ``python bench/model_input.py [--turns 100] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, refund_status_swarm, swarm_available, write_json

MARKS = (10, 50, 100)
MODES = ("default", "full", "last_k", "packet_only", "no_tool_calls")


def switchboard(mode: str, turns: int) -> dict[int, float]:
    import os

    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoints.business import open_store
    from graph.builder import build_desk
    from graph.contracts.settings import Settings
    from graph.conversation import Conversation
    from nodes.embedded.offline_model import OfflineChatModel
    from nodes.testing.scripted import KeywordRouter
    from policies.history import HistoryPolicy

    home = Path(tempfile.mkdtemp())
    os.environ.setdefault("SWITCHBOARD_HOME", str(home))
    history = None if mode == "default" else {k: HistoryPolicy(mode, 3) for k in ("triage", "*", "entry")}  # type: ignore[arg-type]
    r = KeywordRouter()
    desk = build_desk(model=OfflineChatModel(router=r), checkpointer=InMemorySaver(), router=r, history=history,
                      store=open_store(home / "b.db"), settings=Settings.from_env(db=home / "c.db"), events="memory")
    conv = Conversation("grow", desk=desk)
    for t in range(1, turns + 1):
        conv.send(f"Where is my refund? (asking again, #{t})")
    calls = [e for e in desk.deps.events.events("grow", kinds=["model_called"]) if e.history_items is not None]
    return {n: round(statistics.fmean([e.history_items for e in calls if e.turn == n] or [0]), 1)
            for n in MARKS if n <= turns}


def swarm(turns: int) -> dict[int, float]:
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    app, model = refund_status_swarm(InMemorySaver())
    out: dict[int, float] = {}
    for t in range(1, turns + 1):
        before = len(model.log)
        app.invoke({"messages": [HumanMessage(f"Where is my refund? (asking again, #{t})")]},
                   {"configurable": {"thread_id": "grow"}})
        if t in MARKS:
            sizes = [len([m for m in msgs if m.type != "system"]) for _, msgs in model.log[before:]]
            out[t] = round(statistics.fmean(sizes), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    sizes = {f"switchboard {m}": switchboard(m, args.turns) for m in MODES}
    if swarm_available():
        sizes["swarm"] = swarm(args.turns)
    marks = [n for n in MARKS if n <= args.turns]
    print(f"messages per model call (mean over the turn's calls)   load average {load_average()}")
    print(f"  {'':28}" + "".join(f"{f'turn {n}':>10}" for n in marks))
    for name, row in sizes.items():
        print(f"  {name:28}" + "".join(f"{row[n]:>10}" for n in marks))
    write_json(args.json, {"turns": args.turns, "messages_per_call": sizes})
    return 0


if __name__ == "__main__":
    sys.exit(main())
